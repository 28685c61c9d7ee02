//! Server-to-client requests (F23): `ping`, `roots/list`,
//! `elicitation/create` and `sampling/createMessage`, on a POST's SSE answer
//! and on the GET stream, are answered by POSTs carrying the session and
//! version headers; what has no handler gets "method not found"; the
//! capabilities sent in `initialize` follow the handlers.

use crate::support;
use crate::support::hostile_http;

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use crate::support::baseline::Caller;
use crate::support::*;
use mcp_scoped_http::jsonrpc::ErrorObject;
use mcp_scoped_http::{Connector, Session};
use serde_json::{Value, json};

const PROMPT: Duration = Duration::from_secs(5);
const METHOD_NOT_FOUND: i64 = -32601;

/// A connector with a roots list and an elicitation handler that echoes
/// the message it was asked.
fn handled(server: &TestServer, caller: Option<&Caller>) -> Connector {
    let mut connector = Connector::new(server.url())
        .bearer("f23")
        .roots(vec![json!({"uri": "file:///work", "name": "work"})])
        .on_elicitation(|params| async move {
            Ok(json!({"action": "accept", "content": {"echo": params["message"]}}))
        });
    if let Some(caller) = caller {
        connector = connector.client(caller.client.clone());
    }
    connector
}

/// The server requests tried, with the answer the [`handled`] client gives.
fn cases() -> Vec<(&'static str, Value, Value)> {
    vec![
        ("ping", json!({}), json!({})),
        (
            "roots/list",
            json!({}),
            json!({"roots": [{"uri": "file:///work", "name": "work"}]}),
        ),
        (
            "elicitation/create",
            json!({"message": "your name?", "requestedSchema": {"type": "object"}}),
            json!({"action": "accept", "content": {"echo": "your name?"}}),
        ),
    ]
}

/// The POST that carried the client's answer `answer`, checked for the
/// session's headers.
fn assert_answered_with_session_headers(server: &TestServer, session: &Session, answer: &Value) {
    let id = &answer["id"];
    let post = server
        .requests()
        .into_iter()
        .find(|r| {
            r.method == http::Method::POST
                && r.rpc_method.is_none()
                && r.body.as_ref().is_some_and(|b| &b["id"] == id)
        })
        .unwrap_or_else(|| panic!("no POST carried the answer to {id}"));
    assert_eq!(
        post.header("mcp-session-id"),
        Some(session.session_id().unwrap().expose()),
        "answer to {id}"
    );
    assert_eq!(
        post.header("mcp-protocol-version"),
        Some(session.protocol_version().as_str()),
        "answer to {id}"
    );
    assert_eq!(post.header("authorization"), Some("Bearer f23"));
    assert_eq!(post.body.as_ref().unwrap()["jsonrpc"], "2.0");
}

/// The capabilities of the `index`-th initialize the server saw.
fn capabilities(server: &TestServer, index: usize) -> Value {
    seen(server, "initialize")[index].body.as_ref().unwrap()["params"]["capabilities"].clone()
}

#[test]
fn f23_server_requests_on_a_posts_stream_are_answered_with_the_session_headers() {
    scenario(async {
        for borrowed in [false, true] {
            let (server, caller, baseline) =
                support::baseline::scene(TestServer::start(ServerConfig::default())).await;
            let session = handled(&server, borrowed.then_some(&caller))
                .connect()
                .await
                .unwrap();
            for (n, (method, params, expected)) in cases().into_iter().enumerate() {
                server.push_fault(
                    Fault::on_rpc(
                        "tools/call",
                        FaultAction::ServerRequest {
                            method: method.into(),
                            params,
                        },
                    )
                    .times(1),
                );
                let result =
                    tokio::time::timeout(PROMPT, session.call_tool("tool-000", json!({"n": n})))
                        .await
                        .expect("answered well before the server's 10 s wait")
                        .unwrap();
                let structured = &result["structuredContent"];
                assert_eq!(structured["clientAnswer"], expected, "{method}");
                assert_eq!(structured["arguments"]["n"], n, "{method}");
                let answers = server.client_answers();
                assert_eq!(answers.len(), n + 1, "{method}: one answer each");
                let answer = answers.last().unwrap();
                assert_eq!(answer["result"], expected, "{method}");
                assert_answered_with_session_headers(&server, &session, answer);
            }
            session.close().await;
            drop(session);
            baseline.check(&server, 1).await;
        }
    });
}

