//! The exchange engine, shared by every front end (a [`Session`], the rmcp
//! adapter).
//!
//! It keeps one server session at a time (a [`Generation`]: its own
//! transport, with its id and revision) and replaces it, once, when the
//! server expires it; it sends requests on it and reads their answers
//! (resumed after a break, replays ignored, responses routed by id wherever
//! they arrive); it runs the GET listener. What to do with the server's
//! notifications and requests is the front end's ([`Front`]).
//!
//! Every server session it creates is opened through the guard stack's
//! [`SessionsHandle`], the one place that sends `initialize`, so each is
//! DELETEd exactly once however the engine's work is cut off.
//!
//! Renewals are bounded in rate and number, so that a server that expires
//! every session (404 to all but `initialize`) cannot make the client open
//! sessions in a loop:
//! - only a caller's request (or the listener's session check) starts a
//!   renewal; background work (a re-discovery) never does
//!   ([`Engine::call`] with `renew: false` fails on a lost session);
//! - a renewal is a connect of its own: bounded by the connect timeout
//!   (and each exchange by the request timeout), never unbounded;
//! - a renewal that follows one not yet proven (the server has accepted no
//!   request on the session it opened) waits first, with the shared
//!   [`Backoff`] ([`RENEW_BACKOFF`]); after [`MAX_UNPROVEN_RENEWALS`] in a
//!   row the session is given up: every request then fails with
//!   [`Error::is_session_expired`], naming the repeated expiry. Each
//!   session opened on the way is on the stack as any other: the server
//!   expired it (its 404 settles it) or it is DELETEd at close.
//!
//! [`Session`]: crate::Session

mod answer;
mod aside;
mod endpoint;
mod listener;
#[cfg(feature = "stdio")]
mod stdio;

pub(crate) use crate::transport::Wire;
pub(crate) use endpoint::Endpoint;
pub(crate) use listener::ListenerChange;

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::HeaderMap;
use serde_json::value::RawValue;
use serde_json::{Value, json};
use tokio::sync::{oneshot, watch};
use tracing::Instrument;

pub(crate) use crate::deadline::Deadline;
use crate::error::{Error, Result, result_value};
use crate::jsonrpc::{Message, Notification, Request, RequestId, Response};
pub(crate) use crate::scope::Opening;
use crate::scope::{SessionsHandle, Spawner};
use crate::sync::lock;
use crate::telemetry::{Call, Peer};
use crate::transport::{MessageStream, ProtocolVersion, SessionId};

/// How a generation talks to its server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Era {
    /// The 2025 revisions: `initialize`, a session id, the GET stream.
    Sessions,
    /// 2026-07-28: no session; every request stands alone.
    Stateless,
    /// 2024-11-05: POSTs answered on the event stream, which is the
    /// session.
    HttpSse,
}

/// One server session: its transport (carrying its id and revision) and
/// its place in the line of sessions a front end has had.
pub(crate) struct Generation {
    number: u64,
    wire: Wire,
    /// Whether we created it: only those are ever replaced.
    owned: bool,
    era: Era,
}

impl Generation {
    pub(crate) fn wire(&self) -> &Wire {
        &self.wire
    }

    /// Whether we created this session (and may replace it).
    pub(crate) fn owned(&self) -> bool {
        self.owned
    }

    pub(crate) fn session_id(&self) -> Option<SessionId> {
        self.wire.session_id()
    }

    pub(crate) fn era(&self) -> Era {
        self.era
    }

    /// Whether requests on it are 2026-07-28's.
    pub(crate) fn is_stateless(&self) -> bool {
        self.era == Era::Stateless
    }
}

/// The session requests go to right now.
enum Current {
    /// None yet: the front end has not opened one.
    Unopened,
    Ready(Arc<Generation>),
    /// The server expired the session (`None`), or opening its replacement
    /// failed (the error): the next request opens a new one.
    Lost(Option<Error>),
    /// A new session is being opened.
    Renewing,
    /// The session ended in a way no new one can follow (the HTTP+SSE
    /// stream closed): every request gets this error.
    Ended(Error),
    Closed,
}

/// A message from the server that is not a response.
pub(crate) enum ServerMessage {
    /// A server request: the front end answers it.
    Request(Request),
    /// A notification.
    Notification(Notification),
}

/// What a front end does with the server's traffic.
pub(crate) trait Front: Send + Sync + Sized + 'static {
    /// A notification or server request that arrived on `generation`
    /// (responses go to the requests waiting for them).
    fn deliver<'a>(
        engine: &'a Arc<Engine<Self>>,
        generation: &'a Arc<Generation>,
        message: ServerMessage,
    ) -> impl Future<Output = ()> + Send + 'a;

    /// A new session (`generation`, with this `initialize` result) has
    /// replaced an expired one.
    fn renewed<'a>(
        engine: &'a Arc<Engine<Self>>,
        generation: &'a Arc<Generation>,
        initialize_result: &'a Value,
    ) -> impl Future<Output = ()> + Send + 'a;

    /// Whether [`deliver`](Self::deliver) hands a server request on at
    /// once (to a queue someone else answers from) instead of answering it:
    /// then requests are delivered inline, in order with the notifications
    /// around them (a `notifications/cancelled` never overtakes the request
    /// it cancels), rather than answered aside. `false` by default.
    const HANDS_REQUESTS_ON: bool = false;

    /// A listening stream opened or ended (see [`listener`]); must not
    /// wait. Nothing by default.
    fn listener_changed(_engine: &Arc<Engine<Self>>, _change: ListenerChange) {}

    /// The session is over and cannot be replaced (its HTTP+SSE stream
    /// ended or broke): every request fails with `error` from now on. Must
    /// not wait. Nothing by default.
    fn ended(_engine: &Arc<Engine<Self>>, _error: &Error) {}

    /// The answer to request `id` on `generation` (2025 sessions only:
    /// the era with resumption) brought a new SSE event id: where a
    /// resumption would start. Must not wait. Nothing by default.
    fn answer_event_id(
        _engine: &Arc<Engine<Self>>,
        _generation: &Arc<Generation>,
        _id: &RequestId,
        _last_event_id: &str,
    ) {
    }
}

