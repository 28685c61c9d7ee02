//! The main job on an embedded default: start the test kit's MCP server on
//! 127.0.0.1, connect (initialize, initialized, the GET stream, every page
//! of every list), call a tool, close, and print what happened at each step
//! and what was released.
//!
//! ```text
//! cargo run --example handshake --features testkit
//! ```

use mcp_scoped_http::{Connector, Result, SessionRelease, ledger};
use mcp_scoped_http_testkit::{ListenMode, ServerConfig, TestServer};
use serde_json::json;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<()> {
    let server = TestServer::start(
        ServerConfig::default()
            .with_tools(7)
            .with_page_size(3)
            .with_listen(ListenMode::Open),
    );
    println!("test kit server at {}", server.url());

    let session = Connector::new(server.url())
        .bearer("example-token")
        .connect()
        .await?;
    let info = session.info();
    println!(
        "connected: {} {}, revision {}, session id issued: {}",
        info.server_info["name"].as_str().unwrap_or("?"),
        info.server_info["version"].as_str().unwrap_or("?"),
        info.protocol_version,
        info.session_id_issued,
    );
    println!(
        "  initialize {:?}, initialized {:?}, discovery {:?}",
        info.timings.initialize, info.timings.initialized, info.timings.discovery
    );
    let catalog = session.catalog();
    println!(
        "  tools: {}",
        catalog.tool_names().collect::<Vec<_>>().join(", ")
    );
    println!(
        "  {} prompts, {} resources, {} resource templates",
        catalog.prompts.len(),
        catalog.resources.len(),
        catalog.resource_templates.len()
    );
    println!("  holding: {:?}", ledger());

    let result = session
        .call_tool("tool-003", json!({"text": "hello"}))
        .await?;
    println!(
        "tools/call tool-003: {}",
        result["content"][0]["text"].as_str().unwrap_or("?")
    );

    let released = session.close().await;
    let session_end = match &released.session {
        SessionRelease::Deleted(status) => format!("DELETE answered {status}"),
        other => format!("{other:?}"),
    };
    println!(
        "closed: {} task(s) stopped, {session_end}, {} hook(s) removed, owned client released: {}",
        released.tasks_stopped, released.hooks_removed, released.owned_client_released
    );
    println!("  holding: {:?}", ledger());

    let stats = server.stats();
    println!(
        "server saw {} requests on {} connection(s), {} DELETE, {} live session(s)",
        server.requests().len(),
        stats.connections_accepted,
        stats.deletes,
        stats.live_sessions,
    );
    Ok(())
}
