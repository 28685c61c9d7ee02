//! Listening for what the server sends unasked: one policy for every era.
//!
//! - 2025 (sessions): the GET stream of the session, resumed with
//!   `Last-Event-ID`.
//! - 2026-07-28: a `subscriptions/listen` request held open.
//! - 2024-11-05 (HTTP+SSE): the event stream is the session itself, read
//!   by the engine's SSE reader: it is never reopened, and its end ends the
//!   session for every request (never silently).
//!
//! The policy ([`Policy`]), the same for the first two:
//!
//! - **Progress** is a new message from the server: not a replay, not an
//!   empty priming event, not the acknowledgement of a subscription. It
//!   starts the backoff again.
//! - A stream that ends (cleanly or not, at once or after hours) is opened
//!   again, for as long as the session lasts, after the shared [`Backoff`]
//!   (capped, jittered; at least the server's `retry`), whose step doubles
//!   per attempt without progress. A stream that was held open for at
//!   least the cap (a proxy closing idle streams) starts the step again:
//!   each attempt either lasted that long or is followed by a wait of at
//!   least half the first step, so the rate of attempts is bounded by
//!   construction, whatever the server does.
//! - **Stops** (each logged at `info`, never silently):
//!   - the server says it will not serve the stream: a 405 to the GET; an
//!     error answer or a client error (4xx, but 408 and 429) to
//!     `subscriptions/listen`;
//!   - the server ends a subscription gracefully (its successful
//!     `subscriptions/listen` response);
//!   - the stream breaks the protocol or a limit [`MAX_BROKEN`] times in a
//!     row (a broken server);
//!   - the session is replaced (its successor has its own listener) or
//!     closed.
//!
//!   `Session::is_listening` tells whether a listener runs.
//! - **Events** ([`ListenerChange`], through `Front::listener_changed`):
//!   up when a stream opens, down when an open stream ends (`retrying`)
//!   and once when the listener stops (not `retrying`). They follow the
//!   actual opens and ends, so the policy's backoff bounds their rate too;
//!   a listener cancelled at close or ended by a renewal says nothing (the
//!   session's own events say that).
//! - A **404** to the GET checks the session with a `ping`: an expired
//!   session is renewed there (the new session gets its own listener); an
//!   attached one that expired is reported by its requests; a session
//!   alive and well means the server does not serve the GET (stop).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::{Backoff, Engine, Front, Generation};
use crate::error::Error;
use crate::jsonrpc::{Message, Request};
use crate::transport::{MessageStream, ReplayFilter};

/// Streams in a row that break the protocol or a limit (an invalid or
/// oversized event), at most: then the server is broken and listening
/// stops. A stream with progress starts the count again.
pub(crate) const MAX_BROKEN: usize = 3;

/// A listening stream opened or ended, told to the front end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ListenerChange {
    /// A stream opened.
    Up,
    /// A stream ended, or the listener stopped.
    Down {
        /// Why, for people.
        reason: String,
        /// Whether the listener will open the stream again.
        retrying: bool,
    },
}

/// Whether this attempt's stream opened; the attempt marks it
/// ([`up`](Self::up)) the moment it does.
#[derive(Debug, Default)]
pub(super) struct Opened(bool);

impl Opened {
    /// The stream is open: tells the front end.
    fn up<F: Front>(&mut self, engine: &Arc<Engine<F>>) {
        self.0 = true;
        F::listener_changed(engine, ListenerChange::Up);
    }
}

/// Tells the front end a stream ended or the listener stopped.
fn down<F: Front>(engine: &Arc<Engine<F>>, reason: String, retrying: bool) {
    F::listener_changed(engine, ListenerChange::Down { reason, retrying });
}

/// How one attempt to listen went.
#[derive(Debug)]
pub(super) enum Attempt {
    /// The server will not serve the stream.
    Refused(String),
    /// The server ended the subscription gracefully.
    Finished,
    /// A 404 to the GET: the session may have expired.
    NotFound,
    /// The stream ended, or could not be opened (a network error, a 5xx).
    Ended {
        /// A new message came.
        progress: bool,
        /// The stream broke the protocol or a limit.
        broken: bool,
        /// The server's `retry`, if it sent one.
        retry: Option<Duration>,
    },
}

