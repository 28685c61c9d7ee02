//! Self-tests of the test kit's authorization server (`AuthServer`) and of
//! the bearer-token check of a protected `TestServer`, driven by hand with
//! `HttpClient::send` (no OAuth client code of this crate). The PKCE pair
//! is RFC 7636's Appendix B example, so the server's S256 is checked
//! against the RFC, not against itself. Every wait is bounded.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use bytes::Bytes;
use http::{HeaderMap, Method, Request};
use http_body_util::{BodyExt, Full};
use mcp_scoped_http::HttpClient;
use mcp_scoped_http_testkit::{
    AuthConfig, AuthFault, AuthServer, ChallengeScope, ClientAuthMethod, Eras, Fault, FaultAction,
    MetadataLocation, ResourceAuth, ResourceFault, ServerConfig, TestServer, TestTool,
};
use serde_json::{Value, json};
use tokio::time::timeout;

const LIMIT: Duration = Duration::from_secs(10);
/// RFC 7636 Appendix B.
const VERIFIER: &str = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk";
const CHALLENGE: &str = "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM";
/// A valid verifier that is not [`VERIFIER`].
const OTHER_VERIFIER: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
const REDIRECT: &str = "http://127.0.0.1:4567/callback";
const STATE: &str = "st-1 &=?";

// ---------------------------------------------------------------- plumbing

struct Reply {
    status: u16,
    headers: HeaderMap,
    body: Bytes,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|_| {
            panic!(
                "JSON body expected, got {:?}",
                String::from_utf8_lossy(&self.body)
            )
        })
    }
    fn error(&self) -> String {
        self.json()["error"].as_str().unwrap_or_default().to_owned()
    }
    /// The decoded query parameters of `Location`.
    fn location_params(&self) -> HashMap<String, String> {
        let location = self.header("location").expect("Location");
        url::Url::parse(location)
            .expect("absolute Location")
            .query_pairs()
            .into_owned()
            .collect()
    }
}

struct Http(HttpClient);

impl Http {
    fn new() -> Self {
        Http(HttpClient::owned().expect("owned client"))
    }

    async fn send(&self, req: Request<Full<Bytes>>) -> Reply {
        let resp = timeout(LIMIT, self.0.send(req))
            .await
            .expect("answered in time")
            .expect("sent");
        let (parts, body) = resp.into_parts();
        let body = timeout(LIMIT, body.collect())
            .await
            .expect("body in time")
            .expect("body")
            .to_bytes();
        Reply {
            status: parts.status.as_u16(),
            headers: parts.headers,
            body,
        }
    }

    /// The status alone, without reading the body (a stream may stay open).
    async fn status(&self, req: Request<Full<Bytes>>) -> u16 {
        timeout(LIMIT, self.0.send(req))
            .await
            .expect("answered in time")
            .expect("sent")
            .status()
            .as_u16()
    }

    async fn get(&self, url: &str) -> Reply {
        self.send(get(url)).await
    }
}

fn get(url: &str) -> Request<Full<Bytes>> {
    Request::get(url).body(Full::default()).unwrap()
}

fn form_body(pairs: &[(&str, &str)]) -> String {
    let mut s = url::form_urlencoded::Serializer::new(String::new());
    for (k, v) in pairs {
        s.append_pair(k, v);
    }
    s.finish()
}

fn form_post(url: &str, pairs: &[(&str, &str)]) -> Request<Full<Bytes>> {
    Request::post(url)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(Full::new(Bytes::from(form_body(pairs))))
        .unwrap()
}

fn json_post(url: &str, body: &Value) -> Request<Full<Bytes>> {
    Request::post(url)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap()
}

/// RFC 6749 §2.3.1: each part form-urlencoded, then `id:secret` in base64.
fn basic(id: &str, secret: &str) -> String {
    let enc = |s: &str| url::form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>();
    format!(
        "Basic {}",
        STANDARD.encode(format!("{}:{}", enc(id), enc(secret)))
    )
}

/// A POST to an MCP endpoint, with a bearer token if given.
fn mcp_post(url: &str, token: Option<&str>, body: &Value) -> Request<Full<Bytes>> {
    let mut b = Request::post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream");
    if let Some(token) = token {
        b = b.header("authorization", format!("Bearer {token}"));
    }
    b.body(Full::new(Bytes::from(body.to_string()))).unwrap()
}

fn bearer(method: Method, url: &str, token: Option<&str>) -> Request<Full<Bytes>> {
    let mut b = Request::builder()
        .method(method)
        .uri(url)
        .header("accept", "text/event-stream");
    if let Some(token) = token {
        b = b.header("authorization", format!("Bearer {token}"));
    }
    b.body(Full::default()).unwrap()
}

fn initialize() -> Value {
    json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "testkit-auth", "version": "0"},
        },
    })
}

fn tools_call(name: &str) -> Value {
    json!({
        "jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": name, "arguments": {}},
    })
}

/// A client's credentials, as the tests use them at the token endpoint.
#[derive(Clone)]
struct Cred {
    id: String,
    secret: Option<String>,
    method: ClientAuthMethod,
}

impl Cred {
    fn new(id: &str, secret: Option<&str>, method: ClientAuthMethod) -> Self {
        Cred {
            id: id.to_owned(),
            secret: secret.map(str::to_owned),
            method,
        }
    }

    /// A token request authenticated as the client's method says.
    fn token_request(&self, auth: &AuthServer, pairs: &[(&str, &str)]) -> Request<Full<Bytes>> {
        let mut pairs = pairs.to_vec();
        match self.method {
            ClientAuthMethod::ClientSecretBasic => {
                let mut req = form_post(&auth.token_endpoint(), &pairs);
                let value = basic(&self.id, self.secret.as_deref().unwrap());
                req.headers_mut()
                    .insert("authorization", value.parse().unwrap());
                return req;
            }
            ClientAuthMethod::ClientSecretPost => {
                pairs.push(("client_id", &self.id));
                pairs.push(("client_secret", self.secret.as_deref().unwrap()));
            }
            _ => pairs.push(("client_id", &self.id)),
        }
        form_post(&auth.token_endpoint(), &pairs)
    }
}

