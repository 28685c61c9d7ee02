//! Inputs the fuzz targets (fuzz/) found, kept as plain tests.

use mcp_scoped_http::jsonrpc::{Batch, Message, parse_messages};

/// A message parsed, serialized and parsed again is the same message.
fn assert_round_trip(input: &[u8]) {
    let messages = parse_messages(input, usize::MAX)
        .map(Batch::into_vec)
        .expect("the input parses");
    for message in &messages {
        let bytes = message.to_vec();
        assert_eq!(
            parse_messages(&bytes, usize::MAX)
                .map(Batch::into_vec)
                .unwrap(),
            std::slice::from_ref(message),
            "{}",
            String::from_utf8_lossy(&bytes)
        );
    }
}

/// fuzz/jsonrpc: an integer past u64 is read as an f64, and serde_json's
/// default float parsing is not correctly rounded: the shortest text of the
/// f64 we hold parsed back to its neighbour, so a `result` we pass on (or
/// serialize) changed in its last bit. Fixed with serde_json's
/// `float_roundtrip` feature.
#[test]
fn floats_survive_a_round_trip() {
    let _shared = crate::support::shared();
    assert_round_trip(br#"{"jsorpc":"2.0","id":1,"result":[0.1,1e-7,123456789012345678908,-9223372036854775808]}"#);
    assert_round_trip(br#"{"jsonrpc":"2.0","id":1,"result":123456789012345678908}"#);
    assert_round_trip(br#"{"jsonrpc":"2.0","method":"m","params":{"x":1.2345678901234567e20}}"#);
}

/// The same message through a `Value` first: the same values (a result is
/// kept as its text, so from bytes it is the server's text verbatim).
#[test]
fn floats_parse_alike_from_bytes_and_from_a_value() {
    let _shared = crate::support::shared();
    let input = br#"{"jsonrpc":"2.0","id":1,"result":123456789012345678908}"#;
    let value: serde_json::Value = serde_json::from_slice(input).unwrap();
    let from_bytes = &parse_messages(input, usize::MAX)
        .map(Batch::into_vec)
        .unwrap()[0];
    assert_eq!(
        serde_json::to_value(Message::from_value(value).unwrap()).unwrap(),
        serde_json::to_value(from_bytes).unwrap()
    );
    assert!(
        String::from_utf8(from_bytes.to_vec())
            .unwrap()
            .contains("123456789012345678908"),
        "a result passes on verbatim"
    );
}

// fuzz/sse_decoder found `buffered_len` after a push far past the limits:
// an event id carried over was copied into every queued event. The decoder
// now holds at most the chunk pushed last and three times the limit (the
// event being decoded, the one decoded and not taken, the last event id).

/// A 6-byte `data\n\n` block after a long id used to cost a whole id: with
/// a 64 KiB limit, a 64 KiB id and then 6 KiB of such blocks held 64 MiB.
#[test]
fn a_carried_id_is_not_copied_into_every_queued_event() {
    let _shared = crate::support::shared();
    use mcp_scoped_http::wire::sse::SseDecoder;

    // Minimized: a 16-byte limit.
    let limit = 16;
    let chunk = [&b"id: 0123456789\n\n"[..], &b"data\n\n".repeat(6)].concat();
    let mut decoder = SseDecoder::with_max_event_size(limit);
    decoder.push(&chunk);
    assert!(decoder.buffered_len() <= chunk.len() + 3 * limit);
    // Scaled up: a 64 KiB id, then 6 KiB of blocks.
    let limit = 64 * 1024;
    let mut decoder = SseDecoder::with_max_event_size(limit);
    let id = format!("id: {}\n\n", "i".repeat(limit - 8));
    decoder.push(id.as_bytes());
    while let Ok(Some(_)) = decoder.next_event() {}
    let chunk = b"data\n\n".repeat(1024);
    decoder.push(&chunk);
    assert!(
        decoder.buffered_len() <= chunk.len() + 3 * limit,
        "{} bytes buffered after a {}-byte push, limit {limit}",
        decoder.buffered_len(),
        chunk.len()
    );
}

/// An event's own id read in an earlier chunk counts against the event's
/// limit with its data: an id and data that together pass it are one event
/// too large, and nothing past the bound is held meanwhile.
#[test]
fn an_events_own_id_counts_against_its_limit() {
    let _shared = crate::support::shared();
    use mcp_scoped_http::wire::sse::{SseDecoder, SseError};

    let limit = 16;
    let mut decoder = SseDecoder::with_max_event_size(limit);
    decoder.push(b"id: 0123456789\n");
    decoder.push(b"data: 0123456789");
    assert!(matches!(
        decoder.next_event(),
        Err(SseError::EventTooLarge { limit: l, .. }) if l == limit
    ));
    decoder.push(b"\n\n");
    assert!(decoder.buffered_len() <= 2 + 3 * limit);
    // Within the limit together, the same event passes.
    let mut decoder = SseDecoder::with_max_event_size(32);
    decoder.push(b"id: 0123456789\n");
    decoder.push(b"data: 0123456789");
    decoder.push(b"\n\n");
    let event = decoder.next_event().unwrap().unwrap();
    assert_eq!(event.id.as_deref(), Some("0123456789"));
}
