//! One session's authorizer: the bearer it sends, and what it does when a
//! request is refused (refresh, or the whole flow), one at a time per
//! endpoint.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, SystemTime};

use http::header::{AUTHORIZATION, WWW_AUTHENTICATE};
use http::{HeaderValue, StatusCode};
use oauth2::basic::{BasicClient, BasicTokenType};
use oauth2::{
    AuthType, AuthUrl, AuthorizationCode, ClientId, ClientSecret, CsrfToken, PkceCodeChallenge,
    RedirectUrl, RefreshToken, RequestTokenError, Scope, TokenResponse, TokenUrl,
};
use serde_json::{Value, json};
use tracing::Instrument;

use super::challenge::BearerChallenge;
use super::discovery::{authorization_server_metadata_urls, resource_metadata_urls};
use super::http::{self as oauth_http, Answer};
use super::metadata::{AuthorizationServer, ProtectedResource};
use super::store::{
    ClientCredentials, CredentialStore, MemoryStore, Secret, TokenAuthMethod, TokenSet,
};
use super::{AuthorizationRequest, AuthorizationResponse, BoxFuture, OAuth};
use crate::HttpClient;
use crate::deadline::Deadline;
use crate::error::{Error, Result};
use crate::sync::lock;
use crate::url_target::{SecureTarget, Target};

/// Tokens this close to expiry are refreshed before they are sent.
const EXPIRY_MARGIN: Duration = Duration::from_secs(30);

/// The single-flight lock of an endpoint's tokens in a store.
type Flight = Arc<tokio::sync::Mutex<()>>;

/// One authorization at a time per store and endpoint, process-wide: every
/// session whose tokens are in the same store takes the same lock, whichever
/// [`OAuth`] value (a clone, a clone changed by a builder call, another one
/// given the same store) it was made with, so a rotating refresh token is
/// never presented twice at once.
///
/// Keyed by the store's address: an entry lives while a session holds its
/// lock, and that session holds the store too, so the address cannot be
/// reused by another store meanwhile. Dead entries are dropped as new ones
/// come, so the map is as large as the live sessions.
fn flight_for(store: &Arc<dyn CredentialStore>, endpoint: &str) -> Flight {
    type Flights = Mutex<HashMap<(usize, String), Weak<tokio::sync::Mutex<()>>>>;
    static FLIGHTS: OnceLock<Flights> = OnceLock::new();
    let key = (
        Arc::as_ptr(store).cast::<()>() as usize,
        endpoint.to_owned(),
    );
    let mut flights = lock(FLIGHTS.get_or_init(Flights::default));
    if let Some(flight) = flights.get(&key).and_then(Weak::upgrade) {
        return flight;
    }
    flights.retain(|_, flight| flight.strong_count() > 0);
    let flight = Flight::default();
    flights.insert(key, Arc::downgrade(&flight));
    flight
}

/// A request refused for want of authorization: a 401, or a 403 with
/// `error="insufficient_scope"`.
pub(crate) struct Refusal {
    status: StatusCode,
    challenge: BearerChallenge,
}

impl Refusal {
    /// The refusal `response` carries, if any.
    pub(crate) fn of<B>(response: &http::Response<B>) -> Option<Refusal> {
        let status = response.status();
        if status != StatusCode::UNAUTHORIZED && status != StatusCode::FORBIDDEN {
            return None;
        }
        let challenge = response
            .headers()
            .get_all(WWW_AUTHENTICATE)
            .iter()
            .filter_map(|value| value.to_str().ok())
            .find_map(BearerChallenge::parse)
            .unwrap_or_default();
        let step_up = challenge.error.as_deref() == Some("insufficient_scope");
        (status == StatusCode::UNAUTHORIZED || step_up).then_some(Refusal { status, challenge })
    }

    pub(crate) fn status(&self) -> StatusCode {
        self.status
    }

    fn scopes(&self) -> Vec<String> {
        split_scopes(self.challenge.scope.as_deref())
    }
}

/// The token sent with a request: its generation (0: none was sent).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Sent(u64);

/// The authorization server of the last flow, and how it was found.
struct Server {
    metadata: AuthorizationServer,
    /// Its endpoints, parsed and checked: where requests go.
    endpoints: Endpoints,
    /// The protected resource's `resource`; `None` in the 2025-03-26
    /// fallback (no resource metadata, no `resource` parameter).
    resource: Option<String>,
}

