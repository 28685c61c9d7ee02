//! The connector: open, initialize, initialized, listen, discover, with the
//! guard stack under every step.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::sync::mpsc;
use tracing::Instrument;

use super::discovery::{Discovery, discover};
use super::handlers::Handlers;
use super::listener;
use super::shared::{Resumption, Shared, negotiated};
use super::{Session, SessionInfo, SessionOwnership, Timings};
use crate::client::{HeaderHook, HttpClient, HttpClientBuilder, Ownership, ScopeId};
use crate::error::{ConnectPhase, Error, Result};
use crate::jsonrpc::{ErrorObject, Message, Notification, Request, RequestId};
use crate::origin::Origin;
use crate::scope::{GuardStack, cleanup_errors};
use crate::transport::{ProtocolVersion, SessionId, StreamableHttp, TransportConfig};

/// Room for server messages waiting to be taken from
/// [`Session::notifications`]; more are dropped.
const NOTIFICATION_BUFFER: usize = 256;

/// Connects to one MCP server and hands back a [`Session`] holding its
/// catalog, or an error with nothing left behind.
///
/// Defaults: an owned client built with [`HttpClient::builder`]'s defaults;
/// no header hooks; the GET listening stream on for a session we initialize
/// and off for an attached one; [`Discovery::default`] (everything the
/// server declares, up to 100 pages per list); a DELETE timeout of 5 s; a
/// request timeout of 60 s; [`Resumption::default`]; no handlers for server
/// requests (only `ping` is answered; the others get "method not found", and
/// no client capabilities are declared); the transport's
/// [`TransportConfig::default`].
///
/// # Cancellation
///
/// The `connect` future may be dropped at any `.await`: what was acquired is
/// released at once (tasks aborted, hooks removed, an owned client dropped),
/// and a server session already created is DELETEd by the reaper (see
/// [`crate::shutdown`]).
#[must_use]
pub struct Connector {
    endpoint: String,
    client: Option<HttpClient>,
    builder: HttpClientBuilder,
    hooks: Vec<Result<HeaderHook>>,
    attach: Option<(SessionId, ProtocolVersion)>,
    listen: Option<bool>,
    discovery: Discovery,
    delete_timeout: Duration,
    connect_timeout: Option<Duration>,
    request_timeout: Option<Duration>,
    resumption: Resumption,
    handlers: Handlers,
    transport: TransportConfig,
    client_info: Value,
}

impl Connector {
    /// A connector for `endpoint`, an `http` or `https` URL.
    pub fn new(endpoint: impl Into<String>) -> Self {
        Connector {
            endpoint: endpoint.into(),
            client: None,
            builder: HttpClientBuilder::new(),
            hooks: Vec::new(),
            attach: None,
            listen: None,
            discovery: Discovery::default(),
            delete_timeout: Duration::from_secs(5),
            connect_timeout: None,
            request_timeout: Some(Duration::from_secs(60)),
            resumption: Resumption::default(),
            handlers: Handlers::default(),
            transport: TransportConfig::default(),
            client_info: json!({
                "name": env!("CARGO_PKG_NAME"),
                "version": env!("CARGO_PKG_VERSION"),
            }),
        }
    }

    /// Sends through the caller's client, which the session only borrows:
    /// it is never shut down or changed, and the session's hooks are
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

    /// Adds a header hook for this session's requests (and no one else's).
    pub fn hook(mut self, hook: HeaderHook) -> Self {
        self.hooks.push(Ok(hook));
        self
    }

    /// Adds `Authorization: Bearer <token>` to this session's requests.
    pub fn bearer(mut self, token: &str) -> Self {
        self.hooks.push(HeaderHook::bearer(token));
        self
    }

