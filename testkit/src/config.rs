//! Configuration of a [`TestServer`](super::TestServer).

use std::time::Duration;

use serde_json::{Value, json};

use super::auth::ResourceAuth;
use super::fault::Fault;
use mcp_scoped_http::TransportKind;

/// Which protocol eras a [`TestServer`](super::TestServer) serves on its
/// endpoint. The CLI's `serve --revision` takes [`Eras::as_str`]'s values.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Eras {
    /// The 2025 revisions (2025-03-26 to 2025-11-25) of Streamable HTTP:
    /// `initialize`, session ids, the GET stream, DELETE. A 2026-07-28
    /// request gets what a 2025 server gives it: a 400 with no modern error
    /// in its body (`-32600`, unsupported `MCP-Protocol-Version`), or, on a
    /// live session with a 2025 header, `server/discover` is `-32601` with
    /// HTTP 200. `--revision 2025-11-25`.
    #[default]
    Streamable2025,
    /// 2026-07-28 only: every request is a self-contained POST validated as
    /// the Python `mcp` 2.x server does (`_meta`, then the headers against
    /// the body, then the version, then the method); GET and DELETE get
    /// 405; `Mcp-Session-Id` is ignored and never minted.
    /// `--revision 2026-07-28`.
    Modern,
    /// Both on one endpoint, per request, as Python `mcp` 2.x does: a
    /// request whose `MCP-Protocol-Version` header is present and names no
    /// handshake revision (2024-11-05 to 2025-11-25) takes the modern path,
    /// every other request the 2025 path. `--revision both`.
    ModernAnd2025,
    /// The deprecated HTTP+SSE transport of 2024-11-05: a GET on the
    /// endpoint path opens the stream, whose first event (`endpoint`) names
    /// where to POST (see [`SseEndpoint`]); every POST there gets 202 and its
    /// answer comes on the stream as `event: message`. A POST on the
    /// endpoint path gets 405. `--revision 2024-11-05`.
    HttpSse,
}

impl Eras {
    /// Every value, in the order of [`Eras::as_str`]'s documentation.
    pub const ALL: [Eras; 4] = [
        Eras::Modern,
        Eras::Streamable2025,
        Eras::ModernAnd2025,
        Eras::HttpSse,
    ];

    /// Its name on the command line: `2026-07-28`, `2025-11-25`, `both` or
    /// `2024-11-05`.
    pub fn as_str(self) -> &'static str {
        match self {
            Eras::Modern => "2026-07-28",
            Eras::Streamable2025 => "2025-11-25",
            Eras::ModernAnd2025 => "both",
            Eras::HttpSse => "2024-11-05",
        }
    }

    /// Whether 2026-07-28 requests are served.
    pub fn serves_modern(self) -> bool {
        matches!(self, Eras::Modern | Eras::ModernAnd2025)
    }

    /// Whether the `initialize` handshake of the 2025 revisions is served.
    pub fn serves_2025(self) -> bool {
        matches!(self, Eras::Streamable2025 | Eras::ModernAnd2025)
    }

    /// The transport served.
    pub fn transport(self) -> TransportKind {
        match self {
            Eras::HttpSse => TransportKind::HttpSse,
            _ => TransportKind::StreamableHttp,
        }
    }
}

impl std::fmt::Display for Eras {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Eras {
    type Err = String;

    /// Parses [`Eras::as_str`]'s values, and the aliases `modern`, `2025`,
    /// `legacy`, `dual` and `http+sse`.
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "2026-07-28" | "modern" => Ok(Eras::Modern),
            "2025-11-25" | "2025" | "legacy" => Ok(Eras::Streamable2025),
            "both" | "dual" => Ok(Eras::ModernAnd2025),
            "2024-11-05" | "http+sse" => Ok(Eras::HttpSse),
            other => Err(format!(
                "unknown revision {other:?}: expected 2026-07-28, 2025-11-25, both or 2024-11-05"
            )),
        }
    }
}

/// The era a request was served in ([`RecordedRequest::era`](super::RecordedRequest::era)).
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Era {
    /// The 2024-11-05 HTTP+SSE transport (its GET stream and its POSTs).
    HttpSse,
    /// The 2025 revisions of Streamable HTTP.
    Streamable2025,
    /// 2026-07-28.
    Modern,
}

