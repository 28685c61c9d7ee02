//! OAuth 2.1 for MCP servers that require it (feature `oauth`): the client
//! side of MCP authorization, as a session resource on the guard stack.
//!
//! Give a [`Connector`](crate::Connector) an [`OAuth`] and its sessions
//! answer a `401` (or a `403` with `error="insufficient_scope"`) on any
//! request, the era probe and `initialize` included, by running the flow
//! and sending the refused request again:
//!
//! 1. **Protected resource metadata** (RFC 9728): the challenge's
//!    `resource_metadata` as given; without one, the path-based well-known
//!    URL, then the root one. Its `resource` must name the endpoint (same
//!    origin, the endpoint's path or a parent of it) before anything is
//!    asked of an authorization server. No metadata at all: the 2025-03-26
//!    fallback (the server's origin is the authorization server, with
//!    `/authorize`, `/token` and `/register` when it has no metadata
//!    either).
//! 2. **Authorization server metadata** (RFC 8414, then OpenID Connect
//!    Discovery, in the spec's order) of the first listed server, its
//!    `issuer` exactly the string the resource named, `S256` listed.
//! 3. **Client identity**, per issuer: credentials you registered in
//!    advance ([`OAuth::client`]), else what the store holds for that
//!    issuer, else a Client ID Metadata Document where the server supports
//!    them ([`OAuth::client_metadata_url`]), else Dynamic Client
//!    Registration.
//! 4. **Authorization code with PKCE S256**, `state`, and `resource`
//!    (RFC 8707) in both requests; scope from the challenge, else your
//!    [`OAuth::scopes`], else the resource's `scopes_supported`, else none;
//!    a step-up asks for the union with what was asked before;
//!    `offline_access` only when the authorization server lists it. The
//!    redirect's `iss` (RFC 9207) must be the issuer, exactly, and must be
//!    there when the server says it sends it. The [`UserAgent`] step is
//!    yours to choose: [`LoopbackAgent`] for a person at a browser,
//!    [`HeadlessAgent`] for a server that approves without one.
//! 5. **Tokens**: kept in a [`CredentialStore`] (the session's own
//!    in-memory one, or yours), refreshed before they expire or when
//!    refused, single flight per store and endpoint (every session, of
//!    any [`OAuth`] value, that shares a store), so a rotating refresh
//!    token is never presented twice at once.
//!
//! ```no_run
//! use std::sync::Arc;
//! use std::time::Duration;
//!
//! use mcp_scoped_http::Connector;
//! use mcp_scoped_http::oauth::{CredentialStore, LoopbackAgent, OAuth};
//!
//! async fn run(url: &str, store: Arc<dyn CredentialStore>) -> mcp_scoped_http::Result<()> {
//!     let oauth = OAuth::new(LoopbackAgent::new().open_browser(true))
//!         .store(store) // default: an in-memory store per session
//!         .scopes(["mcp:read"]); // when the server's challenge names none
//!     let session = Connector::new(url)
//!         .oauth(oauth)
//!         .request_timeout(Duration::from_secs(360))
//!         .connect()
//!         .await?;
//!     session.close().await;
//!     Ok(())
//! }
//! ```
//!
//! # ClientOwnership
//!
//! The flow runs inside the request that needed it: dropping the request
//! (or the connect) drops the flow at whatever await it is in, and with it,
//! in reverse order, the redirect listener, the requests in flight and the
//! half-built credentials. Nothing is written to your store until a step
//! has succeeded, and nothing in it is ever cleared: a refused token is set
//! aside, then replaced by a new one only when one is issued. The bearer
//! token goes only to the endpoint's origin (redirects to another origin
//! are refused as for every request); the authorization server's requests
//! carry client credentials, never the bearer. Tokens, codes, verifiers and
//! secrets are [`Secret`]s: never in `Debug`, `Display`, errors or tracing.
//!
//! Its HTTP goes through the session's [`HttpClient`](crate::HttpClient),
//! lent or owned, with the client-wide hooks you registered for the
//! authorization server's origin and none of the session's own.
//!
//! # Where requests go
//!
//! Every URL the flow sends a request to (protected resource metadata,
//! authorization server metadata, registration, authorization, token) is
//! parsed once, with the `url` crate (WHATWG, as browsers and the `oauth2`
//! crate parse), checked (HTTPS, or plain HTTP to `localhost`,
//! `127.0.0.0/8` or `::1`, unless [`OAuth::allow_insecure_http`]), and
//! that parsed value is what the request is sent to. A user name and
//! password in a URL are dropped, never sent nor shown.
//!
//! # Timing
//!
//! The flow counts against the deadline of the request that needed it
//! (the request timeout, 60 s by default): with a person at a browser,
//! give the connector a longer one (the CLI's `--oauth` does). Within it,
//! each exchange with an authorization server (metadata, registration,
//! token, refresh) has its own deadline, [`OAuth::exchange_timeout`]
//! (30 s by default), from sending to the last byte of the answer (at
//! most 256 KiB); the headless agent's requests have 30 s each; the
//! loopback agent waits 5 minutes for the redirect
//! ([`LoopbackAgent::timeout`]).

