//! An in-process, fault-injecting MCP server speaking Streamable HTTP (2025
//! revisions and 2026-07-28) or the older HTTP+SSE transport, for tests of
//! this crate and of code built on it.
//!
//! [`TestServer::start`] binds `127.0.0.1:0` and serves on a thread with its
//! own tokio runtime, so its tasks never show up in the caller's runtime.
//! Every request is recorded ([`TestServer::requests`]); scripted
//! [`Fault`]s replace normal answers for the requests they match.
//!
//! ```no_run
//! use mcp_scoped_http_testkit::{Fault, FaultAction, ServerConfig, TestServer};
//!
//! let server = TestServer::start(
//!     ServerConfig::default()
//!         .with_page_size(1)
//!         .with_fault(Fault::on_rpc("tools/list", FaultAction::status(500)).page(2).times(1)),
//! );
//! let url = server.url(); // http://127.0.0.1:PORT/mcp
//! # drop(url);
//! ```
//!
//! # Eras
//!
//! [`ServerConfig::eras`] picks the protocol eras served ([`Eras`]): the
//! 2025 revisions of Streamable HTTP (the default), 2026-07-28 alone, both
//! on one endpoint (per request, by the `MCP-Protocol-Version` header), or
//! the deprecated 2024-11-05 HTTP+SSE transport. Every request records the
//! era that served it ([`RecordedRequest::era`]) and its request metadata
//! ([`RecordedRequest::mcp_method`], [`RecordedRequest::mcp_name`],
//! [`RecordedRequest::mcp_param`], [`RecordedRequest::meta`]...).
//!
//! ```no_run
//! use mcp_scoped_http_testkit::{
//!     Eras, Fault, FaultAction, InputRequest, ServerConfig, TestServer, TestTool,
//! };
//!
//! let server = TestServer::start(
//!     ServerConfig::default()
//!         .with_eras(Eras::Modern)
//!         // `Mcp-Param-Region` must mirror the `region` argument.
//!         .with_tool(TestTool::header_param("route", "region", "Region"))
//!         // Asks for an elicitation twice before its final result.
//!         .with_tool(TestTool::input_required("ask", InputRequest::Elicitation, 2))
//!         // The first request is told to retry with a supported version.
//!         .with_fault(
//!             Fault::any(FaultAction::UnsupportedVersion {
//!                 supported: vec!["2026-07-28".into()],
//!             })
//!             .times(1),
//!         ),
//! );
//! // A test then triggers notifications on `subscriptions/listen` streams:
//! server.list_changed("tools");
//! ```
//!
//! # Authorization
//!
//! [`AuthServer`] is an auto-approving OAuth 2.1 authorization server
//! (metadata, PKCE, refresh, dynamic registration, scripted
//! [`AuthFault`]s); [`ServerConfig::with_authorization`] makes the MCP
//! server require the tokens it issues ([`ResourceAuth`]); see
//! [`AuthServer`] for an example.
#![deny(missing_docs)]

mod auth;
mod body;
pub mod churn;
mod config;
mod counting;
mod fault;
mod handler;
mod http_sse;
mod mcp;
mod modern;
mod respond;
mod serve;
mod sse;
pub mod stdio;

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

pub use auth::{
    AuthClient, AuthConfig, AuthFault, AuthRequest, AuthServer, AuthStats, ChallengeScope,
    ClientAuthMethod, IssuedToken, MetadataLocation, ResourceAuth, ResourceFault,
};
pub use config::{
    Era, Eras, InputRequest, InvalidHeader, ListenMode, ResponseMode, ServerConfig, SseEndpoint,
    TestTool, TlsIdentity, ToolBehavior,
};
pub use fault::{Fault, FaultAction, FaultMatch};

use fault::ActiveFault;
use mcp::Catalog;
use serde_json::Value;

use mcp_scoped_http::TransportKind;

