//! [`ScopedTransport`]: the transport for an SDK that runs the protocol
//! itself, and its builders.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use serde_json::value::RawValue;
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::budget::{Account, Charge, value_cost};
use crate::engine::{
    Deadline, Endpoint, Engine, Era, Front, Generation, Opening, Resumption, ServerMessage,
    Settings, negotiated,
};
use crate::error::{Error, Result, result_value};
use crate::http_client::{HeaderHook, HttpClient, HttpClientBuilder, RevisionMemory};
use crate::jsonrpc::{ErrorObject, Message, Notification, Request, RequestId, Response, codes};
use crate::queue::{self, Weigh};
use crate::scope::{GuardStack, Released};
use crate::session::era::{self, Plan, Probe};
use crate::session::shared::{SERVER_INFO_META, supported_instead};
use crate::sync::lock;
use crate::transport::metadata::{
    META_CLIENT_CAPABILITIES, META_CLIENT_INFO, META_PROTOCOL_VERSION, ParamHeader,
    add_param_headers, param_headers,
};
use crate::transport::{ProtocolVersion, SessionId, TransportConfig, TransportKind, Wire};

/// Server messages waiting for `receive_message`, in count.
const INCOMING_BUFFER: usize = 64;

/// Server messages waiting for `receive_message`, in bytes as they are held
/// (parsed): over it, notifications and server requests are dropped (the
/// stream is read on), and responses wait for the SDK to take some.
const INCOMING_BYTES: usize = 16 * 1024 * 1024;

/// Server requests remembered with the session that sent them, so that
/// The SDK's answer goes back to that session; older ones are forgotten (their
/// answers then go to the session in use).
const ASKED_KEPT: usize = 256;

/// Tools whose `x-mcp-header` annotations are remembered (from the
/// `tools/list` answers the SDK reads) for the `Mcp-Param-*` headers of a
/// 2026-07-28 `tools/call`; past it the memory starts again.
const TOOLS_KEPT: usize = 4096;

/// Annotated parameters remembered across those tools, at most (a hostile
/// server's pages add up); past it the memory starts again, and a tool
/// with more than this alone is refused.
const PARAM_HEADERS_KEPT: usize = 16 * 1024;

/// Builds a [`ScopedTransport`].
///
/// Defaults: an owned client built with [`HttpClient::builder`]'s defaults;
/// no header hooks; a DELETE timeout of 5 s; the GET listening stream on
/// (off when attached); [`Resumption::default`];
/// [`TransportConfig::default`]; a new session, when the server expires
/// one, opened within 60 s; an SDK that knows 2026-07-28 (not
/// [`legacy_sdk`](Self::legacy_sdk)).
#[derive(Clone, Debug)]
#[must_use]
pub struct ScopedTransportBuilder {
    endpoint: Endpoint,
    attach: Option<(SessionId, ProtocolVersion)>,
    pinned: Option<ProtocolVersion>,
    /// The eras found per endpoint when no client is lent (a lent client
    /// remembers them itself); shared by the builder's clones.
    revisions: Arc<RevisionMemory>,
    delete_timeout: Duration,
    listen: Option<bool>,
    resumption: Resumption,
    reinitialize_timeout: Duration,
    legacy_sdk: bool,
}

impl ScopedTransportBuilder {
    /// Sends through the caller's client, which the transport only borrows:
    /// it is never shut down or changed, and the transport's hooks are
    /// removed from it on every way out.
    pub fn client(mut self, client: HttpClient) -> Self {
        self.endpoint.client = Some(client);
        self
    }

    /// Settings of the owned client built when no client is lent.
    pub fn client_builder(mut self, builder: HttpClientBuilder) -> Self {
        self.endpoint.builder = builder;
        self
    }

    /// Adds a header hook for this transport's requests (and no one
    /// else's).
    pub fn hook(mut self, hook: HeaderHook) -> Self {
        self.endpoint.push_hook(Ok(hook));
        self
    }

    /// Authorizes with OAuth 2.1 (feature `oauth`), as
    /// [`Connector::oauth`](crate::Connector::oauth) does.
    #[cfg(feature = "oauth")]
    pub fn oauth(mut self, oauth: crate::oauth::OAuth) -> Self {
        self.endpoint.oauth = Some(oauth);
        self
    }

    /// Adds `Authorization: Bearer <token>` to this transport's requests.
    pub fn bearer(mut self, token: &str) -> Self {
        self.endpoint.push_hook(HeaderHook::bearer(token));
        self
    }

    /// Adds one fixed header to this transport's requests.
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.endpoint.push_hook(HeaderHook::header(name, value));
        self
    }

    /// Runs over a session the caller owns instead of one the SDK
    /// initializes: start the SDK without its handshake (rmcp:
    /// `serve_directly`); an `initialize` or `notifications/initialized` sent
    /// anyway is refused. The session is never re-initialized, replaced or
    /// DELETEd; its expiry is reported to the request that met it.
    pub fn attach(mut self, session_id: SessionId, version: ProtocolVersion) -> Self {
        self.attach = Some((session_id, version));
        self
    }

    /// The SDK's `initialize` takes only the 2025 revisions (the Python SDK:
    /// 1.x knows no other, 2.x reaches 2026-07-28 by its own
    /// `server/discover` and refuses an `initialize` result naming it): when
    /// the server's era is 2026-07-28, the SDK's `initialize` is answered
    /// with the revision it proposed, and the transport speaks 2026-07-28 for it
    /// (each request's `_meta` and headers, `subscriptions/listen`). An
    /// `input_required` result is passed through as it came, which such an
    /// SDK cannot answer. Default: false (the SDK is told 2026-07-28, as
    /// rmcp must be to drive multi round-trip results).
    pub fn legacy_sdk(mut self, legacy: bool) -> Self {
        self.legacy_sdk = legacy;
        self
    }

    /// Speaks `version` without probing for the server's era: 2026-07-28
    /// (`server/discover`, no session), a 2025 revision (the SDK's
    /// `initialize`, proposing it), or 2024-11-05 (HTTP+SSE). Without it
    /// the era is detected as [`Connector`](crate::Connector) detects it,
    /// and remembered per endpoint in the lent client (or, with an owned
    /// client, in this builder and its clones).
    pub fn protocol_version(mut self, version: ProtocolVersion) -> Self {
        self.pinned = Some(version);
        self
    }

    /// Bound on ending a server session at close (or in the reaper): the
    /// DELETE, and the wait for an `initialize` still in flight, together.
    /// Default: 5 s.
    pub fn delete_timeout(mut self, timeout: Duration) -> Self {
        self.delete_timeout = timeout;
        self
    }

    /// Bound on opening a new session when the server has expired the one
    /// in use. Default: 60 s.
    pub fn reinitialize_timeout(mut self, timeout: Duration) -> Self {
        self.reinitialize_timeout = timeout;
        self
    }

    /// Whether to open the GET listening stream once the session is
    /// initialized. Default: true (false when attached).
    pub fn listen(mut self, listen: bool) -> Self {
        self.listen = Some(listen);
        self
    }

    /// How a broken SSE answer is resumed.
    pub fn resumption(mut self, resumption: Resumption) -> Self {
        self.resumption = resumption;
        self
    }

    /// Limits and policies of the wire.
    pub fn transport_config(mut self, config: TransportConfig) -> Self {
        self.endpoint.transport = config;
        self
    }

    /// Builds the transport: the owned client (if none is lent) and the
    /// hooks are acquired now, on the transport's guard stack. Nothing is
    /// sent until the SDK sends `initialize` (or, attached, its first
    /// message). Needs no runtime.
    ///
    /// On error (an invalid endpoint or header) whatever was acquired is
    /// released before it returns.
    pub fn build(&self) -> Result<ScopedTransport> {
        self.endpoint.origin()?;
        if let Some((_, version)) = &self.attach {
            if version.is_modern() || version.transport() != TransportKind::StreamableHttp {
                return Err(Error::builder(format!(
                    "attach needs a session of a 2025 revision; {version} has none to attach to"
                )));
            }
        }
        // If a step below fails, dropping the stack releases what is on it
        // (no DELETE is owed yet).
        let mut stack = GuardStack::new(self.endpoint.counters());
        // What the wire reads is charged as a session's is, by default.
        let account = Account::new(crate::MemoryBudget::default());
        let (template, _) = self.endpoint.acquire(&mut stack, None, &account)?;
        let attached = self.attach.is_some();
        let sessions = (!attached).then(|| stack.push_server_sessions(self.delete_timeout));
        let spawner = stack.push_background();
        let (tx, incoming) = queue::bounded(
            INCOMING_BUFFER,
            INCOMING_BYTES,
            "the transport's incoming queue (64 messages, 16 MiB)",
        );
        let front = SdkFront {
            tx,
            account: account.clone(),
            url: self.endpoint.url().to_owned(),
            pinned: self.pinned,
            revisions: self
                .endpoint
                .client
                .is_none()
                .then(|| self.revisions.clone()),
            tools: Mutex::default(),
            attached,
            legacy_sdk: self.legacy_sdk.then(Mutex::default),
            stdio: false,
            initialize_sent: AtomicBool::new(false),
            discover_refused: AtomicBool::new(false),
            handshake: Mutex::default(),
            asked: Mutex::default(),
            readers: Mutex::default(),
            next_reader: AtomicU64::new(0),
        };
        let settings = Settings {
            resumption: self.resumption,
            listen: self.listen.unwrap_or(!attached),
            listen_backoff: crate::engine::LISTEN_BACKOFF,
            renew_timeout: self.reinitialize_timeout,
            exchange_timeout: self.reinitialize_timeout,
            // The SDK numbers its own requests: ours must not collide.
            id_prefix: Some("mcp-scoped-http-"),
        };
        let engine = Engine::new(front, Wire::Http(template), sessions, spawner, settings);
        if let Some((id, version)) = &self.attach {
            engine.attach(id.clone(), *version);
        }
        let (report, report_receiver) = oneshot::channel();
        Ok(ScopedTransport {
            engine,
            stack: Mutex::new(Some(stack)),
            incoming: tokio::sync::Mutex::new(incoming),
            report: Mutex::new(Some(report)),
            report_receiver: Some(report_receiver),
        })
    }
}

