//! Sessions: the connect lifecycle, the session handle, close and drop.
//!
//! A [`Session`] comes only from [`Connector::connect`], fully established:
//! handshake done, catalog discovered. It owns its guard stack; see
//! [`Session::close`] for the orderly end and the crate docs for what `Drop`
//! does.

mod connect;
mod discovery;
mod listener;

use std::fmt;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde::Serialize;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

pub use connect::Connector;
pub use discovery::{Catalog, Discovery};

use crate::client::Ownership;
use crate::error::{Error, Result};
use crate::jsonrpc::{Message, Notification, Request, RequestId};
use crate::ledger::{Counters, Ledger};
use crate::scope::{GuardStack, Released};
use crate::transport::{ProtocolVersion, SessionId, StreamableHttp};

/// Whether we created the server session or the caller lent it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[non_exhaustive]
pub enum SessionOwnership {
    /// We sent `initialize`: we DELETE it when done.
    Owned,
    /// The caller's: never initialized, replaced or DELETEd by us.
    Attached,
}

/// How long each phase of connect took.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct Timings {
    /// `initialize`, to the negotiated revision (zero when attached).
    pub initialize: Duration,
    /// `notifications/initialized` (zero when attached).
    pub initialized: Duration,
    /// Every page of every list.
    pub discovery: Duration,
}

/// What the handshake told us.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct SessionInfo {
    /// `serverInfo` of the initialize result (null when attached).
    pub server_info: Value,
    /// `capabilities` of the initialize result (null when attached).
    pub capabilities: Value,
    /// `instructions` of the initialize result.
    pub instructions: Option<String>,
    /// The negotiated revision.
    pub protocol_version: ProtocolVersion,
    /// Whether the server issued a session id.
    pub session_id_issued: bool,
    /// Whether we created the server session.
    pub ownership: SessionOwnership,
    /// Whether the HTTP client is the session's own or lent by the caller.
    pub client_ownership: Ownership,
    /// Time per connect phase.
    pub timings: Timings,
}

/// Request ids of one session: 1, 2, 3, ...
#[derive(Debug, Default)]
pub(crate) struct Ids(AtomicI64);

impl Ids {
    pub(crate) fn next(&self) -> RequestId {
        RequestId::Number(self.0.fetch_add(1, Ordering::Relaxed) + 1)
    }
}

/// An established MCP session.
///
/// Safe to share between tasks (`Arc<Session>`): every method takes `&self`.
/// End it with [`close`](Self::close). Dropping it without `close` releases
/// the same things: tasks and hooks at once, the DELETE (with the hooks and
/// client it needs) through the reaper (see [`crate::shutdown`]).
pub struct Session {
    // Field order is drop order: our handle on the transport goes before the
    // stack is released.
    wire: Mutex<Option<Arc<StreamableHttp>>>,
    stack: Mutex<Option<GuardStack>>,
    closing: CancellationToken,
    info: SessionInfo,
    catalog: Catalog,
    ids: Ids,
    sink: mpsc::Sender<Message>,
    notifications: Mutex<Option<mpsc::Receiver<Message>>>,
    counters: Arc<Counters>,
    session_id: Option<SessionId>,
    // Only ever shown as an origin: a path or query may carry secrets.
    origin: String,
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Each of these mutexes guards one `Option` that is only ever taken
    // whole: a panic elsewhere cannot leave it half-changed.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Session {
    fn new(established: connect::Established, stack: GuardStack) -> Self {
        let counters = stack.counters().clone();
        let session_id = established.wire.session_id();
        let origin = established.wire.origin().to_string();
        Session {
            wire: Mutex::new(Some(established.wire)),
            stack: Mutex::new(Some(stack)),
            closing: CancellationToken::new(),
            info: established.info,
            catalog: established.catalog,
            ids: established.ids,
            sink: established.sink,
            notifications: Mutex::new(Some(established.notifications)),
            counters,
            session_id,
            origin,
        }
    }

    /// What the handshake told us.
    pub fn info(&self) -> &SessionInfo {
        &self.info
    }

