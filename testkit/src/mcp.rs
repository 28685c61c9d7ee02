//! MCP protocol answers, on plain `serde_json::Value`s (deliberately not the
//! crate's own JSON-RPC types, so bugs on the two sides cannot cancel out).

use serde_json::{Value, json};

use super::config::{ServerConfig, ToolBehavior};

/// Protocol revisions the server speaks, newest first.
pub(crate) const SUPPORTED_VERSIONS: [&str; 3] = ["2025-11-25", "2025-06-18", "2025-03-26"];

/// JSON-RPC error codes.
pub(crate) const PARSE_ERROR: i64 = -32700;
pub(crate) const INVALID_REQUEST: i64 = -32600;
pub(crate) const METHOD_NOT_FOUND: i64 = -32601;
pub(crate) const INVALID_PARAMS: i64 = -32602;
/// Resource not found (2025 revisions only).
pub(crate) const RESOURCE_NOT_FOUND: i64 = -32002;

/// What one JSON-RPC message is.
pub(crate) enum Kind<'a> {
    /// A request: has a method and an id.
    Request {
        id: &'a Value,
        method: &'a str,
        params: Option<&'a Value>,
    },
    /// A notification (method, no id) or a response (no method).
    NotificationOrResponse,
    /// Not a JSON-RPC message.
    Invalid,
}

/// Classifies a message.
pub(crate) fn classify(msg: &Value) -> Kind<'_> {
    let Some(obj) = msg.as_object() else {
        return Kind::Invalid;
    };
    match (obj.get("method"), obj.get("id")) {
        (Some(Value::String(method)), Some(id)) => Kind::Request {
            id,
            method,
            params: obj.get("params"),
        },
        (Some(Value::String(_)), None) => Kind::NotificationOrResponse,
        (Some(_), _) => Kind::Invalid,
        (None, Some(_)) if obj.contains_key("result") || obj.contains_key("error") => {
            Kind::NotificationOrResponse
        }
        (None, _) => Kind::Invalid,
    }
}

/// A JSON-RPC error response.
pub(crate) fn error(id: &Value, code: i64, message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

/// A `notifications/message` notification.
pub(crate) fn log_notification(n: usize) -> Value {
    json!({
        "jsonrpc": "2.0",
        "method": "notifications/message",
        "params": {"level": "info", "logger": "testkit", "data": format!("note {n}")},
    })
}

/// The catalog served right now: the configured counts, changed at run time
/// by `TestServer::set_tools` and friends.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Catalog {
    pub(crate) tools: usize,
    pub(crate) prompts: usize,
    pub(crate) resources: usize,
    pub(crate) templates: usize,
    pub(crate) page_size: usize,
    /// How many [`ServerConfig::extra_tools`] follow the numbered tools.
    pub(crate) extra_tools: usize,
}

impl Catalog {
    /// The catalog a server starts with.
    pub(crate) fn of(cfg: &ServerConfig) -> Catalog {
        Catalog {
            tools: cfg.tools,
            prompts: cfg.prompts,
            resources: cfg.resources,
            templates: cfg.resource_templates,
            page_size: cfg.page_size,
            extra_tools: cfg.extra_tools.len(),
        }
    }
}

