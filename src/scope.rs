//! The guard stack: what a session acquired, released in exact reverse.
//!
//! Resources are pushed the moment they exist, in this order, so that the
//! reverse is the right cleanup order:
//!
//! 1. the owned client (only when the session built it);
//! 2. the session's header hooks;
//! 3. the transport (which holds a handle to the client);
//! 4. the server sessions we create ([`ServerSessions`]): every one from
//!    before its `initialize` leaves until its DELETE has been answered or
//!    has timed out, the first one and every re-initialize alike;
//! 5. background tasks (the GET listener, re-initialize, re-discovery,
//!    cancellation notices), as one set.
//!
//! Released in reverse: tasks stop and are joined; the server sessions are
//! DELETEd while our hooks and the client are still alive, so the DELETEs
//! are authenticated; the transport's handle goes; the hooks are removed by
//! identity; the owned client is dropped last.
//!
//! [`GuardStack::unwind`] is the orderly path. Dropping a stack does what
//! can be done without waiting (tasks are aborted), and if a DELETE is still
//! owed, hands the rest of the stack, in order, to a reaper task: tracked,
//! bounded by the DELETE timeout, and awaited by [`shutdown`]. When no
//! runtime can run it (the runtime is shutting down, or gone), the rest is
//! released synchronously and the DELETE is counted as abandoned
//! ([`crate::abandoned_deletes`]).

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use futures_util::FutureExt as _;
use scopeguard::ScopeGuard;
use tokio::sync::{Notify, oneshot};
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::deadline::Deadline;
pub(crate) use crate::deadline::deadline_after;
use crate::error::{Error, Result};
use crate::http_client::{HookHandle, HttpClient};
use crate::jsonrpc::Request;
use crate::ledger::{self, Count, Counters, Field};
use crate::sync::lock;
use crate::transport::{MessageStream, SessionEnd, StreamableHttp, Wire};

/// A release that cannot fail and needs no waiting.
type SyncGuard = ScopeGuard<(), Box<dyn FnOnce(()) + Send>>;

fn sync_guard(release: impl FnOnce() + Send + 'static) -> SyncGuard {
    scopeguard::guard((), Box::new(move |()| release()))
}

/// What became of one server session when a stack was released.
#[derive(Debug, Default)]
#[non_exhaustive]
pub enum SessionRelease {
    /// We did not create one: an attached session, or a connect that
    /// failed before `initialize` was sent (or a 2026-07-28 server's
    /// stack released other than by [`Session::close`](crate::Session::close),
    /// which says [`Stateless`](Self::Stateless)).
    #[default]
    NotOwned,
    /// The server issued no session id (a stateless server, an `initialize`
    /// that failed, or an HTTP+SSE session, which ended when its event
    /// stream was closed): nothing to DELETE.
    NoSessionId,
    /// The server had already ended it: a request that carried its id was
    /// answered 404. Nothing was sent.
    Expired,
    /// DELETE was answered with this status (2xx, 404 or 405).
    Deleted(http::StatusCode),
    /// DELETE failed or timed out (or `initialize` was not answered in
    /// time to learn the session id); local cleanup ran anyway.
    DeleteFailed(Error),
    /// A 2026-07-28 server: the protocol has no server sessions, so there
    /// was none to end (reported by [`Session::close`](crate::Session::close)).
    Stateless,
}

/// What a close (or a failed connect) released.
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct Released {
    /// Background tasks stopped and joined.
    pub tasks_stopped: usize,
    /// The newest server session (the one in use).
    pub session: SessionRelease,
    /// Older server sessions of this stack that ended here or shortly
    /// before: ones the server expired (a re-initialize replaced them), or
    /// ones a failed re-initialize created. Oldest first.
    pub earlier_sessions: Vec<SessionRelease>,
    /// Header hooks removed from the client.
    pub hooks_removed: usize,
    /// Whether the session's own (owned) HTTP client was released.
    pub owned_client_released: bool,
    /// How a stdio server's process (its whole tree) ended; `None` for an
    /// HTTP session.
    #[cfg(feature = "stdio")]
    pub process: Option<crate::stdio::ProcessEnd>,
    /// True when an earlier close had already released everything.
    pub already_closed: bool,
    /// True when close was called from one of the session's own tasks (a
    /// server-request handler): that task cannot wait for itself to end,
    /// so close returned at once and the reaper releases everything, in
    /// the same order, in the background (awaited by [`shutdown`]); the
    /// other fields then report nothing.
    pub deferred: bool,
}

