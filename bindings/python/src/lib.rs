//! The native module of the `mcp_scoped_http` Python package
//! (`mcp_scoped_http._native`): [`ScopedTransport`] for an SDK that runs the
//! protocol itself, here the official Python SDK, and a `Session` for hosts
//! that let the crate run it.
//!
//! Bytes cross the boundary: the SDK's messages come in as the JSON it
//! serialized, the server's go out as JSON for it to validate, so each side
//! parses once. Every awaitable is a Rust future on this module's tokio
//! runtime (no Python task or thread is created): cancelling the Python
//! awaitable drops the Rust future at once, and what it held is released
//! by the transport's guard stack as for any dropped future.

mod fleet;
mod future;
mod inflow;
mod session;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use mcp_scoped_http::adapters::{ReleaseReport, ScopedTransport};
use mcp_scoped_http::jsonrpc::Message;
use mcp_scoped_http::stdio::{ProcessEnd, StdioCommand};
use mcp_scoped_http::{ProtocolVersion, SessionRelease};
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use tokio_util::sync::CancellationToken;

use crate::future::Failure;

/// The largest message the SDK may send: a request's JSON body limit
/// (`TransportConfig`'s default), checked before anything is parsed.
const MAX_SENT_BYTES: usize = 8 * 1024 * 1024;

create_exception!(
    mcp_scoped_http._native,
    McpScopedHttpError,
    PyException,
    "An error of the transport: its message names the cause. Attributes: \
     `retryable` (the same request may succeed again), `status` (the HTTP \
     status, or None) and `rpc_code` (the JSON-RPC error code, or None)."
);
create_exception!(
    mcp_scoped_http._native,
    LimitError,
    McpScopedHttpError,
    "A bound was reached: the memory budget, a message's size, a queue."
);
create_exception!(
    mcp_scoped_http._native,
    DeadlineError,
    McpScopedHttpError,
    "A deadline passed: an exchange, a connect, a close."
);
create_exception!(
    mcp_scoped_http._native,
    ClosedError,
    McpScopedHttpError,
    "The transport is closed (or was used in a forked child)."
);
create_exception!(
    mcp_scoped_http._native,
    AuthError,
    McpScopedHttpError,
    "The server refused the credentials (401, 403), or OAuth failed."
);
create_exception!(
    mcp_scoped_http._native,
    ConfigError,
    McpScopedHttpError,
    "The configuration is invalid: a URL, a header, a program that cannot run."
);

/// Set in a child of `os.fork()`: the runtime's threads were not copied,
/// so nothing here may run there.
static FORKED: AtomicBool = AtomicBool::new(false);

/// This crate's error as the Python exception its predicates name.
pub(crate) fn py_error(error: mcp_scoped_http::Error) -> PyErr {
    let message = error.to_string();
    let raised = if error.is_limit() {
        LimitError::new_err(message)
    } else if error.is_timeout() {
        DeadlineError::new_err(message)
    } else if error.is_auth() {
        AuthError::new_err(message)
    } else if error.is_closed() {
        ClosedError::new_err(message)
    } else if error.is_builder() {
        ConfigError::new_err(message)
    } else {
        McpScopedHttpError::new_err(message)
    };
    Python::attach(|py| {
        let value = raised.value(py);
        // Setting an attribute on a fresh exception instance cannot fail.
        let _ = value.setattr("retryable", error.is_retryable());
        let _ = value.setattr("status", error.status().map(|s| s.as_u16()));
        let _ = value.setattr("rpc_code", error.rpc_code());
    });
    raised
}

pub(crate) fn closed(why: &str) -> PyErr {
    ClosedError::new_err(why.to_owned())
}

pub(crate) fn not_forked() -> PyResult<()> {
    if FORKED.load(Ordering::Relaxed) {
        return Err(closed(
            "mcp_scoped_http was used in a child of os.fork(): its transports belong to the \
             parent (open new ones in the child)",
        ));
    }
    Ok(())
}

/// An HTTP client built from Python, lent to transports and sessions: they
/// add their hooks to it and remove them, and never close it. Sharing one
/// shares its connection pool and the eras it remembers per endpoint.
#[pyclass(frozen, module = "mcp_scoped_http._native")]
pub(crate) struct HttpClient {
    pub(crate) inner: mcp_scoped_http::HttpClient,
}

