//! An agent host: three MCP servers under one `Fleet`. One is down at
//! start (and never holds the others up), one goes down mid-run and comes
//! back (its tools leave the catalog and return), one is restarted (its
//! session renewed in place), and the host routes calls by qualified tool
//! name, shows a long call's progress, answers a server's sampling request
//! (told which server asks), holds the roots its servers may list, hides
//! a tool it does not want offered, and watches the fleet's events.
//!
//! ```text
//! cargo run --example agent_host --features testkit,fleet
//! ```

use std::time::Duration;

use mcp_scoped_http::Backoff;

use mcp_scoped_http::fleet::{Fleet, FleetEvent, ServerSpec};
use mcp_scoped_http::{RequestOptions, Result, ledger};
use mcp_scoped_http_testkit::{Fault, FaultAction, ResponseMode, ServerConfig, TestServer};
use serde_json::json;
use tokio::sync::broadcast::error::RecvError;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<()> {
    // Answers as event streams, so a long call can send progress first.
    let search = TestServer::start(
        ServerConfig::default()
            .with_tools(2)
            .with_response_mode(ResponseMode::Sse)
            .with_instructions("Search before you answer."),
    );
    let notes = TestServer::start(ServerConfig::default().with_tools(3));

    let fleet = Fleet::builder()
        // Impatient, for a demo: retries within 200 ms, a health ping
        // every 100 ms.
        .backoff(Backoff::new(
            Duration::from_millis(20),
            Duration::from_millis(200),
        ))
        .health_interval(Some(Duration::from_millis(100)))
        // A server asking the host's model: told which server asks.
        .on_sampling(|server, params| async move {
            println!(
                "  [{server}] asks the model: {}",
                params["messages"][0]["content"]["text"]
            );
            Ok(json!({"role": "assistant", "model": "host-model",
                      "content": {"type": "text", "text": "42"}}))
        })
        // The host's workspace, answered to every server's roots/list.
        .roots(vec![
            json!({"uri": "file:///work/project", "name": "project"}),
        ])
        .build();

    // The host's log: every state change and catalog change, as they come.
    let mut events = fleet.events();
    let log = tokio::spawn(async move {
        loop {
            match events.recv().await {
                Ok(FleetEvent::State { server, state, .. }) => println!("  [{server}] {state}"),
                Ok(FleetEvent::Catalog {
                    generation,
                    tools,
                    server,
                    changes,
                    ..
                }) => {
                    let tools_of = &changes.tools;
                    println!(
                        "  [catalog] generation {generation}: {tools} tools; \
                         {server}: +{:?} -{:?} ~{:?}",
                        tools_of.added, tools_of.removed, tools_of.changed
                    );
                }
                // Its session ids are credentials: not printed.
                Ok(FleetEvent::Renewed {
                    server, era, info, ..
                }) => {
                    // A restarted server may say something new of itself.
                    println!(
                        "  [{server}] session renewed ({era}), instructions: {:?}",
                        info.instructions.as_deref().unwrap_or("none")
                    );
                }
                Ok(_) => {}
                // A slow reader loses the oldest events, and is told.
                Err(RecvError::Lagged(lost)) => println!("  ({lost} events lost)"),
                Err(RecvError::Closed) => return,
            }
        }
    });

    // Desired state in: the full set, by name.
    let report = fleet
        .apply([
            (
                "search",
                ServerSpec::new(search.url())
                    .bearer("s-token")
                    .required(true),
            ),
            // Its tool-002 is not offered: not in the catalog, and a call
            // to it never reaches the server.
            (
                "notes",
                ServerSpec::new(notes.url())
                    .required(true)
                    .disabled_tools(["tool-002"]),
            ),
            // Nothing listens there: retried in its own slot, forever.
            ("calendar", ServerSpec::new("http://127.0.0.1:9/mcp")),
        ])
        .await?;
    println!("started {:?}", report.started);
    // Every server settled; calendar is not required, so its failed first
    // connect is reported, not an error.
    let readiness = fleet.ready(Duration::from_secs(10)).await?;
    println!(
        "ready {:?}, not ready {:?}, pending {:?}",
        readiness.ready,
        readiness.not_ready.keys().collect::<Vec<_>>(),
        readiness.pending
    );
    print_catalog(&fleet);
    // What each ready server said about itself: its instructions go into
    // the model's system prompt.
    for server in &readiness.ready {
        if let Some(info) = fleet.info(server) {
            println!(
                "{server}: {} {} ({}), instructions: {:?}",
                info.server_info["name"],
                info.server_info["version"],
                info.protocol_version,
                info.instructions.as_deref().unwrap_or("none")
            );
        }
    }

    if let Err(error) = fleet.call_qualified("notes__tool-002", json!({})).await {
        println!("notes__tool-002: {error}");
    }

    // `search` asks the host's model in the middle of a call: the fleet's
    // handler answers, and the call goes on.
    search.push_fault(
        Fault::on_rpc(
            "tools/call",
            FaultAction::ServerRequest {
                method: "sampling/createMessage".into(),
                params: json!({"messages": [{"role": "user",
                    "content": {"type": "text", "text": "the answer?"}}], "maxTokens": 5}),
            },
        )
        .times(1),
    );
    let answer = fleet
        .call_qualified("search__tool-001", json!({"text": "rust"}))
        .await?;
    println!(
        "the model told search: {}",
        answer["structuredContent"]["clientAnswer"]["content"]["text"]
    );
    // The workspace changes: servers of a 2025 revision are told.
    let told = fleet
        .set_roots(vec![json!({"uri": "file:///work/other", "name": "other"})])
        .await?;
    println!("roots changed; told {told:?}");

    println!(
        "search__tool-001 -> {}",
        answer["structuredContent"]["tool"]
    );

    // A long call: its progress shown as it comes (the fleet makes the
    // token), with a timeout of its own.
    let options = RequestOptions::default()
        .timeout(Duration::from_secs(30))
        .on_progress(|p| println!("  search: progress {} of {:?}", p.progress, p.total));
    let answer = fleet
        .call_tool_with("search", "tool-000", json!({"text": "long"}), options)
        .await?;
    println!(
        "search__tool-000 -> {}",
        answer["structuredContent"]["tool"]
    );

    // `search` restarts and forgets its sessions: the next call renews the
    // session in place (the slot stays ready; a `Renewed` event says so).
    search.expire_sessions();
    let answer = fleet
        .call_qualified("search__tool-001", json!({"text": "again"}))
        .await?;
    println!(
        "after the restart: search__tool-001 -> {}",
        answer["structuredContent"]["tool"]
    );

    // `notes` goes down: the next call fails (it may or may not have run,
    // and is not sent again), its tools leave the catalog.
    notes.push_fault(Fault::on_http(
        http::Method::POST,
        FaultAction::CloseConnection,
    ));
    if let Err(error) = fleet.call_tool("notes", "tool-000", json!({})).await {
        println!("notes: {error}");
    }
    wait_for(&fleet, "notes", "retrying").await;
    print_catalog(&fleet);

    // It comes back: reconnected with backoff, its tools return.
    notes.clear_faults();
    wait_for(&fleet, "notes", "ready").await;
    print_catalog(&fleet);

    // A config edit: `calendar` removed; the others untouched.
    let report = fleet
        .apply([
            (
                "search",
                ServerSpec::new(search.url())
                    .bearer("s-token")
                    .required(true),
            ),
            (
                "notes",
                ServerSpec::new(notes.url())
                    .required(true)
                    .disabled_tools(["tool-002"]),
            ),
        ])
        .await?;
    println!(
        "stopped {:?}, unchanged {:?}",
        report.stopped, report.unchanged
    );

    // Drain: every session DELETEd, every task joined.
    let report = fleet.shutdown().await;
    for (server, outcome) in &report.servers {
        println!("{server}: {outcome:?}");
    }
    drop(fleet);
    mcp_scoped_http::shutdown().await;
    // The event stream ends after shutdown: the log task ends by itself.
    log.await.expect("the log task");
    println!(
        "DELETEs: search {}, notes {}; ledger {:?}",
        search.stats().deletes,
        notes.stats().deletes,
        ledger()
    );
    Ok(())
}

fn print_catalog(fleet: &Fleet) {
    let catalog = fleet.catalog();
    let tools: Vec<String> = catalog
        .tools()
        .filter_map(|tool| tool.qualified_name())
        .collect();
    println!("catalog {}: {tools:?}", catalog.generation);
}

async fn wait_for(fleet: &Fleet, server: &str, state: &str) {
    let mut watch = fleet.watch(server).expect("a slot");
    let reached = watch.wait_for(|s| s.name() == state);
    tokio::time::timeout(Duration::from_secs(10), reached)
        .await
        .expect("in time")
        .expect("the slot is running");
}
