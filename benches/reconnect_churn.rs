//! Reconnect churn: ours against the bare-hyper floor and the official Rust
//! SDK, measured side by side in one run.
//!
//! One cycle = connect (`initialize`, `notifications/initialized`, discovery
//! of 20 tools over 4 pages, 3 prompts, 3 resources, 1 resource template) +
//! one `tools/call` + close (DELETE), with the GET stream off.
//!
//! 1. **In process** (criterion): the test kit server on its own threads;
//!    every variant of `mcp_scoped_http_testkit::churn` (borrowed pooled client, owned client
//!    per session, attached session, connects failing at each step, a
//!    connect dropped half-way) at concurrency 1, 16 and 256, each beside
//!    its floor: the same HTTP exchanges (recorded from one of our cycles)
//!    sent through the same hyper-util client with no MCP logic.
//! 2. **Separate processes**: the test kit server (`mcp-scoped-http serve`)
//!    and an rmcp server, each churned by us, by the floors and by the rmcp
//!    client (`benches/rmcp-churn`), in alternating rounds, with the client
//!    process's CPU time per cycle. The rmcp parts need the peers built:
//!    `bash benches/compare` builds them and runs this bench. Paths can be
//!    given with `RMCP_CHURN` (the rmcp client) and `RMCP_PEER_SERVER`.
//!
//! `CHURN_QUICK=1` shortens every measurement (for a smoke run).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use criterion::{BenchmarkId, Criterion};
use mcp_scoped_http::{Discovery, HttpClient, HttpClientBuilder, ProtocolVersion};
use mcp_scoped_http_testkit::churn::{
    Churn, Cycle, Figures, Floor, FloorClient, FloorSettings, Recording, drive, server_config,
};
use mcp_scoped_http_testkit::{Eras, ListenMode, ResponseMode, ServerConfig, TestServer};

// Allocations per cycle in every row (the test kit server's left out).
#[global_allocator]
static ALLOCATOR: mcp_scoped_http_testkit::churn::CountingAllocator =
    mcp_scoped_http_testkit::churn::CountingAllocator;
use serde_json::{Value, json};

fn quick() -> bool {
    std::env::var_os("CHURN_QUICK").is_some_and(|v| v != "0")
}

/// A row's key: its order, variant name and concurrency.
type RowKey = (usize, String, usize);

/// What criterion measured, per row (ours, floor), merged over its samples.
#[derive(Default)]
struct Table {
    rows: Mutex<BTreeMap<RowKey, (Figures, Figures)>>,
}

/// A row of the in-process table: one variant at one concurrency.
struct Row {
    order: usize,
    name: String,
    concurrency: usize,
}

impl Table {
    fn add(&self, row: &Row, ours: bool, figures: Figures) {
        let mut rows = self.rows.lock().unwrap();
        let entry = rows
            .entry((row.order, row.name.clone(), row.concurrency))
            .or_default();
        let slot = if ours { &mut entry.0 } else { &mut entry.1 };
        slot.merge(figures);
    }

    fn print(&self) {
        println!("\n## In process: the test kit server on its own threads\n");
        println!(
            "| variant | c | ours cycles/s | ours µs/cycle | floor µs/cycle | time ours/floor | p50 µs | p50 ours/floor | p99 µs | p99/p50 | client cpu µs/cycle ours (floor) | cpu ours/floor | allocations/cycle ours (floor) | failed |"
        );
        println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
        for ((_, name, concurrency), (ours, floor)) in self.rows.lock().unwrap().iter() {
            println!(
                "| {name} | {concurrency} | {:.0} | {:.0} | {:.0} | {:.2} | {} | {:.2} | {} | {:.1} | {} ({}) | {} | {} ({}) | {} |",
                ours.cycles_per_second(),
                micros(ours.per_cycle()),
                micros(floor.per_cycle()),
                ratio(ours.per_cycle(), floor.per_cycle()),
                micros(ours.p50()) as u64,
                ratio(ours.p50(), floor.p50()),
                micros(ours.p99()) as u64,
                ratio(ours.p99(), ours.p50()),
                cpu(ours),
                cpu(floor),
                ours.cpu_per_cycle()
                    .zip(floor.cpu_per_cycle())
                    .map_or("?".to_owned(), |(a, b)| format!("{:.2}", ratio(a, b))),
                allocations(ours),
                allocations(floor),
                ours.failures + floor.failures,
            );
        }
    }
}

