//! The 2026-07-28 path: stateless POSTs validated as the Python `mcp` 2.x
//! server validates them, `server/discover`, multi round-trip tools and
//! `subscriptions/listen`.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use http::header::HeaderValue;
use http::{Response, StatusCode};
use serde_json::{Map, Value, json};

use super::body::{RespBody, boxed, empty, full};
use super::config::{InputRequest, ResponseMode, TestTool, ToolBehavior};
use super::mcp::{self, Answer, Catalog};
use super::respond::{self, Outcome, Req, keepalive, sse_headers};
use super::sse::ChanBody;
use super::{CountGuard, Shared, Subscription};

/// Protocol revisions reached through the `initialize` handshake: a request
/// whose `MCP-Protocol-Version` names one of these (or none) takes the
/// 2025 path of a dual-era server.
pub(super) const HANDSHAKE_VERSIONS: [&str; 4] =
    ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];

pub(super) const META_PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
pub(super) const META_CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
pub(super) const META_CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";
pub(super) const META_SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";
pub(super) const META_SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";

pub(super) const VERSION_HEADER: &str = "mcp-protocol-version";
pub(super) const METHOD_HEADER: &str = "mcp-method";
pub(super) const NAME_HEADER: &str = "mcp-name";
pub(super) const PARAM_PREFIX: &str = "mcp-param-";

/// JSON-RPC error codes of 2026-07-28.
pub(super) const HEADER_MISMATCH: i64 = -32020;
pub(super) const MISSING_CAPABILITY: i64 = -32021;
pub(super) const UNSUPPORTED_VERSION: i64 = -32022;

const INVALID_BODY: &str = "Body must be a single JSON-RPC request or notification object";

/// The HTTP status of a JSON-RPC error code on the modern path (Python
/// `mcp` 2.x's table); 200 for codes it does not map.
pub(super) fn status_of(code: i64) -> u16 {
    match code {
        mcp::PARSE_ERROR
        | mcp::INVALID_REQUEST
        | mcp::INVALID_PARAMS
        | HEADER_MISMATCH
        | MISSING_CAPABILITY
        | UNSUPPORTED_VERSION => 400,
        mcp::METHOD_NOT_FOUND => 404,
        _ => 200,
    }
}

/// A JSON-RPC error: code, message, optional data.
pub(super) struct RpcError {
    pub(super) code: i64,
    pub(super) message: String,
    pub(super) data: Option<Value>,
}

impl RpcError {
    pub(super) fn new(code: i64, message: impl Into<String>) -> Self {
        RpcError {
            code,
            message: message.into(),
            data: None,
        }
    }

    pub(super) fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }

    /// The error response for request `id`, with its mapped HTTP status, as
    /// JSON (Python sends every early error as JSON, in either mode).
    pub(super) fn response(&self, id: &Value) -> http::Response<RespBody> {
        let mut error = json!({"code": self.code, "message": self.message});
        if let Some(data) = &self.data {
            error["data"] = data.clone();
        }
        let body = json!({"jsonrpc": "2.0", "id": id, "error": error});
        full(
            status_of(self.code),
            Some("application/json"),
            body.to_string(),
        )
    }
}

/// `-32022` for `requested`, listing `supported`.
pub(super) fn unsupported_version(requested: &Value, supported: &[String]) -> RpcError {
    RpcError::new(UNSUPPORTED_VERSION, "Unsupported protocol version")
        .with_data(json!({"supported": supported, "requested": requested}))
}

/// Decodes a header value in the `=?base64?...?=` sentinel form (else as
/// is); `None` for a malformed sentinel.
pub(crate) fn decode_header_value(value: &str) -> Option<String> {
    let Some(payload) = value
        .strip_prefix("=?base64?")
        .and_then(|v| v.strip_suffix("?="))
    else {
        return Some(value.to_owned());
    };
    let bytes = base64_decode(payload)?;
    String::from_utf8(bytes).ok()
}