    /// Adds one fixed header to this session's requests.
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.hooks.push(HeaderHook::header(name, value));
        self
    }

    /// Attaches to a session the caller owns instead of initializing one:
    /// no `initialize`, no `notifications/initialized`, and never a DELETE;
    /// on failure the session is left exactly as it was.
    pub fn attach(mut self, session_id: SessionId, version: ProtocolVersion) -> Self {
        self.attach = Some((session_id, version));
        self
    }

    /// Whether to open the GET listening stream.
    pub fn listen(mut self, listen: bool) -> Self {
        self.listen = Some(listen);
        self
    }

    /// What to discover.
    pub fn discovery(mut self, discovery: Discovery) -> Self {
        self.discovery = discovery;
        self
    }

    /// Bound on the DELETE at close (or in the reaper). Default: 5 s.
    pub fn delete_timeout(mut self, timeout: Duration) -> Self {
        self.delete_timeout = timeout;
        self
    }

    /// A bound on the whole of `connect`, from the first byte to the end of
    /// discovery. When it passes, connect unwinds as on any failure (a
    /// session already created is DELETEd before it returns) and fails with
    /// [`Error::is_timeout`], naming the step it was in
    /// ([`Error::connect_phase`]). Default: none (the caller may also drop the
    /// future; then the reaper does the DELETE).
    pub fn connect_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// The default timeout of a session's requests (not of connect: see
    /// [`connect_timeout`](Self::connect_timeout)). Default: 60 s; `None`:
    /// none.
    pub fn request_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// How a broken SSE answer is resumed.
    pub fn resumption(mut self, resumption: Resumption) -> Self {
        self.resumption = resumption;
        self
    }

    /// Answers `roots/list` with these roots (each `{"uri": ..., "name":
    /// ...}`), and declares the `roots` capability.
    pub fn roots(mut self, roots: Vec<Value>) -> Self {
        let roots = Value::Array(roots);
        self.handlers.set_roots(move |_| {
            let roots = roots.clone();
            async move { Ok(json!({ "roots": roots })) }
        });
        self
    }

    /// Answers `elicitation/create` with `handler` (given the request's
    /// params, returning the result or a JSON-RPC error), and declares the
    /// `elicitation` capability.
    pub fn on_elicitation<F, Fut>(mut self, handler: F) -> Self
    where
        F: Fn(Value) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = std::result::Result<Value, ErrorObject>> + Send + 'static,
    {
        self.handlers.set_elicitation(handler);
        self
    }

    /// Answers `sampling/createMessage` with `handler`, and declares the
    /// `sampling` capability.
    pub fn on_sampling<F, Fut>(mut self, handler: F) -> Self
    where
        F: Fn(Value) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = std::result::Result<Value, ErrorObject>> + Send + 'static,
    {
        self.handlers.set_sampling(handler);
        self
    }

    /// Limits and policies of the wire.
    pub fn transport_config(mut self, config: TransportConfig) -> Self {
        self.transport = config;
        self
    }

    /// The `clientInfo` sent in `initialize`. Default: this crate's name and
    /// version.
    pub fn client_info(mut self, name: &str, version: &str) -> Self {
        self.client_info = json!({ "name": name, "version": version });
        self
    }

    /// Runs the whole lifecycle: see the type's docs.
    pub async fn connect(self) -> Result<Session> {
        let origin = Origin::parse(&self.endpoint)
            .ok_or_else(|| Error::builder("the endpoint must be an absolute http or https URL"))?;
        let span = tracing::info_span!("mcp.connect", endpoint = %origin);
        async move {
            let counters = match &self.client {
                Some(client) => client.counters().clone(),
                None => Default::default(),
            };
            // Declared first so that it is dropped last, after every handle
            // the steps below hold.
            let mut stack = GuardStack::new(counters);
            let phase = PhaseCell::default();
            let limit = self.connect_timeout;
            let established = self.establish(&mut stack, &phase);
            let outcome = match limit {
                None => established.await,
                Some(limit) => tokio::time::timeout(limit, established)
                    .await
                    .unwrap_or_else(|_| Err(Error::connect_timeout(limit, phase.get()))),
            };
            match outcome {
                Ok(established) => Ok(Session::new(established, stack)),
                Err(error) => {
                    let released = stack.unwind().await;
                    tracing::debug!(?released, "connect failed; released");
                    Err(error.with_cleanup(cleanup_errors(released)))
                }
            }
        }
        .instrument(span)
        .await
    }

    async fn establish(self, stack: &mut GuardStack, phase: &PhaseCell) -> Result<Established> {
        let mut timings = Timings::default();
        let (client, client_ownership) = match self.client {
            Some(client) => (client, Ownership::Borrowed),
            None => {
                let client = self.builder.build()?;
                stack.set_counters(client.counters().clone());
                stack.push_owned_client(client.clone());
                (client, Ownership::Owned)
            }
        };

        let scope = ScopeId::next();
        for hook in self.hooks {
            stack.push_hook(client.add_session_hook(&self.endpoint, scope, hook?)?);
        }

        let wire = Arc::new(
            StreamableHttp::new(client, &self.endpoint)?
                .with_config(self.transport)
                .with_scope(scope),
        );
        stack.push_transport(wire.clone());

        let attached = self.attach.is_some();
        let capabilities = self.handlers.capabilities();
        let mut first_ids = 0;
        let (version, init) = match self.attach {
            Some((id, version)) => {
                wire.attach(id, version);
                (version, None)
            }
            None => {
                // Before the first await that can create it: a session id
                // that arrives just before a cancellation is still DELETEd.
                stack.push_server_session(wire.clone(), self.delete_timeout);
                phase.set(ConnectPhase::Initialize);
                let started = Instant::now();
                first_ids += 1;
                let init = stack
                    .initialize(Request {
                        id: RequestId::Number(first_ids),
                        method: "initialize".into(),
                        params: Some(json!({
                            "protocolVersion": ProtocolVersion::LATEST.as_str(),
                            "capabilities": capabilities,
                            "clientInfo": self.client_info,
                        })),
                    })
                    .instrument(tracing::debug_span!("mcp.initialize"))
                    .await
                    .map_err(|error| {
                        // Nothing came back at all: the server was not reached.
                        let step = if error.is_transport() {
                            ConnectPhase::Connect
                        } else {
                            ConnectPhase::Initialize
                        };
                        error.in_phase(step)
                    })?
                    .result;
                let version =
                    negotiated(&init).map_err(|e| e.in_phase(ConnectPhase::Initialize))?;
                wire.set_protocol_version(version);
                timings.initialize = started.elapsed();

                phase.set(ConnectPhase::Initialized);
                let started = Instant::now();
                wire.post(&Message::Notification(Notification {
                    method: "notifications/initialized".into(),
                    params: None,
                }))
                .instrument(tracing::debug_span!("mcp.initialized"))
                .await
                .map_err(|e| e.in_phase(ConnectPhase::Initialized))?;
                timings.initialized = started.elapsed();
                (version, Some(init))
            }
        };

        let spawner = stack.push_background();
        let (sink, notifications) = mpsc::channel(NOTIFICATION_BUFFER);
        let listen = self.listen.unwrap_or(!attached);
        let ownership = if attached {
            SessionOwnership::Attached
        } else {
            SessionOwnership::Owned
        };
        let shared = Arc::new(Shared::new(
            wire.clone(),
            self.handlers,
            sink,
            spawner,
            self.resumption,
            self.discovery,
            ownership,
            listen,
            self.client_info,
        ));
        shared.ids.skip(first_ids);
        if listen {
            listener::spawn(&shared);
        }

        phase.set(ConnectPhase::Discovery);
        let started = Instant::now();
        let server_capabilities = init.as_ref().map(|init| &init["capabilities"]);
        let catalog = discover(&shared, &wire, server_capabilities)
            .await
            .map_err(|e| e.in_phase(ConnectPhase::Discovery))?;
        shared.set_catalog(catalog);
        timings.discovery = started.elapsed();

        let info = SessionInfo {
            server_info: init
                .as_ref()
                .map_or(Value::Null, |init| init["serverInfo"].clone()),
            capabilities: server_capabilities.cloned().unwrap_or(Value::Null),
            instructions: init
                .as_ref()
                .and_then(|init| init["instructions"].as_str().map(str::to_owned)),
            protocol_version: version,
            session_id_issued: wire.session_id().is_some(),
            ownership,
            client_ownership,
            timings,
        };
        Ok(Established {
            origin: wire.origin().to_string(),
            shared,
            info,
            notifications,
            request_timeout: self.request_timeout,
        })
    }
}