/// The revisions stdio servers were found to speak, by command line (the
/// program and its arguments), for every stdio transport of the process.
#[cfg(feature = "stdio")]
fn stdio_revisions() -> Arc<RevisionMemory> {
    static MEMORY: std::sync::OnceLock<Arc<RevisionMemory>> = std::sync::OnceLock::new();
    MEMORY.get_or_init(Arc::default).clone()
}

/// Starts a [`ScopedTransport`] to a stdio server: see
/// [`ScopedTransport::stdio`].
///
/// Defaults: the era detected as [`Connector::stdio`](crate::Connector::stdio)
/// detects it (no revision pinned), and remembered for the command line
/// (the program and its arguments) by every stdio transport of the
/// process, so the next transport to it opens that era at once (one that
/// proves wrong is forgotten and detected again); 60 s for the SDK's `initialize` to be
/// answered, the server's start-up included (a connect's default);
/// [`TransportConfig::default`] (the longest line, the memory budget of
/// what waits).
#[cfg(feature = "stdio")]
#[derive(Clone, Debug)]
#[must_use]
pub struct StdioTransportBuilder {
    command: crate::stdio::StdioCommand,
    pinned: Option<ProtocolVersion>,
    opening_timeout: Duration,
    config: TransportConfig,
    legacy_sdk: bool,
}

#[cfg(feature = "stdio")]
impl StdioTransportBuilder {
    /// Speaks `version` without detection (a 2026-07-28 revision skips
    /// `initialize`, a 2025 one the probe). Default: detected.
    pub fn protocol_version(mut self, version: ProtocolVersion) -> Self {
        self.pinned = Some(version);
        self
    }

    /// How long the SDK's `initialize` may take to be answered, the server's
    /// start-up and any detection included; [`spawn`](Self::spawn) waits
    /// at most this long for the server's exec. Default: 60 s, as a
    /// [`Connector`](crate::Connector)'s connect.
    pub fn opening_timeout(mut self, timeout: Duration) -> Self {
        self.opening_timeout = timeout;
        self
    }

    /// As [`ScopedTransportBuilder::legacy_sdk`]. Default: false.
    pub fn legacy_sdk(mut self, legacy: bool) -> Self {
        self.legacy_sdk = legacy;
        self
    }

    /// The wire's limits (the longest line, a batch's size). Default:
    /// [`TransportConfig::default`].
    pub fn transport_config(mut self, config: TransportConfig) -> Self {
        self.config = config;
        self
    }

    /// Starts the server under the crate's supervision (its own process
    /// group, a watchdog that ends the tree when the host dies, the
    /// environment allowlist, stderr kept for errors) and returns the
    /// transport, the process on its guard stack. Nothing is written to
    /// the server until the SDK sends `initialize`.
    ///
    /// Cancel safety: dropped before it returns, the process tree (if it
    /// was started) is killed and reaped; nothing else was acquired.
    ///
    /// # Errors
    ///
    /// The program not found or not executable, in no executable format,
    /// or its working directory missing: [`Error::is_builder`]. The
    /// watchdog could not be started: an I/O error. Not started within the
    /// opening timeout: [`Error::is_timeout`].
    pub async fn spawn(&self) -> Result<ScopedTransport> {
        if self
            .pinned
            .is_some_and(|v| v.transport() == TransportKind::HttpSse)
        {
            return Err(Error::builder(
                "a stdio server has no HTTP+SSE transport: pin a revision of 2025 or later",
            ));
        }
        let mut stack = GuardStack::new(Arc::default());
        let account = Account::new(crate::MemoryBudget::default());
        // Below the process: its pipes' readers run until it has ended.
        let pipes = stack.push_background();
        // The server's start counts against the opening's bound (an exec
        // from a hung file system would otherwise be waited for forever).
        let starting = crate::stdio::start(
            &self.command,
            &account,
            &self.config,
            crate::transport::metadata::client_meta(&Value::Null, &json!({}), None),
        );
        let started = tokio::time::timeout(self.opening_timeout, starting)
            .await
            .map_err(|_| {
                Error::timeout(format!(
                    "the stdio server `{}` was not started within {:?}",
                    self.command.name(),
                    self.opening_timeout
                ))
            })??;
        stack.push_process(started.tree, self.command.get_grace());
        // As a connect's: a stdio session has nothing to DELETE, but the
        // engine opens sessions only where this set exists.
        let sessions = stack.push_server_sessions(Duration::ZERO);
        let spawner = stack.push_background();
        let (tx, incoming) = queue::bounded(
            INCOMING_BUFFER,
            INCOMING_BYTES,
            "the transport's incoming queue (64 messages, 16 MiB)",
        );
        let front = SdkFront {
            tx,
            account,
            url: self.command.era_key(),
            pinned: self.pinned,
            // Shared by every stdio transport of the process, by command
            // line: an SDK opens a transport per connect, and a server
            // that never answers a request before `initialize` would make
            // each of them wait out the probe's patience again.
            revisions: Some(stdio_revisions()),
            tools: Mutex::default(),
            attached: false,
            legacy_sdk: self.legacy_sdk.then(Mutex::default),
            stdio: true,
            initialize_sent: AtomicBool::new(false),
            discover_refused: AtomicBool::new(false),
            handshake: Mutex::default(),
            asked: Mutex::default(),
            readers: Mutex::default(),
            next_reader: AtomicU64::new(0),
        };
        let settings = Settings {
            resumption: Resumption::default(),
            listen: false,
            listen_backoff: crate::engine::LISTEN_BACKOFF,
            renew_timeout: self.opening_timeout,
            exchange_timeout: self.opening_timeout,
            id_prefix: Some("mcp-scoped-http-"),
        };
        let wire = Wire::Stdio(Arc::new(started.wire));
        let engine = Engine::new(front, wire, Some(sessions), spawner, settings);
        if !engine.start_stdio(started.io, &pipes) {
            return Err(Error::closed());
        }
        let (report, report_receiver) = oneshot::channel();
        Ok(ScopedTransport {
            engine,
            stack: Mutex::new(Some(stack)),
            incoming: tokio::sync::Mutex::new(incoming),
            report: Mutex::new(Some(report)),
            report_receiver: Some(report_receiver),
        })
    }
}

