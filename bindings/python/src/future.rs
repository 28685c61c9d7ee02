//! Rust futures as asyncio awaitables, delivered so that the interpreter's
//! exit never meets a runtime thread inside Python.
//!
//! Like `pyo3_async_runtimes::tokio::future_into_py` (whose runtime this
//! uses), with three differences that its completion path cannot give:
//!
//! - **The exit gate.** A result is handed to the loop by a blocking-pool
//!   thread that takes the GIL, and `call_soon_threadsafe` lets go of it
//!   while it writes the loop's wakeup. If the main thread finishes
//!   meanwhile, CPython ends that thread when it asks for the GIL back, and
//!   the unwind through Rust aborts the process (seen: 1 exit in 10). Every
//!   delivery holds [`GATE`] for reading; the `atexit` hook closes it for
//!   writing (with the GIL released), so it waits for deliveries in flight
//!   and no new one starts.
//! - **Nothing received is lost.** A value whose awaitable was cancelled
//!   (or whose loop is gone) by the time it arrives goes to `undelivered`:
//!   a transport's `receive` puts the message back for the next call.
//! - **Errors become exceptions under the GIL the delivery already holds**,
//!   not by taking it on a runtime worker.

use std::sync::{Arc, Mutex, PoisonError, RwLock};

use pyo3::BoundObject;
use pyo3::prelude::*;
use tokio_util::sync::CancellationToken;

use crate::py_error;

/// Open (true) until the interpreter exits; see the module docs.
static GATE: RwLock<bool> = RwLock::new(true);

/// Runs `enter` (which takes the GIL) unless the interpreter is exiting;
/// the gate stays open until it returns.
pub(crate) fn through_gate<R>(enter: impl FnOnce() -> R) -> Option<R> {
    let open = GATE.read().unwrap_or_else(PoisonError::into_inner);
    (*open).then(enter)
}

/// Closes the gate: waits for deliveries in flight, and refuses new ones.
/// Called with the GIL released.
pub(crate) fn close_gate() {
    *GATE.write().unwrap_or_else(PoisonError::into_inner) = false;
}

/// What a future fails with: this crate's error (made an exception at
/// delivery) or an exception already.
pub(crate) enum Failure {
    Crate(mcp_scoped_http::Error),
    Py(PyErr),
}

impl From<mcp_scoped_http::Error> for Failure {
    fn from(error: mcp_scoped_http::Error) -> Failure {
        Failure::Crate(error)
    }
}

impl From<PyErr> for Failure {
    fn from(error: PyErr) -> Failure {
        Failure::Py(error)
    }
}

/// Where a value goes when its awaitable no longer wants it.
pub(crate) type Undelivered = Box<dyn FnOnce(Py<PyAny>) + Send>;

/// Runs `work` on the runtime and returns an asyncio future of its
/// outcome. Cancelling the future drops `work` at its next poll.
pub(crate) fn spawn<'py, F, T>(
    py: Python<'py>,
    work: F,
    undelivered: Option<Undelivered>,
) -> PyResult<Bound<'py, PyAny>>
where
    F: Future<Output = Result<T, Failure>> + Send + 'static,
    T: for<'a> IntoPyObject<'a> + Send + 'static,
{
    let event_loop = py.import("asyncio")?.call_method0("get_running_loop")?;
    let future = event_loop.call_method0("create_future")?;
    let cancelled = CancellationToken::new();
    future.call_method1(
        "add_done_callback",
        (OnDone {
            cancelled: cancelled.clone(),
        },),
    )?;
    let target = (event_loop.unbind(), future.clone().unbind());
    pyo3_async_runtimes::tokio::get_runtime().spawn(async move {
        let outcome = tokio::select! {
            biased;
            _ = cancelled.cancelled() => return,
            outcome = work => outcome,
        };
        // Off the workers: the GIL may be held for a while.
        let _ = tokio::task::spawn_blocking(move || deliver(target, outcome, undelivered)).await;
    });
    Ok(future)
}

/// [`spawn`] of `work`, unless the object that started it goes first
/// (`gone` cancelled): then it fails with [`ClosedError`](crate::ClosedError)
/// naming `what`, and `work` is dropped.
pub(crate) fn spawn_while<'py, F, T>(
    py: Python<'py>,
    gone: &CancellationToken,
    what: &'static str,
    work: F,
) -> PyResult<Bound<'py, PyAny>>
where
    F: Future<Output = Result<T, Failure>> + Send + 'static,
    T: for<'a> IntoPyObject<'a> + Send + 'static,
{
    let gone = gone.clone();
    let work = async move {
        tokio::select! {
            biased;
            _ = gone.cancelled() => Err(crate::closed(what).into()),
            done = work => done,
        }
    };
    spawn(py, work, None)
}