/// The URI the `endpoint` event of an HTTP+SSE stream names
/// ([`Eras::HttpSse`]). `{session}` stands for the session's id (32 hex
/// digits) below.
#[non_exhaustive]
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum SseEndpoint {
    /// `/messages/?session_id={session}`, relative (as Python servers send).
    #[default]
    Relative,
    /// The same, absolute: `http://127.0.0.1:PORT/messages/?session_id=...`.
    Absolute,
    /// An absolute URI on another origin, `http://127.0.0.1:1/messages/?session_id=...`
    /// (port 1: nothing listens there), which a client must refuse to
    /// POST to (it would send its credentials to another origin).
    CrossOrigin,
    /// This text, with `{self}` replaced by the server's origin
    /// (`http://127.0.0.1:PORT`) and `{session}` by the session id. The
    /// server takes POSTs on `/messages/` and `/messages`, with the session
    /// in `session_id` (Python) or `sessionId` (TypeScript).
    Custom(String),
}

/// A tool added to the catalog ([`ServerConfig::with_tool`]), listed after
/// `tool-000`...: on every era's `tools/list`, with its `inputSchema` as
/// given.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq)]
pub struct TestTool {
    /// Its name.
    pub name: String,
    /// Its `inputSchema`, listed verbatim. On a 2026-07-28 `tools/call`, the
    /// server checks the `Mcp-Param-{Name}` header of every valid
    /// `x-mcp-header` annotation in it against the arguments, as Python
    /// `mcp` 2.x does (else 400, `-32020`); a schema with an invalid
    /// annotation is not checked.
    pub input_schema: Value,
    /// What a call does.
    pub behavior: ToolBehavior,
}

/// What calling a [`TestTool`] does.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToolBehavior {
    /// Answers `{"content":[text "<name>:<arguments>"],"structuredContent":
    /// {"tool":..., "arguments":...}}`, like the catalog's tools.
    Echo,
    /// A multi round-trip tool (2026-07-28): a call without `requestState`
    /// is answered `{"resultType":"input_required","inputRequests":{"<key>":
    /// {"method":...,"params":...}},"requestState":"<opaque>"}`; a call
    /// that echoes that state with `inputResponses` holding every key gets
    /// the next round, and after `rounds` rounds the final result, whose
    /// `structuredContent` holds `rounds` and the last `inputResponses`.
    /// A call missing a key is asked again (same round). A state that is
    /// not one the server issued for this tool is `-32602` (400). A client
    /// that did not declare the capability the request needs gets `-32021`
    /// (400) with `data.requiredCapabilities`. On the 2025 path the call
    /// answers a tool error (`isError`).
    InputRequired {
        /// What the server asks for.
        request: InputRequest,
        /// How many rounds before the final result; `None`: it asks
        /// forever (to test a client's bound on rounds).
        rounds: Option<usize>,
    },
}

/// The kind of input a [`ToolBehavior::InputRequired`] tool asks for, and
/// the key it uses in `inputRequests`.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum InputRequest {
    /// `elicitation/create` (form mode), key `"confirm"`; needs the
    /// `elicitation` capability.
    Elicitation,
    /// `sampling/createMessage`, key `"sample"`; needs `sampling`.
    Sampling,
    /// `roots/list`, key `"roots"`; needs `roots`.
    Roots,
}

impl InputRequest {
    /// The `inputRequests` key.
    pub fn key(self) -> &'static str {
        match self {
            InputRequest::Elicitation => "confirm",
            InputRequest::Sampling => "sample",
            InputRequest::Roots => "roots",
        }
    }

    /// The request's `method`.
    pub fn method(self) -> &'static str {
        match self {
            InputRequest::Elicitation => "elicitation/create",
            InputRequest::Sampling => "sampling/createMessage",
            InputRequest::Roots => "roots/list",
        }
    }

    /// The client capability it needs.
    pub fn capability(self) -> &'static str {
        match self {
            InputRequest::Elicitation => "elicitation",
            InputRequest::Sampling => "sampling",
            InputRequest::Roots => "roots",
        }
    }

    /// The request's `params` for round `round` (1-based).
    pub fn params(self, round: usize) -> Value {
        match self {
            InputRequest::Elicitation => json!({
                "mode": "form",
                "message": format!("Confirm round {round}"),
                "requestedSchema": {
                    "type": "object",
                    "properties": {"ok": {"type": "boolean"}},
                    "required": ["ok"],
                },
            }),
            InputRequest::Sampling => json!({
                "messages": [{"role": "user", "content": {"type": "text", "text": format!("Round {round}?")}}],
                "maxTokens": 16,
            }),
            InputRequest::Roots => json!({}),
        }
    }
}

/// An invalid `x-mcp-header` annotation, for [`TestTool::invalid_header`]:
/// a client on Streamable HTTP must drop such a tool from its list.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum InvalidHeader {
    /// On a `number` property (only integer, string, boolean may carry one).
    OnNumber,
    /// Two annotations that differ only in case (`Region`, `region`).
    DuplicateName,
    /// On a property under `items` (not reachable through `properties` alone).
    UnderItems,
    /// Under `oneOf`.
    UnderOneOf,
    /// An empty name.
    Empty,
    /// A name that is no HTTP token (`"Bad Name"`, with a space).
    NotAToken,
}

