//! Every client message is its own POST, and each kind of answer is read
//! the way the transport spec says.

use crate::support::*;
use mcp_scoped_http::jsonrpc::{ErrorObject, Notification, Response};
use serde_json::{Value, json};

#[tokio::test]
async fn every_message_is_a_json_post_accepting_both_media_types() {
    let _shared = crate::support::shared();
    for client in clients() {
        let server = TestServer::start(ServerConfig::default());
        let wire = wire(client, &server);
        handshake(&wire).await;
        wire.request(request(2, "tools/list", None)).await.unwrap();
        let response = Response::result("server-1".into(), &json!({})).unwrap();
        wire.post_response(&response).await.unwrap();

        let posts = seen_http(&server, http::Method::POST);
        assert_eq!(posts.len(), 4, "{}", label(wire.client()));
        for post in posts {
            assert_eq!(post.header("content-type"), Some("application/json"));
            assert_eq!(
                post.header("accept"),
                Some("application/json, text/event-stream")
            );
            // One message per POST, never a batch.
            assert!(
                post.body.as_ref().is_some_and(Value::is_object),
                "{:?}",
                post.body
            );
            assert_eq!(post.body.as_ref().unwrap()["jsonrpc"], "2.0");
        }
    }
}

#[tokio::test]
async fn a_notification_answered_202_or_empty_2xx_is_done() {
    let _shared = crate::support::shared();
    for action in [
        None,
        Some(FaultAction::Status {
            status: 200,
            content_type: None,
            body: None,
            headers: vec![],
        }),
        Some(FaultAction::Status {
            status: 204,
            content_type: None,
            body: None,
            headers: vec![],
        }),
    ] {
        let server = TestServer::start(ServerConfig::default());
        let wire = wire(HttpClient::owned().unwrap(), &server);
        handshake(&wire).await;
        if let Some(action) = action {
            server.push_fault(Fault::on_rpc("notifications/progress", action));
        }
        let note = Notification {
            method: "notifications/progress".into(),
            params: Some(json!({"progressToken": 1, "progress": 1})),
        };
        wire.post_notification(&note).await.unwrap();
    }
}

#[tokio::test]
async fn a_202_to_a_request_is_a_protocol_error() {
    let _shared = crate::support::shared();
    let server = TestServer::start(ServerConfig::default());
    let wire = wire(HttpClient::owned().unwrap(), &server);
    handshake(&wire).await;
    server.push_fault(Fault::on_rpc("tools/list", FaultAction::Accepted));
    let error = wire
        .request(request(2, "tools/list", None))
        .await
        .unwrap_err();
    assert!(error.is_protocol(), "{error}");
    assert!(error.to_string().contains("202"), "{error}");
}

#[tokio::test]
async fn an_idless_jsonrpc_error_in_a_4xx_is_surfaced_with_status_and_code() {
    let _shared = crate::support::shared();
    let server = TestServer::start(ServerConfig::default());
    let wire = wire(HttpClient::owned().unwrap(), &server);
    handshake(&wire).await;
    server.push_fault(Fault::on_rpc(
        "notifications/initialized",
        FaultAction::Status {
            status: 400,
            content_type: Some("application/json".into()),
            body: Some(
                r#"{"jsonrpc":"2.0","error":{"code":-32600,"message":"bad notification"}}"#.into(),
            ),
            headers: vec![],
        },
    ));
    let note = Notification {
        method: "notifications/initialized".into(),
        params: None,
    };
    let error = wire.post_notification(&note).await.unwrap_err();
    assert!(error.is_status());
    assert_eq!(error.status(), Some(http::StatusCode::BAD_REQUEST));
    assert_eq!(error.rpc_code(), Some(-32600));
    assert_eq!(
        error.rpc_error(),
        Some(&ErrorObject {
            code: -32600,
            message: "bad notification".into(),
            data: None
        })
    );
}

