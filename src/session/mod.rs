//! Sessions: the connect lifecycle, the session handle, close and drop.
//!
//! A [`Session`] comes only from [`Connector::connect`], fully established:
//! handshake done, catalog discovered. It owns its guard stack; see
//! [`Session::close`] for the orderly end and the crate docs for what `Drop`
//! does.

mod connect;
mod discovery;
mod handlers;
mod listener;
mod shared;

use std::fmt;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde::Serialize;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tracing::Instrument;

pub use connect::Connector;
pub use discovery::{Catalog, Discovery};
pub use shared::Resumption;

use crate::client::Ownership;
use crate::error::{Error, Result};
use crate::jsonrpc::{Message, Notification, Request, RequestId};
use crate::ledger::{Counters, Ledger};
use crate::scope::{GuardStack, Released};
use crate::transport::{ProtocolVersion, SessionId};
use shared::Shared;

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

    /// Continues after ids used before this counter existed.
    pub(crate) fn skip(&self, used: i64) {
        self.0.fetch_add(used, Ordering::Relaxed);
    }
}

/// Per-request settings.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct RequestOptions {
    /// Overrides the session's default timeout ([`Connector::request_timeout`]);
    /// `Some(None)` means no timeout for this request.
    pub timeout: Option<Option<Duration>>,
}

impl RequestOptions {
    /// This request's timeout.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(Some(timeout));
        self
    }

    /// No timeout for this request.
    pub fn no_timeout(mut self) -> Self {
        self.timeout = Some(None);
        self
    }
}

/// One page of a list method.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct Page {
    /// The entries, verbatim.
    pub items: Vec<Value>,
    /// The cursor of the next page, if any.
    pub next_cursor: Option<String>,
}

/// An established MCP session.
///
/// Safe to share between tasks (`Arc<Session>`): every method takes `&self`,
/// and requests run concurrently, each resolving on its own (a failure of
/// one never affects the others or the session).
///
/// End it with [`close`](Self::close). Dropping it without `close` releases
/// the same things: tasks and hooks at once, the DELETE (with the hooks and
/// client it needs) through the reaper (see [`crate::shutdown`]).
pub struct Session {
    shared: Arc<Shared>,
    stack: Mutex<Option<GuardStack>>,
    info: SessionInfo,
    notifications: Mutex<Option<mpsc::Receiver<Message>>>,
    counters: Arc<Counters>,
    request_timeout: Option<Duration>,
    // Only ever shown as an origin: a path or query may carry secrets.
    origin: String,
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Each of these mutexes guards one `Option` that is only ever taken
    // whole: a panic elsewhere cannot leave it half-changed.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Sends `notifications/cancelled` for a request whose caller walked away
/// or whose deadline passed, unless disarmed.
struct CancelOnDrop<'a> {
    shared: &'a Arc<Shared>,
    id: Option<RequestId>,
    reason: &'static str,
}

impl CancelOnDrop<'_> {
    fn disarm(&mut self) {
        self.id = None;
    }
}

impl Drop for CancelOnDrop<'_> {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            self.shared.cancelled(id, self.reason);
        }
    }
}

impl Session {
    fn new(established: connect::Established, stack: GuardStack) -> Self {
        let counters = stack.counters().clone();
        Session {
            shared: established.shared,
            stack: Mutex::new(Some(stack)),
            info: established.info,
            notifications: Mutex::new(Some(established.notifications)),
            counters,
            request_timeout: established.request_timeout,
            origin: established.origin,
        }
    }

    /// What the handshake told us.
    pub fn info(&self) -> &SessionInfo {
        &self.info
    }

    /// What the server offers: as discovered at connect, updated when the
    /// server announces a change (`notifications/*/list_changed`).
    pub fn catalog(&self) -> Arc<Catalog> {
        self.shared.catalog()
    }

    /// The negotiated revision.
    pub fn protocol_version(&self) -> ProtocolVersion {
        self.info.protocol_version
    }

    /// The current session id, if the server issued one (or the caller
    /// attached it). It changes if an owned session is re-initialized after
    /// expiring. A credential: see [`SessionId`].
    pub fn session_id(&self) -> Option<SessionId> {
        self.shared.wire().ok()?.session_id()
    }

    /// What the session's client holds right now (hooks, tasks, sessions,
    /// reaps), per [`mod@crate::ledger`].
    pub fn ledger(&self) -> Ledger {
        self.counters.snapshot()
    }

