//! The state a session shares with its background tasks, and the exchange
//! engine every request goes through.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};
use tracing::Instrument;

use super::discovery::{Discovery, ListKind, Lister};
use super::handlers::Handlers;
use super::{Catalog, Ids, SessionOwnership};
use crate::error::{Error, Result};
use crate::jsonrpc::{ErrorObject, Message, Notification, Request, RequestId, Response};
use crate::scope::Spawner;
use crate::transport::{ProtocolVersion, ReplayFilter, StreamableHttp};

/// How a request's SSE answer is resumed after it broke off (a network cut,
/// or the server closing it on purpose to make the client poll).
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct Resumption {
    /// GETs with `Last-Event-ID` per request, at most; partial progress does
    /// not reset the count. Default: 5.
    pub max_attempts: usize,
    /// The wait when the server sent no `retry`, doubled per attempt.
    /// Default: 250 ms.
    pub first_backoff: Duration,
    /// The longest wait, whatever the server's `retry` says. Default: 10 s.
    pub max_wait: Duration,
}

impl Resumption {
    /// Sets [`max_attempts`](Self::max_attempts); 0 disables resumption.
    pub fn max_attempts(mut self, attempts: usize) -> Self {
        self.max_attempts = attempts;
        self
    }

    /// Sets [`first_backoff`](Self::first_backoff).
    pub fn first_backoff(mut self, wait: Duration) -> Self {
        self.first_backoff = wait;
        self
    }

    /// Sets [`max_wait`](Self::max_wait).
    pub fn max_wait(mut self, wait: Duration) -> Self {
        self.max_wait = wait;
        self
    }
}

impl Default for Resumption {
    fn default() -> Self {
        Resumption {
            max_attempts: 5,
            first_backoff: Duration::from_millis(250),
            max_wait: Duration::from_secs(10),
        }
    }
}

const IDLE: u8 = 0;
const RUNNING: u8 = 1;
const RUNNING_AGAIN: u8 = 2;

/// What a session and its background tasks share.
pub(crate) struct Shared {
    wire: Mutex<Option<Arc<StreamableHttp>>>,
    pub(crate) ids: Ids,
    pub(crate) handlers: Handlers,
    pub(crate) sink: mpsc::Sender<Message>,
    pub(crate) spawner: Spawner,
    pub(crate) resumption: Resumption,
    pub(crate) discovery: Discovery,
    pub(crate) ownership: SessionOwnership,
    pub(crate) listen: bool,
    /// Whether a GET listener is running.
    pub(crate) listening: AtomicBool,
    /// Requests awaiting their response, for one that arrives on another
    /// stream (the GET stream, or another request's answer).
    pending: Mutex<HashMap<RequestId, oneshot::Sender<Response>>>,
    catalog: Mutex<Arc<Catalog>>,
    /// Per list kind: idle, running, or running with another run owed.
    rediscovery: [AtomicU8; 4],
    /// The session generation: bumped by every re-initialize.
    pub(crate) generation: tokio::sync::Mutex<u64>,
    pub(crate) client_info: Value,
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Each guards a value replaced whole: a panic elsewhere cannot leave it
    // half-changed.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[allow(clippy::too_many_arguments)]
impl Shared {
    pub(crate) fn new(
        wire: Arc<StreamableHttp>,
        handlers: Handlers,
        sink: mpsc::Sender<Message>,
        spawner: Spawner,
        resumption: Resumption,
        discovery: Discovery,
        ownership: SessionOwnership,
        listen: bool,
        client_info: Value,
    ) -> Self {
        Shared {
            wire: Mutex::new(Some(wire)),
            ids: Ids::default(),
            handlers,
            sink,
            spawner,
            resumption,
            discovery,
            ownership,
            listen,
            listening: AtomicBool::new(false),
            pending: Mutex::default(),
            catalog: Mutex::new(Arc::new(Catalog::default())),
            rediscovery: Default::default(),
            generation: tokio::sync::Mutex::new(0),
            client_info,
        }
    }

    /// The transport, until the session closes.
    pub(crate) fn wire(&self) -> Result<Arc<StreamableHttp>> {
        lock(&self.wire).clone().ok_or_else(Error::closed)
    }

    /// Drops the session's own handle on the transport (at close).
    pub(crate) fn take_wire(&self) -> Option<Arc<StreamableHttp>> {
        lock(&self.wire).take()
    }

