//! The steady state of a session: one failing request (F20), abandoned and
//! timed-out requests (F22), many concurrent requests (F24), and sessions
//! with different credentials sharing one borrowed client (F25).

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::support::baseline::{Baseline, Caller};
use crate::support::*;
use http::{Method, StatusCode};
use mcp_scoped_http::{Connector, Session};
use mcp_scoped_http::{RequestOptions, Resumption};
use serde_json::{Value, json};

/// A bound on anything that should finish at once on loopback.
const PROMPT: Duration = Duration::from_secs(5);

async fn connect(server: &TestServer, caller: Option<&Caller>, token: &str) -> Session {
    let mut connector = Connector::new(server.url()).bearer(token);
    if let Some(caller) = caller {
        connector = connector.client(caller.client.clone());
    }
    connector.connect().await.expect("connect")
}

/// The JSON-RPC id of the last `tools/call` the server saw.
fn last_call_id(server: &TestServer) -> Value {
    seen(server, "tools/call")
        .pop()
        .and_then(|r| r.body)
        .map(|b| b["id"].clone())
        .expect("a tools/call was recorded")
}

/// The GETs that resumed an answer (carrying `Last-Event-ID`).
fn resumptions(server: &TestServer) -> usize {
    seen_http(server, Method::GET)
        .iter()
        .filter(|r| r.header("last-event-id").is_some())
        .count()
}

// ------------------------------------------------------------------ F20

