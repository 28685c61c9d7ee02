//! A transport's messages on their way to `receive`, read by one task per
//! transport instead of one per call.
//!
//! A task per `receive` woke a runtime thread for every message the server
//! sent (the call's spawn), and that wake-up of an idle thread was on the
//! path of every answer. Here one pump reads the transport from the first
//! `receive` on, into a short queue (two messages at most: the rest stays
//! in the transport's bounded queue, charged to its budget), and asks the
//! loops with receives waiting to take them; a `receive` takes what came,
//! or joins the line, and wakes nothing.
//!
//! Messages meet receives only on the receive's loop's thread, in order:
//! the receives of a loop get the messages in the order they asked, a
//! receive done (cancelled) before its turn leaves the line, and a message
//! it was about to get goes to the next. No Python runs under the lock.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use mcp_scoped_http::adapters::ScopedTransport;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::McpScopedHttpError;
use crate::future::{self, OnLoop, Outcome, Promise};

/// How many messages the pump reads ahead of the receives: one being
/// handed over, one more, so a loop taking the first needs no wake-up of
/// the pump.
const AHEAD: usize = 2;

/// See the module docs.
#[derive(Default)]
pub(crate) struct Inflow {
    state: Mutex<State>,
    /// Notified when something kept was taken: the pump may read on.
    taken: Notify,
    /// Numbers the receives, so a done one finds its place in line.
    next: AtomicU64,
}

#[derive(Default)]
struct State {
    /// Read, in order, and not taken yet.
    kept: VecDeque<Outcome>,
    /// The receives waiting, first come first served (per loop).
    waiting: VecDeque<Waiting>,
    /// The transport has ended (closed, or its object gone): once `kept`
    /// is empty, every `receive` has None.
    ended: bool,
    /// The pump runs (from the first `receive` on).
    pumping: bool,
}

struct Waiting {
    number: u64,
    promise: Promise,
    on_loop: OnLoop,
}

impl Inflow {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The next message (bytes of JSON), or None once the transport ended:
    /// an awaitable done already if one came, else one resolved on its
    /// loop when one comes.
    pub(crate) fn receive<'py>(
        self: &Arc<Self>,
        py: Python<'py>,
        transport: &Arc<ScopedTransport>,
        gone: &CancellationToken,
    ) -> PyResult<Bound<'py, PyAny>> {
        // Made before the lock is taken: no Python runs under it.
        let (awaitable, promise) = future::promise(py)?;
        let on_loop = promise.on_loop();
        let number = self.next.fetch_add(1, Ordering::Relaxed);
        let mut state = self.state();
        // Behind this loop's receives already waiting, if any.
        let behind = state
            .waiting
            .iter()
            .any(|waiting| waiting.on_loop.key() == on_loop.key());
        if !behind {
            if let Some(outcome) = state.kept.pop_front() {
                drop(state);
                self.taken.notify_one();
                future::settle(&awaitable, outcome(py));
                return Ok(awaitable);
            }
            if state.ended {
                drop(state);
                future::settle(&awaitable, Ok(py.None()));
                return Ok(awaitable);
            }
        }
        state.waiting.push_back(Waiting {
            number,
            promise,
            on_loop,
        });
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

    /// Asks each loop with receives waiting to serve them (from any
    /// thread, the lock not held).
    fn wake(self: &Arc<Self>, loops: Vec<OnLoop>) {
        for on_loop in loops {
            // Held until the job runs: the transport may be gone by then
            // (its end is what the job hands over).
            let inflow = Arc::clone(self);
            let key = on_loop.key();
            on_loop.run(move |py| inflow.serve(py, key));
        }
    }

    /// The loops with receives waiting, each once.
    fn waiting_loops(state: &State) -> Vec<OnLoop> {
        let mut loops: Vec<OnLoop> = Vec::new();
        for waiting in &state.waiting {
            if !loops.iter().any(|seen| seen.key() == waiting.on_loop.key()) {
                loops.push(waiting.on_loop.clone());
            }
        }
        loops
    }

    /// On loop `key`'s thread: hands what was read to its receives waiting,
    /// in order; once the transport ended and nothing is kept, None to
    /// each. A receive found done (cancelled, its callback not run yet)
    /// leaves the line without taking anything.
    fn serve(&self, py: Python<'_>, key: usize) {
        loop {
            let waiting = {
                let mut state = self.state();
                if state.kept.is_empty() && !state.ended {
                    return;
                }
                let Some(at) = state
                    .waiting
                    .iter()
                    .position(|waiting| waiting.on_loop.key() == key)
                else {
                    return;
                };
                state.waiting.remove(at)
            };
            let Some(waiting) = waiting else { return };
            if waiting.promise.is_done(py) {
                continue;
            }
            // Nothing on this thread can cancel it before it is resolved.
            let outcome = self.state().kept.pop_front();
            let outcome = match outcome {
                Some(outcome) => {
                    self.taken.notify_one();
                    outcome(py)
                }
                None if self.state().ended => Ok(py.None()),
                // Taken meanwhile by another loop's receive: first again.
                None => {
                    self.state().waiting.push_front(waiting);
                    return;
                }
            };
            waiting.promise.resolve(py, outcome);
        }
    }
}

/// Takes a done receive out of the line (on its loop's thread).
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
            let at = state
                .waiting
                .iter()
                .position(|waiting| waiting.number == self.number);
            at.and_then(|at| state.waiting.remove(at))
        };
        drop(forgotten);
    }
}

/// Reads the transport's messages for `inflow` until it ends or its object
/// goes, [`AHEAD`] at most.
async fn pump(inflow: Arc<Inflow>, transport: Arc<ScopedTransport>, gone: CancellationToken) {
    loop {
        // `notify_one` leaves a permit when nobody waits: no taking is missed.
        while inflow.state().kept.len() >= AHEAD {
            tokio::select! {
                biased;
                _ = gone.cancelled() => return end(&inflow),
                _ = inflow.taken.notified() => {}
            }
        }
        let message = tokio::select! {
            biased;
            _ = gone.cancelled() => None,
            message = transport.receive_message() => message,
        };
        let Some(message) = message else {
            return end(&inflow);
        };
        let outcome: Outcome = match serde_json::to_vec(&message) {
            Ok(bytes) => Box::new(move |py| Ok(PyBytes::new(py, &bytes).into_any().unbind())),
            Err(error) => Box::new(move |_| {
                Err(McpScopedHttpError::new_err(format!(
                    "cannot serialize a message: {error}"
                )))
            }),
        };
        let loops = {
            let mut state = inflow.state();
            state.kept.push_back(outcome);
            Inflow::waiting_loops(&state)
        };
        inflow.wake(loops);
    }
}

/// The transport ended: the receives waiting get what is kept, then None.
fn end(inflow: &Arc<Inflow>) {
    let loops = {
        let mut state = inflow.state();
        state.ended = true;
        Inflow::waiting_loops(&state)
    };
    inflow.wake(loops);
}
