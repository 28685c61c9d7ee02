//! `HeaderHook::header(name, value)` and `HeaderHook::bearer(token)` on
//! arbitrary strings.
//!
//! The input's first byte is the name's length (capped by what is there);
//! the name is the next bytes, the value the rest, each lossily UTF-8.
//!
//! Checked:
//! - neither panics; `header` accepts exactly a valid name (1..=65535
//!   token characters, RFC 9110) with a valid value (bytes >= 0x20 but not
//!   DEL, or tab; non-ASCII UTF-8 included), and `bearer` exactly a valid
//!   value, by our own predicates;
//! - the hook's `Debug` is the same as with a stand-in value (so it shows
//!   no value) and, for values of 4 bytes or more, does not contain it;
//! - an error's `Display` and `Debug` are the same as with a stand-in value
//!   that fails the same way, so they never quote the value.

#![no_main]

use libfuzzer_sys::fuzz_target;
use mcp_scoped_http::HeaderHook;

fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

fn valid_name(name: &str) -> bool {
    (1..=65535).contains(&name.len()) && name.bytes().all(is_tchar)
}

fn valid_value(value: &str) -> bool {
    value
        .bytes()
        .all(|b| (b >= 0x20 && b != 0x7f) || b == b'\t')
}

/// Debug and Display of a result, whichever it is.
fn texts(result: &mcp_scoped_http::Result<HeaderHook>) -> (String, String) {
    match result {
        Ok(hook) => (format!("{hook:?}"), String::new()),
        Err(error) => (format!("{error:?}"), error.to_string()),
    }
}

/// `result` (for `value`) reads exactly as `reference` (for a stand-in),
/// and shows no value of 4 bytes or more.
fn assert_redacted(
    result: &mcp_scoped_http::Result<HeaderHook>,
    reference: &mcp_scoped_http::Result<HeaderHook>,
    value: &str,
) {
    let (debug, display) = texts(result);
    let (fixed_debug, fixed_display) = texts(reference);
    assert_eq!(debug, fixed_debug, "Debug depends on the value");
    assert_eq!(display, fixed_display, "Display depends on the value");
    if value.len() >= 4 && !fixed_debug.contains(value) && !fixed_display.contains(value) {
        assert!(!debug.contains(value), "Debug shows the value");
        assert!(!display.contains(value), "Display shows the value");
    }
}

fuzz_target!(|data: &[u8]| {
    let split =
        1 + usize::from(data.first().copied().unwrap_or(0)).min(data.len().saturating_sub(1));
    let split = split.min(data.len());
    let name = String::from_utf8_lossy(&data[1.min(data.len())..split]).into_owned();
    let value = String::from_utf8_lossy(&data[split..]).into_owned();

    let result = HeaderHook::header(&name, &value);
    let expected = valid_name(&name) && valid_value(&value);
    assert_eq!(
        result.is_ok(),
        expected,
        "header({name:?}, ..) gave {:?}",
        texts(&result)
    );
    if let Err(error) = &result {
        assert!(error.is_builder(), "not a builder error: {error:?}");
    }
    let stand_in = if valid_value(&value) { "v" } else { "\n" };
    assert_redacted(&result, &HeaderHook::header(&name, stand_in), &value);

    let bearer = HeaderHook::bearer(&value);
    assert_eq!(bearer.is_ok(), valid_value(&value), "bearer(..)");
    if let Err(error) = &bearer {
        assert!(error.is_builder(), "not a builder error: {error:?}");
    }
    assert_redacted(&bearer, &HeaderHook::bearer(stand_in), &value);
});
