//! `Session` for Python hosts that want the crate to run the protocol
//! (connect, catalog, calls with progress, notifications, close), thin over
//! [`mcp_scoped_http::Session`]. Values cross as JSON text: serde on this
//! side, `json.loads` on the other.

use std::sync::mpsc::SyncSender;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use mcp_scoped_http::jsonrpc::Message;
use mcp_scoped_http::stdio::StdioCommand;
use mcp_scoped_http::{Connector, Progress, RequestOptions};
use pyo3::prelude::*;
use serde_json::Value;
use tokio::sync::mpsc;

use crate::future::{Failure, Held};
use crate::{ConfigError, Released, not_forked, version};

/// A connected session; see the package's `Session`.
#[pyclass(frozen, module = "mcp_scoped_http._native")]
pub(crate) struct NativeSession {
    inner: Held<mcp_scoped_http::Session>,
    notifications: Arc<tokio::sync::Mutex<Option<mpsc::Receiver<Message>>>>,
}

/// `value` as JSON text; the error is an exception, in either of the
/// forms the callers return.
pub(crate) fn json_text<E: From<PyErr>>(value: &impl serde::Serialize) -> Result<String, E> {
    serde_json::to_string(value).map_err(|error| {
        crate::McpScopedHttpError::new_err(format!("cannot serialize a value: {error}")).into()
    })
}

pub(crate) fn json_value(text: Option<&str>, what: &str) -> PyResult<Option<Value>> {
    text.map(|text| {
        serde_json::from_str(text)
            .map_err(|error| ConfigError::new_err(format!("{what} is not JSON: {error}")))
    })
    .transpose()
}

pub(crate) fn seconds(timeout: Option<f64>) -> PyResult<Option<Duration>> {
    timeout
        .map(|t| {
            Duration::try_from_secs_f64(t)
                .map_err(|_| ConfigError::new_err(format!("not a timeout in seconds: {t}")))
        })
        .transpose()
}

/// Progress updates waiting for a request's callable, at most: past that
/// the newest are dropped (progress is advisory; a flood costs nothing).
const PROGRESS_QUEUED: usize = 64;

/// Where a request's progress updates go: a thread of the blocking pool
/// calls its callable, from the first update on.
enum Delivery {
    Idle,
    Running(SyncSender<Progress>, tokio::task::JoinHandle<()>),
    /// The request ended: nothing more is delivered.
    Finished,
}

/// The end of a request's progress delivery: [`Progressed::finish`]
/// waits until every update queued was handed to the callable.
#[derive(Default)]
struct Progressed(Option<Arc<Mutex<Delivery>>>);

impl Progressed {
    async fn finish(self) {
        let Some(delivery) = self.0 else { return };
        let running = std::mem::replace(
            &mut *delivery.lock().unwrap_or_else(PoisonError::into_inner),
            Delivery::Finished,
        );
        if let Delivery::Running(sender, thread) = running {
            drop(sender);
            let _ = thread.await;
        }
    }
}

/// Request options: a timeout, and progress handed to a Python callable
/// with `(progress, total, message)`, in order, on a blocking-pool thread
/// (never the runtime's: waiting there for the GIL would hold up every
/// transport); what it raises is printed, not propagated. The request's
/// result waits for [`Progressed::finish`], so it comes after its updates.
fn options(
    timeout: Option<f64>,
    on_progress: Option<Py<PyAny>>,
) -> PyResult<(RequestOptions, Progressed)> {
    let mut options = RequestOptions::default();
    if let Some(timeout) = seconds(timeout)? {
        options = options.timeout(timeout);
    }
    let Some(callback) = on_progress else {
        return Ok((options, Progressed::default()));
    };
    let callback = Arc::new(callback);
    let delivery = Arc::new(Mutex::new(Delivery::Idle));
    let progressed = Progressed(Some(Arc::clone(&delivery)));
    options = options.on_progress(move |progress| {
        let mut delivery = delivery.lock().unwrap_or_else(PoisonError::into_inner);
        if matches!(*delivery, Delivery::Idle) {
            let (sender, receiver) = std::sync::mpsc::sync_channel::<Progress>(PROGRESS_QUEUED);
            let callback = Arc::clone(&callback);
            let thread = tokio::task::spawn_blocking(move || {
                while let Ok(progress) = receiver.recv() {
                    crate::future::through_gate(|| {
                        Python::attach(|py| {
                            let args = (progress.progress, progress.total, progress.message);
                            if let Err(error) = callback.call1(py, args) {
                                error.print(py);
                            }
                        });
                    });
                }
            });
            *delivery = Delivery::Running(sender, thread);
        }
        if let Delivery::Running(sender, _) = &*delivery {
            let _ = sender.try_send(progress);
        }
    });
    Ok((options, progressed))
}

impl NativeSession {
    fn inner(&self) -> PyResult<Arc<mcp_scoped_http::Session>> {
        self.inner.get()
    }

    /// Runs `work` unless the Python object goes first.
    fn run<'py, F, T>(
        &self,
        py: Python<'py>,
        work: impl FnOnce(Arc<mcp_scoped_http::Session>) -> F,
    ) -> PyResult<Bound<'py, PyAny>>
    where
        F: Future<Output = Result<T, Failure>> + Send + 'static,
        T: for<'a> IntoPyObject<'a> + Send + 'static,
    {
        self.inner.run(py, work)
    }
}

#[pymethods]
impl NativeSession {
    /// The server's name, version, capabilities, instructions, the
    /// revision and transport, as JSON.
    fn info(&self) -> PyResult<String> {
        let info = self.inner()?.info();
        json_text(&serde_json::json!({
            "server_info": info.server_info,
            "capabilities": info.capabilities,
            "instructions": info.instructions,
            "protocol_version": info.protocol_version.as_str(),
            "transport": format!("{:?}", info.transport),
        }))
    }

