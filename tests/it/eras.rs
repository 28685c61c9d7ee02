//! Era detection against the test kit's 2025 server: what it costs (one
//! `server/discover` answered 400 for the first session per endpoint, none
//! after), where the verdict is kept (the connector for the owned clients
//! it builds, the client for a lent one), pinning, and re-probing when the
//! verdict proves wrong.

use crate::support::*;
use mcp_scoped_http::{Connector, HttpClient, ProtocolVersion, SessionRelease, TransportKind};

fn probes(server: &TestServer) -> usize {
    server
        .requests()
        .iter()
        .filter(|r| r.rpc_method.as_deref() == Some("server/discover"))
        .count()
}

fn initializes(server: &TestServer) -> usize {
    server
        .requests()
        .iter()
        .filter(|r| r.rpc_method.as_deref() == Some("initialize"))
        .count()
}

#[tokio::test]
async fn a_2025_server_costs_one_probe_per_connector_and_none_after() {
    let _shared = crate::support::shared();
    let server = TestServer::start(ServerConfig::default());
    let connector = Connector::new(server.url()).listen(false);
    for round in 0..3 {
        let session = connector.connect().await.expect("connects");
        let info = session.info();
        assert_eq!(info.protocol_version, ProtocolVersion::V2025_11_25);
        assert_eq!(info.transport, TransportKind::StreamableHttp);
        assert_eq!(info.probed, round == 0, "round {round}");
        session.close().await;
    }
    assert_eq!(probes(&server), 1, "one probe for three sessions");
    assert_eq!(initializes(&server), 3);
    // A clone shares what the connector learned.
    let session = connector.clone().connect().await.expect("connects");
    assert!(!session.info().probed);
    session.close().await;
    assert_eq!(probes(&server), 1);
}

#[tokio::test]
async fn a_lent_client_keeps_the_verdict_for_every_connector_that_uses_it() {
    let _shared = crate::support::shared();
    let server = TestServer::start(ServerConfig::default());
    let client = HttpClient::borrowed(callers_hyper_client());
    assert_eq!(client.known_revision(&server.url()), None);
    for _ in 0..2 {
        // A new connector each time: the client remembers, not the connector.
        let session = Connector::new(server.url())
            .client(client.clone())
            .listen(false)
            .connect()
            .await
            .expect("connects");
        session.close().await;
    }
    assert_eq!(probes(&server), 1);
    assert_eq!(
        client.known_revision(&server.url()),
        Some(ProtocolVersion::V2025_11_25)
    );
}

#[tokio::test]
async fn a_pinned_revision_is_never_probed() {
    let _shared = crate::support::shared();
    let server = TestServer::start(ServerConfig::default());
    let client = HttpClient::borrowed(callers_hyper_client());
    let session = Connector::new(server.url())
        .client(client.clone())
        .protocol_version(ProtocolVersion::V2025_06_18)
        .listen(false)
        .connect()
        .await
        .expect("connects");
    assert_eq!(
        session.info().protocol_version,
        ProtocolVersion::V2025_06_18
    );
    assert!(!session.info().probed);
    session.close().await;
    assert_eq!(probes(&server), 0);
    let initialize = server
        .requests()
        .into_iter()
        .find(|r| r.rpc_method.as_deref() == Some("initialize"))
        .expect("initialize");
    assert_eq!(
        initialize.body.as_ref().unwrap()["params"]["protocolVersion"],
        "2025-06-18"
    );
    // A pin teaches the client nothing.
    assert_eq!(client.known_revision(&server.url()), None);
}

#[tokio::test]
async fn a_pinned_revision_the_server_does_not_speak_fails_without_fallback() {
    let _shared = crate::support::shared();
    let server = TestServer::start(ServerConfig::default());
    let error = Connector::new(server.url())
        .protocol_version(ProtocolVersion::V2026_07_28)
        .listen(false)
        .connect()
        .await
        .expect_err("a pinned 2026-07-28 connect to a 2025 server fails");
    assert_eq!(
        error.status(),
        Some(http::StatusCode::BAD_REQUEST),
        "{error}"
    );
    assert_eq!(initializes(&server), 0, "a pin never falls back");
}

#[tokio::test]
async fn errors_that_say_nothing_of_the_era_are_reported_as_they_are() {
    let _shared = crate::support::shared();
    for status in [401_u16, 403, 500, 503] {
        let server = TestServer::start(ServerConfig::default().with_fault(Fault::on_rpc(
            "server/discover",
            FaultAction::Status {
                status,
                content_type: None,
                body: None,
                headers: vec![],
            },
        )));
        let error = Connector::new(server.url())
            .listen(false)
            .connect()
            .await
            .expect_err("no fallback");
        assert_eq!(error.status().map(|s| s.as_u16()), Some(status), "{error}");
        assert_eq!(
            initializes(&server),
            0,
            "HTTP {status} is no evidence of an era"
        );
    }
}