/// Locks `mutex`, ignoring poison: every value the kit keeps under a lock
/// is changed in one step, so a panic elsewhere cannot leave it half-made.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// One request as the server received it.
#[derive(Clone, Debug)]
pub struct RecordedRequest {
    /// HTTP method.
    pub method: http::Method,
    /// Request path (without query).
    pub path: String,
    /// The query, if any (an HTTP+SSE POST's `session_id=...`).
    pub query: Option<String>,
    /// The era that served it: which path a dual-era server chose, `None`
    /// for a request to no endpoint of the server (answered 404).
    pub era: Option<Era>,
    /// Request headers.
    pub headers: http::HeaderMap,
    /// The body parsed as JSON, if there was a body and it parsed.
    pub body: Option<serde_json::Value>,
    /// `method` of the (first) JSON-RPC message of the body, if any.
    pub rpc_method: Option<String>,
    /// Id of the TCP connection it arrived on (1, 2, ... in accept order).
    pub connection: u64,
}

impl RecordedRequest {
    /// The value of header `name` (any case), if present and valid UTF-8.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// Every value of header `name` (any case), in order, that is UTF-8.
    pub fn header_all(&self, name: &str) -> Vec<&str> {
        self.headers
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .collect()
    }

    /// The `MCP-Protocol-Version` header.
    pub fn protocol_version_header(&self) -> Option<&str> {
        self.header("mcp-protocol-version")
    }

    /// The `Mcp-Method` header.
    pub fn mcp_method(&self) -> Option<&str> {
        self.header("mcp-method")
    }

    /// The `Mcp-Name` header, decoded if in the `=?base64?...?=` form
    /// (`None` if absent or a malformed sentinel); see
    /// [`header`](Self::header) for the raw value.
    pub fn mcp_name(&self) -> Option<String> {
        self.header("mcp-name")
            .and_then(modern::decode_header_value)
    }

    /// The `Mcp-Param-{name}` header (`name` in any case, e.g. `"Region"`),
    /// decoded like [`mcp_name`](Self::mcp_name).
    pub fn mcp_param(&self, name: &str) -> Option<String> {
        self.header(&format!("mcp-param-{name}"))
            .and_then(modern::decode_header_value)
    }

    /// Every `Mcp-Param-*` header as `(name after the prefix, lowercase;
    /// decoded value, or the raw one if it is a malformed sentinel)`, in
    /// order.
    pub fn mcp_params(&self) -> Vec<(String, String)> {
        self.headers
            .iter()
            .filter_map(|(name, value)| {
                let rest = name.as_str().strip_prefix(modern::PARAM_PREFIX)?;
                let raw = value.to_str().ok()?;
                let decoded = modern::decode_header_value(raw).unwrap_or_else(|| raw.to_owned());
                Some((rest.to_owned(), decoded))
            })
            .collect()
    }

    /// The (first) JSON-RPC message's `params`, if any.
    pub fn params(&self) -> Option<&Value> {
        let body = self.body.as_ref()?;
        let first = match body {
            Value::Array(a) => a.first()?,
            v => v,
        };
        first.get("params")
    }

    /// The (first) JSON-RPC message's `params._meta`, if any.
    pub fn meta(&self) -> Option<&Value> {
        self.params()?.get("_meta")
    }

    /// `params._meta["io.modelcontextprotocol/protocolVersion"]`.
    pub fn meta_protocol_version(&self) -> Option<&str> {
        self.meta()?.get(modern::META_PROTOCOL_VERSION)?.as_str()
    }

    /// `params._meta["io.modelcontextprotocol/clientInfo"]`.
    pub fn meta_client_info(&self) -> Option<&Value> {
        self.meta()?.get(modern::META_CLIENT_INFO)
    }

    /// `params._meta["io.modelcontextprotocol/clientCapabilities"]`.
    pub fn meta_client_capabilities(&self) -> Option<&Value> {
        self.meta()?.get(modern::META_CLIENT_CAPABILITIES)
    }
}

