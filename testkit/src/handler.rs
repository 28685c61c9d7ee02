//! Connection serving and HTTP request handling.

use std::collections::VecDeque;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::header::{CONTENT_LENGTH, CONTENT_TYPE, HeaderName, HeaderValue};
use http::{HeaderMap, Method, Request, Response, StatusCode};
use http_body::{Body, Frame};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls;
use tokio_util::sync::CancellationToken;

use super::body::{Resp, boxed, empty, full, random_u64};
use super::config::{Era, Eras, ListenMode, ResponseMode, ServerConfig, TlsIdentity};
use super::fault::{self, FaultAction};
use super::mcp::{self, Answer, Kind};
use super::respond::{
    EVENT_STREAM, Outcome, Req, SESSION_HEADER, keepalive, media_types, note_client_message,
    sse_headers,
};
use super::sse::ChanBody;
use super::{
    ChunkSender, CountGuard, Inflight, Listener, PendingAnswer, RecordedRequest, Replay,
    SessionRecord, Shared,
};
use super::{http_sse, modern};
use mcp_scoped_http::TransportKind;

type BoxError = Box<dyn std::error::Error + Send + Sync>;
const VERSION_HEADER: &str = "mcp-protocol-version";
const LAST_EVENT_ID: &str = "last-event-id";
const JSON: &str = "application/json";
/// Hard cap of [`FaultAction::SseNeverEndingLine`].
const NEVER_ENDING_CAP: usize = 256 << 20;
/// How long [`FaultAction::ServerRequest`] waits for the client's answer.
const SERVER_REQUEST_WAIT: Duration = Duration::from_secs(10);
/// JSON-RPC error code of a server request left unanswered.
const NO_ANSWER: i64 = -32000;

/// Builds the TLS acceptor for `id` (the owned client's provider choice,
/// h2 and http/1.1 ALPN),
/// requiring a client certificate issued by `client_ca` when given.
pub(super) fn tls_acceptor(id: &TlsIdentity, client_ca: Option<&[u8]>) -> TlsAcceptor {
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
    let provider =
        mcp_scoped_http::HttpClientBuilder::default_crypto_provider().expect("testkit: TLS server");
    let certs = id
        .cert_chain_der
        .iter()
        .map(|c| CertificateDer::from(c.clone()))
        .collect();
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(id.key_der.clone()));
    let cfg = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .expect("testkit: TLS protocol versions");
    let cfg = match client_ca {
        None => cfg.with_no_client_auth(),
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            roots
                .add(CertificateDer::from(ca.to_vec()))
                .expect("testkit: invalid client CA");
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            )
            .build()
            .expect("testkit: client certificate verifier");
            cfg.with_client_cert_verifier(verifier)
        }
    };
    let mut cfg = cfg
        .with_single_cert(certs, key)
        .expect("testkit: invalid TLS identity");
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    TlsAcceptor::from(Arc::new(cfg))
}

/// Serves one accepted TCP connection until it closes (or is aborted).
pub(super) async fn serve_connection(
    tcp: TcpStream,
    tls: Option<TlsAcceptor>,
    shared: Arc<Shared>,
    conn: u64,
    _open: CountGuard,
) {
    match tls {
        None => serve_io(tcp, shared, conn).await,
        Some(acceptor) => {
            if let Ok(stream) = acceptor.accept(tcp).await {
                serve_io(stream, shared, conn).await;
            }
        }
    }
}

async fn serve_io<I>(io: I, shared: Arc<Shared>, conn: u64)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let svc = service_fn(move |req| handle(shared.clone(), conn, req));
    let builder = auto::Builder::new(TokioExecutor::new());
    let _ = builder.serve_connection(TokioIo::new(io), svc).await;
}

/// Removes an in-flight entry when dropped (never drop it with the state
/// locked).
struct InflightGuard {
    shared: Arc<Shared>,
    key: u64,
    cancel: CancellationToken,
}

impl Drop for InflightGuard {
    fn drop(&mut self) {
        let key = self.key;
        self.shared.state().inflight.retain(|i| i.key != key);
    }
}

/// Whether a `notifications/cancelled` can end `action` early.
fn cancellable(action: &FaultAction) -> bool {
    matches!(
        action,
        FaultAction::Hang
            | FaultAction::Delay(_)
            | FaultAction::HoldHead(_)
            | FaultAction::ServerRequest { .. }
    )
}

/// The era that serves a request to `path` with these headers, `None` if
/// `path` is none of the server's endpoints.
fn route(cfg: &ServerConfig, path: &str, headers: &HeaderMap) -> Option<Era> {
    match cfg.eras {
        Eras::HttpSse if path == cfg.path || http_sse::is_messages_path(path) => Some(Era::HttpSse),
        _ if path != cfg.path => None,
        Eras::Modern => Some(Era::Modern),
        Eras::ModernAnd2025 => {
            let version = headers
                .get(modern::VERSION_HEADER)
                .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
            match version {
                Some(v) if !modern::HANDSHAKE_VERSIONS.contains(&v.as_str()) => Some(Era::Modern),
                _ => Some(Era::Streamable2025),
            }
        }
        _ => Some(Era::Streamable2025),
    }
}

