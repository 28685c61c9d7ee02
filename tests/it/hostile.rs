//! Mid-session redirects (F26), size limits (F27), and hostile servers:
//! responses to ids we never sent, a notification flood nobody reads, and a
//! GET stream whose line never ends. Each test runs over an owned and a
//! borrowed client and ends with the baseline check.

use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::support::baseline::{Baseline, Caller};
use crate::support::*;
use http::Method;
use mcp_scoped_http::TransportConfig;
use mcp_scoped_http::jsonrpc::Message;
use mcp_scoped_http::{Connector, Session};
use serde_json::json;

use crate::support::alloc::LIVE;

const LIMIT: usize = 64 * 1024;
const BORROWED: [bool; 2] = [false, true];

fn who(borrowed: bool) -> &'static str {
    if borrowed { "borrowed" } else { "owned" }
}

/// A warm caller and the baseline taken with it.
async fn warm(server: &TestServer) -> (Caller, Baseline) {
    let caller = Caller::new();
    caller.own_request(server).await;
    let baseline = Baseline::take(Some(&caller));
    (caller, baseline)
}

fn connector(server: &TestServer, caller: &Caller, borrowed: bool) -> Connector {
    let connector = Connector::new(server.url()).bearer("hostile-token");
    if borrowed {
        connector.client(caller.client.clone())
    } else {
        connector
    }
}

async fn call_ok(session: &Session, marker: &str) {
    let result = session
        .call_tool("tool-000", json!({ "marker": marker }))
        .await
        .unwrap_or_else(|e| panic!("{marker}: {e}"));
    assert_eq!(result["structuredContent"]["tool"], "tool-000");
    assert_eq!(result["structuredContent"]["arguments"]["marker"], marker);
}

async fn finish(session: Session, server: &TestServer, baseline: &Baseline) {
    session.close().await;
    drop(session);
    baseline.check(server, 1).await;
}

// ------------------------------------------------------------------ F26

#[test]
fn f26_a_307_to_another_origin_mid_session_is_refused_and_nothing_reaches_it() {
    scenario(async {
        for borrowed in BORROWED {
            let other = TestServer::start(ServerConfig::default());
            let server = TestServer::start(ServerConfig::default());
            let (caller, baseline) = warm(&server).await;
            let session = connector(&server, &caller, borrowed)
                .listen(false)
                .connect()
                .await
                .unwrap();
            server.push_fault(
                Fault::on_rpc(
                    "tools/call",
                    FaultAction::Redirect {
                        status: 307,
                        location: other.url(),
                    },
                )
                .times(1),
            );
            let error = session.call_tool("tool-000", json!({})).await.unwrap_err();
            assert!(error.is_redirect(), "{}: {error}", who(borrowed));
            assert_eq!(error.status().map(|s| s.as_u16()), Some(307));
            let shown = format!("{error} {error:?}");
            let id = session.session_id().unwrap();
            assert!(
                !shown.contains(id.expose()),
                "the error shows the session id"
            );
            assert!(
                !shown.contains("hostile-token"),
                "the error shows the token"
            );
            // The other origin saw nothing at all: no connection, so no
            // session id and no Authorization either.
            assert!(other.requests().is_empty(), "{}", who(borrowed));
            assert_eq!(other.stats().connections_accepted, 0);
            assert_eq!(seen(&server, "tools/call").len(), 1);
            call_ok(&session, "after-307").await;
            finish(session, &server, &baseline).await;
            assert!(other.requests().is_empty());
        }
    });
}