fn deliver<T>(
    (event_loop, future): (Py<PyAny>, Py<PyAny>),
    outcome: Result<T, Failure>,
    undelivered: Option<Undelivered>,
) where
    T: for<'a> IntoPyObject<'a>,
{
    // Refused once the interpreter is exiting: nobody awaits this any more.
    through_gate(|| {
        Python::attach(|py| {
            let outcome = match outcome {
                Ok(value) => value
                    .into_pyobject(py)
                    .map(|value| BoundObject::into_any(value).unbind())
                    .map_err(Into::into),
                Err(Failure::Crate(error)) => Err(py_error(error)),
                Err(Failure::Py(error)) => Err(error),
            };
            let resolve = Resolve {
                future,
                outcome: Mutex::new(Some(outcome)),
                undelivered: Mutex::new(undelivered),
            };
            let resolve = match Py::new(py, resolve) {
                Ok(resolve) => resolve,
                Err(error) => return error.print(py),
            };
            if event_loop
                .call_method1(py, "call_soon_threadsafe", (resolve.clone_ref(py),))
                .is_err()
            {
                // The loop is closed: what came back is kept, if it can be.
                resolve.get().give_back();
            }
        })
    });
}

/// Cancels the Rust side when the asyncio future is done (cancelled, or
/// resolved: then there is nothing left to cancel).
#[pyclass(frozen)]
struct OnDone {
    cancelled: CancellationToken,
}

#[pymethods]
impl OnDone {
    fn __call__(&self, _future: &Bound<'_, PyAny>) {
        self.cancelled.cancel();
    }
}

/// Sets the future's outcome on the loop's thread, unless it is done
/// already: then the value goes to `undelivered`.
#[pyclass(frozen)]
struct Resolve {
    future: Py<PyAny>,
    outcome: Mutex<Option<PyResult<Py<PyAny>>>>,
    undelivered: Mutex<Option<Undelivered>>,
}

impl Resolve {
    fn give_back(&self) {
        let outcome = self
            .outcome
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let undelivered = self
            .undelivered
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let (Some(Ok(value)), Some(undelivered)) = (outcome, undelivered) {
            undelivered(value);
        }
    }
}

#[pymethods]
impl Resolve {
    fn __call__(&self, py: Python<'_>) -> PyResult<()> {
        let future = self.future.bind(py);
        if future.call_method0("done")?.is_truthy()? {
            self.give_back();
            return Ok(());
        }
        let outcome = self
            .outcome
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        match outcome {
            Some(Ok(value)) => future.call_method1("set_result", (value,))?,
            Some(Err(error)) => future.call_method1("set_exception", (error.value(py),))?,
            None => return Ok(()),
        };
        Ok(())
    }
}

/// What a Python object holds of the crate's (a session, a fleet): shared
/// with the futures it starts, which stop when the object goes (so the
/// last of them does not keep it alive), and dropped inside the runtime
/// (a drop outside one cannot hand the release to the reaper).
pub(crate) struct Held<T: Send + Sync + 'static> {
    /// Taken only by `Drop`.
    inner: Option<Arc<T>>,
    gone: CancellationToken,
    /// What a future stopped by the object's going fails with.
    what: &'static str,
}

impl<T: Send + Sync + 'static> Held<T> {
    pub(crate) fn new(inner: T, what: &'static str) -> Held<T> {
        Held {
            inner: Some(Arc::new(inner)),
            gone: CancellationToken::new(),
            what,
        }
    }

    pub(crate) fn get(&self) -> PyResult<Arc<T>> {
        self.inner.clone().ok_or_else(|| crate::closed(self.what))
    }

    /// Runs `work` on what is held unless the Python object goes first.
    pub(crate) fn run<'py, F, R>(
        &self,
        py: Python<'py>,
        work: impl FnOnce(Arc<T>) -> F,
    ) -> PyResult<Bound<'py, PyAny>>
    where
        F: Future<Output = Result<R, Failure>> + Send + 'static,
        R: for<'a> IntoPyObject<'a> + Send + 'static,
    {
        crate::not_forked()?;
        let working = work(self.get()?);
        spawn_while(py, &self.gone, self.what, working)
    }
}

impl<T: Send + Sync + 'static> Drop for Held<T> {
    fn drop(&mut self) {
        self.gone.cancel();
        let inner = self.inner.take();
        let _runtime = pyo3_async_runtimes::tokio::get_runtime().enter();
        drop(inner);
    }
}