#[tokio::test]
async fn a_discover_answered_with_an_empty_result_is_a_2025_server() {
    let _shared = crate::support::shared();
    // Some 2025 servers answer any method with `{"result": {}}`.
    let body = r#"{"jsonrpc":"2.0","id":1,"result":{}}"#;
    let server = TestServer::start(ServerConfig::default().with_fault(Fault::on_rpc(
        "server/discover",
        FaultAction::Status {
            status: 200,
            content_type: Some("application/json".into()),
            body: Some(body.into()),
            headers: vec![],
        },
    )));
    let session = Connector::new(server.url())
        .listen(false)
        .connect()
        .await
        .expect("falls back to initialize");
    assert_eq!(
        session.info().protocol_version,
        ProtocolVersion::V2025_11_25
    );
    session.close().await;
}

#[tokio::test]
async fn attach_is_refused_where_there_are_no_sessions() {
    let _shared = crate::support::shared();
    let server = TestServer::start(ServerConfig::default());
    for version in [ProtocolVersion::V2026_07_28, ProtocolVersion::V2024_11_05] {
        let id = mcp_scoped_http::SessionId::new("s-1").unwrap();
        let error = Connector::new(server.url())
            .attach(id, version)
            .connect()
            .await
            .expect_err("no session to attach to");
        assert!(error.is_builder(), "{error:?}");
        assert!(error.to_string().contains("attach"), "{error}");
    }
    assert!(server.requests().is_empty(), "nothing was sent");
}

#[tokio::test]
async fn a_discover_listing_no_streamable_revision_falls_back() {
    let _shared = crate::support::shared();
    let body =
        r#"{"jsonrpc":"2.0","id":{id},"result":{"supportedVersions":["2024-11-05","1999-01-01"]}}"#;
    let server = TestServer::start(ServerConfig::default().with_fault(Fault::on_rpc(
        "server/discover",
        FaultAction::Raw {
            status: 200,
            content_type: "application/json".into(),
            body: bytes::Bytes::from_static(body.as_bytes()),
        },
    )));
    let session = Connector::new(server.url())
        .listen(false)
        .connect()
        .await
        .expect("falls back to initialize");
    assert_eq!(
        session.info().protocol_version,
        ProtocolVersion::V2025_11_25
    );
    session.close().await;
    // Pinned to 2026-07-28: no fallback, a clear error.
    let error = Connector::new(server.url())
        .protocol_version(ProtocolVersion::V2026_07_28)
        .listen(false)
        .connect()
        .await
        .expect_err("pinned");
    assert!(error.is_protocol(), "{error:?}");
    assert!(
        error
            .to_string()
            .contains("none of the Streamable HTTP revisions"),
        "{error}"
    );
}

/// An `initialize` refused with `-32022` naming 2026-07-28 is a
/// redirection, not a verdict: a 2026-07-28 server whose first
/// `server/discover` got a bare 404 (which says "not this era") is spoken
/// to in the revision its refusal names, in the same connect.
#[tokio::test]
async fn an_initialize_refused_naming_2026_is_followed_in_the_same_connect() {
    let _shared = crate::support::shared();
    let refusal = r#"{"jsonrpc":"2.0","id":{id},"error":{"code":-32022,"message":"Unsupported protocol version","data":{"supported":["2026-07-28"],"requested":"2025-11-25"}}}"#;
    let server = TestServer::start(ServerConfig::default().with_eras(Eras::Modern).with_faults(
        vec![
            Fault::on_rpc("server/discover", FaultAction::status(404)).times(1),
            Fault::on_rpc(
                "initialize",
                FaultAction::raw(400, "application/json", refusal),
            ),
        ],
    ));
    let connector = Connector::new(server.url()).listen(false);
    let session = connector.connect().await.expect("the refusal is followed");
    assert_eq!(
        session.info().protocol_version,
        ProtocolVersion::V2026_07_28
    );
    assert!(session.info().probed);
    let released = session.close().await;
    // The session in use has none to end; the refused `initialize` is an
    // earlier one, which the server never created.
    assert!(
        matches!(released.session, SessionRelease::Stateless),
        "{released:?}"
    );
    assert!(
        matches!(released.earlier_sessions[..], [SessionRelease::NoSessionId]),
        "{released:?}"
    );
    assert_eq!(probes(&server), 2, "the probe, then the redirection");
    assert_eq!(initializes(&server), 1);
    // Remembered: the next connect opens 2026-07-28 at once.
    let session = connector.connect().await.expect("remembered");
    assert!(!session.info().probed);
    session.close().await;
    assert_eq!((probes(&server), initializes(&server)), (3, 1));
}
