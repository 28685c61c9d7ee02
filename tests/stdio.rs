//! stdio servers: a `Session` over a child process, every era, and the
//! process tree released on every way out. The server is
//! `tests/support/stdio_server.py` (Python's standard library only); the
//! SDKs' own stdio servers are in tests/interop.rs.

mod support;

use std::time::Duration;

use mcp_scoped_http::stdio::{ProcessEnd, StdioCommand};
use mcp_scoped_http::{Connector, ProtocolVersion, TransportKind};
use serde_json::json;

/// The fixture server with `args`.
fn fixture(args: &[&str]) -> StdioCommand {
    StdioCommand::new("python3")
        .arg("-u")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/support/stdio_server.py"
        ))
        .args(args)
}

#[tokio::test]
async fn a_2025_server_over_stdio_connects_calls_and_exits_when_stdin_closes() {
    let session = Connector::stdio(fixture(&["--era", "legacy"]))
        .connect()
        .await
        .expect("connect");
    let info = session.info();
    assert_eq!(info.transport, TransportKind::Stdio);
    assert_eq!(info.protocol_version, ProtocolVersion::V2025_11_25);
    assert!(session.catalog().tools.len() >= 7);
    let result = session
        .call_tool("echo", json!({"text": "hi"}))
        .await
        .expect("call");
    assert_eq!(result["content"][0]["text"], "hi");
    let released = session.close().await;
    match released.process {
        Some(ProcessEnd::Exited(status)) => assert!(status.success(), "{status}"),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_2026_server_over_stdio_is_found_by_its_probe() {
    let session = Connector::stdio(fixture(&["--era", "modern"]))
        .connect()
        .await
        .expect("connect");
    assert_eq!(session.info().protocol_version, ProtocolVersion::MODERN);
    assert!(session.info().probed);
    let result = session
        .call_tool("echo", json!({"text": "modern"}))
        .await
        .expect("call");
    assert_eq!(result["content"][0]["text"], "modern");
    let released = session.close().await;
    assert!(
        matches!(released.process, Some(ProcessEnd::Exited(_))),
        "{released:?}"
    );
}

#[tokio::test]
async fn a_server_that_crashes_at_start_fails_the_connect_with_its_stderr() {
    let error = Connector::stdio(fixture(&["--crash-at-start"]))
        .connect_timeout(Duration::from_secs(20))
        .connect()
        .await
        .expect_err("it crashed");
    let text = error.to_string();
    assert!(text.contains("exit status: 1"), "{text}");
    assert!(text.contains("fatal: bad config"), "{text}");
}
