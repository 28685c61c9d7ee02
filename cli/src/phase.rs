//! Which phase of a session an error came from: the library names the step
//! of connect ([`Error::connect_phase`]); calls and close are the CLI's own.
//! Also a watch on the listener's GET, for one conformance scenario.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use mcp_scoped_http::{ConnectPhase, Connector, Error, Session};
use tracing::span::{Attributes, Id, Record};
use tracing::subscriber::Interest;
use tracing::{Event, Metadata, Subscriber};

use crate::Failure;

/// A phase of a session's life, as named in error messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Phase {
    Connect = 0,
    Initialize = 1,
    Discovery = 2,
    Call = 3,
    Close = 4,
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Phase::Connect => "connect",
            Phase::Initialize => "initialize",
            Phase::Discovery => "discovery",
            Phase::Call => "call",
            Phase::Close => "close",
        })
    }
}

impl Phase {
    /// The CLI's name for a step of the library's connect.
    pub(crate) fn of(step: Option<ConnectPhase>) -> Phase {
        match step {
            Some(ConnectPhase::Initialize | ConnectPhase::Initialized) => Phase::Initialize,
            Some(ConnectPhase::Discovery) => Phase::Discovery,
            _ => Phase::Connect,
        }
    }
}

/// Runs `connector.connect()`, bounded by `timeout`, and on failure names
/// the step it failed in, as the library reports it: `connect` when the
/// server could not be reached at all, else initialize or discovery.
pub(crate) async fn connect(
    connector: Connector,
    timeout: Option<std::time::Duration>,
) -> Result<Session, Failure> {
    let connector = match timeout {
        // The DELETE of a half-made session is bounded by the same budget.
        Some(limit) => connector.connect_timeout(limit).delete_timeout(limit),
        None => connector,
    };
    connector
        .connect()
        .await
        .map_err(|error| Failure::at(Phase::of(error.connect_phase()), &error))
}

/// `future` within `timeout`, if any; `None` when it ran out.
pub(crate) async fn bounded<T>(
    timeout: Option<std::time::Duration>,
    future: impl Future<Output = T>,
) -> Option<T> {
    match timeout {
        Some(limit) => tokio::time::timeout(limit, future).await.ok(),
        None => Some(future.await),
    }
}

/// An error of a request on an established session.
pub(crate) fn call_failure(error: &Error) -> Failure {
    Failure::at(Phase::Call, error)
}

/// Notes when a GET listening stream was answered (its `mcp.get` span,
/// which covers the request up to the response head, is closed).
struct GetTracker {
    ids: AtomicU64,
    gets: std::sync::Mutex<std::collections::HashSet<u64>>,
    answered: Arc<std::sync::atomic::AtomicBool>,
}

impl Subscriber for GetTracker {
    fn register_callsite(&self, metadata: &'static Metadata<'static>) -> Interest {
        if metadata.is_span() {
            Interest::sometimes()
        } else {
            Interest::never()
        }
    }

    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        metadata.is_span()
    }

    fn new_span(&self, span: &Attributes<'_>) -> Id {
        let id = self.ids.fetch_add(1, Ordering::Relaxed) + 1;
        if span.metadata().name() == "mcp.get" {
            self.gets
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .insert(id);
        }
        Id::from_u64(id)
    }

    fn try_close(&self, id: Id) -> bool {
        let removed = self
            .gets
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&id.into_u64());
        if removed {
            self.answered.store(true, Ordering::Release);
        }
        true
    }

    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, _: &Event<'_>) {}
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

/// Watches the process for the first answered GET listening stream.
pub(crate) struct ListenWatch(Arc<std::sync::atomic::AtomicBool>);

impl ListenWatch {
    /// Installs the watcher as the process's tracing subscriber; `None`
    /// when one is installed already.
    pub(crate) fn install() -> Option<Self> {
        let answered = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let tracker = GetTracker {
            ids: AtomicU64::new(0),
            gets: Default::default(),
            answered: answered.clone(),
        };
        tracing::subscriber::set_global_default(tracker).ok()?;
        Some(ListenWatch(answered))
    }

    /// Waits until a GET stream was answered, at most `limit`.
    pub(crate) async fn wait(&self, limit: std::time::Duration) {
        let deadline = tokio::time::Instant::now() + limit;
        while !self.0.load(Ordering::Acquire) && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    }
}