#[test]
fn f23_server_requests_on_the_get_stream_are_answered_with_the_session_headers() {
    scenario(async {
        for borrowed in [false, true] {
            let (server, caller, baseline) = support::baseline::scene(TestServer::start(
                ServerConfig::default().with_listen(ListenMode::Open),
            ))
            .await;
            let session = handled(&server, borrowed.then_some(&caller))
                .connect()
                .await
                .unwrap();
            assert!(eventually(PROMPT, || server.stats().listen_streams_open == 1).await);
            for (n, (method, params, expected)) in cases().into_iter().enumerate() {
                assert_eq!(server.request_listeners(method, params), 1);
                assert!(
                    eventually(PROMPT, || server.client_answers().len() == n + 1).await,
                    "{method} answered"
                );
                let answers = server.client_answers();
                let answer = answers.last().unwrap();
                assert_eq!(answer["result"], expected, "{method}");
                assert!(answer.get("error").is_none());
                assert_answered_with_session_headers(&server, &session, answer);
            }
            // Answering never disturbed the session.
            let result = session.call_tool("tool-001", json!({"after": 1})).await;
            assert_eq!(
                result.unwrap()["structuredContent"]["arguments"]["after"],
                1
            );
            session.close().await;
            drop(session);
            baseline.check(&server, 1).await;
        }
    });
}

#[test]
fn f23_without_a_handler_a_server_request_gets_method_not_found() {
    scenario(async {
        let (server, caller, baseline) = support::baseline::scene(TestServer::start(
            ServerConfig::default().with_listen(ListenMode::Open),
        ))
        .await;
        let session = Connector::new(server.url())
            .bearer("f23")
            .client(caller.client.clone())
            .connect()
            .await
            .unwrap();
        let unhandled = [
            "roots/list",
            "elicitation/create",
            "sampling/createMessage",
            "custom/unknown",
        ];
        // On a POST's stream: the call itself succeeds, carrying the refusal.
        for method in unhandled {
            server.push_fault(
                Fault::on_rpc(
                    "tools/call",
                    FaultAction::ServerRequest {
                        method: method.into(),
                        params: json!({}),
                    },
                )
                .times(1),
            );
            let result = tokio::time::timeout(PROMPT, session.call_tool("tool-000", json!({})))
                .await
                .unwrap()
                .unwrap();
            let refusal = &result["structuredContent"]["clientAnswer"]["error"];
            assert_eq!(refusal["code"], METHOD_NOT_FOUND, "{method}: {result}");
            let answer = server.client_answers().pop().unwrap();
            assert!(answer.get("result").is_none(), "{method}");
            assert_eq!(answer["error"]["code"], METHOD_NOT_FOUND);
            assert_answered_with_session_headers(&server, &session, &answer);
        }
        // ping is always answered.
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
        let result = session.call_tool("tool-000", json!({})).await.unwrap();
        assert_eq!(result["structuredContent"]["clientAnswer"], json!({}));

        // On the GET stream.
        assert!(eventually(PROMPT, || server.stats().listen_streams_open == 1).await);
        let before = server.client_answers().len();
        for (n, method) in unhandled.into_iter().enumerate() {
            assert_eq!(server.request_listeners(method, json!({})), 1);
            assert!(
                eventually(PROMPT, || server.client_answers().len() == before + n + 1).await,
                "{method} answered"
            );
            let answer = server.client_answers().pop().unwrap();
            assert_eq!(answer["error"]["code"], METHOD_NOT_FOUND, "{method}");
            assert_answered_with_session_headers(&server, &session, &answer);
        }
        session.close().await;
        drop(session);
        baseline.check(&server, 1).await;
    });
}

