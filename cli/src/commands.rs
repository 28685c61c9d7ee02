//! `probe`, `call` and `serve`.

use std::time::Duration;

use mcp_scoped_http::stdio::ProcessEnd;
use mcp_scoped_http::{Catalog, Entry, Released, Session, SessionRelease, ledger};
use mcp_scoped_http_testkit::{AuthConfig, AuthServer, ListenMode, ServerConfig, TestServer};
use serde_json::{Value, json};

use crate::args::{Common, json_object};
use crate::phase::{self, Phase};
use crate::{Failure, Outcome};

/// Starts the embedded test kit server on 127.0.0.1.
pub(crate) fn embedded(tools: usize, page_size: usize) -> Result<TestServer, Failure> {
    let config = ServerConfig::default()
        .with_tools(tools)
        .with_page_size(page_size)
        .with_listen(ListenMode::Open);
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| TestServer::start(config)))
        .map_err(|_| Failure::server("connect failed: cannot start the embedded test server"))
}

fn micros(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}

/// What a close released, as JSON.
pub(crate) fn released_json(released: &Released) -> Value {
    let (session, status) = match &released.session {
        SessionRelease::NotOwned => ("notOwned", Value::Null),
        SessionRelease::NoSessionId => ("noSessionId", Value::Null),
        SessionRelease::Deleted(status) => ("deleted", json!(status.as_u16())),
        SessionRelease::DeleteFailed(_) => ("deleteFailed", Value::Null),
        SessionRelease::Stateless => ("stateless", Value::Null),
        _ => ("other", Value::Null),
    };
    let mut value = json!({
        "tasksStopped": released.tasks_stopped,
        "session": session,
        "deleteStatus": status,
        "hooksRemoved": released.hooks_removed,
        "ownedClientReleased": released.owned_client_released,
    });
    if let SessionRelease::DeleteFailed(error) = &released.session {
        value["deleteError"] = json!(error.to_string());
    }
    if let Some(end) = &released.process {
        value["process"] = json!(process_text(end));
    }
    value
}

/// How a stdio server's process tree ended, in words.
pub(crate) fn process_text(end: &ProcessEnd) -> String {
    match end {
        ProcessEnd::Exited(status) => format!("exited by itself ({status})"),
        ProcessEnd::Terminated => "ended after SIGTERM to its group".to_owned(),
        ProcessEnd::Killed => "killed (SIGKILL to its group)".to_owned(),
        ProcessEnd::WatchdogEnded(status) => {
            format!("its watchdog was killed from outside ({status}); the group was killed")
        }
        other => format!("{other:?}"),
    }
}

/// What a close released, as one line of text.
pub(crate) fn released_text(released: &Released) -> String {
    let session = match &released.session {
        SessionRelease::NotOwned => "no DELETE (no server session of ours: attached)".to_owned(),
        SessionRelease::Stateless => "no DELETE (2026-07-28: stateless, no session)".to_owned(),
        SessionRelease::NoSessionId => {
            "no DELETE (no session id was issued, or HTTP+SSE: its stream closed)".to_owned()
        }
        SessionRelease::Deleted(status) => format!("DELETE answered {status}"),
        SessionRelease::DeleteFailed(error) => format!("DELETE failed: {error}"),
        other => format!("{other:?}"),
    };
    if let Some(end) = &released.process {
        return format!(
            "{} task(s) stopped, the stdio server {}",
            released.tasks_stopped,
            process_text(end)
        );
    }
    format!(
        "{} task(s) stopped, {session}, {} hook(s) removed, owned client released: {}",
        released.tasks_stopped,
        released.hooks_removed,
        if released.owned_client_released {
            "yes"
        } else {
            "no"
        }
    )
}

/// A failed DELETE is a server failure in the close phase.
pub(crate) fn close_outcome(released: &Released) -> Outcome {
    match &released.session {
        SessionRelease::DeleteFailed(error) => Err(Failure::at(Phase::Close, error)),
        _ => Ok(()),
    }
}

