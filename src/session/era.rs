//! Which era a server speaks, found once per endpoint and remembered by
//! the HTTP client: 2026-07-28 (`server/discover`), else the 2025
//! `initialize`, else the deprecated HTTP+SSE transport of 2024-11-05.
//!
//! Only an answer can show an era. A `4xx` that carries no modern JSON-RPC
//! error (`-32020`, `-32021`, `-32022`), or a "method not found" (`-32601`,
//! whatever its status) to the era's opening request, says "not this era";
//! 401, 403, 407, 408 and 429, another `5xx`, a timeout or a broken
//! connection say nothing of the era and are reported as they are.
//!
//! Every exchange here runs within the connect's deadline (and each within
//! the request timeout): the era is chosen inside one bound, and no
//! exchange gets a shorter one of its own. A server slow to start is slow,
//! not another era: a late answer is an answer, and an error that names
//! the revision to use (`-32022` with `data.supported`) is a redirection,
//! followed in the same connect, not a verdict.
//!
//! Generic over the engine's front end: the rmcp adapter
//! (`adapters::rmcp`) probes with [`discover`] and reads answers with
//! [`not_this_era`] and [`wrong_era`] too, in the same order, with its
//! own `initialize` step (rmcp's, returning at the answer's head).

use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use http::StatusCode;
use serde_json::{Value, json};
use tracing::Instrument;

use super::shared::{PhaseCell, check_complete, modern_error, supported_instead};
use crate::deadline::Deadline;
use crate::engine::{Engine, Front, Generation};
use crate::error::{ConnectPhase, Error, Result, result_value};
use crate::http_client::RevisionMemory;
use crate::jsonrpc::{Notification, Request, codes};
use crate::transport::ProtocolVersion;

/// What connecting needs to open a server's era.
pub(crate) struct Plan<'a> {
    /// Where the verdict is remembered.
    pub(crate) memory: &'a RevisionMemory,
    pub(crate) url: &'a str,
    /// A revision the caller pinned: no probing, nothing remembered.
    pub(crate) pinned: Option<ProtocolVersion>,
    pub(crate) capabilities: &'a Value,
    pub(crate) client_info: &'a Value,
    pub(crate) request_timeout: Option<Duration>,
    /// The connect's deadline, which every exchange here shares.
    pub(crate) deadline: Deadline,
    /// Set once an HTTP+SSE stream named its endpoint: the server speaks
    /// that transport, and a failure after it is the real cause.
    pub(crate) sse_found: AtomicBool,
    /// A stdio server: detection as the stdio page has it (`initialize`
    /// beside the probe once it has gone [`STDIO_PROBE_PATIENCE`]
    /// unanswered, or after any answer that is not modern; no HTTP+SSE).
    pub(crate) stdio: bool,
}

/// How long a stdio server's probe (`server/discover`) goes unanswered
/// before `initialize` is sent too, on the same process: some 2025 servers
/// never answer a request that comes before `initialize`. Not a deadline:
/// the probe still waits, within the connect's, and its answer, however
/// late, is used (a server slow to start reads both in order). A verdict
/// is remembered per command line, so a reconnect does not wait again.
pub(crate) const STDIO_PROBE_PATIENCE: Duration = Duration::from_secs(3);

impl Plan<'_> {
    /// The deadline of one exchange: the connect's, and the request
    /// timeout from now, whichever comes first.
    fn exchange(&self) -> Deadline {
        self.deadline.within(self.request_timeout)
    }

    /// Whether the connect's own deadline has passed.
    fn deadline_passed(&self) -> bool {
        self.deadline
            .instant()
            .is_some_and(|at| at <= tokio::time::Instant::now())
    }
}

/// An era opened: the generation requests go to, the `initialize` or
/// `server/discover` result, and how it was found.
pub(crate) struct Opened {
    pub(crate) generation: Arc<Generation>,
    /// The result of `initialize` or of `server/discover`.
    pub(crate) result: Value,
    /// Whether the era was found by probing.
    pub(crate) probed: bool,
    /// Time spent on `notifications/initialized`.
    pub(crate) initialized: Duration,
}

