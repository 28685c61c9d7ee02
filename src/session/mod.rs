//! Sessions: the connect lifecycle, the session handle, close and drop.
//!
//! A [`Session`] comes only from [`Connector::connect`], fully established:
//! handshake done, catalog discovered. It owns its guard stack; see
//! [`Session::close`] for the orderly end and the crate docs for what `Drop`
//! does.

mod connect;
mod discovery;
pub(crate) mod entry;
pub(crate) mod era;
mod events;
mod front;
mod handlers;
mod options;
pub(crate) mod shared;
mod stateless;

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc};
use tracing::Instrument;

pub use connect::{Connector, LOG_LEVELS};
pub use discovery::{Catalog, Discovery};
pub use entry::Entry;
pub use events::{CatalogList, SESSION_EVENT_CAPACITY, SessionEvent};
pub use options::{Progress, RequestOptions, ResumptionToken};

use crate::engine::{Deadline, Engine};
use crate::error::{Error, Result};
use crate::http_client::ClientOwnership;
use crate::jsonrpc::{self, Message, Notification, Request, RequestId};
use crate::ledger::{Counters, Ledger};
use crate::scope::{GuardStack, Released};
use crate::sync::lock;
use crate::telemetry::Call;
use crate::transport::{ProtocolVersion, SessionId, TransportKind};
use discovery::ListKind;
use front::SessionFront;

/// Whether we created the server session or the caller lent it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[non_exhaustive]
pub enum SessionOwnership {
    /// We sent `initialize`: we DELETE it when done.
    Owned,
    /// The caller's: never initialized, replaced or DELETEd by us.
    Attached,
}

/// How long each phase of connect took.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct Timings {
    /// `initialize`, to the negotiated revision (zero when attached).
    pub initialize: Duration,
    /// `notifications/initialized` (zero when attached).
    pub initialized: Duration,
    /// Every page of every list.
    pub discovery: Duration,
}

/// What the handshake told us.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct SessionInfo {
    /// `serverInfo` of the initialize result (null when attached).
    pub server_info: Value,
    /// `capabilities` of the initialize result (null when attached).
    pub capabilities: Value,
    /// `instructions` of the initialize result.
    pub instructions: Option<String>,
    /// The revision in use: negotiated in `initialize`, or (2026-07-28) the
    /// one `server/discover` accepted.
    pub protocol_version: ProtocolVersion,
    /// The transport in use: `streamable-http`, or `http+sse` (2024-11-05).
    pub transport: TransportKind,
    /// Whether the revision was found by probing the server (not pinned
    /// with [`Connector::protocol_version`], and not known from an earlier
    /// connect through the same client).
    pub probed: bool,
    /// Whether the server issued a session id.
    pub session_id_issued: bool,
    /// Whether we created the server session.
    pub ownership: SessionOwnership,
    /// Whether the HTTP client is the session's own or lent by the caller.
    pub client_ownership: ClientOwnership,
    /// Time per connect phase.
    pub timings: Timings,
}

/// One page of a list method. Its entries are charged to the session's
/// memory budget ([`Discovery::memory`]) for as long as they are held.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct Page {
    /// The entries, verbatim (see [`Entry`]).
    pub items: Vec<Entry>,
    /// The cursor of the next page, if any.
    pub next_cursor: Option<String>,
}

/// A request's result: as the server wrote it, or already read.
enum Answer {
    Raw(Box<RawValue>),
    Read(Value),
}

/// An established MCP session.
///
/// Safe to share between tasks (`Arc<Session>`): every method takes `&self`,
/// and requests run concurrently, each resolving on its own (a failure of
/// one never affects the others or the session).
///
/// End it with [`close`](Self::close). Dropping it without `close` releases
/// the same things: tasks and hooks at once, the DELETE (with the hooks and
/// client it needs) through the reaper (see [`crate::shutdown`]).
pub struct Session {
    engine: Arc<Engine<SessionFront>>,
    stack: Mutex<Option<GuardStack>>,
    notifications: Mutex<Option<mpsc::Receiver<Message>>>,
    counters: Arc<Counters>,
    request_timeout: Option<Duration>,
    // Only ever shown as an origin: a path or query may carry secrets.
    origin: String,
    /// `mcp.client.session.duration`, recorded at close or drop.
    #[cfg(feature = "otel")]
    clock: crate::telemetry::SessionClock,
}

