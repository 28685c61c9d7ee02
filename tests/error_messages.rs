//! Errors say why: the root cause in the message, where it was going, and
//! the connect step, without walking `source()`.

use std::time::Duration;

use mcp_scoped_http::testkit::{Fault, FaultAction, ServerConfig, TestServer};
use mcp_scoped_http::{ConnectPhase, Connector, HttpClient};

/// A port nothing listens on: bound, then released.
fn refused_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

#[tokio::test]
async fn a_refused_connection_says_so_and_names_where_it_was_going() {
    let port = refused_port();
    for client in [
        HttpClient::owned().unwrap(),
        HttpClient::borrowed(
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .build_http(),
        ),
    ] {
        let error = Connector::new(format!("http://user:pw@127.0.0.1:{port}/mcp?key=secret"))
            .client(client)
            .connect()
            .await
            .unwrap_err();
        let text = error.to_string();
        assert!(error.is_transport(), "{error:?}");
        assert!(
            text.contains(&format!("connection refused (127.0.0.1:{port})")),
            "{text}"
        );
        // Where it was going, never the secrets of the URL.
        assert!(!text.contains("pw") && !text.contains("secret"), "{text}");
        assert!(error.is_retryable());
    }
}

#[tokio::test]
async fn a_timeout_names_the_connect_step_it_cut() {
    let server = TestServer::start(ServerConfig::default().with_faults(vec![Fault::on_rpc(
        "tools/list",
        FaultAction::Delay(Duration::from_secs(30)),
    )]));
    let error = Connector::new(server.url())
        .connect_timeout(Duration::from_millis(300))
        .connect()
        .await
        .unwrap_err();
    assert!(error.is_timeout(), "{error:?}");
    assert_eq!(error.connect_phase(), Some(ConnectPhase::Discovery));
    let text = error.to_string();
    assert!(text.contains("during discovery"), "{text}");
}
