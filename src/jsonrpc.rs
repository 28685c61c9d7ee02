//! JSON-RPC 2.0 messages as MCP uses them.
//!
//! Lenient on input, exact on output:
//!
//! - Parsing ignores unknown top-level fields and does not insist on
//!   `"jsonrpc": "2.0"`. `params` and `error.data` are kept as
//!   [`serde_json::Value`], and a `result` as its JSON text
//!   ([`RawValue`]), verbatim, so `_meta`, `structuredContent`,
//!   `outputSchema` or `$schema` pass through untouched. A result is only
//!   checked to be JSON until it is read: parse it into the type you need
//!   ([`Response::result_as`]) without building a tree of values first.
//! - A body may be one message or a batch (a JSON array), which servers that
//!   negotiated 2025-03-26 may send; see [`parse_messages`]. The client never
//!   sends a batch.
//! - Serializing always writes `"jsonrpc":"2.0"` first and omits absent
//!   `params`.
//!
//! These types are exhaustive on purpose: JSON-RPC 2.0 is a finished
//! specification (MCP extends messages through `params` and `_meta`, never
//! new members), so a match on [`Message`] or a [`Request`] built by its
//! fields stays valid.

use std::fmt;

use serde::de::{DeserializeSeed as _, Error as _};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;

/// A request id: JSON-RPC allows numbers and strings. MCP forbids `null`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(untagged)]
pub enum RequestId {
    /// A numeric id, as this crate assigns them.
    Number(i64),
    /// A string id, as some servers use for their own requests.
    String(String),
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RequestId::Number(n) => write!(f, "{n}"),
            RequestId::String(s) => write!(f, "{s:?}"),
        }
    }
}

impl From<i64> for RequestId {
    fn from(n: i64) -> Self {
        RequestId::Number(n)
    }
}

impl From<String> for RequestId {
    fn from(s: String) -> Self {
        RequestId::String(s)
    }
}

impl From<&str> for RequestId {
    fn from(s: &str) -> Self {
        RequestId::String(s.to_owned())
    }
}

/// A request: expects a response with the same id.
#[derive(Clone, Debug, PartialEq)]
pub struct Request {
    /// Correlates the response.
    pub id: RequestId,
    /// The method, for example `tools/call`.
    pub method: String,
    /// Parameters, verbatim.
    pub params: Option<Value>,
}

/// A notification: no id, no response.
#[derive(Clone, Debug, PartialEq)]
pub struct Notification {
    /// The method, for example `notifications/progress`.
    pub method: String,
    /// Parameters, verbatim.
    pub params: Option<Value>,
}

/// A response: the result of a request, or its error.
///
/// Equality compares results as JSON text (two results that differ only in
/// whitespace or key order are not equal). It serializes the result
/// verbatim through serde_json's [`RawValue`], which only serde_json (its
/// writers and `to_value`) understands: for another format, serialize
/// [`Response::result_as`]`::<Value>()` instead.
#[derive(Clone, Debug)]
pub struct Response {
    /// The id of the request answered. `None` only for an error about a
    /// message whose id could not be read.
    pub id: Option<RequestId>,
    /// The result as the server wrote it (valid JSON), or the error object.
    pub outcome: Result<Box<RawValue>, ErrorObject>,
}

impl Response {
    /// A result response: `result` serialized.
    ///
    /// # Errors
    ///
    /// When `result` does not serialize to JSON (its `Serialize` fails, or
    /// it is a map whose keys are not strings).
    pub fn result(id: RequestId, result: &impl Serialize) -> serde_json::Result<Response> {
        Ok(Response {
            id: Some(id),
            outcome: Ok(serde_json::value::to_raw_value(result)?),
        })
    }

    /// An error response.
    pub fn error(id: Option<RequestId>, error: ErrorObject) -> Response {
        Response {
            id,
            outcome: Err(error),
        }
    }

    /// The result parsed into `T` (a [`Value`], or a type of your own),
    /// or the error object.
    pub fn result_as<T: serde::de::DeserializeOwned>(
        &self,
    ) -> Result<Result<T, serde_json::Error>, &ErrorObject> {
        match &self.outcome {
            Ok(result) => Ok(serde_json::from_str(result.get())),
            Err(error) => Err(error),
        }
    }
}