/// The `_meta` key of a request's progress token.
const PROGRESS_TOKEN: &str = "progressToken";

/// Whether `params._meta` already holds a progress token.
fn has_progress_token(params: Option<&Value>) -> bool {
    params
        .and_then(|p| p.get("_meta"))
        .is_some_and(|meta| meta.get(PROGRESS_TOKEN).is_some())
}

/// The methods of the lifecycle: the session sends them itself, once, and
/// a caller sending them would replace the session behind its back.
fn refuse_lifecycle(method: &str) -> Result<()> {
    match method {
        "initialize" | "notifications/initialized" => Err(Error::builder(format!(
            "`{method}` belongs to the session's lifecycle, which the session runs itself; \
             open another session with `Connector::connect` instead"
        ))),
        _ => Ok(()),
    }
}

impl Session {
    fn new(established: connect::Established, stack: GuardStack) -> Self {
        let counters = stack.counters().clone();
        #[cfg(feature = "otel")]
        let clock = crate::telemetry::SessionClock::start(
            &established.origin,
            Some(established.info.protocol_version.as_str()),
        );
        established.engine.front.set_info(established.info);
        Session {
            #[cfg(feature = "otel")]
            clock,
            engine: established.engine,
            stack: Mutex::new(Some(stack)),
            notifications: Mutex::new(Some(established.notifications)),
            counters,
            request_timeout: established.request_timeout,
            origin: established.origin,
        }
    }

    /// What the handshake told us about the server session in use: at
    /// connect, then after each renewal (an owned session the server
    /// expired, replaced by a new `initialize`) the new session's
    /// `serverInfo`, capabilities, instructions, revision and whether it
    /// issued an id. [`SessionInfo::probed`], the ownerships and
    /// [`SessionInfo::timings`] stay connect's.
    pub fn info(&self) -> Arc<SessionInfo> {
        self.engine
            .front
            .info()
            .expect("a session's info is set when it is made")
    }

    /// What the server offers: as discovered at connect, updated when the
    /// server announces a change (`notifications/*/list_changed`) and after
    /// an expired session is replaced. Each update is announced on
    /// [`events`](Self::events) once in place
    /// ([`SessionEvent::CatalogChanged`]).
    pub fn catalog(&self) -> Arc<Catalog> {
        self.engine.front.catalog()
    }

    /// How many times a list of the [`catalog`](Self::catalog) has been
    /// listed again since connect (0 for connect's): the `generation` of
    /// the last [`SessionEvent::CatalogChanged`]. Bumped once the new list
    /// is in place, so a catalog read after this reads at least that
    /// generation's lists.
    pub fn catalog_generation(&self) -> u64 {
        self.engine.front.events.catalog_generation()
    }

    /// What happens to the session from now on, as a stream of
    /// [`SessionEvent`]s: renewals, catalog changes, the listener going up
    /// and down, and the close. Any number of receivers; each sees the
    /// events sent after it was made (the state before is read from
    /// [`catalog`](Self::catalog), [`session_id`](Self::session_id),
    /// [`is_listening`](Self::is_listening)).
    ///
    /// Bounded: the session never waits for a reader. One more than
    /// [`SESSION_EVENT_CAPACITY`] events behind loses the oldest and gets
    /// [`RecvError::Lagged`](broadcast::error::RecvError::Lagged) with how
    /// many it lost, then the oldest it still has. The stream ends
    /// ([`RecvError::Closed`](broadcast::error::RecvError::Closed)) after
    /// [`SessionEvent::Closed`], when [`close`](Self::close) begins or the
    /// session is dropped; made after that, it ends at once.
    ///
    /// Listener events come in the 2025 revisions (the GET stream) and in
    /// 2026-07-28 (`subscriptions/listen`); in HTTP+SSE (2024-11-05) the
    /// event stream is the session itself, never reopened, and has none.
    ///
    /// ```no_run
    /// # async fn run(session: mcp_scoped_http::Session) {
    /// use mcp_scoped_http::SessionEvent;
    /// use tokio::sync::broadcast::error::RecvError;
    ///
    /// let mut events = session.events();
    /// loop {
    ///     match events.recv().await {
    ///         Ok(SessionEvent::CatalogChanged { generation, list, .. }) => {
    ///             // In place when read: register the new tools.
    ///             let tools = session.catalog().tools.len();
    ///             println!("{list:?} changed (generation {generation}): {tools} tools");
    ///         }
    ///         Ok(SessionEvent::Renewed { revision, .. }) => println!("new session ({revision:?})"),
    ///         Ok(event) => println!("{event:?}"),
    ///         // Lost some: read the state instead.
    ///         Err(RecvError::Lagged(lost)) => println!("lost {lost} events"),
    ///         Err(RecvError::Closed) => break,
    ///     }
    /// }
    /// # }
    /// ```
    pub fn events(&self) -> broadcast::Receiver<SessionEvent> {
        self.engine.front.events.subscribe()
    }

