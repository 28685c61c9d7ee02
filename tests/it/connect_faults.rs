//! Failure scenarios F01-F11 of FAULTS.md: opening, initialize, the
//! initialized notification and the listening stream. Each runs over an
//! owned and a borrowed client and ends with the baseline check.

use std::time::{Duration, Instant};

use crate::support::baseline::World;
use crate::support::*;
use http::Method;
use mcp_scoped_http::{Connector, Error, ProtocolVersion, SessionRelease};
use serde_json::json;

const TOKEN: &str = "secret-token";
const BEARER: &str = "Bearer secret-token";
/// "At once": generous, so a loaded machine does not flake, yet far from a hang.
const PROMPT: Duration = Duration::from_secs(2);
/// Past this a connect is considered hung.
const HUNG: Duration = Duration::from_secs(20);

impl World {
    fn connector(&self, borrowed: bool) -> Connector {
        self.connector_to(self.server.url(), borrowed)
    }

    fn connector_to(&self, url: String, borrowed: bool) -> Connector {
        let connector = Connector::new(url).bearer(TOKEN);
        if borrowed {
            connector.client(self.caller.client.clone())
        } else {
            connector
        }
    }

    /// Every request of ours (not the caller's own).
    fn ours(&self) -> Vec<RecordedRequest> {
        self.server
            .requests()
            .into_iter()
            .filter(|r| r.header("x-caller").is_none())
            .collect()
    }

    async fn check(&self, deletes: usize) {
        self.baseline.check(&self.server, deletes).await;
    }
}

fn mode(borrowed: bool) -> &'static str {
    if borrowed { "borrowed" } else { "owned" }
}

/// Runs a connect that must fail, and how long it took to.
async fn fails(connector: Connector) -> (Error, Duration) {
    let started = Instant::now();
    match tokio::time::timeout(HUNG, connector.connect()).await {
        Ok(Ok(session)) => panic!("connect succeeded: {session:?}"),
        Ok(Err(error)) => (error, started.elapsed()),
        Err(_) => panic!("connect hung for {HUNG:?}"),
    }
}

/// A connect that must fail at once.
async fn fails_at_once(connector: Connector) -> Error {
    let (error, took) = fails(connector).await;
    assert!(took < PROMPT, "took {took:?}: {error}");
    error
}

/// Connects, calls a tool, closes: the path a retry must take.
async fn works(connector: Connector) {
    let session = connector.connect().await.expect("the retry connects");
    let result = session.call_tool("tool-000", json!({})).await.unwrap();
    assert_eq!(result["structuredContent"]["tool"], "tool-000");
    let released = session.close().await;
    assert!(
        matches!(released.session, SessionRelease::Deleted(s) if s == 200),
        "{released:?}"
    );
}

/// No request of ours ever carried a session id, and none was a DELETE.
fn no_session_id_was_sent(world: &World) {
    for r in world.ours() {
        assert_eq!(
            r.header("mcp-session-id"),
            None,
            "{} {:?}",
            r.method,
            r.rpc_method
        );
        assert_ne!(r.method, Method::DELETE);
    }
}

/// The one DELETE of ours: authenticated, and carrying a session id.
fn the_delete(world: &World) -> RecordedRequest {
    let deletes = seen_http(&world.server, Method::DELETE);
    assert_eq!(deletes.len(), 1, "exactly one DELETE");
    let delete = deletes.into_iter().next().unwrap();
    assert_eq!(
        delete.header("authorization"),
        Some(BEARER),
        "DELETE authenticated"
    );
    assert!(
        delete.header("mcp-session-id").is_some(),
        "DELETE names the session"
    );
    delete
}

// ------------------------------------------------------------------- F01

fn refused_url() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    format!("http://127.0.0.1:{port}/mcp")
}

#[test]
fn f01_connection_refused_is_a_transport_error_and_a_retry_works() {
    scenario(async {
        for borrowed in [false, true] {
            let world = World::new(ServerConfig::default()).await;
            let error = fails_at_once(world.connector_to(refused_url(), borrowed)).await;
            assert!(error.is_transport(), "{}: {error:?}", mode(borrowed));
            assert!(error.cleanup_errors().is_empty(), "{error:?}");
            assert_eq!(world.server.stats().deletes, 0);

            works(world.connector(borrowed)).await;
            world.check(1).await;
        }
    });
}

