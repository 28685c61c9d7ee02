//! A slot: one server, one owner task for its whole life.
//!
//! The owner task is the only code that connects, closes or waits for the
//! slot: a failed connect is a state of the slot, never an error that
//! drops ownership, and every wait (backoff, auth, failure) happens inside
//! it, where a stop reaches it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::broadcast::error::RecvError;
use tokio::sync::{Notify, Semaphore, watch};
use tokio_util::sync::CancellationToken;

use super::catalog::Hub;
use super::clients::{ClientCache, SlotClient};
use super::lock;
use super::notify::Notices;
use super::requests::Requests;
use super::spec::{ServerSpec, ToolFilter};
use super::state::SlotState;
use crate::Backoff;
use crate::{
    Error, MemoryPool, ProtocolVersion, Reaper, Released, RequestOptions, Session, SessionEvent,
    SessionId, SessionInfo, TaskCount,
};

/// The fleet-wide settings a slot runs by.
#[derive(Clone, Debug)]
pub(crate) struct Policy {
    pub(crate) backoff: Backoff,
    pub(crate) health_interval: Option<Duration>,
    pub(crate) health_timeout: Duration,
    /// How long a proven session must have been up for its loss to reset
    /// the attempt count.
    pub(crate) stable_after: Duration,
}

/// What became of one server's slot at shutdown.
#[derive(Debug)]
#[non_exhaustive]
pub enum ServerShutdown {
    /// It was ready: its session was closed (DELETEd if owned).
    Closed(Released),
    /// It had no session (connecting, waiting to retry, failed): nothing
    /// to close. A connect in flight was cancelled, and a server session
    /// it had created was DELETEd (by a reap the slot waited for, within
    /// its DELETE timeout) before the slot ended.
    NoSession,
    /// It did not end within the shutdown's deadline: its task was
    /// aborted, and its session is DELETEd by the reaper.
    TimedOut,
}

/// A session that is up, shared by the owner task and the calls routed to
/// it.
pub(crate) struct Live {
    pub(crate) session: Session,
    lost: CancellationToken,
    lost_error: Mutex<Option<Arc<Error>>>,
    proven: AtomicBool,
    /// The session's id when it connected: a renewal is told with the id
    /// it replaced, even one before the slot heard its session's events.
    connected_id: Option<SessionId>,
}

impl Live {
    /// Tells the owner task the session is gone (the first report wins).
    pub(crate) fn lose(&self, error: &Error) {
        lock(&self.lost_error).get_or_insert_with(|| Arc::new(error.duplicate()));
        self.lost.cancel();
    }

    /// The session answered a request: a loss once it has been up for the
    /// policy's `stable_after` starts the attempt count anew.
    pub(crate) fn prove(&self) {
        self.proven.store(true, Ordering::Release);
    }
}

/// The slot's shared part: what the fleet reads, and how it reaches the
/// owner task.
pub(crate) struct Slot {
    /// Unique in the process: a replaced slot and its successor share a
    /// name, never an id.
    pub(crate) id: u64,
    pub(crate) name: Arc<str>,
    pub(crate) spec: ServerSpec,
    pub(crate) required: AtomicBool,
    /// Whether its session answers `roots/list` with the fleet's roots
    /// (its spec's connector brought none of its own).
    pub(crate) answers_roots: AtomicBool,
    /// The tools offered: the spec's filter, or the one a later `apply`
    /// of the same server set.
    pub(crate) tools: Mutex<Arc<ToolFilter>>,
    /// Where the owner task gets its connector (and, with it, its hold on
    /// the fleet's owned client for the spec's settings).
    clients: ClientCache,
    /// The fleet's memory pool, which each session draws from too.
    memory: MemoryPool,
    /// The fleet's reaper: each connect's is a child of it.
    reaper: Reaper,
    /// Where the session's notifications go.
    notices: Arc<Notices>,
    /// What the fleet answers to the server's requests.
    requests: Requests,
    state: watch::Sender<SlotState>,
    /// Latched true the first time the slot leaves `Starting` (its first
    /// attempt has ended, one way or another): what `Fleet::ready` waits
    /// for. A `watch`, so a waiter that subscribes late still sees it.
    first_settled: watch::Sender<bool>,
    live: Mutex<Option<Arc<Live>>>,
    /// Cancelled to stop the slot, whatever it is doing.
    pub(crate) stop: CancellationToken,
    /// Wakes a waiting slot ([`super::Fleet::reconnect`]).
    pub(crate) wake: Notify,
    /// Cancelled when the owner task has ended (or was dropped).
    pub(crate) finished: CancellationToken,
}