impl Released {
    /// Says [`SessionRelease::Stateless`] for a stack of a 2026-07-28
    /// session (`stateless`, asked before the engine closed), which had
    /// no server session to end. An `initialize` that detection sent on
    /// the way (refused, or left unanswered beside a probe that opened) is
    /// an earlier session, not the one in use.
    pub(crate) fn of_stateless(mut self, stateless: bool) -> Self {
        if stateless {
            match std::mem::replace(&mut self.session, SessionRelease::Stateless) {
                SessionRelease::NotOwned => {}
                on_the_way => self.earlier_sessions.push(on_the_way),
            }
        }
        self
    }
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
    id: u64,
}

/// Spawns into a session's [`Background`], while it exists.
#[derive(Clone)]
pub(crate) struct Spawner {
    set: Weak<Mutex<Option<JoinSet<()>>>>,
    token: CancellationToken,
    counters: Arc<Counters>,
    /// Its background's id, which its tasks carry.
    id: u64,
}

tokio::task_local! {
    /// The id of the [`Background`] whose task this is: a release asked for
    /// from one of its own tasks must not wait to join itself.
    static BACKGROUND: u64;
}

/// How long cancelled tasks get to finish before they are aborted.
const TASK_JOIN_TIMEOUT: Duration = Duration::from_secs(2);

impl Background {
    fn new(counters: Arc<Counters>) -> (Background, Spawner) {
        static IDS: AtomicU64 = AtomicU64::new(0);
        let id = IDS.fetch_add(1, Ordering::Relaxed);
        let set = Arc::new(Mutex::new(Some(JoinSet::new())));
        let token = CancellationToken::new();
        let spawner = Spawner {
            set: Arc::downgrade(&set),
            token: token.clone(),
            counters,
            id,
        };
        (Background { set, token, id }, spawner)
    }

    /// Whether the running task is one of this set's.
    fn runs_this_task(&self) -> bool {
        BACKGROUND.try_with(|id| *id == self.id).unwrap_or(false)
    }

    fn take(&self) -> Option<JoinSet<()>> {
        lock(&self.set).take()
    }

    /// Cancels every task and joins them (aborting stragglers); returns how
    /// many there were.
    async fn release(&mut self) -> usize {
        self.token.cancel();
        let Some(mut set) = self.take() else {
            return 0;
        };
        let mut stopped = 0;
        let deadline = Instant::now() + TASK_JOIN_TIMEOUT;
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
    /// Returns false (and drops the task) once the session is closing, or
    /// when called outside a tokio runtime (a `Drop` on a plain thread).
    pub(crate) fn spawn<F>(&self, task: impl FnOnce(CancellationToken) -> F) -> bool
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return false;
        };
        let Some(set) = self.set.upgrade() else {
            return false;
        };
        let mut guard = lock(&set);
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
        // `map`, not an async block: a block would hold the task twice
        // (captured, then awaited).
        let future = task(self.token.clone()).map(move |()| drop(count));
        set.spawn_on(BACKGROUND.scope(self.id, future), &runtime);
        true
    }

    /// The token cancelled when the session closes.
    pub(crate) fn token(&self) -> &CancellationToken {
        &self.token
    }
}

/// How a server session's task is told to end.
enum End {
    /// DELETE it, if the server issued an id; all within this deadline.
    Delete(Instant),
    /// The server has ended it itself (a 404 to a request that carried its
    /// id): nothing to send.
    Expired,
}

/// One server session we created, as its task runs it.
struct Record {
    number: u64,
    /// Whether a DELETE is still owed.
    owed: Arc<Owed>,
    /// Tells the task to end it; taken when sent.
    end: Option<oneshot::Sender<End>>,
    /// When the task will have given up, once told to DELETE.
    deadline: Option<Instant>,
    task: JoinHandle<SessionRelease>,
}