/// The authorization request's parameters, with the defaults of these
/// tests (`REDIRECT`, RFC 7636's challenge, `STATE`).
fn authz_params(client_id: &str) -> Vec<(String, String)> {
    [
        ("response_type", "code"),
        ("client_id", client_id),
        ("redirect_uri", REDIRECT),
        ("code_challenge", CHALLENGE),
        ("code_challenge_method", "S256"),
        ("state", STATE),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect()
}

/// Sets (or with `None` removes) parameter `name`.
fn set(params: &mut Vec<(String, String)>, name: &str, value: Option<&str>) {
    params.retain(|(k, _)| k != name);
    if let Some(v) = value {
        params.push((name.to_owned(), v.to_owned()));
    }
}

fn authorize_url(auth: &AuthServer, params: &[(String, String)]) -> String {
    let mut url = url::Url::parse(&auth.authorization_endpoint()).unwrap();
    url.query_pairs_mut().extend_pairs(params);
    url.to_string()
}

/// Authorizes `cred` for `scope` and `resource` and returns the code.
async fn code_for(
    http: &Http,
    auth: &AuthServer,
    cred: &Cred,
    scope: Option<&str>,
    resource: Option<&str>,
) -> String {
    let mut params = authz_params(&cred.id);
    set(&mut params, "scope", scope);
    set(&mut params, "resource", resource);
    let reply = http.get(&authorize_url(auth, &params)).await;
    assert_eq!(
        reply.status,
        302,
        "{:?}",
        String::from_utf8_lossy(&reply.body)
    );
    reply.location_params()["code"].clone()
}

/// The whole code flow: the token response.
async fn tokens_for(
    http: &Http,
    auth: &AuthServer,
    cred: &Cred,
    scope: Option<&str>,
    resource: Option<&str>,
) -> Value {
    let code = code_for(http, auth, cred, scope, resource).await;
    let mut pairs = vec![
        ("grant_type", "authorization_code"),
        ("code", code.as_str()),
        ("redirect_uri", REDIRECT),
        ("code_verifier", VERIFIER),
    ];
    if let Some(r) = resource {
        pairs.push(("resource", r));
    }
    let reply = http.send(cred.token_request(auth, &pairs)).await;
    assert_eq!(reply.status, 200, "{:?}", reply.json());
    reply.json()
}

async fn access_token(http: &Http, auth: &AuthServer, cred: &Cred, scope: Option<&str>) -> String {
    tokens_for(http, auth, cred, scope, None).await["access_token"]
        .as_str()
        .unwrap()
        .to_owned()
}

fn public(id: &str) -> Cred {
    Cred::new(id, None, ClientAuthMethod::None)
}

/// An authorization server with one public client, `pub-client`.
fn auth_with_public_client(config: AuthConfig) -> (AuthServer, Cred) {
    let auth = AuthServer::start(config.with_client("pub-client", None, ClientAuthMethod::None));
    (auth, public("pub-client"))
}

fn protected(auth: ResourceAuth) -> TestServer {
    TestServer::start(
        ServerConfig::default()
            .with_stateful(false)
            .with_tool(TestTool::echo("write-tool", json!({"type": "object"})))
            .with_authorization(auth),
    )
}

// ---------------------------------------------------------------- metadata

#[tokio::test]
async fn metadata_of_a_root_issuer() {
    let _shared = crate::support::shared();
    let auth = AuthServer::start(AuthConfig::default());
    let http = Http::new();
    let issuer = auth.issuer();
    assert_eq!(issuer, format!("http://{}", auth.addr()));
    assert_eq!(
        auth.metadata_url(),
        format!("{issuer}/.well-known/oauth-authorization-server")
    );
    let reply = http.get(&auth.metadata_url()).await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.header("content-type"), Some("application/json"));
    assert_eq!(
        reply.json(),
        json!({
            "issuer": issuer,
            "authorization_endpoint": format!("{issuer}/authorize"),
            "token_endpoint": format!("{issuer}/token"),
            "registration_endpoint": format!("{issuer}/register"),
            "response_types_supported": ["code"],
            "grant_types_supported": ["authorization_code", "refresh_token"],
            "code_challenge_methods_supported": ["S256"],
            "token_endpoint_auth_methods_supported":
                ["client_secret_basic", "client_secret_post", "none"],
            "authorization_response_iss_parameter_supported": true,
        })
    );
    // No OpenID Connect document, and POST is not served.
    let oidc = http
        .get(&format!("{issuer}/.well-known/openid-configuration"))
        .await;
    assert_eq!(oidc.status, 404);
    let post = http.send(json_post(&auth.metadata_url(), &json!({}))).await;
    assert_eq!(post.status, 405);
    assert_eq!(auth.stats().metadata_requests, 2);
}

#[tokio::test]
async fn metadata_of_a_path_issuer_is_at_the_inserted_path() {
    let _shared = crate::support::shared();
    let auth = AuthServer::start(AuthConfig::default().with_path_prefix("tenant1/"));
    let http = Http::new();
    let origin = auth.origin();
    let issuer = auth.issuer();
    assert_eq!(issuer, format!("{origin}/tenant1"));
    let url = format!("{origin}/.well-known/oauth-authorization-server/tenant1");
    assert_eq!(auth.metadata_url(), url);
    let doc = http.get(&url).await.json();
    assert_eq!(doc["issuer"], issuer);
    assert_eq!(doc["authorization_endpoint"], format!("{issuer}/authorize"));
    assert_eq!(doc["token_endpoint"], format!("{issuer}/token"));
    assert_eq!(doc["registration_endpoint"], format!("{issuer}/register"));
    // Neither the root document nor the appended path.
    for wrong in [
        format!("{origin}/.well-known/oauth-authorization-server"),
        format!("{issuer}/.well-known/oauth-authorization-server"),
        format!("{origin}/authorize"),
    ] {
        assert_eq!(http.get(&wrong).await.status, 404, "{wrong}");
    }
    // The endpoints live under the prefix.
    let (auth, cred) = auth_with_public_client(AuthConfig::default().with_path_prefix("/t2"));
    let token = access_token(&http, &auth, &cred, None).await;
    assert!(!token.is_empty());
}

#[tokio::test]
async fn metadata_settings_show() {
    let _shared = crate::support::shared();
    let auth = AuthServer::start(
        AuthConfig::default()
            .with_scopes_supported(["mcp:read", "mcp:write"])
            .with_client_id_metadata_documents(true)
            .with_iss_parameter_supported(None)
            .with_dynamic_registration(false)
            .with_token_endpoint_auth_methods([ClientAuthMethod::None]),
    );
    let http = Http::new();
    let doc = http.get(&auth.metadata_url()).await.json();
    assert_eq!(doc["scopes_supported"], json!(["mcp:read", "mcp:write"]));
    assert_eq!(doc["client_id_metadata_document_supported"], true);
    assert_eq!(
        doc["token_endpoint_auth_methods_supported"],
        json!(["none"])
    );
    assert!(
        doc.get("authorization_response_iss_parameter_supported")
            .is_none()
    );
    assert!(doc.get("registration_endpoint").is_none());
    let reply = http
        .send(json_post(
            &auth.registration_endpoint(),
            &json!({"redirect_uris": [REDIRECT]}),
        ))
        .await;
    assert_eq!(reply.status, 404);
    let off = AuthServer::start(AuthConfig::default().with_iss_parameter_supported(Some(false)));
    let doc = http.get(&off.metadata_url()).await.json();
    assert_eq!(doc["authorization_response_iss_parameter_supported"], false);
}

// ---------------------------------------------------------------- the code flow

#[tokio::test]
async fn full_code_flow_by_hand_reaches_the_protected_server() {
    let _shared = crate::support::shared();
    let auth = AuthServer::start(AuthConfig::default());
    let mcp = protected(auth.resource());
    let http = Http::new();
    let resource = mcp.url();

    // 1. The server refuses, and says where to look.
    let refused = http.send(mcp_post(&mcp.url(), None, &initialize())).await;
    assert_eq!(refused.status, 401);
    let prm_url = mcp.resource_metadata_url().unwrap();
    assert!(
        refused
            .header("www-authenticate")
            .unwrap()
            .contains(&format!("resource_metadata=\"{prm_url}\""))
    );
    let prm = http.get(&prm_url).await.json();
    assert_eq!(prm["resource"], resource);
    assert_eq!(prm["authorization_servers"], json!([auth.issuer()]));

    // 2. Dynamic registration.
    let reg = http
        .send(json_post(
            &auth.registration_endpoint(),
            &json!({
                "client_name": "by hand",
                "application_type": "native",
                "redirect_uris": [REDIRECT],
                "grant_types": ["authorization_code", "refresh_token"],
            }),
        ))
        .await;
    assert_eq!(reg.status, 201);
    let reg = reg.json();
    assert_eq!(reg["token_endpoint_auth_method"], "client_secret_basic");
    assert_eq!(reg["redirect_uris"], json!([REDIRECT]));
    assert_eq!(
        reg["grant_types"],
        json!(["authorization_code", "refresh_token"])
    );
    assert_eq!(reg["client_name"], "by hand");
    assert!(reg["client_id_issued_at"].as_u64().unwrap() > 0);
    let cred = Cred::new(
        reg["client_id"].as_str().unwrap(),
        reg["client_secret"].as_str(),
        ClientAuthMethod::ClientSecretBasic,
    );
    assert!(cred.secret.as_deref().is_some_and(|s| s.len() >= 32));
    assert_eq!(auth.registrations().len(), 1);
    assert_eq!(auth.registrations()[0]["application_type"], "native");

    // 3. Authorization: a 302 with code, state and iss.
    let mut params = authz_params(&cred.id);
    set(&mut params, "scope", Some("mcp:read"));
    set(&mut params, "resource", Some(&resource));
    let reply = http.get(&authorize_url(&auth, &params)).await;
    assert_eq!(reply.status, 302);
    let location = reply.header("location").unwrap();
    assert!(location.starts_with("http://127.0.0.1:4567/callback?code="));
    let encoded_iss: String =
        url::form_urlencoded::byte_serialize(auth.issuer().as_bytes()).collect();
    assert!(
        location.ends_with(&format!("&iss={encoded_iss}")),
        "{location}"
    );
    let got = reply.location_params();
    assert_eq!(got["state"], STATE);
    assert_eq!(got["iss"], auth.issuer());
    let code = &got["code"];
    assert!(code.len() >= 32);

    // 4. Token, with the verifier of RFC 7636 Appendix B.
    let reply = http
        .send(cred.token_request(
            &auth,
            &[
                ("grant_type", "authorization_code"),
                ("code", code),
                ("redirect_uri", REDIRECT),
                ("code_verifier", VERIFIER),
                ("resource", &resource),
            ],
        ))
        .await;
    assert_eq!(reply.status, 200, "{:?}", reply.json());
    assert_eq!(reply.header("cache-control"), Some("no-store"));
    let tokens = reply.json();
    assert_eq!(tokens["token_type"], "Bearer");
    assert_eq!(tokens["expires_in"], 3600);
    assert_eq!(tokens["scope"], "mcp:read");
    let access = tokens["access_token"].as_str().unwrap();
    assert!(
        tokens["refresh_token"]
            .as_str()
            .is_some_and(|r| r != access)
    );
    let issued = auth.tokens();
    assert_eq!(issued.len(), 1);
    assert_eq!(issued[0].access_token, access);
    assert_eq!(issued[0].client_id, cred.id);
    assert_eq!(issued[0].scopes, vec!["mcp:read".to_owned()]);
    assert_eq!(issued[0].resource.as_deref(), Some(resource.as_str()));

    // 5. The protected server takes it.
    let reply = http
        .send(mcp_post(&mcp.url(), Some(access), &initialize()))
        .await;
    assert_eq!(reply.status, 200);
    assert_eq!(
        reply.json()["result"]["serverInfo"]["name"],
        "mcp-scoped-http-testkit"
    );

    let stats = auth.stats();
    assert_eq!(stats.registrations, 1);
    assert_eq!(stats.authorize_requests, 1);
    assert_eq!(stats.token_requests, 1);
    assert_eq!(stats.code_grants, 1);
    assert_eq!(stats.refresh_grants, 0);
    assert_eq!(stats.tokens_issued, 1);
    // The token request is recorded whole, the verifier included.
    let token_req = auth
        .requests()
        .into_iter()
        .find(|r| r.path == "/token")
        .unwrap();
    assert_eq!(token_req.form_param("code_verifier"), Some(VERIFIER));
    assert_eq!(token_req.param("resource"), Some(resource.as_str()));
    assert!(
        token_req
            .header("authorization")
            .unwrap()
            .starts_with("Basic ")
    );
}