/// What the listener does next.
#[derive(Debug, PartialEq)]
pub(super) enum Next {
    /// Waits this long, then tries again.
    Retry(Duration),
    /// Checks the session (a 404), then goes on or stops.
    CheckSession,
    /// Stops listening, for this reason.
    Stop(String),
}

/// The listening policy (see the module docs): one instance per listener.
#[derive(Debug)]
pub(super) struct Policy {
    backoff: Backoff,
    broken: usize,
}

impl Policy {
    /// With the backoff's first and longest wait (see
    /// [`LISTEN_BACKOFF`](super::LISTEN_BACKOFF)).
    pub(super) fn new((first, max): (Duration, Duration)) -> Self {
        Policy {
            backoff: Backoff::new(first, max),
            broken: 0,
        }
    }

    /// What follows `attempt`, which lasted `lasted`.
    pub(super) fn next(&mut self, attempt: Attempt, lasted: Duration) -> Next {
        match attempt {
            Attempt::Refused(why) => Next::Stop(why),
            Attempt::Finished => Next::Stop("the server ended the subscription".into()),
            Attempt::NotFound => Next::CheckSession,
            Attempt::Ended {
                progress,
                broken,
                retry,
            } => {
                if progress {
                    self.backoff.reset();
                    self.broken = 0;
                } else if lasted >= self.backoff.max() {
                    self.backoff.reset();
                }
                if broken {
                    self.broken += 1;
                    if self.broken == MAX_BROKEN {
                        return Next::Stop(format!(
                            "the stream broke the protocol or a limit {MAX_BROKEN} times in a row"
                        ));
                    }
                }
                Next::Retry(self.backoff.wait(retry))
            }
        }
    }

    /// The session is alive after a 404 could not be checked (the ping
    /// failed for another reason): wait as after an attempt without
    /// progress.
    fn after_check(&mut self) -> Duration {
        self.backoff.wait(None)
    }
}

/// One era's way to listen: opens the stream once, routes what comes.
pub(super) trait Source<F: Front>: Send {
    /// One attempt: open (marking `opened` the moment the stream is),
    /// read until the end, route every new message.
    fn attempt<'a>(
        &'a mut self,
        engine: &'a Arc<Engine<F>>,
        generation: &'a Arc<Generation>,
        opened: &'a mut Opened,
    ) -> impl Future<Output = Attempt> + Send + 'a;
}

/// Runs `source` on `generation` under the [`Policy`], until it stops or
/// the session is replaced (the task is also cancelled at close).
pub(super) async fn run<F: Front, S: Source<F>>(
    engine: &Arc<Engine<F>>,
    generation: &Arc<Generation>,
    mut source: S,
    what: &'static str,
) {
    let mut policy = Policy::new(engine.settings.listen_backoff);
    loop {
        if !engine.is_current(generation) {
            tracing::debug!(what, "the session was replaced; its listener stops");
            return;
        }
        let began = Instant::now();
        let mut opened = Opened::default();
        let attempt = source.attempt(engine, generation, &mut opened).await;
        tracing::debug!(what, ?attempt, "a listening attempt ended");
        let ended = match &attempt {
            Attempt::Ended { broken: true, .. } => "the stream broke the protocol or a limit",
            _ => "the stream ended",
        };
        let wait = match policy.next(attempt, began.elapsed()) {
            Next::Retry(wait) => {
                if opened.0 {
                    down(engine, format!("{what}: {ended}"), true);
                }
                wait
            }
            Next::Stop(why) => {
                tracing::info!(what, %why, "listening stopped");
                down(engine, format!("{what}: {why}"), false);
                return;
            }
            Next::CheckSession => match check_session(engine, generation).await {
                Checked::Replaced => continue,
                Checked::Stop(why) => {
                    tracing::info!(what, %why, "listening stopped");
                    down(engine, format!("{what}: {why}"), false);
                    return;
                }
                Checked::Unknown => policy.after_check(),
            },
        };
        tokio::time::sleep(wait).await;
    }
}