#[test]
fn f20_one_failing_call_fails_alone_with_its_own_status() {
    scenario(async {
        for borrowed in [false, true] {
            let (server, caller, baseline) =
                support::baseline::scene(TestServer::start(ServerConfig::default())).await;
            let session = connect(&server, borrowed.then_some(&caller), "f20").await;
            let id = session.session_id().unwrap();

            let faults = [
                (FaultAction::status(500), 500u16),
                (
                    FaultAction::unauthorized(r#"Bearer realm="mcp", error="invalid_token""#),
                    401,
                ),
                (FaultAction::status(403), 403),
                (
                    FaultAction::status_with_rpc_error(503, -32603, "overloaded"),
                    503,
                ),
            ];
            for (action, status) in faults {
                server.push_fault(Fault::on_rpc("tools/call", action).times(1));
                let error = session
                    .call_tool("tool-000", json!({"status": status}))
                    .await
                    .unwrap_err();
                assert!(error.is_status(), "{status}: {error}");
                assert_eq!(error.status(), StatusCode::from_u16(status).ok(), "{error}");
                assert!(!error.is_session_expired(), "{status}: {error}");
                match status {
                    401 => assert_eq!(
                        error.www_authenticate(),
                        Some(r#"Bearer realm="mcp", error="invalid_token""#)
                    ),
                    503 => assert_eq!(error.rpc_code(), Some(-32603), "{error}"),
                    _ => {}
                }
                // The next call on the same session works.
                let ok = session
                    .call_tool("tool-001", json!({"after": status}))
                    .await
                    .expect("the next call works");
                assert_eq!(ok["structuredContent"]["arguments"]["after"], status);
            }
            // Only those requests failed: no re-initialize, no retry, same id.
            assert_eq!(seen(&server, "initialize").len(), 1);
            assert_eq!(seen(&server, "tools/call").len(), 8, "no retries");
            assert_eq!(session.session_id(), Some(id));
            assert!(!session.is_closed());
            assert_eq!(server.stats().deletes, 0);
            session.close().await;
            drop(session);
            baseline.check(&server, 1).await;
        }
    });
}

#[test]
fn f20_a_failing_call_does_not_disturb_calls_in_flight_beside_it() {
    scenario(async {
        for borrowed in [false, true] {
            let (server, caller, baseline) =
                support::baseline::scene(TestServer::start(ServerConfig::default())).await;
            let session = Arc::new(connect(&server, borrowed.then_some(&caller), "f20b").await);
            // The first call is slow, the second fails while the first waits.
            server.push_fault(
                Fault::on_rpc("tools/call", FaultAction::Delay(Duration::from_millis(200)))
                    .times(1),
            );
            server.push_fault(Fault::on_rpc("tools/call", FaultAction::status(500)).times(1));
            let slow = tokio::spawn({
                let session = session.clone();
                async move { session.call_tool("tool-000", json!({"slow": true})).await }
            });
            assert!(eventually(PROMPT, || seen(&server, "tools/call").len() == 1).await);
            let error = session.call_tool("tool-001", json!({})).await.unwrap_err();
            assert_eq!(error.status(), Some(StatusCode::INTERNAL_SERVER_ERROR));
            let slow = tokio::time::timeout(PROMPT, slow)
                .await
                .expect("the slow call resolved")
                .unwrap()
                .expect("the slow call is not affected");
            assert_eq!(slow["structuredContent"]["arguments"]["slow"], true);
            assert_eq!(seen(&server, "initialize").len(), 1);
            session.close().await;
            drop(session);
            baseline.check(&server, 1).await;
        }
    });
}

// ------------------------------------------------------------------ F22

#[test]
fn f22_a_timed_out_request_is_cancelled_and_its_late_answer_ignored() {
    scenario(async {
        for borrowed in [false, true] {
            let (server, caller, baseline) = support::baseline::scene(TestServer::start(
                ServerConfig::default().with_listen(ListenMode::Open),
            ))
            .await;
            let session = connect(&server, borrowed.then_some(&caller), "f22a").await;
            let mut notifications = session.notifications().unwrap();
            assert!(eventually(PROMPT, || server.stats().listen_streams_open == 1).await);

            for action in [
                FaultAction::Hang,
                FaultAction::Delay(Duration::from_millis(200)),
            ] {
                server.push_fault(Fault::on_rpc("tools/call", action.clone()).times(1));
                let started = Instant::now();
                let error = tokio::time::timeout(
                    PROMPT,
                    session.request_with(
                        "tools/call",
                        Some(json!({"name": "tool-000", "arguments": {"late": true}})),
                        RequestOptions::default().timeout(Duration::from_millis(50)),
                    ),
                )
                .await
                .expect("the request's own timeout fired")
                .unwrap_err();
                assert!(error.is_timeout(), "{action:?}: {error}");
                assert!(!error.is_closed() && !error.is_status(), "{error}");
                assert!(started.elapsed() < Duration::from_secs(2));

                let id = last_call_id(&server);
                assert!(
                    eventually(PROMPT, || server.cancelled().contains(&id)).await,
                    "{action:?}: notifications/cancelled for {id} reached the server"
                );
                let notice = seen(&server, "notifications/cancelled")
                    .into_iter()
                    .find(|r| r.body.as_ref().unwrap()["params"]["requestId"] == id)
                    .unwrap();
                assert_eq!(
                    notice.header("mcp-session-id"),
                    Some(session.session_id().unwrap().expose())
                );
                assert!(notice.header("mcp-protocol-version").is_some());
                assert_eq!(notice.header("authorization"), Some("Bearer f22a"));
                assert!(
                    notice.body.as_ref().unwrap()["params"]["reason"]
                        .as_str()
                        .is_some_and(|r| r.contains("timed out"))
                );

                // A late answer to that id (here on the GET stream) is dropped
                // quietly: not delivered as a notification, not taken as the
                // answer of the next request.
                let stale = json!({"jsonrpc": "2.0", "id": id, "result": {"stale": true}});
                assert_eq!(server.notify_listeners(&stale), 1);
                let next = session
                    .call_tool("tool-001", json!({"fresh": true}))
                    .await
                    .expect("the session stays usable");
                assert_eq!(next["structuredContent"]["arguments"]["fresh"], true);
                assert!(next.get("stale").is_none());
            }
            assert!(notifications.try_recv().is_err(), "no response leaked out");
            // Only the two timed-out requests were cancelled.
            assert_eq!(server.cancelled().len(), 2);
            session.close().await;
            drop(notifications);
            drop(session);
            baseline.check(&server, 1).await;
        }
    });
}

#[test]
fn f22_the_connector_timeout_applies_and_can_be_lifted_per_request() {
    scenario(async {
        let (server, caller, baseline) =
            support::baseline::scene(TestServer::start(ServerConfig::default())).await;
        let session = Connector::new(server.url())
            .client(caller.client.clone())
            .request_timeout(Duration::from_millis(50))
            .connect()
            .await
            .unwrap();
        let slow =
            || Fault::on_rpc("tools/call", FaultAction::Delay(Duration::from_millis(150))).times(1);
        server.push_fault(slow());
        let error = tokio::time::timeout(PROMPT, session.call_tool("tool-000", json!({})))
            .await
            .expect("bounded by the connector's timeout")
            .unwrap_err();
        assert!(error.is_timeout(), "{error}");
        let id = last_call_id(&server);
        assert!(eventually(PROMPT, || server.cancelled().contains(&id)).await);

        server.push_fault(slow());
        let result = session
            .request_with(
                "tools/call",
                Some(json!({"name": "tool-000", "arguments": {"patient": true}})),
                RequestOptions::default().no_timeout(),
            )
            .await
            .expect("no timeout for this one");
        assert_eq!(result["structuredContent"]["arguments"]["patient"], true);

        server.push_fault(slow());
        let result = session
            .request_with(
                "tools/call",
                Some(json!({"name": "tool-000", "arguments": {"longer": true}})),
                RequestOptions::default().timeout(Duration::from_secs(5)),
            )
            .await
            .expect("a longer timeout for this one");
        assert_eq!(result["structuredContent"]["arguments"]["longer"], true);
        assert_eq!(server.cancelled().len(), 1);
        session.close().await;
        drop(session);
        baseline.check(&server, 1).await;
    });
}

#[test]
fn f22_a_request_dropped_while_resuming_stops_resuming_and_is_cancelled() {
    scenario(async {
        for borrowed in [false, true] {
            let server =
                TestServer::start(ServerConfig::default().with_response_mode(ResponseMode::Sse));
            let caller = Caller::new();
            caller.own_request(&server).await;
            let baseline = Baseline::take(Some(&caller));
            let mut connector = Connector::new(server.url())
                .bearer("f22b")
                // Only the request's own resumptions GET.
                .listen(false)
                .resumption(Resumption::default().max_attempts(5));
            if borrowed {
                connector = connector.client(caller.client.clone());
            }
            let session = Arc::new(connector.connect().await.unwrap());

            // 1. Dropped while waiting the server's `retry` (300 ms) before
            // the first resuming GET.
            server.push_fault(
                Fault::on_rpc(
                    "tools/call",
                    FaultAction::SseCutAfterEvent {
                        retry_ms: Some(300),
                    },
                )
                .times(1),
            );
            let cut = tokio::time::timeout(
                Duration::from_millis(100),
                session.call_tool("tool-000", json!({})),
            )
            .await;
            assert!(cut.is_err(), "still waiting to resume when dropped");
            let id = last_call_id(&server);
            assert!(
                eventually(PROMPT, || server.cancelled().contains(&id)).await,
                "cancelled sent for {id}"
            );
            // Nothing more happens for it: no resuming GET within well past
            // its 300 ms retry (a bounded wait for an absence).
            assert!(
                !eventually(Duration::from_secs(1), || resumptions(&server) > 0).await,
                "a GET resumed an abandoned request"
            );

            // 2. Dropped while the resuming GET itself is pending (the server
            // has no replay to give: the GET hangs).
            server.push_fault(
                Fault::on_rpc(
                    "tools/call",
                    FaultAction::SseCutAfterEvent { retry_ms: Some(5) },
                )
                .times(1),
            );
            server.push_fault(Fault::on_http(Method::GET, FaultAction::Hang));
            let call = tokio::spawn({
                let session = session.clone();
                async move { session.call_tool("tool-001", json!({})).await }
            });
            assert!(
                eventually(PROMPT, || resumptions(&server) == 1).await,
                "the request is resuming"
            );
            let id = last_call_id(&server);
            call.abort();
            assert!(call.await.unwrap_err().is_cancelled());
            assert!(
                eventually(PROMPT, || server.cancelled().contains(&id)).await,
                "cancelled sent for {id}"
            );
            let cancelled = seen(&server, "notifications/cancelled");
            assert!(cancelled.iter().all(|r| {
                r.header("mcp-session-id") == Some(session.session_id().unwrap().expose())
                    && r.header("authorization") == Some("Bearer f22b")
            }));
            // No further GET after the drop (a bounded wait for an absence:
            // the resumption's own retry is 5 ms).
            assert!(
                !eventually(Duration::from_secs(1), || resumptions(&server) > 1).await,
                "a GET resumed an abandoned request"
            );
            assert_eq!(server.cancelled().len(), 2);

            server.clear_faults();
            let ok = session.call_tool("tool-002", json!({"after": 1})).await;
            assert_eq!(ok.unwrap()["structuredContent"]["arguments"]["after"], 1);
            session.close().await;
            drop(session);
            baseline.check(&server, 1).await;
        }
    });
}

#[test]
fn f22_never_a_cancelled_for_initialize() {
    scenario(async {
        for borrowed in [false, true] {
            let server = TestServer::start(ServerConfig::default());
            server.push_fault(Fault::on_rpc("initialize", FaultAction::Hang).times(1));
            let caller = Caller::new();
            caller.own_request(&server).await;
            let baseline = Baseline::take(Some(&caller));
            let mut connector = Connector::new(server.url()).bearer("f22c");
            if borrowed {
                connector = connector.client(caller.client.clone());
            }
            let cut = tokio::time::timeout(Duration::from_millis(100), connector.connect()).await;
            assert!(cut.is_err(), "the caller's deadline won");
            assert_eq!(seen(&server, "initialize").len(), 1);
            mcp_scoped_http::shutdown().await;
            // Nothing more happens (a bounded wait for an absence).
            assert!(
                !eventually(Duration::from_millis(300), || {
                    !server.cancelled().is_empty()
                        || !seen(&server, "notifications/cancelled").is_empty()
                })
                .await,
                "a notifications/cancelled was sent for initialize"
            );
            baseline.check(&server, 0).await;
        }
    });
}

#[test]
fn f22_a_hanging_reinitialize_neither_escapes_the_timeout_nor_gets_a_cancelled() {
    scenario(async {
        let (server, caller, baseline) =
            support::baseline::scene(TestServer::start(ServerConfig::default())).await;
        let session = connect(&server, Some(&caller), "f22d").await;
        server.expire_sessions();
        // The re-initialize after the 404 never answers.
        server.push_fault(Fault::on_rpc("initialize", FaultAction::Hang).times(1));
        let error = tokio::time::timeout(
            PROMPT,
            session.request_with(
                "tools/call",
                Some(json!({"name": "tool-000", "arguments": {}})),
                RequestOptions::default().timeout(Duration::from_millis(200)),
            ),
        )
        .await
        .expect("the request's timeout bounds the re-initialize too")
        .unwrap_err();
        assert!(error.is_timeout(), "{error}");
        assert_eq!(seen(&server, "initialize").len(), 2);
        // Neither the forgotten tools/call nor the initialize is cancelled
        // (a bounded wait for an absence).
        assert!(
            !eventually(Duration::from_millis(300), || !server
                .cancelled()
                .is_empty())
            .await,
            "cancelled: {:?}",
            server.cancelled()
        );
        session.close().await;
        drop(session);
        mcp_scoped_http::shutdown().await;
        // The first session was forgotten by the server (and its id by us);
        // the second never got an id: nothing to DELETE.
        baseline.check(&server, 0).await;
    });
}

// ------------------------------------------------------------------ F24

#[test]
fn f24_fifty_concurrent_calls_each_get_their_own_answer() {
    scenario(async {
        for mode in [ResponseMode::Json, ResponseMode::Sse] {
            for borrowed in [false, true] {
                let (server, caller, baseline) = support::baseline::scene(TestServer::start(
                    ServerConfig::default()
                        .with_response_mode(mode)
                        .with_notifications_before_response(2),
                ))
                .await;
                let session = Arc::new(connect(&server, borrowed.then_some(&caller), "f24").await);
                // In arrival order: the first ten answer late, the earlier the
                // later (so answers come out of order), then the other encoding,
                // then a server request on the answer; the rest answer at once.
                for k in 0..10u64 {
                    server.push_fault(
                        Fault::on_rpc(
                            "tools/call",
                            FaultAction::Delay(Duration::from_millis(250 - 20 * k)),
                        )
                        .times(1),
                    );
                }
                for k in 0..10 {
                    let ct = if k % 2 == 0 {
                        "text/event-stream"
                    } else {
                        "application/json"
                    };
                    server.push_fault(
                        Fault::on_rpc("tools/call", FaultAction::ContentType(ct.into())).times(1),
                    );
                }
                for _ in 0..3 {
                    server.push_fault(
                        Fault::on_rpc(
                            "tools/call",
                            FaultAction::ServerRequest {
                                method: "ping".into(),
                                params: json!({}),
                            },
                        )
                        .times(1),
                    );
                }
                let finished = Arc::new(AtomicUsize::new(0));
                let calls: Vec<_> = (0..50)
                    .map(|i| {
                        let session = session.clone();
                        let finished = finished.clone();
                        tokio::spawn(async move {
                            let tool = format!("tool-00{}", i % 3);
                            let args = json!({"i": i, "tag": format!("call-{i}")});
                            let result = session.call_tool(&tool, args).await;
                            (i, tool, result, finished.fetch_add(1, Ordering::SeqCst))
                        })
                    })
                    .collect();
                let mut finish_order = vec![0; 50];
                for call in calls {
                    let (i, tool, result, order) = tokio::time::timeout(PROMPT, call)
                        .await
                        .expect("every call resolves")
                        .unwrap();
                    let result = result.unwrap_or_else(|e| panic!("call {i}: {e}"));
                    let structured = &result["structuredContent"];
                    assert_eq!(structured["tool"], tool.as_str());
                    assert_eq!(
                        structured["arguments"],
                        json!({"i": i, "tag": format!("call-{i}")}),
                        "call {i} got another's answer"
                    );
                    finish_order[i] = order;
                }
                let calls = seen(&server, "tools/call");
                assert_eq!(calls.len(), 50, "each sent once");
                let mut ids: Vec<String> = calls
                    .iter()
                    .map(|r| r.body.as_ref().unwrap()["id"].to_string())
                    .collect();
                ids.sort();
                ids.dedup();
                assert_eq!(ids.len(), 50, "distinct request ids");
                // The first arrivals were delayed: they finished after some
                // later arrival did.
                let arrival: Vec<usize> = calls
                    .iter()
                    .map(|r| {
                        r.body.as_ref().unwrap()["params"]["arguments"]["i"]
                            .as_u64()
                            .unwrap() as usize
                    })
                    .collect();
                assert!(
                    finish_order[arrival[0]] > finish_order[arrival[49]],
                    "answers came out of order"
                );
                assert_eq!(server.client_answers().len(), 3, "three pings answered");
                assert_eq!(seen(&server, "initialize").len(), 1);
                session.close().await;
                drop(session);
                baseline.check(&server, 1).await;
            }
        }
    });
}

// ------------------------------------------------------------------ F25

#[test]
fn f25_sessions_with_different_bearers_share_one_borrowed_client() {
    scenario(async {
        let (server, caller, baseline) = support::baseline::scene(TestServer::start(
            ServerConfig::default()
                .with_listen(ListenMode::Open)
                .with_response_mode(ResponseMode::Sse),
        ))
        .await;
        let tokens = ["alpha", "bravo", "charlie"];
        let mut sessions = Vec::new();
        for token in tokens {
            sessions.push(Arc::new(connect(&server, Some(&caller), token).await));
        }
        let ids: Vec<String> = sessions
            .iter()
            .map(|s| s.session_id().unwrap().expose().to_owned())
            .collect();
        assert_eq!(caller.client.hooks().len(), 3);

        // Concurrent calls from every session, and the caller's own requests
        // through the same client meanwhile.
        let mut calls = Vec::new();
        for (s, token) in tokens.iter().enumerate() {
            for i in 0..10 {
                let session = sessions[s].clone();
                let token = token.to_string();
                calls.push(tokio::spawn(async move {
                    let result = session
                        .call_tool("tool-000", json!({"who": token, "i": i}))
                        .await;
                    (token, i, result)
                }));
            }
        }
        let own: Vec<_> = (0..5)
            .map(|_| {
                let caller = caller.clone();
                let url = server.url();
                tokio::spawn(async move {
                    let request = http::Request::post(url)
                        .header("content-type", "application/json")
                        .header("accept", "application/json, text/event-stream")
                        .header("x-caller", "own")
                        .body(http_body_util::Full::new(bytes::Bytes::from_static(
                            br#"{"jsonrpc":"2.0","id":"caller","method":"ping"}"#,
                        )))
                        .unwrap();
                    caller.raw.request(request).await.unwrap().status()
                })
            })
            .collect();
        for call in calls {
            let (token, i, result) = tokio::time::timeout(PROMPT, call).await.unwrap().unwrap();
            let result = result.unwrap();
            assert_eq!(
                result["structuredContent"]["arguments"]["who"],
                token.as_str()
            );
            assert_eq!(result["structuredContent"]["arguments"]["i"], i);
        }
        for own in own {
            tokio::time::timeout(PROMPT, own).await.unwrap().unwrap();
        }
        // Every request carried only its own session's headers.
        for r in server.requests() {
            if r.header("x-caller") == Some("own") {
                assert_eq!(r.header("authorization"), None, "our hook on the caller's");
                assert_eq!(r.header("mcp-session-id"), None);
                continue;
            }
            let auth: Vec<_> = r.headers.get_all("authorization").iter().collect();
            assert_eq!(
                auth.len(),
                1,
                "{} {:?}: one Authorization",
                r.method,
                r.rpc_method
            );
            let auth = auth[0].to_str().unwrap();
            let s = tokens
                .iter()
                .position(|t| auth == format!("Bearer {t}"))
                .unwrap_or_else(|| panic!("unexpected {auth}"));
            if matches!(
                r.rpc_method.as_deref(),
                Some("initialize" | "server/discover")
            ) {
                assert_eq!(r.header("mcp-session-id"), None);
            } else {
                assert_eq!(
                    r.header("mcp-session-id"),
                    Some(ids[s].as_str()),
                    "{} {:?} with {auth}",
                    r.method,
                    r.rpc_method
                );
            }
            if r.rpc_method.as_deref() == Some("tools/call") {
                assert_eq!(
                    r.body.as_ref().unwrap()["params"]["arguments"]["who"],
                    tokens[s]
                );
            }
        }

        // Close "alpha" while a call of "bravo" is in flight.
        server.push_fault(
            Fault::on_rpc("tools/call", FaultAction::Delay(Duration::from_millis(300))).times(1),
        );
        let before = seen(&server, "tools/call").len();
        let bravo = tokio::spawn({
            let session = sessions[1].clone();
            async move { session.call_tool("tool-001", json!({"who": "bravo"})).await }
        });
        assert!(eventually(PROMPT, || seen(&server, "tools/call").len() == before + 1).await);
        let released = sessions[0].close().await;
        assert!(
            matches!(
                released.session,
                mcp_scoped_http::SessionRelease::Deleted(_)
            ),
            "{released:?}"
        );
        let delete = seen_http(&server, Method::DELETE).pop().unwrap();
        assert_eq!(delete.header("authorization"), Some("Bearer alpha"));
        assert_eq!(delete.header("mcp-session-id"), Some(ids[0].as_str()));
        assert_eq!(caller.client.hooks().len(), 2, "only alpha's hook removed");
        let result = tokio::time::timeout(PROMPT, bravo)
            .await
            .unwrap()
            .unwrap()
            .expect("bravo's call survives alpha's close");
        assert_eq!(result["structuredContent"]["arguments"]["who"], "bravo");
        assert!(
            sessions[0]
                .call_tool("tool-000", json!({}))
                .await
                .unwrap_err()
                .is_closed()
        );
        // The others carry on, with their own headers only.
        for (s, token) in tokens.iter().enumerate().skip(1) {
            let result = sessions[s]
                .call_tool("tool-002", json!({"who": token}))
                .await
                .unwrap();
            assert_eq!(result["structuredContent"]["arguments"]["who"], *token);
            let last = seen(&server, "tools/call").pop().unwrap();
            assert_eq!(
                last.header("authorization"),
                Some(format!("Bearer {token}").as_str())
            );
            assert_eq!(last.header("mcp-session-id"), Some(ids[s].as_str()));
        }
        for session in &sessions {
            session.close().await;
        }
        drop(sessions);
        baseline.check(&server, 3).await;
    });
}

/// A request that times out after its session expired and was replaced:
/// its session is gone, so no `notifications/cancelled` goes out for it
/// (never with the expired session's id, which is never sent again).
#[test]
fn f22_a_request_timed_out_after_its_session_was_replaced_sends_no_cancellation() {
    scenario(async {
        for borrowed in [false, true] {
            let (server, caller, baseline) =
                support::baseline::scene(TestServer::start(ServerConfig::default())).await;
            let session = Arc::new(connect(&server, borrowed.then_some(&caller), "f22e").await);
            let old = session.session_id().unwrap();
            server.push_fault(Fault::on_rpc("tools/call", FaultAction::Hang).times(1));
            let a = tokio::spawn({
                let session = session.clone();
                async move {
                    session
                        .request_with(
                            "tools/call",
                            Some(json!({"name": "tool-000", "arguments": {"tag": "a"}})),
                            RequestOptions::default().timeout(Duration::from_millis(500)),
                        )
                        .await
                }
            });
            assert!(eventually(PROMPT, || seen(&server, "tools/call").len() == 1).await);
            // The session expires; B's 404 replaces it, and B goes through.
            server.expire_sessions();
            session
                .call_tool("tool-000", json!({"tag": "b"}))
                .await
                .expect("B on the new session");
            let new = session.session_id().unwrap();
            assert_ne!(new, old);
            let error = tokio::time::timeout(PROMPT, a)
                .await
                .expect("A resolves")
                .expect("A's task")
                .expect_err("A timed out");
            assert!(error.is_timeout(), "{error}");
            // Absence can only be watched for: a bounded window.
            tokio::time::sleep(Duration::from_millis(300)).await;
            let notices = seen(&server, "notifications/cancelled");
            assert!(
                notices
                    .iter()
                    .all(|n| n.header("mcp-session-id") != Some(old.expose())),
                "a cancellation went to the expired session: {notices:?}"
            );
            session.close().await;
            drop(session);
            mcp_scoped_http::shutdown().await;
            let log = assert_each_session_deleted_once(&server, "f22e").await;
            baseline.check(&server, deletes_owed(&log)).await;
        }
    });
}

/// `Duration::MAX` as a timeout (a common way to say "none") is no timeout,
/// wherever it is given: per request, for the session's requests (which
/// also bound a renewal), and for the DELETE (at close, and in the reaper
/// of a dropped session). Never a panic from a deadline that overflows.
#[test]
fn f22_a_timeout_of_duration_max_means_none_and_never_panics() {
    scenario(async {
        for borrowed in [false, true] {
            let (server, caller, baseline) =
                support::baseline::scene(TestServer::start(ServerConfig::default())).await;
            let mut connector = Connector::new(server.url())
                .bearer("max")
                .request_timeout(Duration::MAX)
                .delete_timeout(Duration::MAX);
            if borrowed {
                connector = connector.client(caller.client.clone());
            }
            let session = connector.connect().await.expect("connect");
            session
                .request_with(
                    "tools/call",
                    Some(json!({"name": "tool-000", "arguments": {}})),
                    RequestOptions::default().timeout(Duration::MAX),
                )
                .await
                .expect("a call with a per-request Duration::MAX");
            server.expire_sessions();
            session
                .call_tool("tool-000", json!({}))
                .await
                .expect("a renewal bounded by Duration::MAX");
            session.close().await;
            drop(session);
            // Dropped without close: the reaper's deadline.
            let dropped = connector.connect().await.expect("connect");
            drop(dropped);
            tokio::time::timeout(PROMPT, mcp_scoped_http::shutdown())
                .await
                .expect("the reaper finishes");
            let log = assert_each_session_deleted_once(&server, "Duration::MAX").await;
            baseline.check(&server, deletes_owed(&log)).await;
        }
    });
}
