//! Reconnect churn: the cycle that the benchmark, the leak gate and the
//! CLI's `churn` run, the driver that times it, and the bare-HTTP floor it
//! is compared with.
//!
//! One cycle is what an agent or a gateway does all day: connect
//! (`initialize`, `notifications/initialized`, discovery of every list the
//! server declares), one `tools/call`, close (DELETE). A [`Cycle`] names the
//! ways it runs, successful and failing; [`Churn`] runs one cycle at a time
//! against a URL; [`drive`] runs many over concurrent workers and measures
//! them as [`Figures`]. A [`Floor`] replays the HTTP exchanges of one
//! recorded cycle (same requests, same bodies, same client settings) through
//! the bare hyper-util client, with no MCP logic: the cost HTTP itself sets.

use std::future::{Future, poll_fn};
use std::pin::pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::HeaderValue;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use serde_json::{Value, json};

pub use super::counting::{CountingAllocator, allocations, client_cpu_time};
use super::{Fault, FaultAction, ServerConfig};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use mcp_scoped_http::BoxError;
use mcp_scoped_http::client::{QuickAckConnector, RequestBody};
use mcp_scoped_http::{Connector, HttpClient, ProtocolVersion, Session, SessionId, SessionRelease};

use crate::lock;

/// What stopped a cycle: the client's own error, or the harness's finding
/// that the cycle did not go as its kind says.
#[non_exhaustive]
#[derive(Debug)]
pub enum ChurnError {
    /// The session's or the client's error.
    Client(mcp_scoped_http::Error),
    /// The cycle went otherwise than its kind says (a connect meant to
    /// fail did not, a worker stopped).
    Unexpected(String),
    /// The floor's bare client failed, or a floor answer passed its limit.
    Floor(BoxError),
}

impl std::fmt::Display for ChurnError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ChurnError::Client(error) => error.fmt(f),
            ChurnError::Unexpected(what) => f.write_str(what),
            ChurnError::Floor(error) => write!(f, "the floor: {error}"),
        }
    }
}

impl std::error::Error for ChurnError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ChurnError::Client(error) => Some(error),
            ChurnError::Unexpected(_) => None,
            ChurnError::Floor(error) => Some(&**error),
        }
    }
}

impl From<mcp_scoped_http::Error> for ChurnError {
    fn from(error: mcp_scoped_http::Error) -> Self {
        ChurnError::Client(error)
    }
}

/// The result of a cycle, a recording or a floor.
pub type Result<T> = std::result::Result<T, ChurnError>;

/// The server the churn figures are measured against: 20 tools over 4
/// pages, 3 prompts, 3 resources, 1 resource template, answers as SSE
/// streams, and no record of requests (it would grow with the run).
pub fn server_config() -> ServerConfig {
    ServerConfig::default()
        .with_tools(20)
        .with_page_size(5)
        .with_prompts(3)
        .with_resources(3)
        .with_resource_templates(1)
        .with_response_mode(super::ResponseMode::Sse)
        .with_record_requests(false)
}

/// How one cycle runs, and how it ends.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Cycle {
    /// Connect, call a tool, close (DELETE).
    Complete,
    /// Attach to a session the caller owns (no `initialize`), discover,
    /// call a tool, close (no DELETE).
    Attached,
    /// `initialize` is answered 500: nothing to DELETE.
    InitializeFails,
    /// `notifications/initialized` is answered 500; the session exists, so
    /// the unwind DELETEs it.
    InitializedFails,
    /// Page 3 of `tools/list` is answered 500; the unwind DELETEs.
    DiscoveryFails,
    /// The caller drops the connect future half-way (after
    /// [`Cycle::DROP_AFTER_POLLS`] polls); the reaper DELETEs.
    Dropped,
}

impl Cycle {
    /// Every cycle, successful ones first.
    pub const ALL: [Cycle; 6] = [
        Cycle::Complete,
        Cycle::Attached,
        Cycle::InitializeFails,
        Cycle::InitializedFails,
        Cycle::DiscoveryFails,
        Cycle::Dropped,
    ];