#[test]
fn f23_capabilities_follow_the_handlers() {
    scenario(async {
        let (server, caller, baseline) =
            support::baseline::scene(TestServer::start(ServerConfig::default())).await;

        // No handler: no capability.
        let bare = Connector::new(server.url())
            .client(caller.client.clone())
            .connect()
            .await
            .unwrap();
        assert_eq!(capabilities(&server, 0), json!({}));
        bare.close().await;

        // roots and elicitation: both, and nothing else.
        let two = handled(&server, Some(&caller)).connect().await.unwrap();
        assert_eq!(
            capabilities(&server, 1),
            json!({"roots": {}, "elicitation": {}})
        );
        two.close().await;

        // All three; a handler's own error is passed on as the answer.
        let three = handled(&server, Some(&caller))
            .on_sampling(|_| async {
                Err(ErrorObject {
                    code: -1,
                    message: "the user declined".into(),
                    data: None,
                })
            })
            .connect()
            .await
            .unwrap();
        let all = json!({"roots": {}, "elicitation": {}, "sampling": {}});
        assert_eq!(capabilities(&server, 2), all);
        server.push_fault(
            Fault::on_rpc(
                "tools/call",
                FaultAction::ServerRequest {
                    method: "sampling/createMessage".into(),
                    params: json!({"messages": [], "maxTokens": 1}),
                },
            )
            .times(1),
        );
        let result = three.call_tool("tool-000", json!({})).await.unwrap();
        let answer = &result["structuredContent"]["clientAnswer"]["error"];
        assert_eq!(answer["code"], -1);
        assert_eq!(answer["message"], "the user declined");

        // A re-initialize after expiry declares the same.
        server.expire_sessions();
        three.call_tool("tool-000", json!({})).await.unwrap();
        assert_eq!(seen(&server, "initialize").len(), 4);
        assert_eq!(capabilities(&server, 3), all);
        three.close().await;
        drop((bare, two, three));
        // The first session of `three` expired: it is not DELETEd.
        baseline.check(&server, 3).await;
    });
}

/// `close()` called from a server-request handler (answering on the
/// listener's own task) does not wait its own 2 s join bound: it returns at
/// once, deferred to the reaper, which still DELETEs the session.
#[test]
fn close_from_a_server_request_handler_returns_at_once() {
    scenario(async {
        let server = TestServer::start(ServerConfig::default().with_listen(ListenMode::Open));
        let slot: Arc<OnceLock<Arc<Session>>> = Arc::default();
        let (done_tx, mut done) = tokio::sync::mpsc::channel(1);
        let handler_slot = slot.clone();
        let session = Connector::new(server.url())
            .on_elicitation(move |_| {
                let slot = handler_slot.clone();
                let done_tx = done_tx.clone();
                async move {
                    let session = slot.get().expect("set after connect").clone();
                    let started = Instant::now();
                    let released = session.close().await;
                    let _ = done_tx.send((started.elapsed(), released)).await;
                    Ok(json!({"action": "decline"}))
                }
            })
            .connect()
            .await
            .unwrap();
        let session = Arc::new(session);
        slot.set(session.clone()).ok().unwrap();
        assert!(eventually(PROMPT, || server.stats().listen_streams_open == 1).await);
        assert_eq!(
            server.request_listeners("elicitation/create", json!({"message": "close?"})),
            1
        );
        let (took, released) = tokio::time::timeout(PROMPT, done.recv())
            .await
            .expect("the handler's close returned")
            .unwrap();
        assert!(took < Duration::from_millis(500), "close took {took:?}");
        assert!(released.deferred, "{released:?}");
        assert!(session.is_closed());
        // The reaper finishes: the session is DELETEd.
        mcp_scoped_http::shutdown().await;
        assert!(eventually(PROMPT, || server.stats().deletes == 1).await);
        assert!(eventually(PROMPT, || session.ledger().tasks == 0).await);
    });
}

/// A server whose `tools/call` answer sends 200 `ping`s and then the
/// result at once, and which holds every answer POST until released.
struct Pinging {
    server: hostile_http::Server,
    /// Answer POSTs held now, and the most held at once.
    held: Arc<std::sync::atomic::AtomicUsize>,
    peak: Arc<std::sync::atomic::AtomicUsize>,
    gate: Arc<tokio::sync::Semaphore>,
}

const PINGS: usize = 200;