    pub(crate) fn catalog(&self) -> Arc<Catalog> {
        lock(&self.catalog).clone()
    }

    pub(crate) fn set_catalog(&self, catalog: Catalog) {
        *lock(&self.catalog) = Arc::new(catalog);
    }

    /// Sends `request` and reads its answer up to its response: server
    /// requests are answered and notifications dispatched as they come; a
    /// stream that breaks off after an event id is resumed with
    /// `Last-Event-ID` (waiting the server's `retry`, or a bounded backoff);
    /// events a resumed stream replays are ignored.
    ///
    /// The response is taken wherever it arrives: on this answer, a resumed
    /// one, the GET stream, or another request's answer.
    pub(crate) async fn exchange(
        self: &Arc<Self>,
        wire: &StreamableHttp,
        request: Request,
    ) -> Result<Value> {
        let (deliver, delivered) = oneshot::channel();
        lock(&self.pending).insert(request.id.clone(), deliver);
        // Unregistered however this future ends.
        let _pending = scopeguard::guard(request.id.clone(), |id| {
            lock(&self.pending).remove(&id);
        });
        tokio::select! {
            outcome = self.read_answer(wire, request) => outcome,
            // A dropped sender (never, while registered) disables this arm.
            Ok(response) = delivered => response.outcome.map_err(Error::rpc),
        }
    }

    async fn read_answer(
        self: &Arc<Self>,
        wire: &StreamableHttp,
        request: Request,
    ) -> Result<Value> {
        let id = request.id.clone();
        let mut stream = match wire.post(&Message::Request(request)).await? {
            crate::transport::Posted::Stream(stream) => stream,
            crate::transport::Posted::Accepted => {
                unreachable!("a request is never merely accepted")
            }
        };
        let mut seen = ReplayFilter::new();
        let mut attempts = 0;
        loop {
            let mut broke = None;
            while let Some(item) = stream.next().await {
                let message = match item {
                    Ok(message) => message,
                    // A dropped connection is not a cancellation: resume.
                    Err(error) if error.is_transport() => {
                        broke = Some(error);
                        break;
                    }
                    Err(error) => return Err(error),
                };
                if let Some(key) = stream.replay_key() {
                    if !seen.first(key) {
                        continue;
                    }
                }
                match message {
                    Message::Response(response) if response.id.as_ref() == Some(&id) => {
                        return response.outcome.map_err(Error::rpc);
                    }
                    Message::Response(Response { id: None, outcome }) => {
                        return Err(Error::rpc(outcome.err().unwrap_or_else(|| ErrorObject {
                            code: crate::jsonrpc::codes::INTERNAL_ERROR,
                            message: "a response without an id".into(),
                            data: None,
                        })));
                    }
                    other => self.dispatch(wire, other).await,
                }
            }
            let mut cause = || {
                broke.take().unwrap_or_else(|| {
                    Error::protocol(format!(
                        "the answer ended without the response to request {id}"
                    ))
                })
            };
            let Some(last_event_id) = stream.last_event_id().map(str::to_owned) else {
                return Err(cause());
            };
            if attempts == self.resumption.max_attempts {
                return Err(Error::protocol(format!(
                    "the answer to request {id} broke off; gave up after {attempts} resumptions"
                ))
                .with_cleanup(vec![cause()]));
            }
            attempts += 1;
            let wait = stream
                .retry()
                .unwrap_or(self.resumption.first_backoff * 2u32.saturating_pow(attempts as u32 - 1))
                .min(self.resumption.max_wait);
            tracing::debug!(%id, attempt = attempts, ?wait, "resuming a broken answer");
            tokio::time::sleep(wait).await;
            stream = match wire.open_get_stream(Some(&last_event_id)).await? {
                Some(resumed) => resumed,
                None => {
                    return Err(Error::protocol(format!(
                        "the answer to request {id} broke off and cannot be resumed: \
                         the server has no GET stream (405)"
                    )));
                }
            };
        }
    }

