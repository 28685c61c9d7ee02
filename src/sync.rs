//! The one way this crate takes a `std::sync::Mutex`.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks `mutex`, ignoring poison.
///
/// Every mutex in this crate guards a value that is replaced or changed in
/// one step under the lock (an `Option` taken whole, a map entry inserted or
/// removed, a counter), and no code under a lock can panic half-way through
/// such a step: a panic elsewhere cannot leave the value half-changed.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