/// How a broken SSE answer is resumed after it broke off (a network cut,
/// or the server closing it on purpose to make the client poll).
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct Resumption {
    /// GETs with `Last-Event-ID` in a row that bring no new message, per
    /// request, at most: one that brings a new message (not a replay, not
    /// an empty priming event) starts the count again, so a long call on a
    /// server that makes the client poll goes on while it delivers.
    /// Default: 5.
    pub max_attempts: usize,
    /// The first step of the wait before a resumption: it doubles per
    /// resumption that brings nothing new (and starts again after one that
    /// does); each wait is jittered over the step's upper half, and never
    /// shorter than the server's `retry`. Default: 250 ms.
    pub first_backoff: Duration,
    /// The longest wait, whatever the server's `retry` says. Default: 10 s.
    pub max_wait: Duration,
}

impl Resumption {
    /// Sets [`max_attempts`](Self::max_attempts); 0 disables resumption.
    #[must_use]
    pub fn max_attempts(mut self, attempts: usize) -> Self {
        self.max_attempts = attempts;
        self
    }

    /// Sets [`first_backoff`](Self::first_backoff).
    #[must_use]
    pub fn first_backoff(mut self, wait: Duration) -> Self {
        self.first_backoff = wait;
        self
    }

    /// Sets [`max_wait`](Self::max_wait).
    #[must_use]
    pub fn max_wait(mut self, wait: Duration) -> Self {
        self.max_wait = wait;
        self
    }
}

impl Default for Resumption {
    fn default() -> Self {
        Resumption {
            max_attempts: 5,
            first_backoff: Duration::from_millis(250),
            max_wait: Duration::from_secs(10),
        }
    }
}

// The engine's reconnect loops know their waits as `Backoff`: the fleet's
// schedule with upper-half jitter, a count and the server's floor.
pub(crate) use crate::backoff::Retries as Backoff;

/// The listeners' backoff by default: from 500 ms, doubling to 30 s.
pub(crate) const LISTEN_BACKOFF: (Duration, Duration) =
    (Duration::from_millis(500), Duration::from_secs(30));

/// The renewals' backoff: from 250 ms, doubling to 5 s.
pub(crate) const RENEW_BACKOFF: (Duration, Duration) =
    (Duration::from_millis(250), Duration::from_secs(5));

/// Renewals in a row, none of them proven (the server accepted no request
/// on the session it opened), after which the session is given up.
pub(crate) const MAX_UNPROVEN_RENEWALS: u32 = 3;

/// Renewals since the server last accepted a request.
struct Renewals {
    unproven: u32,
    backoff: Backoff,
}

/// Settings of an [`Engine`].
pub(crate) struct Settings {
    pub(crate) resumption: Resumption,
    /// Whether each session gets a GET listener.
    pub(crate) listen: bool,
    /// The first and the longest wait of the listeners' [`Backoff`].
    pub(crate) listen_backoff: (Duration, Duration),
    /// Bound on opening a replacement session (a connect of its own: the
    /// connect timeout, or the request timeout when shorter). Never
    /// unbounded.
    pub(crate) renew_timeout: Duration,
    /// Bound on each exchange no caller times: the answer to a server
    /// request, the opening of a listening stream, a resumption's GET.
    /// Always set: a server that holds one of these never stalls the
    /// reading of the stream it came on.
    pub(crate) exchange_timeout: Duration,
    /// Ids of the engine's own requests: numbers (`None`), or strings with
    /// this prefix, for a front end whose caller numbers its own.
    pub(crate) id_prefix: Option<&'static str>,
}

/// How long a `notifications/cancelled` may take.
const CANCEL_NOTICE_TIMEOUT: Duration = Duration::from_secs(5);

/// The engine of one front end: see the module docs.
pub(crate) struct Engine<F> {
    pub(crate) front: F,
    /// The transport each new session starts from (endpoint, client,
    /// limits, scope); dropped at close, so that the engine, which may
    /// outlive its stack, holds no client.
    template: Mutex<Option<Wire>>,
    /// Opens server sessions; `None` for an attached session, which is
    /// never initialized or replaced.
    sessions: Option<SessionsHandle>,
    current: watch::Sender<Current>,
    spawner: Spawner,
    /// Requests waiting for their response, which may arrive on another
    /// stream (the GET stream, or another request's answer).
    pending: Mutex<HashMap<RequestId, oneshot::Sender<Response>>>,
    /// Server requests being answered, and those waiting (see [`aside`]).
    answering: aside::Answering,
    /// Why the session ended (see [`ended`](Self::ended)), kept after a
    /// close, so that the requests it cut off say so.
    end_cause: Mutex<Option<Error>>,
    settings: Settings,
    /// The `initialize` params repeated to replace an expired session.
    initialize_params: Mutex<Option<Value>>,
    /// Renewals not yet proven, and the wait before the next.
    renewals: Mutex<Renewals>,
    /// The newest generation given a listener.
    listening: AtomicU64,
    /// Listener tasks running.
    listeners: AtomicUsize,
    generations: AtomicU64,
    ids: AtomicI64,
}

impl<F: Front> Engine<F> {
    pub(crate) fn new(
        front: F,
        template: Wire,
        sessions: Option<SessionsHandle>,
        spawner: Spawner,
        settings: Settings,
    ) -> Arc<Self> {
        Arc::new(Engine {
            front,
            template: Mutex::new(Some(template)),
            sessions,
            current: watch::Sender::new(Current::Unopened),
            spawner,
            pending: Mutex::default(),
            answering: aside::Answering::default(),
            end_cause: Mutex::default(),
            settings,
            initialize_params: Mutex::default(),
            renewals: Mutex::new(Renewals {
                unproven: 0,
                backoff: Backoff::new(RENEW_BACKOFF.0, RENEW_BACKOFF.1),
            }),
            listening: AtomicU64::new(0),
            listeners: AtomicUsize::new(0),
            generations: AtomicU64::new(0),
            ids: AtomicI64::new(0),
        })
    }