async fn handle(shared: Arc<Shared>, conn: u64, req: Request<Incoming>) -> Result<Resp, BoxError> {
    let (parts, body) = req.into_parts();
    let bytes = body.collect().await?.to_bytes();
    let cfg = &shared.config;
    let path = parts.uri.path().to_owned();
    let era = route(cfg, &path, &parts.headers);
    let on_path = era.is_some();
    let req = Req {
        method: parts.method,
        headers: parts.headers,
        json: (!bytes.is_empty()).then(|| serde_json::from_slice(&bytes).map_err(|_| ())),
        path,
        query: parts.uri.query().map(str::to_owned),
        era: era.unwrap_or(Era::Streamable2025),
    };
    let first = req.first_message();
    let rpc_method = first
        .and_then(|m| m.get("method"))
        .and_then(Value::as_str)
        .map(str::to_owned);
    let params = first.and_then(|f| f.get("params"));
    let name = match rpc_method.as_deref() {
        Some("resources/read") => params.and_then(|p| p.get("uri")),
        _ => params.and_then(|p| p.get("name")),
    }
    .and_then(Value::as_str);
    if req.method == Method::DELETE {
        shared.counters.deletes.fetch_add(1, Ordering::SeqCst);
    }
    // Authorization sits in front of every route of the endpoint and of
    // the faults; its refusals are recorded like any request.
    let refusal = match &cfg.authorization {
        Some(auth) if on_path => auth.check(
            &shared.origin,
            &cfg.path,
            &req.headers,
            req.json.as_ref().and_then(|j| j.as_ref().ok()),
        ),
        _ => None,
    };
    let (action, inflight) = {
        let mut st = shared.state();
        let page = rpc_method
            .as_deref()
            .and_then(|m| mcp::page_of(st.catalog, m, first.and_then(|f| f.get("params"))));
        if req.method == Method::DELETE {
            if let Some(id) = req.header(SESSION_HEADER) {
                st.note_delete(id);
            }
        }
        if cfg.record_requests {
            st.requests.push(RecordedRequest {
                method: req.method.clone(),
                path: req.path.clone(),
                query: req.query.clone(),
                era,
                headers: req.headers.clone(),
                body: req.json.clone().and_then(Result::ok),
                rpc_method: rpc_method.clone(),
                connection: conn,
            });
        }
        let action = if on_path && refusal.is_none() {
            // The client's answer to a server request: no method, a
            // result or an error.
            let response = req.method == Method::POST
                && first.is_some_and(|m| {
                    m.get("method").is_none()
                        && (m.get("result").is_some() || m.get("error").is_some())
                });
            fault::pick(
                &mut st.faults,
                &req.method,
                (rpc_method.as_deref(), response),
                page,
                name,
            )
        } else {
            None
        };
        // Registered under the same lock as the recording, so a test that
        // saw the request recorded can cancel it.
        let inflight = match &action {
            Some(a) if req.method == Method::POST && cancellable(a) => {
                let key = shared.next_inflight.fetch_add(1, Ordering::Relaxed);
                let cancel = CancellationToken::new();
                st.inflight.push(Inflight {
                    key,
                    session: req.session().map(str::to_owned),
                    ids: req.request_ids(),
                    cancel: cancel.clone(),
                });
                Some((key, cancel))
            }
            _ => None,
        };
        (action, inflight)
    };
    let inflight = inflight.map(|(key, cancel)| InflightGuard {
        shared: shared.clone(),
        key,
        cancel,
    });
    if let Some(resp) = refusal {
        return Ok(resp);
    }
    if !on_path {
        if let Some(auth) = &cfg.authorization {
            if req.path == auth.metadata_path(&cfg.path) {
                return Ok(auth.metadata_response(&req.method, &shared.origin, &cfg.path));
            }
        }
        return Ok(rpc_error_response(404, "not found"));
    }
    match action {
        None => Ok(normal(&shared, &req)),
        Some(action) => apply(&shared, &req, action, inflight).await,
    }
}

// ---------------------------------------------------------------- responses

/// An HTTP error whose body is an id-less JSON-RPC error.
fn rpc_error_response(status: u16, message: &str) -> Resp {
    let code = if status == 404 {
        -32001
    } else {
        mcp::INVALID_REQUEST
    };
    rpc_error_with_code(status, code, message)
}

fn rpc_error_with_code(status: u16, code: i64, message: &str) -> Resp {
    full(
        status,
        Some(JSON),
        mcp::error(&Value::Null, code, message).to_string(),
    )
}

fn method_not_allowed(allow: &'static str) -> Resp {
    let mut resp = rpc_error_response(405, "method not allowed");
    resp.headers_mut()
        .insert(http::header::ALLOW, HeaderValue::from_static(allow));
    resp
}

fn sse_response(events: Vec<Bytes>) -> Resp {
    let mut resp = Response::new(boxed(ChanBody::chunks(events)));
    sse_headers(resp.headers_mut());
    resp
}

// ---------------------------------------------------------------- normal protocol

fn normal(shared: &Arc<Shared>, req: &Req) -> Resp {
    normal_with(shared, req, &Overrides::default())
}

fn normal_with(shared: &Arc<Shared>, req: &Req, ov: &Overrides) -> Resp {
    match req.era {
        Era::HttpSse => return http_sse::handle(shared, req, ov.protocol_version.as_deref()),
        Era::Modern if req.method == Method::POST => {
            let enc = Encoding {
                sse: shared.config.response_mode == ResponseMode::Sse,
                ..Encoding::default()
            };
            return encode(shared, modern::post(shared, req), &enc);
        }
        Era::Modern => {
            // As Python `mcp` 2.x: a bare 405 with `Allow: POST`.
            let mut resp = empty(405);
            resp.headers_mut()
                .insert(http::header::ALLOW, HeaderValue::from_static("POST"));
            return resp;
        }
        Era::Streamable2025 => {}
    }
    match req.method {
        Method::POST => {
            let enc = Encoding {
                sse: shared.config.response_mode == ResponseMode::Sse,
                ..Encoding::default()
            };
            encode(shared, post(shared, req, &Overrides::default()), &enc)
        }
        Method::GET => get(shared, req),
        Method::DELETE => delete(shared, req),
        _ => method_not_allowed("GET, POST, DELETE"),
    }
}

/// Changes to the normal answer to `initialize` made by faults.
#[derive(Default)]
pub(super) struct Overrides {
    protocol_version: Option<String>,
    session_id: Option<Vec<u8>>,
}