fn micros(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e6
}

fn ratio(a: Duration, b: Duration) -> f64 {
    a.as_secs_f64() / b.as_secs_f64().max(f64::MIN_POSITIVE)
}

fn cpu(figures: &Figures) -> String {
    figures
        .cpu_per_cycle()
        .map_or("?".to_owned(), |cpu| format!("{:.0}", micros(cpu)))
}

fn allocations(figures: &Figures) -> String {
    figures
        .allocations_per_cycle()
        .map_or("?".to_owned(), |n| format!("{n:.0}"))
}

/// What a measurement runs: our cycle, or the floor's replay of it.
#[derive(Clone)]
enum Runner {
    Ours(Arc<Churn>),
    Floor(Arc<Floor>),
}

impl Runner {
    async fn once(&self) -> mcp_scoped_http_testkit::churn::Result<()> {
        match self {
            Runner::Ours(churn) => churn.run_once().await,
            Runner::Floor(floor) => floor.cycle().await,
        }
    }
}

/// Runs `cycles` of `runner` over `concurrency` workers.
async fn run(runner: &Runner, label: &str, cycles: usize, concurrency: usize) -> Figures {
    let runner = runner.clone();
    let (figures, error) = drive(label, cycles, concurrency, move || {
        let runner = runner.clone();
        async move { runner.once().await }
    })
    .await;
    if let Some(error) = error {
        eprintln!(
            "{label}: {} failed cycles; the first: {error}",
            figures.failures
        );
    }
    figures
}

/// A churn and its floor against one server.
struct Pair {
    churn: Arc<Churn>,
    floor: Arc<Floor>,
}

/// `churn` with its revision pinned, when `pin` says so (its bearer kept).
fn pinned(churn: Churn, pin: Option<ProtocolVersion>) -> Churn {
    match pin {
        Some(version) => churn
            .configure(move |connector| connector.bearer("churn-token").protocol_version(version)),
        None => churn,
    }
}

/// A hyper-util client as a caller builds one (no delay), lent.
fn callers_client(quick_ack: bool) -> HttpClient {
    use hyper_util::client::legacy::Client;
    use hyper_util::client::legacy::connect::HttpConnector;
    use hyper_util::rt::TokioExecutor;
    use mcp_scoped_http::client::{QuickAckConnector, RequestBody};

    let mut http = HttpConnector::new();
    http.set_nodelay(true);
    let builder = Client::builder(TokioExecutor::new());
    if quick_ack {
        HttpClient::borrowed(builder.build::<_, RequestBody>(QuickAckConnector::new(http)))
    } else {
        HttpClient::borrowed(builder.build::<_, RequestBody>(http))
    }
}

async fn pair(
    url: &str,
    cycle: Cycle,
    client: Option<HttpClient>,
    settings: &FloorSettings,
    call: Option<(String, Value)>,
    pin: Option<ProtocolVersion>,
) -> Pair {
    let floor_client = if client.is_some() {
        FloorClient::Shared
    } else {
        FloorClient::PerCycle
    };
    let mut churn = pinned(
        Churn::new(url, cycle, client)
            .await
            .expect("the churn starts")
            .with_call(call),
        pin,
    );
    let recording = Recording::of(&mut churn, settings)
        .await
        .expect("one cycle is recorded");
    let floor = Floor::new(recording, settings.clone(), floor_client);
    Pair {
        churn: Arc::new(churn),
        floor: Arc::new(floor),
    }
}

/// The concurrencies every in-process variant runs at.
const CONCURRENCY: [usize; 3] = [1, 16, 256];