    /// A fresh id for a request of the engine or of its front end.
    pub(crate) fn next_id(&self) -> RequestId {
        let n = self.ids.fetch_add(1, Ordering::Relaxed) + 1;
        match self.settings.id_prefix {
            None => RequestId::Number(n),
            Some(prefix) => RequestId::String(format!("{prefix}{n}")),
        }
    }

    /// The client span (and, with `otel`, the metric) of a request on
    /// `generation`, or on the session in use when `None`; looked up only
    /// if someone observes it.
    pub(crate) fn telemetry(
        &self,
        generation: Option<&Arc<Generation>>,
        method: &str,
        params: Option<&Value>,
        id: Option<&RequestId>,
    ) -> Call {
        Call::start(method, params, id, || {
            let generation = generation.cloned().or_else(|| self.generation());
            let wire = generation
                .as_ref()
                .map(|g| g.wire.clone())
                .or_else(|| lock(&self.template).clone());
            let (address, port) = wire
                .as_ref()
                .map_or_else(|| (String::new(), None), Wire::peer_address);
            Peer {
                address,
                port,
                session_id: generation.as_ref().and_then(|g| g.session_id()),
                protocol_version: generation
                    .as_ref()
                    .and_then(|g| g.wire.protocol_version())
                    .map(ProtocolVersion::as_str),
            }
        })
    }

    /// The token cancelled when the front end closes.
    pub(crate) fn closing(&self) -> &tokio_util::sync::CancellationToken {
        self.spawner.token()
    }

    pub(crate) fn spawner(&self) -> &Spawner {
        &self.spawner
    }

    /// Uses a session the caller owns: never initialized, replaced or
    /// DELETEd.
    pub(crate) fn attach(&self, id: SessionId, version: ProtocolVersion) -> Arc<Generation> {
        let wire = self
            .fresh_wire()
            .expect("attached before anything can close");
        wire.http()
            .expect("only an HTTP connector attaches")
            .attach(id, version);
        let generation = Arc::new(Generation {
            number: self.generations.fetch_add(1, Ordering::Relaxed) + 1,
            wire,
            owned: false,
            era: Era::Sessions,
        });
        self.set_current(Current::Ready(generation.clone()));
        generation
    }

    /// A 2026-07-28 generation speaking `version`: nothing to open, nothing
    /// to DELETE. Not yet the one requests go to ([`set_ready`]).
    ///
    /// [`set_ready`]: Self::set_ready
    pub(crate) fn stateless(&self, version: ProtocolVersion) -> Result<Arc<Generation>> {
        let wire = self.fresh_wire()?;
        wire.set_protocol_version(version);
        Ok(Arc::new(Generation {
            number: self.generations.fetch_add(1, Ordering::Relaxed) + 1,
            wire,
            owned: false,
            era: Era::Stateless,
        }))
    }

    /// Starts opening a server session: `initialize` (as `request`) goes
    /// out through the stack's sessions entry, and this returns once its
    /// answer's head has arrived (with the session id, if any). The answer
    /// itself is for the caller to read, with the returned waiter.
    ///
    /// The session is on the stack before the POST leaves; until
    /// [`Opening::established`] is called, dropping the [`Started`] (or
    /// failing half-way) DELETEs the session the server created, if any.
    pub(crate) async fn begin_open(
        self: &Arc<Self>,
        request: Request,
        deadline: Deadline,
    ) -> Result<Started<F>> {
        let wire = self.fresh_wire()?;
        let number = self.generations.fetch_add(1, Ordering::Relaxed) + 1;
        let generation = Arc::new(Generation {
            number,
            wire,
            owned: true,
            era: Era::Sessions,
        });
        self.begin_open_on(generation, request, deadline).await
    }

    async fn begin_open_on(
        self: &Arc<Self>,
        generation: Arc<Generation>,
        request: Request,
        deadline: Deadline,
    ) -> Result<Started<F>> {
        let sessions = self.sessions.as_ref().ok_or_else(|| {
            Error::builder("an attached session is never initialized by this crate")
        })?;
        let number = generation.number;
        let wire = generation.wire.clone();
        let waiter = self.waiter(request.id.clone());
        let params = request.params.clone();
        let mut opening = sessions.open(number, wire, request)?;
        let answer = deadline.run(opening.answer()).await?;
        // Repeated to replace the session if the server expires it.
        *lock(&self.initialize_params) = params;
        Ok(Started {
            generation,
            answer,
            waiter,
            opening,
        })
    }

    /// Opens a server session: [`begin_open`](Self::begin_open), its answer
    /// read (server requests on it answered, notifications delivered), the
    /// revision negotiated, then `notifications/initialized` when
    /// `send_initialized`, all within `deadline`. If this future fails or
    /// is dropped at any point, the session the server created (if any) is
    /// DELETEd.
    pub(crate) async fn open(
        self: &Arc<Self>,
        request: Request,
        send_initialized: bool,
        deadline: Deadline,
    ) -> Result<(Arc<Generation>, Value)> {
        // No generation yet: the endpoint's origin, no session id.
        let call = self.telemetry(
            None,
            &request.method,
            request.params.as_ref(),
            Some(&request.id),
        );
        let started = self
            .begin_open(request, deadline)
            .instrument(call.span().clone())
            .await;
        let started = call.unless_failed(started)?;
        self.finish_open(started, call, send_initialized, deadline)
            .await
    }

