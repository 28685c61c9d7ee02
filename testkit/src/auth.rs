//! The test kit's OAuth 2.1 authorization server ([`AuthServer`]) and the
//! bearer-token check of a protected MCP test server ([`ResourceAuth`]).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use bytes::Bytes;
use http::header::{AUTHORIZATION, CACHE_CONTROL, CONTENT_TYPE, HeaderValue, LOCATION};
use http::{HeaderMap, Method, Request, Response};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;

use super::body::{RespBody, full, random_u64};

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type Resp = Response<RespBody>;

const JSON: &str = "application/json";
const FORM: &str = "application/x-www-form-urlencoded";
const AS_METADATA: &str = "/.well-known/oauth-authorization-server";
const PR_METADATA: &str = "/.well-known/oauth-protected-resource";
/// How long an authorization code stays valid.
const CODE_LIFETIME: Duration = Duration::from_secs(600);
/// The `iss` of [`AuthFault::WrongIss`].
const OTHER_ISSUER: &str = "https://other-issuer.example";
/// The scope [`ResourceFault::StepUpLoop`] asks for when the request needs
/// none.
const STEP_UP_SCOPE: &str = "step-up";

// ---------------------------------------------------------------- configuration

/// How a client authenticates at the token endpoint (RFC 6749 §2.3; names
/// as in RFC 7591 §2 `token_endpoint_auth_method`).
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ClientAuthMethod {
    /// `client_secret_basic`: `Authorization: Basic` with the client id
    /// and secret, each form-urlencoded, then joined by `:` and base64
    /// encoded (RFC 6749 §2.3.1).
    ClientSecretBasic,
    /// `client_secret_post`: `client_id` and `client_secret` in the form
    /// body.
    ClientSecretPost,
    /// `none`: a public client; `client_id` in the form body and no secret
    /// anywhere.
    None,
}

impl ClientAuthMethod {
    /// Every method, in the order of the default
    /// [`AuthConfig::token_endpoint_auth_methods`].
    pub const ALL: [ClientAuthMethod; 3] = [
        ClientAuthMethod::ClientSecretBasic,
        ClientAuthMethod::ClientSecretPost,
        ClientAuthMethod::None,
    ];

    /// Its registered name: `client_secret_basic`, `client_secret_post` or
    /// `none`.
    pub fn as_str(self) -> &'static str {
        match self {
            ClientAuthMethod::ClientSecretBasic => "client_secret_basic",
            ClientAuthMethod::ClientSecretPost => "client_secret_post",
            ClientAuthMethod::None => "none",
        }
    }

    /// Whether a client of this method has a secret.
    pub fn has_secret(self) -> bool {
        !matches!(self, ClientAuthMethod::None)
    }
}

impl std::fmt::Display for ClientAuthMethod {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for ClientAuthMethod {
    type Err = String;

    /// Parses [`ClientAuthMethod::as_str`]'s values.
    fn from_str(s: &str) -> Result<Self, String> {
        ClientAuthMethod::ALL
            .into_iter()
            .find(|m| m.as_str() == s)
            .ok_or_else(|| format!("unknown token endpoint auth method {s:?}"))
    }
}

/// A scripted misbehaviour of an [`AuthServer`] ([`AuthConfig::with_fault`],
/// [`AuthServer::push_fault`]). Each applies to every request it concerns
/// while it is configured.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AuthFault {
    /// The metadata's `issuer` is the issuer with `/other` appended, which
    /// is not the URL the metadata was fetched for (RFC 8414 §3.3). The
    /// endpoints it lists are still the real ones.
    WrongIssuer,
    /// The metadata's `code_challenge_methods_supported` is `["plain"]`.
    /// (Authorization requests still need S256.)
    NoS256,
    /// The authorization response's `iss` is another issuer,
    /// `https://other-issuer.example` (RFC 9207 mix-up).
    WrongIss,
    /// The authorization response carries no `iss`, whatever the metadata
    /// says (by default it says `authorization_response_iss_parameter_supported:
    /// true`).
    MissingIss,
    /// Every `refresh_token` grant answers `400 {"error":"invalid_grant"}`.
    RejectRefresh,
    /// The token endpoint waits this long before answering (each
    /// `SlowToken` configured adds its wait).
    SlowToken(Duration),
    /// The token endpoint answers this status with an OAuth error body,
    /// after any [`SlowToken`](AuthFault::SlowToken) wait and before
    /// looking at the request: `error` is `invalid_client` for 401,
    /// `unauthorized_client` for 403, `temporarily_unavailable` for 429
    /// and 503, `server_error` for other 5xx, else `invalid_request`.
    TokenError(u16),
}

/// A client the [`AuthServer`] knows from the start
/// ([`AuthConfig::with_client`]).
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuthClient {
    /// Its `client_id`.
    pub client_id: String,
    /// Its `client_secret` (`None` for [`ClientAuthMethod::None`]).
    pub client_secret: Option<String>,
    /// How it authenticates at the token endpoint.
    pub auth_method: ClientAuthMethod,
    /// The redirect URIs it may use. Empty: any absolute URI.
    pub redirect_uris: Vec<String>,
}

/// Configuration of an [`AuthServer`].
///
/// Start from [`AuthConfig::default`] and adjust with the `with_*` setters.
#[non_exhaustive]
#[derive(Clone, Debug)]
pub struct AuthConfig {
    /// The issuer's path after `http://127.0.0.1:PORT`, e.g. `/tenant1`
    /// (a trailing `/` is dropped, a missing leading one added). Every
    /// endpoint is under it; the metadata is at
    /// `/.well-known/oauth-authorization-server` followed by it (RFC 8414
    /// §3.1 path insertion). Default `""` (a root issuer).
    pub path_prefix: String,
    /// `token_endpoint_auth_methods_supported`, and what a registration
    /// may pick. Default all three: `client_secret_basic`,
    /// `client_secret_post`, `none`.
    pub token_endpoint_auth_methods: Vec<ClientAuthMethod>,
    /// `scopes_supported` of the metadata. Default `None` (omitted).
    /// Scopes are not checked against it: any scope asked is granted.
    pub scopes_supported: Option<Vec<String>>,
    /// `client_id_metadata_document_supported` of the metadata. With
    /// `Some(true)`, an `https` URL with a path is accepted as a public
    /// (`none`) client id, and any absolute redirect URI with it (the
    /// document is not fetched). Default `None` (omitted, not accepted).
    pub client_id_metadata_documents: Option<bool>,
    /// `authorization_response_iss_parameter_supported` of the metadata
    /// (RFC 9207). Default `Some(true)`; `None` omits it.
    pub iss_parameter_supported: Option<bool>,
    /// Whether the authorization response carries `iss` (the issuer,
    /// form-urlencoded). Default `true`.
    pub send_iss: bool,
    /// Lifetime of access tokens, the `expires_in` of token responses (in
    /// whole seconds). A zero lifetime issues tokens already expired.
    /// Default one hour.
    pub token_lifetime: Duration,
    /// Whether token responses carry a `refresh_token`. Default `true`.
    pub refresh_tokens: bool,
    /// Whether `/register` (RFC 7591) is served and listed as
    /// `registration_endpoint`. Default `true`.
    pub dynamic_registration: bool,
    /// Pre-registered clients. Default none.
    pub clients: Vec<AuthClient>,
    /// Scripted faults. Default none.
    pub faults: Vec<AuthFault>,
}

impl Default for AuthConfig {
    fn default() -> Self {
        AuthConfig {
            path_prefix: String::new(),
            token_endpoint_auth_methods: ClientAuthMethod::ALL.to_vec(),
            scopes_supported: None,
            client_id_metadata_documents: None,
            iss_parameter_supported: Some(true),
            send_iss: true,
            token_lifetime: Duration::from_secs(3600),
            refresh_tokens: true,
            dynamic_registration: true,
            clients: Vec::new(),
            faults: Vec::new(),
        }
    }
}