/// Opens the server's era: the pinned revision, else the one remembered
/// for the endpoint, else detection. A remembered revision that proves
/// wrong is forgotten at once, and the era detected again in the same
/// connect, within its deadline.
pub(crate) async fn open<F: Front>(
    engine: &Arc<Engine<F>>,
    plan: &Plan<'_>,
    phase: &PhaseCell,
) -> Result<Opened> {
    let known = plan.pinned.or_else(|| plan.memory.get(plan.url));
    let Some(version) = known else {
        return detect(engine, plan, phase).await;
    };
    match open_as(engine, plan, phase, version).await {
        Err(error) if plan.pinned.is_none() && wrong_era(&error, version) => {
            tracing::debug!(%error, %version, "the remembered revision proved wrong; probing again");
            plan.memory.forget(plan.url);
            detect(engine, plan, phase).await
        }
        outcome => outcome,
    }
}

/// Whether `error`, from opening the remembered `version`, shows the
/// server no longer speaks it: "not this era" as detection reads it; for
/// a modern revision, an answer that is no discover result; for a 2025 or
/// 2024 one, a modern error (the server turned modern-only since, and
/// names its versions, as the spec asks of it). Without this, the stale
/// verdict would fail every connect through that client.
pub(crate) fn wrong_era(error: &Error, version: ProtocolVersion) -> bool {
    not_this_era(error, version.is_modern())
        || (version.is_modern() && error.is_protocol())
        || (!version.is_modern() && modern_error(error))
}

async fn open_as<F: Front>(
    engine: &Arc<Engine<F>>,
    plan: &Plan<'_>,
    phase: &PhaseCell,
    version: ProtocolVersion,
) -> Result<Opened> {
    if version.is_modern() {
        match discover(engine, plan, version).await? {
            Probe::Opened(opened) => Ok(opened),
            Probe::Prefers(instead) => initialize(engine, plan, phase, instead).await,
            Probe::Legacy(error) => Err(error),
        }
    } else {
        initialize(engine, plan, phase, version).await
    }
}

/// The spec's order: a modern request first, then `initialize` (proposing
/// the revision the modern answer preferred, if it named one), then the
/// HTTP+SSE transport, each only when the last answered "not this era":
/// one `initialize` at most, so three exchanges at most (four when the
/// server asks to retry the modern request with another modern revision).
async fn detect<F: Front>(
    engine: &Arc<Engine<F>>,
    plan: &Plan<'_>,
    phase: &PhaseCell,
) -> Result<Opened> {
    if plan.stdio {
        let mut opened = detect_stdio(engine, plan, phase)
            .instrument(tracing::debug_span!("mcp.detect"))
            .await?;
        opened.probed = true;
        return Ok(remember(plan, opened));
    }
    let found = async {
        let proposed = match discover(engine, plan, ProtocolVersion::MODERN).await {
            Ok(Probe::Opened(opened)) => return Ok(opened),
            Ok(Probe::Prefers(instead)) => {
                tracing::debug!(%instead, "the server prefers a 2025 revision");
                instead
            }
            Ok(Probe::Legacy(error)) => {
                tracing::debug!(%error, "not a 2026-07-28 server; trying initialize");
                ProtocolVersion::LATEST
            }
            Err(error) if not_this_era(&error, true) => {
                tracing::debug!(%error, "not a 2026-07-28 server; trying initialize");
                ProtocolVersion::LATEST
            }
            Err(error) => return Err(error),
        };
        let error = match initialize(engine, plan, phase, proposed).await {
            Err(error) if not_this_era(&error, false) => error,
            Err(error) => return redirected(engine, plan, phase, error, proposed).await,
            outcome => return outcome,
        };
        tracing::debug!(%error, "no Streamable HTTP initialize; trying HTTP+SSE");
        // Not what a remembered HTTP+SSE attempt before detection found.
        plan.sse_found.store(false, Ordering::Relaxed);
        initialize(engine, plan, phase, ProtocolVersion::V2024_11_05)
            .await
            .map_err(|sse| {
                if plan.sse_found.load(Ordering::Relaxed) {
                    // An HTTP+SSE server was found and failed (its endpoint
                    // on another origin, a 401, a JSON-RPC error, a
                    // revision we do not speak): that is the cause, not
                    // the 4xx that led here.
                    return sse;
                }
                tracing::debug!(error = %sse, "not an HTTP+SSE server either");
                // The Streamable HTTP answer says more than the fallback's.
                error
            })
    };
    let mut opened = found.instrument(tracing::debug_span!("mcp.detect")).await?;
    opened.probed = true;
    Ok(remember(plan, opened))
}

