//! Scripted faults.
//!
//! Faults are matched in order against every request that reaches the
//! endpoint path. The first fault that matches and still has uses left
//! applies. A fault with `skip = N` lets its first N matches through; a
//! request let through is matched against the following faults, and behaves
//! normally if none applies.

use std::time::Duration;

use bytes::Bytes;
use http::Method;

/// Which requests a [`Fault`] applies to. Every field that is set must match.
#[non_exhaustive]
#[derive(Clone, Debug, Default)]
pub struct FaultMatch {
    /// The HTTP method (POST, GET, DELETE), if set.
    pub http_method: Option<Method>,
    /// The `method` of the (first) JSON-RPC message of the body, if set.
    pub rpc_method: Option<String>,
    /// The 1-based page of a list method (`tools/list`, ...), if set:
    /// page 1 has no cursor, page N has the cursor the server issued for it.
    pub page: Option<usize>,
    /// The `params.name` (`tools/call`, `prompts/get`) or `params.uri`
    /// (`resources/read`) of the (first) JSON-RPC message, if set.
    pub name: Option<String>,
    /// Only POSTs whose (first) JSON-RPC message is a response: the
    /// client's answer to a server request.
    pub response: bool,
    /// Let the first `skip` matching requests through.
    pub skip: usize,
}

impl FaultMatch {
    /// Matches every request.
    pub fn any() -> Self {
        FaultMatch::default()
    }
    /// Matches requests with this HTTP method.
    pub fn http(method: Method) -> Self {
        FaultMatch {
            http_method: Some(method),
            ..FaultMatch::default()
        }
    }
    /// Matches requests whose (first) JSON-RPC message has this method.
    pub fn rpc(method: impl Into<String>) -> Self {
        FaultMatch {
            rpc_method: Some(method.into()),
            ..FaultMatch::default()
        }
    }
}

/// A scripted fault: when a request matches `when`, answer with `action`.
#[derive(Clone, Debug)]
pub struct Fault {
    /// Which requests it applies to.
    pub when: FaultMatch,
    /// What the server does instead of answering normally.
    pub action: FaultAction,
    /// How many times it applies; `None` means every match.
    pub times: Option<usize>,
}

impl Fault {
    /// A fault with an explicit matcher, applying to every match.
    pub fn new(when: FaultMatch, action: FaultAction) -> Self {
        Fault {
            when,
            action,
            times: None,
        }
    }
    /// A fault on every request.
    pub fn any(action: FaultAction) -> Self {
        Fault::new(FaultMatch::any(), action)
    }
    /// A fault on requests whose (first) JSON-RPC method is `method`.
    pub fn on_rpc(method: impl Into<String>, action: FaultAction) -> Self {
        Fault::new(FaultMatch::rpc(method), action)
    }
    /// A fault on requests with this HTTP method.
    pub fn on_http(method: Method, action: FaultAction) -> Self {
        Fault::new(FaultMatch::http(method), action)
    }
    /// A fault on the client's answers to server requests (POSTed
    /// responses).
    pub fn on_responses(action: FaultAction) -> Self {
        Fault::new(
            FaultMatch {
                response: true,
                ..FaultMatch::default()
            },
            action,
        )
    }
    /// Restricts to page `page` (1-based) of a list method.
    pub fn page(mut self, page: usize) -> Self {
        self.when.page = Some(page);
        self
    }
    /// Restricts to requests whose `params.name` (or `params.uri` for
    /// `resources/read`) is `name`, e.g. one tool's calls.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.when.name = Some(name.into());
        self
    }
    /// Restricts to this HTTP method as well.
    pub fn http_method(mut self, method: Method) -> Self {
        self.when.http_method = Some(method);
        self
    }
    /// Applies at most `n` times.
    pub fn times(mut self, n: usize) -> Self {
        self.times = Some(n);
        self
    }
    /// Lets the first `n` matches through.
    pub fn skip(mut self, n: usize) -> Self {
        self.when.skip = n;
        self
    }
}

