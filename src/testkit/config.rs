//! Configuration of a [`TestServer`](super::TestServer).

use super::fault::Fault;

/// How the server answers a POSTed JSON-RPC request.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ResponseMode {
    /// One `application/json` body: a single object, or an array for a batch.
    #[default]
    Json,
    /// A `text/event-stream` body: optional priming event, optional
    /// notifications, then the response(s); the stream ends after them.
    Sse,
}

/// What the server does with a GET on the MCP endpoint (the listening stream).
#[non_exhaustive]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ListenMode {
    /// GET is answered `405 Method Not Allowed`.
    #[default]
    Unsupported,
    /// GET opens an SSE stream that stays open until the session is deleted
    /// or the server shuts down.
    Open,
}

/// A TLS identity to serve `https://` with.
#[derive(Clone)]
pub struct TlsIdentity {
    /// The certificate chain, leaf first, each DER encoded.
    pub cert_chain_der: Vec<Vec<u8>>,
    /// The leaf's private key, PKCS#8 DER encoded.
    pub key_der: Vec<u8>,
}

impl std::fmt::Debug for TlsIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsIdentity")
            .field("certificates", &self.cert_chain_der.len())
            .field("key_der", &"<redacted>")
            .finish()
    }
}

/// Configuration of a [`TestServer`](super::TestServer).
///
/// Start from [`ServerConfig::default`] and adjust with the `with_*` setters.
#[non_exhaustive]
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// Number of tools in the catalog (`tool-000`, ...). Default 3.
    pub tools: usize,
    /// Items per page of every list method; 0 means no pagination. Default 0.
    pub page_size: usize,
    /// Number of prompts (`prompt-000`, ...). Default 2.
    pub prompts: usize,
    /// Number of resources (`file:///r/000`, ...). Default 2.
    pub resources: usize,
    /// Number of resource templates. Default 1.
    pub resource_templates: usize,
    /// JSON or SSE answers to POSTed requests. Default [`ResponseMode::Json`].
    pub response_mode: ResponseMode,
    /// Whether `initialize` mints a session id that later requests must carry.
    /// Default `true`.
    pub stateful: bool,
    /// What a GET on the endpoint does. Default [`ListenMode::Unsupported`].
    pub listen: ListenMode,
    /// The MCP endpoint path; every other path is 404. Default `"/mcp"`.
    pub path: String,
    /// `serverInfo.name`. Default `"mcp-scoped-http-testkit"`.
    pub server_name: String,
    /// `serverInfo.version`. Default: this crate's version.
    pub server_version: String,
    /// In SSE mode, how many `notifications/message` events precede each
    /// response. Default 0.
    pub notifications_before_response: usize,
    /// In SSE mode (and on listening streams), whether the first event is a
    /// priming event (`id:` and an empty `data:`). Default `true`.
    pub priming_event: bool,
    /// Status of a successful DELETE of a session. Default 200.
    pub delete_status: u16,
    /// Serve `https://` with this identity. Default `None` (plain HTTP).
    pub tls: Option<TlsIdentity>,
    /// Scripted faults, matched in order. Default empty.
    pub faults: Vec<Fault>,
    /// Whether every request is kept for [`TestServer::requests`](super::TestServer::requests).
    /// Default `true`; benchmarks turn it off so that the record does not
    /// grow with the run.
    pub record_requests: bool,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            tools: 3,
            page_size: 0,
            prompts: 2,
            resources: 2,
            resource_templates: 1,
            response_mode: ResponseMode::Json,
            stateful: true,
            listen: ListenMode::Unsupported,
            path: "/mcp".to_owned(),
            server_name: "mcp-scoped-http-testkit".to_owned(),
            server_version: env!("CARGO_PKG_VERSION").to_owned(),
            notifications_before_response: 0,
            priming_event: true,
            delete_status: 200,
            tls: None,
            faults: Vec::new(),
            record_requests: true,
        }
    }
}

impl ServerConfig {
    /// Sets the number of tools.
    #[must_use]
    pub fn with_tools(mut self, n: usize) -> Self {
        self.tools = n;
        self
    }
    /// Sets the page size of list methods (0: no pagination).
    #[must_use]
    pub fn with_page_size(mut self, n: usize) -> Self {
        self.page_size = n;
        self
    }
    /// Sets the number of prompts.
    #[must_use]
    pub fn with_prompts(mut self, n: usize) -> Self {
        self.prompts = n;
        self
    }
    /// Sets the number of resources.
    #[must_use]
    pub fn with_resources(mut self, n: usize) -> Self {
        self.resources = n;
        self
    }
    /// Sets the number of resource templates.
    #[must_use]
    pub fn with_resource_templates(mut self, n: usize) -> Self {
        self.resource_templates = n;
        self
    }
    /// Sets the response mode.
    #[must_use]
    pub fn with_response_mode(mut self, mode: ResponseMode) -> Self {
        self.response_mode = mode;
        self
    }
    /// Sets whether the server issues and checks session ids.
    #[must_use]
    pub fn with_stateful(mut self, stateful: bool) -> Self {
        self.stateful = stateful;
        self
    }
    /// Sets what a GET does.
    #[must_use]
    pub fn with_listen(mut self, listen: ListenMode) -> Self {
        self.listen = listen;
        self
    }
    /// Sets the endpoint path (must start with `/`).
    #[must_use]
    pub fn with_path(mut self, path: impl Into<String>) -> Self {
        self.path = path.into();
        self
    }
    /// Sets `serverInfo.name`.
    #[must_use]
    pub fn with_server_name(mut self, name: impl Into<String>) -> Self {
        self.server_name = name.into();
        self
    }
    /// Sets `serverInfo.version`.
    #[must_use]
    pub fn with_server_version(mut self, version: impl Into<String>) -> Self {
        self.server_version = version.into();
        self
    }
    /// Sets how many notifications precede each SSE response.
    #[must_use]
    pub fn with_notifications_before_response(mut self, n: usize) -> Self {
        self.notifications_before_response = n;
        self
    }
    /// Sets whether SSE streams start with a priming event.
    #[must_use]
    pub fn with_priming_event(mut self, on: bool) -> Self {
        self.priming_event = on;
        self
    }
    /// Sets the status of a successful DELETE.
    #[must_use]
    pub fn with_delete_status(mut self, status: u16) -> Self {
        self.delete_status = status;
        self
    }
    /// Serves `https://` with this identity.
    #[must_use]
    pub fn with_tls(mut self, tls: TlsIdentity) -> Self {
        self.tls = Some(tls);
        self
    }
    /// Sets whether requests are recorded.
    #[must_use]
    pub fn with_record_requests(mut self, record: bool) -> Self {
        self.record_requests = record;
        self
    }
    /// Adds a scripted fault (after those already configured).
    #[must_use]
    pub fn with_fault(mut self, fault: Fault) -> Self {
        self.faults.push(fault);
        self
    }
    /// Replaces the scripted faults.
    #[must_use]
    pub fn with_faults(mut self, faults: Vec<Fault>) -> Self {
        self.faults = faults;
        self
    }
}
