//! An owned client: the connector builds an HTTP client for the session and
//! drops it last, after the DELETE and after the session's hooks are gone.
//!
//! ```text
//! cargo run --example owned_client --features testkit
//! ```

use mcp_scoped_http::{Connector, Result, ledger};
use mcp_scoped_http_testkit::{ServerConfig, TestServer};
use serde_json::json;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<()> {
    let server = TestServer::start(ServerConfig::default());

    let session = Connector::new(server.url())
        .bearer("example-token")
        .connect()
        .await?;
    println!(
        "connected: {} tools; holding {} owned client(s), {} hook(s)",
        session.catalog().tools.len(),
        ledger().owned_clients,
        ledger().hooks,
    );

    let result = session.call_tool("tool-000", json!({"text": "hi"})).await?;
    println!("tools/call: {}", result["content"][0]["text"]);

    // Tasks, DELETE, hooks, then the owned client.
    let released = session.close().await;
    println!(
        "closed: {:?}, {} hook(s) removed, owned client released: {}",
        released.session, released.hooks_removed, released.owned_client_released
    );
    assert!(released.owned_client_released);
    assert_eq!(ledger().owned_clients, 0);
    println!("server saw {} DELETE", server.stats().deletes);
    Ok(())
}
