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
