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
//! Order is kept when an awaitable is cancelled after its message was on
//! its way: the message goes to the `receive` waiting by then, or to the
//! front of what is kept.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};

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
}

#[derive(Default)]
struct State {
    /// Arrived, or handed back by a cancelled awaitable, and not taken yet:
    /// one read ahead, plus what cancellations handed back.
    kept: VecDeque<Outcome>,
    /// The `receive` waiting for the next message.
    waiting: Option<Promise>,
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
        let mut state = self.state();
        if let Some(outcome) = state.kept.pop_front() {
            drop(state);
            self.taken.notify_one();
            match outcome(py) {
                Ok(value) => awaitable.call_method1("set_result", (value,))?,
                Err(error) => awaitable.call_method1("set_exception", (error.value(py),))?,
            };
            return Ok(awaitable);
        }
        if state.ended {
            drop(state);
            awaitable.call_method1("set_result", (py.None(),))?;
            return Ok(awaitable);
        }
        // A promise left by a cancelled awaitable is replaced.
        state.waiting = Some(promise);
        if !state.pumping {
            state.pumping = true;
            pyo3_async_runtimes::tokio::get_runtime().spawn(pump(
                Arc::clone(self),
                Arc::clone(transport),
                gone.clone(),
            ));
        }
        Ok(awaitable)
    }

    /// Hands `outcome` to the waiting `receive`, or keeps it.
    fn arrived(self: &Arc<Self>, outcome: Outcome) {
        let mut state = self.state();
        match state.waiting.take() {
            Some(promise) => {
                let key = promise.loop_key();
                let inflow = Arc::clone(self);
                promise.keep(
                    outcome,
                    Some(Box::new(move |value| inflow.handed_back(key, value))),
                );
            }
            None => state.kept.push_back(outcome),
        }
    }

    /// A message whose awaitable was cancelled before its loop resolved it
    /// (on that loop's thread, `loop_key`'s): to the `receive` waiting on
    /// that loop now, if any, else first in line. Either way nothing that
    /// came after it is taken before it.
    fn handed_back(&self, loop_key: usize, value: Py<PyAny>) {
        Python::attach(|py| {
            let mut state = self.state();
            let value = match state.waiting.take() {
                Some(promise) if promise.loop_key() == loop_key => {
                    match promise.keep_now(py, value) {
                        Ok(()) => return,
                        Err(value) => value,
                    }
                }
                other => {
                    state.waiting = other;
                    value
                }
            };
            state.kept.push_front(Box::new(move |_| Ok(value)));
        });
    }

    /// The transport ended: the waiting `receive` has None, and so has
    /// every later one once `kept` is empty.
    fn end(&self) {
        let mut state = self.state();
        state.ended = true;
        if let Some(promise) = state.waiting.take() {
            promise.keep(Box::new(|py| Ok(py.None())), None);
        }
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