/// The normal outcome of a POST in the request's era (faults that change
/// the answer start from it). HTTP+SSE POSTs have no such outcome: their
/// answers go to the stream.
fn post_outcome(shared: &Arc<Shared>, req: &Req, ov: &Overrides) -> Outcome {
    match req.era {
        Era::Modern => modern::post(shared, req),
        _ => post(shared, req, ov),
    }
}

/// The error answer for a non-initialize request whose session header is
/// missing or unknown, if it is.
fn session_error(shared: &Shared, req: &Req) -> Option<Resp> {
    if !shared.config.stateful {
        return None;
    }
    let Some(id) = req.header(SESSION_HEADER) else {
        return Some(rpc_error_response(400, "missing Mcp-Session-Id"));
    };
    if shared.state().sessions.contains(id) {
        None
    } else {
        Some(rpc_error_response(404, "session not found"))
    }
}

fn post(shared: &Arc<Shared>, req: &Req, ov: &Overrides) -> Outcome {
    let cfg = &shared.config;
    let ct_ok = req
        .header(CONTENT_TYPE.as_str())
        .is_some_and(|v| media_types(v).next().is_some_and(|t| t == JSON));
    if !ct_ok {
        return Outcome::Http(rpc_error_response(
            415,
            "Content-Type must be application/json",
        ));
    }
    let accept: Vec<String> = req
        .headers
        .get_all(http::header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(media_types)
        .collect();
    if !(accept.iter().any(|t| t == JSON) && accept.iter().any(|t| t == EVENT_STREAM)) {
        return Outcome::Http(rpc_error_response(
            406,
            "Accept must list application/json and text/event-stream",
        ));
    }
    let json = match &req.json {
        None => return Outcome::Http(rpc_error_response(400, "empty body")),
        Some(Err(())) => {
            return Outcome::Http(rpc_error_with_code(400, mcp::PARSE_ERROR, "parse error"));
        }
        Some(Ok(v)) => v,
    };
    let (messages, batch): (Vec<&Value>, bool) = match json {
        Value::Array(a) if a.is_empty() => {
            return Outcome::Http(rpc_error_response(400, "empty batch"));
        }
        Value::Array(a) => (a.iter().collect(), true),
        v => (vec![v], false),
    };
    if !batch && matches!(mcp::classify(messages[0]), Kind::Invalid) {
        return Outcome::Http(rpc_error_response(400, "not a JSON-RPC message"));
    }
    let is_init = messages
        .iter()
        .any(|m| m.get("method").and_then(Value::as_str) == Some("initialize"));
    if !is_init {
        if let Some(v) = req.header(VERSION_HEADER) {
            if !mcp::SUPPORTED_VERSIONS.contains(&v) {
                return Outcome::Http(rpc_error_response(400, "unsupported MCP-Protocol-Version"));
            }
        }
        if let Some(resp) = session_error(shared, req) {
            return Outcome::Http(resp);
        }
    }
    let sse = cfg.response_mode == ResponseMode::Sse;
    let catalog = shared.state().catalog;
    let mut answers = Vec::new();
    for m in messages {
        match mcp::classify(m) {
            Kind::Request { id, method, params } => answers.push(mcp::answer(
                cfg,
                catalog,
                id,
                method,
                params,
                sse,
                ov.protocol_version.as_deref(),
            )),
            Kind::NotificationOrResponse => {
                note_client_message(shared, req.header(SESSION_HEADER), m);
            }
            Kind::Invalid => answers.push(Answer {
                before: Vec::new(),
                response: mcp::error(&Value::Null, mcp::INVALID_REQUEST, "invalid request"),
                method: None,
            }),
        }
    }
    if answers.is_empty() {
        return Outcome::Http(empty(202));
    }
    let session = if let (true, Some(raw)) = (is_init, &ov.session_id) {
        let Ok(value) = HeaderValue::from_bytes(raw) else {
            return Outcome::Http(rpc_error_response(
                500,
                "testkit: session id is no header value",
            ));
        };
        register_session(shared, String::from_utf8_lossy(raw).into_owned());
        Some(value)
    } else if is_init && cfg.stateful {
        let n = shared.next_session.fetch_add(1, Ordering::Relaxed) + 1;
        let id = format!("s-{n}-{:016x}", random_u64());
        let value = HeaderValue::from_str(&id).expect("visible ASCII");
        register_session(shared, id);
        Some(value)
    } else {
        None
    };
    Outcome::Messages {
        answers,
        batch,
        session,
        modern: false,
    }
}

fn register_session(shared: &Shared, id: String) {
    let mut st = shared.state();
    if shared.config.record_requests {
        st.session_log.push(SessionRecord::minted(
            id.clone(),
            TransportKind::StreamableHttp,
        ));
    }
    st.sessions.insert(id);
    drop(st);
    shared
        .counters
        .sessions_created
        .fetch_add(1, Ordering::SeqCst);
}

/// How to encode [`Outcome::Messages`].
#[derive(Default)]
struct Encoding {
    sse: bool,
    /// Replaces the Content-Type header.
    content_type: Option<String>,
    /// Pads the first response to about this many bytes.
    pad: Option<usize>,
    /// JSON array with a `notifications/message` before the response(s).
    batch_notification: bool,
}

fn pad(response: &mut Value, bytes: usize) {
    let filler = Value::String("x".repeat(bytes));
    if let Some(result) = response.get_mut("result").and_then(Value::as_object_mut) {
        result.insert("padding".into(), filler);
    } else if let Some(error) = response.get_mut("error").and_then(Value::as_object_mut) {
        error.insert("data".into(), filler);
    }
}

fn encode(shared: &Shared, outcome: Outcome, enc: &Encoding) -> Resp {
    let (mut answers, batch, session, modern) = match outcome {
        Outcome::Http(resp) => return resp,
        Outcome::Messages {
            answers,
            batch,
            session,
            modern,
        } => (answers, batch, session, modern),
    };
    if let (Some(bytes), Some(first)) = (enc.pad, answers.first_mut()) {
        pad(&mut first.response, bytes);
    }
    let mut resp = if enc.sse {
        let mut events = Vec::new();
        if shared.config.priming_event && !modern {
            events.push(shared.event(Some(&shared.event_id()), None, ""));
        }
        let notes = (1..=shared.config.notifications_before_response).map(mcp::log_notification);
        let messages = notes.chain(
            answers
                .into_iter()
                .flat_map(|a| a.before.into_iter().chain(std::iter::once(a.response))),
        );
        for m in messages {
            events.push(if modern {
                shared.modern_event(&m)
            } else {
                shared.event(Some(&shared.event_id()), None, &m.to_string())
            });
        }
        sse_response(events)
    } else {
        let mut responses: Vec<Value> = answers.into_iter().map(|a| a.response).collect();
        let body = if enc.batch_notification {
            responses.insert(0, mcp::log_notification(1));
            Value::Array(responses)
        } else if batch {
            Value::Array(responses)
        } else {
            responses.swap_remove(0)
        };
        if enc.pad.is_some() {
            // Chunked, with no Content-Length: the client cannot see the size
            // up front and must stop reading at its limit.
            let bytes = Bytes::from(body.to_string());
            let chunks = (0..bytes.len())
                .step_by(64 * 1024)
                .map(|at| bytes.slice(at..bytes.len().min(at + 64 * 1024)))
                .collect();
            let mut resp = Response::new(boxed(ChanBody::chunks(chunks)));
            resp.headers_mut()
                .insert(CONTENT_TYPE, HeaderValue::from_static(JSON));
            resp
        } else {
            full(200, Some(JSON), body.to_string())
        }
    };
    if let Some(ct) = &enc.content_type {
        match HeaderValue::from_str(ct) {
            Ok(v) => {
                resp.headers_mut().insert(CONTENT_TYPE, v);
            }
            Err(_) => return rpc_error_response(500, "testkit: bad Content-Type"),
        }
    }
    if let Some(session) = session {
        resp.headers_mut().insert(SESSION_HEADER, session);
    }
    resp
}

fn get(shared: &Arc<Shared>, req: &Req) -> Resp {
    let session = req.header(SESSION_HEADER).map(str::to_owned);
    if let Some(last) = req.header(LAST_EVENT_ID) {
        let replay = {
            let mut st = shared.state();
            let same_session = st.replays.get(last).is_some_and(|r| r.session == session);
            if same_session {
                st.replays.remove(last)
            } else {
                None
            }
        };
        if let Some(replay) = replay {
            if let Some(resp) = session_error(shared, req) {
                return resp;
            }
            let fresh = replay
                .messages
                .iter()
                .map(|m| shared.event(Some(&shared.event_id()), None, &m.to_string()));
            return sse_response(replay.events.into_iter().chain(fresh).collect());
        }
    }
    if shared.config.listen == ListenMode::Unsupported {
        return method_not_allowed("POST, DELETE");
    }
    let accepts_sse = req
        .headers
        .get_all(http::header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(media_types)
        .any(|t| t == EVENT_STREAM);
    if !accepts_sse {
        return rpc_error_response(406, "Accept must list text/event-stream");
    }
    if let Some(resp) = session_error(shared, req) {
        return resp;
    }
    // Counted open only once it is a listener: a test that waits for the
    // count and then notifies must find it (the body lets the count go).
    let counted = Arc::new(std::sync::OnceLock::new());
    let (tx, body) = ChanBody::channel(64, Some(Box::new(counted.clone())));
    if shared.config.priming_event {
        let _ = tx.try_send(Ok(shared.event(Some(&shared.event_id()), None, "")));
    }
    keepalive(shared, &tx);
    shared.state().listeners.push(Listener { session, tx });
    let _ = counted.set(CountGuard::new(shared.clone(), |c| &c.listen_open));
    let mut resp = Response::new(boxed(body));
    sse_headers(resp.headers_mut());
    resp
}

fn delete(shared: &Arc<Shared>, req: &Req) -> Resp {
    if !shared.config.stateful {
        return method_not_allowed("GET, POST");
    }
    let Some(id) = req.header(SESSION_HEADER) else {
        return rpc_error_response(400, "missing Mcp-Session-Id");
    };
    let mut st = shared.state();
    if !st.end_session(id) {
        return rpc_error_response(404, "session not found");
    }
    empty(shared.config.delete_status)
}

// ---------------------------------------------------------------- faults

async fn apply(
    shared: &Arc<Shared>,
    req: &Req,
    action: FaultAction,
    inflight: Option<InflightGuard>,
) -> Result<Resp, BoxError> {
    let is_post = req.method == Method::POST;
    let cancel = inflight
        .as_ref()
        .map(|g| g.cancel.clone())
        .unwrap_or_default();
    let sse_mode = shared.config.response_mode == ResponseMode::Sse;
    let resp = match action {
        FaultAction::Status {
            status,
            content_type,
            body,
            headers,
        } => {
            let mut resp = full(status, content_type.as_deref(), body.unwrap_or_default());
            for (name, value) in headers {
                let name = HeaderName::from_bytes(name.as_bytes())?;
                resp.headers_mut()
                    .append(name, HeaderValue::from_str(&value)?);
            }
            resp
        }
        FaultAction::Accepted => empty(202),
        FaultAction::MalformedJson => full(200, Some(JSON), "{not json"),
        FaultAction::CutBody => {
            let mut resp = Response::new(boxed(CutBody::default()));
            resp.headers_mut()
                .insert(CONTENT_TYPE, HeaderValue::from_static(JSON));
            resp.headers_mut()
                .insert(CONTENT_LENGTH, HeaderValue::from_static("4096"));
            resp
        }
        FaultAction::SseEndWithoutResponse => {
            let mut resp = empty(200);
            sse_headers(resp.headers_mut());
            resp
        }
        FaultAction::HangDeaf => {
            shared.shutdown.cancelled().await;
            return Err("testkit: shutting down".into());
        }
        FaultAction::Hang => {
            tokio::select! {
                _ = cancel.cancelled() => cancelled_response(shared),
                _ = shared.shutdown.cancelled() => return Err("testkit: shutting down".into()),
            }
        }
        FaultAction::Delay(d) => {
            tokio::select! {
                _ = tokio::time::sleep(d) => normal(shared, req),
                _ = cancel.cancelled() => cancelled_response(shared),
                _ = shared.shutdown.cancelled() => return Err("testkit: shutting down".into()),
            }
        }
        FaultAction::HoldHead(d) => {
            // Computed now: an `initialize` mints its session before the wait.
            let resp = normal(shared, req);
            tokio::select! {
                _ = tokio::time::sleep(d) => resp,
                _ = cancel.cancelled() => cancelled_response(shared),
                _ = shared.shutdown.cancelled() => return Err("testkit: shutting down".into()),
            }
        }
        FaultAction::ExpireSession => {
            if let Some(id) = req.header(SESSION_HEADER) {
                shared.state().expire(id);
            }
            rpc_error_response(404, "session not found")
        }
        FaultAction::Redirect { status, location } => {
            let location = location.replace("{self}", &shared.origin);
            let mut resp = empty(status);
            resp.headers_mut()
                .insert(http::header::LOCATION, HeaderValue::from_str(&location)?);
            resp
        }
        FaultAction::SseNeverEndingLine => never_ending_line(shared),
        FaultAction::SseFlood {
            prefix,
            unit,
            repeat,
            suffix,
            frame,
        } => {
            let mut resp =
                Response::new(boxed(FloodBody::new(prefix, unit, repeat, suffix, frame)));
            sse_headers(resp.headers_mut());
            resp
        }
        FaultAction::Raw {
            status,
            content_type,
            body,
        } => {
            let id = req
                .first_message()
                .and_then(|m| m.get("id"))
                .cloned()
                .unwrap_or(Value::Null);
            // Sent as slices of the script's body around each id: a large
            // body is not copied per request, so a test measuring the
            // client's memory does not measure the server's copies.
            let parts = split_at_ids(&body, id.to_string().as_bytes());
            let mut resp = Response::new(boxed(PartsBody::new(parts)));
            *resp.status_mut() =
                StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            if let Ok(v) = HeaderValue::from_str(&content_type) {
                resp.headers_mut().insert(CONTENT_TYPE, v);
            }
            resp
        }
        FaultAction::StreamRaw(body) => {
            let stream = req
                .session()
                .filter(|_| req.era == Era::HttpSse && is_post)
                .and_then(|session| shared.state().sse_sessions.get(session).cloned());
            let Some(tx) = stream else {
                return Ok(full(400, Some("text/plain"), "no HTTP+SSE stream"));
            };
            let id = req
                .first_message()
                .and_then(|m| m.get("id"))
                .cloned()
                .unwrap_or(Value::Null);
            let body = replace_bytes(&body, b"{id}", id.to_string().as_bytes());
            let data = String::from_utf8_lossy(&body);
            let event = shared.framing().event(Some("message"), None, None, &data);
            let _ = tx.try_send(Ok(event));
            empty(202)
        }
        FaultAction::CloseConnection => return Err("testkit: scripted connection close".into()),
        FaultAction::UnsupportedVersion { supported } => {
            let requested = req
                .first_message()
                .and_then(|m| m.get("params"))
                .and_then(|p| p.get("_meta"))
                .and_then(|m| m.get(modern::META_PROTOCOL_VERSION))
                .cloned()
                .or_else(|| req.header(modern::VERSION_HEADER).map(Value::from))
                .unwrap_or(Value::Null);
            modern::unsupported_version(&requested, &supported).response(&request_id(req))
        }
        FaultAction::HeaderMismatch => modern::RpcError::new(
            modern::HEADER_MISMATCH,
            "Header mismatch (testkit fault): the headers do not match the body",
        )
        .response(&request_id(req)),
        FaultAction::MissingCapability(required) => modern::RpcError::new(
            modern::MISSING_CAPABILITY,
            "Missing required client capability (testkit fault)",
        )
        .with_data(serde_json::json!({"requiredCapabilities": required}))
        .response(&request_id(req)),
        FaultAction::ProtocolVersion(v) if req.era == Era::HttpSse => {
            let ov = Overrides {
                protocol_version: Some(v),
                ..Overrides::default()
            };
            normal_with(shared, req, &ov)
        }
        // The rest change a POST's normal answer; other methods, and
        // HTTP+SSE POSTs (answered on the stream), answer normally.
        _ if !is_post || req.era == Era::HttpSse => normal(shared, req),
        FaultAction::SseStall => stalled_stream(shared),
        FaultAction::SessionId(raw) => {
            let ov = Overrides {
                session_id: Some(raw),
                ..Overrides::default()
            };
            let enc = Encoding {
                sse: sse_mode,
                ..Encoding::default()
            };
            encode(shared, post_outcome(shared, req, &ov), &enc)
        }
        FaultAction::ProtocolVersion(v) => {
            let ov = Overrides {
                protocol_version: Some(v),
                ..Overrides::default()
            };
            let enc = Encoding {
                sse: sse_mode,
                ..Encoding::default()
            };
            encode(shared, post_outcome(shared, req, &ov), &enc)
        }
        FaultAction::OversizeSseEvent { bytes } => {
            let enc = Encoding {
                sse: true,
                pad: Some(bytes),
                ..Encoding::default()
            };
            encode(
                shared,
                post_outcome(shared, req, &Overrides::default()),
                &enc,
            )
        }
        FaultAction::OversizeJson { bytes } => {
            let enc = Encoding {
                pad: Some(bytes),
                ..Encoding::default()
            };
            encode(
                shared,
                post_outcome(shared, req, &Overrides::default()),
                &enc,
            )
        }
        FaultAction::ContentType(ct) => {
            let enc = Encoding {
                sse: ct.to_ascii_lowercase().contains(EVENT_STREAM),
                content_type: Some(ct),
                ..Encoding::default()
            };
            encode(
                shared,
                post_outcome(shared, req, &Overrides::default()),
                &enc,
            )
        }
        FaultAction::BatchResponse => {
            let enc = Encoding {
                batch_notification: true,
                ..Encoding::default()
            };
            encode(
                shared,
                post_outcome(shared, req, &Overrides::default()),
                &enc,
            )
        }
        FaultAction::SseCutAfterEvent { retry_ms } => sse_cut_after_event(
            shared,
            req,
            post_outcome(shared, req, &Overrides::default()),
            retry_ms,
        ),
        FaultAction::ServerRequest { method, params } => {
            let outcome = post_outcome(shared, req, &Overrides::default());
            server_request(shared, req, outcome, &method, &params, inflight)
        }
        FaultAction::SseBatchEvent { replay } => sse_batch_event(
            shared,
            req,
            post_outcome(shared, req, &Overrides::default()),
            replay,
        ),
    };
    Ok(resp)
}

/// The id of the request's (first) message, `null` if none.
fn request_id(req: &Req) -> Value {
    req.first_message()
        .and_then(|m| m.get("id"))
        .cloned()
        .unwrap_or(Value::Null)
}

/// The answer to a request cancelled while delayed or hung: no JSON-RPC
/// response. SSE mode: a stream that ends without any event; JSON mode: a
/// body that fails, dropping the connection.
fn cancelled_response(shared: &Shared) -> Resp {
    if shared.config.response_mode == ResponseMode::Sse {
        let mut resp = empty(200);
        sse_headers(resp.headers_mut());
        return resp;
    }
    let (tx, body) = ChanBody::channel(1, None);
    let _ = tx.try_send(Err(io::Error::new(
        io::ErrorKind::ConnectionAborted,
        "testkit: request cancelled",
    )));
    let mut resp = Response::new(boxed(body));
    resp.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(JSON));
    resp
}

/// [`FaultAction::ServerRequest`]: sends the server request now, and the
/// answer (from a task) once the client has answered it.
fn server_request(
    shared: &Arc<Shared>,
    req: &Req,
    outcome: Outcome,
    method: &str,
    params: &Value,
    inflight: Option<InflightGuard>,
) -> Resp {
    let (answers, session) = match outcome {
        Outcome::Http(resp) => return resp,
        Outcome::Messages {
            answers, session, ..
        } => (answers, session),
    };
    // The session the answer must come from: the one minted now, or the
    // request's own.
    let answer_session = match &session {
        Some(v) => Some(String::from_utf8_lossy(v.as_bytes()).into_owned()),
        None => req.header(SESSION_HEADER).map(str::to_owned),
    };
    let id = shared.server_request_id();
    let (answer_tx, answer_rx) = oneshot::channel();
    shared.state().pending.insert(
        id.clone(),
        PendingAnswer {
            session: answer_session,
            tx: answer_tx,
        },
    );
    let (tx, body) = ChanBody::channel(16, None);
    if shared.config.priming_event {
        let _ = tx.try_send(Ok(shared.event(Some(&shared.event_id()), None, "")));
    }
    let request = mcp::server_request(&id, method, params);
    let _ = tx.try_send(Ok(shared.event(
        Some(&shared.event_id()),
        None,
        &request.to_string(),
    )));
    tokio::spawn(finish_server_request(
        shared.clone(),
        id,
        answers,
        answer_rx,
        tx,
        inflight,
    ));
    let mut resp = Response::new(boxed(body));
    sse_headers(resp.headers_mut());
    if let Some(session) = session {
        resp.headers_mut().insert(SESSION_HEADER, session);
    }
    resp
}

/// Waits (bounded) for the client's answer to server request `id`, then
/// sends the answers on `tx`. Ends the stream early, with no response, if
/// the original request is cancelled or the client goes away.
async fn finish_server_request(
    shared: Arc<Shared>,
    id: String,
    mut answers: Vec<Answer>,
    answer_rx: oneshot::Receiver<Value>,
    tx: ChunkSender,
    inflight: Option<InflightGuard>,
) {
    let cancel = inflight
        .as_ref()
        .map(|g| g.cancel.clone())
        .unwrap_or_default();
    // `Some(None)`: no answer in time.
    let got = tokio::select! {
        r = tokio::time::timeout(SERVER_REQUEST_WAIT, answer_rx) => Some(r.ok().and_then(Result::ok)),
        _ = cancel.cancelled() => None,
        _ = tx.closed() => None,
        _ = shared.shutdown.cancelled() => None,
    };
    shared.state().pending.remove(&id);
    drop(inflight);
    let Some(client) = got else {
        return;
    };
    match client {
        Some(response) => {
            let value = mcp::client_answer_value(&response);
            for a in &mut answers {
                mcp::add_client_answer(a, &value);
            }
        }
        None => {
            for a in &mut answers {
                a.before.clear();
                a.response = mcp::error(
                    &a.response["id"],
                    NO_ANSWER,
                    "no answer to the server request",
                );
            }
        }
    }
    let notes = (1..=shared.config.notifications_before_response).map(mcp::log_notification);
    let messages = notes.chain(
        answers
            .into_iter()
            .flat_map(|a| a.before.into_iter().chain(std::iter::once(a.response))),
    );
    for m in messages {
        let ev = shared.event(Some(&shared.event_id()), None, &m.to_string());
        if tx.send(Ok(ev)).await.is_err() {
            return;
        }
    }
}

fn sse_cut_after_event(
    shared: &Shared,
    req: &Req,
    outcome: Outcome,
    retry_ms: Option<u64>,
) -> Resp {
    let (answers, session) = match outcome {
        Outcome::Http(resp) => return resp,
        Outcome::Messages {
            answers, session, ..
        } => (answers, session),
    };
    let event_id = shared.event_id();
    // The session a resuming GET must carry: the one minted now, or the
    // request's own.
    let replay_session = match &session {
        Some(v) => Some(String::from_utf8_lossy(v.as_bytes()).into_owned()),
        None => req.header(SESSION_HEADER).map(str::to_owned),
    };
    let messages = answers
        .into_iter()
        .flat_map(|a| a.before.into_iter().chain(std::iter::once(a.response)))
        .collect();
    shared.state().replays.insert(
        event_id.clone(),
        Replay {
            session: replay_session,
            events: Vec::new(),
            messages,
        },
    );
    let mut resp = sse_response(vec![shared.event(Some(&event_id), retry_ms, "")]);
    if let Some(session) = session {
        resp.headers_mut().insert(SESSION_HEADER, session);
    }
    resp
}

/// [`FaultAction::SseBatchEvent`].
fn sse_batch_event(shared: &Shared, req: &Req, outcome: Outcome, replay: bool) -> Resp {
    let (answers, session) = match outcome {
        Outcome::Http(resp) => return resp,
        Outcome::Messages {
            answers, session, ..
        } => (answers, session),
    };
    let answer = answers
        .into_iter()
        .flat_map(|a| a.before.into_iter().chain(std::iter::once(a.response)));
    let batch_event = |messages: Vec<Value>| {
        shared.event(
            Some(&shared.event_id()),
            None,
            &Value::Array(messages).to_string(),
        )
    };
    let mut events = Vec::new();
    if shared.config.priming_event {
        events.push(shared.event(Some(&shared.event_id()), None, ""));
    }
    if replay {
        let first = batch_event(vec![mcp::log_notification(1), mcp::log_notification(2)]);
        let last = batch_event(
            std::iter::once(mcp::log_notification(3))
                .chain(answer)
                .collect(),
        );
        // The replay is keyed by the first event's id, which is the
        // `Last-Event-ID` a client resuming after it sends.
        let id = event_id_of(&first);
        let replay_session = match &session {
            Some(v) => Some(String::from_utf8_lossy(v.as_bytes()).into_owned()),
            None => req.header(SESSION_HEADER).map(str::to_owned),
        };
        shared.state().replays.insert(
            id,
            Replay {
                session: replay_session,
                events: vec![first.clone(), last],
                messages: Vec::new(),
            },
        );
        events.push(first);
    } else {
        events.push(batch_event(
            std::iter::once(mcp::log_notification(1))
                .chain(answer)
                .collect(),
        ));
    }
    let mut resp = sse_response(events);
    if let Some(session) = session {
        resp.headers_mut().insert(SESSION_HEADER, session);
    }
    resp
}

/// The id of an event [`Shared::event`] encoded with one.
fn event_id_of(event: &[u8]) -> String {
    let line = event.split(|&b| b == b'\n').next().unwrap_or_default();
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let id = line.strip_prefix(b"id: ").unwrap_or_default();
    String::from_utf8_lossy(id).into_owned()
}

/// [`FaultAction::SseFlood`]'s body: each frame is made when hyper asks for
/// it, as a view of the prefix, of one buffer of repeated units, or of the
/// suffix; so nothing is copied per frame and the whole body never exists.
struct FloodBody {
    prefix: Bytes,
    /// `unit` repeated to at least `frame + unit.len()` bytes: any frame of
    /// the repeated part is a slice of it.
    pattern: Bytes,
    unit_len: usize,
    /// Where in `pattern` the next frame of the repeated part starts.
    offset: usize,
    /// Bytes of the repeated part still to send.
    remaining: usize,
    suffix: Bytes,
    frame: usize,
}

impl FloodBody {
    fn new(prefix: Bytes, unit: Bytes, repeat: usize, suffix: Bytes, frame: usize) -> Self {
        let frame = frame.max(1);
        let remaining = if unit.is_empty() {
            0
        } else {
            unit.len().saturating_mul(repeat)
        };
        let copies = if unit.is_empty() {
            0
        } else {
            frame.min(remaining) / unit.len() + 2
        };
        FloodBody {
            prefix,
            pattern: Bytes::from(unit.repeat(copies)),
            unit_len: unit.len(),
            offset: 0,
            remaining,
            suffix,
            frame,
        }
    }

    fn next_frame(&mut self) -> Option<Bytes> {
        if !self.prefix.is_empty() {
            let n = self.frame.min(self.prefix.len());
            return Some(self.prefix.split_to(n));
        }
        if self.remaining > 0 {
            let n = self.frame.min(self.remaining);
            let frame = self.pattern.slice(self.offset..self.offset + n);
            self.offset = (self.offset + n) % self.unit_len;
            self.remaining -= n;
            return Some(frame);
        }
        if !self.suffix.is_empty() {
            let n = self.frame.min(self.suffix.len());
            return Some(self.suffix.split_to(n));
        }
        None
    }
}

impl Body for FloodBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        Poll::Ready(
            self.get_mut()
                .next_frame()
                .map(|data| Ok(Frame::data(data))),
        )
    }

    fn is_end_stream(&self) -> bool {
        self.prefix.is_empty() && self.remaining == 0 && self.suffix.is_empty()
    }
}