#[test]
fn f01_a_host_that_does_not_resolve_is_a_transport_error_and_a_retry_works() {
    scenario(async {
        for borrowed in [false, true] {
            let world = World::new(ServerConfig::default()).await;
            let (error, _) =
                fails(world.connector_to("http://nonexistent.invalid/mcp".into(), borrowed)).await;
            assert!(error.is_transport(), "{}: {error:?}", mode(borrowed));
            assert!(error.cleanup_errors().is_empty(), "{error:?}");

            works(world.connector(borrowed)).await;
            world.check(1).await;
        }
    });
}

// ------------------------------------------------------------------- F03

#[test]
fn f03_a_failed_delete_after_a_failed_initialize_is_attached_not_returned() {
    scenario(async {
        for borrowed in [false, true] {
            let world = World::new(
                ServerConfig::default()
                    .with_fault(
                        Fault::on_rpc(
                            "initialize",
                            FaultAction::ProtocolVersion("2099-01-01".into()),
                        )
                        .times(1),
                    )
                    .with_fault(Fault::on_http(Method::DELETE, FaultAction::status(500)).times(1)),
            )
            .await;
            let error = fails_at_once(world.connector(borrowed)).await;
            assert!(
                error.is_protocol(),
                "{}: the first error: {error:?}",
                mode(borrowed)
            );
            assert_eq!(error.status(), None);
            let cleanup = error.cleanup_errors();
            assert_eq!(cleanup.len(), 1, "{error:?}");
            assert!(cleanup[0].is_status(), "{:?}", cleanup[0]);
            assert_eq!(
                cleanup[0].status(),
                Some(http::StatusCode::INTERNAL_SERVER_ERROR)
            );
            assert!(error.to_string().contains("cleanup also failed"), "{error}");
            the_delete(&world);
            world.check(1).await;
        }
    });
}

#[test]
fn f03_a_hanging_delete_is_cut_by_its_timeout_and_the_first_error_stays() {
    scenario(async {
        for borrowed in [false, true] {
            let world = World::new(
                ServerConfig::default()
                    .with_fault(
                        Fault::on_rpc(
                            "initialize",
                            FaultAction::ProtocolVersion("2099-01-01".into()),
                        )
                        .times(1),
                    )
                    .with_fault(Fault::on_http(Method::DELETE, FaultAction::Hang).times(1)),
            )
            .await;
            let connector = world
                .connector(borrowed)
                .delete_timeout(Duration::from_millis(100));
            let error = fails_at_once(connector).await;
            assert!(
                error.is_protocol(),
                "{}: the first error: {error:?}",
                mode(borrowed)
            );
            let cleanup = error.cleanup_errors();
            assert_eq!(cleanup.len(), 1, "{error:?}");
            assert!(cleanup[0].is_timeout(), "{:?}", cleanup[0]);
            the_delete(&world);
            world.check(1).await;
        }
    });
}

// ------------------------------------------------------------------- F04

#[test]
fn f04_the_callers_deadline_wins_over_a_silent_server() {
    scenario(async {
        for borrowed in [false, true] {
            let world = World::new(
                ServerConfig::default()
                    .with_fault(Fault::on_rpc("initialize", FaultAction::Hang).times(1)),
            )
            .await;
            // A short DELETE bound: whatever is left to finish after the
            // caller walks away is bounded by it.
            let connector = world
                .connector(borrowed)
                .delete_timeout(Duration::from_millis(200));
            let started = Instant::now();
            let outcome =
                tokio::time::timeout(Duration::from_millis(50), connector.connect()).await;
            let took = started.elapsed();
            assert!(
                outcome.is_err(),
                "{}: the deadline must win",
                mode(borrowed)
            );
            assert!(took < PROMPT, "the deadline fired after {took:?}");
            assert!(
                eventually(PROMPT, || !seen(&world.server, "initialize").is_empty()).await,
                "the initialize was sent"
            );
            // Nothing lingers past the bound: any pending reap drains promptly.
            tokio::time::timeout(PROMPT, mcp_scoped_http::shutdown())
                .await
                .expect("shutdown drains within the DELETE bound");
            assert_eq!(mcp_scoped_http::ledger().pending_reaps, 0);
            no_session_id_was_sent(&world);
            world.check(0).await;
        }
    });
}

