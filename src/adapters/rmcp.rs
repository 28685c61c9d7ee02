//! An [`rmcp`] client transport (feature `rmcp`): the official Rust SDK
//! drives the protocol, this crate owns what the session acquires.
//!
//! [`ScopedTransport`] implements rmcp's [`Transport<RoleClient>`], so
//! `().serve(transport)` (or `ClientInfo { .. }.serve(transport)`, or
//! [`rmcp::serve_client`]) runs over this crate's Streamable HTTP wire and
//! guard stack. rmcp sends `initialize` itself; the transport recognises it
//! and runs it the way [`Connector::connect`](crate::Connector::connect)
//! does:
//!
//! 1. at [`build`](ScopedTransportBuilder::build): an owned client (unless
//!    one is lent with [`client`](ScopedTransportBuilder::client)), then the
//!    session's header hooks, scoped to this transport's requests only;
//! 2. **before** the `initialize` POST leaves, the server session is pushed
//!    on the stack, and the POST runs as a task the stack holds, so an id
//!    that arrives just before a failure or a cancellation is still
//!    DELETEd;
//! 3. after the answer, the background set: a reader per request (its JSON
//!    or SSE answer, resumed with `Last-Event-ID` when it breaks off) and,
//!    once `notifications/initialized` is accepted, the GET listening
//!    stream.
//!
//! Everything the server sends (responses, notifications, and requests such
//! as `ping`, `roots/list` or `elicitation/create`) reaches rmcp through
//! [`Transport::receive`]; rmcp's answers go out as POSTs carrying the
//! session headers.
//!
//! # Every way out
//!
//! - **rmcp closes the service** ([`RunningService::cancel`], or dropping the
//!   [`RunningService`], whose task then closes the transport): the stack
//!   unwinds in order. Background tasks are stopped and joined, the owned
//!   server session is DELETEd (bounded by
//!   [`delete_timeout`](ScopedTransportBuilder::delete_timeout)) while our
//!   hooks and client still live, the hooks are removed, an owned client is
//!   dropped last. A lent client is left open and untouched. What was
//!   released is reported through [`ReleaseReport`].
//! - **rmcp's `initialize` fails** (an HTTP error, a JSON-RPC error, a
//!   revision this crate does not speak, a failed `notifications/initialized`)
//!   or **the `serve` future is dropped half-way**: rmcp drops the transport
//!   without closing it. The drop releases what needs no waiting at once and
//!   hands the rest (the DELETE, with the hooks and client it needs) to the
//!   reaper, which [`crate::shutdown`] waits for. (rmcp 3.11's own
//!   Streamable HTTP client, as its source reads, DELETEs from a detached
//!   worker task that nothing can wait for, and not at all when the
//!   `initialize` answer fails after its head carried a session id.)
//!
//! # Errors
//!
//! The transport's error type is this crate's [`Error`]: rmcp wraps it (in
//! `ClientInitializeError::TransportError`, `ServiceError::TransportSend`);
//! [`scoped_error`] finds it again, with its status, JSON-RPC code and
//! predicates. A request whose answer fails after its POST was accepted (a
//! stream that ends without the response, a malformed event, resumption
//! exhausted) is resolved with a JSON-RPC error response (code `-32603`)
//! naming the cause, so no rmcp request is left waiting. A JSON-RPC error
//! answered to `initialize` reaches rmcp as such
//! (`ClientInitializeError::JsonRpcError`).
//!
//! # Limits
//!
//! - rmcp must start with `initialize` (`serve`, `serve_client`): a request
//!   sent before it fails with a protocol error. rmcp's `server/discover`
//!   lifecycle is not supported.
//! - An expired session (404 to a request with our session id) is reported
//!   to that request ([`Error::is_session_expired`]), not re-initialized: the
//!   handshake is rmcp's.
//! - `initialize`'s answer is read whole before rmcp sees any of it (so that
//!   its failures are this crate's errors): a server request sent on it
//!   before the response (a `ping`) reaches rmcp with the response, and a
//!   server that waits for its answer first stalls `initialize` until it
//!   gives up.
//! - No `Connector::attach` equivalent: the transport always owns the
//!   session it initializes.
//! - rmcp 3.11 needs Rust 1.88: this feature raises the crate's MSRV to it.
//!
//! ```
//! # #[cfg(feature = "testkit")]
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let server = mcp_scoped_http::testkit::TestServer::start(Default::default());
//! # let url = server.url();
//! use mcp_scoped_http::adapters::rmcp::ScopedTransport;
//! use rmcp::ServiceExt;
//!
//! let mut transport = ScopedTransport::builder(url).bearer("token").build()?;
//! let report = transport.release_report();
//! let client = ().serve(transport).await?; // rmcp's initialize, our stack
//! let tools = client.peer().list_all_tools().await?;
//! # assert!(!tools.is_empty());
//! client.cancel().await?; // tasks, DELETE, hooks, then the owned client
//! let released = report.released().await.expect("closed, not dropped");
//! assert!(released.owned_client_released);
//! # Ok(())
//! # }
//! # #[cfg(not(feature = "testkit"))]
//! # fn main() {}
//! ```
//!
//! [`Transport<RoleClient>`]: rmcp::transport::Transport
//! [`RunningService::cancel`]: rmcp::service::RunningService::cancel
//! [`RunningService`]: rmcp::service::RunningService

