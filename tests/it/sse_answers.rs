//! Requests answered with an SSE stream: order, priming events, line ends,
//! BOM, comments, batches, and streams that end early.

use crate::support::*;
use bytes::Bytes;
use mcp_scoped_http::jsonrpc::Message;
use serde_json::json;

fn sse(server_config: ServerConfig) -> TestServer {
    TestServer::start(server_config.with_response_mode(ResponseMode::Sse))
}

#[tokio::test]
async fn server_messages_before_the_response_arrive_in_order() {
    let _shared = crate::support::shared();
    for client in clients() {
        let server = sse(ServerConfig::default().with_notifications_before_response(3));
        let wire = wire(client, &server);
        handshake(&wire).await;
        let exchange = wire.request(request(2, "tools/list", None)).await.unwrap();
        assert!(exchange.result["tools"].is_array());
        let methods: Vec<_> = exchange
            .preceding
            .iter()
            .map(|m| m.method().unwrap())
            .collect();
        assert_eq!(
            methods,
            ["notifications/message"; 3],
            "{}",
            label(wire.client())
        );
        let order: Vec<_> = exchange
            .preceding
            .iter()
            .map(|m| match m {
                Message::Notification(n) => n.params.clone().unwrap()["data"].clone(),
                other => panic!("{other:?}"),
            })
            .collect();
        let mut sorted = order.clone();
        sorted.sort_by_key(|v| v.to_string());
        assert_eq!(order, sorted, "notifications out of order");
    }
}

#[tokio::test]
async fn progress_notifications_come_before_the_result() {
    let _shared = crate::support::shared();
    let server = sse(ServerConfig::default());
    let wire = wire(HttpClient::owned().unwrap(), &server);
    handshake(&wire).await;
    let exchange = wire
        .request(request(
            2,
            "tools/call",
            Some(json!({"name": "tool-000", "arguments": {"text": "hi"}, "_meta": {"progressToken": "p"}})),
        ))
        .await
        .unwrap();
    assert_eq!(exchange.result["structuredContent"]["tool"], "tool-000");
    assert!(!exchange.preceding.is_empty());
    assert!(
        exchange
            .preceding
            .iter()
            .all(|m| m.method() == Some("notifications/progress"))
    );
}

#[tokio::test]
async fn priming_events_are_not_parsed_and_their_id_is_kept() {
    let _shared = crate::support::shared();
    let server = sse(ServerConfig::default());
    let wire = wire(HttpClient::owned().unwrap(), &server);
    handshake(&wire).await;
    let mut stream = wire
        .post_request(&request(2, "tools/list", None))
        .await
        .unwrap();
    assert!(stream.is_sse());
    let first = stream.next().await.unwrap().unwrap();
    assert!(matches!(first, Message::Response(_)), "{first:?}");
    assert!(
        stream.last_event_id().is_some(),
        "the response event id is kept"
    );
    assert!(stream.next().await.is_none());
}

/// The same answer framed every way the SSE grammar allows.
#[tokio::test]
async fn line_ends_bom_and_comments_are_handled() {
    let _shared = crate::support::shared();
    let framings: [&str; 5] = [
        "id: a\ndata:\n\ndata: {json}\n\n",
        "id: a\r\ndata:\r\n\r\ndata: {json}\r\n\r\n",
        "id: a\rdata:\r\rdata: {json}\r\r",
        "\u{FEFF}: a comment\n\nid: a\ndata:\n\n: another\ndata: {json}\n\n",
        "retry: 100\nid: a\nevent: message\ndata:{json}\n\n",
    ];
    for framing in framings {
        let server = sse(ServerConfig::default());
        let wire = wire(HttpClient::owned().unwrap(), &server);
        handshake(&wire).await;
        let body = framing.replace(
            "{json}",
            r#"{"jsonrpc":"2.0","id":{id},"result":{"ok":true}}"#,
        );
        server.push_fault(Fault::on_rpc(
            "ping",
            FaultAction::Raw {
                status: 200,
                content_type: "text/event-stream".into(),
                body: Bytes::from(body),
            },
        ));
        let exchange = wire.request(request(7, "ping", None)).await.unwrap();
        assert_eq!(exchange.result, json!({"ok": true}), "{framing:?}");
    }
}

#[tokio::test]
async fn a_stream_that_ends_without_the_response_is_an_error_for_that_request() {
    let _shared = crate::support::shared();
    for action in [
        FaultAction::SseEndWithoutResponse,
        FaultAction::SseCutAfterEvent {
            retry_ms: Some(500),
        },
    ] {
        let server = sse(ServerConfig::default());
        let wire = wire(HttpClient::owned().unwrap(), &server);
        handshake(&wire).await;
        server.push_fault(Fault::on_rpc("tools/list", action.clone()).times(1));
        let error = wire
            .request(request(2, "tools/list", None))
            .await
            .unwrap_err();
        assert!(error.is_protocol(), "{action:?}: {error}");
        assert!(
            error.to_string().contains("without the response"),
            "{error}"
        );
        // The transport is still usable.
        wire.request(request(3, "tools/list", None)).await.unwrap();
    }
}

#[tokio::test]
async fn a_cut_stream_keeps_its_last_event_id_and_retry() {
    let _shared = crate::support::shared();
    let server = sse(ServerConfig::default());
    let wire = wire(HttpClient::owned().unwrap(), &server);
    handshake(&wire).await;
    server.push_fault(Fault::on_rpc(
        "tools/list",
        FaultAction::SseCutAfterEvent {
            retry_ms: Some(750),
        },
    ));
    let mut stream = wire
        .post_request(&request(2, "tools/list", None))
        .await
        .unwrap();
    assert!(stream.next().await.is_none());
    assert!(stream.last_event_id().is_some());
    assert_eq!(stream.retry(), Some(std::time::Duration::from_millis(750)));
}

#[tokio::test]
async fn batches_are_received_from_a_2025_03_26_server() {
    let _shared = crate::support::shared();
    for mode in [ResponseMode::Json, ResponseMode::Sse] {
        let server = TestServer::start(ServerConfig::default().with_response_mode(mode));
        let wire = wire(HttpClient::owned().unwrap(), &server);
        handshake_with(&wire, "2025-03-26").await;
        server.push_fault(Fault::on_rpc("tools/list", FaultAction::BatchResponse));
        let exchange = wire.request(request(2, "tools/list", None)).await.unwrap();
        assert!(exchange.result["tools"].is_array(), "{mode:?}");
        assert_eq!(exchange.preceding.len(), 1, "{mode:?}");
    }
}
