//! The connector: open, initialize, initialized, listen, discover, with the
//! guard stack under every step.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::sync::mpsc;
use tracing::Instrument;

use super::discovery::{Discovery, Lister, discover};
use super::era::{self, Plan, subscription_filter};
use super::front::SessionFront;
use super::handlers::Handlers;
use super::shared::{PhaseCell, SERVER_INFO_META};
use super::{Session, SessionInfo, SessionOwnership, Timings};
use crate::budget::{Account, MemoryPool};
use crate::deadline::Deadline;
use crate::engine::{Endpoint, Engine, Era, LISTEN_BACKOFF, Resumption, Settings};
use crate::error::{ConnectPhase, Error, Result};
use crate::http_client::{
    ClientOwnership, HeaderHook, HttpClient, HttpClientBuilder, RevisionMemory,
};
use crate::jsonrpc::{ErrorObject, Message};
use crate::scope::{GuardStack, Reaper, cleanup_errors};
use crate::transport::{ProtocolVersion, SessionId, TransportConfig, TransportKind, Wire};

/// Room for server messages waiting to be taken from
/// [`Session::notifications`], in count; in bytes, it is
/// [`MemoryBudget::max_queued_bytes`](crate::MemoryBudget::max_queued_bytes).
/// More are dropped.
const NOTIFICATION_BUFFER: usize = 256;

/// The connect timeout when none is set, unless the request timeout is
/// longer (an interactive OAuth flow may run inside the connect).
const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(60);

/// Connects to one MCP server and hands back a [`Session`] holding its
/// catalog, or an error with nothing left behind.
///
/// Configure it once and connect as often as needed: [`connect`] takes
/// `&self`, and a `Connector` is cheap to clone (hooks and handlers are
/// shared, not rebuilt). Each connect gets its own guard stack, and, with
/// no client lent, its own owned client, dropped with the session.
///
/// Defaults: an owned client built with [`HttpClient::builder`]'s defaults;
/// no header hooks; the GET listening stream on for a session we initialize
/// and off for an attached one; [`Discovery::default`] (everything the
/// server declares, up to 100 pages per list); a DELETE timeout of 5 s; a
/// connect timeout of 60 s (or the request timeout, if longer: see
/// [`connect_timeout`](Self::connect_timeout)); a request timeout of 60 s,
/// which also bounds each exchange of a connect; [`Resumption::default`]; no
/// handlers for server requests (only `ping` is answered; the others get
/// "method not found", and no client capabilities are declared); the
/// transport's [`TransportConfig::default`]; this crate's name and version
/// as `clientInfo`.
///
/// # Cancellation
///
/// The `connect` future may be dropped at any `.await`: what was acquired is
/// released at once (tasks aborted, hooks removed, an owned client dropped),
/// and a server session already created is DELETEd by the reaper (see
/// [`crate::shutdown`]).
///
/// [`connect`]: Connector::connect
#[derive(Clone)]
#[must_use]
pub struct Connector {
    // Shared by clones and by connects in flight; a setter on a shared
    // connector copies it first.
    config: Arc<Config>,
}

#[derive(Clone)]
struct Config {
    endpoint: Endpoint,
    attach: Option<(SessionId, ProtocolVersion)>,
    pinned: Option<ProtocolVersion>,
    /// What each endpoint speaks, for the owned clients this connector
    /// builds (shared by its clones; a lent client keeps its own).
    revisions: Arc<RevisionMemory>,
    listen: Option<bool>,
    listen_backoff: (Duration, Duration),
    discovery: Discovery,
    delete_timeout: Duration,
    connect_timeout: Option<Duration>,
    request_timeout: Option<Duration>,
    resumption: Resumption,
    handlers: Handlers,
    client_info: Value,
    /// The least severe log level asked of the server, if any.
    log_level: Option<Arc<str>>,
    /// A pool each session's account is a child of, if any.
    memory_pool: Option<MemoryPool>,
    /// Where its sessions' reaps are counted: `None` for the process's
    /// (`Reaper::global`).
    reaper: Option<Reaper>,
    /// A stdio server to start instead of an HTTP endpoint.
    #[cfg(feature = "stdio")]
    command: Option<crate::stdio::StdioCommand>,
}