fn names(items: &[Entry]) -> String {
    if items.is_empty() {
        return "(none)".to_owned();
    }
    items
        .iter()
        .map(|item| item.key().unwrap_or("?"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn print_catalog(catalog: &Catalog) {
    out!("tools ({}): {}", catalog.tools.len(), names(&catalog.tools));
    out!(
        "prompts ({}): {}",
        catalog.prompts.len(),
        names(&catalog.prompts)
    );
    out!(
        "resources ({}): {}",
        catalog.resources.len(),
        names(&catalog.resources)
    );
    out!(
        "resource templates ({}): {}",
        catalog.resource_templates.len(),
        names(&catalog.resource_templates)
    );
}

/// `probe [URL]`.
pub(crate) async fn probe(url: Option<String>, command: &[String], common: &Common) -> Outcome {
    if !command.is_empty() {
        if url.is_some() {
            return Err(Failure::usage("a URL or a stdio COMMAND, not both"));
        }
        let connector = common.stdio_connector(command)?;
        return probe_with(connector, common).await;
    }
    let server = match url {
        Some(_) => None,
        None => Some(embedded(5, 2)?),
    };
    let url = match (&url, &server) {
        (Some(url), _) => url.clone(),
        (None, Some(server)) => server.url(),
        (None, None) => unreachable!("a server is started when no URL is given"),
    };
    if server.is_some() && !common.json {
        out!("embedded test server at {url}");
    }
    probe_with(common.connector(&url)?, common).await
}

/// Probes the server `connector` reaches.
async fn probe_with(connector: mcp_scoped_http::Connector, common: &Common) -> Outcome {
    let session = phase::connect(connector, common.timeout).await?;
    let info = session.info().clone();
    let catalog = session.catalog();
    if !common.json {
        out!(
            "server: {} {}",
            info.server_info["name"].as_str().unwrap_or("?"),
            info.server_info["version"].as_str().unwrap_or("?")
        );
        out!(
            "protocol version: {} over {}{}",
            info.protocol_version,
            info.transport,
            if info.probed { " (detected)" } else { "" }
        );
        out!(
            "session id issued: {}",
            if info.session_id_issued { "yes" } else { "no" }
        );
        print_catalog(&catalog);
        out!(
            "timings: initialize {:?}, initialized {:?}, discovery {:?}",
            info.timings.initialize,
            info.timings.initialized,
            info.timings.discovery
        );
    }
    let released = session.close().await;
    mcp_scoped_http::shutdown().await;
    let after = ledger();
    if common.json {
        let out = json!({
            "server": info.server_info,
            "protocolVersion": info.protocol_version.as_str(),
            "transport": info.transport.as_str(),
            "detected": info.probed,
            "sessionIssued": info.session_id_issued,
            "tools": catalog.tools,
            "prompts": catalog.prompts,
            "resources": catalog.resources,
            "resourceTemplates": catalog.resource_templates,
            "timings": {
                "initializeMicros": micros(info.timings.initialize),
                "initializedMicros": micros(info.timings.initialized),
                "discoveryMicros": micros(info.timings.discovery),
            },
            "released": released_json(&released),
            "ledger": after,
        });
        crate::out_json(&out);
    } else {
        out!("closed: {}", released_text(&released));
        out!(
            "ledger after close: {} hook(s), {} owned client(s), {} task(s), {} owned session(s), {} pending reap(s), {} process tree(s)",
            after.hooks,
            after.owned_clients,
            after.tasks,
            after.owned_sessions,
            after.pending_reaps,
            after.processes
        );
    }
    close_outcome(&released)
}

/// Prints a tool result: its structured content when present, else its
/// content items (text as is, the others as JSON).
fn print_result(result: &Value) {
    if let Some(structured) = result.get("structuredContent").filter(|v| !v.is_null()) {
        out!(
            "{}",
            serde_json::to_string_pretty(structured).unwrap_or_default()
        );
        return;
    }
    match result.get("content").and_then(Value::as_array) {
        Some(items) => {
            for item in items {
                match item["text"].as_str() {
                    Some(text) if item["type"] == "text" => out!("{text}"),
                    _ => out!("{item}"),
                }
            }
        }
        None => out!(
            "{}",
            serde_json::to_string_pretty(result).unwrap_or_default()
        ),
    }
}

/// Calls a tool on an established session, bounded by the timeout.
pub(crate) async fn call_tool(
    session: &Session,
    tool: &str,
    arguments: Value,
    timeout: Option<Duration>,
) -> Result<Value, Failure> {
    match phase::bounded(timeout, session.call_tool(tool, arguments)).await {
        Some(Ok(result)) => Ok(result),
        Some(Err(error)) => Err(phase::call_failure(&error)),
        None => Err(Failure::server("call failed: timed out")),
    }
}

/// `call URL TOOL [ARGS_JSON]`, or `call TOOL [ARGS_JSON] -- COMMAND`.
pub(crate) async fn call(positional: &[String], command: &[String], common: &Common) -> Outcome {
    let (connector, rest) = if command.is_empty() {
        let Some((url, rest)) = positional.split_first() else {
            return Err(Failure::usage("call wants URL TOOL [ARGS_JSON]"));
        };
        (common.connector(url)?, rest)
    } else {
        (common.stdio_connector(command)?, positional)
    };
    let (tool, args) = match rest {
        [tool] => (tool.as_str(), None),
        [tool, args] => (tool.as_str(), Some(args.as_str())),
        _ => {
            return Err(Failure::usage(
                "call wants URL TOOL [ARGS_JSON], or TOOL [ARGS_JSON] -- COMMAND [ARGS..]",
            ));
        }
    };
    let arguments = json_object("ARGS_JSON", args)?;
    let session = phase::connect(connector, common.timeout).await?;
    let outcome = call_tool(&session, tool, arguments, common.timeout).await;
    let released = session.close().await;
    let result = outcome?;
    if common.json {
        crate::out_json(&result);
    } else {
        print_result(&result);
    }
    if result["isError"] == true {
        return Err(Failure::server(format!(
            "call failed: the tool {tool:?} reported an error (isError)"
        )));
    }
    close_outcome(&released)
}

/// `serve [--port P] [--tools N] [--page-size K] [--revision R] [--oauth]`.
pub(crate) async fn serve(port: u16, mut config: ServerConfig, oauth: bool) -> Outcome {
    let (tools, page_size, mode) = (config.tools, config.page_size, config.response_mode);
    let revision = config.eras;
    let auth = if oauth {
        let auth = std::panic::catch_unwind(|| AuthServer::start(AuthConfig::default()))
            .map_err(|_| Failure::server("cannot start the authorization server"))?;
        let mut resource = auth.resource();
        if port != 0 {
            // Reached through the forwarded port: the resource is named so.
            resource = resource.with_resource(format!("http://127.0.0.1:{port}{}", config.path));
        }
        config = config.with_authorization(resource);
        Some(auth)
    } else {
        None
    };
    let server = std::panic::catch_unwind(|| TestServer::start(config))
        .map_err(|_| Failure::server("cannot start the test server"))?;
    let forward = if port == 0 {
        None
    } else {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
            .await
            .map_err(|error| {
                Failure::server(format!("cannot listen on 127.0.0.1:{port}: {error}"))
            })?;
        Some(tokio::spawn(forward_connections(listener, server.addr())))
    };
    let url = match port {
        0 => server.url(),
        port => format!("http://127.0.0.1:{port}/mcp"),
    };
    out!(
        "serving the test kit MCP server at {url} (revision {revision}, {tools} tools, page size {page_size}, {mode:?} answers); Ctrl-C to stop"
    );
    if let Some(auth) = &auth {
        out!(
            "requiring OAuth tokens from the authorization server at {} (approves every request); try `probe --oauth {url}`",
            auth.issuer()
        );
    }
    let interrupted = tokio::signal::ctrl_c().await;
    drop(auth);
    if let Some(forward) = forward {
        forward.abort();
    }
    let stats = server.stats();
    server.shutdown();
    interrupted.map_err(|error| Failure::server(format!("cannot wait for Ctrl-C: {error}")))?;
    eprintln!(
        "stopped after {} connection(s), {} session(s) created, {} DELETE(s)",
        stats.connections_accepted, stats.sessions_created, stats.deletes
    );
    Ok(())
}

/// `serve --stdio`: the test kit's catalog on standard input and output
/// until standard input ends. Standard output carries protocol only.
pub(crate) async fn serve_stdio(config: ServerConfig) -> Outcome {
    let served = mcp_scoped_http_testkit::stdio::serve_lines(
        &config,
        tokio::io::stdin(),
        tokio::io::stdout(),
    )
    .await;
    served.map_err(|error| {
        Failure::server(format!(
            "serving on standard input and output failed: {error}"
        ))
    })
}

/// Forwards every connection on `listener` to the test server (which binds
/// an ephemeral port of its own).
async fn forward_connections(listener: tokio::net::TcpListener, to: std::net::SocketAddr) {
    let mut connections = tokio::task::JoinSet::new();
    loop {
        let Ok((mut inbound, _)) = listener.accept().await else {
            // Out of descriptors, say: back off instead of spinning.
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let _ = inbound.set_nodelay(true);
        connections.spawn(async move {
            if let Ok(mut outbound) = tokio::net::TcpStream::connect(to).await {
                let _ = outbound.set_nodelay(true);
                let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
            }
        });
        while connections.try_join_next().is_some() {}
    }
}
