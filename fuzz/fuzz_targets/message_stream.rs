//! Fuzzed answers through the session's own read path, in memory: a
//! `StreamableHttp` on a borrowed client whose service answers every
//! request with the fuzzer's body, cut into the fuzzer's frames. No network.
//!
//! The input is a [`Plan`]; its `limit` becomes both `max_sse_event` and
//! `max_json_body`, and its `flags` pick the exchange:
//! - 0: the GET stream (`open_get_stream`), `text/event-stream`;
//! - 1: a POSTed request answered `text/event-stream`;
//! - 2: a POSTed request answered `application/json`;
//! - 3: a POSTed request answered 400, `application/json`.
//!
//! Checked against what the parts say the whole must do:
//! - SSE: the messages are those of the reference decoder's events (type
//!   `message` or none, with data) parsed by `parse_messages`, in order; the
//!   first event over the limit is a limit error, a bad event (UTF-8, or
//!   not JSON-RPC) a protocol error, and the stream ends after it (`None`
//!   ever after); a stream that ends cleanly leaves the reference's
//!   `last_event_id` and `retry`;
//! - JSON: a body over the limit is a limit error; otherwise the answer is
//!   `parse_messages` of the body (a leading BOM skipped), or a protocol
//!   error when that fails;
//! - 400: a status error with status 400 that carries the body's first
//!   JSON-RPC error object, if `parse_messages` finds one (the body is
//!   within the 64 KiB error-body limit), and no session expiry (no session
//!   id was sent).

#![no_main]

use std::collections::VecDeque;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use libfuzzer_sys::fuzz_target;
use mcp_scoped_http::jsonrpc::{Batch, Message, Request, parse_messages};
use mcp_scoped_http::wire::{MessageStream, StreamableHttp};
use mcp_scoped_http::{HttpClient, TransportConfig};
use mcp_scoped_http_fuzz::chunks::Plan;
use mcp_scoped_http_fuzz::sse_model::{self, Item};

/// A response body that hands out its frames one by one.
struct Frames(VecDeque<Bytes>);

impl Body for Frames {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Poll::Ready(self.0.pop_front().map(|data| Ok(Frame::data(data))))
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.0.iter().map(|b| b.len() as u64).sum())
    }
}

fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime")
    })
}

/// A transport whose every request is answered `status` with
/// `content_type` and `frames`.
fn transport(
    status: u16,
    content_type: &'static str,
    frames: Vec<Bytes>,
    limit: usize,
) -> StreamableHttp {
    let frames = Arc::new(frames);
    let service = tower::service_fn(move |_request: http::Request<_>| {
        let body = Frames(frames.iter().cloned().collect());
        let response = http::Response::builder()
            .status(status)
            .header(http::header::CONTENT_TYPE, content_type)
            .body(body)
            .expect("a response");
        std::future::ready(Ok::<_, Infallible>(response))
    });
    StreamableHttp::new(HttpClient::borrowed(service), "http://fuzz.invalid/mcp")
        .expect("a transport")
        .with_config(
            TransportConfig::default()
                .max_sse_event(limit)
                .max_json_body(limit),
        )
}

/// What the stream should give: messages, then maybe one error.
enum End {
    Clean,
    Limit,
    Protocol,
}

fn expected_sse(stream: &[u8], limit: usize) -> (Vec<Message>, End, sse_model::Decoded) {
    let decoded = sse_model::decode(stream, limit, None, None);
    let mut messages = Vec::new();
    for item in &decoded.items {
        match item {
            Item::Event(event) => {
                let is_message = event.event.as_deref().is_none_or(|e| e == "message");
                if is_message && !event.data.is_empty() {
                    match parse_messages(event.data.as_bytes(), usize::MAX).map(Batch::into_vec) {
                        Ok(parsed) => messages.extend(parsed),
                        Err(_) => return (messages, End::Protocol, decoded),
                    }
                }
            }
            Item::TooLarge => return (messages, End::Limit, decoded),
            Item::InvalidUtf8 => return (messages, End::Protocol, decoded),
        }
    }
    (messages, End::Clean, decoded)
}