/// What a session check found.
enum Checked {
    /// The session was renewed (or replaced): the new one has its listener.
    Replaced,
    Stop(String),
    /// The check itself failed (a timeout, the network): try again later.
    Unknown,
}

/// After a 404 to the GET: a `ping` on the session, which renews an owned
/// session the server expired (as any request does).
async fn check_session<F: Front>(engine: &Arc<Engine<F>>, generation: &Arc<Generation>) -> Checked {
    let ping = Request {
        id: engine.next_id(),
        method: "ping".into(),
        params: None,
    };
    let outcome = engine.call(&ping, engine.exchange_deadline(), true).await;
    if !engine.is_current(generation) {
        return Checked::Replaced;
    }
    match outcome {
        Ok(_) => Checked::Stop(
            "the server answered the GET 404 while the session is alive: it does not serve it"
                .into(),
        ),
        Err(error) if error.is_session_expired() => {
            Checked::Stop(format!("the session has expired: {error}"))
        }
        Err(error) if error.is_closed() => Checked::Stop("the session is closed".into()),
        Err(error) => {
            tracing::debug!(%error, "checking the session after a 404 failed");
            Checked::Unknown
        }
    }
}

/// The 2025 GET stream of one session.
pub(super) struct GetStream {
    last_event_id: Option<String>,
    /// What a reconnect with `Last-Event-ID` replays is not delivered twice.
    replays: ReplayFilter,
}

impl GetStream {
    pub(super) fn new() -> Self {
        GetStream {
            last_event_id: None,
            replays: ReplayFilter::new(),
        }
    }
}

impl<F: Front> Source<F> for GetStream {
    async fn attempt(
        &mut self,
        engine: &Arc<Engine<F>>,
        generation: &Arc<Generation>,
        marker: &mut Opened,
    ) -> Attempt {
        // Opening is bounded like a request; the stream, once open, is not.
        let Some(http) = generation.wire().http() else {
            return Attempt::Refused("a stdio server has no GET stream".into());
        };
        let opened = http
            .open_get_stream_within(self.last_event_id.as_deref(), engine.exchange_deadline())
            .await;
        let mut stream = match opened {
            Ok(Some(stream)) => stream,
            Ok(None) => return Attempt::Refused("the server has no GET stream (405)".into()),
            Err(error) if error.status() == Some(http::StatusCode::NOT_FOUND) => {
                return Attempt::NotFound;
            }
            Err(error) => return failed(&error, "opening the GET stream failed"),
        };
        marker.up(engine);
        let read = read_stream(
            engine,
            generation,
            &mut stream,
            "the GET stream",
            |stream, message| {
                if stream
                    .replay_key()
                    .is_some_and(|key| !self.replays.first(key))
                {
                    Seen::Skip
                } else {
                    Seen::New(message)
                }
            },
        )
        .await;
        if let Some(id) = stream.last_event_id() {
            self.last_event_id = Some(id.to_owned());
        }
        match read {
            Ok(read) => read.ended(stream.retry()),
            Err(settled) => settled,
        }
    }
}

/// An attempt that failed before a stream opened: a refusal for a client
/// error that retrying does not mend, else an end without progress.
fn failed(error: &Error, what: &str) -> Attempt {
    tracing::debug!(%error, "{what}");
    match error.status() {
        Some(status)
            if status.is_client_error()
                && status != http::StatusCode::REQUEST_TIMEOUT
                && status != http::StatusCode::TOO_MANY_REQUESTS =>
        {
            Attempt::Refused(format!("{what}: {error}"))
        }
        _ => Attempt::Ended {
            progress: false,
            broken: false,
            retry: None,
        },
    }
}

/// 2026-07-28: a `subscriptions/listen` request held open, asking for the
/// notifications in `filter`.
pub(super) struct Subscription {
    filter: serde_json::Value,
}

impl Subscription {
    pub(super) fn new(filter: serde_json::Value) -> Self {
        Subscription { filter }
    }
}

/// The first message of every subscription stream: not progress.
const ACKNOWLEDGED: &str = "notifications/subscriptions/acknowledged";

