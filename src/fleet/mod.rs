//! A fleet: many named MCP servers under one owner (feature `fleet`).
//!
//! A [`Fleet`] holds one **slot** per server. Each slot has exactly one
//! owner task for its whole life, tracked by the fleet and never detached:
//! it connects (through the public [`Connector`](crate::Connector)), keeps
//! the [`Session`](crate::Session) while it is ready, notices when it is
//! lost, waits to retry, and closes the session when told to stop. A
//! failed connect is a state of the slot ([`SlotState`]), never an error
//! that drops ownership.
//!
//! - **Desired state in.** [`Fleet::apply`] takes the full set of named
//!   [`ServerSpec`]s and reconciles by name and spec: an unchanged server
//!   keeps its session; a changed one is replaced; a removed or disabled
//!   one is stopped, whatever it was doing. Concurrent calls are
//!   serialized.
//! - **Start in parallel, bounded.** Every slot starts at once, each under
//!   its own connect timeout, while at most
//!   [`concurrent_connects`](FleetBuilder::concurrent_connects) connects
//!   (64) run at the same time, the others waiting in line in
//!   [`SlotState::Starting`]; a set of more than
//!   [`max_servers`](FleetBuilder::max_servers) (1000) is refused.
//!   [`Fleet::ready`] waits until every server has settled (ready, or
//!   its first attempt ended without a session) and says which are ready
//!   ([`Readiness`]); a server marked [`required`](ServerSpec::required)
//!   must be ready.
//! - **Reconnect forever, politely.** A failed connect or a lost session
//!   is retried with capped exponential backoff and full jitter
//!   ([`Backoff`]); the attempt count starts anew only once a session has
//!   answered a request and stayed up for
//!   [`stable_after`](FleetBuilder::stable_after) (60 s), so a server that
//!   answers once and drops backs off to the cap. A 401 or 403 waits in
//!   [`SlotState::AuthRequired`], an error no retry can fix in
//!   [`SlotState::Failed`] (see [`Error::is_retryable`](crate::Error::is_retryable)),
//!   until [`Fleet::reconnect`] or a changed spec.
//! - **State you can watch.** [`Fleet::state`], [`Fleet::watch`] per slot,
//!   and one bounded stream of [`FleetEvent`]s ([`Fleet::events`]): a slow
//!   reader loses the oldest events and is told how many
//!   ([`RecvError::Lagged`](tokio::sync::broadcast::error::RecvError::Lagged));
//!   the fleet never waits for it.
//! - **One catalog.** [`Fleet::catalog`] merges the lists of every ready
//!   server under qualified names a model accepts as tool names
//!   (`server__tool`, cleaned, cut and hashed when that is not one: see
//!   [`qualify`]), with a generation bumped on every change: a
//!   server ready or lost, a list its session re-listed that reads
//!   differently (each followed as it happens, through the session's
//!   [`events`](crate::Session::events)); each change is announced with
//!   the names added, removed and changed ([`CatalogChanges`]), and a
//!   renewed session with [`FleetEvent::Renewed`].
//! - **Calls routed by name.** [`Fleet::call_tool`] goes to the slot's
//!   current session, or fails at once when it is not ready; a call whose
//!   session is lost under it is never sent again. Per-call
//!   [`RequestOptions`] (progress, timeout, `_meta`) through
//!   [`Fleet::call_tool_with`] and [`Fleet::request_with`].
//! - **Everything a server says.** [`Fleet::notifications`]: every
//!   server's notifications ([`ServerNotification`], with its name) on one
//!   stream, bounded in count and in bytes (charged to the fleet's memory
//!   budget while held), read by each slot's owner task.
//! - **The configuration hosts use.** [`parse_mcp_servers`] reads the
//!   common `mcpServers` JSON shape into specs for [`Fleet::apply`]
//!   (stdio entries skipped and reported, unknown keys warned).
//! - **Shared owned clients.** Servers that lend no client share the
//!   fleet's owned client for their
//!   [`client_settings`](ServerSpec::client_settings) (one per distinct
//!   settings, made once even when they start together; connections
//!   pooled per origin; each session's headers, hooks and OAuth still
//!   apply to its own requests only), dropped with the last of them; a
//!   lent client is only ever used, by any number of slots.
//! - **Shutdown drains.** [`Fleet::shutdown`] stops every slot at once
//!   within one deadline and reports per server; dropping the fleet runs
//!   the same drain in the background, as a reap that [`crate::shutdown`]
//!   waits for.
//!
//! # When a session counts as lost
//!
//! A ready slot sends a `ping` at once (its answer proves the session: lost
//! after [`stable_after`](FleetBuilder::stable_after), it resets the
//! attempt count), then one every
//! [`health_interval`](FleetBuilder::health_interval). The session is lost
//! when a ping fails with anything but a JSON-RPC error (an answer is an
//! answer, "method not found" included), or when a routed call fails with a transport error or finds
//! the session closed. When the session's listening stream ends (the GET
//! stream, or a 2026-07-28 `subscriptions/listen`), the ping is sent at
//! once instead of at the end of the interval (never while one is in
//! flight): a server that went away is noticed in about a round trip. A session that expired (404) is replaced by the
//! session itself, within the slot (see [`Session::request`](crate::Session::request)).
//!
//! # Example
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> mcp_scoped_http::Result<()> {
//! # let server = mcp_scoped_http_testkit::TestServer::start(Default::default());
//! # let url = server.url();
//! use std::time::Duration;
//! use mcp_scoped_http::fleet::{Fleet, ServerSpec};
//! use serde_json::json;
//!
//! let fleet = Fleet::new();
//! let report = fleet
//!     .apply([
//!         ("search", ServerSpec::new(&url).bearer("token").required(true)),
//!         // Down: retried in the background, never holding the others up.
//!         ("notes", ServerSpec::new("http://127.0.0.1:9/mcp")),
//!     ])
//!     .await?;
//! assert_eq!(report.started, ["notes", "search"]);
//! // Every server settled: "notes" failed its first connect (and waits to
//! // retry); "search" is required, so it must be ready.
//! let readiness = fleet.ready(Duration::from_secs(10)).await?;
//! assert_eq!(readiness.ready, ["search"]);
//! assert!(readiness.not_ready.contains_key("notes") && readiness.pending.is_empty());
//!
//! let catalog = fleet.catalog();
//! assert!(catalog.tool("search__tool-000").is_some());
//! let result = fleet.call_tool("search", "tool-000", json!({"text": "hi"})).await?;
//! # assert_eq!(result["structuredContent"]["tool"], "tool-000");
//!
//! let report = fleet.shutdown().await; // every session DELETEd, every task joined
//! assert_eq!(report.servers.len(), 2);
//! # Ok(())
//! # }
//! ```

mod catalog;
mod changes;
mod clients;
mod config;
mod notify;
mod ready;
mod reconcile;
mod requests;
mod slot;
mod spec;
mod state;
mod support;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

use crate::Backoff;
use tokio::sync::{Semaphore, broadcast, watch};
use tokio::task::JoinSet;
use tokio_util::sync::{CancellationToken, DropGuard};

pub use catalog::{CatalogChanges, FleetCatalog, ListChanges, QualifiedEntry};
pub use config::{
    LoadedConfig, MAX_EXPANDED_VALUE, Skipped, parse_mcp_servers, parse_mcp_servers_with,
};
pub use notify::ServerNotification;
pub use ready::Readiness;
pub use reconcile::ApplyReport;
pub use slot::ServerShutdown;
pub use spec::{
    MAX_NAME_LEN, MAX_QUALIFIED_LEN, SEPARATOR, ServerSpec, qualify, qualify_uri, split_qualified,
};
pub use state::{FleetEvent, SlotState};

use crate::escape_server_text as escape;
use crate::{Error, MemoryPool, Reaper, RequestOptions, Result};
use catalog::Hub;
use clients::ClientCache;
use notify::Notices;
use requests::Requests;
use slot::{Policy, Slot};
use support::lock;

/// The slots' tasks, each ending with its slot's id and outcome.
type Tasks = JoinSet<(u64, ServerShutdown)>;

/// The most events [`FleetBuilder::event_capacity`] keeps: a larger
/// capacity is cut to this.
pub const MAX_EVENT_CAPACITY: usize = 1 << 16;

/// The default of [`FleetBuilder::max_servers`].
pub const DEFAULT_MAX_SERVERS: usize = 1000;

/// The default of [`FleetBuilder::concurrent_connects`].
pub const DEFAULT_CONCURRENT_CONNECTS: usize = 64;

/// The default of [`FleetBuilder::memory`]: 256 MiB.
pub const DEFAULT_FLEET_MEMORY: usize = 256 * 1024 * 1024;

/// The default of [`FleetBuilder::notification_capacity`].
pub const DEFAULT_NOTIFICATION_CAPACITY: usize = 1024;

/// The default of [`FleetBuilder::notification_memory`]: 16 MiB.
pub const DEFAULT_NOTIFICATION_MEMORY: usize = 16 * 1024 * 1024;

/// Settings of a [`Fleet`], each with its default.
#[derive(Clone, Debug)]
#[must_use]
pub struct FleetBuilder {
    policy: Policy,
    event_capacity: usize,
    shutdown_timeout: Duration,
    max_servers: usize,
    concurrent_connects: usize,
    memory: usize,
    notification_capacity: usize,
    notification_memory: usize,
    requests: Requests,
    reaper: Option<Reaper>,
}

impl Default for FleetBuilder {
    fn default() -> Self {
        FleetBuilder {
            policy: Policy {
                backoff: Backoff::default(),
                health_interval: Some(Duration::from_secs(30)),
                health_timeout: Duration::from_secs(10),
                stable_after: Duration::from_secs(60),
            },
            event_capacity: 1024,
            shutdown_timeout: Duration::from_secs(10),
            max_servers: DEFAULT_MAX_SERVERS,
            concurrent_connects: DEFAULT_CONCURRENT_CONNECTS,
            memory: DEFAULT_FLEET_MEMORY,
            notification_capacity: DEFAULT_NOTIFICATION_CAPACITY,
            notification_memory: DEFAULT_NOTIFICATION_MEMORY,
            requests: Requests::default(),
            reaper: None,
        }
    }
}

impl FleetBuilder {
    /// The retry delays. Default: [`Backoff::default`] (500 ms doubling up
    /// to 60 s, full jitter).
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.policy.backoff = backoff;
        self
    }

    /// How often a ready slot pings its server to notice a loss when no
    /// call does; `None` for never (a loss is then noticed by calls only).
    /// Default: 30 s.
    pub fn health_interval(mut self, every: Option<Duration>) -> Self {
        self.policy.health_interval = every;
        self
    }

    /// How long a health `ping` may take before the session counts as
    /// lost. Default: 10 s.
    pub fn health_timeout(mut self, timeout: Duration) -> Self {
        self.policy.health_timeout = timeout;
        self
    }

    /// How long a session must stay up (and have answered a request) for
    /// its loss to start the attempt count anew. A session lost sooner
    /// counts as one more failure, so a server that answers a `ping` and
    /// then drops every session backs off to the cap like one that is
    /// down, instead of being reconnected at the first backoff for ever.
    /// Default: 60 s (the default backoff's cap: a slot whose sessions
    /// keep failing opens at most about one a minute, whether they fail
    /// at once or after a while).
    pub fn stable_after(mut self, period: Duration) -> Self {
        self.policy.stable_after = period;
        self
    }

    /// The most servers (enabled ones: each is a slot, a task and a
    /// session) the fleet runs: [`Fleet::apply`] refuses a larger set
    /// whole, with [`Error::is_limit`], before anything changes. At
    /// least one. Default: [`DEFAULT_MAX_SERVERS`] (1000: far above a
    /// host's tens of servers, while each slot may hold a session with its
    /// own memory budget, a connection and a health `ping` every
    /// interval).
    pub fn max_servers(mut self, max: usize) -> Self {
        self.max_servers = max.max(1);
        self
    }

    /// The most connects that run at once, across every slot: a slot
    /// holds one of these permits from the start of a connect (the first
    /// or a retry) until it is ready or has failed, and waits for one in
    /// [`SlotState::Starting`] (in turn, first come first served). A slot
    /// stopped meanwhile gives its permit back, or its place in the line,
    /// at once. At least one. Default: [`DEFAULT_CONCURRENT_CONNECTS`]
    /// (64).
    ///
    /// A server that never answers holds a permit until its
    /// [`connect_timeout`](ServerSpec::connect_timeout): with many such
    /// servers, a larger bound lets the others through sooner.
    pub fn concurrent_connects(mut self, max: usize) -> Self {
        self.concurrent_connects = max.max(1);
        self
    }

    /// Events kept for the slowest reader of [`Fleet::events`]; older ones
    /// are dropped for it (it is told how many). At least 1, at most
    /// [`MAX_EVENT_CAPACITY`] (the buffer is allocated whole, at once).
    /// Default: 1024.
    pub fn event_capacity(mut self, capacity: usize) -> Self {
        self.event_capacity = capacity.clamp(1, MAX_EVENT_CAPACITY);
        self
    }

    /// The bound on [`Fleet::shutdown`]: slots not ended by then are
    /// aborted and their sessions handed to the reaper. Default: 10 s
    /// (above the sessions' default DELETE timeout of 5 s). A timeout of
    /// a century or more (`Duration::MAX`) waits as long as the slots take.
    pub fn shutdown_timeout(mut self, timeout: Duration) -> Self {
        // A deadline of now + `Duration::MAX` would overflow.
        const CENTURY: Duration = Duration::from_secs(100 * 365 * 24 * 3600);
        self.shutdown_timeout = timeout.min(CENTURY);
        self
    }

    /// The most bytes all the fleet's sessions hold together, counted as
    /// each session counts against its own
    /// [`MemoryBudget::max_bytes`](crate::MemoryBudget::max_bytes) (its
    /// catalog, and every message while it reads and holds it): each
    /// session draws from this budget and from its own share at once, all
    /// or nothing, and gives back to both. A session whose charge the
    /// fleet's budget refuses fails as over its own would, with
    /// [`Error::is_limit`] naming "the fleet's memory budget" and the
    /// server: a connect so refused is retried after the backoff (the
    /// others may have given memory back by then), a routed call fails,
    /// and the other servers keep what they hold. Default:
    /// [`DEFAULT_FLEET_MEMORY`] (256 MiB, four sessions at their default
    /// 64 MiB share; far above what real catalogs take).
    pub fn memory(mut self, max_bytes: usize) -> Self {
        self.memory = max_bytes;
        self
    }

    /// Where the fleet's reaps are counted: each session's DELETE (or
    /// process tree's end) after a stop, and the drain of a fleet dropped
    /// without [`Fleet::shutdown`]. Its owner drains it
    /// ([`Reaper::drain`]); a child of another reaper is drained with that
    /// one too. Default: the process's ([`Reaper::global`], drained by
    /// [`crate::shutdown`]).
    pub fn reaper(mut self, reaper: Reaper) -> Self {
        self.reaper = Some(reaper);
        self
    }

    /// Server notifications kept for the slowest reader of
    /// [`Fleet::notifications`]; older ones are dropped for it (it is told
    /// how many). At least 1, at most [`MAX_EVENT_CAPACITY`]. Default:
    /// [`DEFAULT_NOTIFICATION_CAPACITY`] (1024).
    pub fn notification_capacity(mut self, capacity: usize) -> Self {
        self.notification_capacity = capacity.clamp(1, MAX_EVENT_CAPACITY);
        self
    }

    /// The most bytes (as parsed) the notifications held for
    /// [`Fleet::notifications`]'s readers take together, drawn from the
    /// fleet's [`memory`](Self::memory) too: one that does not fit is
    /// dropped, with a warning (rate-limited). Held from when the fleet
    /// publishes a notification until the stream's buffer and every
    /// reader have let it go. One notification may take at most this
    /// divided by one more than the capacity (rounded up to a power of
    /// two): about 16 KiB by default; a bigger one is dropped, with the
    /// same warning. So a full buffer always fits, and a reader that never
    /// reads cannot stop the stream for the others. Default:
    /// [`DEFAULT_NOTIFICATION_MEMORY`] (16 MiB).
    pub fn notification_memory(mut self, max_bytes: usize) -> Self {
        self.notification_memory = max_bytes;
        self
    }

    /// Answers every server's `sampling/createMessage` with `handler`,
    /// given the asking server's name and the request's params, and
    /// declares the `sampling` capability to every server. It answers
    /// config-file entries and programmatic ones alike (a spec made
    /// [`from_connector`](ServerSpec::from_connector) whose connector
    /// answers sampling itself keeps its own), in every revision: a 2025
    /// server's request, a 2026-07-28 server's input request. Each answer
    /// is bounded as a session bounds it: by the request timeout (60 s by
    /// default) and the session's memory budget. Default: none, and the
    /// capability is not declared (servers are told the method is not
    /// handled).
    pub fn on_sampling<F, Fut>(mut self, handler: F) -> Self
    where
        F: Fn(Arc<str>, Value) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = std::result::Result<Value, crate::jsonrpc::ErrorObject>>
            + Send
            + 'static,
    {
        self.requests.sampling = Some(requests::fleet_handler(handler));
        self
    }

    /// Answers every server's `elicitation/create` with `handler`, as
    /// [`on_sampling`](Self::on_sampling) does sampling, and declares the
    /// `elicitation` capability. Default: none.
    pub fn on_elicitation<F, Fut>(mut self, handler: F) -> Self
    where
        F: Fn(Arc<str>, Value) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = std::result::Result<Value, crate::jsonrpc::ErrorObject>>
            + Send
            + 'static,
    {
        self.requests.elicitation = Some(requests::fleet_handler(handler));
        self
    }

    /// The host's roots (each `{"uri": "file:///...", "name": ...}`), held
    /// by the fleet: every server's `roots/list` is answered with the
    /// roots of the moment, the `roots` capability is declared (with
    /// `listChanged` before 2026-07-28, which has no such notification),
    /// and [`Fleet::set_roots`] changes them. Default: no
    /// roots, the capability not declared, and `set_roots` refused.
    pub fn roots(mut self, roots: Vec<Value>) -> Self {
        self.requests.roots = Some(Arc::new(Mutex::new(Arc::new(Value::Array(roots)))));
        self
    }

    /// The fleet, with no server yet (see [`Fleet::apply`]).
    pub fn build(self) -> Fleet {
        let memory = MemoryPool::builder(self.memory)
            .name("the fleet's memory budget", "FleetBuilder::memory")
            .build();
        Fleet {
            notices: Arc::new(Notices::new(
                self.notification_capacity,
                self.notification_memory,
                &memory,
            )),
            memory,
            reaper: self.reaper.unwrap_or_else(Reaper::global),
            requests: self.requests,
            hub: Arc::new(Hub::new(self.event_capacity)),
            clients: ClientCache::default(),
            policy: self.policy,
            shutdown_timeout: self.shutdown_timeout,
            max_servers: self.max_servers,
            connects: Arc::new(Semaphore::new(
                self.concurrent_connects.min(Semaphore::MAX_PERMITS),
            )),
            slots: Mutex::new(Some(Slots::default())),
            apply: tokio::sync::Mutex::new(()),
            drained: CancellationToken::new(),
        }
    }
}