#[tokio::test]
async fn authorize_validation_refuses_without_redirecting() {
    let _shared = crate::support::shared();
    let auth = AuthServer::start(AuthConfig::default());
    let http = Http::new();
    let reg = http
        .send(json_post(
            &auth.registration_endpoint(),
            &json!({"redirect_uris": [REDIRECT, "https://app.example/cb"], "token_endpoint_auth_method": "none"}),
        ))
        .await
        .json();
    let id = reg["client_id"].as_str().unwrap().to_owned();
    type Edit = fn(&mut Vec<(String, String)>);
    let cases: [(&str, Edit); 11] = [
        ("response_type token", |p| {
            set(p, "response_type", Some("token"))
        }),
        ("no response_type", |p| set(p, "response_type", None)),
        ("unknown client", |p| set(p, "client_id", Some("nobody"))),
        ("no redirect_uri", |p| set(p, "redirect_uri", None)),
        ("relative redirect_uri", |p| {
            set(p, "redirect_uri", Some("/callback"))
        }),
        ("unregistered redirect_uri", |p| {
            set(p, "redirect_uri", Some("http://127.0.0.1:4567/elsewhere"))
        }),
        ("non-loopback on another port", |p| {
            set(p, "redirect_uri", Some("https://app.example:8443/cb"))
        }),
        ("no code_challenge", |p| set(p, "code_challenge", None)),
        ("plain", |p| set(p, "code_challenge_method", Some("plain"))),
        ("no method", |p| set(p, "code_challenge_method", None)),
        ("duplicate client_id", |p| {
            p.push(("client_id".into(), "x".into()))
        }),
    ];
    for (what, edit) in cases {
        let mut params = authz_params(&id);
        edit(&mut params);
        let reply = http.get(&authorize_url(&auth, &params)).await;
        assert_eq!(reply.status, 400, "{what}");
        assert!(reply.header("location").is_none(), "{what}");
        assert_eq!(reply.error(), "invalid_request", "{what}");
        assert!(reply.json()["error_description"].is_string(), "{what}");
    }
    // Loopback redirect URIs match on any port (RFC 8252 §7.3); the exact
    // non-loopback one is fine too.
    for ok in [
        "http://127.0.0.1:9/callback",
        REDIRECT,
        "https://app.example/cb",
    ] {
        let mut params = authz_params(&id);
        set(&mut params, "redirect_uri", Some(ok));
        let reply = http.get(&authorize_url(&auth, &params)).await;
        assert_eq!(reply.status, 302, "{ok}");
        assert!(reply.header("location").unwrap().starts_with(ok), "{ok}");
    }
    assert_eq!(auth.stats().authorize_requests, 14);
}

#[tokio::test]
async fn localhost_redirect_and_no_state() {
    let _shared = crate::support::shared();
    let auth = AuthServer::start(AuthConfig::default());
    let http = Http::new();
    let reg = http
        .send(json_post(
            &auth.registration_endpoint(),
            &json!({"redirect_uris": ["http://localhost:1/cb"], "token_endpoint_auth_method": "none"}),
        ))
        .await
        .json();
    let mut params = authz_params(reg["client_id"].as_str().unwrap());
    set(
        &mut params,
        "redirect_uri",
        Some("http://localhost:50123/cb"),
    );
    set(&mut params, "state", None);
    let reply = http.get(&authorize_url(&auth, &params)).await;
    assert_eq!(reply.status, 302);
    let got = reply.location_params();
    assert!(got.contains_key("code"));
    assert!(!got.contains_key("state"));
}

#[tokio::test]
async fn pkce_mismatch_is_refused_and_spends_the_code() {
    let _shared = crate::support::shared();
    let (auth, cred) = auth_with_public_client(AuthConfig::default());
    let http = Http::new();
    let code = code_for(&http, &auth, &cred, None, None).await;
    let exchange = |verifier: &'static str, code: String| {
        let cred = cred.clone();
        let req = cred.token_request(
            &auth,
            &[
                ("grant_type", "authorization_code"),
                ("code", &code),
                ("redirect_uri", REDIRECT),
                ("code_verifier", verifier),
            ],
        );
        http.send(req)
    };
    let reply = exchange(OTHER_VERIFIER, code.clone()).await;
    assert_eq!(reply.status, 400);
    assert_eq!(reply.error(), "invalid_grant");
    // The code was spent by that attempt.
    let reply = exchange(VERIFIER, code).await;
    assert_eq!(reply.status, 400);
    assert_eq!(reply.error(), "invalid_grant");
    // A fresh code with the right verifier works once, then never again.
    let code = code_for(&http, &auth, &cred, None, None).await;
    assert_eq!(exchange(VERIFIER, code.clone()).await.status, 200);
    let again = exchange(VERIFIER, code).await;
    assert_eq!(
        (again.status, again.error().as_str()),
        (400, "invalid_grant")
    );
    // A verifier too short to be one.
    let code = code_for(&http, &auth, &cred, None, None).await;
    let short = exchange("abc", code).await;
    assert_eq!(
        (short.status, short.error().as_str()),
        (400, "invalid_grant")
    );
    assert_eq!(auth.stats().tokens_issued, 1);
}