impl AuthConfig {
    /// Sets the issuer's path (e.g. `/tenant1`).
    #[must_use]
    pub fn with_path_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.path_prefix = prefix.into();
        self
    }
    /// Sets `token_endpoint_auth_methods_supported`.
    #[must_use]
    pub fn with_token_endpoint_auth_methods(
        mut self,
        methods: impl IntoIterator<Item = ClientAuthMethod>,
    ) -> Self {
        self.token_endpoint_auth_methods = methods.into_iter().collect();
        self
    }
    /// Sets `scopes_supported`.
    #[must_use]
    pub fn with_scopes_supported<I, S>(mut self, scopes: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.scopes_supported = Some(scopes.into_iter().map(Into::into).collect());
        self
    }
    /// Sets `client_id_metadata_document_supported` (and whether URL
    /// client ids are accepted).
    #[must_use]
    pub fn with_client_id_metadata_documents(mut self, supported: bool) -> Self {
        self.client_id_metadata_documents = Some(supported);
        self
    }
    /// Sets `authorization_response_iss_parameter_supported` (`None`
    /// omits it).
    #[must_use]
    pub fn with_iss_parameter_supported(mut self, supported: Option<bool>) -> Self {
        self.iss_parameter_supported = supported;
        self
    }
    /// Sets whether the authorization response carries `iss`.
    #[must_use]
    pub fn with_send_iss(mut self, on: bool) -> Self {
        self.send_iss = on;
        self
    }
    /// Sets the access token lifetime.
    #[must_use]
    pub fn with_token_lifetime(mut self, lifetime: Duration) -> Self {
        self.token_lifetime = lifetime;
        self
    }
    /// Sets whether refresh tokens are issued.
    #[must_use]
    pub fn with_refresh_tokens(mut self, on: bool) -> Self {
        self.refresh_tokens = on;
        self
    }
    /// Sets whether dynamic client registration is served.
    #[must_use]
    pub fn with_dynamic_registration(mut self, on: bool) -> Self {
        self.dynamic_registration = on;
        self
    }
    /// Adds a pre-registered client that may use any absolute redirect
    /// URI. `secret` is ignored for [`ClientAuthMethod::None`].
    ///
    /// # Panics
    ///
    /// If `method` needs a secret and `secret` is `None`.
    #[must_use]
    pub fn with_client(
        mut self,
        id: impl Into<String>,
        secret: Option<&str>,
        method: ClientAuthMethod,
    ) -> Self {
        let id = id.into();
        assert!(
            secret.is_some() || !method.has_secret(),
            "testkit: client {id:?} with {method} needs a secret"
        );
        self.clients.push(AuthClient {
            client_id: id,
            client_secret: secret.filter(|_| method.has_secret()).map(str::to_owned),
            auth_method: method,
            redirect_uris: Vec::new(),
        });
        self
    }
    /// Adds a scripted fault.
    #[must_use]
    pub fn with_fault(mut self, fault: AuthFault) -> Self {
        self.faults.push(fault);
        self
    }
}

// ---------------------------------------------------------------- observability

/// Counters of an [`AuthServer`] ([`AuthServer::stats`]).
#[non_exhaustive]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AuthStats {
    /// Requests for the metadata document.
    pub metadata_requests: usize,
    /// Requests to `/authorize`, whatever their outcome.
    pub authorize_requests: usize,
    /// Requests to `/token`, whatever their grant type and outcome.
    pub token_requests: usize,
    /// Token requests with `grant_type=authorization_code`.
    pub code_grants: usize,
    /// Token requests with `grant_type=refresh_token`.
    pub refresh_grants: usize,
    /// Requests to `/register`, whatever their outcome.
    pub registrations: usize,
    /// Access tokens issued.
    pub tokens_issued: usize,
    /// `refresh_token` grants refused (any error status).
    pub refresh_rejections: usize,
}

/// One request as the [`AuthServer`] received it. Nothing is redacted:
/// secrets and verifiers show as sent.
#[non_exhaustive]
#[derive(Clone, Debug)]
pub struct AuthRequest {
    /// HTTP method.
    pub method: Method,
    /// Request path (without query).
    pub path: String,
    /// Request headers.
    pub headers: HeaderMap,
    /// The query parameters, decoded, in order.
    pub query: Vec<(String, String)>,
    /// The form parameters of an `application/x-www-form-urlencoded`
    /// body, decoded, in order (empty for other bodies).
    pub form: Vec<(String, String)>,
    /// The body parsed as JSON, if it parsed.
    pub json: Option<Value>,
}

impl AuthRequest {
    /// The value of header `name` (any case), if present and valid UTF-8.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The first query parameter `name`.
    pub fn query_param(&self, name: &str) -> Option<&str> {
        first(&self.query, name)
    }

    /// The first form parameter `name`.
    pub fn form_param(&self, name: &str) -> Option<&str> {
        first(&self.form, name)
    }

    /// Parameter `name` from the query, else the form body, else the JSON
    /// body (if a string there).
    pub fn param(&self, name: &str) -> Option<&str> {
        self.query_param(name)
            .or_else(|| self.form_param(name))
            .or_else(|| self.json.as_ref()?.get(name)?.as_str())
    }
}

/// An access token the [`AuthServer`] issued ([`AuthServer::tokens`]).
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IssuedToken {
    /// The token.
    pub access_token: String,
    /// The client it was issued to.
    pub client_id: String,
    /// The scopes granted.
    pub scopes: Vec<String>,
    /// The `resource` (RFC 8707) it was issued for, if one was asked.
    pub resource: Option<String>,
    /// Whether it has expired.
    pub expired: bool,
    /// Whether it was revoked ([`AuthServer::revoke_all_tokens`]).
    pub revoked: bool,
}

// ---------------------------------------------------------------- token book

/// The access tokens an [`AuthServer`] issued, shared with the
/// [`ResourceAuth`]s made from it.
#[derive(Default)]
struct TokenBook {
    tokens: Mutex<HashMap<String, TokenEntry>>,
    next: AtomicU64,
}

impl std::fmt::Debug for TokenBook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenBook")
            .field("tokens", &self.lock().len())
            .finish()
    }
}

struct TokenEntry {
    client_id: String,
    scopes: Vec<String>,
    resource: Option<String>,
    expires_at: Instant,
    revoked: bool,
    /// Issue order.
    seq: u64,
}

impl TokenEntry {
    fn expired(&self, now: Instant) -> bool {
        now >= self.expires_at
    }
}