impl std::fmt::Debug for Connector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The origin only: a path or query may carry secrets.
        let origin = Origin::parse(&self.endpoint).map(|o| o.to_string());
        f.debug_struct("Connector")
            .field("endpoint", &origin.as_deref().unwrap_or("<invalid>"))
            .field("client", &self.client)
            .field("hooks", &self.hooks)
            .field("attach", &self.attach.is_some())
            .field("listen", &self.listen)
            .finish_non_exhaustive()
    }
}

/// The connect step in progress, for a connect timeout to name.
#[derive(Default)]
struct PhaseCell(AtomicU8);

impl PhaseCell {
    const STEPS: [ConnectPhase; 4] = [
        ConnectPhase::Connect,
        ConnectPhase::Initialize,
        ConnectPhase::Initialized,
        ConnectPhase::Discovery,
    ];

    fn set(&self, phase: ConnectPhase) {
        let index = Self::STEPS.iter().position(|p| *p == phase).unwrap_or(0);
        self.0.store(index as u8, Ordering::Relaxed);
    }

    fn get(&self) -> ConnectPhase {
        Self::STEPS[usize::from(self.0.load(Ordering::Relaxed))]
    }
}

/// What a successful connect hands to [`Session::new`].
pub(super) struct Established {
    pub(super) shared: Arc<Shared>,
    pub(super) info: SessionInfo,
    pub(super) notifications: mpsc::Receiver<Message>,
    pub(super) request_timeout: Option<Duration>,
    pub(super) origin: String,
}
