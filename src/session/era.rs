//! Which era a server speaks, found once per endpoint and remembered by
//! the HTTP client: 2026-07-28 (`server/discover`), else the 2025
//! `initialize`, else the deprecated HTTP+SSE transport of 2024-11-05.
//!
//! Only an answer can show an era. A `4xx` that carries no modern JSON-RPC
//! error (`-32020`, `-32021`, `-32022`) says "not this era"; 401, 403, 407,
//! 408 and 429, a `5xx`, a timeout or a broken connection say nothing of
//! the era and are reported as they are.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use http::StatusCode;
use serde_json::{Value, json};
use tracing::Instrument;

use super::connect::PhaseCell;
use super::front::SessionFront;
use crate::client::RevisionMemory;
use crate::engine::{Deadline, Engine, Generation};
use crate::error::{ConnectPhase, Error, Result};
use crate::jsonrpc::{Notification, Request, result_value};
use crate::transport::ProtocolVersion;

/// `HeaderMismatch`: the request metadata headers do not match the body.
pub(crate) const HEADER_MISMATCH: i64 = -32020;
/// A capability the request needs was not declared.
pub(crate) const MISSING_CAPABILITY: i64 = -32021;
/// `UnsupportedProtocolVersion`, with `data.supported`.
pub(crate) const UNSUPPORTED_VERSION: i64 = -32022;

/// The `_meta` key of the server's name and version in a discover result.
pub(crate) const SERVER_INFO_META: &str = "io.modelcontextprotocol/serverInfo";

/// What connecting needs to open a server's era.
pub(super) struct Plan<'a> {
    /// Where the verdict is remembered.
    pub(super) memory: &'a RevisionMemory,
    pub(super) url: &'a str,
    /// A revision the caller pinned: no probing, nothing remembered.
    pub(super) pinned: Option<ProtocolVersion>,
    pub(super) capabilities: &'a Value,
    pub(super) client_info: &'a Value,
    pub(super) request_timeout: Option<Duration>,
    /// Set once an HTTP+SSE stream named its endpoint: the server speaks
    /// that transport, and a failure after it is the real cause.
    pub(super) sse_found: AtomicBool,
}

/// An era opened: the generation requests go to, the `initialize` or
/// `server/discover` result, and how it was found.
pub(super) struct Opened {
    pub(super) generation: Arc<Generation>,
    /// The result of `initialize` or of `server/discover`.
    pub(super) result: Value,
    /// Whether the era was found by probing.
    pub(super) probed: bool,
    /// Time spent on `notifications/initialized`.
    pub(super) initialized: Duration,
}

/// Opens the server's era: the pinned revision, else the one remembered
/// for the endpoint (probing again if it proves wrong), else detection.
pub(super) async fn open(
    engine: &Arc<Engine<SessionFront>>,
    plan: &Plan<'_>,
    phase: &PhaseCell,
) -> Result<Opened> {
    let known = plan.pinned.or_else(|| plan.memory.get(plan.url));
    let Some(version) = known else {
        return detect(engine, plan, phase).await;
    };
    match open_as(engine, plan, phase, version).await {
        Err(error)
            if plan.pinned.is_none()
                && (not_this_era(&error, version.is_modern())
                    || (version.is_modern() && error.is_protocol())
                    // A modern error to `initialize` (or the HTTP+SSE
                    // opening): the server turned modern-only since, and
                    // names its versions, as the spec asks of it. Without
                    // this, the stale verdict would fail every connect.
                    || (!version.is_modern() && modern_error(&error))) =>
        {
            tracing::debug!(%error, %version, "the remembered revision proved wrong; probing again");
            plan.memory.forget(plan.url);
            detect(engine, plan, phase).await
        }
        outcome => outcome,
    }
}

async fn open_as(
    engine: &Arc<Engine<SessionFront>>,
    plan: &Plan<'_>,
    phase: &PhaseCell,
    version: ProtocolVersion,
) -> Result<Opened> {
    if version.is_modern() {
        match discover(engine, plan, phase, version).await? {
            Probe::Opened(opened) => Ok(opened),
            Probe::Legacy(error) => Err(error),
        }
    } else {
        initialize(engine, plan, phase, version).await
    }
}

