//! `MCP-Protocol-Version`: the negotiated revision on every request after
//! initialize, from 2025-06-18 on.

use crate::support::*;
use http::Method;

async fn exercise(version: &str) -> Vec<RecordedRequest> {
    let server = TestServer::start(ServerConfig::default().with_listen(ListenMode::Open));
    let wire = wire(HttpClient::owned().unwrap(), &server);
    handshake_with(&wire, version).await;
    assert_eq!(wire.protocol_version().unwrap().as_str(), version);
    wire.request(request(2, "tools/list", None)).await.unwrap();
    drop(wire.open_get_stream(None).await.unwrap());
    wire.delete_session().await.unwrap();
    server.requests()
}

#[tokio::test]
async fn the_negotiated_revision_goes_on_every_later_request() {
    let _shared = crate::support::shared();
    for version in ["2025-06-18", "2025-11-25"] {
        let requests = exercise(version).await;
        let (initialize, later) = requests.split_first().unwrap();
        assert_eq!(initialize.header("mcp-protocol-version"), None);
        assert_eq!(later.len(), 4);
        for r in later {
            assert_eq!(
                r.header("mcp-protocol-version"),
                Some(version),
                "{} {:?}",
                r.method,
                r.rpc_method
            );
        }
        assert!(later.iter().any(|r| r.method == Method::GET));
        assert!(later.iter().any(|r| r.method == Method::DELETE));
    }
}

#[tokio::test]
async fn a_2025_03_26_session_sends_no_version_header() {
    let _shared = crate::support::shared();
    let requests = exercise("2025-03-26").await;
    assert!(
        requests
            .iter()
            .all(|r| r.header("mcp-protocol-version").is_none())
    );
}

#[tokio::test]
async fn an_unknown_revision_in_the_answer_is_refused() {
    let _shared = crate::support::shared();
    let server = TestServer::start(ServerConfig::default());
    server.push_fault(Fault::on_rpc(
        "initialize",
        FaultAction::ProtocolVersion("2099-01-01".into()),
    ));
    let wire = wire(HttpClient::owned().unwrap(), &server);
    let init = wire
        .request(initialize_request(1, "2025-11-25"))
        .await
        .unwrap();
    let error = init.result["protocolVersion"]
        .as_str()
        .unwrap()
        .parse::<mcp_scoped_http::ProtocolVersion>()
        .unwrap_err();
    assert!(error.is_protocol());
    assert!(error.to_string().contains("2099-01-01"));
}