struct Registry {
    /// Set at release: no new session may start.
    closed: bool,
    records: Vec<Record>,
}

/// Finished records kept for the release report; older ones are dropped.
const FINISHED_KEPT: usize = 4;

/// Extra time past a session task's own deadline before it is aborted: the
/// task bounds itself, this only covers its scheduling.
const TASK_GRACE: Duration = Duration::from_millis(250);

/// The server sessions of one stack: the only code that sends `initialize`.
///
/// Each session runs as a task that sends the `initialize` POST (up to its
/// response head, which carries the session id), hands the answer to the
/// opener, then waits to be ended: DELETEd (at release, or when the opener
/// gives up half-way) or settled as expired (when the server answered 404).
/// Its record is here, on the stack, from before the POST leaves until the
/// task has finished, so no way out (a close, a drop, a timeout, a failed
/// re-initialize) can leave a session the server created without its
/// DELETE. The DELETE and the wait for `initialize` share one deadline, the
/// DELETE timeout.
pub(crate) struct ServerSessions {
    registry: Arc<Mutex<Registry>>,
    timeout: Duration,
    /// Records taken out of the registry at release, until joined.
    closing: Vec<Record>,
}

/// Opens and ends server sessions of a [`ServerSessions`], while it is on
/// its stack.
#[derive(Clone)]
pub(crate) struct SessionsHandle {
    registry: Weak<Mutex<Registry>>,
    timeout: Duration,
    counters: Arc<Counters>,
}

/// A server session being opened: its `initialize` answer, and the promise
/// that if the opener walks away or fails, the session is DELETEd.
pub(crate) struct Opening {
    number: u64,
    head: oneshot::Receiver<Result<MessageStream>>,
    handle: SessionsHandle,
    armed: bool,
}

impl Opening {
    /// The answer to `initialize`, once its head has arrived (the session
    /// id, if any, is then on the transport).
    pub(crate) async fn answer(&mut self) -> Result<MessageStream> {
        (&mut self.head)
            .await
            .unwrap_or_else(|_| Err(Error::closed()))
    }

    /// The session is established: from now on it ends at release, or when
    /// the server expires it.
    pub(crate) fn established(mut self) {
        self.armed = false;
    }
}

impl Drop for Opening {
    fn drop(&mut self) {
        if self.armed {
            // Failed or dropped half-way: the session task DELETEs what the
            // server created, on its own.
            self.handle.end(self.number);
        }
    }
}

impl SessionsHandle {
    /// Starts server session `number` on `wire` (a transport of its own, with
    /// no session yet): its task sends `initialize` now. Fails once the
    /// stack is releasing.
    pub(crate) fn open(&self, number: u64, wire: Wire, initialize: Request) -> Result<Opening> {
        let registry = self.registry.upgrade().ok_or_else(Error::closed)?;
        let mut registry = lock(&registry);
        if registry.closed {
            return Err(Error::closed());
        }
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|_| Error::closed().with_message("no tokio runtime to run the session on"))?;
        let finished = registry
            .records
            .iter()
            .filter(|r| r.task.is_finished())
            .count();
        if finished > FINISHED_KEPT {
            let mut excess = finished - FINISHED_KEPT;
            registry.records.retain(|r| {
                let drop = excess > 0 && r.task.is_finished();
                excess -= usize::from(drop);
                !drop
            });
        }
        let (head_tx, head) = oneshot::channel();
        let (end, end_rx) = oneshot::channel();
        let owed = Arc::new(Owed {
            wire,
            answered: AtomicBool::new(false),
            settled: AtomicBool::new(false),
        });
        let run = run_session(owed.clone(), initialize, head_tx, end_rx, self.timeout);
        // Counted as the session it runs, not as a background task.
        let count = Count::new(Field::OwnedSessions, Some(self.counters.clone()));
        let task = runtime.spawn(
            run.map(move |released| {
                drop(count);
                released
            })
            .instrument(tracing::debug_span!("mcp.server_session", number)),
        );
        registry.records.push(Record {
            number,
            owed,
            end: Some(end),
            deadline: None,
            task,
        });
        Ok(Opening {
            number,
            head,
            handle: self.clone(),
            armed: true,
        })
    }

    /// The server answered 404 to a request that carried session
    /// `number`'s id: it has ended it; nothing is sent.
    pub(crate) fn expired(&self, number: u64) {
        self.send(number, |_| End::Expired);
    }

    /// Ends session `number` now: its DELETE (once its `initialize` has
    /// answered, if it has not yet) within the DELETE timeout.
    pub(crate) fn end(&self, number: u64) {
        let timeout = self.timeout;
        self.send(number, |record| {
            let deadline = deadline_after(timeout);
            record.deadline = Some(deadline);
            End::Delete(deadline)
        });
    }

    fn send(&self, number: u64, end: impl FnOnce(&mut Record) -> End) {
        let Some(registry) = self.registry.upgrade() else {
            return;
        };
        let mut registry = lock(&registry);
        if let Some(record) = registry.records.iter_mut().find(|r| r.number == number) {
            if let Some(sender) = record.end.take() {
                let message = end(record);
                let _ = sender.send(message);
            }
        }
    }
}

