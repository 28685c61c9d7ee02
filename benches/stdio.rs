//! stdio servers: churn against a floor and the official Rust SDK, and a
//! fleet of them, measured in one run.
//!
//! The server is the test kit's, this bench's binary run again (the test
//! kit's catalog on its standard streams, a Rust binary: a Python
//! server's start-up would swamp every figure), with 20 tools in pages of
//! 5, 3 prompts, 3 resources and 1 resource template, as the HTTP churn.
//!
//! 1. **Churn**: one cycle spawns the server, connects (the
//!    `server/discover` probe, refused, then `initialize` and
//!    `notifications/initialized`), lists everything (four pages of
//!    tools), calls one tool and closes (stdin closed, the exit awaited),
//!    one cycle at a time. Three clients, in interleaved rounds (the order
//!    rotates each round, so a load change on the machine hits all three):
//!    - **ours**: `Connector::stdio(..).connect()`, `call_tool`, `close()`;
//!    - **floor**: `tokio::process::Command` spawns the same binary with
//!      the same arguments and environment, writes the very lines one of
//!      our cycles wrote (recorded through `tee`; the four lists' chains
//!      concurrently, as ours sends them), reads the answers line by line
//!      matching ids, closes stdin and waits for the exit: no MCP logic;
//!    - **rmcp 3.11**: `TokioChildProcess` through `benches/rmcp-churn
//!      --stdio` (a separate process; `RMCP_CHURN` names it, `bash
//!      benches/compare-stdio` builds it and runs this bench), the same
//!      binary, arguments and environment.
//!
//!    Per client: cycles/s, mean, p50, p99, CPU of the client process per
//!    cycle (the server's not included) and the ratio to the floor.
//! 2. **Fleet** (in a fresh process, this binary run again, so neither the
//!    churn's freed memory nor its children confound it): `--servers N`
//!    (default 100) stdio slots in one `Fleet`: time from `apply` to all
//!    ready, the host's `VmRSS` per slot (after minus before, over N), the
//!    `shutdown()` time, how each server ended, and the processes left
//!    (descendants of the fleet's process, from `/proc`): 0; and the
//!    watchdogs' proportional set size (`Pss`) summed, while ready.
//! 3. **Spawn at any host size** (`--only spawn`, not part of the default
//!    run): for a host heap of 0, 1 and 2 GiB (allocated and written by a
//!    fresh process of this binary, as a long-lived IDE's heap is), ours
//!    and the floor churn in interleaved rounds in that process: the ratio
//!    of ours to the floor must not grow with the heap (a fork of the host
//!    per spawn would add tens of milliseconds a GiB).
//!
//! Options: `--cycles N` (200 per client), `--rounds R` (5), `--servers N`
//! (100), `--only churn|fleet|spawn`, `--heaps 0,1024,2048` (MiB, for
//! `spawn`), `--clients ours,floor,rmcp` (a subset, for
//! a profile), `--current-thread` (ours and the floor on a current-thread
//! runtime), `--quick` (20 cycles, 10 servers).

// The churn awaits a connect, its discovery and a call inside rounds of
// three clients, nested deeper than the default limit lets rustc lay out.
#![recursion_limit = "256"]

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use mcp_scoped_http::Connector;
use mcp_scoped_http::fleet::{Fleet, ServerShutdown, ServerSpec};
use mcp_scoped_http::stdio::{DEFAULT_ENV_ALLOWLIST, ProcessEnd, StdioCommand};
use mcp_scoped_http_testkit::churn::process_cpu_time;
use mcp_scoped_http_testkit::stdio::serve_lines;
use mcp_scoped_http_testkit::{ListenMode, ServerConfig};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};

/// The server: this bench's binary again, serving the test kit's catalog
/// (the HTTP churn's: 20 tools in pages of 5, 3 prompts, 3 resources) on
/// its standard input and output ([`serve_stdio`]).
fn server() -> PathBuf {
    std::env::current_exe().expect("this bench's binary")
}
/// Its arguments.
const SERVER_ARGS: [&str; 1] = [SERVE_STDIO];
/// The argument that makes this binary the server.
const SERVE_STDIO: &str = "--serve-stdio";
/// The tool each cycle calls, and its arguments.
const TOOL: &str = "tool-000";
/// Which part of the bench this process is: unset for the driver.
const ROLE: &str = "STDIO_BENCH_ROLE";
/// The fleet process's server count.
const COUNT: &str = "STDIO_BENCH_SERVERS";
/// The spawn process's heap, in MiB.
const HEAP: &str = "STDIO_BENCH_HEAP_MIB";
/// The spawn process's cycles per client, and rounds.
const SPAWN_CYCLES: &str = "STDIO_BENCH_SPAWN_CYCLES";
/// The bound on one cycle, and on every wait.
const BOUND: Duration = Duration::from_secs(60);