#[tokio::test]
async fn code_exchange_checks_redirect_uri_resource_and_client() {
    let _shared = crate::support::shared();
    let auth = AuthServer::start(
        AuthConfig::default()
            .with_client("a", None, ClientAuthMethod::None)
            .with_client("b", None, ClientAuthMethod::None),
    );
    let http = Http::new();
    let a = public("a");
    let b = public("b");
    let resource = "http://127.0.0.1:1/mcp";
    let pairs = |code: &str, redirect: &str, res: Option<&str>| {
        let mut p = vec![
            ("grant_type".to_owned(), "authorization_code".to_owned()),
            ("code".to_owned(), code.to_owned()),
            ("redirect_uri".to_owned(), redirect.to_owned()),
            ("code_verifier".to_owned(), VERIFIER.to_owned()),
        ];
        if let Some(r) = res {
            p.push(("resource".to_owned(), r.to_owned()));
        }
        p
    };
    async fn exchange(
        http: &Http,
        auth: &AuthServer,
        cred: &Cred,
        p: Vec<(String, String)>,
    ) -> Reply {
        let p: Vec<(&str, &str)> = p.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        http.send(cred.token_request(auth, &p)).await
    }
    let code = code_for(&http, &auth, &a, None, Some(resource)).await;
    let r = exchange(
        &http,
        &auth,
        &a,
        pairs(&code, "http://127.0.0.1:4567/other", Some(resource)),
    )
    .await;
    assert_eq!((r.status, r.error().as_str()), (400, "invalid_grant"));
    let code = code_for(&http, &auth, &a, None, Some(resource)).await;
    let r = exchange(
        &http,
        &auth,
        &a,
        pairs(&code, REDIRECT, Some("http://127.0.0.1:1/other")),
    )
    .await;
    assert_eq!((r.status, r.error().as_str()), (400, "invalid_target"));
    let code = code_for(&http, &auth, &a, None, Some(resource)).await;
    let r = exchange(&http, &auth, &a, pairs(&code, REDIRECT, None)).await;
    assert_eq!((r.status, r.error().as_str()), (400, "invalid_target"));
    let code = code_for(&http, &auth, &a, None, Some(resource)).await;
    let r = exchange(&http, &auth, &b, pairs(&code, REDIRECT, Some(resource))).await;
    assert_eq!((r.status, r.error().as_str()), (400, "invalid_grant"));
    let code = code_for(&http, &auth, &a, None, Some(resource)).await;
    let r = exchange(&http, &auth, &a, pairs(&code, REDIRECT, Some(resource))).await;
    assert_eq!(r.status, 200, "{:?}", r.json());
    // Missing pieces are invalid requests; other grants are unsupported.
    let r = exchange(
        &http,
        &auth,
        &a,
        vec![("grant_type".into(), "authorization_code".into())],
    )
    .await;
    assert_eq!((r.status, r.error().as_str()), (400, "invalid_request"));
    let r = exchange(
        &http,
        &auth,
        &a,
        vec![("grant_type".into(), "password".into())],
    )
    .await;
    assert_eq!(
        (r.status, r.error().as_str()),
        (400, "unsupported_grant_type")
    );
    // JSON is not a token request.
    let r = http
        .send(json_post(
            &auth.token_endpoint(),
            &json!({"grant_type": "authorization_code", "client_id": "a"}),
        ))
        .await;
    assert_eq!((r.status, r.error().as_str()), (400, "invalid_request"));
}

// ---------------------------------------------------------------- client authentication

/// Sends a code exchange for `cred` with its authentication replaced by
/// `how`: the status and error.
async fn exchange_with(
    http: &Http,
    auth: &AuthServer,
    cred: &Cred,
    how: impl FnOnce(&str) -> Request<Full<Bytes>>,
) -> (u16, String, Option<String>) {
    let code = code_for(http, auth, cred, None, None).await;
    let body = form_body(&[
        ("grant_type", "authorization_code"),
        ("code", &code),
        ("redirect_uri", REDIRECT),
        ("code_verifier", VERIFIER),
    ]);
    let reply = http.send(how(&body)).await;
    let challenge = reply.header("www-authenticate").map(str::to_owned);
    let error = if reply.status == 200 {
        String::new()
    } else {
        reply.error()
    };
    (reply.status, error, challenge)
}

/// Builds a token request from a form body.
type Builder<'a> = Box<dyn Fn(&str) -> Request<Full<Bytes>> + 'a>;

fn raw_token_post(
    auth: &AuthServer,
    body: String,
    authorization: Option<String>,
) -> Request<Full<Bytes>> {
    let mut b = Request::post(auth.token_endpoint())
        .header("content-type", "application/x-www-form-urlencoded");
    if let Some(a) = authorization {
        b = b.header("authorization", a);
    }
    b.body(Full::new(Bytes::from(body))).unwrap()
}

#[tokio::test]
async fn client_secret_basic_is_checked() {
    let _shared = crate::support::shared();
    // An id and secret that need form-urlencoding (RFC 6749 §2.3.1).
    let (id, secret) = ("basic client:1", "s&c+r%t:é");
    let auth = AuthServer::start(AuthConfig::default().with_client(
        id,
        Some(secret),
        ClientAuthMethod::ClientSecretBasic,
    ));
    let http = Http::new();
    let cred = Cred::new(id, Some(secret), ClientAuthMethod::ClientSecretBasic);
    let enc: String = url::form_urlencoded::byte_serialize(id.as_bytes()).collect();
    let ok = exchange_with(&http, &auth, &cred, |b| {
        raw_token_post(&auth, b.to_owned(), Some(basic(id, secret)))
    })
    .await;
    assert_eq!(ok.0, 200, "{ok:?}");
    // The same with client_id in the body as well.
    let ok = exchange_with(&http, &auth, &cred, |b| {
        raw_token_post(
            &auth,
            format!("{b}&client_id={enc}"),
            Some(basic(id, secret)),
        )
    })
    .await;
    assert_eq!(ok.0, 200, "{ok:?}");
    let refusals: Vec<(&str, Builder)> = vec![
        (
            "wrong secret",
            Box::new(|b| raw_token_post(&auth, b.to_owned(), Some(basic(id, "nope")))),
        ),
        (
            "not form-encoded",
            Box::new(|b| {
                let raw = format!("Basic {}", STANDARD.encode(format!("{id}:{secret}")));
                raw_token_post(&auth, b.to_owned(), Some(raw))
            }),
        ),
        (
            "secret in the body",
            Box::new(|b| {
                let enc_secret: String =
                    url::form_urlencoded::byte_serialize(secret.as_bytes()).collect();
                raw_token_post(
                    &auth,
                    format!("{b}&client_id={enc}&client_secret={enc_secret}"),
                    None,
                )
            }),
        ),
        (
            "both",
            Box::new(|b| {
                let enc_secret: String =
                    url::form_urlencoded::byte_serialize(secret.as_bytes()).collect();
                raw_token_post(
                    &auth,
                    format!("{b}&client_secret={enc_secret}"),
                    Some(basic(id, secret)),
                )
            }),
        ),
        (
            "other id in the body",
            Box::new(|b| {
                raw_token_post(
                    &auth,
                    format!("{b}&client_id=other"),
                    Some(basic(id, secret)),
                )
            }),
        ),
        (
            "no authentication",
            Box::new(|b| raw_token_post(&auth, b.to_owned(), None)),
        ),
        (
            "bearer scheme",
            Box::new(|b| raw_token_post(&auth, b.to_owned(), Some("Bearer x".into()))),
        ),
    ];
    for (what, how) in refusals {
        let (status, error, _) = exchange_with(&http, &auth, &cred, how).await;
        assert_eq!((status, error.as_str()), (401, "invalid_client"), "{what}");
    }
    // A refusal of Basic credentials comes with a Basic challenge.
    let (_, _, challenge) = exchange_with(&http, &auth, &cred, |b| {
        raw_token_post(&auth, b.to_owned(), Some(basic(id, "nope")))
    })
    .await;
    assert!(challenge.unwrap().starts_with("Basic "));
}

#[tokio::test]
async fn client_secret_post_is_checked() {
    let _shared = crate::support::shared();
    let auth = AuthServer::start(AuthConfig::default().with_client(
        "post-client",
        Some("post-secret"),
        ClientAuthMethod::ClientSecretPost,
    ));
    let http = Http::new();
    let cred = Cred::new(
        "post-client",
        Some("post-secret"),
        ClientAuthMethod::ClientSecretPost,
    );
    let ok = exchange_with(&http, &auth, &cred, |b| {
        raw_token_post(
            &auth,
            format!("{b}&client_id=post-client&client_secret=post-secret"),
            None,
        )
    })
    .await;
    assert_eq!(ok.0, 200, "{ok:?}");
    let refusals: Vec<(&str, Builder)> = vec![
        (
            "wrong secret",
            Box::new(|b| {
                raw_token_post(
                    &auth,
                    format!("{b}&client_id=post-client&client_secret=nope"),
                    None,
                )
            }),
        ),
        (
            "no secret",
            Box::new(|b| raw_token_post(&auth, format!("{b}&client_id=post-client"), None)),
        ),
        (
            "basic instead",
            Box::new(|b| {
                raw_token_post(
                    &auth,
                    b.to_owned(),
                    Some(basic("post-client", "post-secret")),
                )
            }),
        ),
        (
            "both",
            Box::new(|b| {
                raw_token_post(
                    &auth,
                    format!("{b}&client_id=post-client&client_secret=post-secret"),
                    Some(basic("post-client", "post-secret")),
                )
            }),
        ),
        (
            "unknown client",
            Box::new(|b| {
                raw_token_post(
                    &auth,
                    format!("{b}&client_id=nobody&client_secret=post-secret"),
                    None,
                )
            }),
        ),
    ];
    for (what, how) in refusals {
        let (status, error, _) = exchange_with(&http, &auth, &cred, how).await;
        assert_eq!((status, error.as_str()), (401, "invalid_client"), "{what}");
    }
}

