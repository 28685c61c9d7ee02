//! Per-request options: progress routed to the request that asked for it
//! (from its answer and from the listening stream) and unrouted on every
//! way out; extra `_meta`; the resumption token reported and used to
//! resume an answer, in this session or another process's. In the 2025
//! revisions and 2026-07-28 (progress over HTTP+SSE too), each scenario
//! ending with the baseline check.

use crate::support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::*;
use http::Method;
use mcp_scoped_http::jsonrpc::Message;
use mcp_scoped_http::{Connector, Progress, RequestOptions, Resumption, ResumptionToken};
use serde_json::{Map, Value, json};

/// Where a callback puts what it is given.
fn collector<T: Send + 'static>() -> (Arc<Mutex<Vec<T>>>, impl Fn(T) + Send + Sync + 'static) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let into = seen.clone();
    (seen, move |value| into.lock().unwrap().push(value))
}

fn sse_server(eras: Eras) -> TestServer {
    TestServer::start(
        ServerConfig::default()
            .with_eras(eras)
            .with_tools(3)
            .with_response_mode(ResponseMode::Sse),
    )
}

fn deletes(eras: Eras) -> usize {
    match eras {
        Eras::Streamable2025 => 1,
        _ => 0,
    }
}

fn object(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        _ => panic!("not an object"),
    }
}

/// Progress notifications waiting in the shared receiver.
fn queued_progress(notifications: &mut tokio::sync::mpsc::Receiver<Message>) -> usize {
    let mut progress = 0;
    while let Ok(message) = notifications.try_recv() {
        if matches!(&message, Message::Notification(n) if n.method == "notifications/progress") {
            progress += 1;
        }
    }
    progress
}