mod agent;
pub(crate) mod challenge;
pub(crate) mod discovery;
mod flow;
mod http;
pub(crate) mod metadata;
mod store;

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

pub use agent::{HeadlessAgent, LoopbackAgent};
pub(crate) use flow::{Authorizer, Refusal};
pub use store::{
    ClientCredentials, CredentialStore, MemoryStore, Secret, TokenAuthMethod, TokenSet,
};

use crate::error::Result;

/// A boxed, `Send` future: what the traits of this module return.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// How a session authorizes with OAuth 2.1: the user agent, the store, and
/// what the client is known as. Cheap to clone; the sessions of one value
/// share its store, and every session whose tokens are in one store (made
/// from this value, a clone of it, or another value given the same store)
/// authorizes and refreshes one at a time per endpoint.
///
/// Defaults: an in-memory store per session, no pre-registered client, no
/// Client ID Metadata Document, client name `mcp-scoped-http`, no scopes of
/// your own, at most 3 authorizations per request, 30 s per exchange with
/// the authorization server, its endpoints HTTPS (or plain HTTP on this
/// machine only).
#[derive(Clone)]
pub struct OAuth {
    pub(crate) config: Arc<Config>,
}

#[derive(Clone)]
pub(crate) struct Config {
    pub(crate) agent: Arc<dyn UserAgent>,
    pub(crate) store: Option<Arc<dyn CredentialStore>>,
    pub(crate) client: Option<PreRegistered>,
    pub(crate) client_metadata_url: Option<String>,
    pub(crate) client_name: String,
    pub(crate) scopes: Option<Vec<String>>,
    pub(crate) max_authorizations: u32,
    pub(crate) exchange_timeout: Duration,
    pub(crate) allow_insecure_http: bool,
}

/// Client credentials registered in advance, for one issuer, or for any
/// ([`OAuth::client_for_any_issuer`]).
#[derive(Clone)]
pub(crate) struct PreRegistered {
    pub(crate) credentials: ClientCredentials,
    pub(crate) issuer: Option<String>,
}

impl OAuth {
    /// OAuth with `agent` for the step where a user (or the server alone)
    /// approves, and the defaults above.
    pub fn new(agent: impl UserAgent) -> OAuth {
        OAuth {
            config: Arc::new(Config {
                agent: Arc::new(agent),
                store: None,
                client: None,
                client_metadata_url: None,
                client_name: "mcp-scoped-http".to_owned(),
                scopes: None,
                max_authorizations: 3,
                exchange_timeout: Duration::from_secs(30),
                allow_insecure_http: false,
            }),
        }
    }

    fn config_mut(&mut self) -> &mut Config {
        Arc::make_mut(&mut self.config)
    }

    /// Keeps clients and tokens in `store` (yours: sessions read it and
    /// add to it, and never clear it). Default: an in-memory store per
    /// session, gone when it closes.
    #[must_use]
    pub fn store(mut self, store: Arc<dyn CredentialStore>) -> Self {
        self.config_mut().store = Some(store);
        self
    }

    /// A client registered in advance with the authorization server
    /// `issuer`: used before any other identity, for that authorization
    /// server only (its metadata's `issuer`, compared exactly). Its secret
    /// never goes to another authorization server, whichever one an MCP
    /// server names.
    #[must_use]
    pub fn client(mut self, credentials: ClientCredentials, issuer: impl Into<String>) -> Self {
        self.config_mut().client = Some(PreRegistered {
            credentials,
            issuer: Some(issuer.into()),
        });
        self
    }

    /// A client registered in advance, used with **any** authorization
    /// server an MCP server names: its id, and its secret when it has one,
    /// go to whichever that is. For a public client (no secret), or when
    /// the MCP server is trusted to name the right authorization server;
    /// prefer [`client`](Self::client), which binds the client to its
    /// issuer.
    #[must_use]
    pub fn client_for_any_issuer(mut self, credentials: ClientCredentials) -> Self {
        self.config_mut().client = Some(PreRegistered {
            credentials,
            issuer: None,
        });
        self
    }

    /// The HTTPS URL of your Client ID Metadata Document: used as the
    /// `client_id` where the authorization server supports them (instead
    /// of registering). Default: none.
    #[must_use]
    pub fn client_metadata_url(mut self, url: impl Into<String>) -> Self {
        self.config_mut().client_metadata_url = Some(url.into());
        self
    }

    /// The `client_name` sent with Dynamic Client Registration. Default:
    /// `mcp-scoped-http`.
    #[must_use]
    pub fn client_name(mut self, name: impl Into<String>) -> Self {
        self.config_mut().client_name = name.into();
        self
    }

