//! One borrowed client shared by many sessions, each with its own
//! credentials: each session's requests carry only its own token, and the
//! client is the caller's before, during and after.
//!
//! ```text
//! cargo run --example shared_client --features testkit
//! ```

use std::collections::BTreeMap;
use std::sync::Arc;

use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use mcp_scoped_http::{Connector, HttpClient, Result};
use mcp_scoped_http_testkit::{ServerConfig, TestServer};
use serde_json::json;
use tokio::task::JoinSet;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<()> {
    let server = TestServer::start(ServerConfig::default());

    // The caller's own pooled client, lent to every session.
    let shared = HttpClient::borrowed(Client::builder(TokioExecutor::new()).build_http());

    let mut sessions = Vec::new();
    for tenant in ["alice", "bob", "carol"] {
        let session = Connector::new(server.url())
            .client(shared.clone())
            .bearer(&format!("token-{tenant}"))
            .connect()
            .await?;
        sessions.push(Arc::new(session));
    }
    println!(
        "{} sessions on one client, {} hooks registered on it",
        sessions.len(),
        shared.hooks().len()
    );

    // Concurrent calls, two per session, from their own tasks.
    let mut calls = JoinSet::new();
    for session in &sessions {
        for i in 0..2 {
            let session = session.clone();
            calls.spawn(async move { session.call_tool("tool-001", json!({"i": i})).await });
        }
    }
    while let Some(done) = calls.join_next().await {
        done.expect("the call's task")?;
    }

    // What the server saw: each session id with exactly one token.
    let mut tokens: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for request in server.requests() {
        if let (Some(id), Some(auth)) = (
            request.header("mcp-session-id"),
            request.header("authorization"),
        ) {
            let seen = tokens.entry(id.to_owned()).or_default();
            if !seen.iter().any(|t| t == auth) {
                seen.push(auth.to_owned());
            }
        }
    }
    for (n, seen) in tokens.values().enumerate() {
        println!("session {}: {}", n + 1, seen.join(", "));
        assert_eq!(seen.len(), 1, "one token per session");
    }

    for session in &sessions {
        session.close().await;
    }
    println!(
        "closed all: {} hooks left on the client, {} DELETEs",
        shared.hooks().len(),
        server.stats().deletes
    );
    assert!(shared.hooks().is_empty());
    Ok(())
}