/// What became of one session the server minted, per
/// [`TestServer::session_log`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SessionRecord {
    /// The session id, as sent in `Mcp-Session-Id` (lossily decoded if a
    /// [`FaultAction::SessionId`] made it no UTF-8).
    pub id: String,
    /// DELETE requests that carried this id, whatever their outcome (a
    /// second DELETE of a session is answered 404, and still counts).
    pub deletes: usize,
    /// Whether the server itself ended it while it was live
    /// ([`TestServer::expire_sessions`], [`TestServer::expire_session`],
    /// [`FaultAction::ExpireSession`]).
    pub expired: bool,
    /// Whether it is live now (neither deleted nor expired, nor its
    /// HTTP+SSE stream closed).
    pub live: bool,
    /// The transport: a Streamable HTTP session (minted by `initialize`)
    /// or an HTTP+SSE one (opened by the GET stream).
    pub transport: TransportKind,
    /// HTTP+SSE: whether the client ended it by closing its stream.
    pub stream_closed: bool,
}

impl SessionRecord {
    fn minted(id: String, transport: TransportKind) -> Self {
        SessionRecord {
            id,
            deletes: 0,
            expired: false,
            live: true,
            transport,
            stream_closed: false,
        }
    }
}

/// Counters of a [`TestServer`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ServerStats {
    /// TCP connections accepted so far.
    pub connections_accepted: usize,
    /// TCP connections currently open.
    pub connections_open: usize,
    /// DELETE requests received (whatever their outcome).
    pub deletes: usize,
    /// Sessions minted by `initialize`, and HTTP+SSE sessions opened by a
    /// GET, so far.
    pub sessions_created: usize,
    /// Sessions currently alive (minted and not deleted or expired; an
    /// HTTP+SSE session while its stream is open).
    pub live_sessions: usize,
    /// GET listening streams (2025) currently open.
    pub listen_streams_open: usize,
    /// HTTP+SSE streams currently open.
    pub sse_streams_open: usize,
    /// HTTP+SSE sessions the client ended by closing its stream, so far.
    pub sse_streams_closed_by_client: usize,
    /// `subscriptions/listen` streams (2026-07-28) currently open.
    pub subscriptions_open: usize,
    /// `input_required` results sent by multi round-trip tools, so far.
    pub input_required_sent: usize,
}

/// A running test server; it stops when dropped (or on [`TestServer::shutdown`]).
pub struct TestServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for TestServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestServer")
            .field("url", &self.url())
            .finish_non_exhaustive()
    }
}

/// A chunk sender feeding an SSE body.
type ChunkSender = mpsc::Sender<Result<Bytes, std::io::Error>>;

/// An open GET listening stream.
struct Listener {
    session: Option<String>,
    tx: ChunkSender,
}

/// A response kept for replay on a GET with `Last-Event-ID`.
struct Replay {
    session: Option<String>,
    /// Events sent as they are, first.
    events: Vec<Bytes>,
    /// Messages sent after them, one event (with a fresh id) each.
    messages: Vec<serde_json::Value>,
}

/// An open `subscriptions/listen` stream.
struct Subscription {
    /// The listen request's id: the subscription id.
    id: Value,
    /// The filter the server agreed to (as acknowledged).
    filter: Value,
    tx: ChunkSender,
}

impl Subscription {
    /// Whether the filter asks for `notifications/<kind>/list_changed`.
    fn wants_list_changed(&self, kind: &str) -> bool {
        let key = format!("{kind}ListChanged");
        self.filter.get(&key) == Some(&Value::Bool(true))
    }

    /// Whether the filter asks for updates of `uri`.
    fn wants_updates_of(&self, uri: &str) -> bool {
        self.filter
            .get("resourceSubscriptions")
            .and_then(Value::as_array)
            .is_some_and(|uris| uris.iter().any(|u| u.as_str() == Some(uri)))
    }
}

/// A server request sent on a POST's SSE stream, waiting for its answer.
struct PendingAnswer {
    /// The session the answer must come from.
    session: Option<String>,
    tx: oneshot::Sender<serde_json::Value>,
}

