//! `Fleet` for Python hosts: their `mcpServers` file run as one owner's
//! servers (reconcile by name, reconnects, a merged catalog, a draining
//! shutdown), thin over [`mcp_scoped_http::fleet::Fleet`]. Values cross as
//! JSON text.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures_util::future::BoxFuture;
use mcp_scoped_http::RequestOptions;
use mcp_scoped_http::fleet::{Fleet, FleetEvent, ServerShutdown, parse_mcp_servers};
use mcp_scoped_http::jsonrpc::{ErrorObject, codes};
use pyo3::prelude::*;
use serde_json::{Value, json};
use tokio::sync::{broadcast, oneshot};

use crate::future::{Failure, Held};
use crate::session::{json_text, json_value, seconds};
use crate::{ConfigError, not_forked, py_error};

/// A fleet; see the package's `Fleet`.
#[pyclass(frozen, module = "mcp_scoped_http._native")]
pub(crate) struct NativeFleet {
    inner: Held<Fleet>,
    notifications:
        Arc<tokio::sync::Mutex<broadcast::Receiver<mcp_scoped_http::fleet::ServerNotification>>>,
    events: Arc<tokio::sync::Mutex<broadcast::Receiver<FleetEvent>>>,
}

impl NativeFleet {
    fn inner(&self) -> PyResult<Arc<Fleet>> {
        self.inner.get()
    }

    /// Runs `work` unless the Python object goes first.
    fn run<'py, F, T>(
        &self,
        py: Python<'py>,
        work: impl FnOnce(Arc<Fleet>) -> F,
    ) -> PyResult<Bound<'py, PyAny>>
    where
        F: Future<Output = Result<T, Failure>> + Send + 'static,
        T: for<'a> IntoPyObject<'a> + Send + 'static,
    {
        self.inner.run(py, work)
    }
}

fn shutdown_text(end: &ServerShutdown) -> String {
    match end {
        ServerShutdown::Closed(released) => format!("closed ({:?})", released.session),
        ServerShutdown::NoSession => "no_session".to_owned(),
        ServerShutdown::TimedOut => "timed_out".to_owned(),
        other => format!("{other:?}"),
    }
}

#[pymethods]
impl NativeFleet {
    /// A fleet with the defaults of `FleetBuilder`, and the host's answers
    /// to server requests: `on_sampling` and `on_elicitation` (each called
    /// as `answer(server, params_json)`, a coroutine of the result's JSON,
    /// run on the event loop running now) and `roots` (JSON of a list).
    #[new]
    #[pyo3(signature = (*, on_sampling = None, on_elicitation = None, roots = None))]
    fn new(
        py: Python<'_>,
        on_sampling: Option<Py<PyAny>>,
        on_elicitation: Option<Py<PyAny>>,
        roots: Option<&str>,
    ) -> PyResult<NativeFleet> {
        not_forked()?;
        let mut builder = Fleet::builder();
        if on_sampling.is_some() || on_elicitation.is_some() {
            let event_loop = py
                .import("asyncio")?
                .call_method0("get_running_loop")
                .map_err(|_| {
                    ConfigError::new_err(
                        "a fleet with handlers is made inside a running event loop (they run on it)",
                    )
                })?
                .unbind();
            let event_loop = Arc::new(event_loop);
            if let Some(answer) = on_sampling {
                builder = builder.on_sampling(handler(answer, event_loop.clone()));
            }
            if let Some(answer) = on_elicitation {
                builder = builder.on_elicitation(handler(answer, event_loop));
            }
        }
        if let Some(roots) = json_value(roots, "roots")? {
            let Value::Array(roots) = roots else {
                return Err(ConfigError::new_err("roots is a list"));
            };
            builder = builder.roots(roots);
        }
        // Its tasks are the runtime's.
        let _runtime = pyo3_async_runtimes::tokio::get_runtime().enter();
        let fleet = builder.build();
        let notifications = fleet.notifications();
        let events = fleet.events();
        Ok(NativeFleet {
            inner: Held::new(fleet, "the fleet is gone"),
            notifications: Arc::new(tokio::sync::Mutex::new(notifications)),
            events: Arc::new(tokio::sync::Mutex::new(events)),
        })
    }

