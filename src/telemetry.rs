//! Telemetry per OpenTelemetry's semantic conventions for MCP (status:
//! development), through `tracing`.
//!
//! Each request the crate sends as a client (`initialize` and
//! `notifications/initialized`, the discovery pages, every request of a
//! [`Session`](crate::Session)) runs in an `INFO` span whose fields a `tracing-opentelemetry` layer exports as the
//! convention's client span:
//!
//! - its name, `otel.name`: `{mcp.method.name} {target}`, the target being
//!   the tool's or the prompt's name (`tools/call get_weather`), else the
//!   method alone. A resource URI is never part of the name (unbounded
//!   cardinality, as the convention says); it is in `mcp.resource.uri`.
//! - `otel.kind = "client"`;
//! - the attributes [`METHOD_NAME`], [`SESSION_ID`] (only after
//!   [`record_session_ids`], and where the server issued one: never in
//!   2026-07-28), [`PROTOCOL_VERSION`] (once
//!   negotiated), [`REQUEST_ID`], [`TOOL_NAME`], [`PROMPT_NAME`],
//!   [`RESOURCE_URI`], [`OPERATION_NAME`] (`execute_tool` on a tool call),
//!   [`NETWORK_TRANSPORT`] (`tcp`), [`NETWORK_PROTOCOL_NAME`] (`http`),
//!   [`SERVER_ADDRESS`] and [`SERVER_PORT`];
//! - on failure, `otel.status_code = "ERROR"`, [`ERROR_TYPE`] (see
//!   [`error_type`] for the values) and, for a JSON-RPC error,
//!   [`RPC_STATUS_CODE`] and the server's message as
//!   `otel.status_description`. A tool result with `isError: true` is a
//!   failure of type `tool_error`.
//!
//! With no subscriber interested, a span costs nothing more than before:
//! no field is formatted and nothing allocated.
//!
//! With the `otel` feature, each request also carries the current span's
//! trace context in `params._meta` (`traceparent`, `tracestate`, written
//! by the global propagator the host installs:
//! `opentelemetry::global::set_text_map_propagator`), and the
//! [`OPERATION_DURATION`] and [`SESSION_DURATION`] histograms (unit `s`)
//! are recorded on the global meter provider, under the meter named
//! [`SCOPE`].

use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::Value;
use serde_json::value::RawValue;
use tracing::Span;
use tracing::field::{Empty, display};

use crate::error::Error;
use crate::jsonrpc::{ErrorObject, RequestId};
use crate::transport::SessionId;

/// The instrumentation scope (meter name) of the crate's metrics.
pub const SCOPE: &str = "mcp-scoped-http";

/// `mcp.method.name`: the request's method.
pub const METHOD_NAME: &str = "mcp.method.name";
/// `mcp.session.id`: the server's session id, where it issued one.
pub const SESSION_ID: &str = "mcp.session.id";
/// `mcp.protocol.version`: the revision the session speaks.
pub const PROTOCOL_VERSION: &str = "mcp.protocol.version";
/// `mcp.resource.uri`: the URI of `resources/read` and `resources/(un)subscribe`.
pub const RESOURCE_URI: &str = "mcp.resource.uri";
/// `jsonrpc.request.id`: the request's id, as a string.
pub const REQUEST_ID: &str = "jsonrpc.request.id";
/// `gen_ai.tool.name`: the tool of a `tools/call`.
pub const TOOL_NAME: &str = "gen_ai.tool.name";
/// `gen_ai.prompt.name`: the prompt of a `prompts/get`.
pub const PROMPT_NAME: &str = "gen_ai.prompt.name";
/// `gen_ai.operation.name`: `execute_tool` for a tool call.
pub const OPERATION_NAME: &str = "gen_ai.operation.name";
/// `error.type`: the class of a failure (see [`error_type`]).
pub const ERROR_TYPE: &str = "error.type";
/// `rpc.response.status_code`: the JSON-RPC error code, as a string.
pub const RPC_STATUS_CODE: &str = "rpc.response.status_code";
/// `network.transport`: `tcp`.
pub const NETWORK_TRANSPORT: &str = "network.transport";
/// `network.protocol.name`: `http`.
pub const NETWORK_PROTOCOL_NAME: &str = "network.protocol.name";
/// `server.address`: the MCP server's host.
pub const SERVER_ADDRESS: &str = "server.address";
/// `server.port`: the MCP server's port.
pub const SERVER_PORT: &str = "server.port";
/// The histogram of each request's duration, in seconds (feature `otel`).
pub const OPERATION_DURATION: &str = "mcp.client.operation.duration";
/// The histogram of each session's duration, in seconds (feature `otel`).
pub const SESSION_DURATION: &str = "mcp.client.session.duration";
/// The `_meta` key of the W3C trace context (unprefixed, per SEP-414).
pub const TRACEPARENT: &str = "traceparent";
/// The `_meta` key of the W3C trace state.
pub const TRACESTATE: &str = "tracestate";