impl PartialEq for Response {
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id
            && match (&self.outcome, &other.outcome) {
                (Ok(a), Ok(b)) => a.get() == b.get(),
                (Err(a), Err(b)) => a == b,
                _ => false,
            }
    }
}

/// `value` as JSON text.
pub(crate) fn raw(value: &Value) -> Box<RawValue> {
    // A `Value` always serializes: its map keys are strings.
    serde_json::value::to_raw_value(value).expect("a Value always serializes")
}

/// A JSON-RPC error object.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ErrorObject {
    /// The error code, for example `-32601` (method not found).
    pub code: i64,
    /// A short description, the server's words.
    #[serde(default)]
    pub message: String,
    /// Extra data, verbatim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

/// Standard JSON-RPC error codes.
pub mod codes {
    /// Invalid JSON was received.
    pub const PARSE_ERROR: i64 = -32700;
    /// The JSON sent is not a valid request object.
    pub const INVALID_REQUEST: i64 = -32600;
    /// The method does not exist or is not available.
    pub const METHOD_NOT_FOUND: i64 = -32601;
    /// Invalid method parameters.
    pub const INVALID_PARAMS: i64 = -32602;
    /// Internal JSON-RPC error.
    pub const INTERNAL_ERROR: i64 = -32603;
}

/// Any JSON-RPC message.
#[derive(Clone, Debug, PartialEq)]
pub enum Message {
    /// A request.
    Request(Request),
    /// A notification.
    Notification(Notification),
    /// A response (result or error).
    Response(Response),
}

impl Message {
    /// The method of a request or notification.
    pub fn method(&self) -> Option<&str> {
        match self {
            Message::Request(r) => Some(&r.method),
            Message::Notification(n) => Some(&n.method),
            Message::Response(_) => None,
        }
    }

    /// Serializes the message exactly: `jsonrpc` first, absent `params`
    /// omitted.
    pub fn to_vec(&self) -> Vec<u8> {
        encode(self)
    }

    /// Parses one message from a JSON value.
    pub fn from_value(value: Value) -> Result<Message, serde_json::Error> {
        serde_json::from_value(value)
    }
}

impl From<Request> for Message {
    fn from(r: Request) -> Self {
        Message::Request(r)
    }
}

impl From<Notification> for Message {
    fn from(n: Notification) -> Self {
        Message::Notification(n)
    }
}

impl From<Response> for Message {
    fn from(r: Response) -> Self {
        Message::Response(r)
    }
}

/// What a body held: one message (the usual case, kept without a vector),
/// or a batch.
#[derive(Debug)]
#[non_exhaustive]
pub enum Batch {
    /// A single message.
    One(Message),
    /// A JSON array of messages, in order.
    Many(Vec<Message>),
}

impl Batch {
    /// How many messages.
    pub fn len(&self) -> usize {
        match self {
            Batch::One(_) => 1,
            Batch::Many(messages) => messages.len(),
        }
    }

    /// Never: a body holds one message or a batch of at least one.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The messages, in order.
    pub fn into_vec(self) -> Vec<Message> {
        match self {
            Batch::One(message) => vec![message],
            Batch::Many(messages) => messages,
        }
    }
}

/// Why [`parse_messages`] refused a body.
#[derive(Debug)]
#[non_exhaustive]
pub enum ParseError {
    /// A batch of more messages than allowed.
    #[non_exhaustive]
    TooMany {
        /// The most allowed.
        max: usize,
    },
    /// Not JSON, or not JSON-RPC messages.
    Json(serde_json::Error),
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParseError::TooMany { max } => {
                write!(f, "a JSON-RPC batch of more than {max} messages")
            }
            ParseError::Json(error) => write!(f, "not JSON-RPC: {error}"),
        }
    }
}

impl std::error::Error for ParseError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ParseError::TooMany { .. } => None,
            ParseError::Json(error) => Some(error),
        }
    }
}