use std::borrow::Cow;
use std::collections::HashSet;
use std::fmt;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use rmcp::RoleClient;
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::{DynamicTransportError, Transport};
use serde_json::json;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::client::{HeaderHook, HttpClient, HttpClientBuilder, ScopeId};
use crate::error::{Error, Result};
use crate::jsonrpc::{ErrorObject, Message, Request, RequestId, Response, codes};
use crate::origin::Origin;
use crate::scope::{GuardStack, Released, Spawner};
use crate::session::Resumption;
use crate::transport::{
    MessageStream, Posted, ProtocolVersion, ReplayFilter, StreamableHttp, TransportConfig,
};

/// GET attempts of the listening stream: the first, and reconnects after it
/// ends or fails. A 405 ends it at once.
const LISTEN_ATTEMPTS: usize = 3;
const LISTEN_FIRST_BACKOFF: Duration = Duration::from_millis(100);
const LISTEN_MAX_BACKOFF: Duration = Duration::from_secs(5);

/// Builds a [`ScopedTransport`].
///
/// Defaults: an owned client built with [`HttpClient::builder`]'s defaults;
/// no header hooks; a DELETE timeout of 5 s; the GET listening stream on;
/// [`Resumption::default`]; [`TransportConfig::default`].
#[derive(Debug)]
#[must_use]
pub struct ScopedTransportBuilder {
    endpoint: String,
    client: Option<HttpClient>,
    builder: HttpClientBuilder,
    hooks: Vec<Result<HeaderHook>>,
    delete_timeout: Duration,
    listen: bool,
    resumption: Resumption,
    transport: TransportConfig,
}

impl ScopedTransportBuilder {
    /// Sends through the caller's client, which the transport only borrows:
    /// it is never shut down or changed, and the transport's hooks are
    /// removed from it on every way out.
    pub fn client(mut self, client: HttpClient) -> Self {
        self.client = Some(client);
        self
    }

    /// Settings of the owned client built when no client is lent.
    pub fn client_builder(mut self, builder: HttpClientBuilder) -> Self {
        self.builder = builder;
        self
    }

    /// Adds a header hook for this transport's requests (and no one
    /// else's).
    pub fn hook(mut self, hook: HeaderHook) -> Self {
        self.hooks.push(Ok(hook));
        self
    }

    /// Adds `Authorization: Bearer <token>` to this transport's requests.
    pub fn bearer(mut self, token: &str) -> Self {
        self.hooks.push(HeaderHook::bearer(token));
        self
    }

