//! A fleet at scale: `--servers N` (default 1000) named servers whose
//! endpoints are test kit servers in processes of their own, one table.
//!
//! 1. **Memory per ready slot**, with the listener off and on: N plain
//!    `Session`s, then a fleet of N slots, each through one lent client
//!    against a 2025-11-25 server; both one at a time (a session connected,
//!    a slot added by `apply` and ready, before the next) and all at once
//!    (N connects in flight together, as a fleet starts). Each figure is
//!    measured in a fresh process (this binary run again), as its `VmRSS`
//!    once all are ready minus before, over N, the median of 3 (1 with
//!    `--quick`): a process that already freed N sessions would reuse that
//!    memory and undercount the next. All at once holds more (the
//!    allocator keeps what N connects in flight used), for both alike.
//! 2. **Start**: a fleet of N servers spread over four server processes,
//!    one per era (2026-07-28, 2025-11-25, both, 2024-11-05; the era
//!    detected, the fleet's owned client shared), from `apply` to all
//!    ready.
//! 3. **Reconcile**: the same N-entry set with one entry changed; the
//!    report's counts and the handshakes (`initialize`, `server/discover`)
//!    the servers saw meanwhile.
//! 4. **Shutdown** of those N ready slots: its time, and every session
//!    ended (DELETE for Streamable HTTP, the stream closed for HTTP+SSE).
//! 5. **Restart storm**: N slots on one 2025-11-25 server process (its
//!    sessions die with it), which is killed; once every slot has noticed,
//!    the server is started again on the same port after a downtime; the
//!    time until all are ready again, and the most `initialize`s the new
//!    server saw in one 100 ms window. Then that fleet's shutdown.
//!
//! `--quick` shortens the storm's downtime and backoff cap (for a smoke
//! run, e.g. `--servers 50 --quick`).
//!
//! The server processes are this binary, run with `FLEET_BENCH_ROLE=server`
//! (a `TestServer`, as `mcp-scoped-http serve` runs, that also answers
//! `stats` on its standard input and counts `initialize` per 100 ms); each
//! is killed when the bench ends, panics included, and ends by itself when
//! its standard input closes.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use mcp_scoped_http::Backoff;

use mcp_scoped_http::fleet::{Fleet, ServerSpec};
use mcp_scoped_http::{Connector, HttpClient};
use mcp_scoped_http_testkit::{Eras, ListenMode, ServerConfig, TestServer};
use serde_json::{Value, json};

/// Which part of the bench this process is: unset for the driver.
const ROLE: &str = "FLEET_BENCH_ROLE";
const ERAS: &str = "FLEET_BENCH_ERAS";
const PORT: &str = "FLEET_BENCH_PORT";
const URL: &str = "FLEET_BENCH_URL";
const KIND: &str = "FLEET_BENCH_KIND";
const LISTEN: &str = "FLEET_BENCH_LISTEN";
const COUNT: &str = "FLEET_BENCH_COUNT";
/// Set: one at a time (a session connected, or a slot added and ready,
/// before the next), rather than all at once.
const ONE_AT_A_TIME: &str = "FLEET_BENCH_ONE_AT_A_TIME";

/// The window the storm's `initialize` rate is counted over.
const WINDOW: Duration = Duration::from_millis(100);
/// The bound on every wait for readiness.
const READY_WITHIN: Duration = Duration::from_secs(120);

fn main() {
    match std::env::var(ROLE).as_deref() {
        Ok("server") => server_main(),
        Ok("memory") => memory_main(),
        _ => driver_main(),
    }
}

// ---------------------------------------------------------------- options

struct Options {
    servers: usize,
    quick: bool,
}

impl Options {
    /// `--servers N` and `--quick`; what cargo adds (`--bench`) is ignored.
    fn parse() -> Options {
        let mut options = Options {
            servers: 1000,
            quick: false,
        };
        let mut args = std::env::args().skip(1);
        while let Some(arg) = args.next() {
            match arg.as_str() {
                "--quick" => options.quick = true,
                "--servers" => {
                    options.servers = args
                        .next()
                        .and_then(|n| n.parse().ok())
                        .filter(|n| *n >= 4)
                        .expect("--servers takes a number, at least 4");
                }
                _ => {}
            }
        }
        options
    }
}

