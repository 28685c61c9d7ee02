//! OAuth 2.1 against the test kit's authorization server: the flow in
//! every era with owned and borrowed clients, each scenario ending with the
//! baseline check; step-up, refresh, refusals, the caller's store.

use crate::support::hostile_http;

use std::sync::Arc;
use std::time::Duration;

use crate::support::baseline::{Caller, scene};
use crate::support::oauth::{call_first_tool, headless, protected};
use crate::support::*;
use mcp_scoped_http::oauth::{CredentialStore, MemoryStore, OAuth};
use mcp_scoped_http::{Connector, SessionRelease};
use mcp_scoped_http_testkit::{AuthConfig, AuthFault, AuthServer, ResourceFault, ServerStats};
use serde_json::json;

fn connector(server: &TestServer, oauth: &OAuth, caller: Option<&Caller>) -> Connector {
    let mut connector = Connector::new(server.url()).oauth(oauth.clone());
    if let Some(caller) = caller {
        connector = connector.client(caller.client.clone());
    }
    connector
}

/// DELETEs owed for what the server saw: 2025 sessions only.
fn deletes(eras: Eras, stats: &ServerStats) -> usize {
    match eras {
        Eras::Streamable2025 => stats.sessions_created,
        _ => 0,
    }
}

#[test]
fn every_era_authorizes_on_the_first_refusal_and_releases_everything() {
    scenario(async {
        for eras in [Eras::Streamable2025, Eras::Modern, Eras::HttpSse] {
            for borrowed in [false, true] {
                let auth = AuthServer::start(AuthConfig::default());
                let (server, caller, baseline) = scene(protected(eras, auth.resource())).await;
                let caller = borrowed.then_some(&caller);
                let label = format!("{eras}, borrowed {borrowed}");

                let session = connector(&server, &headless(), caller)
                    .connect()
                    .await
                    .unwrap_or_else(|e| panic!("{label}: {e}"));
                call_first_tool(&session).await.expect("a tool call");
                session.close().await;
                let stats = server.stats();
                baseline.check(&server, deletes(eras, &stats)).await;

                let auth_stats = auth.stats();
                assert_eq!(auth_stats.registrations, 1, "{label}: {auth_stats:?}");
                assert_eq!(auth_stats.authorize_requests, 1, "{label}");
                assert_eq!(auth_stats.code_grants, 1, "{label}");
                let registration = &auth.registrations()[0];
                assert_eq!(registration["application_type"], "native", "{label}");
                let authorize = auth
                    .requests()
                    .into_iter()
                    .find(|r| r.path.ends_with("/authorize"))
                    .expect("an authorization request");
                assert_eq!(authorize.query_param("code_challenge_method"), Some("S256"));
                assert_eq!(
                    authorize.query_param("resource"),
                    Some(server.url().as_str()),
                    "{label}: the resource, verbatim"
                );
                assert!(authorize.query_param("state").is_some());
                // The bearer goes to the endpoint only; the authorization
                // server sees client credentials, never it.
                let token = &auth.tokens()[0].access_token;
                for request in auth.requests() {
                    let header = request.header("authorization").unwrap_or("");
                    assert!(!header.contains(token.as_str()), "{label}: {request:?}");
                }
                let sent_bearer = server
                    .requests()
                    .iter()
                    .filter(|r| r.header("x-caller").is_none())
                    .filter(|r| r.header("authorization") == Some(&format!("Bearer {token}")))
                    .count();
                assert!(sent_bearer >= 2, "{label}: {sent_bearer}");
            }
        }
    });
}