    /// Adds one fixed header to this transport's requests.
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.hooks.push(HeaderHook::header(name, value));
        self
    }

    /// Bound on the DELETE at close (or in the reaper). Default: 5 s.
    pub fn delete_timeout(mut self, timeout: Duration) -> Self {
        self.delete_timeout = timeout;
        self
    }

    /// Whether to open the GET listening stream once the session is
    /// initialized. Default: true.
    pub fn listen(mut self, listen: bool) -> Self {
        self.listen = listen;
        self
    }

    /// How a broken SSE answer is resumed.
    pub fn resumption(mut self, resumption: Resumption) -> Self {
        self.resumption = resumption;
        self
    }

    /// Limits and policies of the wire.
    pub fn transport_config(mut self, config: TransportConfig) -> Self {
        self.transport = config;
        self
    }

    /// Builds the transport: the owned client (if none is lent) and the
    /// hooks are acquired now, on the transport's guard stack. Nothing is
    /// sent until rmcp sends `initialize`. Needs no runtime.
    ///
    /// On error (an invalid endpoint or header) whatever was acquired is
    /// released before it returns.
    pub fn build(self) -> Result<ScopedTransport> {
        let _origin = Origin::parse(&self.endpoint)
            .ok_or_else(|| Error::builder("the endpoint must be an absolute http or https URL"))?;
        let counters = match &self.client {
            Some(client) => client.counters().clone(),
            None => Default::default(),
        };
        // If a step below fails, dropping the stack releases what is on it
        // (no DELETE is owed yet).
        let mut stack = GuardStack::new(counters);
        let client = match self.client {
            Some(client) => client,
            None => {
                let client = self.builder.build()?;
                stack.set_counters(client.counters().clone());
                stack.push_owned_client(client.clone());
                client
            }
        };
        let scope = ScopeId::next();
        for hook in self.hooks {
            stack.push_hook(client.add_session_hook(&self.endpoint, scope, hook?)?);
        }
        let wire = Arc::new(
            StreamableHttp::new(client, &self.endpoint)?
                .with_config(self.transport.clone())
                .with_scope(scope),
        );
        stack.push_transport(wire.clone());

        // Room for everything `initialize` may bring before its response,
        // which is queued before rmcp reads any of it.
        let capacity = self
            .transport
            .max_preceding_messages
            .saturating_add(1)
            .max(64);
        let (tx, incoming) = mpsc::channel(capacity);
        let (report, report_receiver) = oneshot::channel();
        Ok(ScopedTransport {
            stack: Arc::new(tokio::sync::Mutex::new(Some(stack))),
            ctx: Arc::new(Ctx {
                wire: Mutex::new(Some(wire)),
                tx,
                spawner: OnceLock::new(),
                closing: CancellationToken::new(),
                initialize_sent: std::sync::atomic::AtomicBool::new(false),
                pending: Mutex::default(),
                delete_timeout: self.delete_timeout,
                listen: self.listen,
                resumption: self.resumption,
            }),
            incoming,
            report: Some(report),
            report_receiver: Some(report_receiver),
        })
    }
}

/// An rmcp client transport over Streamable HTTP, with this crate's guard
/// stack under it: see the [module docs](self).
///
/// Move it into `serve` and keep a [`ReleaseReport`] (taken before) to learn
/// what closing released.
pub struct ScopedTransport {
    /// The guard stack; shared only with the in-flight `initialize` send,
    /// never with background tasks (they would keep it alive).
    stack: Arc<tokio::sync::Mutex<Option<GuardStack>>>,
    ctx: Arc<Ctx>,
    incoming: mpsc::Receiver<Message>,
    report: Option<oneshot::Sender<Released>>,
    report_receiver: Option<oneshot::Receiver<Released>>,
}

/// What the transport's sends and its background tasks share.
struct Ctx {
    /// The wire, until close; taken first so that nothing new starts.
    wire: Mutex<Option<Arc<StreamableHttp>>>,
    /// Messages for rmcp's `receive`.
    tx: mpsc::Sender<Message>,
    /// The session's background set, once `initialize` was answered.
    spawner: OnceLock<Spawner>,
    /// Cancelled when the transport closes or is dropped.
    closing: CancellationToken,
    initialize_sent: std::sync::atomic::AtomicBool,
    /// Requests sent and not yet answered: a response is delivered once,
    /// from whichever stream brings it first.
    pending: Mutex<HashSet<RequestId>>,
    delete_timeout: Duration,
    listen: bool,
    resumption: Resumption,
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Each guards a value replaced whole: a panic elsewhere cannot leave it
    // half-changed.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl ScopedTransport {
    /// A builder for a transport to `endpoint`, an `http` or `https` URL.
    pub fn builder(endpoint: impl Into<String>) -> ScopedTransportBuilder {
        ScopedTransportBuilder {
            endpoint: endpoint.into(),
            client: None,
            builder: HttpClientBuilder::new(),
            hooks: Vec::new(),
            delete_timeout: Duration::from_secs(5),
            listen: true,
            resumption: Resumption::default(),
            transport: TransportConfig::default(),
        }
    }

