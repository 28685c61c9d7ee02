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
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};

use mcp_scoped_http::Backoff;
use mcp_scoped_http::fleet::{
    ApplyReport, Fleet, FleetEvent, LoadedConfig, Readiness, ServerNotification, ServerShutdown,
    ServerSpec, SlotState, parse_mcp_servers,
};
use mcp_scoped_http::{Progress, RequestOptions};
use serde_json::{Map, Value, json};
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::broadcast::error::{RecvError, TryRecvError};
use tokio::sync::{Notify, mpsc, oneshot, watch};
use tokio::task::JoinSet;

use crate::args::{FleetArgs, Handled};
use crate::asks::Asks;
use crate::commands::released_json;
use crate::{Failure, Outcome};

/// How often the config file is looked at for a change.
const WATCH_EVERY: Duration = Duration::from_millis(250);

/// The longest command line read; a longer one is answered with an error
/// and skipped, never held in memory whole.
const MAX_COMMAND_LINE: usize = 1 << 20;

/// Calls running at once at most. One more is refused at once with an
/// error (standard input is always read: a status is answered whatever is
/// in flight).
const MAX_IN_FLIGHT: usize = 64;

/// Roots changes waiting to be applied at most; one more is refused.
const ROOTS_QUEUE: usize = 16;

/// The bound on one read of the config file (or one look at its time and
/// size), on a thread of its own: a file on a hung network mount makes the
/// reload fail with an error after this long, and no other read starts
/// until that one has returned.
const READ_WITHIN: Duration = Duration::from_secs(5);

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
        // A crashed server's own words, apart from the one-line error.
        if let Some(stderr) = error.stderr_tail() {
            line["stderr"] = json!(stderr);
        }
    }
    line
}

/// A catalog event: the tools added, removed and changed at the top, the
/// other lists only when they changed. Readable lines leave out what is
/// empty.
fn catalog_line(
    json_mode: bool,
    generation: u64,
    tools: usize,
    server: &str,
    changes: &mcp_scoped_http::fleet::CatalogChanges,
) -> Value {
    let names = |list: &mcp_scoped_http::fleet::ListChanges| {
        let mut names = Map::new();
        for (key, value) in [
            ("added", &list.added),
            ("removed", &list.removed),
            ("changed", &list.changed),
        ] {
            if json_mode || !value.is_empty() {
                names.insert(key.into(), json!(value));
            }
        }
        // Past the bound an event holds: counted, not named.
        for (key, more) in [
            ("moreAdded", list.more_added),
            ("moreRemoved", list.more_removed),
            ("moreChanged", list.more_changed),
        ] {
            if more > 0 {
                names.insert(key.into(), json!(more));
            }
        }
        names
    };
    let mut line = names(&changes.tools);
    line.insert("event".into(), json!("catalog"));
    line.insert("generation".into(), json!(generation));
    line.insert("tools".into(), json!(tools));
    line.insert("server".into(), json!(server));
    for (key, list) in [
        ("prompts", &changes.prompts),
        ("resources", &changes.resources),
        ("resourceTemplates", &changes.resource_templates),
    ] {
        if !list.is_empty() {
            line.insert(key.into(), Value::Object(names(list)));
        }
    }
    Value::Object(line)
}