impl fmt::Debug for Connector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let config = &self.config;
        f.debug_struct("Connector")
            .field("endpoint", &config.endpoint)
            .field(
                "attach",
                &config.attach.as_ref().map(|(_, version)| version),
            )
            .field("protocol_version", &config.pinned)
            .field("listen", &config.listen)
            .field("listen_backoff", &config.listen_backoff)
            .field("discovery", &config.discovery)
            .field("delete_timeout", &config.delete_timeout)
            .field("connect_timeout", &config.connect_timeout)
            .field("request_timeout", &config.request_timeout)
            .field("resumption", &config.resumption)
            .field("handlers", &config.handlers)
            .field("log_level", &config.log_level)
            .finish_non_exhaustive()
    }
}

impl Connector {
    fn config_mut(&mut self) -> &mut Config {
        Arc::make_mut(&mut self.config)
    }

    /// A connector for `endpoint`, an `http` or `https` URL.
    pub fn new(endpoint: impl Into<String>) -> Self {
        let config = Config {
            endpoint: Endpoint::new(endpoint.into()),
            attach: None,
            pinned: None,
            revisions: Arc::default(),
            listen: None,
            listen_backoff: LISTEN_BACKOFF,
            discovery: Discovery::default(),
            delete_timeout: Duration::from_secs(5),
            connect_timeout: None,
            request_timeout: Some(Duration::from_secs(60)),
            resumption: Resumption::default(),
            handlers: Handlers::default(),
            client_info: json!({
                "name": env!("CARGO_PKG_NAME"),
                "version": env!("CARGO_PKG_VERSION"),
            }),
            log_level: None,
            memory_pool: None,
            reaper: None,
            #[cfg(feature = "stdio")]
            command: None,
        };
        Connector {
            config: Arc::new(config),
        }
    }

    /// A connector for a stdio server: each connect starts `command` as a
    /// child process (its whole tree released with the session; see
    /// [`crate::stdio`]) and speaks MCP over its stdin and stdout.
    ///
    /// What is HTTP's only (a lent client, hooks, headers, a bearer,
    /// OAuth, an attached session, the GET listening stream) does not
    /// apply: a connect with any of them set fails with
    /// [`Error::is_builder`](crate::Error::is_builder). Everything else
    /// (timeouts, discovery, handlers, the memory budget, the transport's
    /// limits) applies as it does over HTTP.
    #[cfg(feature = "stdio")]
    pub fn stdio(command: crate::stdio::StdioCommand) -> Self {
        let mut connector = Connector::new(String::new());
        connector.config_mut().command = Some(command);
        connector
    }

    /// The stdio server this connector starts, if it is one.
    #[cfg(feature = "stdio")]
    pub fn stdio_command(&self) -> Option<&crate::stdio::StdioCommand> {
        self.config.command.as_ref()
    }

    /// Sends through the caller's client, which the session only borrows:
    /// it is never shut down or changed, and the session's hooks are
    /// removed from it on every way out.
    pub fn client(mut self, client: HttpClient) -> Self {
        self.config_mut().endpoint.client = Some(client);
        self
    }

    /// Draws every byte its sessions hold from `pool` too, on top of each
    /// session's own [`MemoryBudget`](crate::MemoryBudget), all or nothing:
    /// sessions of many connectors bounded together (a fleet's are so).
    /// Default: none.
    pub fn memory_pool(mut self, pool: MemoryPool) -> Self {
        self.config_mut().memory_pool = Some(pool);
        self
    }

    /// Counts the reaps of its sessions (a DELETE and a process tree's
    /// end, run in the background after a drop) on `reaper`, which its
    /// owner drains ([`Reaper::drain`]). Default: the process's
    /// ([`Reaper::global`], drained by [`shutdown`](crate::shutdown)).
    pub fn reaper(mut self, reaper: Reaper) -> Self {
        self.config_mut().reaper = Some(reaper);
        self
    }