/// A client transport for an SDK that runs the protocol itself (rmcp, the
/// Python SDK): the SDK sends its own `initialize`, requests and answers as
/// JSON-RPC [`Message`]s; this crate owns what the session acquires.
///
/// [`ScopedTransport`] takes the SDK's messages with
/// [`send_message`](ScopedTransport::send_message) and hands it the
/// server's with [`receive_message`](ScopedTransport::receive_message); the
/// `rmcp` feature puts rmcp's `Transport` on it (`adapters::rmcp`), and the
/// Python package puts the official Python SDK's streams on it. The SDK's
/// `initialize` is recognised and opens the server's era the way
/// [`Connector::connect`](crate::Connector::connect) does: the revision
/// pinned with [`protocol_version`](ScopedTransportBuilder::protocol_version),
/// else the one remembered for the endpoint (in the lent client, or in the
/// builder and its clones), else detection, in the spec's order:
///
/// - **2026-07-28** (`server/discover` answered): the SDK's `initialize` is
///   answered from the discover result (an `InitializeResult` naming
///   2026-07-28, with the server's capabilities, `serverInfo` from its
///   `_meta`, and instructions), its `notifications/initialized` is
///   swallowed, and every later request is a 2026-07-28 one: `_meta` with
///   the revision and the SDK's `clientInfo` and capabilities, the
///   `MCP-Protocol-Version`, `Mcp-Method` and `Mcp-Name` headers, and
///   `Mcp-Param-*` for a tool whose `x-mcp-header` annotations the SDK's own
///   `tools/list` brought. No session id, no GET, no DELETE; the server's
///   list changes come on `subscriptions/listen` (when listening). An
///   `input_required` result is passed through as it came, for an SDK that
///   knows the revision to drive.
/// - **2025 revisions** (`initialize` answered): the SDK's own `initialize`
///   goes out, proposing its revision (or the one the discover answer
///   preferred, or the pinned one):
///
///   1. at [`build`](ScopedTransportBuilder::build): an owned client
///      (unless one is lent with [`client`](ScopedTransportBuilder::client)),
///      then the session's header hooks, scoped to this transport's
///      requests only;
///   2. **before** the `initialize` POST leaves, the server session is
///      pushed on the stack, and the POST runs as a task the stack holds,
///      so an id that arrives just before a failure or a cancellation is
///      still DELETEd;
///   3. after the answer, the background set: a reader per request (its
///      JSON or SSE answer, resumed with `Last-Event-ID` when it breaks
///      off; it stops when the SDK gives the request up with
///      `notifications/cancelled`, whatever the server does) and, once
///      `notifications/initialized` is accepted, the GET listening stream.
/// - **2024-11-05** (neither; the URL serves an HTTP+SSE stream): the
///   stream is opened, the SDK's `initialize` (proposing 2024-11-05) and
///   everything after it POSTed to the endpoint it names and answered on
///   it. The session is the stream: closed at close, never DELETEd.
/// - **stdio** ([`ScopedTransport::stdio`], feature `stdio`): the server is
///   started by [`StdioTransportBuilder::spawn`] under the supervision
///   [`Connector::stdio`](crate::Connector::stdio) gives it (its own
///   process group, the watchdog, the environment allowlist, the release
///   sequence), and the SDK's `initialize` opens its era as that connect
///   does: the stdio page's detection, a slow start waited for within
///   [`opening_timeout`](StdioTransportBuilder::opening_timeout), a
///   refusal naming a revision followed. Closing, or dropping, the
///   transport ends the process tree.
///
/// Everything the server sends (responses, notifications, and requests such
/// as `ping`, `roots/list` or `elicitation/create`) reaches the SDK through
/// `receive_message`; its answers go out as POSTs carrying the session
/// headers.
///
/// # Every way out
///
/// - **[`close`](ScopedTransport::close)**: the stack unwinds in order.
///   Background tasks are stopped and joined (an HTTP+SSE stream with
///   them), the owned server session is DELETEd (2025 era only; bounded by
///   [`delete_timeout`](ScopedTransportBuilder::delete_timeout)) while our
///   hooks and client still live, the hooks are removed, an owned client is
///   dropped last. A lent client is left open and untouched. What was
///   released is reported through [`ReleaseReport`].
/// - **Dropped unclosed** (the SDK's `initialize` failed, or a future was
///   dropped half-way): the drop releases what needs no waiting at once and
///   hands the rest (the DELETE, with the hooks and client it needs) to the
///   reaper, which [`crate::shutdown`] waits for.
///
/// # Errors and limits
///
/// - A request whose answer fails after its POST was accepted (a stream that
///   ends without the response, a malformed event, resumption exhausted) is
///   resolved with a JSON-RPC error response (code `-32603`) naming the
///   cause, so no request of the SDK's is left waiting. A JSON-RPC error
///   answered to `initialize` reaches the SDK as such.
/// - The SDK must start with `initialize` or with its own `server/discover`:
///   a request sent before either fails with a protocol error. A
///   `server/discover` result that lists its revision opens 2026-07-28;
///   anything else reaches the SDK, whose `initialize`, next, is opened as
///   above without probing again.
/// - 2025 era: an expired session (404 to a request with our session id)
///   is replaced: the transport opens a new one through the guard stack
///   with the SDK's `initialize` params (its own request id, so the SDK
///   never sees that answer), within
///   [`reinitialize_timeout`](ScopedTransportBuilder::reinitialize_timeout),
///   and sends the request that met the 404 again once; the expired session
///   is not DELETEd. The SDK keeps what its first handshake told it.
/// - 2025 era: `initialize`'s answer is read in the background, so a
///   server request on it (a `ping`) reaches the SDK before the response.
///   Its failures after the head reach the SDK at
///   `notifications/initialized`, as this crate's error.
/// - 2024-11-05: `initialize`'s answer is read whole before the SDK sees it.
///   When the stream ends, so does the session: every later request fails.
/// - 2026-07-28: a `HeaderMismatch` (`-32020`) or
///   `UnsupportedProtocolVersion` (`-32022`) answered to one of the SDK's
///   requests reaches the SDK as that error.
/// - What waits for `receive_message` is bounded: 64 messages and 16 MiB
///   (as held, parsed). Over it, notifications and server requests are
///   dropped with a warning saying how many (the stream is read on);
///   responses wait for the SDK to take some (they are what it asked for).
/// - [`attach`](ScopedTransportBuilder::attach) runs the SDK over a 2025
///   session the caller owns: it is never re-initialized, replaced or
///   DELETEd, and its expiry is reported to the request that met it
///   ([`Error::is_session_expired`]).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let server = mcp_scoped_http_testkit::TestServer::start(Default::default());
/// # let url = server.url();
/// use mcp_scoped_http::adapters::ScopedTransport;
/// use mcp_scoped_http::jsonrpc::Message;
///
/// let mut transport = ScopedTransport::builder(url).bearer("token").build()?;
/// let report = transport.release_report();
/// // The SDK's own handshake, as it would send it.
/// let initialize: Message = serde_json::from_str(
///     r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{
///         "protocolVersion":"2025-06-18","capabilities":{},
///         "clientInfo":{"name":"sdk","version":"1"}}}"#,
/// )?;
/// transport.send_message(initialize).await?;
/// let answer = transport.receive_message().await.expect("the answer");
/// assert!(matches!(answer, Message::Response(_)));
/// transport.close().await?; // tasks, DELETE, hooks, then the owned client
/// let released = report.released().await.expect("closed, not dropped");
/// assert!(released.owned_client_released);
/// # Ok(())
/// # }
/// ```
///
/// Take a [`ReleaseReport`] before handing it to the SDK to learn what
/// closing released.
pub struct ScopedTransport {
    engine: Arc<Engine<SdkFront>>,
    /// The guard stack: unwound by `close`, handed to the reaper on drop.
    stack: Mutex<Option<GuardStack>>,
    incoming: tokio::sync::Mutex<mpsc::Receiver<Incoming>>,
    report: Mutex<Option<oneshot::Sender<Released>>>,
    report_receiver: Option<oneshot::Receiver<Released>>,
}

/// The transport's front end of the engine: everything the server sends goes
/// to the SDK.
struct SdkFront {
    /// Messages for `receive_message`, bounded in count and bytes.
    tx: queue::Sender<Incoming>,
    /// The transport's memory account (the wire's): a response is charged
    /// to it from when it is handed on until the SDK has it, by its text and
    /// what the SDK's parse of it builds.
    account: Account,
    /// The endpoint, the key of the era remembered for it.
    url: String,
    pinned: Option<ProtocolVersion>,
    /// Where the era is remembered: `None` when a client is lent (it
    /// remembers).
    revisions: Option<Arc<RevisionMemory>>,
    /// 2026-07-28: the `Mcp-Param-*` headers of each tool that has any (or
    /// why its annotations are invalid), from the `tools/list` answers.
    tools: Mutex<ToolHeaders>,
    attached: bool,
    /// Set for an SDK of the 2025 revisions only: the revision its
    /// `initialize` proposed, which a 2026-07-28 era's answer names.
    legacy_sdk: Option<Mutex<Option<ProtocolVersion>>>,
    /// A stdio server: its era opened as `Connector::stdio` opens it.
    stdio: bool,
    initialize_sent: AtomicBool,
    /// The SDK's own `server/discover` (its `Auto` lifecycle) was answered
    /// "not this era": its `initialize`, next, does not probe again.
    discover_refused: AtomicBool,
    handshake: Mutex<Handshake>,
    /// The server requests handed to the SDK and not yet answered, with the
    /// session that sent each (oldest first, at most [`ASKED_KEPT`]): a
    /// request on the `initialize` answer of a session that replaces an
    /// expired one comes before that session is in use, and the server may
    /// hold the `initialize` result until it has the answer.
    asked: Mutex<VecDeque<(RequestId, Weak<Generation>)>>,
    /// The readers of the SDK's requests, by id, each with its number and the
    /// token that stops it: a request the SDK gives up on (its
    /// `notifications/cancelled`, sent when its timeout passes or its
    /// future is dropped) is read no more, even from a server that ignores
    /// the cancellation and holds the answer open.
    readers: Mutex<HashMap<RequestId, (u64, CancellationToken)>>,
    next_reader: AtomicU64,
}