#[test]
fn a_step_up_asks_for_the_union_of_scopes_and_sends_the_call_again() {
    scenario(async {
        let auth = AuthServer::start(AuthConfig::default());
        let resource = auth
            .resource()
            .with_tool_scope("tool-000", "mcp:write")
            .with_tool_scope("tool-001", "mcp:admin");
        let (server, _caller, baseline) = scene(protected(Eras::Streamable2025, resource)).await;
        let session = connector(&server, &headless(), None)
            .connect()
            .await
            .expect("connect");
        for tool in ["tool-000", "tool-001", "tool-000"] {
            session
                .call_tool(tool, json!({}))
                .await
                .unwrap_or_else(|e| panic!("{tool}, after the step-up: {e}"));
        }
        session.close().await;
        baseline
            .check(&server, server.stats().sessions_created)
            .await;
        // No scope at first (none needed, none listed), then each step-up
        // adds to what was asked: the last token serves both tools.
        let scopes: Vec<Option<String>> = auth
            .requests()
            .into_iter()
            .filter(|r| r.path.ends_with("/authorize"))
            .map(|r| r.query_param("scope").map(str::to_owned))
            .collect();
        assert_eq!(
            scopes,
            [
                None,
                Some("mcp:write".to_owned()),
                Some("mcp:write mcp:admin".to_owned())
            ]
        );
    });
}

#[test]
fn a_server_that_keeps_asking_for_more_scope_is_refused_within_bounds() {
    scenario(async {
        let auth = AuthServer::start(AuthConfig::default());
        let resource = auth.resource().with_fault(ResourceFault::StepUpLoop);
        let (server, _caller, baseline) = scene(protected(Eras::Streamable2025, resource)).await;
        let session = connector(&server, &headless(), None)
            .connect()
            .await
            .expect("connect (only tools/call loops)");
        let error = call_first_tool(&session).await.expect_err("refused");
        assert!(error.is_auth(), "{error:?}");
        assert!(auth.stats().authorize_requests <= 3, "{:?}", auth.stats());
        // The session itself is fine.
        session.request("ping", None).await.expect("ping");
        session.close().await;
        baseline
            .check(&server, server.stats().sessions_created)
            .await;
    });
}

/// A server whose metadata or redirect does not check out: the flow stops
/// before the step it would have fed, and nothing is left.
#[test]
fn refusals_stop_before_the_next_step_and_leave_nothing() {
    scenario(async {
        type Check = fn(&mcp_scoped_http_testkit::AuthStats) -> bool;
        let cases: [(&str, Option<AuthFault>, bool, Check); 5] = [
            ("wrong issuer", Some(AuthFault::WrongIssuer), false, |s| {
                s.registrations + s.authorize_requests + s.token_requests == 0
            }),
            ("no S256", Some(AuthFault::NoS256), false, |s| {
                s.authorize_requests + s.token_requests == 0
            }),
            ("wrong iss", Some(AuthFault::WrongIss), false, |s| {
                s.authorize_requests == 1 && s.token_requests == 0
            }),
            ("missing iss", Some(AuthFault::MissingIss), false, |s| {
                s.authorize_requests == 1 && s.token_requests == 0
            }),
            ("another resource", None, true, |s| s.metadata_requests == 0),
        ];
        for (name, fault, other_resource, check) in cases {
            for borrowed in [false, true] {
                let mut config = AuthConfig::default();
                if let Some(fault) = fault.clone() {
                    config = config.with_fault(fault);
                }
                let auth = AuthServer::start(config);
                let mut resource = auth.resource();
                if other_resource {
                    resource = resource.with_resource("http://127.0.0.1:1/mcp");
                }
                let (server, caller, baseline) =
                    scene(protected(Eras::Streamable2025, resource)).await;
                let caller = borrowed.then_some(&caller);
                let error = connector(&server, &headless(), caller)
                    .connect()
                    .await
                    .expect_err(name);
                assert!(error.is_auth(), "{name}: {error:?}");
                let stats = auth.stats();
                assert!(check(&stats), "{name}: {stats:?}");
                baseline.check(&server, 0).await;
            }
        }
    });
}