    /// Applies an `mcpServers` document (JSON text, `${VAR}` expanded from
    /// the environment): servers started, stopped, replaced by name. JSON
    /// of what changed, and of the entries that could not be used.
    fn apply<'py>(&self, py: Python<'py>, config: &str) -> PyResult<Bound<'py, PyAny>> {
        let loaded = parse_mcp_servers(config).map_err(py_error)?;
        let invalid: Vec<String> = loaded.invalid.iter().map(|s| format!("{s:?}")).collect();
        self.run(py, move |fleet| async move {
            let report = fleet.apply(loaded.servers).await?;
            json_text(&json!({
                "started": report.started,
                "stopped": report.stopped,
                "replaced": report.replaced,
                "unchanged": report.unchanged,
                "invalid": invalid,
            }))
        })
    }

    /// Waits, at most `timeout` seconds, until every server is ready or
    /// has failed: JSON of `ready`, `not_ready` (with each state) and
    /// `pending`.
    fn ready<'py>(&self, py: Python<'py>, timeout: f64) -> PyResult<Bound<'py, PyAny>> {
        let within = seconds(Some(timeout))?.unwrap_or(Duration::ZERO);
        self.run(py, move |fleet| async move {
            let readiness = fleet.ready(within).await?;
            let not_ready: BTreeMap<&String, String> = readiness
                .not_ready
                .iter()
                .map(|(name, state)| (name, state.to_string()))
                .collect();
            json_text(&json!({
                "ready": readiness.ready,
                "not_ready": not_ready,
                "pending": readiness.pending,
            }))
        })
    }

    /// Every server's state, in words, by name (JSON).
    fn states(&self) -> PyResult<String> {
        let states: BTreeMap<String, String> = self
            .inner()?
            .states()
            .into_iter()
            .map(|(name, state)| (name, state.to_string()))
            .collect();
        json_text(&states)
    }

    /// The merged catalog (JSON): each server's, and the tools with their
    /// qualified names.
    fn catalog(&self) -> PyResult<String> {
        let catalog = self.inner()?.catalog();
        let tools: Vec<Value> = catalog
            .tools()
            .map(|tool| {
                json!({
                    "server": tool.server,
                    "qualified_name": tool.qualified_name(),
                    "tool": tool.entry,
                })
            })
            .collect();
        let servers: BTreeMap<&str, &mcp_scoped_http::Catalog> = catalog
            .servers
            .iter()
            .map(|(name, server)| (&**name, &**server))
            .collect();
        json_text(&json!({
            "generation": catalog.generation,
            "servers": servers,
            "tools": tools,
        }))
    }

    #[pyo3(signature = (server, tool, arguments = None, timeout = None))]
    fn call_tool<'py>(
        &self,
        py: Python<'py>,
        server: String,
        tool: String,
        arguments: Option<&str>,
        timeout: Option<f64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let arguments = json_value(arguments, "the arguments")?.unwrap_or(Value::Null);
        let mut options = RequestOptions::default();
        if let Some(timeout) = seconds(timeout)? {
            options = options.timeout(timeout);
        }
        self.run(py, move |fleet| async move {
            let result = fleet
                .call_tool_with(&server, &tool, arguments, options)
                .await?;
            json_text(&result)
        })
    }

    #[pyo3(signature = (qualified, arguments = None))]
    fn call_qualified<'py>(
        &self,
        py: Python<'py>,
        qualified: String,
        arguments: Option<&str>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let arguments = json_value(arguments, "the arguments")?.unwrap_or(Value::Null);
        self.run(py, move |fleet| async move {
            let result = fleet.call_qualified(&qualified, arguments).await?;
            json_text(&result)
        })
    }

    /// The next notification from any server, as JSON `{"server",
    /// "message", "missed"}` (`missed`: how many were dropped before it
    /// because the reader was behind), or None once the fleet shut down.
    fn next_notification<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let queue = self.notifications.clone();
        self.run(py, move |_| async move {
            let mut queue = queue.lock().await;
            let mut missed = 0u64;
            loop {
                match queue.recv().await {
                    Ok(notification) => {
                        let text = json_text::<Failure>(&json!({
                            "server": &*notification.server,
                            "message": {
                                "method": notification.message.method,
                                "params": notification.message.params,
                            },
                            "missed": missed,
                        }))?;
                        return Ok(Some(text));
                    }
                    Err(broadcast::error::RecvError::Lagged(n)) => missed += n,
                    Err(broadcast::error::RecvError::Closed) => return Ok(None),
                }
            }
        })
    }

    /// The next thing that happened in the fleet, as JSON: `{"kind":
    /// "state", "server", "state"}`, `{"kind": "catalog", "server",
    /// "generation", "tools"}` or `{"kind": "renewed", "server",
    /// "protocol_version"}`, with `missed` (dropped while the reader was
    /// behind); None once the fleet shut down.
    fn next_event<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let queue = self.events.clone();
        self.run(py, move |_| async move {
            let mut queue = queue.lock().await;
            let mut missed = 0u64;
            loop {
                let event = match queue.recv().await {
                    Ok(event) => event,
                    Err(broadcast::error::RecvError::Lagged(n)) => {
                        missed += n;
                        continue;
                    }
                    Err(broadcast::error::RecvError::Closed) => return Ok(None),
                };
                let mut shown = match &event {
                    FleetEvent::State { server, state, .. } => {
                        json!({"kind": "state", "server": &**server, "state": state.to_string()})
                    }
                    FleetEvent::Catalog {
                        server,
                        generation,
                        tools,
                        ..
                    } => json!({
                        "kind": "catalog", "server": &**server,
                        "generation": generation, "tools": tools,
                    }),
                    FleetEvent::Renewed { server, era, .. } => json!({
                        "kind": "renewed", "server": &**server,
                        "protocol_version": era.as_str(),
                    }),
                    other => json!({"kind": "other", "debug": format!("{other:?}")}),
                };
                shown["missed"] = json!(missed);
                return Ok(Some(json_text::<Failure>(&shown)?));
            }
        })
    }

    /// Replaces the roots every server's `roots/list` is answered with
    /// (JSON of a list), and tells the servers that take the notification.
    fn set_roots<'py>(&self, py: Python<'py>, roots: &str) -> PyResult<Bound<'py, PyAny>> {
        let Some(Value::Array(roots)) = json_value(Some(roots), "roots")? else {
            return Err(ConfigError::new_err("roots is a list"));
        };
        self.run(py, move |fleet| async move {
            let told = fleet.set_roots(roots).await?;
            json_text::<Failure>(&told)
        })
    }

    /// Shuts every server down (in parallel, within the fleet's deadline),
    /// and returns how each ended (JSON, by name).
    fn shutdown<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        not_forked()?;
        let fleet = self.inner()?;
        crate::future::spawn(py, async move {
            let report = fleet.shutdown().await;
            let servers: BTreeMap<&String, String> = report
                .servers
                .iter()
                .map(|(name, end)| (name, shutdown_text(end)))
                .collect();
            json_text::<Failure>(&servers)
        })
    }
}