impl TokenBook {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, TokenEntry>> {
        self.tokens.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn insert(
        &self,
        token: String,
        client_id: &str,
        scopes: &[String],
        resource: Option<&str>,
        lifetime: Duration,
    ) {
        let entry = TokenEntry {
            client_id: client_id.to_owned(),
            scopes: scopes.to_vec(),
            resource: resource.map(str::to_owned),
            expires_at: Instant::now() + lifetime,
            revoked: false,
            seq: self.next.fetch_add(1, Ordering::Relaxed),
        };
        self.lock().insert(token, entry);
    }
}

// ---------------------------------------------------------------- the server

/// An in-process OAuth 2.1 authorization server for tests of MCP clients
/// that authorize; it stops when dropped (or on [`AuthServer::shutdown`]).
///
/// It approves every well-formed request at once (no login, no consent
/// page): `GET /authorize` answers `302` to the client's `redirect_uri`
/// with a code. It serves RFC 8414 metadata, the authorization code grant
/// with PKCE (S256 only), refresh tokens (rotated on every use), RFC 7591
/// dynamic client registration, pre-registered clients
/// ([`AuthConfig::with_client`]) and, when enabled, Client ID Metadata
/// Document client ids. Scripted [`AuthFault`]s break one thing each.
///
/// A [`ResourceAuth`] made from it ([`AuthServer::resource`]) and given to
/// [`ServerConfig::with_authorization`](super::ServerConfig::with_authorization)
/// makes the MCP test server require the access tokens it issues: `401`
/// with a `Bearer` challenge without one, `403` `insufficient_scope` when a
/// token lacks a scope, and RFC 9728 protected resource metadata on the
/// MCP server's origin.
///
/// Endpoints, under the issuer's path ([`AuthConfig::path_prefix`]):
///
/// - `GET /.well-known/oauth-authorization-server[/prefix]`: the metadata.
/// - `GET /authorize`: checks `response_type=code`, a known `client_id`,
///   an absolute `redirect_uri` the client registered (or the same
///   loopback `http` URI on another port, RFC 8252 §7.3), a
///   `code_challenge` with `code_challenge_method=S256` and an absolute
///   `resource` if any; then `302` to `redirect_uri?code=...&state=...&iss=...`.
///   A failed check answers `400 {"error":"invalid_request",...}`, with no
///   redirect.
/// - `POST /token` (form): `authorization_code` (the code once only, the
///   same client and `redirect_uri`, the PKCE verifier, the same
///   `resource` when the authorization request had one) and
///   `refresh_token` (the same client, an optional narrower `scope`; the
///   refresh token is rotated). The client authenticates by its method
///   ([`ClientAuthMethod`]). Errors as RFC 6749 §5.2: `400`
///   `invalid_request`, `invalid_grant`, `invalid_scope`,
///   `invalid_target` (RFC 8707), `unsupported_grant_type`; `401`
///   `invalid_client`.
/// - `POST /register` (JSON, RFC 7591): `201` with `client_id`,
///   `client_secret` (unless the method is `none`), `client_id_issued_at`,
///   `redirect_uris`, `grant_types`, `token_endpoint_auth_method` (the one
///   asked if supported, else `client_secret_basic`) and the rest of the
///   body echoed.
///
/// ```no_run
/// use mcp_scoped_http_testkit::{AuthConfig, AuthServer, ServerConfig, TestServer};
///
/// let auth = AuthServer::start(AuthConfig::default().with_path_prefix("/tenant1"));
/// let mcp = TestServer::start(
///     ServerConfig::default()
///         .with_authorization(auth.resource().with_tool_scope("tool-001", "mcp:write")),
/// );
/// // A 401 names http://127.0.0.1:PORT/.well-known/oauth-protected-resource/mcp,
/// // which names auth.issuer() (http://127.0.0.1:PORT2/tenant1), whose
/// // metadata is at http://127.0.0.1:PORT2/.well-known/oauth-authorization-server/tenant1.
/// # drop((auth, mcp));
/// ```
pub struct AuthServer {
    addr: SocketAddr,
    shared: Arc<AsShared>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for AuthServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthServer")
            .field("issuer", &self.shared.issuer)
            .finish_non_exhaustive()
    }
}

struct AsShared {
    config: AuthConfig,
    /// `http://127.0.0.1:PORT`.
    origin: String,
    /// The origin and the path prefix.
    issuer: String,
    state: Mutex<AsState>,
    book: Arc<TokenBook>,
    shutdown: CancellationToken,
}

struct AsState {
    requests: Vec<AuthRequest>,
    registrations: Vec<Value>,
    stats: AuthStats,
    faults: Vec<AuthFault>,
    clients: HashMap<String, AuthClient>,
    codes: HashMap<String, CodeGrant>,
    refresh: HashMap<String, RefreshGrant>,
}

impl AsState {
    fn has(&self, pred: impl Fn(&AuthFault) -> bool) -> bool {
        self.faults.iter().any(pred)
    }
}

/// What an authorization code stands for.
struct CodeGrant {
    client_id: String,
    redirect_uri: String,
    code_challenge: String,
    scopes: Vec<String>,
    resource: Option<String>,
    expires_at: Instant,
}

/// What a refresh token stands for.
struct RefreshGrant {
    client_id: String,
    /// The scopes of the original grant (a refresh may ask fewer).
    scopes: Vec<String>,
    resource: Option<String>,
}

impl AsShared {
    fn state(&self) -> MutexGuard<'_, AsState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn prefix(&self) -> &str {
        &self.config.path_prefix
    }

    fn metadata_path(&self) -> String {
        format!("{AS_METADATA}{}", self.prefix())
    }

    /// The client `id`, if known (registered, pre-registered, or a Client
    /// ID Metadata Document URL when those are supported).
    fn client(&self, st: &AsState, id: &str) -> Option<AuthClient> {
        if let Some(c) = st.clients.get(id) {
            return Some(c.clone());
        }
        (self.config.client_id_metadata_documents == Some(true) && is_cimd_url(id)).then(|| {
            AuthClient {
                client_id: id.to_owned(),
                client_secret: None,
                auth_method: ClientAuthMethod::None,
                redirect_uris: Vec::new(),
            }
        })
    }
}

impl AuthServer {
    /// Starts a server on `127.0.0.1:0` in a new thread with its own tokio
    /// runtime, and returns once it is listening.
    ///
    /// # Panics
    ///
    /// If the socket cannot be bound or the runtime cannot be built.
    pub fn start(mut config: AuthConfig) -> AuthServer {
        let (std_listener, addr) = super::serve::bind_loopback();
        config.path_prefix = normalize_prefix(&config.path_prefix);
        let origin = format!("http://{addr}");
        let issuer = format!("{origin}{}", config.path_prefix);
        let clients = config
            .clients
            .iter()
            .map(|c| (c.client_id.clone(), c.clone()))
            .collect();
        let faults = std::mem::take(&mut config.faults);
        let shared = Arc::new(AsShared {
            config,
            origin,
            issuer,
            state: Mutex::new(AsState {
                requests: Vec::new(),
                registrations: Vec::new(),
                stats: AuthStats::default(),
                faults,
                clients,
                codes: HashMap::new(),
                refresh: HashMap::new(),
            }),
            book: Arc::new(TokenBook::default()),
            shutdown: CancellationToken::new(),
        });
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("testkit: build runtime");
        let thread = super::serve::spawn_thread(
            "mcp-testkit-auth",
            runtime,
            accept_loop(std_listener, shared.clone()),
        );
        AuthServer {
            addr,
            shared,
            thread: Some(thread),
        }
    }

    /// The issuer: `http://127.0.0.1:PORT` and the path prefix, e.g.
    /// `http://127.0.0.1:PORT/tenant1` (no trailing `/`).
    pub fn issuer(&self) -> String {
        self.shared.issuer.clone()
    }

    /// `http://127.0.0.1:PORT`.
    pub fn origin(&self) -> String {
        self.shared.origin.clone()
    }

    /// The socket address the server listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The RFC 8414 metadata URL:
    /// `http://127.0.0.1:PORT/.well-known/oauth-authorization-server[/prefix]`.
    pub fn metadata_url(&self) -> String {
        format!("{}{}", self.shared.origin, self.shared.metadata_path())
    }

    /// The authorization endpoint, `<issuer>/authorize`.
    pub fn authorization_endpoint(&self) -> String {
        format!("{}/authorize", self.shared.issuer)
    }

    /// The token endpoint, `<issuer>/token`.
    pub fn token_endpoint(&self) -> String {
        format!("{}/token", self.shared.issuer)
    }

    /// The registration endpoint, `<issuer>/register` (served only with
    /// [`AuthConfig::dynamic_registration`]).
    pub fn registration_endpoint(&self) -> String {
        format!("{}/register", self.shared.issuer)
    }

    /// A [`ResourceAuth`] that accepts this server's access tokens, with
    /// its defaults; same as [`ResourceAuth::new`].
    pub fn resource(&self) -> ResourceAuth {
        ResourceAuth::new(self)
    }

    /// Current counters.
    pub fn stats(&self) -> AuthStats {
        self.shared.state().stats
    }

    /// Every request received so far, in arrival order.
    pub fn requests(&self) -> Vec<AuthRequest> {
        self.shared.state().requests.clone()
    }

    /// The JSON body of every request to `/register` that had one, in
    /// arrival order (refused registrations included).
    pub fn registrations(&self) -> Vec<Value> {
        self.shared.state().registrations.clone()
    }

    /// Every access token issued so far, in issue order.
    pub fn tokens(&self) -> Vec<IssuedToken> {
        let now = Instant::now();
        let book = self.shared.book.lock();
        let mut tokens: Vec<(&String, &TokenEntry)> = book.iter().collect();
        tokens.sort_by_key(|(_, e)| e.seq);
        tokens
            .into_iter()
            .map(|(token, e)| IssuedToken {
                access_token: token.clone(),
                client_id: e.client_id.clone(),
                scopes: e.scopes.clone(),
                resource: e.resource.clone(),
                expired: e.expired(now),
                revoked: e.revoked,
            })
            .collect()
    }

