//! `jsonrpc::parse_messages` on arbitrary bytes.
//!
//! Checked: it never panics; when it succeeds,
//! - the memory estimate made before a parse (`wire::estimated_messages_cost`)
//!   reads it too, so nothing parsed goes uncharged;
//! - the batch is not empty, and a body that is not a JSON array gives
//!   exactly one message;
//! - each message serializes (`Message::to_vec`) to JSON that starts with
//!   `{"jsonrpc":"2.0"`, parses back to the same message, and serializes
//!   again to the same bytes;
//! - the messages serialized as a JSON array parse back to the same batch;
//! - parsing through a `serde_json::Value` (`Message::from_value`) agrees,
//!   compared as values (a result is kept as text), but for invalid
//!   strings in ignored fields: see below.

#![no_main]

use libfuzzer_sys::fuzz_target;
use mcp_scoped_http::jsonrpc::{Batch, Message, parse_messages};
use mcp_scoped_http::wire::estimated_messages_cost;

fuzz_target!(|data: &[u8]| {
    let Ok(messages) = parse_messages(data, usize::MAX).map(Batch::into_vec) else {
        return;
    };
    // What is parsed was estimated first, to be charged to the budget: an
    // estimate that cannot read it would leave it built uncharged.
    assert!(
        estimated_messages_cost(data).is_some(),
        "parsed, but the memory estimate cannot read it"
    );
    assert!(!messages.is_empty(), "an empty batch parsed");
    let first = data.iter().copied().find(|b| !b.is_ascii_whitespace());
    if first != Some(b'[') {
        assert_eq!(messages.len(), 1, "a single message gave several");
        match serde_json::from_slice::<serde_json::Value>(data) {
            // Compared as values: a result is kept as text, verbatim from
            // bytes, re-serialized (compact, keys sorted) from a Value.
            Ok(value) => assert_eq!(
                serde_json::to_value(
                    Message::from_value(value).expect("parsed from bytes but not from a Value")
                )
                .expect("a message from a Value serializes"),
                serde_json::to_value(&messages[0]).expect("a message Value-parsable serializes"),
                "bytes and Value disagree"
            ),
            // serde_json skips the fields a message ignores (`jsonrpc`,
            // unknown ones) checking their syntax only: not their strings'
            // UTF-8 or `\u` surrogates, nor their numbers' range. A `Value`
            // keeps everything, so it refuses those. Harmless: nothing of
            // an ignored field is kept.
            Err(e) => {
                let why = e.to_string();
                assert!(
                    [
                        "unicode code point",
                        "surrogate",
                        "hex escape",
                        "number out of range"
                    ]
                    .iter()
                    .any(|kind| why.contains(kind)),
                    "parsed as a message but not as JSON ({e})"
                );
            }
        }
    }
    let mut batch = Vec::from(&b"["[..]);
    for (i, message) in messages.iter().enumerate() {
        let bytes = message.to_vec();
        assert!(
            bytes.starts_with(br#"{"jsonrpc":"2.0""#),
            "serialized without jsonrpc first: {}",
            String::from_utf8_lossy(&bytes)
        );
        let again = parse_messages(&bytes, usize::MAX)
            .map(Batch::into_vec)
            .unwrap_or_else(|e| {
                panic!(
                    "our own output does not parse ({e}): {}",
                    String::from_utf8_lossy(&bytes)
                )
            });
        assert_eq!(
            again.as_slice(),
            std::slice::from_ref(message),
            "round trip"
        );
        assert_eq!(again[0].to_vec(), bytes, "serializing is not stable");
        if i > 0 {
            batch.push(b',');
        }
        batch.extend_from_slice(&bytes);
    }
    batch.push(b']');
    assert_eq!(
        parse_messages(&batch, usize::MAX)
            .map(Batch::into_vec)
            .expect("our batch does not parse"),
        messages,
        "batch round trip"
    );
});