impl Slot {
    pub(crate) fn new(
        name: Arc<str>,
        spec: ServerSpec,
        clients: &ClientCache,
        memory: &MemoryPool,
        reaper: &Reaper,
        notices: &Arc<Notices>,
        requests: &Requests,
    ) -> Slot {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        Slot {
            id: NEXT.fetch_add(1, Ordering::Relaxed),
            name,
            required: AtomicBool::new(spec.is_required()),
            answers_roots: AtomicBool::new(false),
            tools: Mutex::new(spec.tool_filter().clone()),
            clients: clients.clone(),
            memory: memory.clone(),
            reaper: reaper.clone(),
            notices: notices.clone(),
            requests: requests.clone(),
            spec,
            state: watch::Sender::new(SlotState::Starting),
            first_settled: watch::Sender::new(false),
            live: Mutex::new(None),
            stop: CancellationToken::new(),
            wake: Notify::new(),
            finished: CancellationToken::new(),
        }
    }

    pub(crate) fn state(&self) -> SlotState {
        self.state.borrow().clone()
    }

    pub(crate) fn watch(&self) -> watch::Receiver<SlotState> {
        self.state.subscribe()
    }

    /// Waits until the slot has settled (neither starting nor retrying),
    /// or its task has ended: a task aborted by a shutdown's deadline never
    /// says [`SlotState::Stopped`], and would be waited for for ever. Its
    /// state then (`Stopped` for an ended task).
    pub(crate) async fn settled(&self) -> SlotState {
        let mut watch = self.watch();
        tokio::select! {
            state = watch.wait_for(|state| {
                !matches!(state, SlotState::Starting | SlotState::Retrying { .. })
            }) => state.map(|state| state.clone()).unwrap_or(SlotState::Stopped),
            () = self.finished.cancelled() => match self.state() {
                SlotState::Starting | SlotState::Retrying { .. } => SlotState::Stopped,
                state => state,
            },
        }
    }

    /// Whether the slot's first attempt has ended (it left `Starting`
    /// once), or its task has.
    pub(crate) fn has_settled(&self) -> bool {
        *self.first_settled.borrow() || self.finished.is_cancelled()
    }

    /// Waits until [`has_settled`](Self::has_settled).
    pub(crate) async fn first_settled(&self) {
        let mut settled = self.first_settled.subscribe();
        tokio::select! {
            _ = settled.wait_for(|settled| *settled) => {}
            () = self.finished.cancelled() => {}
        }
    }

    /// The session calls go to, while ready.
    pub(crate) fn live(&self) -> Option<Arc<Live>> {
        lock(&self.live).clone()
    }

    fn set_state(&self, hub: &Hub, state: SlotState) {
        // Bounded logging: a server down for a day writes a few dozen lines,
        // not thousands. Failures 1, 2, 4, 8... at warn, the rest (and the
        // connect before each retry) at debug.
        match &state {
            SlotState::Retrying { attempt, .. } if attempt.is_power_of_two() => {
                tracing::warn!(server = %self.name, %state, "fleet: slot state");
            }
            SlotState::Retrying { .. } | SlotState::Starting => {
                tracing::debug!(server = %self.name, %state, "fleet: slot state");
            }
            SlotState::AuthRequired { .. } | SlotState::Failed { .. } => {
                tracing::warn!(server = %self.name, %state, "fleet: slot state");
            }
            SlotState::Ready | SlotState::Stopped => {
                tracing::info!(server = %self.name, state = state.name(), "fleet: slot state");
            }
        }
        let settles = !matches!(state, SlotState::Starting);
        // Made visible and announced in one hold of the hub's lock, which
        // `Fleet::ready` takes before it returns: whoever reads both finds
        // the event of every state the readiness sums up (and a reader of
        // the event finds the state already set).
        hub.state(&self.name, self.id, state.clone(), || {
            self.state.send_replace(state);
        });
        if settles {
            self.first_settled
                .send_if_modified(|settled| !std::mem::replace(settled, true));
        }
    }
}