    /// Forgets the recorded requests and registration bodies, and zeroes
    /// the counters. Clients, codes and tokens stay valid.
    pub fn clear(&self) {
        let mut st = self.shared.state();
        st.requests.clear();
        st.registrations.clear();
        st.stats = AuthStats::default();
    }

    /// Revokes every access token and every refresh token issued so far:
    /// protected servers answer them `401`, and refreshing fails with
    /// `invalid_grant`. Tokens issued later are valid.
    pub fn revoke_all_tokens(&self) {
        for entry in self.shared.book.lock().values_mut() {
            entry.revoked = true;
        }
        self.shared.state().refresh.clear();
    }

    /// Makes every access token issued so far expired, as if its lifetime
    /// had passed; refresh tokens stay valid.
    pub fn expire_all_tokens(&self) {
        let now = Instant::now();
        for entry in self.shared.book.lock().values_mut() {
            entry.expires_at = entry.expires_at.min(now);
        }
    }

    /// Adds a scripted fault.
    pub fn push_fault(&self, fault: AuthFault) {
        self.shared.state().faults.push(fault);
    }

    /// Removes every scripted fault.
    pub fn clear_faults(&self) {
        self.shared.state().faults.clear();
    }

    /// Stops the server: stops accepting, closes every connection and
    /// joins the server thread. Same as dropping it. Tokens it issued stay
    /// valid for the [`ResourceAuth`]s made from it.
    pub fn shutdown(self) {
        drop(self);
    }
}

impl Drop for AuthServer {
    fn drop(&mut self) {
        self.shared.shutdown.cancel();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

async fn accept_loop(std_listener: std::net::TcpListener, shared: Arc<AsShared>) {
    let serve_one = |tcp| {
        let shared = shared.clone();
        async move {
            let svc = service_fn(move |req| handle(shared.clone(), req));
            let builder = auto::Builder::new(TokioExecutor::new());
            let _ = builder.serve_connection(TokioIo::new(tcp), svc).await;
        }
    };
    super::serve::accept_until(std_listener, &shared.shutdown, serve_one, || {}).await;
}

/// Which endpoint a request is for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Route {
    Metadata,
    Authorize,
    Token,
    Register,
    Unknown,
}

async fn handle(shared: Arc<AsShared>, req: Request<Incoming>) -> Result<Resp, BoxError> {
    let (parts, body) = req.into_parts();
    let bytes = body.collect().await?.to_bytes();
    let media_type = parts
        .headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| {
            v.split(';')
                .next()
                .unwrap_or_default()
                .trim()
                .to_ascii_lowercase()
        });
    let request = AuthRequest {
        method: parts.method,
        path: parts.uri.path().to_owned(),
        headers: parts.headers,
        query: parse_form(parts.uri.query().unwrap_or_default().as_bytes()),
        form: if media_type.as_deref() == Some(FORM) {
            parse_form(&bytes)
        } else {
            Vec::new()
        },
        json: serde_json::from_slice(&bytes).ok(),
    };
    let prefix = shared.prefix();
    let route = match request.path.as_str() {
        p if p == shared.metadata_path() => Route::Metadata,
        p => match p.strip_prefix(prefix) {
            Some("/authorize") => Route::Authorize,
            Some("/token") => Route::Token,
            Some("/register") if shared.config.dynamic_registration => Route::Register,
            _ => Route::Unknown,
        },
    };
    {
        let mut st = shared.state();
        let stats = &mut st.stats;
        match route {
            Route::Metadata => stats.metadata_requests += 1,
            Route::Authorize => stats.authorize_requests += 1,
            Route::Token => {
                stats.token_requests += 1;
                match request.form_param("grant_type") {
                    Some("authorization_code") => stats.code_grants += 1,
                    Some("refresh_token") => stats.refresh_grants += 1,
                    _ => {}
                }
            }
            Route::Register => {
                stats.registrations += 1;
                if let Some(body) = &request.json {
                    st.registrations.push(body.clone());
                }
            }
            Route::Unknown => {}
        }
        st.requests.push(request.clone());
    }
    let resp = match (route, &request.method) {
        (Route::Unknown, _) => oauth_error(404, "not_found", "no such endpoint"),
        (Route::Metadata, &Method::GET) => metadata(&shared),
        (Route::Authorize, &Method::GET) => authorize(&shared, &request),
        (Route::Token, &Method::POST) => {
            let refresh = request.form_param("grant_type") == Some("refresh_token");
            let resp = token(&shared, &request).await;
            if refresh && resp.status() != 200 {
                shared.state().stats.refresh_rejections += 1;
            }
            resp
        }
        (Route::Register, &Method::POST) => register(&shared, &request),
        (Route::Metadata | Route::Authorize, _) => not_allowed("GET"),
        (Route::Token | Route::Register, _) => not_allowed("POST"),
    };
    Ok(resp)
}

// ---------------------------------------------------------------- endpoints

fn metadata(shared: &AsShared) -> Resp {
    let cfg = &shared.config;
    let st = shared.state();
    let issuer = &shared.issuer;
    let mut doc = Map::new();
    let shown_issuer = if st.has(|f| *f == AuthFault::WrongIssuer) {
        format!("{issuer}/other")
    } else {
        issuer.clone()
    };
    doc.insert("issuer".into(), shown_issuer.into());
    doc.insert(
        "authorization_endpoint".into(),
        format!("{issuer}/authorize").into(),
    );
    doc.insert("token_endpoint".into(), format!("{issuer}/token").into());
    if cfg.dynamic_registration {
        doc.insert(
            "registration_endpoint".into(),
            format!("{issuer}/register").into(),
        );
    }
    doc.insert("response_types_supported".into(), json!(["code"]));
    doc.insert(
        "grant_types_supported".into(),
        json!(["authorization_code", "refresh_token"]),
    );
    let challenge_methods = if st.has(|f| *f == AuthFault::NoS256) {
        json!(["plain"])
    } else {
        json!(["S256"])
    };
    doc.insert("code_challenge_methods_supported".into(), challenge_methods);
    doc.insert(
        "token_endpoint_auth_methods_supported".into(),
        cfg.token_endpoint_auth_methods
            .iter()
            .map(|m| Value::from(m.as_str()))
            .collect(),
    );
    if let Some(scopes) = &cfg.scopes_supported {
        doc.insert("scopes_supported".into(), json!(scopes));
    }
    if let Some(on) = cfg.client_id_metadata_documents {
        doc.insert("client_id_metadata_document_supported".into(), on.into());
    }
    if let Some(on) = cfg.iss_parameter_supported {
        doc.insert(
            "authorization_response_iss_parameter_supported".into(),
            on.into(),
        );
    }
    json_response(200, &Value::Object(doc))
}