/// Standard base64 with padding, canonical only.
fn base64_decode(text: &str) -> Option<Vec<u8>> {
    fn value(c: u8) -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    }
    let bytes = text.as_bytes();
    if bytes.len() % 4 != 0 {
        return None;
    }
    let mut out = Vec::with_capacity(bytes.len() / 4 * 3);
    for (n, chunk) in bytes.chunks(4).enumerate() {
        let last = n == bytes.len() / 4 - 1;
        let pads = chunk.iter().rev().take_while(|&&c| c == b'=').count();
        if pads > 2 || (pads > 0 && !last) {
            return None;
        }
        let mut acc: u32 = 0;
        for &c in &chunk[..4 - pads] {
            acc = (acc << 6) | value(c)?;
        }
        acc <<= 6 * pads as u32;
        let three = [(acc >> 16) as u8, (acc >> 8) as u8, acc as u8];
        // Non-canonical: bits set in what the padding covers.
        if (pads == 1 && three[2] != 0) || (pads == 2 && (three[1] != 0 || three[2] != 0)) {
            return None;
        }
        out.extend_from_slice(&three[..3 - pads]);
    }
    Some(out)
}

fn media_types(req: &Req) -> Vec<String> {
    req.headers
        .get_all(http::header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(respond::media_types)
        .collect()
}

/// `(has_json, has_sse)` of the Accept header, wildcards included.
fn accepts(req: &Req) -> (bool, bool) {
    let types = media_types(req);
    let any = types.iter().any(|t| t == "*/*");
    let json = any
        || types
            .iter()
            .any(|t| t == "application/json" || t == "application/*");
    let sse = any
        || types
            .iter()
            .any(|t| t == "text/event-stream" || t == "text/*");
    (json, sse)
}

/// The one value of header `name`, if present and UTF-8.
fn header<'a>(req: &'a Req, name: &str) -> Option<&'a str> {
    req.headers.get(name).and_then(|v| v.to_str().ok())
}

/// Answers a POST on the modern path.
pub(super) fn post(shared: &Arc<Shared>, req: &Req) -> Outcome {
    let cfg = &shared.config;
    let (has_json, has_sse) = accepts(req);
    if !has_json || (cfg.response_mode == ResponseMode::Sse && !has_sse) {
        return Outcome::Http(empty(406));
    }
    let body = match &req.json {
        Some(Ok(v)) => v,
        _ => {
            return Outcome::Http(
                RpcError::new(mcp::PARSE_ERROR, "Parse error").response(&Value::Null),
            );
        }
    };
    let invalid =
        || Outcome::Http(RpcError::new(mcp::INVALID_REQUEST, INVALID_BODY).response(&Value::Null));
    let Some(obj) = body.as_object() else {
        return invalid();
    };
    if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return invalid();
    }
    let method = match obj.get("method") {
        Some(Value::String(m)) => m.as_str(),
        _ => return invalid(),
    };
    let Some(id) = obj.get("id") else {
        // A notification: acknowledged and dropped, if its version is served.
        let requested = header(req, VERSION_HEADER).unwrap_or("");
        if !cfg.modern_versions.iter().any(|v| v == requested) {
            let e = unsupported_version(&json!(requested), &cfg.modern_versions);
            return Outcome::Http(e.response(&Value::Null));
        }
        return Outcome::Http(empty(202));
    };
    if !(id.is_string() || id.is_i64() || id.is_u64()) {
        return invalid();
    }
    let params = obj.get("params");
    if method == "subscriptions/listen" && !has_sse {
        return Outcome::Http(empty(406));
    }
    if let Err(e) = validate(shared, req, method, params) {
        return Outcome::Http(for_initialize(cfg, method, e).response(id));
    }
    let catalog = shared.state().catalog;
    let sse = cfg.response_mode == ResponseMode::Sse;
    let mut before = Vec::new();
    let result = match method {
        "subscriptions/listen" => return Outcome::Http(listen(shared, id, params)),
        "server/discover" => Ok(discover(cfg, catalog)),
        "tools/call" => call_tool(shared, catalog, params, sse, &mut before),
        m => mcp::dispatch(cfg, catalog, m, params, true)
            .map(|result| cacheable(m, result))
            .map_err(|(code, message)| RpcError::new(code, message)),
    };
    match result {
        Err(e) => Outcome::Http(for_initialize(cfg, method, e).response(id)),
        Ok(mut result) => {
            stamp(cfg, &mut result);
            Outcome::Messages {
                answers: vec![Answer {
                    before,
                    response: json!({"jsonrpc": "2.0", "id": id, "result": result}),
                    method: Some(method.to_owned()),
                }],
                batch: false,
                session: None,
                modern: true,
            }
        }
    }
}