    /// The revision negotiated with the server session in use (it may
    /// differ from [`SessionInfo::protocol_version`] after an expired
    /// session was replaced).
    pub fn protocol_version(&self) -> ProtocolVersion {
        self.engine
            .generation()
            .and_then(|generation| generation.wire().protocol_version())
            .unwrap_or_else(|| self.info().protocol_version)
    }

    /// The current session id, if the server issued one (or the caller
    /// attached it). It changes if an owned session is replaced after
    /// expiring. A credential: see [`SessionId`].
    pub fn session_id(&self) -> Option<SessionId> {
        self.engine.generation()?.session_id()
    }

    /// What the session's client holds right now (hooks, tasks, sessions,
    /// reaps), per [`Ledger`] (the process-wide figures are [`crate::ledger()`]).
    pub fn ledger(&self) -> Ledger {
        self.counters.snapshot()
    }

    /// Server notifications (progress, logging, list changes, resource
    /// updates), from the GET stream and from the answers to requests, in
    /// the order each stream delivered them. The receiver can be taken once;
    /// up to 256 wait in it, holding at most
    /// [`MemoryBudget::max_queued_bytes`](crate::MemoryBudget::max_queued_bytes)
    /// (16 MiB, as parsed): later ones are dropped, with a warning saying
    /// how many, and the stream is read on. Server requests are not
    /// here: they are answered (see [`Connector::on_elicitation`] and
    /// friends).
    ///
    /// The receiver ends ([`mpsc::Receiver::recv`] gives `None`, once what
    /// is queued has been read) when [`close`](Self::close) begins, or when
    /// the session is dropped.
    pub fn notifications(&self) -> Option<mpsc::Receiver<Message>> {
        lock(&self.notifications).take()
    }

    /// Whether the session is listening for what the server sends unasked
    /// (the GET stream in 2025, `subscriptions/listen` in 2026-07-28).
    ///
    /// Listening lasts as long as the session: a stream that ends is opened
    /// again after a capped, jittered backoff, and a 404 to the GET checks
    /// the session (a `ping`, which renews an expired one). It stops, with
    /// a log line at `info`, only when the server refuses it (405; an error
    /// answer or a 4xx to `subscriptions/listen`; a 404 while the session
    /// is alive), ends a subscription gracefully, or breaks the protocol or
    /// a limit three times in a row; and when listening is off
    /// ([`Connector::listen`]) or the session is closed. This tells which;
    /// [`events`](Self::events) tells when ([`SessionEvent::ListenerUp`],
    /// [`SessionEvent::ListenerDown`]).
    pub fn is_listening(&self) -> bool {
        self.engine.listening()
    }

    /// Whether [`close`](Self::close) has begun.
    pub fn is_closed(&self) -> bool {
        self.engine.closing().is_cancelled()
    }

    /// Sends a request and returns its result, with the session's default
    /// timeout.
    pub async fn request(&self, method: &str, params: Option<Value>) -> Result<Value> {
        self.request_with(method, params, RequestOptions::default())
            .await
    }