/// The spec's order: a modern request first, then `initialize`, then the
/// HTTP+SSE transport, each only when the last answered "not this era".
async fn detect(
    engine: &Arc<Engine<SessionFront>>,
    plan: &Plan<'_>,
    phase: &PhaseCell,
) -> Result<Opened> {
    let found = async {
        match discover(engine, plan, phase, ProtocolVersion::MODERN).await {
            Ok(Probe::Opened(opened)) => return Ok(opened),
            Ok(Probe::Legacy(error)) => {
                tracing::debug!(%error, "not a 2026-07-28 server; trying initialize");
            }
            Err(error) if not_this_era(&error, true) => {
                tracing::debug!(%error, "not a 2026-07-28 server; trying initialize");
            }
            Err(error) => return Err(error),
        }
        let error = match initialize(engine, plan, phase, ProtocolVersion::LATEST).await {
            Err(error) if not_this_era(&error, false) => error,
            outcome => return outcome,
        };
        tracing::debug!(%error, "no Streamable HTTP initialize; trying HTTP+SSE");
        // Not what a remembered HTTP+SSE attempt before detection found.
        plan.sse_found.store(false, Ordering::Relaxed);
        initialize(engine, plan, phase, ProtocolVersion::V2024_11_05)
            .await
            .map_err(|sse| {
                if plan.sse_found.load(Ordering::Relaxed) {
                    // An HTTP+SSE server was found and failed (a 401, a
                    // JSON-RPC error, a revision we do not speak): that is
                    // the cause, not the 4xx that led here.
                    return sse;
                }
                tracing::debug!(error = %sse, "not an HTTP+SSE server either");
                // The Streamable HTTP answer says more than the fallback's.
                error
            })
    };
    let mut opened = found.instrument(tracing::debug_span!("mcp.detect")).await?;
    opened.probed = true;
    let version = opened
        .generation
        .wire()
        .protocol_version()
        .unwrap_or(ProtocolVersion::LATEST);
    plan.memory.remember(plan.url, version);
    Ok(opened)
}

/// Whether `error` shows the server does not speak the era tried (a modern
/// request when `modern`): a 4xx without a modern JSON-RPC error, or, for
/// a modern request, any JSON-RPC error in a success (a 2025 server that
/// does not know `server/discover`).
fn not_this_era(error: &Error, modern: bool) -> bool {
    if modern_error(error) {
        return false;
    }
    match error.status() {
        Some(status) => {
            status.is_client_error()
                && ![
                    StatusCode::UNAUTHORIZED,
                    StatusCode::FORBIDDEN,
                    StatusCode::PROXY_AUTHENTICATION_REQUIRED,
                    StatusCode::REQUEST_TIMEOUT,
                    StatusCode::TOO_MANY_REQUESTS,
                ]
                .contains(&status)
        }
        None => modern && error.is_rpc(),
    }
}

/// A JSON-RPC error only a 2026-07-28 server sends.
fn modern_error(error: &Error) -> bool {
    matches!(
        error.rpc_code(),
        Some(HEADER_MISMATCH | MISSING_CAPABILITY | UNSUPPORTED_VERSION)
    )
}

/// The newest revision in an `UnsupportedProtocolVersion` error's
/// `data.supported` that this crate speaks.
pub(crate) fn supported_instead(error: &Error) -> Option<ProtocolVersion> {
    if error.rpc_code() != Some(UNSUPPORTED_VERSION) {
        return None;
    }
    let data = error.rpc_error()?.data.as_ref()?;
    data.get("supported")?
        .as_array()?
        .iter()
        .filter_map(|v| v.as_str()?.parse::<ProtocolVersion>().ok())
        .filter(|v| *v != ProtocolVersion::V2024_11_05)
        .max()
}

/// What a modern request showed.
enum Probe {
    /// The server speaks 2026-07-28 (or answered for a 2025 revision it
    /// prefers, which `initialize` opened).
    Opened(Opened),
    /// The server answered, but not as a 2026-07-28 server would: a
    /// success that is no discover result (some 2025 servers answer any
    /// method with an empty result).
    Legacy(Error),
}

/// 2026-07-28: `server/discover`; an `UnsupportedProtocolVersion` answer
/// is retried once with the newest revision it lists that we speak (an
/// `initialize` when that one is a 2025 revision).
async fn discover(
    engine: &Arc<Engine<SessionFront>>,
    plan: &Plan<'_>,
    phase: &PhaseCell,
    version: ProtocolVersion,
) -> Result<Probe> {
    let mut version = version;
    let mut retried = false;
    loop {
        let generation = engine.stateless(version)?;
        let request = Request {
            id: engine.next_id(),
            method: "server/discover".into(),
            params: None,
        };
        let deadline = Deadline::after(plan.request_timeout);
        let outcome = engine
            .request_on(&generation, &request, deadline)
            .instrument(tracing::debug_span!("mcp.discover_server", %version))
            .await
            .and_then(|result| result_value(&result, "server/discover"))
            .map_err(in_phase);
        let instead = match outcome {
            Ok(result) => {
                let Some(supported) = supported_versions(&result) else {
                    return Ok(Probe::Legacy(
                        Error::protocol(
                            "server/discover was answered without supportedVersions: \
                             not a 2026-07-28 server",
                        )
                        .in_phase(ConnectPhase::Initialize),
                    ));
                };
                if supported.contains(&version) {
                    check_complete(&result, "server/discover")?;
                    return Ok(Probe::Opened(Opened {
                        generation,
                        result,
                        probed: false,
                        initialized: Duration::ZERO,
                    }));
                }
                match supported.into_iter().max() {
                    Some(instead) => instead,
                    // Only revisions without Streamable HTTP (2024-11-05)
                    // or none we know: not a server to speak 2026 to.
                    None => {
                        return Ok(Probe::Legacy(
                            Error::protocol(
                                "server/discover lists none of the Streamable HTTP revisions \
                                 this client speaks",
                            )
                            .in_phase(ConnectPhase::Initialize),
                        ));
                    }
                }
            }
            Err(error) if !retried => match supported_instead(&error) {
                Some(instead) => instead,
                None => return Err(error),
            },
            Err(error) => return Err(error),
        };
        if !instead.is_modern() {
            tracing::debug!(%instead, "the server prefers a 2025 revision");
            return initialize(engine, plan, phase, instead)
                .await
                .map(Probe::Opened);
        }
        if retried {
            return Err(Error::protocol(format!(
                "the server refused protocol version {version} twice"
            ))
            .in_phase(ConnectPhase::Initialize));
        }
        tracing::debug!(%version, %instead, "unsupported revision; retrying");
        version = instead;
        retried = true;
    }
}

