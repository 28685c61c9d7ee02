//! Resuming a broken SSE answer (F21): wait the server's `retry`, GET with
//! `Last-Event-ID`, deliver the response exactly once; attempts are capped.

use crate::support;

use std::time::Duration;

use crate::support::*;
use http::Method;
use mcp_scoped_http::Connector;
use mcp_scoped_http::Resumption;

/// The GETs that resumed an answer (the listener's own GET carries no
/// `Last-Event-ID`).
fn resumptions(server: &TestServer) -> Vec<RecordedRequest> {
    seen_http(server, Method::GET)
        .into_iter()
        .filter(|r| r.header("last-event-id").is_some())
        .collect()
}

fn sse_server() -> TestServer {
    TestServer::start(ServerConfig::default().with_response_mode(ResponseMode::Sse))
}

#[test]
fn a_cut_answer_is_resumed_and_delivered_once() {
    scenario(async {
        for borrowed in [false, true] {
            let (server, caller, baseline) = support::baseline::scene(sse_server()).await;
            let mut connector = Connector::new(server.url()).bearer("resume");
            if borrowed {
                connector = connector.client(caller.client.clone());
            }
            let session = connector.connect().await.unwrap();
            server.push_fault(
                Fault::on_rpc(
                    "tools/call",
                    FaultAction::SseCutAfterEvent { retry_ms: Some(20) },
                )
                .times(1),
            );
            let result = session
                .call_tool("tool-002", serde_json::json!({}))
                .await
                .unwrap();
            assert_eq!(result["structuredContent"]["tool"], "tool-002");
            let gets = resumptions(&server);
            assert_eq!(gets.len(), 1, "one resumption");
            assert!(gets[0].header("mcp-session-id").is_some());
            assert_eq!(gets[0].header("authorization"), Some("Bearer resume"));
            assert_eq!(seen(&server, "tools/call").len(), 1, "not re-sent: resumed");
            assert!(
                seen(&server, "notifications/cancelled").is_empty(),
                "a cut is not a cancellation"
            );
            session.close().await;
            drop(session);
            baseline.check(&server, 1).await;
        }
    });
}

#[test]
fn resumption_attempts_are_capped() {
    scenario(async {
        let (server, caller, baseline) = support::baseline::scene(sse_server()).await;
        let session = Connector::new(server.url())
            .client(caller.client.clone())
            // Only the request's own resumptions reach the GET fault.
            .listen(false)
            .resumption(
                Resumption::default()
                    .max_attempts(3)
                    .first_backoff(Duration::from_millis(5)),
            )
            .connect()
            .await
            .unwrap();
        // Every stream, the first and each resumed one, breaks off after an
        // event id and never brings the response.
        server.push_fault(Fault::on_rpc(
            "tools/call",
            FaultAction::SseCutAfterEvent { retry_ms: Some(5) },
        ));
        server.push_fault(Fault::on_http(
            Method::GET,
            FaultAction::raw(200, "text/event-stream", "id: again\nretry: 5\ndata:\n\n"),
        ));
        let error = session
            .call_tool("tool-000", serde_json::json!({}))
            .await
            .unwrap_err();
        assert!(
            error.is_protocol() && error.to_string().contains("gave up after 3"),
            "{error}"
        );
        assert_eq!(resumptions(&server).len(), 3);
        // The session carries on.
        server.clear_faults();
        session
            .call_tool("tool-000", serde_json::json!({}))
            .await
            .unwrap();
        session.close().await;
        drop(session);
        baseline.check(&server, 1).await;
    });
}

#[test]
fn without_a_get_stream_a_cut_answer_fails_clearly() {
    scenario(async {
        let server = sse_server();
        let session = Connector::new(server.url()).connect().await.unwrap();
        server.push_fault(Fault::on_rpc(
            "tools/call",
            FaultAction::SseCutAfterEvent { retry_ms: Some(5) },
        ));
        server.push_fault(Fault::on_http(Method::GET, FaultAction::status(405)));
        let error = session
            .call_tool("tool-000", serde_json::json!({}))
            .await
            .unwrap_err();
        assert!(error.to_string().contains("cannot be resumed"), "{error}");
        session.close().await;
    });
}

#[test]
fn without_an_event_id_a_cut_answer_fails_at_once() {
    scenario(async {
        let server = sse_server();
        let session = Connector::new(server.url()).connect().await.unwrap();
        server.push_fault(Fault::on_rpc(
            "tools/call",
            FaultAction::SseEndWithoutResponse,
        ));
        let error = session
            .call_tool("tool-000", serde_json::json!({}))
            .await
            .unwrap_err();
        assert!(
            error.is_protocol() && error.to_string().contains("without the response"),
            "{error}"
        );
        assert!(resumptions(&server).is_empty());
        session.close().await;
    });
}