    /// Sends a request and returns its result.
    ///
    /// - The answer may come as JSON or on an SSE stream; server requests on
    ///   it are answered and notifications delivered meanwhile. If the
    ///   stream breaks off after an event id, it is resumed (see
    ///   [`Connector::resumption`]).
    /// - On timeout, or if this future is dropped, a
    ///   `notifications/cancelled` is sent and a late response is ignored.
    /// - If an owned session has expired (404 to a request with our session
    ///   id), a new session is opened, once, however many requests hit the
    ///   404 together and whichever of them goes away first; the request is
    ///   sent again on it; a second 404 is an error. Requests made while
    ///   the new session opens wait for it, each within its own deadline. A
    ///   request the server had accepted (its answer began) and whose
    ///   resumption meets the 404 is not sent again, since it may have run:
    ///   it fails with [`Error::is_session_expired`], and the next request
    ///   gets the new session. An attached session reports
    ///   [`Error::is_session_expired`] and is left alone.
    /// - `initialize` and `notifications/initialized` are refused
    ///   ([`Error::is_builder`]): the session runs its lifecycle itself.
    /// - Once the session is closing: [`Error::is_closed`], at once.
    /// - `options` ([`RequestOptions`]) may add a timeout, a progress
    ///   callback (the `progressToken` made and routed for you), extra
    ///   `_meta`, and a resumption token callback (for
    ///   [`resume`](Self::resume)).
    pub async fn request_with(
        &self,
        method: &str,
        params: Option<Value>,
        options: RequestOptions,
    ) -> Result<Value> {
        let result = self.request_raw(method, params, options).await?;
        match result {
            Answer::Raw(result) => self.engine.front.result_value(&result, method),
            Answer::Read(result) => Ok(result),
        }
    }

    /// [`request_with`](Self::request_with), its result as the server
    /// wrote it where the session did not have to read it.
    async fn request_raw(
        &self,
        method: &str,
        params: Option<Value>,
        options: RequestOptions,
    ) -> Result<Answer> {
        refuse_lifecycle(method)?;
        let RequestOptions {
            timeout,
            progress,
            meta: mut extra,
            resumption_token,
        } = options;
        let timeout = timeout.unwrap_or(self.request_timeout);
        let routes = &self.engine.front.routes;
        // Held until the request ends, however it ends: the callbacks are
        // unrouted with them.
        let progress_route = match progress {
            Some(callback) => {
                if extra.contains_key(PROGRESS_TOKEN) || has_progress_token(params.as_ref()) {
                    return Err(Error::builder(
                        "a progressToken of the caller's own cannot go with on_progress, \
                         which makes the token",
                    ));
                }
                let (route, token) = routes.progress(callback);
                extra.insert(PROGRESS_TOKEN.into(), token.clone());
                Some((route, token))
            }
            None => None,
        };
        let progress_token = progress_route.as_ref().map(|(_, token)| token.clone());
        let params = shared::request_meta(params, extra)?;
        if self.engine.generation().is_some_and(|g| g.is_stateless()) {
            // Its ids are made per round, and recorded there.
            let call = self.telemetry(method, params.as_ref(), None);
            let params = call.inject(params);
            // Read whole: its resultType decides what comes next. No
            // resumption tokens: 2026-07-28 has no resumption.
            return call
                .run(stateless::request(
                    &self.engine,
                    method,
                    params,
                    Deadline::after(timeout),
                ))
                .await
                .map(Answer::Read);
        }
        let id = self.engine.next_id();
        let call = self.telemetry(method, params.as_ref(), Some(&id));
        // Trace context into `params._meta` (feature `otel`).
        let params = call.inject(params);
        let request = Request {
            id,
            method: method.into(),
            params,
        };
        let _tokens = resumption_token
            .map(|callback| routes.tokens(request.id.clone(), callback, progress_token));
        // One deadline for the whole request: its exchanges and a new
        // session it waits for.
        let deadline = Deadline::after(timeout);
        call.run(self.engine.call(&request, deadline, true))
            .await
            .map(Answer::Raw)
    }

    /// The client span (and metric) of one request on this session.
    fn telemetry(&self, method: &str, params: Option<&Value>, id: Option<&RequestId>) -> Call {
        self.engine.telemetry(None, method, params, id)
    }

    /// Sends a notification, within the session's default timeout. Like a
    /// request, it waits for a new session while an expired one is being
    /// replaced, and is sent once more if the server expired the session
    /// under it. `notifications/initialized` is refused (see
    /// [`request_with`](Self::request_with)).
    pub async fn notify(&self, method: &str, params: Option<Value>) -> Result<()> {
        refuse_lifecycle(method)?;
        let notification = Notification {
            method: method.into(),
            params,
        };
        let engine = &self.engine;
        let deadline = Deadline::after(self.request_timeout);
        let send = async {
            let mut resent = false;
            loop {
                let generation = engine.current().await?;
                match engine.notify(&generation, &notification, deadline).await {
                    Err(error) if error.is_session_expired() && generation.owned() && !resent => {
                        resent = true;
                    }
                    outcome => return outcome,
                }
            }
        };
        tokio::select! {
            biased;
            _ = engine.closing().cancelled() => Err(Error::closed()),
            outcome = deadline.run(send) => outcome,
        }
    }