    /// Opens an HTTP+SSE (2024-11-05) session: the event stream first (the
    /// session itself, read by a task on the stack from now on), then
    /// `initialize` POSTed to the endpoint it named, answered on the
    /// stream, then `notifications/initialized` when `send_initialized`.
    /// Never replaced: when the stream ends, so does the session. `found`
    /// is set once the stream has sent its `endpoint` event (even one
    /// refused). All within `deadline`.
    pub(crate) async fn open_http_sse(
        self: &Arc<Self>,
        request: Request,
        send_initialized: bool,
        found: &AtomicBool,
        deadline: Deadline,
    ) -> Result<(Arc<Generation>, Value)> {
        let wire = self.fresh_wire()?;
        let http = wire
            .http()
            .ok_or_else(|| Error::builder("HTTP+SSE is an HTTP transport"))?;
        let stream = http.open_sse_session(deadline, found).await?;
        let generation = Arc::new(Generation {
            number: self.generations.fetch_add(1, Ordering::Relaxed) + 1,
            wire,
            owned: false,
            era: Era::HttpSse,
        });
        // Until this attempt succeeds, its failure (or drop) stops the
        // reader and undoes what the stream's end did to the engine: detection
        // may go on to another era on this engine, and a failed attempt's
        // stream must neither stay open for the life of that session nor,
        // ending, end it.
        let stop = self.closing().child_token();
        let attempt = scopeguard::guard(stop.clone(), |stop| {
            stop.cancel();
            self.unend();
        });
        self.start_sse_reader(&generation, stream, stop);
        let call = self.telemetry(
            Some(&generation),
            &request.method,
            request.params.as_ref(),
            Some(&request.id),
        );
        let started = self
            .begin_open_on(generation, request, deadline)
            .instrument(call.span().clone())
            .await;
        let started = call.unless_failed(started)?;
        let opened = self
            .finish_open(started, call, send_initialized, deadline)
            .await?;
        scopeguard::ScopeGuard::into_inner(attempt);
        Ok(opened)
    }

    /// Reads the HTTP+SSE stream of `generation`, routing what comes, until
    /// it ends (then the session is over for every request), or until
    /// `stop` (a child of the engine's closing token) is cancelled.
    fn start_sse_reader(
        self: &Arc<Self>,
        generation: &Arc<Generation>,
        mut stream: MessageStream,
        stop: tokio_util::sync::CancellationToken,
    ) {
        let engine = self.clone();
        let generation = generation.clone();
        let spawned = self.spawner.spawn(move |_closing| async move {
            let cancel = stop;
            let read = async {
                while let Some(message) = stream.next().await {
                    match message {
                        // Every response of the session comes on this one
                        // stream: server requests are answered aside (see
                        // `aside`), never holding up the ones behind them.
                        Ok(message) => engine.route(&generation, message).await,
                        Err(error) => {
                            tracing::debug!(%error, "the HTTP+SSE stream failed");
                            return error;
                        }
                    }
                }
                Error::protocol("the server ended the HTTP+SSE stream (the session)")
            };
            tokio::select! {
                _ = cancel.cancelled() => {}
                error = read => engine.ended(&generation, error),
            }
        });
        if !spawned {
            self.current.send_replace(Current::Closed);
        }
    }

    /// Undoes [`ended`](Self::ended) for a session that was never opened:
    /// an HTTP+SSE attempt that failed, after which connect may open
    /// another era on this engine.
    fn unend(&self) {
        self.current.send_if_modified(|current| {
            let ended = matches!(current, Current::Ended(_));
            if ended {
                *current = Current::Unopened;
            }
            ended
        });
        lock(&self.end_cause).take();
    }

    /// `generation`'s session is over and cannot be replaced: requests
    /// waiting for a response on it fail, later ones get `error`.
    pub(crate) fn ended(self: &Arc<Self>, generation: &Generation, error: Error) {
        let told = error.duplicate();
        let cause = error.duplicate();
        let ended = self.current.send_if_modified(|current| match current {
            Current::Ready(g) if g.number != generation.number => false,
            Current::Closed => false,
            _ => {
                *current = Current::Ended(error);
                true
            }
        });
        // The cause first: a waiter woken below reads it at once (on
        // another worker, maybe before this function returns).
        if ended {
            *lock(&self.end_cause) = Some(cause);
        }
        // Their responses can no longer come: dropping the senders wakes
        // the waiters (each reads the error from `current`).
        lock(&self.pending).clear();
        if ended {
            F::ended(self, &told);
        }
    }

    /// Why the session ended, for a request whose response can no longer
    /// come; `None` while it has not.
    fn end_error(&self) -> Option<Error> {
        lock(&self.end_cause).as_ref().map(Error::duplicate)
    }

    /// The error for a request cut off by close: why the session ended,
    /// when it had (a host closes an ended session while its requests are
    /// still reading the error).
    fn closed_error(&self) -> Error {
        self.end_error().unwrap_or_else(Error::closed)
    }

    /// Reads the answer to `initialize` (in `call`'s span, which ends
    /// with it) and sends `notifications/initialized`.
    async fn finish_open(
        self: &Arc<Self>,
        started: Started<F>,
        call: Call,
        send_initialized: bool,
        deadline: Deadline,
    ) -> Result<(Arc<Generation>, Value)> {
        let generation = started.generation;
        call.session(generation.session_id().as_ref());
        let read = async {
            let result = deadline
                .run(started.waiter.read(&generation, started.answer))
                .await?;
            let result = result_value(&result, "initialize")?;
            let version = negotiated(&result, generation.era)?;
            generation.wire.set_protocol_version(version);
            // Run in the call's span: the revision is known only now.
            tracing::Span::current().record("mcp.protocol.version", version.as_str());
            Ok(result)
        };
        let result = call.run(read).await?;
        if send_initialized {
            let initialized = Notification {
                method: "notifications/initialized".into(),
                params: None,
            };
            let call = self.telemetry(Some(&generation), &initialized.method, None, None);
            call.run(self.notify(&generation, &initialized, deadline))
                .await?;
        }
        started.opening.established();
        Ok((generation, result))
    }

    /// Makes `generation` the session requests go to.
    pub(crate) fn set_ready(&self, generation: &Arc<Generation>) {
        self.set_current(Current::Ready(generation.clone()));
    }

    /// Moves to `state`, unless closed or ended: a renewal that ends after
    /// a close changes nothing, and an HTTP+SSE stream that ended before
    /// its connect finished stays ended.
    fn set_current(&self, state: Current) {
        self.current.send_if_modified(|current| {
            let open = !matches!(current, Current::Closed | Current::Ended(_));
            if open {
                *current = state;
            }
            open
        });
    }