/// The server's body: the test kit's catalog on standard input and output
/// until standard input ends.
fn serve_stdio() {
    let config = ServerConfig::default()
        .with_tools(20)
        .with_page_size(5)
        .with_prompts(3)
        .with_resources(3)
        .with_listen(ListenMode::Open)
        .with_record_requests(false);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime
        .block_on(serve_lines(
            &config,
            tokio::io::stdin(),
            tokio::io::stdout(),
        ))
        .expect("serving on standard input and output");
}

/// The driver (the churn, then the fleet in a fresh process), or the
/// fleet's process when run as one.
fn main() {
    if std::env::args().nth(1).as_deref() == Some(SERVE_STDIO) {
        return serve_stdio();
    }
    match std::env::var(ROLE).as_deref() {
        Ok("fleet") => return fleet_main(),
        Ok("spawn") => return spawn_main(),
        _ => {}
    }
    let options = Options::parse();
    let mut builder = if options.current_thread {
        tokio::runtime::Builder::new_current_thread()
    } else {
        tokio::runtime::Builder::new_multi_thread()
    };
    let runtime = builder.enable_all().build().expect("a runtime");
    println!("# stdio benchmarks\n");
    println!(
        "server: the test kit's catalog over stdio (this binary, `{}`); {} cores; load average before: {}",
        SERVER_ARGS.join(" "),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        load_average()
    );
    if options.churn {
        // On a worker, as a host's code runs, not on the thread that
        // blocks on the runtime: every client's tasks then wake each
        // other on the workers, with no hop to and from this thread.
        let churn_options = options.clone();
        runtime
            .block_on(async move { tokio::spawn(async move { churn(&churn_options).await }).await })
            .expect("the churn");
    }
    drop(runtime);
    if options.fleet {
        fleet(options.servers);
    }
    if options.spawn {
        spawn(&options);
    }
    println!("\nload average after: {}", load_average());
}

// ---------------------------------------------------------------- options

/// The command line (what cargo adds, `--bench`, is ignored).
#[derive(Clone)]
struct Options {
    /// Cycles per churn client (`--cycles`).
    cycles: usize,
    /// Interleaved rounds they are split into (`--rounds`).
    rounds: usize,
    /// Servers in the fleet (`--servers`).
    servers: usize,
    /// Whether the churn runs (not `--only fleet`).
    churn: bool,
    /// Whether the fleet runs (not `--only churn`).
    fleet: bool,
    /// Whether the spawn part runs (`--only spawn`).
    spawn: bool,
    /// Its host heaps, in MiB (`--heaps`).
    heaps: Vec<usize>,
    /// The churn on a current-thread runtime (`--current-thread`), not
    /// a multi-thread one: no task of ours or the floor's wakes another
    /// thread (rmcp keeps its own process's multi-thread runtime).
    current_thread: bool,
    /// Which churn clients run (`--clients ours,floor,rmcp`): all by
    /// default; one alone, for a profile.
    clients: Vec<String>,
}

impl Options {
    /// Whether `client` is measured.
    fn runs(&self, client: &str) -> bool {
        self.clients.is_empty() || self.clients.iter().any(|c| c == client)
    }
}

impl Options {
    /// The options given.
    fn parse() -> Options {
        let mut options = Options {
            cycles: 200,
            rounds: 5,
            servers: 100,
            churn: true,
            fleet: true,
            spawn: false,
            heaps: vec![0, 1024, 2048],
            clients: Vec::new(),
            current_thread: false,
        };
        let number = |value: Option<String>, what: &str| -> usize {
            value
                .and_then(|n| n.parse().ok())
                .filter(|n| *n > 0)
                .unwrap_or_else(|| panic!("{what} takes a positive number"))
        };
        let mut args = std::env::args().skip(1);
        while let Some(arg) = args.next() {
            match arg.as_str() {
                "--cycles" => options.cycles = number(args.next(), "--cycles"),
                "--rounds" => options.rounds = number(args.next(), "--rounds"),
                "--servers" => options.servers = number(args.next(), "--servers"),
                "--quick" => {
                    options.cycles = 20;
                    options.servers = 10;
                }
                "--current-thread" => options.current_thread = true,
                "--clients" => {
                    let list = args.next().expect("--clients takes a list");
                    options.clients = list.split(',').map(str::to_owned).collect();
                }
                "--only" => match args.next().as_deref() {
                    Some("churn") => options.fleet = false,
                    Some("fleet") => options.churn = false,
                    Some("spawn") => {
                        (options.churn, options.fleet, options.spawn) = (false, false, true);
                    }
                    _ => panic!("--only takes churn, fleet or spawn"),
                },
                "--heaps" => {
                    let list = args.next().expect("--heaps takes a list of MiB");
                    options.heaps = list
                        .split(',')
                        .map(|n| n.parse().expect("--heaps takes numbers (MiB)"))
                        .collect();
                }
                _ => {}
            }
        }
        options.rounds = options.rounds.min(options.cycles);
        options
    }
}