fn authorize(shared: &AsShared, req: &AuthRequest) -> Resp {
    let bad = |description: &str| oauth_error(400, "invalid_request", description);
    if let Some(name) = duplicate(&req.query) {
        return bad(&format!("parameter {name} given more than once"));
    }
    if req.query_param("response_type") != Some("code") {
        return bad("response_type must be code");
    }
    let Some(client_id) = req.query_param("client_id") else {
        return bad("client_id missing");
    };
    let mut st = shared.state();
    let Some(client) = shared.client(&st, client_id) else {
        return bad("unknown client_id");
    };
    let Some(redirect_uri) = req.query_param("redirect_uri") else {
        return bad("redirect_uri missing");
    };
    let Some(mut location) = absolute_uri(redirect_uri) else {
        return bad("redirect_uri must be an absolute URI without fragment");
    };
    if !redirect_allowed(&client.redirect_uris, redirect_uri) {
        return bad("redirect_uri is not registered for this client");
    }
    let Some(challenge) = req.query_param("code_challenge") else {
        return bad("code_challenge missing (PKCE is required)");
    };
    if !pkce_value(challenge) {
        return bad("code_challenge must be 43 to 128 characters of [A-Za-z0-9-._~]");
    }
    if req.query_param("code_challenge_method") != Some("S256") {
        return bad("code_challenge_method must be S256");
    }
    let resource = req.query_param("resource");
    if resource.is_some_and(|r| absolute_uri(r).is_none()) {
        return bad("resource must be an absolute URI without fragment");
    }
    let code = random_token("code-");
    st.codes.insert(
        code.clone(),
        CodeGrant {
            client_id: client.client_id,
            redirect_uri: redirect_uri.to_owned(),
            code_challenge: challenge.to_owned(),
            scopes: split_scope(req.query_param("scope").unwrap_or_default()),
            resource: resource.map(str::to_owned),
            expires_at: Instant::now() + CODE_LIFETIME,
        },
    );
    let iss = if st.has(|f| *f == AuthFault::WrongIss) {
        Some(OTHER_ISSUER)
    } else if st.has(|f| *f == AuthFault::MissingIss) || !shared.config.send_iss {
        None
    } else {
        Some(shared.issuer.as_str())
    };
    drop(st);
    {
        let mut pairs = location.query_pairs_mut();
        pairs.append_pair("code", &code);
        if let Some(state) = req.query_param("state") {
            pairs.append_pair("state", state);
        }
        if let Some(iss) = iss {
            pairs.append_pair("iss", iss);
        }
    }
    let mut resp = full(302, None, Bytes::new());
    if let Ok(v) = HeaderValue::from_str(location.as_str()) {
        resp.headers_mut().insert(LOCATION, v);
    }
    no_store(&mut resp);
    resp
}

async fn token(shared: &AsShared, req: &AuthRequest) -> Resp {
    let (wait, status) = {
        let st = shared.state();
        let wait: Duration = st
            .faults
            .iter()
            .filter_map(|f| match f {
                AuthFault::SlowToken(d) => Some(*d),
                _ => None,
            })
            .sum();
        let status = st.faults.iter().find_map(|f| match f {
            AuthFault::TokenError(s) => Some(*s),
            _ => None,
        });
        (wait, status)
    };
    if !wait.is_zero() {
        tokio::time::sleep(wait).await;
    }
    if let Some(status) = status {
        let error = match status {
            401 => "invalid_client",
            403 => "unauthorized_client",
            429 | 503 => "temporarily_unavailable",
            500..=599 => "server_error",
            _ => "invalid_request",
        };
        return oauth_error(status, error, "scripted token endpoint error");
    }
    let content_type_ok = req.header(CONTENT_TYPE.as_str()).is_some_and(|v| {
        v.split(';')
            .next()
            .unwrap_or_default()
            .trim()
            .eq_ignore_ascii_case(FORM)
    });
    if !content_type_ok {
        return oauth_error(
            400,
            "invalid_request",
            "the body must be application/x-www-form-urlencoded",
        );
    }
    if let Some(name) = duplicate(&req.form) {
        return oauth_error(
            400,
            "invalid_request",
            &format!("parameter {name} given more than once"),
        );
    }
    let mut st = shared.state();
    let client = match authenticate(shared, &st, req) {
        Ok(client) => client,
        Err(ClientRefusal(used_header, description)) => {
            return invalid_client(used_header, description);
        }
    };
    match req.form_param("grant_type") {
        Some("authorization_code") => code_grant(shared, &mut st, req, &client),
        Some("refresh_token") => refresh_grant(shared, &mut st, req, &client),
        Some(_) => oauth_error(400, "unsupported_grant_type", "unsupported grant_type"),
        None => oauth_error(400, "invalid_request", "grant_type missing"),
    }
}