#[pymethods]
impl HttpClient {
    /// Builds a client: `proxy` (a URL; default: HTTPS_PROXY and friends
    /// from the environment), `no_proxy` (no proxy at all, not even the
    /// environment's), `roots_pem` (extra trust roots, PEM),
    /// `system_roots` (the system's store; default on),
    /// `identity_pem` (a client certificate chain and its key, PEM, for
    /// mutual TLS).
    #[new]
    #[pyo3(signature = (*, proxy = None, no_proxy = false, roots_pem = None, system_roots = true, identity_pem = None))]
    fn new(
        proxy: Option<String>,
        no_proxy: bool,
        roots_pem: Option<Vec<u8>>,
        system_roots: bool,
        identity_pem: Option<(Vec<u8>, Vec<u8>)>,
    ) -> PyResult<HttpClient> {
        not_forked()?;
        let mut builder = mcp_scoped_http::HttpClient::builder().system_roots(system_roots);
        if no_proxy {
            builder = builder.no_proxy();
        } else if let Some(proxy) = proxy {
            builder = builder.proxy(proxy);
        }
        if let Some(pem) = roots_pem {
            for der in pem_certificates(&pem)? {
                builder = builder.add_root_certificate(der);
            }
        }
        if let Some((chain, key)) = identity_pem {
            builder = builder.client_identity(chain, key);
        }
        // Its pool's tasks are the runtime's.
        let _runtime = pyo3_async_runtimes::tokio::get_runtime().enter();
        builder
            .build()
            .map(|inner| HttpClient { inner })
            .map_err(py_error)
    }

    /// The header hooks transports and sessions have on it now (each
    /// removed when they end).
    #[getter]
    fn hooks(&self) -> usize {
        self.inner.hooks().len()
    }

    fn __repr__(&self) -> String {
        format!(
            "<mcp_scoped_http HttpClient, {} hook(s)>",
            self.inner.hooks().len()
        )
    }
}

/// The DER certificates of a PEM bundle.
fn pem_certificates(pem: &[u8]) -> PyResult<Vec<Vec<u8>>> {
    use rustls_pki_types::CertificateDer;
    use rustls_pki_types::pem::PemObject;
    let found: Vec<Vec<u8>> = CertificateDer::pem_slice_iter(pem)
        .map(|cert| cert.map(|der| der.to_vec()))
        .collect::<Result<_, _>>()
        .map_err(|error| ConfigError::new_err(format!("roots_pem: {error}")))?;
    if found.is_empty() {
        return Err(ConfigError::new_err("roots_pem holds no certificate"));
    }
    Ok(found)
}

/// OAuth 2.1 for servers that require it, with the loopback user agent:
/// the authorization URL opened in the browser (or shown to `on_url`), the
/// redirect received on 127.0.0.1.
#[pyclass(frozen, module = "mcp_scoped_http._native")]
pub(crate) struct OAuth {
    pub(crate) inner: mcp_scoped_http::oauth::OAuth,
}

#[pymethods]
impl OAuth {
    /// `open_browser`: open the system's browser at the authorization URL
    /// (default on). `on_url`: called with the URL instead of printing it
    /// (on a runtime thread: keep it short). `port`: the redirect
    /// listener's (default: any free one). `scopes`: what to ask for (else
    /// the server's). `client_name`: for dynamic registration.
    #[new]
    #[pyo3(signature = (*, open_browser = true, on_url = None, port = None, scopes = None, client_name = None))]
    fn new(
        open_browser: bool,
        on_url: Option<Py<PyAny>>,
        port: Option<u16>,
        scopes: Option<Vec<String>>,
        client_name: Option<String>,
    ) -> OAuth {
        use mcp_scoped_http::oauth::LoopbackAgent;
        let mut agent = LoopbackAgent::new().open_browser(open_browser);
        if let Some(port) = port {
            agent = agent.port(port);
        }
        if let Some(show) = on_url {
            agent = agent.on_url(move |url| {
                future::through_gate(|| {
                    Python::attach(|py| {
                        if let Err(error) = show.call1(py, (url,)) {
                            error.print(py);
                        }
                    })
                });
            });
        }
        let mut inner = mcp_scoped_http::oauth::OAuth::new(agent);
        if let Some(scopes) = scopes {
            inner = inner.scopes(scopes);
        }
        if let Some(name) = client_name {
            inner = inner.client_name(name);
        }
        OAuth { inner }
    }
}

/// A transport to one MCP server, HTTP or stdio.
#[pyclass(frozen, module = "mcp_scoped_http._native")]
struct Transport {
    inner: Arc<ScopedTransport>,
    report: Mutex<Option<ReleaseReport>>,
    /// The server's messages on their way to `receive`.
    inflow: Arc<inflow::Inflow>,
    /// Cancelled when the Python object goes: the futures it started stop,
    /// so the transport drops with them (and its stack is released).
    gone: CancellationToken,
}