/// Whether spans carry [`SESSION_ID`]: see [`record_session_ids`].
static RECORD_SESSION_IDS: AtomicBool = AtomicBool::new(false);

/// Puts the server's session id on each span as [`SESSION_ID`] (for this
/// whole process, from now on), as the convention recommends. Off by
/// default: a session id is a credential (whoever holds it speaks in the
/// session), and the crate keeps it out of `tracing` (as out of `Debug`)
/// unless the host says its telemetry may hold it.
pub fn record_session_ids(on: bool) {
    RECORD_SESSION_IDS.store(on, Ordering::Relaxed);
}

fn session_ids_recorded() -> bool {
    RECORD_SESSION_IDS.load(Ordering::Relaxed)
}

/// `error.type` of a tool result with `isError: true`.
const TOOL_ERROR: &str = "tool_error";

/// The class of `error`, for `error.type`: the JSON-RPC error code
/// (`-32602`) when the server answered with one, else the HTTP status
/// (`404`) when it answered with one, else one of `timeout`,
/// `transport`, `closed`, `protocol`, `limit`, `redirect`, `hook`,
/// `auth`, `builder`, or `_OTHER`.
pub fn error_type(error: &Error) -> String {
    if let Some(code) = error.rpc_code() {
        return code.to_string();
    }
    if let Some(status) = error.status() {
        return status.as_u16().to_string();
    }
    let class = if error.is_timeout() {
        "timeout"
    } else if error.is_transport() {
        "transport"
    } else if error.is_closed() {
        "closed"
    } else if error.is_protocol() {
        "protocol"
    } else if error.is_limit() {
        "limit"
    } else if error.is_redirect() {
        "redirect"
    } else if error.is_hook() {
        "hook"
    } else if error.is_auth() {
        "auth"
    } else if error.is_builder() {
        "builder"
    } else {
        "_OTHER"
    };
    class.to_owned()
}

/// Host and port of an origin as the crate shows it (`scheme://host:port`).
#[cfg(any(test, feature = "otel"))]
pub(crate) fn server_of(origin: &str) -> (&str, Option<u16>) {
    let authority = origin.split_once("://").map_or(origin, |(_, rest)| rest);
    match authority.rsplit_once(':') {
        Some((host, port)) if !port.contains(']') => (host, port.parse().ok()),
        _ => (authority, None),
    }
}

