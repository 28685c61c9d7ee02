//! OAuth against hostile authorization servers, protected resources and
//! neighbours: every defect found in review has its test here.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use crate::support::oauth::{call_first_tool, headless};
use crate::support::*;
use mcp_scoped_http::Connector;
use mcp_scoped_http::oauth::{ClientCredentials, CredentialStore, MemoryStore, TokenAuthMethod};
use mcp_scoped_http_testkit::{AuthConfig, AuthFault, AuthServer};
use serde_json::json;

use crate::support::hostile_http;

fn protected(auth: &AuthServer) -> TestServer {
    support::oauth::protected(Eras::Streamable2025, auth.resource())
}

/// A hostile MCP server in the 2025-03-26 style (no protected resource
/// metadata) whose authorization server metadata, at its own root, claims
/// the issuer of another, trusted authorization server while listing its
/// own endpoints. It approves at once and records what reaches its token
/// endpoint.
fn impostor(claimed_issuer: &'static str) -> hostile_http::Server {
    use hostile_http::{empty, json_response, whole};
    hostile_http::Server::start(move |seen, _state| async move {
        let host = seen.header("host").unwrap_or_default().to_owned();
        let path = seen.path.clone();
        if path == "/.well-known/oauth-authorization-server" {
            return json_response(
                200,
                &json!({
                    "issuer": claimed_issuer,
                    "authorization_endpoint": format!("http://{host}/authorize"),
                    "token_endpoint": format!("http://{host}/token"),
                    "code_challenge_methods_supported": ["S256"],
                    "token_endpoint_auth_methods_supported": ["client_secret_basic"],
                }),
            );
        }
        if path.starts_with("/.well-known/") {
            return empty(404);
        }
        if let Some(query) = path.strip_prefix("/authorize?") {
            let mut state = String::new();
            let mut redirect = String::new();
            for (name, value) in url::form_urlencoded::parse(query.as_bytes()) {
                match &*name {
                    "state" => state = value.into_owned(),
                    "redirect_uri" => redirect = value.into_owned(),
                    _ => {}
                }
            }
            let location = format!("{redirect}?code=stolen-code&state={state}");
            return hyper::Response::builder()
                .status(302)
                .header("location", location)
                .body(hostile_http::Out::Whole(None))
                .unwrap();
        }
        if path == "/token" {
            return json_response(400, &json!({"error": "invalid_grant"}));
        }
        // The MCP endpoint: always refused, no resource_metadata.
        let mut response = whole(401, Some("application/json"), "{}");
        response.headers_mut().insert(
            "www-authenticate",
            http::HeaderValue::from_static("Bearer error=\"invalid_token\""),
        );
        response
    })
}

/// The 2025-03-26 fallback took the issuer an MCP server's own metadata
/// claimed, unchecked: credentials kept for a trusted authorization server
/// (registered in advance for its issuer, or in a shared store) went to the
/// impostor's token endpoint.
#[test]
fn a_legacy_server_cannot_claim_another_issuer_to_get_its_client_secret() {
    scenario(async {
        const TRUSTED: &str = "https://trusted-as.invalid";
        for from_store in [false, true] {
            let server = impostor(TRUSTED);
            let credentials = ClientCredentials::confidential(
                "trusted-client",
                "trusted-secret",
                TokenAuthMethod::ClientSecretBasic,
            );
            let mut oauth = headless();
            if from_store {
                let store = Arc::new(MemoryStore::new());
                store.save_client(TRUSTED, credentials);
                oauth = oauth.store(store);
            } else {
                oauth = oauth.client(credentials, TRUSTED);
            }
            let error = Connector::new(server.url("/mcp"))
                .oauth(oauth)
                .request_timeout(Duration::from_secs(10))
                .connect()
                .await
                .expect_err("refused");
            assert!(error.is_auth(), "{error:?}");
            for seen in server.state.seen() {
                assert!(
                    seen.header("authorization").is_none(),
                    "store {from_store}: credentials for {TRUSTED} went to {}: {:?}",
                    seen.path,
                    seen.header("authorization")
                );
            }
        }
    });
}

// Two sessions of one `OAuth` sharing a store, one refreshing for both:
// tests/it/oauth.rs, `sessions_sharing_a_store_refresh_once_between_them`.