// ---------------------------------------------------------------- helpers

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

/// The soft limit on open descriptors, from `/proc/self/limits`.
fn open_files_limit() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line.split_whitespace().nth(3)?.parse().ok()
}

fn ms(duration: Duration) -> String {
    format!("{:.0} ms", duration.as_secs_f64() * 1e3)
}

fn kib(bytes: f64) -> String {
    format!("{:.1} KiB", bytes / 1024.0)
}

fn era_of(name: &str) -> Eras {
    Eras::ALL
        .into_iter()
        .find(|eras| eras.as_str() == name)
        .unwrap_or_else(|| panic!("no era `{name}`"))
}

/// A free port on 127.0.0.1, for a server that restarts on the same one.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

// ---------------------------------------------------------------- server process

/// A test kit server in a process of its own; killed when dropped.
struct ServerProcess {
    eras: &'static str,
    url: String,
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

/// What a server process counted.
#[derive(Debug, Default, Clone)]
struct Counts {
    sessions_created: u64,
    deletes: u64,
    live_sessions: u64,
    sse_closed_by_client: u64,
    /// `initialize` and `server/discover` requests.
    handshakes: u64,
    /// The most sessions minted in one [`WINDOW`], since the start.
    peak_window: u64,
    /// Sessions minted per [`WINDOW`], from the first window with one.
    windows: Vec<u64>,
}

impl ServerProcess {
    /// Starts a server of `eras` on `port` (0: any) and waits for its URL.
    fn spawn(eras: &'static str, port: u16) -> ServerProcess {
        let exe = std::env::current_exe().expect("this bench's path");
        let mut child = Command::new(exe)
            .env(ROLE, "server")
            .env(ERAS, eras)
            .env(PORT, port.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn a server process");
        let stdin = child.stdin.take().expect("piped");
        let mut stdout = BufReader::new(child.stdout.take().expect("piped"));
        let mut line = String::new();
        let read = stdout.read_line(&mut line);
        let url = match (read, line.strip_prefix("URL ")) {
            (Ok(_), Some(url)) => url.trim().to_owned(),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("the {eras} server process said {line:?}");
            }
        };
        ServerProcess {
            eras,
            url,
            child,
            stdin,
            stdout,
        }
    }