#[test]
fn a_response_on_the_get_stream_reaches_the_request_waiting_for_it() {
    scenario(async {
        for borrowed in [false, true] {
            let (server, caller, baseline) = support::baseline::scene(TestServer::start(
                ServerConfig::default().with_listen(ListenMode::Open),
            ))
            .await;
            let mut connector = Connector::new(server.url());
            if borrowed {
                connector = connector.client(caller.client.clone());
            }
            let session = connector.connect().await.unwrap();
            assert!(
                eventually(Duration::from_secs(5), || server
                    .stats()
                    .listen_streams_open
                    == 1)
                .await
            );
            // The call's own answer never comes; the server sends the
            // response on the GET stream instead, as some servers do when a
            // request's stream was lost.
            server.push_fault(Fault::on_rpc("tools/call", FaultAction::Hang).times(1));
            let call = session.call_tool("tool-001", serde_json::json!({}));
            let deliver = async {
                assert!(
                    eventually(Duration::from_secs(5), || !seen(&server, "tools/call")
                        .is_empty())
                    .await
                );
                let id = seen(&server, "tools/call")[0].body.as_ref().unwrap()["id"].clone();
                let response =
                    serde_json::json!({"jsonrpc": "2.0", "id": id, "result": {"via": "get"}});
                assert_eq!(server.notify_listeners(&response), 1);
            };
            let (result, ()) =
                tokio::join!(tokio::time::timeout(Duration::from_secs(5), call), deliver);
            let result = result.expect("delivered, not hung").unwrap();
            assert_eq!(result, serde_json::json!({"via": "get"}));
            session.close().await;
            drop(session);
            baseline.check(&server, 1).await;
        }
    });
}

/// The GET stream is cut after an event with an id, and the server
/// replays that event to the listener's resuming GET (at least once): the
/// notification reaches the caller once.
#[test]
fn an_event_the_listener_gets_again_on_resuming_is_delivered_once() {
    scenario(async {
        for borrowed in [false, true] {
            let (server, caller, baseline) = support::baseline::scene(TestServer::start(
                ServerConfig::default().with_listen(ListenMode::Open),
            ))
            .await;
            let mut connector = Connector::new(server.url());
            if borrowed {
                connector = connector.client(caller.client.clone());
            }
            let session = connector.connect().await.unwrap();
            let mut notifications = session.notifications().unwrap();
            assert!(
                eventually(Duration::from_secs(5), || server
                    .stats()
                    .listen_streams_open
                    == 1)
                .await
            );
            let note = serde_json::json!({
                "jsonrpc": "2.0",
                "method": "notifications/message",
                "params": {"level": "info", "data": "once"},
            });
            assert_eq!(server.cut_listeners_after(&note), 1);
            // The resuming GET (which gets the replay, then ends), then one
            // more, which stays open.
            let resumed = || {
                seen_http(&server, http::Method::GET).len() == 3
                    && server.stats().listen_streams_open == 1
            };
            assert!(eventually(Duration::from_secs(5), resumed).await);
            let gets = seen_http(&server, http::Method::GET);
            assert!(gets[1].header("last-event-id").is_some(), "it resumed");
            let mut seen = Vec::new();
            while let Ok(message) = notifications.try_recv() {
                seen.push(message);
            }
            assert_eq!(seen.len(), 1, "delivered once: {seen:?}");
            session.close().await;
            drop(session);
            baseline.check(&server, 1).await;
        }
    });
}

/// The server accepted a request (its SSE answer began), the answer broke
/// off, and the session expired before the resumption: the GET with
/// `Last-Event-ID` is answered 404. The request may have run on the
/// server, so it is not sent again on a new session (a `tools/call` would
/// run twice): it fails with the expiry, and the next request gets the new
/// session.
#[test]
fn a_request_whose_resumption_finds_the_session_expired_is_not_sent_again() {
    scenario(async {
        for borrowed in [false, true] {
            let (server, caller, baseline) = support::baseline::scene(sse_server()).await;
            let mut connector = Connector::new(server.url())
                .bearer("resume")
                // Only the request's own resumption reaches the GET fault.
                .listen(false);
            if borrowed {
                connector = connector.client(caller.client.clone());
            }
            let session = connector.connect().await.unwrap();
            server.push_fault(
                Fault::on_rpc(
                    "tools/call",
                    FaultAction::SseCutAfterEvent { retry_ms: Some(20) },
                )
                .times(1),
            );
            server.push_fault(Fault::on_http(Method::GET, FaultAction::ExpireSession).times(1));
            let error = session
                .call_tool("tool-002", serde_json::json!({"once": true}))
                .await
                .expect_err("the answer was lost with the session");
            assert!(error.is_session_expired(), "{error}");
            assert_eq!(resumptions(&server).len(), 1);
            assert_eq!(
                seen(&server, "tools/call").len(),
                1,
                "a request the server accepted was sent again"
            );
            // The next request opens the new session.
            session
                .call_tool("tool-000", serde_json::json!({}))
                .await
                .expect("the next call gets a new session");
            assert_eq!(seen(&server, "initialize").len(), 2);
            session.close().await;
            drop(session);
            mcp_scoped_http::shutdown().await;
            let log = assert_each_session_deleted_once(&server, "resumption 404").await;
            baseline.check(&server, deletes_owed(&log)).await;
        }
    });
}

