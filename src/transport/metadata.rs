//! Request metadata of 2026-07-28: the `_meta` fields every request
//! carries, and the headers mirrored from the body (`Mcp-Method`,
//! `Mcp-Name`, `Mcp-Param-*` from tool parameters marked `x-mcp-header`),
//! with the spec's value encoding. Public with the feature `wire`, for
//! tests and fuzzing.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use http::{HeaderMap, HeaderName, HeaderValue};
use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::headers::{MCP_METHOD, MCP_NAME};

/// The `_meta` key of the request's revision.
pub(crate) const META_PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
/// The `_meta` key of the client's capabilities.
pub(crate) const META_CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
/// The `_meta` key of the client's name and version.
pub(crate) const META_CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";
/// The `_meta` key of the least severe log level the client asks for.
pub(crate) const META_LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";

/// The `_meta` fields every request of 2026-07-28 carries: the client's
/// `clientInfo` and `capabilities`, and the log level it asks for, if any
/// (without it, the server sends no log message).
pub(crate) fn client_meta(
    client_info: &Value,
    capabilities: &Value,
    log_level: Option<&str>,
) -> std::sync::Arc<Map<String, Value>> {
    let mut meta = Map::new();
    meta.insert(META_CLIENT_INFO.into(), client_info.clone());
    // 2026-07-28 has no `notifications/roots/list_changed`: its roots
    // capability is `{}` (a server asks for roots when it needs them).
    let mut capabilities = capabilities.clone();
    if let Some(roots) = capabilities.get_mut("roots").and_then(Value::as_object_mut) {
        roots.remove("listChanged");
    }
    meta.insert(META_CLIENT_CAPABILITIES.into(), capabilities);
    if let Some(level) = log_level {
        meta.insert(META_LOG_LEVEL.into(), Value::from(level));
    }
    std::sync::Arc::new(meta)
}

/// The largest integer JavaScript represents exactly; `x-mcp-header`
/// integers must stay within it.
const MAX_SAFE_INTEGER: i64 = (1 << 53) - 1;

const SENTINEL_PREFIX: &str = "=?base64?";
const SENTINEL_SUFFIX: &str = "?=";

/// Encodes a value for `Mcp-Name` or `Mcp-Param-*`: as is when it is plain
/// visible ASCII (spaces inside allowed), else (non-ASCII, control
/// characters, leading or trailing whitespace, or a value that looks like
/// the sentinel itself) as `=?base64?…?=` of its UTF-8 bytes.
pub fn encode_value(value: &str) -> HeaderValue {
    let visible = value.bytes().all(|b| (0x20..=0x7e).contains(&b));
    let padded = value.starts_with([' ', '\t']) || value.ends_with([' ', '\t']);
    let looks_encoded = value.starts_with(SENTINEL_PREFIX) && value.ends_with(SENTINEL_SUFFIX);
    let plain = visible && !padded && !looks_encoded;
    let text = if plain {
        value.to_owned()
    } else {
        format!(
            "{SENTINEL_PREFIX}{}{SENTINEL_SUFFIX}",
            STANDARD.encode(value)
        )
    };
    // Plain values are visible ASCII and spaces; base64 is too.
    HeaderValue::from_str(&text).expect("visible ASCII is a valid header value")
}

/// The headers every 2026-07-28 request carries beyond the version:
/// `Mcp-Method`, and `Mcp-Name` for the methods that name a target.
pub(crate) fn standard_headers(method: &str, params: Option<&Value>, headers: &mut HeaderMap) {
    if let Ok(value) = HeaderValue::from_str(method) {
        headers.insert(MCP_METHOD, value);
    }
    let name_field = match method {
        "tools/call" | "prompts/get" => "name",
        "resources/read" => "uri",
        _ => return,
    };
    if let Some(name) = params
        .and_then(|p| p.get(name_field))
        .and_then(Value::as_str)
    {
        headers.insert(MCP_NAME, encode_value(name));
    }
}

/// `params` with `_meta` holding `meta`'s fields and the protocol
/// `version` (the caller's own `_meta` keys are kept; ours win), as a
/// value: [`WithMeta`] read back.
#[cfg(test)]
pub(crate) fn with_meta(
    params: Option<&Value>,
    meta: Option<&Map<String, Value>>,
    version: &'static str,
) -> Value {
    serde_json::to_value(WithMeta::new(params, meta, version)).expect("a map of values")
}