// ---------------------------------------------------------------- helpers

/// The 1, 5 and 15 minute load averages, as `/proc/loadavg` says them.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|text| {
            text.split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_else(|_| "?".to_owned())
}

/// The environment every client gives the server: the host's variables
/// that ours passes by default (its allowlist), nothing else, so the
/// three spawns are the same.
fn server_env() -> Vec<(OsString, OsString)> {
    DEFAULT_ENV_ALLOWLIST
        .iter()
        .filter_map(|name| Some((OsString::from(name), std::env::var_os(name)?)))
        .collect()
}

/// `a / b`, NaN without a floor.
fn ratio(a: Duration, b: Duration) -> f64 {
    if b.is_zero() {
        f64::NAN
    } else {
        a.as_secs_f64() / b.as_secs_f64()
    }
}

/// `duration` in microseconds.
fn micros(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e6
}

/// What one client did over every round.
#[derive(Default)]
struct Stats {
    /// Each successful cycle's latency.
    latencies: Vec<Duration>,
    /// Cycles that failed.
    failures: usize,
    /// The first failure's error.
    first_error: Option<String>,
    /// Wall time of the measured cycles, all rounds together.
    wall: Duration,
    /// CPU time of the client's process over them.
    cpu: Duration,
    /// Context switches of the client's threads over them (in process
    /// only: `None` for rmcp).
    switches: Option<u64>,
}

impl Stats {
    /// Cycles run, failed ones included.
    fn cycles(&self) -> usize {
        self.latencies.len() + self.failures
    }

    /// Successful cycles per second of measured wall time.
    fn cycles_per_second(&self) -> f64 {
        self.latencies.len() as f64 / self.wall.as_secs_f64().max(f64::MIN_POSITIVE)
    }

    /// Mean latency of the successful cycles.
    fn mean(&self) -> Duration {
        let total: Duration = self.latencies.iter().sum();
        total / u32::try_from(self.latencies.len().max(1)).unwrap_or(u32::MAX)
    }

    /// Latency percentile `p` of the successful cycles (nearest rank).
    fn percentile(&self, p: usize) -> Duration {
        let mut sorted = self.latencies.clone();
        sorted.sort_unstable();
        if sorted.is_empty() {
            return Duration::ZERO;
        }
        let rank = (p * sorted.len()).div_ceil(100);
        sorted[rank.clamp(1, sorted.len()) - 1]
    }

    /// Client CPU time per cycle run.
    fn cpu_per_cycle(&self) -> Duration {
        self.cpu / u32::try_from(self.cycles().max(1)).unwrap_or(u32::MAX)
    }

    /// Context switches per cycle run, `?` where not counted.
    fn switches_per_cycle(&self) -> String {
        self.switches.map_or("?".to_owned(), |n| {
            format!("{:.1}", n as f64 / self.cycles().max(1) as f64)
        })
    }

    /// Counts a failed cycle, keeping the first error.
    fn fail(&mut self, error: String) {
        self.failures += 1;
        self.first_error.get_or_insert(error);
    }
}

// ---------------------------------------------------------------- churn

/// Our cycle: connect (probe, initialize, discovery), one call, close; the
/// server must have exited by itself, with status 0.
async fn ours_once(command: &StdioCommand) -> Result<(), String> {
    let session = Connector::stdio(command.clone())
        .connect()
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let called = session.call_tool(TOOL, json!({"text": "churn"})).await;
    let released = session.close().await;
    let result = called.map_err(|e| format!("call: {e}"))?;
    if result["isError"] == true {
        return Err(format!("the tool failed: {result}"));
    }
    match released.process {
        Some(ProcessEnd::Exited(status)) if status.success() => Ok(()),
        other => Err(format!("the server ended so: {other:?}")),
    }
}

/// One step of the floor's script.
enum Step {
    /// A notification: written, nothing awaited.
    Notify(Vec<u8>),
    /// A request: written, then its answer read.
    Request(Sent),
    /// Chains of requests sent concurrently (the lists, each page after
    /// the previous page's answer): each chain's first line is written
    /// at once, the next one when the previous one's answer is read.
    Chains(Vec<Vec<Sent>>),
}