/// What a server session owes: its DELETE, unless settled, while its
/// `initialize` has not answered (the server may have created it) or once
/// the server issued an id.
struct Owed {
    wire: Wire,
    /// The `initialize` POST has ended (its head arrived, or it failed).
    answered: AtomicBool,
    /// Deleted, expired, or known never to have existed.
    settled: AtomicBool,
}

impl Owed {
    fn delete(&self) -> bool {
        !self.settled.load(Ordering::Acquire)
            && (!self.answered.load(Ordering::Acquire) || self.wire.session_id().is_some())
    }
}

/// Runs one server session: `initialize` up to its head, then waits to be
/// ended.
async fn run_session(
    owed: Arc<Owed>,
    initialize: Request,
    head_tx: oneshot::Sender<Result<MessageStream>>,
    mut end_rx: oneshot::Receiver<End>,
    timeout: Duration,
) -> SessionRelease {
    // Dropped unsettled (the runtime is going), the DELETE is abandoned.
    let abandon = scopeguard::guard(owed.clone(), |owed| {
        if owed.delete() {
            ledger::count_abandoned_delete();
            tracing::warn!("no runtime could send the DELETE of a session; it is left to expire");
        }
    });
    let settle = |release| {
        abandon.settled.store(true, Ordering::Release);
        release
    };
    let wire = &owed.wire;
    let post = async {
        // No deadline of its own, on purpose: the caller bounds its wait for
        // the head, and once the session is ended (the caller gave up) the
        // rest is bounded by the DELETE timeout below. A head that comes
        // late still names the session we owe a DELETE.
        let head = match wire {
            Wire::Http(http) => {
                http.post_request_with(&initialize, &http::HeaderMap::new(), Deadline::none())
                    .await
            }
            #[cfg(feature = "stdio")]
            Wire::Stdio(stdio) => Box::pin(stdio.send_request(&initialize, Deadline::none())).await,
        };
        owed.answered.store(true, Ordering::Release);
        head
    };
    // Boxed, and dropped once answered: the task waits out the session's
    // whole life, and should not hold the exchange's state meanwhile.
    let mut post = Box::pin(post);
    let first = tokio::select! {
        head = &mut post => Ok(head),
        end = &mut end_rx => Err(end),
    };
    let end = match first {
        Ok(head) => {
            drop(post);
            // Nobody waiting any more: the session (if any) is still ended below.
            let _ = head_tx.send(head);
            (&mut end_rx).await
        }
        Err(end) => {
            // Cut off before the head: finish the exchange (bounded) to learn
            // whether the server created a session, and its id.
            let deadline = match &end {
                Ok(End::Delete(deadline)) => *deadline,
                _ => deadline_after(timeout),
            };
            if tokio::time::timeout_at(deadline, &mut post).await.is_err() {
                // The server may hold a session we can never name: counted
                // like a DELETE no runtime could send.
                ledger::count_abandoned_delete();
                tracing::warn!(
                    "initialize was cut off before its answer; a session may be left to expire"
                );
                return settle(SessionRelease::DeleteFailed(Error::timeout(format!(
                    "initialize was not answered within {timeout:?}: whether the server \
                     created a session is unknown"
                ))));
            }
            end
        }
    };
    let deadline = match end {
        Ok(End::Expired) => return settle(SessionRelease::Expired),
        Ok(End::Delete(deadline)) => deadline,
        // The stack went without ending it (never on the orderly paths).
        Err(_) => deadline_after(timeout),
    };
    let Some(http) = wire.http().filter(|_| wire.session_id().is_some()) else {
        return settle(SessionRelease::NoSessionId);
    };
    // Boxed: its state exists only while it runs, not in the task's.
    let delete = Box::pin(
        http.delete_session_within(Deadline::delete(deadline, timeout))
            .instrument(tracing::debug_span!("mcp.close.delete")),
    );
    settle(match delete.await {
        Ok(SessionEnd::Ended(status)) => SessionRelease::Deleted(status),
        Ok(SessionEnd::NoSession) => SessionRelease::NoSessionId,
        Err(error) => SessionRelease::DeleteFailed(error),
    })
}