fn never_ending_line(shared: &Arc<Shared>) -> Resp {
    let (tx, body) = ChanBody::channel(4, None);
    let shutdown = shared.shutdown.clone();
    tokio::spawn(async move {
        let chunk = Bytes::from(vec![b'x'; 64 * 1024]);
        let mut sent = 0;
        if tx.send(Ok(Bytes::from_static(b"data: "))).await.is_err() {
            return;
        }
        while sent < NEVER_ENDING_CAP {
            tokio::select! {
                r = tx.send(Ok(chunk.clone())) => if r.is_err() { return },
                _ = shutdown.cancelled() => return,
            }
            sent += chunk.len();
        }
    });
    let mut resp = Response::new(boxed(body));
    sse_headers(resp.headers_mut());
    resp
}

/// [`FaultAction::SseStall`]: a comment, then nothing until the client
/// goes away or the server shuts down.
fn stalled_stream(shared: &Arc<Shared>) -> Resp {
    let (tx, body) = ChanBody::channel(1, None);
    let shutdown = shared.shutdown.clone();
    tokio::spawn(async move {
        if tx
            .send(Ok(Bytes::from_static(b": stalled\n\n")))
            .await
            .is_err()
        {
            return;
        }
        tokio::select! {
            () = tx.closed() => {}
            () = shutdown.cancelled() => {}
        }
    });
    let mut resp = Response::new(boxed(body));
    sse_headers(resp.headers_mut());
    resp
}