/// Parses a body that holds one message or a batch of them, as the crate
/// reads every body, SSE event and stdio line: a batch of more than `max`
/// messages is refused when its message `max + 1` is reached, before that
/// one or any later one is built, so a body of many tiny messages does not
/// expand into as many values. An empty batch is an error (JSON-RPC says
/// so), as is any element that is not a message.
pub fn parse_messages(bytes: &[u8], max: usize) -> Result<Batch, ParseError> {
    let first = bytes
        .iter()
        .copied()
        .find(|b| !b.is_ascii_whitespace())
        .unwrap_or(b'{');
    if first != b'[' {
        return serde_json::from_slice(bytes)
            .map(Batch::One)
            .map_err(ParseError::Json);
    }
    let mut too_many = false;
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let batch = BoundedBatch {
        max,
        too_many: &mut too_many,
    }
    .deserialize(&mut deserializer)
    .and_then(|batch| deserializer.end().map(|()| batch));
    match batch {
        Err(_) if too_many => Err(ParseError::TooMany { max }),
        Err(error) => Err(ParseError::Json(error)),
        Ok(batch) if batch.is_empty() => Err(ParseError::Json(serde_json::Error::custom(
            "empty JSON-RPC batch",
        ))),
        Ok(batch) => Ok(Batch::Many(batch)),
    }
}

/// Reads a JSON array of at most `max` messages.
struct BoundedBatch<'a> {
    max: usize,
    too_many: &'a mut bool,
}

impl<'de> serde::de::DeserializeSeed<'de> for BoundedBatch<'_> {
    type Value = Vec<Message>;

    fn deserialize<D: serde::Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_seq(self)
    }
}

impl<'de> serde::de::Visitor<'de> for BoundedBatch<'_> {
    type Value = Vec<Message>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON-RPC batch")
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut batch = Vec::new();
        loop {
            if batch.len() == self.max {
                // One more element, skipped unbuilt, is one too many.
                if seq.next_element::<serde::de::IgnoredAny>()?.is_some() {
                    *self.too_many = true;
                    return Err(A::Error::custom("too many messages in a JSON-RPC batch"));
                }
                return Ok(batch);
            }
            match seq.next_element::<Message>()? {
                Some(message) => batch.push(message),
                None => return Ok(batch),
            }
        }
    }
}

#[derive(Serialize)]
struct Out<'a> {
    jsonrpc: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<&'a RequestId>,
    #[serde(skip_serializing_if = "Option::is_none")]
    method: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    params: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    result: Option<&'a RawValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a ErrorObject>,
}

const NULL: Value = Value::Null;

impl Out<'_> {
    const EMPTY: Out<'static> = Out {
        jsonrpc: "2.0",
        id: None,
        method: None,
        params: None,
        result: None,
        error: None,
    };
}

impl Serialize for Request {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        Out {
            id: Some(&self.id),
            method: Some(&self.method),
            params: self.params.as_ref(),
            ..Out::EMPTY
        }
        .serialize(serializer)
    }
}

impl Serialize for Notification {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        Out {
            method: Some(&self.method),
            params: self.params.as_ref(),
            ..Out::EMPTY
        }
        .serialize(serializer)
    }
}

impl Serialize for Response {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let (result, error) = match &self.outcome {
            Ok(result) => (Some(&**result), None),
            Err(error) => (None, Some(error)),
        };
        let Some(id) = &self.id else {
            // An error response whose id could not be read says `null`.
            #[derive(Serialize)]
            struct NullId<'a> {
                jsonrpc: &'static str,
                id: &'a Value,
                #[serde(skip_serializing_if = "Option::is_none")]
                result: Option<&'a RawValue>,
                #[serde(skip_serializing_if = "Option::is_none")]
                error: Option<&'a ErrorObject>,
            }
            return NullId {
                jsonrpc: "2.0",
                id: &NULL,
                result,
                error,
            }
            .serialize(serializer);
        };
        Out {
            id: Some(id),
            result,
            error,
            ..Out::EMPTY
        }
        .serialize(serializer)
    }
}

impl Serialize for Message {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Message::Request(r) => r.serialize(serializer),
            Message::Notification(n) => n.serialize(serializer),
            Message::Response(r) => r.serialize(serializer),
        }
    }
}

/// A request (with `id`) or a notification (without) whose `params` are
/// serialized from `params` as they are, with no `Value` built for them.
pub(crate) fn encode_call(
    id: Option<&RequestId>,
    method: &str,
    params: &impl Serialize,
) -> Vec<u8> {
    #[derive(Serialize)]
    struct Call<'a, P> {
        jsonrpc: &'static str,
        #[serde(skip_serializing_if = "Option::is_none")]
        id: Option<&'a RequestId>,
        method: &'a str,
        params: &'a P,
    }
    encode(&Call {
        jsonrpc: "2.0",
        id,
        method,
        params,
    })
}

