//! The GET listening stream: opened with `Accept: text/event-stream`; 405
//! means the server has none.

use std::time::Duration;

use crate::support::*;
use http::Method;

#[tokio::test]
async fn a_server_without_a_stream_answers_405_which_is_not_an_error() {
    let _shared = crate::support::shared();
    for client in clients() {
        let server =
            TestServer::start(ServerConfig::default().with_listen(ListenMode::Unsupported));
        let wire = wire(client, &server);
        handshake(&wire).await;
        assert!(
            wire.open_get_stream(None).await.unwrap().is_none(),
            "{}",
            label(wire.client())
        );
        // The session carries on over POST.
        wire.request(request(2, "tools/list", None)).await.unwrap();
    }
}

#[tokio::test]
async fn the_stream_opens_with_the_right_headers_and_closes_when_dropped() {
    let _shared = crate::support::shared();
    for client in clients() {
        let server = TestServer::start(ServerConfig::default().with_listen(ListenMode::Open));
        let wire = wire(client, &server);
        handshake(&wire).await;
        let stream = wire.open_get_stream(None).await.unwrap().expect("a stream");
        assert!(stream.is_sse());
        let get = seen_http(&server, Method::GET).pop().unwrap();
        assert_eq!(get.header("accept"), Some("text/event-stream"));
        assert!(get.header("mcp-session-id").is_some());
        assert_eq!(get.header("last-event-id"), None);
        assert!(
            eventually(Duration::from_secs(5), || server
                .stats()
                .listen_streams_open
                == 1)
            .await
        );
        drop(stream);
        assert!(
            eventually(Duration::from_secs(5), || server
                .stats()
                .listen_streams_open
                == 0)
            .await,
            "{}: dropping the stream closes it",
            label(wire.client())
        );
    }
}

#[tokio::test]
async fn resumption_sends_last_event_id() {
    let _shared = crate::support::shared();
    let server = TestServer::start(ServerConfig::default().with_listen(ListenMode::Open));
    let wire = wire(HttpClient::owned().unwrap(), &server);
    handshake(&wire).await;
    drop(wire.open_get_stream(Some("stream-7:42")).await.unwrap());
    let get = seen_http(&server, Method::GET).pop().unwrap();
    assert_eq!(get.header("last-event-id"), Some("stream-7:42"));
}

#[tokio::test]
async fn other_statuses_are_errors() {
    let _shared = crate::support::shared();
    let server = TestServer::start(ServerConfig::default().with_listen(ListenMode::Open));
    let wire = wire(HttpClient::owned().unwrap(), &server);
    handshake(&wire).await;
    server.push_fault(Fault::on_http(
        Method::GET,
        FaultAction::Status {
            status: 500,
            content_type: None,
            body: None,
            headers: vec![],
        },
    ));
    let error = wire.open_get_stream(None).await.unwrap_err();
    assert_eq!(
        error.status(),
        Some(http::StatusCode::INTERNAL_SERVER_ERROR)
    );
}