/// Takes every message, checks them and how the stream ends.
async fn drain(stream: &mut MessageStream, messages: &[Message], end: &End) {
    for (i, want) in messages.iter().enumerate() {
        match stream.next().await {
            Some(Ok(got)) => assert_eq!(&got, want, "message {i}"),
            other => panic!("message {i}: wanted {want:?}, got {other:?}"),
        }
    }
    match (stream.next().await, end) {
        (None, End::Clean) => {}
        (Some(Err(e)), End::Limit) => assert!(e.is_limit(), "not a limit error: {e:?}"),
        (Some(Err(e)), End::Protocol) => assert!(e.is_protocol(), "not a protocol error: {e:?}"),
        (other, _) => panic!("after {} messages: {other:?}", messages.len()),
    }
    for _ in 0..2 {
        assert!(
            stream.next().await.is_none(),
            "the stream goes on after its end"
        );
    }
}

fuzz_target!(|data: &[u8]| {
    let plan = Plan::parse(data);
    let frames: Vec<Bytes> = plan
        .chunks()
        .into_iter()
        .map(Bytes::copy_from_slice)
        .collect();
    let limit = plan.limit;
    let request = Request {
        id: 1.into(),
        method: "tools/list".into(),
        params: None,
    };
    runtime().block_on(async {
        match plan.flags {
            0 | 1 => {
                let wire = transport(200, "text/event-stream", frames, limit);
                let stream = if plan.flags == 0 {
                    wire.open_get_stream(None)
                        .await
                        .expect("GET answered")
                        .expect("a GET stream")
                } else {
                    wire.post_request(&request).await.expect("POST answered")
                };
                assert!(stream.is_sse());
                let (messages, end, decoded) = expected_sse(plan.stream, limit);
                let mut stream = stream;
                drain(&mut stream, &messages, &end).await;
                if matches!(end, End::Clean) {
                    assert_eq!(stream.last_event_id(), decoded.last_event_id.as_deref());
                    assert_eq!(stream.retry(), decoded.retry);
                }
            }
            2 => {
                let wire = transport(200, "application/json", frames, limit);
                let answer = wire.post_request(&request).await;
                if plan.stream.len() > limit {
                    let e = answer.expect_err("a JSON body over the limit");
                    assert!(e.is_limit(), "not a limit error: {e:?}");
                    return;
                }
                let body = plan
                    .stream
                    .strip_prefix(b"\xEF\xBB\xBF")
                    .unwrap_or(plan.stream);
                match (
                    answer,
                    parse_messages(body, usize::MAX).map(Batch::into_vec),
                ) {
                    (Ok(mut stream), Ok(messages)) => {
                        assert!(!stream.is_sse());
                        assert_eq!(stream.last_event_id(), None);
                        drain(&mut stream, &messages, &End::Clean).await;
                    }
                    (Err(e), Err(_)) => assert!(e.is_protocol(), "not a protocol error: {e:?}"),
                    (answer, parsed) => panic!("answer {answer:?} but parse_messages {parsed:?}"),
                }
            }
            _ => {
                let wire = transport(400, "application/json", frames, limit);
                let e = wire.post_request(&request).await.expect_err("answered 400");
                assert!(e.is_status(), "not a status error: {e:?}");
                assert_eq!(e.status(), Some(http::StatusCode::BAD_REQUEST));
                assert!(!e.is_session_expired(), "no session id was sent");
                let body = plan
                    .stream
                    .strip_prefix(b"\xEF\xBB\xBF")
                    .unwrap_or(plan.stream);
                let rpc = parse_messages(body, usize::MAX)
                    .map(Batch::into_vec)
                    .ok()
                    .and_then(|messages| {
                        messages.into_iter().find_map(|m| match m {
                            Message::Response(r) => r.outcome.err(),
                            _ => None,
                        })
                    });
                assert_eq!(e.rpc_error(), rpc.as_ref(), "the JSON-RPC error");
            }
        }
    });
});