    /// The session in use, if one is open.
    pub(crate) fn generation(&self) -> Option<Arc<Generation>> {
        match &*self.current.borrow() {
            Current::Ready(generation) => Some(generation.clone()),
            _ => None,
        }
    }

    fn is_current(&self, generation: &Generation) -> bool {
        matches!(&*self.current.borrow(), Current::Ready(g) if g.number == generation.number)
    }

    /// The session to send on, waiting while a replacement is opened (and
    /// starting one if the last was lost). Callers bound the wait.
    pub(crate) async fn current(self: &Arc<Self>) -> Result<Arc<Generation>> {
        self.current_or_renew(true).await
    }

    /// [`current`](Self::current); when not `renew`, a lost session is an
    /// error instead of the start of a renewal (one being opened is still
    /// waited for).
    async fn current_or_renew(self: &Arc<Self>, renew: bool) -> Result<Arc<Generation>> {
        if let Current::Ready(generation) = &*self.current.borrow() {
            return Ok(generation.clone());
        }
        let mut current = self.current.subscribe();
        let mut waited = false;
        loop {
            let renew = match &*current.borrow_and_update() {
                Current::Ready(generation) => return Ok(generation.clone()),
                Current::Closed => return Err(Error::closed()),
                Current::Unopened => {
                    return Err(Error::protocol(
                        "no session is open yet: `initialize` comes first",
                    ));
                }
                Current::Lost(error) if waited || !renew => {
                    return Err(error.as_ref().map_or_else(
                        || {
                            let what = if waited {
                                "the new session expired too before it could be used"
                            } else {
                                "the session expired; the next request opens a new one"
                            };
                            Error::protocol(what)
                                .with_status(http::StatusCode::NOT_FOUND)
                                .with_session_expired()
                        },
                        Error::duplicate,
                    ));
                }
                Current::Lost(_) => true,
                Current::Renewing => false,
                Current::Ended(error) => return Err(error.duplicate()),
            };
            if renew {
                self.renew();
            }
            waited = true;
            if current.changed().await.is_err() {
                return Err(Error::closed());
            }
        }
    }

    /// The server answered 404 to a request that carried `generation`'s
    /// session id: it has ended that session. One we created is settled
    /// (no DELETE is owed) and will be replaced by the next request; the
    /// caller's own is left as it is, and the error reported.
    pub(crate) fn expired(&self, generation: &Generation) {
        if !generation.owned {
            return;
        }
        if let Some(sessions) = &self.sessions {
            sessions.expired(generation.number);
        }
        self.current.send_if_modified(|current| match current {
            Current::Ready(g) if g.number == generation.number => {
                *current = Current::Lost(None);
                true
            }
            _ => false,
        });
    }

    fn check_expiry(&self, generation: &Generation, error: &Error) {
        if error.is_session_expired() {
            self.expired(generation);
        }
    }

    /// Starts opening a replacement for a lost session, unless one is
    /// being opened: single flight, owned by a background task, not by the
    /// request that noticed.
    fn renew(self: &Arc<Self>) {
        let started = self.current.send_if_modified(|current| {
            let lost = matches!(current, Current::Lost(_));
            if lost {
                *current = Current::Renewing;
            }
            lost
        });
        if !started {
            return;
        }
        let engine = self.clone();
        let spawned = self.spawner.spawn(move |cancel| async move {
            tokio::select! {
                _ = cancel.cancelled() => {}
                _ = engine.run_renewal() => {}
            }
        });
        if !spawned {
            self.current.send_replace(Current::Closed);
        }
    }

    async fn run_renewal(self: &Arc<Self>) {
        let wait = {
            let mut renewals = lock(&self.renewals);
            if renewals.unproven >= MAX_UNPROVEN_RENEWALS {
                drop(renewals);
                tracing::debug!("the server expired every new session; giving up");
                self.set_current(Current::Ended(
                    Error::protocol(format!(
                        "the server expired {MAX_UNPROVEN_RENEWALS} new sessions in a row \
                         before accepting a request on any of them; the session is given up \
                         (connect again)"
                    ))
                    .with_status(http::StatusCode::NOT_FOUND)
                    .with_session_expired(),
                ));
                return;
            }
            renewals.unproven += 1;
            (renewals.unproven > 1).then(|| renewals.backoff.wait(None))
        };
        if let Some(wait) = wait {
            tracing::debug!(?wait, "the last new session was never used; waiting");
            tokio::time::sleep(wait).await;
        }
        tracing::debug!("the session expired; opening a new one");
        let params = lock(&self.initialize_params).clone();
        let request = Request {
            id: self.next_id(),
            method: "initialize".into(),
            params,
        };
        // Never unbounded: a renewal is a connect of its own.
        let deadline = Deadline::after(Some(self.settings.renew_timeout));
        match self.open(request, true, deadline).await {
            Ok((generation, result)) => {
                self.set_ready(&generation);
                // The front end hears of the new session before its
                // listener's first event.
                F::renewed(self, &generation, &result).await;
                self.start_listener(&generation);
            }
            Err(error) => {
                tracing::debug!(%error, "opening a new session failed");
                self.set_current(Current::Lost(Some(error)));
            }
        }
    }

    /// The `clientInfo` and capabilities every later session's 2026-07-28
    /// requests carry in `_meta`: for a front end that learns them only
    /// from its caller's own `initialize` (`adapters::ScopedTransport`).
    pub(crate) fn set_client_meta(&self, client_info: &Value, capabilities: &Value) {
        let meta = crate::transport::metadata::client_meta(client_info, capabilities, None);
        let mut template = lock(&self.template);
        match template.as_mut() {
            Some(Wire::Http(current)) => {
                *current = Arc::new(current.fresh().with_client_meta(meta));
            }
            #[cfg(feature = "stdio")]
            Some(Wire::Stdio(current)) => {
                *current = Arc::new(current.fresh().with_client_meta(meta));
            }
            #[allow(unreachable_patterns)]
            _ => {}
        }
    }

    /// The client new sessions go through, until close.
    pub(crate) fn http_client(&self) -> Option<crate::http_client::HttpClient> {
        lock(&self.template)
            .as_ref()
            .and_then(Wire::http)
            .map(|template| template.http_client().clone())
    }