    /// Settings of the owned client built when no client is lent.
    pub fn client_builder(mut self, builder: HttpClientBuilder) -> Self {
        self.config_mut().endpoint.builder = builder;
        self
    }

    /// Authorizes with OAuth 2.1 (feature `oauth`): a `401` (or a `403`
    /// `insufficient_scope`) to any request runs the flow, and the request
    /// is sent again. See [`oauth`](crate::oauth). Default: none.
    #[cfg(feature = "oauth")]
    pub fn oauth(mut self, oauth: crate::oauth::OAuth) -> Self {
        self.config_mut().endpoint.oauth = Some(oauth);
        self
    }

    /// Adds a header hook for this session's requests (and no one else's).
    pub fn hook(mut self, hook: HeaderHook) -> Self {
        self.config_mut().endpoint.push_hook(Ok(hook));
        self
    }

    /// Adds `Authorization: Bearer <token>` to this session's requests.
    pub fn bearer(mut self, token: &str) -> Self {
        self.config_mut()
            .endpoint
            .push_hook(HeaderHook::bearer(token));
        self
    }

    /// Adds one fixed header to this session's requests.
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.config_mut()
            .endpoint
            .push_hook(HeaderHook::header(name, value));
        self
    }

    /// Attaches to a session the caller owns instead of initializing one:
    /// no `initialize`, no `notifications/initialized`, and never a DELETE;
    /// on failure the session is left exactly as it was.
    pub fn attach(mut self, session_id: SessionId, version: ProtocolVersion) -> Self {
        self.config_mut().attach = Some((session_id, version));
        self
    }

    /// Speaks `version` without probing: 2026-07-28 starts with
    /// `server/discover`, a 2025 revision with `initialize` proposing it,
    /// 2024-11-05 with the HTTP+SSE transport's GET. Without a pin (the
    /// default) the era is detected: a modern request first, then
    /// `initialize`, then HTTP+SSE, and the verdict is remembered by the
    /// HTTP client for the endpoint (see [`HttpClient::known_revision`]),
    /// so later sessions through the same client skip the probe.
    ///
    /// A pinned connect never falls back to another revision, nor follows
    /// a refusal that names one; its opening exchange waits as long as the
    /// connect may (see [`connect_timeout`](Self::connect_timeout)).
    pub fn protocol_version(mut self, version: ProtocolVersion) -> Self {
        self.config_mut().pinned = Some(version);
        self
    }

    /// Whether to listen for server messages: the GET stream (2025), or
    /// `subscriptions/listen` for the list changes the server declares
    /// (2026-07-28).
    pub fn listen(mut self, listen: bool) -> Self {
        self.config_mut().listen = Some(listen);
        self
    }

    /// The backoff between two attempts to listen, from `first` doubling
    /// (per attempt that brings no new message) up to `max`, each wait
    /// jittered over the upper half of its step and counted from when the
    /// attempt began. Listening goes on for the session's life: see
    /// [`Session::close`](crate::Session::close) and the crate's listening
    /// policy in the guide's limits chapter ([`crate::guide::limits`]). Default: 500 ms to 30 s.
    pub fn listen_backoff(mut self, first: Duration, max: Duration) -> Self {
        self.config_mut().listen_backoff = (first, max);
        self
    }

    /// What to discover.
    pub fn discovery(mut self, discovery: Discovery) -> Self {
        self.config_mut().discovery = discovery;
        self
    }

    /// Bound on ending a server session at close (or in the reaper): the
    /// DELETE, and the wait for an `initialize` still in flight, together.
    /// Default: 5 s.
    pub fn delete_timeout(mut self, timeout: Duration) -> Self {
        self.config_mut().delete_timeout = timeout;
        self
    }

    /// A bound on the whole of `connect`, from the first byte to the end of
    /// discovery: every step of it (the probe, `initialize`,
    /// `notifications/initialized`, the HTTP+SSE stream and its `endpoint`
    /// event, each discovery page) shares this one deadline, and each
    /// exchange is also bounded by the request timeout; none by anything
    /// shorter (a stdio server's start counts against this deadline, so
    /// one slow to start connects late rather than failing). When it passes,
    /// connect unwinds as on any failure (a session already created is
    /// DELETEd before it returns) and fails with [`Error::is_timeout`],
    /// naming the step it was in ([`Error::connect_phase`]).
    ///
    /// Default: 60 s, or the request timeout when that is longer, so that
    /// an interactive OAuth flow given a long request timeout still fits;
    /// never unbounded, not even with
    /// [`no_request_timeout`](Self::no_request_timeout). (The caller may
    /// also drop the future; then the reaper does the DELETE.)
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.config_mut().connect_timeout = Some(timeout);
        self
    }

    /// The default timeout of a session's requests and notifications; it
    /// also bounds each exchange of a connect (within the
    /// [`connect_timeout`](Self::connect_timeout)), opening a new session
    /// when one expires, each page of a re-discovery, and each exchange no
    /// caller times (the answer to a server request, the opening of a
    /// listening stream). Default: 60 s.
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.config_mut().request_timeout = Some(timeout);
        self
    }

    /// No default timeout for requests (see
    /// [`request_timeout`](Self::request_timeout)); per-request timeouts
    /// still apply. A connect, the answers to server requests and the
    /// opening of listening streams stay bounded (by 60 s, and a connect,
    /// as the opening of a new session when one expires, by the
    /// [`connect_timeout`](Self::connect_timeout)).
    pub fn no_request_timeout(mut self) -> Self {
        self.config_mut().request_timeout = None;
        self
    }

    /// How a broken SSE answer is resumed.
    pub fn resumption(mut self, resumption: Resumption) -> Self {
        self.config_mut().resumption = resumption;
        self
    }

    /// Answers `roots/list` with these roots (each `{"uri": ..., "name":
    /// ...}`), and declares the `roots` capability.
    pub fn roots(mut self, roots: Vec<Value>) -> Self {
        let roots = Value::Array(roots);
        self.config_mut().handlers.set_roots(move |_| {
            let roots = roots.clone();
            async move { Ok(json!({ "roots": roots })) }
        });
        self
    }

    /// Answers `roots/list` with `handler` (given the request's params,
    /// returning the result, `{"roots": [...]}`, or a JSON-RPC error), and
    /// declares the `roots` capability with `listChanged`: the caller
    /// tells the server when its answer changes, with
    /// `notifications/roots/list_changed` ([`Session::notify`]) before
    /// 2026-07-28 (that revision asks for roots with each request that
    /// needs them, and has no such notification).
    pub fn on_roots<F, Fut>(mut self, handler: F) -> Self
    where
        F: Fn(Value) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = std::result::Result<Value, ErrorObject>> + Send + 'static,
    {
        self.config_mut().handlers.set_roots_changing(handler);
        self
    }

    /// Whether a server request of `method` is answered by a handler set
    /// on this connector ([`roots`](Self::roots),
    /// [`on_roots`](Self::on_roots), [`on_elicitation`](Self::on_elicitation),
    /// [`on_sampling`](Self::on_sampling)); `ping` is always answered.
    pub fn handles(&self, method: &str) -> bool {
        self.config.handlers.handles(method)
    }

    /// Answers `elicitation/create` with `handler` (given the request's
    /// params, returning the result or a JSON-RPC error), and declares the
    /// `elicitation` capability.
    pub fn on_elicitation<F, Fut>(mut self, handler: F) -> Self
    where
        F: Fn(Value) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = std::result::Result<Value, ErrorObject>> + Send + 'static,
    {
        self.config_mut().handlers.set_elicitation(handler);
        self
    }

    /// Answers `sampling/createMessage` with `handler`, and declares the
    /// `sampling` capability.
    pub fn on_sampling<F, Fut>(mut self, handler: F) -> Self
    where
        F: Fn(Value) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = std::result::Result<Value, ErrorObject>> + Send + 'static,
    {
        self.config_mut().handlers.set_sampling(handler);
        self
    }

    /// Asks the server for log messages (`notifications/message`, on
    /// [`Session::notifications`]) of `level` and above (`"debug"`,
    /// `"info"`, `"notice"`, `"warning"`, `"error"`, `"critical"`,
    /// `"alert"`, `"emergency"`), as each revision wants it: in 2026-07-28,
    /// in every request's `_meta` (`io.modelcontextprotocol/logLevel`;
    /// without it, such a server sends none); before, with
    /// `logging/setLevel` once connected, within the connect's time, when
    /// the server offers `logging` (one that does not is not asked, and a
    /// refusal is logged at debug level, never a failed connect). Default:
    /// none asked (a 2025 server's own choice; no messages in 2026-07-28).
    /// A level none of these fails the connect ([`Error::is_builder`]).
    pub fn log_level(mut self, level: impl Into<String>) -> Self {
        self.config_mut().log_level = Some(Arc::from(level.into()));
        self
    }

    /// Limits and policies of the wire.
    pub fn transport_config(mut self, config: TransportConfig) -> Self {
        self.config_mut().endpoint.transport = config;
        self
    }

    /// The `clientInfo` sent in `initialize`. Default: this crate's name and
    /// version.
    pub fn client_info(mut self, name: &str, version: &str) -> Self {
        self.config_mut().client_info = json!({ "name": name, "version": version });
        self
    }

    /// Runs the whole lifecycle: see the type's docs. The future owns what
    /// it needs (the connector may be dropped or changed meanwhile).
    pub fn connect(&self) -> impl Future<Output = Result<Session>> + Send + use<> {
        let config = self.config.clone();
        async move { config.connect().await }
    }
}