    /// What the server offers, as discovered at connect.
    pub fn catalog(&self) -> &Catalog {
        &self.catalog
    }

    /// The negotiated revision.
    pub fn protocol_version(&self) -> ProtocolVersion {
        self.info.protocol_version
    }

    /// The session id, if the server issued one (or the caller attached
    /// it). A credential: see [`SessionId`].
    pub fn session_id(&self) -> Option<&SessionId> {
        self.session_id.as_ref()
    }

    /// What the session's client holds right now (hooks, tasks, sessions,
    /// reaps), per [`mod@crate::ledger`].
    pub fn ledger(&self) -> Ledger {
        self.counters.snapshot()
    }

    /// Server messages that arrived on the GET stream or before a response
    /// (notifications, server requests), in order. The receiver can be taken
    /// once; up to 256 wait in it, later ones are dropped.
    pub fn notifications(&self) -> Option<mpsc::Receiver<Message>> {
        lock(&self.notifications).take()
    }

    /// Whether [`close`](Self::close) has begun.
    pub fn is_closed(&self) -> bool {
        self.closing.is_cancelled()
    }

    fn wire(&self) -> Result<Arc<StreamableHttp>> {
        lock(&self.wire).clone().ok_or_else(Error::closed)
    }

    /// Sends a request and returns its result. Fails fast with
    /// [`Error::is_closed`] once the session is closing.
    pub async fn request(&self, method: &str, params: Option<Value>) -> Result<Value> {
        let wire = self.wire()?;
        let request = Request {
            id: self.ids.next(),
            method: method.into(),
            params,
        };
        let span = tracing::debug_span!("mcp.request", method);
        tokio::select! {
            biased;
            _ = self.closing.cancelled() => Err(Error::closed()),
            exchange = wire.request(request).instrument(span) => {
                let exchange = exchange?;
                for message in exchange.preceding {
                    // Nobody reading is fine: the caller opted out.
                    let _ = self.sink.try_send(message);
                }
                Ok(exchange.result)
            }
        }
    }

    /// Sends a notification.
    pub async fn notify(&self, method: &str, params: Option<Value>) -> Result<()> {
        let wire = self.wire()?;
        let notification = Message::Notification(Notification {
            method: method.into(),
            params,
        });
        tokio::select! {
            biased;
            _ = self.closing.cancelled() => Err(Error::closed()),
            posted = wire.post(&notification) => posted.map(drop),
        }
    }

    /// Calls a tool: `tools/call` with `name` and `arguments`.
    pub async fn call_tool(&self, name: &str, arguments: Value) -> Result<Value> {
        self.request(
            "tools/call",
            Some(json!({ "name": name, "arguments": arguments })),
        )
        .await
    }

    /// Ends the session: in-flight calls fail with a "closed" error; the
    /// listener stops and is joined; an owned server session is DELETEd
    /// (bounded by the connector's DELETE timeout) while our hooks and
    /// client are still alive; then the hooks are removed and an owned
    /// client is dropped.
    ///
    /// Idempotent and valid from any state: a second call (or one racing
    /// the first) returns at once with [`Released::already_closed`]. Never
    /// fails: a failed DELETE is reported in [`Released::session`], and
    /// local cleanup runs regardless. If this future is dropped half-way,
    /// the rest is done by the reaper.
    pub async fn close(&self) -> Released {
        self.closing.cancel();
        drop(lock(&self.wire).take());
        let stack = lock(&self.stack).take();
        let Some(mut stack) = stack else {
            return Released {
                already_closed: true,
                ..Released::default()
            };
        };
        let span = tracing::info_span!("mcp.close", endpoint = %self.origin);
        stack.unwind().instrument(span).await
    }
}

impl fmt::Debug for Session {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Session")
            .field("protocol_version", &self.info.protocol_version)
            .field("ownership", &self.info.ownership)
            .field("client_ownership", &self.info.client_ownership)
            .field("session_id_issued", &self.info.session_id_issued)
            .field("tools", &self.catalog.tools.len())
            .field("closed", &self.is_closed())
            .finish()
    }
}