fn unsupported_line(server: &str, left: &Left) -> Value {
    json!({"server": server, "state": left.state, "error": left.reason})
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

/// Reads and parses the file. Blocking: run on the [`Reader`]'s thread.
fn load(path: &Path) -> Result<LoadedConfig, String> {
    use rustix::fs::{Mode, OFlags};
    use std::io::Read as _;
    let cannot = |e: std::io::Error| format!("cannot read {}: {e}", path.display());
    // O_NONBLOCK: opening a FIFO with no writer returns at once (it would
    // wait for one for ever), and the check below refuses it; for a regular
    // file the flag changes nothing. O_NOCTTY: a terminal named as the
    // config never becomes ours.
    let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
    let file = rustix::fs::open(path, flags, Mode::empty())
        .map(std::fs::File::from)
        .map_err(|e| cannot(e.into()))?;
    if !file.metadata().map_err(cannot)?.is_file() {
        return Err(format!(
            "{} is not a regular file (a pipe or a device is never read)",
            path.display()
        ));
    }
    let mut bytes = Vec::new();
    file.take(MAX_CONFIG + 1)
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

/// Blocking (a `stat`): run on the [`Reader`]'s thread.
fn stamp(path: &Path) -> Stamp {
    let metadata = std::fs::metadata(path).ok()?;
    Some((metadata.modified().ok()?, metadata.len(), metadata.ino()))
}

/// The entries of the last file applied that the fleet does not run (a
/// name it cannot take; stdio in a build without it), by name, with why.
type Unsupported = Arc<BTreeMap<String, Left>>;

/// An entry of the file the fleet does not run, and why.
#[derive(Clone, Debug, PartialEq)]
struct Left {
    /// `failed` (the entry cannot be used: a name the fleet cannot take)
    /// or `unsupported` (a stdio entry in a build without stdio).
    state: &'static str,
    reason: String,
}

/// Why a [`Reader`] gave no answer.
#[derive(Debug, PartialEq)]
enum Slow {
    /// The job outlived its bound; it goes on, and the reader takes no new
    /// job until it has returned.
    Late,
    /// A job that outlived its bound earlier has not returned yet.
    Busy,
    /// The reader's thread is gone (a job panicked).
    Gone,
}

/// A thread of its own for the file system calls on the config file
/// (`stat`, `open`, `read`), each awaited within a bound: a hung network
/// mount blocks this thread, never the runtime's, and the thread dies with
/// the process. One job at a time: while a late one has not returned, new
/// ones are refused ([`Slow::Busy`]) rather than queued or given threads
/// of their own.
struct Reader {
    jobs: std::sync::mpsc::Sender<Box<dyn FnOnce() + Send>>,
    busy: Arc<AtomicBool>,
}

impl Reader {
    fn start() -> std::io::Result<Reader> {
        let (jobs, queue) = std::sync::mpsc::channel::<Box<dyn FnOnce() + Send>>();
        std::thread::Builder::new()
            .name("fleet-config".into())
            .spawn(move || {
                while let Ok(job) = queue.recv() {
                    job();
                }
            })?;
        Ok(Reader {
            jobs,
            busy: Arc::new(AtomicBool::new(false)),
        })
    }

    /// Runs `job` on the reader's thread and waits for it up to `within`.
    /// Dropping the future stops the wait, not the job.
    async fn run<T: Send + 'static>(
        &self,
        job: impl FnOnce() -> T + Send + 'static,
        within: Duration,
    ) -> Result<T, Slow> {
        // Jobs are awaited one by one (`&self` of a single owner), so a job
        // still running now is one that was given up on.
        if self.busy.swap(true, Ordering::AcqRel) {
            return Err(Slow::Busy);
        }
        let (send, done) = oneshot::channel();
        let busy = self.busy.clone();
        let job = Box::new(move || {
            let value = job();
            // Cleared before the answer is sent: whoever has the answer
            // may start the next job.
            busy.store(false, Ordering::Release);
            let _ = send.send(value);
        });
        if self.jobs.send(job).is_err() {
            self.busy.store(false, Ordering::Release);
            return Err(Slow::Gone);
        }
        match tokio::time::timeout(within, done).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(_)) => Err(Slow::Gone),
            Err(_) => Err(Slow::Late),
        }
    }
}

/// What a [`Slow`] read of `path` reads as, in a reload error.
fn slow(path: &Path, what: &str, why: Slow) -> String {
    match why {
        Slow::Late => format!(
            "{what} {} took longer than {READ_WITHIN:?}; the next read waits for this one",
            path.display()
        ),
        Slow::Busy => format!(
            "a read of {} that took longer than {READ_WITHIN:?} has not returned yet",
            path.display()
        ),
        Slow::Gone => format!("cannot read {}: the reader failed", path.display()),
    }
}

/// Reports a loaded file's warnings and newly skipped entries, and applies
/// it.
async fn apply(
    fleet: &Fleet,
    loaded: LoadedConfig,
    shared: Shared,
    unsupported: &watch::Sender<Unsupported>,
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
    let invalid: std::collections::HashSet<&str> =
        loaded.invalid.iter().map(|i| i.server.as_str()).collect();
    let skipped: BTreeMap<String, Left> = loaded
        .skipped
        .iter()
        .map(|skipped| {
            let state = if invalid.contains(skipped.server.as_str()) {
                "failed"
            } else {
                "unsupported"
            };
            let reason = skipped.reason.clone();
            (skipped.server.clone(), Left { state, reason })
        })
        .collect();
    let known = unsupported.borrow().clone();
    for (server, left) in &skipped {
        if known.get(server) != Some(left) {
            emit(json_mode, &unsupported_line(server, left));
        }
    }
    unsupported.send_replace(Arc::new(skipped));
    Ok(report)
}

