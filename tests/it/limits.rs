//! Size limits: an answer over the limit is a clear error, read with bounded
//! memory, and the transport carries on.

use std::sync::atomic::Ordering;

use crate::support::*;
use mcp_scoped_http::TransportConfig;

use crate::support::alloc::{COUNTED_LIVE, COUNTED_PEAK, counting_here};

/// Runs `f` and returns how far this thread's heap grew above where it
/// started.
async fn peak_growth<T>(f: impl std::future::Future<Output = T>) -> (T, usize) {
    counting_here(true);
    let base = COUNTED_LIVE.load(Ordering::Relaxed);
    COUNTED_PEAK.store(base, Ordering::Relaxed);
    let out = f.await;
    counting_here(false);
    let growth = COUNTED_PEAK.load(Ordering::Relaxed) - base;
    (out, growth.max(0) as usize)
}

const LIMIT: usize = 64 * 1024;
/// The limit, hyper's read buffer and the decoder's copy, with room to spare;
/// far below what the server sends (16 MiB, or an endless line).
const BOUND: usize = 4 * 1024 * 1024;

fn limited(server: &TestServer) -> mcp_scoped_http::wire::StreamableHttp {
    wire(HttpClient::owned().unwrap(), server).with_config(
        TransportConfig::default()
            .max_json_body(LIMIT)
            .max_sse_event(LIMIT),
    )
}

/// Scripts `action` on one `tools/list` and checks that it fails with a
/// limit error, bounded memory, and a transport that carries on.
async fn refused_with_bounded_memory(mode: ResponseMode, action: FaultAction) {
    let server = TestServer::start(ServerConfig::default().with_response_mode(mode));
    let wire = limited(&server);
    handshake(&wire).await;
    server.push_fault(Fault::on_rpc("tools/list", action.clone()).times(1));
    let (result, growth) = peak_growth(wire.request(request(2, "tools/list", None))).await;
    let error = result.unwrap_err();
    assert!(error.is_limit(), "{action:?}: {error}");
    assert!(error.to_string().contains(&LIMIT.to_string()), "{error}");
    assert!(growth < BOUND, "{action:?}: heap grew {growth} bytes");
    wire.request(request(3, "tools/list", None)).await.unwrap();
}

#[tokio::test]
async fn a_json_body_over_the_limit_is_refused() {
    let _shared = crate::support::shared();
    let action = FaultAction::OversizeJson {
        bytes: 16 * 1024 * 1024,
    };
    refused_with_bounded_memory(ResponseMode::Json, action).await;
}

#[tokio::test]
async fn an_sse_event_over_the_limit_is_refused() {
    let _shared = crate::support::shared();
    let action = FaultAction::OversizeSseEvent {
        bytes: 16 * 1024 * 1024,
    };
    refused_with_bounded_memory(ResponseMode::Sse, action).await;
}

#[tokio::test]
async fn an_sse_line_that_never_ends_is_refused_with_bounded_memory() {
    let _shared = crate::support::shared();
    refused_with_bounded_memory(ResponseMode::Sse, FaultAction::SseNeverEndingLine).await;
}

#[tokio::test]
async fn defaults_are_documented_values() {
    let _shared = crate::support::shared();
    let config = TransportConfig::default();
    assert_eq!(config.max_json_body, 8 * 1024 * 1024);
    assert_eq!(config.max_sse_event, 8 * 1024 * 1024);
    assert_eq!(config.max_session_id_len, 512);
    assert_eq!(config.max_batch_messages, 1024);
}

#[tokio::test]
async fn a_batch_over_its_limit_is_refused_in_a_json_body_and_in_an_sse_event() {
    let _shared = crate::support::shared();
    let server = TestServer::start(ServerConfig::default());
    let wire = wire(HttpClient::owned().unwrap(), &server)
        .with_config(TransportConfig::default().max_batch_messages(4));
    handshake(&wire).await;
    let batch = |notes: usize| {
        let mut messages = vec![r#"{"jsonrpc":"2.0","method":"notifications/message"}"#; notes];
        messages.push(r#"{"jsonrpc":"2.0","id":{id},"result":{}}"#);
        format!("[{}]", messages.join(","))
    };
    for (content_type, body) in [
        ("application/json", batch(3)),
        (
            "text/event-stream",
            format!("id: 1\ndata: {}\n\n", batch(3)),
        ),
    ] {
        server.push_fault(
            Fault::on_rpc("tools/list", FaultAction::raw(200, content_type, &body)).times(1),
        );
        let exchange = wire.request(request(2, "tools/list", None)).await.unwrap();
        assert_eq!(
            exchange.preceding.len(),
            3,
            "{content_type}: up to the limit"
        );
    }
    for (content_type, body) in [
        ("application/json", batch(4)),
        (
            "text/event-stream",
            format!("id: 1\ndata: {}\n\n", batch(4)),
        ),
    ] {
        server.push_fault(
            Fault::on_rpc("tools/list", FaultAction::raw(200, content_type, &body)).times(1),
        );
        let error = wire
            .request(request(3, "tools/list", None))
            .await
            .unwrap_err();
        assert!(
            error.is_limit()
                && error
                    .to_string()
                    .contains("a batch of more than 4 messages"),
            "{content_type}: {error}"
        );
    }
    wire.request(request(4, "tools/list", None)).await.unwrap();
}

#[tokio::test]
async fn a_declared_oversize_json_body_is_refused() {
    let _shared = crate::support::shared();
    let server = TestServer::start(ServerConfig::default());
    let wire = limited(&server);
    handshake(&wire).await;
    let padding = "x".repeat(2 * LIMIT);
    let body = format!(r#"{{"jsonrpc":"2.0","id":{{id}},"result":{{"padding":"{padding}"}}}}"#);
    server.push_fault(
        Fault::on_rpc(
            "tools/list",
            FaultAction::raw(200, "application/json", &body),
        )
        .times(1),
    );
    let error = wire
        .request(request(2, "tools/list", None))
        .await
        .unwrap_err();
    assert!(error.is_limit(), "{error}");
    wire.request(request(3, "tools/list", None)).await.unwrap();
}

#[tokio::test]
async fn too_many_messages_before_the_response_is_a_limit_error() {
    let _shared = crate::support::shared();
    let server = TestServer::start(ServerConfig::default());
    let wire = wire(HttpClient::owned().unwrap(), &server)
        .with_config(TransportConfig::default().max_preceding_messages(4));
    handshake(&wire).await;
    let note = "data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{}}\n\n";
    let body = format!(
        "{}data: {{\"jsonrpc\":\"2.0\",\"id\":{{id}},\"result\":{{}}}}\n\n",
        note.repeat(5)
    );
    server.push_fault(Fault::on_rpc(
        "ping",
        FaultAction::raw(200, "text/event-stream", &body),
    ));
    let error = wire.request(request(2, "ping", None)).await.unwrap_err();
    assert!(
        error.is_limit() && error.to_string().contains("more than 4"),
        "{error}"
    );
    // Four are fine.
    let body = format!(
        "{}data: {{\"jsonrpc\":\"2.0\",\"id\":{{id}},\"result\":{{}}}}\n\n",
        note.repeat(4)
    );
    server.clear_faults();
    server.push_fault(Fault::on_rpc(
        "ping",
        FaultAction::raw(200, "text/event-stream", &body),
    ));
    assert_eq!(
        wire.request(request(3, "ping", None))
            .await
            .unwrap()
            .preceding
            .len(),
        4
    );
}