    /// A transport for a new session, until close.
    fn fresh_wire(&self) -> Result<Wire> {
        lock(&self.template)
            .as_ref()
            .map(|template| template.fresh())
            .ok_or_else(Error::closed)
    }

    /// Ends the engine's work: requests waiting for a session fail with
    /// [`Error::is_closed`], background tasks are told to stop, and the
    /// engine lets go of its transports (the stack releases the client).
    pub(crate) fn close(&self) {
        self.spawner.token().cancel();
        self.current.send_replace(Current::Closed);
        self.answering.clear();
        drop(lock(&self.template).take());
    }

    /// Registers a request's id, so that its response is taken wherever it
    /// arrives. Register before the request is sent.
    pub(crate) fn waiter(self: &Arc<Self>, id: RequestId) -> Waiter<F> {
        let (deliver, delivered) = oneshot::channel();
        lock(&self.pending).insert(id.clone(), deliver);
        Waiter {
            engine: self.clone(),
            id,
            delivered,
        }
    }

    /// POSTs a request on `generation`, up to its answer's head within
    /// `deadline`; a 404 to it settles the session as expired, an accepted
    /// one proves the session in use (see [`MAX_UNPROVEN_RENEWALS`]).
    pub(crate) async fn post_request(
        self: &Arc<Self>,
        generation: &Arc<Generation>,
        request: &Request,
        extra: &HeaderMap,
        deadline: Deadline,
    ) -> Result<MessageStream> {
        // Matched here, each arm awaited in place: a combinator over the two
        // futures would nest every request's future one level deeper. The
        // stdio send is boxed for the same reason: its future (a bounded
        // channel's reserve under a deadline) is deeper than the HTTP one,
        // and every caller up the chain would lay it out.
        let posted = match &generation.wire {
            Wire::Http(http) => http.post_request_with(request, extra, deadline).await,
            #[cfg(feature = "stdio")]
            Wire::Stdio(stdio) => Box::pin(stdio.send_request(request, deadline)).await,
        }
        .inspect_err(|error| self.check_expiry(generation, error))?;
        if self.is_current(generation) {
            let mut renewals = lock(&self.renewals);
            renewals.unproven = 0;
            renewals.backoff.reset();
        }
        Ok(posted)
    }

    /// Sends `request` on `generation` and reads its answer until its
    /// response, all within `deadline`. `accepted` is set once the server
    /// has accepted the request (its answer began).
    async fn exchange(
        self: &Arc<Self>,
        generation: &Arc<Generation>,
        request: &Request,
        extra: &HeaderMap,
        accepted: &AtomicBool,
        deadline: Deadline,
    ) -> Result<Box<RawValue>> {
        let post = || async {
            let answer = self
                .post_request(generation, request, extra, deadline)
                .await;
            accepted.store(answer.is_ok(), Ordering::Relaxed);
            answer
        };
        // Boxed: the POST and the reader of its answer make a future of
        // about 10 KB, which every caller up the chain (the deadline, the
        // select on closing, the session's request, a spawned connect)
        // would otherwise embed and move by value, memcpy after memcpy.
        Box::pin(deadline.run(self.waiter(request.id.clone()).read_when(generation, post))).await
    }

    /// A request on the current session, within `deadline`: an owned
    /// session that the server has expired is replaced once (when `renew`)
    /// and the request sent again. Without `renew`, a lost session is an
    /// error: background work never opens a session. If this future is dropped, or the
    /// deadline passes, a `notifications/cancelled` is sent.
    pub(crate) async fn call(
        self: &Arc<Self>,
        request: &Request,
        deadline: Deadline,
        renew: bool,
    ) -> Result<Box<RawValue>> {
        self.call_with(request, &HeaderMap::new(), deadline, renew)
            .await
    }

    /// [`call`](Self::call) with `extra` headers on its POSTs.
    pub(crate) async fn call_with(
        self: &Arc<Self>,
        request: &Request,
        extra: &HeaderMap,
        deadline: Deadline,
        renew: bool,
    ) -> Result<Box<RawValue>> {
        let closing = self.closing().clone();
        let mut renewed = !renew;
        loop {
            let generation = tokio::select! {
                biased;
                _ = closing.cancelled() => return Err(self.closed_error()),
                generation = deadline.run(self.current_or_renew(renew)) => generation?,
            };
            let mut cancel = CancelOnDrop {
                engine: self,
                generation: &generation,
                id: Some(request.id.clone()),
                reason: "the caller abandoned the request",
            };
            let accepted = AtomicBool::new(false);
            let outcome = tokio::select! {
                biased;
                _ = closing.cancelled() => {
                    cancel.disarm();
                    return Err(self.closed_error());
                }
                outcome = self.exchange(&generation, request, extra, &accepted, deadline) => outcome,
            };
            match outcome {
                Err(error) if error.is_timeout() => {
                    cancel.reason = "timed out";
                    return Err(error);
                }
                // Only a request whose own POST was answered 404: one the
                // server accepted (and may have run) before its session
                // expired, met by a resumption, is not sent again.
                Err(error)
                    if error.is_session_expired()
                        && generation.owned
                        && !renewed
                        && !accepted.load(Ordering::Relaxed) =>
                {
                    // The server forgot the request with the session.
                    cancel.disarm();
                    renewed = true;
                }
                outcome => {
                    cancel.disarm();
                    return outcome;
                }
            }
        }
    }

    /// One request on `generation` (not necessarily the current one), within
    /// `deadline`: never sent again, no notice if dropped. For probing
    /// before a generation is in use.
    pub(crate) async fn request_on(
        self: &Arc<Self>,
        generation: &Arc<Generation>,
        request: &Request,
        deadline: Deadline,
    ) -> Result<Box<RawValue>> {
        let accepted = AtomicBool::new(false);
        self.exchange(generation, request, &HeaderMap::new(), &accepted, deadline)
            .await
    }