#[derive(Default)]
struct Slots {
    by_name: BTreeMap<Arc<str>, Arc<Slot>>,
    /// The servers of the last `apply` that are disabled: a call to one is
    /// told so, not that there is no such server.
    disabled: std::collections::BTreeSet<Arc<str>>,
    tasks: Tasks,
}

/// What [`Fleet::shutdown`] did, per server.
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct ShutdownReport {
    /// Each server that had a slot, and what became of it.
    pub servers: BTreeMap<String, ServerShutdown>,
    /// True when an earlier shutdown had already stopped everything.
    pub already_shut_down: bool,
}

/// Many named MCP servers under one owner: see the [module docs](self).
///
/// Every method takes `&self`: share it as `Arc<Fleet>`. The fleet owns
/// its slots. Dropping it runs [`shutdown`](Self::shutdown)'s drain in
/// the background, as a reap that [`crate::shutdown`] waits for (outside
/// a runtime, the slots' tasks are aborted and each session's own drop
/// releases it).
pub struct Fleet {
    /// The pool every slot's session draws from.
    memory: MemoryPool,
    /// Where the slots' reaps, and a dropped fleet's drain, are counted.
    reaper: Reaper,
    /// What the fleet answers to its servers' requests.
    requests: Requests,
    hub: Arc<Hub>,
    /// The stream of every server's notifications.
    notices: Arc<Notices>,
    clients: ClientCache,
    policy: Policy,
    shutdown_timeout: Duration,
    /// The most enabled servers [`apply`](Self::apply) takes.
    max_servers: usize,
    /// One permit per connect that may run at once, shared by every slot.
    connects: Arc<Semaphore>,
    /// `None` once shut down.
    slots: Mutex<Option<Slots>>,
    /// Serializes [`apply`](Self::apply).
    apply: tokio::sync::Mutex<()>,
    /// Cancelled once the drain of the first shutdown has ended (or was
    /// handed to the reaper): what a second shutdown waits for.
    drained: CancellationToken,
}