/// Why a client's authentication failed: whether it used the
/// `Authorization` header, and a description.
struct ClientRefusal(bool, &'static str);

/// Authenticates the client of a token request by its registered method.
fn authenticate(
    shared: &AsShared,
    st: &AsState,
    req: &AuthRequest,
) -> Result<AuthClient, ClientRefusal> {
    let header = req.header(AUTHORIZATION.as_str());
    let basic = match header {
        None => None,
        Some(v) => match parse_basic(v) {
            Some(pair) => Some(pair),
            None => {
                return Err(ClientRefusal(
                    true,
                    "Authorization is no valid Basic credential",
                ));
            }
        },
    };
    let used_header = basic.is_some();
    let body_id = req.form_param("client_id");
    let body_secret = req.form_param("client_secret");
    let id = match (&basic, body_id) {
        (Some((b, _)), Some(f)) if b != f => {
            return Err(ClientRefusal(
                true,
                "client_id in the body differs from the Basic credential",
            ));
        }
        (Some((b, _)), _) => b.as_str(),
        (None, Some(f)) => f,
        (None, None) => return Err(ClientRefusal(false, "no client identification")),
    };
    let Some(client) = shared.client(st, id) else {
        return Err(ClientRefusal(used_header, "unknown client"));
    };
    let secret = client.client_secret.as_deref();
    match client.auth_method {
        ClientAuthMethod::ClientSecretBasic => {
            let Some((_, given)) = &basic else {
                return Err(ClientRefusal(
                    false,
                    "this client authenticates with client_secret_basic",
                ));
            };
            if body_secret.is_some() {
                return Err(ClientRefusal(
                    true,
                    "more than one client authentication method",
                ));
            }
            if Some(given.as_str()) != secret {
                return Err(ClientRefusal(true, "wrong client secret"));
            }
        }
        ClientAuthMethod::ClientSecretPost => {
            if used_header {
                return Err(ClientRefusal(
                    true,
                    "this client authenticates with client_secret_post",
                ));
            }
            if body_secret.is_none() || body_secret != secret {
                return Err(ClientRefusal(false, "wrong or missing client secret"));
            }
        }
        ClientAuthMethod::None => {
            if used_header || body_secret.is_some() {
                return Err(ClientRefusal(
                    used_header,
                    "a public client sends no secret",
                ));
            }
        }
    }
    Ok(client)
}

fn code_grant(shared: &AsShared, st: &mut AsState, req: &AuthRequest, client: &AuthClient) -> Resp {
    let bad = |description: &str| oauth_error(400, "invalid_request", description);
    let grant = |description: &str| oauth_error(400, "invalid_grant", description);
    let Some(code) = req.form_param("code") else {
        return bad("code missing");
    };
    let Some(redirect_uri) = req.form_param("redirect_uri") else {
        return bad("redirect_uri missing");
    };
    let Some(verifier) = req.form_param("code_verifier") else {
        return bad("code_verifier missing");
    };
    // Spent by its first presentation, whatever the outcome.
    let Some(entry) = st.codes.remove(code) else {
        return grant("unknown or already used code");
    };
    if Instant::now() >= entry.expires_at {
        return grant("code expired");
    }
    if entry.client_id != client.client_id {
        return grant("code was issued to another client");
    }
    if entry.redirect_uri != redirect_uri {
        return grant("redirect_uri differs from the authorization request's");
    }
    if !pkce_value(verifier) || s256(verifier) != entry.code_challenge {
        return grant("code_verifier does not match the code_challenge");
    }
    let resource = match (entry.resource, req.form_param("resource")) {
        (Some(a), Some(b)) if a == b => Some(a),
        (Some(_), _) => {
            return oauth_error(
                400,
                "invalid_target",
                "resource differs from the authorization request's",
            );
        }
        (None, r) => r.map(str::to_owned),
    };
    issue(
        shared,
        st,
        &client.client_id,
        &entry.scopes,
        &entry.scopes,
        resource,
    )
}

fn refresh_grant(
    shared: &AsShared,
    st: &mut AsState,
    req: &AuthRequest,
    client: &AuthClient,
) -> Resp {
    let grant = |description: &str| oauth_error(400, "invalid_grant", description);
    if st.has(|f| *f == AuthFault::RejectRefresh) {
        return grant("scripted refusal of refresh_token grants");
    }
    let Some(token) = req.form_param("refresh_token") else {
        return oauth_error(400, "invalid_request", "refresh_token missing");
    };
    let Some(entry) = st.refresh.get(token) else {
        return grant("unknown, rotated or revoked refresh token");
    };
    if entry.client_id != client.client_id {
        return grant("refresh token was issued to another client");
    }
    let scopes = match req.form_param("scope") {
        None => entry.scopes.clone(),
        Some(asked) => {
            let asked = split_scope(asked);
            if !asked.iter().all(|s| entry.scopes.contains(s)) {
                return oauth_error(400, "invalid_scope", "scope exceeds the original grant");
            }
            asked
        }
    };
    if let (Some(had), Some(asked)) = (&entry.resource, req.form_param("resource")) {
        if had != asked {
            return oauth_error(
                400,
                "invalid_target",
                "resource differs from the original grant's",
            );
        }
    }
    let Some(entry) = st.refresh.remove(token) else {
        return grant("unknown refresh token");
    };
    issue(
        shared,
        st,
        &client.client_id,
        &scopes,
        &entry.scopes,
        entry.resource,
    )
}

/// Issues an access token (and a refresh token for `grant_scopes`, when
/// configured) and answers with them.
fn issue(
    shared: &AsShared,
    st: &mut AsState,
    client_id: &str,
    scopes: &[String],
    grant_scopes: &[String],
    resource: Option<String>,
) -> Resp {
    let cfg = &shared.config;
    let access = random_token("at-");
    shared.book.insert(
        access.clone(),
        client_id,
        scopes,
        resource.as_deref(),
        cfg.token_lifetime,
    );
    st.stats.tokens_issued += 1;
    let mut body = Map::new();
    body.insert("access_token".into(), access.into());
    body.insert("token_type".into(), "Bearer".into());
    body.insert("expires_in".into(), cfg.token_lifetime.as_secs().into());
    if !scopes.is_empty() {
        body.insert("scope".into(), scopes.join(" ").into());
    }
    if cfg.refresh_tokens {
        let refresh = random_token("rt-");
        st.refresh.insert(
            refresh.clone(),
            RefreshGrant {
                client_id: client_id.to_owned(),
                scopes: grant_scopes.to_vec(),
                resource,
            },
        );
        body.insert("refresh_token".into(), refresh.into());
    }
    json_response(200, &Value::Object(body))
}

fn register(shared: &AsShared, req: &AuthRequest) -> Resp {
    let cfg = &shared.config;
    let bad = |error: &str, description: &str| oauth_error(400, error, description);
    let json_ct = req.header(CONTENT_TYPE.as_str()).is_some_and(|v| {
        v.split(';')
            .next()
            .unwrap_or_default()
            .trim()
            .eq_ignore_ascii_case(JSON)
    });
    let Some(Value::Object(asked)) = req.json.as_ref().filter(|_| json_ct) else {
        return bad(
            "invalid_client_metadata",
            "the body must be an application/json object",
        );
    };
    let redirect_uris: Vec<String> = match asked.get("redirect_uris") {
        Some(Value::Array(uris)) if !uris.is_empty() => {
            let uris: Option<Vec<String>> = uris
                .iter()
                .map(|u| {
                    u.as_str()
                        .filter(|u| absolute_uri(u).is_some())
                        .map(str::to_owned)
                })
                .collect();
            match uris {
                Some(uris) => uris,
                None => {
                    return bad(
                        "invalid_redirect_uri",
                        "every redirect URI must be an absolute URI without fragment",
                    );
                }
            }
        }
        _ => {
            return bad(
                "invalid_redirect_uri",
                "redirect_uris must be a non-empty array",
            );
        }
    };
    let supported = &cfg.token_endpoint_auth_methods;
    let method = asked
        .get("token_endpoint_auth_method")
        .and_then(Value::as_str)
        .and_then(|m| m.parse::<ClientAuthMethod>().ok())
        .filter(|m| supported.contains(m))
        .or_else(|| {
            supported
                .contains(&ClientAuthMethod::ClientSecretBasic)
                .then_some(ClientAuthMethod::ClientSecretBasic)
        })
        .or_else(|| supported.first().copied())
        .unwrap_or(ClientAuthMethod::ClientSecretBasic);
    let grant_types = match asked.get("grant_types") {
        Some(v @ Value::Array(_)) => v.clone(),
        _ => json!(["authorization_code"]),
    };
    let client_id = random_token("client-");
    let secret = method.has_secret().then(|| random_token("secret-"));
    let issued_at = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default();
    let mut body = asked.clone();
    body.remove("client_secret");
    body.insert("client_id".into(), client_id.clone().into());
    if let Some(secret) = &secret {
        body.insert("client_secret".into(), secret.clone().into());
        body.insert("client_secret_expires_at".into(), 0.into());
    }
    body.insert("client_id_issued_at".into(), issued_at.into());
    body.insert("redirect_uris".into(), json!(redirect_uris));
    body.insert("grant_types".into(), grant_types);
    body.insert("token_endpoint_auth_method".into(), method.as_str().into());
    shared.state().clients.insert(
        client_id.clone(),
        AuthClient {
            client_id,
            client_secret: secret,
            auth_method: method,
            redirect_uris,
        },
    );
    json_response(201, &Value::Object(body))
}

// ---------------------------------------------------------------- protected resource

/// Where a protected MCP server serves its RFC 9728 metadata
/// ([`ResourceAuth::metadata_location`]).
#[non_exhaustive]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum MetadataLocation {
    /// `/.well-known/oauth-protected-resource` followed by the endpoint
    /// path: `/.well-known/oauth-protected-resource/mcp`.
    #[default]
    PathBased,
    /// `/.well-known/oauth-protected-resource`.
    Root,
}

/// The `scope` parameter of a protected MCP server's `Bearer` challenges
/// ([`ResourceAuth::challenge_scope`]).
#[non_exhaustive]
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum ChallengeScope {
    /// The scopes the request needs: [`ResourceAuth::required_scopes`]
    /// and, for a `tools/call`, the called tool's
    /// ([`ResourceAuth::tool_scopes`]); omitted when it needs none.
    #[default]
    Needed,
    /// Never a `scope` parameter.
    Omit,
    /// Always these scopes (space separated), whatever the request needs.
    Fixed(Vec<String>),
}

/// A scripted misbehaviour of a protected MCP server
/// ([`ResourceAuth::with_fault`]).
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ResourceFault {
    /// Every `tools/call` with a valid token answers `403`
    /// `insufficient_scope`, whatever scopes the token has (a client must
    /// bound its step-up attempts). The challenge's scope is what the
    /// request needs, or `step-up` when it needs none.
    StepUpLoop,
}

/// Makes a [`TestServer`](super::TestServer) require bearer tokens issued
/// by an [`AuthServer`] ([`ServerConfig::with_authorization`](super::ServerConfig::with_authorization)).
///
/// Every request to the endpoint path (every era, every method, the
/// HTTP+SSE message path too) is checked before scripted faults and before
/// the MCP handling; refused ones are recorded like the others. The checks:
///
/// - no `Authorization: Bearer` token, or one the authorization server did
///   not issue, or one expired or revoked (or, with
///   [`require_audience`](Self::require_audience), issued for another
///   resource): `401`, `WWW-Authenticate: Bearer error="invalid_token",
///   error_description="...", [scope="...",] resource_metadata="..."` and
///   a JSON body `{"error":"invalid_token","error_description":...}`;
/// - a valid token that lacks a scope the request needs: `403`, the same
///   challenge with `error="insufficient_scope"`.
///
/// The server also answers `GET` on its metadata URL with
/// `{"resource":..., "authorization_servers":[...], "scopes_supported":[...],
/// "bearer_methods_supported":["header"]}` (`scopes_supported` only when
/// set).
#[non_exhaustive]
#[derive(Clone, Debug)]
pub struct ResourceAuth {
    /// `authorization_servers` of the metadata. Default: the issuer of the
    /// [`AuthServer`] it was made from.
    pub authorization_servers: Vec<String>,
    /// Scopes every request needs. Default none.
    pub required_scopes: Vec<String>,
    /// Scopes a `tools/call` of a tool needs besides the required ones,
    /// by tool name. Default none.
    pub tool_scopes: Vec<(String, Vec<String>)>,
    /// `scopes_supported` of the metadata. Default `None` (omitted).
    pub scopes_supported: Option<Vec<String>>,
    /// Whether challenges carry `resource_metadata`. Default `true`.
    pub challenge_resource_metadata: bool,
    /// The challenges' `scope`. Default [`ChallengeScope::Needed`].
    pub challenge_scope: ChallengeScope,
    /// Where the metadata is served. Default
    /// [`MetadataLocation::PathBased`].
    pub metadata_location: MetadataLocation,
    /// The metadata's `resource`. Default `None`: exactly the MCP endpoint
    /// URL, `http://127.0.0.1:PORT/mcp`. Set it to test a client that must
    /// refuse a metadata document naming another resource.
    pub resource: Option<String>,
    /// Whether a token must have been issued for this server's `resource`
    /// (RFC 8707; the string of the metadata, exactly). Default `false`:
    /// any token the authorization server issued and that is still valid.
    pub require_audience: bool,
    /// Scripted faults. Default none.
    pub faults: Vec<ResourceFault>,
    book: Arc<TokenBook>,
}