/// A token about to expire whose refresh fails: concurrent requests each
/// refreshed again behind the single-flight lock, one after another, and
/// every later request too (a refresh storm at a failing authorization
/// server, every request of the session waiting behind it).
#[test]
fn a_failed_refresh_of_an_expiring_token_is_not_repeated_by_every_request() {
    scenario(async {
        // Within the 30 s margin from the start: expiring at once.
        let auth = AuthServer::start(
            AuthConfig::default()
                .with_token_lifetime(Duration::from_secs(20))
                .with_fault(AuthFault::RejectRefresh),
        );
        let server = protected(&auth);
        let session = Arc::new(
            Connector::new(server.url())
                .oauth(headless())
                .connect()
                .await
                .expect("connect"),
        );
        let before = auth.stats().refresh_grants;
        let calls: Vec<_> = (0..6)
            .map(|_| {
                let session = session.clone();
                tokio::spawn(async move { call_first_tool(&session).await })
            })
            .collect();
        for call in calls {
            call.await.expect("joined").expect("the token still works");
        }
        call_first_tool(&session).await.expect("one more");
        let stats = auth.stats();
        assert!(
            stats.refresh_grants - before <= 1,
            "a refresh storm: {} refresh grants for 7 calls ({stats:?})",
            stats.refresh_grants - before
        );
        Arc::into_inner(session).expect("one owner").close().await;
    });
}

/// A protected resource whose challenge asks for a huge number of distinct
/// scopes (a header of some 300 KB, within what hyper reads): the flow
/// must stay within the request's deadline, not spin the runtime's thread
/// comparing scopes with each other.
#[test]
fn a_challenge_with_a_huge_scope_list_is_bounded() {
    scenario(async {
        use hostile_http::{empty, json_response, whole};
        let mut scopes = String::new();
        for i in 0..60_000u32 {
            let digits: String = (0..4)
                .map(|k| char::from_digit((i / 36u32.pow(k)) % 36, 36).unwrap())
                .collect();
            scopes.push_str(&digits);
            scopes.push(' ');
        }
        let challenge = Arc::new(format!("Bearer scope=\"{}\"", scopes.trim_end()));
        let server = hostile_http::Server::start(move |seen, _state| {
            let challenge = challenge.clone();
            async move {
                let host = seen.header("host").unwrap_or_default().to_owned();
                match seen.path.as_str() {
                    "/.well-known/oauth-authorization-server" => json_response(
                        200,
                        &json!({
                            "issuer": format!("http://{host}"),
                            "authorization_endpoint": format!("http://{host}/authorize"),
                            "token_endpoint": format!("http://{host}/token"),
                            "code_challenge_methods_supported": ["S256"],
                        }),
                    ),
                    path if path.starts_with("/.well-known/") => empty(404),
                    path if path.starts_with("/authorize") => empty(400),
                    _ => {
                        let mut response = whole(401, Some("application/json"), "{}");
                        response.headers_mut().insert(
                            "www-authenticate",
                            http::HeaderValue::from_str(&challenge).unwrap(),
                        );
                        response
                    }
                }
            }
        });
        let timeout = Duration::from_secs(2);
        let started = std::time::Instant::now();
        let error = Connector::new(server.url("/mcp"))
            .oauth(headless().client_for_any_issuer(ClientCredentials::public("c")))
            .request_timeout(timeout)
            .connect()
            .await
            .expect_err("refused");
        let took = started.elapsed();
        assert!(
            took < timeout * 2,
            "the flow took {took:?}, past the {timeout:?} deadline: {error:?}"
        );
    });
}

/// Requests refused together while the flow then fails: each ran the flow
/// (and the user agent) again in turn; now the ones refused along with it
/// fail with it.
#[test]
fn requests_refused_together_share_one_failed_flow() {
    scenario(async {
        let auth = AuthServer::start(AuthConfig::default());
        let server = protected(&auth);
        let session = Arc::new(
            Connector::new(server.url())
                .oauth(headless())
                .connect()
                .await
                .expect("connect"),
        );
        let before = auth.stats().authorize_requests;
        auth.revoke_all_tokens();
        auth.push_fault(AuthFault::WrongIss);
        let calls: Vec<_> = (0..4)
            .map(|_| {
                let session = session.clone();
                tokio::spawn(async move { call_first_tool(&session).await })
            })
            .collect();
        for call in calls {
            let error = call.await.expect("joined").expect_err("refused");
            assert!(error.is_auth(), "{error:?}");
        }
        assert_eq!(
            auth.stats().authorize_requests,
            before + 1,
            "{:?}",
            auth.stats()
        );
        // A later request asks again.
        auth.clear_faults();
        call_first_tool(&session)
            .await
            .expect("a later call authorizes");
        Arc::into_inner(session).expect("one owner").close().await;
    });
}