/// Sends `late` on the listening stream, then a marker; returns the
/// methods the shared receiver got up to the marker (so `late` was read).
async fn after_late(
    server: &TestServer,
    notifications: &mut tokio::sync::mpsc::Receiver<Message>,
    late: &Value,
) -> Vec<String> {
    assert!(eventually(Duration::from_secs(5), || server.notify_listeners(late) > 0).await);
    let marker = json!({"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "marker"}});
    assert!(server.notify_listeners(&marker) > 0);
    let mut methods = Vec::new();
    while let Ok(Some(message)) =
        tokio::time::timeout(Duration::from_secs(5), notifications.recv()).await
    {
        if let Message::Notification(n) = message {
            let done = n.method == "notifications/message";
            methods.push(n.method);
            if done {
                break;
            }
        }
    }
    methods
}

fn progress_token(request: &RecordedRequest) -> Value {
    request
        .meta()
        .and_then(|meta| meta.get("progressToken"))
        .cloned()
        .expect("the request carries a progressToken")
}

#[test]
fn progress_goes_to_its_own_request_not_the_shared_receiver() {
    scenario(async {
        for eras in [Eras::Streamable2025, Eras::Modern, Eras::HttpSse] {
            let (server, caller, baseline) = support::baseline::scene(sse_server(eras)).await;
            let session = Connector::new(server.url())
                .client(caller.client.clone())
                .connect()
                .await
                .unwrap();
            let mut notifications = session.notifications().unwrap();
            let (first, on_first) = collector::<Progress>();
            let (second, on_second) = collector::<Progress>();
            let (a, b) = tokio::join!(
                session.call_tool_with(
                    "tool-000",
                    json!({}),
                    RequestOptions::default().on_progress(on_first)
                ),
                session.call_tool_with(
                    "tool-001",
                    json!({}),
                    RequestOptions::default().on_progress(on_second)
                ),
            );
            assert_eq!(a.unwrap()["structuredContent"]["tool"], "tool-000");
            assert_eq!(b.unwrap()["structuredContent"]["tool"], "tool-001");
            for seen in [&first, &second] {
                let seen = seen.lock().unwrap();
                let steps: Vec<f64> = seen.iter().map(|p| p.progress).collect();
                assert_eq!(
                    steps,
                    [1.0, 2.0, 3.0],
                    "{eras}: each request its own progress"
                );
                assert!(seen.iter().all(|p| p.total == Some(3.0)), "{eras}");
            }
            let calls = seen(&server, "tools/call");
            let tokens: Vec<Value> = calls.iter().map(progress_token).collect();
            assert_ne!(tokens[0], tokens[1], "{eras}: one token per request");
            assert_eq!(
                queued_progress(&mut notifications),
                0,
                "{eras}: routed instead of shared"
            );
            // Without the option, no token is made and nothing changes.
            session.call_tool("tool-002", json!({})).await.unwrap();
            let plain = seen(&server, "tools/call").pop().unwrap();
            assert!(
                plain.meta().and_then(|m| m.get("progressToken")).is_none(),
                "{eras}"
            );
            session.close().await;
            drop(session);
            baseline.check(&server, deletes(eras)).await;
        }
    });
}

#[test]
fn progress_on_the_listening_stream_reaches_its_request_while_it_runs() {
    scenario(async {
        let server = TestServer::start(
            ServerConfig::default()
                .with_tools(2)
                .with_listen(ListenMode::Open),
        );
        let (server, caller, baseline) = support::baseline::scene(server).await;
        server.push_fault(
            Fault::on_rpc("tools/call", FaultAction::Delay(Duration::from_millis(400))).times(1),
        );
        let session = Connector::new(server.url())
            .client(caller.client.clone())
            .connect()
            .await
            .unwrap();
        let mut notifications = session.notifications().unwrap();
        let (progress, on_progress) = collector::<Progress>();
        let call = session.call_tool_with(
            "tool-000",
            json!({}),
            RequestOptions::default().on_progress(on_progress),
        );
        let push = async {
            assert!(
                eventually(Duration::from_secs(5), || !seen(&server, "tools/call")
                    .is_empty())
                .await
            );
            let token = progress_token(&seen(&server, "tools/call")[0]);
            let message = json!({
                "jsonrpc": "2.0",
                "method": "notifications/progress",
                "params": {"progressToken": token, "progress": 0.5, "message": "halfway"},
            });
            assert!(
                eventually(Duration::from_secs(5), || server.notify_listeners(&message)
                    > 0)
                .await,
                "the listener is up"
            );
            token
        };
        let (result, token) = tokio::join!(call, push);
        result.unwrap();
        {
            let progress = progress.lock().unwrap();
            assert_eq!(progress.len(), 1, "{progress:?}");
            assert_eq!(progress[0].progress, 0.5);
            assert_eq!(progress[0].total, None);
            assert_eq!(progress[0].message.as_deref(), Some("halfway"));
        }
        // After the request: its token's progress is dropped, not shared.
        let late = json!({
            "jsonrpc": "2.0",
            "method": "notifications/progress",
            "params": {"progressToken": token, "progress": 1},
        });
        let methods = after_late(&server, &mut notifications, &late).await;
        assert_eq!(
            methods,
            ["notifications/message"],
            "the late progress was dropped"
        );
        assert_eq!(progress.lock().unwrap().len(), 1);
        // Progress with a token the session did not make is shared as before.
        let foreign = json!({
            "jsonrpc": "2.0",
            "method": "notifications/progress",
            "params": {"progressToken": "the-callers-own", "progress": 1},
        });
        let methods = after_late(&server, &mut notifications, &foreign).await;
        assert_eq!(methods, ["notifications/progress", "notifications/message"]);
        session.close().await;
        drop(session);
        baseline.check(&server, 1).await;
    });
}

#[test]
fn a_timed_out_request_stops_receiving_progress() {
    scenario(async {
        let server = TestServer::start(
            ServerConfig::default()
                .with_tools(2)
                .with_listen(ListenMode::Open),
        );
        let (server, caller, baseline) = support::baseline::scene(server).await;
        server.push_fault(Fault::on_rpc("tools/call", FaultAction::Hang).times(1));
        let session = Connector::new(server.url())
            .client(caller.client.clone())
            .connect()
            .await
            .unwrap();
        let mut notifications = session.notifications().unwrap();
        let (progress, on_progress) = collector::<Progress>();
        let marker = Arc::new(());
        let held = marker.clone();
        let options = RequestOptions::default()
            .timeout(Duration::from_millis(100))
            .on_progress(move |p| {
                let _ = &held;
                on_progress(p);
            });
        let error = session
            .call_tool_with("tool-000", json!({}), options)
            .await
            .unwrap_err();
        assert!(error.is_timeout(), "{error}");
        // The route, which held the callback, is gone with the request.
        assert_eq!(
            Arc::strong_count(&marker),
            1,
            "the route outlived its request"
        );
        let token = progress_token(&seen(&server, "tools/call")[0]);
        let late = json!({
            "jsonrpc": "2.0",
            "method": "notifications/progress",
            "params": {"progressToken": token, "progress": 1},
        });
        let methods = after_late(&server, &mut notifications, &late).await;
        assert_eq!(
            methods,
            ["notifications/message"],
            "the late progress was dropped"
        );
        assert!(progress.lock().unwrap().is_empty());
        session.close().await;
        drop(session);
        baseline.check(&server, 1).await;
    });
}

/// Dropping a request with progress after any number of polls leaves no
/// route behind (the callback it held is released at once), in both eras.
#[test]
fn dropping_a_request_after_any_number_of_polls_leaves_no_route() {
    scenario(async {
        for eras in [Eras::Streamable2025, Eras::Modern] {
            let server = sse_server(eras);
            server.push_fault(Fault::on_rpc(
                "tools/call",
                FaultAction::Delay(Duration::from_millis(1)),
            ));
            let (server, caller, baseline) = support::baseline::scene(server).await;
            let session = Connector::new(server.url())
                .client(caller.client.clone())
                .connect()
                .await
                .unwrap();
            let marker = Arc::new(());
            let mut completed_at = None;
            for polls in 0..500 {
                let held = marker.clone();
                let options = RequestOptions::default().on_progress(move |_| {
                    let _ = &held;
                });
                let call = session.call_tool_with("tool-000", json!({}), options);
                let outcome = poll_at_most(call, polls).await;
                assert_eq!(
                    Arc::strong_count(&marker),
                    1,
                    "{eras}, K={polls}: the route outlived its request"
                );
                if let Some(outcome) = outcome {
                    outcome.unwrap();
                    completed_at = Some(polls);
                    break;
                }
            }
            let completed_at = completed_at.expect("the call completes within the bound");
            assert!(completed_at >= 2, "{eras}: the call pended: {completed_at}");
            session.close().await;
            drop(session);
            mcp_scoped_http::shutdown().await;
            baseline.check(&server, deletes(eras)).await;
        }
    });
}

#[test]
fn a_panicking_progress_callback_is_contained() {
    scenario(async {
        let (server, caller, baseline) =
            support::baseline::scene(sse_server(Eras::Streamable2025)).await;
        let session = Connector::new(server.url())
            .client(caller.client.clone())
            .connect()
            .await
            .unwrap();
        let options = RequestOptions::default().on_progress(|_| panic!("the caller's bug"));
        let result = session.call_tool_with("tool-000", json!({}), options).await;
        assert_eq!(result.unwrap()["structuredContent"]["tool"], "tool-000");
        session.close().await;
        drop(session);
        baseline.check(&server, 1).await;
    });
}

#[test]
fn extra_meta_joins_the_params_meta_and_reserved_keys_are_refused() {
    scenario(async {
        for eras in [Eras::Streamable2025, Eras::Modern] {
            let (server, caller, baseline) = support::baseline::scene(sse_server(eras)).await;
            let session = Connector::new(server.url())
                .client(caller.client.clone())
                .connect()
                .await
                .unwrap();
            let options = RequestOptions::default().meta(object(
                json!({"example.com/trace": "t-1", "mine": "theirs"}),
            ));
            let params = json!({"name": "tool-000", "arguments": {}, "_meta": {"mine": "params", "kept": 1}});
            session
                .request_with("tools/call", Some(params), options)
                .await
                .unwrap();
            let sent = seen(&server, "tools/call").pop().unwrap();
            let meta = sent.meta().unwrap();
            assert_eq!(meta["example.com/trace"], "t-1", "{eras}");
            assert_eq!(
                meta["mine"], "theirs",
                "{eras}: the options' over the params'"
            );
            assert_eq!(meta["kept"], 1, "{eras}");
            if eras == Eras::Modern {
                assert_eq!(sent.meta_protocol_version(), Some("2026-07-28"));
                assert!(sent.meta_client_info().is_some());
            }
            // On a convenience method, with progress: both join.
            let (progress, on_progress) = collector::<Progress>();
            let options = RequestOptions::default()
                .meta(object(json!({"example.com/trace": "t-2"})))
                .on_progress(on_progress);
            session
                .call_tool_with("tool-001", json!({}), options)
                .await
                .unwrap();
            let sent = seen(&server, "tools/call").pop().unwrap();
            let meta = sent.meta().unwrap();
            assert_eq!(meta["example.com/trace"], "t-2", "{eras}");
            assert!(meta.get("progressToken").is_some(), "{eras}");
            assert_eq!(progress.lock().unwrap().len(), 3, "{eras}");

            let before = seen(&server, "tools/call").len();
            let refused = [
                RequestOptions::default().meta(object(
                    json!({"io.modelcontextprotocol/protocolVersion": "2020-01-01"}),
                )),
                RequestOptions::default()
                    .meta(object(json!({"progressToken": "mine"})))
                    .on_progress(|_| {}),
            ];
            for options in refused {
                let error = session
                    .call_tool_with("tool-000", json!({}), options)
                    .await
                    .unwrap_err();
                assert!(error.is_builder(), "{eras}: {error}");
            }
            // A progressToken of the caller's own in the params, with
            // on_progress: refused too.
            let error = session
                .request_with(
                    "tools/call",
                    Some(json!({"name": "tool-000", "_meta": {"progressToken": 5}})),
                    RequestOptions::default().on_progress(|_| {}),
                )
                .await
                .unwrap_err();
            assert!(error.is_builder(), "{eras}: {error}");
            assert_eq!(
                seen(&server, "tools/call").len(),
                before,
                "{eras}: nothing sent"
            );
            session.close().await;
            drop(session);
            baseline.check(&server, deletes(eras)).await;
        }
    });
}

#[test]
fn the_resumption_token_resumes_an_answer_in_another_process() {
    scenario(async {
        let (server, caller, baseline) =
            support::baseline::scene(sse_server(Eras::Streamable2025)).await;
        // This process never resumes by itself.
        let session = Connector::new(server.url())
            .client(caller.client.clone())
            .resumption(Resumption::default().max_attempts(0))
            .connect()
            .await
            .unwrap();
        server.push_fault(
            Fault::on_rpc(
                "tools/call",
                FaultAction::SseCutAfterEvent { retry_ms: Some(5) },
            )
            .times(1),
        );
        let (tokens, on_token) = collector::<ResumptionToken>();
        let (progress, on_progress) = collector::<Progress>();
        let marker = Arc::new(());
        let held = marker.clone();
        let on_progress = move |p| {
            let _ = &held;
            on_progress(p);
        };
        let error = session
            .call_tool_with(
                "tool-001",
                json!({}),
                RequestOptions::default()
                    .on_resumption_token(on_token)
                    .on_progress(on_progress),
            )
            .await
            .unwrap_err();
        assert!(error.to_string().contains("broke off"), "{error}");
        assert_eq!(
            Arc::strong_count(&marker),
            1,
            "the route ended with the error"
        );
        let token = tokens.lock().unwrap().last().cloned().expect("a token");
        let id = session.session_id().unwrap();
        assert_eq!(token.session_id(), Some(&id));
        assert!(!token.last_event_id().is_empty());

        // "After a restart": another session attached to the same server
        // session, with only what was stored.
        let progress_token = token.progress_token().cloned().expect("the progress token");
        let stored = ResumptionToken::new(token.request_id().clone(), token.last_event_id())
            .with_progress_token(progress_token);
        let other = Connector::new(server.url())
            .client(caller.client.clone())
            .attach(id, session.protocol_version())
            .listen(false)
            .connect()
            .await
            .unwrap();
        let (resumed_tokens, on_resumed_token) = collector::<ResumptionToken>();
        let (resumed_progress, on_resumed_progress) = collector::<Progress>();
        let result = other
            .resume(
                stored,
                RequestOptions::default()
                    .timeout(Duration::from_secs(5))
                    .on_resumption_token(on_resumed_token)
                    .on_progress(on_resumed_progress),
            )
            .await
            .unwrap();
        let steps: Vec<f64> = resumed_progress
            .lock()
            .unwrap()
            .iter()
            .map(|p| p.progress)
            .collect();
        assert_eq!(steps, [1.0, 2.0, 3.0], "the resumed answer's progress");
        assert_eq!(result["structuredContent"]["tool"], "tool-001");
        let gets: Vec<_> = seen_http(&server, Method::GET)
            .into_iter()
            .filter(|r| r.header("last-event-id").is_some())
            .collect();
        assert_eq!(gets.len(), 1);
        assert_eq!(gets[0].header("last-event-id"), Some(token.last_event_id()));
        assert!(
            !resumed_tokens.lock().unwrap().is_empty(),
            "the resumed answer reports too"
        );
        assert_eq!(seen(&server, "tools/call").len(), 1, "not sent again");
        assert!(
            progress.lock().unwrap().is_empty(),
            "the first request's route ended with it"
        );
        // A token of another session: refused before anything is sent.
        other.close().await;
        let third = Connector::new(server.url())
            .client(caller.client.clone())
            .listen(false)
            .connect()
            .await
            .unwrap();
        let error = third
            .resume(token, RequestOptions::default())
            .await
            .unwrap_err();
        assert!(error.is_builder(), "{error}");
        drop(other);
        third.close().await;
        drop(third);
        session.close().await;
        drop(session);
        baseline.check(&server, 2).await;
    });
}

#[test]
fn in_2026_there_is_no_resumption_token_and_resume_fails_clearly() {
    scenario(async {
        let (server, caller, baseline) = support::baseline::scene(sse_server(Eras::Modern)).await;
        let session = Connector::new(server.url())
            .client(caller.client.clone())
            .connect()
            .await
            .unwrap();
        let (tokens, on_token) = collector::<ResumptionToken>();
        session
            .call_tool_with(
                "tool-000",
                json!({}),
                RequestOptions::default().on_resumption_token(on_token),
            )
            .await
            .unwrap();
        assert!(tokens.lock().unwrap().is_empty());
        let error = session
            .resume(
                ResumptionToken::new(7.into(), "e-1"),
                RequestOptions::default(),
            )
            .await
            .unwrap_err();
        assert!(
            error.is_protocol() && error.to_string().contains("2026-07-28"),
            "{error}"
        );
        assert!(seen_http(&server, Method::GET).is_empty(), "nothing sent");
        session.close().await;
        drop(session);
        baseline.check(&server, 0).await;
    });
}

#[test]
fn resume_fails_clearly_where_it_cannot_work() {
    scenario(async {
        // A server with no GET stream (405).
        let server = TestServer::start(
            ServerConfig::default()
                .with_tools(1)
                .with_listen(ListenMode::Unsupported),
        );
        let (server, caller, baseline) = support::baseline::scene(server).await;
        let session = Connector::new(server.url())
            .client(caller.client.clone())
            .connect()
            .await
            .unwrap();
        let error = session
            .resume(
                ResumptionToken::new(1.into(), "e-1"),
                RequestOptions::default(),
            )
            .await
            .unwrap_err();
        assert!(
            error.is_protocol() && error.to_string().contains("405"),
            "{error}"
        );
        // Extra _meta has nothing to join; progress needs the token's.
        for options in [
            RequestOptions::default().on_progress(|_| {}),
            RequestOptions::default().meta(object(json!({"k": 1}))),
        ] {
            let error = session
                .resume(ResumptionToken::new(1.into(), "e-1"), options)
                .await
                .unwrap_err();
            assert!(error.is_builder(), "{error}");
        }
        session.close().await;
        drop(session);
        baseline.check(&server, 1).await;

        // HTTP+SSE (2024-11-05): answers come on the session's stream.
        let (server, caller, baseline) = support::baseline::scene(sse_server(Eras::HttpSse)).await;
        let session = Connector::new(server.url())
            .client(caller.client.clone())
            .connect()
            .await
            .unwrap();
        let error = session
            .resume(
                ResumptionToken::new(1.into(), "e-1"),
                RequestOptions::default(),
            )
            .await
            .unwrap_err();
        assert!(
            error.is_protocol() && error.to_string().contains("HTTP+SSE"),
            "{error}"
        );
        session.close().await;
        drop(session);
        baseline.check(&server, 0).await;
    });
}
