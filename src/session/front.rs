//! What a [`Session`](super::Session) does with the server's traffic: it
//! answers server requests through the caller's handlers, hands
//! notifications to the caller, and keeps the catalog current.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tracing::Instrument;

use super::SessionInfo;
use super::discovery::{Catalog, Discovery, ListKind, Lister};
use super::entry::Entry;
use super::events::{Events, SessionEvent};
use super::handlers::Handlers;
use super::options::{Progress, ProgressFn, ResumptionToken, TokenFn, call_guarded};
use crate::budget::{Account, value_cost};
use crate::engine::{Engine, Front, Generation, ListenerChange, ServerMessage};
use crate::error::{Error, Result};
use crate::jsonrpc::{ErrorObject, Message, Notification, RequestId, Response};
use crate::queue;
use crate::sync::lock;
use crate::transport::ProtocolVersion;

/// The catalog, and which of its lists a re-discovery has replaced.
#[derive(Default)]
struct Lists {
    catalog: Arc<Catalog>,
    /// Per list kind: a re-discovery has stored its list.
    relisted: [bool; 4],
}

/// What [`Session::info`](super::Session::info) shows: connect's, then
/// each renewal's.
#[derive(Default)]
struct InfoState {
    info: Option<Arc<SessionInfo>>,
    /// A renewal that came before connect handed over its info.
    renewed: Option<Renewed>,
}

/// What a renewal changes in [`SessionInfo`].
struct Renewed {
    result: Value,
    protocol_version: Option<ProtocolVersion>,
    session_id_issued: bool,
}

impl Renewed {
    fn apply(self, mut info: SessionInfo) -> SessionInfo {
        let Renewed {
            mut result,
            protocol_version,
            session_id_issued,
        } = self;
        info.server_info = result["serverInfo"].take();
        info.capabilities = result["capabilities"].take();
        info.instructions = result["instructions"].as_str().map(str::to_owned);
        if let Some(version) = protocol_version {
            info.protocol_version = version;
        }
        info.session_id_issued = session_id_issued;
        info
    }
}

/// What the session's progress tokens start with: progress with such a
/// token is a request's own, never the shared receiver's.
/// How long a handler may take to answer a server request when the
/// session has no request timeout.
const ANSWER_LIMIT: Duration = Duration::from_secs(60);

const PROGRESS_TOKEN_PREFIX: &str = "mcp-scoped-http/progress/";

/// The callbacks of the requests in flight that asked for them: one entry
/// per such request, removed by its [`Route`] guard when the request ends,
/// however it ends (so the table is bounded by the requests in flight).
#[derive(Default)]
pub(crate) struct Routes {
    /// The number of the next progress token: unique in the session.
    next_token: AtomicU64,
    progress: Mutex<HashMap<u64, ProgressFn>>,
    /// Per request: the callback, and the request's progress token.
    tokens: Mutex<HashMap<RequestId, (TokenFn, Option<Value>)>>,
}

/// The number of a progress token this crate made.
fn ours(token: &Value) -> Option<u64> {
    token
        .as_str()?
        .strip_prefix(PROGRESS_TOKEN_PREFIX)?
        .parse()
        .ok()
}