/// How a ready session's time ended.
enum End {
    Stop,
    Lost(Arc<Error>),
    Reconnect,
}

/// The owner task of `slot`: runs until the slot is stopped.
pub(crate) async fn run(
    slot: Arc<Slot>,
    hub: Arc<Hub>,
    policy: Policy,
    connects: Arc<Semaphore>,
) -> (u64, ServerShutdown) {
    // Counted as one of the crate's tasks (see the ledger), and marked
    // finished however it ends, aborted included.
    let _task = TaskCount::new();
    let _finished = slot.finished.clone().drop_guard();
    let outcome = supervise(&slot, &hub, &policy, &connects).await;
    hub.set_catalog(&slot.name, slot.id, None);
    slot.set_state(&hub, SlotState::Stopped);
    hub.release(&slot.name, slot.id);
    (slot.id, outcome)
}

async fn supervise(
    slot: &Slot,
    hub: &Hub,
    policy: &Policy,
    connects: &Semaphore,
) -> ServerShutdown {
    // Failures in a row since the last session that answered a request
    // and stayed up for `stable_after`.
    let mut failures: u32 = 0;
    // Got on the first connect and held until the task ends: the owned
    // client goes with the last slot holding it. One that cannot be built
    // is a failed connect (and is asked for again on the next).
    let mut client: Option<SlotClient> = None;
    // Whether `Starting` is out already (a reconnect says it before it
    // closes the old session).
    let mut starting = false;
    loop {
        if !std::mem::take(&mut starting) {
            slot.set_state(hub, SlotState::Starting);
        }
        // Dropping the connect future on a stop is its cancellation: what
        // it created is released, a server session DELETEd by the reaper.
        // Boxed: the slot's future stays small while it is ready (a
        // connect future is about 8 KiB).
        //
        // The fleet's connect permit is taken inside it: held from the
        // start of the connect until it is ready or failed, and given back
        // (or the place in line left) the moment the future is dropped,
        // before the reap of what it created is waited for.
        let refusals = slot.memory.refusals();
        // The roots as the connect may read them: a change from here on,
        // until the slot is routed to, is told to the server below.
        let roots_seen = slot.requests.roots_generation();
        // This connect's own reaper, so that a stop can wait for what this
        // connect left to reap, and for nothing else.
        let reaps = slot.reaper.child();
        let mut connecting = Box::pin(async {
            // The semaphore is never closed: `Err` cannot happen, and would
            // only mean connecting without a permit.
            let _permit = connects.acquire().await.ok();
            connect(slot, &mut client, &reaps).await
        });
        let connected = tokio::select! {
            biased;
            () = slot.stop.cancelled() => None,
            connected = &mut connecting => Some(connected),
        };
        let Some(connected) = connected else {
            // A session the connect had created is DELETEd by a reap: the
            // slot ends once it is done, so that nothing of the slot's
            // reaches its server after `apply` returns.
            drop(connecting);
            reaps.drain().await;
            return ServerShutdown::NoSession;
        };
        // Finished: its box (the connect's whole state) is not held while
        // the session serves.
        drop(connecting);
        let (error, lost) = match connected {
            Ok(session) => {
                let live = Arc::new(Live {
                    connected_id: session.session_id(),
                    session,
                    lost: CancellationToken::new(),
                    lost_error: Mutex::new(None),
                    proven: AtomicBool::new(false),
                });
                // Routed first, then in the catalog, then announced: a
                // host that sees the tools (or the state) can call them.
                *lock(&slot.live) = Some(live.clone());
                if slot.requests.roots_generation() != roots_seen {
                    // `Fleet::set_roots` ran during the connect, perhaps
                    // before this slot could be told: told now.
                    tokio::select! {
                        biased;
                        () = slot.stop.cancelled() => {}
                        _ = tell_roots_changed(slot, &live, policy.health_timeout) => {}
                    }
                }
                hub.set_catalog(&slot.name, slot.id, Some(live.session.catalog()));
                slot.set_state(hub, SlotState::Ready);
                let up_since = tokio::time::Instant::now();
                let end = serve(slot, hub, policy, &live).await;
                // No call reaches the session from here on: it leaves the
                // slot, then the catalog, then is closed (in-flight calls
                // fail with "closed").
                *lock(&slot.live) = None;
                hub.set_catalog(&slot.name, slot.id, None);
                match end {
                    End::Stop => return ServerShutdown::Closed(live.session.close().await),
                    End::Reconnect => {
                        // Not ready while the old session closes (bounded
                        // by its DELETE timeout): a caller waits for the
                        // next one instead of failing at once.
                        slot.set_state(hub, SlotState::Starting);
                        starting = true;
                        live.session.close().await;
                        failures = 0;
                        continue;
                    }
                    End::Lost(error) => {
                        // Answering once is not enough: a server that
                        // answers the first ping and then fails would be
                        // reconnected at the first backoff for ever.
                        if live.proven.load(Ordering::Acquire)
                            && up_since.elapsed() >= policy.stable_after
                        {
                            failures = 0;
                        }
                        (error, Some(live))
                    }
                }
            }
            // Over a memory budget: named, as a routed call's is.
            Err(error) if error.is_limit() => (
                Arc::new(error.context(format!("server `{}`", slot.name))),
                None,
            ),
            Err(error) => (Arc::new(error), None),
        };
        failures = failures.saturating_add(1);
        // The fleet's budget refused a charge during this connect (this
        // slot's or another's): the others may give memory back, so a
        // limit error is retried then, where a session's own is not.
        let fleet_refused = error.is_limit() && slot.memory.refusals() != refusals;
        let state = classify(error, lost.is_some() || fleet_refused, failures, policy);
        // The new state is out before the lost session's close (bounded by
        // its DELETE timeout), so nobody sees a ready slot that is not.
        slot.set_state(hub, state.clone());
        if let Some(live) = lost {
            live.session.close().await;
        }
        match state {
            SlotState::Retrying { next_at, .. } => {
                tokio::select! {
                    biased;
                    () = slot.stop.cancelled() => return ServerShutdown::NoSession,
                    () = slot.wake.notified() => failures = 0,
                    () = tokio::time::sleep_until(next_at.into()) => {}
                }
            }
            // Auth required or failed: only a person (reconnect) or a
            // changed spec (a new slot) moves it.
            _ => {
                tokio::select! {
                    biased;
                    () = slot.stop.cancelled() => return ServerShutdown::NoSession,
                    () = slot.wake.notified() => failures = 0,
                }
            }
        }
    }
}