    /// Polls of the connect future before a [`Cycle::Dropped`] cycle drops
    /// it: a connect to the churn server completes in about 11.
    pub const DROP_AFTER_POLLS: usize = 5;

    /// A short name (`complete`, `attached`, `initialize-500`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Cycle::Complete => "complete",
            Cycle::Attached => "attached",
            Cycle::InitializeFails => "initialize-500",
            Cycle::InitializedFails => "initialized-500",
            Cycle::DiscoveryFails => "discovery-page3-500",
            Cycle::Dropped => "dropped-mid-connect",
        }
    }

    /// Whether the connect is meant to fail (or be dropped).
    pub fn fails(self) -> bool {
        !matches!(self, Cycle::Complete | Cycle::Attached)
    }

    /// The server faults that make this cycle fail where it should.
    pub fn faults(self) -> Vec<Fault> {
        match self {
            Cycle::Complete | Cycle::Attached | Cycle::Dropped => Vec::new(),
            Cycle::InitializeFails => {
                vec![Fault::on_rpc("initialize", FaultAction::status(500))]
            }
            Cycle::InitializedFails => vec![Fault::on_rpc(
                "notifications/initialized",
                FaultAction::status(500),
            )],
            Cycle::DiscoveryFails => {
                vec![Fault::on_rpc("tools/list", FaultAction::status(500)).page(3)]
            }
        }
    }
}

/// Changes made to every cycle's [`Connector`].
type Configure = Arc<dyn Fn(Connector) -> Connector + Send + Sync>;

/// Runs one [`Cycle`] at a time against one MCP endpoint.
///
/// Every cycle keeps the GET listening stream off, so that a cycle is
/// exactly its request/response exchanges, and by default sends a bearer
/// token (a header hook scoped to its session); see [`Churn::configure`].
pub struct Churn {
    url: String,
    cycle: Cycle,
    client: Option<HttpClient>,
    call: Option<(String, Value)>,
    configure: Configure,
    /// Every cycle's connector is a clone of this one (`configure` applied),
    /// so that they share what it learns, as an application's would: the
    /// era each endpoint speaks.
    base: Connector,
    attached: Option<(Session, SessionId, ProtocolVersion)>,
}

impl std::fmt::Debug for Churn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Churn")
            .field("url", &self.url)
            .field("cycle", &self.cycle)
            .field("borrowed", &self.client.is_some())
            .field("call", &self.call.as_ref().map(|call| &call.0))
            .finish_non_exhaustive()
    }
}

impl Churn {
    /// Cycles of kind `cycle` against `url`, through `client` (borrowed,
    /// shared by every cycle) or, with `None`, an owned client built and
    /// dropped with each session. The call defaults to `tool-000` with
    /// `{"text": "churn"}`. For [`Cycle::Attached`] it first connects the
    /// caller's own session, which every cycle attaches to.
    pub async fn new(
        url: impl Into<String>,
        cycle: Cycle,
        client: Option<HttpClient>,
    ) -> Result<Churn> {
        let url = url.into();
        let attached = match cycle {
            Cycle::Attached => {
                let mut connector = Connector::new(url.clone()).listen(false);
                if let Some(client) = &client {
                    connector = connector.client(client.clone());
                }
                let own = connector.connect().await?;
                let id = own.session_id().ok_or_else(|| {
                    ChurnError::Unexpected("the server issued no session id to attach to".into())
                })?;
                let version = own.protocol_version();
                Some((own, id, version))
            }
            _ => None,
        };
        let configure: Configure = Arc::new(|connector: Connector| connector.bearer("churn-token"));
        let mut churn = Churn {
            base: Connector::new(url.clone()),
            url,
            cycle,
            client,
            call: Some(("tool-000".to_owned(), json!({"text": "churn"}))),
            configure,
            attached,
        };
        churn.rebuild();
        Ok(churn)
    }

