//! The GET listening stream, as a background task of a session.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::jsonrpc::Message;
use crate::transport::StreamableHttp;

/// GET attempts per session: the first, and reconnects after the stream
/// ends or fails. A 405 ends it at once.
pub(super) const MAX_ATTEMPTS: usize = 3;
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// Reads the GET stream until cancelled, the server has none (405), or the
/// attempts run out; forwards every message to `sink` (dropping them when
/// the receiver is full or gone: the listener never blocks on a slow
/// reader).
pub(super) async fn listen(
    wire: Arc<StreamableHttp>,
    sink: mpsc::Sender<Message>,
    cancel: CancellationToken,
) {
    let run = async {
        let mut last_event_id: Option<String> = None;
        let mut backoff = FIRST_BACKOFF;
        for attempt in 1..=MAX_ATTEMPTS {
            match wire.open_get_stream(last_event_id.as_deref()).await {
                Ok(None) => {
                    tracing::debug!("the server has no GET stream (405)");
                    return;
                }
                Ok(Some(mut stream)) => {
                    while let Some(message) = stream.next().await {
                        match message {
                            Ok(message) => {
                                if sink.try_send(message).is_err() {
                                    tracing::debug!("dropped a server message: nobody is reading");
                                }
                            }
                            Err(error) => {
                                tracing::debug!(%error, "the GET stream failed");
                                break;
                            }
                        }
                    }
                    last_event_id = stream.last_event_id().map(str::to_owned);
                    if let Some(retry) = stream.retry() {
                        backoff = retry.min(MAX_BACKOFF);
                    }
                }
                Err(error) => tracing::debug!(%error, attempt, "opening the GET stream failed"),
            }
            if attempt < MAX_ATTEMPTS {
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
        tracing::debug!("gave up on the GET stream after {MAX_ATTEMPTS} attempts");
    };
    tokio::select! {
        _ = cancel.cancelled() => {}
        _ = run => {}
    }
}