fn replace_bytes(haystack: &[u8], needle: &[u8], with: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(haystack.len());
    let mut i = 0;
    while i < haystack.len() {
        if haystack[i..].starts_with(needle) {
            out.extend_from_slice(with);
            i += needle.len();
        } else {
            out.push(haystack[i]);
            i += 1;
        }
    }
    Bytes::from(out)
}

/// `body` with `id` for each `{id}`, as slices of `body` and the id between.
fn split_at_ids(body: &Bytes, id: &[u8]) -> VecDeque<Bytes> {
    let id = Bytes::copy_from_slice(id);
    let mut parts = VecDeque::new();
    let mut from = 0;
    for at in memchr::memmem::find_iter(body, b"{id}") {
        parts.push_back(body.slice(from..at));
        parts.push_back(id.clone());
        from = at + 4;
    }
    parts.push_back(body.slice(from..));
    parts
}

/// A body of parts sent in turn, its length known (a Content-Length).
struct PartsBody {
    parts: VecDeque<Bytes>,
    remaining: u64,
}

impl PartsBody {
    fn new(parts: VecDeque<Bytes>) -> Self {
        let remaining = parts.iter().map(|p| p.len() as u64).sum();
        PartsBody { parts, remaining }
    }
}

impl Body for PartsBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        let part = self.parts.pop_front();
        if let Some(part) = &part {
            self.remaining -= part.len() as u64;
        }
        Poll::Ready(part.map(|part| Ok(Frame::data(part))))
    }

    fn is_end_stream(&self) -> bool {
        self.parts.is_empty()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::SizeHint::with_exact(self.remaining)
    }
}