    /// The connector every cycle clones, built once: a cycle then costs
    /// what a host's connect costs, not a connector's set-up.
    fn rebuild(&mut self) {
        let mut base = (self.configure)(Connector::new(self.url.clone())).listen(false);
        if let Some(client) = &self.client {
            base = base.client(client.clone());
        }
        if let Some((_, id, version)) = &self.attached {
            base = base.attach(id.clone(), *version);
        }
        self.base = base;
    }

    /// Lends `client` to the cycles from now on; returns the one lent
    /// before.
    fn lend(&mut self, client: Option<HttpClient>) -> Option<HttpClient> {
        let before = std::mem::replace(&mut self.client, client);
        self.rebuild();
        before
    }

    /// The tool each cycle calls, and its arguments; `None`: no call.
    #[must_use]
    pub fn with_call(mut self, call: Option<(String, Value)>) -> Self {
        self.call = call;
        self
    }

    /// Replaces what is done to every cycle's [`Connector`] (default: a
    /// bearer token). The client, the attachment of an attached churn and
    /// the listening stream (off) are set after it.
    #[must_use]
    pub fn configure(
        mut self,
        configure: impl Fn(Connector) -> Connector + Send + Sync + 'static,
    ) -> Self {
        self.configure = Arc::new(configure);
        self.rebuild();
        self
    }

    /// The kind of cycle.
    pub fn cycle(&self) -> Cycle {
        self.cycle
    }

    fn connector(&self) -> Connector {
        self.base.clone()
    }

    /// Runs one cycle. `Ok` when it ended the way its [`Cycle`] says: a
    /// complete cycle succeeded (DELETE included), a failing one failed.
    pub async fn run_once(&self) -> Result<()> {
        let connector = self.connector();
        match self.cycle {
            Cycle::Complete | Cycle::Attached => {
                let session = connector.connect().await?;
                let called = match &self.call {
                    Some((tool, arguments)) => {
                        session.call_tool(tool, arguments.clone()).await.map(drop)
                    }
                    None => Ok(()),
                };
                let released = session.close().await;
                called?;
                match released.session {
                    SessionRelease::DeleteFailed(error) => Err(error.into()),
                    _ => Ok(()),
                }
            }
            Cycle::Dropped => {
                match poll_then_drop(connector.connect(), Self::drop_after()).await {
                    // Dropped half-way, as meant.
                    None => Ok(()),
                    Some(Ok(session)) => {
                        session.close().await;
                        Err(ChurnError::Unexpected(
                            "the connect finished before it could be dropped".into(),
                        ))
                    }
                    Some(Err(error)) => Err(error.into()),
                }
            }
            Cycle::InitializeFails | Cycle::InitializedFails | Cycle::DiscoveryFails => {
                match connector.connect().await {
                    Err(error) if error.status().is_some() => Ok(()),
                    Err(error) => Err(error.into()),
                    Ok(session) => {
                        session.close().await;
                        Err(ChurnError::Unexpected(
                            "the connect was meant to fail and did not".into(),
                        ))
                    }
                }
            }
        }
    }

    fn drop_after() -> usize {
        Cycle::DROP_AFTER_POLLS
    }

    /// Closes the caller's own session of an attached churn (the others
    /// hold nothing between cycles).
    pub async fn finish(self) {
        if let Some((own, _, _)) = self.attached {
            own.close().await;
        }
    }
}

/// Polls `future` until it finishes or has returned `Pending` `polls`
/// times; then drops it and returns `None`.
async fn poll_then_drop<F: Future>(future: F, polls: usize) -> Option<F::Output> {
    let mut future = pin!(future);
    let mut pending = 0;
    poll_fn(|cx| match future.as_mut().poll(cx) {
        Poll::Ready(output) => Poll::Ready(Some(output)),
        Poll::Pending => {
            pending += 1;
            if pending >= polls {
                Poll::Ready(None)
            } else {
                Poll::Pending
            }
        }
    })
    .await
}