fn in_process(criterion: &mut Criterion, runtime: &tokio::runtime::Runtime, table: &Table) {
    let settings = FloorSettings::new();
    let shared = HttpClientBuilder::new().build().expect("the shared client");
    let mut order = 0;
    let mut servers = Vec::new();
    let cases = [
        (Cycle::Complete, true),
        (Cycle::Complete, false),
        (Cycle::Attached, true),
        (Cycle::InitializeFails, true),
        (Cycle::InitializedFails, true),
        (Cycle::DiscoveryFails, true),
        (Cycle::Dropped, true),
    ];
    for (cycle, borrowed) in cases {
        let server = TestServer::start(server_config().with_faults(cycle.faults()));
        let client = borrowed.then(|| shared.clone());
        let call = Some(("tool-000".to_owned(), json!({"text": "churn"})));
        let pair = runtime.block_on(pair(&server.url(), cycle, client, &settings, call, None));
        let kind = if borrowed { "borrowed" } else { "owned" };
        let group_name = format!("{}/{kind}", cycle.name());
        let mut group = criterion.benchmark_group(&group_name);
        for concurrency in CONCURRENCY {
            order += 1;
            let row = Row {
                order,
                name: group_name.clone(),
                concurrency,
            };
            group.bench_function(BenchmarkId::new("ours", concurrency), |b| {
                b.iter_custom(|iters| {
                    let figures = runtime.block_on(run(
                        &Runner::Ours(pair.churn.clone()),
                        "ours",
                        iters as usize,
                        concurrency,
                    ));
                    let wall = figures.wall;
                    table.add(&row, true, figures);
                    wall
                });
            });
            group.bench_function(BenchmarkId::new("floor", concurrency), |b| {
                b.iter_custom(|iters| {
                    let figures = runtime.block_on(run(
                        &Runner::Floor(pair.floor.clone()),
                        "floor",
                        iters as usize,
                        concurrency,
                    ));
                    let wall = figures.wall;
                    table.add(&row, false, figures);
                    wall
                });
            });
        }
        group.finish();
        if let Some(churn) = Arc::into_inner(pair.churn) {
            runtime.block_on(churn.finish());
        }
        runtime.block_on(mcp_scoped_http::shutdown());
        servers.push(server);
    }
}

/// A server in another process, stopped on drop.
struct Process {
    child: Child,
    url: String,
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `command`, reads stdout until `url_of` finds the URL in a line
/// (bounded: 200 lines), then drains the rest on a thread so the server
/// never blocks on a full pipe.
fn start(mut command: Command, url_of: impl Fn(&str) -> Option<String>) -> Option<Process> {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let mut lines = BufReader::new(child.stdout.take()?).lines();
    let mut url = None;
    for line in lines.by_ref().take(200) {
        let Ok(line) = line else { break };
        if let Some(found) = url_of(&line) {
            url = Some(found);
            break;
        }
    }
    std::thread::spawn(move || for _ in lines {});
    match url {
        Some(url) => Some(Process { child, url }),
        None => {
            let _ = child.kill();
            let _ = child.wait();
            None
        }
    }
}

/// The test kit's server (the churn's catalog, answers as SSE streams) in
/// a process of its own: this bench's binary again ([`serve_http`]).
fn serve_process(revision: Option<&str>) -> Option<Process> {
    let mut command = Command::new(std::env::current_exe().ok()?);
    command.arg(SERVE_HTTP);
    if let Some(revision) = revision {
        command.arg(revision);
    }
    start(command, |line| {
        line.strip_prefix(SERVING).map(str::to_owned)
    })
}

/// The argument that makes this binary the server, and what it prints
/// before its URL.
const SERVE_HTTP: &str = "--serve-http";
const SERVING: &str = "serving at ";

/// The server's body: the churn's catalog (the test kit's `serve` with
/// `--tools 20 --page-size 5 --prompts 3 --resources 3 --sse`), of the
/// eras `revision` names, until the process is killed.
fn serve_http(revision: Option<String>) {
    let eras: Eras = revision
        .as_deref()
        .unwrap_or("2025-11-25")
        .parse()
        .expect("eras");
    let server = TestServer::start(
        ServerConfig::default()
            .with_tools(20)
            .with_page_size(5)
            .with_prompts(3)
            .with_resources(3)
            .with_response_mode(ResponseMode::Sse)
            .with_listen(ListenMode::Open)
            .with_eras(eras)
            .with_record_requests(false),
    );
    println!("{SERVING}{}", server.url());
    // Until killed: the bench stops it when its rounds are done.
    loop {
        std::thread::park();
    }
}

fn repo_path(relative: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(relative)
}

fn found(variable: &str, default: &str) -> Option<PathBuf> {
    let path = std::env::var_os(variable)
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_path(default));
    path.is_file().then_some(path)
}