#[derive(Default)]
struct Held {
    token: Option<Arc<TokenSet>>,
    header: Option<HeaderValue>,
    /// Bumped whenever the token changes.
    generation: u64,
    /// Read from the store yet.
    loaded: bool,
    /// The access token the server last refused: never sent again, even
    /// while the store still holds it.
    refused: Option<Secret>,
    /// The generation whose refresh before expiry failed: not tried again
    /// by every request (a refusal of it still refreshes once).
    refresh_failed: Option<u64>,
    /// Whole flows run to an end, and whether the last one failed: the
    /// requests refused along with the one that ran it fail with it
    /// instead of asking the user agent again, one after another.
    flows: u64,
    last_flow_failed: bool,
    /// The scopes the last authorization asked for.
    asked: Vec<String>,
    server: Option<Arc<Server>>,
}

impl Held {
    /// Takes `token` (whose bearer header is `header`) as the one to send.
    fn hold(&mut self, token: TokenSet, header: HeaderValue) {
        self.header = Some(header);
        self.token = Some(Arc::new(token));
        self.generation += 1;
    }
}

/// One session's authorization state, on its transport.
pub(crate) struct Authorizer {
    oauth: OAuth,
    endpoint: String,
    client: HttpClient,
    store: Arc<dyn CredentialStore>,
    flight: Flight,
    held: Mutex<Held>,
}

/// An authorization server's endpoints, parsed once and checked (HTTPS or
/// this machine, unless plain HTTP was allowed): what the requests are
/// sent to.
struct Endpoints {
    authorization: SecureTarget,
    token: SecureTarget,
    registration: Option<SecureTarget>,
}

impl Authorizer {
    pub(crate) fn new(oauth: &OAuth, endpoint: &str, client: HttpClient) -> Authorizer {
        let config = &oauth.config;
        let store = config
            .store
            .clone()
            .unwrap_or_else(|| Arc::new(MemoryStore::new()));
        Authorizer {
            oauth: oauth.clone(),
            endpoint: endpoint.to_owned(),
            client,
            flight: flight_for(&store, endpoint),
            store,
            held: Mutex::new(Held::default()),
        }
    }

    /// How many times one request may authorize.
    pub(crate) fn max_authorizations(&self) -> u32 {
        self.oauth.config.max_authorizations
    }