    /// Handles one message that is not the awaited response.
    pub(crate) async fn dispatch(self: &Arc<Self>, wire: &StreamableHttp, message: Message) {
        match message {
            Message::Request(request) => self.answer(wire, request).await,
            Message::Notification(notification) => {
                for kind in ListKind::changed_by(&notification.method).unwrap_or_default() {
                    self.rediscover(*kind);
                }
                if self
                    .sink
                    .try_send(Message::Notification(notification))
                    .is_err()
                {
                    tracing::debug!("dropped a notification: nobody is reading");
                }
            }
            Message::Response(response) => {
                let waiting = response
                    .id
                    .as_ref()
                    .and_then(|id| lock(&self.pending).remove(id));
                match waiting {
                    Some(deliver) => {
                        // The request may have just ended: then it is dropped.
                        let _ = deliver.send(response);
                    }
                    None => {
                        tracing::debug!(id = ?response.id, "dropped a response to no request of ours")
                    }
                }
            }
        }
    }

    /// Answers a server request with a POST carrying the session headers.
    async fn answer(&self, wire: &StreamableHttp, request: Request) {
        let span = tracing::debug_span!("mcp.answer", method = %request.method);
        async {
            let outcome = self.handlers.answer(&request.method, request.params).await;
            let response = Message::Response(Response {
                id: Some(request.id),
                outcome,
            });
            if let Err(error) = wire.post(&response).await {
                tracing::debug!(%error, "answering a server request failed");
            }
        }
        .instrument(span)
        .await
    }

    /// Re-runs discovery of one list in the background: at most one run per
    /// kind in flight (a change during a run owes one more run); a failed
    /// run keeps the previous list.
    pub(crate) fn rediscover(self: &Arc<Self>, kind: ListKind) {
        let state = &self.rediscovery[kind.index()];
        if state
            .compare_exchange(IDLE, RUNNING, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            state.store(RUNNING_AGAIN, Ordering::Release);
            return;
        }
        let shared = self.clone();
        let spawned = self.spawner.spawn(move |cancel| async move {
            loop {
                let run = async {
                    let wire = shared.wire()?;
                    Lister::new(&shared, &wire, None).list(kind).await
                };
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    listed = run => match listed {
                        Ok(list) => {
                            let mut catalog = (*shared.catalog()).clone();
                            *kind.field(&mut catalog) = list;
                            shared.set_catalog(catalog);
                        }
                        Err(error) => tracing::debug!(%error, "re-discovery failed; the previous list stays"),
                    },
                }
                let state = &shared.rediscovery[kind.index()];
                if state
                    .compare_exchange(RUNNING, IDLE, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
                {
                    return;
                }
                state.store(RUNNING, Ordering::Release);
            }
        });
        if !spawned {
            state.store(IDLE, Ordering::Release);
        }
    }

    /// Tells the server a request was abandoned (never for `initialize`).
    pub(crate) fn cancelled(self: &Arc<Self>, id: RequestId, reason: &'static str) {
        let Ok(wire) = self.wire() else {
            return;
        };
        self.spawner.spawn(move |cancel| async move {
            let notice = Message::Notification(Notification {
                method: "notifications/cancelled".into(),
                params: Some(json!({ "requestId": id, "reason": reason })),
            });
            tokio::select! {
                _ = cancel.cancelled() => {}
                _ = tokio::time::timeout(Duration::from_secs(5), wire.post(&notice)) => {}
            }
        });
    }

    /// initialize (as the connector does) and initialized, on the same
    /// transport, for a new server session.
    pub(crate) async fn initialize(
        self: &Arc<Self>,
        wire: &StreamableHttp,
    ) -> Result<(ProtocolVersion, Value)> {
        let request = Request {
            id: self.ids.next(),
            method: "initialize".into(),
            params: Some(json!({
                "protocolVersion": ProtocolVersion::LATEST.as_str(),
                "capabilities": self.handlers.capabilities(),
                "clientInfo": self.client_info,
            })),
        };
        let init = self.exchange(wire, request).await?;
        let version = negotiated(&init)?;
        wire.set_protocol_version(version);
        wire.post(&Message::Notification(Notification {
            method: "notifications/initialized".into(),
            params: None,
        }))
        .await?;
        Ok((version, init))
    }
}

/// The revision the server answered, if we speak it.
pub(crate) fn negotiated(init: &Value) -> Result<ProtocolVersion> {
    let answered = init["protocolVersion"]
        .as_str()
        .ok_or_else(|| Error::protocol("the initialize result has no protocolVersion"))?;
    answered.parse()
}