/// Serializes a message (or one of its kinds) exactly: `jsonrpc` first,
/// absent `params` omitted.
pub(crate) fn encode(message: &impl Serialize) -> Vec<u8> {
    // Serializing these types cannot fail: every map key is a string and
    // `Value` serializes infallibly.
    serde_json::to_vec(message).expect("JSON-RPC messages always serialize")
}

/// Deserializes a field that is present, even when its value is `null`, as
/// `Some`; an absent field stays `None` through `#[serde(default)]`.
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

/// [`present`] for a result, kept as text.
fn present_raw<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Box<RawValue>>, D::Error> {
    Box::<RawValue>::deserialize(d).map(Some)
}

#[derive(Deserialize)]
struct In {
    #[serde(default, deserialize_with = "present")]
    id: Option<Value>,
    #[serde(default)]
    method: Option<String>,
    #[serde(default)]
    params: Option<Value>,
    #[serde(default, deserialize_with = "present_raw")]
    result: Option<Box<RawValue>>,
    #[serde(default)]
    error: Option<ErrorObject>,
}

fn request_id(value: Value) -> Result<Option<RequestId>, String> {
    match value {
        Value::Null => Ok(None),
        Value::String(s) => Ok(Some(RequestId::String(s))),
        Value::Number(n) => n
            .as_i64()
            .map(|n| Some(RequestId::Number(n)))
            .ok_or_else(|| format!("JSON-RPC id {n} is not an integer")),
        other => Err(format!(
            "JSON-RPC id must be a number or a string, not {other}"
        )),
    }
}