/// A request's line and its id.
type Sent = (Vec<u8>, Value);
/// Requests of one list method, in order, by method.
type Chain = (String, Vec<Sent>);

/// The lines one of our cycles wrote, as the floor replays them.
struct Script {
    /// What the floor does, in order.
    steps: Vec<Step>,
    /// Every line, for the table's description.
    methods: Vec<String>,
}

impl Script {
    /// Parses the recording: one message a line. Contiguous list requests
    /// become one [`Step::Chains`], a chain per method.
    fn parse(recording: &str) -> Script {
        let mut steps = Vec::new();
        let mut methods = Vec::new();
        let mut chains: Vec<Chain> = Vec::new();
        let flush = |chains: &mut Vec<Chain>, steps: &mut Vec<Step>| {
            if !chains.is_empty() {
                steps.push(Step::Chains(
                    chains.drain(..).map(|(_, chain)| chain).collect(),
                ));
            }
        };
        for line in recording.lines().filter(|l| !l.trim().is_empty()) {
            let message: Value = serde_json::from_str(line).expect("our lines are JSON");
            let method = message["method"].as_str().unwrap_or("?").to_owned();
            methods.push(method.clone());
            let bytes = format!("{line}\n").into_bytes();
            match message.get("id") {
                None => {
                    flush(&mut chains, &mut steps);
                    steps.push(Step::Notify(bytes));
                }
                Some(id) if method.ends_with("/list") => {
                    match chains.iter_mut().find(|(m, _)| *m == method) {
                        Some((_, chain)) => chain.push((bytes, id.clone())),
                        None => chains.push((method, vec![(bytes, id.clone())])),
                    }
                }
                Some(id) => {
                    flush(&mut chains, &mut steps);
                    steps.push(Step::Request((bytes, id.clone())));
                }
            }
        }
        flush(&mut chains, &mut steps);
        Script { steps, methods }
    }
}