/// A JSON-RPC request from the server to the client.
pub(crate) fn server_request(id: &str, method: &str, params: &Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

/// What a client's response to a server request contributes to the answer
/// of the original request: its `result`, or `{"error": <error object>}`.
pub(crate) fn client_answer_value(response: &Value) -> Value {
    match response.get("error") {
        Some(error) => json!({"error": error}),
        None => response.get("result").cloned().unwrap_or(Value::Null),
    }
}

/// Adds a client's answer to a server request to the answer of the original
/// request: `structuredContent.clientAnswer` and a text content item for
/// `tools/call`, `result._meta.clientAnswer` for other methods, and
/// `error.data.clientAnswer` if the original request failed.
pub(crate) fn add_client_answer(answer: &mut Answer, value: &Value) {
    let is_call = answer.method.as_deref() == Some("tools/call");
    let response = &mut answer.response;
    if let Some(result) = response.get_mut("result").and_then(Value::as_object_mut) {
        if is_call {
            let text = json!({"type": "text", "text": format!("clientAnswer:{value}")});
            match result.get_mut("content").and_then(Value::as_array_mut) {
                Some(content) => content.push(text),
                None => {
                    result.insert("content".into(), json!([text]));
                }
            }
            insert_into(result, "structuredContent", value);
        } else {
            insert_into(result, "_meta", value);
        }
    } else if let Some(error) = response.get_mut("error").and_then(Value::as_object_mut) {
        insert_into(error, "data", value);
    }
}

/// Sets `obj[field].clientAnswer`, making `obj[field]` an object if need be.
fn insert_into(obj: &mut serde_json::Map<String, Value>, field: &str, value: &Value) {
    let slot = obj.entry(field).or_insert_with(|| json!({}));
    if !slot.is_object() {
        *slot = json!({});
    }
    if let Some(o) = slot.as_object_mut() {
        o.insert("clientAnswer".into(), value.clone());
    }
}

/// The answer to one request: notifications to send first (SSE only), then
/// the response.
pub(crate) struct Answer {
    pub(crate) before: Vec<Value>,
    pub(crate) response: Value,
    /// The method of the request answered (`None` for an invalid message).
    pub(crate) method: Option<String>,
}

/// Answers one request on the 2025 path.
pub(crate) fn answer(
    cfg: &ServerConfig,
    cat: Catalog,
    id: &Value,
    method: &str,
    params: Option<&Value>,
    sse: bool,
    protocol_override: Option<&str>,
) -> Answer {
    let mut before = Vec::new();
    let result = match method {
        "initialize" => Ok(initialize(cfg, cat, params, protocol_override)),
        "tools/call" => Ok(call_tool(cfg, cat, params, sse, &mut before)),
        m => dispatch(cfg, cat, m, params, false),
    };
    let response = match result {
        Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
        Err((code, message)) => error(id, code, &message),
    };
    Answer {
        before,
        response,
        method: Some(method.to_owned()),
    }
}

/// Answers the methods both Streamable HTTP paths share (not `initialize`
/// nor `tools/call`): `ping` (2025 only), the lists, `prompts/get`,
/// `resources/read`.
pub(crate) fn dispatch(
    cfg: &ServerConfig,
    cat: Catalog,
    method: &str,
    params: Option<&Value>,
    modern: bool,
) -> Result<Value, (i64, String)> {
    match method {
        "ping" if !modern => Ok(json!({})),
        "prompts/get" => get_prompt(cat, params),
        "resources/read" => read_resource(cat, params, modern),
        m => match ListKind::of(m) {
            Some(kind) => list(cfg, cat, kind, params),
            None => Err((METHOD_NOT_FOUND, format!("method not found: {m}"))),
        },
    }
}

/// The server capabilities for the catalog (`initialize`, `server/discover`).
pub(crate) fn capabilities(cat: Catalog, modern: bool) -> Value {
    let mut caps = serde_json::Map::new();
    if cat.tools + cat.extra_tools > 0 {
        caps.insert("tools".into(), json!({"listChanged": true}));
    }
    if cat.prompts > 0 {
        caps.insert("prompts".into(), json!({"listChanged": true}));
    }
    if cat.resources > 0 || cat.templates > 0 {
        let resources = if modern {
            json!({"listChanged": true, "subscribe": true})
        } else {
            json!({"listChanged": true})
        };
        caps.insert("resources".into(), resources);
    }
    Value::Object(caps)
}

fn initialize(
    cfg: &ServerConfig,
    cat: Catalog,
    params: Option<&Value>,
    protocol_override: Option<&str>,
) -> Value {
    let proposed = params
        .and_then(|p| p.get("protocolVersion"))
        .and_then(Value::as_str);
    let version = match (protocol_override, proposed) {
        (Some(v), _) => v,
        (None, Some(p)) if SUPPORTED_VERSIONS.contains(&p) => p,
        _ => SUPPORTED_VERSIONS[0],
    };
    let mut result = json!({
        "protocolVersion": version,
        "capabilities": capabilities(cat, false),
        "serverInfo": {"name": cfg.server_name, "version": cfg.server_version},
    });
    if let Some(text) = &cfg.instructions {
        result["instructions"] = json!(text);
    }
    result
}

/// `tools/call` of a numbered tool or an echoing extra tool; a multi
/// round-trip tool (whose modern calls are answered elsewhere) answers a
/// tool error here.
pub(crate) fn call_tool(
    cfg: &ServerConfig,
    cat: Catalog,
    params: Option<&Value>,
    sse: bool,
    before: &mut Vec<Value>,
) -> Value {
    let name = params
        .and_then(|p| p.get("name"))
        .and_then(Value::as_str)
        .unwrap_or("");
    let args = params
        .and_then(|p| p.get("arguments"))
        .cloned()
        .unwrap_or_else(|| json!({}));
    let extra = cfg.extra_tools.iter().find(|t| t.name == name);
    let known = (0..cat.tools).any(|i| tool_name(i) == name) || extra.is_some();
    if !known {
        return json!({
            "content": [{"type": "text", "text": format!("unknown tool: {name}")}],
            "isError": true,
        });
    }
    if extra.is_some_and(|t| t.behavior != ToolBehavior::Echo) {
        return json!({
            "content": [{"type": "text", "text": format!("{name} asks for input, which needs 2026-07-28")}],
            "isError": true,
        });
    }
    let token = params
        .and_then(|p| p.get("_meta"))
        .and_then(|m| m.get("progressToken"));
    if let (true, Some(token)) = (sse, token) {
        for i in 1..=3 {
            before.push(json!({
                "jsonrpc": "2.0",
                "method": "notifications/progress",
                "params": {"progressToken": token, "progress": i, "total": 3},
            }));
        }
    }
    json!({
        "content": [{"type": "text", "text": format!("{name}:{args}")}],
        "structuredContent": {"tool": name, "arguments": args},
    })
}

/// `prompts/get` of `prompt-NNN`; an unknown prompt is `-32602`.
fn get_prompt(cat: Catalog, params: Option<&Value>) -> Result<Value, (i64, String)> {
    let name = params
        .and_then(|p| p.get("name"))
        .and_then(Value::as_str)
        .unwrap_or("");
    if !(0..cat.prompts).any(|i| format!("prompt-{i:03}") == name) {
        return Err((INVALID_PARAMS, format!("unknown prompt: {name}")));
    }
    Ok(json!({
        "description": format!("Test prompt {name}"),
        "messages": [{"role": "user", "content": {"type": "text", "text": format!("{name} says hello")}}],
    }))
}

/// `resources/read` of `file:///r/NNN`; an unknown resource is `-32602`
/// (2026-07-28) or `-32002` (2025).
fn read_resource(
    cat: Catalog,
    params: Option<&Value>,
    modern: bool,
) -> Result<Value, (i64, String)> {
    let uri = params
        .and_then(|p| p.get("uri"))
        .and_then(Value::as_str)
        .unwrap_or("");
    if !(0..cat.resources).any(|i| format!("file:///r/{i:03}") == uri) {
        let code = if modern {
            INVALID_PARAMS
        } else {
            RESOURCE_NOT_FOUND
        };
        return Err((code, format!("Resource not found: {uri}")));
    }
    Ok(json!({
        "contents": [{"uri": uri, "mimeType": "text/plain", "text": format!("contents of {uri}")}],
    }))
}

fn tool_name(i: usize) -> String {
    format!("tool-{i:03}")
}

/// The four paginated list methods.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum ListKind {
    Tools,
    Prompts,
    Resources,
    Templates,
}