/// `params` as a 2026-07-28 request sends them: `_meta` holding `meta`'s
/// fields and the protocol `version`, the caller's own `_meta` keys kept
/// where ours do not replace them. Serialized straight from what it
/// borrows: nothing of the client's identity is copied per request.
pub(crate) struct WithMeta<'a> {
    params: Option<&'a Map<String, Value>>,
    meta: Option<&'a Map<String, Value>>,
    version: &'static str,
}

impl<'a> WithMeta<'a> {
    /// `params` that are not an object are sent as `{}` plus `_meta`, as
    /// before.
    pub(crate) fn new(
        params: Option<&'a Value>,
        meta: Option<&'a Map<String, Value>>,
        version: &'static str,
    ) -> Self {
        WithMeta {
            params: params.and_then(Value::as_object),
            meta,
            version,
        }
    }
}

impl Serialize for WithMeta<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        for (key, value) in self.params.into_iter().flatten() {
            if key != "_meta" {
                map.serialize_entry(key, value)?;
            }
        }
        let theirs = self
            .params
            .and_then(|params| params.get("_meta"))
            .and_then(Value::as_object);
        map.serialize_entry(
            "_meta",
            &Meta {
                theirs,
                ours: self.meta,
                version: self.version,
            },
        )?;
        map.end()
    }
}

/// The `_meta` object of [`WithMeta`]: theirs, then ours, then the
/// revision, each key once (the later source wins).
struct Meta<'a> {
    theirs: Option<&'a Map<String, Value>>,
    ours: Option<&'a Map<String, Value>>,
    version: &'static str,
}

impl Serialize for Meta<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let ours_has = |key: &str| self.ours.is_some_and(|ours| ours.contains_key(key));
        let mut map = serializer.serialize_map(None)?;
        for (key, value) in self.theirs.into_iter().flatten() {
            if key != META_PROTOCOL_VERSION && !ours_has(key) {
                map.serialize_entry(key, value)?;
            }
        }
        for (key, value) in self.ours.into_iter().flatten() {
            if key != META_PROTOCOL_VERSION {
                map.serialize_entry(key, value)?;
            }
        }
        map.serialize_entry(META_PROTOCOL_VERSION, self.version)?;
        map.end()
    }
}

/// One tool parameter mirrored into a header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParamHeader {
    /// The chain of `properties` keys from the schema root.
    path: Vec<String>,
    name: HeaderName,
}

/// The `x-mcp-header` annotations of a tool, validated as the spec asks;
/// `Err` with the reason when the tool must be left out of the list.
pub fn param_headers(tool: &Value) -> std::result::Result<Vec<ParamHeader>, String> {
    let mut found = Vec::new();
    if let Some(schema) = tool.get("inputSchema") {
        walk(schema, Some(&mut Vec::new()), &mut found)?;
    }
    // A set, not a scan of a list: a hostile tool may annotate tens of
    // thousands of parameters, and this runs on the runtime's thread, where
    // no timeout can interrupt it. `HeaderName`s are lowercase already.
    let mut seen = std::collections::HashSet::with_capacity(found.len());
    for header in &found {
        if !seen.insert(header.name.as_str()) {
            return Err(format!(
                "x-mcp-header {:?} is used twice",
                header_suffix(&header.name)
            ));
        }
    }
    Ok(found)
}

#[cfg_attr(not(feature = "wire"), allow(dead_code))]
impl ParamHeader {
    /// The header's name, `mcp-param-…` (lowercase).
    pub fn name(&self) -> &HeaderName {
        &self.name
    }

    /// The chain of `properties` keys from the schema root to the
    /// parameter.
    pub fn path(&self) -> &[String] {
        &self.path
    }
}

fn header_suffix(name: &HeaderName) -> &str {
    &name.as_str()["mcp-param-".len()..]
}