/// Tells a ready slot's server its roots changed, if it has the fleet's
/// roots and a revision with that notification (before 2026-07-28),
/// within `limit`. Whether it was told.
pub(crate) async fn tell_roots_changed(slot: &Slot, live: &Live, limit: Duration) -> bool {
    if !slot.answers_roots.load(Ordering::SeqCst) || live.session.protocol_version().is_modern() {
        return false;
    }
    let sent = tokio::time::timeout(
        limit,
        live.session
            .notify("notifications/roots/list_changed", None),
    )
    .await;
    match sent {
        Ok(Ok(())) => true,
        Ok(Err(error)) => {
            tracing::debug!(server = %slot.name, %error, "fleet: roots/list_changed not sent");
            false
        }
        Err(_) => {
            tracing::debug!(server = %slot.name, "fleet: roots/list_changed timed out");
            false
        }
    }
}

/// Connects with the slot's connector, got first if the slot has none.
async fn connect(
    slot: &Slot,
    client: &mut Option<SlotClient>,
    reaps: &Reaper,
) -> crate::Result<Session> {
    let held = match client {
        Some(held) => held,
        None => {
            let mut got = slot.clients.slot_client(&slot.spec).await?;
            // Every session of the slot draws from the fleet's budget.
            got.connector = got.connector.memory_pool(slot.memory.clone());
            let (connector, fleet_roots) = slot.requests.apply(&slot.name, got.connector);
            got.connector = connector;
            slot.answers_roots.store(fleet_roots, Ordering::SeqCst);
            client.insert(got)
        }
    };
    held.connector.clone().reaper(reaps.clone()).connect().await
}