/// Remembers the revision `opened` speaks, for the next connect.
fn remember(plan: &Plan<'_>, opened: Opened) -> Opened {
    let version = opened
        .generation
        .wire()
        .protocol_version()
        .unwrap_or(ProtocolVersion::LATEST);
    plan.memory.remember(plan.url, version);
    opened
}

/// The stdio page's detection: `server/discover` (a discover result is
/// 2026-07-28; a modern error names the revision to use and is never
/// fallen back from); any other error: `initialize`, on the same process.
/// No answer within [`STDIO_PROBE_PATIENCE`]: `initialize` too, beside
/// the probe, which still counts (see [`initialize_beside`]).
async fn detect_stdio<F: Front>(
    engine: &Arc<Engine<F>>,
    plan: &Plan<'_>,
    phase: &PhaseCell,
) -> Result<Opened> {
    let mut probe = pin!(discover(engine, plan, ProtocolVersion::MODERN));
    let answered = tokio::select! {
        answered = &mut probe => answered,
        () = tokio::time::sleep(STDIO_PROBE_PATIENCE) => {
            return initialize_beside(engine, plan, phase, probe).await;
        }
    };
    let proposed = match answered {
        Ok(Probe::Opened(opened)) => return Ok(opened),
        Ok(Probe::Prefers(instead)) => instead,
        Ok(Probe::Legacy(error)) => {
            tracing::debug!(%error, "not a 2026-07-28 server; trying initialize");
            ProtocolVersion::LATEST
        }
        Err(error) if modern_error(&error) => return Err(error),
        // A request timeout shorter than the patience cut the probe, not
        // the connect's: no answer in time, as the spec puts it.
        Err(error) if error.is_rpc() || (error.is_timeout() && !plan.deadline_passed()) => {
            tracing::debug!(%error, "not a 2026-07-28 server; trying initialize");
            ProtocolVersion::LATEST
        }
        Err(error) => return Err(error),
    };
    match initialize(engine, plan, phase, proposed).await {
        Err(error) => redirected(engine, plan, phase, error, proposed).await,
        opened => opened,
    }
}

/// `initialize` sent while the probe still waits (it went
/// [`STDIO_PROBE_PATIENCE`] unanswered: a 2025 server silent to it, or
/// any server still starting, which reads both in order). The server's
/// last word decides: an `initialize` it accepted is the session (a
/// server of both eras may settle on the handshake after answering the
/// probe); refused, the probe's discover result is (a 2026-07-28 server
/// that settled on the probe refuses the handshake with `-32022`), or the
/// revision the refusal names. Within the connect's deadline.
async fn initialize_beside<F: Front>(
    engine: &Arc<Engine<F>>,
    plan: &Plan<'_>,
    phase: &PhaseCell,
    mut probe: Pin<&mut impl Future<Output = Result<Probe>>>,
) -> Result<Opened> {
    tracing::debug!("no answer to server/discover yet; sending initialize beside it");
    let proposed = ProtocolVersion::LATEST;
    let mut handshake = pin!(initialize(engine, plan, phase, proposed));
    let mut probed = None;
    let refused = loop {
        tokio::select! {
            // The probe first: it was sent first, and an answer to it that
            // is ready with the handshake's came first.
            biased;
            answer = &mut probe, if probed.is_none() => match answer {
                Ok(Probe::Opened(opened)) => {
                    // Bounded shorter than the connect, for a reason: the
                    // server has shown it speaks 2026-07-28; the
                    // handshake's answer only says whether it took a 2025
                    // session after that, and a server that answers in
                    // order has it on its way. One silent to `initialize`
                    // took none.
                    let took = tokio::time::timeout(STDIO_PROBE_PATIENCE, &mut handshake).await;
                    return Ok(match took {
                        Ok(Ok(session)) => session,
                        _ => opened,
                    });
                }
                other => probed = Some(other),
            },
            outcome = &mut handshake => match outcome {
                Ok(session) => return Ok(session),
                Err(error) => break error,
            },
        }
    };
    match probed {
        Some(Err(error)) if modern_error(&error) => Err(error),
        Some(_) => redirected(engine, plan, phase, refused, proposed).await,
        // Refused naming nothing to go to: as a 2025 server refuses (a
        // 2026-07-28 one would have answered the probe, read first).
        None if supported_instead(&refused).is_none() => Err(refused),
        // The revision to use, while the probe still waits (a server that
        // dropped it, or answers out of order): the redirection is
        // followed beside it, and the first opening wins.
        None => {
            let follow = redirected(engine, plan, phase, refused, proposed);
            tokio::select! {
                biased;
                Ok(Probe::Opened(opened)) = &mut probe => Ok(opened),
                followed = follow => followed,
            }
        }
    }
}