fn rmcp_server() -> Option<Process> {
    let path = found("RMCP_PEER_SERVER", ".peers/rmcp-target/release/rmcp-peer")?;
    let mut command = Command::new(path);
    command.args(["--port", "0"]);
    start(command, |line| {
        let port = line.strip_prefix("LISTENING ")?;
        Some(format!("http://127.0.0.1:{}/mcp", port.trim()))
    })
}

/// The Python SDK 2.x peer (`.ci/install-peers` installs it), stateless:
/// it serves 2026-07-28 on `/mcp`.
fn python2_server() -> Option<Process> {
    let python = found("PYTHON2_PEER", ".peers/venv2/bin/python")?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .ok()?
        .port();
    let mut command = Command::new(python);
    command
        .arg(repo_path("tests/peers/python2_server.py"))
        .args(["--port", &port.to_string(), "--mode", "stateless"]);
    start(command, move |line| {
        line.starts_with("LISTENING")
            .then(|| format!("http://127.0.0.1:{port}/mcp"))
    })
}

/// Runs the rmcp client bench once; its JSON report as figures.
fn rmcp_client(
    url: &str,
    mode: &str,
    listen: bool,
    cycles: usize,
    concurrency: usize,
    call: &(String, Value),
) -> Option<Value> {
    let path = found("RMCP_CHURN", "benches/rmcp-churn/target/release/rmcp-churn")?;
    let mut command = Command::new(path);
    if !listen {
        command.arg("--no-listen");
    }
    let output = command
        .args([
            url,
            "--cycles",
            &cycles.to_string(),
            "--concurrency",
            &concurrency.to_string(),
            "--client",
            mode,
            "--warmup",
            "10",
            "--call",
            &call.0,
            "--args",
            &call.1.to_string(),
            "--json",
        ])
        .stderr(Stdio::inherit())
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&output.stdout);
    serde_json::from_str(text.lines().last()?.trim()).ok()
}

/// One row of the separate-process table, merged over rounds.
#[derive(Default)]
struct Merged {
    cycles: f64,
    failures: f64,
    seconds: f64,
    cpu_micros: f64,
    cpu_known: bool,
    p50: Vec<f64>,
    p99: Vec<f64>,
}

impl Merged {
    fn add(&mut self, report: &Value) {
        let cycles = report["cycles"].as_f64().unwrap_or(0.0);
        self.cycles += cycles;
        self.failures += report["failures"].as_f64().unwrap_or(0.0);
        self.seconds += report["seconds"].as_f64().unwrap_or(0.0);
        if let Some(cpu) = report["cpuMicrosPerCycle"].as_f64() {
            self.cpu_micros += cpu * cycles;
            self.cpu_known = true;
        }
        self.p50.push(report["p50Micros"].as_f64().unwrap_or(0.0));
        self.p99.push(report["p99Micros"].as_f64().unwrap_or(0.0));
    }

    fn per_cycle(&self) -> f64 {
        self.seconds * 1e6 / self.cycles.max(1.0)
    }

    fn cpu_per_cycle(&self) -> Option<f64> {
        self.cpu_known
            .then(|| self.cpu_micros / self.cycles.max(1.0))
    }

    fn median(values: &[f64]) -> f64 {
        let mut sorted = values.to_vec();
        sorted.sort_by(f64::total_cmp);
        sorted.get(sorted.len() / 2).copied().unwrap_or(0.0)
    }
}

/// Cycles of the probe that sizes each contender's rounds (not counted).
const PROBE_CYCLES: usize = 10;

