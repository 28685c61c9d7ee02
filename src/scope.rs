//! The guard stack: what a session acquired, released in exact reverse.
//!
//! Resources are pushed the moment they exist, in this order, so that the
//! reverse is the right cleanup order:
//!
//! 1. the owned client (only when the session built it);
//! 2. the session's header hooks;
//! 3. the transport (which holds a handle to the client);
//! 4. the server session we may create (pushed *before* `initialize` is
//!    sent, so an id that arrives just before a cancellation is still
//!    DELETEd; with no id, releasing it sends nothing);
//! 5. background tasks (the GET listener, re-discovery, re-initialize,
//!    cancellation notices), as one set.
//!
//! Released in reverse: tasks stop and are joined; the server session is
//! DELETEd while our hooks and the client are still alive, so the DELETE is
//! authenticated; the transport's handle goes; the hooks are removed by
//! identity; the owned client is dropped last.
//!
//! [`GuardStack::unwind`] is the orderly path. Dropping a stack does what
//! can be done without waiting (tasks are aborted), and if a DELETE is still
//! owed, hands the rest of the stack, in order, to a reaper task: tracked,
//! bounded by the DELETE timeout, and awaited by [`shutdown`]. When no
//! runtime can run it (the runtime is shutting down, or gone), the rest is
//! released synchronously and the DELETE is counted as abandoned
//! ([`crate::ledger::abandoned_deletes`]).

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use scopeguard::ScopeGuard;
use tokio::sync::Notify;
use tokio::task::{JoinHandle, JoinSet};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::client::{HookHandle, HttpClient};
use crate::error::Error;
use crate::jsonrpc::{Message, Request};
use crate::ledger::{self, Count, Counters, Field};
use crate::transport::{Exchange, Posted, SessionEnd, StreamableHttp};

/// A release that cannot fail and needs no waiting.
type SyncGuard = ScopeGuard<(), Box<dyn FnOnce(()) + Send>>;

fn sync_guard(release: impl FnOnce() + Send + 'static) -> SyncGuard {
    scopeguard::guard((), Box::new(move |()| release()))
}

/// What became of the server session when a stack was released.
#[derive(Debug, Default)]
#[non_exhaustive]
pub enum SessionRelease {
    /// We did not create one: an attached session, or a connect that failed
    /// before `initialize` was sent.
    #[default]
    NotOwned,
    /// The server issued no session id (a stateless server): nothing to end.
    NoSessionId,
    /// DELETE was answered with this status (2xx, 404 or 405).
    Deleted(http::StatusCode),
    /// DELETE failed or timed out; local cleanup ran anyway.
    DeleteFailed(Error),
}

/// What a close (or a failed connect) released.
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct Released {
    /// Background tasks stopped and joined.
    pub tasks_stopped: usize,
    /// The server session.
    pub session: SessionRelease,
    /// Header hooks removed from the client.
    pub hooks_removed: usize,
    /// Whether the session's own (owned) HTTP client was released.
    pub owned_client_released: bool,
    /// True when an earlier close had already released everything.
    pub already_closed: bool,
}

/// The background tasks of a session (the GET listener, re-discovery,
/// re-initialize, cancellation notices): cancelled, then joined.
///
/// The set is owned here, on the stack; the session reaches it only through
/// a [`Spawner`], which holds it weakly, so tasks that hold the session's
/// state never keep their own set alive.
pub(crate) struct Background {
    set: Arc<Mutex<Option<JoinSet<()>>>>,
    token: CancellationToken,
}

/// Spawns into a session's [`Background`], while it exists.
#[derive(Clone)]
pub(crate) struct Spawner {
    set: Weak<Mutex<Option<JoinSet<()>>>>,
    token: CancellationToken,
    counters: Arc<Counters>,
}

/// How long cancelled tasks get to finish before they are aborted.
const TASK_JOIN_TIMEOUT: Duration = Duration::from_secs(2);

impl Background {
    pub(crate) fn new(counters: Arc<Counters>) -> (Background, Spawner) {
        let set = Arc::new(Mutex::new(Some(JoinSet::new())));
        let token = CancellationToken::new();
        let spawner = Spawner {
            set: Arc::downgrade(&set),
            token: token.clone(),
            counters,
        };
        (Background { set, token }, spawner)
    }

    fn take(&self) -> Option<JoinSet<()>> {
        self.set
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }

    /// Cancels every task and joins them (aborting stragglers); returns how
    /// many there were.
    async fn release(&mut self) -> usize {
        self.token.cancel();
        let Some(mut set) = self.take() else {
            return 0;
        };
        let mut stopped = 0;
        let deadline = tokio::time::Instant::now() + TASK_JOIN_TIMEOUT;
        loop {
            match tokio::time::timeout_at(deadline, set.join_next()).await {
                Ok(Some(_)) => stopped += 1,
                Ok(None) => break,
                Err(_) => {
                    stopped += set.len();
                    set.abort_all();
                    while set.join_next().await.is_some() {}
                    break;
                }
            }
        }
        stopped
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        self.token.cancel();
        // Dropping a JoinSet aborts every task in it.
        drop(self.take());
    }
}

impl Spawner {
    /// Spawns `task`, which must return soon after its token is cancelled.
    /// Returns false (and drops the task) once the session is closing.
    pub(crate) fn spawn<F>(&self, task: impl FnOnce(CancellationToken) -> F) -> bool
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        let Some(set) = self.set.upgrade() else {
            return false;
        };
        let mut guard = set.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(set) = guard.as_mut() else {
            return false;
        };
        if self.token.is_cancelled() {
            return false;
        }
        // Finished tasks stay in a JoinSet until joined: drain them, so a
        // long session does not accumulate them.
        while set.try_join_next().is_some() {}
        let count = Count::new(Field::Tasks, Some(self.counters.clone()));
        let future = task(self.token.clone());
        set.spawn(async move {
            let _count = count;
            future.await;
        });
        true
    }

    /// The token cancelled when the session closes.
    pub(crate) fn token(&self) -> &CancellationToken {
        &self.token
    }
}

/// The answer to `initialize` up to its response head: the session id.
type InitializeTask = JoinHandle<crate::Result<Posted>>;
/// A DELETE in flight.
type DeleteTask = JoinHandle<crate::Result<SessionEnd>>;

/// The server session we may have created: ended by DELETE.
///
/// Both exchanges that matter run as tasks held here, so that a caller who
/// drops a future half-way never cuts one off: the `initialize` POST (up to
/// its response head, which carries the session id) and the DELETE. The
/// guard stays on the stack until its release has finished; if the stack is
/// dropped first, the reaper takes the guard, tasks and all, and finishes
/// within the same deadline.
pub(crate) struct ServerSessionGuard {
    wire: Arc<StreamableHttp>,
    timeout: Duration,
    counters: Arc<Counters>,
    initializing: Option<InitializeTask>,
    deleting: Option<(DeleteTask, tokio::time::Instant)>,
    settled: bool,
    _count: Count,
}

impl ServerSessionGuard {
    fn owes_delete(&self) -> bool {
        !self.settled
            && (self.initializing.is_some()
                || self.deleting.is_some()
                || self.wire.session_id().is_some())
    }

    async fn release(&mut self) -> SessionRelease {
        if let Some(initializing) = self.initializing.as_mut() {
            // Cut off half-way: let the exchange finish (bounded) to learn
            // whether the server created a session, and its id.
            if tokio::time::timeout(self.timeout, &mut *initializing)
                .await
                .is_err()
            {
                initializing.abort();
            }
            self.initializing = None;
        }
        if self.deleting.is_none() {
            if self.settled || self.wire.session_id().is_none() {
                self.settled = true;
                return SessionRelease::NoSessionId;
            }
            let wire = self.wire.clone();
            let count = Count::new(Field::Tasks, Some(self.counters.clone()));
            let task = tokio::spawn(
                async move {
                    let _count = count;
                    wire.delete_session().await
                }
                .instrument(tracing::debug_span!("mcp.close.delete")),
            );
            let deadline = tokio::time::Instant::now() + self.timeout;
            self.deleting = Some((task, deadline));
        }
        let (task, deadline) = self.deleting.as_mut().expect("set above");
        let outcome = tokio::time::timeout_at(*deadline, &mut *task).await;
        if outcome.is_err() {
            task.abort();
        }
        self.deleting = None;
        // Settled either way: we tried once, within the bound.
        self.settled = true;
        match outcome {
            Ok(Ok(Ok(SessionEnd::Ended(status)))) => SessionRelease::Deleted(status),
            Ok(Ok(Ok(SessionEnd::NoSession))) => SessionRelease::NoSessionId,
            Ok(Ok(Err(error))) => SessionRelease::DeleteFailed(error),
            Ok(Err(join)) => SessionRelease::DeleteFailed(Error::transport(Box::new(join))),
            Err(_) => SessionRelease::DeleteFailed(Error::delete_timeout(self.timeout)),
        }
    }
}

