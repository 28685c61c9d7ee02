//! `churn`: reconnect cycles, their latency, and what is left afterwards.

use std::io::IsTerminal;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use mcp_scoped_http::HttpClient;
use serde_json::{Value, json};

use crate::args::{ChurnArgs, ClientKind, Common, json_object};
use crate::commands::{call_tool, close_outcome, embedded};
use crate::phase;
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

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn micros(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}

/// One cycle: connect, the call if any, close.
async fn cycle(
    url: &str,
    common: &Common,
    client: Option<&HttpClient>,
    call: Option<&(String, Value)>,
) -> Result<Duration, Failure> {
    let started = Instant::now();
    let mut connector = common.connector(url)?;
    if let Some(client) = client {
        connector = connector.client(client.clone());
    }
    let session = phase::connect(connector, common.timeout).await?;
    let called = match call {
        Some((tool, arguments)) => call_tool(&session, tool, arguments.clone(), common.timeout)
            .await
            .map(drop),
        None => Ok(()),
    };
    let released = session.close().await;
    called?;
    close_outcome(&released)?;
    Ok(started.elapsed())
}

/// `churn [URL] [--cycles N] [--concurrency C] [--client owned|borrowed]
/// [--call TOOL [--args JSON]]`.
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
    let shared = match options.client {
        ClientKind::Owned => None,
        ClientKind::Borrowed => Some(HttpClient::owned().map_err(|error| {
            Failure::usage(format!("cannot build the shared HTTP client: {error}"))
        })?),
    };

    let cycles = options.cycles;
    let next = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    let progress = std::io::stderr().is_terminal().then(|| {
        let done = done.clone();
        tokio::spawn(async move {
            loop {
                eprint!("\rchurn: {}/{cycles} cycles", done.load(Ordering::Relaxed));
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    });
    let started = Instant::now();
    let workers = (options.concurrency as usize).min(cycles.max(1));
    let common = Arc::new(common.clone());
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..workers {
        let (next, done, url) = (next.clone(), done.clone(), url.clone());
        let (shared, call, common) = (shared.clone(), call.clone(), common.clone());
        tasks.spawn(async move {
            let mut durations = Vec::new();
            while next.fetch_add(1, Ordering::Relaxed) < cycles {
                match cycle(&url, &common, shared.as_ref(), call.as_ref()).await {
                    Ok(duration) => durations.push(duration),
                    Err(failure) => {
                        // Stop the other workers too.
                        next.store(cycles, Ordering::Relaxed);
                        return Err(failure);
                    }
                }
                done.fetch_add(1, Ordering::Relaxed);
            }
            Ok::<_, Failure>(durations)
        });
    }
    let mut results = Vec::new();
    while let Some(joined) = tasks.join_next().await {
        results.push(joined.map_err(|_| Failure::server("churn: a worker stopped unexpectedly"))?);
    }
    let seconds = started.elapsed().as_secs_f64();
    if let Some(progress) = progress {
        progress.abort();
        let _ = progress.await;
        eprint!("\r\x1b[2K");
    }
    let mut durations = Vec::with_capacity(cycles);
    for result in results {
        durations.extend(result?);
    }
    drop(shared);
    mcp_scoped_http::shutdown().await;
    let (tasks_after, fds_after) = settle(tasks_before, fds_before).await;
    durations.sort_unstable();
    let p50 = percentile(&durations, 50.0);
    let p99 = percentile(&durations, 99.0);
    let per_second = if seconds > 0.0 {
        durations.len() as f64 / seconds
    } else {
        0.0
    };
    if common.json {
        out!(
            "{}",
            json!({
                "cycles": durations.len(),
                "seconds": seconds,
                "cyclesPerSecond": per_second,
                "p50Micros": micros(p50),
                "p99Micros": micros(p99),
                "tasksBefore": tasks_before,
                "tasksAfter": tasks_after,
                "fdsBefore": fds_before,
                "fdsAfter": fds_after,
            })
        );
    } else {
        out!(
            "{} cycles in {seconds:.2} s: {per_second:.1} cycles/s, p50 {p50:?}, p99 {p99:?}",
            durations.len()
        );
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