    /// Tools, prompts, resources and templates, as JSON.
    fn catalog(&self) -> PyResult<String> {
        json_text(&*self.inner()?.catalog())
    }

    #[getter]
    fn session_id(&self) -> PyResult<Option<String>> {
        Ok(self.inner()?.session_id().map(|id| id.expose().to_owned()))
    }

    #[getter]
    fn closed(&self) -> PyResult<bool> {
        Ok(self.inner()?.is_closed())
    }

    #[pyo3(signature = (name, arguments = None, timeout = None, on_progress = None))]
    fn call_tool<'py>(
        &self,
        py: Python<'py>,
        name: String,
        arguments: Option<&str>,
        timeout: Option<f64>,
        on_progress: Option<Py<PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let arguments = json_value(arguments, "the arguments")?.unwrap_or(Value::Null);
        let (options, progressed) = options(timeout, on_progress)?;
        self.run(py, move |session| async move {
            let result = session.call_tool_with(&name, arguments, options).await;
            progressed.finish().await;
            json_text(&result?)
        })
    }

    #[pyo3(signature = (method, params = None, timeout = None, on_progress = None))]
    fn request<'py>(
        &self,
        py: Python<'py>,
        method: String,
        params: Option<&str>,
        timeout: Option<f64>,
        on_progress: Option<Py<PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let params = json_value(params, "the params")?;
        let (options, progressed) = options(timeout, on_progress)?;
        self.run(py, move |session| async move {
            let result = session.request_with(&method, params, options).await;
            progressed.finish().await;
            json_text(&result?)
        })
    }

    #[pyo3(signature = (method, params = None))]
    fn notify<'py>(
        &self,
        py: Python<'py>,
        method: String,
        params: Option<&str>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let params = json_value(params, "the params")?;
        self.run(py, move |session| async move {
            Ok(session.notify(&method, params).await?)
        })
    }

    /// The next notification from the server as JSON, or None once the
    /// session is closing.
    fn next_notification<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let queue = self.notifications.clone();
        self.run(py, move |_| async move {
            let mut queue = queue.lock().await;
            let Some(receiver) = queue.as_mut() else {
                return Ok(None);
            };
            match receiver.recv().await {
                Some(message) => json_text(&message).map(Some),
                None => Ok(None),
            }
        })
    }

    /// Closes the session: its tasks, the DELETE, hooks, the owned client,
    /// a stdio server's tree, in reverse order. Never raises for a failed
    /// DELETE (it is in what it returns).
    fn close<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        not_forked()?;
        let session = self.inner()?;
        crate::future::spawn(py, async move {
            Ok::<_, Failure>(Released::from(session.close().await))
        })
    }
}

/// Connects to the HTTP server at `url` or starts the stdio server
/// `command`, with discovery; see the package's `connect`.
#[pyfunction]
#[pyo3(signature = (
    url = None, *, command = None, args = None, env = None, cwd = None,
    headers = None, bearer = None, protocol_version = None, timeout = None,
    listen = true, client = None, oauth = None,
))]
#[allow(clippy::too_many_arguments)] // Python's keyword arguments
pub(crate) fn connect<'py>(
    py: Python<'py>,
    url: Option<String>,
    command: Option<String>,
    args: Option<Vec<String>>,
    env: Option<Vec<(String, String)>>,
    cwd: Option<String>,
    headers: Option<Vec<(String, String)>>,
    bearer: Option<String>,
    protocol_version: Option<&str>,
    timeout: Option<f64>,
    listen: bool,
    client: Option<PyRef<'_, crate::HttpClient>>,
    oauth: Option<PyRef<'_, crate::OAuth>>,
) -> PyResult<Bound<'py, PyAny>> {
    not_forked()?;
    let mut connector = match (url, command) {
        (Some(url), None) => {
            if args.is_some() || env.is_some() || cwd.is_some() {
                return Err(ConfigError::new_err(
                    "args, env and cwd are for a stdio command",
                ));
            }
            let mut connector = Connector::new(url);
            if let Some(client) = client {
                connector = connector.client(client.inner.clone());
            }
            if let Some(oauth) = oauth {
                connector = connector.oauth(oauth.inner.clone());
            }
            connector
        }
        (None, Some(command)) => {
            if headers.is_some() || bearer.is_some() || client.is_some() || oauth.is_some() {
                return Err(ConfigError::new_err(
                    "headers, bearer, client and oauth are for an HTTP url",
                ));
            }
            let mut stdio = StdioCommand::new(command)
                .args(args.unwrap_or_default())
                .envs(env.unwrap_or_default());
            if let Some(dir) = cwd {
                stdio = stdio.current_dir(dir);
            }
            Connector::stdio(stdio)
        }
        _ => {
            return Err(ConfigError::new_err(
                "give either a url or a command, not both",
            ));
        }
    };
    for (name, value) in headers.unwrap_or_default() {
        connector = connector.header(&name, &value);
    }
    if let Some(token) = bearer {
        connector = connector.bearer(&token);
    }
    if let Some(version) = version(protocol_version)? {
        connector = connector.protocol_version(version);
    }
    if let Some(timeout) = seconds(timeout)? {
        connector = connector.connect_timeout(timeout);
    }
    connector = connector.listen(listen);
    crate::future::spawn(py, async move {
        let session = connector.connect().await?;
        let notifications = session.notifications();
        Ok::<_, Failure>(NativeSession {
            inner: Held::new(session, "the session is gone"),
            notifications: Arc::new(tokio::sync::Mutex::new(notifications)),
        })
    })
}