// ------------------------------------------------------------------- F05

#[test]
fn f05_unauthorized_carries_the_challenge_without_retry_and_spares_other_sessions() {
    scenario(async {
        let challenge = r#"Bearer resource_metadata="http://127.0.0.1/.well-known/oauth-protected-resource", scope="mcp""#;
        for borrowed in [false, true] {
            let world = World::new(ServerConfig::default()).await;
            // Another session on the caller's client, with its own credentials.
            let other = Connector::new(world.server.url())
                .client(world.caller.client.clone())
                .bearer("other-token")
                .connect()
                .await
                .unwrap();
            world.server.push_fault(
                Fault::on_rpc("initialize", FaultAction::unauthorized(challenge)).times(1),
            );

            let error = fails_at_once(world.connector(borrowed)).await;
            assert!(error.is_status(), "{}: {error:?}", mode(borrowed));
            assert_eq!(error.status(), Some(http::StatusCode::UNAUTHORIZED));
            assert_eq!(error.www_authenticate(), Some(challenge));
            assert!(error.to_string().contains("401"), "{error}");
            assert!(!format!("{error} {error:?}").contains(TOKEN));
            let ours: Vec<_> = seen(&world.server, "initialize")
                .into_iter()
                .filter(|r| r.header("authorization") == Some(BEARER))
                .collect();
            assert_eq!(ours.len(), 1, "one initialize, no retry loop");

            // The other session keeps working with its own header, and only it.
            let mark = world.server.requests().len();
            other.call_tool("tool-001", json!({})).await.unwrap();
            let call = world.server.requests()[mark..]
                .iter()
                .find(|r| r.rpc_method.as_deref() == Some("tools/call"))
                .cloned()
                .expect("the other session's call");
            let auth: Vec<_> = call.headers.get_all("authorization").iter().collect();
            assert_eq!(auth, ["Bearer other-token"]);
            let released = other.close().await;
            assert!(
                matches!(released.session, SessionRelease::Deleted(_)),
                "{released:?}"
            );
            world.check(1).await;
        }
    });
}

// ------------------------------------------------------------------- F06

#[test]
fn f06_a_broken_answer_to_initialize_fails_at_once_with_its_cause() {
    scenario(async {
        type Expect = fn(&Error) -> bool;
        // (fault, what the error must be, DELETEs: one when the answer still
        // carried a session id)
        let cases: [(&str, FaultAction, Expect, usize); 5] = [
            (
                "403",
                FaultAction::status(403),
                |e| e.is_status() && e.status() == Some(http::StatusCode::FORBIDDEN),
                0,
            ),
            (
                "500",
                FaultAction::status_with_rpc_error(500, -32603, "boom"),
                |e| {
                    e.is_status()
                        && e.status() == Some(http::StatusCode::INTERNAL_SERVER_ERROR)
                        && e.rpc_code() == Some(-32603)
                },
                0,
            ),
            ("cut body", FaultAction::CutBody, Error::is_transport, 0),
            (
                "malformed JSON",
                FaultAction::MalformedJson,
                Error::is_protocol,
                0,
            ),
            (
                "text/html",
                FaultAction::ContentType("text/html".into()),
                Error::is_protocol,
                1,
            ),
        ];
        for (name, action, expect, deletes) in cases {
            for borrowed in [false, true] {
                let world = World::new(
                    ServerConfig::default()
                        .with_fault(Fault::on_rpc("initialize", action.clone()).times(1)),
                )
                .await;
                let error = fails_at_once(world.connector(borrowed)).await;
                assert!(expect(&error), "{name}, {}: {error:?}", mode(borrowed));
                assert!(error.cleanup_errors().is_empty(), "{name}: {error:?}");
                assert_eq!(
                    seen(&world.server, "initialize").len(),
                    1,
                    "{name}: no retry"
                );
                if deletes == 1 {
                    the_delete(&world);
                } else {
                    no_session_id_was_sent(&world);
                }
                world.check(deletes).await;
            }
        }
    });
}

