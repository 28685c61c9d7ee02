//! Rust futures as asyncio awaitables, handed to the loop without a
//! runtime thread entering Python.
//!
//! Like `pyo3_async_runtimes::tokio::future_into_py` (whose runtime this
//! uses), but with a different completion path:
//!
//! - **An inbox per event loop.** A finished future's outcome (a Rust
//!   value) goes into its loop's queue, and the first one since the loop
//!   last looked writes a byte to a socket the loop watches
//!   (`add_reader`). The loop's callback takes the whole queue and
//!   resolves the futures on its own thread, under the GIL it holds. No
//!   runtime thread takes the GIL to deliver: no hop to a blocking-pool
//!   thread, no wait for the GIL while the loop runs, one wake-up for what
//!   finished together. (Handing each result over with
//!   `call_soon_threadsafe` from a thread holding the GIL cost about
//!   0.3 ms a message.) A loop with no `add_reader` (Windows' proactor), or
//!   one that takes no weak reference, is woken that way instead.
//! - **The exit gate.** What still enters Python from a runtime thread (a
//!   loop woken with `call_soon_threadsafe`, the fleet's handlers,
//!   progress) holds [`GATE`] for reading: CPython ends a thread that asks
//!   for the GIL after the main thread finished, and the unwind through
//!   Rust would abort the process. The `atexit` hook closes it for writing
//!   (with the GIL released), so it waits for entries in flight and no new
//!   one starts.
//! - **Work for the loop's thread** goes through the same inbox (a
//!   transport's messages are matched to its receives there, see
//!   `inflow`).
//! - **Errors become exceptions on the loop's thread**, not on a worker.

#[cfg(unix)]
use std::io::{Read as _, Write as _};
#[cfg(unix)]
use std::os::fd::AsRawFd as _;
#[cfg(unix)]
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use pyo3::BoundObject;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
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

/// Closes the gate: waits for entries in flight, and refuses new ones.
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

/// Runs `work` on the runtime and returns an asyncio future of its
/// outcome. Cancelling the future drops `work` at its next poll.
pub(crate) fn spawn<'py, F, T>(py: Python<'py>, work: F) -> PyResult<Bound<'py, PyAny>>
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
    let inbox = inbox(&event_loop)?;
    let target = future.clone().unbind();
    pyo3_async_runtimes::tokio::get_runtime().spawn(async move {
        let outcome = tokio::select! {
            biased;
            _ = cancelled.cancelled() => return,
            outcome = work => outcome,
        };
        inbox.push(Job::Done(Done {
            future: target,
            outcome: Box::new(move |py| convert(py, outcome)),
        }));
    });
    Ok(future)
}

/// Polls `work` once here, inside the runtime with the GIL released, then
/// as [`spawn`] if it is not done: what is done at once (a line written to
/// a pipe) needs no task and no wake-up of a runtime thread, and what is
/// started here (a request to the stdio launcher) goes out without one.
/// The task's polls bring their own waker.
pub(crate) fn run<'py, F, T>(py: Python<'py>, work: F) -> PyResult<Bound<'py, PyAny>>
where
    F: Future<Output = Result<T, Failure>> + Send + 'static,
    T: for<'a> IntoPyObject<'a> + Send + 'static,
{
    let mut work = Box::pin(work);
    let now = py.detach(|| {
        let _runtime = pyo3_async_runtimes::tokio::get_runtime().enter();
        work.as_mut()
            .poll(&mut std::task::Context::from_waker(std::task::Waker::noop()))
    });
    match now {
        std::task::Poll::Ready(outcome) => ready(py, convert(py, outcome)?),
        std::task::Poll::Pending => spawn(py, work),
    }
}

/// An asyncio future of the running loop, to be resolved later from any
/// thread through its [`Promise`] (which a runtime thread may hold without
/// the GIL). Nothing runs on the runtime for it meanwhile.
pub(crate) fn promise(py: Python<'_>) -> PyResult<(Bound<'_, PyAny>, Promise)> {
    let event_loop = py.import("asyncio")?.call_method0("get_running_loop")?;
    let future = event_loop.call_method0("create_future")?;
    let inbox = inbox(&event_loop)?;
    let promise = Promise {
        future: future.clone().unbind(),
        inbox,
    };
    Ok((future, promise))
}

/// The resolving end of a [`promise`].
pub(crate) struct Promise {
    future: Py<PyAny>,
    inbox: Arc<Inbox>,
}