impl Pinging {
    fn start() -> Pinging {
        use hostile_http::{Server, empty, json_response, message, result};
        use std::sync::atomic::{AtomicUsize, Ordering};
        let held = Arc::new(AtomicUsize::new(0));
        let peak = Arc::new(AtomicUsize::new(0));
        let gate = Arc::new(tokio::sync::Semaphore::new(0));
        let (h, p, g) = (held.clone(), peak.clone(), gate.clone());
        let server = Server::start(move |seen, state| {
            let (held, peak, gate) = (h.clone(), p.clone(), g.clone());
            async move {
                if seen.is_response() {
                    let now = held.fetch_add(1, Ordering::SeqCst) + 1;
                    peak.fetch_max(now, Ordering::SeqCst);
                    let _unheld = scopeguard::guard((), |()| {
                        held.fetch_sub(1, Ordering::SeqCst);
                    });
                    if let Ok(permit) = gate.acquire().await {
                        permit.forget();
                    }
                    return empty(202);
                }
                match (&seen.method, seen.rpc()) {
                    (&http::Method::POST, Some("initialize")) => {
                        let mut r = json_response(
                            200,
                            &result(
                                &seen.id(),
                                json!({"protocolVersion": "2025-11-25", "capabilities": {},
                                       "serverInfo": {"name": "pinging", "version": "1"}}),
                            ),
                        );
                        r.headers_mut()
                            .insert("mcp-session-id", "pinging".parse().unwrap());
                        r
                    }
                    (&http::Method::POST, Some("tools/call")) => {
                        let (tx, response) = state.sse();
                        for n in 0..PINGS {
                            let ping = json!({"jsonrpc": "2.0", "id": format!("p{n}"),
                                              "method": "ping"});
                            tx.try_send(message(&ping)).unwrap();
                        }
                        let done = result(&seen.id(), json!({"content": [], "done": true}));
                        tx.try_send(message(&done)).unwrap();
                        // The stream stays open: the client ends it.
                        response
                    }
                    (&http::Method::POST, _) => empty(202),
                    (&http::Method::DELETE, _) => empty(200),
                    _ => empty(405),
                }
            }
        });
        Pinging {
            server,
            held,
            peak,
            gate,
        }
    }

    fn held(&self) -> usize {
        self.held.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// The ids the client's answers carried, in the order they came.
    fn answered(&self) -> Vec<String> {
        self.server
            .state
            .seen()
            .iter()
            .filter(|s| s.is_response())
            .map(|s| s.id().as_str().unwrap_or_default().to_owned())
            .collect()
    }
}

impl Drop for Pinging {
    fn drop(&mut self) {
        self.gate.close();
    }
}

/// Issue 26, item 11: server requests on a `tools/call` answer are answered
/// aside, at most 16 at once, so the result the server sent right behind
/// 200 `ping`s is read at once, however long the answer POSTs take; the
/// rest wait their turn in arrival order; close with answers in flight
/// leaves no task. Before: answered one at a time inline, the call waited
/// for every answer POST in turn (timed out here, one answer in flight).
#[test]
fn server_requests_on_an_answer_are_answered_aside_and_never_delay_its_result() {
    scenario(async {
        let server = Pinging::start();
        let before = (mcp_scoped_http::ledger(), support::baseline::alive_tasks());
        let session = Connector::new(server.server.url("/mcp"))
            .protocol_version(mcp_scoped_http::ProtocolVersion::V2025_11_25)
            .listen(false)
            .request_timeout(Duration::from_secs(20))
            .connect()
            .await
            .expect("connects");
        let result = tokio::time::timeout(PROMPT, session.call_tool("slow", json!({})))
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "the result waited for the answers: {} answered, {} at once at most",
                    server.answered().len(),
                    server.peak.load(std::sync::atomic::Ordering::SeqCst)
                )
            })
            .unwrap();
        assert_eq!(result["done"], true);
        // The answers are still held by the server: none delayed the result.
        assert!(server.held() > 0, "answers were in flight");
        assert!(
            eventually(PROMPT, || server.held() == 16).await,
            "{} in flight",
            server.held()
        );
        // The first 16 (in any order), then, as room frees up, in order.
        let mut first = server.answered();
        first.sort_by_key(|id| id[1..].parse::<usize>().unwrap());
        let expected: Vec<String> = (0..16).map(|n| format!("p{n}")).collect();
        assert_eq!(first, expected);
        server.gate.add_permits(8);
        assert!(
            eventually(PROMPT, || server.answered().len() == 24
                && server.held() == 16)
            .await
        );
        let next: Vec<String> = server.answered()[16..].to_vec();
        let expected: Vec<String> = (16..24).map(|n| format!("p{n}")).collect();
        assert_eq!(next, expected, "the backlog is answered in arrival order");
        let peak = server.peak.load(std::sync::atomic::Ordering::SeqCst);
        assert!(peak > 1 && peak <= 16, "{peak} answers at once");
        // Closed with 16 answers in flight and 176 waiting: nothing stays.
        session.close().await;
        drop(session);
        let back = eventually(PROMPT, || {
            mcp_scoped_http::ledger() == before.0 && support::baseline::alive_tasks() <= before.1
        })
        .await;
        assert!(
            back,
            "ledger {:?} (before {:?}), tasks {} (before {})",
            mcp_scoped_http::ledger(),
            before.0,
            support::baseline::alive_tasks(),
            before.1
        );
        assert!(
            server.answered().len() < PINGS,
            "nothing answered after close"
        );
    });
}