/// The log levels [`Connector::log_level`] takes, least severe first, as
/// the specification names them (RFC 5424's): for a host that reads them
/// from its own configuration and checks them there.
pub const LOG_LEVELS: [&str; 8] = [
    "debug",
    "info",
    "notice",
    "warning",
    "error",
    "critical",
    "alert",
    "emergency",
];

/// How long a 2025 server's `logging/setLevel` may hold up a connect, at
/// most: the session is ready without it.
const SET_LEVEL_WAIT: Duration = Duration::from_secs(5);

/// `logging/setLevel` to a server of a 2025 revision that offers logging;
/// nothing otherwise (2026-07-28 carries the level in each request).
async fn ask_log_level(session: &Session, level: &str) -> Result<()> {
    let info = session.info();
    let offered = info
        .capabilities
        .get("logging")
        .is_some_and(Value::is_object);
    if info.protocol_version.is_modern() || !offered {
        return Ok(());
    }
    session
        .request("logging/setLevel", Some(json!({ "level": level })))
        .await
        .map(drop)
}

impl Config {
    /// The connect timeout in force: see [`Connector::connect_timeout`].
    fn connect_limit(&self) -> Duration {
        self.connect_timeout.unwrap_or_else(|| {
            self.request_timeout
                .map_or(DEFAULT_CONNECT_TIMEOUT, |limit| {
                    limit.max(DEFAULT_CONNECT_TIMEOUT)
                })
        })
    }