/// What a failure makes of the slot. A 401 or 403 (or a failed
/// authorization) waits for credentials. An error no retry can fix waits
/// for a person, but only on connect: a session that was up proved the
/// spec right, so whatever ends it is retried (`retried`, as is a connect
/// the fleet's memory budget refused).
fn classify(error: Arc<Error>, retried: bool, failures: u32, policy: &Policy) -> SlotState {
    let refused = error.is_auth()
        || error.status().is_some_and(|s| {
            s == http::StatusCode::UNAUTHORIZED || s == http::StatusCode::FORBIDDEN
        });
    if refused {
        SlotState::AuthRequired { error }
    } else if !retried && !error.is_retryable() {
        SlotState::Failed { error }
    } else {
        let next_at = std::time::Instant::now() + policy.backoff.delay(failures);
        SlotState::Retrying {
            attempt: failures,
            next_at,
            error,
        }
    }
}

/// Watches a ready session: proves it with a `ping` at once, checks it
/// every health interval, and follows its catalog through its events: a
/// list re-listed (in place when announced) reaches the fleet's catalog
/// at once (a change only if it reads differently), and a renewal (a new
/// server session) is announced.
async fn serve(slot: &Slot, hub: &Hub, policy: &Policy, live: &Live) -> End {
    let mut events = Some(live.session.events());
    // Read here, in the slot's own task, and passed on to the fleet's
    // stream as they come: the session's queue never fills for nobody.
    let mut notifications = live.session.notifications();
    // A change between the slot's first catalog and the subscription.
    hub.set_catalog(&slot.name, slot.id, Some(live.session.catalog()));
    let mut renewals = Renewals(live.connected_id.clone());
    renewals.catch_up(slot, hub, &live.session);
    // Boxed: a request's future is several KiB, and the slot's future
    // lives as long as the session.
    let interval = slot
        .spec
        .health_interval_setting()
        .unwrap_or(policy.health_interval);
    // Whether the check is only waiting for its interval: a listener lost
    // replaces it with a ping at once only then, never cutting short a
    // ping in flight.
    let idle = AtomicBool::new(false);
    let idle = &idle;
    // When the check waiting now will ping (`None`: never), and when a
    // lost listener last had one at once: a listener that flaps asks for
    // one at most every `LISTENER_CHECK_GAP`, never a ping per flap.
    let mut next_check: Option<tokio::time::Instant> = None;
    let mut listener_checked: Option<tokio::time::Instant> = None;
    let checking = |wait: Option<Option<tokio::time::Instant>>| {
        idle.store(wait.is_some(), Ordering::Relaxed);
        Box::pin(async move {
            if let Some(at) = wait {
                match at {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
                idle.store(false, Ordering::Relaxed);
            }
            // Boxed apart: the wait above, most of a slot's life, then
            // holds a sleep only, not a request's state.
            Box::pin(live.session.request_with(
                "ping",
                None,
                RequestOptions::default().timeout(policy.health_timeout),
            ))
            .await
        })
    };
    // Kept across events, made anew only when it has ended: a session
    // event never starts the interval's wait again (nor cancels a ping in
    // flight), so a server with something to say more often than the
    // interval is still checked.
    let after_interval = || interval.map(|every| tokio::time::Instant::now() + every);
    let mut check = checking(None);
    loop {
        let event = async {
            match events.as_mut() {
                Some(receiver) => receiver.recv().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            biased;
            () = slot.stop.cancelled() => return End::Stop,
            () = live.lost.cancelled() => {
                let error = lock(&live.lost_error).clone();
                return End::Lost(error.unwrap_or_else(|| Arc::new(Error::closed())));
            }
            () = slot.wake.notified() => return End::Reconnect,
            event = event => match event {
                // The listening stream ended (the server may be gone):
                // checked now, not at the next interval; never a second
                // ping while one is in flight. The listener's own backoff
                // bounds how often this comes.
                Ok(SessionEvent::ListenerDown { .. }) => {
                    if idle.load(Ordering::Relaxed) {
                        let now = tokio::time::Instant::now();
                        let at = listener_checked
                            .map_or(now, |last| (last + LISTENER_CHECK_GAP).max(now));
                        // Only ever sooner than the check already waiting.
                        if next_check.is_none_or(|next| at < next) {
                            listener_checked = Some(at);
                            next_check = Some(at);
                            check = checking(Some(Some(at)));
                        }
                    }
                }
                Ok(SessionEvent::Renewed { session_id, revision }) => {
                    // Set before the event was sent: the new session's.
                    let info = live.session.info();
                    renewals.renewed(slot, hub, session_id, revision, info);
                }
                Ok(SessionEvent::CatalogChanged { .. }) => {
                    hub.set_catalog(&slot.name, slot.id, Some(live.session.catalog()));
                }
                // Lost events may have held either: what the session is
                // now, against what the fleet was told.
                Err(RecvError::Lagged(_)) => {
                    renewals.catch_up(slot, hub, &live.session);
                    hub.set_catalog(&slot.name, slot.id, Some(live.session.catalog()));
                }
                // Every request fails from now on: lost at once, not at
                // the next health check.
                Ok(SessionEvent::Ended { reason }) => {
                    return End::Lost(Arc::new(Error::protocol(format!(
                        "the server ended the session: {reason}"
                    ))));
                }
                Ok(_) => {}
                // Closed: only the slot closes it, after this returns.
                Err(RecvError::Closed) => events = None,
            },
            answer = &mut check => {
                next_check = after_interval();
                check = checking(Some(next_check));
                match answer {
                    // A JSON-RPC error is an answer too (a 2026-07-28
                    // server may answer `ping` with "method not found",
                    // under an HTTP 404).
                    Err(error) if error.rpc_error().is_none() => {
                        return End::Lost(Arc::new(error));
                    }
                    _ => live.prove(),
                }
            }
            // Last: a chatty server never holds up its health check.
            message = next(&mut notifications) => match message {
                Some(message) => slot.notices.forward(&slot.name, message),
                // Closed: only the slot closes the session.
                None => notifications = None,
            },
        }
    }
}

/// How often a listener lost again and again (a flapping stream) has the
/// session checked at once, at most: the others wait for this, or for the
/// health interval if sooner.
const LISTENER_CHECK_GAP: Duration = Duration::from_secs(5);

/// The next notification of `receiver`; pending for ever once it is gone.
async fn next(
    receiver: &mut Option<tokio::sync::mpsc::Receiver<crate::jsonrpc::Message>>,
) -> Option<crate::jsonrpc::Message> {
    match receiver {
        Some(receiver) => receiver.recv().await,
        None => std::future::pending().await,
    }
}

/// The id of a ready slot's session as the fleet was last told it: each
/// renewal is announced once, with the id it replaced.
struct Renewals(Option<SessionId>);

impl Renewals {
    /// A renewal to `new`: announced, unless it is the one already told
    /// (by [`catch_up`](Self::catch_up), before its event came).
    fn renewed(
        &mut self,
        slot: &Slot,
        hub: &Hub,
        new: Option<SessionId>,
        era: ProtocolVersion,
        info: Arc<SessionInfo>,
    ) {
        if new.is_some() && new == self.0 {
            return;
        }
        tracing::info!(server = %slot.name, %era, "fleet: session renewed");
        let old = std::mem::replace(&mut self.0, new.clone());
        hub.renewed(&slot.name, slot.id, old, new, era, info);
    }

    /// A renewal the event stream did not tell (it came before the
    /// subscription, or was lost to a lag), told now. A session with no id
    /// now may be between two (renewing): its renewal's event is still
    /// to come, and tells it.
    fn catch_up(&mut self, slot: &Slot, hub: &Hub, session: &Session) {
        let now = session.session_id();
        if now.is_some() && now != self.0 {
            self.renewed(slot, hub, now, session.protocol_version(), session.info());
        }
    }
}
