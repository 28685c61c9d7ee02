//! `fleet CONFIG`: a fleet of the config file's servers, run as a host
//! would, until interrupted.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use mcp_scoped_http::fleet::{
    ApplyReport, Backoff, Fleet, FleetEvent, LoadedConfig, ServerShutdown, SlotState,
    parse_mcp_servers,
};
use serde_json::{Value, json};
use tokio::io::AsyncBufReadExt as _;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::broadcast::error::RecvError;
use tokio::task::JoinSet;

use crate::args::FleetArgs;
use crate::{Failure, Outcome};

/// How often the config file's modification time is looked at.
const WATCH_EVERY: Duration = Duration::from_millis(500);

/// One line on stdout: the JSON object with --json, else readable text.
fn emit(json_mode: bool, line: &Value) {
    if json_mode {
        out!("{line}");
    } else {
        out!("{}", readable(line));
    }
}

/// `key=value` pairs, strings unquoted: who and what first, then the rest.
fn readable(line: &Value) -> String {
    let Value::Object(fields) = line else {
        return line.to_string();
    };
    const FIRST: [&str; 3] = ["server", "event", "state"];
    let first = FIRST.iter().filter_map(|key| fields.get_key_value(*key));
    let rest = fields
        .iter()
        .filter(|(key, _)| !FIRST.contains(&key.as_str()));
    first
        .chain(rest)
        .map(|(key, value)| match value {
            Value::String(text) => format!("{key}={text}"),
            other => format!("{key}={other}"),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// An error with its causes ("HTTP transport failed: ... connection
/// refused"), each said once.
fn describe(error: &mcp_scoped_http::Error) -> String {
    let mut text = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

fn state_line(fleet: &Fleet, server: &str, state: &SlotState) -> Value {
    let mut line = json!({"server": server, "state": state.name()});
    match state {
        SlotState::Retrying {
            attempt, next_at, ..
        } => {
            line["attempt"] = json!(attempt);
            let left = next_at.saturating_duration_since(Instant::now());
            line["retryInMs"] = json!(left.as_millis() as u64);
        }
        SlotState::Ready => {
            let tools = fleet
                .catalog()
                .servers
                .get(server)
                .map_or(0, |catalog| catalog.tools.len());
            line["tools"] = json!(tools);
        }
        _ => {}
    }
    if let Some(error) = state.error() {
        line["error"] = json!(describe(error));
    }
    line
}

fn load(path: &std::path::Path) -> Result<LoadedConfig, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    parse_mcp_servers(&text).map_err(|e| e.to_string())
}

fn modified(path: &std::path::Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// Reports a loaded file's skipped entries and warnings, and applies it.
async fn apply(
    fleet: &Fleet,
    loaded: LoadedConfig,
    json_mode: bool,
) -> Result<ApplyReport, String> {
    for skipped in &loaded.skipped {
        emit(
            json_mode,
            &json!({"server": skipped.server, "state": "unsupported", "error": skipped.reason}),
        );
    }
    for warning in &loaded.warnings {
        eprintln!("mcp-scoped-http: config: {}", crate::terminal_safe(warning));
    }
    fleet.apply(loaded.servers).await.map_err(|e| e.to_string())
}

fn report_line(event: &str, report: &ApplyReport) -> Value {
    json!({
        "event": event,
        "started": report.started,
        "stopped": report.stopped,
        "replaced": report.replaced,
        "unchanged": report.unchanged,
    })
}

/// One command from standard input, answered by one line.
async fn command(fleet: Arc<Fleet>, line: String) -> Value {
    let Ok(Value::Object(command)) = serde_json::from_str::<Value>(&line) else {
        return json!({"error": "a command is one JSON object a line"});
    };
    if let Some(call) = command.get("call") {
        let (Some(server), Some(tool)) = (
            call.get("server").and_then(Value::as_str),
            call.get("tool").and_then(Value::as_str),
        ) else {
            return json!({"error": "a call needs \"server\" and \"tool\""});
        };
        let arguments = call.get("arguments").cloned().unwrap_or_else(|| json!({}));
        return match fleet.call_tool(server, tool, arguments).await {
            Ok(result) => json!({"server": server, "tool": tool, "result": result}),
            Err(error) => json!({"server": server, "tool": tool, "error": describe(&error)}),
        };
    }
    if let Some(server) = command.get("reconnect") {
        let Some(server) = server.as_str() else {
            return json!({"error": "\"reconnect\" takes a server name"});
        };
        return match fleet.reconnect(server) {
            Ok(()) => json!({"reconnect": server, "ok": true}),
            Err(error) => json!({"reconnect": server, "error": error.to_string()}),
        };
    }
    if command.contains_key("status") {
        let servers: serde_json::Map<String, Value> = fleet
            .states()
            .iter()
            .map(|(name, state)| (name.clone(), state_line(&fleet, name, state)))
            .collect();
        let catalog = fleet.catalog();
        return json!({
            "status": servers,
            "generation": catalog.generation,
            "tools": catalog.tool_count(),
        });
    }
    json!({"error": "unknown command (call, reconnect, status)"})
}

/// Runs until SIGINT or SIGTERM (or the end of input with --exit-on-eof),
/// then shuts down and reports.
pub(crate) async fn run(options: FleetArgs, json_mode: bool) -> Outcome {
    let loaded = load(&options.config).map_err(Failure::usage)?;
    let mut backoff = Backoff::default();
    if let Some(max) = options.max_backoff {
        backoff = Backoff::new(backoff.initial.min(max), max);
    }
    let fleet = Arc::new(Fleet::builder().backoff(backoff).build());
    let mut events = fleet.events();
    let mut hangup = signal(SignalKind::hangup()).map_err(|e| Failure::server(e.to_string()))?;
    let mut terminate =
        signal(SignalKind::terminate()).map_err(|e| Failure::server(e.to_string()))?;
    let mut interrupt =
        signal(SignalKind::interrupt()).map_err(|e| Failure::server(e.to_string()))?;
    let mut stdin = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    let mut stdin_open = true;
    let mut commands: JoinSet<Value> = JoinSet::new();
    let mut last_modified = modified(&options.config);
    let mut watch = tokio::time::interval(WATCH_EVERY);

    let report = apply(&fleet, loaded, json_mode)
        .await
        .map_err(Failure::usage)?;
    emit(json_mode, &report_line("applied", &report));

    loop {
        let mut reload = false;
        tokio::select! {
            event = events.recv() => match event {
                Ok(FleetEvent::State { server, state }) => {
                    emit(json_mode, &state_line(&fleet, &server, &state));
                }
                Ok(FleetEvent::Catalog { generation, tools }) => {
                    emit(json_mode, &json!({"event": "catalog", "generation": generation, "tools": tools}));
                }
                Ok(_) => {}
                Err(RecvError::Lagged(lost)) => {
                    emit(json_mode, &json!({"event": "lagged", "lost": lost}));
                }
                Err(RecvError::Closed) => break,
            },
            line = stdin.next_line(), if stdin_open => match line {
                Ok(Some(line)) if line.trim().is_empty() => {}
                Ok(Some(line)) => {
                    commands.spawn(command(fleet.clone(), line));
                }
                Ok(None) | Err(_) => {
                    stdin_open = false;
                    if options.exit_on_eof {
                        break;
                    }
                }
            },
            Some(Ok(answer)) = commands.join_next() => emit(json_mode, &answer),
            _ = hangup.recv() => reload = true,
            _ = watch.tick() => {
                let now = modified(&options.config);
                if now != last_modified {
                    last_modified = now;
                    reload = true;
                }
            }
            _ = terminate.recv() => break,
            _ = interrupt.recv() => break,
        }
        if reload {
            match load(&options.config) {
                Ok(loaded) => match apply(&fleet, loaded, json_mode).await {
                    Ok(report) => emit(json_mode, &report_line("reloaded", &report)),
                    Err(error) => emit(json_mode, &json!({"event": "reload", "error": error})),
                },
                // The running set stays as it was.
                Err(error) => emit(json_mode, &json!({"event": "reload", "error": error})),
            }
        }
    }

    // Calls still running end with the shutdown (their sessions close).
    let report = fleet.shutdown().await;
    while let Some(answer) = commands.join_next().await {
        if let Ok(answer) = answer {
            emit(json_mode, &answer);
        }
    }
    drop(fleet);
    mcp_scoped_http::shutdown().await;
    let ledger = mcp_scoped_http::ledger();
    let servers: serde_json::Map<String, Value> = report
        .servers
        .iter()
        .map(|(name, outcome)| {
            let outcome = match outcome {
                ServerShutdown::Closed(_) => "closed",
                ServerShutdown::NoSession => "no_session",
                ServerShutdown::TimedOut => "timed_out",
                _ => "other",
            };
            (name.clone(), json!(outcome))
        })
        .collect();
    emit(
        json_mode,
        &json!({"event": "shutdown", "servers": servers, "ledger": ledger}),
    );
    if ledger.is_empty() {
        Ok(())
    } else {
        Err(Failure::server(format!(
            "not everything was released: {ledger:?}"
        )))
    }
}
