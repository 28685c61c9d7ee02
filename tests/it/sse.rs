//! Property tests of the SSE decoder: chunking never changes the result, the
//! result is what the encoded events say, and memory stays bounded.

use std::time::Duration;

use mcp_scoped_http::wire::sse::{SseDecoder, SseError, SseEvent};
use proptest::prelude::*;
use proptest::sample::Index;

/// One line of a generated block.
#[derive(Clone, Debug)]
enum Line {
    /// `data` lines, one per element (an event's multi-line payload).
    Data(Vec<String>),
    Id(String),
    Event(String),
    Retry(u32),
    Comment(String),
}

/// Text without CR or LF, with multi-byte characters and the odd colon.
fn text() -> impl Strategy<Value = String> {
    "[a-z0-9 :{}\"é€\u{1F600}]{0,12}"
}

fn line() -> impl Strategy<Value = Line> {
    prop_oneof![
        4 => prop::collection::vec(text(), 1..4).prop_map(Line::Data),
        1 => "[a-z0-9é\u{1F600}-]{1,8}".prop_map(Line::Id),
        1 => "[a-z/é]{1,8}".prop_map(Line::Event),
        1 => any::<u32>().prop_map(Line::Retry),
        1 => text().prop_map(Line::Comment),
    ]
}

/// A stream: its blocks, whether it starts with a BOM, and one line-end
/// choice per line (LF, CR or CRLF, reused cyclically).
#[derive(Clone, Debug)]
struct Stream {
    bom: bool,
    blocks: Vec<Vec<Line>>,
    /// An unterminated last event, which must be discarded.
    tail: Option<String>,
    ends: Vec<u8>,
}

fn stream() -> impl Strategy<Value = Stream> {
    (
        any::<bool>(),
        prop::collection::vec(prop::collection::vec(line(), 0..5), 0..8),
        prop::option::of(text()),
        prop::collection::vec(0u8..3, 1..64),
    )
        .prop_map(|(bom, blocks, tail, ends)| Stream {
            bom,
            blocks,
            tail,
            ends,
        })
}

impl Stream {
    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        if self.bom {
            out.extend_from_slice(b"\xEF\xBB\xBF");
        }
        let n = std::cell::Cell::new(0usize);
        let after_cr = std::cell::Cell::new(false);
        let end = |out: &mut Vec<u8>| {
            let mut style = self.ends[n.get() % self.ends.len()];
            // A CR end then an LF end would be one CRLF end on the wire.
            if style == 0 && after_cr.get() {
                style = 2;
            }
            after_cr.set(style == 1);
            out.extend_from_slice(match style {
                0 => b"\n",
                1 => b"\r",
                _ => b"\r\n",
            });
            n.set(n.get() + 1);
        };
        for block in &self.blocks {
            for line in block {
                match line {
                    Line::Data(lines) => {
                        for value in lines {
                            // `data` alone means an empty value, like `data:`.
                            if value.is_empty() && n.get() % 2 == 0 {
                                out.extend_from_slice(b"data");
                            } else {
                                out.extend_from_slice(format!("data: {value}").as_bytes());
                            }
                            end(&mut out);
                        }
                    }
                    Line::Id(id) => out.extend_from_slice(format!("id: {id}").as_bytes()),
                    Line::Event(name) => out.extend_from_slice(format!("event:{name}").as_bytes()),
                    Line::Retry(ms) => out.extend_from_slice(format!("retry: {ms}").as_bytes()),
                    Line::Comment(text) => out.extend_from_slice(format!(":{text}").as_bytes()),
                }
                if !matches!(line, Line::Data(_)) {
                    end(&mut out);
                }
            }
            end(&mut out);
        }
        if let Some(tail) = &self.tail {
            out.extend_from_slice(format!("id: never\ndata: {tail}").as_bytes());
        }
        out
    }

    /// The events the stream encodes, per the decoder's documented semantics.
    fn expected(&self) -> Vec<SseEvent> {
        let mut events = Vec::new();
        let mut last_id: Option<String> = None;
        for block in &self.blocks {
            let mut seen = false;
            let mut event = None;
            let mut retry = None;
            let mut own_id = false;
            for line in block {
                match line {
                    Line::Data(_) => {}
                    Line::Id(id) => {
                        last_id = Some(id.clone());
                        own_id = true;
                    }
                    Line::Event(name) => event = Some(name.clone()),
                    Line::Retry(ms) => retry = Some(Duration::from_millis(u64::from(*ms))),
                    Line::Comment(_) => continue,
                }
                seen = true;
            }
            if seen {
                events.push(event_of(
                    event,
                    joined(block),
                    last_id.clone(),
                    own_id,
                    retry,
                ));
            }
        }
        events
    }
}

