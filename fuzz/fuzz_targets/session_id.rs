//! `SessionId::new` on arbitrary strings (the bytes, lossily UTF-8).
//!
//! Checked:
//! - it accepts exactly 1..=512 bytes of visible ASCII (0x21..=0x7E), by
//!   our own predicate, and `expose()` gives the value back;
//! - `Debug` and `Display` of an accepted id are the same for every value
//!   (so they show nothing of it), and for values of 4 bytes or more do not
//!   contain it (unless the fixed redaction text itself does, as for "edac");
//! - a refusal is a protocol error whose `Display` and `Debug` depend only
//!   on the value's length and the offset of its first bad byte (checked
//!   against a stand-in of `x`s with a space there), so they never quote it.

#![no_main]

use libfuzzer_sys::fuzz_target;
use mcp_scoped_http::SessionId;

const MAX: usize = 512;

fn first_bad(value: &str) -> Option<usize> {
    value.bytes().position(|b| !(0x21..=0x7e).contains(&b))
}

/// A value that fails the same way as `value`, made of `x`s and a space.
fn stand_in(value: &str) -> String {
    let mut bytes = vec![b'x'; value.len()];
    if let Some(at) = first_bad(value).filter(|_| value.len() <= MAX) {
        bytes[at] = b' ';
    }
    String::from_utf8(bytes).unwrap()
}

fn shows(text: &str, value: &str, fixed: &str) -> bool {
    value.len() >= 4 && text.contains(value) && !fixed.contains(value)
}

fuzz_target!(|data: &[u8]| {
    let value = String::from_utf8_lossy(data).into_owned();
    let valid = (1..=MAX).contains(&value.len()) && first_bad(&value).is_none();
    match SessionId::new(value.clone()) {
        Ok(id) => {
            assert!(valid, "accepted an invalid session id");
            assert_eq!(id.expose(), value);
            let reference = SessionId::new("reference-id").unwrap();
            let (debug, display) = (format!("{id:?}"), format!("{id}"));
            let (fixed_debug, fixed_display) = (format!("{reference:?}"), format!("{reference}"));
            assert_eq!(debug, fixed_debug, "Debug depends on the value");
            assert_eq!(display, fixed_display, "Display depends on the value");
            assert!(!shows(&debug, &value, &fixed_debug), "Debug shows the id");
            assert!(
                !shows(&display, &value, &fixed_display),
                "Display shows the id"
            );
        }
        Err(error) => {
            assert!(!valid, "refused a valid session id: {error}");
            assert!(error.is_protocol(), "not a protocol error: {error:?}");
            let reference = SessionId::new(stand_in(&value)).unwrap_err();
            assert_eq!(
                error.to_string(),
                reference.to_string(),
                "Display quotes the value"
            );
            assert_eq!(
                format!("{error:?}"),
                format!("{reference:?}"),
                "Debug quotes the value"
            );
        }
    }
});
