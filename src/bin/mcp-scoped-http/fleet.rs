//! `fleet CONFIG`: a fleet of the config file's servers, run as a host
//! would, until interrupted.
//!
//! Output, one line each: every slot's state change, every catalog change,
//! every reload, the answer to every command, and a last `shutdown` event.
//! With --json each line is one JSON object (server text included: what
//! could reach a terminal as a control character is a JSON escape); without,
//! `key=value` pairs, but command answers stay JSON (a command is JSON too).

use std::collections::BTreeMap;
use std::io::BufRead;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use mcp_scoped_http::fleet::{
    ApplyReport, Backoff, Fleet, FleetEvent, LoadedConfig, ServerShutdown, ServerSpec, SlotState,
    parse_mcp_servers,
};
use serde_json::{Map, Value, json};
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::args::FleetArgs;
use crate::commands::released_json;
use crate::{Failure, Outcome};

/// How often the config file is looked at for a change.
const WATCH_EVERY: Duration = Duration::from_millis(250);

/// The longest command line read; a longer one is answered with an error
/// and skipped, never held in memory whole.
const MAX_COMMAND_LINE: usize = 1 << 20;

/// Commands answered at once at most; standard input is not read further
/// until one of them is answered.
const MAX_IN_FLIGHT: usize = 64;