/// The revisions a discover result lists that we speak over Streamable
/// HTTP; `None` when it lists none at all (no discover result).
fn supported_versions(result: &Value) -> Option<Vec<ProtocolVersion>> {
    let listed = result.get("supportedVersions")?.as_array()?;
    Some(
        listed
            .iter()
            .filter_map(|v| v.as_str()?.parse::<ProtocolVersion>().ok())
            .filter(|v| *v != ProtocolVersion::V2024_11_05)
            .collect(),
    )
}

/// `initialize` proposing `version` (over HTTP+SSE for 2024-11-05), then
/// `notifications/initialized`.
async fn initialize(
    engine: &Arc<Engine<SessionFront>>,
    plan: &Plan<'_>,
    phase: &PhaseCell,
    version: ProtocolVersion,
) -> Result<Opened> {
    phase.set(ConnectPhase::Initialize);
    let request = Request {
        id: engine.next_id(),
        method: "initialize".into(),
        params: Some(json!({
            "protocolVersion": version.as_str(),
            "capabilities": plan.capabilities,
            "clientInfo": plan.client_info,
        })),
    };
    let opening = async {
        if version.transport() == crate::TransportKind::HttpSse {
            engine.open_http_sse(request, false, &plan.sse_found).await
        } else {
            engine.open(request, false).await
        }
    };
    // Bounded like any request: a server that never answers (or, over
    // HTTP+SSE, never names its endpoint) does not hold the connect.
    let (generation, result) = Deadline::after(plan.request_timeout)
        .run(opening)
        .await
        .map_err(in_phase)?;

    phase.set(ConnectPhase::Initialized);
    let started = Instant::now();
    let initialized = Notification {
        method: "notifications/initialized".into(),
        params: None,
    };
    engine
        .notify(&generation, &initialized)
        .instrument(tracing::debug_span!("mcp.initialized"))
        .await
        .map_err(|e| e.in_phase(ConnectPhase::Initialized))?;
    Ok(Opened {
        generation,
        result,
        probed: false,
        initialized: started.elapsed(),
    })
}

/// The connect step an error of the opening exchange belongs to: nothing
/// came back at all (the server was not reached), or the handshake failed.
fn in_phase(error: Error) -> Error {
    let step = if error.is_transport() {
        ConnectPhase::Connect
    } else {
        ConnectPhase::Initialize
    };
    error.in_phase(step)
}

/// A result's `resultType` must be `complete` (or absent, as before
/// 2026-07-28) where nothing else is allowed.
pub(crate) fn check_complete(result: &Value, method: &str) -> Result<()> {
    match super::stateless::result_type(result, method)? {
        None | Some("complete") => Ok(()),
        Some(kind) => {
            let shown: String = kind.chars().take(40).collect();
            Err(Error::protocol(format!(
                "the {method} result has resultType {shown:?}, where only \"complete\" is allowed"
            )))
        }
    }
}

/// 2026-07-28: the `subscriptions/listen` filter for what the server's
/// capabilities say can change; `None` when nothing can.
pub(super) fn subscription_filter(capabilities: &Value) -> Option<Value> {
    let mut filter = serde_json::Map::new();
    for (capability, field) in [
        ("tools", "toolsListChanged"),
        ("prompts", "promptsListChanged"),
        ("resources", "resourcesListChanged"),
    ] {
        if capabilities[capability]["listChanged"] == Value::Bool(true) {
            filter.insert(field.into(), Value::Bool(true));
        }
    }
    (!filter.is_empty()).then_some(Value::Object(filter))
}