/// Walks a schema: `path` is the `properties` chain that reaches it from
/// the root, `None` when it is not statically reachable (under `items`,
/// a composition, a condition, `$defs`...), where an annotation is invalid.
fn walk(
    schema: &Value,
    path: Option<&mut Vec<String>>,
    found: &mut Vec<ParamHeader>,
) -> std::result::Result<(), String> {
    let Value::Object(map) = schema else {
        if let Value::Array(items) = schema {
            for item in items {
                walk(item, None, found)?;
            }
        }
        return Ok(());
    };
    let mut path = path;
    if let Some(annotation) = map.get("x-mcp-header") {
        let Some(path) = path.as_deref() else {
            return Err("x-mcp-header on a parameter that is not reachable \
                        through `properties` alone"
                .into());
        };
        found.push(annotated(annotation, map, path)?);
    }
    for (key, value) in map {
        match key.as_str() {
            "x-mcp-header" => {}
            // Values, not schemas: what they hold is data.
            "default" | "const" | "enum" | "examples" => {}
            "properties" if path.is_some() => {
                let Value::Object(properties) = value else {
                    continue;
                };
                for (name, sub) in properties {
                    let path = path.as_deref_mut().expect("checked above");
                    path.push(name.clone());
                    let outcome = walk(sub, Some(path), found);
                    path.pop();
                    outcome?;
                }
            }
            _ => walk(value, None, found)?,
        }
    }
    Ok(())
}

fn annotated(
    annotation: &Value,
    schema: &Map<String, Value>,
    path: &[String],
) -> std::result::Result<ParamHeader, String> {
    let Some(name) = annotation.as_str() else {
        return Err("x-mcp-header is not a string".into());
    };
    let valid_token = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
    if !valid_token {
        return Err(format!("x-mcp-header {name:?} is not an HTTP token"));
    }
    if path.is_empty() {
        return Err("x-mcp-header on the schema root".into());
    }
    match schema.get("type").and_then(Value::as_str) {
        Some("string" | "integer" | "boolean") => {}
        _ => {
            return Err(format!(
                "x-mcp-header {name:?} is on a parameter that is not a string, integer or boolean"
            ));
        }
    }
    let name = HeaderName::from_bytes(format!("mcp-param-{name}").as_bytes())
        .map_err(|_| format!("x-mcp-header {name:?} is not a valid header name"))?;
    Ok(ParamHeader {
        path: path.to_vec(),
        name,
    })
}

/// Adds the `Mcp-Param-*` headers of a call with `arguments`: a value
/// absent or null leaves its header out; a value that is not a string, a
/// safe integer (within ±(2^53 − 1)) or a boolean is an error.
pub fn add_param_headers(
    params: &[ParamHeader],
    arguments: Option<&Value>,
    headers: &mut HeaderMap,
) -> Result<()> {
    for param in params {
        let mut value = arguments;
        for key in &param.path {
            value = value.and_then(|v| v.get(key));
        }
        let text = match value {
            None | Some(Value::Null) => continue,
            Some(Value::String(s)) => s.clone(),
            Some(Value::Bool(b)) => b.to_string(),
            Some(Value::Number(n)) => match (n.as_i64(), n.as_f64()) {
                // `unsigned_abs`: `i64::MIN` has no `abs()` (a panic in
                // debug, itself in release).
                (Some(i), _) if i.unsigned_abs() <= MAX_SAFE_INTEGER.unsigned_abs() => {
                    i.to_string()
                }
                // 42.0 is the integer 42.
                (None, Some(f)) if f.fract() == 0.0 && f.abs() <= MAX_SAFE_INTEGER as f64 => {
                    (f as i64).to_string()
                }
                _ => return Err(not_mirrorable(param)),
            },
            Some(_) => return Err(not_mirrorable(param)),
        };
        headers.insert(param.name.clone(), encode_value(&text));
    }
    Ok(())
}