impl<F: Front> Source<F> for Subscription {
    async fn attempt(
        &mut self,
        engine: &Arc<Engine<F>>,
        generation: &Arc<Generation>,
        marker: &mut Opened,
    ) -> Attempt {
        let request = Request {
            id: engine.next_id(),
            method: "subscriptions/listen".into(),
            params: Some(serde_json::json!({ "notifications": self.filter })),
        };
        if generation.wire().shares_one_stream() {
            return listen_on_the_shared_stream(engine, generation, request, marker).await;
        }
        let mut stream = match post_listen(engine, generation, &request, marker).await {
            Ok(stream) => stream,
            Err(failed) => return failed,
        };
        let read = read_stream(
            engine,
            generation,
            &mut stream,
            "the subscription stream",
            |_, message| match message {
                Message::Response(response) if response.id.as_ref() == Some(&request.id) => {
                    Seen::End(match response.outcome {
                        Ok(_) => Attempt::Finished,
                        Err(error) => Attempt::Refused(format!(
                            "subscriptions/listen was answered with error {}: {}",
                            error.code, error.message
                        )),
                    })
                }
                Message::Notification(notification) if notification.method == ACKNOWLEDGED => {
                    Seen::Quiet(Message::Notification(notification))
                }
                message => Seen::New(message),
            },
        )
        .await;
        match read {
            Ok(read) => read.ended(None),
            Err(settled) => settled,
        }
    }
}

/// What reading a listening stream does with a message.
enum Seen {
    /// Passes it over (an event replayed that was delivered before).
    Skip,
    /// Routes it: a new message, progress.
    New(Message),
    /// Routes it without counting it as progress.
    Quiet(Message),
    /// Stops reading: the attempt ended so.
    End(Attempt),
}

/// How a listening stream's reading ended when no message settled it.
struct Read {
    /// A new message came.
    progress: bool,
    /// The stream broke the protocol or a limit.
    broken: bool,
}

impl Read {
    fn ended(self, retry: Option<Duration>) -> Attempt {
        Attempt::Ended {
            progress: self.progress,
            broken: self.broken,
            retry,
        }
    }
}

/// Reads `stream` (`name`d in the log) to its end or until `see` ends the
/// attempt (`Err`), routing what `see` lets through: one policy of
/// progress and breakage for every era's stream.
async fn read_stream<F: Front>(
    engine: &Arc<Engine<F>>,
    generation: &Arc<Generation>,
    stream: &mut MessageStream,
    name: &str,
    mut see: impl FnMut(&MessageStream, Message) -> Seen,
) -> Result<Read, Attempt> {
    let mut progress = false;
    while let Some(message) = stream.next().await {
        match message.map(|message| see(stream, message)) {
            Ok(Seen::Skip) => {}
            Ok(Seen::New(message)) => {
                progress = true;
                engine.route(generation, message).await;
            }
            Ok(Seen::Quiet(message)) => engine.route(generation, message).await,
            Ok(Seen::End(attempt)) => return Err(attempt),
            Err(error) => {
                tracing::debug!(%error, "{name} failed");
                // A dropped connection is how a server polls; an invalid
                // or oversized event is a broken server.
                return Ok(Read {
                    progress,
                    broken: !error.is_transport(),
                });
            }
        }
    }
    Ok(Read {
        progress,
        broken: false,
    })
}

/// POSTs the `subscriptions/listen` request (however its answer comes):
/// once it is sent, the listener is up.
async fn post_listen<F: Front>(
    engine: &Arc<Engine<F>>,
    generation: &Arc<Generation>,
    request: &Request,
    marker: &mut Opened,
) -> Result<MessageStream, Attempt> {
    let sent = engine
        .post_request(
            generation,
            request,
            &http::HeaderMap::new(),
            engine.exchange_deadline(),
        )
        .await;
    let answer = sent.map_err(|error| failed(&error, "subscriptions/listen failed"))?;
    marker.up(engine);
    Ok(answer)
}

