//! The F-scenarios of FAULTS.md that apply beyond the 2025 revisions (F04,
//! F05, F06, F07, F10, F11, F12, F13, F18, F20, F23, F24, F25, F26, F27,
//! F29-F31, F33; F02 and F14 are in cancellation.rs), run against the test
//! kit serving 2026-07-28 and the deprecated HTTP+SSE transport, each with
//! an owned and a borrowed client, each found by detection and ending with
//! the baseline check. (The 2025 revisions have
//! their own files: connect_faults.rs, steady_state.rs, close.rs...)
//!
//! Neither era DELETEs: 2026-07-28 has no session, and an HTTP+SSE session
//! ends when its stream closes, which the test kit counts (`live_sessions`).

use std::time::Duration;

use crate::support::baseline::World;
use crate::support::*;
use mcp_scoped_http::{Connector, Error, Session};
use serde_json::json;

const ERAS: [Eras; 2] = [Eras::Modern, Eras::HttpSse];

/// Every (era, borrowed) pair.
fn cases() -> impl Iterator<Item = (Eras, bool)> {
    ERAS.into_iter()
        .flat_map(|eras| [(eras, false), (eras, true)])
}

/// The method that opens `eras`'s session: what a fault on "the opening"
/// targets.
fn opening(eras: Eras) -> &'static str {
    match eras {
        Eras::Modern => "server/discover",
        _ => "initialize",
    }
}

/// An answer with this status and nothing else.
fn bare(status: u16) -> FaultAction {
    FaultAction::Status {
        status,
        content_type: None,
        body: None,
        headers: vec![],
    }
}

async fn world(eras: Eras, config: ServerConfig) -> World {
    World::new(config.with_eras(eras)).await
}

fn connector(world: &World, borrowed: bool) -> Connector {
    let mut connector = Connector::new(world.server.url()).bearer("era-token");
    if borrowed {
        connector = connector.client(world.caller.client.clone());
    }
    connector
}

/// The baseline check, once the server has seen every HTTP+SSE stream of
/// ours close.
async fn check(world: &World, what: &str) {
    mcp_scoped_http::shutdown().await;
    let ended = eventually(Duration::from_secs(5), || {
        world.server.stats().live_sessions == 0
    })
    .await;
    assert!(ended, "{what}: a session left: {:?}", world.server.stats());
    world.baseline.check(&world.server, 0).await;
}

fn what(eras: Eras, borrowed: bool) -> String {
    format!("{eras} {}", if borrowed { "borrowed" } else { "owned" })
}

async fn fails(connector: Connector) -> Error {
    tokio::time::timeout(Duration::from_secs(20), connector.connect())
        .await
        .expect("the connect ends")
        .expect_err("the connect fails")
}

#[test]
fn f04_a_silent_opening_is_cut_by_the_callers_deadline() {
    scenario(async {
        for (eras, borrowed) in cases() {
            let world = world(
                eras,
                ServerConfig::default().with_fault(Fault::on_rpc(opening(eras), FaultAction::Hang)),
            )
            .await;
            let error =
                fails(connector(&world, borrowed).connect_timeout(Duration::from_millis(300)))
                    .await;
            assert!(error.is_timeout(), "{}: {error:?}", what(eras, borrowed));
            check(&world, &what(eras, borrowed)).await;
        }
    });
}

#[test]
fn f05_f06_errors_on_the_opening_are_reported_as_they_are() {
    scenario(async {
        for (eras, borrowed) in cases() {
            for status in [401_u16, 403, 500] {
                let action = FaultAction::Status {
                    status,
                    content_type: None,
                    body: None,
                    headers: if status == 401 {
                        vec![("WWW-Authenticate".into(), "Bearer realm=\"mcp\"".into())]
                    } else {
                        vec![]
                    },
                };
                let world = world(
                    eras,
                    ServerConfig::default().with_fault(Fault::on_rpc(opening(eras), action)),
                )
                .await;
                let error = fails(connector(&world, borrowed)).await;
                let label = format!("{} HTTP {status}", what(eras, borrowed));
                assert_eq!(
                    error.status().map(|s| s.as_u16()),
                    Some(status),
                    "{label}: {error}"
                );
                if status == 401 {
                    assert!(error.www_authenticate().is_some(), "{label}: the challenge");
                }
                assert!(
                    !format!("{error} {error:?}").contains("era-token"),
                    "{label}"
                );
                check(&world, &label).await;
            }
        }
    });
}