/// An error for `initialize` names the versions served (a legacy client
/// has no other way to learn why it failed).
fn for_initialize(cfg: &super::ServerConfig, method: &str, mut e: RpcError) -> RpcError {
    if method == "initialize" {
        e.message = format!(
            "{} (this server speaks {} only: no initialize)",
            e.message,
            cfg.modern_versions.join(", ")
        );
    }
    e
}

/// The validation ladder of Python `mcp` 2.x, first failure wins:
/// duplicated routing headers and the `_meta` envelope, the headers
/// against the body, the version, then (`tools/call`) the `Mcp-Param-*`
/// headers. Method existence is the dispatcher's.
fn validate(
    shared: &Shared,
    req: &Req,
    method: &str,
    params: Option<&Value>,
) -> Result<(), RpcError> {
    let cfg = &shared.config;
    for name in [VERSION_HEADER, METHOD_HEADER, NAME_HEADER] {
        if req.headers.get_all(name).iter().count() > 1 {
            return Err(RpcError::new(
                HEADER_MISMATCH,
                format!("{name} header appears more than once"),
            ));
        }
    }
    let Some(meta) = params
        .and_then(|p| p.get("_meta"))
        .and_then(Value::as_object)
    else {
        return Err(RpcError::new(
            mcp::INVALID_PARAMS,
            format!(
                "params._meta must be an object carrying the required '{META_PROTOCOL_VERSION}' and '{META_CLIENT_CAPABILITIES}' envelope keys"
            ),
        ));
    };
    let mut required = vec![META_PROTOCOL_VERSION, META_CLIENT_CAPABILITIES];
    if cfg.require_client_info {
        required.push(META_CLIENT_INFO);
    }
    let missing: Vec<&str> = required
        .into_iter()
        .filter(|k| !meta.contains_key(*k))
        .collect();
    if !missing.is_empty() {
        return Err(RpcError::new(
            mcp::INVALID_PARAMS,
            format!(
                "params._meta is missing the required envelope key(s): {}",
                missing.join(", ")
            ),
        ));
    }
    let version = &meta[META_PROTOCOL_VERSION];
    if header(req, VERSION_HEADER).is_none_or(|h| version.as_str() != Some(h)) {
        return Err(RpcError::new(
            HEADER_MISMATCH,
            "mcp-protocol-version header does not match the request envelope's protocol version",
        ));
    }
    if header(req, METHOD_HEADER) != Some(method) {
        return Err(RpcError::new(
            HEADER_MISMATCH,
            "mcp-method header does not match the request body's method",
        ));
    }
    let name_key = match method {
        "tools/call" | "prompts/get" => Some("name"),
        "resources/read" => Some("uri"),
        _ => None,
    };
    if let Some(key) = name_key {
        let body_value = params.and_then(|p| p.get(key)).filter(|v| !v.is_null());
        if let Some(body_value) = body_value {
            let decoded = header(req, NAME_HEADER).and_then(decode_header_value);
            if decoded.as_deref() != body_value.as_str() {
                return Err(RpcError::new(
                    HEADER_MISMATCH,
                    format!("mcp-name header does not match the request body's '{key}' parameter"),
                ));
            }
        }
    }
    let Some(version) = version.as_str() else {
        return Err(RpcError::new(
            mcp::INVALID_PARAMS,
            "the protocol-version envelope value must be a string",
        ));
    };
    if !cfg.modern_versions.iter().any(|v| v == version) {
        return Err(unsupported_version(&json!(version), &cfg.modern_versions));
    }
    if method == "tools/call" {
        let name = params.and_then(|p| p.get("name")).and_then(Value::as_str);
        if let Some(tool) = name.and_then(|n| cfg.extra_tools.iter().find(|t| t.name == n)) {
            let args = params
                .and_then(|p| p.get("arguments"))
                .cloned()
                .unwrap_or_else(|| json!({}));
            check_param_headers(tool, &args, req)?;
        }
    }
    Ok(())
}