#[tokio::test]
async fn public_clients_send_no_secret() {
    let _shared = crate::support::shared();
    let (auth, cred) = auth_with_public_client(AuthConfig::default());
    let http = Http::new();
    let ok = exchange_with(&http, &auth, &cred, |b| {
        raw_token_post(&auth, format!("{b}&client_id=pub-client"), None)
    })
    .await;
    assert_eq!(ok.0, 200, "{ok:?}");
    let refusals: Vec<(&str, Builder)> = vec![
        (
            "a secret in the body",
            Box::new(|b| {
                raw_token_post(
                    &auth,
                    format!("{b}&client_id=pub-client&client_secret=x"),
                    None,
                )
            }),
        ),
        (
            "basic",
            Box::new(|b| raw_token_post(&auth, b.to_owned(), Some(basic("pub-client", "")))),
        ),
        (
            "no client_id",
            Box::new(|b| raw_token_post(&auth, b.to_owned(), None)),
        ),
    ];
    for (what, how) in refusals {
        let (status, error, _) = exchange_with(&http, &auth, &cred, how).await;
        assert_eq!((status, error.as_str()), (401, "invalid_client"), "{what}");
    }
}

#[tokio::test]
async fn registration_picks_the_method_and_checks_redirect_uris() {
    let _shared = crate::support::shared();
    let http = Http::new();
    let auth = AuthServer::start(AuthConfig::default());
    let register = |body: Value| http.send(json_post(&auth.registration_endpoint(), &body));
    let none =
        register(json!({"redirect_uris": [REDIRECT], "token_endpoint_auth_method": "none"})).await;
    assert_eq!(none.status, 201);
    let none = none.json();
    assert_eq!(none["token_endpoint_auth_method"], "none");
    assert!(none.get("client_secret").is_none());
    assert_eq!(none["grant_types"], json!(["authorization_code"]));
    let post = register(
        json!({"redirect_uris": [REDIRECT], "token_endpoint_auth_method": "client_secret_post"}),
    )
    .await
    .json();
    assert_eq!(post["token_endpoint_auth_method"], "client_secret_post");
    assert!(post["client_secret"].is_string());
    assert_eq!(post["client_secret_expires_at"], 0);
    let odd = register(
        json!({"redirect_uris": [REDIRECT], "token_endpoint_auth_method": "private_key_jwt"}),
    )
    .await
    .json();
    assert_eq!(odd["token_endpoint_auth_method"], "client_secret_basic");
    assert!(odd["client_secret"].is_string());
    // Each registration is a new client.
    assert_ne!(none["client_id"], post["client_id"]);
    for bad in [
        json!({}),
        json!({"redirect_uris": []}),
        json!({"redirect_uris": ["/relative"]}),
        json!({"redirect_uris": ["http://127.0.0.1:1/cb#frag"]}),
        json!({"redirect_uris": [7]}),
    ] {
        let reply = register(bad.clone()).await;
        assert_eq!(reply.status, 400, "{bad}");
        assert_eq!(reply.error(), "invalid_redirect_uri", "{bad}");
    }
    let form = http
        .send(form_post(
            &auth.registration_endpoint(),
            &[("redirect_uris", REDIRECT)],
        ))
        .await;
    assert_eq!(
        (form.status, form.error().as_str()),
        (400, "invalid_client_metadata")
    );
    // Every JSON body is recorded, refused ones too.
    assert_eq!(auth.registrations().len(), 8);
    assert_eq!(auth.stats().registrations, 9);
    // With only `none` supported, a client asking for Basic gets `none`.
    let only_none = AuthServer::start(
        AuthConfig::default().with_token_endpoint_auth_methods([ClientAuthMethod::None]),
    );
    let reg = http
        .send(json_post(
            &only_none.registration_endpoint(),
            &json!({"redirect_uris": [REDIRECT], "token_endpoint_auth_method": "client_secret_basic"}),
        ))
        .await
        .json();
    assert_eq!(reg["token_endpoint_auth_method"], "none");
    assert!(reg.get("client_secret").is_none());
}

#[tokio::test]
async fn client_id_metadata_documents_when_enabled() {
    let _shared = crate::support::shared();
    let http = Http::new();
    let cimd = "https://client.example/oauth/metadata.json";
    let on = AuthServer::start(AuthConfig::default().with_client_id_metadata_documents(true));
    let token = access_token(&http, &on, &public(cimd), Some("mcp:read")).await;
    assert_eq!(on.tokens()[0].access_token, token);
    assert_eq!(on.tokens()[0].client_id, cimd);
    // Without a path, or without https, it is no CIMD client id.
    for bad in [
        "https://client.example/",
        "http://client.example/metadata.json",
    ] {
        let reply = http.get(&authorize_url(&on, &authz_params(bad))).await;
        assert_eq!(reply.status, 400, "{bad}");
    }
    for config in [
        AuthConfig::default(),
        AuthConfig::default().with_client_id_metadata_documents(false),
    ] {
        let off = AuthServer::start(config);
        let reply = http.get(&authorize_url(&off, &authz_params(cimd))).await;
        assert_eq!(
            (reply.status, reply.error().as_str()),
            (400, "invalid_request")
        );
    }
}

// ---------------------------------------------------------------- refresh

#[tokio::test]
async fn refresh_rotates_and_may_narrow() {
    let _shared = crate::support::shared();
    let auth = AuthServer::start(AuthConfig::default().with_client(
        "c",
        Some("s"),
        ClientAuthMethod::ClientSecretPost,
    ));
    let mcp = protected(auth.resource().with_required_scopes(["mcp:read"]));
    let http = Http::new();
    let cred = Cred::new("c", Some("s"), ClientAuthMethod::ClientSecretPost);
    let first = tokens_for(&http, &auth, &cred, Some("mcp:read mcp:write"), None).await;
    let refresh_1 = first["refresh_token"].as_str().unwrap().to_owned();
    let refresh = |token: String, scope: Option<&'static str>| {
        let mut pairs = vec![
            ("grant_type", "refresh_token"),
            ("refresh_token", token.as_str()),
        ];
        if let Some(s) = scope {
            pairs.push(("scope", s));
        }
        http.send(cred.token_request(&auth, &pairs))
    };
    // Narrower scope.
    let second = refresh(refresh_1.clone(), Some("mcp:read")).await;
    assert_eq!(second.status, 200);
    let second = second.json();
    assert_eq!(second["scope"], "mcp:read");
    let refresh_2 = second["refresh_token"].as_str().unwrap().to_owned();
    assert_ne!(refresh_2, refresh_1);
    assert_ne!(second["access_token"], first["access_token"]);
    // The new access token works.
    let reply = http
        .send(mcp_post(
            &mcp.url(),
            second["access_token"].as_str(),
            &initialize(),
        ))
        .await;
    assert_eq!(reply.status, 200);
    // The old refresh token is rotated out.
    let old = refresh(refresh_1, None).await;
    assert_eq!((old.status, old.error().as_str()), (400, "invalid_grant"));
    // Wider than the original grant: invalid_scope (and the token stays).
    let wide = refresh(refresh_2.clone(), Some("mcp:read admin")).await;
    assert_eq!((wide.status, wide.error().as_str()), (400, "invalid_scope"));
    // Without scope: the original grant again, narrowed before or not.
    let third = refresh(refresh_2, None).await;
    assert_eq!(third.status, 200);
    assert_eq!(third.json()["scope"], "mcp:read mcp:write");
    // Unknown refresh token.
    let unknown = refresh("rt-nothing".into(), None).await;
    assert_eq!(
        (unknown.status, unknown.error().as_str()),
        (400, "invalid_grant")
    );
    let stats = auth.stats();
    assert_eq!(stats.refresh_grants, 5);
    assert_eq!(stats.refresh_rejections, 3);
    assert_eq!(stats.code_grants, 1);
    assert_eq!(stats.tokens_issued, 3);
}