/// What a run of cycles measured.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct Figures {
    /// What ran (e.g. `ours borrowed c=16`).
    pub label: String,
    /// Concurrent workers.
    pub concurrency: usize,
    /// Cycles run (those that failed included).
    pub cycles: usize,
    /// Cycles that did not end the way they should.
    pub failures: usize,
    /// Wall-clock time of the whole run.
    pub wall: Duration,
    /// CPU time (user + system) of this process during the run, less the
    /// in-process test kit server's threads (see [`client_cpu_time`]),
    /// where the platform tells it.
    pub cpu: Option<Duration>,
    /// Heap allocations made during the run by threads other than the test
    /// kit server's, when a [`CountingAllocator`] is installed.
    pub allocations: Option<u64>,
    /// Every cycle's latency, sorted.
    latencies: Vec<Duration>,
}

impl Figures {
    /// Cycles per second of wall-clock time.
    pub fn cycles_per_second(&self) -> f64 {
        let seconds = self.wall.as_secs_f64();
        if seconds > 0.0 {
            self.cycles as f64 / seconds
        } else {
            0.0
        }
    }

    /// Wall-clock time per cycle: the inverse of the throughput.
    pub fn per_cycle(&self) -> Duration {
        self.wall
            .checked_div(u32::try_from(self.cycles).unwrap_or(u32::MAX).max(1))
            .unwrap_or_default()
    }

    /// Mean latency of one cycle.
    pub fn mean(&self) -> Duration {
        let total: Duration = self.latencies.iter().sum();
        total
            .checked_div(
                u32::try_from(self.latencies.len())
                    .unwrap_or(u32::MAX)
                    .max(1),
            )
            .unwrap_or_default()
    }

    /// Latency percentile `p` (0-100, nearest rank).
    pub fn percentile(&self, p: f64) -> Duration {
        let sorted = &self.latencies;
        if sorted.is_empty() {
            return Duration::ZERO;
        }
        let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
        sorted[rank.clamp(1, sorted.len()) - 1]
    }

    /// Median latency.
    pub fn p50(&self) -> Duration {
        self.percentile(50.0)
    }

    /// 99th percentile latency.
    pub fn p99(&self) -> Duration {
        self.percentile(99.0)
    }

    /// CPU time per cycle, where known.
    pub fn cpu_per_cycle(&self) -> Option<Duration> {
        let cycles = u32::try_from(self.cycles).unwrap_or(u32::MAX).max(1);
        self.cpu.and_then(|cpu| cpu.checked_div(cycles))
    }

    /// Heap allocations per cycle, when counted.
    pub fn allocations_per_cycle(&self) -> Option<f64> {
        self.allocations
            .map(|count| count as f64 / self.cycles.max(1) as f64)
    }

    /// Adds another run of the same thing (criterion measures in samples).
    pub fn merge(&mut self, other: Figures) {
        if self.cycles == 0 && self.latencies.is_empty() {
            // Nothing merged yet: take the other's label and CPU as they are.
            self.label = other.label;
            self.cpu = Some(Duration::ZERO).filter(|_| other.cpu.is_some());
            self.allocations = Some(0).filter(|_| other.allocations.is_some());
        }
        self.concurrency = self.concurrency.max(other.concurrency);
        self.cycles += other.cycles;
        self.failures += other.failures;
        self.wall += other.wall;
        self.cpu = match (self.cpu, other.cpu) {
            (Some(a), Some(b)) => Some(a + b),
            _ => None,
        };
        self.allocations = self.allocations.zip(other.allocations).map(|(a, b)| a + b);
        self.latencies.extend(other.latencies);
        self.latencies.sort_unstable();
    }

    /// The figures as one JSON object (the CLI's and the peer bench's
    /// format).
    pub fn to_json(&self) -> Value {
        json!({
            "client": self.label,
            "cycles": self.cycles,
            "failures": self.failures,
            "concurrency": self.concurrency,
            "seconds": self.wall.as_secs_f64(),
            "cyclesPerSecond": self.cycles_per_second(),
            "meanMicros": micros(self.mean()),
            "p50Micros": micros(self.p50()),
            "p99Micros": micros(self.p99()),
            "cpuMicrosPerCycle": self.cpu_per_cycle().map(micros),
            "allocationsPerCycle": self.allocations_per_cycle(),
        })
    }
}

