//! Inputs the fuzz targets (fuzz/) found, kept as plain tests.

use mcp_scoped_http::jsonrpc::{Message, parse_messages};

/// A message parsed, serialized and parsed again is the same message.
fn assert_round_trip(input: &[u8]) {
    let messages = parse_messages(input).expect("the input parses");
    for message in &messages {
        let bytes = message.to_vec();
        assert_eq!(
            parse_messages(&bytes).unwrap(),
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
    assert_round_trip(br#"{"jsorpc":"2.0","id":1,"result":[0.1,1e-7,123456789012345678908,-9223372036854775808]}"#);
    assert_round_trip(br#"{"jsonrpc":"2.0","id":1,"result":123456789012345678908}"#);
    assert_round_trip(br#"{"jsonrpc":"2.0","method":"m","params":{"x":1.2345678901234567e20}}"#);
}

/// The same message through a `Value` first.
#[test]
fn floats_parse_alike_from_bytes_and_from_a_value() {
    let input = br#"{"jsonrpc":"2.0","id":1,"result":123456789012345678908}"#;
    let value: serde_json::Value = serde_json::from_slice(input).unwrap();
    assert_eq!(
        Message::from_value(value).unwrap(),
        parse_messages(input).unwrap()[0]
    );
}

// fuzz/sse_decoder: `buffered_len` after a push can pass `limit + chunk`.
// Not fixed here: src/transport/sse.rs is being reworked (events decoded
// lazily, ids shared), and these are the checks for that work; remove the
// `ignore` (and `MCP_FUZZ_SSE_ALLOW_ID_COPIES` from .ci/fuzz) once they pass.

/// Every event queued by one push holds its own copy of the last event id,
/// carried over from an earlier event: a 6-byte `data\n\n` block costs a
/// whole id. With a 64 KiB limit, a 64 KiB id and then 6 KiB of such blocks
/// hold 64 MiB; with the default 8 MiB limit, one 64 KiB frame after an
/// 8 MiB id would make `push` allocate about 90 GB.
#[test]
#[ignore = "open: SseDecoder copies a carried id into every queued event (src/transport/sse.rs)"]
fn a_carried_id_is_not_copied_into_every_queued_event() {
    use mcp_scoped_http::wire::sse::SseDecoder;

    // Minimized: a 16-byte limit.
    let limit = 16;
    let chunk = [&b"id: 0123456789\n\n"[..], &b"data\n\n".repeat(6)].concat();
    let mut decoder = SseDecoder::with_max_event_size(limit);
    decoder.push(&chunk);
    assert!(
        decoder.buffered_len() <= limit + chunk.len(),
        "{} bytes buffered after a {}-byte push, limit {limit}",
        decoder.buffered_len(),
        chunk.len()
    );

    // Scaled up.
    let limit = 64 * 1024;
    let mut decoder = SseDecoder::with_max_event_size(limit);
    let id = format!("id: {}\n\n", "i".repeat(limit - 4));
    decoder.push(id.as_bytes());
    while let Ok(Some(_)) = decoder.next_event() {}
    let chunk = b"data\n\n".repeat(1024);
    decoder.push(&chunk);
    assert!(
        decoder.buffered_len() <= limit + chunk.len(),
        "{} bytes buffered after a {}-byte push, limit {limit}",
        decoder.buffered_len(),
        chunk.len()
    );
}

/// Bounded, but past `limit + chunk` all the same: an event's own id read
/// in an earlier chunk is held outside the counted buffers, then counted
/// again when the event is queued.
#[test]
#[ignore = "open: an id read in an earlier chunk is not counted until its event is queued (src/transport/sse.rs)"]
fn an_id_from_an_earlier_chunk_stays_within_limit_plus_chunk() {
    use mcp_scoped_http::wire::sse::SseDecoder;

    let limit = 16;
    let mut decoder = SseDecoder::with_max_event_size(limit);
    decoder.push(b"id: 0123456789\n");
    decoder.push(b"data: 0123456789");
    assert_eq!(decoder.next_event(), Ok(None));
    decoder.push(b"\n\n");
    assert!(
        decoder.buffered_len() <= limit + 2,
        "{} bytes buffered after a 2-byte push, limit {limit}",
        decoder.buffered_len()
    );
}