#[tokio::test]
async fn a_401_carries_its_challenge() {
    let _shared = crate::support::shared();
    let server = TestServer::start(ServerConfig::default());
    server.push_fault(Fault::on_rpc(
        "initialize",
        FaultAction::Status {
            status: 401,
            content_type: None,
            body: None,
            headers: vec![(
                "www-authenticate".into(),
                r#"Bearer resource_metadata="http://127.0.0.1/.well-known/oauth-protected-resource""#.into(),
            )],
        },
    ));
    let wire = wire(HttpClient::owned().unwrap(), &server);
    let error = wire
        .request(initialize_request(1, "2025-11-25"))
        .await
        .unwrap_err();
    assert_eq!(error.status(), Some(http::StatusCode::UNAUTHORIZED));
    assert!(
        error
            .www_authenticate()
            .unwrap()
            .starts_with("Bearer resource_metadata=")
    );
    assert!(wire.session_id().is_none());
}

#[tokio::test]
async fn json_and_sse_answers_are_read_whatever_the_media_type_spelling() {
    let _shared = crate::support::shared();
    for (mode, content_type) in [
        (ResponseMode::Json, "Application/JSON; charset=utf-8"),
        (ResponseMode::Json, "application/json"),
        (ResponseMode::Sse, "text/event-stream;charset=UTF-8"),
        (ResponseMode::Sse, "TEXT/EVENT-STREAM"),
    ] {
        let server = TestServer::start(ServerConfig::default().with_response_mode(mode));
        let wire = wire(HttpClient::owned().unwrap(), &server);
        handshake(&wire).await;
        server.push_fault(Fault::on_rpc(
            "tools/list",
            FaultAction::ContentType(content_type.into()),
        ));
        let listed = wire.request(request(2, "tools/list", None)).await.unwrap();
        assert!(listed.result["tools"].is_array(), "{content_type}");
    }
}

#[tokio::test]
async fn a_wrong_malformed_or_cut_answer_fails_at_once_with_its_cause() {
    let _shared = crate::support::shared();
    let server = TestServer::start(ServerConfig::default());
    let wire = wire(HttpClient::owned().unwrap(), &server);
    handshake(&wire).await;

    server.push_fault(
        Fault::on_rpc("tools/list", FaultAction::ContentType("text/html".into())).times(1),
    );
    let error = wire
        .request(request(2, "tools/list", None))
        .await
        .unwrap_err();
    assert!(
        error.is_protocol() && error.to_string().contains("Content-Type"),
        "{error}"
    );

    server.push_fault(Fault::on_rpc("tools/list", FaultAction::MalformedJson).times(1));
    let error = wire
        .request(request(3, "tools/list", None))
        .await
        .unwrap_err();
    assert!(error.is_protocol(), "{error}");

    server.push_fault(Fault::on_rpc("tools/list", FaultAction::CutBody).times(1));
    let error = wire
        .request(request(4, "tools/list", None))
        .await
        .unwrap_err();
    assert!(error.is_transport(), "{error:?}");

    // The transport carries on after each failure.
    wire.request(request(5, "tools/list", None)).await.unwrap();
}

#[tokio::test]
async fn a_jsonrpc_error_response_is_an_rpc_error() {
    let _shared = crate::support::shared();
    let server = TestServer::start(ServerConfig::default());
    let wire = wire(HttpClient::owned().unwrap(), &server);
    handshake(&wire).await;
    let error = wire
        .request(request(2, "no/such/method", None))
        .await
        .unwrap_err();
    assert!(error.is_rpc(), "{error}");
    assert_eq!(error.rpc_code(), Some(-32601));
}

#[tokio::test]
async fn a_json_answer_with_a_byte_order_mark_is_read() {
    let _shared = crate::support::shared();
    let server = TestServer::start(ServerConfig::default());
    let wire = wire(HttpClient::owned().unwrap(), &server);
    handshake(&wire).await;
    server.push_fault(Fault::on_rpc(
        "ping",
        FaultAction::raw(
            200,
            "application/json",
            "\u{FEFF}{\"jsonrpc\":\"2.0\",\"id\":{id},\"result\":{}}",
        ),
    ));
    let exchange = wire.request(request(2, "ping", None)).await.unwrap();
    assert_eq!(exchange.result, json!({}));
}
