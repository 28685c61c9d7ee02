//! Draining on shutdown: worker tasks each hold a session; on a shutdown
//! trigger (Ctrl-C, or here the work being done) the workers are aborted,
//! which drops their sessions half-way. Each dropped session releases its
//! tasks and hooks at once and hands its DELETE to the reaper;
//! `mcp_scoped_http::shutdown()` waits for every pending DELETE before
//! `main` returns.
//!
//! ```text
//! cargo run --example drain_on_shutdown --features testkit
//! ```

use std::sync::Arc;

use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use mcp_scoped_http::{Connector, HttpClient, Result, ledger};
use mcp_scoped_http_testkit::{ServerConfig, TestServer};
use serde_json::json;
use tokio::sync::Notify;
use tokio::task::JoinSet;

const WORKERS: usize = 4;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<()> {
    let server = TestServer::start(ServerConfig::default());
    let shared = HttpClient::borrowed(Client::builder(TokioExecutor::new()).build_http());

    let work_done = Arc::new(Notify::new());
    let mut workers: JoinSet<Result<()>> = JoinSet::new();
    for n in 0..WORKERS {
        let session = Connector::new(server.url())
            .client(shared.clone())
            .bearer(&format!("worker-{n}"))
            .connect()
            .await?;
        let work_done = work_done.clone();
        workers.spawn(async move {
            // Each worker calls tools until it is aborted; the last one
            // reports the work done after its first call.
            for i in 0.. {
                session.call_tool("tool-000", json!({"i": i})).await?;
                if n == WORKERS - 1 {
                    work_done.notify_one();
                }
            }
            Ok(())
        });
    }
    println!("{WORKERS} workers running: {:?}", ledger());

    // The trigger: Ctrl-C, or (so the example ends by itself) the work.
    tokio::select! {
        _ = tokio::signal::ctrl_c() => println!("Ctrl-C"),
        _ = work_done.notified() => println!("work done, shutting down"),
    }
    // Abort the workers: their sessions are dropped without `close()`.
    workers.shutdown().await;
    println!(
        "workers aborted: {} DELETE(s) pending with the reaper, {} hook(s) left",
        ledger().pending_reaps,
        shared.hooks().len()
    );

    // Drain: wait for every pending DELETE.
    mcp_scoped_http::shutdown().await;
    let stats = server.stats();
    println!(
        "drained: {:?}; the server saw {} DELETEs, {} live session(s)",
        ledger(),
        stats.deletes,
        stats.live_sessions
    );
    assert_eq!(stats.deletes, WORKERS);
    assert_eq!(stats.live_sessions, 0);
    Ok(())
}