impl Default for Fleet {
    fn default() -> Self {
        Fleet::new()
    }
}

fn shut_down() -> Error {
    Error::closed().context("the fleet is shut down")
}

impl Fleet {
    /// A fleet with the default settings (see [`FleetBuilder`]).
    pub fn new() -> Fleet {
        FleetBuilder::default().build()
    }

    /// Settings for a fleet.
    pub fn builder() -> FleetBuilder {
        FleetBuilder::default()
    }

    /// Reconciles the fleet with `servers`, the full desired set: a server
    /// not in it is stopped.
    ///
    /// By name: a server not running is started; one whose spec is the
    /// same server ([`ServerSpec`] says when) is left alone, its session
    /// untouched (a change of `required` applies at once); one whose spec
    /// changed is replaced: the old slot is stopped and the new one started
    /// at the same moment; a removed or disabled one is stopped, whatever
    /// it was doing (connecting, ready, waiting to retry).
    ///
    /// Returns once every stopped or replaced slot's task has ended (each
    /// closing its session within its DELETE timeout): from then on no
    /// request of the fleet's reaches a stopped server. New slots are
    /// started, not waited for (see [`ready`](Self::ready)).
    ///
    /// Concurrent calls are serialized, each applied whole. An invalid set
    /// (a bad name, a name twice; see [`qualify`]) is refused with
    /// [`Error::is_builder`], and one of more enabled servers than
    /// [`max_servers`](FleetBuilder::max_servers) with [`Error::is_limit`]
    /// naming the bound, before anything changes; after
    /// [`shutdown`](Self::shutdown), [`Error::is_closed`].
    ///
    /// # Cancellation
    ///
    /// Dropping the future before its turn changes nothing; once it has
    /// begun, the change is made whole at once (no await in between), and
    /// dropping it only stops the wait for the stopped slots, which end on
    /// their own, still owned by the fleet.
    pub async fn apply<I, N>(&self, servers: I) -> Result<ApplyReport>
    where
        I: IntoIterator<Item = (N, ServerSpec)>,
        N: Into<String>,
    {
        let desired = reconcile::desired(servers.into_iter().map(|(n, s)| (n.into(), s)))?;
        let enabled = desired.values().filter(|spec| spec.is_enabled()).count();
        if enabled > self.max_servers {
            return Err(Error::limit(format!(
                "{enabled} servers enabled, more than the fleet's maximum of {} \
                 (FleetBuilder::max_servers); nothing was applied",
                self.max_servers
            )));
        }
        let _turn = self.apply.lock().await;
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|_| Error::builder("Fleet::apply needs a tokio runtime"))?;
        let (report, finished) = {
            let mut guard = lock(&self.slots);
            let slots = guard.as_mut().ok_or_else(shut_down)?;
            // Slots that ended long ago leave the set.
            while slots.tasks.try_join_next().is_some() {}
            slots.disabled = desired
                .iter()
                .filter(|(_, spec)| !spec.is_enabled())
                .map(|(name, _)| name.clone())
                .collect();
            let plan = reconcile::plan(&slots.by_name, desired);
            let mut finished = Vec::with_capacity(plan.stop.len());
            for slot in plan.stop {
                slot.stop.cancel();
                slots.by_name.remove(&slot.name);
                finished.push(slot.finished.clone());
            }
            for slot in plan.refilter {
                let filter = lock(&slot.tools).clone();
                self.hub.set_filter(&slot.name, slot.id, &filter);
            }
            for (name, spec) in plan.start {
                let slot = Arc::new(Slot::new(
                    name.clone(),
                    spec,
                    &self.clients,
                    &self.memory,
                    &self.reaper,
                    &self.notices,
                    &self.requests,
                ));
                // Before it runs: from now on the name's events and lists
                // are this slot's, not those of the slot it replaces.
                self.hub.claim(&name, slot.id, slot.spec.tool_filter());
                slots.tasks.spawn_on(
                    slot::run(
                        slot.clone(),
                        self.hub.clone(),
                        self.policy.clone(),
                        self.connects.clone(),
                    ),
                    &runtime,
                );
                slots.by_name.insert(name, slot);
            }
            (plan.report, finished)
        };
        for finished in finished {
            finished.cancelled().await;
        }
        Ok(report)
    }

    fn slot(&self, server: &str) -> Result<Arc<Slot>> {
        let guard = lock(&self.slots);
        let slots = guard.as_ref().ok_or_else(shut_down)?;
        if let Some(slot) = slots.by_name.get(server) {
            return Ok(slot.clone());
        }
        if slots.disabled.contains(server) {
            return Err(Error::closed()
                .context(format!(
                    "server `{server}` is disabled in the fleet's configuration"
                ))
                .plainly());
        }
        Err(Error::builder(format!("no server named `{server}` in the fleet")).plainly())
    }

    /// Calls `tool` of `server` with `arguments`, on the slot's current
    /// session.
    ///
    /// - A server not in the fleet: [`Error::is_builder`], at once; one
    ///   disabled by the last [`apply`](Self::apply): [`Error::is_closed`],
    ///   saying so.
    /// - A server not ready: [`Error::is_closed`], at once, naming its
    ///   state (the call is not queued).
    /// - A call whose session is lost under it (a transport failure, or
    ///   the session closed by a stop) fails with that error, which says
    ///   the call may or may not have run; it is never sent again, to
    ///   this session or the next. The slot then connects anew.
    /// - Otherwise the tool's result or the session's error, as
    ///   [`Session::call_tool`](crate::Session::call_tool) gives them.
    pub async fn call_tool(&self, server: &str, tool: &str, arguments: Value) -> Result<Value> {
        self.call_tool_with(server, tool, arguments, RequestOptions::default())
            .await
    }

    /// [`call_tool`](Self::call_tool) with per-call options: a progress
    /// callback, a timeout, `_meta` (see [`RequestOptions`]), as
    /// [`Session::call_tool_with`](crate::Session::call_tool_with) takes
    /// them. Routed the same way: at once, never sent twice.
    pub async fn call_tool_with(
        &self,
        server: &str,
        tool: &str,
        arguments: Value,
        options: RequestOptions,
    ) -> Result<Value> {
        let params = serde_json::json!({ "name": tool, "arguments": arguments });
        self.routed(server, "tools/call", Some(tool), Some(params), options)
            .await
    }

    /// Sends any request (`prompts/get`, `resources/read`, ...) to
    /// `server`'s current session, as [`call_tool`](Self::call_tool) does:
    /// at once, never sent twice. The lifecycle's methods are refused (see
    /// [`Session::request`](crate::Session::request)).
    pub async fn request(
        &self,
        server: &str,
        method: &str,
        params: Option<Value>,
    ) -> Result<Value> {
        self.request_with(server, method, params, RequestOptions::default())
            .await
    }

    /// [`request`](Self::request) with per-call options (see
    /// [`RequestOptions`]).
    pub async fn request_with(
        &self,
        server: &str,
        method: &str,
        params: Option<Value>,
        options: RequestOptions,
    ) -> Result<Value> {
        self.routed(server, method, None, params, options).await
    }

    /// `prompts/get` of `server`'s prompt `name` (see [`request`](Self::request)).
    pub async fn get_prompt(&self, server: &str, name: &str, arguments: Value) -> Result<Value> {
        let params = serde_json::json!({ "name": name, "arguments": arguments });
        self.routed(
            server,
            "prompts/get",
            Some(name),
            Some(params),
            RequestOptions::default(),
        )
        .await
    }

    /// `resources/read` of `uri` on `server` (see [`request`](Self::request)).
    pub async fn read_resource(&self, server: &str, uri: &str) -> Result<Value> {
        let params = serde_json::json!({ "uri": uri });
        self.routed(
            server,
            "resources/read",
            None,
            Some(params),
            RequestOptions::default(),
        )
        .await
    }

    /// A request on `server`'s current session; a loss under it is
    /// reported to the slot and said to the caller.
    async fn routed(
        &self,
        server: &str,
        method: &str,
        name: Option<&str>,
        params: Option<Value>,
        options: RequestOptions,
    ) -> Result<Value> {
        let slot = self.slot(server)?;
        if method == "tools/call" {
            let tool = name.or_else(|| params.as_ref()?.get("name")?.as_str());
            if let Some(tool) = tool.filter(|tool| !self.hub.offers(server, tool)) {
                return Err(Error::builder(format!(
                    "tool `{tool}` of server `{server}` is not offered: the fleet's \
                     configuration filters it out (enabledTools, disabledTools)"
                ))
                .plainly());
            }
        }
        let Some(live) = slot.live() else {
            return Err(Error::closed()
                .context(format!("server `{server}` is not ready ({})", slot.state())));
        };
        match live.session.request_with(method, params, options).await {
            Ok(result) => {
                live.prove();
                Ok(result)
            }
            Err(error) if error.is_transport() || error.is_closed() => {
                live.lose(&error);
                let what = name.unwrap_or(method);
                Err(error.context(format!(
                    "server `{server}`: the session was lost during `{what}`, which may or may \
                     not have run; it is not sent again"
                )))
            }
            // Over a memory budget, the session's or the fleet's: which
            // server's answer it was.
            Err(error) if error.is_limit() => Err(error.context(format!("server `{server}`"))),
            Err(error) => {
                if error.rpc_error().is_some() {
                    // The server answered: the session works.
                    live.prove();
                }
                Err(error)
            }
        }
    }

    /// [`call_tool`](Self::call_tool), after waiting up to `wait` for a
    /// slot that is connecting or waiting to retry to be ready: for a
    /// caller that would rather wait than fail at once. A slot in
    /// [`SlotState::AuthRequired`] or [`SlotState::Failed`] is not waited
    /// for (no retry comes by itself); `wait` passing fails with
    /// [`Error::is_timeout`], naming the slot's state. A server replaced
    /// meanwhile (its spec changed) is waited for in its new slot. The wait
    /// is not part of the call's own timeout.
    pub async fn call_tool_waiting(
        &self,
        server: &str,
        tool: &str,
        arguments: Value,
        wait: Duration,
    ) -> Result<Value> {
        self.call_tool_waiting_with(server, tool, arguments, wait, RequestOptions::default())
            .await
    }

    /// [`call_tool_waiting`](Self::call_tool_waiting) with per-call options
    /// (see [`RequestOptions`]); the wait is not part of their timeout.
    pub async fn call_tool_waiting_with(
        &self,
        server: &str,
        tool: &str,
        arguments: Value,
        wait: Duration,
        options: RequestOptions,
    ) -> Result<Value> {
        // `None`: too far to say (`Duration::MAX`), so no bound.
        let deadline = tokio::time::Instant::now().checked_add(wait);
        let mut slot = self.slot(server)?;
        loop {
            let settled = slot.settled();
            let timed_out = match deadline {
                Some(deadline) => tokio::time::timeout_at(deadline, settled).await.is_err(),
                None => {
                    let _ = settled.await;
                    false
                }
            };
            if timed_out {
                return Err(Error::timeout(format!(
                    "server `{server}` not ready within {wait:?} ({})",
                    slot.state()
                )));
            }
            // Replaced meanwhile (a reload changed its spec): the wait is
            // for the server, so for its new slot, within the same bound.
            match self.replacement(&slot) {
                Some(next) if matches!(slot.state(), SlotState::Stopped) => slot = next,
                _ => break,
            }
        }
        self.call_tool_with(server, tool, arguments, options).await
    }

    /// [`call_tool`](Self::call_tool) by the tool's qualified name, as in
    /// [`catalog`](Self::catalog) (see [`qualify`]): the name a model was
    /// given, routed by [`tool_of`](Self::tool_of).
    pub async fn call_qualified(&self, qualified: &str, arguments: Value) -> Result<Value> {
        let Some((server, tool)) = self.tool_of(qualified) else {
            let shown: String = qualified.chars().take(MAX_QUALIFIED_LEN).collect();
            return Err(Error::builder(format!(
                "no tool `{shown}` in the fleet's catalog, and no qualified tool name (`server{SEPARATOR}tool`)"
            ))
            .plainly());
        };
        self.call_tool(&server, &tool, arguments).await
    }

    /// The server and tool a qualified tool name routes to: the catalog's
    /// entry of that name; else, for a server not ready (not in the
    /// catalog), the name split at its first `__` when that names a server
    /// of the fleet and is how its names are made (its name plain, the
    /// tool's too: `qualify` gives the name back), so that its slot says
    /// it is not ready. A name shaped as one `qualify` changed (ending
    /// with `_` and 10 hex digits) routes only through the catalog: it
    /// never splits into another server's, nor into a tool of another
    /// name.
    pub fn tool_of(&self, qualified: &str) -> Option<(String, String)> {
        let catalog = self.catalog();
        if let Some(entry) = catalog.tool(qualified) {
            return Some((entry.server.to_owned(), entry.name()?.to_owned()));
        }
        if spec::looks_changed(qualified) {
            return None;
        }
        let (server, tool) = split_qualified(qualified)?;
        (spec::is_plain_server(server)
            && qualify(server, tool) == qualified
            && self.slot(server).is_ok())
        .then(|| (server.to_owned(), tool.to_owned()))
    }

    /// Asks `server` for log messages of `level` and above
    /// (`logging/setLevel`, routed as [`request`](Self::request)); they
    /// come on [`notifications`](Self::notifications). For the current
    /// session only: after a reconnect, the spec's
    /// [`log_level`](ServerSpec::log_level), if any, is what is asked for.
    /// A 2026-07-28 server has no `logging/setLevel` (the level goes with
    /// each request, from the spec's `log_level`): refused with
    /// [`Error::is_builder`], nothing sent.
    pub async fn set_log_level(&self, server: &str, level: &str) -> Result<()> {
        let modern = self
            .slot(server)?
            .live()
            .is_some_and(|live| live.session.protocol_version().is_modern());
        if modern {
            return Err(Error::builder(format!(
                "server `{server}` speaks 2026-07-28, which has no logging/setLevel: \
                 the level goes with each request (ServerSpec::log_level, logLevel)"
            )));
        }
        let params = serde_json::json!({ "level": level });
        self.request(server, "logging/setLevel", Some(params))
            .await
            .map(drop)
    }

    /// Sends `server` the notification `method` with `params` (on its
    /// ready session, bounded by its request timeout): a host's own
    /// notification, or one the fleet does not send for it. Fails as
    /// [`request`](Self::request) does when the server is not ready;
    /// lifecycle methods (`notifications/initialized`, ...) are refused.
    pub async fn notify(&self, server: &str, method: &str, params: Option<Value>) -> Result<()> {
        let slot = self.slot(server)?;
        let Some(live) = slot.live() else {
            return Err(Error::closed()
                .context(format!("server `{server}` is not ready ({})", slot.state())));
        };
        live.session
            .notify(method, params)
            .await
            .map_err(|error| error.context(format!("server `{server}`")))
    }

    /// Replaces the roots the fleet answers `roots/list` with (declared
    /// with [`FleetBuilder::roots`]), and tells every ready server that
    /// has them (not one whose spec's connector answers roots itself) of
    /// a revision that has it (before 2026-07-28) with
    /// `notifications/roots/list_changed`, all at once, each bounded by
    /// the fleet's [`health_timeout`](FleetBuilder::health_timeout). A
    /// server connecting meanwhile is told once it is ready; one that
    /// connects later reads the new roots. A 2026-07-28 server asks with
    /// each request that needs them. Returns the servers told. Fails with
    /// [`Error::is_builder`] when the fleet declared no roots (its servers
    /// were told the client has none, and would not ask).
    ///
    /// Cancel safety: the roots are replaced before the first await;
    /// dropping the future leaves some servers untold.
    pub async fn set_roots(&self, roots: Vec<Value>) -> Result<Vec<String>> {
        if !self.requests.set_roots(roots) {
            return Err(Error::builder(
                "the fleet declared no roots: set them first with FleetBuilder::roots",
            ));
        }
        let ready: Vec<(Arc<Slot>, Arc<slot::Live>)> = {
            let guard = lock(&self.slots);
            let slots = guard.as_ref().ok_or_else(shut_down)?;
            slots
                .by_name
                .values()
                .filter_map(|slot| Some((slot.clone(), slot.live()?)))
                .collect()
        };
        let limit = self.policy.health_timeout;
        let told =
            futures_util::future::join_all(ready.into_iter().map(|(slot, live)| async move {
                slot::tell_roots_changed(&slot, &live, limit)
                    .await
                    .then(|| slot.name.to_string())
            }))
            .await;
        Ok(told.into_iter().flatten().collect())
    }

    /// Wakes `server`'s slot: one waiting to retry, or in
    /// [`SlotState::AuthRequired`] or [`SlotState::Failed`], connects at
    /// once with its attempt count reset; a ready one closes its session
    /// and opens a new one; one connecting is left alone.
    pub fn reconnect(&self, server: &str) -> Result<()> {
        let slot = self.slot(server)?;
        if !matches!(slot.state(), SlotState::Starting | SlotState::Stopped) {
            slot.wake.notify_one();
        }
        Ok(())
    }

    /// The state of `server`'s slot, if it has one.
    pub fn state(&self, server: &str) -> Option<SlotState> {
        self.slot(server).ok().map(|slot| slot.state())
    }

    /// What `server` said about itself in the handshake of the session in
    /// use: its negotiated revision, `serverInfo`, `instructions` (hosts
    /// put them into the model's system prompt) and capabilities, as the
    /// server sent them ([`SessionInfo`](crate::SessionInfo)). `Some` while
    /// calls are routed to a session: from just before the slot's
    /// [`Ready`](SlotState::Ready) is announced until it leaves that state;
    /// `None` otherwise, and for a name the fleet does not have. A renewed
    /// session's info is announced with [`FleetEvent::Renewed`]; a
    /// reconnect's comes with its `Ready`.
    pub fn info(&self, server: &str) -> Option<Arc<crate::SessionInfo>> {
        let live = self.slot(server).ok()?.live()?;
        Some(live.session.info())
    }

    /// The state of every slot, by server name.
    pub fn states(&self) -> BTreeMap<String, SlotState> {
        let guard = lock(&self.slots);
        guard
            .iter()
            .flat_map(|slots| slots.by_name.iter())
            .map(|(name, slot)| (name.to_string(), slot.state()))
            .collect()
    }

    /// The state of `server`'s slot as it changes (the latest one only: a
    /// `watch`). Ends with [`SlotState::Stopped`] when the slot stops.
    pub fn watch(&self, server: &str) -> Option<watch::Receiver<SlotState>> {
        self.slot(server).ok().map(|slot| slot.watch())
    }

    /// Every slot's state changes, every catalog change and every session
    /// renewal ([`FleetEvent`]), from now on,
    /// until [`shutdown`](Self::shutdown) has ended (then the stream ends
    /// too, after the events still buffered). Bounded (see [`FleetBuilder::event_capacity`]): a reader that falls
    /// behind gets [`RecvError::Lagged`](broadcast::error::RecvError::Lagged)
    /// with the number of events it lost, then the newest ones.
    pub fn events(&self) -> broadcast::Receiver<FleetEvent> {
        self.hub.subscribe()
    }

    /// Every notification the fleet's servers send on their own, from now
    /// on, each with its server's name: log messages
    /// (`notifications/message`), resource updates, list changes, progress
    /// not tied to a call (a call's own goes to its
    /// [`on_progress`](RequestOptions::on_progress)). Until
    /// [`shutdown`](Self::shutdown) has ended (then the stream ends, after
    /// what is still buffered).
    ///
    /// Bounded in count ([`FleetBuilder::notification_capacity`]) and in
    /// bytes ([`FleetBuilder::notification_memory`], charged to the
    /// fleet's memory budget while held): a reader that falls behind gets
    /// [`RecvError::Lagged`](broadcast::error::RecvError::Lagged) with the
    /// number it lost, then the newest; the fleet never waits for it. With
    /// no reader, notifications are dropped as they come.
    pub fn notifications(&self) -> broadcast::Receiver<ServerNotification> {
        self.notices.subscribe()
    }

    /// The merged catalog of every ready server, now.
    pub fn catalog(&self) -> Arc<FleetCatalog> {
        self.hub.catalog()
    }

    /// Stops every slot at once and waits for them, within the fleet's
    /// [`shutdown_timeout`](FleetBuilder::shutdown_timeout): connects are
    /// cancelled, waits ended, ready sessions closed (DELETEd while their
    /// hooks and client are alive). A slot not ended by the deadline is
    /// aborted and its session handed to the reaper; the report says
    /// [`ServerShutdown::TimedOut`].
    ///
    /// Afterwards the fleet refuses [`apply`](Self::apply) and calls
    /// ([`Error::is_closed`]); a second shutdown reports
    /// [`ShutdownReport::already_shut_down`], once the first one's drain
    /// has ended (or was handed to the reaper, see below).
    ///
    /// # Cancellation
    ///
    /// Every slot is told to stop at the first poll. Dropping the future
    /// then does not cut the drain short: the rest of it runs in the
    /// background, within the same deadline, as a reap that
    /// [`crate::shutdown`] waits for.
    pub async fn shutdown(&self) -> ShutdownReport {
        let Some(slots) = lock(&self.slots).take() else {
            // Another shutdown is draining: the fleet is shut down once it
            // is done.
            self.drained.cancelled().await;
            self.hub.close();
            self.notices.close();
            return ShutdownReport {
                already_shut_down: true,
                ..ShutdownReport::default()
            };
        };
        let mut drain = Drain::new(slots, self.shutdown_timeout, &self.drained, &self.reaper);
        let servers = drain.run().await;
        // Every slot has said `stopped` (or was aborted): the stream ends.
        self.hub.close();
        self.notices.close();
        ShutdownReport {
            servers,
            already_shut_down: false,
        }
    }
}