/// Over stdio, the subscription's notifications come on the one shared
/// stdout (the reader routes them, tagged with the subscription id) and
/// its response only when it ends: the request is sent, then its
/// response waited for.
async fn listen_on_the_shared_stream<F: Front>(
    engine: &Arc<Engine<F>>,
    generation: &Arc<Generation>,
    request: Request,
    marker: &mut Opened,
) -> Attempt {
    let waiter = engine.waiter(request.id.clone());
    let answer = match post_listen(engine, generation, &request, marker).await {
        Ok(answer) => answer,
        Err(failed) => return failed,
    };
    match waiter.read(generation, answer).await {
        Ok(_) => Attempt::Finished,
        Err(error) if error.is_rpc() => {
            Attempt::Refused(format!("subscriptions/listen was refused: {error}"))
        }
        // The server's stream ended: so did the session.
        Err(_) => Attempt::Ended {
            progress: false,
            broken: false,
            retry: None,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIRST_BACKOFF: Duration = super::super::LISTEN_BACKOFF.0;
    const MAX_BACKOFF: Duration = super::super::LISTEN_BACKOFF.1;

    fn ended(progress: bool, broken: bool) -> Attempt {
        Attempt::Ended {
            progress,
            broken,
            retry: None,
        }
    }

    /// The policy matrix: what stops, what waits, and that a stream ending
    /// without progress never stops the listener but waits longer (capped).
    #[test]
    fn the_policy_stops_on_refusals_and_backs_off_on_ends() {
        let now = Duration::ZERO;
        let mut policy = Policy::new(super::super::LISTEN_BACKOFF);
        assert!(matches!(
            policy.next(Attempt::Refused("405".into()), now),
            Next::Stop(_)
        ));
        assert!(matches!(policy.next(Attempt::Finished, now), Next::Stop(_)));
        assert_eq!(policy.next(Attempt::NotFound, now), Next::CheckSession);

        // Ends without progress: forever, each wait at least half a
        // doubling step, never over the cap.
        let mut policy = Policy::new(super::super::LISTEN_BACKOFF);
        let mut step = FIRST_BACKOFF;
        for _ in 0..100 {
            let Next::Retry(wait) = policy.next(ended(false, false), now) else {
                panic!("an end without progress stops nothing");
            };
            assert!(
                wait >= step / 2 && wait <= step,
                "{wait:?} for step {step:?}"
            );
            step = (step * 2).min(MAX_BACKOFF);
        }
        // Progress starts again from the first step.
        let Next::Retry(wait) = policy.next(ended(true, false), now) else {
            panic!()
        };
        assert!(wait <= FIRST_BACKOFF);
        // So does a stream held open for the cap (a proxy closing idle
        // streams), without a message.
        for _ in 0..10 {
            policy.next(ended(false, false), now);
        }
        let Next::Retry(wait) = policy.next(ended(false, false), MAX_BACKOFF) else {
            panic!()
        };
        assert!(wait <= FIRST_BACKOFF);

        // Broken streams stop after MAX_BROKEN in a row; progress between
        // them starts the count again.
        let mut policy = Policy::new(super::super::LISTEN_BACKOFF);
        let mut retries = |attempt| matches!(policy.next(attempt, now), Next::Retry(_));
        for _ in 1..MAX_BROKEN {
            assert!(retries(ended(false, true)));
        }
        // A stream that delivered, then broke: the first of a new count.
        assert!(retries(ended(true, true)));
        for _ in 2..MAX_BROKEN {
            assert!(retries(ended(false, true)));
        }
        assert!(matches!(
            policy.next(ended(false, true), now),
            Next::Stop(_)
        ));
    }

    /// The server's `retry` is a lower bound, capped; `retry: 0` gets the
    /// backoff.
    #[test]
    fn the_servers_retry_is_a_floor_under_the_cap() {
        let now = Duration::ZERO;
        let mut policy = Policy::new(super::super::LISTEN_BACKOFF);
        let next = policy.next(
            Attempt::Ended {
                progress: true,
                broken: false,
                retry: Some(Duration::from_secs(3600)),
            },
            now,
        );
        assert_eq!(next, Next::Retry(MAX_BACKOFF));
        let Next::Retry(wait) = policy.next(
            Attempt::Ended {
                progress: true,
                broken: false,
                retry: Some(Duration::ZERO),
            },
            now,
        ) else {
            panic!()
        };
        assert!(wait >= FIRST_BACKOFF / 2);
    }
}
