//! `SseDecoder` against a reference decoder, whole and chunked.
//!
//! The input is a [`Plan`]: a small limit (16..=4096), cut positions (or one
//! byte per chunk) and the stream. For the small limit and for the default
//! one, the stream is decoded three ways: in one push, in the fuzzer's
//! chunks, and once more in one push on the chunked decoder after `finish`
//! (a reconnection, which keeps the last event id and retry). Each must
//! equal the reference decoder's output (`sse_model`), events and errors in
//! order, and the final `last_event_id` and `retry`.
//!
//! Checked while decoding:
//! - `buffered_len() <= chunk.len() + 3 * limit` right after each push (the
//!   chunk, the event being decoded, the one decoded and not taken, the last
//!   event id: the decoder's documented bound);
//! - `buffered_len()` never grows while draining, and is `<= 2 * limit` once
//!   `next_event` returns `Ok(None)` (the last event id and a part-read
//!   event);
//! - after each drain, `last_event_id()` is the id of the last event taken;
//! - errors are only `EventTooLarge { limit }` with the decoder's own limit,
//!   or `InvalidUtf8`;
//! - `finish` returns `Ok(None)` once everything is taken.

#![no_main]

use libfuzzer_sys::fuzz_target;
use mcp_scoped_http::wire::sse::{SseDecoder, SseError, SseEvent};
use mcp_scoped_http_fuzz::chunks::Plan;
use mcp_scoped_http_fuzz::sse_model::{self, Decoded, Event, Item};

fn model_event(event: &SseEvent) -> Event {
    let data: &str = &event.data;
    Event {
        event: event.event.as_deref().map(str::to_owned),
        data: data.to_owned(),
        id: event.id.as_deref().map(str::to_owned),
        own_id: event.own_id,
        retry: event.retry,
    }
}

/// Pushes `chunks` one by one, draining after each, then `finish`.
fn decode(decoder: &mut SseDecoder, chunks: &[&[u8]], limit: usize) -> Decoded {
    let mut items = Vec::new();
    for chunk in chunks {
        decoder.push(chunk);
        let after_push = decoder.buffered_len();
        let mut before = after_push;
        let mut last_taken: Option<Option<String>> = None;
        loop {
            let next = decoder.next_event();
            let now = decoder.buffered_len();
            assert!(
                now <= before,
                "buffered_len grew from {before} to {now} while draining"
            );
            before = now;
            match next {
                Ok(Some(event)) => {
                    let event = model_event(&event);
                    last_taken = Some(event.id.clone());
                    items.push(Item::Event(event));
                }
                Ok(None) => break,
                Err(SseError::EventTooLarge { limit: reported, .. }) => {
                    assert_eq!(reported, limit, "EventTooLarge names another limit");
                    items.push(Item::TooLarge);
                }
                Err(SseError::InvalidUtf8) => items.push(Item::InvalidUtf8),
                Err(other) => panic!("unexpected error kind {other:?}"),
            }
        }
        let drained = decoder.buffered_len();
        assert!(
            drained <= 2 * limit,
            "{drained} bytes held after draining, limit {limit}"
        );
        let bound = chunk.len() + 3 * limit;
        assert!(
            after_push <= bound,
            "buffered_len {after_push} after a {}-byte push, over {bound} (limit {limit})",
            chunk.len()
        );
        if let Some(id) = last_taken {
            assert_eq!(
                decoder.last_event_id(),
                id.as_deref(),
                "last_event_id is not the last event's id"
            );
        }
    }
    assert!(
        matches!(decoder.finish(), Ok(None)),
        "finish after draining"
    );
    Decoded {
        items,
        last_event_id: decoder.last_event_id().map(str::to_owned),
        retry: decoder.retry(),
    }
}

fn check(plan: &Plan<'_>, limit: usize, new: impl Fn() -> SseDecoder) {
    let stream = plan.stream;
    let expected = sse_model::decode(stream, limit, None, None);
    let whole = decode(&mut new(), &[stream], limit);
    assert_eq!(whole, expected, "one push vs the reference, limit {limit}");

    let mut decoder = new();
    let chunked = decode(&mut decoder, &plan.chunks(), limit);
    assert_eq!(chunked, expected, "chunked vs one push, limit {limit}");

    // A reconnection: the same decoder reads the stream again.
    let again: Decoded = decode(&mut decoder, &[stream], limit);
    let expected_again = sse_model::decode(stream, limit, expected.last_event_id, expected.retry);
    assert_eq!(again, expected_again, "after finish, limit {limit}");
}

fuzz_target!(|data: &[u8]| {
    let plan = Plan::parse(data);
    check(&plan, plan.limit, || {
        SseDecoder::with_max_event_size(plan.limit)
    });
    check(&plan, SseDecoder::DEFAULT_MAX_EVENT_SIZE, SseDecoder::new);
});