/// The floor's cycle: spawn, the script's lines written and answered,
/// stdin closed, the exit awaited.
async fn floor_once(script: &Script, env: &[(OsString, OsString)]) -> Result<(), String> {
    let mut child = tokio::process::Command::new(server())
        .args(SERVER_ARGS)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("spawn: {e}"))?;
    let (Some(mut stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
        return Err("no pipes".to_owned());
    };
    let mut stdout = BufReader::new(stdout);
    let mut line = String::new();
    for step in &script.steps {
        match step {
            Step::Notify(bytes) => write_line(&mut stdin, bytes).await?,
            Step::Request((bytes, id)) => {
                write_line(&mut stdin, bytes).await?;
                let got = read_id(&mut stdout, &mut line).await?;
                if got != *id {
                    return Err(format!("answer {got} for request {id}"));
                }
            }
            Step::Chains(chains) => {
                let mut next = vec![0; chains.len()];
                let mut waiting: HashMap<String, usize> = HashMap::new();
                for (i, chain) in chains.iter().enumerate() {
                    write_line(&mut stdin, &chain[0].0).await?;
                    waiting.insert(chain[0].1.to_string(), i);
                }
                while !waiting.is_empty() {
                    let got = read_id(&mut stdout, &mut line).await?;
                    let Some(i) = waiting.remove(&got.to_string()) else {
                        return Err(format!("an answer to no request: {got}"));
                    };
                    next[i] += 1;
                    if let Some((bytes, id)) = chains[i].get(next[i]) {
                        write_line(&mut stdin, bytes).await?;
                        waiting.insert(id.to_string(), i);
                    }
                }
            }
        }
    }
    drop(stdin);
    let status = child.wait().await.map_err(|e| format!("wait: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("the server exited with {status}"))
    }
}

/// Writes one line to the server's stdin.
async fn write_line(stdin: &mut tokio::process::ChildStdin, bytes: &[u8]) -> Result<(), String> {
    stdin
        .write_all(bytes)
        .await
        .map_err(|e| format!("write: {e}"))
}

/// Reads the server's next line: the id of the answer it is.
async fn read_id(
    stdout: &mut BufReader<tokio::process::ChildStdout>,
    line: &mut String,
) -> Result<Value, String> {
    line.clear();
    let n = stdout
        .read_line(line)
        .await
        .map_err(|e| format!("read: {e}"))?;
    if n == 0 {
        return Err("stdout ended".to_owned());
    }
    let message: Value = serde_json::from_str(line).map_err(|e| format!("{e}: {line}"))?;
    Ok(message.get("id").cloned().unwrap_or(Value::Null))
}

/// Records the lines one of our cycles writes: the same server behind
/// `tee`, through a shell.
async fn record() -> String {
    let file = std::env::temp_dir().join(format!("stdio-bench-{}.jsonl", std::process::id()));
    let command = StdioCommand::new("sh")
        .arg("-c")
        .arg("tee \"$0\" | exec \"$@\"")
        .arg(&file)
        .arg(server())
        .args(SERVER_ARGS);
    let session = Connector::stdio(command)
        .connect()
        .await
        .expect("the recorded cycle connects");
    let catalog = session.catalog();
    println!(
        "each cycle lists {} tools, {} prompts, {} resources, {} resource templates",
        catalog.tools.len(),
        catalog.prompts.len(),
        catalog.resources.len(),
        catalog.resource_templates.len()
    );
    session
        .call_tool(TOOL, json!({"text": "churn"}))
        .await
        .expect("the recorded call");
    let released = session.close().await;
    assert!(
        matches!(released.process, Some(ProcessEnd::Exited(s)) if s.success()),
        "the recorded cycle's server: {:?}",
        released.process
    );
    let text = std::fs::read_to_string(&file).expect("the recording");
    let _ = std::fs::remove_file(&file);
    text
}

/// The rmcp client bench, if built: `RMCP_CHURN`, else where `bash
/// benches/compare-stdio` builds it.
fn rmcp_churn() -> Option<PathBuf> {
    let path = std::env::var_os("RMCP_CHURN").map(PathBuf::from)?;
    path.is_file().then_some(path)
}

/// One round of rmcp's cycles in its own process: its figures added to
/// `stats`.
fn rmcp_round(program: &PathBuf, cycles: usize, env: &[(OsString, OsString)], stats: &mut Stats) {
    let output = Command::new(program)
        .args(["--stdio", "--json", "--latencies", "--warmup", "2"])
        .args(["--cycles", &cycles.to_string(), "--call", TOOL])
        .arg("--")
        .arg(server())
        .args(SERVER_ARGS)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stderr(Stdio::piped())
        .output();
    let output = match output {
        Ok(output) => output,
        Err(error) => return stats.fail(format!("cannot run {}: {error}", program.display())),
    };
    let figures: Value = match serde_json::from_slice(&output.stdout) {
        Ok(figures) => figures,
        Err(_) => {
            stats.failures += cycles;
            stats.first_error.get_or_insert_with(|| {
                format!(
                    "rmcp-churn said nothing ({}): {}",
                    output.status,
                    String::from_utf8_lossy(&output.stderr).trim()
                )
            });
            return;
        }
    };
    let latencies = figures["latenciesMicros"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    stats.latencies.extend(
        latencies
            .iter()
            .filter_map(Value::as_u64)
            .map(Duration::from_micros),
    );
    let failures = figures["failures"].as_u64().unwrap_or(0) as usize;
    if failures > 0 {
        stats.failures += failures;
        stats
            .first_error
            .get_or_insert_with(|| String::from_utf8_lossy(&output.stderr).trim().to_owned());
    }
    stats.wall += Duration::from_secs_f64(figures["seconds"].as_f64().unwrap_or(0.0));
    let cpu = figures["cpuMicrosPerCycle"].as_f64().unwrap_or(0.0) * (cycles as f64);
    stats.cpu += Duration::from_secs_f64(cpu / 1e6);
}

/// Context switches (voluntary and not) of this process's live threads
/// so far, from `/proc/self/task/*/status`: each wake-up of a task on
/// another thread is one or two.
fn context_switches() -> u64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    tasks
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("status")).ok())
        .flat_map(|status| {
            status
                .lines()
                .filter(|l| l.contains("ctxt_switches:"))
                .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
                .collect::<Vec<_>>()
        })
        .sum()
}

/// Runs `cycles` of one in-process client, one at a time, into `stats`.
async fn measure<F, Fut>(cycles: usize, stats: &mut Stats, mut once: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), String>>,
{
    let cpu = process_cpu_time().unwrap_or_default();
    let switches = context_switches();
    let started = Instant::now();
    for _ in 0..cycles {
        let begun = Instant::now();
        match tokio::time::timeout(BOUND, once()).await {
            Ok(Ok(())) => stats.latencies.push(begun.elapsed()),
            Ok(Err(error)) => stats.fail(error),
            Err(_) => stats.fail(format!("a cycle took over {BOUND:?}")),
        }
    }
    stats.wall += started.elapsed();
    let switched = context_switches().saturating_sub(switches);
    stats.switches = Some(stats.switches.unwrap_or(0) + switched);
    stats.cpu += process_cpu_time().unwrap_or_default().saturating_sub(cpu);
}