#[test]
fn f12_a_failed_page_fails_connect_with_nothing_partial() {
    scenario(async {
        for (eras, borrowed) in cases() {
            let world = world(
                eras,
                ServerConfig::default()
                    .with_tools(9)
                    .with_page_size(3)
                    .with_fault(Fault::on_rpc("tools/list", bare(500)).page(2)),
            )
            .await;
            let error = fails(connector(&world, borrowed)).await;
            assert_eq!(
                error.connect_phase(),
                Some(mcp_scoped_http::ConnectPhase::Discovery),
                "{}: {error}",
                what(eras, borrowed)
            );
            check(&world, &what(eras, borrowed)).await;
        }
    });
}

async fn connected(world: &World, borrowed: bool) -> Session {
    connector(world, borrowed)
        .connect()
        .await
        .expect("the connect succeeds")
}

#[test]
fn f20_f24_one_failed_request_spares_the_rest_and_many_run_at_once() {
    scenario(async {
        for (eras, borrowed) in cases() {
            let world = world(eras, ServerConfig::default()).await;
            let session = connected(&world, borrowed).await;
            world
                .server
                .push_fault(Fault::on_rpc("tools/call", bare(503)).times(1));
            let error = session
                .call_tool("tool-000", json!({"text": "a"}))
                .await
                .expect_err("503");
            assert_eq!(error.status().map(|s| s.as_u16()), Some(503));
            let session = std::sync::Arc::new(session);
            let mut calls = tokio::task::JoinSet::new();
            for i in 0..32 {
                let session = session.clone();
                calls.spawn(async move {
                    let result = session
                        .call_tool("tool-001", json!({"text": i.to_string()}))
                        .await;
                    (i, result)
                });
            }
            while let Some(joined) = calls.join_next().await {
                let (i, result) = joined.expect("the call's task");
                let result =
                    result.unwrap_or_else(|e| panic!("{} call {i}: {e}", what(eras, borrowed)));
                assert!(result.to_string().contains(&format!("\"{i}\"")), "{result}");
            }
            session.close().await;
            check(&world, &what(eras, borrowed)).await;
        }
    });
}

#[test]
fn f25_sessions_with_different_bearers_share_one_borrowed_client() {
    scenario(async {
        for eras in ERAS {
            let world = world(eras, ServerConfig::default()).await;
            let mut sessions = Vec::new();
            for token in ["alpha", "beta"] {
                let session = Connector::new(world.server.url())
                    .client(world.caller.client.clone())
                    .bearer(token)
                    .connect()
                    .await
                    .expect("connects");
                session
                    .call_tool("tool-000", json!({"text": token}))
                    .await
                    .expect("call");
                sessions.push(session);
            }
            for r in world.server.requests() {
                if r.header("x-caller").is_some() {
                    continue;
                }
                let auth = r.header("authorization").unwrap_or_default().to_owned();
                assert!(
                    auth == "Bearer alpha" || auth == "Bearer beta",
                    "{eras}: {} {:?} carried {auth:?}",
                    r.method,
                    r.rpc_method
                );
                if r.rpc_method.as_deref() == Some("tools/call") {
                    let text = r.params().unwrap()["arguments"]["text"].clone();
                    assert_eq!(format!("Bearer {}", text.as_str().unwrap()), auth, "{eras}");
                }
            }
            for session in sessions {
                session.close().await;
            }
            check(&world, &format!("{eras}")).await;
        }
    });
}

#[test]
fn f29_f31_close_twice_with_a_request_in_flight() {
    scenario(async {
        for (eras, borrowed) in cases() {
            let world = world(
                eras,
                ServerConfig::default().with_fault(Fault::on_rpc(
                    "tools/call",
                    FaultAction::Delay(Duration::from_secs(30)),
                )),
            )
            .await;
            let session = connected(&world, borrowed).await;
            let call = session.call_tool("tool-000", json!({"text": "slow"}));
            let close = async {
                // The call is on its way before the close begins.
                let sent = eventually(Duration::from_secs(5), || {
                    world
                        .server
                        .requests()
                        .iter()
                        .any(|r| r.rpc_method.as_deref() == Some("tools/call"))
                })
                .await;
                assert!(sent);
                let (first, second) = tokio::join!(session.close(), session.close());
                (first, second)
            };
            let (called, (first, second)) =
                tokio::time::timeout(Duration::from_secs(10), async { tokio::join!(call, close) })
                    .await
                    .expect("close ends the call at once");
            let error = called.expect_err("the call ends with the close");
            assert!(error.is_closed(), "{}: {error:?}", what(eras, borrowed));
            assert!(
                first.already_closed || second.already_closed,
                "one close did the work"
            );
            drop(session);
            check(&world, &what(eras, borrowed)).await;
        }
    });
}