/// The `Mcp-Param-*` headers of the tools that have any (or why their
/// annotations are refused), by name: at most [`TOOLS_KEPT`] tools and
/// [`PARAM_HEADERS_KEPT`] annotated parameters.
#[derive(Default)]
struct ToolHeaders {
    by_name: HashMap<String, std::result::Result<Vec<ParamHeader>, String>>,
    /// Annotated parameters held, over every tool.
    held: usize,
}

impl ToolHeaders {
    /// Learns the tools of one `tools/list` page.
    fn learn(&mut self, listed: &[Value]) {
        for tool in listed {
            let Some(name) = tool.get("name").and_then(Value::as_str) else {
                continue;
            };
            let headers = match param_headers(tool) {
                Ok(headers) if headers.len() > PARAM_HEADERS_KEPT => Err(format!(
                    "{} parameters are annotated, over the {PARAM_HEADERS_KEPT} this client keeps",
                    headers.len()
                )),
                other => other,
            };
            if let Some(Ok(old)) = self.by_name.remove(name) {
                self.held -= old.len();
            }
            let count = match &headers {
                Ok(headers) if headers.is_empty() => continue,
                Ok(headers) => headers.len(),
                Err(_) => 0,
            };
            if self.by_name.len() >= TOOLS_KEPT || self.held + count > PARAM_HEADERS_KEPT {
                self.by_name.clear();
                self.held = 0;
            }
            self.held += count;
            self.by_name.insert(name.to_owned(), headers);
        }
    }
}

/// The SDK's handshake, between its `initialize` and its
/// `notifications/initialized`.
#[derive(Default)]
struct Handshake {
    /// The first session, until the handshake completes it (with the
    /// session to DELETE if it fails, in the 2025 era).
    opening: Option<(Arc<Generation>, Option<Opening>)>,
    /// 2026-07-28: the `subscriptions/listen` filter to open once the SDK's
    /// handshake is done.
    subscription: Option<Value>,
    /// How reading the `initialize` answer ended, once it has.
    answered: Option<Result<()>>,
    /// `notifications/initialized` already went out (stdio: the era was
    /// opened whole, handshake included): the SDK's is not sent again.
    initialized_sent: bool,
}

impl SdkFront {
    /// Where the era found for the endpoint is remembered.
    fn memory(&self, engine: &Engine<SdkFront>) -> Result<Memory> {
        Ok(match &self.revisions {
            Some(memory) => Memory::Builder(memory.clone()),
            None => Memory::Lent(engine.http_client().ok_or_else(Error::closed)?),
        })
    }

    /// Remembers that `generation` sent server request `id`.
    fn asked(&self, id: &RequestId, generation: &Arc<Generation>) {
        let mut asked = lock(&self.asked);
        asked.retain(|(asked, _)| asked != id);
        if asked.len() == ASKED_KEPT {
            asked.pop_front();
        }
        asked.push_back((id.clone(), Arc::downgrade(generation)));
    }

    /// The session that sent server request `id`, if it is remembered and
    /// still around; forgets it.
    fn asker(&self, id: &RequestId) -> Option<Arc<Generation>> {
        let mut asked = lock(&self.asked);
        let at = asked.iter().position(|(asked, _)| asked == id)?;
        asked
            .remove(at)
            .and_then(|(_, generation)| generation.upgrade())
    }

    /// Registers the SDK's request `id` (its POST, then its reader): its
    /// number (for [`done_reading`](Self::done_reading)) and the token that
    /// stops it.
    fn start_reading(&self, id: &RequestId) -> (u64, CancellationToken) {
        let number = self.next_reader.fetch_add(1, Ordering::Relaxed);
        let stop = CancellationToken::new();
        lock(&self.readers).insert(id.clone(), (number, stop.clone()));
        (number, stop)
    }

    /// Reader `number` of request `id` has ended.
    fn done_reading(&self, id: &RequestId, number: u64) {
        let mut readers = lock(&self.readers);
        if readers.get(id).is_some_and(|(n, _)| *n == number) {
            readers.remove(id);
        }
    }

    /// The SDK gave up on request `id`: it is sent, and its answer read, no
    /// more.
    fn stop_reading(&self, id: &RequestId) {
        if let Some((_, stop)) = lock(&self.readers).remove(id) {
            stop.cancel();
        }
    }

    /// 2026-07-28: the `Mcp-Param-*` headers of the SDK's `tools/call`, from
    /// the tool's `x-mcp-header` annotations in the `tools/list` answers
    /// The SDK has read (none for a tool not seen there). A tool whose
    /// annotations are invalid is refused, as a session refuses it.
    fn param_headers(&self, generation: &Generation, request: &Request) -> Result<http::HeaderMap> {
        let mut headers = http::HeaderMap::new();
        if !generation.is_stateless() || request.method != "tools/call" {
            return Ok(headers);
        }
        let params = request.params.as_ref();
        let Some(name) = params.and_then(|p| p.get("name")).and_then(Value::as_str) else {
            return Ok(headers);
        };
        match lock(&self.tools).by_name.get(name) {
            None => {}
            Some(Err(reason)) => {
                return Err(Error::builder(format!(
                    "the tool's x-mcp-header is invalid: {reason}"
                )));
            }
            Some(Ok(mirrored)) => {
                add_param_headers(
                    mirrored,
                    params.and_then(|p| p.get("arguments")),
                    &mut headers,
                )?;
            }
        }
        Ok(headers)
    }

    /// Remembers the `x-mcp-header` annotations of the tools on a
    /// `tools/list` page.
    fn learn_tools(&self, result: &RawValue) {
        let Ok(result) = serde_json::from_str::<Value>(result.get()) else {
            return;
        };
        if let Some(listed) = result.get("tools").and_then(Value::as_array) {
            lock(&self.tools).learn(listed);
        }
    }

    /// Hands a response to the SDK, which waits for it: it waits for room
    /// in count (what the SDK asked for bounds these), never dropped. It is
    /// charged to the account meanwhile, by its text and twice what parsing
    /// it builds (the SDK's types read a result through serde's buffered
    /// form, then build their own): one the budget cannot hold reaches
    /// The SDK as an error naming the limit instead, and is never built.
    async fn give(&self, message: Message) {
        let (message, charge) = match message {
            Message::Response(Response {
                id,
                outcome: Ok(result),
            }) => {
                let text = result.get();
                let cost = value_cost(text)
                    .unwrap_or(0)
                    .saturating_mul(2)
                    .saturating_add(text.len());
                match self.account.charge(cost, 0) {
                    Ok(charge) => (
                        Message::Response(Response {
                            id,
                            outcome: Ok(result),
                        }),
                        Some(charge),
                    ),
                    Err(spent) => {
                        drop(result);
                        let error = spent.reading("the result");
                        (
                            Message::Response(Response {
                                id,
                                outcome: Err(ErrorObject {
                                    code: codes::INTERNAL_ERROR,
                                    message: error.to_string(),
                                    data: Some(json!({"transport": "mcp-scoped-http"})),
                                }),
                            }),
                            None,
                        )
                    }
                }
            }
            other => (other, None),
        };
        if !self.tx.send(Incoming { message, charge }).await {
            tracing::debug!("dropped a server message: the transport is gone");
        }
    }

    /// Hands a message the server sent unasked to the SDK: over the queue's
    /// bounds it is dropped (and logged), never waited for, so the stream
    /// that brought it is read on.
    fn offer(&self, message: Message) {
        let incoming = Incoming {
            message,
            charge: None,
        };
        if self.tx.offer(incoming) == queue::Offered::Closed {
            tracing::debug!("dropped a server message: the transport is gone");
        }
    }