/// The churn part: ours, the floor and rmcp in interleaved rounds, and
/// their table.
async fn churn(options: &Options) {
    println!("\n## Churn: spawn, connect, discovery, one call, close\n");
    let env = server_env();
    let recording = record().await;
    let script = Script::parse(&recording);
    println!(
        "the floor writes the {} lines one of our cycles wrote: {}",
        script.methods.len(),
        script.methods.join(", ")
    );
    let ours_command = StdioCommand::new(server()).args(SERVER_ARGS);
    let rmcp = rmcp_churn().filter(|_| options.runs("rmcp"));
    if rmcp.is_none() {
        println!(
            "rmcp: not measured (set RMCP_CHURN to a built benches/rmcp-churn, or run `bash benches/compare-stdio`)"
        );
    }
    // Warm-up, not measured: the binary in the page cache, the runtime's
    // blocking threads started.
    for _ in 0..3 {
        ours_once(&ours_command).await.expect("a warm-up cycle");
        floor_once(&script, &env).await.expect("a warm-up cycle");
    }
    let (mut ours, mut floor, mut theirs) = (Stats::default(), Stats::default(), Stats::default());
    let per_round = options.cycles.div_ceil(options.rounds);
    let mut left = options.cycles;
    for round in 0..options.rounds {
        let cycles = per_round.min(left);
        left -= cycles;
        for turn in 0..3 {
            match (round + turn) % 3 {
                0 if options.runs("ours") => {
                    measure(cycles, &mut ours, || ours_once(&ours_command)).await;
                }
                1 if options.runs("floor") => {
                    measure(cycles, &mut floor, || floor_once(&script, &env)).await;
                }
                0 | 1 => {}
                _ => {
                    if let Some(program) = &rmcp {
                        // A blocking wait, off the runtime's workers.
                        let (program, env) = (program.clone(), env.clone());
                        let mut stats = std::mem::take(&mut theirs);
                        stats = tokio::task::spawn_blocking(move || {
                            rmcp_round(&program, cycles, &env, &mut stats);
                            stats
                        })
                        .await
                        .expect("the rmcp round");
                        theirs = stats;
                    }
                }
            }
        }
        eprintln!("round {}/{} done", round + 1, options.rounds);
    }
    println!(
        "\n{} cycles per client, one at a time, in {} interleaved rounds, on a {} runtime\n",
        options.cycles,
        options.rounds,
        if options.current_thread {
            "current-thread"
        } else {
            "multi-thread"
        }
    );
    println!(
        "| client | cycles/s | mean µs | p50 µs | p99 µs | CPU µs/cycle (client process) | context switches/cycle (client) | mean / floor's | p50 / floor's | failed |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    let rows = [
        ("ours (`Connector::stdio`)", &ours),
        ("floor (spawn, same lines)", &floor),
        ("rmcp 3.11 `TokioChildProcess`", &theirs),
    ];
    for (name, stats) in rows.into_iter().filter(|(_, stats)| stats.cycles() > 0) {
        println!(
            "| {name} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {} | {:.2} | {:.2} | {} |",
            stats.cycles_per_second(),
            micros(stats.mean()),
            micros(stats.percentile(50)),
            micros(stats.percentile(99)),
            micros(stats.cpu_per_cycle()),
            stats.switches_per_cycle(),
            ratio(stats.mean(), floor.mean()),
            ratio(stats.percentile(50), floor.percentile(50)),
            stats.failures,
        );
        if let Some(error) = &stats.first_error {
            println!("\n{name}: the first failure: {error}\n");
        }
    }
}

// ---------------------------------------------------------------- fleet

/// `VmRSS` of this process, in bytes.
fn rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| {
            rest.trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<u64>()
                .ok()
        })
        .map_or(0, |kib| kib * 1024)
}

/// The live (not zombie) descendants of this process, from `/proc`, but
/// the crate's launcher (one per host, for its life: walked, not listed).
fn descendants() -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut children: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // After the command's closing parenthesis: state, then ppid.
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let mut fields = rest.split_whitespace();
        let (Some(state), Some(ppid)) = (fields.next(), fields.next()) else {
            continue;
        };
        if state != "Z" {
            if let Ok(ppid) = ppid.parse() {
                children.entry(ppid).or_default().push(pid);
            }
        }
    }
    let mut found = Vec::new();
    let mut queue = vec![std::process::id()];
    while let Some(pid) = queue.pop() {
        for &child in children.get(&pid).map_or(&[][..], Vec::as_slice) {
            found.push(child);
            queue.push(child);
        }
    }
    found.retain(|pid| {
        std::fs::read_to_string(format!("/proc/{pid}/comm"))
            .map_or(true, |comm| comm.trim_end() != "mcp-launcher")
    });
    found
}

/// Polls `done` every 10 ms until it holds or `within` passes.
fn poll_until(within: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    done()
}