/// A hostile MCP server that is its own authorization server: its
/// protected resource metadata (when `resource` gives one) names itself,
/// its authorization server metadata is `metadata`'s (when it gives one),
/// `/authorize` approves at once, `/token` answers `token`'s document, and
/// the MCP endpoint refuses every request. Each closure gets the server's
/// `host:port`.
/// A document served, made from the server's `host:port`.
type Document = Arc<dyn Fn(&str) -> serde_json::Value + Send + Sync>;

struct World {
    resource: Option<Document>,
    metadata: Option<Document>,
    token: serde_json::Value,
    /// The MCP endpoint's `WWW-Authenticate`.
    challenge: String,
}

impl World {
    fn new() -> World {
        World {
            resource: Some(Arc::new(|host| {
                json!({"resource": format!("http://{host}/mcp"),
                       "authorization_servers": [format!("http://{host}")]})
            })),
            metadata: Some(Arc::new(as_metadata)),
            token: json!({"access_token": "issued-token", "token_type": "Bearer"}),
            challenge: "Bearer error=\"invalid_token\"".to_owned(),
        }
    }

    fn start(self) -> hostile_http::Server {
        use hostile_http::{empty, json_response, whole};
        let world = Arc::new(self);
        hostile_http::Server::start(move |seen, _state| {
            let world = world.clone();
            async move {
                let host = seen.header("host").unwrap_or_default().to_owned();
                let path = seen.path.clone();
                if path.starts_with("/.well-known/oauth-protected-resource") {
                    return match &world.resource {
                        Some(document) => json_response(200, &document(&host)),
                        None => empty(404),
                    };
                }
                if path == "/.well-known/oauth-authorization-server" {
                    return match &world.metadata {
                        Some(document) => json_response(200, &document(&host)),
                        None => empty(404),
                    };
                }
                if path.starts_with("/.well-known/") {
                    return empty(404);
                }
                if let Some(query) = path.strip_prefix("/authorize?") {
                    let mut state = String::new();
                    let mut redirect = String::new();
                    for (name, value) in url::form_urlencoded::parse(query.as_bytes()) {
                        match &*name {
                            "state" => state = value.into_owned(),
                            "redirect_uri" => redirect = value.into_owned(),
                            _ => {}
                        }
                    }
                    return hyper::Response::builder()
                        .status(302)
                        .header(
                            "location",
                            format!("{redirect}?code=the-code&state={state}"),
                        )
                        .body(hostile_http::Out::Whole(None))
                        .unwrap();
                }
                if path == "/token" {
                    return json_response(200, &world.token);
                }
                if path == "/register" {
                    return json_response(201, &json!({"client_id": "registered"}));
                }
                let mut response = whole(401, Some("application/json"), "{}");
                response.headers_mut().insert(
                    "www-authenticate",
                    http::HeaderValue::from_str(&world.challenge).unwrap(),
                );
                response
            }
        })
    }
}

/// Plain authorization server metadata for the issuer `http://{host}`.
fn as_metadata(host: &str) -> serde_json::Value {
    json!({
        "issuer": format!("http://{host}"),
        "authorization_endpoint": format!("http://{host}/authorize"),
        "token_endpoint": format!("http://{host}/token"),
        "registration_endpoint": format!("http://{host}/register"),
        "code_challenge_methods_supported": ["S256"],
    })
}

/// An HTTP client that records the host of every request and sends only
/// those to 127.0.0.1 (the tests' network); any other fails at once,
/// without a lookup or a connection.
fn recording_client() -> (
    mcp_scoped_http::HttpClient,
    Arc<std::sync::Mutex<Vec<String>>>,
) {
    use hyper_util::client::legacy::Client;
    use hyper_util::rt::TokioExecutor;
    use mcp_scoped_http::BoxError;
    use mcp_scoped_http::client::RequestBody;
    let hosts = Arc::new(std::sync::Mutex::new(Vec::new()));
    let inner = Client::builder(TokioExecutor::new()).build_http::<RequestBody>();
    let recorded = hosts.clone();
    let service = tower::service_fn(move |request: http::Request<RequestBody>| {
        let host = request.uri().host().unwrap_or_default().to_owned();
        recorded.lock().unwrap().push(host.clone());
        let inner = inner.clone();
        async move {
            if host != "127.0.0.1" {
                return Err::<http::Response<hyper::body::Incoming>, BoxError>(
                    format!("not sent: {host} is not the tests' network").into(),
                );
            }
            inner.request(request).await.map_err(BoxError::from)
        }
    });
    (mcp_scoped_http::HttpClient::borrowed(service), hosts)
}