impl ServerSessions {
    fn new(timeout: Duration, counters: Arc<Counters>) -> (ServerSessions, SessionsHandle) {
        let registry = Arc::new(Mutex::new(Registry {
            closed: false,
            records: Vec::new(),
        }));
        let handle = SessionsHandle {
            registry: Arc::downgrade(&registry),
            timeout,
            counters,
        };
        let sessions = ServerSessions {
            registry,
            timeout,
            closing: Vec::new(),
        };
        (sessions, handle)
    }

    /// Whether a DELETE is still owed: a session whose `initialize` is in
    /// flight (the server may have created it), or whose id we have, and
    /// that is not yet deleted or expired.
    fn owes_delete(&self) -> bool {
        let owes = |r: &Record| !r.task.is_finished() && r.owed.delete();
        self.closing.iter().any(owes) || lock(&self.registry).records.iter().any(owes)
    }

    fn deadline(&self) -> Instant {
        deadline_after(self.timeout.saturating_add(TASK_GRACE))
    }

    /// Closes the registry and ends every session: DELETEs (after an
    /// `initialize` still in flight), all within one DELETE timeout. Each
    /// record leaves only once joined, so a release cut off half-way can be
    /// resumed (by the reaper) where it stopped.
    async fn release(&mut self) -> Vec<SessionRelease> {
        {
            let mut registry = lock(&self.registry);
            registry.closed = true;
            self.closing.append(&mut registry.records);
        }
        let deadline = deadline_after(self.timeout);
        for record in &mut self.closing {
            if let Some(end) = record.end.take() {
                record.deadline = Some(deadline);
                let _ = end.send(End::Delete(deadline));
            }
        }
        let mut released = Vec::with_capacity(self.closing.len());
        while let Some(record) = self.closing.first_mut() {
            let until = record.deadline.unwrap_or(deadline) + TASK_GRACE;
            let outcome = tokio::time::timeout_at(until, &mut record.task).await;
            let record = self.closing.remove(0);
            released.push(match outcome {
                Ok(Ok(release)) => release,
                Ok(Err(join)) => SessionRelease::DeleteFailed(Error::transport(Box::new(join))),
                Err(_) => {
                    record.task.abort();
                    SessionRelease::DeleteFailed(Error::delete_timeout(self.timeout))
                }
            });
        }
        released
    }
}

