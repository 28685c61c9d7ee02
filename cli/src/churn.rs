//! `churn`: reconnect cycles, their latency and CPU time, what is left
//! afterwards, and (with `--floor`) the bare-HTTP floor for the same
//! exchanges.

use std::io::IsTerminal;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mcp_scoped_http::{Connector, Discovery, HttpClient, HttpClientBuilder};
use mcp_scoped_http_testkit::churn::{
    Churn, ChurnError, Cycle, Figures, Floor, FloorClient, FloorSettings, Recording, drive,
};
use serde_json::{Value, json};

use crate::args::{ChurnArgs, ClientKind, Common, json_object};
use crate::commands::embedded;
use crate::{Failure, Outcome};

fn alive_tasks() -> usize {
    tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks()
}

fn open_fds() -> Option<usize> {
    std::fs::read_dir("/proc/self/fd")
        .ok()
        .map(|entries| entries.count())
}

/// Waits (up to 2 s) for tasks and descriptors to settle back to where
/// they were: closed connections and their tasks go a moment after close.
async fn settle(tasks: usize, fds: Option<usize>) -> (usize, Option<usize>) {
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let now = (alive_tasks(), open_fds());
        let settled = now.0 <= tasks && now.1 <= fds;
        if settled || Instant::now() >= deadline {
            return now;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The first failed cycle, as the command's failure.
/// What a cycle's error says, in the phase it failed in when the client
/// failed.
fn churn_failure(error: &ChurnError) -> Failure {
    match error {
        ChurnError::Client(error) => {
            Failure::at(crate::phase::Phase::of(error.connect_phase()), error)
        }
        other => Failure::server(other.to_string()),
    }
}

/// An error while setting a churn up, worded as a failed connect.
fn connect_failure(error: &ChurnError) -> Failure {
    match error {
        ChurnError::Client(error) => Failure::at(crate::phase::Phase::Connect, error),
        other => Failure::server(other.to_string()),
    }
}

fn failed(figures: &Figures, error: Option<ChurnError>) -> Outcome {
    match error {
        None if figures.failures == 0 => Ok(()),
        None => Err(Failure::server(format!(
            "churn: {} of {} cycles failed",
            figures.failures, figures.cycles
        ))),
        Some(error) => {
            let mut failure = churn_failure(&error);
            if let Failure::Server(message) = &mut failure {
                *message = format!(
                    "churn: {} of {} cycles failed; the first: {message}",
                    figures.failures, figures.cycles
                );
            }
            Err(failure)
        }
    }
}

fn label(options: &ChurnArgs) -> String {
    let kind = match options.client {
        ClientKind::Owned => "owned",
        ClientKind::Borrowed => "borrowed",
    };
    format!("mcp-scoped-http ({kind}) c={}", options.concurrency)
}

/// `churn [URL] [--cycles N] [--concurrency C] [--client owned|borrowed]
/// [--call TOOL [--args JSON]] [--warmup N] [--floor]
/// [--sequential-discovery] [--runtime multi-thread|current-thread]`.
pub(crate) async fn run(options: ChurnArgs, common: &Common) -> Outcome {
    let mut call = match &options.call {
        Some(tool) => Some((
            tool.clone(),
            json_object("--args", options.args.as_deref())?,
        )),
        None => None,
    };
    let server = match options.url {
        Some(_) => None,
        None => {
            call.get_or_insert_with(|| ("tool-000".to_owned(), json!({"text": "churn"})));
            Some(embedded(3, 0)?)
        }
    };
    let url = match (&options.url, &server) {
        (Some(url), _) => url.clone(),
        (None, Some(server)) => server.url(),
        (None, None) => unreachable!("a server is started when no URL is given"),
    };
    // Validate the options once, before anything is measured.
    let _ = common.connector(&url)?;

    let tasks_before = alive_tasks();
    let fds_before = open_fds();
    let settings = HttpClientBuilder::new();
    let shared = match options.client {
        ClientKind::Owned => None,
        ClientKind::Borrowed => Some(settings.clone().build().map_err(|error| {
            Failure::usage(format!("cannot build the shared HTTP client: {error}"))
        })?),
    };
    let churn = make_churn(
        &url,
        common,
        shared.clone(),
        call,
        !options.sequential_discovery,
    )
    .await?;
    let churn = Arc::new(churn);

    let warmup = drive("warm-up", options.warmup, options.concurrency as usize, {
        let churn = churn.clone();
        move || {
            let churn = churn.clone();
            async move { churn.run_once().await }
        }
    })
    .await;
    failed(&warmup.0, warmup.1)?;

    let progress = progress(options.cycles);
    let (mut ours, error) = drive(
        label(&options),
        options.cycles,
        options.concurrency as usize,
        {
            let churn = churn.clone();
            move || {
                let churn = churn.clone();
                async move { churn.run_once().await }
            }
        },
    )
    .await;
    if let Some(progress) = progress {
        progress.abort();
        let _ = progress.await;
        eprint!("\r\x1b[2K");
    }
    ours.label = label(&options);
    failed(&ours, error)?;

    let floor = if options.floor {
        let mut churn = Arc::into_inner(churn)
            .ok_or_else(|| Failure::server("churn: a worker still holds the churn"))?;
        let recording = Recording::of(&mut churn, &FloorSettings::new())
            .await
            .map_err(|error| connect_failure(&error))?;
        let floor_client = match options.client {
            ClientKind::Owned => FloorClient::PerCycle,
            ClientKind::Borrowed => FloorClient::Shared,
        };
        let floor = Arc::new(Floor::new(
            recording.clone(),
            FloorSettings::new(),
            floor_client,
        ));
        let make = || {
            let floor = floor.clone();
            move || {
                let floor = floor.clone();
                async move { floor.cycle().await }
            }
        };
        drive(
            "warm-up",
            options.warmup,
            options.concurrency as usize,
            make(),
        )
        .await;
        let (figures, error) = drive(
            format!("bare hyper floor c={}", options.concurrency),
            options.cycles,
            options.concurrency as usize,
            make(),
        )
        .await;
        failed(&figures, error)?;
        churn.finish().await;
        Some((figures, recording))
    } else {
        if let Some(churn) = Arc::into_inner(churn) {
            churn.finish().await;
        }
        None
    };

    drop(shared);
    mcp_scoped_http::shutdown().await;
    let (tasks_after, fds_after) = settle(tasks_before, fds_before).await;
    let ratios = floor.as_ref().map(|(floor, _)| Ratios::of(&ours, floor));
    if common.json {
        let mut report = ours.to_json();
        report["tasksBefore"] = json!(tasks_before);
        report["tasksAfter"] = json!(tasks_after);
        report["fdsBefore"] = json!(fds_before);
        report["fdsAfter"] = json!(fds_after);
        if let Some((floor, recording)) = &floor {
            report["floor"] = floor.to_json();
            report["exchangesPerCycle"] = json!(recording.len());
            if let Some(ratios) = &ratios {
                report["perCycleOverFloor"] = json!(ratios.time);
                report["cpuOverFloor"] = json!(ratios.cpu);
                report["p50OverFloor"] = json!(ratios.p50);
                report["allocationsOverFloor"] = json!(ratios.allocations);
            }
        }
        crate::out_json(&report);
    } else {
        out!("{ours}");
        if let Some((floor, recording)) = &floor {
            out!("{floor}");
            if let Some(ratios) = &ratios {
                out!("ours over the floor: {ratios}");
            }
            out!(
                "{} HTTP exchanges per cycle: {}",
                recording.len(),
                recording.summary().join(", ")
            );
        }
        out!("live tasks: {tasks_before} before, {tasks_after} after");
        let show = |fds: Option<usize>| fds.map_or("?".to_owned(), |n| n.to_string());
        out!(
            "open file descriptors: {} before, {} after",
            show(fds_before),
            show(fds_after)
        );
    }
    drop(server);
    Ok(())
}

/// Ours over the floor, from one run of each.
struct Ratios {
    time: f64,
    cpu: Option<f64>,
    p50: f64,
    allocations: Option<f64>,
}

impl Ratios {
    fn of(ours: &Figures, floor: &Figures) -> Self {
        let over = |a: f64, b: f64| a / b.max(f64::MIN_POSITIVE);
        let seconds = |d: Duration| d.as_secs_f64();
        Ratios {
            time: over(seconds(ours.per_cycle()), seconds(floor.per_cycle())),
            cpu: ours
                .cpu_per_cycle()
                .zip(floor.cpu_per_cycle())
                .map(|(a, b)| over(seconds(a), seconds(b))),
            p50: over(seconds(ours.p50()), seconds(floor.p50())),
            allocations: ours
                .allocations_per_cycle()
                .zip(floor.allocations_per_cycle())
                .map(|(a, b)| over(a, b)),
        }
    }
}

impl std::fmt::Display for Ratios {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "time {:.2}x", self.time)?;
        if let Some(cpu) = self.cpu {
            write!(f, ", client cpu {cpu:.2}x")?;
        }
        write!(f, ", p50 {:.2}x", self.p50)?;
        if let Some(allocations) = self.allocations {
            write!(f, ", allocations {allocations:.2}x")?;
        }
        Ok(())
    }
}

