//! A transport's messages on their way to `receive`, read by one task per
//! transport instead of one per call.
//!
//! A task per `receive` woke a runtime thread for every message the server
//! sent (the call's spawn), and that wake-up of an idle thread was on the
//! path of every answer. Here one pump waits on the transport from the
//! first `receive` on; a `receive` only leaves a promise for it, or takes
//! what came already, and wakes nothing. The pump reads ahead one message
//! at most (then waits until it is taken), so what the server sends stays
//! in the transport's bounded queue, charged to its budget.
//!
//! - **Receives wait in line**: two at once get the next two messages, in
//!   the order they asked; one whose awaitable is done (cancelled) leaves
//!   the line then.
//! - **Order is kept** when an awaitable is cancelled while its message
//!   is on its way to the loop: a `receive` first resolves what its loop
//!   has in hand, so the message handed back (to the next in line, or the
//!   front of what is kept) is taken before anything that came after it.
//! - **No Python runs under the lock**, and the lock is never taken while
//!   a Python call that may release the GIL is under way.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use mcp_scoped_http::adapters::ScopedTransport;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::McpScopedHttpError;
use crate::future::{self, Outcome, Promise};

/// See the module docs.
#[derive(Default)]
pub(crate) struct Inflow {
    state: Mutex<State>,
    /// Notified when something kept was taken: the pump may read on.
    taken: Notify,
    /// Numbers the promises, so a done awaitable finds its own in line.
    next: AtomicU64,
}

#[derive(Default)]
struct State {
    /// Arrived, or handed back by a cancelled awaitable, and not taken yet:
    /// one read ahead, plus what cancellations handed back.
    kept: VecDeque<Outcome>,
    /// The receives waiting, first come first served.
    waiting: VecDeque<(u64, Promise)>,
    /// The transport has ended (closed, or its object gone): once `kept`
    /// is empty, every `receive` has None.
    ended: bool,
    /// The pump runs (from the first `receive` on).
    pumping: bool,
}

impl Inflow {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The next message (bytes of JSON), or None once the transport ended:
    /// an awaitable done already if one came, else one the pump resolves.
    pub(crate) fn receive<'py>(
        self: &Arc<Self>,
        py: Python<'py>,
        transport: &Arc<ScopedTransport>,
        gone: &CancellationToken,
    ) -> PyResult<Bound<'py, PyAny>> {
        // Made before the lock is taken: no Python runs under it.
        let (awaitable, promise) = future::promise(py)?;
        // What this loop has in hand first: a message a cancelled awaitable
        // hands back goes before anything kept after it.
        promise.settle_loop(py);
        let number = self.next.fetch_add(1, Ordering::Relaxed);
        let mut state = self.state();
        if state.waiting.is_empty() {
            if let Some(outcome) = state.kept.pop_front() {
                drop(state);
                self.taken.notify_one();
                match outcome(py) {
                    Ok(value) => awaitable.call_method1("set_result", (value,))?,
                    Err(error) => awaitable.call_method1("set_exception", (error.value(py),))?,
                };
                return Ok(awaitable);
            }
        }
        if state.ended && state.kept.is_empty() {
            drop(state);
            awaitable.call_method1("set_result", (py.None(),))?;
            return Ok(awaitable);
        }
        state.waiting.push_back((number, promise));
        let start = !std::mem::replace(&mut state.pumping, true);
        drop(state);
        // Leaves the line when done: cancelled, it takes nothing more.
        awaitable.call_method1(
            "add_done_callback",
            (Forget {
                inflow: Arc::downgrade(self),
                number,
            },),
        )?;
        if start {
            pyo3_async_runtimes::tokio::get_runtime().spawn(pump(
                Arc::clone(self),
                Arc::clone(transport),
                gone.clone(),
            ));
        }
        Ok(awaitable)
    }

    /// Hands `outcome` to the first `receive` in line, or keeps it.
    fn arrived(self: &Arc<Self>, outcome: Outcome) {
        let mut state = self.state();
        match state.waiting.pop_front() {
            Some((_, promise)) => {
                let inflow = Arc::downgrade(self);
                promise.keep(
                    outcome,
                    Some(Box::new(move |value| {
                        if let Some(inflow) = inflow.upgrade() {
                            Python::attach(|py| inflow.handed_back(py, value));
                        }
                    })),
                );
            }
            None => state.kept.push_back(outcome),
        }
    }

    /// A message whose awaitable was done (cancelled) before its loop
    /// resolved it, on that loop's thread: to the next `receive` in line,
    /// or first among what is kept.
    fn handed_back(&self, py: Python<'_>, mut value: Py<PyAny>) {
        loop {
            let next = self.state().waiting.pop_front();
            let Some((_, promise)) = next else {
                self.state().kept.push_front(Box::new(move |_| Ok(value)));
                return;
            };
            // Outside the lock: resolving a future runs Python.
            match promise.keep_now(py, value) {
                Ok(()) => return,
                // Done too (cancelled, its callback not run yet): the next.
                Err(back) => value = back,
            }
        }
    }

    /// The transport ended: every `receive` in line has None, and so has
    /// every later one once `kept` is empty.
    fn end(&self) {
        let mut state = self.state();
        state.ended = true;
        for (_, promise) in state.waiting.drain(..) {
            promise.keep(Box::new(|py| Ok(py.None())), None);
        }
    }
}

/// Takes a done awaitable's promise out of the line (its loop's thread).
#[pyclass(frozen)]
struct Forget {
    inflow: Weak<Inflow>,
    number: u64,
}

#[pymethods]
impl Forget {
    fn __call__(&self, _future: &Bound<'_, PyAny>) {
        let Some(inflow) = self.inflow.upgrade() else {
            return;
        };
        // Taken out under the lock, dropped after it.
        let forgotten = {
            let mut state = inflow.state();
            let at = state.waiting.iter().position(|(n, _)| *n == self.number);
            at.and_then(|at| state.waiting.remove(at))
        };
        drop(forgotten);
    }
}

/// Reads the transport's messages for `inflow` until it ends or its object
/// goes, one ahead at most.
async fn pump(inflow: Arc<Inflow>, transport: Arc<ScopedTransport>, gone: CancellationToken) {
    loop {
        // `notify_one` leaves a permit when nobody waits: no taking is missed.
        while !inflow.state().kept.is_empty() {
            tokio::select! {
                biased;
                _ = gone.cancelled() => return inflow.end(),
                _ = inflow.taken.notified() => {}
            }
        }
        let message = tokio::select! {
            biased;
            _ = gone.cancelled() => None,
            message = transport.receive_message() => message,
        };
        let Some(message) = message else {
            return inflow.end();
        };
        let outcome: Outcome = match serde_json::to_vec(&message) {
            Ok(bytes) => Box::new(move |py| Ok(PyBytes::new(py, &bytes).into_any().unbind())),
            Err(error) => Box::new(move |_| {
                Err(McpScopedHttpError::new_err(format!(
                    "cannot serialize a message: {error}"
                )))
            }),
        };
        inflow.arrived(outcome);
    }
}