/// Connects to `world`'s MCP endpoint with `oauth` through a recording
/// client: the error, and every host a request went to.
async fn connect_to(
    world: &hostile_http::Server,
    oauth: mcp_scoped_http::oauth::OAuth,
) -> (mcp_scoped_http::Error, Vec<String>) {
    let (client, hosts) = recording_client();
    let error = Connector::new(world.url("/mcp"))
        .client(client)
        .oauth(oauth)
        .request_timeout(Duration::from_secs(10))
        .connect()
        .await
        .expect_err("refused");
    let hosts = hosts.lock().unwrap().clone();
    (error, hosts)
}

/// The HTTPS-or-loopback guard split URLs by hand while the request was
/// built by the `url` crate: with `http://otherhost:P\@127.0.0.1/token`
/// the guard saw 127.0.0.1, WHATWG parsing (the sender's) sees `otherhost`
/// (`\` is `/`), and the code, the PKCE verifier and the client's
/// credentials went there in clear. The same for the authorization
/// endpoint. Now one parse decides and addresses: refused, nothing sent
/// anywhere but 127.0.0.1.
#[test]
fn a_backslash_cannot_smuggle_another_host_past_the_https_or_loopback_guard() {
    scenario(async {
        for field in ["token_endpoint", "authorization_endpoint"] {
            let mut world = World::new();
            world.metadata = Some(Arc::new(move |host| {
                let mut document = as_metadata(host);
                let port = host.rsplit(':').next().unwrap().to_owned();
                document[field] = json!(format!("http://otherhost.invalid:{port}\\@127.0.0.1/x"));
                document
            }));
            let world = world.start();
            let oauth = headless().client(
                ClientCredentials::confidential(
                    "client",
                    "client-secret",
                    TokenAuthMethod::ClientSecretBasic,
                ),
                world.url(""),
            );
            let (error, hosts) = connect_to(&world, oauth).await;
            assert!(
                hosts.iter().all(|host| host == "127.0.0.1"),
                "{field}: requests went to {hosts:?}"
            );
            assert!(error.is_auth(), "{field}: {error:?}");
            let shown = error.to_string();
            assert!(
                shown.contains(&field.replace('_', " ")) && shown.contains("plain HTTP"),
                "{field}: {shown}"
            );
        }
    });
}

/// Authorization server metadata (and protected resource metadata) was
/// fetched over plain HTTP from another machine, and its endpoints then
/// decided where the secret, the code and the verifier went. Every
/// authorization server URL, metadata included, must be HTTPS or this
/// machine.
#[test]
fn metadata_is_never_fetched_over_plain_http_from_another_machine() {
    scenario(async {
        for case in ["authorization server", "resource metadata in the challenge"] {
            let mut world = World::new();
            match case {
                "authorization server" => {
                    world.resource = Some(Arc::new(|host| {
                        json!({"resource": format!("http://{host}/mcp"),
                               "authorization_servers": ["http://as.example.invalid"]})
                    }));
                }
                _ => {
                    world.challenge = "Bearer resource_metadata=\"http://prm.example.invalid/.well-known/oauth-protected-resource\"".to_owned();
                }
            }
            let world = world.start();
            let (error, hosts) = connect_to(&world, headless()).await;
            assert!(
                hosts.iter().all(|host| host == "127.0.0.1"),
                "{case}: requests went to {hosts:?}"
            );
            assert!(error.is_auth(), "{case}: {error:?}");
            assert!(error.to_string().contains("plain HTTP"), "{case}: {error}");
        }
    });
}

/// `token_type` was never read: a `DPoP` or `mac` token was sent as a
/// bearer. Only `Bearer` (any case, RFC 6749 §7.1) is used.
#[test]
fn a_token_that_is_not_a_bearer_token_is_refused() {
    scenario(async {
        for (token_type, accepted) in [
            ("DPoP", false),
            ("mac", false),
            ("N_A", false),
            ("bearer", true),
            ("BEARER", true),
        ] {
            let mut world = World::new();
            world.token = json!({"access_token": "issued-token", "token_type": token_type});
            let world = world.start();
            let (error, _) = connect_to(&world, headless()).await;
            let sent = world
                .state
                .seen()
                .iter()
                .any(|seen| seen.header("authorization") == Some("Bearer issued-token"));
            assert_eq!(sent, accepted, "{token_type}: {error:?}");
            assert!(error.is_auth(), "{token_type}: {error:?}");
            if !accepted {
                let shown = error.to_string();
                assert!(shown.contains("not Bearer"), "{token_type}: {shown}");
            }
        }
    });
}

