//! The ledger: what the crate holds right now, process-wide and per client.
//!
//! Every acquisition is counted by a guard value that decrements on drop, so
//! a count cannot leak on an error path or a cancelled future: if the
//! resource is gone, so is its count. Tests assert on these numbers;
//! operators can export them (the type is `Serialize`).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde::Serialize;

/// A snapshot of live resources: what the crate holds right now,
/// process-wide ([`ledger()`]) or for one session's client
/// ([`Session::ledger`](crate::Session::ledger)).
///
/// Every acquisition is counted by a guard value that decrements on drop,
/// so a count cannot leak on an error path or a cancelled future: if the
/// resource is gone, so is its count. Tests assert on these numbers;
/// operators can export them (the type is `Serialize`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct Ledger {
    /// Header hooks registered (ours and, per client, the caller's).
    pub hooks: usize,
    /// Owned HTTP clients not yet dropped.
    pub owned_clients: usize,
    /// Background tasks of sessions (GET listeners, reaps) still alive.
    pub tasks: usize,
    /// Server sessions we created and have not ended (or handed to a reap).
    pub owned_sessions: usize,
    /// DELETEs handed to the reaper and not finished.
    pub pending_reaps: usize,
    /// stdio server process trees alive: spawned and not yet seen gone
    /// (feature `stdio`).
    pub processes: usize,
}

impl Ledger {
    /// True when nothing is held.
    pub fn is_empty(&self) -> bool {
        *self == Ledger::default()
    }
}

/// One counter per field, process-wide or per client.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    hooks: AtomicUsize,
    owned_clients: AtomicUsize,
    tasks: AtomicUsize,
    owned_sessions: AtomicUsize,
    pending_reaps: AtomicUsize,
    processes: AtomicUsize,
}

#[derive(Clone, Copy, Debug)]
pub(crate) enum Field {
    Hooks,
    OwnedClients,
    Tasks,
    OwnedSessions,
    PendingReaps,
    /// stdio server process trees, counted by `stdio::process::ProcessTree`
    /// (so unused without the feature `stdio`, and off Unix, where no tree
    /// is made).
    #[cfg_attr(not(all(feature = "stdio", unix)), allow(dead_code))]
    Processes,
}

impl Counters {
    fn field(&self, field: Field) -> &AtomicUsize {
        match field {
            Field::Hooks => &self.hooks,
            Field::OwnedClients => &self.owned_clients,
            Field::Tasks => &self.tasks,
            Field::OwnedSessions => &self.owned_sessions,
            Field::PendingReaps => &self.pending_reaps,
            Field::Processes => &self.processes,
        }
    }

    pub(crate) fn snapshot(&self) -> Ledger {
        Ledger {
            hooks: self.hooks.load(Ordering::Acquire),
            owned_clients: self.owned_clients.load(Ordering::Acquire),
            tasks: self.tasks.load(Ordering::Acquire),
            owned_sessions: self.owned_sessions.load(Ordering::Acquire),
            pending_reaps: self.pending_reaps.load(Ordering::Acquire),
            processes: self.processes.load(Ordering::Acquire),
        }
    }
}

static GLOBAL: Counters = Counters {
    hooks: AtomicUsize::new(0),
    owned_clients: AtomicUsize::new(0),
    tasks: AtomicUsize::new(0),
    owned_sessions: AtomicUsize::new(0),
    pending_reaps: AtomicUsize::new(0),
    processes: AtomicUsize::new(0),
};

static ABANDONED_DELETES: AtomicUsize = AtomicUsize::new(0);

/// Process-wide snapshot: every client, every session.
pub fn ledger() -> Ledger {
    GLOBAL.snapshot()
}

/// DELETEs that could not be sent because no runtime could run them (the
/// session was dropped during or after runtime shutdown). Their local
/// cleanup ran; the server session is left to expire. Process-wide, only
/// ever grows.
pub fn abandoned_deletes() -> usize {
    ABANDONED_DELETES.load(Ordering::Acquire)
}

pub(crate) fn count_abandoned_delete() {
    ABANDONED_DELETES.fetch_add(1, Ordering::AcqRel);
}

/// One task of the caller's counted in [`ledger()`]'s `tasks` until this
/// is dropped: a host that supervises sessions (the fleet's slot tasks are
/// counted so) makes its own tasks show in the same leak checks as the
/// crate's. Hold it inside the task, so that the count goes with the task
/// however it ends, aborted included.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use mcp_scoped_http::{TaskCount, ledger};
///
/// let before = ledger().tasks;
/// let task = tokio::spawn(async {
///     let _counted = TaskCount::new();
///     // ... the host's own work ...
/// });
/// task.await.unwrap();
/// assert_eq!(ledger().tasks, before);
/// # }
/// ```
#[derive(Debug)]
pub struct TaskCount {
    _count: Count,
}

impl TaskCount {
    /// Counts one task, from now until dropped.
    pub fn new() -> TaskCount {
        TaskCount {
            _count: Count::new(Field::Tasks, None),
        }
    }
}

impl Default for TaskCount {
    fn default() -> Self {
        TaskCount::new()
    }
}

/// One unit of one field, counted process-wide and on one client, until
/// dropped.
#[derive(Debug)]
pub(crate) struct Count {
    field: Field,
    client: Option<Arc<Counters>>,
}

impl Count {
    pub(crate) fn new(field: Field, client: Option<Arc<Counters>>) -> Count {
        GLOBAL.field(field).fetch_add(1, Ordering::AcqRel);
        if let Some(client) = &client {
            client.field(field).fetch_add(1, Ordering::AcqRel);
        }
        Count { field, client }
    }
}

impl Drop for Count {
    fn drop(&mut self) {
        GLOBAL.field(self.field).fetch_sub(1, Ordering::AcqRel);
        if let Some(client) = &self.client {
            client.field(self.field).fetch_sub(1, Ordering::AcqRel);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_follow_their_guards() {
        let client = Arc::new(Counters::default());
        let before = ledger().tasks;
        let a = Count::new(Field::Tasks, Some(client.clone()));
        let b = Count::new(Field::Tasks, None);
        assert_eq!(client.snapshot().tasks, 1);
        assert!(ledger().tasks >= before + 2);
        drop(a);
        drop(b);
        assert_eq!(client.snapshot(), Ledger::default());
        assert!(client.snapshot().is_empty());
    }
}