impl Transport {
    fn new(mut transport: ScopedTransport) -> Transport {
        let report = transport.release_report();
        Transport {
            inner: Arc::new(transport),
            report: Mutex::new(Some(report)),
            inflow: Arc::default(),
            gone: CancellationToken::new(),
        }
    }
}

impl Drop for Transport {
    fn drop(&mut self) {
        // In a forked child the runtime's threads (and any lock they held)
        // are not there: touch nothing.
        if FORKED.load(Ordering::Relaxed) {
            return;
        }
        // Released now, not when the last future holding the transport
        // has unwound on the runtime: `drain` then finds its DELETE.
        self.gone.cancel();
        let _runtime = pyo3_async_runtimes::tokio::get_runtime().enter();
        self.inner.release_in_background();
    }
}

#[pymethods]
impl Transport {
    /// Sends one message, the JSON the SDK serialized. The SDK's
    /// `initialize` opens the server's era. A request that fails is
    /// answered on `receive` with a JSON-RPC error; a notification or an
    /// answer that fails raises here.
    fn send<'py>(&self, py: Python<'py>, message: &[u8]) -> PyResult<Bound<'py, PyAny>> {
        not_forked()?;
        if message.len() > MAX_SENT_BYTES {
            return Err(LimitError::new_err(format!(
                "a message of {} bytes, over the {MAX_SENT_BYTES} a request may carry",
                message.len()
            )));
        }
        // Parsed without the GIL: a large message does not stop the loop's
        // other threads.
        let message: Message = py
            .detach(|| serde_json::from_slice(message))
            .map_err(|error| {
                McpScopedHttpError::new_err(format!("not a JSON-RPC message: {error}"))
            })?;
        // A request that cannot be sent is answered with a JSON-RPC error,
        // which the SDK raises to the caller as its own.
        let sending = self.inner.send_message_answered(message);
        let gone = self.gone.clone();
        let work = async move {
            tokio::select! {
                biased;
                _ = gone.cancelled() => Err(closed("the transport is gone").into()),
                sent = sending => sent.map_err(Failure::from),
            }
        };
        // Most sends are done at once (a stdio line written to the pipe).
        future::run(py, work)
    }

    /// The next message from the server as JSON, or None once the
    /// transport is closed.
    fn receive<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        not_forked()?;
        self.inflow.receive(py, &self.inner, &self.gone)
    }

    /// Unwinds the guard stack (tasks, the DELETE, hooks, an owned client,
    /// the process tree) and returns what was released; None when it was
    /// already closed. Never raises for a failed DELETE (it is reported).
    fn close<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        not_forked()?;
        let inner = self.inner.clone();
        let report = self
            .report
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        future::spawn(py, async move {
            inner.close().await?;
            let released = match report {
                Some(report) => report.released().await,
                None => None,
            };
            Ok::<_, Failure>(released.map(Released::from))
        })
    }

    /// The server's session id once it issued one (a credential: do not
    /// log it).
    #[getter]
    fn session_id(&self) -> Option<String> {
        self.inner.session_id().map(|id| id.expose().to_owned())
    }

    fn __repr__(&self) -> String {
        format!("<mcp_scoped_http Transport {:?}>", self.inner)
    }
}

/// What closing a transport released.
#[pyclass(frozen, get_all, module = "mcp_scoped_http._native")]
pub(crate) struct Released {
    /// `deleted` (with `delete_status`), `delete_failed`, `expired`,
    /// `no_session_id`, `stateless` (2026-07-28: no sessions) or
    /// `not_owned`.
    session: &'static str,
    /// The status the DELETE was answered with.
    delete_status: Option<u16>,
    /// Background tasks stopped.
    tasks_stopped: usize,
    /// Header hooks removed from the client.
    hooks_removed: usize,
    /// Whether the client the transport built was released (False for a
    /// lent one, which stays open).
    owned_client_released: bool,
    /// A stdio server: how its process tree ended (`exited`, `terminated`,
    /// `killed`, ...), None for HTTP.
    process: Option<String>,
}

