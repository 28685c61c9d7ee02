//! Server-sent event encoding and streaming response bodies.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame};
use tokio::sync::mpsc;

/// Encodes one event with LF line ends. Each line of `data` becomes a
/// `data:` line; an empty `data` gives an empty `data:` field.
#[cfg(test)]
pub(crate) fn event(id: Option<&str>, retry_ms: Option<u64>, data: &str) -> Bytes {
    Framing::default().event(None, id, retry_ms, data)
}

/// How events are written: line ends.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Framing {
    /// CRLF line ends (as Python servers write them) instead of LF.
    pub(crate) crlf: bool,
}

impl Framing {
    fn eol(self) -> &'static str {
        if self.crlf { "\r\n" } else { "\n" }
    }

    /// Encodes one event: `event:` if `name` is set, `id:`, `retry:`, then
    /// each line of `data` as a `data:` line (an empty `data` gives an
    /// empty `data:` field), then a blank line.
    pub(crate) fn event(
        self,
        name: Option<&str>,
        id: Option<&str>,
        retry_ms: Option<u64>,
        data: &str,
    ) -> Bytes {
        let eol = self.eol();
        let mut out = String::with_capacity(data.len() + 48);
        if let Some(name) = name {
            out.push_str("event: ");
            out.push_str(name);
            out.push_str(eol);
        }
        if let Some(id) = id {
            out.push_str("id: ");
            out.push_str(id);
            out.push_str(eol);
        }
        if let Some(ms) = retry_ms {
            out.push_str(&format!("retry: {ms}"));
            out.push_str(eol);
        }
        if data.is_empty() {
            out.push_str("data:");
            out.push_str(eol);
        } else {
            for line in data.split('\n') {
                out.push_str("data: ");
                out.push_str(line.strip_suffix('\r').unwrap_or(line));
                out.push_str(eol);
            }
        }
        out.push_str(eol);
        Bytes::from(out)
    }

    /// A comment line (`: text`) and a blank line: a keep-alive.
    pub(crate) fn comment(self, text: &str) -> Bytes {
        let eol = self.eol();
        Bytes::from(format!(": {text}{eol}{eol}"))
    }
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
    use super::{Framing, event};

    #[test]
    fn encodes_events() {
        assert_eq!(&event(Some("e-1"), None, "")[..], b"id: e-1\ndata:\n\n");
        assert_eq!(
            &event(Some("e-2"), Some(50), "a\nb")[..],
            b"id: e-2\nretry: 50\ndata: a\ndata: b\n\n"
        );
        assert_eq!(&event(None, None, "{}")[..], b"data: {}\n\n");
        let crlf = Framing { crlf: true };
        assert_eq!(
            &crlf.event(Some("endpoint"), None, None, "/m?s=1")[..],
            b"event: endpoint\r\ndata: /m?s=1\r\n\r\n"
        );
        assert_eq!(&crlf.comment("ping")[..], b": ping\r\n\r\n");
    }
}
