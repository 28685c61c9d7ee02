//! The GET listening stream of one session.

use std::sync::Arc;
use std::time::Duration;

use super::{Backoff, Engine, Front, Generation};
use crate::transport::ReplayFilter;

/// GET attempts per listener: the first, and reconnects after the stream
/// ends or fails. A 405 ends it at once.
pub(crate) const MAX_ATTEMPTS: usize = 3;
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// Reads `generation`'s GET stream until the server has none (405), the
/// attempts run out, or another session replaces this one; routes what
/// comes, resuming after the last event id seen on this session only, and
/// ignores what a resumed stream replays.
///
/// A 404 here is not taken for expiry: some servers answer a GET they do
/// not serve with 404. The listener gives up after its attempts; requests
/// find out about an expired session themselves.
pub(super) async fn listen<F: Front>(engine: &Arc<Engine<F>>, generation: &Arc<Generation>) {
    let mut last_event_id: Option<String> = None;
    let mut backoff = Backoff::new(FIRST_BACKOFF, MAX_BACKOFF);
    // What a reconnect with `Last-Event-ID` replays is not delivered twice.
    let mut replays = ReplayFilter::new();
    for attempt in 1..=MAX_ATTEMPTS {
        if !engine.is_current(generation) {
            tracing::debug!("the session was replaced; its listener stops");
            return;
        }
        let mut server_retry = None;
        match generation
            .wire()
            .open_get_stream(last_event_id.as_deref())
            .await
        {
            Ok(None) => {
                tracing::debug!("the server has no GET stream (405)");
                return;
            }
            Ok(Some(mut stream)) => {
                while let Some(message) = stream.next().await {
                    match message {
                        Ok(_) if stream.replay_key().is_some_and(|key| !replays.first(key)) => {}
                        Ok(message) => engine.route(generation, message).await,
                        Err(error) => {
                            tracing::debug!(%error, "the GET stream failed");
                            break;
                        }
                    }
                }
                if let Some(id) = stream.last_event_id() {
                    last_event_id = Some(id.to_owned());
                }
                server_retry = stream.retry();
            }
            Err(error) => tracing::debug!(%error, attempt, "opening the GET stream failed"),
        }
        if attempt < MAX_ATTEMPTS {
            tokio::time::sleep(backoff.wait(server_retry)).await;
        }
    }
    tracing::debug!("gave up on the GET stream after {MAX_ATTEMPTS} attempts");
}