#[test]
fn f26_a_302_or_303_mid_session_is_refused_and_no_get_is_sent() {
    scenario(async {
        for status in [301u16, 302, 303] {
            for borrowed in BORROWED {
                let server = TestServer::start(ServerConfig::default());
                let (caller, baseline) = warm(&server).await;
                let session = connector(&server, &caller, borrowed)
                    .listen(false)
                    .connect()
                    .await
                    .unwrap();
                server.push_fault(
                    Fault::on_rpc(
                        "tools/call",
                        FaultAction::Redirect {
                            status,
                            location: "{self}/mcp".into(),
                        },
                    )
                    .times(1),
                );
                let error = session.call_tool("tool-000", json!({})).await.unwrap_err();
                let label = format!("{status} {}", who(borrowed));
                assert!(error.is_redirect(), "{label}: {error}");
                assert_eq!(error.status().map(|s| s.as_u16()), Some(status), "{label}");
                assert!(seen_http(&server, Method::GET).is_empty(), "{label}");
                assert_eq!(
                    seen(&server, "tools/call").len(),
                    1,
                    "{label}: not followed"
                );
                call_ok(&session, "after-30x").await;
                finish(session, &server, &baseline).await;
            }
        }
    });
}

#[test]
fn f26_a_same_origin_308_mid_session_is_followed_with_the_post_intact() {
    scenario(async {
        for borrowed in BORROWED {
            let server = TestServer::start(ServerConfig::default());
            let (caller, baseline) = warm(&server).await;
            let session = connector(&server, &caller, borrowed)
                .listen(false)
                .connect()
                .await
                .unwrap();
            server.push_fault(
                Fault::on_rpc(
                    "tools/call",
                    FaultAction::Redirect {
                        status: 308,
                        location: "{self}/mcp".into(),
                    },
                )
                .times(1),
            );
            call_ok(&session, "through-308").await;
            let calls = seen(&server, "tools/call");
            assert_eq!(calls.len(), 2, "{}", who(borrowed));
            let id = session.session_id().unwrap();
            for call in &calls {
                assert_eq!(call.method, Method::POST);
                assert_eq!(call.header("mcp-session-id"), Some(id.expose()));
                assert_eq!(call.header("authorization"), Some("Bearer hostile-token"));
                assert!(call.header("mcp-protocol-version").is_some());
            }
            assert_eq!(calls[0].body, calls[1].body, "the body is resent unchanged");
            assert!(seen_http(&server, Method::GET).is_empty());
            finish(session, &server, &baseline).await;
        }
    });
}

// ------------------------------------------------------------------ F27

async fn limit_for_one_call(action: FaultAction) {
    for borrowed in BORROWED {
        let server = TestServer::start(ServerConfig::default());
        let (caller, baseline) = warm(&server).await;
        let session = connector(&server, &caller, borrowed)
            .listen(false)
            .transport_config(
                TransportConfig::default()
                    .max_json_body(LIMIT)
                    .max_sse_event(LIMIT),
            )
            .connect()
            .await
            .unwrap();
        server.push_fault(Fault::on_rpc("tools/call", action.clone()).times(1));
        let error = tokio::time::timeout(
            Duration::from_secs(20),
            session.call_tool("tool-000", json!({})),
        )
        .await
        .expect("a limit error, not a hang")
        .unwrap_err();
        assert!(error.is_limit(), "{action:?} {}: {error}", who(borrowed));
        assert!(error.to_string().contains(&LIMIT.to_string()), "{error}");
        call_ok(&session, "after-limit").await;
        call_ok(&session, "again").await;
        finish(session, &server, &baseline).await;
    }
}

#[test]
fn f27_an_oversize_json_answer_fails_that_call_only() {
    scenario(limit_for_one_call(FaultAction::OversizeJson {
        bytes: 16 * 1024 * 1024,
    }));
}

#[test]
fn f27_an_oversize_sse_event_fails_that_call_only() {
    scenario(limit_for_one_call(FaultAction::OversizeSseEvent {
        bytes: 16 * 1024 * 1024,
    }));
}

#[test]
fn f27_a_never_ending_sse_line_fails_that_call_only() {
    scenario(limit_for_one_call(FaultAction::SseNeverEndingLine));
}