/// The driver's side: runs the fleet in a fresh process and prints its
/// table.
fn fleet(servers: usize) {
    println!("\n## A fleet of {servers} stdio servers\n");
    let exe = std::env::current_exe().expect("this bench's path");
    let output = Command::new(exe)
        .env(ROLE, "fleet")
        .env(COUNT, servers.to_string())
        .stderr(Stdio::inherit())
        .output()
        .expect("run the fleet process");
    let text = String::from_utf8_lossy(&output.stdout);
    let figures: Value = serde_json::from_str(text.trim())
        .unwrap_or_else(|_| panic!("the fleet process ({}) said {text:?}", output.status));
    println!("| measure | value |\n|---|---|");
    let ms = |key: &str| format!("{:.0} ms", figures[key].as_f64().unwrap_or(f64::NAN));
    println!("| `apply` to all {servers} ready | {} |", ms("readyMs"));
    println!(
        "| host `VmRSS` per ready slot | {:.1} KiB (before {:.1} MiB, after {:.1} MiB) |",
        figures["rssPerSlot"].as_f64().unwrap_or(f64::NAN) / 1024.0,
        figures["rssBefore"].as_f64().unwrap_or(f64::NAN) / 1048576.0,
        figures["rssAfter"].as_f64().unwrap_or(f64::NAN) / 1048576.0,
    );
    println!(
        "| processes under the host while ready | {} |",
        figures["processesWhileReady"]
    );
    println!(
        "| the {} watchdogs' `Pss`, summed, while ready | {:.0} KiB |",
        figures["watchdogs"],
        figures["watchdogPss"].as_f64().unwrap_or(f64::NAN) / 1024.0
    );
    println!("| `shutdown()` | {} |", ms("shutdownMs"));
    println!("| how the servers ended | {} |", figures["ended"]);
    println!(
        "| processes left after `shutdown()` returned | {} (and {} after up to 5 s) |",
        figures["processesLeft"], figures["processesLeftLater"]
    );
    assert!(output.status.success(), "the fleet process failed");
}

/// The fleet process: prints one JSON object of figures on stdout.
fn fleet_main() {
    let n: usize = std::env::var(COUNT)
        .ok()
        .and_then(|n| n.parse().ok())
        .expect("STDIO_BENCH_SERVERS");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let figures = runtime.block_on(async move {
        let command = StdioCommand::new(server()).args(SERVER_ARGS);
        // One session first: what every session shares exists before the
        // baseline.
        let warm = Connector::stdio(command.clone())
            .connect()
            .await
            .expect("the server answers");
        warm.close().await;
        let fleet = Fleet::new();
        let spec = ServerSpec::stdio(command).required(true);
        let before = rss();
        let started = Instant::now();
        fleet
            .apply((0..n).map(|i| (format!("stdio-{i:03}"), spec.clone())))
            .await
            .expect("apply");
        fleet.ready(BOUND).await.expect("all ready");
        let ready = started.elapsed();
        // The same pause for every run: what ready sent comes back.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let after = rss();
        let running = descendants().len();
        let (watchdogs, watchdog_pss) = watchdogs_pss();
        let started = Instant::now();
        let report = fleet.shutdown().await;
        let shutdown = started.elapsed();
        let left = descendants().len();
        let mut ended: BTreeMap<String, usize> = BTreeMap::new();
        for outcome in report.servers.values() {
            let how = match outcome {
                ServerShutdown::Closed(released) => match &released.process {
                    Some(ProcessEnd::Exited(status)) => format!("exited ({status})"),
                    Some(other) => format!("{other:?}"),
                    None => "no process".to_owned(),
                },
                other => format!("{other:?}"),
            };
            *ended.entry(how).or_default() += 1;
        }
        let mut later = left;
        poll_until(Duration::from_secs(5), || {
            later = descendants().len();
            later == 0
        });
        json!({
            "readyMs": ready.as_secs_f64() * 1e3,
            "rssBefore": before,
            "rssAfter": after,
            "rssPerSlot": (after.saturating_sub(before)) as f64 / n as f64,
            "processesWhileReady": running,
            "watchdogs": watchdogs,
            "watchdogPss": watchdog_pss,
            "shutdownMs": shutdown.as_secs_f64() * 1e3,
            "ended": ended,
            "processesLeft": left,
            "processesLeftLater": later,
        })
    });
    drop(runtime);
    println!("{figures}");
}