#[tokio::test]
async fn refresh_tokens_belong_to_their_client() {
    let _shared = crate::support::shared();
    let auth = AuthServer::start(
        AuthConfig::default()
            .with_client("a", None, ClientAuthMethod::None)
            .with_client("b", None, ClientAuthMethod::None),
    );
    let http = Http::new();
    let tokens = tokens_for(&http, &auth, &public("a"), None, None).await;
    let rt = tokens["refresh_token"].as_str().unwrap();
    let reply = http
        .send(public("b").token_request(
            &auth,
            &[("grant_type", "refresh_token"), ("refresh_token", rt)],
        ))
        .await;
    assert_eq!(
        (reply.status, reply.error().as_str()),
        (400, "invalid_grant")
    );
    // Still the owner's.
    let reply = http
        .send(public("a").token_request(
            &auth,
            &[("grant_type", "refresh_token"), ("refresh_token", rt)],
        ))
        .await;
    assert_eq!(reply.status, 200);
}

#[tokio::test]
async fn settings_lifetime_and_no_refresh_tokens() {
    let _shared = crate::support::shared();
    let (auth, cred) = auth_with_public_client(
        AuthConfig::default()
            .with_refresh_tokens(false)
            .with_token_lifetime(Duration::from_secs(60)),
    );
    let http = Http::new();
    let tokens = tokens_for(&http, &auth, &cred, None, None).await;
    assert_eq!(tokens["expires_in"], 60);
    assert!(tokens.get("refresh_token").is_none());
    // No scope asked, none shown.
    assert!(tokens.get("scope").is_none());
    // A zero lifetime issues tokens the protected server finds expired.
    let (auth, cred) =
        auth_with_public_client(AuthConfig::default().with_token_lifetime(Duration::ZERO));
    let mcp = protected(auth.resource());
    let tokens = tokens_for(&http, &auth, &cred, None, None).await;
    assert_eq!(tokens["expires_in"], 0);
    let reply = http
        .send(mcp_post(
            &mcp.url(),
            tokens["access_token"].as_str(),
            &initialize(),
        ))
        .await;
    assert_eq!(reply.status, 401);
    assert!(
        reply
            .header("www-authenticate")
            .unwrap()
            .contains("token expired")
    );
    assert!(auth.tokens()[0].expired);
}

#[tokio::test]
async fn expired_and_revoked_tokens_are_refused() {
    let _shared = crate::support::shared();
    let (auth, cred) = auth_with_public_client(AuthConfig::default());
    let mcp = protected(auth.resource());
    let http = Http::new();
    let tokens = tokens_for(&http, &auth, &cred, None, None).await;
    let access = tokens["access_token"].as_str().unwrap();
    let call = |token: String| http.send(mcp_post(&mcp.url(), Some(&token), &initialize()));
    assert_eq!(call(access.to_owned()).await.status, 200);
    auth.expire_all_tokens();
    let reply = call(access.to_owned()).await;
    assert_eq!(reply.status, 401);
    assert_eq!(reply.json()["error"], "invalid_token");
    // Refreshing still works after expiry, and the new token is good.
    let rt = tokens["refresh_token"].as_str().unwrap();
    let refreshed = http
        .send(cred.token_request(
            &auth,
            &[("grant_type", "refresh_token"), ("refresh_token", rt)],
        ))
        .await
        .json();
    let fresh = refreshed["access_token"].as_str().unwrap();
    assert_eq!(call(fresh.to_owned()).await.status, 200);
    // Revocation ends access and refresh tokens alike.
    auth.revoke_all_tokens();
    let reply = call(fresh.to_owned()).await;
    assert_eq!(reply.status, 401);
    assert!(
        reply
            .header("www-authenticate")
            .unwrap()
            .contains("token revoked")
    );
    let rt2 = refreshed["refresh_token"].as_str().unwrap();
    let reply = http
        .send(cred.token_request(
            &auth,
            &[("grant_type", "refresh_token"), ("refresh_token", rt2)],
        ))
        .await;
    assert_eq!(
        (reply.status, reply.error().as_str()),
        (400, "invalid_grant")
    );
    assert!(auth.tokens().iter().all(|t| t.revoked));
    // Tokens issued later are fine; they outlive the authorization server.
    let later = access_token(&http, &auth, &cred, None).await;
    auth.shutdown();
    assert_eq!(call(later).await.status, 200);
}

// ---------------------------------------------------------------- faults

#[tokio::test]
async fn fault_wrong_issuer_and_no_s256() {
    let _shared = crate::support::shared();
    let http = Http::new();
    let auth = AuthServer::start(AuthConfig::default().with_fault(AuthFault::WrongIssuer));
    let doc = http.get(&auth.metadata_url()).await.json();
    assert_eq!(doc["issuer"], format!("{}/other", auth.issuer()));
    assert_eq!(doc["token_endpoint"], format!("{}/token", auth.issuer()));
    auth.clear_faults();
    assert_eq!(
        http.get(&auth.metadata_url()).await.json()["issuer"],
        auth.issuer()
    );
    auth.push_fault(AuthFault::NoS256);
    let doc = http.get(&auth.metadata_url()).await.json();
    assert_eq!(doc["code_challenge_methods_supported"], json!(["plain"]));
    assert_eq!(doc["issuer"], auth.issuer());
}

#[tokio::test]
async fn fault_wrong_and_missing_iss() {
    let _shared = crate::support::shared();
    let http = &Http::new();
    let (auth, cred) =
        auth_with_public_client(AuthConfig::default().with_fault(AuthFault::WrongIss));
    let iss_of = |auth: &AuthServer| {
        let url = authorize_url(auth, &authz_params(&cred.id));
        async move { http.get(&url).await.location_params().get("iss").cloned() }
    };
    let wrong = iss_of(&auth).await.unwrap();
    assert_ne!(wrong, auth.issuer());
    assert!(!wrong.is_empty());
    auth.clear_faults();
    assert_eq!(iss_of(&auth).await.as_deref(), Some(auth.issuer().as_str()));
    auth.push_fault(AuthFault::MissingIss);
    assert_eq!(iss_of(&auth).await, None);
    // The metadata still says iss is supported.
    let doc = http.get(&auth.metadata_url()).await.json();
    assert_eq!(doc["authorization_response_iss_parameter_supported"], true);
    // And the setting: no iss, not advertised.
    let (quiet, _) = auth_with_public_client(
        AuthConfig::default()
            .with_send_iss(false)
            .with_iss_parameter_supported(None),
    );
    assert_eq!(iss_of(&quiet).await, None);
}

#[tokio::test]
async fn fault_reject_refresh() {
    let _shared = crate::support::shared();
    let (auth, cred) = auth_with_public_client(AuthConfig::default());
    let http = Http::new();
    let tokens = tokens_for(&http, &auth, &cred, None, None).await;
    let rt = tokens["refresh_token"].as_str().unwrap();
    auth.push_fault(AuthFault::RejectRefresh);
    let refresh = || {
        http.send(cred.token_request(
            &auth,
            &[("grant_type", "refresh_token"), ("refresh_token", rt)],
        ))
    };
    let reply = refresh().await;
    assert_eq!(
        (reply.status, reply.error().as_str()),
        (400, "invalid_grant")
    );
    assert_eq!(auth.stats().refresh_rejections, 1);
    // Code grants are unaffected.
    tokens_for(&http, &auth, &cred, None, None).await;
    // The refresh token was not spent by the refusal.
    auth.clear_faults();
    assert_eq!(refresh().await.status, 200);
}

#[tokio::test]
async fn fault_slow_token() {
    let _shared = crate::support::shared();
    let wait = Duration::from_millis(500);
    let (auth, cred) =
        auth_with_public_client(AuthConfig::default().with_fault(AuthFault::SlowToken(wait)));
    let http = Http::new();
    let code = code_for(&http, &auth, &cred, None, None).await;
    let started = Instant::now();
    let reply = http
        .send(cred.token_request(
            &auth,
            &[
                ("grant_type", "authorization_code"),
                ("code", &code),
                ("redirect_uri", REDIRECT),
                ("code_verifier", VERIFIER),
            ],
        ))
        .await;
    assert!(started.elapsed() >= wait, "{:?}", started.elapsed());
    assert_eq!(reply.status, 200);
    // The request was counted on arrival, before the wait.
    assert_eq!(auth.stats().token_requests, 1);
    // Other endpoints are not slowed.
    let started = Instant::now();
    http.get(&auth.metadata_url()).await;
    assert!(started.elapsed() < wait);
}