impl From<mcp_scoped_http::Released> for Released {
    fn from(released: mcp_scoped_http::Released) -> Released {
        let (session, delete_status) = match &released.session {
            SessionRelease::Deleted(status) => ("deleted", Some(status.as_u16())),
            SessionRelease::DeleteFailed(_) => ("delete_failed", None),
            SessionRelease::Expired => ("expired", None),
            SessionRelease::NoSessionId => ("no_session_id", None),
            SessionRelease::Stateless => ("stateless", None),
            _ => ("not_owned", None),
        };
        Released {
            session,
            delete_status,
            tasks_stopped: released.tasks_stopped,
            hooks_removed: released.hooks_removed,
            owned_client_released: released.owned_client_released,
            process: released.process.as_ref().map(process_end),
        }
    }
}

#[pymethods]
impl Released {
    fn __repr__(&self) -> String {
        format!(
            "Released(session={:?}, delete_status={:?}, tasks_stopped={}, hooks_removed={}, \
             owned_client_released={}, process={:?})",
            self.session,
            self.delete_status,
            self.tasks_stopped,
            self.hooks_removed,
            self.owned_client_released,
            self.process
        )
    }
}

fn process_end(end: &ProcessEnd) -> String {
    match end {
        ProcessEnd::Exited(status) => format!("exited ({status})"),
        ProcessEnd::Terminated => "terminated".to_owned(),
        ProcessEnd::Killed => "killed".to_owned(),
        other => format!("{other:?}").to_lowercase(),
    }
}

pub(crate) fn version(revision: Option<&str>) -> PyResult<Option<ProtocolVersion>> {
    revision
        .map(|r| {
            r.parse::<ProtocolVersion>()
                .map_err(|_| ConfigError::new_err(format!("unknown protocol revision {r:?}")))
        })
        .transpose()
}

/// A transport to the MCP server at `url` (its era detected, or
/// `protocol_version`), with `headers` and a `bearer` token on each of its
/// requests, through `client` (lent, never closed) or one of its own.
/// Nothing is sent until the SDK's `initialize`. `legacy_sdk`: the SDK's
/// `initialize` takes only the 2025 revisions.
#[pyfunction]
#[pyo3(signature = (url, *, headers = None, bearer = None, protocol_version = None, legacy_sdk = false, client = None, oauth = None))]
fn http(
    url: String,
    headers: Option<Vec<(String, String)>>,
    bearer: Option<String>,
    protocol_version: Option<&str>,
    legacy_sdk: bool,
    client: Option<PyRef<'_, HttpClient>>,
    oauth: Option<PyRef<'_, OAuth>>,
) -> PyResult<Transport> {
    not_forked()?;
    let mut builder = ScopedTransport::builder(url).legacy_sdk(legacy_sdk);
    if let Some(client) = client {
        builder = builder.client(client.inner.clone());
    }
    if let Some(oauth) = oauth {
        builder = builder.oauth(oauth.inner.clone());
    }
    for (name, value) in headers.unwrap_or_default() {
        builder = builder.header(&name, &value);
    }
    if let Some(token) = bearer {
        builder = builder.bearer(&token);
    }
    if let Some(version) = version(protocol_version)? {
        builder = builder.protocol_version(version);
    }
    // Built inside the runtime: the owned client's pool is the runtime's.
    let _entered = pyo3_async_runtimes::tokio::get_runtime().enter();
    builder.build().map(Transport::new).map_err(py_error)
}

/// Starts the stdio server `command` with `args` under the crate's
/// supervision (its own process group, a watchdog, the environment
/// allowlist plus `env`, in `cwd`) and returns its transport.
#[pyfunction]
#[pyo3(signature = (command, args = None, *, env = None, cwd = None, protocol_version = None, legacy_sdk = false))]
fn stdio<'py>(
    py: Python<'py>,
    command: String,
    args: Option<Vec<String>>,
    env: Option<Vec<(String, String)>>,
    cwd: Option<String>,
    protocol_version: Option<&str>,
    legacy_sdk: bool,
) -> PyResult<Bound<'py, PyAny>> {
    not_forked()?;
    let mut stdio = StdioCommand::new(command)
        .args(args.unwrap_or_default())
        .envs(env.unwrap_or_default());
    if let Some(dir) = cwd {
        stdio = stdio.current_dir(dir);
    }
    let mut builder = ScopedTransport::stdio(stdio).legacy_sdk(legacy_sdk);
    if let Some(version) = version(protocol_version)? {
        builder = builder.protocol_version(version);
    }
    let spawning = async move {
        let transport = builder.spawn().await?;
        STDIO_WARM.store(true, Ordering::Relaxed);
        Ok::<_, Failure>(Transport::new(transport))
    };
    // Once a server has started, the next one's request to the launcher
    // goes out on the caller's thread, as the SDK's own stdio client forks
    // and execs there: a wake-up of a runtime thread less on the connect's
    // path. The first start is not made there: it may write the watchdog
    // program out and start the launcher (milliseconds).
    if STDIO_WARM.load(Ordering::Relaxed) {
        future::run(py, spawning)
    } else {
        future::spawn(py, spawning)
    }
}