    /// Calls a tool: `tools/call` with `name` and `arguments`.
    pub async fn call_tool(&self, name: &str, arguments: Value) -> Result<Value> {
        self.call_tool_with(name, arguments, RequestOptions::default())
            .await
    }

    /// [`call_tool`](Self::call_tool) with [`RequestOptions`] (a timeout,
    /// progress, extra `_meta`, the resumption token).
    pub async fn call_tool_with(
        &self,
        name: &str,
        arguments: Value,
        options: RequestOptions,
    ) -> Result<Value> {
        self.request_named("tools/call", name, arguments, options)
            .await
    }

    /// Resumes the answer to a request from where `token` says it had got
    /// to (see [`RequestOptions::on_resumption_token`]): a GET with its
    /// event id as `Last-Event-ID` on the session in use, read (and
    /// resumed again if it breaks off, per [`Connector::resumption`]) until
    /// the request's response, whose result this returns. For an answer
    /// that broke off past the session's own resumptions, or one a process
    /// that has since restarted was reading (attach to the session again
    /// first: [`Connector::attach`]).
    ///
    /// `options` give the timeout (the session's default otherwise), a
    /// resumption token callback for the resumed answer, and a progress
    /// callback for the progress on it and on the listening stream, when
    /// the token carries the request's progress token
    /// ([`ResumptionToken::progress_token`]; else it is refused, as is a
    /// token in use by a request in flight). Extra `_meta` is refused:
    /// nothing is sent for it to join. Refusals are [`Error::is_builder`].
    /// Without a progress callback, the progress of the resumed answer is
    /// dropped (it names a token this crate made, for a request that
    /// ended).
    ///
    /// Errors: in 2026-07-28 and over HTTP+SSE (2024-11-05), which have no
    /// resumption, at once ([`Error::is_protocol`]); a token reported on
    /// another session than the one in use ([`Error::is_builder`]); a
    /// server with no GET stream (405), or one that no longer has the
    /// stream ([`Error::is_protocol`]); an expired session
    /// ([`Error::is_session_expired`]; the request is not sent again: it
    /// may have run). Dropping this future, or its timeout, sends
    /// `notifications/cancelled` for the request.
    pub async fn resume(&self, token: ResumptionToken, options: RequestOptions) -> Result<Value> {
        let RequestOptions {
            timeout,
            progress,
            meta,
            resumption_token,
        } = options;
        if !meta.is_empty() {
            return Err(Error::builder(
                "a resumed request takes no extra _meta: it is not sent again",
            ));
        }
        let routes = &self.engine.front.routes;
        let _progress = match (progress, token.progress_token()) {
            (Some(callback), Some(progress_token)) => {
                Some(routes.progress_as(progress_token, callback)?)
            }
            (Some(_), None) => {
                return Err(Error::builder(
                    "on_progress needs the request's progress token in the resumption token \
                     (ResumptionToken::with_progress_token)",
                ));
            }
            (None, _) => None,
        };
        let deadline = Deadline::after(timeout.unwrap_or(self.request_timeout));
        let id = token.request_id();
        let _tokens = resumption_token
            .map(|callback| routes.tokens(id.clone(), callback, token.progress_token().cloned()));
        let result = self
            .engine
            .resume(id, token.last_event_id(), token.session_id(), deadline)
            .instrument(tracing::debug_span!("mcp.resume", %id))
            .await?;
        self.engine.front.result_value(&result, "resumed")
    }

    async fn page(&self, kind: ListKind, cursor: Option<&str>) -> Result<Page> {
        let method = kind.method();
        let params = cursor.map(|c| json!({ "cursor": c }));
        let result = match self
            .request_raw(method, params, RequestOptions::default())
            .await?
        {
            Answer::Raw(result) => result,
            Answer::Read(result) => jsonrpc::raw(&result),
        };
        let stateless = self.engine.generation().is_some_and(|g| g.is_stateless());
        let account = self.engine.front.account();
        let (items, next_cursor) = kind.read_page(result, stateless, None, account)?;
        let next_cursor = next_cursor.and_then(|c| c.as_str().map(str::to_owned));
        Ok(Page { items, next_cursor })
    }

    /// One page of `tools/list`.
    pub async fn list_tools(&self, cursor: Option<&str>) -> Result<Page> {
        self.page(ListKind::Tools, cursor).await
    }