impl ListKind {
    pub(crate) fn of(method: &str) -> Option<ListKind> {
        match method {
            "tools/list" => Some(ListKind::Tools),
            "prompts/list" => Some(ListKind::Prompts),
            "resources/list" => Some(ListKind::Resources),
            "resources/templates/list" => Some(ListKind::Templates),
            _ => None,
        }
    }

    fn tag(self) -> &'static str {
        match self {
            ListKind::Tools => "tools",
            ListKind::Prompts => "prompts",
            ListKind::Resources => "resources",
            ListKind::Templates => "resourceTemplates",
        }
    }

    fn count(self, cat: Catalog) -> usize {
        match self {
            ListKind::Tools => cat.tools + cat.extra_tools,
            ListKind::Prompts => cat.prompts,
            ListKind::Resources => cat.resources,
            ListKind::Templates => cat.templates,
        }
    }

    fn item(self, cfg: &ServerConfig, cat: Catalog, i: usize) -> Value {
        match self {
            ListKind::Tools if i >= cat.tools => {
                let tool = &cfg.extra_tools[i - cat.tools];
                json!({
                    "name": tool.name,
                    "description": format!("Test tool {}", tool.name),
                    "inputSchema": tool.input_schema,
                })
            }
            ListKind::Tools => json!({
                "name": tool_name(i),
                "description": format!("Test tool {i}: echoes its arguments."),
                "inputSchema": {
                    "type": "object",
                    "properties": {"text": {"type": "string"}},
                },
            }),
            ListKind::Prompts => json!({
                "name": format!("prompt-{i:03}"),
                "description": format!("Test prompt {i}"),
            }),
            ListKind::Resources => json!({
                "uri": format!("file:///r/{i:03}"),
                "name": format!("resource-{i:03}"),
                "mimeType": "text/plain",
            }),
            ListKind::Templates => {
                let uri = if i == 0 {
                    "file:///t/{name}".to_owned()
                } else {
                    format!("file:///t/{{name}}/{i:03}")
                };
                json!({"uriTemplate": uri, "name": format!("template-{i:03}"), "mimeType": "text/plain"})
            }
        }
    }
}