    /// A transport to `endpoint` with the defaults (an owned client, no
    /// hooks).
    pub fn new(endpoint: impl Into<String>) -> Result<ScopedTransport> {
        ScopedTransport::builder(endpoint).build()
    }

    /// The report of what closing this transport released. It can be taken
    /// once (later calls get a report that resolves to `None`); take it
    /// before moving the transport into `serve`.
    pub fn release_report(&mut self) -> ReleaseReport {
        ReleaseReport {
            receiver: self.report_receiver.take(),
        }
    }

    /// The session id the server issued, once `initialize` was answered. A
    /// credential: see [`SessionId`](crate::transport::SessionId).
    pub fn session_id(&self) -> Option<crate::transport::SessionId> {
        self.ctx.wire().ok()?.session_id()
    }
}

/// What closing a [`ScopedTransport`] released, once it has.
#[derive(Debug)]
#[must_use]
pub struct ReleaseReport {
    receiver: Option<oneshot::Receiver<Released>>,
}

impl ReleaseReport {
    /// Waits until the transport is closed or dropped. `Some` when rmcp
    /// closed it (the orderly path: the report of the unwind); `None` when
    /// it was dropped without a close (a failed or cancelled `initialize`,
    /// or a runtime shutting down), in which case the release was done on
    /// drop and by the reaper (see [`crate::shutdown`]), or when the report
    /// was already taken.
    pub async fn released(self) -> Option<Released> {
        self.receiver?.await.ok()
    }
}

impl Ctx {
    fn wire(&self) -> Result<Arc<StreamableHttp>> {
        if self.closing.is_cancelled() {
            return Err(Error::closed());
        }
        lock(&self.wire).clone().ok_or_else(Error::closed)
    }

    fn spawner(&self) -> Result<&Spawner> {
        self.spawner.get().ok_or_else(|| {
            Error::protocol(
                "nothing but `initialize` may be sent before `initialize` is answered: \
                 start the session with rmcp's `serve`",
            )
        })
    }

    /// Hands a message to rmcp. A response is handed over only while its
    /// request is pending (once), so a duplicate never reaches rmcp.
    async fn deliver(&self, message: Message) {
        if let Message::Response(Response { id: Some(id), .. }) = &message {
            if !lock(&self.pending).remove(id) {
                tracing::debug!(%id, "dropped a response to no pending request");
                return;
            }
        }
        if self.tx.send(message).await.is_err() {
            tracing::debug!("dropped a server message: the transport is gone");
        }
    }

    /// Resolves a pending request with a JSON-RPC error naming `cause`.
    async fn fail(&self, id: RequestId, cause: &Error) {
        let response = Message::Response(Response {
            id: Some(id),
            outcome: Err(ErrorObject {
                code: codes::INTERNAL_ERROR,
                message: cause.to_string(),
                data: Some(json!({
                    "transport": "mcp-scoped-http",
                    "status": cause.status().map(|s| s.as_u16()),
                })),
            }),
        });
        self.deliver(response).await;
    }

    /// POSTs a notification or a response; after `notifications/initialized`
    /// starts the GET listener.
    async fn post_accepted(self: Arc<Self>, message: Message) -> Result<()> {
        let wire = self.wire()?;
        let initialized = message.method() == Some("notifications/initialized");
        tokio::select! {
            biased;
            _ = self.closing.cancelled() => return Err(Error::closed()),
            posted = wire.post(&message) => { posted?; }
        }
        if initialized && self.listen {
            if let Ok(spawner) = self.spawner() {
                let ctx = self.clone();
                spawner.spawn(move |cancel| async move {
                    tokio::select! {
                        _ = cancel.cancelled() => {}
                        _ = ctx.listen(&wire) => {}
                    }
                });
            }
        }
        Ok(())
    }