#[test]
fn an_expired_token_is_refreshed_once_for_concurrent_requests() {
    scenario(async {
        let auth = AuthServer::start(AuthConfig::default());
        let (server, _caller, baseline) =
            scene(protected(Eras::Streamable2025, auth.resource())).await;
        let session = Arc::new(
            connector(&server, &headless(), None)
                .connect()
                .await
                .expect("connect"),
        );
        auth.expire_all_tokens();
        let calls: Vec<_> = (0..8)
            .map(|_| {
                let session = session.clone();
                tokio::spawn(async move { call_first_tool(&session).await })
            })
            .collect();
        for call in calls {
            call.await
                .expect("joined")
                .expect("a call after the refresh");
        }
        let stats = auth.stats();
        assert_eq!(stats.refresh_grants, 1, "single flight: {stats:?}");
        assert_eq!(stats.authorize_requests, 1, "{stats:?}");

        // A refused refresh runs the whole flow again.
        auth.push_fault(AuthFault::RejectRefresh);
        auth.expire_all_tokens();
        call_first_tool(&session)
            .await
            .expect("a call after the flow");
        let stats = auth.stats();
        assert_eq!(stats.refresh_rejections, 1, "{stats:?}");
        assert_eq!(stats.authorize_requests, 2, "{stats:?}");

        Arc::into_inner(session).expect("one owner").close().await;
        baseline
            .check(&server, server.stats().sessions_created)
            .await;
    });
}

#[test]
fn the_callers_store_is_shared_and_never_cleared_by_a_failure() {
    scenario(async {
        let auth = AuthServer::start(AuthConfig::default());
        let (server, _caller, baseline) =
            scene(protected(Eras::Streamable2025, auth.resource())).await;
        let store = Arc::new(MemoryStore::new());
        let oauth = headless().store(store.clone());

        let first = connector(&server, &oauth, None)
            .connect()
            .await
            .expect("first");
        first.close().await;
        // Another session with the same store uses its token.
        let second = connector(&server, &oauth, None)
            .connect()
            .await
            .expect("second");
        second.close().await;
        assert_eq!(auth.stats().authorize_requests, 1, "{:?}", auth.stats());

        // The token is revoked and the next flow is refused: the store
        // keeps what it had.
        let kept = store.token(&server.url()).expect("a token in the store");
        let client = store.client(&auth.issuer()).expect("a client in the store");
        auth.revoke_all_tokens();
        auth.push_fault(AuthFault::WrongIss);
        let error = connector(&server, &oauth, None)
            .connect()
            .await
            .expect_err("refused");
        assert!(error.is_auth(), "{error:?}");
        assert_eq!(store.token(&server.url()), Some(kept));
        assert_eq!(store.client(&auth.issuer()), Some(client));
        baseline
            .check(&server, server.stats().sessions_created)
            .await;
    });
}

#[test]
fn a_listeners_refusal_never_runs_the_user_agent() {
    scenario(async {
        let auth = AuthServer::start(AuthConfig::default().with_refresh_tokens(false));
        let server = TestServer::start(
            ServerConfig::default()
                .with_listen(ListenMode::Open)
                .with_authorization(auth.resource()),
        );
        let session = connector(&server, &headless(), None)
            .connect()
            .await
            .expect("connect");
        let before = auth.stats().authorize_requests;
        // Tokens revoked: the DELETE at close is refused, and neither it
        // nor the listener's next GET asks the user agent.
        auth.revoke_all_tokens();
        let released = session.close().await;
        assert_eq!(auth.stats().authorize_requests, before);
        assert!(
            matches!(&released.session, SessionRelease::DeleteFailed(e) if e.is_auth()),
            "{released:?}"
        );
    });
}

#[test]
fn the_flow_is_bounded_by_the_request_timeout() {
    scenario(async {
        let auth = AuthServer::start(
            AuthConfig::default().with_fault(AuthFault::SlowToken(Duration::from_secs(30))),
        );
        let (server, _caller, baseline) =
            scene(protected(Eras::Streamable2025, auth.resource())).await;
        let error = connector(&server, &headless(), None)
            .request_timeout(Duration::from_millis(500))
            .connect()
            .await
            .expect_err("timed out");
        assert!(error.is_timeout(), "{error:?}");
        baseline.check(&server, 0).await;
    });
}

