//! A caller's `reqwest::Client` lent to a session (feature `reqwest`): the
//! session's token goes on its own requests only, the caller's requests on
//! the same client carry none of it, and the client is never closed.
//!
//! ```text
//! cargo run --example reqwest --features reqwest,testkit
//! ```

use mcp_scoped_http::{Connector, HttpClient, Result};
use mcp_scoped_http_testkit::{ServerConfig, TestServer};
use serde_json::json;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<()> {
    let server = TestServer::start(ServerConfig::default());

    // The application's client. Redirects are left to this crate, which
    // follows only a same-origin 307 or 308.
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("a reqwest client");

    let session = Connector::new(server.url())
        .client(HttpClient::from_reqwest(client.clone()))
        .bearer("session-token")
        .connect()
        .await?;
    let result = session.call_tool("tool-000", json!({"text": "hi"})).await?;
    println!(
        "tools/call through reqwest: {}",
        result["content"][0]["text"]
    );

    // The caller's own request, on the same client, while the session
    // lives: a ping with no session id, which this server answers 400.
    let own = callers_request(&client, &server).await;
    println!("the caller's own ping (no session id of ours): HTTP {own}");

    session.close().await;
    let again = callers_request(&client, &server).await;
    println!("after close, the caller's client still works: HTTP {again}");

    for request in server.requests() {
        let whose = if request.header("x-caller").is_some() {
            "caller "
        } else {
            "session"
        };
        println!(
            "  {whose} {} {:<28} authorization: {}",
            request.method,
            request.rpc_method.as_deref().unwrap_or("-"),
            request.header("authorization").unwrap_or("none"),
        );
        if request.header("x-caller").is_some() {
            assert_eq!(request.header("authorization"), None);
        }
    }
    Ok(())
}

async fn callers_request(client: &reqwest::Client, server: &TestServer) -> u16 {
    client
        .post(server.url())
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("x-caller", "own")
        .body(r#"{"jsonrpc":"2.0","id":"caller","method":"ping"}"#)
        .send()
        .await
        .expect("the caller's client works")
        .status()
        .as_u16()
}