/// A server request's answer from Python: `answer(server, params_json)`,
/// a coroutine run on `event_loop` (from a blocking-pool thread, so no
/// runtime worker waits for the GIL), whose JSON is the result. What it
/// raises is the request's error (`-32603`, its message).
fn handler(
    answer: Py<PyAny>,
    event_loop: Arc<Py<PyAny>>,
) -> impl Fn(Arc<str>, Value) -> BoxFuture<'static, Result<Value, ErrorObject>> + Send + Sync + 'static
{
    let answer = Arc::new(answer);
    move |server, params| {
        let (answer, event_loop) = (answer.clone(), event_loop.clone());
        Box::pin(async move {
            let (tx, rx) = oneshot::channel();
            let schedule = move || {
                crate::future::through_gate(|| {
                    Python::attach(|py| -> PyResult<Py<PyAny>> {
                        let coroutine = answer.call1(py, (&*server, params.to_string()))?;
                        let future = py.import("asyncio")?.call_method1(
                            "run_coroutine_threadsafe",
                            (coroutine, event_loop.bind(py)),
                        )?;
                        let answered = Answered {
                            tx: Mutex::new(Some(tx)),
                        };
                        future.call_method1("add_done_callback", (answered,))?;
                        Ok(future.unbind())
                    })
                })
            };
            let running = match tokio::task::spawn_blocking(schedule).await {
                Ok(Some(Ok(running))) => running,
                Ok(Some(Err(error))) => return Err(failed(format!("the host's handler: {error}"))),
                _ => return Err(failed("the host is exiting".to_owned())),
            };
            // The request given up (its timeout, the session closing): the
            // handler's run is cancelled with it.
            let cancel = scopeguard::guard(running, |running| {
                crate::future::through_gate(|| {
                    Python::attach(|py| {
                        let _ = running.call_method0(py, "cancel");
                    })
                });
            });
            let outcome = rx.await;
            // Answered: nothing to cancel.
            drop(scopeguard::ScopeGuard::into_inner(cancel));
            match outcome {
                Ok(Ok(text)) => serde_json::from_str(&text)
                    .map_err(|error| failed(format!("the host's handler gave no JSON: {error}"))),
                Ok(Err(message)) => Err(failed(format!("the host's handler failed: {message}"))),
                Err(_) => Err(failed("the host's handler was dropped".to_owned())),
            }
        })
    }
}

fn failed(message: String) -> ErrorObject {
    ErrorObject {
        code: codes::INTERNAL_ERROR,
        message,
        data: None,
    }
}

/// Hands a handler's outcome back, from the loop's thread.
#[pyclass(frozen)]
struct Answered {
    tx: Mutex<Option<oneshot::Sender<Result<String, String>>>>,
}

#[pymethods]
impl Answered {
    fn __call__(&self, future: &Bound<'_, PyAny>) -> PyResult<()> {
        let outcome = if future.call_method0("cancelled")?.is_truthy()? {
            Err("cancelled".to_owned())
        } else {
            let raised = future.call_method0("exception")?;
            if raised.is_none() {
                Ok(future.call_method0("result")?.extract::<String>()?)
            } else {
                Err(raised.str()?.to_string())
            }
        };
        let tx = self
            .tx
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(tx) = tx {
            let _ = tx.send(outcome);
        }
        Ok(())
    }
}