fn not_mirrorable(param: &ParamHeader) -> Error {
    Error::builder(format!(
        "the argument for header {} is not a string, a safe integer or a boolean",
        param.name
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The duplicate check is linear: 200 000 annotated parameters (about
    /// 9 MiB of schema, a page a hostile server can send) are read well
    /// inside the bound, where a scan of a list took minutes. The bound
    /// guards against a hang; it measures nothing.
    #[test]
    fn many_annotated_parameters_are_checked_in_linear_time() {
        const N: usize = 200_000;
        let mut properties = Map::new();
        for i in 0..N {
            properties.insert(
                format!("p{i}"),
                json!({"type": "string", "x-mcp-header": format!("h{i}")}),
            );
        }
        properties.insert(
            "dup".into(),
            json!({"type": "string", "x-mcp-header": "H7"}),
        );
        let tool =
            json!({"name": "wide", "inputSchema": {"type": "object", "properties": properties}});
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = done.send(param_headers(&tool));
        });
        let verdict = finished
            .recv_timeout(std::time::Duration::from_secs(60))
            .expect("param_headers hung");
        assert!(verdict.unwrap_err().contains("\"h7\" is used twice"));
    }

    #[test]
    fn values_are_plain_or_base64_as_the_spec_shows() {
        let cases = [
            ("us-west1", "us-west1"),
            ("Hello, 世界", "=?base64?SGVsbG8sIOS4lueVjA==?="),
            (" padded ", "=?base64?IHBhZGRlZCA=?="),
            ("line1\nline2", "=?base64?bGluZTEKbGluZTI=?="),
            ("=?base64?literal?=", "=?base64?PT9iYXNlNjQ/bGl0ZXJhbD89?="),
            ("a b", "a b"),
            // An empty value is sent empty, not left out.
            ("", ""),
        ];
        for (value, want) in cases {
            assert_eq!(encode_value(value), want, "{value:?}");
        }
    }

    #[test]
    fn standard_headers_name_the_method_and_target() {
        let mut headers = HeaderMap::new();
        standard_headers(
            "resources/read",
            Some(&json!({"uri": "file:///x y"})),
            &mut headers,
        );
        assert_eq!(headers[MCP_METHOD], "resources/read");
        assert_eq!(headers[MCP_NAME], "file:///x y");
        let mut headers = HeaderMap::new();
        standard_headers("tools/list", None, &mut headers);
        assert!(!headers.contains_key(MCP_NAME));
    }

    #[test]
    fn meta_is_merged_into_params() {
        let meta = json!({ "io.example/client": {"name": "c"}, "progressToken": 1 });
        let meta = meta.as_object();
        let merged = with_meta(
            Some(&json!({"a": 1, "_meta": {"progressToken": 7, "mine": true}})),
            meta,
            "2026-07-28",
        );
        assert_eq!(
            merged,
            json!({"a": 1, "_meta": {
                "progressToken": 1,
                "mine": true,
                "io.example/client": {"name": "c"},
                META_PROTOCOL_VERSION: "2026-07-28",
            }})
        );
        assert_eq!(
            with_meta(Some(&json!({"_meta": 3})), None, "2026-07-28"),
            json!({"_meta": { META_PROTOCOL_VERSION: "2026-07-28" }})
        );
    }

    /// Serialized, not read back into a map (which would hide a key sent
    /// twice): every key once, ours over theirs, the revision last.
    #[test]
    fn meta_is_sent_with_each_key_once() {
        let ours = json!({"progressToken": 1, META_PROTOCOL_VERSION: "ours"});
        let params = json!({"a": 1, "_meta": {
            "progressToken": 7, META_PROTOCOL_VERSION: "theirs", "mine": true
        }});
        let text = serde_json::to_string(&WithMeta::new(
            Some(&params),
            ours.as_object(),
            "2026-07-28",
        ))
        .unwrap();
        for key in [
            "\"progressToken\"",
            META_PROTOCOL_VERSION,
            "\"_meta\"",
            "\"mine\"",
        ] {
            assert_eq!(text.matches(key).count(), 1, "{key} in {text}");
        }
        let sent: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            sent,
            json!({"a": 1, "_meta": {
                "progressToken": 1, "mine": true, META_PROTOCOL_VERSION: "2026-07-28"
            }})
        );
        // Not an object: `{}` with our `_meta`, as before.
        let text = serde_json::to_string(&WithMeta::new(Some(&json!([1])), None, "v")).unwrap();
        assert_eq!(
            text,
            format!(r#"{{"_meta":{{"{META_PROTOCOL_VERSION}":"v"}}}}"#)
        );
    }

    fn tool(schema: Value) -> Value {
        json!({"name": "t", "inputSchema": schema})
    }

    #[test]
    fn annotations_on_reachable_primitives_are_mirrored() {
        let t = tool(json!({
            "type": "object",
            "properties": {
                "region": {"type": "string", "x-mcp-header": "Region"},
                "opts": {"type": "object", "properties": {
                    "n": {"type": "integer", "x-mcp-header": "N"},
                    "x-mcp-header": {"type": "string"}
                }},
                "flag": {"type": "boolean", "x-mcp-header": "Flag",
                         "default": {"x-mcp-header": "ignored"}}
            }
        }));
        let params = param_headers(&t).unwrap();
        assert_eq!(params.len(), 3);
        let mut headers = HeaderMap::new();
        add_param_headers(
            &params,
            Some(&json!({"region": "eu 1", "opts": {"n": 42.0}, "flag": null})),
            &mut headers,
        )
        .unwrap();
        assert_eq!(headers["mcp-param-region"], "eu 1");
        assert_eq!(headers["mcp-param-n"], "42");
        assert!(!headers.contains_key("mcp-param-flag"));
        assert!(
            add_param_headers(
                &params,
                Some(&json!({"region": ["x"]})),
                &mut HeaderMap::new()
            )
            .is_err()
        );
        assert!(
            add_param_headers(
                &params,
                Some(&json!({"opts": {"n": 9007199254740993_i64}})),
                &mut HeaderMap::new()
            )
            .is_err()
        );
    }

    /// `i64::MIN` has no absolute value in an `i64`: `abs()` panicked in
    /// debug builds and let it through in release.
    #[test]
    fn integers_past_the_safe_range_are_refused_at_both_ends() {
        let t = tool(json!({"properties": {"n": {"type": "integer", "x-mcp-header": "N"}}}));
        let params = param_headers(&t).unwrap();
        let header = |n: Value| {
            let mut headers = HeaderMap::new();
            add_param_headers(&params, Some(&json!({ "n": n })), &mut headers)
                .map(|()| headers["mcp-param-n"].to_str().unwrap().to_owned())
        };
        for refused in [
            json!(i64::MIN),
            json!(i64::MAX),
            json!(u64::MAX),
            json!(-MAX_SAFE_INTEGER - 1),
            json!(MAX_SAFE_INTEGER + 1),
        ] {
            assert!(header(refused.clone()).is_err(), "{refused}");
        }
        assert_eq!(
            header(json!(-MAX_SAFE_INTEGER)).unwrap(),
            "-9007199254740991"
        );
        assert_eq!(header(json!(MAX_SAFE_INTEGER)).unwrap(), "9007199254740991");
    }

    #[test]
    fn invalid_annotations_reject_the_tool() {
        let bad = [
            json!({"properties": {"x": {"type": "number", "x-mcp-header": "X"}}}),
            json!({"properties": {"x": {"x-mcp-header": "X"}}}),
            json!({"properties": {"x": {"type": "string", "x-mcp-header": ""}}}),
            json!({"properties": {"x": {"type": "string", "x-mcp-header": "A B"}}}),
            json!({"properties": {"x": {"type": "string", "x-mcp-header": "Tab\t"}}}),
            json!({"properties": {
                "a": {"type": "string", "x-mcp-header": "Dup"},
                "b": {"type": "string", "x-mcp-header": "dup"}
            }}),
            json!({"properties": {"list": {"type": "array",
                "items": {"type": "string", "x-mcp-header": "X"}}}}),
            json!({"properties": {"x": {"oneOf": [{"type": "string", "x-mcp-header": "X"}]}}}),
            json!({"$defs": {"d": {"type": "string", "x-mcp-header": "X"}},
                   "properties": {"x": {"$ref": "#/$defs/d"}}}),
            json!({"x-mcp-header": "Root", "type": "string"}),
        ];
        for schema in bad {
            assert!(param_headers(&tool(schema.clone())).is_err(), "{schema}");
        }
        assert_eq!(
            param_headers(&tool(json!({"properties": {"q": {"type": "string"}}}))).unwrap(),
            vec![]
        );
        assert_eq!(
            param_headers(&json!({"name": "no schema"})).unwrap(),
            vec![]
        );
    }
}