/// What one separate-process comparison runs, per round.
struct Contender {
    name: String,
    concurrency: usize,
    cycles: usize,
    run: Box<dyn Fn(usize) -> Option<Value>>,
}

const RMCP_SERVER_INSTALL: &str = "`bash benches/compare` builds it (or set RMCP_PEER_SERVER)";

/// A server in another process, and how our cycle runs against it.
struct External {
    name: &'static str,
    process: Option<Process>,
    /// How to get the server when it is not found.
    install: &'static str,
    call: (String, Value),
    /// The revision our cycle pins (none: detected, then remembered).
    pin: Option<ProtocolVersion>,
    /// Whether rmcp's client runs too (it speaks only the 2025 handshake).
    rmcp: bool,
}

fn external(runtime: &tokio::runtime::Runtime) {
    let quick = quick();
    let rounds = if quick { 1 } else { 3 };
    let test_kit_call = ("tool-000".to_owned(), json!({"text": "churn"}));
    let echo = ("echo".to_owned(), json!({"text": "churn"}));
    let servers = vec![
        External {
            name: "test kit server, 2025-11-25 (the test kit in a process of its own)",
            process: serve_process(None),
            install: "the test kit, in this bench's binary",
            call: test_kit_call.clone(),
            pin: None,
            rmcp: true,
        },
        External {
            name: "test kit server, 2026-07-28 (the test kit in a process of its own)",
            process: serve_process(Some("2026-07-28")),
            install: "the test kit, in this bench's binary",
            call: test_kit_call,
            pin: None,
            rmcp: false,
        },
        External {
            name: "rmcp 3.11 server (tests/peers/rmcp-server), pinned to 2025-11-25 as rmcp's client speaks",
            process: rmcp_server(),
            install: RMCP_SERVER_INSTALL,
            call: echo.clone(),
            pin: Some(ProtocolVersion::V2025_11_25),
            rmcp: true,
        },
        External {
            name: "rmcp 3.11 server (tests/peers/rmcp-server), 2026-07-28 (detected)",
            process: rmcp_server(),
            install: RMCP_SERVER_INSTALL,
            call: echo.clone(),
            pin: None,
            rmcp: false,
        },
        External {
            name: "Python SDK 2.3 server (tests/peers/python2_server.py, stateless), 2026-07-28 (detected)",
            process: python2_server(),
            install: "`bash .ci/install-peers` installs it (or set PYTHON2_PEER)",
            call: echo,
            pin: None,
            rmcp: false,
        },
    ];
    for External {
        name: server_name,
        process,
        install,
        call,
        pin,
        rmcp,
    } in servers
    {
        let Some(process) = process else {
            println!("\n## {server_name}: not found; {install}");
            continue;
        };
        let url = process.url.clone();
        let contenders = contenders(runtime, &url, &call, quick, pin, rmcp);
        let mut merged: Vec<Merged> = contenders.iter().map(|_| Merged::default()).collect();
        // Sized so that one round of each takes about the same time: a
        // client stalling 40 ms per answer runs fewer cycles, not minutes.
        let budget = if quick { 0.3 } else { 1.5 };
        let sizes: Vec<usize> = contenders
            .iter()
            .map(|contender| {
                let probe = (contender.run)(PROBE_CYCLES);
                let seconds_per_cycle = probe
                    .map(|report| {
                        report["seconds"].as_f64().unwrap_or(0.0)
                            / report["cycles"].as_f64().unwrap_or(1.0).max(1.0)
                    })
                    .unwrap_or(0.0);
                if seconds_per_cycle > 0.0 {
                    ((budget / seconds_per_cycle) as usize).clamp(PROBE_CYCLES, contender.cycles)
                } else {
                    contender.cycles
                }
            })
            .collect();
        for _ in 0..rounds {
            for ((contender, merged), &cycles) in
                contenders.iter().zip(merged.iter_mut()).zip(&sizes)
            {
                if let Some(report) = (contender.run)(cycles) {
                    merged.add(&report);
                }
            }
        }
        println!("\n## Separate processes: {server_name}, {rounds} alternating rounds\n");
        println!(
            "| client | c | cycles/s | µs/cycle | p50 µs | p99 µs | p99/p50 | client cpu µs/cycle | failed |"
        );
        println!("|---|---|---|---|---|---|---|---|---|");
        for (contender, merged) in contenders.iter().zip(&merged) {
            if merged.cycles == 0.0 {
                println!(
                    "| {} | {} | not run | | | | | | |",
                    contender.name, contender.concurrency
                );
                continue;
            }
            let (p50, p99) = (Merged::median(&merged.p50), Merged::median(&merged.p99));
            println!(
                "| {} | {} | {:.0} | {:.0} | {:.0} | {:.0} | {:.1} | {} | {} |",
                contender.name,
                contender.concurrency,
                1e6 / merged.per_cycle(),
                merged.per_cycle(),
                p50,
                p99,
                p99 / p50.max(1.0),
                merged
                    .cpu_per_cycle()
                    .map_or("?".to_owned(), |cpu| format!("{cpu:.0}")),
                merged.failures,
            );
        }
        summary(&contenders, &merged);
        drop(process);
    }
}