    /// Bound on each exchange no caller times: the request timeout, or
    /// the default connect timeout when requests have none.
    fn exchange_timeout(&self) -> Duration {
        self.request_timeout.unwrap_or(DEFAULT_CONNECT_TIMEOUT)
    }

    /// Where the server is, as spans show it: the endpoint's origin, or
    /// `stdio:` and the program's name.
    fn label(&self) -> Result<String> {
        #[cfg(feature = "stdio")]
        if let Some(command) = &self.command {
            return Ok(format!("stdio:{}", command.name()));
        }
        Ok(self.endpoint.origin()?.to_string())
    }

    /// The stdio server to start, if this connects to one.
    #[cfg(feature = "stdio")]
    fn stdio_command(&self) -> Option<&crate::stdio::StdioCommand> {
        self.command.as_ref()
    }

    /// Never a stdio server without the feature.
    #[cfg(not(feature = "stdio"))]
    fn stdio_command(&self) -> Option<std::convert::Infallible> {
        None
    }

    /// What the era found is remembered under: the endpoint's URL, or the
    /// stdio command line (a key only, never shown).
    fn era_key(&self) -> String {
        #[cfg(feature = "stdio")]
        if let Some(command) = &self.command {
            return command.era_key();
        }
        self.endpoint.url().to_owned()
    }