    /// POSTs a request up to its answer's head; the answer is read by a
    /// background task.
    async fn request(self: Arc<Self>, request: Request) -> Result<()> {
        let spawner = self.spawner()?.clone();
        let wire = self.wire()?;
        let id = request.id.clone();
        lock(&self.pending).insert(id.clone());
        // Unregistered if the POST fails or this future is dropped.
        let registered = scopeguard::guard(id.clone(), |id| {
            lock(&self.pending).remove(&id);
        });
        let message = Message::Request(request);
        let stream = tokio::select! {
            biased;
            _ = self.closing.cancelled() => return Err(Error::closed()),
            posted = wire.post(&message) => match posted? {
                Posted::Stream(stream) => stream,
                Posted::Accepted => unreachable!("a request is never merely accepted"),
            },
        };
        let ctx = self.clone();
        let reader_id = id.clone();
        let spawned = spawner.spawn(move |cancel| async move {
            tokio::select! {
                _ = cancel.cancelled() => {}
                _ = ctx.read_answer(&wire, stream, reader_id) => {}
            }
        });
        if !spawned {
            return Err(Error::closed());
        }
        scopeguard::ScopeGuard::into_inner(registered);
        Ok(())
    }

    /// Reads one request's answer, handing every message to rmcp; resumes a
    /// broken SSE answer with `Last-Event-ID`; resolves the request with an
    /// error if its response never comes.
    async fn read_answer(&self, wire: &StreamableHttp, mut stream: MessageStream, id: RequestId) {
        let mut seen = ReplayFilter::new();
        let mut attempts = 0;
        loop {
            let mut broke = None;
            while let Some(item) = stream.next().await {
                let message = match item {
                    Ok(message) => message,
                    // A dropped connection is not a cancellation: resume.
                    Err(error) if error.is_transport() => {
                        broke = Some(error);
                        break;
                    }
                    Err(error) => return self.fail(id, &error).await,
                };
                if let Some(key) = stream.replay_key() {
                    if !seen.first(key) {
                        continue;
                    }
                }
                // An error about a message the server could not read, on
                // this request's own answer: this request's error (rmcp
                // drops an id-less error).
                let message = match message {
                    Message::Response(Response { id: None, outcome }) => {
                        Message::Response(Response {
                            id: Some(id.clone()),
                            outcome: Err(outcome.err().unwrap_or_else(|| ErrorObject {
                                code: codes::INTERNAL_ERROR,
                                message: "a response without an id".into(),
                                data: None,
                            })),
                        })
                    }
                    other => other,
                };
                self.deliver(message).await;
                if !lock(&self.pending).contains(&id) {
                    // Answered (here, or on another stream).
                    return;
                }
            }
            let cause = broke.unwrap_or_else(|| {
                Error::protocol(format!(
                    "the answer ended without the response to request {id}"
                ))
            });
            let Some(last_event_id) = stream.last_event_id().map(str::to_owned) else {
                return self.fail(id, &cause).await;
            };
            if attempts == self.resumption.max_attempts {
                let error = Error::protocol(format!(
                    "the answer to request {id} broke off; gave up after {attempts} resumptions"
                ))
                .with_cleanup(vec![cause]);
                return self.fail(id, &error).await;
            }
            attempts += 1;
            let wait = stream
                .retry()
                .unwrap_or(self.resumption.first_backoff * 2u32.saturating_pow(attempts as u32 - 1))
                .min(self.resumption.max_wait);
            tracing::debug!(%id, attempt = attempts, ?wait, "resuming a broken answer");
            tokio::time::sleep(wait).await;
            stream = match wire.open_get_stream(Some(&last_event_id)).await {
                Ok(Some(resumed)) => resumed,
                Ok(None) => {
                    let error = Error::protocol(format!(
                        "the answer to request {id} broke off and cannot be resumed: \
                         the server has no GET stream (405)"
                    ));
                    return self.fail(id, &error).await;
                }
                Err(error) => return self.fail(id, &error).await,
            };
        }
    }