/// The block's data lines joined by LF.
fn joined(block: &[Line]) -> String {
    let lines: Vec<&str> = block
        .iter()
        .filter_map(|line| match line {
            Line::Data(lines) => Some(lines.iter().map(String::as_str)),
            _ => None,
        })
        .flatten()
        .collect();
    lines.join("\n")
}

fn event_of(
    event: Option<String>,
    data: String,
    id: Option<String>,
    own_id: bool,
    retry: Option<Duration>,
) -> SseEvent {
    // SseEvent is #[non_exhaustive]: build it the way a caller can, by
    // decoding. An id carried over from an earlier event comes from an
    // id-only block first, whose event is skipped.
    let mut text = String::new();
    let mut skip = 0;
    if let Some(id) = &id {
        if !own_id {
            text.push_str(&format!("id: {id}\n\n"));
            skip = 1;
        }
        if own_id {
            text.push_str(&format!("id: {id}\n"));
        }
    }
    if let Some(event) = &event {
        text.push_str(&format!("event: {event}\n"));
    }
    if let Some(retry) = retry {
        text.push_str(&format!("retry: {}\n", retry.as_millis()));
    }
    for line in data.split('\n') {
        text.push_str(&format!("data: {line}\n"));
    }
    text.push('\n');
    let mut decoder = SseDecoder::new();
    decoder.push(text.as_bytes());
    for _ in 0..skip {
        decoder.next_event().unwrap().unwrap();
    }
    let decoded = decoder.next_event().unwrap().unwrap();
    assert_eq!(
        (
            &decoded.event,
            &decoded.data,
            decoded.id.as_deref(),
            decoded.own_id,
            decoded.retry
        ),
        (&event, &data, id.as_deref(), own_id, retry)
    );
    decoded
}

/// Pushes `chunks` one by one, draining after each, then finishes.
fn decode<'a>(
    decoder: &mut SseDecoder,
    chunks: impl IntoIterator<Item = &'a [u8]>,
) -> Vec<Result<SseEvent, SseError>> {
    let mut out = Vec::new();
    let drain = |decoder: &mut SseDecoder, out: &mut Vec<_>| {
        loop {
            match decoder.next_event() {
                Ok(Some(event)) => out.push(Ok(event)),
                Ok(None) => break,
                Err(error) => out.push(Err(error)),
            }
        }
    };
    for chunk in chunks {
        decoder.push(chunk);
        drain(decoder, &mut out);
    }
    assert_eq!(decoder.finish(), Ok(None));
    out
}

/// Cuts `bytes` at the given points (any byte position, so also between CR
/// and LF and inside a multi-byte character).
fn split<'a>(bytes: &'a [u8], cuts: &[Index]) -> Vec<&'a [u8]> {
    let mut points: Vec<usize> = cuts.iter().map(|i| i.index(bytes.len() + 1)).collect();
    points.sort_unstable();
    let mut chunks = Vec::new();
    let mut start = 0;
    for point in points {
        chunks.push(&bytes[start..point]);
        start = point;
    }
    chunks.push(&bytes[start..]);
    chunks
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn chunking_never_changes_the_events(stream in stream(), cuts in prop::collection::vec(any::<Index>(), 0..24)) {
        let _shared = crate::support::shared();
        let bytes = stream.encode();
        let whole = decode(&mut SseDecoder::new(), [&bytes[..]]);
        let expected: Vec<_> = stream.expected().into_iter().map(Ok).collect();
        prop_assert_eq!(&whole, &expected);
        let chunked = decode(&mut SseDecoder::new(), split(&bytes, &cuts));
        prop_assert_eq!(&chunked, &whole);
        let bytewise = decode(&mut SseDecoder::new(), bytes.chunks(1));
        prop_assert_eq!(&bytewise, &whole);
    }

    #[test]
    fn last_event_id_and_retry_do_not_depend_on_chunking(stream in stream(), cuts in prop::collection::vec(any::<Index>(), 0..24)) {
        let _shared = crate::support::shared();
        let bytes = stream.encode();
        let mut whole = SseDecoder::new();
        decode(&mut whole, [&bytes[..]]);
        let mut chunked = SseDecoder::new();
        decode(&mut chunked, split(&bytes, &cuts));
        prop_assert_eq!(whole.last_event_id(), chunked.last_event_id());
        prop_assert_eq!(whole.retry(), chunked.retry());
        let expected = stream.expected();
        prop_assert_eq!(whole.last_event_id(), expected.last().and_then(|e| e.id.as_deref()));
    }

    #[test]
    fn an_endless_line_is_bounded(limit in 1usize..64 * 1024, chunk in 1usize..16 * 1024, prefix in "(data: |id: |event: |:|x)?") {
        let _shared = crate::support::shared();
        let mut decoder = SseDecoder::with_max_event_size(limit);
        decoder.push(prefix.as_bytes());
        let bytes = vec![b'x'; chunk];
        let mut errors = 0;
        for _ in 0..(4 * limit / chunk + 4) {
            decoder.push(&bytes);
            prop_assert!(decoder.buffered_len() <= limit + chunk);
            while let Some(result) = decoder.next_event().transpose() {
                prop_assert!(matches!(result, Err(SseError::EventTooLarge { limit: l, .. }) if l == limit), "{:?}", result);
                errors += 1;
            }
        }
        prop_assert_eq!(errors, 1);
    }

    #[test]
    fn an_event_of_many_small_data_lines_is_bounded(limit in 1usize..64 * 1024, chunk in 1usize..4096, value in "[a-z]{0,5}") {
        let _shared = crate::support::shared();
        let line = format!("data:{value}\n");
        let bytes = line.repeat(limit + 8).into_bytes();
        let mut decoder = SseDecoder::with_max_event_size(limit);
        let mut errors = 0;
        for piece in bytes.chunks(chunk) {
            decoder.push(piece);
            prop_assert!(decoder.buffered_len() <= limit + chunk);
            while let Some(result) = decoder.next_event().transpose() {
                prop_assert!(matches!(result, Err(SseError::EventTooLarge { limit: l, .. }) if l == limit), "{:?}", result);
                errors += 1;
            }
        }
        prop_assert_eq!(errors, 1);
    }
}