/// The headline ratios of a separate-process table.
fn summary(contenders: &[Contender], merged: &[Merged]) {
    let find = |name: &str, concurrency: usize| {
        contenders
            .iter()
            .zip(merged)
            .find(|(c, m)| c.name == name && c.concurrency == concurrency && m.cycles > 0.0)
            .map(|(_, m)| m)
    };
    let best_floor = [
        "floor pooled",
        "floor pooled, no quickack",
        "floor fresh connections",
    ]
    .iter()
    .filter_map(|name| find(name, 1))
    .map(Merged::per_cycle)
    .fold(f64::INFINITY, f64::min);
    if let Some(ours) = find("ours borrowed", 1) {
        println!(
            "\nours borrowed c=1 over the best floor: {:.2}x per cycle",
            ours.per_cycle() / best_floor
        );
        if let Some(floor) = find("floor pooled", 1) {
            println!(
                "ours borrowed c=1 over the floor with the same client settings: {:.2}x",
                ours.per_cycle() / floor.per_cycle()
            );
        }
        if let Some(rmcp) = find("rmcp borrowed", 1) {
            println!(
                "ours borrowed c=1 vs rmcp borrowed c=1: {:.2}x the cycles/s, {} the client CPU per cycle",
                rmcp.per_cycle() / ours.per_cycle(),
                match (ours.cpu_per_cycle(), rmcp.cpu_per_cycle()) {
                    (Some(a), Some(b)) => format!("{:.2}x", a / b),
                    _ => "?".to_owned(),
                }
            );
        }
    }
}