impl std::fmt::Display for Figures {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: {} cycles ({} failed) in {:.2} s: {:.1} cycles/s, mean {} µs, p50 {} µs, p99 {} µs",
            self.label,
            self.cycles,
            self.failures,
            self.wall.as_secs_f64(),
            self.cycles_per_second(),
            micros(self.mean()),
            micros(self.p50()),
            micros(self.p99()),
        )?;
        if let Some(cpu) = self.cpu_per_cycle() {
            write!(f, ", cpu {} µs/cycle", micros(cpu))?;
        }
        if let Some(allocations) = self.allocations_per_cycle() {
            write!(f, ", {allocations:.0} allocations/cycle")?;
        }
        Ok(())
    }
}

fn micros(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}

/// CPU time (user + system) this process has used so far, where the
/// platform tells it.
pub fn process_cpu_time() -> Option<Duration> {
    #[cfg(unix)]
    {
        let time = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
        Some(Duration::new(
            u64::try_from(time.tv_sec).ok()?,
            u32::try_from(time.tv_nsec).ok()?,
        ))
    }
    #[cfg(not(unix))]
    {
        None
    }
}

/// Runs `cycles` cycles over `concurrency` workers (tokio tasks on the
/// current runtime), each calling `cycle` until the cycles are used up.
/// Returns the figures and the first error, if any cycle failed; a failed
/// cycle is counted, not retried.
pub async fn drive<F, Fut>(
    label: impl Into<String>,
    cycles: usize,
    concurrency: usize,
    cycle: F,
) -> (Figures, Option<ChurnError>)
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<()>> + Send + 'static,
{
    let cycle = Arc::new(cycle);
    let next = Arc::new(AtomicUsize::new(0));
    let workers = concurrency.clamp(1, cycles.max(1));
    let cpu_before = client_cpu_time();
    let allocations_before = allocations();
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..workers {
        let (cycle, next) = (cycle.clone(), next.clone());
        tasks.spawn(async move {
            let mut latencies = Vec::new();
            let mut failures = 0;
            let mut first_error = None;
            while next.fetch_add(1, Ordering::Relaxed) < cycles {
                let begun = Instant::now();
                let outcome = cycle().await;
                latencies.push(begun.elapsed());
                if let Err(error) = outcome {
                    failures += 1;
                    first_error.get_or_insert(error);
                }
            }
            (latencies, failures, first_error)
        });
    }
    let mut figures = Figures {
        label: label.into(),
        concurrency: workers,
        ..Figures::default()
    };
    let mut first_error = None;
    while let Some(joined) = tasks.join_next().await {
        match joined {
            Ok((latencies, failures, error)) => {
                figures.latencies.extend(latencies);
                figures.failures += failures;
                if first_error.is_none() {
                    first_error = error;
                }
            }
            Err(join) => {
                figures.failures += 1;
                first_error.get_or_insert(ChurnError::Unexpected(format!(
                    "a churn worker stopped: {join}"
                )));
            }
        }
    }
    figures.wall = started.elapsed();
    figures.cpu = client_cpu_time()
        .zip(cpu_before)
        .map(|(after, before)| after.saturating_sub(before));
    figures.allocations = allocations()
        .zip(allocations_before)
        .map(|(after, before)| after.saturating_sub(before));
    figures.cycles = figures.latencies.len();
    figures.latencies.sort_unstable();
    (figures, first_error)
}

/// One HTTP request of a recorded cycle.
#[derive(Clone, Debug)]
struct Exchange {
    method: http::Method,
    uri: http::Uri,
    headers: http::HeaderMap,
    body: Bytes,
}

/// The HTTP exchanges of one cycle, in the order they were sent.
#[derive(Clone, Debug, Default)]
pub struct Recording {
    exchanges: Vec<Exchange>,
}

impl Recording {
    /// How many HTTP requests the cycle sent.
    pub fn len(&self) -> usize {
        self.exchanges.len()
    }

    /// Whether the cycle sent nothing.
    pub fn is_empty(&self) -> bool {
        self.exchanges.is_empty()
    }