#[tokio::test]
async fn fault_token_error() {
    let _shared = crate::support::shared();
    let (auth, cred) = auth_with_public_client(AuthConfig::default());
    let http = Http::new();
    for (status, error) in [
        (503, "temporarily_unavailable"),
        (500, "server_error"),
        (401, "invalid_client"),
        (400, "invalid_request"),
    ] {
        auth.clear_faults();
        auth.push_fault(AuthFault::TokenError(status));
        let code = code_for(&http, &auth, &cred, None, None).await;
        let reply = http
            .send(cred.token_request(
                &auth,
                &[
                    ("grant_type", "authorization_code"),
                    ("code", &code),
                    ("redirect_uri", REDIRECT),
                    ("code_verifier", VERIFIER),
                ],
            ))
            .await;
        assert_eq!((reply.status, reply.error().as_str()), (status, error));
    }
    assert_eq!(auth.stats().tokens_issued, 0);
}

// ---------------------------------------------------------------- the protected server

#[tokio::test]
async fn challenge_401_names_the_metadata_and_the_scope() {
    let _shared = crate::support::shared();
    let auth = AuthServer::start(AuthConfig::default());
    let mcp = protected(auth.resource().with_required_scopes(["mcp:read"]));
    let http = Http::new();
    let origin = format!("http://{}", mcp.addr());
    let prm = format!("{origin}/.well-known/oauth-protected-resource/mcp");
    assert_eq!(mcp.resource_metadata_url().as_deref(), Some(prm.as_str()));
    let reply = http.send(mcp_post(&mcp.url(), None, &initialize())).await;
    assert_eq!(reply.status, 401);
    assert_eq!(
        reply.header("www-authenticate"),
        Some(
            format!(
                "Bearer error=\"invalid_token\", error_description=\"no bearer token\", \
                 scope=\"mcp:read\", resource_metadata=\"{prm}\""
            )
            .as_str()
        )
    );
    assert_eq!(reply.header("content-type"), Some("application/json"));
    assert_eq!(reply.json()["error"], "invalid_token");
    // A token the server did not issue, or another scheme.
    let reply = http
        .send(mcp_post(&mcp.url(), Some("at-forged"), &initialize()))
        .await;
    assert_eq!(reply.status, 401);
    assert!(
        reply
            .header("www-authenticate")
            .unwrap()
            .contains("unknown token")
    );
    let mut req = mcp_post(&mcp.url(), None, &initialize());
    req.headers_mut()
        .insert("authorization", basic("a", "b").parse().unwrap());
    assert_eq!(http.send(req).await.status, 401);
    // The metadata.
    let doc = http.get(&prm).await;
    assert_eq!(doc.status, 200);
    assert_eq!(
        doc.json(),
        json!({
            "resource": mcp.url(),
            "authorization_servers": [auth.issuer()],
            "bearer_methods_supported": ["header"],
        })
    );
    // Not at the root.
    let root = http
        .get(&format!("{origin}/.well-known/oauth-protected-resource"))
        .await;
    assert_eq!(root.status, 404);
}

#[tokio::test]
async fn challenge_settings() {
    let _shared = crate::support::shared();
    let auth = AuthServer::start(AuthConfig::default());
    let http = Http::new();
    // No resource_metadata, no scope though scopes are required.
    let mcp = protected(
        auth.resource()
            .with_required_scopes(["mcp:read"])
            .with_challenge_resource_metadata(false)
            .with_challenge_scope(ChallengeScope::Omit),
    );
    let reply = http.send(mcp_post(&mcp.url(), None, &initialize())).await;
    assert_eq!(
        reply.header("www-authenticate"),
        Some("Bearer error=\"invalid_token\", error_description=\"no bearer token\"")
    );
    // A fixed scope, the metadata at the root with scopes and another
    // resource string.
    let mcp = protected(
        auth.resource()
            .with_challenge_scope(ChallengeScope::Fixed(vec!["a".into(), "b".into()]))
            .with_metadata_location(MetadataLocation::Root)
            .with_scopes_supported(["a", "b", "c"])
            .with_resource("https://elsewhere.example/mcp")
            .with_authorization_servers(["http://127.0.0.1:1", "http://127.0.0.1:2"]),
    );
    let origin = format!("http://{}", mcp.addr());
    let root = format!("{origin}/.well-known/oauth-protected-resource");
    let reply = http.send(mcp_post(&mcp.url(), None, &initialize())).await;
    let challenge = reply.header("www-authenticate").unwrap();
    assert!(challenge.contains("scope=\"a b\""), "{challenge}");
    assert!(
        challenge.ends_with(&format!("resource_metadata=\"{root}\"")),
        "{challenge}"
    );
    assert_eq!(mcp.resource_metadata_url().as_deref(), Some(root.as_str()));
    assert_eq!(
        http.get(&root).await.json(),
        json!({
            "resource": "https://elsewhere.example/mcp",
            "authorization_servers": ["http://127.0.0.1:1", "http://127.0.0.1:2"],
            "scopes_supported": ["a", "b", "c"],
            "bearer_methods_supported": ["header"],
        })
    );
    let path_based = http.get(&format!("{root}/mcp")).await;
    assert_eq!(path_based.status, 404);
}

#[tokio::test]
async fn insufficient_scope_403_and_step_up() {
    let _shared = crate::support::shared();
    let (auth, cred) = auth_with_public_client(AuthConfig::default());
    let mcp = protected(
        auth.resource()
            .with_required_scopes(["mcp:read"])
            .with_tool_scope("write-tool", "mcp:write"),
    );
    let http = Http::new();
    let prm = mcp.resource_metadata_url().unwrap();
    let post = |token: String, body: Value| http.send(mcp_post(&mcp.url(), Some(&token), &body));
    // No scope at all: 403 for the required one.
    let none = access_token(&http, &auth, &cred, None).await;
    let reply = post(none, initialize()).await;
    assert_eq!(reply.status, 403);
    assert_eq!(
        reply.header("www-authenticate"),
        Some(
            format!(
                "Bearer error=\"insufficient_scope\", error_description=\"more scope needed\", \
                 scope=\"mcp:read\", resource_metadata=\"{prm}\""
            )
            .as_str()
        )
    );
    assert_eq!(reply.json()["error"], "insufficient_scope");
    // Read: initialize and an ordinary tool, not the write tool.
    let read = access_token(&http, &auth, &cred, Some("mcp:read")).await;
    assert_eq!(post(read.clone(), initialize()).await.status, 200);
    let ok = post(read.clone(), tools_call("tool-000")).await;
    assert_eq!(ok.status, 200);
    assert!(ok.json()["result"].is_object());
    let reply = post(read.clone(), tools_call("write-tool")).await;
    assert_eq!(reply.status, 403);
    let challenge = reply.header("www-authenticate").unwrap();
    assert!(
        challenge.contains("scope=\"mcp:read mcp:write\""),
        "{challenge}"
    );
    // A batch with the write tool in second place needs it too.
    let batch = json!([tools_call("tool-000"), {
        "jsonrpc": "2.0", "id": 3, "method": "tools/call",
        "params": {"name": "write-tool", "arguments": {}},
    }]);
    assert_eq!(post(read, batch).await.status, 403);
    // Step up.
    let write = access_token(&http, &auth, &cred, Some("mcp:read mcp:write")).await;
    let reply = post(write, tools_call("write-tool")).await;
    assert_eq!(reply.status, 200);
    assert!(reply.json()["result"].is_object());
}

#[tokio::test]
async fn step_up_loop_refuses_every_tool_call() {
    let _shared = crate::support::shared();
    let (auth, cred) = auth_with_public_client(AuthConfig::default());
    let mcp = protected(auth.resource().with_fault(ResourceFault::StepUpLoop));
    let http = Http::new();
    let token = access_token(&http, &auth, &cred, Some("everything")).await;
    let post = |body: Value| http.send(mcp_post(&mcp.url(), Some(&token), &body));
    assert_eq!(post(initialize()).await.status, 200);
    for _ in 0..3 {
        let reply = post(tools_call("tool-000")).await;
        assert_eq!(reply.status, 403);
        let challenge = reply.header("www-authenticate").unwrap();
        assert!(
            challenge.starts_with("Bearer error=\"insufficient_scope\""),
            "{challenge}"
        );
        assert!(challenge.contains("scope=\"step-up\""), "{challenge}");
    }
    // Without a valid token it is still a 401.
    let reply = http
        .send(mcp_post(&mcp.url(), None, &tools_call("tool-000")))
        .await;
    assert_eq!(reply.status, 401);
}