impl InvalidHeader {
    /// Every kind.
    pub const ALL: [InvalidHeader; 6] = [
        InvalidHeader::OnNumber,
        InvalidHeader::DuplicateName,
        InvalidHeader::UnderItems,
        InvalidHeader::UnderOneOf,
        InvalidHeader::Empty,
        InvalidHeader::NotAToken,
    ];

    /// A short name: `number`, `duplicate`, `items`, `one-of`, `empty`,
    /// `not-a-token`.
    pub fn as_str(self) -> &'static str {
        match self {
            InvalidHeader::OnNumber => "number",
            InvalidHeader::DuplicateName => "duplicate",
            InvalidHeader::UnderItems => "items",
            InvalidHeader::UnderOneOf => "one-of",
            InvalidHeader::Empty => "empty",
            InvalidHeader::NotAToken => "not-a-token",
        }
    }
}

impl TestTool {
    /// A tool that echoes its arguments, with this `inputSchema`.
    pub fn echo(name: impl Into<String>, input_schema: Value) -> Self {
        TestTool {
            name: name.into(),
            input_schema,
            behavior: ToolBehavior::Echo,
        }
    }

    /// An echoing tool whose string parameter `property` is marked
    /// `"x-mcp-header": header` (and required), with a plain string
    /// parameter `text` besides: on 2026-07-28 its call is refused
    /// (`-32020`, 400) unless `Mcp-Param-{header}` matches the argument.
    /// For example `header_param("route", "region", "Region")`.
    pub fn header_param(
        name: impl Into<String>,
        property: impl Into<String>,
        header: impl Into<String>,
    ) -> Self {
        let property = property.into();
        let mut properties = serde_json::Map::new();
        properties.insert(
            property.clone(),
            json!({"type": "string", "x-mcp-header": header.into()}),
        );
        properties.insert("text".into(), json!({"type": "string"}));
        TestTool::echo(
            name,
            json!({"type": "object", "properties": properties, "required": [property]}),
        )
    }

    /// An echoing tool named `bad-header-<kind>` whose schema carries this
    /// invalid `x-mcp-header` annotation.
    pub fn invalid_header(kind: InvalidHeader) -> Self {
        let schema = match kind {
            InvalidHeader::OnNumber => json!({"type": "object", "properties": {
                "ratio": {"type": "number", "x-mcp-header": "Ratio"}}}),
            InvalidHeader::DuplicateName => json!({"type": "object", "properties": {
                "a": {"type": "string", "x-mcp-header": "Region"},
                "b": {"type": "string", "x-mcp-header": "region"}}}),
            InvalidHeader::UnderItems => json!({"type": "object", "properties": {
                "list": {"type": "array", "items": {"type": "object", "properties": {
                    "id": {"type": "string", "x-mcp-header": "Item"}}}}}}),
            InvalidHeader::UnderOneOf => json!({"type": "object", "properties": {
                "choice": {"oneOf": [{"type": "string", "x-mcp-header": "Choice"}]}}}),
            InvalidHeader::Empty => json!({"type": "object", "properties": {
                "e": {"type": "string", "x-mcp-header": ""}}}),
            InvalidHeader::NotAToken => json!({"type": "object", "properties": {
                "s": {"type": "string", "x-mcp-header": "Bad Name"}}}),
        };
        TestTool::echo(format!("bad-header-{}", kind.as_str()), schema)
    }

    /// A multi round-trip tool asking for `request` for `rounds` rounds
    /// (at least 1) before its final result; see
    /// [`ToolBehavior::InputRequired`].
    pub fn input_required(name: impl Into<String>, request: InputRequest, rounds: usize) -> Self {
        TestTool {
            name: name.into(),
            input_schema: json!({"type": "object", "properties": {"text": {"type": "string"}}}),
            behavior: ToolBehavior::InputRequired {
                request,
                rounds: Some(rounds.max(1)),
            },
        }
    }