    /// One page of `prompts/list`.
    pub async fn list_prompts(&self, cursor: Option<&str>) -> Result<Page> {
        self.page(ListKind::Prompts, cursor).await
    }

    /// One page of `resources/list`.
    pub async fn list_resources(&self, cursor: Option<&str>) -> Result<Page> {
        self.page(ListKind::Resources, cursor).await
    }

    /// One page of `resources/templates/list`.
    pub async fn list_resource_templates(&self, cursor: Option<&str>) -> Result<Page> {
        self.page(ListKind::ResourceTemplates, cursor).await
    }

    /// `resources/read` of one URI.
    pub async fn read_resource(&self, uri: &str) -> Result<Value> {
        self.read_resource_with(uri, RequestOptions::default())
            .await
    }

    /// [`read_resource`](Self::read_resource) with [`RequestOptions`].
    pub async fn read_resource_with(&self, uri: &str, options: RequestOptions) -> Result<Value> {
        self.request_with("resources/read", Some(json!({ "uri": uri })), options)
            .await
    }

    /// `prompts/get` with arguments.
    pub async fn get_prompt(&self, name: &str, arguments: Value) -> Result<Value> {
        self.get_prompt_with(name, arguments, RequestOptions::default())
            .await
    }

    /// [`get_prompt`](Self::get_prompt) with [`RequestOptions`].
    pub async fn get_prompt_with(
        &self,
        name: &str,
        arguments: Value,
        options: RequestOptions,
    ) -> Result<Value> {
        self.request_named("prompts/get", name, arguments, options)
            .await
    }

    /// A request whose params name something and pass it arguments: the
    /// shape `tools/call` and `prompts/get` share.
    async fn request_named(
        &self,
        method: &str,
        name: &str,
        arguments: Value,
        options: RequestOptions,
    ) -> Result<Value> {
        self.request_with(
            method,
            Some(json!({ "name": name, "arguments": arguments })),
            options,
        )
        .await
    }

    /// Ends the session: in-flight calls fail with a "closed" error; the
    /// background tasks (listener, re-discovery) stop and are joined; an
    /// owned server session is DELETEd (bounded by the connector's DELETE
    /// timeout) while our hooks and client are still alive; then the hooks
    /// are removed and an owned client is dropped.
    ///
    /// Idempotent and valid from any state: a second call (or one racing
    /// the first) returns at once with [`Released::already_closed`]. Never
    /// fails: a failed DELETE is reported in [`Released::session`], and
    /// local cleanup runs regardless. If this future is dropped half-way,
    /// the rest is done by the reaper.
    ///
    /// The receiver of [`notifications`](Self::notifications) ends here, and
    /// [`events`](Self::events) end with [`SessionEvent::Closed`].
    ///
    /// Called from one of the session's own tasks (a server-request
    /// handler, answering on the listener's task), it cannot wait for that
    /// task to end: it returns at once with [`Released::deferred`], and the
    /// reaper does the rest (awaited by [`crate::shutdown`]).
    pub async fn close(&self) -> Released {
        // Asked before the engine lets go of its generation.
        let stateless = self.engine.generation().is_some_and(|g| g.is_stateless());
        self.engine.close();
        self.engine.front.close_sink();
        self.engine.front.events.close();
        let stack = lock(&self.stack).take();
        let Some(mut stack) = stack else {
            return Released {
                already_closed: true,
                ..Released::default()
            };
        };
        if stack.runs_this_task() {
            stack.hand_to_reaper();
            return Released {
                deferred: true,
                ..Released::default()
            };
        }
        #[cfg(feature = "otel")]
        self.clock.stop();
        let span = tracing::info_span!("mcp.close", endpoint = %self.origin);
        stack
            .unwind()
            .instrument(span)
            .await
            .of_stateless(stateless)
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        // Requests still waiting for a session fail, the notification
        // receiver ends; the stack's own drop (next) releases the rest.
        #[cfg(feature = "otel")]
        self.clock.stop();
        self.engine.close();
        self.engine.front.close_sink();
        self.engine.front.events.close();
    }
}

impl fmt::Debug for Session {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let info = self.info();
        f.debug_struct("Session")
            .field("protocol_version", &info.protocol_version)
            .field("ownership", &info.ownership)
            .field("client_ownership", &info.client_ownership)
            .field("session_id_issued", &info.session_id_issued)
            .field("tools", &self.catalog().tools.len())
            .field("closed", &self.is_closed())
            .finish()
    }
}