#[test]
fn f27_an_sse_answer_starting_with_a_bom_works() {
    scenario(async {
        for borrowed in BORROWED {
            let server = TestServer::start(ServerConfig::default());
            let (caller, baseline) = warm(&server).await;
            let session = connector(&server, &caller, borrowed)
                .listen(false)
                .connect()
                .await
                .unwrap();
            let body =
                "\u{FEFF}data: {\"jsonrpc\":\"2.0\",\"id\":{id},\"result\":{\"bom\":true}}\n\n";
            server.push_fault(
                Fault::on_rpc(
                    "tools/call",
                    FaultAction::raw(200, "text/event-stream", body),
                )
                .times(1),
            );
            let result = session.call_tool("tool-000", json!({})).await.unwrap();
            assert_eq!(result, json!({"bom": true}), "{}", who(borrowed));
            call_ok(&session, "after-bom").await;
            finish(session, &server, &baseline).await;
        }
    });
}

// ------------------------------------------------------------------ hostile

/// An SSE answer with `n` responses to ids we never sent, then ours.
fn foreign_responses(n: usize) -> String {
    let mut body = String::new();
    for i in 0..n {
        body.push_str(&format!(
            "data: {{\"jsonrpc\":\"2.0\",\"id\":\"other-{i}\",\"result\":{{\"stolen\":{i}}}}}\n\n"
        ));
    }
    body.push_str("data: {\"jsonrpc\":\"2.0\",\"id\":{id},\"result\":{\"mine\":true}}\n\n");
    body
}

#[test]
fn responses_to_unknown_ids_are_dropped_and_memory_stays_flat() {
    scenario(async {
        for borrowed in BORROWED {
            let server = TestServer::start(ServerConfig::default());
            let (caller, baseline) = warm(&server).await;
            let session = connector(&server, &caller, borrowed)
                .listen(false)
                .connect()
                .await
                .unwrap();
            let body = foreign_responses(1000);
            let round = |n: usize| {
                let body = body.clone();
                let session = &session;
                let server = &server;
                async move {
                    for _ in 0..n {
                        server.push_fault(
                            Fault::on_rpc(
                                "tools/call",
                                FaultAction::raw(200, "text/event-stream", &body),
                            )
                            .times(1),
                        );
                        let result = session.call_tool("tool-000", json!({})).await.unwrap();
                        assert_eq!(result, json!({"mine": true}));
                    }
                    server.clear_requests();
                }
            };
            // Warm up: pools, buffers and tracing reach their high-water mark.
            round(3).await;
            tokio::time::sleep(Duration::from_millis(50)).await;
            let before = LIVE.load(Ordering::Relaxed);
            round(20).await;
            tokio::time::sleep(Duration::from_millis(50)).await;
            let growth = LIVE.load(Ordering::Relaxed) - before;
            // 20 000 foreign responses went by: keeping even 16 bytes of each
            // would leave 320 000.
            assert!(
                growth < 64 * 1024,
                "{}: heap grew {growth} bytes",
                who(borrowed)
            );
            assert_eq!(session.notifications().unwrap().try_recv().ok(), None);
            call_ok(&session, "after-foreign").await;
            finish(session, &server, &baseline).await;
        }
    });
}

fn data_of(message: &Message) -> serde_json::Value {
    match message {
        Message::Notification(n) => n.params.as_ref().map_or(json!(null), |p| p["data"].clone()),
        other => panic!("not a notification: {other:?}"),
    }
}