    /// POSTs a notification on `generation`, within `deadline`.
    pub(crate) async fn notify(
        self: &Arc<Self>,
        generation: &Arc<Generation>,
        notification: &Notification,
        deadline: Deadline,
    ) -> Result<()> {
        match &generation.wire {
            Wire::Http(http) => http.post_notification_within(notification, deadline).await,
            #[cfg(feature = "stdio")]
            Wire::Stdio(stdio) => Box::pin(stdio.send_notification(notification, deadline)).await,
        }
        .inspect_err(|error| self.check_expiry(generation, error))
    }

    /// The deadline of an exchange no caller times (see
    /// [`Settings::exchange_timeout`]), from now.
    pub(crate) fn exchange_deadline(&self) -> Deadline {
        Deadline::after(Some(self.settings.exchange_timeout))
    }

    /// POSTs the answer to a server request on the session that asked,
    /// within the exchange timeout: a server that holds the POST does not
    /// hold up the stream the request came on for longer.
    pub(crate) async fn respond(
        self: &Arc<Self>,
        generation: &Arc<Generation>,
        response: &Response,
    ) -> Result<()> {
        let deadline = self.exchange_deadline();
        match &generation.wire {
            Wire::Http(http) => http.post_response_within(response, deadline).await,
            #[cfg(feature = "stdio")]
            Wire::Stdio(stdio) => Box::pin(stdio.send_response(response, deadline)).await,
        }
        .inspect_err(|error| self.check_expiry(generation, error))
    }

    /// Tells the server of `generation` that request `id` was abandoned
    /// (never for `initialize`); nothing when that session is gone.
    pub(crate) fn cancelled(
        self: &Arc<Self>,
        generation: &Arc<Generation>,
        id: RequestId,
        reason: &'static str,
    ) {
        // 2026-07-28 over HTTP: closing the answer's stream (dropping it)
        // is the cancellation; there is no notice to send. Over stdio, one
        // shared stream, the notice is the only way.
        let stream_closes = generation.era == Era::Stateless && !generation.wire.is_stdio();
        if stream_closes || !self.is_current(generation) {
            return;
        }
        let engine = self.clone();
        let generation = generation.clone();
        self.spawner.spawn(move |cancel| async move {
            let notice = Notification {
                method: "notifications/cancelled".into(),
                params: Some(json!({ "requestId": id, "reason": reason })),
            };
            let deadline = Deadline::after(Some(CANCEL_NOTICE_TIMEOUT));
            tokio::select! {
                _ = cancel.cancelled() => {}
                _ = engine.notify(&generation, &notice, deadline) => {}
            }
        });
    }

    /// Routes one message from `generation`: a response to the request
    /// waiting for it, anything else to the front end.
    pub(crate) async fn route(self: &Arc<Self>, generation: &Arc<Generation>, message: Message) {
        let message = match message {
            Message::Response(response) => {
                let waiting = response
                    .id
                    .as_ref()
                    .and_then(|id| lock(&self.pending).remove(id));
                match waiting {
                    // The request may have just ended: then it is dropped.
                    Some(deliver) => drop(deliver.send(response)),
                    None => {
                        tracing::debug!(id = ?response.id, "dropped a response to no request of ours");
                    }
                }
                return;
            }
            // 2026-07-28 has no server requests (they come as input
            // requests in results), and a client never sends a response.
            Message::Request(request) if generation.era == Era::Stateless => {
                tracing::debug!(method = %request.method, "ignored a server request in 2026-07-28");
                return;
            }
            // Answered aside, a bounded number at once: the stream is read
            // on, and the response a call waits for is never held up.
            Message::Request(request) if !F::HANDS_REQUESTS_ON => {
                self.answer_aside(generation, request);
                return;
            }
            Message::Request(request) => ServerMessage::Request(request),
            Message::Notification(notification) => ServerMessage::Notification(notification),
        };
        F::deliver(self, generation, message).await;
    }

    /// Starts the GET listener of `generation` (one per session), kept
    /// under the listening policy (see [`listener`]), if the engine
    /// listens.
    pub(crate) fn start_listener(self: &Arc<Self>, generation: &Arc<Generation>) {
        if generation.era != Era::Sessions
            || generation.wire.is_stdio()
            || !self.settings.listen
            || self
                .listening
                .fetch_max(generation.number, Ordering::AcqRel)
                >= generation.number
        {
            return;
        }
        self.spawn_listening(generation, listener::GetStream::new(), "GET stream");
    }

    /// Runs `source` under the listening policy in a background task,
    /// counted in [`listening`](Self::listening) while it runs.
    fn spawn_listening<S: listener::Source<F> + 'static>(
        self: &Arc<Self>,
        generation: &Arc<Generation>,
        source: S,
        what: &'static str,
    ) {
        let engine = self.clone();
        let generation = generation.clone();
        self.listeners.fetch_add(1, Ordering::AcqRel);
        // Uncounted when the task ends, is aborted, or never starts.
        let counted = scopeguard::guard(self.clone(), |engine| {
            engine.listeners.fetch_sub(1, Ordering::AcqRel);
        });
        self.spawner.spawn(move |cancel| async move {
            let _counted = counted;
            tokio::select! {
                _ = cancel.cancelled() => {}
                _ = listener::run(&engine, &generation, source, what) => {}
            }
        });
    }

    /// Whether a listener (the GET stream, or `subscriptions/listen`) is
    /// running.
    pub(crate) fn listening(&self) -> bool {
        self.listeners.load(Ordering::Acquire) > 0
    }
}

impl<F: Front> Engine<F> {
    /// 2026-07-28: opens a `subscriptions/listen` stream on `generation`
    /// for the notifications in `filter`, kept under the listening policy
    /// (see [`listener`]), if the engine listens.
    pub(crate) fn start_subscription(
        self: &Arc<Self>,
        generation: &Arc<Generation>,
        filter: Value,
    ) {
        if generation.era != Era::Stateless || !self.settings.listen {
            return;
        }
        self.spawn_listening(
            generation,
            listener::Subscription::new(filter),
            "subscriptions/listen",
        );
    }
}