    /// `METHOD rpc-method` of each request, for a summary.
    pub fn summary(&self) -> Vec<String> {
        self.exchanges
            .iter()
            .map(|exchange| {
                let rpc = serde_json::from_slice::<Value>(&exchange.body)
                    .ok()
                    .and_then(|body| {
                        body.get("method")
                            .and_then(Value::as_str)
                            .map(str::to_owned)
                    });
                match rpc {
                    Some(rpc) => format!("{} {rpc}", exchange.method),
                    None => exchange.method.to_string(),
                }
            })
            .collect()
    }

    /// Records the exchanges of one `churn` cycle: the churn's client is
    /// replaced by a borrowed recording client (a bare client built from
    /// `settings`), one cycle runs, and the reaper is waited for (up to
    /// 5 s), so that a DELETE it sends is in the recording too. A warm-up
    /// cycle runs first, unrecorded, so that the cycle recorded is a
    /// steady one (the server's era already known, as in every later
    /// cycle).
    pub async fn of(churn: &mut Churn, settings: &FloorSettings) -> Result<Recording> {
        let log = Arc::new(Mutex::new(Vec::new()));
        let bare = settings.client();
        let recorder = {
            let log = log.clone();
            tower::service_fn(move |request: http::Request<RequestBody>| {
                let (bare, log) = (bare.clone(), log.clone());
                async move {
                    let (parts, body) = request.into_parts();
                    let bytes = body
                        .collect()
                        .await
                        .map(|c| c.to_bytes())
                        .unwrap_or_default();
                    lock(&log).push(Exchange {
                        method: parts.method.clone(),
                        uri: parts.uri.clone(),
                        headers: parts.headers.clone(),
                        body: bytes.clone(),
                    });
                    let request = http::Request::from_parts(parts, Full::new(bytes));
                    bare.request(request).await
                }
            })
        };
        let recording_client = HttpClient::borrowed(recorder);
        let own = churn.lend(Some(recording_client));
        let warm_up = churn.run_once().await;
        let deadline = Instant::now() + Duration::from_secs(5);
        while mcp_scoped_http::ledger().pending_reaps > 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        lock(&log).clear();
        let outcome = match warm_up {
            Ok(()) => churn.run_once().await,
            Err(error) => Err(error),
        };
        churn.lend(own);
        let deadline = Instant::now() + Duration::from_secs(5);
        while mcp_scoped_http::ledger().pending_reaps > 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        outcome?;
        let exchanges = std::mem::take(&mut *lock(&log));
        Ok(Recording { exchanges })
    }
}

/// Which bare client a [`Floor`] sends through.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FloorClient {
    /// One pooled client shared by every cycle.
    Shared,
    /// A new client (so new connections) for every cycle.
    PerCycle,
}

/// The settings of a floor's bare client, as those of an owned
/// [`HttpClient`] a plain-http exchange goes through: `TCP_NODELAY`, the
/// connect timeout, TCP keep-alive and the pool as
/// [`HttpClientBuilder`](mcp_scoped_http::HttpClientBuilder) sets them by
/// default. No proxy and no TLS: the floor serves loopback `http` URLs.
#[derive(Clone, Debug)]
pub struct FloorSettings {
    tcp_quickack: bool,
    pool_max_idle_per_host: usize,
}

impl Default for FloorSettings {
    /// Quick acknowledgements on, 32 idle connections a host: an owned
    /// client's defaults.
    fn default() -> Self {
        FloorSettings {
            tcp_quickack: true,
            pool_max_idle_per_host: 32,
        }
    }
}

impl FloorSettings {
    /// The defaults (see [`FloorSettings::default`]).
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether connections re-arm `TCP_QUICKACK` after each read
    /// ([`QuickAckConnector`]), as an owned client's do unless told
    /// otherwise. Default: on.
    pub fn tcp_quickack(mut self, enabled: bool) -> Self {
        self.tcp_quickack = enabled;
        self
    }

