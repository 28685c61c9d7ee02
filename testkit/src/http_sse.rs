//! The deprecated HTTP+SSE transport of 2024-11-05, as the Python `mcp`
//! servers serve it: a GET opens the stream, whose first event names the
//! URI to POST to; every POST there gets 202 and its answer comes on the
//! stream.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use http::header::HeaderValue;
use http::{Method, Response};
use serde_json::Value;

use super::body::{RespBody, boxed, empty, full, random_u64};
use super::config::SseEndpoint;
use super::mcp::{self, Kind};
use super::respond::{Req, keepalive, note_client_message, sse_headers};
use super::sse::ChanBody;
use super::{CountGuard, SessionRecord, Shared};
use mcp_scoped_http::TransportKind;

/// The path POSTs go to (with `?session_id=...`), as Python servers name it.
pub(super) const MESSAGES_PATH: &str = "/messages/";

/// Whether POSTs to `path` are messages: `/messages/`, or `/messages` (as
/// TypeScript servers name it).
pub(super) fn is_messages_path(path: &str) -> bool {
    path == MESSAGES_PATH || path == "/messages"
}

/// What an HTTP+SSE server answers on its stream to `initialize`.
const VERSION: &str = "2024-11-05";

type Resp = Response<RespBody>;

fn text(status: u16, body: &'static str) -> Resp {
    full(status, Some("text/plain; charset=utf-8"), body)
}

fn not_allowed(allow: &'static str) -> Resp {
    let mut resp = text(405, "Method Not Allowed");
    resp.headers_mut()
        .insert(http::header::ALLOW, HeaderValue::from_static(allow));
    resp
}

/// Answers a request to the SSE path or the messages path.
pub(super) fn handle(shared: &Arc<Shared>, req: &Req, protocol_override: Option<&str>) -> Resp {
    if req.path == shared.config.path && !is_messages_path(&req.path) {
        return match req.method {
            Method::GET => open_stream(shared),
            _ => not_allowed("GET"),
        };
    }
    match req.method {
        Method::POST => post_message(shared, req, protocol_override),
        _ => not_allowed("POST"),
    }
}

/// Ends the session when its stream's body is dropped (the client closed
/// it), unless the server ended it first.
struct StreamGuard {
    shared: Arc<Shared>,
    id: String,
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        let mut st = self.shared.state();
        if st.sse_sessions.remove(&self.id).is_none() {
            return;
        }
        if let Some(record) = st.session_log.iter_mut().rev().find(|r| r.id == self.id) {
            record.stream_closed = true;
        }
        drop(st);
        self.shared
            .counters
            .sse_closed_by_client
            .fetch_add(1, Ordering::SeqCst);
    }
}

fn endpoint_uri(shared: &Shared, session: &str) -> String {
    let relative = format!("{MESSAGES_PATH}?session_id={session}");
    match &shared.config.sse_endpoint {
        SseEndpoint::Relative => relative,
        SseEndpoint::Absolute => format!("{}{relative}", shared.origin),
        SseEndpoint::CrossOrigin => format!("http://127.0.0.1:1{relative}"),
        SseEndpoint::Custom(template) => template
            .replace("{self}", &shared.origin)
            .replace("{session}", session),
    }
}

/// A GET on the SSE path: a new session and its stream, whose first event
/// is `endpoint`.
fn open_stream(shared: &Arc<Shared>) -> Resp {
    let id = format!("{:016x}{:016x}", random_u64(), random_u64());
    let count = CountGuard::new(Arc::clone(shared), |c| &c.sse_open);
    let guard = StreamGuard {
        shared: Arc::clone(shared),
        id: id.clone(),
    };
    let (tx, body) = ChanBody::channel(256, Some(Box::new((count, guard))));
    let endpoint = endpoint_uri(shared, &id);
    let _ = tx.try_send(Ok(shared.framing().event(
        Some("endpoint"),
        None,
        None,
        &endpoint,
    )));
    keepalive(shared, &tx);
    {
        let mut st = shared.state();
        if shared.config.record_requests {
            st.session_log
                .push(SessionRecord::minted(id.clone(), TransportKind::HttpSse));
        }
        st.sse_sessions.insert(id, tx);
    }
    shared
        .counters
        .sessions_created
        .fetch_add(1, Ordering::SeqCst);
    let mut resp = Response::new(boxed(body));
    sse_headers(resp.headers_mut());
    resp
}

/// A POST to the messages path: 202, and the answers go to the session's
/// stream as `event: message`.
fn post_message(shared: &Arc<Shared>, req: &Req, protocol_override: Option<&str>) -> Resp {
    let Some(session) = req.session() else {
        return text(400, "session_id is required");
    };
    let Some(tx) = shared.state().sse_sessions.get(session).cloned() else {
        return text(404, "Could not find session");
    };
    let Some(Ok(json)) = &req.json else {
        return text(400, "Could not parse message");
    };
    let messages: Vec<&Value> = match json {
        Value::Array(a) if !a.is_empty() => a.iter().collect(),
        v => vec![v],
    };
    if messages
        .iter()
        .any(|m| matches!(mcp::classify(m), Kind::Invalid))
    {
        return text(400, "Could not parse message");
    }
    let cfg = &shared.config;
    let catalog = shared.state().catalog;
    for m in messages {
        match mcp::classify(m) {
            Kind::Request { id, method, params } => {
                let version = Some(protocol_override.unwrap_or(VERSION));
                let answer = mcp::answer(cfg, catalog, id, method, params, true, version);
                for message in answer
                    .before
                    .iter()
                    .chain(std::iter::once(&answer.response))
                {
                    let _ = tx.try_send(Ok(shared.modern_event(message)));
                }
            }
            Kind::NotificationOrResponse => note_client_message(shared, Some(session), m),
            Kind::Invalid => {}
        }
    }
    empty(202)
}