impl ResourceAuth {
    /// Accepts the access tokens `auth` issues (now or later, even after it
    /// stops), with the defaults listed on the fields.
    pub fn new(auth: &AuthServer) -> Self {
        ResourceAuth {
            authorization_servers: vec![auth.issuer()],
            required_scopes: Vec::new(),
            tool_scopes: Vec::new(),
            scopes_supported: None,
            challenge_resource_metadata: true,
            challenge_scope: ChallengeScope::Needed,
            metadata_location: MetadataLocation::PathBased,
            resource: None,
            require_audience: false,
            faults: Vec::new(),
            book: auth.shared.book.clone(),
        }
    }
    /// Sets `authorization_servers`.
    #[must_use]
    pub fn with_authorization_servers<I, S>(mut self, servers: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.authorization_servers = servers.into_iter().map(Into::into).collect();
        self
    }
    /// Sets the scopes every request needs.
    #[must_use]
    pub fn with_required_scopes<I, S>(mut self, scopes: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.required_scopes = scopes.into_iter().map(Into::into).collect();
        self
    }
    /// Adds `scope` to what a `tools/call` of `tool` needs.
    #[must_use]
    pub fn with_tool_scope(mut self, tool: impl Into<String>, scope: impl Into<String>) -> Self {
        let tool = tool.into();
        let scope = scope.into();
        match self.tool_scopes.iter_mut().find(|(t, _)| *t == tool) {
            Some((_, scopes)) => scopes.push(scope),
            None => self.tool_scopes.push((tool, vec![scope])),
        }
        self
    }
    /// Sets `scopes_supported` of the metadata.
    #[must_use]
    pub fn with_scopes_supported<I, S>(mut self, scopes: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.scopes_supported = Some(scopes.into_iter().map(Into::into).collect());
        self
    }
    /// Sets whether challenges carry `resource_metadata`.
    #[must_use]
    pub fn with_challenge_resource_metadata(mut self, on: bool) -> Self {
        self.challenge_resource_metadata = on;
        self
    }
    /// Sets the challenges' `scope`.
    #[must_use]
    pub fn with_challenge_scope(mut self, scope: ChallengeScope) -> Self {
        self.challenge_scope = scope;
        self
    }
    /// Sets where the metadata is served.
    #[must_use]
    pub fn with_metadata_location(mut self, location: MetadataLocation) -> Self {
        self.metadata_location = location;
        self
    }
    /// Sets the metadata's `resource` string.
    #[must_use]
    pub fn with_resource(mut self, resource: impl Into<String>) -> Self {
        self.resource = Some(resource.into());
        self
    }
    /// Sets whether tokens must have been issued for this resource.
    #[must_use]
    pub fn with_require_audience(mut self, on: bool) -> Self {
        self.require_audience = on;
        self
    }
    /// Adds a scripted fault.
    #[must_use]
    pub fn with_fault(mut self, fault: ResourceFault) -> Self {
        self.faults.push(fault);
        self
    }

    /// The metadata path for an endpoint at `endpoint_path`.
    pub(super) fn metadata_path(&self, endpoint_path: &str) -> String {
        match self.metadata_location {
            MetadataLocation::Root => PR_METADATA.to_owned(),
            MetadataLocation::PathBased if endpoint_path == "/" => PR_METADATA.to_owned(),
            MetadataLocation::PathBased => format!("{PR_METADATA}{endpoint_path}"),
        }
    }

    fn resource_string(&self, origin: &str, endpoint_path: &str) -> String {
        self.resource
            .clone()
            .unwrap_or_else(|| format!("{origin}{endpoint_path}"))
    }

    /// The answer to a request on the metadata path.
    pub(super) fn metadata_response(
        &self,
        method: &Method,
        origin: &str,
        endpoint_path: &str,
    ) -> Resp {
        if method != Method::GET {
            return not_allowed("GET");
        }
        let mut doc = Map::new();
        doc.insert(
            "resource".into(),
            self.resource_string(origin, endpoint_path).into(),
        );
        doc.insert(
            "authorization_servers".into(),
            json!(self.authorization_servers),
        );
        if let Some(scopes) = &self.scopes_supported {
            doc.insert("scopes_supported".into(), json!(scopes));
        }
        doc.insert("bearer_methods_supported".into(), json!(["header"]));
        json_response(200, &Value::Object(doc))
    }

    /// `None` if the request may go on, else the refusal.
    pub(super) fn check(
        &self,
        origin: &str,
        endpoint_path: &str,
        headers: &HeaderMap,
        body: Option<&Value>,
    ) -> Option<Resp> {
        let tools = called_tools(body);
        let mut needed = self.required_scopes.clone();
        for (tool, scopes) in &self.tool_scopes {
            if tools.contains(&tool.as_str()) {
                for s in scopes {
                    if !needed.contains(s) {
                        needed.push(s.clone());
                    }
                }
            }
        }
        let refuse = |status: u16, error: &str, description: &str, scopes: &[String]| {
            Some(self.refusal(status, error, description, scopes, origin, endpoint_path))
        };
        let token = headers
            .get(AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| {
                let (scheme, token) = v.trim().split_once(' ')?;
                let token = token.trim();
                (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
            });
        let Some(token) = token else {
            return refuse(401, "invalid_token", "no bearer token", &needed);
        };
        let granted = {
            let book = self.book.lock();
            let Some(entry) = book.get(token) else {
                return refuse(401, "invalid_token", "unknown token", &needed);
            };
            if entry.revoked {
                return refuse(401, "invalid_token", "token revoked", &needed);
            }
            if entry.expired(Instant::now()) {
                return refuse(401, "invalid_token", "token expired", &needed);
            }
            if self.require_audience
                && entry.resource.as_deref()
                    != Some(self.resource_string(origin, endpoint_path).as_str())
            {
                return refuse(
                    401,
                    "invalid_token",
                    "token issued for another resource",
                    &needed,
                );
            }
            entry.scopes.clone()
        };
        if !tools.is_empty() && self.faults.contains(&ResourceFault::StepUpLoop) {
            let scopes = if needed.is_empty() {
                vec![STEP_UP_SCOPE.to_owned()]
            } else {
                needed
            };
            return refuse(403, "insufficient_scope", "more scope needed", &scopes);
        }
        if needed.iter().any(|s| !granted.contains(s)) {
            return refuse(403, "insufficient_scope", "more scope needed", &needed);
        }
        None
    }

    fn refusal(
        &self,
        status: u16,
        error: &str,
        description: &str,
        needed: &[String],
        origin: &str,
        endpoint_path: &str,
    ) -> Resp {
        let mut challenge =
            format!("Bearer error=\"{error}\", error_description=\"{description}\"");
        let scope = match &self.challenge_scope {
            ChallengeScope::Needed if !needed.is_empty() => Some(needed.join(" ")),
            ChallengeScope::Fixed(scopes) => Some(scopes.join(" ")),
            _ => None,
        };
        if let Some(scope) = scope {
            challenge.push_str(&format!(", scope=\"{scope}\""));
        }
        if self.challenge_resource_metadata {
            challenge.push_str(&format!(
                ", resource_metadata=\"{origin}{}\"",
                self.metadata_path(endpoint_path)
            ));
        }
        let mut resp = json_response(
            status,
            &json!({"error": error, "error_description": description}),
        );
        if let Ok(v) = HeaderValue::from_str(&challenge) {
            resp.headers_mut().insert(http::header::WWW_AUTHENTICATE, v);
        }
        resp
    }
}

/// The `params.name` of every `tools/call` in a JSON-RPC body.
fn called_tools(body: Option<&Value>) -> Vec<&str> {
    let messages: Vec<&Value> = match body {
        Some(Value::Array(a)) => a.iter().collect(),
        Some(v) => vec![v],
        None => Vec::new(),
    };
    messages
        .into_iter()
        .filter(|m| m.get("method").and_then(Value::as_str) == Some("tools/call"))
        .map(|m| {
            m.get("params")
                .and_then(|p| p.get("name"))
                .and_then(Value::as_str)
                .unwrap_or_default()
        })
        .collect()
}

// ---------------------------------------------------------------- helpers

fn json_response(status: u16, body: &Value) -> Resp {
    let mut resp = full(status, Some(JSON), body.to_string());
    no_store(&mut resp);
    resp
}

fn oauth_error(status: u16, error: &str, description: &str) -> Resp {
    json_response(
        status,
        &json!({"error": error, "error_description": description}),
    )
}

/// `401 invalid_client`, with a `Basic` challenge when the client used the
/// `Authorization` header (RFC 6749 §5.2).
fn invalid_client(used_header: bool, description: &str) -> Resp {
    let mut resp = oauth_error(401, "invalid_client", description);
    if used_header {
        resp.headers_mut().insert(
            http::header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Basic realm=\"testkit\""),
        );
    }
    resp
}

