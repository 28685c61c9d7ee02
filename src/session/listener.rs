//! The GET listening stream, as a background task of a session.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::shared::Shared;

/// GET attempts per listener: the first, and reconnects after the stream
/// ends or fails. A 405 ends it at once.
pub(super) const MAX_ATTEMPTS: usize = 3;
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// Starts the listener in the session's background set, unless one is
/// already running (servers refuse a second GET stream, some with 409).
pub(super) fn spawn(shared: &Arc<Shared>) {
    if shared.listening.swap(true, Ordering::AcqRel) {
        return;
    }
    let task_shared = shared.clone();
    let spawned = shared.spawner.spawn(move |cancel| async move {
        let shared = task_shared;
        let _done = scopeguard::guard((), |()| shared.listening.store(false, Ordering::Release));
        tokio::select! {
            _ = cancel.cancelled() => {}
            _ = listen(&shared) => {}
        }
    });
    if !spawned {
        shared.listening.store(false, Ordering::Release);
    }
}

/// Reads the GET stream until the server has none (405), the attempts run
/// out, or the session closes; answers server requests and dispatches
/// notifications as they come, resuming after the last event id seen.
async fn listen(shared: &Arc<Shared>) {
    let Ok(wire) = shared.wire() else {
        return;
    };
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
                        Ok(message) => shared.dispatch(&wire, message).await,
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
}