    /// What a stdio connector cannot do, refused before anything starts.
    #[cfg(feature = "stdio")]
    fn check_stdio(&self) -> Result<()> {
        let http_only = [
            (
                self.endpoint.client.is_some(),
                "a lent HTTP client (client)",
            ),
            (
                self.endpoint.has_hooks(),
                "header hooks (hook, header, bearer)",
            ),
            (self.attach.is_some(), "an attached session (attach)"),
            #[cfg(feature = "oauth")]
            (self.endpoint.oauth.is_some(), "OAuth (oauth)"),
        ];
        match http_only.iter().find(|(set, _)| *set) {
            Some((_, what)) => Err(Error::builder(format!(
                "a stdio server takes no {what}: that is for HTTP servers"
            ))),
            None => Ok(()),
        }
    }

    async fn connect(&self) -> Result<Session> {
        let origin = self.label()?;
        if let Some(level) = self.log_level.as_deref() {
            if !LOG_LEVELS.contains(&level) {
                return Err(Error::builder(format!(
                    "the log level `{level}` is none of \"{}\"",
                    LOG_LEVELS.join("\", \"")
                )));
            }
        }
        let span = tracing::info_span!("mcp.connect", endpoint = %origin);
        async move {
            // Declared first so that it is dropped last, after every handle
            // the steps below hold.
            let mut stack = GuardStack::new(self.endpoint.counters());
            if let Some(reaper) = &self.reaper {
                stack.set_reaper(reaper.clone());
            }
            let phase = PhaseCell::default();
            let limit = self.connect_limit();
            let deadline = Deadline::connect(limit);
            #[cfg(feature = "stdio")]
            let noise = crate::stdio::Noise::default();
            let established = self.establish(
                &mut stack,
                &phase,
                deadline,
                #[cfg(feature = "stdio")]
                &noise,
            );
            // The steps share `deadline`; this names the step it cut.
            let outcome = match deadline.instant() {
                None => established.await,
                Some(at) => tokio::time::timeout_at(at, established)
                    .await
                    .unwrap_or_else(|_| Err(Error::connect_timeout(limit, phase.get()))),
            };
            match outcome {
                Ok(established) => {
                    let session = Session::new(established, stack);
                    if let Some(level) = &self.log_level {
                        // Within what is left of the connect's time, and
                        // a few seconds at most: a refusal or a slow
                        // answer is no failure of the connect.
                        let asked = deadline.run(ask_log_level(&session, level));
                        match tokio::time::timeout(SET_LEVEL_WAIT, asked).await {
                            Ok(Ok(())) => {}
                            Ok(Err(error)) => {
                                tracing::debug!(%error, "logging/setLevel was not taken");
                            }
                            Err(_) => tracing::debug!("logging/setLevel was not answered in time"),
                        }
                    }
                    Ok(session)
                }
                Err(error) => {
                    // A stdio server that never answered but wrote
                    // something else: say what.
                    #[cfg(feature = "stdio")]
                    let error = match noise.describe() {
                        Some(hint) if error.is_timeout() => error.with_hint(hint),
                        _ => error,
                    };
                    let released = stack.unwind().await;
                    tracing::debug!(?released, "connect failed; released");
                    Err(error.with_cleanup(cleanup_errors(released)))
                }
            }
        }
        .instrument(span)
        .await
    }