    /// Server notifications (progress, logging, list changes, resource
    /// updates), from the GET stream and from the answers to requests, in
    /// the order each stream delivered them. The receiver can be taken once;
    /// up to 256 wait in it, later ones are dropped. Server requests are not
    /// here: they are answered (see [`Connector::on_elicitation`] and
    /// friends).
    pub fn notifications(&self) -> Option<mpsc::Receiver<Message>> {
        lock(&self.notifications).take()
    }

    /// Whether [`close`](Self::close) has begun.
    pub fn is_closed(&self) -> bool {
        self.shared.spawner.token().is_cancelled()
    }

    /// Sends a request and returns its result, with the session's default
    /// timeout.
    pub async fn request(&self, method: &str, params: Option<Value>) -> Result<Value> {
        self.request_with(method, params, RequestOptions::default())
            .await
    }

    /// Sends a request and returns its result.
    ///
    /// - The answer may come as JSON or on an SSE stream; server requests on
    ///   it are answered and notifications delivered meanwhile. If the
    ///   stream breaks off after an event id, it is resumed (see
    ///   [`Connector::resumption`]).
    /// - On timeout, or if this future is dropped, a
    ///   `notifications/cancelled` is sent and a late response is ignored.
    /// - If an owned session has expired (404 to a request with our session
    ///   id), it is re-initialized once, with one re-initialize however many
    ///   requests hit the 404 together, discovery re-run, and the request
    ///   retried; a second 404 is an error. An attached session reports
    ///   [`Error::is_session_expired`] and is left alone.
    /// - Once the session is closing: [`Error::is_closed`], at once.
    pub async fn request_with(
        &self,
        method: &str,
        params: Option<Value>,
        options: RequestOptions,
    ) -> Result<Value> {
        let timeout = options.timeout.unwrap_or(self.request_timeout);
        // One deadline for the whole request: its exchanges and a
        // re-initialize it waits for.
        let deadline_at = timeout.map(|limit| (limit, tokio::time::Instant::now() + limit));
        let span = tracing::debug_span!("mcp.request", method);
        async {
            let mut retried = false;
            loop {
                // Waits for a re-initialize another request is running.
                let generation = deadline(deadline_at, async {
                    Ok(*self.shared.generation.lock().await)
                })
                .await?;
                let wire = self.shared.wire()?;
                let id = self.shared.ids.next();
                let mut cancel = CancelOnDrop {
                    shared: &self.shared,
                    id: (method != "initialize").then(|| id.clone()),
                    reason: "the caller abandoned the request",
                };
                let request = Request {
                    id,
                    method: method.into(),
                    params: params.clone(),
                };
                let exchange = self.shared.exchange(&wire, request);
                let outcome = tokio::select! {
                    biased;
                    _ = self.shared.spawner.token().cancelled() => {
                        cancel.disarm();
                        return Err(Error::closed());
                    }
                    outcome = deadline(deadline_at, exchange) => outcome,
                };
                match outcome {
                    Err(error) if error.is_timeout() => {
                        cancel.reason = "timed out";
                        return Err(error);
                    }
                    Err(error)
                        if error.is_session_expired()
                            && self.info.ownership == SessionOwnership::Owned
                            && !retried =>
                    {
                        // The server forgot the request with the session.
                        cancel.disarm();
                        drop(wire);
                        deadline(deadline_at, self.reinitialize(generation)).await?;
                        retried = true;
                    }
                    outcome => {
                        cancel.disarm();
                        return outcome;
                    }
                }
            }
        }
        .instrument(span)
        .await
    }

    /// Re-initializes an expired owned session, once per generation: the
    /// first caller does it (as a background task, so that it is never cut
    /// off half-way), the others wait for it and then retry.
    async fn reinitialize(&self, seen: u64) -> Result<()> {
        let mut generation = self.shared.generation.lock().await;
        if *generation != seen {
            return Ok(());
        }
        let (done, outcome) = tokio::sync::oneshot::channel();
        let shared = self.shared.clone();
        let spawned = self.shared.spawner.spawn(move |cancel| async move {
            let run = async {
                let wire = shared.wire()?;
                // The old id is never sent again.
                wire.forget_session();
                let (_, init) = shared.initialize(&wire).await?;
                match discovery::discover(&shared, &wire, Some(&init["capabilities"])).await {
                    Ok(catalog) => shared.set_catalog(catalog),
                    Err(error) => tracing::debug!(%error, "re-discovery after re-initialize failed; the previous catalog stays"),
                }
                if shared.listen {
                    listener::spawn(&shared);
                }
                Ok(())
            };
            tokio::select! {
                _ = cancel.cancelled() => {}
                outcome = run => {
                    let _ = done.send(outcome);
                }
            }
        });
        if !spawned {
            return Err(Error::closed());
        }
        tracing::debug!("the session expired; re-initializing");
        outcome.await.map_err(|_| Error::closed())??;
        *generation += 1;
        Ok(())
    }

