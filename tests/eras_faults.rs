//! The F-scenarios of FAULTS.md that apply beyond the 2025 revisions, run
//! against the test kit serving 2026-07-28 and the deprecated HTTP+SSE
//! transport, each with an owned and a borrowed client, each found by
//! detection and ending with the baseline check. (The 2025 revisions have
//! their own files: connect_faults.rs, steady_state.rs, close.rs...)
//!
//! Neither era DELETEs: 2026-07-28 has no session, and an HTTP+SSE session
//! ends when its stream closes, which the test kit counts (`live_sessions`).

mod support;

use std::time::Duration;

use mcp_scoped_http::{Connector, Error, Session};
use serde_json::json;
use support::baseline::World;
use support::*;

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
                    .with_fault(
                        Fault::on_rpc(
                            "tools/list",
                            FaultAction::Status {
                                status: 500,
                                content_type: None,
                                body: None,
                                headers: vec![],
                            },
                        )
                        .page(2),
                    ),
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
            world.server.push_fault(
                Fault::on_rpc(
                    "tools/call",
                    FaultAction::Status {
                        status: 503,
                        content_type: None,
                        body: None,
                        headers: vec![],
                    },
                )
                .times(1),
            );
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