#[test]
fn f30_a_session_dropped_without_close_releases_everything() {
    scenario(async {
        for (eras, borrowed) in cases() {
            let world = world(eras, ServerConfig::default()).await;
            let session = connected(&world, borrowed).await;
            session
                .call_tool("tool-000", json!({"text": "x"}))
                .await
                .expect("call");
            drop(session);
            check(&world, &what(eras, borrowed)).await;
        }
    });
}

#[test]
fn f07_an_opening_answered_without_its_response_fails_at_once() {
    scenario(async {
        for (eras, borrowed) in cases() {
            // 2026: a discover answered 202 with nothing; HTTP+SSE: an
            // initialize whose answer never comes on the stream, because
            // the POST itself is refused after being "accepted" elsewhere.
            let action = match eras {
                Eras::Modern => FaultAction::Accepted,
                _ => bare(500),
            };
            let world = world(
                eras,
                ServerConfig::default().with_fault(Fault::on_rpc(opening(eras), action)),
            )
            .await;
            let error = fails(connector(&world, borrowed)).await;
            assert!(
                error.is_protocol() || error.is_status(),
                "{}: {error:?}",
                what(eras, borrowed)
            );
            assert!(
                posts(&world, "initialize").len() <= 1,
                "{}",
                what(eras, borrowed)
            );
            check(&world, &what(eras, borrowed)).await;
        }
    });
}

fn posts(world: &World, method: &str) -> Vec<RecordedRequest> {
    world
        .server
        .requests()
        .into_iter()
        .filter(|r| r.rpc_method.as_deref() == Some(method))
        .collect()
}

#[test]
fn f10_a_failed_initialized_over_http_sse_fails_connect_and_ends_the_stream() {
    scenario(async {
        for borrowed in [false, true] {
            let world = world(
                Eras::HttpSse,
                ServerConfig::default()
                    .with_fault(Fault::on_rpc("notifications/initialized", bare(500))),
            )
            .await;
            let error = fails(connector(&world, borrowed)).await;
            assert_eq!(
                error.connect_phase(),
                Some(mcp_scoped_http::ConnectPhase::Initialized),
                "{error}"
            );
            check(&world, &what(Eras::HttpSse, borrowed)).await;
        }
    });
}

#[test]
fn f11_a_refused_subscription_leaves_the_session_usable_and_its_task_gone() {
    scenario(async {
        for borrowed in [false, true] {
            for status in [404_u16, 405, 500] {
                let world = world(
                    Eras::Modern,
                    ServerConfig::default().with_fault(Fault::on_rpc(
                        "subscriptions/listen",
                        FaultAction::Status {
                            status,
                            content_type: None,
                            body: None,
                            headers: vec![],
                        },
                    )),
                )
                .await;
                let session = connected(&world, borrowed).await;
                let label = format!("{} HTTP {status}", what(Eras::Modern, borrowed));
                let listens = || posts(&world, "subscriptions/listen").len();
                if status == 500 {
                    // A server error is not a refusal: listening goes on,
                    // at the listeners' backoff (issue 20).
                    let again = eventually(Duration::from_secs(5), || listens() >= 2).await;
                    assert!(again, "{label}: listening goes on");
                    assert_eq!(session.ledger().tasks, 1, "{label}");
                } else {
                    let gone =
                        eventually(Duration::from_secs(10), || session.ledger().tasks == 0).await;
                    assert!(gone, "{label}: the subscription's task gave up");
                    assert_eq!(listens(), 1, "{label}: a refusal is taken at once");
                }
                session
                    .call_tool("tool-000", json!({"text": "still"}))
                    .await
                    .unwrap_or_else(|e| panic!("{label}: {e}"));
                session.close().await;
                check(&world, &label).await;
            }
        }
    });
}

#[test]
fn f13_f18_discovery_is_all_or_nothing_and_asks_only_for_what_is_offered() {
    scenario(async {
        for (eras, borrowed) in cases() {
            let world = world(
                eras,
                ServerConfig::default().with_fault(Fault::on_rpc("prompts/list", bare(500))),
            )
            .await;
            let error = fails(connector(&world, borrowed)).await;
            assert_eq!(
                error.connect_phase(),
                Some(mcp_scoped_http::ConnectPhase::Discovery),
                "{}: {error}",
                what(eras, borrowed)
            );
            check(&world, &what(eras, borrowed)).await;

            let world = world_without_prompts(eras).await;
            let session = connected(&world, borrowed).await;
            assert!(session.catalog().prompts.is_empty());
            assert!(
                posts(&world, "prompts/list").is_empty(),
                "{}",
                what(eras, borrowed)
            );
            session.close().await;
            check(&world, &what(eras, borrowed)).await;
        }
    });
}

async fn world_without_prompts(eras: Eras) -> World {
    world(eras, ServerConfig::default().with_prompts(0)).await
}