/// What a request names, as the convention records it.
enum Target<'a> {
    Tool(&'a str),
    Prompt(&'a str),
    Resource(&'a str),
    None,
}

impl<'a> Target<'a> {
    fn of(method: &str, params: Option<&'a Value>) -> Self {
        let field = |name| params.and_then(|p| p.get(name)).and_then(Value::as_str);
        match method {
            "tools/call" => field("name").map_or(Target::None, Target::Tool),
            "prompts/get" => field("name").map_or(Target::None, Target::Prompt),
            "resources/read" | "resources/subscribe" | "resources/unsubscribe" => {
                field("uri").map_or(Target::None, Target::Resource)
            }
            _ => Target::None,
        }
    }

    /// The span name's target: a tool or a prompt, never a URI.
    fn name(&self) -> Option<&'a str> {
        match self {
            Target::Tool(name) | Target::Prompt(name) => Some(name),
            _ => None,
        }
    }
}

/// Where a request goes and on which session: looked up only when a span
/// or a metric wants it.
pub(crate) struct Peer {
    pub(crate) address: String,
    pub(crate) port: Option<u16>,
    pub(crate) session_id: Option<SessionId>,
    pub(crate) protocol_version: Option<&'static str>,
}

/// One client request's span (and, with `otel`, its duration metric).
pub(crate) struct Call {
    span: Span,
    /// Whether the result is read for `isError`: a tool call someone
    /// observes.
    tool_call: bool,
    #[cfg(feature = "otel")]
    metric: otel::Operation,
}

/// The client span of one request, its fields declared up front
/// (`tracing` cannot add a field later) and filled in only when a
/// subscriber wants the span.
macro_rules! client_span {
    ($method:expr) => {
        tracing::info_span!(
            "mcp.request",
            otel.name = Empty,
            otel.kind = "client",
            otel.status_code = Empty,
            otel.status_description = Empty,
            mcp.method.name = $method,
            mcp.session.id = Empty,
            mcp.protocol.version = Empty,
            mcp.resource.uri = Empty,
            jsonrpc.request.id = Empty,
            gen_ai.tool.name = Empty,
            gen_ai.prompt.name = Empty,
            gen_ai.operation.name = Empty,
            network.transport = "tcp",
            network.protocol.name = "http",
            server.address = Empty,
            server.port = Empty,
            error.type = Empty,
            rpc.response.status_code = Empty,
        )
    };
}

impl Call {
    /// Starts the client span of `method` (not entered: [`run`](Self::run)
    /// runs the request in it). `peer` is asked for only when the span is
    /// enabled or a metric is kept.
    pub(crate) fn start(
        method: &str,
        params: Option<&Value>,
        id: Option<&RequestId>,
        peer: impl FnOnce() -> Peer,
    ) -> Call {
        let span = client_span!(method);
        // Nothing else to do (and nothing allocated) unless observed.
        #[cfg(not(feature = "otel"))]
        if span.is_disabled() {
            return Call {
                span,
                tool_call: false,
            };
        }
        let target = Target::of(method, params);
        let peer = peer();
        let (address, port) = (peer.address.as_str(), peer.port);
        if !span.is_disabled() {
            match target.name() {
                Some(name) => span.record("otel.name", display(format_args!("{method} {name}"))),
                None => span.record("otel.name", method),
            };
            match target {
                Target::Tool(name) => {
                    span.record("gen_ai.tool.name", name);
                    span.record("gen_ai.operation.name", "execute_tool");
                }
                Target::Prompt(name) => {
                    span.record("gen_ai.prompt.name", name);
                }
                Target::Resource(uri) => {
                    span.record("mcp.resource.uri", uri);
                }
                Target::None => {}
            }
            if let Some(session_id) = peer.session_id.as_ref().filter(|_| session_ids_recorded()) {
                span.record("mcp.session.id", session_id.expose());
            }
            if let Some(version) = peer.protocol_version {
                span.record("mcp.protocol.version", version);
            }
            span.record("server.address", address);
            if let Some(port) = port {
                span.record("server.port", port);
            }
            if let Some(id) = id {
                record_request_id(&span, id);
            }
        }
        Call {
            tool_call: method == "tools/call",
            #[cfg(feature = "otel")]
            metric: otel::Operation::new(method, &target, &peer, address, port),
            span,
        }
    }

    /// Records the session id `initialize` got, once its answer's head
    /// is in (where [`record_session_ids`] allows it).
    pub(crate) fn session(&self, id: Option<&SessionId>) {
        if self.span.is_disabled() || !session_ids_recorded() {
            return;
        }
        if let Some(id) = id {
            self.span.record("mcp.session.id", id.expose());
        }
    }

    /// `outcome` as it is; an error is recorded as the request's end.
    pub(crate) fn unless_failed<T>(&self, outcome: crate::Result<T>) -> crate::Result<T> {
        if let Err(error) = &outcome {
            self.failed(error);
        }
        outcome
    }

    /// The span, to instrument a part of the request run apart.
    pub(crate) fn span(&self) -> &Span {
        &self.span
    }

    /// Runs `request` in the span and records how it ended.
    pub(crate) async fn run<T: Outcome>(
        self,
        request: impl Future<Output = crate::Result<T>>,
    ) -> crate::Result<T> {
        use tracing::Instrument;
        let outcome = request.instrument(self.span.clone()).await;
        self.finish(&outcome);
        outcome
    }

    /// Records how the request ended: nothing on success, the error's
    /// class and status otherwise.
    pub(crate) fn finish<T: Outcome>(&self, outcome: &crate::Result<T>) {
        match outcome {
            Ok(result) if self.tool_call && result.is_tool_error() => {
                self.end(Some((TOOL_ERROR, None)));
            }
            Ok(_) => self.end(None),
            Err(error) => self.failed(error),
        }
    }

    /// Records the request's failure.
    pub(crate) fn failed(&self, error: &Error) {
        if self.span.is_disabled() && !cfg!(feature = "otel") {
            return;
        }
        self.end(Some((&error_type(error), error.rpc_error())));
    }

    fn end(&self, failure: Option<(&str, Option<&ErrorObject>)>) {
        #[cfg(feature = "otel")]
        self.metric
            .record(failure.map(|(class, rpc)| (class, rpc.map(|r| r.code))));
        let Some((class, rpc)) = failure else {
            return;
        };
        if self.span.is_disabled() {
            return;
        }
        self.span.record("otel.status_code", "ERROR");
        self.span.record("error.type", class);
        if let Some(rpc) = rpc {
            self.span
                .record("rpc.response.status_code", display(rpc.code));
            self.span
                .record("otel.status_description", rpc.message.as_str());
        }
    }

    /// `params` with the span's trace context in `_meta` (feature `otel`;
    /// without it, `params` as they are).
    pub(crate) fn inject(&self, params: Option<Value>) -> Option<Value> {
        #[cfg(feature = "otel")]
        {
            otel::inject(&self.span, params)
        }
        #[cfg(not(feature = "otel"))]
        {
            params
        }
    }
}

/// Records the id of the request sent (a request sent in rounds, as
/// 2026-07-28's multi-round trips are, records each, the last staying).
pub(crate) fn record_request_id(span: &Span, id: &RequestId) {
    if span.is_disabled() {
        return;
    }
    match id {
        RequestId::Number(n) => span.record("jsonrpc.request.id", display(n)),
        RequestId::String(s) => span.record("jsonrpc.request.id", s.as_str()),
    };
}

/// A request's result, as far as telemetry reads it.
pub(crate) trait Outcome {
    /// Whether it is a tool result with `isError: true`.
    fn is_tool_error(&self) -> bool;
}

/// A notification's: sent, or not.
impl Outcome for () {
    fn is_tool_error(&self) -> bool {
        false
    }
}

impl Outcome for Value {
    fn is_tool_error(&self) -> bool {
        self.get("isError").and_then(Value::as_bool) == Some(true)
    }
}

impl Outcome for Box<RawValue> {
    fn is_tool_error(&self) -> bool {
        #[derive(serde::Deserialize)]
        struct Flag {
            #[serde(rename = "isError", default)]
            is_error: bool,
        }
        serde_json::from_str::<Flag>(self.get()).is_ok_and(|flag| flag.is_error)
    }
}

#[cfg(feature = "otel")]
pub(crate) use otel::SessionClock;

#[cfg(feature = "otel")]
mod otel {
    //! The `otel` feature: trace context in `_meta`, the two histograms.

    use std::time::Instant;

    use opentelemetry::KeyValue;
    use opentelemetry::metrics::Histogram;
    use opentelemetry::propagation::Injector;
    use serde_json::{Map, Value};
    use tracing::Span;
    use tracing_opentelemetry::OpenTelemetrySpanExt;

    use super::*;

    /// The bucket boundaries the convention gives both histograms.
    const BOUNDARIES: [f64; 14] = [
        0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
    ];

    /// A histogram from the meter provider installed now (not cached: a
    /// provider installed later must see the next request).
    fn histogram(name: &'static str, description: &'static str) -> Histogram<f64> {
        opentelemetry::global::meter(SCOPE)
            .f64_histogram(name)
            .with_unit("s")
            .with_description(description)
            .with_boundaries(BOUNDARIES.to_vec())
            .build()
    }

    fn common(
        attributes: &mut Vec<KeyValue>,
        version: Option<&'static str>,
        address: &str,
        port: Option<u16>,
    ) {
        attributes.push(KeyValue::new(NETWORK_TRANSPORT, "tcp"));
        attributes.push(KeyValue::new(NETWORK_PROTOCOL_NAME, "http"));
        if let Some(version) = version {
            attributes.push(KeyValue::new(PROTOCOL_VERSION, version));
        }
        attributes.push(KeyValue::new(SERVER_ADDRESS, address.to_owned()));
        if let Some(port) = port {
            attributes.push(KeyValue::new(SERVER_PORT, i64::from(port)));
        }
    }

    /// One request's `mcp.client.operation.duration`.
    pub(super) struct Operation {
        start: Instant,
        attributes: Vec<KeyValue>,
    }

    impl Operation {
        pub(super) fn new(
            method: &str,
            target: &Target<'_>,
            peer: &Peer,
            address: &str,
            port: Option<u16>,
        ) -> Self {
            let mut attributes = vec![KeyValue::new(METHOD_NAME, method.to_owned())];
            match target {
                Target::Tool(name) => {
                    attributes.push(KeyValue::new(TOOL_NAME, (*name).to_owned()));
                    attributes.push(KeyValue::new(OPERATION_NAME, "execute_tool"));
                }
                Target::Prompt(name) => {
                    attributes.push(KeyValue::new(PROMPT_NAME, (*name).to_owned()));
                }
                // Opt-in for the metric (cardinality): left out.
                Target::Resource(_) | Target::None => {}
            }
            common(&mut attributes, peer.protocol_version, address, port);
            Operation {
                start: Instant::now(),
                attributes,
            }
        }

        pub(super) fn record(&self, failure: Option<(&str, Option<i64>)>) {
            let mut attributes = self.attributes.clone();
            if let Some((class, code)) = failure {
                attributes.push(KeyValue::new(ERROR_TYPE, class.to_owned()));
                if let Some(code) = code {
                    attributes.push(KeyValue::new(RPC_STATUS_CODE, code.to_string()));
                }
            }
            histogram(
                OPERATION_DURATION,
                "The duration of the MCP request or notification as observed on the sender \
                 from the time it was sent until the response or ack is received.",
            )
            .record(self.start.elapsed().as_secs_f64(), &attributes);
        }
    }

    /// One session's `mcp.client.session.duration`, recorded once, when
    /// it is closed or dropped.
    pub(crate) struct SessionClock {
        start: Instant,
        attributes: Vec<KeyValue>,
        done: std::sync::atomic::AtomicBool,
    }

    impl SessionClock {
        pub(crate) fn start(origin: &str, protocol_version: Option<&'static str>) -> Self {
            let (address, port) = server_of(origin);
            let mut attributes = Vec::new();
            common(&mut attributes, protocol_version, address, port);
            SessionClock {
                start: Instant::now(),
                attributes,
                done: std::sync::atomic::AtomicBool::new(false),
            }
        }

        /// Records the session's duration, the first time only.
        pub(crate) fn stop(&self) {
            if self.done.swap(true, std::sync::atomic::Ordering::Relaxed) {
                return;
            }
            histogram(
                SESSION_DURATION,
                "The duration of the MCP session as observed on the MCP client.",
            )
            .record(self.start.elapsed().as_secs_f64(), &self.attributes);
        }
    }

    /// The `_meta` of a request's params, as a propagator's carrier.
    struct Meta<'a>(&'a mut Map<String, Value>);

    impl Injector for Meta<'_> {
        fn set(&mut self, key: &str, value: String) {
            self.0.insert(key.to_owned(), Value::String(value));
        }
    }

    /// `params` with `span`'s context injected into `params._meta` by the
    /// global propagator. Params that are no object, or whose `_meta` is
    /// no object, are left as they are (the server sees what the caller
    /// wrote); nothing to inject leaves them untouched too.
    //
    // Not through `session::shared::request_meta` (the caller's extra
    // `_meta`, which overrides what the params hold): here it is the other
    // way round, a `traceparent` the caller wrote wins over the span's.
    pub(super) fn inject(span: &Span, params: Option<Value>) -> Option<Value> {
        // A request span filtered out still carries its caller's trace.
        let context = if span.is_disabled() {
            Span::current().context()
        } else {
            span.context()
        };
        let mut fields = Map::new();
        opentelemetry::global::get_text_map_propagator(|propagator| {
            propagator.inject_context(&context, &mut Meta(&mut fields));
        });
        if fields.is_empty() {
            return params;
        }
        let mut params = match params {
            None => Map::new(),
            Some(Value::Object(map)) => map,
            Some(other) => return Some(other),
        };
        match params
            .entry("_meta")
            .or_insert_with(|| Value::Object(Map::new()))
        {
            // The caller's own trace context, if any, wins.
            Value::Object(meta) => {
                for (key, value) in fields {
                    meta.entry(key).or_insert(value);
                }
            }
            _ => return Some(Value::Object(params)),
        }
        Some(Value::Object(params))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_of_splits_host_and_port() {
        assert_eq!(
            server_of("http://127.0.0.1:8080"),
            ("127.0.0.1", Some(8080))
        );
        assert_eq!(server_of("https://[::1]:443"), ("[::1]", Some(443)));
        assert_eq!(
            server_of("https://[::1]"),
            ("https://[::1]".split_once("://").unwrap().1, None)
        );
        assert_eq!(server_of("example.com"), ("example.com", None));
    }

    #[test]
    fn tool_errors_are_read_from_raw_results() {
        let raw = RawValue::from_string(r#"{"content":[],"isError":true}"#.into()).unwrap();
        assert!(raw.is_tool_error());
        let raw = RawValue::from_string(r#"{"content":[]}"#.into()).unwrap();
        assert!(!raw.is_tool_error());
        assert!(serde_json::json!({"isError": true}).is_tool_error());
    }
}
