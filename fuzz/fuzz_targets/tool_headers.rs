//! 2026-07-28 request metadata from a server's tool definition: the
//! `x-mcp-header` validation of `inputSchema`, and the `Mcp-Param-*`
//! headers of a call (the tool's own `arguments` field serves as the
//! call's arguments), and the value encoding on any string.
//!
//! Checked:
//! - nothing panics, however deep or odd the schema;
//! - every header is named `mcp-param-…`, names are unique ignoring case,
//!   and every value is either the plain value (visible ASCII and inner
//!   spaces) or `=?base64?…?=` that decodes back to it exactly;
//! - `encode_value` of the input (lossily UTF-8) round-trips the same way
//!   and never holds CR, LF or other control characters.

#![no_main]

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use libfuzzer_sys::fuzz_target;
use mcp_scoped_http::wire::metadata::{add_param_headers, encode_value, param_headers};

/// What `value` was encoded from.
fn decoded(value: &http::HeaderValue) -> String {
    let text = value.to_str().expect("header values are visible ASCII");
    assert!(
        !text.bytes().any(|b| b.is_ascii_control() && b != b'\t'),
        "a control character in {text:?}"
    );
    match text
        .strip_prefix("=?base64?")
        .and_then(|rest| rest.strip_suffix("?="))
    {
        Some(encoded) => {
            let bytes = STANDARD.decode(encoded).expect("valid base64");
            String::from_utf8(bytes).expect("UTF-8 inside")
        }
        None => text.to_owned(),
    }
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    assert_eq!(decoded(&encode_value(&text)), text);

    let Ok(tool) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    let Ok(params) = param_headers(&tool) else {
        return;
    };
    let mut names: Vec<String> = params
        .iter()
        .map(|p| p.name().as_str().to_ascii_lowercase())
        .collect();
    for name in &names {
        assert!(name.starts_with("mcp-param-") && name.len() > "mcp-param-".len());
    }
    names.sort();
    names.dedup();
    assert_eq!(names.len(), params.len(), "duplicate header names");

    let mut headers = http::HeaderMap::new();
    if add_param_headers(&params, tool.get("arguments"), &mut headers).is_ok() {
        for (name, value) in &headers {
            assert!(name.as_str().starts_with("mcp-param-"));
            let param = params
                .iter()
                .find(|p| p.name() == name)
                .expect("a header of a parameter");
            let mut at = tool.get("arguments");
            for key in param.path() {
                at = at.and_then(|v| v.get(key));
            }
            let plain = match at.expect("a header only for a value present") {
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            let got = decoded(value);
            // Integers written as 42.0 become "42".
            assert!(
                got == plain || plain.parse::<f64>().ok() == got.parse::<f64>().ok(),
                "{got:?} for {plain:?}"
            );
        }
    }
});
