//! A caller's tower-http stack (timeout, tracing, decompression, its own
//! auth header) around its hyper client, lent with `HttpClient::borrowed`:
//! the stack runs for every request of ours, each session's requests carry
//! its own token and the caller's header and nothing of another session,
//! and the caller's own requests through the stack carry only its header.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use crate::support::baseline::{Baseline, Caller};
use crate::support::*;
use bytes::Bytes;
use http::{HeaderName, HeaderValue, Method, StatusCode};
use http_body_util::{BodyExt, Full};
use mcp_scoped_http::BoxError;
use mcp_scoped_http::{Connector, HttpClient, Session};
use serde_json::json;
use tokio::task::JoinSet;
use tower::{ServiceBuilder, ServiceExt};
use tower_http::decompression::DecompressionLayer;
use tower_http::map_response_body::MapResponseBodyLayer;
use tower_http::set_header::SetRequestHeaderLayer;
use tower_http::timeout::TimeoutLayer;
use tower_http::trace::TraceLayer;

/// The caller's stack, outermost first: its own auth header, tracing, a
/// response timeout (answering 504 when it passes), decompression, and the
/// hyper client with its body boxed (tower-http's timeout needs a body type
/// with a `Default`, which hyper's `Incoming` has not).
macro_rules! callers_stack {
    ($raw:expr, $timeout:expr) => {
        ServiceBuilder::new()
            .layer(SetRequestHeaderLayer::overriding(
                HeaderName::from_static("x-caller-auth"),
                HeaderValue::from_static("caller-secret"),
            ))
            .layer(TraceLayer::new_for_http())
            .layer(TimeoutLayer::with_status_code(
                StatusCode::GATEWAY_TIMEOUT,
                $timeout,
            ))
            .layer(DecompressionLayer::new())
            .layer(MapResponseBodyLayer::new(|body: hyper::body::Incoming| {
                body.map_err(BoxError::from).boxed_unsync()
            }))
            .service($raw)
    };
}

/// A request of the caller's own, through its stack.
macro_rules! own_through_stack {
    ($stack:expr, $server:expr, $tag:expr) => {{
        let request = http::Request::post($server.url())
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("x-caller", $tag)
            .body(Full::new(Bytes::from_static(
                br#"{"jsonrpc":"2.0","id":"caller","method":"ping"}"#,
            )))
            .unwrap();
        let response = $stack
            .clone()
            .oneshot(request)
            .await
            .expect("the caller's stack works");
        response
            .into_body()
            .collect()
            .await
            .expect("its body reads");
    }};
}

fn values(request: &RecordedRequest, name: &str) -> Vec<String> {
    request
        .headers
        .get_all(name)
        .iter()
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .collect()
}

fn describe(r: &RecordedRequest) -> String {
    format!("{} {:?} {:?}", r.method, r.rpc_method, r.header("x-caller"))
}

async fn session_on(lent: &HttpClient, server: &TestServer, name: &str) -> Session {
    Connector::new(server.url())
        .client(lent.clone())
        .bearer(&format!("token-{name}"))
        .header("x-session-hook", name)
        .connect()
        .await
        .unwrap()
}