/// A request's place in [`Routes`], held for as long as the request runs.
pub(crate) enum Route<'a> {
    Progress(&'a Routes, u64),
    Tokens(&'a Routes, Option<RequestId>),
}

impl Routes {
    /// Routes progress to `callback` under a new token, until the guard
    /// is dropped; returns the token to send.
    pub(crate) fn progress(&self, callback: ProgressFn) -> (Route<'_>, Value) {
        let mut routes = lock(&self.progress);
        // A number in use (a resumed request's, made by an earlier
        // process) is skipped: one route per token.
        let number = loop {
            let number = self.next_token.fetch_add(1, Ordering::Relaxed);
            if !routes.contains_key(&number) {
                break number;
            }
        };
        routes.insert(number, callback);
        let token = Value::from(format!("{PROGRESS_TOKEN_PREFIX}{number}"));
        (Route::Progress(self, number), token)
    }

    /// Routes the progress with `token` (made by this crate for a request
    /// now resumed, maybe by an earlier process) to `callback`, until the
    /// guard is dropped; refused for a token of another's making or one in
    /// use.
    pub(crate) fn progress_as(&self, token: &Value, callback: ProgressFn) -> Result<Route<'_>> {
        let number = ours(token).ok_or_else(|| {
            Error::builder("the resumption token's progress token was not made by this crate")
        })?;
        let mut routes = lock(&self.progress);
        if routes.contains_key(&number) {
            return Err(Error::builder(
                "the resumption token's progress token is in use by a request in flight",
            ));
        }
        routes.insert(number, callback);
        Ok(Route::Progress(self, number))
    }

    /// Reports the resumption tokens of request `id`'s answer to
    /// `callback`, until the guard is dropped.
    /// A request already routed under `id` keeps its callback (and this
    /// guard removes nothing).
    pub(crate) fn tokens(
        &self,
        id: RequestId,
        callback: TokenFn,
        progress_token: Option<Value>,
    ) -> Route<'_> {
        let mut tokens = lock(&self.tokens);
        if tokens.contains_key(&id) {
            return Route::Tokens(self, None);
        }
        tokens.insert(id.clone(), (callback, progress_token));
        Route::Tokens(self, Some(id))
    }

    /// A progress notification: a token of ours goes to its request's
    /// callback (or nowhere, once that request has ended; never to the
    /// shared receiver); `None` when the token is not ours.
    fn progress_to_route(&self, notification: &Notification) -> Option<()> {
        let params = notification.params.as_ref()?;
        let number = ours(params.get("progressToken")?)?;
        // Cloned out: the callback runs with no lock held.
        let callback = lock(&self.progress).get(&number).cloned();
        match (callback, Progress::from_params(params)) {
            (Some(callback), Some(progress)) => call_guarded("progress", &*callback, progress),
            (Some(_), None) => {
                tracing::debug!("dropped a progress notification with no numeric progress")
            }
            (None, _) => tracing::debug!("dropped the progress of a request that has ended"),
        }
        Some(())
    }

    fn report_token(&self, generation: &Generation, id: &RequestId, last_event_id: &str) {
        let route = lock(&self.tokens).get(id).cloned();
        if let Some((callback, progress_token)) = route {
            let mut token =
                ResumptionToken::new(id.clone(), last_event_id).on_session(generation.session_id());
            if let Some(progress_token) = progress_token {
                token = token.with_progress_token(progress_token);
            }
            call_guarded("resumption token", &*callback, token);
        }
    }

    #[cfg(test)]
    fn is_empty(&self) -> bool {
        lock(&self.progress).is_empty() && lock(&self.tokens).is_empty()
    }
}

impl Drop for Route<'_> {
    fn drop(&mut self) {
        // The callback (and whatever it holds) goes with the route.
        match self {
            Route::Progress(routes, number) => drop(lock(&routes.progress).remove(number)),
            Route::Tokens(routes, Some(id)) => drop(lock(&routes.tokens).remove(id)),
            Route::Tokens(_, None) => {}
        }
    }
}

/// A session's front end of the engine.
pub(crate) struct SessionFront {
    pub(crate) handlers: Handlers,
    /// Where notifications go, bounded in count and bytes; closed at
    /// close, which ends the receiver.
    sink: queue::Sender<Message>,
    info: Mutex<InfoState>,
    lists: Mutex<Lists>,
    pub(crate) discovery: Discovery,
    /// The session's memory account: every catalog page read, at connect
    /// or later, is charged to it.
    account: Account,
    /// Bound on each page of a re-discovery.
    request_timeout: Option<Duration>,
    /// Per list kind: at most one re-discovery at a time.
    rediscovery: [Rerun; 4],
    /// What happened to the session, for `Session::events`.
    pub(crate) events: Events,
    /// Per-request progress and resumption token callbacks.
    pub(crate) routes: Routes,
}

impl SessionFront {
    pub(crate) fn new(
        handlers: Handlers,
        sink: queue::Sender<Message>,
        account: Account,
        discovery: Discovery,
        request_timeout: Option<Duration>,
    ) -> Self {
        SessionFront {
            handlers,
            sink,
            info: Mutex::default(),
            lists: Mutex::default(),
            account,
            discovery,
            request_timeout,
            rediscovery: Default::default(),
            events: Events::default(),
            routes: Routes::default(),
        }
    }

    pub(crate) fn account(&self) -> &Account {
        &self.account
    }

    /// A result read whole, charged to the session's account while it is
    /// built (by its parsed size, estimated from its text first): a result
    /// the budget cannot hold is a limit error, never an allocation the
    /// budget did not allow. The value is the caller's once returned.
    pub(crate) fn result_value(
        &self,
        result: &serde_json::value::RawValue,
        method: &str,
    ) -> crate::Result<serde_json::Value> {
        let text = result.get();
        let cost = value_cost(text).unwrap_or(0);
        let _building = self
            .account
            .charge(text.len().saturating_add(cost), 0)
            .map_err(|spent| spent.reading(&format!("the {method} result")))?;
        crate::error::result_value(result, method)
    }