impl<'de> Deserialize<'de> for Message {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = In::deserialize(deserializer)?;
        let id = match raw.id {
            Some(value) => request_id(value).map_err(D::Error::custom)?,
            None => None,
        };
        match (raw.method, raw.result, raw.error) {
            (Some(method), None, None) => Ok(match id {
                Some(id) => Message::Request(Request {
                    id,
                    method,
                    params: raw.params,
                }),
                None => Message::Notification(Notification {
                    method,
                    params: raw.params,
                }),
            }),
            (None, Some(result), None) => match id {
                Some(id) => Ok(Message::Response(Response {
                    id: Some(id),
                    outcome: Ok(result),
                })),
                None => Err(D::Error::custom("JSON-RPC result without an id")),
            },
            (None, None, Some(error)) => Ok(Message::Response(Response {
                id,
                outcome: Err(error),
            })),
            (None, None, None) => Err(D::Error::custom(
                "not a JSON-RPC message: no method, result or error",
            )),
            _ => Err(D::Error::custom(
                "not a JSON-RPC message: it mixes method, result and error",
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(value: Value) -> Message {
        Message::from_value(value).unwrap()
    }

    #[test]
    fn output_is_exact() {
        let request = Message::Request(Request {
            id: 7.into(),
            method: "tools/list".into(),
            params: None,
        });
        assert_eq!(
            String::from_utf8(request.to_vec()).unwrap(),
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/list"}"#
        );
        let notification = Message::Notification(Notification {
            method: "notifications/initialized".into(),
            params: Some(json!({})),
        });
        assert_eq!(
            String::from_utf8(notification.to_vec()).unwrap(),
            r#"{"jsonrpc":"2.0","method":"notifications/initialized","params":{}}"#
        );
        let response = Message::Response(Response::result("a".into(), &json!({})).unwrap());
        assert_eq!(
            String::from_utf8(response.to_vec()).unwrap(),
            r#"{"jsonrpc":"2.0","id":"a","result":{}}"#
        );
        let error = Message::Response(Response {
            id: None,
            outcome: Err(ErrorObject {
                code: -32700,
                message: "parse".into(),
                data: None,
            }),
        });
        assert_eq!(
            String::from_utf8(error.to_vec()).unwrap(),
            r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse"}}"#
        );
    }

    #[test]
    fn input_is_lenient_and_verbatim() {
        let message = parse(json!({
            "jsonrpc": "2.0", "id": "x-1", "result": {
                "tools": [{"name": "t", "inputSchema": {"$schema": "s", "type": "object"}}],
                "_meta": {"k": [1, 2]}
            },
            "extra": true
        }));
        let Message::Response(Response {
            id: Some(RequestId::String(id)),
            outcome: Ok(result),
        }) = message
        else {
            panic!("not a response: {message:?}");
        };
        assert_eq!(id, "x-1");
        let result: Value = serde_json::from_str(result.get()).unwrap();
        assert_eq!(result["tools"][0]["inputSchema"]["$schema"], "s");
        assert_eq!(result["_meta"]["k"], json!([1, 2]));
    }

    #[test]
    fn null_result_is_a_result() {
        let message = parse(json!({"jsonrpc":"2.0","id":1,"result":null}));
        assert_eq!(
            message,
            Message::Response(Response::result(1.into(), &Value::Null).unwrap())
        );
    }

    #[test]
    fn idless_error_is_a_response_without_id() {
        let message = parse(json!({"jsonrpc":"2.0","error":{"code":-32600,"message":"no"}}));
        let Message::Response(response) = message else {
            panic!()
        };
        assert_eq!(response.id, None);
        assert_eq!(response.outcome.unwrap_err().code, -32600);
    }

    #[test]
    fn requests_and_notifications_are_told_apart() {
        assert!(matches!(
            parse(json!({"jsonrpc":"2.0","id":3,"method":"ping"})),
            Message::Request(_)
        ));
        assert!(matches!(
            parse(
                json!({"jsonrpc":"2.0","method":"notifications/progress","params":{"progress":1}})
            ),
            Message::Notification(_)
        ));
    }

    /// A result that does not serialize to JSON (a map whose keys are not
    /// strings) is an error for the caller, not a panic.
    #[test]
    fn a_result_that_does_not_serialize_is_an_error() {
        let bad: std::collections::BTreeMap<Vec<u8>, u8> = [(vec![1], 2)].into();
        assert!(Response::result(1.into(), &bad).is_err());
        assert_eq!(
            Response::result(1.into(), &json!({"k": [1]})).unwrap(),
            Response {
                id: Some(1.into()),
                outcome: Ok(RawValue::from_string(r#"{"k":[1]}"#.into()).unwrap()),
            }
        );
    }

    #[test]
    fn garbage_is_rejected() {
        for bad in [
            json!({"jsonrpc":"2.0","id":1}),
            json!({"jsonrpc":"2.0","id":1,"method":"x","result":{}}),
            json!({"jsonrpc":"2.0","id":1.5,"result":{}}),
            json!({"jsonrpc":"2.0","id":[1],"result":{}}),
            json!({"jsonrpc":"2.0","result":{}}),
            json!([1, 2]),
        ] {
            assert!(Message::from_value(bad.clone()).is_err(), "{bad}");
        }
    }

    #[test]
    fn batches_parse_and_empty_batches_do_not() {
        let batch = br#" [{"jsonrpc":"2.0","method":"a"},{"jsonrpc":"2.0","id":1,"result":{}}]"#;
        assert_eq!(parse_messages(batch, 8).unwrap().len(), 2);
        assert!(parse_messages(b"[]", 8).is_err());
        assert_eq!(
            parse_messages(br#"{"jsonrpc":"2.0","method":"a"}"#, 8)
                .unwrap()
                .into_vec()
                .len(),
            1
        );
    }

    #[test]
    fn bounded_batches_stop_at_the_bound() {
        let batch = br#"[{"method":"a"},{"method":"b"},{"id":1,"result":{}}]"#;
        assert_eq!(parse_messages(batch, 3).unwrap().len(), 3);
        assert!(matches!(
            parse_messages(batch, 2),
            Err(ParseError::TooMany { max: 2 })
        ));
        // One message is no batch, whatever the bound.
        assert_eq!(parse_messages(br#" {"method":"a"}"#, 0).unwrap().len(), 1);
        for bad in [
            &b"[]"[..],
            b"[{\"method\":\"a\"}] x",
            b"[{\"x\":1}]",
            b"[1,",
        ] {
            assert!(
                matches!(parse_messages(bad, 8), Err(ParseError::Json(_))),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        // Refused at message max + 1, before the rest is read: trailing
        // garbage after it is not even seen.
        let mut huge = b"[".to_vec();
        huge.extend_from_slice(&br#"{"method":"n"},"#.repeat(10_000));
        huge.extend_from_slice(b"not json");
        assert!(matches!(
            parse_messages(&huge, 1024),
            Err(ParseError::TooMany { max: 1024 })
        ));
    }
}