#[test]
fn sessions_sharing_a_store_refresh_once_between_them() {
    scenario(async {
        let auth = AuthServer::start(AuthConfig::default());
        let (server, _caller, baseline) =
            scene(protected(Eras::Streamable2025, auth.resource())).await;
        let oauth = headless().store(Arc::new(MemoryStore::new()));
        let mut sessions = Vec::new();
        for _ in 0..2 {
            let session = connector(&server, &oauth, None)
                .connect()
                .await
                .expect("connect");
            sessions.push(Arc::new(session));
        }
        assert_eq!(
            auth.stats().authorize_requests,
            1,
            "the second used the store"
        );
        auth.expire_all_tokens();
        let calls: Vec<_> = (0..8)
            .map(|i| {
                let session = sessions[i % 2].clone();
                tokio::spawn(async move { call_first_tool(&session).await })
            })
            .collect();
        for call in calls {
            call.await
                .expect("joined")
                .expect("a call after the refresh");
        }
        // The refresh token rotates: a second refresh with the old one
        // would be refused and run the whole flow again.
        let stats = auth.stats();
        assert_eq!(stats.refresh_grants, 1, "{stats:?}");
        assert_eq!(stats.authorize_requests, 1, "{stats:?}");
        for session in sessions {
            Arc::into_inner(session).expect("one owner").close().await;
        }
        baseline
            .check(&server, server.stats().sessions_created)
            .await;
    });
}

/// Two `OAuth` values sharing a store, the second a clone changed by a
/// builder call (or another value given the same store): each had its own
/// single-flight locks, so both sessions refreshed at once and presented
/// the same rotating refresh token twice (an authorization server that
/// detects reuse revokes the whole grant). Single flight is per store now.
#[test]
fn oauth_values_sharing_a_store_refresh_once_between_them() {
    scenario(async {
        for variant in ["clone then builder", "two values, one store"] {
            let auth = AuthServer::start(AuthConfig::default());
            let (server, _caller, baseline) =
                scene(protected(Eras::Streamable2025, auth.resource())).await;
            let store: Arc<dyn CredentialStore> = Arc::new(MemoryStore::new());
            let first = headless().store(store.clone());
            let second = match variant {
                "clone then builder" => first.clone().client_name("another name"),
                _ => headless().store(store.clone()),
            };
            let mut sessions = Vec::new();
            for oauth in [&first, &second] {
                let session = connector(&server, oauth, None)
                    .connect()
                    .await
                    .expect("connect");
                sessions.push(Arc::new(session));
            }
            assert_eq!(
                auth.stats().authorize_requests,
                1,
                "{variant}: the second used the store"
            );
            for _round in 0..3 {
                auth.expire_all_tokens();
                let before = auth.stats();
                let calls: Vec<_> = (0..8)
                    .map(|i| {
                        let session = sessions[i % 2].clone();
                        tokio::spawn(async move { call_first_tool(&session).await })
                    })
                    .collect();
                for call in calls {
                    call.await
                        .expect("joined")
                        .expect("a call after the refresh");
                }
                let stats = auth.stats();
                assert_eq!(
                    stats.refresh_grants - before.refresh_grants,
                    1,
                    "{variant}: the rotating refresh token was presented more than once ({stats:?})"
                );
                assert_eq!(stats.authorize_requests, 1, "{variant}: {stats:?}");
            }
            for session in sessions {
                Arc::into_inner(session).expect("one owner").close().await;
            }
            baseline
                .check(&server, server.stats().sessions_created)
                .await;
        }
    });
}