    /// Adds the bearer to `headers` (refreshing a token about to expire
    /// first), and says which token was sent.
    pub(crate) fn add_bearer<'a>(
        &'a self,
        headers: &'a mut http::HeaderMap,
    ) -> BoxFuture<'a, Result<Sent>> {
        // Boxed: the flow's future is large, and its types stay here.
        Box::pin(self.add_bearer_inner(headers))
    }

    async fn add_bearer_inner(&self, headers: &mut http::HeaderMap) -> Result<Sent> {
        self.load();
        let expiring = {
            let held = lock(&self.held);
            held.token
                .as_ref()
                .filter(|token| {
                    token.refresh_token.is_some() && token.expires_within(EXPIRY_MARGIN)
                })
                .filter(|_| held.refresh_failed != Some(held.generation))
                .map(|_| Sent(held.generation))
        };
        if let Some(sent) = expiring {
            let _flight = self.flight.lock().await;
            let failed = lock(&self.held).refresh_failed == Some(sent.0);
            if self.generation() == sent && !failed && !self.take_newer_from_store(&[]) {
                if let Err(error) = self.refresh().await {
                    lock(&self.held).refresh_failed = Some(sent.0);
                    // The server will refuse the old token, and the
                    // refusal runs the whole flow.
                    tracing::debug!(error = %error, "refreshing an expiring token failed");
                }
            }
        }
        let held = lock(&self.held);
        if let Some(header) = &held.header {
            headers.insert(AUTHORIZATION, header.clone());
        }
        Ok(Sent(if held.header.is_some() {
            held.generation
        } else {
            0
        }))
    }

    /// Answers `refusal` of a request that carried `sent`: another
    /// session's new token, a refresh, or the whole flow. On success the
    /// request is worth sending again.
    ///
    /// Without `interactive` (a listener's GET, a DELETE), only a refresh
    /// or another request's new token: never the user agent.
    pub(crate) fn recover<'a>(
        &'a self,
        refusal: &'a Refusal,
        sent: Sent,
        interactive: bool,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(self.recover_inner(refusal, sent, interactive))
    }

    async fn recover_inner(&self, refusal: &Refusal, sent: Sent, interactive: bool) -> Result<()> {
        let span = tracing::debug_span!("mcp.oauth", status = refusal.status.as_u16());
        async {
            let flows_before = lock(&self.held).flows;
            let _flight = self.flight.lock().await;
            let step_up = refusal.status == StatusCode::FORBIDDEN;
            // Another session of the store got a new token meanwhile (its
            // refresh rotated the refresh token this one holds).
            let wanted = if step_up {
                refusal.scopes()
            } else {
                Vec::new()
            };
            if self.take_newer_from_store(&wanted) {
                return Ok(());
            }
            {
                let mut held = lock(&self.held);
                if Sent(held.generation) != sent && held.header.is_some() {
                    let granted = held.token.as_ref().map(|t| t.scopes.clone());
                    let enough =
                        granted.is_some_and(|granted| contains_all(&granted, &refusal.scopes()));
                    // Authorized while this request was out: try that.
                    if !step_up || enough {
                        return Ok(());
                    }
                }
                if step_up {
                    let asked = &held.asked;
                    let wanted = refusal.scopes();
                    if sent.0 != 0 && !wanted.is_empty() && contains_all(asked, &wanted) {
                        return Err(Error::auth(
                            "the server still refuses with insufficient_scope for scopes \
                             already granted; not asking again",
                        )
                        .with_status(refusal.status));
                    }
                } else if let Some(token) = &held.token {
                    // Refused: set aside, never sent again.
                    held.refused = Some(token.access_token.clone());
                    held.header = None;
                }
            }
            if !step_up && self.has_refresh_token() {
                match self.refresh().await {
                    Ok(()) => return Ok(()),
                    Err(error) => tracing::debug!(error = %error, "refresh failed; authorizing"),
                }
            }
            if !interactive {
                return Err(Error::auth(
                    "refused for want of authorization, and this request does not run the \
                     authorization flow (a later request will)",
                )
                .with_status(refusal.status));
            }
            {
                let held = lock(&self.held);
                if held.flows != flows_before && held.last_flow_failed {
                    return Err(Error::auth(
                        "the authorization flow failed for a request refused at the same \
                         time; not asking again for this one",
                    )
                    .with_status(refusal.status));
                }
            }
            let outcome = self.authorize(refusal).await;
            let mut held = lock(&self.held);
            held.flows += 1;
            held.last_flow_failed = outcome.is_err();
            outcome
        }
        .instrument(span)
        .await
    }

    /// The `oauth2` crate's HTTP client for one token request to `token`,
    /// its deadline starting now.
    fn oauth2_http(&self, token: &SecureTarget) -> oauth_http::ForOAuth2 {
        oauth_http::ForOAuth2 {
            client: self.client.clone(),
            target: token.clone(),
            deadline: self.deadline(),
        }
    }

    /// The deadline of one exchange with an authorization server, from now.
    fn deadline(&self) -> Deadline {
        Deadline::after(Some(self.oauth.config.exchange_timeout))
    }

    fn generation(&self) -> Sent {
        Sent(lock(&self.held).generation)
    }

    fn has_refresh_token(&self) -> bool {
        lock(&self.held)
            .token
            .as_ref()
            .is_some_and(|token| token.refresh_token.is_some())
    }

    /// Reads the store once, unless the store's token is the refused one.
    fn load(&self) {
        if lock(&self.held).loaded {
            return;
        }
        // The caller's store is asked under no lock of ours.
        let stored = self.store.token(&self.endpoint);
        let mut held = lock(&self.held);
        if held.loaded {
            return;
        }
        held.loaded = true;
        if let Some(token) = stored {
            if held.refused.as_ref() != Some(&token.access_token) {
                if let Ok(header) = bearer_header(&token.access_token) {
                    held.hold(token, header);
                }
            }
        }
    }

    /// Takes the store's token when it is not the one held (another
    /// session put it there), not the refused one, not about to expire,
    /// and has the `wanted` scopes.
    fn take_newer_from_store(&self, wanted: &[String]) -> bool {
        let Some(stored) = self.store.token(&self.endpoint) else {
            return false;
        };
        let mut held = lock(&self.held);
        let held_already = held
            .token
            .as_ref()
            .is_some_and(|token| token.access_token == stored.access_token);
        if held_already
            || held.refused.as_ref() == Some(&stored.access_token)
            || stored.expires_within(EXPIRY_MARGIN)
            || !contains_all(&stored.scopes, wanted)
        {
            return false;
        }
        let Ok(header) = bearer_header(&stored.access_token) else {
            return false;
        };
        held.hold(stored, header);
        true
    }

    /// Takes `token` as the current one and keeps it in the store.
    fn adopt(&self, token: TokenSet, asked: Option<Vec<String>>) -> Result<()> {
        let header = bearer_header(&token.access_token)?;
        self.store.save_token(&self.endpoint, token.clone());
        let mut held = lock(&self.held);
        held.hold(token, header);
        held.loaded = true;
        if let Some(asked) = asked {
            held.asked = asked;
        }
        Ok(())
    }

    /// Refreshes the current token (`refresh_token` grant, same resource).
    async fn refresh(&self) -> Result<()> {
        let token = lock(&self.held)
            .token
            .clone()
            .ok_or_else(|| Error::auth("no token to refresh"))?;
        let refresh_token = token
            .refresh_token
            .clone()
            .ok_or_else(|| Error::auth("no refresh token"))?;
        let server = self.server_of(&token.issuer).await?;
        let client = self
            .known_client(&server.metadata)
            .ok_or_else(|| Error::auth("no client credentials for the token's issuer"))?;
        let oauth_client = oauth2_client(&client, &server.endpoints, None)?;
        let refresh = RefreshToken::new(refresh_token.expose().to_owned());
        let mut request = oauth_client.exchange_refresh_token(&refresh);
        if !token.resource.is_empty() {
            request = request.add_extra_param("resource", token.resource.clone());
        }
        let http = self.oauth2_http(&server.endpoints.token);
        let response = request.request_async(&http).await.map_err(token_error)?;
        let mut fresh = token_set(
            &response,
            &server.metadata.issuer,
            &token.resource,
            &token.scopes,
        )?;
        if fresh.refresh_token.is_none() {
            fresh.refresh_token = Some(refresh_token);
        }
        tracing::debug!("token refreshed");
        self.adopt(fresh, None)
    }

    /// The authorization server of the last flow when it is `issuer`'s,
    /// else its metadata fetched again.
    async fn server_of(&self, issuer: &str) -> Result<Arc<Server>> {
        if let Some(server) = lock(&self.held).server.clone() {
            if server.metadata.issuer == issuer {
                return Ok(server);
            }
        }
        let metadata = self.discover_server(issuer).await?;
        Ok(Arc::new(Server {
            endpoints: self.check_endpoints(&metadata)?,
            metadata,
            resource: None,
        }))
    }

    /// The whole flow: discovery, client identity, the user agent, the
    /// token.
    async fn authorize(&self, refusal: &Refusal) -> Result<()> {
        let config = &self.oauth.config;
        let resource = self
            .discover_resource(refusal.challenge.resource_metadata.as_deref())
            .await?;
        let (metadata, named) = match &resource {
            Some(resource) => (
                self.discover_server(&resource.authorization_servers[0])
                    .await?,
                Some(resource.resource.clone()),
            ),
            None => (self.legacy_server().await?, None),
        };
        let server = Arc::new(Server {
            endpoints: self.check_endpoints(&metadata)?,
            metadata,
            resource: named,
        });
        lock(&self.held).server = Some(server.clone());
        let metadata = &server.metadata;

        let redirect = config.agent.prepare().await?;
        let redirect_uri = redirect.redirect_uri().to_owned();
        let client = match self.known_client(metadata) {
            Some(client) => client,
            None => {
                self.register(metadata, &server.endpoints, &redirect_uri)
                    .await?
            }
        };

        let scopes = self.scopes_for(refusal, resource.as_ref(), metadata);
        let oauth_client = oauth2_client(&client, &server.endpoints, Some(&redirect_uri))?;
        let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
        let mut authorize = oauth_client
            .authorize_url(CsrfToken::new_random)
            .add_scopes(scopes.iter().cloned().map(Scope::new))
            .set_pkce_challenge(challenge);
        if let Some(resource) = &server.resource {
            authorize = authorize.add_extra_param("resource", resource.clone());
        }
        let (url, state) = authorize.url();
        tracing::debug!(scopes = scopes.len(), "authorization request");
        let answer = redirect
            .authorize(AuthorizationRequest {
                url: url.to_string(),
                client: self.client.clone(),
            })
            .await?;
        let code = check_redirect(&answer, state.secret(), metadata)?;

        let mut exchange = oauth_client
            .exchange_code(AuthorizationCode::new(code.expose().to_owned()))
            .set_pkce_verifier(verifier);
        if let Some(resource) = &server.resource {
            exchange = exchange.add_extra_param("resource", resource.clone());
        }
        let http = self.oauth2_http(&server.endpoints.token);
        let response = exchange.request_async(&http).await.map_err(token_error)?;
        let resource = server.resource.clone().unwrap_or_default();
        let token = token_set(&response, &metadata.issuer, &resource, &scopes)?;
        tracing::debug!("authorized");
        self.adopt(token, Some(scopes))
    }

    /// Parses and checks `url`, a URL of the authorization server's (or
    /// the protected resource metadata's): HTTPS, or this machine, unless
    /// the caller allowed plain HTTP. Codes, verifiers, secrets, and the
    /// documents that decide where they go, travel nowhere else.
    fn secure(&self, url: &str, what: &str) -> Result<SecureTarget> {
        SecureTarget::parse(url, self.oauth.config.allow_insecure_http)
            .map_err(|why| refused(what, why))
    }

    /// The same for a URL already parsed.
    fn secure_target(&self, target: Target, what: &str) -> Result<SecureTarget> {
        SecureTarget::check(target, self.oauth.config.allow_insecure_http)
            .map_err(|why| refused(what, why))
    }

    /// The authorization server's endpoints, parsed and checked.
    fn check_endpoints(&self, metadata: &AuthorizationServer) -> Result<Endpoints> {
        Ok(Endpoints {
            authorization: self.secure(
                &metadata.authorization_endpoint,
                "the authorization server's authorization endpoint",
            )?,
            token: self.secure(
                &metadata.token_endpoint,
                "the authorization server's token endpoint",
            )?,
            registration: metadata
                .registration_endpoint
                .as_deref()
                .map(|url| self.secure(url, "the authorization server's registration endpoint"))
                .transpose()?,
        })
    }

    /// The MCP endpoint, parsed.
    fn endpoint_target(&self) -> Result<Target> {
        Target::parse(&self.endpoint)
            .map_err(|why| Error::auth(format!("the MCP endpoint is {why}")))
    }

    /// The scopes to ask for: a step-up's union with what was asked
    /// before; else the challenge's, else ours, else the resource's
    /// `scopes_supported`, else none. `offline_access` only when the
    /// authorization server lists it.
    fn scopes_for(
        &self,
        refusal: &Refusal,
        resource: Option<&ProtectedResource>,
        metadata: &AuthorizationServer,
    ) -> Vec<String> {
        let ours = self.oauth.config.scopes.clone().unwrap_or_default();
        let challenged = refusal.scopes();
        let mut scopes = if refusal.status == StatusCode::FORBIDDEN {
            lock(&self.held).asked.clone()
        } else {
            Vec::new()
        };
        let base = if !challenged.is_empty() {
            challenged
        } else if let Some(ours) = self.oauth.config.scopes.clone() {
            ours.clone()
        } else {
            resource
                .and_then(|r| r.scopes_supported.clone())
                .unwrap_or_default()
        };
        let mut seen: HashSet<String> = scopes.iter().cloned().collect();
        for scope in base.into_iter().chain(ours) {
            if seen.insert(scope.clone()) {
                scopes.push(scope);
            }
        }
        let offline = "offline_access".to_owned();
        if !scopes.is_empty() && metadata.offers_offline_access() && !seen.contains(&offline) {
            scopes.push(offline);
        }
        scopes
    }

    /// Protected resource metadata: the challenge's URL alone, else the
    /// well-known ones in order. `None` when there is none (4xx each).
    async fn discover_resource(&self, hint: Option<&str>) -> Result<Option<ProtectedResource>> {
        let urls = match hint.and_then(|url| Target::parse(url).ok()) {
            Some(url) => vec![url],
            None => resource_metadata_urls(&self.endpoint_target()?),
        };
        for url in urls {
            let what = "the protected resource metadata";
            let answer = self.fetch(url, what).await?;
            if let Some(document) = answer {
                return ProtectedResource::from_json(&document, &self.endpoint).map(Some);
            }
        }
        tracing::debug!("no protected resource metadata: the 2025-03-26 fallback");
        Ok(None)
    }

    /// The metadata of `issuer`, in the spec's order; the first found is
    /// checked and used (a wrong one is refused, not skipped).
    async fn discover_server(&self, issuer: &str) -> Result<AuthorizationServer> {
        let parsed = Target::parse(issuer)
            .map_err(|why| Error::auth(format!("the authorization server's issuer is {why}")))?;
        for url in authorization_server_metadata_urls(&parsed) {
            if let Some(document) = self.fetch(url, "the authorization server metadata").await? {
                return AuthorizationServer::from_json(&document, issuer);
            }
        }
        Err(Error::auth(
            "the authorization server publishes no metadata (RFC 8414 or OpenID Connect)",
        ))
    }

    /// The 2025-03-26 fallback: the endpoint's origin is the authorization
    /// server. The origin is the parsed one: no user name or password of
    /// the endpoint's URL ends up in an authorization URL.
    async fn legacy_server(&self) -> Result<AuthorizationServer> {
        let endpoint = self.endpoint_target()?;
        let origin = endpoint.origin();
        let url = endpoint
            .with_path("/.well-known/oauth-authorization-server")
            .map_err(|why| Error::auth(format!("the endpoint's origin is {why}")))?;
        match self.fetch(url, "the authorization server metadata").await? {
            Some(document) => AuthorizationServer::from_json_legacy(&document, &origin),
            None => Ok(AuthorizationServer::legacy_defaults(&origin)),
        }
    }

    /// GETs a metadata document: `Some` on 200, `None` on another 4xx,
    /// an error on anything else.
    async fn fetch(&self, url: Target, what: &str) -> Result<Option<Value>> {
        let url = self.secure_target(url, what)?;
        let answer = oauth_http::get(&self.client, &url, self.deadline(), what).await?;
        if answer.status == StatusCode::OK {
            return answer.json(what).map(Some);
        }
        if answer.status.is_client_error() {
            return Ok(None);
        }
        Err(Error::auth(format!("{what}: HTTP {}", answer.status)).with_status(answer.status))
    }

    /// A client already known for this server: registered in advance (for
    /// its issuer), in the store, or a Client ID Metadata Document.
    fn known_client(&self, metadata: &AuthorizationServer) -> Option<ClientCredentials> {
        let config = &self.oauth.config;
        if let Some(pre) = &config.client {
            if pre
                .issuer
                .as_deref()
                .is_none_or(|issuer| issuer == metadata.issuer)
            {
                return Some(pre.credentials.clone());
            }
        }
        if let Some(client) = self.store.client(&metadata.issuer) {
            return Some(client);
        }
        match &config.client_metadata_url {
            Some(url) if metadata.client_id_metadata_documents => {
                Some(ClientCredentials::public(url.clone()))
            }
            _ => None,
        }
    }

    /// Dynamic Client Registration (RFC 7591), kept in the store.
    async fn register(
        &self,
        metadata: &AuthorizationServer,
        endpoints: &Endpoints,
        redirect_uri: &str,
    ) -> Result<ClientCredentials> {
        let endpoint = endpoints.registration.as_ref().ok_or_else(|| {
            Error::auth(
                "no client for this authorization server: it offers no registration, \
                 no Client ID Metadata Documents (or none configured), and no client \
                 was registered in advance",
            )
        })?;
        let supported = &metadata.token_endpoint_auth_methods;
        let method = supported
            .iter()
            .find_map(|name| TokenAuthMethod::parse(name))
            .unwrap_or(TokenAuthMethod::ClientSecretBasic);
        let body = json!({
            "client_name": self.oauth.config.client_name,
            "redirect_uris": [redirect_uri],
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "token_endpoint_auth_method": method.as_str(),
            "application_type": "native",
        });
        let what = "the client registration";
        let answer: Answer =
            oauth_http::post_json(&self.client, endpoint, &body, self.deadline(), what).await?;
        if !answer.status.is_success() {
            return Err(Error::auth(format!(
                "{what} was refused: HTTP {}{}",
                answer.status,
                oauth_error(&answer)
            ))
            .with_status(answer.status));
        }
        let document = answer.json(what)?;
        let client_id = document
            .get("client_id")
            .and_then(Value::as_str)
            .filter(|id| !id.is_empty())
            .ok_or_else(|| Error::auth(format!("{what} answered no client_id")))?;
        let secret = document
            .get("client_secret")
            .and_then(Value::as_str)
            .map(Secret::new);
        let has = |name: &str| supported.iter().any(|m| m == name);
        let auth_method = document
            .get("token_endpoint_auth_method")
            .and_then(Value::as_str)
            .and_then(TokenAuthMethod::parse)
            .unwrap_or(match &secret {
                Some(_) if has("client_secret_basic") => TokenAuthMethod::ClientSecretBasic,
                Some(_) if has("client_secret_post") => TokenAuthMethod::ClientSecretPost,
                _ => TokenAuthMethod::None,
            });
        let client = ClientCredentials {
            client_id: client_id.to_owned(),
            client_secret: secret,
            auth_method,
        };
        tracing::debug!(method = auth_method.as_str(), "client registered");
        self.store.save_client(&metadata.issuer, client.clone());
        Ok(client)
    }
}

