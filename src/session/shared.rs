//! What connect, era detection and the 2026-07-28 requests share, below
//! all three: the connect step in progress, the modern JSON-RPC error
//! codes, and the reading of a result's `resultType`. The arrows run one
//! way: `connect` uses `era` (the era choice is a value it receives) and
//! both, like `stateless`, use this module, which uses none of them.

use std::sync::atomic::{AtomicU8, Ordering};

use serde_json::Value;

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

/// The connect step in progress, for a connect timeout to name.
#[derive(Default)]
pub(super) struct PhaseCell(AtomicU8);

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