    /// Drops the notification sender: the caller's receiver ends once it
    /// has read what is queued.
    pub(crate) fn close_sink(&self) {
        self.sink.close();
    }

    /// The info of the server session in use.
    pub(crate) fn info(&self) -> Option<Arc<SessionInfo>> {
        lock(&self.info).info.clone()
    }

    /// Sets connect's info (with a renewal that came first applied).
    pub(crate) fn set_info(&self, info: SessionInfo) {
        let mut state = lock(&self.info);
        let info = match state.renewed.take() {
            Some(renewed) => renewed.apply(info),
            None => info,
        };
        state.info = Some(Arc::new(info));
    }

    pub(crate) fn catalog(&self) -> Arc<Catalog> {
        lock(&self.lists).catalog.clone()
    }

    /// Stores what connect discovered. A list that a re-discovery has
    /// stored meanwhile (the server announced a change on the GET stream
    /// while connect was still listing) is newer than connect's: it stays.
    pub(crate) fn set_catalog(&self, mut catalog: Catalog) {
        let mut lists = lock(&self.lists);
        let Lists {
            catalog: current,
            relisted,
        } = &mut *lists;
        for kind in ListKind::ALL {
            if relisted[kind.index()] {
                *kind.field(&mut catalog) = std::mem::take(kind.field(Arc::make_mut(current)));
            }
        }
        *current = Arc::new(catalog);
    }

    /// Replaces one list, under the lock: runs of different kinds ending
    /// together never undo each other. Then, with the list in place, the
    /// change is announced ([`SessionEvent::CatalogChanged`]).
    pub(crate) fn set_list(&self, kind: ListKind, list: Vec<Entry>) {
        {
            let mut lists = lock(&self.lists);
            *kind.field(Arc::make_mut(&mut lists.catalog)) = list;
            lists.relisted[kind.index()] = true;
        }
        self.events.catalog_changed(kind);
    }

    /// Re-runs discovery of one list in the background: at most one run per
    /// kind at a time (a change during a run owes one more run), and runs
    /// of one kind start at least [`Discovery::relist_interval`] apart (changes
    /// announced meanwhile are served by the next run), so that a server
    /// can cause at most one re-listing of each list a second, whatever it
    /// announces; each page bounded by the request timeout; a failed run
    /// keeps the previous list. It never opens a session: on one the
    /// server has expired it fails (the next request of the caller renews
    /// the session, and the renewal lists again).
    pub(crate) fn rediscover(engine: &Arc<Engine<SessionFront>>, kind: ListKind) {
        let rerun = &engine.front.rediscovery[kind.index()];
        if !rerun.request() {
            return;
        }
        let task_engine = engine.clone();
        let spawned = engine.spawner().spawn(move |cancel| async move {
            let engine = task_engine;
            let front = &engine.front;
            let rerun = &front.rediscovery[kind.index()];
            loop {
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    () = rerun.pace(front.discovery.relist_interval) => {}
                }
                let mut lister = Lister::new(
                    &engine,
                    front.account(),
                    &front.discovery,
                    front.request_timeout,
                    false,
                    false,
                );
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    listed = lister.list(kind) => match listed {
                        Ok(list) => front.set_list(kind, list),
                        Err(error) => tracing::debug!(%error, "re-discovery failed; the previous list stays"),
                    },
                }
                if !rerun.finished() {
                    return;
                }
            }
        });
        if !spawned {
            rerun.abandon();
        }
    }
}