#[tokio::test]
async fn audience_is_checked_when_asked() {
    let _shared = crate::support::shared();
    let (auth, cred) = auth_with_public_client(AuthConfig::default());
    let mcp = protected(auth.resource().with_require_audience(true));
    let http = Http::new();
    let url = mcp.url();
    let right = tokens_for(&http, &auth, &cred, None, Some(&url)).await;
    let other = tokens_for(&http, &auth, &cred, None, Some("http://127.0.0.1:1/mcp")).await;
    let none = tokens_for(&http, &auth, &cred, None, None).await;
    let status = |t: &Value| http.send(mcp_post(&url, t["access_token"].as_str(), &initialize()));
    assert_eq!(status(&right).await.status, 200);
    let reply = status(&other).await;
    assert_eq!(reply.status, 401);
    assert!(
        reply
            .header("www-authenticate")
            .unwrap()
            .contains("another resource")
    );
    assert_eq!(status(&none).await.status, 401);
    // Without the setting, any of its tokens will do.
    let lax = protected(auth.resource());
    let reply = http
        .send(mcp_post(
            &lax.url(),
            other["access_token"].as_str(),
            &initialize(),
        ))
        .await;
    assert_eq!(reply.status, 200);
}

#[tokio::test]
async fn refusals_are_recorded_before_faults_apply() {
    let _shared = crate::support::shared();
    let (auth, cred) = auth_with_public_client(AuthConfig::default());
    let mcp = TestServer::start(
        ServerConfig::default()
            .with_stateful(false)
            .with_fault(Fault::on_rpc("initialize", FaultAction::status(500)).times(1))
            .with_authorization(auth.resource()),
    );
    let http = Http::new();
    for _ in 0..2 {
        let reply = http.send(mcp_post(&mcp.url(), None, &initialize())).await;
        assert_eq!(reply.status, 401);
    }
    let recorded = mcp.requests();
    assert_eq!(recorded.len(), 2);
    assert!(
        recorded
            .iter()
            .all(|r| r.rpc_method.as_deref() == Some("initialize"))
    );
    // The fault was not used up by the refusals.
    let token = access_token(&http, &auth, &cred, None).await;
    let reply = http
        .send(mcp_post(&mcp.url(), Some(&token), &initialize()))
        .await;
    assert_eq!(reply.status, 500);
    let reply = http
        .send(mcp_post(&mcp.url(), Some(&token), &initialize()))
        .await;
    assert_eq!(reply.status, 200);
    assert_eq!(mcp.requests().len(), 4);
    assert_eq!(
        mcp.requests()[2].header("authorization"),
        Some(format!("Bearer {token}").as_str())
    );
    // Metadata fetches are recorded as requests off the endpoint.
    http.get(&mcp.resource_metadata_url().unwrap()).await;
    let last = mcp.requests().pop().unwrap();
    assert_eq!(last.path, "/.well-known/oauth-protected-resource/mcp");
    assert_eq!(last.era, None);
}

#[tokio::test]
async fn every_era_and_method_is_protected() {
    let _shared = crate::support::shared();
    let (auth, cred) = auth_with_public_client(AuthConfig::default());
    let http = Http::new();
    let token = access_token(&http, &auth, &cred, None).await;
    for eras in Eras::ALL {
        let mcp = TestServer::start(
            ServerConfig::default()
                .with_eras(eras)
                .with_authorization(auth.resource()),
        );
        let url = mcp.url();
        for method in [Method::POST, Method::GET, Method::DELETE] {
            let req = if method == Method::POST {
                mcp_post(&url, None, &initialize())
            } else {
                bearer(method.clone(), &url, None)
            };
            let reply = http.send(req).await;
            assert_eq!(reply.status, 401, "{eras} {method}");
            assert!(
                reply
                    .header("www-authenticate")
                    .unwrap()
                    .starts_with("Bearer error=\"invalid_token\""),
                "{eras} {method}"
            );
            // With the token, whatever the era answers, it is no 401.
            let req = if method == Method::POST {
                mcp_post(&url, Some(&token), &initialize())
            } else {
                bearer(method.clone(), &url, Some(&token))
            };
            let status = http.status(req).await;
            assert_ne!(status, 401, "{eras} {method}");
        }
        if eras == Eras::HttpSse {
            // The message path too.
            let reply = http
                .send(mcp_post(
                    &format!("http://{}/messages/?session_id=x", mcp.addr()),
                    None,
                    &initialize(),
                ))
                .await;
            assert_eq!(reply.status, 401);
        }
        assert_eq!(
            mcp.requests().len(),
            if eras == Eras::HttpSse { 7 } else { 6 },
            "{eras}"
        );
    }
}

#[tokio::test]
async fn unprotected_servers_are_unchanged() {
    let _shared = crate::support::shared();
    let mcp = TestServer::start(ServerConfig::default());
    let http = Http::new();
    assert_eq!(mcp.resource_metadata_url(), None);
    let reply = http.send(mcp_post(&mcp.url(), None, &initialize())).await;
    assert_eq!(reply.status, 200);
    assert!(reply.header("www-authenticate").is_none());
    assert!(reply.header("mcp-session-id").is_some());
    // A token, even a made-up one, is ignored.
    let reply = http
        .send(mcp_post(&mcp.url(), Some("anything"), &initialize()))
        .await;
    assert_eq!(reply.status, 200);
    let origin = format!("http://{}", mcp.addr());
    for path in [
        "/.well-known/oauth-protected-resource/mcp",
        "/.well-known/oauth-protected-resource",
    ] {
        let reply = http.get(&format!("{origin}{path}")).await;
        assert_eq!(reply.status, 404, "{path}");
    }
}

// ---------------------------------------------------------------- observability

#[tokio::test]
async fn requests_stats_and_clear() {
    let _shared = crate::support::shared();
    let (auth, cred) = auth_with_public_client(AuthConfig::default().with_path_prefix("/p"));
    let http = Http::new();
    http.get(&auth.metadata_url()).await;
    tokens_for(
        &http,
        &auth,
        &cred,
        Some("a b"),
        Some("http://127.0.0.1:1/mcp"),
    )
    .await;
    http.get(&format!("{}/nowhere", auth.issuer())).await;
    let requests = auth.requests();
    let paths: Vec<&str> = requests.iter().map(|r| r.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "/.well-known/oauth-authorization-server/p",
            "/p/authorize",
            "/p/token",
            "/p/nowhere",
        ]
    );
    let authorize = &requests[1];
    assert_eq!(authorize.method, Method::GET);
    assert_eq!(authorize.query_param("scope"), Some("a b"));
    assert_eq!(authorize.query_param("state"), Some(STATE));
    assert_eq!(authorize.param("resource"), Some("http://127.0.0.1:1/mcp"));
    assert!(authorize.form.is_empty());
    let token = &requests[2];
    assert_eq!(token.method, Method::POST);
    assert_eq!(token.form_param("grant_type"), Some("authorization_code"));
    assert_eq!(token.form_param("client_id"), Some("pub-client"));
    assert_eq!(
        token.header("content-type"),
        Some("application/x-www-form-urlencoded")
    );
    let stats = auth.stats();
    assert_eq!(
        (
            stats.metadata_requests,
            stats.authorize_requests,
            stats.token_requests,
            stats.tokens_issued
        ),
        (1, 1, 1, 1)
    );
    auth.clear();
    assert!(auth.requests().is_empty());
    assert!(auth.registrations().is_empty());
    assert_eq!(auth.stats(), Default::default());
    // Tokens and clients survive a clear.
    assert_eq!(auth.tokens().len(), 1);
    tokens_for(&http, &auth, &cred, None, None).await;
    assert_eq!(auth.stats().tokens_issued, 1);
}

#[tokio::test]
async fn shutdown_closes_the_port() {
    let _shared = crate::support::shared();
    let auth = AuthServer::start(AuthConfig::default());
    let url = auth.metadata_url();
    let http = Http::new();
    assert_eq!(http.get(&url).await.status, 200);
    auth.shutdown();
    let after = timeout(LIMIT, http.0.send(get(&url)))
        .await
        .expect("in time");
    assert!(after.is_err(), "still answering after shutdown");
}