    /// Reads the GET stream until the server has none (405), the attempts
    /// run out, or the transport closes.
    async fn listen(&self, wire: &StreamableHttp) {
        let mut last_event_id: Option<String> = None;
        let mut backoff = LISTEN_FIRST_BACKOFF;
        for attempt in 1..=LISTEN_ATTEMPTS {
            match wire.open_get_stream(last_event_id.as_deref()).await {
                Ok(None) => {
                    tracing::debug!("the server has no GET stream (405)");
                    return;
                }
                Ok(Some(mut stream)) => {
                    while let Some(message) = stream.next().await {
                        match message {
                            Ok(message) => self.deliver(message).await,
                            Err(error) => {
                                tracing::debug!(%error, "the GET stream failed");
                                break;
                            }
                        }
                    }
                    last_event_id = stream.last_event_id().map(str::to_owned);
                    if let Some(retry) = stream.retry() {
                        backoff = retry.min(LISTEN_MAX_BACKOFF);
                    }
                }
                Err(error) => tracing::debug!(%error, attempt, "opening the GET stream failed"),
            }
            if attempt < LISTEN_ATTEMPTS {
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(LISTEN_MAX_BACKOFF);
            }
        }
        tracing::debug!("gave up on the GET stream after {LISTEN_ATTEMPTS} attempts");
    }
}

/// Sends `initialize` through the guard stack: the server session is pushed
/// before the POST leaves, and the POST runs as a task the stack holds.
async fn initialize(
    ctx: Arc<Ctx>,
    stack: Arc<tokio::sync::Mutex<Option<GuardStack>>>,
    request: Request,
) -> Result<()> {
    use std::sync::atomic::Ordering;
    if ctx.initialize_sent.swap(true, Ordering::AcqRel) {
        return Err(Error::protocol(
            "`initialize` was already sent on this transport: one transport, one session",
        ));
    }
    let wire = ctx.wire()?;
    let mut guard = tokio::select! {
        biased;
        _ = ctx.closing.cancelled() => return Err(Error::closed()),
        guard = stack.lock_owned() => guard,
    };
    let stack = guard.as_mut().ok_or_else(Error::closed)?;
    // Before the first await that can create it: a session id that arrives
    // just before a cancellation is still DELETEd.
    stack.push_server_session(wire.clone(), ctx.delete_timeout);
    let id = request.id.clone();
    let exchange = tokio::select! {
        biased;
        _ = ctx.closing.cancelled() => return Err(Error::closed()),
        exchange = stack.initialize(request).instrument(tracing::debug_span!("mcp.initialize")) => exchange,
    };
    let exchange = match exchange {
        Ok(exchange) => exchange,
        // The server's answer, not a failure of the wire: rmcp reports it
        // as a JSON-RPC error. The session, if one was created, is ours to
        // DELETE when rmcp drops the transport.
        Err(error) if error.is_rpc() && error.status().is_none() => {
            drop(guard);
            let rpc = error
                .rpc_error()
                .cloned()
                .expect("an rpc error has its object");
            lock(&ctx.pending).insert(id.clone());
            ctx.deliver(Message::Response(Response {
                id: Some(id),
                outcome: Err(rpc),
            }))
            .await;
            return Ok(());
        }
        Err(error) => return Err(error),
    };
    let version: ProtocolVersion = exchange.result["protocolVersion"]
        .as_str()
        .ok_or_else(|| Error::protocol("the initialize result has no protocolVersion"))?
        .parse()?;
    wire.set_protocol_version(version);
    // Above the server session: stopped before the DELETE.
    let spawner = stack.push_background();
    let _ = ctx.spawner.set(spawner);
    drop(guard);
    for message in exchange.preceding {
        ctx.deliver(message).await;
    }
    lock(&ctx.pending).insert(id.clone());
    ctx.deliver(Message::Response(Response {
        id: Some(id),
        outcome: Ok(exchange.result),
    }))
    .await;
    Ok(())
}

/// rmcp's message as ours.
fn from_rmcp(message: TxJsonRpcMessage<RoleClient>) -> Result<Message> {
    serde_json::to_value(&message)
        .and_then(Message::from_value)
        .map_err(|e| Error::protocol("rmcp sent a message that is not JSON-RPC").with_source(e))
}