/// What the server does for a request a [`Fault`] matched.
#[non_exhaustive]
#[derive(Clone, Debug)]
pub enum FaultAction {
    /// Answer with this status, optional Content-Type and body, and extra
    /// headers (e.g. `401` with `WWW-Authenticate`).
    Status {
        /// HTTP status code.
        status: u16,
        /// Content-Type header, if any.
        content_type: Option<String>,
        /// Body, if any (empty otherwise).
        body: Option<String>,
        /// Extra headers, in order.
        headers: Vec<(String, String)>,
    },
    /// `202 Accepted` with an empty body, even in answer to a request.
    Accepted,
    /// `200 application/json` with the body `{not json`.
    MalformedJson,
    /// `200 application/json` whose Content-Length is larger than what is
    /// sent; then the connection is closed.
    CutBody,
    /// SSE: a priming event with an id (and `retry:` if set), then the stream
    /// ends without the response. A later GET with that `Last-Event-ID` (and
    /// the same session) replays the response once.
    SseCutAfterEvent {
        /// `retry:` field of the priming event, in milliseconds.
        retry_ms: Option<u64>,
    },
    /// `200 text/event-stream` that ends cleanly with no event at all.
    SseEndWithoutResponse,
    /// On a POST: `200 text/event-stream` with one comment line, then
    /// nothing, until the client goes away or the server shuts down. A
    /// `notifications/cancelled` does not end it: a server that ignores
    /// cancellation and holds the answer open. Requests that are no POST
    /// answer normally.
    SseStall,
    /// Never answer, not even the head, until the client goes away or the
    /// server shuts down; a `notifications/cancelled` does not end it (a
    /// server deaf to cancellation). Other requests are not blocked.
    HangDeaf,
    /// Never answer (until shutdown). Other requests are not blocked.
    ///
    /// On a POST, a `notifications/cancelled` from the same session for (one
    /// of) its request id(s) ends it with no JSON-RPC response: in SSE mode
    /// a `200 text/event-stream` that ends without any event; in JSON mode a
    /// `200 application/json` whose body fails (the connection is dropped).
    Hang,
    /// Wait this long, then answer normally. A `notifications/cancelled`
    /// ends the wait as for [`FaultAction::Hang`].
    Delay(Duration),
    /// Answer normally, but computed when the request arrives, and send the
    /// response head only after this long: an `initialize` mints and
    /// registers its session at once, and the client learns its id only
    /// when the head comes (a server that creates the session, then holds
    /// the head). A `notifications/cancelled` ends the wait as for
    /// [`FaultAction::Hang`] (the session stays, its id untold); shutdown
    /// ends it with no answer.
    HoldHead(Duration),
    /// `initialize` answers with this raw `Mcp-Session-Id` value (which may
    /// hold obs-text, spaces, or be very long). Bytes that cannot be a header
    /// value at all (controls) make the answer a 500.
    SessionId(Vec<u8>),
    /// Redirect with this status to `location`, in which `{self}` is replaced
    /// by this server's origin (e.g. `http://127.0.0.1:PORT`).
    Redirect {
        /// HTTP status code (301, 302, 303, 307, 308).
        status: u16,
        /// The Location header value.
        location: String,
    },
    /// SSE whose response event's data is padded to about `bytes` bytes.
    OversizeSseEvent {
        /// Approximate size of the response event data.
        bytes: usize,
    },
    /// JSON response padded (a long string in the result) to about `bytes`,
    /// sent chunked with no `Content-Length`.
    OversizeJson {
        /// Approximate size of the body.
        bytes: usize,
    },
    /// SSE: `data: ` then an endless line with no newline, sent in chunks
    /// until the client goes away (hard cap 256 MiB).
    SseNeverEndingLine,
    /// The normal body with this Content-Type; if it names
    /// `text/event-stream` (any case) the body is SSE encoded, else JSON.
    ContentType(String),
    /// This status, Content-Type and body; `{id}` in the body is replaced by
    /// the JSON of the request's id (`null` if none).
    Raw {
        /// HTTP status code.
        status: u16,
        /// Content-Type header.
        content_type: String,
        /// Body template.
        body: Bytes,
    },
    /// HTTP+SSE (2024-11-05): the POST gets `202`, and its answer goes on
    /// the session's stream as an `event: message` whose data is this text,
    /// `{id}` replaced by the JSON of the request's id (as in `Raw`): a
    /// hostile answer in that era. Elsewhere, or with no live stream for
    /// the session: `400`.
    StreamRaw(Bytes),
    /// `initialize` answers normally but with this `protocolVersion`
    /// (a session is minted as usual).
    ProtocolVersion(String),
    /// JSON array: a `notifications/message`, then the response(s).
    BatchResponse,
    /// Close the connection without any response (an error from the service).
    CloseConnection,
    /// On a POSTed request (in either response mode): an SSE answer that
    /// first sends the server-to-client request
    /// `{"jsonrpc":"2.0","id":"srv-N","method":method,"params":params}` as
    /// an event with an id (after the priming event, if configured), then
    /// waits for the client to POST a JSON-RPC response with that id from
    /// the same session (that POST gets the usual 202), then sends the
    /// normal answer with the client's answer (its `result`, or
    /// `{"error": <error object>}`) added: in `structuredContent.clientAnswer`
    /// plus a text content item for `tools/call`, in `result._meta.clientAnswer`
    /// for other methods (in `error.data.clientAnswer` if the normal answer
    /// is an error). Without an answer within 10 s it sends a JSON-RPC error
    /// (code -32000, "no answer to the server request") for the original
    /// request instead. A `notifications/cancelled` for the original request
    /// ends the stream with no response. Requests that are no POST answer
    /// normally.
    ServerRequest {
        /// The `method` of the server request (e.g. `sampling/createMessage`).
        method: String,
        /// Its `params`.
        params: serde_json::Value,
    },
    /// Ends the request's session (the one its `Mcp-Session-Id` names), as
    /// [`TestServer::expire_session`](super::TestServer::expire_session)
    /// does, then answers as for any unknown session: `404` with an id-less
    /// JSON-RPC error. With `times(1)` on a method, the next such request
    /// finds its session expired: a deterministic way to make a client
    /// re-initialize mid-session. Without a session header: the same 404.
    ExpireSession,
    /// `200 text/event-stream` with a hostile body generated as it is sent:
    /// `prefix`, then `unit` `repeat` times, then `suffix`, in frames (HTTP/1.1
    /// chunks) of at most `frame` bytes; the prefix, the repeated part and
    /// the suffix each start a new frame. The body is never built whole (it
    /// may be many gigabytes: memory is about `frame` plus twice `unit`), and
    /// it stops when the client goes away. For example a long `id:` line,
    /// then `event\n\n` blocks, each of which dispatches an event that
    /// carries that id over. Applies to any request (POST, GET).
    SseFlood {
        /// Sent first, e.g. `id: ` and a long id and a line end.
        prefix: Bytes,
        /// Sent `repeat` times after the prefix.
        unit: Bytes,
        /// How many times `unit` is sent.
        repeat: usize,
        /// Sent last, e.g. the end of a batch and a blank line.
        suffix: Bytes,
        /// The largest frame, in bytes (0 counts as 1).
        frame: usize,
    },
    /// On a POSTed request (in either response mode): an SSE answer (after
    /// the priming event, if configured) whose messages come in ONE event
    /// with an id, as a JSON batch, which a server that negotiated
    /// 2025-03-26 may send: a `notifications/message` (`"note 1"`), then
    /// the normal answer's messages, the response last. The stream then
    /// ends.
    ///
    /// With `replay`, the response is held back and the stream is cut after
    /// a first such event, which holds `"note 1"` and `"note 2"`. A later GET
    /// with that event's id as `Last-Event-ID` (and the same session) gets
    /// that event again, same id and data, as a server that delivers at
    /// least once may replay it, then one more event with an id holding the
    /// batch `["note 3", ..., response]`. Requests that are no POST answer
    /// normally.
    SseBatchEvent {
        /// Cut after a first batch event and replay it on the resuming GET.
        replay: bool,
    },
    /// `400` with the JSON-RPC error `-32022` (UnsupportedProtocolVersion)
    /// for the request's id, `data: {"supported": supported, "requested":
    /// <the _meta version, or the header's>}`: with `times(1)`, the first
    /// request of a client tells it to retry with one of `supported`.
    UnsupportedVersion {
        /// `error.data.supported`.
        supported: Vec<String>,
    },
    /// `400` with the JSON-RPC error `-32020` (HeaderMismatch) for the
    /// request's id: with `Fault::on_rpc("tools/call", ..).name(tool)
    /// .times(1)`, a tool's first call is refused as if its `x-mcp-header`
    /// annotations had changed, so the client re-lists and retries once.
    HeaderMismatch,
    /// `400` with the JSON-RPC error `-32021`
    /// (MissingRequiredClientCapability) for the request's id,
    /// `data: {"requiredCapabilities": <this>}` (e.g. `{"elicitation": {}}`).
    MissingCapability(serde_json::Value),
}

