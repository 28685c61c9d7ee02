//! The CLI against the peers (`.ci/install-peers`): what `probe` finds.

use std::process::{Command, Stdio};

use serde_json::Value;

use crate::support::peers::*;

/// The CLI's `probe --json URL` says which era it found: `protocolVersion`
/// and `transport` in its JSON, for a server of each.
#[tokio::test]
#[ignore = "needs the peers: run .ci/install-peers first"]
async fn cli_probe_reports_the_era() {
    let _shared = crate::support::shared();
    let cli = env!("CARGO_BIN_EXE_mcp-scoped-http");
    let cases = [
        (python2("stateful"), "/mcp", "2026-07-28", "streamable-http"),
        (ts2("stateless"), "/mcp", "2026-07-28", "streamable-http"),
        (rmcp(&[]), "/mcp", "2026-07-28", "streamable-http"),
        (python("stateful"), "/mcp", "2025-11-25", "streamable-http"),
        (server_everything(), "/mcp", "2025-11-25", "streamable-http"),
        (python_sse(), "/sse", "2024-11-05", "http+sse"),
        (ts_sse(), "/sse", "2024-11-05", "http+sse"),
    ];
    for (peer, path, version, transport) in cases {
        let url = peer.url_at(path);
        let output = tokio::task::spawn_blocking(move || {
            Command::new(cli)
                .args(["probe", "--json", "--timeout", "30", &url])
                .stdin(Stdio::null())
                .output()
                .expect("the CLI runs")
        })
        .await
        .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "{}: probe failed ({}):\n{stdout}\n{}",
            peer.name,
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        let probe: Value = serde_json::from_str(stdout.trim())
            .unwrap_or_else(|e| panic!("{}: not one JSON object ({e}):\n{stdout}", peer.name));
        assert_eq!(probe["protocolVersion"], version, "{}: {probe}", peer.name);
        assert_eq!(probe["transport"], transport, "{}: {probe}", peer.name);
        assert!(
            probe["tools"].as_array().is_some_and(|t| !t.is_empty()),
            "{}: {probe}",
            peer.name
        );
    }
}