/// Tiny events a hostile server repeats: each with an id of its own, or
/// carrying the last one over (with data, empty, or a type only).
fn tiny_event() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![
        "id: 7\n\n",
        "id:8\ndata:x\n\n",
        "event\n\n",
        "data:{}\n\n",
        "id\n\n",
        "retry:1\n\n",
    ])
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// However many events a chunk holds, and whatever id they carry over,
    /// the decoder holds at most the limit and the chunk pushed last.
    #[test]
    fn many_tiny_id_carrying_events_in_large_chunks_are_bounded(
        limit in 64usize..16 * 1024,
        chunk in 1024usize..64 * 1024,
        id_share in 0.0f64..1.0,
        units in prop::collection::vec(tiny_event(), 1..4),
    ) {
        let _shared = crate::support::shared();
        // A long id first (up to the limit), which the events carry over.
        let id_len = ((limit - 8) as f64 * id_share) as usize;
        let mut stream = format!("id: {}\n\n", "i".repeat(id_len)).into_bytes();
        let unit: String = units.concat();
        let per_unit = unit.matches("\n\n").count();
        let repeat = 8 * chunk / unit.len();
        stream.extend_from_slice(unit.repeat(repeat).as_bytes());
        let mut decoder = SseDecoder::with_max_event_size(limit);
        let mut events = 0;
        for piece in stream.chunks(chunk) {
            decoder.push(piece);
            prop_assert!(decoder.buffered_len() <= limit + chunk, "{} after a push", decoder.buffered_len());
            while let Some(event) = decoder.next_event().transpose() {
                prop_assert!(event.is_ok());
                events += 1;
                prop_assert!(decoder.buffered_len() <= limit + chunk, "{}", decoder.buffered_len());
            }
        }
        prop_assert_eq!(decoder.finish(), Ok(None));
        prop_assert_eq!(events, 1 + per_unit * repeat);
    }
}

#[test]
fn sixty_four_mib_line_in_8_kib_chunks() {
    let _shared = crate::support::shared();
    let limit = SseDecoder::DEFAULT_MAX_EVENT_SIZE;
    let mut decoder = SseDecoder::new();
    let chunk = vec![b'x'; 8 * 1024];
    let mut max_buffered = 0;
    let mut errors = Vec::new();
    for _ in 0..(64 * 1024 / 8) {
        decoder.push(&chunk);
        max_buffered = max_buffered.max(decoder.buffered_len());
        while let Some(result) = decoder.next_event().transpose() {
            errors.push(result);
        }
    }
    assert!(
        matches!(errors[..], [Err(SseError::EventTooLarge { limit: l, .. })] if l == limit),
        "{errors:?}"
    );
    assert!(max_buffered <= limit, "{max_buffered}");
}
