//! `mcp-scoped-http serve --stdio`: the test kit's catalog over a child's
//! standard streams, which the stdio churn bench measures against. Our
//! own client connects to it (its `server/discover` probe is refused, so
//! it falls back to `initialize` at once), lists every page, calls a
//! tool and closes; the server exits 0 when its stdin closes and no
//! child of this process is left.

use std::time::{Duration, Instant};

use mcp_scoped_http::stdio::{ProcessEnd, StdioCommand};
use mcp_scoped_http::{Connector, ProtocolVersion, TransportKind};
use serde_json::json;

/// The CLI's stdio server with `args` after `serve --stdio`.
fn server(args: &[&str]) -> StdioCommand {
    StdioCommand::new(env!("CARGO_BIN_EXE_mcp-scoped-http"))
        .args(["serve", "--stdio"])
        .args(args)
}

/// The pids of the live (not zombie) processes whose parent is this
/// process or its stdio launcher, from `/proc`.
fn children() -> Vec<u32> {
    let me = std::process::id();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    // (pid, parent, comm) of every live process.
    let table: Vec<(u32, u32, String)> = entries
        .filter_map(|entry| {
            let pid: u32 = entry.ok()?.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let (head, tail) = stat.rsplit_once(')')?;
            let comm = head.split_once(" (")?.1.to_owned();
            // After the command's closing parenthesis: state, then ppid.
            let mut rest = tail.split_whitespace();
            let (state, ppid) = (rest.next()?, rest.next()?.parse().ok()?);
            (state != "Z").then_some((pid, ppid, comm))
        })
        .collect();
    // The stdio launcher is the process's for its life, and so is the spare
    // it keeps forked (its name until it takes a request): not counted, but
    // the watchdogs it forked for this process are.
    let launchers: Vec<u32> = table
        .iter()
        .filter(|(_, ppid, comm)| *ppid == me && comm == "mcp-launcher")
        .map(|(pid, ..)| *pid)
        .collect();
    table
        .iter()
        .filter(|(_, ppid, comm)| {
            comm != "mcp-launcher" && (*ppid == me || launchers.contains(ppid))
        })
        .map(|(pid, ..)| *pid)
        .collect()
}

#[tokio::test]
async fn our_client_connects_discovers_calls_and_the_server_exits_0() {
    let _shared = crate::support::shared();
    let session = Connector::stdio(server(&[
        "--tools",
        "20",
        "--page-size",
        "5",
        "--prompts",
        "3",
        "--resources",
        "3",
    ]))
    .connect_timeout(Duration::from_secs(30))
    .connect()
    .await
    .expect("connect");
    let info = session.info();
    assert_eq!(info.transport, TransportKind::Stdio);
    assert_eq!(info.protocol_version, ProtocolVersion::V2025_11_25);
    let catalog = session.catalog();
    // Every page of tools (four of five), the other lists whole.
    assert_eq!(catalog.tools.len(), 20);
    assert_eq!(catalog.prompts.len(), 3);
    assert_eq!(catalog.resources.len(), 3);
    assert_eq!(catalog.resource_templates.len(), 1);
    let result = session
        .call_tool("tool-007", json!({"text": "over stdio"}))
        .await
        .expect("call");
    assert_eq!(result["structuredContent"]["tool"], "tool-007");
    assert_eq!(
        result["structuredContent"]["arguments"]["text"],
        "over stdio"
    );
    let unknown = session
        .call_tool("no-such-tool", json!({}))
        .await
        .expect("a tool error is a result");
    assert_eq!(unknown["isError"], true);

    let released = session.close().await;
    match &released.process {
        Some(ProcessEnd::Exited(status)) => assert_eq!(status.code(), Some(0), "{released:?}"),
        other => panic!("the server did not exit by itself: {other:?}"),
    }
    // Reaped: no child of this process is left (bounded poll: the reaper
    // may still be collecting the zombie).
    let end = Instant::now() + Duration::from_secs(10);
    while !children().is_empty() && Instant::now() < end {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(children(), Vec::<u32>::new(), "processes left");
}
