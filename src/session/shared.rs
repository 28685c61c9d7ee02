//! What connect, era detection and the 2026-07-28 requests share, below
//! all three: the connect step in progress, the modern JSON-RPC error
//! codes, and the reading of a result's `resultType`. The arrows run one
//! way: `connect` uses `era` (the era choice is a value it receives) and
//! both, like `stateless`, use this module, which uses none of them.

use std::sync::atomic::{AtomicU8, Ordering};

use serde_json::{Map, Value};

use crate::error::{ConnectPhase, Error, Result};
use crate::transport::ProtocolVersion;

/// `HeaderMismatch`: the request metadata headers do not match the body.
pub(crate) const HEADER_MISMATCH: i64 = -32020;
/// A capability the request needs was not declared.
pub(crate) const MISSING_CAPABILITY: i64 = -32021;
/// `UnsupportedProtocolVersion`, with `data.supported`.
pub(crate) const UNSUPPORTED_VERSION: i64 = -32022;

/// The `_meta` key of the server's name and version in a discover result.
pub(crate) const SERVER_INFO_META: &str = "io.modelcontextprotocol/serverInfo";

/// The prefix of the `_meta` keys the protocol reserves (the crate writes
/// `io.modelcontextprotocol/protocolVersion` and friends in 2026-07-28):
/// a caller's extra `_meta` may not use it.
pub(crate) const RESERVED_META_PREFIX: &str = "io.modelcontextprotocol/";

/// The one place extra `_meta` fields join a request's params: `extra`'s
/// fields are added to `params._meta` (made when absent), over any of the
/// same name the params already carry. Keys under
/// [`RESERVED_META_PREFIX`] are refused: the crate writes those itself (in
/// 2026-07-28, at the transport, where the crate's always win). Nothing to
/// add leaves the params as they are. Params or a `_meta` that is no
/// object cannot take fields: refused.
pub(crate) fn request_meta(
    params: Option<Value>,
    extra: Map<String, Value>,
) -> Result<Option<Value>> {
    if extra.is_empty() {
        return Ok(params);
    }
    if let Some(key) = extra.keys().find(|k| k.starts_with(RESERVED_META_PREFIX)) {
        let shown: String = key.chars().take(80).collect();
        return Err(Error::builder(format!(
            "the extra _meta key {shown:?} is reserved for the protocol \
             (keys under {RESERVED_META_PREFIX} are written by the session)"
        )));
    }
    let mut params = match params {
        None => Map::new(),
        Some(Value::Object(map)) => map,
        Some(_) => {
            return Err(Error::builder(
                "extra _meta needs params that are a JSON object (or none)",
            ));
        }
    };
    let meta = params
        .entry("_meta")
        .or_insert_with(|| Value::Object(Map::new()));
    let Value::Object(meta) = meta else {
        return Err(Error::builder(
            "the params' _meta is not a JSON object: extra _meta cannot join it",
        ));
    };
    meta.extend(extra);
    Ok(Some(Value::Object(params)))
}

/// The connect step in progress, for a connect timeout to name.
#[derive(Default)]
pub(crate) struct PhaseCell(AtomicU8);

impl PhaseCell {
    const STEPS: [ConnectPhase; 4] = [
        ConnectPhase::Connect,
        ConnectPhase::Initialize,
        ConnectPhase::Initialized,
        ConnectPhase::Discovery,
    ];

    pub(super) fn set(&self, phase: ConnectPhase) {
        let index = Self::STEPS.iter().position(|p| *p == phase).unwrap_or(0);
        self.0.store(index as u8, Ordering::Relaxed);
    }

    pub(super) fn get(&self) -> ConnectPhase {
        Self::STEPS[usize::from(self.0.load(Ordering::Relaxed))]
    }
}

/// A JSON-RPC error only a 2026-07-28 server sends.
pub(super) fn modern_error(error: &Error) -> bool {
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

/// A result's `resultType`: `None` when absent or null (complete, as
/// before 2026-07-28). One that is no string is junk, not an absent one:
/// refused.
pub(super) fn result_type<'a>(result: &'a Value, method: &str) -> Result<Option<&'a str>> {
    match result.get("resultType") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(kind)) => Ok(Some(kind.as_str())),
        Some(other) => {
            let shown: String = other.to_string().chars().take(40).collect();
            Err(Error::protocol(format!(
                "the {method} result has resultType {shown}, which is not a string"
            )))
        }
    }
}

/// A result's `resultType` must be `complete` (or absent, as before
/// 2026-07-28) where nothing else is allowed.
pub(crate) fn check_complete(result: &Value, method: &str) -> Result<()> {
    match result_type(result, method)? {
        None | Some("complete") => Ok(()),
        Some(kind) => {
            let shown: String = kind.chars().take(40).collect();
            Err(Error::protocol(format!(
                "the {method} result has resultType {shown:?}, where only \"complete\" is allowed"
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn map(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(map) => map,
            _ => unreachable!(),
        }
    }

    #[test]
    fn extra_meta_joins_the_params_meta() {
        let params = json!({"name": "t", "_meta": {"mine": 1, "k": "old"}});
        let merged = request_meta(Some(params), map(json!({"k": "new", "x": true}))).unwrap();
        assert_eq!(
            merged,
            Some(json!({"name": "t", "_meta": {"mine": 1, "k": "new", "x": true}}))
        );
        assert_eq!(
            request_meta(None, map(json!({"x": 1}))).unwrap(),
            Some(json!({"_meta": {"x": 1}}))
        );
        // Nothing to add: untouched, no empty _meta.
        assert_eq!(request_meta(None, Map::new()).unwrap(), None);
        assert_eq!(
            request_meta(Some(json!([1])), Map::new()).unwrap(),
            Some(json!([1]))
        );
    }

    #[test]
    fn reserved_keys_and_shapeless_params_are_refused() {
        let reserved = map(json!({"io.modelcontextprotocol/protocolVersion": "x"}));
        let error = request_meta(None, reserved).unwrap_err();
        assert!(error.is_builder(), "{error}");
        assert!(error.to_string().contains("reserved"), "{error}");
        let error = request_meta(Some(json!([1])), map(json!({"x": 1}))).unwrap_err();
        assert!(error.is_builder(), "{error}");
        let error = request_meta(Some(json!({"_meta": 3})), map(json!({"x": 1}))).unwrap_err();
        assert!(error.to_string().contains("not a JSON object"), "{error}");
    }
}