fn contenders(
    runtime: &tokio::runtime::Runtime,
    url: &str,
    call: &(String, Value),
    quick: bool,
    pin: Option<ProtocolVersion>,
    with_rmcp: bool,
) -> Vec<Contender> {
    // The most cycles one round of a contender runs.
    let cycles = if quick { 300 } else { 3000 };
    let settings = FloorSettings::new();
    let plain = FloorSettings::new().tcp_quickack(false);
    let fresh = FloorSettings::new().pool_max_idle_per_host(0);
    let shared = HttpClientBuilder::new().build().expect("the shared client");
    let handle = runtime.handle().clone();
    let call_some = Some(call.clone());
    let borrowed = runtime.block_on(pair(
        url,
        Cycle::Complete,
        Some(shared),
        &settings,
        call_some.clone(),
        pin,
    ));
    let owned = runtime.block_on(pair(
        url,
        Cycle::Complete,
        None,
        &settings,
        call_some.clone(),
        pin,
    ));
    let recording = runtime
        .block_on(async {
            let mut churn = pinned(
                Churn::new(url, Cycle::Complete, None)
                    .await?
                    .with_call(call_some.clone()),
                pin,
            );
            Recording::of(&mut churn, &settings).await
        })
        .expect("one cycle is recorded");
    let floor_plain = Arc::new(Floor::new(recording.clone(), plain, FloorClient::Shared));
    let floor_fresh = Arc::new(Floor::new(recording, fresh, FloorClient::Shared));

    let mut list = Vec::new();
    let measured = |name: &str, runner: Runner, concurrency: usize| {
        let handle = handle.clone();
        Contender {
            name: name.to_owned(),
            concurrency,
            cycles,
            run: Box::new(move |cycles| {
                let figures = handle.block_on(run(&runner, "", cycles, concurrency));
                Some(figures.to_json())
            }),
        }
    };
    let (ours_borrowed, ours_owned) = (Runner::Ours(borrowed.churn), Runner::Ours(owned.churn));
    list.push(measured("ours borrowed", ours_borrowed.clone(), 1));
    list.push(measured("ours borrowed", ours_borrowed, 16));
    list.push(measured("ours owned", ours_owned, 1));
    let pooled = Runner::Floor(borrowed.floor);
    list.push(measured("floor pooled", pooled.clone(), 1));
    list.push(measured("floor pooled", pooled, 16));
    list.push(measured(
        "floor pooled, no quickack",
        Runner::Floor(floor_plain),
        1,
    ));
    list.push(measured(
        "floor fresh connections",
        Runner::Floor(floor_fresh),
        1,
    ));
    list.push(measured(
        "floor client per cycle",
        Runner::Floor(owned.floor),
        1,
    ));
    // The kinds of list at once (`Discovery::concurrent`).
    let sequential = runtime.block_on(async {
        Churn::new(
            url,
            Cycle::Complete,
            Some(HttpClientBuilder::new().build().expect("a client")),
        )
        .await
        .expect("the churn starts")
        .with_call(call_some.clone())
        .configure(move |connector| {
            let connector = connector
                .bearer("churn-token")
                .discovery(Discovery::default().concurrent(false));
            match pin {
                Some(version) => connector.protocol_version(version),
                None => connector,
            }
        })
    });
    list.push(measured(
        "ours borrowed, sequential discovery",
        Runner::Ours(Arc::new(sequential)),
        1,
    ));
    // A caller's own hyper-util client, lent: plain (it stalls against a
    // server that leaves Nagle on) and on the public QuickAckConnector.
    for (name, quick_ack) in [
        ("ours, caller's hyper client", false),
        ("ours, caller's hyper client on QuickAckConnector", true),
    ] {
        let churn = runtime.block_on(async {
            Churn::new(url, Cycle::Complete, Some(callers_client(quick_ack)))
                .await
                .expect("the churn starts")
                .with_call(call_some.clone())
        });
        list.push(measured(
            name,
            Runner::Ours(Arc::new(pinned(churn, pin))),
            1,
        ));
    }
    if !with_rmcp {
        return list;
    }
    // `--no-listen`: rmcp's client always opens the GET stream; without it
    // both clients send exactly the same exchanges.
    for (mode, listen, concurrency) in [
        ("borrowed", false, 1),
        ("borrowed", false, 16),
        ("owned", false, 1),
        ("borrowed", true, 1),
    ] {
        let (url, call) = (url.to_owned(), call.clone());
        let name = if listen {
            format!("rmcp {mode}, GET stream on")
        } else {
            format!("rmcp {mode}")
        };
        list.push(Contender {
            name,
            concurrency,
            cycles,
            run: Box::new(move |cycles| {
                rmcp_client(&url, mode, listen, cycles, concurrency, &call)
            }),
        });
    }
    list
}

fn main() {
    let mut args = std::env::args().skip(1);
    if args.next().as_deref() == Some(SERVE_HTTP) {
        return serve_http(args.next());
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let quick = quick();
    let mut criterion = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(if quick { 100 } else { 500 }))
        .measurement_time(Duration::from_secs(if quick { 1 } else { 3 }))
        .configure_from_args();
    let table = Table::default();
    in_process(&mut criterion, &runtime, &table);
    criterion.final_summary();
    table.print();
    external(&runtime);
    // Nothing may be left: the churn's own leak check.
    runtime.block_on(mcp_scoped_http::shutdown());
    let ledger = mcp_scoped_http::ledger();
    println!("\nledger at the end: {ledger:?}");
}
