//! A list result page read into catalog entries (`wire::parse_page`): the
//! page is kept as text and each entry is a span of it, named by a key
//! read without building the entry.
//!
//! The first byte picks the list (tools by `name`, resources by `uri`,
//! templates by `uriTemplate`); the rest, when it is JSON, is the result.
//!
//! Checked:
//! - nothing panics, whatever the text;
//! - a result that is not an object is an error;
//! - when the result reads as a `Value`, the page reads too and agrees with
//!   it: the field's array (its last occurrence) entry for entry, each
//!   entry's text being that element, its key the element's key field
//!   when that is a string, and `nextCursor` (absent and `null` alike);
//! - every entry's text is JSON on its own, whether or not it reads.

#![no_main]

use libfuzzer_sys::fuzz_target;
use mcp_scoped_http::wire::parse_page;
use serde_json::Value;
use serde_json::value::RawValue;

const LISTS: [(&str, &str); 3] = [
    ("tools", "name"),
    ("resources", "uri"),
    ("resourceTemplates", "uriTemplate"),
];

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let (field, key_field) = LISTS[usize::from(pick) % LISTS.len()];
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    let Ok(result) = RawValue::from_string(text.to_owned()) else {
        return;
    };
    let page = parse_page(&result, field, key_field);
    if let Ok(page) = &page {
        for entry in page.entries.iter().flatten() {
            serde_json::from_str::<&RawValue>(entry.json()).expect("an entry is JSON on its own");
        }
    }
    let Ok(Value::Object(object)) = serde_json::from_str::<Value>(text) else {
        assert!(page.is_err() || text.trim_start().starts_with('{'));
        return;
    };
    let page = page.expect("an object a Value holds reads as a page");
    let expected = object.get(field).and_then(Value::as_array);
    match (&page.entries, expected) {
        (None, None) => {}
        (Some(entries), Some(elements)) => {
            assert_eq!(entries.len(), elements.len());
            for (entry, element) in entries.iter().zip(elements) {
                let read: Value = entry.parse().expect("an element a Value holds");
                assert_eq!(&read, element);
                assert_eq!(**entry, *element);
                assert_eq!(entry.key(), element.get(key_field).and_then(Value::as_str));
            }
        }
        (entries, elements) => panic!("entries {entries:?}, the Value's {elements:?}"),
    }
    let cursor = object.get("nextCursor").filter(|c| !c.is_null());
    assert_eq!(page.next_cursor.as_ref(), cursor);
});