impl FaultAction {
    /// `Status` with no body and no extra headers.
    pub fn status(status: u16) -> Self {
        FaultAction::Status {
            status,
            content_type: None,
            body: None,
            headers: Vec::new(),
        }
    }
    /// `Status` with an id-less JSON-RPC error body.
    pub fn status_with_rpc_error(status: u16, code: i64, message: &str) -> Self {
        let body = serde_json::json!({
            "jsonrpc": "2.0",
            "id": null,
            "error": {"code": code, "message": message},
        });
        FaultAction::Status {
            status,
            content_type: Some("application/json".to_owned()),
            body: Some(body.to_string()),
            headers: Vec::new(),
        }
    }
    /// `401 Unauthorized` with this `WWW-Authenticate` challenge.
    pub fn unauthorized(challenge: &str) -> Self {
        FaultAction::Status {
            status: 401,
            content_type: None,
            body: None,
            headers: vec![("WWW-Authenticate".to_owned(), challenge.to_owned())],
        }
    }
    /// `Raw` from a string body.
    pub fn raw(status: u16, content_type: &str, body: &str) -> Self {
        FaultAction::Raw {
            status,
            content_type: content_type.to_owned(),
            body: Bytes::copy_from_slice(body.as_bytes()),
        }
    }
}

/// A fault with its use counters.
#[derive(Debug)]
pub(crate) struct ActiveFault {
    fault: Fault,
    skipped: usize,
    used: usize,
}

