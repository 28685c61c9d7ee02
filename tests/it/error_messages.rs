//! Errors say why: the root cause in the message, where it was going, and
//! the connect step, without walking `source()`.

use std::time::Duration;

use mcp_scoped_http::{ConnectPhase, Connector, HttpClient};
use mcp_scoped_http_testkit::{Fault, FaultAction, ServerConfig, TestServer};

/// A port nothing listens on: bound, then released.
fn refused_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

#[tokio::test]
async fn a_refused_connection_says_so_and_names_where_it_was_going() {
    let _shared = crate::support::shared();
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
    let _shared = crate::support::shared();
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

/// A server that answers every `initialize` with `status`, this
/// Content-Type and body.
fn answering(status: u16, content_type: &str, body: &str) -> TestServer {
    TestServer::start(ServerConfig::default().with_faults(vec![Fault::on_rpc(
        "initialize",
        FaultAction::Status {
            status,
            content_type: Some(content_type.to_owned()),
            body: Some(body.to_owned()),
            headers: Vec::new(),
        },
    )]))
}

#[tokio::test]
async fn an_error_status_shows_the_start_of_a_text_body() {
    let _shared = crate::support::shared();
    // Playwright's server, asked from the wrong host.
    let server = answering(
        403,
        "text/plain; charset=utf-8",
        "Access is only allowed at localhost:18401\n",
    );
    let error = Connector::new(server.url()).connect().await.unwrap_err();
    assert_eq!(error.status().map(|s| s.as_u16()), Some(403));
    assert_eq!(
        error.body_excerpt(),
        Some("Access is only allowed at localhost:18401")
    );
    let text = error.to_string();
    assert!(
        text.contains(
            "HTTP 403 Forbidden: the server said \"Access is only allowed at localhost:18401\""
        ),
        "{text}"
    );

    // JSON that is no JSON-RPC error is the server's words too; a JSON-RPC
    // error is shown as one, not twice.
    let server = answering(
        400,
        "application/json",
        r#"{"error": "missing tenant header"}"#,
    );
    let error = Connector::new(server.url()).connect().await.unwrap_err();
    assert_eq!(
        error.body_excerpt(),
        Some(r#"{"error": "missing tenant header"}"#)
    );
    let server = answering(
        400,
        "application/json",
        r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"no"}}"#,
    );
    let error = Connector::new(server.url()).connect().await.unwrap_err();
    assert_eq!(error.rpc_error().map(|e| e.code), Some(-32600));
    assert_eq!(error.body_excerpt(), None);

    // Not text: nothing kept.
    let server = answering(500, "application/octet-stream", "\u{1}\u{2}binary");
    let error = Connector::new(server.url()).connect().await.unwrap_err();
    assert_eq!(error.body_excerpt(), None, "{error}");
}

#[tokio::test]
async fn a_hostile_error_body_is_escaped_and_cut() {
    let _shared = crate::support::shared();
    // A terminal escape, a bidirectional override, a page of text.
    let body = format!(
        "<html>\n  <body>\u{1b}[2J\u{202e}gnp.exe {}</body></html>",
        "word ".repeat(50_000)
    );
    let server = answering(502, "text/html", &body);
    let error = Connector::new(server.url()).connect().await.unwrap_err();
    let excerpt = error.body_excerpt().expect("a text body").to_owned();
    assert!(
        excerpt.starts_with("<html> <body>\\u{1b}[2J\\u{202e}gnp.exe word word"),
        "{excerpt}"
    );
    assert!(excerpt.ends_with('…'), "{excerpt}");
    assert!(
        excerpt.len() <= mcp_scoped_http::BODY_EXCERPT + '…'.len_utf8(),
        "{} bytes",
        excerpt.len()
    );
    let text = error.to_string();
    assert!(
        !text.contains('\u{1b}') && !text.contains('\u{202e}'),
        "{text:?}"
    );
    // Still the status's error, retried as a 502 is.
    assert!(error.is_retryable());
}

#[tokio::test]
async fn an_error_body_that_never_ends_costs_the_status_nothing() {
    let _shared = crate::support::shared();
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    // A 403 whose text body sends one chunk, then nothing, for ever.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let server = tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            if socket.read(&mut byte).await.unwrap() == 0 {
                return;
            }
            head.push(byte[0]);
        }
        socket
            .write_all(
                b"HTTP/1.1 403 Forbidden\r\ncontent-type: text/plain\r\n\
                  transfer-encoding: chunked\r\n\r\n5\r\nwait \r\n",
            )
            .await
            .unwrap();
        std::future::pending::<()>().await;
    });
    // Without a bound on the body's read, the connect's own deadline would
    // end it first, as a timeout.
    let error = Connector::new(url)
        .connect_timeout(Duration::from_secs(20))
        .connect()
        .await
        .unwrap_err();
    server.abort();
    assert_eq!(error.status().map(|s| s.as_u16()), Some(403), "{error}");
    assert!(!error.is_timeout(), "{error}");
    assert_eq!(error.body_excerpt(), Some("wait"));
}