/// An authorization server whose endpoints are plain HTTP to another
/// machine: no code, verifier or secret is sent there.
#[test]
fn plain_http_endpoints_on_another_machine_are_refused() {
    scenario(async {
        let server = hostile_http::Server::start(|seen, _| async move {
            let origin = format!("http://{}", seen.header("host").expect("a host header"));
            match (seen.method.as_str(), seen.path.as_str()) {
                ("GET", "/.well-known/oauth-protected-resource/mcp") => {
                    hostile_http::json_response(
                        200,
                        &json!({"resource": format!("{origin}/mcp"), "authorization_servers": [origin]}),
                    )
                }
                ("GET", "/.well-known/oauth-authorization-server") => hostile_http::json_response(
                    200,
                    &json!({
                        "issuer": origin,
                        "authorization_endpoint": "http://as.invalid/authorize",
                        "token_endpoint": "http://as.invalid/token",
                        "registration_endpoint": "http://as.invalid/register",
                        "code_challenge_methods_supported": ["S256"],
                    }),
                ),
                _ => {
                    let mut refused =
                        hostile_http::json_response(401, &json!({"error": "invalid_token"}));
                    refused.headers_mut().insert(
                        "www-authenticate",
                        http::HeaderValue::from_static("Bearer error=\"invalid_token\""),
                    );
                    refused
                }
            }
        });
        let error = Connector::new(server.url("/mcp"))
            .oauth(headless())
            .protocol_version(mcp_scoped_http::ProtocolVersion::V2025_11_25)
            .connect()
            .await
            .expect_err("refused");
        assert!(error.is_auth(), "{error:?}");
        assert!(error.to_string().contains("plain HTTP"), "{error}");
    });
}

#[test]
fn a_session_dropped_without_close_releases_everything_in_every_era() {
    scenario(async {
        for eras in [Eras::Streamable2025, Eras::Modern, Eras::HttpSse] {
            for borrowed in [false, true] {
                let auth = AuthServer::start(AuthConfig::default());
                let (server, caller, baseline) = scene(protected(eras, auth.resource())).await;
                let caller = borrowed.then_some(&caller);
                let session = connector(&server, &headless(), caller)
                    .connect()
                    .await
                    .expect("connect");
                call_first_tool(&session).await.expect("a call");
                drop(session);
                mcp_scoped_http::shutdown().await;
                let ended =
                    eventually(Duration::from_secs(5), || server.stats().live_sessions == 0).await;
                assert!(ended, "{eras}, borrowed {borrowed}: {:?}", server.stats());
                let stats = server.stats();
                baseline.check(&server, deletes(eras, &stats)).await;
                // The reaper's DELETE carried the session's token.
                for delete in seen_http(&server, http::Method::DELETE) {
                    let header = delete.header("authorization").unwrap_or("");
                    assert!(header.starts_with("Bearer "), "{eras}: {header:?}");
                }
            }
        }
    });
}

/// An expired 2025 session is replaced with the token in hand: the new
/// `initialize` carries it, nothing is authorized again, and a call
/// dropped at every poll of that re-initialize leaves every session the
/// server minted ended.
#[test]
fn re_initialize_carries_the_token_and_a_drop_at_every_poll_leaves_nothing() {
    scenario(async {
        let auth = AuthServer::start(AuthConfig::default());
        let (server, _caller, baseline) =
            scene(protected(Eras::Streamable2025, auth.resource())).await;
        let session = connector(&server, &headless(), None)
            .connect()
            .await
            .expect("connect");
        let mut completed = false;
        for polls in 0..2_000 {
            // Settled on a live session (a renewal a drop left behind has
            // finished), then expired.
            call_first_tool(&session).await.expect("a call");
            server.expire_sessions();
            if let Some(called) = poll_at_most(call_first_tool(&session), polls).await {
                called.expect("a call after re-initialize");
                completed = true;
                break;
            }
        }
        assert!(completed, "the call completes within the bound");
        assert_eq!(auth.stats().authorize_requests, 1, "{:?}", auth.stats());
        for initialize in seen(&server, "initialize") {
            let header = initialize.header("authorization").unwrap_or("");
            assert!(header.starts_with("Bearer "), "{header:?}");
        }
        session.close().await;
        mcp_scoped_http::shutdown().await;
        let settled = eventually(Duration::from_secs(5), || {
            sessions_settled(&server.session_log())
        })
        .await;
        assert!(settled, "{:?}", server.session_log());
        assert!(server.stats().sessions_created > 2);
        baseline.check(&server, server.stats().deletes).await;
    });
}