    async fn establish(
        &self,
        stack: &mut GuardStack,
        phase: &PhaseCell,
        deadline: Deadline,
        #[cfg(feature = "stdio")] noise: &crate::stdio::Noise,
    ) -> Result<Established> {
        let mut timings = Timings::default();
        let capabilities = self.handlers.capabilities();
        let client_meta = crate::transport::metadata::client_meta(
            &self.client_info,
            &capabilities,
            self.log_level.as_deref(),
        );
        // One account for all the session reads: its catalog, and every
        // message while the session holds it; in a fleet, charged to the
        // fleet's account too.
        let account = Account::with_parent(
            self.discovery.memory,
            self.memory_pool.as_ref().map(|pool| pool.account().clone()),
        );
        #[cfg(feature = "stdio")]
        let mut stdio_io = None;
        let (template, client_ownership, lent) = match self.stdio_command() {
            #[cfg(feature = "stdio")]
            Some(command) => {
                self.check_stdio()?;
                phase.set(ConnectPhase::Connect);
                // Below the process: the readers of its stdout and stderr
                // run until it has ended (released after it), so it never
                // writes into a closed pipe while it shuts down.
                let pipes = stack.push_background();
                let mut started =
                    crate::stdio::start(command, &account, &self.endpoint.transport, client_meta)
                        .await
                        .map_err(|e| e.in_phase(ConnectPhase::Connect))?;
                // On the stack the moment it exists.
                stack.push_process(started.tree, command.get_grace());
                started.io.noise = noise.clone();
                stdio_io = Some((started.io, pipes));
                (
                    Wire::Stdio(Arc::new(started.wire)),
                    ClientOwnership::Owned,
                    None,
                )
            }
            _ => {
                let (template, ownership) =
                    self.endpoint.acquire(stack, Some(client_meta), &account)?;
                let lent = (ownership == ClientOwnership::Borrowed)
                    .then(|| template.http_client().clone());
                (Wire::Http(template), ownership, lent)
            }
        };

        let attached = self.attach.is_some();
        // Every server session we create is on the stack from before its
        // `initialize` leaves.
        let sessions = (!attached).then(|| stack.push_server_sessions(self.delete_timeout));
        let spawner = stack.push_background();
        let (sink, notifications) = crate::queue::bounded(
            NOTIFICATION_BUFFER,
            self.discovery.memory.max_queued_bytes,
            "the queue of Session::notifications (256 messages, \
             MemoryBudget::max_queued_bytes)",
        );
        let listen = self.listen.unwrap_or(!attached);
        let front = SessionFront::new(
            self.handlers.clone(),
            sink,
            account,
            self.discovery.clone(),
            self.request_timeout,
        );
        let settings = Settings {
            resumption: self.resumption,
            listen,
            listen_backoff: self.listen_backoff,
            // A renewal is a connect of its own.
            renew_timeout: self.request_timeout.map_or(self.connect_limit(), |limit| {
                limit.min(self.connect_limit())
            }),
            exchange_timeout: self.exchange_timeout(),
            id_prefix: None,
        };
        let engine = Engine::new(front, template, sessions, spawner, settings);
        #[cfg(feature = "stdio")]
        if let Some((io, pipes)) = stdio_io {
            if !engine.start_stdio(io, &pipes) {
                return Err(Error::closed());
            }
        }

        let (generation, opened) = match &self.attach {
            Some((id, version)) => {
                if !version.is_modern() && version.transport() == TransportKind::StreamableHttp {
                    (engine.attach(id.clone(), *version), None)
                } else {
                    return Err(Error::builder(format!(
                        "attach needs a session of a 2025 revision; {version} has none to attach to"
                    )));
                }
            }
            None => {
                phase.set(ConnectPhase::Initialize);
                let started = Instant::now();
                let key = self.era_key();
                let generation_is_stdio = self.stdio_command().is_some();
                let plan = Plan {
                    memory: lent
                        .as_ref()
                        .map_or(&*self.revisions, HttpClient::revisions),
                    url: &key,
                    stdio: generation_is_stdio,
                    pinned: self.pinned,
                    capabilities: &capabilities,
                    client_info: &self.client_info,
                    request_timeout: self.request_timeout,
                    deadline,
                    sse_found: Default::default(),
                };
                let opened = era::open(&engine, &plan, phase).await?;
                timings.initialize = started.elapsed() - opened.initialized;
                timings.initialized = opened.initialized;
                engine.set_ready(&opened.generation);
                (opened.generation.clone(), Some(opened))
            }
        };
        engine.start_listener(&generation);
        if let Some(opened) = &opened {
            if let Some(filter) = subscription_filter(&opened.result["capabilities"]) {
                engine.start_subscription(&generation, filter);
            }
        }
        phase.set(ConnectPhase::Discovery);
        let started = Instant::now();
        let init = opened.as_ref().map(|opened| &opened.result);
        let server_capabilities = init.map(|init| &init["capabilities"]);
        // Capabilities unknown (attached): "method not found" means "not
        // offered". No renewal during connect: a 404 fails it. Each page
        // within the request timeout, all of them within the connect's.
        // At once where it costs no connection of its own (see
        // `Discovery::concurrent`).
        let at_once = self.discovery.concurrent.unwrap_or(
            client_ownership == ClientOwnership::Borrowed || generation.wire().is_stdio(),
        );
        let mut lister = Lister::new(
            &engine,
            engine.front.account(),
            &self.discovery,
            self.request_timeout,
            false,
            attached,
        );
        let catalog = deadline
            .run(discover(&mut lister, server_capabilities, at_once))
            .await
            .map_err(|e| e.in_phase(ConnectPhase::Discovery))?;
        engine.front.set_catalog(catalog);
        timings.discovery = started.elapsed();

        let ownership = if attached {
            SessionOwnership::Attached
        } else {
            SessionOwnership::Owned
        };
        // The answer is not needed after this: its parts are moved, not
        // copied, into the session's info.
        let probed = opened.as_ref().is_some_and(|opened| opened.probed);
        let mut init = opened.map(|opened| opened.result);
        let server_info = if generation.era() == Era::Stateless {
            take_field(
                init.as_mut().and_then(|init| init.get_mut("_meta")),
                SERVER_INFO_META,
            )
        } else {
            take_field(init.as_mut(), "serverInfo")
        };
        let info = SessionInfo {
            server_info,
            capabilities: take_field(init.as_mut(), "capabilities"),
            instructions: take_field(init.as_mut(), "instructions")
                .as_str()
                .map(str::to_owned),
            protocol_version: generation
                .wire()
                .protocol_version()
                .unwrap_or(ProtocolVersion::LATEST),
            transport: if generation.wire().is_stdio() {
                TransportKind::Stdio
            } else if generation.era() == Era::HttpSse {
                TransportKind::HttpSse
            } else {
                TransportKind::StreamableHttp
            },
            probed,
            session_id_issued: generation.session_id().is_some(),
            ownership,
            client_ownership,
            timings,
        };
        Ok(Established {
            origin: generation.wire().label(),
            engine,
            info,
            notifications,
            request_timeout: self.request_timeout,
        })
    }
}