/// Reloads the config file when asked (SIGHUP) and when it changes, aside
/// from the main loop: a read that blocks or a reconcile that waits for a
/// DELETE holds no command and no signal. Reloads are serialized: one at a
/// time, and what asks meanwhile (a SIGHUP, a change seen) makes one more.
struct Reloader {
    fleet: Arc<Fleet>,
    config: PathBuf,
    shared: Shared,
    json_mode: bool,
    reader: Reader,
    unsupported: watch::Sender<Unsupported>,
    last_stamp: Stamp,
}

impl Reloader {
    async fn run(mut self, asked: Arc<Notify>) {
        let mut watch = tokio::time::interval(WATCH_EVERY);
        watch.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                // A SIGHUP during a reload left a permit: one more reload.
                () = asked.notified() => {}
                _ = watch.tick() => {
                    let path = self.config.clone();
                    match self.reader.run(move || stamp(&path), READ_WITHIN).await {
                        Ok(now) if now != self.last_stamp => {}
                        Ok(_) | Err(Slow::Busy) => continue,
                        Err(why) => {
                            let error = slow(&self.config, "looking at", why);
                            emit(self.json_mode, &json!({"event": "reload", "error": error}));
                            continue;
                        }
                    }
                }
            }
            self.reload().await;
        }
    }

    async fn reload(&mut self) {
        let (stamped, loaded) = {
            let path = self.config.clone();
            self.reader
                .run(move || (stamp(&path), load(&path)), READ_WITHIN)
                .await
                .map_err(|why| slow(&self.config, "reading", why))
                .map(|(stamped, loaded)| (Some(stamped), loaded))
                .unwrap_or_else(|error| (None, Err(error)))
        };
        // Stamped before the read: a change made while reading is seen at
        // the next look.
        if let Some(stamped) = stamped {
            self.last_stamp = stamped;
        }
        let outcome = match loaded {
            Ok(loaded) => {
                apply(
                    &self.fleet,
                    loaded,
                    self.shared,
                    &self.unsupported,
                    self.json_mode,
                )
                .await
            }
            Err(error) => Err(error),
        };
        match outcome {
            Ok(report) => emit(self.json_mode, &report_line("reloaded", &report)),
            // The running set stays as it was.
            Err(error) => emit(self.json_mode, &json!({"event": "reload", "error": error})),
        }
    }
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

/// A command read from standard input.
enum Command {
    /// Answered at once: a status, a reconnect, a malformed line.
    Answer(Value),
    /// A call, to run aside.
    Call(Call),
    /// New roots, told to the servers aside.
    Roots {
        id: Option<Value>,
        roots: Vec<Value>,
    },
}

/// A valid call command.
struct Call {
    id: Option<Value>,
    server: String,
    tool: String,
    arguments: Value,
    /// How long to wait for the server to be ready; `None`: fail at once.
    wait: Option<Duration>,
    /// Whether the caller asked for progress lines (`"progress": true`).
    progress: bool,
}

/// `answer`, with the command's `id` when it has one.
fn with_id(mut answer: Value, id: Option<&Value>) -> Value {
    if let (Some(id), Value::Object(fields)) = (id, &mut answer) {
        fields.insert("id".into(), id.clone());
    }
    answer
}

/// One line of standard input, as a command. Everything but a call is
/// answered here, at once: nothing in it waits.
fn command(fleet: &Fleet, unsupported: &Unsupported, asks: Option<&Asks>, line: &[u8]) -> Command {
    let Ok(Value::Object(command)) = serde_json::from_slice::<Value>(line) else {
        return Command::Answer(
            json!({"error": "a command is one JSON object a line: {\"call\": {\"server\", \
                             \"tool\", \"arguments\"}}, {\"reconnect\": NAME} or {\"status\": true}"}),
        );
    };
    let id = command.get("id");
    match parse(fleet, unsupported, asks, &command) {
        Command::Call(mut call) => {
            call.id = id.cloned();
            // Asked for beside "call" or inside it.
            call.progress |= command.get("progress") == Some(&Value::Bool(true));
            Command::Call(call)
        }
        Command::Answer(answer) => Command::Answer(with_id(answer, id)),
        Command::Roots { roots, .. } => Command::Roots {
            id: id.cloned(),
            roots,
        },
    }
}