/// The `oauth2` client for one exchange.
type OAuth2Client = oauth2::basic::BasicClient<
    oauth2::EndpointSet,
    oauth2::EndpointNotSet,
    oauth2::EndpointNotSet,
    oauth2::EndpointNotSet,
    oauth2::EndpointSet,
>;

/// The `oauth2` client for `endpoints`: built from the parsed, checked
/// URLs (the `oauth2` crate parses them again with the same parser; the
/// token request is sent to the checked target all the same, see
/// `ForOAuth2`).
fn oauth2_client(
    client: &ClientCredentials,
    endpoints: &Endpoints,
    redirect_uri: Option<&str>,
) -> Result<OAuth2Client> {
    let invalid = |what: &str| Error::auth(format!("the {what} is not a valid URL"));
    let mut oauth_client = BasicClient::new(ClientId::new(client.client_id.clone()))
        .set_auth_uri(
            AuthUrl::new(endpoints.authorization.as_str().to_owned())
                .map_err(|_| invalid("authorization endpoint"))?,
        )
        .set_token_uri(
            TokenUrl::new(endpoints.token.as_str().to_owned())
                .map_err(|_| invalid("token endpoint"))?,
        );
    match (client.auth_method, &client.client_secret) {
        (TokenAuthMethod::ClientSecretBasic, Some(secret)) => {
            oauth_client = oauth_client
                .set_client_secret(ClientSecret::new(secret.expose().to_owned()))
                .set_auth_type(AuthType::BasicAuth);
        }
        (TokenAuthMethod::ClientSecretPost, Some(secret)) => {
            oauth_client = oauth_client
                .set_client_secret(ClientSecret::new(secret.expose().to_owned()))
                .set_auth_type(AuthType::RequestBody);
        }
        // A public client: its id in the body, no secret anywhere.
        _ => oauth_client = oauth_client.set_auth_type(AuthType::RequestBody),
    }
    if let Some(redirect_uri) = redirect_uri {
        oauth_client = oauth_client.set_redirect_uri(
            RedirectUrl::new(redirect_uri.to_owned()).map_err(|_| invalid("redirect URI"))?,
        );
    }
    Ok(oauth_client)
}