/// `object[key]`, moved out; `Null` when `object` is not an object or has
/// no such key.
fn take_field(object: Option<&mut Value>, key: &str) -> Value {
    object
        .and_then(Value::as_object_mut)
        .and_then(|object| object.remove(key))
        .unwrap_or(Value::Null)
}

/// What a successful connect hands to [`Session::new`].
pub(super) struct Established {
    pub(super) engine: Arc<Engine<SessionFront>>,
    pub(super) info: SessionInfo,
    pub(super) notifications: mpsc::Receiver<Message>,
    pub(super) request_timeout: Option<Duration>,
    pub(super) origin: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A connect is never unbounded, and never shorter than the request
    /// timeout (an OAuth flow inside it gets what its request gets).
    #[test]
    fn the_connect_timeout_defaults_to_60_s_or_the_longer_request_timeout() {
        let limit = |connector: Connector| connector.config.connect_limit();
        let url = "http://127.0.0.1:9/mcp";
        assert_eq!(limit(Connector::new(url)), Duration::from_secs(60));
        assert_eq!(
            limit(Connector::new(url).no_request_timeout()),
            Duration::from_secs(60)
        );
        assert_eq!(
            limit(Connector::new(url).request_timeout(Duration::from_secs(360))),
            Duration::from_secs(360)
        );
        assert_eq!(
            limit(Connector::new(url).request_timeout(Duration::from_millis(5))),
            Duration::from_secs(60)
        );
        assert_eq!(
            limit(Connector::new(url).connect_timeout(Duration::from_secs(2))),
            Duration::from_secs(2)
        );
    }
}
