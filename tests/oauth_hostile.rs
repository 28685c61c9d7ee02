//! OAuth against hostile authorization servers, protected resources and
//! neighbours: every defect found in review has its test here.

mod support;

use std::sync::Arc;
use std::time::Duration;

use mcp_scoped_http::Connector;
use mcp_scoped_http::oauth::{
    ClientCredentials, CredentialStore, HeadlessAgent, MemoryStore, OAuth, TokenAuthMethod,
};
use serde_json::json;
use support::*;

#[path = "support/hostile_http.rs"]
mod hostile_http;

/// Nothing listens there: the headless agent reads the redirect from
/// `Location`.
const REDIRECT: &str = "http://127.0.0.1:9/callback";

fn headless() -> OAuth {
    OAuth::new(HeadlessAgent::new(REDIRECT))
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
                oauth = oauth.client(credentials, Some(TRUSTED));
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