// ------------------------------------------------------------------- F07

#[test]
fn f07_an_initialize_answered_without_its_response_fails_at_once() {
    scenario(async {
        for (name, action) in [
            ("202", FaultAction::Accepted),
            ("SSE without response", FaultAction::SseEndWithoutResponse),
        ] {
            for borrowed in [false, true] {
                let world = World::new(
                    ServerConfig::default()
                        .with_fault(Fault::on_rpc("initialize", action.clone()).times(1)),
                )
                .await;
                let error = fails_at_once(world.connector(borrowed)).await;
                assert!(error.is_protocol(), "{name}, {}: {error:?}", mode(borrowed));
                assert!(
                    seen(&world.server, "notifications/initialized").is_empty(),
                    "{name}: no initialized after a failed initialize"
                );
                no_session_id_was_sent(&world);
                world.check(0).await;
            }
        }
    });
}

// ------------------------------------------------------------------- F08

#[test]
fn f08_an_unknown_protocol_version_deletes_the_session_it_created_once() {
    scenario(async {
        for borrowed in [false, true] {
            let world = World::new(
                ServerConfig::default().with_fault(
                    Fault::on_rpc(
                        "initialize",
                        FaultAction::ProtocolVersion("2099-01-01".into()),
                    )
                    .times(1),
                ),
            )
            .await;
            let error = fails_at_once(world.connector(borrowed)).await;
            assert!(error.is_protocol(), "{}: {error:?}", mode(borrowed));
            assert!(
                error.to_string().contains("2099-01-01"),
                "names the cause: {error}"
            );
            assert!(error.cleanup_errors().is_empty(), "{error:?}");
            the_delete(&world);
            // The DELETE named the session the server minted: it is gone.
            assert_eq!(world.server.stats().sessions_created, 1);
            assert_eq!(world.server.stats().live_sessions, 0);
            assert!(seen(&world.server, "notifications/initialized").is_empty());
            world.check(1).await;
        }
    });
}

#[test]
fn f08_a_result_without_protocol_version_deletes_that_session_id_once() {
    scenario(async {
        let session_id = "f08-session-7c1e";
        for borrowed in [false, true] {
            let body = json!({
                "jsonrpc": "2.0",
                "id": 1,
                "result": {"capabilities": {}, "serverInfo": {"name": "odd", "version": "0"}},
            });
            let world = World::new(
                ServerConfig::default().with_fault(
                    Fault::on_rpc(
                        "initialize",
                        FaultAction::Status {
                            status: 200,
                            content_type: Some("application/json".into()),
                            body: Some(body.to_string()),
                            headers: vec![("Mcp-Session-Id".into(), session_id.into())],
                        },
                    )
                    .times(1),
                ),
            )
            .await;
            // Pinned: the scripted answer's id is that of the first request.
            let connector = world
                .connector(borrowed)
                .protocol_version(ProtocolVersion::V2025_11_25);
            let error = fails_at_once(connector).await;
            assert!(error.is_protocol(), "{}: {error:?}", mode(borrowed));
            assert!(error.to_string().contains("protocolVersion"), "{error}");
            assert!(!format!("{error} {error:?}").contains(session_id));
            let delete = the_delete(&world);
            assert_eq!(delete.header("mcp-session-id"), Some(session_id));
            world.check(1).await;
        }
    });
}

// ------------------------------------------------------------------- F09