/// Stopping every slot, with one deadline. Dropped before it has finished
/// (the fleet dropped, or `shutdown`'s future), it hands the rest to a
/// reap that [`crate::shutdown`] waits for.
struct Drain {
    slots: Option<Slots>,
    deadline: tokio::time::Instant,
    /// Whom the rest is handed to if dropped unfinished.
    reaper: Reaper,
    /// Cancels the fleet's `drained` when dropped: once the drain is done,
    /// or with the reap it was handed to.
    drained: Option<DropGuard>,
}

impl Drain {
    /// Tells every slot to stop, at once.
    fn new(slots: Slots, timeout: Duration, drained: &CancellationToken, reaper: &Reaper) -> Drain {
        for slot in slots.by_name.values() {
            slot.stop.cancel();
        }
        Drain {
            slots: Some(slots),
            deadline: tokio::time::Instant::now() + timeout,
            reaper: reaper.clone(),
            drained: Some(drained.clone().drop_guard()),
        }
    }

    /// Waits for the slots until the deadline, then aborts the rest (their
    /// sessions go to the reaper); the outcome per server.
    async fn run(&mut self) -> BTreeMap<String, ServerShutdown> {
        let mut servers = BTreeMap::new();
        let Some(slots) = self.slots.as_mut() else {
            return servers;
        };
        // By slot id: the set also holds slots stopped earlier (removed or
        // replaced), which are no longer the fleet's servers.
        let names: BTreeMap<u64, Arc<str>> = slots
            .by_name
            .values()
            .map(|slot| (slot.id, slot.name.clone()))
            .collect();
        join_until(&mut slots.tasks, self.deadline, |id, outcome| {
            if let Some(name) = names.get(&id) {
                servers.insert(name.to_string(), outcome);
            }
        })
        .await;
        for name in names.values() {
            servers
                .entry(name.to_string())
                .or_insert(ServerShutdown::TimedOut);
        }
        self.drained.take();
        servers
    }
}