    /// A multi round-trip tool that never completes: every call, however
    /// answered, asks again.
    pub fn input_required_forever(name: impl Into<String>, request: InputRequest) -> Self {
        TestTool {
            behavior: ToolBehavior::InputRequired {
                request,
                rounds: None,
            },
            ..TestTool::input_required(name, request, 1)
        }
    }
}

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
    /// With [`tls`](Self::tls): require a client certificate issued by this
    /// CA (DER), as an mTLS server does. Default `None` (no client
    /// certificate asked for).
    pub tls_client_ca: Option<Vec<u8>>,
    /// Scripted faults, matched in order. Default empty.
    pub faults: Vec<Fault>,
    /// Whether every request is kept for [`TestServer::requests`](super::TestServer::requests).
    /// Default `true`; benchmarks turn it off so that the record does not
    /// grow with the run.
    pub record_requests: bool,
    /// Which protocol eras are served. Default [`Eras::Streamable2025`].
    pub eras: Eras,
    /// The versions the 2026-07-28 path accepts in
    /// `io.modelcontextprotocol/protocolVersion`, listed in
    /// `server/discover`'s `supportedVersions` and in `-32022`'s
    /// `data.supported`. Default `["2026-07-28"]` (as Python `mcp` 2.x).
    pub modern_versions: Vec<String>,
    /// Whether a 2026-07-28 request must carry
    /// `io.modelcontextprotocol/clientInfo` in `_meta` too (else `-32602`,
    /// 400). Default `false`: the spec and Python `mcp` 2.x require only
    /// the protocol version and the client capabilities.
    pub require_client_info: bool,
    /// `instructions` of `server/discover` (and of `initialize`). Default
    /// `None` (omitted).
    pub instructions: Option<String>,
    /// Tools added after the catalog's `tool-000`... Default none.
    pub extra_tools: Vec<TestTool>,
    /// The `endpoint` event's URI ([`Eras::HttpSse`]). Default
    /// [`SseEndpoint::Relative`].
    pub sse_endpoint: SseEndpoint,
    /// Whether every SSE event the server writes ends its lines with CRLF
    /// (as Python servers do) instead of LF. Default `false`.
    pub sse_crlf: bool,
    /// If set, long-lived streams (the 2025 GET stream, the HTTP+SSE
    /// stream, `subscriptions/listen` streams) carry a `: ping` comment
    /// this often. Default `None`.
    pub sse_keepalive: Option<Duration>,
    /// If set, every request to the endpoint needs a bearer token the
    /// [`AuthServer`](super::AuthServer) behind it issued, and the server
    /// serves protected resource metadata (see [`ResourceAuth`]). Default
    /// `None`: no authorization.
    pub authorization: Option<ResourceAuth>,
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
            tls_client_ca: None,
            faults: Vec::new(),
            record_requests: true,
            eras: Eras::Streamable2025,
            modern_versions: vec!["2026-07-28".to_owned()],
            require_client_info: false,
            instructions: None,
            extra_tools: Vec::new(),
            sse_endpoint: SseEndpoint::Relative,
            sse_crlf: false,
            sse_keepalive: None,
            authorization: None,
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
    /// Requires a client certificate issued by the CA `ca_der` (mTLS); with
    /// [`with_tls`](Self::with_tls) only.
    #[must_use]
    pub fn with_client_ca(mut self, ca_der: Vec<u8>) -> Self {
        self.tls_client_ca = Some(ca_der);
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
    /// Sets the eras served.
    #[must_use]
    pub fn with_eras(mut self, eras: Eras) -> Self {
        self.eras = eras;
        self
    }
    /// Sets the versions the 2026-07-28 path accepts and lists.
    #[must_use]
    pub fn with_modern_versions<I, S>(mut self, versions: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.modern_versions = versions.into_iter().map(Into::into).collect();
        self
    }
    /// Sets whether 2026-07-28 requests must carry `clientInfo` in `_meta`.
    #[must_use]
    pub fn with_require_client_info(mut self, on: bool) -> Self {
        self.require_client_info = on;
        self
    }
    /// Sets the `instructions` of `server/discover` and `initialize`.
    #[must_use]
    pub fn with_instructions(mut self, text: impl Into<String>) -> Self {
        self.instructions = Some(text.into());
        self
    }
    /// Adds a tool after those already configured.
    #[must_use]
    pub fn with_tool(mut self, tool: TestTool) -> Self {
        self.extra_tools.push(tool);
        self
    }
    /// Sets the URI of the HTTP+SSE `endpoint` event.
    #[must_use]
    pub fn with_sse_endpoint(mut self, endpoint: SseEndpoint) -> Self {
        self.sse_endpoint = endpoint;
        self
    }
    /// Sets whether SSE events end their lines with CRLF.
    #[must_use]
    pub fn with_sse_crlf(mut self, on: bool) -> Self {
        self.sse_crlf = on;
        self
    }
    /// Sets the keep-alive comment interval of long-lived streams.
    #[must_use]
    pub fn with_sse_keepalive(mut self, every: Option<Duration>) -> Self {
        self.sse_keepalive = every;
        self
    }
    /// Requires bearer tokens as `auth` says (all eras, every method).
    #[must_use]
    pub fn with_authorization(mut self, auth: ResourceAuth) -> Self {
        self.authorization = Some(auth);
        self
    }
}