    /// Resolves the SDK's request `id` with `outcome`: the result, the
    /// server's JSON-RPC error as it sent it, or an error (code `-32603`)
    /// naming any other cause.
    async fn resolve(&self, id: RequestId, outcome: Result<Box<RawValue>>) {
        let outcome = outcome.map_err(|error| match error.rpc_error() {
            Some(rpc) if error.status().is_none() => rpc.clone(),
            _ => ErrorObject {
                code: codes::INTERNAL_ERROR,
                message: error.to_string(),
                data: Some(json!({
                    "transport": "mcp-scoped-http",
                    "status": error.status().map(|s| s.as_u16()),
                })),
            },
        });
        self.give(Message::Response(Response {
            id: Some(id),
            outcome,
        }))
        .await;
    }
}

impl Front for SdkFront {
    // The SDK answers them, from the queue `deliver` offers them to without
    // waiting: in order with the notifications around them.
    const HANDS_REQUESTS_ON: bool = true;

    fn deliver<'a>(
        engine: &'a Arc<Engine<Self>>,
        generation: &'a Arc<Generation>,
        message: ServerMessage,
    ) -> impl Future<Output = ()> + Send + 'a {
        let message = match message {
            ServerMessage::Request(request) => {
                // The SDK's answer goes back to the session that asked.
                engine.front.asked(&request.id, generation);
                Message::Request(request)
            }
            ServerMessage::Notification(notification) => Message::Notification(notification),
        };
        engine.front.offer(message);
        std::future::ready(())
    }

    fn renewed<'a>(
        _engine: &'a Arc<Engine<Self>>,
        _generation: &'a Arc<Generation>,
        _initialize_result: &'a Value,
    ) -> impl Future<Output = ()> + Send + 'a {
        // The SDK keeps what the first handshake told it; the listener of the
        // new session is started by the engine.
        std::future::ready(())
    }
}

impl ScopedTransport {
    /// A builder for a transport to `endpoint`, an `http` or `https` URL.
    pub fn builder(endpoint: impl Into<String>) -> ScopedTransportBuilder {
        ScopedTransportBuilder {
            endpoint: Endpoint::new(endpoint.into()),
            attach: None,
            pinned: None,
            revisions: Arc::default(),
            delete_timeout: Duration::from_secs(5),
            listen: None,
            resumption: Resumption::default(),
            reinitialize_timeout: Duration::from_secs(60),
            legacy_sdk: false,
        }
    }