impl Drop for ServerSessions {
    fn drop(&mut self) {
        // Reached with tasks still running only when they owe nothing (no
        // id), or when no reaper could take them (the runtime is going):
        // each task, dropped unfinished, counts a DELETE it owed as
        // abandoned.
        let mut registry = lock(&self.registry);
        registry.closed = true;
        for record in registry.records.iter().chain(&self.closing) {
            record.task.abort();
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
    ServerSessions(ServerSessions),
    /// A stdio server's process tree, released by the spec's sequence.
    #[cfg(feature = "stdio")]
    Process {
        tree: crate::stdio::ProcessTree,
        grace: crate::stdio::Grace,
    },
    Background(Background),
}

/// The guard stack of one session (or one connect in progress).
pub(crate) struct GuardStack {
    entries: Vec<Entry>,
    counters: Arc<Counters>,
    /// Where the rest goes when a release must wait (a DELETE owed).
    reaper: Reaper,
    /// Set on a stack that is already the reaper's: its drop must not hand
    /// it to another reaper.
    reaping: bool,
}

impl GuardStack {
    pub(crate) fn new(counters: Arc<Counters>) -> Self {
        GuardStack {
            entries: Vec::with_capacity(6),
            counters,
            reaper: Reaper::global(),
            reaping: false,
        }
    }

    /// The reaper the stack's rest is handed to (see
    /// `Connector::reaper`); set before anything is pushed.
    pub(crate) fn set_reaper(&mut self, reaper: Reaper) {
        self.reaper = reaper;
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

    /// Pushes the entry of the server sessions this stack will create (each
    /// DELETEd within `delete_timeout`); returns the handle that opens them.
    pub(crate) fn push_server_sessions(&mut self, delete_timeout: Duration) -> SessionsHandle {
        let (sessions, handle) = ServerSessions::new(delete_timeout, self.counters.clone());
        self.entries.push(Entry::ServerSessions(sessions));
        handle
    }

    /// Pushes a stdio server's process tree, the moment it is spawned:
    /// released by closing stdin (the I/O tasks above it stop first),
    /// `grace`, SIGTERM, SIGKILL, reap.
    #[cfg(feature = "stdio")]
    pub(crate) fn push_process(
        &mut self,
        tree: crate::stdio::ProcessTree,
        grace: crate::stdio::Grace,
    ) {
        self.entries.push(Entry::Process { tree, grace });
    }

    /// Pushes a session's background set; returns its spawner.
    pub(crate) fn push_background(&mut self) -> Spawner {
        let (background, spawner) = Background::new(self.counters.clone());
        self.entries.push(Entry::Background(background));
        spawner
    }

    /// The orderly path: pops every entry, awaiting the task joins and the
    /// DELETEs. Always completes (each wait is bounded); failures are in the
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
                Entry::ServerSessions(sessions) => {
                    let mut ended = sessions.release().await;
                    if let Some(newest) = ended.pop() {
                        released.session = newest;
                    }
                    released.earlier_sessions.append(&mut ended);
                }
                #[cfg(feature = "stdio")]
                Entry::Process { tree, grace } => {
                    released.process = Some(tree.release(*grace).await);
                }
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

    /// Whether the running task is one of this stack's background tasks
    /// (a server-request handler calling close): then the stack must not
    /// be unwound here, which would wait for this very task to end.
    pub(crate) fn runs_this_task(&self) -> bool {
        self.entries
            .iter()
            .any(|e| matches!(e, Entry::Background(b) if b.runs_this_task()))
    }

    /// Hands the whole stack to a reaper task, which unwinds it in order
    /// (tracked, bounded, awaited by [`shutdown`]).
    pub(crate) fn hand_to_reaper(mut self) {
        self.reap_rest();
    }

    /// Moves what is left of the stack into one that a reaper task unwinds
    /// (this one is left empty, so dropping it releases nothing).
    fn reap_rest(&mut self) {
        let rest = GuardStack {
            entries: std::mem::take(&mut self.entries),
            counters: self.counters.clone(),
            reaper: self.reaper.clone(),
            reaping: true,
        };
        reap(rest);
    }

    /// Whether releasing what is left takes waiting: a DELETE owed, or a
    /// process to end by the spec's sequence.
    fn owes_delete(&self) -> bool {
        self.entries.iter().any(|e| match e {
            Entry::ServerSessions(s) => s.owes_delete(),
            #[cfg(feature = "stdio")]
            Entry::Process { .. } => true,
            _ => false,
        })
    }

    /// When a reap of this stack will have finished, at the latest.
    fn reap_deadline(&self) -> Instant {
        self.entries
            .iter()
            .filter_map(|e| match e {
                Entry::ServerSessions(s) => Some(s.deadline()),
                #[cfg(feature = "stdio")]
                Entry::Process { grace, .. } => Some(deadline_after(grace.bound())),
                _ => None,
            })
            .max()
            .unwrap_or_else(Instant::now)
    }
}

impl Drop for GuardStack {
    fn drop(&mut self) {
        // No session may start past this point (a background task still
        // running on another worker could open one): what is owed is known.
        for entry in &self.entries {
            if let Entry::ServerSessions(sessions) = entry {
                lock(&sessions.registry).closed = true;
            }
        }
        if self.reaping || !self.owes_delete() {
            // Everything can go now, from the top.
            while let Some(entry) = self.entries.pop() {
                drop(entry);
            }
            return;
        }
        // The synchronous part at once: tasks above the sessions are aborted.
        while let Some(Entry::Background(_)) = self.entries.last() {
            self.entries.pop();
        }
        self.reap_rest();
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
                Entry::ServerSessions(_) => "server sessions",
                #[cfg(feature = "stdio")]
                Entry::Process { .. } => "process tree",
                Entry::Background(_) => "background tasks",
            })
            .collect();
        f.debug_struct("GuardStack")
            .field("entries", &names)
            .finish()
    }
}

/// An owner of reaps: endings that run in the background, each within a
/// bound, and that [`drain`](Self::drain) waits for.
///
/// A session dropped without [`close`](crate::Session::close) (or a
/// connect dropped half-way) is ended by a reap: its DELETE is sent and
/// its process tree ended in a task of its own. The reaper that task is
/// counted on is its connector's ([`Connector::reaper`](crate::Connector::reaper)),
/// by default the process's ([`Reaper::global`], which [`shutdown`]
/// drains). A host that supervises sessions of its own gives them a
/// reaper it holds and drains it when it stops, like tokio-util's
/// `TaskTracker`; [`reap`](Self::reap) hands it endings of the host's own.
///
/// A reaper is a cheap handle: clones count on, and drain, the same reaps.
/// A [`child`](Self::child)'s reaps are counted on its parent too (and on
/// the parent's parent, up), so draining the parent waits for them as
/// well; a reaper from [`new`](Self::new) has no parent, and
/// [`shutdown`] does not wait for it.
///
/// ```no_run
/// # async fn run() -> mcp_scoped_http::Result<()> {
/// use mcp_scoped_http::{Connector, Reaper};
///
/// let reaper = Reaper::global().child();
/// let connector = Connector::new("http://127.0.0.1:8080/mcp").reaper(reaper.clone());
/// let session = connector.connect().await?;
/// drop(session); // its DELETE goes on in the background, counted here
/// reaper.drain().await; // ...and is done (or past its bound) now
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Reaper(Arc<Reaps>);

struct Reaps {
    /// Reaps counted here and not finished, with when each gives up.
    pending: Mutex<Vec<(u64, std::time::Instant)>>,
    /// Woken each time one of them finishes.
    done: Notify,
    parent: Option<Reaper>,
}

impl Default for Reaper {
    fn default() -> Self {
        Reaper::new()
    }
}

impl fmt::Debug for Reaper {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reaper")
            .field("pending", &self.pending())
            .field("has_parent", &self.0.parent.is_some())
            .finish()
    }
}