impl Promise {
    /// Its loop, to run work on.
    pub(crate) fn on_loop(&self) -> OnLoop {
        OnLoop(Arc::clone(&self.inbox))
    }

    /// Whether the future is done (resolved or cancelled); on its loop's
    /// thread (the caller's).
    pub(crate) fn is_done(&self, py: Python<'_>) -> bool {
        is_done(self.future.bind(py))
    }

    /// Resolves the future with `outcome`, on its loop's thread (the
    /// caller's), where it was found not done.
    pub(crate) fn resolve(self, py: Python<'_>, outcome: PyResult<Py<PyAny>>) {
        settle(self.future.bind(py), outcome);
    }
}

/// Whether an asyncio future is done (an error reading it: taken as done).
fn is_done(future: &Bound<'_, PyAny>) -> bool {
    future
        .call_method0("done")
        .and_then(|done| done.is_truthy())
        .unwrap_or(true)
}

/// Sets a pending asyncio future's result, or its exception; on its
/// loop's thread.
pub(crate) fn settle(future: &Bound<'_, PyAny>, outcome: PyResult<Py<PyAny>>) {
    let set = match outcome {
        Ok(value) => future.call_method1("set_result", (value,)),
        Err(error) => future.call_method1("set_exception", (error.value(future.py()),)),
    };
    if let Err(error) = set {
        error.print(future.py());
    }
}

/// An event loop, as the inbox its work is queued in.
#[derive(Clone)]
pub(crate) struct OnLoop(Arc<Inbox>);

impl OnLoop {
    /// Equal for one loop.
    pub(crate) fn key(&self) -> usize {
        Arc::as_ptr(&self.0) as usize
    }

    /// Runs `job` on the loop's thread, soon (from any thread).
    pub(crate) fn run(&self, job: impl FnOnce(Python<'_>) + Send + 'static) {
        Arc::clone(&self.0).push(Job::Call(Box::new(job)));
    }
}

/// An asyncio future of the running loop, done already with `value`.
pub(crate) fn ready<'py>(py: Python<'py>, value: Py<PyAny>) -> PyResult<Bound<'py, PyAny>> {
    let future = py
        .import("asyncio")?
        .call_method0("get_running_loop")?
        .call_method0("create_future")?;
    future.call_method1("set_result", (value,))?;
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
    spawn(py, work)
}