/// One line on stdout: the JSON object with --json, else readable text.
fn emit(json_mode: bool, line: &Value) {
    if json_mode {
        crate::out_json(line);
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
            // A line is one event: a server's newline (in an error, a
            // name) is shown as `\n`, never a line of its own.
            Value::String(text) => format!("{key}={}", text.replace('\n', "\\n")),
            other => format!("{key}={other}"),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn state_line(fleet: &Fleet, server: &str, state: &SlotState) -> Value {
    let mut line = json!({"server": server, "state": state.name()});
    match state {
        SlotState::Retrying {
            attempt, next_at, ..
        } => {
            line["attempt"] = json!(attempt);
            let left = next_at.saturating_duration_since(Instant::now());
            line["retryInMs"] = json!(u64::try_from(left.as_millis()).unwrap_or(u64::MAX));
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
        line["error"] = json!(crate::with_causes(error));
    }
    line
}

fn unsupported_line(server: &str, reason: &str) -> Value {
    json!({"server": server, "state": "unsupported", "error": reason})
}

/// The settings of the command line that apply to every server of the
/// file (--timeout, --no-listen). `fleet` has no credential or header
/// options: one for every server would reach them all; they are per
/// server, in CONFIG.
#[derive(Clone, Copy, Debug)]
struct Shared {
    timeout: Option<Duration>,
    no_listen: bool,
}

impl Shared {
    fn from(options: &FleetArgs) -> Shared {
        Shared {
            timeout: options.timeout,
            no_listen: options.no_listen,
        }
    }

    fn spec(self, mut spec: ServerSpec) -> ServerSpec {
        if let Some(timeout) = self.timeout {
            spec = spec.connect_timeout(timeout).request_timeout(timeout);
        }
        if self.no_listen {
            spec = spec.listen(false);
        }
        spec
    }
}

/// The largest configuration file read: a thousand servers take about
/// 200 KiB. A larger file (or an endless one, such as /dev/zero) is
/// refused, never read whole.
const MAX_CONFIG: u64 = 4 << 20;

fn load(path: &Path) -> Result<LoadedConfig, String> {
    use std::io::Read as _;
    let cannot = |e: std::io::Error| format!("cannot read {}: {e}", path.display());
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .map_err(cannot)?
        .take(MAX_CONFIG + 1)
        .read_to_end(&mut bytes)
        .map_err(cannot)?;
    if bytes.len() as u64 > MAX_CONFIG {
        return Err(format!(
            "{} is larger than {} MiB, the most a configuration may be",
            path.display(),
            MAX_CONFIG >> 20
        ));
    }
    let text =
        String::from_utf8(bytes).map_err(|_| format!("{} is not UTF-8 text", path.display()))?;
    parse_mcp_servers(&text).map_err(|e| e.to_string())
}

/// What tells a change of the file: its time, size and inode (an editor's
/// rename gives a new one).
type Stamp = Option<(SystemTime, u64, u64)>;

fn stamp(path: &Path) -> Stamp {
    let metadata = std::fs::metadata(path).ok()?;
    Some((metadata.modified().ok()?, metadata.len(), metadata.ino()))
}

/// The servers of the last file applied that this crate does not run
/// (stdio), by name, with why.
type Unsupported = Arc<BTreeMap<String, String>>;

/// Reports a loaded file's warnings and newly skipped entries, and applies
/// it.
async fn apply(
    fleet: &Fleet,
    loaded: LoadedConfig,
    shared: Shared,
    unsupported: &mut Unsupported,
    json_mode: bool,
) -> Result<ApplyReport, String> {
    for warning in &loaded.warnings {
        eprintln!("mcp-scoped-http: config: {}", crate::terminal_safe(warning));
    }
    let servers = loaded
        .servers
        .into_iter()
        .map(|(name, spec)| (name, shared.spec(spec)));
    let report = fleet.apply(servers).await.map_err(|e| e.to_string())?;
    // A state change: a stdio entry not reported as such before.
    let skipped: BTreeMap<String, String> = loaded
        .skipped
        .into_iter()
        .map(|skipped| (skipped.server, skipped.reason))
        .collect();
    for (server, reason) in &skipped {
        if unsupported.get(server) != Some(reason) {
            emit(json_mode, &unsupported_line(server, reason));
        }
    }
    *unsupported = Arc::new(skipped);
    Ok(report)
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

/// One line of standard input.
enum Input {
    Line(Vec<u8>),
    TooLong,
    End,
}

/// Reads standard input on a thread of its own, line by line, each within
/// [`MAX_COMMAND_LINE`]. A thread, not the runtime's blocking pool: the
/// runtime waits for its blocking reads when it shuts down, and a read of
/// a terminal never ends; this thread dies with the process.
fn read_input(send: mpsc::Sender<Input>) {
    let stdin = std::io::stdin();
    let mut reader = stdin.lock();
    loop {
        let input = match read_line(&mut reader, MAX_COMMAND_LINE) {
            Ok(Some(Some(line))) => Input::Line(line),
            Ok(Some(None)) => Input::TooLong,
            Ok(None) | Err(_) => Input::End,
        };
        let end = matches!(input, Input::End);
        if send.blocking_send(input).is_err() || end {
            return;
        }
    }
}

/// The next line without its newline, `Some(None)` when it was longer than
/// `max` (it is read to its end and dropped), `None` at the end of input.
fn read_line(reader: &mut impl BufRead, max: usize) -> std::io::Result<Option<Option<Vec<u8>>>> {
    let mut line = Some(Vec::new());
    let mut any = false;
    loop {
        let buffer = match reader.fill_buf() {
            Ok(buffer) => buffer,
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(error) => return Err(error),
        };
        if buffer.is_empty() {
            return Ok(any.then_some(line));
        }
        any = true;
        let newline = buffer.iter().position(|&b| b == b'\n');
        let chunk = &buffer[..newline.unwrap_or(buffer.len())];
        if let Some(kept) = &mut line {
            if kept.len() + chunk.len() > max {
                line = None;
            } else {
                kept.extend_from_slice(chunk);
            }
        }
        let used = newline.map_or(buffer.len(), |at| at + 1);
        reader.consume(used);
        if newline.is_some() {
            return Ok(Some(line));
        }
    }
}

/// One command from standard input, answered by one JSON object (with the
/// command's `id`, when it has one).
async fn command(fleet: Arc<Fleet>, unsupported: Unsupported, line: Vec<u8>) -> Value {
    let Ok(Value::Object(command)) = serde_json::from_slice::<Value>(&line) else {
        return json!({"error": "a command is one JSON object a line: {\"call\": {\"server\", \
                               \"tool\", \"arguments\"}}, {\"reconnect\": NAME} or {\"status\": true}"});
    };
    let mut answer = answer(&fleet, &unsupported, &command).await;
    if let (Some(id), Value::Object(fields)) = (command.get("id"), &mut answer) {
        fields.insert("id".into(), id.clone());
    }
    answer
}

async fn answer(fleet: &Fleet, unsupported: &Unsupported, command: &Map<String, Value>) -> Value {
    if let Some(call) = command.get("call") {
        let (Some(server), Some(tool)) = (
            call.get("server").and_then(Value::as_str),
            call.get("tool").and_then(Value::as_str),
        ) else {
            return json!({"error": "a call needs \"server\" and \"tool\", strings"});
        };
        let arguments = match call.get("arguments") {
            None => json!({}),
            Some(arguments @ Value::Object(_)) => arguments.clone(),
            Some(_) => {
                return json!({"server": server, "tool": tool, "error": "\"arguments\" is not an object"});
            }
        };
        // The caller's choice: fail at once when the server is not ready
        // (the default), or wait for it up to `waitMs`.
        let outcome = match call.get("waitMs").map(Value::as_u64) {
            None => fleet.call_tool(server, tool, arguments).await,
            Some(Some(wait)) => {
                let wait = Duration::from_millis(wait);
                fleet.call_tool_waiting(server, tool, arguments, wait).await
            }
            Some(None) => {
                return json!({"server": server, "tool": tool, "error": "\"waitMs\" is not a number of milliseconds"});
            }
        };
        return match outcome {
            Ok(result) => json!({"server": server, "tool": tool, "result": result}),
            Err(error) => {
                json!({"server": server, "tool": tool, "error": crate::with_causes(&error)})
            }
        };
    }
    if let Some(server) = command.get("reconnect") {
        let Some(server) = server.as_str() else {
            return json!({"error": "\"reconnect\" takes a server name"});
        };
        return match fleet.reconnect(server) {
            Ok(()) => json!({"reconnect": server, "ok": true}),
            Err(error) => json!({"reconnect": server, "error": crate::with_causes(&error)}),
        };
    }
    if command.contains_key("status") {
        let mut servers: Map<String, Value> = unsupported
            .iter()
            .map(|(name, reason)| (name.clone(), unsupported_line(name, reason)))
            .collect();
        servers.extend(
            fleet
                .states()
                .iter()
                .map(|(name, state)| (name.clone(), state_line(fleet, name, state))),
        );
        let catalog = fleet.catalog();
        return json!({
            "status": servers,
            "generation": catalog.generation,
            "tools": catalog.tool_count(),
        });
    }
    json!({"error": "unknown command: one of \"call\", \"reconnect\", \"status\""})
}

/// What became of one server at shutdown, as JSON.
fn shutdown_json(outcome: &ServerShutdown) -> Value {
    match outcome {
        ServerShutdown::Closed(released) => {
            let mut line = json!({"outcome": "closed"});
            if let (Value::Object(line), Value::Object(released)) =
                (&mut line, released_json(released))
            {
                line.extend(released);
            }
            line
        }
        ServerShutdown::NoSession => json!({"outcome": "no_session"}),
        ServerShutdown::TimedOut => json!({"outcome": "timed_out"}),
        _ => json!({"outcome": "other"}),
    }
}

/// Runs until SIGINT or SIGTERM (or the end of input with --exit-on-eof,
/// once every command read is answered), then shuts down and reports.
pub(crate) async fn run(options: FleetArgs) -> Outcome {
    let json_mode = options.json;
    let shared = Shared::from(&options);
    let config: PathBuf = options.config;
    let loaded = load(&config).map_err(Failure::usage)?;
    let mut backoff = Backoff::default();
    if let Some(max) = options.max_backoff {
        backoff = Backoff::new(backoff.initial.min(max), max);
    }
    // Installed before anything runs: a SIGHUP from here on reloads, and
    // never ends the process by its default action.
    let mut hangup = signal(SignalKind::hangup()).map_err(|e| Failure::server(e.to_string()))?;
    let mut terminate =
        signal(SignalKind::terminate()).map_err(|e| Failure::server(e.to_string()))?;
    let mut interrupt =
        signal(SignalKind::interrupt()).map_err(|e| Failure::server(e.to_string()))?;

    let fleet = Arc::new(Fleet::builder().backoff(backoff).build());
    let mut events = fleet.events();
    let mut unsupported = Unsupported::default();
    let mut last_stamp = stamp(&config);
    let report = apply(&fleet, loaded, shared, &mut unsupported, json_mode)
        .await
        .map_err(Failure::usage)?;
    emit(json_mode, &report_line("applied", &report));

    let (send, mut input) = mpsc::channel(1);
    std::thread::Builder::new()
        .name("fleet-stdin".into())
        .spawn(move || read_input(send))
        .map_err(|e| Failure::server(format!("cannot read standard input: {e}")))?;
    let mut reading = true;
    let mut draining = false;
    let mut commands: JoinSet<Value> = JoinSet::new();
    let mut watch = tokio::time::interval(WATCH_EVERY);
    watch.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);

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
            line = input.recv(), if reading && commands.len() < MAX_IN_FLIGHT => match line {
                Some(Input::Line(line)) if line.trim_ascii().is_empty() => {}
                Some(Input::Line(line)) => {
                    commands.spawn(command(fleet.clone(), unsupported.clone(), line));
                }
                Some(Input::TooLong) => crate::out_json(&json!({
                    "error": format!("a command line is at most {MAX_COMMAND_LINE} bytes")
                })),
                Some(Input::End) | None => {
                    reading = false;
                    draining = options.exit_on_eof;
                }
            },
            Some(joined) = commands.join_next() => match joined {
                Ok(answer) => crate::out_json(&answer),
                Err(_) => crate::out_json(&json!({"error": "the command failed"})),
            },
            _ = hangup.recv() => reload = true,
            _ = watch.tick() => {
                let now = stamp(&config);
                if now != last_stamp {
                    last_stamp = now;
                    reload = true;
                }
            }
            _ = terminate.recv() => break,
            _ = interrupt.recv() => break,
        }
        if reload {
            last_stamp = stamp(&config);
            let outcome = match load(&config) {
                Ok(loaded) => apply(&fleet, loaded, shared, &mut unsupported, json_mode).await,
                Err(error) => Err(error),
            };
            match outcome {
                Ok(report) => emit(json_mode, &report_line("reloaded", &report)),
                // The running set stays as it was.
                Err(error) => emit(json_mode, &json!({"event": "reload", "error": error})),
            }
        }
        if draining && commands.is_empty() {
            break;
        }
    }

    // Calls still running end with the shutdown (their sessions close),
    // each still answered.
    let report = fleet.shutdown().await;
    while let Some(joined) = commands.join_next().await {
        match joined {
            Ok(answer) => crate::out_json(&answer),
            Err(_) => crate::out_json(&json!({"error": "the command failed"})),
        }
    }
    drop(events);
    drop(fleet);
    mcp_scoped_http::shutdown().await;
    let ledger = mcp_scoped_http::ledger();
    let servers: Map<String, Value> = report
        .servers
        .iter()
        .map(|(name, outcome)| (name.clone(), shutdown_json(outcome)))
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