/// One valid `x-mcp-header` annotation.
pub(crate) struct Annotation {
    /// The chain of `properties` keys to the annotated property.
    pub(crate) path: Vec<String>,
    /// The header name after `Mcp-Param-`.
    pub(crate) token: String,
    /// The property's `type`.
    pub(crate) ty: Option<String>,
}

/// Every statically reachable `x-mcp-header` annotation; `Err` with the
/// reason if any annotation in the schema is invalid.
pub(crate) fn header_annotations(schema: &Value) -> Result<Vec<Annotation>, String> {
    const SINGLE: [&str; 11] = [
        "items",
        "contains",
        "unevaluatedItems",
        "additionalProperties",
        "propertyNames",
        "unevaluatedProperties",
        "not",
        "if",
        "then",
        "else",
        "contentSchema",
    ];
    const LIST: [&str; 4] = ["allOf", "anyOf", "oneOf", "prefixItems"];
    const MAP: [&str; 4] = [
        "patternProperties",
        "dependentSchemas",
        "$defs",
        "definitions",
    ];
    let mut found = Vec::new();
    let mut seen: Vec<String> = Vec::new();
    let mut stack: Vec<(Option<Vec<String>>, &Value)> = vec![(Some(Vec::new()), schema)];
    while let Some((path, node)) = stack.pop() {
        let Some(obj) = node.as_object() else {
            continue;
        };
        if let Some(token) = obj.get("x-mcp-header") {
            let Some(path) = path.as_ref().filter(|p| !p.is_empty()) else {
                return Err("x-mcp-header off a pure `properties` chain".into());
            };
            let Some(token) = token.as_str() else {
                return Err("x-mcp-header is not a string".into());
            };
            let is_token = !token.is_empty()
                && token
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
            if !is_token {
                return Err(format!("x-mcp-header {token:?} is not a token"));
            }
            let ty = obj.get("type").and_then(Value::as_str);
            if !matches!(ty, Some("string" | "integer" | "boolean")) {
                return Err(format!("x-mcp-header {token:?} on a {ty:?} property"));
            }
            let lower = token.to_ascii_lowercase();
            if seen.contains(&lower) {
                return Err(format!("x-mcp-header {token:?} appears twice"));
            }
            seen.push(lower);
            found.push(Annotation {
                path: path.clone(),
                token: token.to_owned(),
                ty: ty.map(str::to_owned),
            });
        }
        for (kw, val) in obj {
            if kw == "properties" {
                if let Some(props) = val.as_object() {
                    for (name, sub) in props {
                        let sub_path = path.as_ref().map(|p| {
                            let mut p = p.clone();
                            p.push(name.clone());
                            p
                        });
                        stack.push((sub_path, sub));
                    }
                }
            } else if SINGLE.contains(&kw.as_str()) {
                stack.push((None, val));
            } else if LIST.contains(&kw.as_str()) {
                if let Some(items) = val.as_array() {
                    stack.extend(items.iter().map(|v| (None, v)));
                }
            } else if MAP.contains(&kw.as_str()) {
                if let Some(items) = val.as_object() {
                    stack.extend(items.values().map(|v| (None, v)));
                }
            }
        }
    }
    Ok(found)
}