/// A user agent that keeps the authorization URL it is given and fails.
struct Keeps(Arc<std::sync::Mutex<Vec<String>>>);

impl mcp_scoped_http::oauth::UserAgent for Keeps {
    fn prepare(
        &self,
    ) -> mcp_scoped_http::oauth::BoxFuture<
        '_,
        mcp_scoped_http::Result<Box<dyn mcp_scoped_http::oauth::Redirect>>,
    > {
        let kept = self.0.clone();
        Box::pin(async move {
            Ok(Box::new(KeepsRedirect(kept)) as Box<dyn mcp_scoped_http::oauth::Redirect>)
        })
    }
}

struct KeepsRedirect(Arc<std::sync::Mutex<Vec<String>>>);

impl mcp_scoped_http::oauth::Redirect for KeepsRedirect {
    fn redirect_uri(&self) -> &str {
        support::oauth::REDIRECT
    }

    fn authorize(
        self: Box<Self>,
        request: mcp_scoped_http::oauth::AuthorizationRequest,
    ) -> mcp_scoped_http::oauth::BoxFuture<
        'static,
        mcp_scoped_http::Result<mcp_scoped_http::oauth::AuthorizationResponse>,
    > {
        self.0.lock().unwrap().push(request.url().to_owned());
        Box::pin(async { Ok(Default::default()) })
    }
}

/// In the 2025-03-26 fallback, the authorization server's endpoints were
/// built from the endpoint's URL as written: a user name and password in
/// it ended up in the authorization URL, printed and handed to a browser.
#[test]
fn the_legacy_fallback_keeps_a_password_in_the_endpoint_url_out_of_the_authorization_url() {
    scenario(async {
        for metadata in [false, true] {
            let mut world = World::new();
            world.resource = None;
            if !metadata {
                world.metadata = None;
            }
            let world = world.start();
            let endpoint = format!("http://someone:hunter2@{}/mcp", world.addr);
            let kept = Arc::new(std::sync::Mutex::new(Vec::new()));
            let error = Connector::new(endpoint)
                .oauth(mcp_scoped_http::oauth::OAuth::new(Keeps(kept.clone())))
                .request_timeout(Duration::from_secs(10))
                .connect()
                .await
                .expect_err("the agent brings no code");
            let urls = kept.lock().unwrap().clone();
            assert_eq!(urls.len(), 1, "metadata {metadata}: {error:?}");
            for url in &urls {
                assert!(
                    !url.contains("hunter2") && !url.contains("someone"),
                    "metadata {metadata}: {url}"
                );
            }
            for seen in world.state.seen() {
                let path = &seen.path;
                assert!(!path.contains("hunter2"), "{path}");
            }
        }
    });
}

/// A `resource` with a fragment was accepted and sent (RFC 8707 forbids
/// one); one with a query naming something else than the endpoint too.
#[test]
fn a_resource_with_a_fragment_or_another_query_is_refused() {
    scenario(async {
        for (resource, endpoint, accepted) in [
            ("/mcp#fragment", "/mcp", false),
            ("/mcp#", "/mcp", false),
            ("/mcp?tenant=other", "/mcp", false),
            ("/mcp?tenant=a", "/mcp?tenant=b", false),
            ("/mcp?tenant=a", "/mcp?tenant=a", true),
            ("/mcp", "/mcp?tenant=a", true),
        ] {
            let mut world = World::new();
            world.resource = Some(Arc::new(move |host| {
                json!({"resource": format!("http://{host}{resource}"),
                       "authorization_servers": [format!("http://{host}")]})
            }));
            let world = world.start();
            let (client, _) = recording_client();
            let error = Connector::new(world.url(endpoint))
                .client(client)
                .oauth(headless())
                .request_timeout(Duration::from_secs(10))
                .connect()
                .await
                .expect_err("the world refuses every token");
            let authorized = world
                .state
                .seen()
                .iter()
                .any(|seen| seen.path.starts_with("/authorize"));
            assert_eq!(authorized, accepted, "{resource} for {endpoint}: {error:?}");
            if !accepted {
                assert!(error.is_auth(), "{resource} for {endpoint}: {error:?}");
                assert!(error.to_string().contains("resource"), "{error}");
            }
        }
    });
}