/// The code of a redirect that checks out: no error, our `state`, and the
/// issuer's `iss` (RFC 9207) when sent or promised.
fn check_redirect(
    answer: &AuthorizationResponse,
    state: &str,
    metadata: &AuthorizationServer,
) -> Result<Secret> {
    if let Some(error) = &answer.error {
        return Err(Error::auth(format!(
            "the authorization server refused: error={}",
            printable(error)
        )));
    }
    if answer.state.as_deref() != Some(state) {
        return Err(Error::auth(
            "the redirect's state is not the one sent; refused",
        ));
    }
    match &answer.iss {
        Some(iss) if *iss != metadata.issuer => {
            return Err(Error::auth(
                "the redirect's iss is not the authorization server's issuer; refused (RFC 9207)",
            ));
        }
        None if metadata.iss_parameter => {
            return Err(Error::auth(
                "the redirect has no iss though the authorization server says it sends one; \
                 refused (RFC 9207)",
            ));
        }
        _ => {}
    }
    answer
        .code
        .clone()
        .ok_or_else(|| Error::auth("the redirect carries no code"))
}

/// The tokens of a token response, when they are bearer tokens: any other
/// `token_type` (`DPoP`, `mac`...) is refused rather than sent as a bearer
/// (RFC 6749 §7.1: a client must not use a token type it does not
/// understand; the type is case-insensitive).
fn token_set(
    response: &oauth2::basic::BasicTokenResponse,
    issuer: &str,
    resource: &str,
    asked: &[String],
) -> Result<TokenSet> {
    // The `oauth2` crate lowercases the type before reading it.
    if *response.token_type() != BasicTokenType::Bearer {
        return Err(Error::auth(format!(
            "the token endpoint issued a token of type {:?}, not Bearer; refused \
             (only bearer tokens are supported)",
            printable(response.token_type().as_ref())
        )));
    }
    Ok(TokenSet {
        access_token: Secret::new(response.access_token().secret().clone()),
        refresh_token: response
            .refresh_token()
            .map(|token| Secret::new(token.secret().clone())),
        expires_at: response
            .expires_in()
            .and_then(|within| SystemTime::now().checked_add(within)),
        scopes: response.scopes().map_or_else(
            || asked.to_vec(),
            |scopes| scopes.iter().map(|s| s.to_string()).collect(),
        ),
        issuer: issuer.to_owned(),
        resource: resource.to_owned(),
    })
}

