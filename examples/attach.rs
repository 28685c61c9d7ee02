//! Attaching to a session the caller owns: the caller initializes a session
//! by hand on its own transport, then lends its id. The attached session
//! sends no `initialize`, and its close sends no DELETE: the session stays
//! the caller's, who ends it when it chooses.
//!
//! ```text
//! cargo run --example attach --features testkit,wire
//! ```

use mcp_scoped_http::jsonrpc::{Notification, Request};
use mcp_scoped_http::wire::StreamableHttp;
use mcp_scoped_http::{Connector, HttpClient, Result, SessionOwnership, SessionRelease};
use mcp_scoped_http_testkit::{ServerConfig, TestServer};
use serde_json::json;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<()> {
    let server = TestServer::start(ServerConfig::default());

    // The caller's own session: initialize and initialized, by hand.
    let own = StreamableHttp::new(HttpClient::owned()?, &server.url())?;
    let init = own
        .request(Request {
            id: 1.into(),
            method: "initialize".into(),
            params: Some(json!({
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "attach-example", "version": "0"},
            })),
        })
        .await?;
    let version = init.result["protocolVersion"]
        .as_str()
        .unwrap_or_default()
        .parse()?;
    own.set_protocol_version(version);
    own.post_notification(&Notification {
        method: "notifications/initialized".into(),
        params: None,
    })
    .await?;
    let id = own.session_id().expect("the server issued a session id");
    println!("the caller initialized its own session (revision {version})");

    // Attach: no initialize, discovery runs on the caller's session.
    let session = Connector::new(server.url())
        .attach(id, version)
        .connect()
        .await?;
    assert_eq!(session.info().ownership, SessionOwnership::Attached);
    println!(
        "attached: {} tools, initializes seen by the server: {}",
        session.catalog().tools.len(),
        server.stats().sessions_created
    );
    session.call_tool("tool-000", json!({})).await?;

    let released = session.close().await;
    assert!(matches!(released.session, SessionRelease::NotOwned));
    println!(
        "closed the attached session: {:?}; DELETEs: {}, live sessions: {}",
        released.session,
        server.stats().deletes,
        server.stats().live_sessions
    );
    assert_eq!(server.stats().deletes, 0);

    // Still the caller's: it works, and the caller ends it.
    own.request(Request {
        id: 2.into(),
        method: "tools/list".into(),
        params: None,
    })
    .await?;
    let end = own.delete_session().await?;
    println!(
        "the caller's own DELETE: {end:?}; DELETEs: {}",
        server.stats().deletes
    );
    Ok(())
}