/// The command, its `id` aside.
fn parse(
    fleet: &Fleet,
    unsupported: &Unsupported,
    asks: Option<&Asks>,
    command: &Map<String, Value>,
) -> Command {
    if let Some(respond) = command.get("respond") {
        return Command::Answer(match asks {
            Some(asks) => asks.respond(respond),
            None => json!({"error": "no server request is asked of the host: start with --handle"}),
        });
    }
    if let Some(roots) = command.get("roots") {
        let valid = roots.as_array().filter(|roots| {
            roots
                .iter()
                .all(|root| root.get("uri").is_some_and(Value::is_string))
        });
        return match valid {
            Some(roots) => Command::Roots {
                id: None,
                roots: roots.clone(),
            },
            None => Command::Answer(
                json!({"error": "\"roots\" takes a list of {\"uri\": STRING, \"name\"}"}),
            ),
        };
    }
    if command.get("catalog") == Some(&Value::Bool(true)) {
        return Command::Answer(json!({"catalog": catalog_json(fleet)}));
    }
    if let Some(call) = command.get("call") {
        // Without "server", "tool" is the qualified name the catalog
        // gives (what a model was shown).
        let qualified;
        let (server, tool) = match (
            call.get("server").and_then(Value::as_str),
            call.get("tool").and_then(Value::as_str),
        ) {
            (Some(server), Some(tool)) => (server, tool),
            (None, Some(name)) if call.get("server").is_none() => {
                let Some(found) = fleet.tool_of(name) else {
                    return Command::Answer(
                        json!({"tool": name, "error": "no such qualified tool in the catalog"}),
                    );
                };
                qualified = found;
                (qualified.0.as_str(), qualified.1.as_str())
            }
            _ => {
                return Command::Answer(
                    json!({"error": "a call needs \"tool\" (a qualified name), or \"server\" and \"tool\", strings"}),
                );
            }
        };
        let arguments = match call.get("arguments") {
            None => json!({}),
            Some(arguments @ Value::Object(_)) => arguments.clone(),
            Some(_) => {
                return Command::Answer(
                    json!({"server": server, "tool": tool, "error": "\"arguments\" is not an object"}),
                );
            }
        };
        // The caller's choice: fail at once when the server is not ready
        // (the default), or wait for it up to `waitMs`.
        let wait = match call.get("waitMs").map(Value::as_u64) {
            None => None,
            Some(Some(wait)) => Some(Duration::from_millis(wait)),
            Some(None) => {
                return Command::Answer(
                    json!({"server": server, "tool": tool, "error": "\"waitMs\" is not a number of milliseconds"}),
                );
            }
        };
        // In the file, but not run: say why, not "no such server".
        if let Some(left) = unsupported.get(server) {
            let reason = &left.reason;
            let error = format!("server `{server}` is in the configuration but not run: {reason}");
            return Command::Answer(json!({"server": server, "tool": tool, "error": error}));
        }
        return Command::Call(Call {
            id: None,
            server: server.to_owned(),
            tool: tool.to_owned(),
            arguments,
            wait,
            progress: call.get("progress") == Some(&Value::Bool(true)),
        });
    }
    if let Some(server) = command.get("reconnect") {
        let Some(server) = server.as_str() else {
            return Command::Answer(json!({"error": "\"reconnect\" takes a server name"}));
        };
        return Command::Answer(match fleet.reconnect(server) {
            Ok(()) => json!({"reconnect": server, "ok": true}),
            Err(error) => json!({"reconnect": server, "error": crate::with_causes(&error)}),
        });
    }
    if command.contains_key("status") {
        let mut servers: Map<String, Value> = unsupported
            .iter()
            .map(|(name, left)| (name.clone(), unsupported_line(name, left)))
            .collect();
        servers.extend(fleet.states().iter().map(|(name, state)| {
            let mut line = state_line(fleet, name, state);
            // What a ready server said about itself, as it sent it: hosts
            // put the instructions into their model's prompt.
            if let Some(info) = fleet.info(name).filter(|_| state.is_ready()) {
                line["protocolVersion"] = json!(info.protocol_version.as_str());
                line["serverInfo"] = info.server_info.clone();
                line["capabilities"] = info.capabilities.clone();
                if let Some(instructions) = &info.instructions {
                    line["instructions"] = json!(instructions);
                }
            }
            (name.clone(), line)
        }));
        let catalog = fleet.catalog();
        return Command::Answer(json!({
            "status": servers,
            "generation": catalog.generation,
            "tools": catalog.tool_count(),
        }));
    }
    Command::Answer(
        json!({"error": "unknown command: one of \"call\", \"reconnect\", \"status\", \"catalog\", \"roots\", \"respond\""}),
    )
}