/// A stdio server has started in this process: the watchdog program and
/// the launcher are in place.
static STDIO_WARM: AtomicBool = AtomicBool::new(false);

/// Waits, at most `timeout` seconds (infinity: no bound), for what
/// transports and sessions dropped unclosed handed to the reaper (their
/// DELETEs, their process trees). True when everything was done.
#[pyfunction]
#[pyo3(signature = (timeout = 10.0))]
fn drain(py: Python<'_>, timeout: f64) -> bool {
    if FORKED.load(Ordering::Relaxed) {
        return true;
    }
    // NaN and negatives: no wait; beyond what a Duration holds: no bound.
    let limit = match timeout {
        t if t.is_nan() => Some(Duration::ZERO),
        t => Duration::try_from_secs_f64(t.max(0.0)).ok(),
    };
    py.detach(|| {
        pyo3_async_runtimes::tokio::get_runtime().block_on(async {
            match limit {
                Some(limit) => tokio::time::timeout(limit, mcp_scoped_http::shutdown())
                    .await
                    .is_ok(),
                None => {
                    mcp_scoped_http::shutdown().await;
                    true
                }
            }
        })
    })
}

/// What this process holds now on behalf of transports, sessions and
/// fleets (the crate's ledger): header hooks on clients, clients it built,
/// background tasks, server sessions it owns, reaps pending, stdio process
/// trees. All zero once everything was closed or reaped.
#[pyfunction]
fn ledger() -> std::collections::BTreeMap<&'static str, usize> {
    let now = mcp_scoped_http::ledger();
    [
        ("hooks", now.hooks),
        ("owned_clients", now.owned_clients),
        ("tasks", now.tasks),
        ("owned_sessions", now.owned_sessions),
        ("pending_reaps", now.pending_reaps),
        ("processes", now.processes),
    ]
    .into_iter()
    .collect()
}

/// The package's `atexit` hook: no result is handed to Python from now on
/// (one in flight is waited for), then [`drain`] for 10 s.
#[pyfunction]
fn _at_exit(py: Python<'_>) -> bool {
    if FORKED.load(Ordering::Relaxed) {
        return true;
    }
    py.detach(future::close_gate);
    drain(py, 10.0)
}

/// Called in the child after `os.fork()` (the package registers it): every
/// later call refuses to work there, instead of waiting on runtime threads
/// that were not copied.
#[pyfunction]
fn _after_fork_in_child() {
    FORKED.store(true, Ordering::Relaxed);
}

#[pymodule]
fn _native(module: &Bound<'_, PyModule>) -> PyResult<()> {
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    // I/O and timers only, for a host whose Python runs on one thread: one
    // worker serves its many transports. A second cost the host about a
    // tenth more CPU in the stdio churn (the workers waking each other), for
    // no more cycles per second.
    runtime
        .worker_threads(1)
        .thread_name("mcp-scoped-http")
        .enable_all();
    pyo3_async_runtimes::tokio::init(runtime);
    let py = module.py();
    module.add("McpScopedHttpError", py.get_type::<McpScopedHttpError>())?;
    module.add("LimitError", py.get_type::<LimitError>())?;
    module.add("DeadlineError", py.get_type::<DeadlineError>())?;
    module.add("ClosedError", py.get_type::<ClosedError>())?;
    module.add("AuthError", py.get_type::<AuthError>())?;
    module.add("ConfigError", py.get_type::<ConfigError>())?;
    module.add_class::<Transport>()?;
    module.add_class::<Released>()?;
    module.add_class::<HttpClient>()?;
    module.add_class::<OAuth>()?;
    module.add_class::<session::NativeSession>()?;
    module.add_class::<fleet::NativeFleet>()?;
    module.add_function(wrap_pyfunction!(session::connect, module)?)?;
    module.add_function(wrap_pyfunction!(http, module)?)?;
    module.add_function(wrap_pyfunction!(stdio, module)?)?;
    module.add_function(wrap_pyfunction!(drain, module)?)?;
    module.add_function(wrap_pyfunction!(ledger, module)?)?;
    module.add_function(wrap_pyfunction!(_at_exit, module)?)?;
    module.add_function(wrap_pyfunction!(_after_fork_in_child, module)?)?;
    Ok(())
}
