//! What the eras' handlers share, and nothing that handles: the request as
//! they see it, the outcome of a POST, SSE headers and keep-alives, and the
//! client messages they record. The handlers use it; it uses none of them.

use std::sync::Arc;

use http::header::{CONTENT_TYPE, HeaderName, HeaderValue};
use http::{HeaderMap, Method};
use serde_json::Value;

use super::body::Resp;
use super::config::Era;
use super::mcp::{self, Answer, Kind};
use super::{ChunkSender, Shared};

pub(super) const SESSION_HEADER: &str = "mcp-session-id";
pub(super) const EVENT_STREAM: &str = "text/event-stream";

/// The parts of a request the handlers need.
pub(super) struct Req {
    pub(super) method: Method,
    pub(super) headers: HeaderMap,
    /// `None`: empty body; `Some(Err)`: not JSON.
    pub(super) json: Option<Result<Value, ()>>,
    pub(super) path: String,
    pub(super) query: Option<String>,
    /// The era serving it (meaningless off the endpoints).
    pub(super) era: Era,
}

impl Req {
    pub(super) fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The query parameter `name`, if present.
    pub(super) fn query_param(&self, name: &str) -> Option<&str> {
        self.query
            .as_deref()?
            .split('&')
            .find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))
    }

    /// The session the request belongs to: its `Mcp-Session-Id`, or on
    /// HTTP+SSE its `session_id` query parameter.
    pub(super) fn session(&self) -> Option<&str> {
        match self.era {
            Era::HttpSse => self
                .query_param("session_id")
                .or_else(|| self.query_param("sessionId")),
            _ => self.header(SESSION_HEADER),
        }
    }

    pub(super) fn first_message(&self) -> Option<&Value> {
        match self.json.as_ref()?.as_ref().ok()? {
            Value::Array(a) => a.first(),
            v => Some(v),
        }
    }

    /// The ids of the JSON-RPC requests in the body.
    pub(super) fn request_ids(&self) -> Vec<Value> {
        let messages: Vec<&Value> = match self.json.as_ref().and_then(|j| j.as_ref().ok()) {
            Some(Value::Array(a)) => a.iter().collect(),
            Some(v) => vec![v],
            None => Vec::new(),
        };
        messages
            .into_iter()
            .filter_map(|m| match mcp::classify(m) {
                Kind::Request { id, .. } => Some(id.clone()),
                _ => None,
            })
            .collect()
    }
}

pub(super) fn sse_headers(headers: &mut HeaderMap) {
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(EVENT_STREAM));
    headers.insert(
        http::header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache"),
    );
    headers.insert(
        HeaderName::from_static("x-accel-buffering"),
        HeaderValue::from_static("no"),
    );
}

/// With [`ServerConfig::sse_keepalive`] set, sends a `: ping` comment on
/// `tx` that often until the stream ends or the server shuts down.
pub(super) fn keepalive(shared: &Arc<Shared>, tx: &ChunkSender) {
    let Some(every) = shared.config.sse_keepalive else {
        return;
    };
    // Weak: the pings must not keep a stream open that its owner ended.
    let tx = tx.downgrade();
    let shutdown = shared.shutdown.clone();
    let ping = shared.framing().comment("ping");
    tokio::spawn(async move {
        loop {
            tokio::select! {
                () = tokio::time::sleep(every) => {
                    let Some(tx) = tx.upgrade() else { return };
                    if tx.send(Ok(ping.clone())).await.is_err() {
                        return;
                    }
                }
                () = shutdown.cancelled() => return,
            }
        }
    });
}

/// The outcome of a POST before it is encoded.
pub(super) enum Outcome {
    /// A finished HTTP answer (errors, 202, a `subscriptions/listen` stream).
    Http(Resp),
    /// JSON-RPC answers to encode as JSON or SSE.
    Messages {
        answers: Vec<Answer>,
        batch: bool,
        session: Option<HeaderValue>,
        /// 2026-07-28: SSE events are `event: message` with no id and no
        /// priming event.
        modern: bool,
    },
}

pub(super) fn media_types(value: &str) -> impl Iterator<Item = String> + '_ {
    value.split(',').map(|part| {
        part.split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase()
    })
}

/// Records a client's JSON-RPC response or `notifications/cancelled`, and
/// wakes what waits on it (from the same session only).
pub(super) fn note_client_message(shared: &Shared, session: Option<&str>, msg: &Value) {
    let mut st = shared.state();
    match msg.get("method").and_then(Value::as_str) {
        Some("notifications/cancelled") => {
            let id = msg
                .get("params")
                .and_then(|p| p.get("requestId"))
                .cloned()
                .unwrap_or(Value::Null);
            if !id.is_null() {
                for i in &st.inflight {
                    if i.session.as_deref() == session && i.ids.contains(&id) {
                        i.cancel.cancel();
                    }
                }
            }
            st.cancelled.push(id);
        }
        Some(_) => {}
        None => {
            st.client_answers.push(msg.clone());
            let Some(key) = msg.get("id").and_then(Value::as_str) else {
                return;
            };
            if st
                .pending
                .get(key)
                .is_some_and(|p| p.session.as_deref() == session)
            {
                if let Some(p) = st.pending.remove(key) {
                    let _ = p.tx.send(msg.clone());
                }
            }
        }
    }
}