    /// Idle connections kept a host (0: a new connection every exchange).
    /// Default: 32.
    pub fn pool_max_idle_per_host(mut self, max: usize) -> Self {
        self.pool_max_idle_per_host = max;
        self
    }

    fn client(&self) -> BareClient {
        let mut http = HttpConnector::new();
        http.set_nodelay(true);
        http.set_connect_timeout(Some(Duration::from_secs(10)));
        http.set_keepalive(Some(Duration::from_secs(60)));
        let mut builder = Client::builder(TokioExecutor::new());
        builder
            .pool_timer(TokioTimer::new())
            .timer(TokioTimer::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .pool_max_idle_per_host(self.pool_max_idle_per_host);
        if self.tcp_quickack {
            BareClient::QuickAck(builder.build(QuickAckConnector::new(http)))
        } else {
            BareClient::Plain(builder.build(http))
        }
    }
}

/// A bare hyper-util client, with or without quick acknowledgements.
#[derive(Clone)]
enum BareClient {
    QuickAck(Client<QuickAckConnector, RequestBody>),
    Plain(Client<HttpConnector, RequestBody>),
}

impl BareClient {
    async fn request(
        &self,
        request: http::Request<RequestBody>,
    ) -> std::result::Result<http::Response<hyper::body::Incoming>, BoxError> {
        match self {
            BareClient::QuickAck(client) => client.request(request).await,
            BareClient::Plain(client) => client.request(request).await,
        }
        .map_err(BoxError::from)
    }
}

/// The bare-HTTP floor: replays a [`Recording`] through a bare hyper-util
/// client (the one an owned [`HttpClient`] is built on, with its settings,
/// [`FloorSettings`]) and no MCP logic. The only change to the requests is
/// the session id, taken from each cycle's `initialize` answer; each
/// response body is read to its end (up to 16 MiB).
pub struct Floor {
    recording: Arc<Recording>,
    settings: FloorSettings,
    shared: Option<BareClient>,
}

impl std::fmt::Debug for Floor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Floor")
            .field("exchanges", &self.recording.len())
            .field("shared", &self.shared.is_some())
            .finish_non_exhaustive()
    }
}

const FLOOR_BODY_LIMIT: usize = 16 * 1024 * 1024;

impl Floor {
    /// A floor replaying `recording` with clients built from `settings`.
    pub fn new(recording: Recording, settings: FloorSettings, client: FloorClient) -> Floor {
        let shared = match client {
            FloorClient::Shared => Some(settings.client()),
            FloorClient::PerCycle => None,
        };
        Floor {
            recording: Arc::new(recording),
            settings,
            shared,
        }
    }

    /// Replays the recorded exchanges once.
    pub async fn cycle(&self) -> Result<()> {
        let fresh;
        let client = match &self.shared {
            Some(client) => client,
            None => {
                fresh = self.settings.client();
                &fresh
            }
        };
        let mut session: Option<HeaderValue> = None;
        for exchange in &self.recording.exchanges {
            let mut request = http::Request::new(Full::new(exchange.body.clone()));
            *request.method_mut() = exchange.method.clone();
            *request.uri_mut() = exchange.uri.clone();
            *request.headers_mut() = exchange.headers.clone();
            if let Some(id) = &session {
                if request.headers().contains_key(SESSION_HEADER) {
                    request.headers_mut().insert(SESSION_HEADER, id.clone());
                }
            }
            let response = client.request(request).await.map_err(ChurnError::Floor)?;
            if let Some(id) = response.headers().get(SESSION_HEADER) {
                session = Some(id.clone());
            }
            let mut body = response.into_body();
            let mut read = 0;
            while let Some(frame) = body.frame().await {
                let frame = frame.map_err(|e| ChurnError::Floor(e.into()))?;
                if let Some(data) = frame.data_ref() {
                    read += data.len();
                    if read > FLOOR_BODY_LIMIT {
                        return Err(ChurnError::Floor("a response passed 16 MiB".into()));
                    }
                }
            }
        }
        Ok(())
    }
}

const SESSION_HEADER: &str = "mcp-session-id";