/// A POSTed request being delayed, hung or waiting on a server request,
/// which a `notifications/cancelled` from its session ends early.
struct Inflight {
    key: u64,
    session: Option<String>,
    /// The ids of the requests in the POST body.
    ids: Vec<serde_json::Value>,
    cancel: CancellationToken,
}

struct State {
    requests: Vec<RecordedRequest>,
    faults: Vec<ActiveFault>,
    /// Live sessions.
    sessions: HashSet<String>,
    /// Live HTTP+SSE sessions: their stream's sender, by session id.
    sse_sessions: HashMap<String, ChunkSender>,
    /// Open `subscriptions/listen` streams.
    subscriptions: Vec<Subscription>,
    /// Every session minted, in order (`live` is filled in when read).
    session_log: Vec<SessionRecord>,
    listeners: Vec<Listener>,
    replays: HashMap<String, Replay>,
    /// The catalog served now.
    catalog: Catalog,
    /// Responses the client POSTed, in order.
    client_answers: Vec<serde_json::Value>,
    /// `requestId`s of the `notifications/cancelled` received, in order.
    cancelled: Vec<serde_json::Value>,
    /// Server requests on POST streams waiting for an answer, by id.
    pending: HashMap<String, PendingAnswer>,
    inflight: Vec<Inflight>,
}

#[derive(Default)]
struct Counters {
    accepted: AtomicUsize,
    open: AtomicUsize,
    deletes: AtomicUsize,
    sessions_created: AtomicUsize,
    listen_open: AtomicUsize,
    sse_open: AtomicUsize,
    sse_closed_by_client: AtomicUsize,
    subscriptions_open: AtomicUsize,
    input_required: AtomicUsize,
}

/// State shared by the handle and the server thread.
struct Shared {
    config: ServerConfig,
    /// `http://127.0.0.1:PORT` (or `https://`).
    origin: String,
    state: Mutex<State>,
    counters: Counters,
    next_event: AtomicU64,
    next_session: AtomicU64,
    /// Numbers server requests (`srv-1`, ...) and in-flight entries.
    next_server_request: AtomicU64,
    next_inflight: AtomicU64,
    shutdown: CancellationToken,
}

impl State {
    /// Counts a DELETE that carried `id` in the session log.
    fn note_delete(&mut self, id: &str) {
        if let Some(record) = self.session_log.iter_mut().rev().find(|r| r.id == id) {
            record.deletes += 1;
        }
    }

    /// Ends a live session: later requests with its id get 404, its
    /// listening streams end (their senders are dropped), its replays go.
    /// Returns whether it was live.
    fn end_session(&mut self, id: &str) -> bool {
        if self.sse_sessions.remove(id).is_some() {
            return true;
        }
        if !self.sessions.remove(id) {
            return false;
        }
        self.listeners.retain(|l| l.session.as_deref() != Some(id));
        self.replays.retain(|_, r| r.session.as_deref() != Some(id));
        true
    }

    /// Ends a live session as if it had expired, and logs it so.
    fn expire(&mut self, id: &str) -> bool {
        if !self.end_session(id) {
            return false;
        }
        if let Some(record) = self.session_log.iter_mut().rev().find(|r| r.id == id) {
            record.expired = true;
        }
        true
    }
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// A fresh, server-wide unique SSE event id.
    fn event_id(&self) -> String {
        format!("ev-{}", self.next_event.fetch_add(1, Ordering::Relaxed) + 1)
    }

    /// One SSE event in this server's framing (line ends).
    fn event(&self, id: Option<&str>, retry_ms: Option<u64>, data: &str) -> Bytes {
        self.framing().event(None, id, retry_ms, data)
    }

    /// One `event: message` event with no id (2026-07-28 and HTTP+SSE
    /// streams), holding `message`.
    fn modern_event(&self, message: &Value) -> Bytes {
        self.framing()
            .event(Some("message"), None, None, &message.to_string())
    }