#[test]
fn a_notification_flood_nobody_reads_stays_bounded_and_the_session_works() {
    scenario(async {
        for borrowed in BORROWED {
            let server = TestServer::start(ServerConfig::default().with_listen(ListenMode::Open));
            let (caller, baseline) = warm(&server).await;
            let session = connector(&server, &caller, borrowed)
                .connect()
                .await
                .unwrap();
            // Taken, never read during the flood.
            let mut notifications = session.notifications().unwrap();
            assert!(
                eventually(Duration::from_secs(5), || server
                    .stats()
                    .listen_streams_open
                    == 1)
                .await
            );
            let note = |i: usize| {
                json!({
                    "jsonrpc": "2.0",
                    "method": "notifications/message",
                    "params": {"level": "info", "data": i},
                })
            };
            let mut delivered = 0;
            for i in 0..10_000 {
                delivered += server.notify_listeners(&note(i));
                if i % 32 == 31 {
                    // Let the client read the stream (the server's buffer
                    // holds 64 events).
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            }
            assert!(delivered > 1000, "{}: only {delivered} sent", who(borrowed));
            // The client read the whole flood: the session still works.
            call_ok(&session, "during-flood").await;
            assert!(
                eventually(Duration::from_secs(5), || notifications.len() == 256).await,
                "{}: {} queued",
                who(borrowed),
                notifications.len()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
            assert_eq!(notifications.len(), 256, "bounded at 256");
            // The oldest are kept, later ones dropped.
            let first = notifications.recv().await.unwrap();
            assert_eq!(data_of(&first), json!(0), "{first:?}");
            while notifications.try_recv().is_ok() {}
            // The listener is still alive: a later notification arrives.
            assert_eq!(server.notify_listeners(&note(99_999)), 1);
            let next = tokio::time::timeout(Duration::from_secs(5), notifications.recv())
                .await
                .expect("the listener still delivers")
                .unwrap();
            assert_eq!(data_of(&next), json!(99_999), "{next:?}");
            call_ok(&session, "after-flood").await;
            drop(notifications);
            finish(session, &server, &baseline).await;
        }
    });
}

#[test]
fn a_never_ending_line_on_the_get_stream_ends_the_listener_not_the_session() {
    scenario(async {
        for borrowed in BORROWED {
            let server = TestServer::start(
                ServerConfig::default()
                    .with_listen(ListenMode::Open)
                    .with_fault(Fault::on_http(Method::GET, FaultAction::SseNeverEndingLine)),
            );
            let (caller, baseline) = warm(&server).await;
            let session = connector(&server, &caller, borrowed)
                .transport_config(TransportConfig::default().max_sse_event(LIMIT))
                .connect()
                .await
                .unwrap();
            // A broken stream, three times in a row: the listener gives up.
            let gets = || seen_http(&server, Method::GET).len();
            assert!(eventually(Duration::from_secs(5), || gets() >= 3).await);
            assert!(
                eventually(Duration::from_secs(5), || session.ledger().tasks == 0).await,
                "{}: {} GETs, the listener goes on",
                who(borrowed),
                gets()
            );
            assert_eq!(gets(), 3, "the listener gave up");
            assert!(!session.is_closed());
            call_ok(&session, "after-endless-get").await;
            finish(session, &server, &baseline).await;
        }
    });
}

/// Every GET brings a new event id, then an event that is not JSON-RPC:
/// a new id is no progress when the stream then breaks the protocol, so
/// the listener still gives up after its attempts (it does not reconnect
/// for as long as the server invents ids).
#[test]
fn fresh_event_ids_before_a_broken_event_do_not_keep_the_listener_reconnecting() {
    scenario(async {
        for borrowed in BORROWED {
            let mut config = ServerConfig::default().with_listen(ListenMode::Open);
            for n in 0..10 {
                config = config.with_fault(
                    Fault::on_http(
                        Method::GET,
                        FaultAction::raw(
                            200,
                            "text/event-stream",
                            &format!("id: fresh-{n}\nretry: 0\ndata:\n\ndata: not json-rpc\n\n"),
                        ),
                    )
                    .times(1),
                );
            }
            let server = TestServer::start(config);
            let (caller, baseline) = warm(&server).await;
            let session = connector(&server, &caller, borrowed)
                .connect()
                .await
                .unwrap();
            let gets = || seen_http(&server, Method::GET).len();
            assert!(eventually(Duration::from_secs(5), || gets() >= 3).await);
            // Absence can only be watched for: a window past the backoffs.
            tokio::time::sleep(Duration::from_millis(800)).await;
            assert_eq!(gets(), 3, "{}: the listener gave up", who(borrowed));
            call_ok(&session, "after-fresh-ids").await;
            finish(session, &server, &baseline).await;
        }
    });
}