    fn counts(&mut self) -> Counts {
        writeln!(self.stdin, "stats").expect("ask the server");
        self.stdin.flush().expect("ask the server");
        let mut line = String::new();
        self.stdout
            .read_line(&mut line)
            .expect("the server's stats");
        let value: Value = serde_json::from_str(&line).expect("stats are JSON");
        let get = |key: &str| value[key].as_u64().unwrap_or(0);
        Counts {
            sessions_created: get("sessions_created"),
            deletes: get("deletes"),
            live_sessions: get("live_sessions"),
            sse_closed_by_client: get("sse_closed_by_client"),
            handshakes: get("handshakes"),
            peak_window: get("peak_window"),
            windows: value["windows"]
                .as_array()
                .map(|w| w.iter().filter_map(Value::as_u64).collect())
                .unwrap_or_default(),
        }
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The server process: a `TestServer` (as `serve` runs it), forwarded
/// from a fixed port when one is given, answering `stats` on stdin.
fn server_main() {
    let eras = era_of(&std::env::var(ERAS).expect("FLEET_BENCH_ERAS"));
    let port: u16 = std::env::var(PORT)
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    let config = ServerConfig::default()
        .with_listen(ListenMode::Open)
        .with_eras(eras);
    let server = Arc::new(TestServer::start(config));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a runtime");
    let url = if port == 0 {
        server.url()
    } else {
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind(("127.0.0.1", port)))
            .unwrap_or_else(|error| panic!("cannot listen on 127.0.0.1:{port}: {error}"));
        runtime.spawn(forward(listener, server.addr()));
        format!("http://127.0.0.1:{port}/mcp")
    };
    let peak = Arc::new(AtomicUsize::new(0));
    // Sessions minted per window, from the first one on.
    let windows = Arc::new(std::sync::Mutex::new(Vec::<usize>::new()));
    {
        let (server, peak, windows) = (server.clone(), peak.clone(), windows.clone());
        std::thread::spawn(move || {
            let mut last = 0;
            let mut next = Instant::now() + WINDOW;
            loop {
                std::thread::sleep(next.saturating_duration_since(Instant::now()));
                next += WINDOW;
                let now = server.stats().sessions_created;
                peak.fetch_max(now - last, Ordering::Relaxed);
                let mut windows = windows.lock().unwrap();
                if now > 0 {
                    windows.push(now - last);
                }
                last = now;
            }
        });
    }
    let mut out = std::io::stdout().lock();
    writeln!(out, "URL {url}").and_then(|()| out.flush()).ok();
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        if line.trim() != "stats" {
            continue;
        }
        let stats = server.stats();
        let handshakes = server
            .requests()
            .iter()
            .filter(|r| {
                matches!(
                    r.rpc_method.as_deref(),
                    Some("initialize" | "server/discover")
                )
            })
            .count();
        let answer = json!({
            "sessions_created": stats.sessions_created,
            "deletes": stats.deletes,
            "live_sessions": stats.live_sessions,
            "sse_closed_by_client": stats.sse_streams_closed_by_client,
            "handshakes": handshakes,
            "peak_window": peak.load(Ordering::Relaxed),
            "windows": *windows.lock().unwrap(),
        });
        if writeln!(out, "{answer}")
            .and_then(|()| out.flush())
            .is_err()
        {
            break;
        }
    }
    // Standard input closed: the driver is gone.
    std::process::exit(0);
}

/// Forwards every connection on `listener` to the test server (which binds
/// an ephemeral port of its own), as `serve --port` does.
async fn forward(listener: tokio::net::TcpListener, to: std::net::SocketAddr) {
    loop {
        let Ok((mut inbound, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let _ = inbound.set_nodelay(true);
        tokio::spawn(async move {
            if let Ok(mut outbound) = tokio::net::TcpStream::connect(to).await {
                let _ = outbound.set_nodelay(true);
                let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
            }
        });
    }
}

// ---------------------------------------------------------------- memory process

/// One memory figure in a fresh process: N plain sessions or a fleet of N
/// slots, through one lent client; prints `before after` (bytes of VmRSS).
fn memory_main() {
    let url = std::env::var(URL).expect("FLEET_BENCH_URL");
    let fleet = std::env::var(KIND).is_ok_and(|k| k == "fleet");
    let listen = std::env::var(LISTEN).is_ok_and(|l| l == "1");
    let one_at_a_time = std::env::var(ONE_AT_A_TIME).is_ok_and(|v| v == "1");
    let n: usize = std::env::var(COUNT)
        .ok()
        .and_then(|n| n.parse().ok())
        .expect("FLEET_BENCH_COUNT");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async move {
        let client = HttpClient::owned().expect("a client");
        let connector = move || Connector::new(&url).client(client.clone()).listen(listen);
        // One session first: the client, its pool and the era verdict
        // exist before the baseline.
        let warm = connector().connect().await.expect("the server answers");
        warm.close().await;
        let before = rss();
        if fleet {
            let fleet = Fleet::new();
            let spec = ServerSpec::from_connector(connector()).required(true);
            if one_at_a_time {
                // The set grows by one per apply: one slot starts, and is
                // ready before the next.
                let mut servers = BTreeMap::new();
                for i in 0..n {
                    servers.insert(format!("s{i:05}"), spec.clone());
                    fleet.apply(servers.clone()).await.expect("apply");
                    fleet.ready(READY_WITHIN).await.expect("ready");
                }
            } else {
                let servers = (0..n).map(|i| (format!("s{i:05}"), spec.clone()));
                fleet.apply(servers).await.expect("apply");
                fleet.ready(READY_WITHIN).await.expect("all ready");
            }
            settle().await;
            println!("{before} {}", rss());
            fleet.shutdown().await;
        } else {
            let mut sessions = Vec::with_capacity(n);
            if one_at_a_time {
                for _ in 0..n {
                    sessions.push(connector().connect().await.expect("connects"));
                }
            } else {
                let mut connects = tokio::task::JoinSet::new();
                for _ in 0..n {
                    let connector = connector();
                    connects.spawn(async move { connector.connect().await });
                }
                while let Some(joined) = connects.join_next().await {
                    sessions.push(joined.expect("joined").expect("connects"));
                }
            }
            settle().await;
            println!("{before} {}", rss());
            let mut closes = tokio::task::JoinSet::new();
            for session in sessions {
                closes.spawn(async move { session.close().await });
            }
            while closes.join_next().await.is_some() {}
        }
    });
    drop(runtime);
}

/// A pause after all are ready, the same for every figure: the proving
/// pings and listen requests sent at ready come back.
async fn settle() {
    tokio::time::sleep(Duration::from_millis(500)).await;
}

/// Bytes per slot measured in a fresh process (see [`memory_main`]).
fn memory_per_slot(url: &str, fleet: bool, listen: bool, one_at_a_time: bool, n: usize) -> f64 {
    let exe = std::env::current_exe().expect("this bench's path");
    let mut command = Command::new(exe);
    if one_at_a_time {
        command.env(ONE_AT_A_TIME, "1");
    }
    let output = command
        .env(ROLE, "memory")
        .env(URL, url)
        .env(KIND, if fleet { "fleet" } else { "plain" })
        .env(LISTEN, if listen { "1" } else { "0" })
        .env(COUNT, n.to_string())
        .stderr(Stdio::inherit())
        .output()
        .expect("run the memory process");
    assert!(output.status.success(), "the memory process failed");
    let text = String::from_utf8_lossy(&output.stdout);
    let figures: Vec<f64> = text
        .split_whitespace()
        .filter_map(|n| n.parse().ok())
        .collect();
    let [before, after] = figures[..] else {
        panic!("the memory process said {text:?}");
    };
    (after - before) / n as f64
}

// ---------------------------------------------------------------- driver

/// The driver's table: (measure, value) rows in order.
#[derive(Default)]
struct Table(Vec<(String, String)>);

impl Table {
    fn row(&mut self, measure: impl Into<String>, value: impl Into<String>) {
        let (measure, value) = (measure.into(), value.into());
        eprintln!("{measure}: {value}");
        self.0.push((measure, value));
    }
}

fn driver_main() {
    let options = Options::parse();
    let n = options.servers;
    let limit = open_files_limit();
    // A ready slot holds one or two connections here, and as many in the
    // server processes.
    if limit.is_some_and(|limit| limit < 3 * n as u64 + 256) {
        eprintln!(
            "warning: the open-files limit ({limit:?}) may be too low for {n} servers; raise it (`ulimit -n`)"
        );
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let mut table = Table::default();
    runtime.block_on(drive(&options, &mut table));
    drop(runtime);
    println!(
        "\n## Fleet: {n} named servers, test kit servers in processes of their own (open-files limit {})\n",
        limit.map_or("?".to_owned(), |l| l.to_string())
    );
    println!("| measure | value |");
    println!("|---|---|");
    for (measure, value) in &table.0 {
        println!("| {measure} | {value} |");
    }
}

async fn drive(options: &Options, table: &mut Table) {
    let n = options.servers;
    let eras: [&'static str; 4] = ["2026-07-28", "2025-11-25", "both", "2024-11-05"];
    // 1. Memory per ready slot, listener off and on, in fresh processes,
    // against a server of their own.
    let memory = ServerProcess::spawn("2025-11-25", 0);
    let repeats = if options.quick { 1 } else { 3 };
    for listen in [false, true] {
        let url = &memory.url;
        // The median of `repeats` fresh processes.
        let measure = |fleet, one_at_a_time| {
            let mut figures: Vec<f64> = (0..repeats)
                .map(|_| memory_per_slot(url, fleet, listen, one_at_a_time, n))
                .collect();
            figures.sort_by(f64::total_cmp);
            figures[figures.len() / 2]
        };
        let mut cells = Vec::new();
        for (one_at_a_time, how) in [(true, "one at a time"), (false, "all at once")] {
            let plain = measure(false, one_at_a_time);
            let fleet = measure(true, one_at_a_time);
            cells.push(format!(
                "{how}: {} / {} / {:+.1} KiB",
                kib(plain),
                kib(fleet),
                (fleet - plain) / 1024.0
            ));
        }
        table.row(
            format!(
                "resident memory per ready slot, listener {} (2025-11-25, one lent client; median of {repeats}): plain `Session` / fleet slot / the fleet's own",
                if listen { "on" } else { "off" }
            ),
            cells.join("; "),
        );
    }
    drop(memory);

    // 2. Start: N servers over four processes, every era.
    let mut servers: Vec<ServerProcess> = eras.iter().map(|e| ServerProcess::spawn(e, 0)).collect();
    let fleet = Fleet::new();
    let urls: Vec<String> = servers.iter().map(|s| s.url.clone()).collect();
    let spec = |i: usize| ServerSpec::new(urls[i % 4].clone()).required(true);
    let desired: BTreeMap<String, ServerSpec> =
        (0..n).map(|i| (format!("srv-{i:05}"), spec(i))).collect();
    let started = Instant::now();
    let report = fleet.apply(desired.clone()).await.expect("apply");
    assert_eq!(report.started.len(), n);
    fleet.ready(READY_WITHIN).await.expect("all ready");
    let took = started.elapsed();
    let ready = fleet.states().values().filter(|s| s.is_ready()).count();
    assert_eq!(ready, n, "every slot ready");
    let tools = fleet.catalog().tool_count();
    table.row(
        format!("`apply` to all {n} ready (4 server processes: 2026-07-28, 2025-11-25, both, 2024-11-05; era detected; the fleet's owned client)"),
        format!("{} ({tools} tools in the catalog)", ms(took)),
    );

    // 3. Reconcile with one entry changed.
    let handshakes = |servers: &mut Vec<ServerProcess>| -> u64 {
        servers.iter_mut().map(|s| s.counts().handshakes).sum()
    };
    let before = handshakes(&mut servers);
    let changed = format!("srv-{:05}", n / 2);
    let mut edited = desired.clone();
    edited.insert(changed.clone(), spec(n / 2).header("x-bench", "changed"));
    let started = Instant::now();
    let report = fleet.apply(edited).await.expect("reconcile");
    let took = started.elapsed();
    assert_eq!(report.replaced, std::slice::from_ref(&changed));
    assert!(report.started.is_empty() && report.stopped.is_empty());
    assert_eq!(report.unchanged.len(), n - 1);
    fleet.ready(READY_WITHIN).await.expect("all ready again");
    let new = handshakes(&mut servers) - before;
    table.row(
        format!("reconcile of the {n}-entry set, one entry changed (`{changed}`, on {})", servers[(n / 2) % 4].eras),
        format!(
            "`apply` {}; replaced {}, started {}, stopped {}, unchanged {}; new handshakes at the servers: {new}",
            ms(took),
            report.replaced.len(),
            report.started.len(),
            report.stopped.len(),
            report.unchanged.len()
        ),
    );
    assert_eq!(
        new, 1,
        "one new initialize (or discover) for one changed entry"
    );

    // 4. Shutdown of N ready slots, every era.
    let started = Instant::now();
    let report = fleet.shutdown().await;
    let took = started.elapsed();
    assert_eq!(report.servers.len(), n);
    let mut ended = Vec::new();
    let (mut created, mut deleted, mut live) = (0, 0, 0);
    for server in servers.iter_mut() {
        let counts = server.counts();
        created += counts.sessions_created;
        deleted += counts.deletes + counts.sse_closed_by_client;
        live += counts.live_sessions;
        ended.push(format!(
            "{} {}/{}",
            server.eras,
            counts.deletes + counts.sse_closed_by_client,
            counts.sessions_created
        ));
    }
    table.row(
        format!("`shutdown()` of {n} ready slots, every era"),
        format!(
            "{}; sessions ended by the client / created: {deleted}/{created} ({}; DELETE, or the stream closed for 2024-11-05), {live} live after",
            ms(took),
            ended.join(", ")
        ),
    );
    assert_eq!(deleted, created, "every session ended");
    assert_eq!(live, 0, "no session left at any server");
    drop(servers);

    // 5. Restart storm on one 2025-11-25 process holding N sessions.
    let (cap, downtime) = if options.quick {
        (Duration::from_secs(1), Duration::from_millis(1200))
    } else {
        (Duration::from_secs(5), Duration::from_secs(6))
    };
    let backoff = Backoff::new(Duration::from_millis(100), cap);
    let health = Duration::from_secs(1);
    let port = free_port();
    let mut storm = ServerProcess::spawn("2025-11-25", port);
    let fleet = Fleet::builder()
        .backoff(backoff)
        .health_interval(Some(health))
        .build();
    let desired = (0..n).map(|i| {
        (
            format!("srv-{i:05}"),
            ServerSpec::new(storm.url.clone()).required(true),
        )
    });
    fleet.apply(desired).await.expect("apply");
    fleet.ready(READY_WITHIN).await.expect("all ready");
    let killed = Instant::now();
    storm.kill();
    let noticed = poll_until(READY_WITHIN, || {
        fleet.states().values().all(|s| !s.is_ready())
    })
    .await;
    assert!(noticed, "every slot notices the lost server");
    let noticed = killed.elapsed();
    tokio::time::sleep(downtime.saturating_sub(noticed)).await;
    drop(storm);
    let restarted = Instant::now();
    let mut storm = ServerProcess::spawn("2025-11-25", port);
    fleet
        .ready(READY_WITHIN)
        .await
        .expect("all ready after the restart");
    let back = restarted.elapsed();
    let ready = fleet.states().values().filter(|s| s.is_ready()).count();
    assert_eq!(ready, n, "every slot ready again");
    let counts = storm.counts();
    let peak = counts.peak_window as f64 / WINDOW.as_secs_f64();
    // From the first window with a session to the last.
    let busy = counts
        .windows
        .iter()
        .rposition(|&w| w > 0)
        .map_or(0, |last| last + 1);
    let spread = WINDOW * u32::try_from(busy).unwrap_or(u32::MAX);
    eprintln!(
        "sessions minted per 100 ms after the restart: {:?}",
        &counts.windows[..busy]
    );
    table.row(
        format!(
            "restart storm: the 2025-11-25 process holding {n} sessions killed, restarted on its port {} later (every slot noticed after {}; `Backoff::new(100ms, {}s)`, health check every {}s)",
            ms(downtime.max(noticed)),
            ms(noticed),
            cap.as_secs_f64(),
            health.as_secs_f64(),
        ),
        format!(
            "all {n} ready again {} after the restart; {} sessions created over {} ({:.0}/s on average); peak `initialize` rate {peak:.0}/s ({} in the busiest 100 ms window; without jitter all {n} would come in one)",
            ms(back),
            counts.sessions_created,
            ms(spread),
            counts.sessions_created as f64 / spread.as_secs_f64().max(WINDOW.as_secs_f64()),
            counts.peak_window,
        ),
    );
    let started = Instant::now();
    let report = fleet.shutdown().await;
    let took = started.elapsed();
    assert_eq!(report.servers.len(), n);
    let counts = storm.counts();
    table.row(
        format!("`shutdown()` of {n} ready slots on one 2025-11-25 process"),
        format!(
            "{}; DELETEs / sessions created: {}/{}, {} live after",
            ms(took),
            counts.deletes,
            counts.sessions_created,
            counts.live_sessions
        ),
    );
    assert_eq!(
        counts.deletes, counts.sessions_created,
        "every session DELETEd"
    );
    assert_eq!(counts.live_sessions, 0);
    mcp_scoped_http::shutdown().await;
}

/// Polls `done` every 10 ms until it holds or `within` passes.
async fn poll_until(within: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if done() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    done()
}