impl Reaper {
    /// A reaper of its own: no parent, so [`shutdown`] does not wait for
    /// its reaps; its owner drains it.
    pub fn new() -> Reaper {
        Reaper::with_parent(None)
    }

    /// The process's reaper, which [`shutdown`] drains: the default of
    /// every [`Connector`](crate::Connector).
    pub fn global() -> Reaper {
        static GLOBAL: std::sync::OnceLock<Reaper> = std::sync::OnceLock::new();
        GLOBAL.get_or_init(Reaper::new).clone()
    }

    /// A reaper whose reaps are counted here too: draining it waits for its
    /// own; draining this one (or any ancestor) waits for them as well.
    #[must_use]
    pub fn child(&self) -> Reaper {
        Reaper::with_parent(Some(self.clone()))
    }

    fn with_parent(parent: Option<Reaper>) -> Reaper {
        Reaper(Arc::new(Reaps {
            pending: Mutex::new(Vec::new()),
            done: Notify::new(),
            parent,
        }))
    }

    /// Reaps counted here (its children's included) and not finished.
    pub fn pending(&self) -> usize {
        lock(&self.0.pending).len()
    }

    /// Runs `ending` as a reap: in a task of its own, counted here (and in
    /// [`ledger()`](crate::ledger)'s `pending_reaps`) until it finishes,
    /// and waited for by [`drain`](Self::drain) for at most `bound` from
    /// now. `ending` is not stopped at its bound: bound it yourself (a
    /// `tokio::time::timeout`), as the crate's own reaps are.
    ///
    /// Returns false, having dropped `ending`, when no tokio runtime is
    /// here to run it. In a runtime that is shutting down the task never
    /// runs: `ending` is dropped, and its count with it.
    pub fn reap<F>(&self, bound: Duration, ending: F) -> bool
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return false;
        };
        let pending = PendingReap::new(self, Arc::default(), deadline_after(bound));
        runtime.spawn(async move {
            let _pending = pending;
            ending.await;
        });
        true
    }

    /// Waits until every reap counted here has finished, or has passed its
    /// bound: a reap handed to a runtime nobody drives any more stays
    /// pending (see [`ledger()`](crate::ledger)) and is not waited for
    /// beyond its bound.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: it only waits. Dropping it stops no reap.
    pub async fn drain(&self) {
        loop {
            let notified = self.0.done.notified();
            tokio::pin!(notified);
            // Registered before the check, so a reap finishing in between
            // is not missed.
            notified.as_mut().enable();
            let Some(latest) = lock(&self.0.pending)
                .iter()
                .map(|(_, deadline)| *deadline)
                .max()
            else {
                return;
            };
            let left = latest.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                tracing::warn!("reaps still pending past their deadline; not waiting for them");
                return;
            }
            tokio::select! {
                _ = notified => {}
                _ = tokio::time::sleep(left) => {}
            }
        }
    }

    /// This reaper and its ancestors.
    fn lineage(&self) -> impl Iterator<Item = &Reaper> {
        std::iter::successors(Some(self), |reaper| reaper.0.parent.as_ref())
    }
}