/// The churn, with the command line's options applied to every connector.
async fn make_churn(
    url: &str,
    common: &Common,
    shared: Option<HttpClient>,
    call: Option<(String, Value)>,
    concurrent: bool,
) -> Result<Churn, Failure> {
    let churn = Churn::new(url, Cycle::Complete, shared)
        .await
        .map_err(|error| connect_failure(&error))?;
    let (common, url) = (common.clone(), url.to_owned());
    Ok(churn.with_call(call).configure(move |_| {
        // Validated before the churn began; same inputs, same outcome.
        let connector = common
            .connector(&url)
            .unwrap_or_else(|_| Connector::new(url.clone()));
        // The library's default unless told: at once with the shared
        // client, one after the other with an owned one.
        let connector = if concurrent {
            connector
        } else {
            connector.discovery(Discovery::default().concurrent(false))
        };
        match common.timeout {
            Some(limit) => connector.connect_timeout(limit),
            None => connector,
        }
    }))
}

fn progress(cycles: usize) -> Option<tokio::task::JoinHandle<()>> {
    std::io::stderr().is_terminal().then(|| {
        let started = Instant::now();
        tokio::spawn(async move {
            loop {
                eprint!(
                    "\rchurn: {cycles} cycles, {:.0} s",
                    started.elapsed().as_secs_f64()
                );
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        })
    })
}