/// Joins `tasks` until `deadline`, then aborts the rest and waits for the
/// aborts (at once: an aborted task ends at its next poll).
async fn join_until(
    tasks: &mut Tasks,
    deadline: tokio::time::Instant,
    mut outcome: impl FnMut(u64, ServerShutdown),
) {
    while let Ok(Some(joined)) = tokio::time::timeout_at(deadline, tasks.join_next()).await {
        if let Ok((id, ended)) = joined {
            outcome(id, ended);
        }
    }
    tasks.abort_all();
    while tasks.join_next().await.is_some() {}
}

impl Drop for Drain {
    fn drop(&mut self) {
        let Some(mut slots) = self.slots.take() else {
            return;
        };
        if slots.tasks.is_empty() {
            return;
        }
        let deadline = self.deadline;
        let drained = self.drained.take();
        let rest = async move {
            join_until(&mut slots.tasks, deadline, |_, _| {}).await;
            drop(drained);
        };
        // A second past the deadline: the aborts after it are immediate.
        let bound = deadline.saturating_duration_since(tokio::time::Instant::now())
            + Duration::from_secs(1);
        // Without a runtime, `rest` is dropped, and with it the set, which
        // aborts every task: their sessions' own drops do the rest.
        self.reaper.reap(bound, rest);
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        // The same drain as `shutdown`, handed to the reaper: the slots
        // close their sessions (DELETEs included) in the background, and
        // `crate::shutdown` waits for them.
        if let Some(slots) = lock(&self.slots).take() {
            drop(Drain::new(
                slots,
                self.shutdown_timeout,
                &self.drained,
                &self.reaper,
            ));
        }
    }
}

impl std::fmt::Debug for Fleet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fleet")
            .field("servers", &self.states())
            .field("catalog_generation", &self.catalog().generation)
            .finish_non_exhaustive()
    }
}