/// A body that sends a partial JSON document, lets hyper flush it, then
/// fails so that hyper drops the connection short of its Content-Length.
#[derive(Default)]
struct CutBody {
    stage: u8,
}

impl Body for CutBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        let this = self.get_mut();
        this.stage += 1;
        match this.stage {
            1 => Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(
                b"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"partial\":\"",
            ))))),
            // Yield once so the connection flushes what it has.
            2 => {
                cx.waker().wake_by_ref();
                Poll::Pending
            }
            _ => Poll::Ready(Some(Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "testkit: body cut",
            )))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_id_placeholder() {
        assert_eq!(&replace_bytes(b"a{id}b{id}", b"{id}", b"7")[..], b"a7b7");
        assert_eq!(&replace_bytes(b"{i", b"{id}", b"7")[..], b"{i");
        let joined = |body: &'static [u8]| -> Vec<u8> {
            split_at_ids(&Bytes::from_static(body), b"7")
                .iter()
                .flat_map(|part| part.iter().copied())
                .collect()
        };
        assert_eq!(joined(b"a{id}b{id}"), b"a7b7");
        assert_eq!(joined(b"{i"), b"{i");
    }

    #[test]
    fn a_flood_is_its_parts_in_frames_of_at_most_the_size() {
        for (unit, repeat, frame) in [
            ("abc", 10, 4),
            ("abc", 10, 3),
            ("x", 5, 100),
            ("", 9, 2),
            ("ab", 0, 1),
            ("ab", 3, 0),
        ] {
            let mut body = FloodBody::new(
                Bytes::from_static(b"PREFIX"),
                Bytes::from(unit),
                repeat,
                Bytes::from_static(b"END"),
                frame,
            );
            let mut all = Vec::new();
            while let Some(frame_bytes) = body.next_frame() {
                assert!(!frame_bytes.is_empty());
                assert!(frame_bytes.len() <= frame.max(1));
                all.extend_from_slice(&frame_bytes);
            }
            assert!(body.is_end_stream());
            let want = format!("PREFIX{}END", unit.repeat(repeat));
            assert_eq!(
                String::from_utf8(all).unwrap(),
                want,
                "{unit:?} x{repeat} in {frame}"
            );
        }
        // Built lazily: a flood of gigabytes holds about a frame.
        let body = FloodBody::new(
            Bytes::new(),
            Bytes::from_static(b"event\n\n"),
            1 << 40,
            Bytes::new(),
            16 * 1024,
        );
        assert!(body.pattern.len() <= 16 * 1024 + 2 * 7);
    }

    #[test]
    fn the_id_of_an_encoded_event() {
        assert_eq!(
            event_id_of(&super::super::sse::event(Some("ev-9"), None, "[]")),
            "ev-9"
        );
    }

    #[test]
    fn media_types_are_normalized() {
        let v: Vec<String> =
            media_types("Application/JSON; charset=utf-8, text/event-stream").collect();
        assert_eq!(v, vec![JSON.to_owned(), EVENT_STREAM.to_owned()]);
    }
}