    /// A builder for a transport to a stdio server: the process is started
    /// by [`StdioTransportBuilder::spawn`], under the same supervision as
    /// [`Connector::stdio`](crate::Connector::stdio)'s, and released with
    /// the transport (stdin closed, the grace, SIGTERM, SIGKILL to its
    /// tree, reaped), or killed with its tree if the transport is dropped
    /// unclosed or the host dies.
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use mcp_scoped_http::adapters::ScopedTransport;
    /// use mcp_scoped_http::stdio::StdioCommand;
    ///
    /// let command = StdioCommand::new("npx").args(["-y", "@modelcontextprotocol/server-memory"]);
    /// let transport = ScopedTransport::stdio(command).spawn().await?;
    /// // ... The SDK's handshake and requests, through send_message and
    /// // receive_message ...
    /// transport.close().await?; // the server's tree ended and reaped
    /// # Ok(())
    /// # }
    /// ```
    #[cfg(feature = "stdio")]
    pub fn stdio(command: crate::stdio::StdioCommand) -> StdioTransportBuilder {
        StdioTransportBuilder {
            command,
            pinned: None,
            opening_timeout: Duration::from_secs(60),
            config: TransportConfig::default(),
            legacy_sdk: false,
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

    /// The session id in use, once the server issued one (or the one
    /// attached). A credential: see [`SessionId`].
    pub fn session_id(&self) -> Option<SessionId> {
        self.engine.generation()?.session_id()
    }
}

/// What closing a [`ScopedTransport`] released, once it has.
#[derive(Debug)]
#[must_use]
pub struct ReleaseReport {
    receiver: Option<oneshot::Receiver<Released>>,
}

impl ReleaseReport {
    /// Waits until the transport is closed or dropped. `Some` when the SDK
    /// closed it (the orderly path: the report of the unwind); `None` when
    /// it was dropped without a close (a failed or cancelled `initialize`,
    /// or a runtime shutting down), in which case the release was done on
    /// drop and by the reaper (see [`crate::shutdown`]), or when the report
    /// was already taken.
    pub async fn released(self) -> Option<Released> {
        self.receiver?.await.ok()
    }
}

/// Where the era found for an endpoint is remembered: the lent client, or
/// the builder (for an owned client).
#[derive(Clone)]
enum Memory {
    Builder(Arc<RevisionMemory>),
    Lent(HttpClient),
}

impl Memory {
    fn get(&self) -> &RevisionMemory {
        match self {
            Memory::Builder(memory) => memory,
            Memory::Lent(client) => client.revisions(),
        }
    }
}

/// The SDK's `initialize`: the server's era is opened the way
/// [`Connector`](crate::Connector) opens it (the pinned revision, else the
/// one remembered for the endpoint, else detection: `server/discover`,
/// then `initialize`, then HTTP+SSE), with the SDK's `clientInfo` and
/// capabilities, all within one exchange deadline. It differs in one
/// point, which is why the order is not `era::open`'s own code: the SDK must
/// be able to answer a server request on the `initialize` answer, so in
/// the 2025 era this returns at the answer's head and the answer is read in
/// the background (see [`sessions`]).
async fn initialize(engine: Arc<Engine<SdkFront>>, request: Request) -> Result<()> {
    let front = &engine.front;
    if front.attached {
        return Err(Error::builder(
            "this transport is attached to a session the caller owns: start the SDK without \
             its handshake (rmcp: `serve_directly`), which sends no `initialize`",
        ));
    }
    if front.initialize_sent.swap(true, Ordering::AcqRel) {
        return Err(Error::protocol(
            "`initialize` was already sent on this transport: one transport, one session",
        ));
    }
    let params = request.params.clone().unwrap_or(Value::Null);
    if let Some(proposed) = &front.legacy_sdk {
        *lock(proposed) = params["protocolVersion"]
            .as_str()
            .and_then(|v| v.parse::<ProtocolVersion>().ok())
            .filter(|v| !v.is_modern());
    }
    let capabilities = params
        .get("capabilities")
        .cloned()
        .unwrap_or_else(|| json!({}));
    let client_info = params.get("clientInfo").cloned().unwrap_or(Value::Null);
    // 2026-07-28 requests carry them in `_meta`.
    engine.set_client_meta(&client_info, &capabilities);
    let memory = front.memory(&engine)?;
    let plan = Plan {
        memory: memory.get(),
        url: &front.url,
        pinned: front.pinned,
        capabilities: &capabilities,
        client_info: &client_info,
        request_timeout: None,
        deadline: engine.exchange_deadline(),
        sse_found: AtomicBool::new(false),
        stdio: front.stdio,
    };
    #[cfg(feature = "stdio")]
    if front.stdio {
        return tokio::select! {
            biased;
            _ = engine.closing().cancelled() => Err(Error::closed()),
            opened = stdio_era(&engine, &plan, request.id) => opened,
        };
    }
    let known = plan.pinned.or_else(|| plan.memory.get(plan.url));
    let opened = async {
        let Some(version) = known else {
            return detect(&engine, &plan, &memory, request).await;
        };
        match open_as(&engine, &plan, request.clone(), version).await {
            Err(error) if plan.pinned.is_none() && era::wrong_era(&error, version) => {
                tracing::debug!(%error, %version, "the remembered revision proved wrong; probing again");
                plan.memory.forget(plan.url);
                detect(&engine, &plan, &memory, request).await
            }
            outcome => outcome,
        }
    };
    tokio::select! {
        biased;
        _ = engine.closing().cancelled() => Err(Error::closed()),
        opened = opened.instrument(tracing::debug_span!("mcp.detect")) => opened,
    }
}

/// Opens the era of `version`, known (pinned or remembered).
async fn open_as(
    engine: &Arc<Engine<SdkFront>>,
    plan: &Plan<'_>,
    request: Request,
    version: ProtocolVersion,
) -> Result<()> {
    if version.is_modern() {
        match era::discover(engine, plan, version).await? {
            Probe::Opened(opened) => stateless(engine, request.id, opened).await,
            Probe::Prefers(instead) => sessions(engine, proposing(request, instead), None).await,
            Probe::Legacy(error) => Err(error),
        }
    } else if version.transport() == TransportKind::HttpSse {
        http_sse(engine, plan, proposing(request, version)).await
    } else {
        sessions(engine, proposing(request, version), None).await
    }
}

/// The spec's order, as `era::detect` has it: `server/discover`, then
/// The SDK's `initialize` (proposing the revision the discover answer
/// preferred, if it named one), then HTTP+SSE, each only when the last
/// answered "not this era". The era found is remembered.
async fn detect(
    engine: &Arc<Engine<SdkFront>>,
    plan: &Plan<'_>,
    memory: &Memory,
    request: Request,
) -> Result<()> {
    let probe = if engine.front.discover_refused.load(Ordering::Acquire) {
        // The SDK's own `server/discover` just showed it.
        Ok(Probe::Legacy(Error::protocol("not a 2026-07-28 server")))
    } else {
        era::discover(engine, plan, ProtocolVersion::MODERN).await
    };
    let request = match probe {
        Ok(Probe::Opened(opened)) => {
            let version = opened
                .generation
                .wire()
                .protocol_version()
                .unwrap_or(ProtocolVersion::MODERN);
            stateless(engine, request.id, opened).await?;
            plan.memory.remember(plan.url, version);
            return Ok(());
        }
        Ok(Probe::Prefers(instead)) => {
            tracing::debug!(%instead, "the server prefers a 2025 revision");
            proposing(request, instead)
        }
        Ok(Probe::Legacy(error)) => {
            tracing::debug!(%error, "not a 2026-07-28 server; trying initialize");
            request
        }
        Err(error) if era::not_this_era(&error, true) => {
            tracing::debug!(%error, "not a 2026-07-28 server; trying initialize");
            request
        }
        Err(error) => return Err(error),
    };
    let error = match sessions(engine, request.clone(), Some(memory.clone())).await {
        Err(error) if era::not_this_era(&error, false) => error,
        Err(error) => return redirected(engine, plan, request.id, error).await,
        outcome => return outcome,
    };
    tracing::debug!(%error, "no Streamable HTTP initialize; trying HTTP+SSE");
    plan.sse_found.store(false, Ordering::Relaxed);
    // Over HTTP+SSE, 2024-11-05 only (a server of both may answer a newer
    // one, which has no initialize over that transport).
    let request = proposing(request, ProtocolVersion::V2024_11_05);
    match http_sse(engine, plan, request).await {
        Ok(()) => {
            plan.memory.remember(plan.url, ProtocolVersion::V2024_11_05);
            Ok(())
        }
        // An HTTP+SSE server was found and failed: that is the cause.
        Err(sse) if plan.sse_found.load(Ordering::Relaxed) => Err(sse),
        Err(sse) => {
            tracing::debug!(error = %sse, "not an HTTP+SSE server either");
            Err(error)
        }
    }
}

/// The SDK's `initialize` refused (at the answer's head) with
/// `UnsupportedProtocolVersion` naming a 2026-07-28 revision we speak: a
/// redirection, as `era::detect` follows it, once: `server/discover` with
/// that revision, answered to the SDK as its `initialize`. Any other refusal
/// is the error.
async fn redirected(
    engine: &Arc<Engine<SdkFront>>,
    plan: &Plan<'_>,
    id: RequestId,
    refused: Error,
) -> Result<()> {
    let Some(version) = supported_instead(&refused).filter(|v| v.is_modern()) else {
        return Err(refused);
    };
    tracing::debug!(%version, "initialize was refused naming a 2026-07-28 revision; opening it");
    match era::discover(engine, plan, version).await? {
        Probe::Opened(opened) => {
            let version = opened
                .generation
                .wire()
                .protocol_version()
                .unwrap_or(version);
            stateless(engine, id, opened).await?;
            plan.memory.remember(plan.url, version);
            Ok(())
        }
        // No second redirection; the refusal says most.
        Probe::Prefers(_) | Probe::Legacy(_) => Err(refused),
    }
}

/// A stdio server's era, opened as [`Connector::stdio`](crate::Connector::stdio)
/// opens it (the stdio page's detection, a slow start waited for within
/// the deadline, a redirection followed), with the SDK's `clientInfo` and
/// capabilities: 2026-07-28 is answered to the SDK as over HTTP; a 2025
/// session's `initialize` result goes to the SDK as the server sent it, and
/// the handshake's `notifications/initialized`, already sent, is not sent
/// again when the SDK sends its own.
#[cfg(feature = "stdio")]
async fn stdio_era(engine: &Arc<Engine<SdkFront>>, plan: &Plan<'_>, id: RequestId) -> Result<()> {
    let phase = crate::session::shared::PhaseCell::default();
    let opened = era::open(engine, plan, &phase).await?;
    if opened.generation.is_stateless() {
        return stateless(engine, id, opened).await;
    }
    engine.set_ready(&opened.generation);
    {
        let mut handshake = lock(&engine.front.handshake);
        handshake.opening = Some((opened.generation, None));
        handshake.answered = Some(Ok(()));
        handshake.initialized_sent = true;
    }
    engine.front.give(answer(id, &opened.result)?).await;
    Ok(())
}

/// The SDK's `initialize` proposing `version` instead of its own choice.
fn proposing(mut request: Request, version: ProtocolVersion) -> Request {
    if let Some(Value::Object(params)) = &mut request.params {
        params.insert("protocolVersion".into(), version.as_str().into());
    }
    request
}

/// 2026-07-28: the server answered `server/discover`. The SDK's `initialize`
/// is answered from it (an `InitializeResult` naming 2026-07-28, so the SDK
/// writes its request metadata and drives multi round-trip results
/// itself); every later request goes out as a 2026-07-28 one.
async fn stateless(
    engine: &Arc<Engine<SdkFront>>,
    id: RequestId,
    opened: era::Opened,
) -> Result<()> {
    let generation = opened.generation;
    let version = generation
        .wire()
        .protocol_version()
        .unwrap_or(ProtocolVersion::MODERN);
    // An SDK of the 2025 revisions is told the one it proposed.
    let shown = match &engine.front.legacy_sdk {
        Some(proposed) => lock(proposed).unwrap_or(ProtocolVersion::LATEST),
        None => version,
    };
    let result = initialize_result(&opened.result, shown);
    engine.set_ready(&generation);
    {
        let mut handshake = lock(&engine.front.handshake);
        handshake.opening = Some((generation, None));
        handshake.subscription = era::subscription_filter(&opened.result["capabilities"]);
        handshake.answered = Some(Ok(()));
    }
    engine.front.give(answer(id, &result)?).await;
    Ok(())
}

/// The `InitializeResult` the SDK expects, from a `server/discover` result:
/// the revision in use, the capabilities, the server's name and version
/// (from `_meta`; empty when the server sent none, which the SDK requires),
/// the instructions.
fn initialize_result(discover: &Value, version: ProtocolVersion) -> Value {
    let mut server_info = match &discover["_meta"][SERVER_INFO_META] {
        Value::Object(info) => info.clone(),
        _ => serde_json::Map::new(),
    };
    for field in ["name", "version"] {
        if !server_info.get(field).is_some_and(Value::is_string) {
            server_info.insert(field.into(), "".into());
        }
    }
    let capabilities = match &discover["capabilities"] {
        capabilities @ Value::Object(_) => capabilities.clone(),
        _ => json!({}),
    };
    let mut result = json!({
        "protocolVersion": version.as_str(),
        "capabilities": capabilities,
        "serverInfo": server_info,
    });
    if let Some(instructions) = discover.get("instructions").filter(|i| i.is_string()) {
        result["instructions"] = instructions.clone();
    }
    result
}

/// A response to the SDK's request `id` with `result`.
fn answer(id: RequestId, result: &Value) -> Result<Message> {
    let raw = serde_json::value::to_raw_value(result)
        .map_err(|e| Error::protocol("a result that is no JSON").with_source(e))?;
    Ok(Message::Response(Response {
        id: Some(id),
        outcome: Ok(raw),
    }))
}

/// 2024-11-05: the HTTP+SSE stream, then the SDK's `initialize` answered on
/// it, read whole (HTTP+SSE answers every POST on the one stream); the SDK's
/// `notifications/initialized` follows on the endpoint the stream named.
/// No session id, so nothing to DELETE: the session ends with the stream.
async fn http_sse(engine: &Arc<Engine<SdkFront>>, plan: &Plan<'_>, request: Request) -> Result<()> {
    let id = request.id.clone();
    let (generation, result) = engine
        .open_http_sse(request, false, &plan.sse_found, plan.deadline)
        .await?;
    engine.set_ready(&generation);
    {
        let mut handshake = lock(&engine.front.handshake);
        handshake.opening = Some((generation, None));
        handshake.answered = Some(Ok(()));
    }
    engine.front.give(answer(id, &result)?).await;
    Ok(())
}

/// The 2025 era: the session is opened through the guard stack with the SDK's
/// own `initialize`, and this returns once the answer's head has arrived;
/// the answer is then read in the background and handed to the SDK as it
/// comes (a server request before the response reaches the SDK at once), the
/// response last. The revision it negotiates is remembered in `memory`
/// (when detected).
async fn sessions(
    engine: &Arc<Engine<SdkFront>>,
    request: Request,
    memory: Option<Memory>,
) -> Result<()> {
    let front = &engine.front;
    let id = request.id.clone();
    // Up to the head, bounded like a re-initialize; the SDK reads the rest.
    let started = engine
        .begin_open(request, engine.exchange_deadline())
        .await?;
    let generation = started.generation;
    lock(&front.handshake).opening = Some((generation.clone(), Some(started.opening)));
    // The session id is known: the SDK's answers to server requests on the
    // `initialize` answer (a `ping`) go to this session.
    engine.set_ready(&generation);
    let reader_engine = engine.clone();
    let spawned = engine.spawner().spawn(move |cancel| async move {
        let engine = reader_engine;
        let read = async {
            let outcome = started.waiter.read(&generation, started.answer).await;
            let answered = match &outcome {
                Ok(result) => result_value(result, "initialize")
                    .and_then(|result| negotiated(&result, Era::Sessions))
                    .map(|version| {
                        generation.wire().set_protocol_version(version);
                        if let Some(memory) = &memory {
                            memory.get().remember(&engine.front.url, version);
                        }
                    }),
                Err(error) => Err(error.duplicate()),
            };
            lock(&engine.front.handshake).answered = Some(answered);
            engine.front.resolve(id, outcome).await;
        };
        tokio::select! {
            _ = cancel.cancelled() => {}
            _ = read.instrument(tracing::debug_span!("mcp.initialize")) => {}
        }
    });
    if !spawned {
        return Err(Error::closed());
    }
    Ok(())
}

/// The SDK's own `server/discover` (its `Discover` or `Auto` lifecycle),
/// before any session: sent as a 2026-07-28 request, with the SDK's `_meta`
/// (its revision, `clientInfo` and capabilities, which every later request
/// carries too). A discover result that lists the revision makes it the one
/// every later request speaks (and is remembered for the endpoint); any
/// other answer reaches the SDK as it came, and the SDK's `Auto` mode then sends
/// `initialize`, which goes on without probing again.
async fn discover(engine: Arc<Engine<SdkFront>>, request: Request) -> Result<()> {
    let front = &engine.front;
    if front.attached {
        return Err(Error::builder(
            "this transport is attached to a 2025 session the caller owns:              `server/discover` has no place on it",
        ));
    }
    let meta = request.params.as_ref().and_then(|p| p.get("_meta"));
    let field = |key: &str| meta.and_then(|m| m.get(key)).cloned();
    let version = field(META_PROTOCOL_VERSION)
        .and_then(|v| v.as_str()?.parse::<ProtocolVersion>().ok())
        .filter(|v| v.is_modern())
        .unwrap_or(ProtocolVersion::MODERN);
    engine.set_client_meta(
        &field(META_CLIENT_INFO).unwrap_or(Value::Null),
        &field(META_CLIENT_CAPABILITIES).unwrap_or_else(|| json!({})),
    );
    let memory = front.memory(&engine)?;
    let generation = engine.stateless(version)?;
    let outcome = tokio::select! {
        biased;
        _ = engine.closing().cancelled() => return Err(Error::closed()),
        outcome = engine.request_on(&generation, &request, engine.exchange_deadline()) => outcome,
    };
    match &outcome {
        Ok(result) => {
            let lists = serde_json::from_str::<Value>(result.get()).is_ok_and(|result| {
                result["supportedVersions"]
                    .as_array()
                    .is_some_and(|listed| listed.iter().any(|v| v == version.as_str()))
            });
            if lists {
                engine.set_ready(&generation);
                memory.get().remember(&front.url, version);
            }
        }
        Err(error) if era::not_this_era(error, true) => {
            front.discover_refused.store(true, Ordering::Release);
        }
        Err(_) => {}
    }
    front.resolve(request.id, outcome).await;
    Ok(())
}

/// The SDK's `notifications/initialized`: sent once the `initialize` answer
/// was good; it completes the handshake and starts the listener (the GET
/// stream in the 2025 era, `subscriptions/listen` in 2026-07-28, which
/// has no such notification: it is not sent).
async fn initialized(engine: Arc<Engine<SdkFront>>, notification: Notification) -> Result<()> {
    let front = &engine.front;
    if front.attached {
        return Err(Error::builder(
            "this transport is attached to a session the caller owns, which is already \
             initialized: `notifications/initialized` is not sent again",
        ));
    }
    let (generation, already_sent) = {
        let handshake = lock(&front.handshake);
        match &handshake.answered {
            Some(Ok(())) => {}
            Some(Err(error)) => return Err(error.duplicate()),
            None => {
                return Err(Error::protocol(
                    "`notifications/initialized` before `initialize` was answered",
                ));
            }
        }
        match &handshake.opening {
            Some((generation, _)) => (generation.clone(), handshake.initialized_sent),
            None => return Err(Error::protocol("`notifications/initialized` sent twice")),
        }
    };
    if !generation.is_stateless() && !already_sent {
        tokio::select! {
            biased;
            _ = engine.closing().cancelled() => return Err(Error::closed()),
            sent = engine.notify(&generation, &notification, engine.exchange_deadline()) => sent?,
        }
    }
    let subscription = {
        let mut handshake = lock(&front.handshake);
        if let Some((_, Some(opening))) = handshake.opening.take() {
            opening.established();
        }
        handshake.subscription.take()
    };
    engine.start_listener(&generation);
    if let Some(filter) = subscription {
        engine.start_subscription(&generation, filter);
    }
    Ok(())
}

/// Any other request of the SDK's: POSTed on the current session up to its
/// answer's head (a session the server expired is replaced once first), and
/// the answer read in the background, resolving the request exactly once.
/// If the SDK gives the request up (`notifications/cancelled`) it stops
/// wherever it is: waiting for a session, POSTing, or reading.
async fn request(engine: Arc<Engine<SdkFront>>, request: Request) -> Result<()> {
    let closing = engine.closing().clone();
    let (number, stop) = engine.front.start_reading(&request.id);
    // Unregistered however this ends (the reader takes it over).
    let registered =
        scopeguard::guard((engine.clone(), request.id.clone()), move |(engine, id)| {
            engine.front.done_reading(&id, number);
        });
    let given_up = || Error::closed().with_message("the SDK gave up on the request");
    let mut renewed = false;
    loop {
        let generation = tokio::select! {
            biased;
            _ = closing.cancelled() => return Err(Error::closed()),
            _ = stop.cancelled() => return Err(given_up()),
            generation = engine.current() => generation?,
        };
        let extra = engine.front.param_headers(&generation, &request)?;
        let waiter = engine.waiter(request.id.clone());
        let posted = tokio::select! {
            biased;
            _ = closing.cancelled() => return Err(Error::closed()),
            _ = stop.cancelled() => return Err(given_up()),
            // The SDK times its own requests, and gives them up with
            // `notifications/cancelled`, which stops this.
            posted = engine.post_request(&generation, &request, &extra, Deadline::none()) => posted,
        };
        let answer = match posted {
            Ok(answer) => answer,
            Err(error) if error.is_session_expired() && generation.owned() && !renewed => {
                renewed = true;
                continue;
            }
            Err(error) => return Err(error),
        };
        let stop = stop.clone();
        let lists_tools = generation.is_stateless() && request.method == "tools/list";
        let spawned = engine.spawner().spawn(move |cancel| async move {
            let (engine, id) = &*registered;
            tokio::select! {
                _ = cancel.cancelled() => {}
                _ = stop.cancelled() => {
                    tracing::debug!(%id, "the SDK gave up on the request; its answer is read no more");
                }
                outcome = waiter.read(&generation, answer) => {
                    if let (true, Ok(result)) = (lists_tools, &outcome) {
                        engine.front.learn_tools(result);
                    }
                    engine.front.resolve(id.clone(), outcome).await;
                }
            }
        });
        return if spawned {
            Ok(())
        } else {
            Err(Error::closed())
        };
    }
}

/// A notification of the SDK's, on the current session; a response (the SDK's
/// answer to a server request), on the session that asked, if it is known.
async fn post(engine: Arc<Engine<SdkFront>>, message: Message) -> Result<()> {
    let asker = match &message {
        Message::Response(Response { id: Some(id), .. }) => engine.front.asker(id),
        Message::Notification(notification) => {
            if let Some(id) = cancelled_request(notification) {
                engine.front.stop_reading(&id);
            }
            None
        }
        _ => None,
    };
    let send = async {
        let generation = match asker {
            Some(generation) => generation,
            None => engine.current().await?,
        };
        match &message {
            Message::Notification(notification) => {
                engine
                    .notify(&generation, notification, engine.exchange_deadline())
                    .await
            }
            Message::Response(response) => engine.respond(&generation, response).await,
            Message::Request(_) => Err(Error::protocol("a request is not posted as a message")),
        }
    };
    tokio::select! {
        biased;
        _ = engine.closing().cancelled() => Err(Error::closed()),
        sent = send => sent,
    }
}

/// The request a `notifications/cancelled` gives up on.
fn cancelled_request(notification: &Notification) -> Option<RequestId> {
    if notification.method != "notifications/cancelled" {
        return None;
    }
    let id = notification.params.as_ref()?.get("requestId")?;
    serde_json::from_value(id.clone()).ok()
}

/// A message for `receive_message`, with what it is charged (a response).
struct Incoming {
    message: Message,
    /// Released once the SDK has the message.
    charge: Option<Charge>,
}

impl Weigh for Incoming {
    fn weight(&self) -> usize {
        self.message.weight()
    }
}

impl ScopedTransport {
    /// Sends one of the SDK's messages: `initialize` opens the server's era
    /// (see [`ScopedTransport`]), `notifications/initialized` ends the
    /// handshake, a request is POSTed (or written) and its answer read in
    /// the background, and anything else (an answer to a server request, a
    /// notification) goes out on the session. The future owns what it
    /// needs: it may outlive this borrow, and sends run concurrently with
    /// [`receive_message`](Self::receive_message).
    ///
    /// # Errors
    ///
    /// The era could not be opened (the server's HTTP error, a JSON-RPC
    /// error to `initialize` comes back through `receive_message` instead),
    /// the transport is closed, or the message could not be sent.
    pub fn send_message(
        &self,
        message: Message,
    ) -> impl Future<Output = Result<()>> + Send + 'static {
        let engine = self.engine.clone();
        async move {
            match message {
                Message::Request(r) if r.method == "initialize" => initialize(engine, r).await,
                Message::Request(r)
                    if r.method == "server/discover"
                        && engine.generation().is_none()
                        && !engine.front.initialize_sent.load(Ordering::Acquire) =>
                {
                    discover(engine, r).await
                }
                Message::Request(r) => request(engine, r).await,
                Message::Notification(n) if n.method == "notifications/initialized" => {
                    initialized(engine, n).await
                }
                other => post(engine, other).await,
            }
        }
    }

    /// [`send_message`](Self::send_message) for an SDK whose requests wait
    /// for their answer on the read side, as the Python SDK's do: a request
    /// that cannot be sent (the connect refused, an HTTP error, a JSON-RPC
    /// error in a 4xx answer) is answered, through
    /// [`receive_message`](Self::receive_message), with a JSON-RPC error
    /// response, and this returns `Ok`. The answer carries the server's
    /// JSON-RPC error when it sent one, else `-32603` with the cause as its
    /// message and `data` naming this transport, the HTTP status and
    /// whether the same request may succeed again (`retryable`). A closed
    /// transport, and a notification or answer that cannot be sent, still
    /// fail here.
    pub fn send_message_answered(
        &self,
        message: Message,
    ) -> impl Future<Output = Result<()>> + Send + 'static {
        let engine = self.engine.clone();
        let id = match &message {
            Message::Request(request) => Some(request.id.clone()),
            _ => None,
        };
        let sending = self.send_message(message);
        async move {
            if engine.closing().is_cancelled() {
                return Err(Error::closed());
            }
            let (error, id) = match (sending.await, id) {
                (Ok(()), _) => return Ok(()),
                (Err(error), Some(id)) if !error.is_closed() => (error, id),
                (Err(error), _) => return Err(error),
            };
            let answer = match error.rpc_error() {
                Some(rpc) => rpc.clone(),
                None => ErrorObject {
                    code: codes::INTERNAL_ERROR,
                    message: error.to_string(),
                    data: Some(json!({
                        "transport": "mcp-scoped-http",
                        "status": error.status().map(|s| s.as_u16()),
                        "retryable": error.is_retryable(),
                    })),
                },
            };
            engine
                .front
                .give(Message::Response(Response {
                    id: Some(id),
                    outcome: Err(answer),
                }))
                .await;
            Ok(())
        }
    }