/// A refused `initialize` (proposing `proposed`): an
/// `UnsupportedProtocolVersion` that names another revision we speak is a
/// redirection, followed once in the same connect (`server/discover` for
/// a 2026-07-28 one, `initialize` again for a 2025 one); any other
/// refusal, or a second one, is the error.
async fn redirected<F: Front>(
    engine: &Arc<Engine<F>>,
    plan: &Plan<'_>,
    phase: &PhaseCell,
    refused: Error,
    proposed: ProtocolVersion,
) -> Result<Opened> {
    let Some(version) = supported_instead(&refused).filter(|v| *v != proposed) else {
        return Err(refused);
    };
    tracing::debug!(%proposed, %version, "initialize was refused naming another revision; opening it");
    if !version.is_modern() {
        return initialize(engine, plan, phase, version).await;
    }
    match discover(engine, plan, version).await? {
        Probe::Opened(opened) => Ok(opened),
        // Sent back to a 2025 revision, or no discover result: no second
        // redirection; the refusal says most.
        Probe::Prefers(_) | Probe::Legacy(_) => Err(refused),
    }
}

/// Whether `error` shows the server does not speak the era tried (a modern
/// request when `modern`): a 4xx without a modern JSON-RPC error; "method
/// not found" to the opening request, whatever the status (a server that
/// does not know `initialize` answers it with 200 or 500 as often as with
/// a 4xx); or, for a modern request, any JSON-RPC error in a success (a
/// 2025 server that does not know `server/discover`).
pub(crate) fn not_this_era(error: &Error, modern: bool) -> bool {
    if modern_error(error) {
        return false;
    }
    let says_nothing = |status: StatusCode| {
        [
            StatusCode::UNAUTHORIZED,
            StatusCode::FORBIDDEN,
            StatusCode::PROXY_AUTHENTICATION_REQUIRED,
            StatusCode::REQUEST_TIMEOUT,
            StatusCode::TOO_MANY_REQUESTS,
        ]
        .contains(&status)
    };
    if error.rpc_code() == Some(codes::METHOD_NOT_FOUND) {
        return !error.status().is_some_and(says_nothing);
    }
    match error.status() {
        Some(status) => status.is_client_error() && !says_nothing(status),
        None => modern && error.is_rpc(),
    }
}

/// What a modern request showed.
pub(crate) enum Probe {
    /// The server speaks 2026-07-28.
    Opened(Opened),
    /// The server named a 2025 revision it prefers: `initialize` it.
    Prefers(ProtocolVersion),
    /// The server answered, but not as a 2026-07-28 server would: a
    /// success that is no discover result (some 2025 servers answer any
    /// method with an empty result).
    Legacy(Error),
}

/// 2026-07-28: `server/discover`; an `UnsupportedProtocolVersion` answer
/// is retried once with the newest revision it lists that we speak; a
/// 2025 one is left to the caller to `initialize` (once).
pub(crate) async fn discover<F: Front>(
    engine: &Arc<Engine<F>>,
    plan: &Plan<'_>,
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
        let outcome = engine
            .request_on(&generation, &request, plan.exchange())
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
            return Ok(Probe::Prefers(instead));
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
async fn initialize<F: Front>(
    engine: &Arc<Engine<F>>,
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
    // Bounded like any request, and by the connect: a server that never
    // answers (or, over HTTP+SSE, never names its endpoint) does not hold
    // the connect.
    let deadline = plan.exchange();
    let opening = if version.transport() == crate::TransportKind::HttpSse {
        engine
            .open_http_sse(request, false, &plan.sse_found, deadline)
            .await
    } else {
        engine.open(request, false, deadline).await
    };
    let (generation, result) = opening.map_err(in_phase)?;

    phase.set(ConnectPhase::Initialized);
    let started = Instant::now();
    let initialized = Notification {
        method: "notifications/initialized".into(),
        params: None,
    };
    let call = engine.telemetry(Some(&generation), &initialized.method, None, None);
    call.run(engine.notify(&generation, &initialized, plan.exchange()))
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

/// 2026-07-28: the `subscriptions/listen` filter for what the server's
/// capabilities say can change; `None` when nothing can.
pub(crate) fn subscription_filter(capabilities: &Value) -> Option<Value> {
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