/// Every ready server's tools, prompts, resources and templates, as each
/// server listed them, with the qualified names a model is given.
fn catalog_json(fleet: &Fleet) -> Value {
    let catalog = fleet.catalog();
    // `own`: the key the entry's own name goes under ("tool", "prompt"),
    // its qualified name taking "name"; `None`: the entry keeps its keys
    // and gets "qualified" beside them (resources, templates).
    let list = |entries: Vec<mcp_scoped_http::fleet::QualifiedEntry<'_>>, own: Option<&str>| {
        entries
            .into_iter()
            .filter_map(|entry| {
                let mut object: Map<String, Value> = entry.entry.parse().ok()?;
                let qualified = entry.qualified_name()?;
                match own {
                    Some(key) => {
                        let name = object.remove("name").unwrap_or(Value::Null);
                        object.insert(key.to_owned(), name);
                        object.insert("name".into(), json!(qualified));
                    }
                    None => {
                        object.insert("qualified".into(), json!(qualified));
                    }
                }
                object.insert("server".into(), json!(entry.server));
                Some(Value::Object(object))
            })
            .collect::<Vec<Value>>()
    };
    json!({
        "generation": catalog.generation,
        "tools": list(catalog.tools().collect(), Some("tool")),
        "prompts": list(catalog.prompts().collect(), Some("prompt")),
        "resources": list(catalog.resources().collect(), None),
        "resourceTemplates": list(catalog.resource_templates().collect(), None),
    })
}

/// Runs a call; its answer.
async fn call(fleet: Arc<Fleet>, call: Call) -> Value {
    let Call {
        id,
        server,
        tool,
        arguments,
        wait,
        progress,
    } = call;
    let mut options = RequestOptions::default();
    if progress {
        // Written as they come, so before the answer (written once the
        // call has returned, through the same queue).
        let id = id.clone();
        options = options.on_progress(move |progress: Progress| {
            let line = json!({"progress": {
                "progress": progress.progress,
                "total": progress.total,
                "message": progress.message,
            }});
            crate::out_json(&with_id(line, id.as_ref()));
        });
    }
    let outcome = match wait {
        None => {
            fleet
                .call_tool_with(&server, &tool, arguments, options)
                .await
        }
        Some(wait) => {
            fleet
                .call_tool_waiting_with(&server, &tool, arguments, wait, options)
                .await
        }
    };
    let answer = match outcome {
        Ok(result) => json!({"server": server, "tool": tool, "result": result}),
        Err(error) => json!({"server": server, "tool": tool, "error": crate::with_causes(&error)}),
    };
    with_id(answer, id.as_ref())
}

/// A server's notification, as a line.
fn notification_line(note: &ServerNotification) -> Value {
    let mut notification = json!({"method": note.method()});
    if let Some(params) = note.params() {
        notification["params"] = params.clone();
    }
    json!({"server": &*note.server, "notification": notification})
}

/// The line of one fleet event.
fn emit_event(fleet: &Fleet, json_mode: bool, event: FleetEvent) {
    match event {
        FleetEvent::State { server, state, .. } => {
            emit(json_mode, &state_line(fleet, &server, &state));
        }
        FleetEvent::Catalog {
            generation,
            tools,
            server,
            changes,
            ..
        } => {
            emit(
                json_mode,
                &catalog_line(json_mode, generation, tools, &server, &changes),
            );
        }
        // No session ids: they are credentials.
        FleetEvent::Renewed { server, era, .. } => {
            emit(
                json_mode,
                &json!({"server": &*server, "event": "renewed", "era": era.as_str()}),
            );
        }
        _ => {}
    }
}