#[test]
fn f23_server_requests_on_the_http_sse_stream_are_answered_at_its_endpoint() {
    scenario(async {
        for borrowed in [false, true] {
            let world = world(Eras::HttpSse, ServerConfig::default()).await;
            let session = connector(&world, borrowed)
                .roots(vec![json!({"uri": "file:///w", "name": "w"})])
                .connect()
                .await
                .expect("connects");
            assert_eq!(world.server.request_listeners("roots/list", json!({})), 1);
            assert_eq!(world.server.request_listeners("ping", json!({})), 1);
            let answered = eventually(Duration::from_secs(5), || {
                world.server.client_answers().len() == 2
            })
            .await;
            assert!(answered, "{:?}", world.server.client_answers());
            let answers = world.server.client_answers();
            assert!(
                answers.iter().any(|a| a.to_string().contains("file:///w")),
                "{answers:?}"
            );
            // Every POST after detection's two probes (to the stream's URL,
            // refused) went to the endpoint the stream named, answers
            // included, with the session's credentials.
            let posts: Vec<RecordedRequest> = world
                .server
                .requests()
                .into_iter()
                .filter(|r| r.header("x-caller").is_none() && r.method == http::Method::POST)
                .collect();
            assert!(posts.len() > 4, "{posts:?}");
            for r in &posts[2..] {
                assert!(r.path.starts_with("/messages"), "{} {}", r.method, r.path);
                assert_eq!(r.header("authorization"), Some("Bearer era-token"));
            }
            session.close().await;
            check(&world, &what(Eras::HttpSse, borrowed)).await;
        }
    });
}

#[test]
fn f26_a_redirect_to_another_origin_is_refused() {
    scenario(async {
        let elsewhere = TestServer::start(ServerConfig::default());
        for (eras, borrowed) in cases() {
            let world = world(eras, ServerConfig::default()).await;
            let session = connected(&world, borrowed).await;
            world.server.push_fault(
                Fault::on_rpc(
                    "tools/call",
                    FaultAction::Redirect {
                        status: 307,
                        location: format!("{}/mcp", elsewhere.url().trim_end_matches("/mcp")),
                    },
                )
                .times(1),
            );
            let error = session
                .call_tool("tool-000", json!({"text": "x"}))
                .await
                .expect_err("refused");
            assert!(error.is_redirect(), "{}: {error:?}", what(eras, borrowed));
            session
                .call_tool("tool-000", json!({"text": "y"}))
                .await
                .expect("the next call works");
            session.close().await;
            check(&world, &what(eras, borrowed)).await;
        }
        assert!(
            elsewhere.requests().is_empty(),
            "nothing reached the other origin"
        );
    });
}

#[test]
fn f27_oversized_answers_are_refused_and_the_session_goes_on() {
    // 2026-07-28 only: over HTTP+SSE the answer is an event on the session's
    // one stream, where a fault of the test kit does not reach (and an
    // event over the limit ends the stream, hence the session).
    scenario(async {
        for (eras, borrowed) in [(Eras::Modern, false), (Eras::Modern, true)] {
            let world = world(eras, ServerConfig::default()).await;
            let limits = mcp_scoped_http::TransportConfig::default()
                .max_json_body(64 * 1024)
                .max_sse_event(64 * 1024);
            let session = connector(&world, borrowed)
                .transport_config(limits)
                .connect()
                .await
                .expect("connects");
            world.server.push_fault(
                Fault::on_rpc("tools/call", FaultAction::OversizeJson { bytes: 1 << 20 }).times(1),
            );
            let error = session
                .call_tool("tool-000", json!({"text": "x"}))
                .await
                .expect_err("over the limit");
            assert!(error.is_limit(), "{}: {error:?}", what(eras, borrowed));
            session
                .call_tool("tool-000", json!({"text": "y"}))
                .await
                .expect("the next call works");
            session.close().await;
            check(&world, &what(eras, borrowed)).await;
        }
    });
}

#[test]
fn f33_churn_in_every_era_comes_back_to_baseline() {
    use mcp_scoped_http_testkit::churn::{Churn, Cycle};
    scenario(async {
        for (eras, borrowed) in cases() {
            let world = world(eras, ServerConfig::default()).await;
            let client = borrowed.then(|| world.caller.client.clone());
            let churn = Churn::new(world.server.url(), Cycle::Complete, client)
                .await
                .expect("the churn starts");
            for cycle in 0..100 {
                churn
                    .run_once()
                    .await
                    .unwrap_or_else(|e| panic!("{} cycle {cycle}: {e}", what(eras, borrowed)));
            }
            check(&world, &what(eras, borrowed)).await;
        }
    });
}