impl Front for SessionFront {
    async fn deliver(
        engine: &Arc<Engine<Self>>,
        generation: &Arc<Generation>,
        message: ServerMessage,
    ) {
        match message {
            ServerMessage::Request(request) => {
                // Answered on the session that asked, with its headers.
                let span = tracing::debug_span!("mcp.answer", method = %request.method);
                async {
                    // A handler that never returns must not hold one of
                    // the session's answering slots for good: bounded by
                    // the request timeout (60 s without one), then the
                    // server is told.
                    let limit = engine.front.request_timeout.unwrap_or(ANSWER_LIMIT);
                    let answering = engine
                        .front
                        .handlers
                        .answer(&request.method, request.params);
                    let outcome =
                        tokio::time::timeout(limit, answering)
                            .await
                            .unwrap_or_else(|_| {
                                Err(ErrorObject {
                                    code: crate::jsonrpc::codes::INTERNAL_ERROR,
                                    message: format!("the client did not answer within {limit:?}"),
                                    data: None,
                                })
                            });
                    let response = match outcome {
                        Ok(result) => Response {
                            id: Some(request.id),
                            outcome: Ok(crate::jsonrpc::raw(&result)),
                        },
                        Err(error) => Response::error(Some(request.id), error),
                    };
                    if let Err(error) = engine.respond(generation, &response).await {
                        tracing::debug!(%error, "answering a server request failed");
                    }
                }
                .instrument(span)
                .await;
            }
            ServerMessage::Notification(notification) => {
                if notification.method == "notifications/progress"
                    && engine
                        .front
                        .routes
                        .progress_to_route(&notification)
                        .is_some()
                {
                    return;
                }
                for kind in ListKind::changed_by(&notification.method).unwrap_or_default() {
                    SessionFront::rediscover(engine, *kind);
                }
                // Never waits: over the queue's bounds it is dropped (and
                // logged), and the stream is read on.
                let offered = engine.front.sink.offer(Message::Notification(notification));
                if offered == queue::Offered::Closed {
                    tracing::debug!("dropped a notification: nobody is reading");
                }
            }
        }
    }

    fn renewed<'a>(
        engine: &'a Arc<Engine<Self>>,
        generation: &'a Arc<Generation>,
        initialize_result: &'a Value,
    ) -> impl Future<Output = ()> + Send + 'a {
        // The info describes the session in use from now on.
        let renewed = Renewed {
            result: initialize_result.clone(),
            protocol_version: generation.wire().protocol_version(),
            session_id_issued: generation.session_id().is_some(),
        };
        {
            let mut state = lock(&engine.front.info);
            match state.info.take() {
                Some(info) => state.info = Some(Arc::new(renewed.apply((*info).clone()))),
                None => state.renewed = Some(renewed),
            }
        }
        // Announced before the re-listing it starts, whose events follow.
        let revision = generation
            .wire()
            .protocol_version()
            .or_else(|| engine.front.info().map(|info| info.protocol_version));
        if let Some(revision) = revision {
            engine.front.events.send(SessionEvent::Renewed {
                session_id: generation.session_id(),
                revision,
            });
        }
        // The new session may offer something else: list it again.
        let capabilities = initialize_result.get("capabilities");
        for kind in ListKind::ALL {
            if kind.wanted(&engine.front.discovery) && kind.offered(capabilities) {
                SessionFront::rediscover(engine, kind);
            }
        }
        std::future::ready(())
    }

    fn answer_event_id(
        engine: &Arc<Engine<Self>>,
        generation: &Arc<Generation>,
        id: &RequestId,
        last_event_id: &str,
    ) {
        engine
            .front
            .routes
            .report_token(generation, id, last_event_id);
    }

    fn ended(engine: &Arc<Engine<Self>>, error: &Error) {
        engine.front.events.send(SessionEvent::Ended {
            reason: error.to_string(),
        });
    }

    fn listener_changed(engine: &Arc<Engine<Self>>, change: ListenerChange) {
        engine.front.events.send(match change {
            ListenerChange::Up => SessionEvent::ListenerUp,
            ListenerChange::Down { reason, retrying } => {
                SessionEvent::ListenerDown { reason, retrying }
            }
        });
    }
}

/// A background job run at most once at a time; asked for while it runs,
/// it runs once more; runs start [`Discovery::relist_interval`] apart at
/// least.
#[derive(Debug, Default)]
pub(crate) struct Rerun(Mutex<RunState>, Mutex<Option<tokio::time::Instant>>);

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum RunState {
    #[default]
    Idle,
    Running,
    /// Running, with one more run owed.
    RunningAgain,
}

impl Rerun {
    /// Asks for a run; true when the caller must start one (it was idle).
    pub(crate) fn request(&self) -> bool {
        let mut state = lock(&self.0);
        let start = *state == RunState::Idle;
        *state = if start {
            RunState::Running
        } else {
            RunState::RunningAgain
        };
        start
    }

    /// Waits until a run may start (`interval` after the last one
    /// started), then starts it: requests made until now are served by it
    /// (they coalesce into this one run).
    pub(crate) async fn pace(&self, interval: Duration) {
        let last = *lock(&self.1);
        if let Some(last) = last {
            tokio::time::sleep_until(crate::deadline::deadline_after_from(last, interval)).await;
        }
        *lock(&self.1) = Some(tokio::time::Instant::now());
        let mut state = lock(&self.0);
        if *state == RunState::RunningAgain {
            *state = RunState::Running;
        }
    }

