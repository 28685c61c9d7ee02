//! Reading one request's answer: to its response, resumed after a break,
//! replays ignored, everything else routed.

use std::sync::Arc;

use serde_json::value::RawValue;

use super::{Backoff, Engine, Era, Front, Generation};
use crate::error::{Error, Result, idless_response};
use crate::jsonrpc::{Message, RequestId, Response};
use crate::transport::{MessageStream, ReplayFilter};

/// Reads `stream` until the response to `id`: server requests and
/// notifications on it are routed as they come; a stream that breaks off
/// after an event id is resumed with `Last-Event-ID` (after the server's
/// `retry` and the [`Backoff`]), up to the configured attempts in a row
/// that bring no new message (one that does starts the count and the
/// backoff again); messages a resumed stream replays are ignored.
///
/// 2026-07-28 has no GET: there a broken answer fails at once.
pub(super) async fn read<F: Front>(
    engine: &Arc<Engine<F>>,
    generation: &Arc<Generation>,
    mut stream: MessageStream,
    id: &RequestId,
) -> Result<Box<RawValue>> {
    let resumption = engine.settings.resumption;
    let mut replays = ReplayFilter::new();
    let mut backoff = Backoff::new(resumption.first_backoff, resumption.max_wait);
    let mut attempts = 0;
    loop {
        let mut broke = None;
        // A new message on this stream (not a replay): progress.
        let mut progress = false;
        while let Some(item) = stream.next().await {
            let message = match item {
                Ok(message) => message,
                // A dropped connection is not a cancellation: resume.
                Err(error) if error.is_transport() => {
                    broke = Some(error);
                    break;
                }
                Err(error) => return Err(error),
            };
            if stream.replay_key().is_some_and(|key| !replays.first(key)) {
                continue;
            }
            progress = true;
            match message {
                Message::Response(response) if response.id.as_ref() == Some(id) => {
                    return response.outcome.map_err(Error::rpc);
                }
                // An error about a message the server could not read, on
                // this request's own answer: this request's error.
                Message::Response(Response { id: None, outcome }) => {
                    return Err(idless_response(outcome));
                }
                other => engine.route(generation, other).await,
            }
        }
        let cause = broke.unwrap_or_else(|| {
            Error::protocol(format!(
                "the answer ended without the response to request {id}"
            ))
        });
        let Some(last_event_id) = stream.last_event_id().map(str::to_owned) else {
            return Err(cause);
        };
        if generation.era() == Era::Stateless {
            return Err(Error::protocol(format!(
                "the answer to request {id} broke off and cannot be resumed: \
                 2026-07-28 has no GET to resume it with"
            ))
            .with_cleanup(vec![cause]));
        }
        if progress {
            attempts = 0;
            backoff.reset();
        }
        if attempts == resumption.max_attempts {
            return Err(Error::protocol(format!(
                "the answer to request {id} broke off; gave up after {attempts} resumptions \
                 in a row that brought no new message"
            ))
            .with_cleanup(vec![cause]));
        }
        attempts += 1;
        let wait = backoff.wait(stream.retry());
        tracing::debug!(%id, attempt = attempts, ?wait, "resuming a broken answer");
        // Nothing of the old stream is held while waiting.
        drop(stream);
        tokio::time::sleep(wait).await;
        stream = match generation
            .wire()
            .open_get_stream_within(Some(&last_event_id), engine.exchange_deadline())
            .await
        {
            Ok(Some(resumed)) => resumed,
            Ok(None) => {
                return Err(Error::protocol(format!(
                    "the answer to request {id} broke off and cannot be resumed: \
                     the server has no GET stream (405)"
                )));
            }
            Err(error) => {
                engine.check_expiry(generation, &error);
                return Err(error);
            }
        };
    }
}