#[test]
fn f09_an_invalid_session_id_is_refused_never_echoed_and_never_deleted() {
    scenario(async {
        let long = "L".repeat(4096);
        let cases: [(&str, Vec<u8>); 3] = [
            ("space", b"zqx id-with-space".to_vec()),
            ("obs-text", b"zqx-caf\xe9-\xff".to_vec()),
            ("4096 bytes", long.clone().into_bytes()),
        ];
        for (name, raw) in cases {
            for borrowed in [false, true] {
                let world = World::new(ServerConfig::default().with_fault(
                    Fault::on_rpc("initialize", FaultAction::SessionId(raw.clone())).times(1),
                ))
                .await;
                let error = fails_at_once(world.connector(borrowed)).await;
                assert!(error.is_protocol(), "{name}, {}: {error:?}", mode(borrowed));
                assert!(
                    error.to_string().contains("Mcp-Session-Id"),
                    "{name}: a clear error: {error}"
                );
                let shown = format!("{error} {error:?} {:#?}", error);
                let lossy = String::from_utf8_lossy(&raw);
                assert!(
                    !shown.contains(&*lossy),
                    "{name}: the value is echoed: {shown}"
                );
                assert!(
                    !shown.contains("zqx"),
                    "{name}: part of the value is echoed: {shown}"
                );
                assert!(
                    !shown.contains(&long[..32]),
                    "{name}: part of the value is echoed"
                );
                assert_eq!(world.server.stats().sessions_created, 1);
                no_session_id_was_sent(&world);
                world.check(0).await;
            }
        }
    });
}

// ------------------------------------------------------------------- F10

#[test]
fn f10_a_failed_initialized_notification_fails_connect_and_deletes_the_session() {
    scenario(async {
        type Expect = fn(&Error) -> bool;
        let cases: [(&str, FaultAction, Expect); 3] = [
            ("500", FaultAction::status(500), |e| {
                e.is_status() && e.status() == Some(http::StatusCode::INTERNAL_SERVER_ERROR)
            }),
            (
                "400",
                FaultAction::status_with_rpc_error(400, -32600, "no"),
                |e| e.is_status() && e.status() == Some(http::StatusCode::BAD_REQUEST),
            ),
            (
                "connection reset",
                FaultAction::CloseConnection,
                Error::is_transport,
            ),
        ];
        for (name, action, expect) in cases {
            for borrowed in [false, true] {
                let world = World::new(ServerConfig::default().with_fault(
                    Fault::on_rpc("notifications/initialized", action.clone()).times(1),
                ))
                .await;
                let error = fails_at_once(world.connector(borrowed)).await;
                assert!(expect(&error), "{name}, {}: {error:?}", mode(borrowed));
                assert!(error.cleanup_errors().is_empty(), "{name}: {error:?}");
                // Failed at initialized, not later: no discovery was attempted.
                assert!(seen(&world.server, "tools/list").is_empty(), "{name}");
                the_delete(&world);
                assert_eq!(
                    world.server.stats().live_sessions,
                    0,
                    "{name}: the right id"
                );
                world.check(1).await;
            }
        }
    });
}

// ------------------------------------------------------------------- F11