    /// Scopes to ask for when the server's challenge names none (instead
    /// of all of the resource's `scopes_supported`), and along with a
    /// step-up's. Default: none of your own.
    #[must_use]
    pub fn scopes<I, S>(mut self, scopes: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.config_mut().scopes = Some(scopes.into_iter().map(Into::into).collect());
        self
    }

    /// How many times one request may authorize (a refresh counts) before
    /// it fails with [`Error::is_auth`](crate::Error::is_auth). Default 3;
    /// at least 1.
    #[must_use]
    pub fn max_authorizations(mut self, max: u32) -> Self {
        self.config_mut().max_authorizations = max.max(1);
        self
    }

    /// The deadline of each exchange with an authorization server
    /// (protected resource metadata, authorization server metadata,
    /// registration, token, refresh), from sending the request to reading
    /// the whole answer. Default 30 s. The flow as a whole also counts
    /// against the deadline of the request that needed it.
    #[must_use]
    pub fn exchange_timeout(mut self, timeout: Duration) -> Self {
        self.config_mut().exchange_timeout = timeout;
        self
    }

    /// Lets codes, verifiers and client secrets go over plain HTTP to
    /// another machine. Default: refused; HTTPS, or HTTP to `localhost`,
    /// `127.0.0.0/8` or `[::1]` only.
    #[must_use]
    pub fn allow_insecure_http(mut self, allow: bool) -> Self {
        self.config_mut().allow_insecure_http = allow;
        self
    }
}

impl fmt::Debug for OAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let config = &self.config;
        f.debug_struct("OAuth")
            .field("store", &config.store.as_ref().map(|_| ".."))
            .field(
                "client_id",
                &config.client.as_ref().map(|c| &c.credentials.client_id),
            )
            .field("client_metadata_url", &config.client_metadata_url)
            .field("scopes", &config.scopes)
            .field("max_authorizations", &config.max_authorizations)
            .finish_non_exhaustive()
    }
}

/// The step where the authorization request meets a user agent: it gets
/// the authorization URL and returns what the redirect brought back.
///
/// [`prepare`](Self::prepare) runs before the client is registered (the
/// redirect URI goes into the registration), and what it returns lives
/// until the redirect has come back or the flow is dropped.
pub trait UserAgent: Send + Sync + 'static {
    /// Gets ready to receive one redirect (for example, binds a listener).
    fn prepare(&self) -> BoxFuture<'_, Result<Box<dyn Redirect>>>;
}

/// One prepared redirect: where it will come back, and the wait for it.
pub trait Redirect: Send {
    /// The `redirect_uri` to register and send.
    fn redirect_uri(&self) -> &str;

    /// Sends the user agent to `request.url()` and waits for the redirect.
    fn authorize(
        self: Box<Self>,
        request: AuthorizationRequest,
    ) -> BoxFuture<'static, Result<AuthorizationResponse>>;
}

/// An authorization request for a [`Redirect`] to carry out.
#[derive(Clone)]
#[non_exhaustive]
pub struct AuthorizationRequest {
    url: String,
    client: crate::HttpClient,
}

impl AuthorizationRequest {
    /// The authorization URL to open (it holds `state` and the PKCE
    /// challenge, no secret).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The session's HTTP client, for an agent that makes the request
    /// itself.
    pub fn client(&self) -> &crate::HttpClient {
        &self.client
    }
}

impl fmt::Debug for AuthorizationRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AuthorizationRequest")
            .finish_non_exhaustive()
    }
}

/// What the redirect brought back: the query of the redirect URI.
#[derive(Clone, Default)]
#[non_exhaustive]
pub struct AuthorizationResponse {
    /// `code`.
    pub code: Option<Secret>,
    /// `state`.
    pub state: Option<String>,
    /// `iss` (RFC 9207).
    pub iss: Option<String>,
    /// `error`, when the authorization server refused.
    pub error: Option<String>,
}

impl AuthorizationResponse {
    /// Reads the query of the URL the user agent was redirected to.
    /// A relative reference (`?code=...`) is read too.
    pub fn from_redirect(url: &str) -> AuthorizationResponse {
        // Read by the URL parser, as the browser does: the query is what
        // it finds between `?` and `#`.
        let parsed = ::url::Url::parse("http://redirect.invalid/")
            .and_then(|base| base.join(url))
            .ok();
        let query = parsed.as_ref().and_then(|url| url.query()).unwrap_or("");
        let mut response = AuthorizationResponse::default();
        for (name, value) in ::url::form_urlencoded::parse(query.as_bytes()) {
            let value = value.into_owned();
            match &*name {
                "code" => response.code = Some(Secret::new(value)),
                "state" => response.state = Some(value),
                "iss" => response.iss = Some(value),
                "error" => response.error = Some(value),
                _ => {}
            }
        }
        response
    }
}

impl fmt::Debug for AuthorizationResponse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AuthorizationResponse")
            .field("code", &self.code)
            .field("state", &self.state.as_ref().map(|_| ".."))
            .field("iss", &self.iss)
            .field("error", &self.error)
            .finish()
    }
}