/// The line said once every server has settled or the ready timeout
/// passed (with an error when a required server is not ready).
fn settled_line(readiness: &mcp_scoped_http::Result<Readiness>) -> Value {
    match readiness {
        Ok(readiness) => json!({
            "event": "settled",
            "ready": readiness.ready,
            "notReady": readiness.not_ready.keys().collect::<Vec<_>>(),
            "pending": readiness.pending,
        }),
        Err(error) => json!({"event": "settled", "error": crate::with_causes(error)}),
    }
}

/// The answer to a call over [`MAX_IN_FLIGHT`].
fn refused(call: &Call) -> Value {
    let error = format!(
        "{MAX_IN_FLIGHT} calls are in flight, the most at once: this one was not sent; \
         send it again once one is answered"
    );
    with_id(
        json!({"server": call.server, "tool": call.tool, "error": error}),
        call.id.as_ref(),
    )
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
    // Never waits on stdout: a host that stops reading it still gets its
    // signals and commands served.
    crate::output::aside(json_mode)
        .map_err(|e| Failure::server(format!("cannot start writing: {e}")))?;
    let shared = Shared::from(&options);
    let config: PathBuf = options.config;
    let reader = Reader::start()
        .map_err(|e| Failure::server(format!("cannot start reading the config: {e}")))?;
    let path = config.clone();
    let (last_stamp, loaded) = reader
        .run(move || (stamp(&path), load(&path)), READ_WITHIN)
        .await
        .map_err(|why| Failure::usage(slow(&config, "reading", why)))?;
    let loaded = loaded.map_err(Failure::usage)?;
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

    let mut builder = Fleet::builder().backoff(backoff);
    if let Some(every) = options.health_interval {
        builder = builder.health_interval(Some(every));
    }
    let asks = (!options.handle.is_empty()).then(|| Asks::new(options.answer_timeout));
    for handled in &options.handle {
        let asks = asks.clone().expect("made when anything is handled");
        builder = match handled {
            Handled::Sampling => builder.on_sampling(move |server, params| {
                let asks = asks.clone();
                async move { asks.ask(server, "sampling/createMessage", params).await }
            }),
            Handled::Elicitation => builder.on_elicitation(move |server, params| {
                let asks = asks.clone();
                async move { asks.ask(server, "elicitation/create", params).await }
            }),
            Handled::Roots => builder.roots(Vec::new()),
        };
    }
    let fleet = Arc::new(builder.build());
    let mut events = fleet.events();
    let mut notifications = fleet.notifications();
    let (unsupported, unsupported_now) = watch::channel(Unsupported::default());
    // Nothing runs yet: this apply only starts slots, it waits for none.
    let report = apply(&fleet, loaded, shared, &unsupported, json_mode)
        .await
        .map_err(Failure::usage)?;
    emit(json_mode, &report_line("applied", &report));
    let reload = Arc::new(Notify::new());
    let reloader = Reloader {
        fleet: fleet.clone(),
        config,
        shared,
        json_mode,
        reader,
        unsupported,
        last_stamp,
    };
    // Aborted at shutdown: a reconcile cut there leaves its stopped slots
    // to end on their own, still the fleet's, drained by `shutdown`.
    let reloader = tokio::spawn(reloader.run(reload.clone()));
    // Roots changes, one after the other in the order they came: the
    // last line read is the roots in force.
    let (roots_in, mut roots_out) = mpsc::channel::<(Option<Value>, Vec<Value>)>(ROOTS_QUEUE);
    let roots_worker = {
        let fleet = fleet.clone();
        tokio::spawn(async move {
            while let Some((id, roots)) = roots_out.recv().await {
                let answer = match fleet.set_roots(roots).await {
                    Ok(told) => json!({"roots": {"told": told}}),
                    Err(error) => json!({"roots": {"error": crate::with_causes(&error)}}),
                };
                crate::out_json(&with_id(answer, id.as_ref()));
            }
        })
    };

    let (send, mut input) = mpsc::channel(1);
    std::thread::Builder::new()
        .name("fleet-stdin".into())
        .spawn(move || read_input(send))
        .map_err(|e| Failure::server(format!("cannot read standard input: {e}")))?;
    let mut reading = true;
    let mut draining = false;
    let mut commands: JoinSet<Value> = JoinSet::new();
    // Polled in the loop, never awaited: the "settled" line comes once,
    // while commands and events go on.
    let mut settling = {
        let fleet = fleet.clone();
        let within = options.ready_timeout;
        Some(Box::pin(async move { fleet.ready(within).await }))
    };

    // Nothing in this loop waits but `select!`: every branch is answered
    // at once, whatever runs aside (calls, a reload).
    loop {
        tokio::select! {
            event = events.recv() => match event {
                Ok(event) => emit_event(&fleet, json_mode, event),
                Err(RecvError::Lagged(lost)) => {
                    emit(json_mode, &json!({"event": "lagged", "lost": lost}));
                }
                Err(RecvError::Closed) => break,
            },
            note = notifications.recv() => match note {
                Ok(note) => emit(json_mode, &notification_line(&note)),
                Err(RecvError::Lagged(lost)) => {
                    emit(json_mode, &json!({"event": "lagged", "lost": lost, "stream": "notifications"}));
                }
                // Only after the shutdown, after this loop.
                Err(RecvError::Closed) => break,
            },
            Some(readiness) = async { Some(settling.as_mut()?.as_mut().await) }, if settling.is_some() => {
                settling = None;
                // Every state line the readiness sums up comes first: the
                // slots announce a state before they wake `ready`.
                loop {
                    match events.try_recv() {
                        Ok(event) => emit_event(&fleet, json_mode, event),
                        Err(TryRecvError::Lagged(lost)) => {
                            emit(json_mode, &json!({"event": "lagged", "lost": lost}));
                        }
                        Err(_) => break,
                    }
                }
                emit(json_mode, &settled_line(&readiness));
            }
            line = input.recv(), if reading => match line {
                Some(Input::Line(line)) if line.trim_ascii().is_empty() => {}
                Some(Input::Line(line)) => {
                    let unsupported = unsupported_now.borrow().clone();
                    match command(&fleet, &unsupported, asks.as_deref(), &line) {
                        Command::Answer(answer) => crate::out_json(&answer),
                        Command::Roots { id, roots } => {
                            if let Err(full) = roots_in.try_send((id, roots)) {
                                let (id, _) = full.into_inner();
                                crate::out_json(&with_id(
                                    json!({"roots": {"error": format!("{ROOTS_QUEUE} roots changes already wait")}}),
                                    id.as_ref(),
                                ));
                            }
                        }
                        Command::Call(call) if commands.len() >= MAX_IN_FLIGHT => {
                            crate::out_json(&refused(&call));
                        }
                        Command::Call(call) => {
                            commands.spawn(self::call(fleet.clone(), call));
                        }
                    }
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
            // One permit at most: SIGHUPs during a reload make one more.
            _ = hangup.recv() => reload.notify_one(),
            _ = terminate.recv() => break,
            _ = interrupt.recv() => break,
        }
        if draining && commands.is_empty() {
            break;
        }
    }

    // The shutdown, until a second SIGTERM or SIGINT: that cuts the drain
    // short (the fleet is dropped, its slots aborted; the DELETEs of their
    // sessions go to the reaper, which the exit waits for within the
    // DELETE timeout).
    let finishing = async move {
        reloader.abort();
        let _ = reloader.await;
        roots_worker.abort();
        let _ = roots_worker.await;
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
    };
    tokio::select! {
        outcome = finishing => outcome,
        _ = terminate.recv() => Err(Failure::server("stopped by a second signal during the shutdown")),
        _ = interrupt.recv() => Err(Failure::server("stopped by a second signal during the shutdown")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A job that outlives its bound is given up on within it; the reader
    /// then refuses new jobs at once until that one returns, and takes
    /// them again afterwards.
    #[tokio::test]
    async fn a_late_read_is_given_up_on_and_refuses_the_next_until_it_returns() {
        let reader = Reader::start().expect("a thread");
        let (release, held) = std::sync::mpsc::channel::<()>();
        let started = Instant::now();
        let late = reader
            .run(move || held.recv().is_ok(), Duration::from_millis(50))
            .await;
        assert_eq!(late, Err(Slow::Late));
        assert!(started.elapsed() < Duration::from_secs(5));
        assert_eq!(
            reader.run(|| 1, Duration::from_secs(5)).await,
            Err(Slow::Busy)
        );
        release.send(()).expect("the job waits");
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match reader.run(|| 2, Duration::from_secs(5)).await {
                Ok(value) => break assert_eq!(value, 2),
                Err(Slow::Busy) => assert!(Instant::now() < deadline, "still busy"),
                Err(other) => panic!("{other:?}"),
            }
            tokio::task::yield_now().await;
        }
    }
}