    /// A run ended; true when another is owed (the runner goes on).
    pub(crate) fn finished(&self) -> bool {
        let mut state = lock(&self.0);
        let again = *state == RunState::RunningAgain;
        *state = if again {
            RunState::Running
        } else {
            RunState::Idle
        };
        again
    }

    /// The run asked for could not start.
    pub(crate) fn abandon(&self) {
        *lock(&self.0) = RunState::Idle;
    }

    #[cfg(test)]
    fn is_idle(&self) -> bool {
        *lock(&self.0) == RunState::Idle
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::AtomicUsize;

    use serde_json::json;

    use super::{Notification, Routes};

    fn progress(token: serde_json::Value) -> Notification {
        Notification {
            method: "notifications/progress".into(),
            params: Some(json!({"progressToken": token, "progress": 1})),
        }
    }

    /// Tokens are unique and routed only while their guard lives; a token
    /// the session did not make is not its to route.
    #[test]
    fn routes_live_as_long_as_their_guards() {
        let routes = Routes::default();
        let calls = Arc::new(AtomicUsize::new(0));
        let counted = calls.clone();
        let (route, token) = routes.progress(Arc::new(move |_| {
            counted.fetch_add(1, Ordering::SeqCst);
        }));
        let (other, other_token) = routes.progress(Arc::new(|_| {}));
        assert_ne!(token, other_token);
        assert_eq!(routes.progress_to_route(&progress(token.clone())), Some(()));
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert_eq!(routes.progress_to_route(&progress(json!("theirs"))), None);
        assert_eq!(routes.progress_to_route(&progress(json!(7))), None);
        let tokens = routes.tokens(3.into(), Arc::new(|_| {}), None);
        // A second route under the same id neither replaces nor removes it.
        drop(routes.tokens(3.into(), Arc::new(|_| {}), None));
        // A token in use cannot be routed twice; a new one skips it.
        assert!(routes.progress_as(&token, Arc::new(|_| {})).is_err());
        assert!(
            routes
                .progress_as(&json!("theirs"), Arc::new(|_| {}))
                .is_err()
        );
        let later = routes
            .progress_as(&json!("mcp-scoped-http/progress/2"), Arc::new(|_| {}))
            .unwrap();
        let (next, next_token) = routes.progress(Arc::new(|_| {}));
        assert_eq!(next_token, json!("mcp-scoped-http/progress/3"));
        drop((later, next));
        drop((route, other));
        assert!(!routes.is_empty(), "the first token route stays");
        drop(tokens);
        assert!(routes.is_empty());
        // Ours, ended: taken (dropped), not handed on.
        assert_eq!(routes.progress_to_route(&progress(token)), Some(()));
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }

    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::mpsc;
    use std::time::{Duration, Instant};

    use super::Rerun;

    /// The lost wakeup: a request made while a run is ending must still be
    /// served by a run that starts after it. A notifier thread asks
    /// 200,000 times, each time after bumping an epoch; a runner thread
    /// runs whenever it is told to start, and each run records the epoch it
    /// saw. Once the notifier is done and the job is idle again, the last
    /// epoch must have been seen by a run.
    #[test]
    fn a_request_while_a_run_ends_is_never_lost() {
        const ASKS: u64 = 200_000;
        let rerun = Arc::new(Rerun::default());
        let epoch = Arc::new(AtomicU64::new(0));
        let seen = Arc::new(AtomicU64::new(0));
        let (start, started) = mpsc::channel::<()>();
        let runner = {
            let (rerun, epoch, seen) = (rerun.clone(), epoch.clone(), seen.clone());
            std::thread::spawn(move || {
                while started.recv().is_ok() {
                    loop {
                        seen.store(epoch.load(Ordering::SeqCst), Ordering::SeqCst);
                        if !rerun.finished() {
                            break;
                        }
                    }
                }
            })
        };
        for ask in 1..=ASKS {
            epoch.store(ask, Ordering::SeqCst);
            if rerun.request() {
                start.send(()).unwrap();
            }
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        while !rerun.is_idle() && Instant::now() < deadline {
            std::thread::yield_now();
        }
        drop(start);
        runner.join().unwrap();
        assert!(rerun.is_idle(), "a run is owed but no runner is left");
        assert_eq!(
            seen.load(Ordering::SeqCst),
            ASKS,
            "the last request was never served"
        );
    }
}