/// A server session whose `initialize` answer has begun to arrive.
pub(crate) struct Started<F> {
    pub(crate) generation: Arc<Generation>,
    /// The answer to `initialize`, to read with `waiter`.
    pub(crate) answer: MessageStream,
    pub(crate) waiter: Waiter<F>,
    /// Ends the session unless established.
    pub(crate) opening: Opening,
}

/// A request registered for its response; unregistered when dropped.
pub(crate) struct Waiter<F> {
    engine: Arc<Engine<F>>,
    id: RequestId,
    delivered: oneshot::Receiver<Response>,
}

impl<F: Front> Waiter<F> {
    /// Reads `answer` (resuming it if it breaks off) until the response,
    /// or takes the response from another stream if it arrives there first.
    pub(crate) async fn read(
        self,
        generation: &Arc<Generation>,
        answer: MessageStream,
    ) -> Result<Box<RawValue>> {
        self.read_when(generation, || async { Ok(answer) }).await
    }

    /// Like [`read`](Self::read), with the answer still to come (`answer`
    /// starts it): the response may arrive on another stream before it
    /// does.
    ///
    /// `answer` is a closure, not a future, so that its future is made
    /// where it is awaited: a future argument would be held twice (as the
    /// argument, then where it is awaited).
    pub(crate) async fn read_when<A: Future<Output = Result<MessageStream>>>(
        mut self,
        generation: &Arc<Generation>,
        answer: impl FnOnce() -> A,
    ) -> Result<Box<RawValue>> {
        if generation.wire.shares_one_stream() {
            // Over HTTP+SSE the POST is answered 202, over stdio the line
            // is written; the response comes on the one shared stream.
            answer().await?;
            // The stream ended (or broke a limit) before the response
            // came: the call fails with what ended it.
            let unanswered = |engine: &Engine<F>| {
                let error = engine.end_error().unwrap_or_else(|| {
                    Error::protocol("the server's stream ended before the response came")
                });
                Err(error)
            };
            if self.engine.end_error().is_some() {
                // The stream may have ended before this waiter was
                // registered: then nothing would wake it.
                return match self.delivered.try_recv() {
                    Ok(response) => response.outcome.map_err(Error::rpc),
                    Err(_) => unanswered(&self.engine),
                };
            }
            return match (&mut self.delivered).await {
                Ok(response) => response.outcome.map_err(Error::rpc),
                Err(_) => unanswered(&self.engine),
            };
        }
        let engine = &self.engine;
        let id = &self.id;
        tokio::select! {
            outcome = async { answer::read(engine, generation, answer().await?, id).await } => outcome,
            // A dropped sender (never, while registered) disables this arm.
            Ok(response) = &mut self.delivered => response.outcome.map_err(Error::rpc),
        }
    }
}

impl<F> Drop for Waiter<F> {
    fn drop(&mut self) {
        lock(&self.engine.pending).remove(&self.id);
    }
}

/// Sends `notifications/cancelled` for a request whose caller walked away
/// or whose deadline passed, unless disarmed.
struct CancelOnDrop<'a, F: Front> {
    engine: &'a Arc<Engine<F>>,
    generation: &'a Arc<Generation>,
    id: Option<RequestId>,
    reason: &'static str,
}

impl<F: Front> CancelOnDrop<'_, F> {
    fn disarm(&mut self) {
        self.id = None;
    }
}

impl<F: Front> Drop for CancelOnDrop<'_, F> {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            self.engine.cancelled(self.generation, id, self.reason);
        }
    }
}

/// The revision the server answered, if we speak it over `era`'s
/// transport.
pub(crate) fn negotiated(initialize_result: &Value, era: Era) -> Result<ProtocolVersion> {
    let answered = initialize_result["protocolVersion"]
        .as_str()
        .ok_or_else(|| Error::protocol("the initialize result has no protocolVersion"))?;
    let version: ProtocolVersion = answered.parse()?;
    let fits = match era {
        Era::Sessions => ProtocolVersion::SUPPORTED.contains(&version),
        Era::HttpSse => version == ProtocolVersion::V2024_11_05,
        Era::Stateless => false,
    };
    if !fits {
        return Err(Error::protocol(format!(
            "the server answered initialize with protocol version {version}, \
             which has no initialize over this transport"
        )));
    }
    Ok(version)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http_client::HttpClient;
    use crate::scope::GuardStack;

    /// A front end that does nothing with the server's traffic.
    struct Quiet;

    impl Front for Quiet {
        async fn deliver(_: &Arc<Engine<Self>>, _: &Arc<Generation>, _: ServerMessage) {}

        async fn renewed(_: &Arc<Engine<Self>>, _: &Arc<Generation>, _: &Value) {}
    }

    /// Single flight is the engine's own, not its callers': however often
    /// `renew` is asked while a session is lost (two requests that saw it
    /// lost on two workers at once), one renewal task starts.
    #[tokio::test]
    async fn renew_starts_one_renewal_however_often_it_is_asked() {
        let mut stack = GuardStack::new(Arc::default());
        let client = HttpClient::borrowed(tower::service_fn(|_: http::Request<_>| async {
            Err::<http::Response<crate::http_client::RequestBody>, _>(std::io::Error::other(
                "offline",
            ))
        }));
        let template = Wire::Http(Arc::new(
            crate::transport::StreamableHttp::new(client, "http://127.0.0.1:9/mcp").unwrap(),
        ));
        let sessions = stack.push_server_sessions(Duration::from_secs(1));
        let spawner = stack.push_background();
        let counters = stack.counters().clone();
        let settings = Settings {
            resumption: Resumption::default(),
            listen: false,
            listen_backoff: LISTEN_BACKOFF,
            renew_timeout: Duration::from_secs(1),
            exchange_timeout: Duration::from_secs(1),
            id_prefix: None,
        };
        let engine = Engine::new(Quiet, template, Some(sessions), spawner, settings);
        engine.current.send_replace(Current::Lost(None));
        for _ in 0..3 {
            engine.renew();
        }
        assert!(matches!(*engine.current.borrow(), Current::Renewing));
        assert_eq!(counters.snapshot().tasks, 1, "one renewal task");
        engine.close();
        stack.unwind().await;
    }
}