/// A 2025-11-25 server that polls: it closes the listening stream after
/// each event it sends (with `retry`), and the client reconnects with
/// `Last-Event-ID`. The listener keeps polling for as long as the server
/// delivers (its bound is on attempts that bring nothing), so no
/// notification is lost after the first few polls.
#[test]
fn a_listening_stream_the_server_keeps_closing_is_polled_for_as_long_as_it_delivers() {
    const POLLS: usize = 6;
    scenario(async {
        for borrowed in [false, true] {
            let mut config = ServerConfig::default().with_listen(ListenMode::Open);
            for poll in 0..POLLS {
                let body = format!(
                    "id: poll-{poll}\nretry: 10\ndata: {}\n\n",
                    serde_json::json!({
                        "jsonrpc": "2.0",
                        "method": "notifications/message",
                        "params": {"level": "info", "data": format!("poll {poll}")},
                    })
                );
                config = config.with_fault(
                    Fault::on_http(
                        http::Method::GET,
                        FaultAction::raw(200, "text/event-stream", &body),
                    )
                    .times(1),
                );
            }
            let (server, caller, baseline) =
                support::baseline::scene(TestServer::start(config)).await;
            let mut connector = Connector::new(server.url());
            if borrowed {
                connector = connector.client(caller.client.clone());
            }
            let session = connector.connect().await.unwrap();
            let mut notifications = session.notifications().unwrap();
            let mut seen = Vec::new();
            let all = tokio::time::timeout(Duration::from_secs(10), async {
                while seen.len() < POLLS {
                    match notifications.recv().await {
                        Some(message) => seen.push(message),
                        None => break,
                    }
                }
            })
            .await;
            assert!(
                all.is_ok(),
                "{}: the listener stopped polling after {} of {POLLS} polls",
                if borrowed { "borrowed" } else { "owned" },
                seen.len()
            );
            // Then the server's open stream, which the listener holds.
            assert!(
                eventually(Duration::from_secs(5), || server
                    .stats()
                    .listen_streams_open
                    == 1)
                .await
            );
            let gets = seen_http(&server, http::Method::GET);
            assert_eq!(gets.len(), POLLS + 1);
            assert!(
                gets[1..]
                    .iter()
                    .all(|g| g.header("last-event-id").is_some())
            );
            session.close().await;
            drop(session);
            baseline.check(&server, 1).await;
        }
    });
}

/// A long call on a server that makes the client poll: every resumed
/// stream brings one new message (a progress notification) and breaks off
/// again. Each resumption that brings a new message starts the count
/// again, so the call lasts as long as the server delivers; before, it
/// failed after `max_attempts` (2 here) polls, whatever they brought.
#[test]
fn a_resumption_that_brings_a_new_message_starts_the_count_again() {
    const POLLS: usize = 6;
    scenario(async {
        let server =
            TestServer::start(ServerConfig::default().with_response_mode(ResponseMode::Sse));
        let session = Connector::new(server.url())
            // Only the request's own resumptions reach the GET faults.
            .listen(false)
            .resumption(
                Resumption::default()
                    .max_attempts(2)
                    .first_backoff(Duration::from_millis(5)),
            )
            .connect()
            .await
            .unwrap();
        let mut notifications = session.notifications().unwrap();
        server.push_fault(
            Fault::on_rpc(
                "tools/call",
                FaultAction::raw(200, "text/event-stream", "id: poll-0\nretry: 5\ndata:\n\n"),
            )
            .times(1),
        );
        for poll in 1..=POLLS {
            let note = serde_json::json!({
                "jsonrpc": "2.0",
                "method": "notifications/progress",
                "params": {"progressToken": "t", "progress": poll},
            });
            // A long `retry`: the test pushes the last poll in good time.
            let body = format!("id: poll-{poll}\nretry: 40\ndata: {note}\n\n");
            server.push_fault(
                Fault::on_http(
                    Method::GET,
                    FaultAction::raw(200, "text/event-stream", &body),
                )
                .times(1),
            );
        }
        let call = session.call_tool("tool-000", serde_json::json!({}));
        let last_poll = async {
            assert!(
                eventually(Duration::from_secs(5), || !seen(&server, "tools/call")
                    .is_empty())
                .await
            );
            let id = seen(&server, "tools/call")[0].body.as_ref().unwrap()["id"].clone();
            let response =
                serde_json::json!({"jsonrpc": "2.0", "id": id, "result": {"polled": true}});
            server.push_fault(
                Fault::on_http(
                    Method::GET,
                    FaultAction::raw(
                        200,
                        "text/event-stream",
                        &format!("id: done\ndata: {response}\n\n"),
                    ),
                )
                .times(1),
            );
        };
        let (result, ()) = tokio::join!(
            tokio::time::timeout(Duration::from_secs(10), call),
            last_poll
        );
        let result = result
            .expect("bounded")
            .expect("the call lasts while the server delivers");
        assert_eq!(result, serde_json::json!({"polled": true}));
        assert_eq!(resumptions(&server).len(), POLLS + 1);
        for _ in 0..POLLS {
            assert!(
                notifications.try_recv().is_ok(),
                "each poll's message delivered"
            );
        }
        session.close().await;
    });
}
