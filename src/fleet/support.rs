//! The fleet's own poison-tolerant lock: it is built on the crate's public
//! API alone (it could live in a crate of its own), and three lines are
//! not worth a public item. A server's text is escaped with
//! [`escape_server_text`](crate::escape_server_text).

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks `mutex`, ignoring poison: every fleet mutex guards a value changed
/// in one step under the lock, so a panic elsewhere cannot leave it
/// half-changed.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