/// The watchdogs among this process's descendants, and their `Pss`
/// summed, in bytes (`/proc/PID/smaps_rollup`).
fn watchdogs_pss() -> (usize, u64) {
    let mut count = 0;
    let mut pss = 0;
    for pid in descendants() {
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        if comm.trim() != "mcp-watchdog" {
            continue;
        }
        count += 1;
        let rollup =
            std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).unwrap_or_default();
        pss += rollup
            .lines()
            .find_map(|line| line.strip_prefix("Pss:"))
            .and_then(|rest| {
                rest.trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse::<u64>()
                    .ok()
            })
            .map_or(0, |kib| kib * 1024);
    }
    (count, pss)
}

// ---------------------------------------------------------------- spawn

/// The driver's side of the spawn part: one fresh process per heap size,
/// its table row each.
fn spawn(options: &Options) {
    println!("\n## Spawn at any host size: ours and the floor under a written heap\n");
    println!(
        "{} cycles per client per heap, in {} interleaved rounds, multi-thread runtime\n",
        options.cycles, options.rounds
    );
    println!(
        "| host heap | host `VmRSS` | ours mean µs | floor mean µs | ours p50 µs | floor p50 µs | mean / floor's | p50 / floor's | failed |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    let exe = std::env::current_exe().expect("this bench's path");
    for &heap in &options.heaps {
        let output = Command::new(&exe)
            .env(ROLE, "spawn")
            .env(HEAP, heap.to_string())
            .env(
                SPAWN_CYCLES,
                format!("{},{}", options.cycles, options.rounds),
            )
            .stderr(Stdio::inherit())
            .output()
            .expect("run the spawn process");
        let text = String::from_utf8_lossy(&output.stdout);
        // Its figures are its last line (the recording says what it saw).
        let last = text.lines().last().unwrap_or_default();
        let f: Value = serde_json::from_str(last)
            .unwrap_or_else(|_| panic!("the spawn process ({}) said {text:?}", output.status));
        let n = |key: &str| f[key].as_f64().unwrap_or(f64::NAN);
        println!(
            "| {heap} MiB | {:.0} MiB | {:.0} | {:.0} | {:.0} | {:.0} | {:.2} | {:.2} | {} |",
            n("rss") / 1048576.0,
            n("oursMean"),
            n("floorMean"),
            n("oursP50"),
            n("floorP50"),
            n("oursMean") / n("floorMean"),
            n("oursP50") / n("floorP50"),
            f["failed"],
        );
        assert!(output.status.success(), "the spawn process failed");
    }
}

/// The spawn process: writes its heap, then ours and the floor in
/// interleaved rounds; prints one JSON object of figures on stdout.
fn spawn_main() {
    let heap_mib: usize = std::env::var(HEAP)
        .ok()
        .and_then(|n| n.parse().ok())
        .expect("STDIO_BENCH_HEAP_MIB");
    let (cycles, rounds): (usize, usize) = std::env::var(SPAWN_CYCLES)
        .ok()
        .and_then(|v| {
            let (c, r) = v.split_once(',')?;
            Some((c.parse().ok()?, r.parse().ok()?))
        })
        .expect("STDIO_BENCH_SPAWN_CYCLES");
    // Written, not just reserved: pages a fork would have to map again.
    let heap = vec![1u8; heap_mib << 20];
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    // On a worker, as a host's code runs (see the churn).
    let figures = runtime
        .block_on(runtime.spawn(async move {
            let env = server_env();
            let script = Script::parse(&record().await);
            let command = StdioCommand::new(server()).args(SERVER_ARGS);
            for _ in 0..3 {
                ours_once(&command).await.expect("a warm-up cycle");
                floor_once(&script, &env).await.expect("a warm-up cycle");
            }
            let (mut ours, mut floor) = (Stats::default(), Stats::default());
            let per_round = cycles.div_ceil(rounds.max(1));
            let mut left = cycles;
            for round in 0..rounds {
                let n = per_round.min(left);
                left -= n;
                if round % 2 == 0 {
                    measure(n, &mut ours, || ours_once(&command)).await;
                    measure(n, &mut floor, || floor_once(&script, &env)).await;
                } else {
                    measure(n, &mut floor, || floor_once(&script, &env)).await;
                    measure(n, &mut ours, || ours_once(&command)).await;
                }
            }
            if let Some(error) = ours.first_error.as_ref().or(floor.first_error.as_ref()) {
                eprintln!("the first failure: {error}");
            }
            json!({
                "rss": rss(),
                "oursMean": micros(ours.mean()),
                "floorMean": micros(floor.mean()),
                "oursP50": micros(ours.percentile(50)),
                "floorP50": micros(floor.percentile(50)),
                "failed": ours.failures + floor.failures,
            })
        }))
        .expect("the spawn rounds");
    drop(runtime);
    // The heap is alive until here, through every cycle.
    std::hint::black_box(&heap);
    println!("{figures}");
}