    /// Sends a notification.
    pub async fn notify(&self, method: &str, params: Option<Value>) -> Result<()> {
        let wire = self.shared.wire()?;
        let notification = Message::Notification(Notification {
            method: method.into(),
            params,
        });
        tokio::select! {
            biased;
            _ = self.shared.spawner.token().cancelled() => Err(Error::closed()),
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

    async fn page(&self, method: &str, field: &str, cursor: Option<&str>) -> Result<Page> {
        let params = cursor.map(|c| json!({ "cursor": c }));
        let mut result = self.request(method, params).await?;
        let Some(Value::Array(items)) = result.get_mut(field).map(Value::take) else {
            return Err(Error::protocol(format!(
                "the {method} result has no `{field}` array"
            )));
        };
        let next_cursor = result
            .get("nextCursor")
            .and_then(Value::as_str)
            .map(str::to_owned);
        Ok(Page { items, next_cursor })
    }

    /// One page of `tools/list`.
    pub async fn list_tools(&self, cursor: Option<&str>) -> Result<Page> {
        self.page("tools/list", "tools", cursor).await
    }

    /// One page of `prompts/list`.
    pub async fn list_prompts(&self, cursor: Option<&str>) -> Result<Page> {
        self.page("prompts/list", "prompts", cursor).await
    }

    /// One page of `resources/list`.
    pub async fn list_resources(&self, cursor: Option<&str>) -> Result<Page> {
        self.page("resources/list", "resources", cursor).await
    }

    /// One page of `resources/templates/list`.
    pub async fn list_resource_templates(&self, cursor: Option<&str>) -> Result<Page> {
        self.page("resources/templates/list", "resourceTemplates", cursor)
            .await
    }

    /// `resources/read` of one URI.
    pub async fn read_resource(&self, uri: &str) -> Result<Value> {
        self.request("resources/read", Some(json!({ "uri": uri })))
            .await
    }

    /// `prompts/get` with arguments.
    pub async fn get_prompt(&self, name: &str, arguments: Value) -> Result<Value> {
        self.request(
            "prompts/get",
            Some(json!({ "name": name, "arguments": arguments })),
        )
        .await
    }

    /// Ends the session: in-flight calls fail with a "closed" error; the
    /// background tasks (listener, re-discovery) stop and are joined; an
    /// owned server session is DELETEd (bounded by the connector's DELETE
    /// timeout) while our hooks and client are still alive; then the hooks
    /// are removed and an owned client is dropped.
    ///
    /// Idempotent and valid from any state: a second call (or one racing
    /// the first) returns at once with [`Released::already_closed`]. Never
    /// fails: a failed DELETE is reported in [`Released::session`], and
    /// local cleanup runs regardless. If this future is dropped half-way,
    /// the rest is done by the reaper.
    pub async fn close(&self) -> Released {
        self.shared.spawner.token().cancel();
        drop(self.shared.take_wire());
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

impl Drop for Session {
    fn drop(&mut self) {
        // Our handle on the transport goes before the stack is released.
        drop(self.shared.take_wire());
    }
}

/// Runs `future` until the request's deadline (its timeout and when it
/// ends), if any.
async fn deadline<T>(
    deadline: Option<(Duration, tokio::time::Instant)>,
    future: impl std::future::Future<Output = Result<T>>,
) -> Result<T> {
    match deadline {
        None => future.await,
        Some((limit, at)) => tokio::time::timeout_at(at, future)
            .await
            .unwrap_or_else(|_| Err(Error::request_timeout(limit))),
    }
}

impl fmt::Debug for Session {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Session")
            .field("protocol_version", &self.info.protocol_version)
            .field("ownership", &self.info.ownership)
            .field("client_ownership", &self.info.client_ownership)
            .field("session_id_issued", &self.info.session_id_issued)
            .field("tools", &self.catalog().tools.len())
            .field("closed", &self.is_closed())
            .finish()
    }
}
