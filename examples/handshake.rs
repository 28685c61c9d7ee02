//! The main job on an embedded default: start the test kit's MCP server on
//! 127.0.0.1, then initialize, list every page of tools, and end the session
//! with DELETE, printing each step and what the server saw.
//!
//! ```text
//! cargo run --example handshake --features testkit
//! ```

use std::time::Instant;

use mcp_scoped_http::jsonrpc::{Message, Notification, Request};
use mcp_scoped_http::testkit::{ServerConfig, TestServer};
use mcp_scoped_http::transport::{ProtocolVersion, StreamableHttp};
use mcp_scoped_http::{HttpClient, Result};
use serde_json::json;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<()> {
    let server = TestServer::start(ServerConfig::default().with_tools(7).with_page_size(3));
    println!("test kit server at {}", server.url());

    let wire = StreamableHttp::new(HttpClient::owned()?, &server.url())?;

    let started = Instant::now();
    let init = wire
        .request(Request {
            id: 1.into(),
            method: "initialize".into(),
            params: Some(json!({
                "protocolVersion": ProtocolVersion::LATEST.as_str(),
                "capabilities": {},
                "clientInfo": {"name": "handshake-example", "version": env!("CARGO_PKG_VERSION")},
            })),
        })
        .await?;
    let version: ProtocolVersion = init.result["protocolVersion"]
        .as_str()
        .unwrap_or_default()
        .parse()?;
    wire.set_protocol_version(version);
    println!(
        "initialize: {} {} speaks {version}, session id issued: {} ({:?})",
        init.result["serverInfo"]["name"].as_str().unwrap_or("?"),
        init.result["serverInfo"]["version"].as_str().unwrap_or("?"),
        wire.session_id().is_some(),
        started.elapsed(),
    );

    wire.post(&Message::Notification(Notification {
        method: "notifications/initialized".into(),
        params: None,
    }))
    .await?;
    println!("notifications/initialized: accepted");

    let mut tools = Vec::new();
    let mut cursor: Option<String> = None;
    // Bounded, as every loop driven by a server must be. Ids 1 and up: 1 was
    // initialize.
    for page in 1..=100_i64 {
        let params = cursor.as_ref().map(|c| json!({"cursor": c}));
        let listed = wire
            .request(Request {
                id: (page + 1).into(),
                method: "tools/list".into(),
                params,
            })
            .await?;
        let names: Vec<String> = listed.result["tools"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|t| t["name"].as_str().map(str::to_owned))
            .collect();
        println!("tools/list page {page}: {}", names.join(", "));
        tools.extend(names);
        cursor = listed.result["nextCursor"].as_str().map(str::to_owned);
        if cursor.is_none() {
            break;
        }
    }
    println!("{} tools found", tools.len());

    let end = wire.delete_session().await?;
    println!("DELETE: {end:?}");

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
