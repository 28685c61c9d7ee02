//! OAuth against hostile authorization servers, protected resources and
//! neighbours: every defect found in review has its test here.

mod support;

use std::sync::Arc;
use std::time::Duration;

use mcp_scoped_http::Connector;
use mcp_scoped_http::oauth::{ClientCredentials, CredentialStore, MemoryStore, TokenAuthMethod};
use mcp_scoped_http::testkit::{AuthConfig, AuthFault, AuthServer};
use serde_json::json;
use support::oauth::{call_first_tool, headless};
use support::*;

#[path = "support/hostile_http.rs"]
mod hostile_http;

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
// tests/oauth.rs, `sessions_sharing_a_store_refresh_once_between_them`.

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
