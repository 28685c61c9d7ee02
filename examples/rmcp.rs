//! rmcp (the official Rust SDK) over this crate's transport, against an
//! in-process test server: list the tools, call one, close, and print what
//! closing released.
//!
//! ```text
//! cargo run --example rmcp --features testkit,rmcp
//! ```

use mcp_scoped_http::adapters::ScopedTransport;
use mcp_scoped_http_testkit::{ServerConfig, TestServer};
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let server = TestServer::start(ServerConfig::default().with_page_size(2));
    let url = server.url();

    let mut transport = ScopedTransport::builder(url).bearer("token").build()?;
    let report = transport.release_report();
    let client = ().serve(transport).await?; // rmcp's initialize, our guard stack
    let tools = client.peer().list_all_tools().await?;
    let result = client
        .peer()
        .call_tool(CallToolRequestParams::new("tool-000"))
        .await?;
    client.cancel().await?; // tasks stopped, DELETE, hooks removed, owned client dropped
    let released = report
        .released()
        .await
        .ok_or("the transport was not closed")?;

    let names: Vec<_> = tools.iter().map(|t| t.name.as_ref()).collect();
    println!("{} tools: {names:?}", tools.len());
    println!("tool-000 answered: {:?}", result.structured_content);
    println!("released: {released:?}");
    println!("DELETEs the server saw: {}", server.stats().deletes);
    Ok(())
}