fn not_allowed(allow: &'static str) -> Resp {
    let mut resp = oauth_error(405, "invalid_request", "method not allowed");
    resp.headers_mut()
        .insert(http::header::ALLOW, HeaderValue::from_static(allow));
    resp
}

fn no_store(resp: &mut Resp) {
    resp.headers_mut()
        .insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
}

fn first<'a>(params: &'a [(String, String)], name: &str) -> Option<&'a str> {
    params
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

/// The first parameter name given more than once.
fn duplicate(params: &[(String, String)]) -> Option<&str> {
    params.iter().enumerate().find_map(|(i, (k, _))| {
        params[..i]
            .iter()
            .any(|(earlier, _)| earlier == k)
            .then_some(k.as_str())
    })
}

fn parse_form(bytes: &[u8]) -> Vec<(String, String)> {
    url::form_urlencoded::parse(bytes).into_owned().collect()
}

/// Decodes one `application/x-www-form-urlencoded` component: `+` is a
/// space, `%XX` a byte.
fn form_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8(out).ok()
}

/// The id and secret of a `Basic` credential (RFC 6749 §2.3.1: each
/// form-urlencoded, then joined by `:`, then base64).
fn parse_basic(value: &str) -> Option<(String, String)> {
    let (scheme, rest) = value.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let raw = STANDARD.decode(rest.trim()).ok()?;
    let text = String::from_utf8(raw).ok()?;
    let (id, secret) = text.split_once(':')?;
    Some((form_decode(id)?, form_decode(secret)?))
}

/// `s` parsed, if it is an absolute URI without fragment.
fn absolute_uri(s: &str) -> Option<url::Url> {
    url::Url::parse(s).ok().filter(|u| u.fragment().is_none())
}

/// Whether a client registered with `registered` may use `asked`: one of
/// them exactly, or a loopback `http` one with another port (RFC 8252
/// §7.3). Any absolute URI when `registered` is empty.
fn redirect_allowed(registered: &[String], asked: &str) -> bool {
    if registered.is_empty() || registered.iter().any(|r| r == asked) {
        return true;
    }
    let Ok(asked) = url::Url::parse(asked) else {
        return false;
    };
    registered.iter().any(|r| {
        let Ok(r) = url::Url::parse(r) else {
            return false;
        };
        r.scheme() == "http"
            && matches!(r.host_str(), Some("127.0.0.1" | "localhost" | "[::1]"))
            && asked.scheme() == r.scheme()
            && asked.host_str() == r.host_str()
            && asked.path() == r.path()
            && asked.query() == r.query()
            && asked.username() == r.username()
            && asked.password() == r.password()
    })
}

/// Whether `s` is a Client ID Metadata Document URL: `https` with a path.
fn is_cimd_url(s: &str) -> bool {
    url::Url::parse(s).is_ok_and(|u| {
        u.scheme() == "https" && u.path() != "/" && u.fragment().is_none() && u.host().is_some()
    })
}

/// Whether `s` is a valid PKCE verifier or S256 challenge: 43 to 128
/// characters of `[A-Za-z0-9-._~]` (RFC 7636 §4.1).
fn pkce_value(s: &str) -> bool {
    (43..=128).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~'))
}

/// `BASE64URL(SHA256(verifier))`, without padding.
fn s256(verifier: &str) -> String {
    URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()))
}

fn split_scope(scope: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for s in scope.split(' ').filter(|s| !s.is_empty()) {
        if !out.iter().any(|o| o == s) {
            out.push(s.to_owned());
        }
    }
    out
}

/// An unguessable token: `prefix` and 43 base64url characters.
fn random_token(prefix: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let mut h = Sha256::new();
    for _ in 0..4 {
        h.update(random_u64().to_le_bytes());
    }
    h.update(NEXT.fetch_add(1, Ordering::Relaxed).to_le_bytes());
    format!("{prefix}{}", URL_SAFE_NO_PAD.encode(h.finalize()))
}

/// `""`, or `/segment...` without a trailing `/`.
fn normalize_prefix(prefix: &str) -> String {
    let trimmed = prefix.trim_end_matches('/');
    if trimmed.is_empty() || trimmed.starts_with('/') {
        trimmed.to_owned()
    } else {
        format!("/{trimmed}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn s256_is_rfc_7636_appendix_b() {
        assert_eq!(
            s256("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"),
            "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
        );
    }

    #[test]
    fn basic_credentials_are_form_decoded() {
        // "a b:c" and "s&c+t:%" form-urlencoded: "a+b%3Ac" and "s%26c%2Bt%3A%25".
        let raw = STANDARD.encode("a+b%3Ac:s%26c%2Bt%3A%25");
        assert_eq!(
            parse_basic(&format!("Basic {raw}")),
            Some(("a b:c".to_owned(), "s&c+t:%".to_owned()))
        );
        assert_eq!(parse_basic(&format!("Bearer {raw}")), None);
        assert_eq!(parse_basic("Basic %%%"), None);
        assert_eq!(form_decode("%2"), None);
    }

    #[test]
    fn loopback_redirects_match_on_any_port() {
        let reg = vec!["http://127.0.0.1:1234/cb".to_owned()];
        assert!(redirect_allowed(&reg, "http://127.0.0.1:1234/cb"));
        assert!(redirect_allowed(&reg, "http://127.0.0.1:999/cb"));
        assert!(!redirect_allowed(&reg, "http://127.0.0.1:999/other"));
        assert!(!redirect_allowed(&reg, "http://localhost:999/cb"));
        let reg = vec!["https://app.example/cb".to_owned()];
        assert!(!redirect_allowed(&reg, "https://app.example:8443/cb"));
        assert!(redirect_allowed(&[], "https://anything.example/x"));
    }

    #[test]
    fn prefixes_are_normalized() {
        assert_eq!(normalize_prefix(""), "");
        assert_eq!(normalize_prefix("/"), "");
        assert_eq!(normalize_prefix("tenant1/"), "/tenant1");
        assert_eq!(normalize_prefix("/a/b"), "/a/b");
    }

    #[test]
    fn duplicates_are_found() {
        let p = |k: &str| (k.to_owned(), String::new());
        assert_eq!(duplicate(&[p("a"), p("b")]), None);
        assert_eq!(duplicate(&[p("a"), p("b"), p("a")]), Some("a"));
    }
}