/// The error of a URL secrets may not go to.
fn refused(what: &str, why: crate::url_target::Refused) -> Error {
    use crate::url_target::Refused;
    match why {
        Refused::PlainHttp => Error::auth(format!(
            "{what} is {why}; refused (OAuth::allow_insecure_http allows it)"
        )),
        Refused::Invalid(_) => Error::auth(format!("{what} is {why}")),
    }
}

/// A token endpoint failure as an error that names no secret.
fn token_error(error: RequestTokenError<Error, oauth2::basic::BasicErrorResponse>) -> Error {
    match error {
        RequestTokenError::Request(error) => error,
        RequestTokenError::ServerResponse(response) => Error::auth(format!(
            "the token endpoint refused: error={}",
            printable(response.error().as_ref())
        )),
        RequestTokenError::Parse(..) => {
            Error::auth("the token endpoint's answer is not a token response")
        }
        RequestTokenError::Other(_) => Error::auth("the token endpoint's answer was not usable"),
    }
}

/// ` (error=...)` from an OAuth error body, when it has one.
fn oauth_error(answer: &Answer) -> String {
    serde_json::from_slice::<Value>(&answer.body)
        .ok()
        .and_then(|body| body.get("error").and_then(Value::as_str).map(printable))
        .map_or_else(String::new, |error| format!(" (error={error})"))
}

/// A server-chosen word, safe to show: printable ASCII, at most 64 chars.
fn printable(text: &str) -> String {
    text.chars()
        .filter(|c| c.is_ascii_graphic())
        .take(64)
        .collect()
}

// Scope lists come from the server, tens of thousands long at worst:
// compared through sets, never each with each.
fn split_scopes(scope: Option<&str>) -> Vec<String> {
    let mut seen = HashSet::new();
    scope
        .unwrap_or("")
        .split_ascii_whitespace()
        .filter(|scope| seen.insert(*scope))
        .map(str::to_owned)
        .collect()
}

/// Whether every one of `wanted` is in `have`.
fn contains_all(have: &[String], wanted: &[String]) -> bool {
    let have: HashSet<&String> = have.iter().collect();
    wanted.iter().all(|scope| have.contains(scope))
}

fn bearer_header(token: &Secret) -> Result<HeaderValue> {
    let mut value = HeaderValue::from_str(&format!("Bearer {}", token.expose()))
        .map_err(|_| Error::auth("the access token is not a valid header value"))?;
    value.set_sensitive(true);
    Ok(value)
}