/// Counts one pending reap on its reaper and that one's ancestors; wakes
/// their drains when it goes.
struct PendingReap {
    id: u64,
    reaper: Reaper,
    _count: Count,
}

impl PendingReap {
    fn new(reaper: &Reaper, counters: Arc<Counters>, deadline: Instant) -> PendingReap {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let id = NEXT.fetch_add(1, Ordering::Relaxed);
        let left = deadline.saturating_duration_since(Instant::now());
        let until = std::time::Instant::now() + left;
        for reaper in reaper.lineage() {
            lock(&reaper.0.pending).push((id, until));
        }
        PendingReap {
            id,
            reaper: reaper.clone(),
            _count: Count::new(Field::PendingReaps, Some(counters)),
        }
    }
}

impl Drop for PendingReap {
    fn drop(&mut self) {
        for reaper in self.reaper.lineage() {
            // Gone from the list first, then wake, so a woken waiter sees
            // it gone.
            lock(&reaper.0.pending).retain(|(id, _)| *id != self.id);
            reaper.0.done.notify_waiters();
        }
    }
}

/// Hands the rest of a stack (with its DELETEs) to its reaper.
fn reap(stack: GuardStack) {
    let pending = PendingReap::new(&stack.reaper, stack.counters.clone(), stack.reap_deadline());
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

/// Waits until every DELETE handed to the process's reaper
/// ([`Reaper::global`]) has finished, so a process can drain before its
/// runtime ends.
///
/// Sessions dropped without [`close`](crate::Session::close) are ended in
/// the background; call this before leaving `main` (or before shutting the
/// runtime down) to let their DELETEs reach the servers. It returns at the
/// latest when every pending reap has passed its own bound (its DELETE
/// timeout), even if one was handed to a runtime that nobody drives any
/// more: such a DELETE stays pending (see [`crate::ledger()`]) and is never
/// waited for beyond its bound. Reaps of a [`Reaper::new`] (and of its
/// children) are their owner's to drain, not this one's.
pub async fn shutdown() {
    Reaper::global().drain().await;
}

/// Errors of a [`Released`] report, for a failed connect's cleanup.
pub(crate) fn cleanup_errors(released: Released) -> Vec<Error> {
    std::iter::once(released.session)
        .chain(released.earlier_sessions)
        .filter_map(|session| match session {
            SessionRelease::DeleteFailed(error) => Some(error),
            _ => None,
        })
        .collect()
}
