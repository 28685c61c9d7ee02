//! Server-sent event encoding and streaming response bodies.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame};
use tokio::sync::mpsc;

/// Encodes one event. Each line of `data` becomes a `data:` line; an empty
/// `data` gives an empty `data:` field.
pub(crate) fn event(id: Option<&str>, retry_ms: Option<u64>, data: &str) -> Bytes {
    let mut out = String::with_capacity(data.len() + 32);
    if let Some(id) = id {
        out.push_str("id: ");
        out.push_str(id);
        out.push('\n');
    }
    if let Some(ms) = retry_ms {
        out.push_str(&format!("retry: {ms}\n"));
    }
    if data.is_empty() {
        out.push_str("data:\n");
    } else {
        for line in data.split('\n') {
            out.push_str("data: ");
            out.push_str(line.strip_suffix('\r').unwrap_or(line));
            out.push('\n');
        }
    }
    out.push('\n');
    Bytes::from(out)
}

/// A response body fed through a channel; it ends when every sender is
/// dropped, and fails (dropping the connection) when an error is sent.
/// `guard` is dropped with the body (used to count open streams).
pub(crate) struct ChanBody {
    rx: mpsc::Receiver<Result<Bytes, io::Error>>,
    _guard: Option<Box<dyn Send + Sync>>,
}

impl ChanBody {
    /// A body and its sender, with room for `capacity` chunks.
    pub(crate) fn channel(
        capacity: usize,
        guard: Option<Box<dyn Send + Sync>>,
    ) -> (mpsc::Sender<Result<Bytes, io::Error>>, ChanBody) {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        (tx, ChanBody { rx, _guard: guard })
    }

    /// A body that yields these chunks, one frame each, then ends.
    pub(crate) fn chunks(chunks: Vec<Bytes>) -> ChanBody {
        let (tx, body) = ChanBody::channel(chunks.len(), None);
        for c in chunks {
            // Capacity is exactly the number of chunks, so this cannot fail.
            let _ = tx.try_send(Ok(c));
        }
        body
    }
}

impl Body for ChanBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        self.get_mut()
            .rx
            .poll_recv(cx)
            .map(|o| o.map(|r| r.map(Frame::data)))
    }
}

#[cfg(test)]
mod tests {
    use super::event;

    #[test]
    fn encodes_events() {
        assert_eq!(&event(Some("e-1"), None, "")[..], b"id: e-1\ndata:\n\n");
        assert_eq!(
            &event(Some("e-2"), Some(50), "a\nb")[..],
            b"id: e-2\nretry: 50\ndata: a\ndata: b\n\n"
        );
        assert_eq!(&event(None, None, "{}")[..], b"data: {}\n\n");
    }
}