#[test]
fn sessions_with_different_tokens_on_a_callers_tower_stack_send_only_their_own() {
    scenario(async {
        let server = TestServer::start(ServerConfig::default().with_listen(ListenMode::Open));
        let mut caller = Caller::new();
        let stack = callers_stack!(caller.raw.clone(), Duration::from_secs(5));
        caller.client = HttpClient::borrowed(stack.clone());
        caller.own_request(&server).await;
        own_through_stack!(stack, server, "stack-warm");
        let baseline = Baseline::take(Some(&caller));

        let a = Arc::new(session_on(&caller.client, &server, "a").await);
        let b = Arc::new(session_on(&caller.client, &server, "b").await);
        assert_eq!(caller.client.hooks().len(), 4, "two hooks per session");
        let mut calls = JoinSet::new();
        for i in 0..10 {
            let session = if i % 2 == 0 { a.clone() } else { b.clone() };
            calls.spawn(async move { session.call_tool("tool-002", json!({"i": i})).await });
        }
        own_through_stack!(stack, server, "stack-during");
        while let Some(done) = calls.join_next().await {
            done.unwrap().unwrap();
        }
        // Closing one session leaves the other's hooks, and it works on.
        let released = a.close().await;
        assert_eq!(released.hooks_removed, 2);
        assert_eq!(caller.client.hooks().len(), 2);
        b.call_tool("tool-000", json!({"after": "a closed"}))
            .await
            .unwrap();
        own_through_stack!(stack, server, "stack-between");
        b.close().await;
        drop((a, b));
        own_through_stack!(stack, server, "stack-after");

        let mut session_of_id: HashMap<String, String> = HashMap::new();
        let mut calls_per_session: HashMap<String, usize> = HashMap::new();
        let mut tags = Vec::new();
        for r in server.requests() {
            if let Some(tag) = r.header("x-caller") {
                tags.push(tag.to_owned());
                assert!(values(&r, "authorization").is_empty(), "{}", describe(&r));
                assert!(values(&r, "x-session-hook").is_empty(), "{}", describe(&r));
                assert!(r.header("mcp-session-id").is_none(), "{}", describe(&r));
                if tag != "own" {
                    // Through the stack (`own` is the baseline's raw client).
                    assert_eq!(values(&r, "x-caller-auth"), ["caller-secret"]);
                }
                continue;
            }
            // Ours: the stack ran (its header, and decompression asked for
            // gzip), and this session's token and header, nothing else.
            assert_eq!(
                values(&r, "x-caller-auth"),
                ["caller-secret"],
                "{}",
                describe(&r)
            );
            assert!(
                r.header("accept-encoding")
                    .is_some_and(|v| v.contains("gzip")),
                "{}",
                describe(&r)
            );
            let name = values(&r, "x-session-hook");
            assert_eq!(name.len(), 1, "one session header: {}", describe(&r));
            let name = name[0].clone();
            assert_eq!(
                values(&r, "authorization"),
                [format!("Bearer token-{name}")],
                "{}",
                describe(&r)
            );
            if let Some(id) = r.header("mcp-session-id") {
                let owner = session_of_id.entry(id.to_owned()).or_insert(name.clone());
                assert_eq!(*owner, name, "one id, one session: {}", describe(&r));
            }
            if r.rpc_method.as_deref() == Some("tools/call") {
                *calls_per_session.entry(name).or_default() += 1;
            }
        }
        assert_eq!(calls_per_session["a"], 5);
        assert_eq!(calls_per_session["b"], 6);
        for tag in ["stack-during", "stack-between", "stack-after"] {
            assert!(tags.iter().any(|t| t == tag), "{tag} reached the server");
        }
        assert_eq!(seen_http(&server, Method::DELETE).len(), 2);
        baseline.check(&server, 2).await;
    });
}

#[test]
fn the_callers_timeout_layer_answers_for_a_slow_request_and_the_session_carries_on() {
    scenario(async {
        let server = TestServer::start(ServerConfig::default().with_listen(ListenMode::Open));
        let mut caller = Caller::new();
        let stack = callers_stack!(caller.raw.clone(), Duration::from_millis(300));
        caller.client = HttpClient::borrowed(stack.clone());
        caller.own_request(&server).await;
        own_through_stack!(stack, server, "stack-warm");
        let baseline = Baseline::take(Some(&caller));

        let session = session_on(&caller.client, &server, "a").await;
        server.push_fault(
            Fault::on_rpc("tools/call", FaultAction::Delay(Duration::from_secs(1))).times(1),
        );
        // The caller's layer answers 504 for the request; only that request
        // fails.
        let error = session.call_tool("tool-000", json!({})).await.unwrap_err();
        assert_eq!(error.status(), Some(StatusCode::GATEWAY_TIMEOUT), "{error}");
        session.call_tool("tool-000", json!({})).await.unwrap();
        session.close().await;
        drop(session);
        baseline.check(&server, 1).await;
    });
}

/// A caller's own hyper-util client on `QuickAckConnector` (the owned
/// client's fix for servers that leave Nagle on) serves sessions like any
/// other lent client, SSE answers included, and stays the caller's.
#[test]
fn a_callers_client_on_the_quick_ack_connector_serves_sessions() {
    use hyper_util::client::legacy::Client;
    use hyper_util::client::legacy::connect::HttpConnector;
    use hyper_util::rt::TokioExecutor;
    use mcp_scoped_http::client::{QuickAckConnector, RequestBody};

    scenario(async {
        let server =
            TestServer::start(ServerConfig::default().with_response_mode(ResponseMode::Sse));
        let mut http = HttpConnector::new();
        http.set_nodelay(true);
        let hyper = Client::builder(TokioExecutor::new())
            .build::<_, RequestBody>(QuickAckConnector::new(http));
        let lent = HttpClient::borrowed(hyper.clone());
        for _ in 0..3 {
            let session = Connector::new(server.url())
                .client(lent.clone())
                .bearer("quick")
                .connect()
                .await
                .expect("connect");
            session
                .call_tool("tool-000", json!({}))
                .await
                .expect("a call");
            session.close().await;
        }
        assert!(lent.hooks().is_empty());
        // Still the caller's: its own request goes through.
        let own = http::Request::post(server.url())
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(Full::new(Bytes::from_static(
                br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#,
            )))
            .unwrap();
        let status = hyper
            .request(own)
            .await
            .expect("the caller's request")
            .status();
        assert_ne!(status, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(server.stats().sessions_created, 3);
        assert_eq!(server.stats().deletes, 3);
    });
}