fn encode_cursor(kind: ListKind, offset: usize) -> String {
    format!("{}:{offset}", kind.tag())
        .bytes()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The offset a cursor stands for, if it is one this server issued.
fn decode_cursor(cat: Catalog, kind: ListKind, cursor: &str) -> Option<usize> {
    if cursor.len() % 2 != 0 || !cursor.is_ascii() {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..cursor.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&cursor[i..i + 2], 16).ok())
        .collect();
    let text = String::from_utf8(bytes?).ok()?;
    let (tag, offset) = text.split_once(':')?;
    let offset: usize = offset.parse().ok()?;
    let ok = tag == kind.tag()
        && cat.page_size > 0
        && offset > 0
        && offset < kind.count(cat)
        && offset % cat.page_size == 0;
    ok.then_some(offset)
}

/// The cursor in a list request's params: `Ok(None)` without one, `Err` if
/// it is not a string.
fn cursor_param(params: Option<&Value>) -> Result<Option<&str>, ()> {
    match params.and_then(|p| p.get("cursor")) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(()),
    }
}

/// The 1-based page a list request asks for, `None` if not a list request or
/// the cursor is bad.
pub(crate) fn page_of(cat: Catalog, method: &str, params: Option<&Value>) -> Option<usize> {
    let kind = ListKind::of(method)?;
    match cursor_param(params).ok()? {
        None => Some(1),
        Some(c) => Some(decode_cursor(cat, kind, c)? / cat.page_size + 1),
    }
}

fn list(
    cfg: &ServerConfig,
    cat: Catalog,
    kind: ListKind,
    params: Option<&Value>,
) -> Result<Value, (i64, String)> {
    let bad = || (INVALID_PARAMS, "invalid cursor".to_owned());
    let start = match cursor_param(params).map_err(|()| bad())? {
        None => 0,
        Some(c) => decode_cursor(cat, kind, c).ok_or_else(bad)?,
    };
    let total = kind.count(cat);
    let end = if cat.page_size == 0 {
        total
    } else {
        (start + cat.page_size).min(total)
    };
    let items: Vec<Value> = (start..end).map(|i| kind.item(cfg, cat, i)).collect();
    let mut result = serde_json::Map::new();
    result.insert(kind.tag().into(), Value::Array(items));
    if end < total {
        result.insert("nextCursor".into(), Value::String(encode_cursor(kind, end)));
    }
    Ok(Value::Object(result))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paginates_and_rejects_bad_cursors() {
        let config = ServerConfig::default().with_tools(5).with_page_size(2);
        let cfg = Catalog::of(&config);
        let p1 = list(&config, cfg, ListKind::Tools, None).unwrap();
        assert_eq!(p1["tools"].as_array().unwrap().len(), 2);
        let c = p1["nextCursor"].as_str().unwrap().to_owned();
        let params = json!({"cursor": c});
        assert_eq!(page_of(cfg, "tools/list", Some(&params)), Some(2));
        let p2 = list(&config, cfg, ListKind::Tools, Some(&params)).unwrap();
        assert_eq!(p2["tools"][0]["name"], "tool-002");
        // A tools cursor is not a prompts cursor.
        assert!(list(&config, cfg, ListKind::Prompts, Some(&params)).is_err());
        assert!(
            list(
                &config,
                cfg,
                ListKind::Tools,
                Some(&json!({"cursor": "zz"}))
            )
            .is_err()
        );
    }
}
