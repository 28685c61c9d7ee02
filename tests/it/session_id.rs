//! `Mcp-Session-Id`: taken only from the answer to initialize, validated,
//! never echoed when invalid, and sent on every later request.

use crate::support::*;
use http::Method;
use mcp_scoped_http::jsonrpc::Notification;

#[tokio::test]
async fn the_session_id_goes_on_every_request_after_initialize() {
    let _shared = crate::support::shared();
    for client in clients() {
        let server = TestServer::start(ServerConfig::default().with_listen(ListenMode::Open));
        let wire = wire(client, &server);
        handshake(&wire).await;
        let id = wire.session_id().expect("a stateful server issues an id");
        wire.request(request(2, "tools/list", None)).await.unwrap();
        let stream = wire
            .open_get_stream(None)
            .await
            .unwrap()
            .expect("listening stream");
        drop(stream);
        wire.delete_session().await.unwrap();

        let requests = server.requests();
        assert_eq!(requests.len(), 5, "{}", label(wire.client()));
        let (first, later) = requests.split_first().unwrap();
        assert_eq!(first.rpc_method.as_deref(), Some("initialize"));
        assert_eq!(first.header("mcp-session-id"), None);
        for later in later {
            assert_eq!(
                later.header("mcp-session-id"),
                Some(id.expose()),
                "{} {:?}",
                later.method,
                later.rpc_method
            );
        }
        assert_eq!(
            later.iter().map(|r| r.method.clone()).collect::<Vec<_>>(),
            [Method::POST, Method::POST, Method::GET, Method::DELETE]
        );
    }
}

#[tokio::test]
async fn a_stateless_server_gets_no_session_header() {
    let _shared = crate::support::shared();
    let server = TestServer::start(ServerConfig::default().with_stateful(false));
    let wire = wire(HttpClient::owned().unwrap(), &server);
    handshake(&wire).await;
    assert!(wire.session_id().is_none());
    wire.request(request(2, "tools/list", None)).await.unwrap();
    assert!(
        server
            .requests()
            .iter()
            .all(|r| r.header("mcp-session-id").is_none())
    );
}

#[tokio::test]
async fn a_session_id_on_any_other_answer_is_ignored() {
    let _shared = crate::support::shared();
    let server = TestServer::start(ServerConfig::default());
    let wire = wire(HttpClient::owned().unwrap(), &server);
    handshake(&wire).await;
    let issued = wire.session_id().unwrap();
    server.push_fault(Fault::on_rpc(
        "ping",
        FaultAction::Status {
            status: 200,
            content_type: Some("application/json".into()),
            body: Some(r#"{"jsonrpc":"2.0","id":2,"result":{}}"#.into()),
            headers: vec![("mcp-session-id".into(), "hijacked".into())],
        },
    ));
    wire.request(request(2, "ping", None)).await.unwrap();
    assert_eq!(wire.session_id(), Some(issued.clone()));
    wire.request(request(3, "tools/list", None)).await.unwrap();
    let last = server.requests().pop().unwrap();
    assert_eq!(last.header("mcp-session-id"), Some(issued.expose()));
}

#[tokio::test]
async fn invalid_session_ids_are_refused_and_never_echoed() {
    let _shared = crate::support::shared();
    let long = vec![b'a'; 4096];
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("space", b"abc def".to_vec()),
        ("tab", b"abc\tdef".to_vec()),
        ("obs-text", b"abc\xe9def".to_vec()),
        ("too long", long),
    ];
    for (what, raw) in cases {
        let server = TestServer::start(ServerConfig::default());
        server.push_fault(Fault::on_rpc(
            "initialize",
            FaultAction::SessionId(raw.clone()),
        ));
        let wire = wire(HttpClient::owned().unwrap(), &server);
        let error = wire
            .request(initialize_request(1, "2025-11-25"))
            .await
            .unwrap_err();
        assert!(error.is_protocol(), "{what}: {error}");
        assert!(
            error.to_string().contains("Mcp-Session-Id"),
            "{what}: {error}"
        );
        let shown = format!("{error} {error:?}");
        assert!(!shown.contains("abc"), "{what}: the id was echoed: {shown}");
        assert!(wire.session_id().is_none(), "{what}");

        // Nothing that follows carries it.
        let note = Notification {
            method: "notifications/initialized".into(),
            params: None,
        };
        let _ = wire.post_notification(&note).await;
        assert!(
            server
                .requests()
                .iter()
                .all(|r| r.header("mcp-session-id").is_none()),
            "{what}"
        );
    }
}