impl ActiveFault {
    pub(crate) fn new(fault: Fault) -> Self {
        ActiveFault {
            fault,
            skipped: 0,
            used: 0,
        }
    }
}

/// Picks the action for a request, updating counters. Faults whose `times`
/// are used up are removed, so a long run that scripts a fault per cycle
/// does not grow the list.
pub(crate) fn pick(
    faults: &mut Vec<ActiveFault>,
    http_method: &Method,
    (rpc_method, response): (Option<&str>, bool),
    page: Option<usize>,
    name: Option<&str>,
) -> Option<FaultAction> {
    let action = pick_from(faults, http_method, (rpc_method, response), page, name);
    faults.retain(|f| f.fault.times.is_none_or(|t| f.used < t));
    action
}

fn pick_from(
    faults: &mut [ActiveFault],
    http_method: &Method,
    (rpc_method, response): (Option<&str>, bool),
    page: Option<usize>,
    name: Option<&str>,
) -> Option<FaultAction> {
    for f in faults.iter_mut() {
        let w = &f.fault.when;
        if w.response && !response {
            continue;
        }
        if w.http_method.as_ref().is_some_and(|m| m != http_method) {
            continue;
        }
        if w.rpc_method
            .as_deref()
            .is_some_and(|m| Some(m) != rpc_method)
        {
            continue;
        }
        if w.page.is_some() && w.page != page {
            continue;
        }
        if w.name.as_deref().is_some_and(|n| Some(n) != name) {
            continue;
        }
        if f.fault.times.is_some_and(|t| f.used >= t) {
            continue;
        }
        if f.skipped < w.skip {
            f.skipped += 1;
            continue;
        }
        f.used += 1;
        return Some(f.fault.action.clone());
    }
    None
}