    fn framing(&self) -> sse::Framing {
        sse::Framing {
            crlf: self.config.sse_crlf,
        }
    }

    /// Whether session `id` is live (Streamable HTTP or HTTP+SSE).
    fn is_live(st: &State, id: &str) -> bool {
        st.sessions.contains(id) || st.sse_sessions.contains_key(id)
    }

    /// A fresh, server-wide unique id for a server-to-client request.
    fn server_request_id(&self) -> String {
        let n = self.next_server_request.fetch_add(1, Ordering::Relaxed) + 1;
        format!("srv-{n}")
    }
}

/// Decrements a counter when dropped.
struct CountGuard {
    shared: Arc<Shared>,
    which: fn(&Counters) -> &AtomicUsize,
}

impl CountGuard {
    fn new(shared: Arc<Shared>, which: fn(&Counters) -> &AtomicUsize) -> Self {
        which(&shared.counters).fetch_add(1, Ordering::SeqCst);
        CountGuard { shared, which }
    }
}

impl Drop for CountGuard {
    fn drop(&mut self) {
        (self.which)(&self.shared.counters).fetch_sub(1, Ordering::SeqCst);
    }
}

impl TestServer {
    /// Starts a server on `127.0.0.1:0` in a new thread with its own tokio
    /// runtime, and returns once it is listening.
    ///
    /// # Panics
    ///
    /// If the socket cannot be bound, the runtime cannot be built, or the TLS
    /// identity is invalid.
    pub fn start(mut config: ServerConfig) -> TestServer {
        let (std_listener, addr) = serve::bind_loopback();
        let tls = config
            .tls
            .as_ref()
            .map(|id| handler::tls_acceptor(id, config.tls_client_ca.as_deref()));
        let scheme = if tls.is_some() { "https" } else { "http" };
        let faults = std::mem::take(&mut config.faults)
            .into_iter()
            .map(ActiveFault::new)
            .collect();
        let catalog = Catalog::of(&config);
        let shared = Arc::new(Shared {
            config,
            origin: format!("{scheme}://{addr}"),
            state: Mutex::new(State {
                requests: Vec::new(),
                faults,
                sessions: HashSet::new(),
                sse_sessions: HashMap::new(),
                subscriptions: Vec::new(),
                session_log: Vec::new(),
                listeners: Vec::new(),
                replays: HashMap::new(),
                catalog,
                client_answers: Vec::new(),
                cancelled: Vec::new(),
                pending: HashMap::new(),
                inflight: Vec::new(),
            }),
            counters: Counters::default(),
            next_event: AtomicU64::new(0),
            next_session: AtomicU64::new(0),
            next_server_request: AtomicU64::new(0),
            next_inflight: AtomicU64::new(0),
            shutdown: CancellationToken::new(),
        });
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name(counting::SERVER_THREAD_NAME)
            .on_thread_start(counting::mark_server_thread)
            .enable_all()
            .build()
            .expect("testkit: build runtime");
        let thread = serve::spawn_thread(
            counting::SERVER_THREAD_NAME,
            runtime,
            accept_loop(std_listener, tls, shared.clone()),
        );
        TestServer {
            addr,
            shared,
            thread: Some(thread),
        }
    }

    /// The MCP endpoint URL, e.g. `http://127.0.0.1:PORT/mcp`.
    pub fn url(&self) -> String {
        format!("{}{}", self.shared.origin, self.shared.config.path)
    }

    /// The socket address the server listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The URL of its protected resource metadata, with
    /// [`ServerConfig::with_authorization`]; `None` without.
    pub fn resource_metadata_url(&self) -> Option<String> {
        let cfg = &self.shared.config;
        let auth = cfg.authorization.as_ref()?;
        Some(format!(
            "{}{}",
            self.shared.origin,
            auth.metadata_path(&cfg.path)
        ))
    }