/// Ours as rmcp's. A response rmcp cannot read still resolves its request,
/// as an error.
fn to_rmcp(message: Message) -> Option<RxJsonRpcMessage<RoleClient>> {
    let value = serde_json::to_value(&message).ok()?;
    match serde_json::from_value(value) {
        Ok(message) => Some(message),
        Err(error) => match message {
            Message::Response(Response { id: Some(id), .. }) => {
                let fallback = Message::Response(Response {
                    id: Some(id),
                    outcome: Err(ErrorObject {
                        code: codes::INTERNAL_ERROR,
                        message: format!("rmcp could not read the response: {error}"),
                        data: None,
                    }),
                });
                serde_json::to_value(&fallback)
                    .ok()
                    .and_then(|v| serde_json::from_value(v).ok())
            }
            other => {
                tracing::debug!(method = ?other.method(), %error, "dropped a server message rmcp cannot read");
                None
            }
        },
    }
}

impl Transport<RoleClient> for ScopedTransport {
    type Error = Error;

    fn name() -> Cow<'static, str> {
        Cow::Borrowed("mcp-scoped-http")
    }

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<()>> + Send + 'static {
        let message = from_rmcp(item);
        let ctx = self.ctx.clone();
        // Only `initialize` needs the stack; nothing else may keep it alive.
        let stack = matches!(&message, Ok(Message::Request(r)) if r.method == "initialize")
            .then(|| self.stack.clone());
        async move {
            match message? {
                Message::Request(request) => match stack {
                    Some(stack) => initialize(ctx, stack, request).await,
                    None => ctx.request(request).await,
                },
                other => ctx.post_accepted(other).await,
            }
        }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        loop {
            let message = tokio::select! {
                biased;
                _ = self.ctx.closing.cancelled() => return None,
                message = self.incoming.recv() => message?,
            };
            if let Some(message) = to_rmcp(message) {
                return Some(message);
            }
        }
    }

    /// Unwinds the guard stack: tasks, the DELETE, hooks, the owned client.
    /// Idempotent; never fails (a failed DELETE is in the
    /// [`ReleaseReport`]). If this future is dropped half-way, the rest is
    /// done by the reaper.
    async fn close(&mut self) -> Result<()> {
        self.ctx.closing.cancel();
        drop(lock(&self.ctx.wire).take());
        let stack = self.stack.lock().await.take();
        if let Some(mut stack) = stack {
            let released = stack
                .unwind()
                .instrument(tracing::info_span!("mcp.close"))
                .await;
            tracing::debug!(?released, "the rmcp transport closed");
            if let Some(report) = self.report.take() {
                let _ = report.send(released);
            }
        }
        Ok(())
    }
}

impl Drop for ScopedTransport {
    fn drop(&mut self) {
        // Nothing new starts; the stack goes with its last handle (here, or
        // an `initialize` send rmcp dropped with us), handing the DELETE to
        // the reaper.
        self.ctx.closing.cancel();
        drop(lock(&self.ctx.wire).take());
    }
}

impl fmt::Debug for ScopedTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScopedTransport")
            .field("initialized", &self.ctx.spawner.get().is_some())
            .field("closed", &self.ctx.closing.is_cancelled())
            .finish_non_exhaustive()
    }
}

/// This crate's [`Error`] inside an rmcp error, if it came from a
/// [`ScopedTransport`]: in `ClientInitializeError::TransportError`, in
/// `ServiceError::TransportSend`, or anywhere down a source chain.
pub fn scoped_error<'a>(error: &'a (dyn std::error::Error + 'static)) -> Option<&'a Error> {
    if let Some(rmcp::service::ClientInitializeError::TransportError { error, .. }) =
        error.downcast_ref::<rmcp::service::ClientInitializeError>()
    {
        return scoped_error(error);
    }
    let mut current = Some(error);
    while let Some(error) = current {
        if let Some(ours) = error.downcast_ref::<Error>() {
            return Some(ours);
        }
        if let Some(dynamic) = error.downcast_ref::<DynamicTransportError>() {
            if let Some(ours) = dynamic.error.downcast_ref::<Error>() {
                return Some(ours);
            }
        }
        current = error.source();
    }
    None
}
