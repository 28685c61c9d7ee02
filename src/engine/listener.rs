//! The GET listening stream of one session, and its 2026-07-28
//! successor, `subscriptions/listen`.

use std::sync::Arc;
use std::time::Duration;

use super::{Backoff, Engine, Front, Generation};
use crate::jsonrpc::{Message, Request};
use crate::transport::ReplayFilter;

/// GET attempts in a row that bring nothing new (an error, a stream that
/// ends without a new event, or one that breaks the protocol or a limit),
/// at most; a 405 ends the listener at once. A stream that brings a new
/// event (a message, or a new event id: a server that polls, closing the
/// stream or its connection after each event as 2025-11-25 allows) starts
/// the count again.
pub(crate) const MAX_ATTEMPTS: usize = 3;
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// Reads `generation`'s GET stream until the server has none (405), the
/// attempts that bring nothing run out, or another session replaces this
/// one; routes what comes, resuming after the last event id seen on this
/// session only, and ignores what a resumed stream replays.
///
/// A 404 here is not taken for expiry: some servers answer a GET they do
/// not serve with 404. The listener gives up after its attempts; requests
/// find out about an expired session themselves.
///
/// Between two GETs it waits the server's `retry` (or a doubling backoff
/// while they bring nothing), and at least [`FIRST_BACKOFF`], so a server
/// that polls with `retry: 0` gets no busy loop.
pub(super) async fn listen<F: Front>(engine: &Arc<Engine<F>>, generation: &Arc<Generation>) {
    let mut last_event_id: Option<String> = None;
    let mut backoff = Backoff::new(FIRST_BACKOFF, MAX_BACKOFF);
    // What a reconnect with `Last-Event-ID` replays is not delivered twice.
    let mut replays = ReplayFilter::new();
    let mut fruitless = 0;
    loop {
        if !engine.is_current(generation) {
            tracing::debug!("the session was replaced; its listener stops");
            return;
        }
        let mut server_retry = None;
        let mut fruitful = false;
        let mut broken = false;
        match generation
            .wire()
            .open_get_stream_within(last_event_id.as_deref(), engine.exchange_deadline())
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
                        Ok(message) => {
                            fruitful = true;
                            engine.route(generation, message).await;
                        }
                        Err(error) => {
                            tracing::debug!(%error, "the GET stream failed");
                            // A dropped connection is how a server polls;
                            // an invalid or oversized event is no progress.
                            broken = !error.is_transport();
                            break;
                        }
                    }
                }
                if let Some(id) = stream.last_event_id() {
                    if last_event_id.as_deref() != Some(id) {
                        fruitful = true;
                        last_event_id = Some(id.to_owned());
                    }
                }
                server_retry = stream.retry();
            }
            Err(error) => tracing::debug!(%error, fruitless, "opening the GET stream failed"),
        }
        if fruitful && !broken {
            fruitless = 0;
            backoff = Backoff::new(FIRST_BACKOFF, MAX_BACKOFF);
        } else {
            fruitless += 1;
            if fruitless == MAX_ATTEMPTS {
                tracing::debug!("gave up on the GET stream after {MAX_ATTEMPTS} attempts in a row");
                return;
            }
        }
        tokio::time::sleep(backoff.wait(server_retry).max(FIRST_BACKOFF)).await;
    }
}

/// 2026-07-28: keeps a `subscriptions/listen` request open on
/// `generation`, asking for the notifications in `filter`, and routes what
/// its answer stream carries. A stream that ends is opened again (a new
/// request) after a backoff; [`MAX_ATTEMPTS`] in a row that bring nothing
/// end it, and so does an error answer (the server does not offer it).
pub(super) async fn subscribe<F: Front>(
    engine: &Arc<Engine<F>>,
    generation: &Arc<Generation>,
    filter: serde_json::Value,
) {
    let mut backoff = Backoff::new(FIRST_BACKOFF, MAX_BACKOFF);
    let mut fruitless = 0;
    loop {
        if !engine.is_current(generation) {
            return;
        }
        let request = Request {
            id: engine.next_id(),
            method: "subscriptions/listen".into(),
            params: Some(serde_json::json!({ "notifications": filter })),
        };
        let mut fruitful = false;
        match engine
            .post_request(
                generation,
                &request,
                &http::HeaderMap::new(),
                engine.exchange_deadline(),
            )
            .await
        {
            Ok(mut stream) => {
                while let Some(message) = stream.next().await {
                    match message {
                        Ok(Message::Response(response)) => {
                            if let Err(error) = response.outcome {
                                tracing::debug!(code = error.code, "subscriptions/listen refused");
                                return;
                            }
                            break;
                        }
                        Ok(message) => {
                            fruitful = true;
                            engine.route(generation, message).await;
                        }
                        Err(error) => {
                            tracing::debug!(%error, "the subscription stream failed");
                            break;
                        }
                    }
                }
            }
            Err(error) if error.status().is_some_and(|s| s.is_client_error()) => {
                tracing::debug!(%error, "subscriptions/listen refused");
                return;
            }
            Err(error) => tracing::debug!(%error, fruitless, "subscriptions/listen failed"),
        }
        if fruitful {
            fruitless = 0;
            backoff = Backoff::new(FIRST_BACKOFF, MAX_BACKOFF);
        } else {
            fruitless += 1;
            if fruitless == MAX_ATTEMPTS {
                tracing::debug!("gave up on subscriptions/listen after {MAX_ATTEMPTS} attempts");
                return;
            }
        }
        tokio::time::sleep(backoff.wait(None)).await;
    }
}