impl Drop for ServerSessionGuard {
    fn drop(&mut self) {
        if let Some(initializing) = &self.initializing {
            initializing.abort();
        }
        if let Some((deleting, _)) = &self.deleting {
            deleting.abort();
        }
        if self.owes_delete() {
            ledger::count_abandoned_delete();
            tracing::warn!("no runtime could send the DELETE of a session; it is left to expire");
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SyncKind {
    OwnedClient,
    Hook,
    Transport,
}

enum Entry {
    /// Released by dropping `_release`.
    Sync {
        kind: SyncKind,
        _release: SyncGuard,
    },
    ServerSession(ServerSessionGuard),
    Background(Background),
}

/// The guard stack of one session (or one connect in progress).
pub(crate) struct GuardStack {
    entries: Vec<Entry>,
    counters: Arc<Counters>,
    /// Set on a stack that is already the reaper's: its drop must not hand
    /// it to another reaper.
    reaping: bool,
}

impl GuardStack {
    pub(crate) fn new(counters: Arc<Counters>) -> Self {
        GuardStack {
            entries: Vec::with_capacity(6),
            counters,
            reaping: false,
        }
    }

    /// The counters of the client the session runs over; set once an owned
    /// client exists.
    pub(crate) fn set_counters(&mut self, counters: Arc<Counters>) {
        self.counters = counters;
    }

    pub(crate) fn counters(&self) -> &Arc<Counters> {
        &self.counters
    }

    fn push_sync(&mut self, kind: SyncKind, release: impl FnOnce() + Send + 'static) {
        self.entries.push(Entry::Sync {
            kind,
            _release: sync_guard(release),
        });
    }

    pub(crate) fn push_owned_client(&mut self, client: HttpClient) {
        self.push_sync(SyncKind::OwnedClient, move || drop(client));
    }

    pub(crate) fn push_hook(&mut self, hook: HookHandle) {
        self.push_sync(SyncKind::Hook, move || drop(hook));
    }

    pub(crate) fn push_transport(&mut self, wire: Arc<StreamableHttp>) {
        self.push_sync(SyncKind::Transport, move || drop(wire));
    }

    pub(crate) fn push_server_session(&mut self, wire: Arc<StreamableHttp>, timeout: Duration) {
        let count = Count::new(Field::OwnedSessions, Some(self.counters.clone()));
        self.entries.push(Entry::ServerSession(ServerSessionGuard {
            wire,
            timeout,
            counters: self.counters.clone(),
            initializing: None,
            deleting: None,
            settled: false,
            _count: count,
        }));
    }

    /// Sends `initialize` on the transport of the server-session entry and
    /// reads its answer.
    ///
    /// The POST runs, up to the response head, as a task held by that
    /// entry: if this future is dropped before the head arrives, the reaper
    /// lets it finish (within the DELETE timeout) and DELETEs the session it
    /// created, whose id we could not have known otherwise.
    pub(crate) async fn initialize(&mut self, request: Request) -> crate::Result<Exchange> {
        let Some(Entry::ServerSession(session)) = self
            .entries
            .iter_mut()
            .rev()
            .find(|e| matches!(e, Entry::ServerSession(_)))
        else {
            unreachable!("initialize is only sent on a stack with a server session");
        };
        let wire = session.wire.clone();
        let id = request.id.clone();
        let message = Message::Request(request);
        let task = {
            let wire = wire.clone();
            let count = Count::new(Field::Tasks, Some(self.counters.clone()));
            tokio::spawn(async move {
                let _count = count;
                wire.post(&message).await
            })
        };
        let initializing = session.initializing.insert(task);
        let posted = initializing.await;
        session.initializing = None;
        let posted = posted.map_err(|e| Error::transport(Box::new(e)))??;
        let Posted::Stream(stream) = posted else {
            unreachable!("a request is never merely accepted");
        };
        wire.await_response(stream, &id).await
    }

    /// Pushes a session's background set; returns its spawner.
    pub(crate) fn push_background(&mut self) -> Spawner {
        let (background, spawner) = Background::new(self.counters.clone());
        self.entries.push(Entry::Background(background));
        spawner
    }

    /// The orderly path: pops every entry, awaiting the task joins and the
    /// DELETE. Always completes (each wait is bounded); failures are in the
    /// report, never stop the unwind.
    pub(crate) async fn unwind(&mut self) -> Released {
        let mut released = Released::default();
        // Each entry leaves the stack only once released: if this future is
        // dropped half-way, the entry being released is still on the stack,
        // and the stack's drop finishes the job.
        while let Some(entry) = self.entries.last_mut() {
            match entry {
                Entry::Background(background) => {
                    released.tasks_stopped += background.release().await;
                }
                Entry::ServerSession(session) => released.session = session.release().await,
                Entry::Sync { kind, .. } => match kind {
                    SyncKind::Hook => released.hooks_removed += 1,
                    SyncKind::OwnedClient => released.owned_client_released = true,
                    SyncKind::Transport => {}
                },
            }
            drop(self.entries.pop());
        }
        released
    }

    fn owes_delete(&self) -> bool {
        self.entries
            .iter()
            .any(|e| matches!(e, Entry::ServerSession(s) if s.owes_delete()))
    }
}

impl Drop for GuardStack {
    fn drop(&mut self) {
        if self.reaping || !self.owes_delete() {
            // Everything can go now, from the top.
            while let Some(entry) = self.entries.pop() {
                drop(entry);
            }
            return;
        }
        // The synchronous part at once: tasks above the session are aborted.
        while let Some(Entry::Background(_)) = self.entries.last() {
            self.entries.pop();
        }
        let rest = GuardStack {
            entries: std::mem::take(&mut self.entries),
            counters: self.counters.clone(),
            reaping: true,
        };
        reap(rest);
    }
}

impl fmt::Debug for GuardStack {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self
            .entries
            .iter()
            .map(|e| match e {
                Entry::Sync { kind, .. } => match kind {
                    SyncKind::OwnedClient => "owned client",
                    SyncKind::Hook => "hook",
                    SyncKind::Transport => "transport",
                },
                Entry::ServerSession(_) => "server session",
                Entry::Background(_) => "background tasks",
            })
            .collect();
        f.debug_struct("GuardStack")
            .field("entries", &names)
            .finish()
    }
}

static REAPS_DONE: Notify = Notify::const_new();

/// Counts one pending reap; wakes [`shutdown`] when it goes.
struct PendingReap {
    count: Option<Count>,
}

impl Drop for PendingReap {
    fn drop(&mut self) {
        // Decrement first, then wake, so a woken waiter sees the new count.
        drop(self.count.take());
        REAPS_DONE.notify_waiters();
    }
}

/// Hands the rest of a stack (with its DELETE) to a reaper task.
fn reap(stack: GuardStack) {
    let pending = PendingReap {
        count: Some(Count::new(
            Field::PendingReaps,
            Some(stack.counters.clone()),
        )),
    };
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => {
            tracing::debug!("handing a DELETE to the reaper");
            // If the runtime is shutting down the task never runs: dropping
            // it drops `stack`, which (reaping) releases synchronously and
            // counts the DELETE as abandoned, then `pending`.
            runtime.spawn(async move {
                let mut stack = stack;
                let _pending = pending;
                stack.unwind().await;
            });
        }
        Err(_) => {
            // No runtime here: release what can be released without one.
            drop(stack);
            drop(pending);
        }
    }
}

/// Waits until every DELETE handed to the reaper has finished (each within
/// its DELETE timeout), so a process can drain before its runtime ends.
///
/// Sessions dropped without [`close`](crate::Session::close) are ended in
/// the background; call this before leaving `main` (or before shutting the
/// runtime down) to let their DELETEs reach the servers.
pub async fn shutdown() {
    loop {
        let notified = REAPS_DONE.notified();
        tokio::pin!(notified);
        // Registered before the check, so a reap finishing in between is
        // not missed.
        notified.as_mut().enable();
        if ledger::ledger().pending_reaps == 0 {
            return;
        }
        notified.await;
    }
}

/// Errors of a [`Released`] report, for a failed connect's cleanup.
pub(crate) fn cleanup_errors(released: Released) -> Vec<Error> {
    match released.session {
        SessionRelease::DeleteFailed(error) => vec![error],
        _ => Vec::new(),
    }
}
