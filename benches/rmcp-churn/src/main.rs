//! `rmcp-churn`: the reconnect-churn cycle of `mcp-scoped-http churn`, run
//! with the official Rust SDK's client (rmcp 3.11 over reqwest, or over a
//! child process's pipes with `--stdio`), so that the two can be compared
//! side by side. See README.md.

mod cycle;
mod no_listen;
mod report;

use std::error::Error;
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use rmcp::model::JsonObject;

use crate::cycle::{Discovered, Plan};
use crate::report::{Measured, Report};

/// Reconnect churn with the rmcp client: each cycle connects (initialize,
/// notifications/initialized), lists every tool, prompt, resource and
/// resource template the server declares (all pages), calls one tool, and
/// closes (rmcp's `cancel`, which DELETEs the session).
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// The MCP endpoint, e.g. http://127.0.0.1:PORT/mcp (not with
    /// --stdio).
    #[arg(required_unless_present = "stdio", conflicts_with = "stdio")]
    url: Option<String>,
    /// Start a stdio server in each cycle instead, through rmcp's
    /// `TokioChildProcess`: the command after `--`, e.g. `--stdio --
    /// mcp-scoped-http serve --stdio`. --client, --no-listen and
    /// --no-pool do not apply.
    #[arg(long, requires = "command")]
    stdio: bool,
    /// The stdio server's program and arguments, after `--`.
    #[arg(last = true, value_name = "COMMAND")]
    command: Vec<String>,
    /// How many measured cycles.
    #[arg(long, default_value_t = 100)]
    cycles: usize,
    /// How many cycles run at once.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
    concurrency: u16,
    /// Whether all cycles share one pooled reqwest client or each builds its own.
    #[arg(long, value_enum, default_value_t = ClientKind::Borrowed)]
    client: ClientKind,
    /// Cycles run first, with the same client and concurrency, and not measured.
    #[arg(long, default_value_t = 20)]
    warmup: usize,
    /// The tool called in every cycle.
    #[arg(long, default_value = "tool-000")]
    call: String,
    /// The tool's arguments, a JSON object.
    #[arg(long, default_value = r#"{"text":"churn"}"#, value_parser = json_object)]
    args: JsonObject,
    /// Bound on one whole cycle, in seconds; a cycle past it fails.
    #[arg(long, default_value_t = 10.0)]
    timeout: f64,
    /// Do not open the GET listening stream (rmcp has no setting for it:
    /// the HTTP client answers for the server that it has none).
    #[arg(long)]
    no_listen: bool,
    /// Build every reqwest client with no idle pool
    /// (`pool_max_idle_per_host(0)`, as rmcp's own default client does):
    /// each request then opens a new connection.
    #[arg(long)]
    no_pool: bool,
    /// Print one JSON object on stdout instead of the text line.
    #[arg(long)]
    json: bool,
    /// With --json, add every cycle's latency (`latenciesMicros`, sorted),
    /// so that runs can be merged.
    #[arg(long, requires = "json")]
    latencies: bool,
}

/// Where a cycle's `reqwest::Client` comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum ClientKind {
    /// One client (and its connection pool) shared by every cycle.
    Borrowed,
    /// A client built for each cycle and dropped with it.
    Owned,
}

impl ClientKind {
    fn name(self) -> &'static str {
        match self {
            Self::Borrowed => "borrowed",
            Self::Owned => "owned",
        }
    }
}

fn json_object(text: &str) -> Result<JsonObject, String> {
    match serde_json::from_str(text) {
        Ok(serde_json::Value::Object(object)) => Ok(object),
        Ok(_) => Err("not a JSON object".to_owned()),
        Err(error) => Err(error.to_string()),
    }
}

/// A plain-HTTP client for loopback: no proxy from the environment, and
/// no idle connections kept unless `pool`.
fn http_client(pool: bool) -> Result<reqwest::Client, reqwest::Error> {
    let builder = reqwest::Client::builder().no_proxy();
    if pool {
        builder.build()
    } else {
        builder.pool_max_idle_per_host(0).build()
    }
}