    /// The next message from the server (responses, notifications, server
    /// requests), or `None` once the transport is closed. Cancel safe: a
    /// message is never lost to a dropped call. One caller at a time
    /// receives (a second waits for the first).
    pub async fn receive_message(&self) -> Option<Message> {
        let mut incoming = self.incoming.lock().await;
        let Incoming { message, charge } = tokio::select! {
            biased;
            _ = self.engine.closing().cancelled() => return None,
            incoming = incoming.recv() => incoming?,
        };
        drop(charge);
        Some(message)
    }

    /// Unwinds the guard stack: tasks, the DELETEs, hooks, the owned
    /// client. Idempotent; never fails (a failed DELETE is in the
    /// [`ReleaseReport`]). If this future is dropped half-way, the rest is
    /// done by the reaper.
    pub async fn close(&self) -> Result<()> {
        // Asked before the engine lets go of its generation.
        let stateless = self.engine.generation().is_some_and(|g| g.is_stateless());
        self.engine.close();
        drop(lock(&self.engine.front.handshake).opening.take());
        let stack = lock(&self.stack).take();
        if let Some(mut stack) = stack {
            let released = stack
                .unwind()
                .instrument(tracing::info_span!("mcp.close"))
                .await
                .of_stateless(stateless);
            tracing::debug!(?released, "the transport closed");
            if let Some(report) = lock(&self.report).take() {
                let _ = report.send(released);
            }
        }
        Ok(())
    }
}