/// A refusal (405, or a 404 while a `ping` shows the session alive) stops
/// the listener after one GET; a stream that ends at once or a reset
/// connection is retried for the session's life, at the listeners'
/// backoff (issue 20). Either way the session goes on.
#[test]
fn f11_a_listening_stream_that_fails_is_refused_or_retried_and_the_session_goes_on() {
    scenario(async {
        // (case, server, GET attempts expected; `None`: retried)
        let cases: [(&str, ServerConfig, Option<usize>); 4] = [
            (
                "405",
                ServerConfig::default().with_listen(ListenMode::Unsupported),
                Some(1),
            ),
            (
                "404",
                ServerConfig::default()
                    .with_listen(ListenMode::Open)
                    .with_fault(Fault::on_http(Method::GET, FaultAction::status(404))),
                Some(1),
            ),
            (
                "closes at once",
                ServerConfig::default()
                    .with_listen(ListenMode::Open)
                    .with_fault(Fault::on_http(
                        Method::GET,
                        FaultAction::SseEndWithoutResponse,
                    )),
                None,
            ),
            (
                "connection reset",
                ServerConfig::default()
                    .with_listen(ListenMode::Open)
                    .with_fault(Fault::on_http(Method::GET, FaultAction::CloseConnection)),
                None,
            ),
        ];
        for (name, config, attempts) in cases {
            for borrowed in [false, true] {
                let world = World::new(config.clone()).await;
                let before = mcp_scoped_http::ledger();
                let session = world
                    .connector(borrowed)
                    .listen_backoff(Duration::from_millis(10), Duration::from_millis(40))
                    .connect()
                    .await
                    .unwrap();
                let gets = match attempts {
                    Some(attempts) => {
                        assert!(
                            eventually(Duration::from_secs(10), || {
                                mcp_scoped_http::ledger().tasks == before.tasks
                            })
                            .await,
                            "{name}, {}: the listener task is gone after a refusal: {:?}",
                            mode(borrowed),
                            mcp_scoped_http::ledger()
                        );
                        // The task is gone, so no GET can follow: this
                        // count is final.
                        let gets = seen_http(&world.server, Method::GET);
                        assert_eq!(gets.len(), attempts, "{name}: GET attempts");
                        gets
                    }
                    None => {
                        let retried = eventually(Duration::from_secs(10), || {
                            seen_http(&world.server, Method::GET).len() >= 5
                        })
                        .await;
                        assert!(retried, "{name}, {}: listening goes on", mode(borrowed));
                        assert_eq!(
                            mcp_scoped_http::ledger().tasks,
                            before.tasks + 1,
                            "{name}: the listener"
                        );
                        seen_http(&world.server, Method::GET)
                    }
                };
                for get in &gets {
                    assert_eq!(get.header("authorization"), Some(BEARER));
                }
                assert_eq!(world.server.stats().listen_streams_open, 0);

                // Still usable over POST.
                let result = session
                    .call_tool("tool-002", json!({"n": 1}))
                    .await
                    .unwrap();
                assert_eq!(result["structuredContent"]["tool"], "tool-002", "{name}");
                assert_eq!(
                    mcp_scoped_http::ledger().owned_sessions,
                    before.owned_sessions + 1
                );

                let released = session.close().await;
                assert!(
                    matches!(released.session, SessionRelease::Deleted(s) if s == 200),
                    "{name}: {released:?}"
                );
                assert_eq!(released.hooks_removed, 1);
                assert_eq!(released.owned_client_released, !borrowed);
                if let Some(attempts) = attempts {
                    assert_eq!(seen_http(&world.server, Method::GET).len(), attempts);
                }
                world.check(1).await;
            }
        }
    });
}

/// The server expires the new session (404) at each step of connect after
/// `initialize`: `notifications/initialized`, the first page of each list,
/// a later page. Connect fails with the expiry, sends no DELETE for the
/// session the server ended, tries no renewal, and leaves nothing; a retry
/// works. A 404 to `initialize` itself (no session yet) is an HTTP error,
/// not an expiry.
#[test]
fn a_404_at_each_step_of_connect_fails_it_without_a_delete() {
    scenario(async {
        let steps: [(&str, Option<usize>); 6] = [
            ("notifications/initialized", None),
            ("tools/list", Some(1)),
            ("tools/list", Some(2)),
            ("prompts/list", None),
            ("resources/list", None),
            ("resources/templates/list", None),
        ];
        for (method, page) in steps {
            for borrowed in [false, true] {
                let what = format!("{method} {page:?}, {}", mode(borrowed));
                let mut fault = Fault::on_rpc(method, FaultAction::ExpireSession).times(1);
                if let Some(page) = page {
                    fault = fault.page(page);
                }
                let world = World::new(
                    ServerConfig::default()
                        .with_tools(4)
                        .with_page_size(2)
                        .with_fault(fault),
                )
                .await;
                let error = fails_at_once(world.connector(borrowed)).await;
                assert!(error.is_session_expired(), "{what}: {error:?}");
                assert_eq!(seen(&world.server, "initialize").len(), 1, "{what}");
                works(world.connector(borrowed)).await;
                mcp_scoped_http::shutdown().await;
                let log = assert_each_session_deleted_once(&world.server, &what).await;
                assert_eq!(log.len(), 2, "{what}");
                assert!(log[0].expired && log[0].deletes == 0, "{what}: {log:?}");
                world.check(1).await;
            }
        }
        for borrowed in [false, true] {
            let world = World::new(
                ServerConfig::default()
                    .with_fault(Fault::on_rpc("initialize", FaultAction::status(404)).times(1)),
            )
            .await;
            let error = fails_at_once(world.connector(borrowed)).await;
            assert!(
                error.is_status() && !error.is_session_expired(),
                "{error:?}"
            );
            works(world.connector(borrowed)).await;
            world.check(1).await;
        }
    });
}
