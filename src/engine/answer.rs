//! Reading one request's answer: to its response, resumed after a break,
//! replays ignored, everything else routed.

use std::sync::Arc;

use serde_json::value::RawValue;
use tokio::sync::oneshot;

use super::{Backoff, CancelOnDrop, Deadline, Engine, Era, Front, Generation, Waiter};
use crate::error::{Error, Result, idless_response};
use crate::jsonrpc::{Message, RequestId, Response};
use crate::sync::lock;
use crate::transport::{MessageStream, ReplayFilter, SessionId};

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
    // The event id last reported to the front end (only the 2025
    // sessions resume, so only they report).
    let mut reported: Option<String> = None;
    let mut report = |stream: &MessageStream| {
        let Some(last) = stream.last_event_id() else {
            return;
        };
        if generation.era() == Era::Sessions && reported.as_deref() != Some(last) {
            F::answer_event_id(engine, generation, id, last);
            reported = Some(last.to_owned());
        }
    };
    loop {
        let mut broke = None;
        // A new message on this stream (not a replay): progress.
        let mut progress = false;
        while let Some(item) = stream.next().await {
            report(&stream);
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
        // A priming event (an id, no message) is reported here.
        report(&stream);
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
        let Some(http) = generation.wire().http() else {
            return Err(cause);
        };
        stream = match http
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

impl<F: Front> Engine<F> {
    /// Resumes the answer to request `id` (sent earlier, on this session or
    /// by another process on the same server session) from
    /// `last_event_id`: a GET with it as `Last-Event-ID` on the session in
    /// use, read as [`read`] reads an answer (resumed again if it breaks
    /// off) until the response, within `deadline`. Never sends the request
    /// again and never opens a session; a `notifications/cancelled` goes out
    /// if this future is dropped or times out. `session`, when given, must
    /// be the session in use.
    pub(crate) async fn resume(
        self: &Arc<Self>,
        id: &RequestId,
        last_event_id: &str,
        session: Option<&SessionId>,
        deadline: Deadline,
    ) -> Result<Box<RawValue>> {
        let closing = self.closing().clone();
        let generation = tokio::select! {
            biased;
            _ = closing.cancelled() => return Err(Error::closed()),
            generation = deadline.run(self.current_or_renew(false)) => generation?,
        };
        match generation.era() {
            Era::Sessions => {}
            Era::Stateless => {
                return Err(Error::protocol(
                    "an answer cannot be resumed in 2026-07-28, which has no resumption \
                     (no GET, no Last-Event-ID): send the request again",
                ));
            }
            Era::HttpSse => {
                return Err(Error::protocol(
                    "an answer cannot be resumed over HTTP+SSE (2024-11-05): \
                     its answers come on the session's one stream",
                ));
            }
        }
        if session.is_some_and(|session| generation.session_id().as_ref() != Some(session)) {
            return Err(Error::builder(
                "the resumption token was reported on another session than the one in use \
                 (attach to that session to resume it)",
            ));
        }
        // Registered at once, or refused: a second waiter would take the
        // response from the request in flight under the same id.
        let waiter = {
            let mut pending = lock(&self.pending);
            if pending.contains_key(id) {
                return Err(Error::builder(format!(
                    "request {id} is in flight in this session; its own reader resumes it"
                )));
            }
            let (deliver, delivered) = oneshot::channel();
            pending.insert(id.clone(), deliver);
            Waiter {
                engine: self.clone(),
                id: id.clone(),
                delivered,
            }
        };
        let mut cancel = CancelOnDrop {
            engine: self,
            generation: &generation,
            id: Some(id.clone()),
            reason: "the caller abandoned the request",
        };
        let resumed = async {
            let http = generation.wire().http().ok_or_else(|| {
                Error::protocol("an answer cannot be resumed over stdio: send the request again")
            })?;
            let stream = http
                .open_get_stream_within(Some(last_event_id), deadline)
                .await
                .inspect_err(|error| self.check_expiry(&generation, error))?
                .ok_or_else(|| {
                    Error::protocol(format!(
                        "the answer to request {id} cannot be resumed: \
                         the server has no GET stream (405)"
                    ))
                })?;
            waiter.read(&generation, stream).await
        };
        let outcome = tokio::select! {
            biased;
            _ = closing.cancelled() => {
                cancel.disarm();
                return Err(Error::closed());
            }
            outcome = deadline.run(resumed) => outcome,
        };
        match &outcome {
            Err(error) if error.is_timeout() => cancel.reason = "timed out",
            _ => cancel.disarm(),
        }
        outcome
    }
}
