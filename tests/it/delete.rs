//! DELETE ends a session: 200, 202, 204, 404 and 405 all count as ended.

use crate::support::*;
use http::Method;
use mcp_scoped_http::wire::SessionEnd;

#[tokio::test]
async fn every_ending_status_ends_the_session() {
    let _shared = crate::support::shared();
    for status in [200u16, 202, 204, 404, 405] {
        for client in clients() {
            let server = TestServer::start(ServerConfig::default().with_delete_status(status));
            let wire = wire(client, &server);
            handshake(&wire).await;
            let id = wire.session_id().unwrap();
            let end = wire.delete_session().await.unwrap();
            assert_eq!(
                end,
                SessionEnd::Ended(http::StatusCode::from_u16(status).unwrap())
            );
            assert!(
                wire.session_id().is_none(),
                "the id is forgotten after {status}"
            );
            let deletes = seen_http(&server, Method::DELETE);
            assert_eq!(deletes.len(), 1);
            assert_eq!(deletes[0].header("mcp-session-id"), Some(id.expose()));
            assert_eq!(server.stats().deletes, 1);
            // A second DELETE has nothing to send.
            assert_eq!(wire.delete_session().await.unwrap(), SessionEnd::NoSession);
            assert_eq!(
                server.stats().deletes,
                1,
                "{} {status}",
                label(wire.client())
            );
        }
    }
}

#[tokio::test]
async fn the_server_forgets_the_session_after_delete() {
    let _shared = crate::support::shared();
    let server = TestServer::start(ServerConfig::default());
    let wire = wire(HttpClient::owned().unwrap(), &server);
    handshake(&wire).await;
    assert_eq!(server.stats().live_sessions, 1);
    wire.delete_session().await.unwrap();
    assert_eq!(server.stats().live_sessions, 0);
}

#[tokio::test]
async fn a_failing_delete_is_an_error_and_keeps_the_id() {
    let _shared = crate::support::shared();
    let server = TestServer::start(ServerConfig::default());
    let wire = wire(HttpClient::owned().unwrap(), &server);
    handshake(&wire).await;
    server.push_fault(
        Fault::on_http(
            Method::DELETE,
            FaultAction::Status {
                status: 500,
                content_type: None,
                body: None,
                headers: vec![],
            },
        )
        .times(1),
    );
    let error = wire.delete_session().await.unwrap_err();
    assert_eq!(
        error.status(),
        Some(http::StatusCode::INTERNAL_SERVER_ERROR)
    );
    assert!(wire.session_id().is_some());
    assert!(matches!(
        wire.delete_session().await.unwrap(),
        SessionEnd::Ended(_)
    ));
}

#[tokio::test]
async fn without_a_session_nothing_is_sent() {
    let _shared = crate::support::shared();
    let server = TestServer::start(ServerConfig::default().with_stateful(false));
    let wire = wire(HttpClient::owned().unwrap(), &server);
    handshake(&wire).await;
    assert_eq!(wire.delete_session().await.unwrap(), SessionEnd::NoSession);
    assert_eq!(server.stats().deletes, 0);
}