impl ScopedTransport {
    /// Releases as a drop does, without waiting: nothing new starts, every
    /// `receive_message` ends, and what needs waiting for (the DELETE, a
    /// process tree's end) is handed to the reaper, which
    /// [`crate::shutdown`] waits for. For a transport shared behind an
    /// `Arc` whose last holder may be a future still in flight (a binding's
    /// object collected while its calls unwind). Later calls do nothing;
    /// [`close`](Self::close) then reports nothing.
    pub fn release_in_background(&self) {
        self.engine.close();
        drop(lock(&self.engine.front.handshake).opening.take());
        let stack = lock(&self.stack).take();
        drop(stack);
        // No report comes now: a `ReleaseReport` waiting says `None`.
        drop(lock(&self.report).take());
    }
}

impl Drop for ScopedTransport {
    fn drop(&mut self) {
        // Nothing new starts; the stack's own drop hands the DELETEs to the
        // reaper.
        self.release_in_background();
    }
}

impl fmt::Debug for ScopedTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScopedTransport")
            .field("open", &self.engine.generation().is_some())
            .field("closed", &self.engine.closing().is_cancelled())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn annotated(name: &str, params: usize) -> Value {
        let properties: serde_json::Map<String, Value> = (0..params)
            .map(|i| {
                (
                    format!("p{i}"),
                    json!({"type": "string", "x-mcp-header": format!("P{i}")}),
                )
            })
            .collect();
        json!({"name": name, "inputSchema": {"type": "object", "properties": properties}})
    }

    #[test]
    fn tool_headers_are_bounded_in_tools_and_parameters() {
        let mut tools = ToolHeaders::default();
        tools.learn(&[annotated("a", 2), annotated("plain", 0)]);
        assert!(matches!(tools.by_name.get("a"), Some(Ok(h)) if h.len() == 2));
        assert!(!tools.by_name.contains_key("plain"), "nothing to keep");
        // Listed again with fewer: replaced, and counted once.
        tools.learn(&[annotated("a", 1)]);
        assert_eq!(tools.held, 1);

        // Pages that add up past the bound start the memory again.
        let page: Vec<Value> = (0..4)
            .map(|i| annotated(&format!("big{i}"), PARAM_HEADERS_KEPT / 4))
            .collect();
        tools.learn(&page);
        assert!(tools.held <= PARAM_HEADERS_KEPT, "{}", tools.held);
        tools.learn(&[annotated("more", 8)]);
        assert!(tools.held <= PARAM_HEADERS_KEPT, "{}", tools.held);
        assert!(tools.by_name.contains_key("more"));

        // One tool over the bound alone: refused, naming the limit.
        tools.learn(&[annotated("huge", PARAM_HEADERS_KEPT + 1)]);
        let Some(Err(reason)) = tools.by_name.get("huge") else {
            panic!("kept");
        };
        assert!(reason.contains("16384"), "{reason}");

        // Tools past the count bound, likewise.
        let many: Vec<Value> = (0..TOOLS_KEPT + 10)
            .map(|i| annotated(&format!("t{i}"), 1))
            .collect();
        tools.learn(&many);
        assert!(tools.by_name.len() <= TOOLS_KEPT);
    }
}