/// How a client mirrors an argument into a header: strings as they are,
/// booleans lowercase, numbers in decimal; `None` for other values.
fn render(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// Checks the `Mcp-Param-*` headers of a call to `tool` (Python `mcp`
/// 2.x's rules: present together with a non-null argument and equal after
/// decoding; integers compare numerically).
fn check_param_headers(tool: &TestTool, args: &Value, req: &Req) -> Result<(), RpcError> {
    let Ok(annotations) = header_annotations(&tool.input_schema) else {
        return Ok(());
    };
    for Annotation { path, token, ty } in annotations {
        let header_name = format!("Mcp-Param-{token}");
        let values: Vec<&HeaderValue> = req.headers.get_all(header_name.as_str()).iter().collect();
        if values.len() > 1 {
            return Err(RpcError::new(
                HEADER_MISMATCH,
                format!("{header_name} header appears more than once"),
            ));
        }
        let raw = values.first().map(|v| v.to_str().unwrap_or("\u{fffd}"));
        let mut value = Some(args);
        for key in &path {
            value = value.and_then(|v| v.get(key));
        }
        let value = value.filter(|v| !v.is_null());
        let argument = path.join(".");
        let mismatch = |what: &str| {
            Err(RpcError::new(
                HEADER_MISMATCH,
                format!("{header_name} header {what} the request body's '{argument}' argument"),
            ))
        };
        let Some(value) = value else {
            if raw.is_some() {
                return mismatch("is present but not");
            }
            continue;
        };
        let Some(rendered) = render(value) else {
            if raw.is_some() {
                return mismatch("does not match");
            }
            continue;
        };
        let Some(raw) = raw else {
            return mismatch("is missing for");
        };
        let Some(decoded) = decode_header_value(raw) else {
            return Err(RpcError::new(
                HEADER_MISMATCH,
                format!("{header_name} header carries a malformed base64 sentinel value"),
            ));
        };
        let numeric_equal = ty.as_deref() == Some("integer")
            && value.as_f64().is_some_and(|v| v.fract() == 0.0)
            && decoded.parse::<f64>().ok() == value.as_f64()
            && decoded
                .bytes()
                .all(|b| b.is_ascii_digit() || b == b'-' || b == b'.');
        if decoded != rendered && !numeric_equal {
            return mismatch("does not match");
        }
    }
    Ok(())
}

/// The schema's `CacheableResult`s carry `ttlMs` and `cacheScope`
/// (required: the Python SDK 2.x refuses a list result without them).
fn cacheable(method: &str, mut result: Value) -> Value {
    let cached = matches!(
        method,
        "tools/list"
            | "prompts/list"
            | "resources/list"
            | "resources/templates/list"
            | "resources/read"
    );
    if let (true, Some(obj)) = (cached, result.as_object_mut()) {
        obj.entry("ttlMs").or_insert_with(|| json!(0));
        obj.entry("cacheScope").or_insert_with(|| json!("public"));
    }
    result
}

/// `server/discover`'s result.
fn discover(cfg: &super::ServerConfig, cat: Catalog) -> Value {
    // `ttlMs` and `cacheScope` are required (a `CacheableResult`): rmcp
    // refuses a discover result without them.
    let mut result = json!({
        "supportedVersions": cfg.modern_versions,
        "capabilities": mcp::capabilities(cat, true),
        "ttlMs": 0,
        "cacheScope": "public",
    });
    if let Some(text) = &cfg.instructions {
        result["instructions"] = json!(text);
    }
    result
}

/// Adds `resultType` and the `serverInfo` stamp to a result object.
fn stamp(cfg: &super::ServerConfig, result: &mut Value) {
    let Some(obj) = result.as_object_mut() else {
        return;
    };
    obj.entry("resultType").or_insert_with(|| json!("complete"));
    let meta = obj.entry("_meta").or_insert_with(|| json!({}));
    if let Some(meta) = meta.as_object_mut() {
        meta.entry(META_SERVER_INFO)
            .or_insert_with(|| json!({"name": cfg.server_name, "version": cfg.server_version}));
    }
}

fn call_tool(
    shared: &Shared,
    cat: Catalog,
    params: Option<&Value>,
    sse: bool,
    before: &mut Vec<Value>,
) -> Result<Value, RpcError> {
    let name = params
        .and_then(|p| p.get("name"))
        .and_then(Value::as_str)
        .unwrap_or("");
    if let Some(tool) = shared.config.extra_tools.iter().find(|t| t.name == name) {
        if let ToolBehavior::InputRequired { request, rounds } = tool.behavior {
            return input_required(shared, tool, request, rounds, params);
        }
    }
    Ok(mcp::call_tool(&shared.config, cat, params, sse, before))
}

/// The opaque `requestState` of round `round` of `tool`.
fn request_state(tool: &str, round: usize) -> String {
    format!("mrtr|{tool}|{round}")
        .bytes()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The round a `requestState` stands for, if this server issued it for
/// `tool`.
fn round_of(tool: &str, state: &str) -> Option<usize> {
    if state.len() % 2 != 0 || !state.is_ascii() {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..state.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&state[i..i + 2], 16).ok())
        .collect();
    let text = String::from_utf8(bytes?).ok()?;
    let rest = text.strip_prefix("mrtr|")?;
    let (name, round) = rest.rsplit_once('|')?;
    (name == tool).then_some(())?;
    round.parse().ok().filter(|&r| r >= 1)
}

fn input_required(
    shared: &Shared,
    tool: &TestTool,
    request: InputRequest,
    rounds: Option<usize>,
    params: Option<&Value>,
) -> Result<Value, RpcError> {
    let caps = params
        .and_then(|p| p.get("_meta"))
        .and_then(|m| m.get(META_CLIENT_CAPABILITIES));
    if caps.and_then(|c| c.get(request.capability())).is_none() {
        return Err(RpcError::new(
            MISSING_CAPABILITY,
            format!(
                "this tool needs the client capability '{}'",
                request.capability()
            ),
        )
        .with_data(json!({"requiredCapabilities": {request.capability(): {}}})));
    }
    let state = params.and_then(|p| p.get("requestState"));
    let responses = params.and_then(|p| p.get("inputResponses"));
    let round = match state {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(
            round_of(&tool.name, s)
                .ok_or_else(|| RpcError::new(mcp::INVALID_PARAMS, "invalid requestState"))?,
        ),
        Some(_) => return Err(RpcError::new(mcp::INVALID_PARAMS, "invalid requestState")),
    };
    let answered = responses
        .and_then(|r| r.get(request.key()))
        .is_some_and(|v| !v.is_null());
    let ask = match round {
        None => 1,
        Some(r) if !answered => r,
        Some(r) if rounds.is_some_and(|n| r >= n) => {
            let args = params
                .and_then(|p| p.get("arguments"))
                .cloned()
                .unwrap_or_else(|| json!({}));
            return Ok(json!({
                "content": [{"type": "text", "text": format!("{}: done after {r} round(s)", tool.name)}],
                "structuredContent": {
                    "tool": tool.name,
                    "arguments": args,
                    "rounds": r,
                    "inputResponses": responses.cloned().unwrap_or(Value::Null),
                },
            }));
        }
        Some(r) => r + 1,
    };
    shared
        .counters
        .input_required
        .fetch_add(1, Ordering::SeqCst);
    let mut requests = Map::new();
    requests.insert(
        request.key().to_owned(),
        json!({"method": request.method(), "params": request.params(ask)}),
    );
    Ok(json!({
        "resultType": "input_required",
        "inputRequests": requests,
        "requestState": request_state(&tool.name, ask),
    }))
}

/// The subset of a `subscriptions/listen` filter the server honors: every
/// kind it knows, requested with `true` or a non-empty URI list.
fn honored(params: Option<&Value>) -> Value {
    let filter = params.and_then(|p| p.get("notifications"));
    let mut out = Map::new();
    for key in [
        "toolsListChanged",
        "promptsListChanged",
        "resourcesListChanged",
    ] {
        if filter.and_then(|f| f.get(key)) == Some(&Value::Bool(true)) {
            out.insert(key.into(), json!(true));
        }
    }
    if let Some(uris) = filter
        .and_then(|f| f.get("resourceSubscriptions"))
        .and_then(Value::as_array)
    {
        let uris: Vec<Value> = uris.iter().filter(|u| u.is_string()).cloned().collect();
        if !uris.is_empty() {
            out.insert("resourceSubscriptions".into(), Value::Array(uris));
        }
    }
    Value::Object(out)
}

/// `subscriptions/listen`: an SSE stream that stays open, first the
/// acknowledgement, then the notifications the test triggers.
fn listen(shared: &Arc<Shared>, id: &Value, params: Option<&Value>) -> http::Response<RespBody> {
    let filter = honored(params);
    let guard = CountGuard::new(Arc::clone(shared), |c| &c.subscriptions_open);
    let (tx, body) = ChanBody::channel(64, Some(Box::new(guard)));
    let ack = json!({
        "jsonrpc": "2.0",
        "method": "notifications/subscriptions/acknowledged",
        "params": {"_meta": {META_SUBSCRIPTION_ID: id}, "notifications": filter},
    });
    let _ = tx.try_send(Ok(shared.modern_event(&ack)));
    keepalive(shared, &tx);
    shared.state().subscriptions.push(Subscription {
        id: id.clone(),
        filter,
        tx,
    });
    let mut resp = Response::new(boxed(body));
    *resp.status_mut() = StatusCode::OK;
    sse_headers(resp.headers_mut());
    resp
}

/// The notification `method` with `params` for subscription `id`.
pub(super) fn subscription_message(
    id: &Value,
    method: &str,
    mut params: Map<String, Value>,
) -> Value {
    params.insert("_meta".into(), json!({META_SUBSCRIPTION_ID: id}));
    json!({"jsonrpc": "2.0", "method": method, "params": params})
}

/// The graceful end of subscription `id`: its `subscriptions/listen`
/// response.
pub(super) fn subscription_end(cfg: &super::ServerConfig, id: &Value) -> Value {
    let mut result = json!({"resultType": "complete", "_meta": {META_SUBSCRIPTION_ID: id}});
    stamp(cfg, &mut result);
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_sentinel_values() {
        assert_eq!(decode_header_value("us-west1").as_deref(), Some("us-west1"));
        assert_eq!(
            decode_header_value("=?base64?SGVsbG8sIOS4lueVjA==?=").as_deref(),
            Some("Hello, 世界")
        );
        assert_eq!(
            decode_header_value("=?base64?IHBhZGRlZCA=?=").as_deref(),
            Some(" padded ")
        );
        assert_eq!(
            decode_header_value("=?base64?PT9iYXNlNjQ/bGl0ZXJhbD89?=").as_deref(),
            Some("=?base64?literal?=")
        );
        assert_eq!(decode_header_value("=?base64?!!!!?="), None);
        assert_eq!(decode_header_value("=?base64?SGk?="), None, "unpadded");
        assert_eq!(
            decode_header_value("=?base64?SGl=?="),
            None,
            "non-canonical"
        );
    }

    #[test]
    fn finds_valid_and_invalid_annotations() {
        let tool = TestTool::header_param("t", "region", "Region");
        let found = header_annotations(&tool.input_schema).unwrap();
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].path, vec!["region".to_owned()]);
        assert_eq!(found[0].token, "Region");
        for kind in super::super::InvalidHeader::ALL {
            let tool = TestTool::invalid_header(kind);
            assert!(header_annotations(&tool.input_schema).is_err(), "{kind:?}");
        }
    }

    #[test]
    fn request_states_round_trip() {
        let s = request_state("ask", 3);
        assert_eq!(round_of("ask", &s), Some(3));
        assert_eq!(round_of("other", &s), None);
        assert_eq!(round_of("ask", "zz"), None);
    }
}