    /// Every request received so far, in arrival order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared.state().requests.clone()
    }

    /// Forgets the recorded requests, and the [`session_log`](Self::session_log)
    /// records of sessions that are over (live ones stay).
    pub fn clear_requests(&self) {
        let mut st = self.shared.state();
        // Freed, not just emptied: long churn runs clear between rounds.
        drop(std::mem::take(&mut st.requests));
        let State {
            session_log,
            sessions,
            sse_sessions,
            ..
        } = &mut *st;
        session_log.retain(|r| sessions.contains(&r.id) || sse_sessions.contains_key(&r.id));
        session_log.shrink_to_fit();
    }

    /// Every session `initialize` minted, in order: how many DELETEs
    /// carried its id, whether the server expired it, whether it is live.
    /// Kept, like the requests, only while
    /// [`ServerConfig::record_requests`] is on.
    pub fn session_log(&self) -> Vec<SessionRecord> {
        let st = self.shared.state();
        st.session_log
            .iter()
            .map(|r| SessionRecord {
                live: Shared::is_live(&st, &r.id),
                ..r.clone()
            })
            .collect()
    }

    /// Current counters.
    pub fn stats(&self) -> ServerStats {
        let c = &self.shared.counters;
        let live_sessions = {
            let st = self.shared.state();
            st.sessions.len() + st.sse_sessions.len()
        };
        ServerStats {
            connections_accepted: c.accepted.load(Ordering::SeqCst),
            connections_open: c.open.load(Ordering::SeqCst),
            deletes: c.deletes.load(Ordering::SeqCst),
            sessions_created: c.sessions_created.load(Ordering::SeqCst),
            live_sessions,
            listen_streams_open: c.listen_open.load(Ordering::SeqCst),
            sse_streams_open: c.sse_open.load(Ordering::SeqCst),
            sse_streams_closed_by_client: c.sse_closed_by_client.load(Ordering::SeqCst),
            subscriptions_open: c.subscriptions_open.load(Ordering::SeqCst),
            input_required_sent: c.input_required.load(Ordering::SeqCst),
        }
    }

    /// Adds a scripted fault after those already present.
    pub fn push_fault(&self, fault: Fault) {
        self.shared.state().faults.push(ActiveFault::new(fault));
    }

    /// Removes every scripted fault.
    pub fn clear_faults(&self) {
        drop(std::mem::take(&mut self.shared.state().faults));
    }

    /// Ends every live session, as if they had expired: later requests with
    /// their ids get 404, and their listening streams end.
    pub fn expire_sessions(&self) {
        let mut st = self.shared.state();
        let State {
            session_log,
            sessions,
            sse_sessions,
            ..
        } = &mut *st;
        for record in session_log.iter_mut() {
            if sessions.contains(&record.id) || sse_sessions.contains_key(&record.id) {
                record.expired = true;
            }
        }
        st.sessions.clear();
        st.sse_sessions.clear();
        st.listeners.clear();
        st.replays.clear();
    }

    /// Ends one session as if it had expired, like
    /// [`expire_sessions`](Self::expire_sessions) for that id alone (see
    /// also [`FaultAction::ExpireSession`]). Returns whether it was live.
    pub fn expire_session(&self, id: &str) -> bool {
        self.shared.state().expire(id)
    }

    /// Sends a JSON-RPC message (notification or server-to-client request) as
    /// one event on every open listening stream: the 2025 GET streams (an
    /// event with an id) and the HTTP+SSE streams (`event: message`).
    /// Returns how many got it. (`subscriptions/listen` streams are fed by
    /// [`list_changed`](Self::list_changed) and
    /// [`resource_updated`](Self::resource_updated).)
    pub fn notify_listeners(&self, message: &serde_json::Value) -> usize {
        let mut st = self.shared.state();
        st.listeners.retain(|l| !l.tx.is_closed());
        let mut sent = 0;
        for l in &st.listeners {
            let ev = self
                .shared
                .event(Some(&self.shared.event_id()), None, &message.to_string());
            if l.tx.try_send(Ok(ev)).is_ok() {
                sent += 1;
            }
        }
        for tx in st.sse_sessions.values() {
            if tx.try_send(Ok(self.shared.modern_event(message))).is_ok() {
                sent += 1;
            }
        }
        sent
    }

    /// Sends `message` as one event with an id on every open listening
    /// stream, then ends those streams, as a server that restarts its
    /// streams does. A GET that resumes one with that event's id as
    /// `Last-Event-ID` (and the same session) gets the same event again,
    /// same id and data, as a server that delivers at least once may send
    /// it, and then that stream ends too. Returns how many streams got it.
    pub fn cut_listeners_after(&self, message: &serde_json::Value) -> usize {
        let mut st = self.shared.state();
        let listeners = std::mem::take(&mut st.listeners);
        let mut sent = 0;
        for listener in listeners {
            let id = self.shared.event_id();
            let event = self.shared.event(Some(&id), None, &message.to_string());
            if listener.tx.try_send(Ok(event.clone())).is_ok() {
                sent += 1;
                st.replays.insert(
                    id,
                    Replay {
                        session: listener.session.clone(),
                        events: vec![event],
                        messages: Vec::new(),
                    },
                );
            }
            // Dropping the sender ends the stream after what it queued.
        }
        sent
    }

    /// Sends a JSON-RPC request from the server,
    /// `{"jsonrpc":"2.0","id":"srv-N","method":method,"params":params}`, as
    /// one event on every open listening stream, each with its own new id;
    /// returns how many got it; on HTTP+SSE streams it is an `event:
    /// message`. The client's answers (POSTed JSON-RPC responses) show in
    /// [`TestServer::client_answers`].
    pub fn request_listeners(&self, method: &str, params: serde_json::Value) -> usize {
        let mut st = self.shared.state();
        st.listeners.retain(|l| !l.tx.is_closed());
        let mut sent = 0;
        for l in &st.listeners {
            let msg = mcp::server_request(&self.shared.server_request_id(), method, &params);
            let ev = self
                .shared
                .event(Some(&self.shared.event_id()), None, &msg.to_string());
            if l.tx.try_send(Ok(ev)).is_ok() {
                sent += 1;
            }
        }
        for tx in st.sse_sessions.values() {
            let msg = mcp::server_request(&self.shared.server_request_id(), method, &params);
            if tx.try_send(Ok(self.shared.modern_event(&msg))).is_ok() {
                sent += 1;
            }
        }
        sent
    }

    /// Every JSON-RPC response the client POSTed (its answers to server
    /// requests, from [`FaultAction::ServerRequest`] or
    /// [`TestServer::request_listeners`]), whole, in arrival order. Only
    /// POSTs that passed the session check count.
    pub fn client_answers(&self) -> Vec<serde_json::Value> {
        self.shared.state().client_answers.clone()
    }

    /// The `params.requestId` of every `notifications/cancelled` the client
    /// POSTed, in arrival order (`null` if it had none). Only POSTs that
    /// passed the session check count.
    pub fn cancelled(&self) -> Vec<serde_json::Value> {
        self.shared.state().cancelled.clone()
    }

    /// Serves `n` tools (`tool-000`, ...) from now on: lists, `tools/call`
    /// and the capabilities of later `initialize`s. Cursors issued before
    /// stay valid only while they point inside the new catalog.
    pub fn set_tools(&self, n: usize) {
        self.shared.state().catalog.tools = n;
    }

    /// Serves `n` prompts (`prompt-000`, ...) from now on, like
    /// [`TestServer::set_tools`].
    pub fn set_prompts(&self, n: usize) {
        self.shared.state().catalog.prompts = n;
    }

    /// Serves `n` resources (`file:///r/000`, ...) from now on, like
    /// [`TestServer::set_tools`]. Resource templates are unchanged.
    pub fn set_resources(&self, n: usize) {
        self.shared.state().catalog.resources = n;
    }

    /// Sends `notifications/<kind>/list_changed` on every open listening
    /// stream (as [`notify_listeners`](Self::notify_listeners)) and on every
    /// `subscriptions/listen` stream whose filter asked for it (with
    /// `_meta["io.modelcontextprotocol/subscriptionId"]`); returns how many
    /// streams got it.
    ///
    /// # Panics
    ///
    /// If `kind` is not `"tools"`, `"prompts"` or `"resources"`.
    pub fn list_changed(&self, kind: &str) -> usize {
        assert!(
            matches!(kind, "tools" | "prompts" | "resources"),
            "testkit: list_changed kind must be tools, prompts or resources, not {kind:?}"
        );
        let method = format!("notifications/{kind}/list_changed");
        let listeners = self.notify_listeners(&serde_json::json!({
            "jsonrpc": "2.0",
            "method": method,
        }));
        listeners
            + self.notify_subscriptions(
                |s| s.wants_list_changed(kind),
                &method,
                serde_json::Map::new(),
            )
    }

    /// Sends `notifications/resources/updated` for `uri` on every
    /// `subscriptions/listen` stream whose `resourceSubscriptions` holds
    /// it; returns how many got it.
    pub fn resource_updated(&self, uri: &str) -> usize {
        let mut params = serde_json::Map::new();
        params.insert("uri".into(), Value::String(uri.to_owned()));
        self.notify_subscriptions(
            |s| s.wants_updates_of(uri),
            "notifications/resources/updated",
            params,
        )
    }

    fn notify_subscriptions(
        &self,
        wants: impl Fn(&Subscription) -> bool,
        method: &str,
        params: serde_json::Map<String, Value>,
    ) -> usize {
        let mut st = self.shared.state();
        st.subscriptions.retain(|s| !s.tx.is_closed());
        let mut sent = 0;
        for sub in st.subscriptions.iter().filter(|s| wants(s)) {
            let msg = modern::subscription_message(&sub.id, method, params.clone());
            if sub.tx.try_send(Ok(self.shared.modern_event(&msg))).is_ok() {
                sent += 1;
            }
        }
        sent
    }

    /// Ends every `subscriptions/listen` stream gracefully, as a server
    /// shutting down does: each gets its `subscriptions/listen` response
    /// (`resultType: "complete"`, the subscription id in `_meta`), then
    /// ends. Returns how many there were.
    pub fn end_subscriptions(&self) -> usize {
        let subs = std::mem::take(&mut self.shared.state().subscriptions);
        let mut ended = 0;
        for sub in subs {
            let end = modern::subscription_end(&self.shared.config, &sub.id);
            if sub.tx.try_send(Ok(self.shared.modern_event(&end))).is_ok() {
                ended += 1;
            }
            // Dropping the sender ends the stream after what it queued.
        }
        ended
    }

    /// Stops the server: stops accepting, closes every connection (even with
    /// requests hanging) and joins the server thread. Same as dropping it.
    pub fn shutdown(self) {
        drop(self);
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        // Best effort: the connections are closed right after.
        self.end_subscriptions();
        self.shared.shutdown.cancel();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        let mut st = self.shared.state();
        st.listeners.clear();
        st.sse_sessions.clear();
        st.subscriptions.clear();
    }
}

async fn accept_loop(
    std_listener: std::net::TcpListener,
    tls: Option<tokio_rustls::TlsAcceptor>,
    shared: Arc<Shared>,
) {
    let mut next_conn: u64 = 0;
    let serve_one = |tcp| {
        next_conn += 1;
        let guard = CountGuard::new(shared.clone(), |c| &c.open);
        shared.counters.accepted.fetch_add(1, Ordering::SeqCst);
        handler::serve_connection(tcp, tls.clone(), shared.clone(), next_conn, guard)
    };
    let stopped = || {
        let mut st = shared.state();
        st.listeners.clear();
        st.sse_sessions.clear();
        st.subscriptions.clear();
    };
    serve::accept_until(std_listener, &shared.shutdown, serve_one, stopped).await;
}