fn convert<T>(py: Python<'_>, outcome: Result<T, Failure>) -> PyResult<Py<PyAny>>
where
    T: for<'a> IntoPyObject<'a>,
{
    match outcome {
        Ok(value) => value
            .into_pyobject(py)
            .map(|value| BoundObject::into_any(value).unbind())
            .map_err(Into::into),
        Err(Failure::Crate(error)) => Err(py_error(error)),
        Err(Failure::Py(error)) => Err(error),
    }
}

/// A finished future's outcome, made a Python value (or exception) on the
/// loop's thread.
pub(crate) type Outcome = Box<dyn FnOnce(Python<'_>) -> PyResult<Py<PyAny>> + Send>;

/// A finished future, waiting in its loop's inbox.
struct Done {
    future: Py<PyAny>,
    outcome: Outcome,
}

impl Done {
    /// Sets the future's outcome, unless it is done already (cancelled).
    fn resolve(self, py: Python<'_>) {
        let future = self.future.bind(py);
        if !is_done(future) {
            settle(future, (self.outcome)(py));
        }
    }
}

/// What an inbox holds: a finished future, or work to run on the loop.
enum Job {
    Done(Done),
    Call(Box<dyn FnOnce(Python<'_>) + Send>),
}

impl Job {
    fn run(self, py: Python<'_>) {
        match self {
            Job::Done(done) => done.resolve(py),
            Job::Call(call) => call(py),
        }
    }
}

/// Where the futures of one event loop finish: see the module docs.
struct Inbox {
    queue: Mutex<Vec<Job>>,
    /// A wake-up is on its way: later arrivals need none of their own.
    armed: AtomicBool,
    wake: Wake,
}

enum Wake {
    /// The loop watches `read`; a byte on `write` wakes it.
    #[cfg(unix)]
    Socket { write: UnixStream, read: UnixStream },
    /// `call_soon_threadsafe` on the loop, from a blocking-pool thread.
    Threadsafe { event_loop: Arc<Py<PyAny>> },
}

impl Inbox {
    fn new(wake: Wake) -> Arc<Inbox> {
        Arc::new(Inbox {
            queue: Mutex::new(Vec::new()),
            armed: AtomicBool::new(false),
            wake,
        })
    }

    /// Queues a finished future; called on a runtime thread, never taking
    /// the GIL there.
    fn push(self: Arc<Self>, job: Job) {
        self.queue
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(job);
        if self.armed.swap(true, Ordering::AcqRel) {
            return;
        }
        match &self.wake {
            #[cfg(unix)]
            Wake::Socket { write, .. } => {
                // A full socket (`WouldBlock`) has a wake-up in it already.
                let _ = (&*write).write(&[1]);
            }
            Wake::Threadsafe { event_loop } => {
                let event_loop = Arc::clone(event_loop);
                tokio::task::spawn_blocking(move || {
                    through_gate(|| {
                        Python::attach(|py| {
                            let drain = Drain {
                                inbox: Arc::clone(&self),
                            };
                            let scheduled = event_loop
                                .call_method1(py, "call_soon_threadsafe", (drain,))
                                .is_ok();
                            if !scheduled {
                                // The loop is closed: what came back is kept,
                                // if it can be.
                                self.drain(py);
                            }
                        });
                    });
                });
            }
        }
    }

    /// Resolves everything queued; on the loop's thread.
    fn drain(&self, py: Python<'_>) {
        // In this order: a wake-up read here was for what is queued now;
        // from the disarming on, a new arrival writes a byte of its own
        // (at worst one wake-up too many, never one too few).
        #[cfg(unix)]
        if let Wake::Socket { read, .. } = &self.wake {
            let mut bytes = [0u8; 64];
            while matches!((&*read).read(&mut bytes), Ok(n) if n > 0) {}
        }
        self.armed.store(false, Ordering::Release);
        let jobs = std::mem::take(&mut *self.queue.lock().unwrap_or_else(PoisonError::into_inner));
        for job in jobs {
            job.run(py);
        }
    }
}

/// The callable the loop runs to empty an inbox: its reader, or the
/// callback `call_soon_threadsafe` scheduled.
#[pyclass(frozen)]
struct Drain {
    inbox: Arc<Inbox>,
}

#[pymethods]
impl Drain {
    fn __call__(&self, py: Python<'_>) {
        self.inbox.drain(py);
    }
}

/// The inbox of `event_loop`: made and registered with the loop on its
/// first use, and kept (a weak key: it goes with the loop) for the next.
fn inbox(event_loop: &Bound<'_, PyAny>) -> PyResult<Arc<Inbox>> {
    static INBOXES: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let py = event_loop.py();
    let inboxes = INBOXES
        .get_or_try_init(py, || {
            py.import("weakref")?
                .call_method0("WeakKeyDictionary")
                .map(Bound::unbind)
        })?
        .bind(py);
    let threadsafe = || {
        Inbox::new(Wake::Threadsafe {
            event_loop: Arc::new(event_loop.clone().unbind()),
        })
    };
    match inboxes.call_method1("get", (event_loop,)) {
        Ok(kept) if !kept.is_none() => {
            if let Ok(drain) = kept.cast::<Drain>() {
                return Ok(Arc::clone(&drain.get().inbox));
            }
        }
        Ok(_) => {}
        // A loop that takes no weak reference: an inbox per future.
        Err(_) => return Ok(threadsafe()),
    }
    #[cfg(unix)]
    let made = socket_inbox(event_loop);
    #[cfg(not(unix))]
    let made = None;
    let inbox = made.unwrap_or_else(threadsafe);
    inboxes.set_item(
        event_loop,
        Drain {
            inbox: Arc::clone(&inbox),
        },
    )?;
    Ok(inbox)
}

/// An inbox woken through a socket the loop reads, or None when the loop
/// cannot watch one (no `add_reader`) or no socket is to be had.
#[cfg(unix)]
fn socket_inbox(event_loop: &Bound<'_, PyAny>) -> Option<Arc<Inbox>> {
    let (write, read) = UnixStream::pair().ok()?;
    write.set_nonblocking(true).ok()?;
    read.set_nonblocking(true).ok()?;
    let fd = read.as_raw_fd();
    let inbox = Inbox::new(Wake::Socket { write, read });
    let drain = Drain {
        inbox: Arc::clone(&inbox),
    };
    // Refused (NotImplementedError on Windows' proactor): woken the
    // other way.
    event_loop
        .call_method1("add_reader", (fd, drain))
        .is_ok()
        .then_some(inbox)
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