/// An error and its causes, on one line.
fn chain(error: &(dyn Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// What every batch of cycles shares, and what the first cycles saw.
struct Batch {
    plan: Plan,
    /// The client of `--client borrowed`.
    shared: Option<reqwest::Client>,
    /// Whether a client keeps idle connections (not `--no-pool`).
    pool: bool,
    timeout: Duration,
    first_error: OnceLock<String>,
    first_discovery: OnceLock<Discovered>,
}

impl Batch {
    /// Runs `cycles` cycles, at most `concurrency` at once; a failed cycle
    /// is counted, not retried.
    async fn run(self: &Arc<Self>, cycles: usize, concurrency: usize) -> Measured {
        let next = Arc::new(AtomicUsize::new(0));
        let mut workers = tokio::task::JoinSet::new();
        for _ in 0..concurrency.min(cycles) {
            let (batch, next) = (self.clone(), next.clone());
            workers.spawn(async move {
                let mut mine = Measured::default();
                while next.fetch_add(1, Ordering::Relaxed) < cycles {
                    let started = Instant::now();
                    match batch.one().await {
                        Ok(discovered) => {
                            mine.latencies.push(started.elapsed());
                            let _ = batch.first_discovery.set(discovered);
                        }
                        Err(error) => {
                            mine.failures += 1;
                            let _ = batch.first_error.set(error);
                        }
                    }
                }
                mine
            });
        }
        let mut all = Measured::default();
        while let Some(joined) = workers.join_next().await {
            let mut mine =
                joined.unwrap_or_else(|error| std::panic::resume_unwind(error.into_panic()));
            all.latencies.append(&mut mine.latencies);
            all.failures += mine.failures;
        }
        all
    }

    /// One cycle, bounded by the timeout, with the shared client or a new one.
    async fn one(&self) -> Result<Discovered, String> {
        if let Some(command) = &self.plan.stdio {
            let cycle = cycle::run_stdio(&self.plan, command);
            return match tokio::time::timeout(self.timeout, cycle).await {
                Ok(Ok(discovered)) => Ok(discovered),
                Ok(Err(error)) => Err(chain(error.as_ref())),
                Err(_) => Err(format!("the cycle took longer than {:?}", self.timeout)),
            };
        }
        let http = match &self.shared {
            Some(client) => client.clone(),
            None => http_client(self.pool).map_err(|error| chain(&error))?,
        };
        match tokio::time::timeout(self.timeout, cycle::run(&self.plan, http)).await {
            Ok(Ok(discovered)) => Ok(discovered),
            Ok(Err(error)) => Err(chain(error.as_ref())),
            Err(_) => Err(format!("the cycle took longer than {:?}", self.timeout)),
        }
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    let timeout = match Duration::try_from_secs_f64(args.timeout) {
        Ok(timeout) if !timeout.is_zero() => timeout,
        _ => {
            eprintln!("rmcp-churn: --timeout must be a positive number of seconds");
            return ExitCode::from(2);
        }
    };
    let stdio = args.stdio.then(|| Arc::from(args.command.clone()));
    let shared = match args.client {
        _ if stdio.is_some() => None,
        ClientKind::Owned => None,
        ClientKind::Borrowed => match http_client(!args.no_pool) {
            Ok(client) => Some(client),
            Err(error) => {
                eprintln!(
                    "rmcp-churn: cannot build the HTTP client: {}",
                    chain(&error)
                );
                return ExitCode::FAILURE;
            }
        },
    };
    let batch = Arc::new(Batch {
        plan: Plan {
            url: args.url.unwrap_or_default().into(),
            tool: args.call,
            arguments: args.args,
            listen: !args.no_listen,
            stdio: stdio.clone(),
        },
        shared,
        pool: !args.no_pool,
        timeout,
        first_error: OnceLock::new(),
        first_discovery: OnceLock::new(),
    });
    let concurrency = usize::from(args.concurrency);

    let warm = batch.run(args.warmup, concurrency).await;
    if warm.failures > 0 {
        eprintln!(
            "rmcp-churn: {} of {} warm-up cycles failed; first error: {}",
            warm.failures,
            args.warmup,
            batch.first_error.get().map_or("?", String::as_str)
        );
        return ExitCode::FAILURE;
    }

    let cpu_before = report::cpu_time();
    let started = Instant::now();
    let measured = batch.run(args.cycles, concurrency).await;
    let wall = started.elapsed();
    let cpu = report::cpu_time().saturating_sub(cpu_before);

    if let Some(discovered) = batch.first_discovery.get() {
        eprintln!("rmcp-churn: each cycle listed {discovered}");
    }
    let mode = if stdio.is_some() {
        "stdio"
    } else {
        args.client.name()
    };
    let mut latencies = measured.latencies.clone();
    latencies.sort_unstable();
    let mut report = Report::new(mode, concurrency, measured, wall, cpu);
    if args.latencies {
        report = report.with_latencies(&latencies);
    }
    if args.no_listen {
        report.notes.push("no GET stream");
    }
    if args.no_pool {
        report.notes.push("no pool");
    }
    if args.json {
        println!("{}", report.json());
    } else {
        println!("{}", report.text());
    }
    match batch.first_error.get() {
        None => ExitCode::SUCCESS,
        Some(error) => {
            eprintln!(
                "rmcp-churn: {} cycles failed; first error: {error}",
                report.failures
            );
            ExitCode::FAILURE
        }
    }
}
