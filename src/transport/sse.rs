//! An incremental decoder for `text/event-stream` bodies, as the HTML
//! standard's "Parsing an event stream" describes them, hardened for
//! untrusted servers.
//!
//! [`SseDecoder`] does no I/O: the caller pushes body chunks as they arrive
//! with [`SseDecoder::push`] and takes events out with
//! [`SseDecoder::next_event`]; events are decoded one at a time as they are
//! taken. Chunks may be split at any byte, including between the CR and LF
//! of a CRLF line end and inside a multi-byte UTF-8 character; the result does
//! not depend on how the stream is chunked.
//!
//! The memory the decoder holds is bounded by a configurable limit
//! ([`SseDecoder::with_max_event_size`]) and the size of the chunk pushed
//! last: a server that sends a line that never ends, or an event of endless
//! `data:` lines, gets [`SseError::EventTooLarge`] rather than our memory;
//! one that sends a long `id:` and then many events that carry it over costs
//! that id once, not once per event.
//!
//! ```
//! use mcp_scoped_http::wire::sse::SseDecoder;
//!
//! let mut decoder = SseDecoder::new();
//! decoder.push(b"id: 7\ndata: {\"jsonrpc\":");
//! assert_eq!(decoder.next_event(), Ok(None)); // need more bytes
//! decoder.push(b"\"2.0\"}\n\n");
//! let event = decoder.next_event().unwrap().unwrap();
//! assert_eq!(event.data, r#"{"jsonrpc":"2.0"}"#);
//! assert_eq!(event.id.as_deref(), Some("7"));
//! assert_eq!(decoder.last_event_id(), Some("7"));
//! ```

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use memchr::{memchr, memchr2};

/// The UTF-8 encoding of U+FEFF, which the stream may start with.
const BOM: &[u8; 3] = b"\xEF\xBB\xBF";

/// Buffers whose capacity grew past this are released after use rather than
/// kept for the next line or event: one long line must not pin its memory
/// for the rest of the stream.
const KEEP_CAPACITY: usize = 64 * 1024;

/// Incremental decoder: push bytes as they arrive, take events out.
///
/// One decoder reads one stream (one response body). [`finish`](Self::finish)
/// ends the stream and readies the decoder for another one (a reconnection),
/// keeping [`last_event_id`](Self::last_event_id) and [`retry`](Self::retry).
///
/// # Dispatch
///
/// Every block of lines ended by a blank line in which at least one `data`,
/// `id`, `event` or `retry` field appeared yields an [`SseEvent`]. Unlike a
/// browser's `EventSource`, which drops blocks without data, this lets the
/// caller see MCP priming events (an `id` and an empty `data`, see
/// [`SseEvent::has_data`]) and `retry`-only blocks. A block of comments or
/// unknown fields only yields nothing.
///
/// # Memory
///
/// Events are decoded as they are taken: [`push`](Self::push) decodes up to
/// the end of the first event and keeps the rest of the chunk as it is;
/// [`next_event`](Self::next_event) returns that event and decodes the next
/// one from what is left. So at most one decoded event is ever held, however
/// many a chunk holds. Push the next chunk once `next_event` has returned
/// `Ok(None)` (then everything pushed is decoded); a push before that adds
/// its bytes to the input still pending.
///
/// The bytes held for the event being decoded (its data with the joining
/// newlines, its event type, an `id` it sets, and the unterminated line being
/// read, field name included) never exceed the limit: the byte that would
/// pass it produces [`SseError::EventTooLarge`] instead of being stored. An
/// `id` is held once however many events carry it over (it is shared, see
/// [`SseEvent::id`]). So, used as above, the decoder holds at most the chunk
/// pushed last and three times the limit: the event being decoded, the one
/// decoded and not yet taken, and the stream's last event id
/// ([`buffered_len`](Self::buffered_len) counts them all).
///
/// # Errors and recovery
///
/// An error is returned by `next_event` in stream order with the events. The
/// decoder then discards the rest of the offending event, up to and including
/// the next blank line, and goes on decoding after it; the caller will
/// normally stop at the first error instead.
pub struct SseDecoder {
    max: usize,
    /// Bytes pushed; those from `pos` on are not decoded yet.
    input: Bytes,
    pos: usize,
    /// The unterminated line carried over from earlier input.
    line: Vec<u8>,
    /// The data buffer: each `data` value followed by LF.
    data: String,
    /// The event type buffer.
    event_type: String,
    /// The spec's "last event ID buffer": set by `id` fields of this block.
    id_buffer: Option<Arc<str>>,
    /// The spec's "last event ID string": `id_buffer` as of the last dispatch.
    last_event_id: Option<Arc<str>>,
    /// A valid `retry` of the block being read.
    block_retry: Option<Duration>,
    /// Whether the block being read has an `id` field of its own.
    block_id: bool,
    /// The last valid `retry` of the stream.
    retry: Option<Duration>,
    /// Whether a `data`, `id`, `event` or `retry` field appeared in the block.
    seen_field: bool,
    /// The last line ended with a CR at the very end of the input: an LF that
    /// starts the next chunk belongs to it.
    after_cr: bool,
    /// `Some(n)`: at the stream's start, `n` bytes of a BOM seen so far.
    bom: Option<u8>,
    /// After an error: skipping lines up to the next blank line.
    discarding: bool,
    /// While discarding: the line being skipped has bytes.
    discard_line_nonempty: bool,
    /// The event or error decoded and not taken yet; decoding stops there.
    ready: Option<Result<SseEvent, SseError>>,
}

impl SseDecoder {
    /// The limit [`new`](Self::new) uses: 8 MiB per event.
    pub const DEFAULT_MAX_EVENT_SIZE: usize = 8 * 1024 * 1024;

    /// A decoder with the limit [`DEFAULT_MAX_EVENT_SIZE`](Self::DEFAULT_MAX_EVENT_SIZE).
    pub fn new() -> Self {
        Self::with_max_event_size(Self::DEFAULT_MAX_EVENT_SIZE)
    }

    /// A decoder that holds at most `max` bytes for one event.
    ///
    /// The limit counts the event's data (with the newlines that join its
    /// lines), its event type, an `id` it sets, and the line being read in
    /// full, field name and colon included; so leave a few bytes of headroom
    /// over the largest payload you accept.
    pub fn with_max_event_size(max: usize) -> Self {
        Self {
            max,
            input: Bytes::new(),
            pos: 0,
            line: Vec::new(),
            data: String::new(),
            event_type: String::new(),
            id_buffer: None,
            last_event_id: None,
            block_retry: None,
            block_id: false,
            retry: None,
            seen_field: false,
            after_cr: false,
            bom: Some(0),
            discarding: false,
            discard_line_nonempty: false,
            ready: None,
        }
    }

    /// Feeds the next bytes of the stream.
    ///
    /// The bytes are decoded up to the end of the first event (or error) in
    /// them, which [`next_event`](Self::next_event) then returns; the rest is
    /// kept as it is, and decoded as events are taken. Push the next chunk
    /// once `next_event` has returned `Ok(None)`, so that the input pending
    /// is never more than one chunk.
    pub fn push(&mut self, chunk: &[u8]) {
        let Some(chunk) = self.skip_bom(chunk) else {
            return;
        };
        if !self.idle() {
            self.append(chunk);
            return self.decode_if_idle();
        }
        // Straight from the chunk; only what follows the first event is
        // copied, to be decoded as events are taken.
        let rest = &chunk[self.decode_from(chunk)..];
        if !rest.is_empty() {
            self.input = Bytes::copy_from_slice(rest);
            self.pos = 0;
        }
    }

    /// Like [`push`](Self::push), without copying a chunk the caller already
    /// owns as [`Bytes`] (a body frame).
    pub(crate) fn push_bytes(&mut self, chunk: Bytes) {
        let Some(rest) = self.skip_bom(&chunk) else {
            return;
        };
        if !self.idle() {
            self.append(rest);
            return self.decode_if_idle();
        }
        let start = chunk.len() - rest.len();
        let pos = start + self.decode_from(rest);
        if pos < chunk.len() {
            self.input = chunk;
            self.pos = pos;
        }
    }

    /// Whether nothing is pending: no input left, no event ready.
    fn idle(&self) -> bool {
        self.ready.is_none() && self.pending().is_empty()
    }

    /// Decodes up to the next event, unless one is ready already.
    fn decode_if_idle(&mut self) {
        if self.ready.is_none() {
            self.decode();
        }
    }

    /// The input not decoded yet.
    fn pending(&self) -> &[u8] {
        &self.input[self.pos..]
    }

    /// Adds `more` to the pending input.
    fn append(&mut self, more: &[u8]) {
        let mut input = BytesMut::with_capacity(self.pending().len() + more.len());
        input.extend_from_slice(self.pending());
        input.extend_from_slice(more);
        self.input = input.freeze();
        self.pos = 0;
    }

    /// At the stream's start, takes a BOM off `chunk`: the rest of the chunk,
    /// or `None` while all bytes so far may still be a BOM. Bytes held back
    /// that turn out not to be a BOM go to the pending input first.
    fn skip_bom<'c>(&mut self, chunk: &'c [u8]) -> Option<&'c [u8]> {
        let Some(mut seen) = self.bom else {
            return Some(chunk);
        };
        let mut i = 0;
        while usize::from(seen) < BOM.len() && i < chunk.len() && chunk[i] == BOM[usize::from(seen)]
        {
            seen += 1;
            i += 1;
        }
        if usize::from(seen) == BOM.len() {
            self.bom = None;
            Some(&chunk[i..])
        } else if i == chunk.len() {
            // Everything so far may still be a BOM: wait for more.
            self.bom = Some(seen);
            None
        } else {
            // Not a BOM: the bytes held back are stream content.
            self.bom = None;
            let held_back = &BOM[..usize::from(seen)];
            if !held_back.is_empty() {
                self.append(held_back);
            }
            Some(&chunk[i..])
        }
    }

    /// Takes the next event, or the next error, in stream order, decoding
    /// the pending input up to its end.
    ///
    /// `Ok(None)` means more bytes are needed: everything pushed so far is
    /// decoded.
    pub fn next_event(&mut self) -> Result<Option<SseEvent>, SseError> {
        self.decode_if_idle();
        self.ready.take().transpose()
    }

    /// Ends the stream.
    ///
    /// While pushed bytes hold events or errors this returns them, like
    /// [`next_event`](Self::next_event): call it until it returns `Ok(None)`.
    /// Then, as the HTML standard says, an event not yet ended by a blank line
    /// is discarded, and so is a last line without a line end (it is never
    /// processed, so e.g. a final `id:` line without line end does not change
    /// the last event id); `finish` returns `Ok(None)` and the decoder is ready
    /// for a new stream, keeping [`last_event_id`](Self::last_event_id) and
    /// [`retry`](Self::retry).
    pub fn finish(&mut self) -> Result<Option<SseEvent>, SseError> {
        if let Some(result) = self.next_event().transpose() {
            return result.map(Some);
        }
        self.line = Vec::new();
        self.reset_block();
        self.after_cr = false;
        self.bom = Some(0);
        self.discarding = false;
        self.discard_line_nonempty = false;
        Ok(None)
    }

    /// The stream's last event id so far, as the HTML standard defines it: set
    /// by `id` fields (an empty one clears it, one containing NUL is ignored)
    /// when their event is dispatched, and kept across events.
    pub fn last_event_id(&self) -> Option<&str> {
        self.last_event_id.as_deref()
    }

    /// The reconnection time from the last valid `retry` field (ASCII digits
    /// only, in milliseconds), updated as soon as that field is decoded.
    pub fn retry(&self) -> Option<Duration> {
        self.retry
    }

    /// Every byte the decoder holds: the input pushed and not decoded yet;
    /// the event being decoded, with the unterminated line and an id it set
    /// (together at most the limit); the stream's last event id; and the
    /// event decoded and not taken yet by [`next_event`](Self::next_event)
    /// (its id is the last event id, shared).
    pub fn buffered_len(&self) -> usize {
        let ready = match &self.ready {
            Some(Ok(event)) => event.data.len() + event.event.as_ref().map_or(0, String::len),
            _ => 0,
        };
        self.pending().len()
            + self.held()
            + self.last_event_id.as_ref().map_or(0, |id| id.len())
            + ready
    }

    /// The bytes held for the event being decoded, checked against the limit:
    /// the unterminated line, the data, the event type, and an id the block
    /// set itself (an id carried over from an earlier event is shared, and
    /// counted once as the last event id).
    /// What the decoder has allocated, which can be up to twice
    /// [`buffered_len`](Self::buffered_len) (its buffers grow by doubling):
    /// what a memory budget is charged.
    pub(crate) fn allocated_len(&self) -> usize {
        let ready = match &self.ready {
            Some(Ok(event)) => {
                event.data.capacity() + event.event.as_ref().map_or(0, String::capacity)
            }
            _ => 0,
        };
        // The input as a whole: the decoded part of a chunk is held until
        // the chunk is all decoded.
        self.input.len()
            + self.line.capacity()
            + self.data.capacity()
            + self.event_type.capacity()
            + self.id_buffer.as_ref().map_or(0, |id| id.len())
            + self.last_event_id.as_ref().map_or(0, |id| id.len())
            + ready
    }

    fn held(&self) -> usize {
        let own_id = if self.block_id {
            self.id_buffer.as_ref().map_or(0, |id| id.len())
        } else {
            0
        };
        self.line.len() + self.data.len() + self.event_type.len() + own_id
    }

    /// Decodes the pending input up to the next event; see
    /// [`decode_from`](Self::decode_from).
    fn decode(&mut self) {
        if self.pending().is_empty() {
            return;
        }
        // Taken out, as decoding needs `self` too; put back (a move, not a
        // copy) if an event stops it before the end.
        let input = std::mem::take(&mut self.input);
        let pos = self.pos + self.decode_from(&input[self.pos..]);
        if pos < input.len() {
            self.input = input;
            self.pos = pos;
        } else {
            // All decoded: the chunk is released.
            self.pos = 0;
        }
    }

    /// Decodes `input` line by line until an event or an error is ready, or
    /// `input` is used up; returns how many bytes it used. The BOM is already
    /// handled.
    fn decode_from(&mut self, input: &[u8]) -> usize {
        let mut rest = input;
        while self.ready.is_none() && !rest.is_empty() {
            if self.after_cr {
                self.after_cr = false;
                if rest[0] == b'\n' {
                    rest = &rest[1..];
                    continue;
                }
            }
            let Some(end) = memchr2(b'\n', b'\r', rest) else {
                self.hold(rest);
                rest = &[];
                break;
            };
            let mut next = end + 1;
            if rest[end] == b'\r' {
                match rest.get(next) {
                    Some(b'\n') => next += 1,
                    Some(_) => {}
                    None => self.after_cr = true,
                }
            }
            self.end_line(&rest[..end]);
            rest = &rest[next..];
        }
        input.len() - rest.len()
    }

    /// Keeps the start of a line whose end has not arrived yet.
    fn hold(&mut self, part: &[u8]) {
        if self.discarding {
            self.discard_line_nonempty = true;
        } else if self.held() + part.len() > self.max {
            self.fail(SseError::EventTooLarge { limit: self.max });
            self.discard_line_nonempty = true;
        } else {
            self.line.extend_from_slice(part);
        }
    }

    /// A line end arrived; `tail` is the part of the line in this input.
    fn end_line(&mut self, tail: &[u8]) {
        if self.discarding {
            let blank = tail.is_empty() && !self.discard_line_nonempty;
            self.discard_line_nonempty = false;
            if blank {
                self.discarding = false;
            }
            return;
        }
        if self.held() + tail.len() > self.max {
            self.fail(SseError::EventTooLarge { limit: self.max });
            return;
        }
        if self.line.is_empty() {
            self.process_line(tail);
        } else {
            let mut line = std::mem::take(&mut self.line);
            line.extend_from_slice(tail);
            if line.capacity() > KEEP_CAPACITY && self.data.is_empty() {
                if let Some(value) = data_value_start(&line) {
                    // A long first `data` line, the usual shape of a large
                    // message: its buffer becomes the data, not copied.
                    line.drain(..value);
                    return self.start_data(line);
                }
            }
            self.process_line(&line);
            if line.capacity() <= KEEP_CAPACITY {
                line.clear();
                self.line = line;
            }
        }
    }

    /// The first `data` value of the block, `value`, as the data buffer.
    fn start_data(&mut self, value: Vec<u8>) {
        match String::from_utf8(value) {
            Ok(mut data) => {
                self.seen_field = true;
                data.push('\n');
                self.data = data;
            }
            Err(_) => self.fail(SseError::InvalidUtf8),
        }
    }

    /// Interprets one complete line, without its line end.
    fn process_line(&mut self, line: &[u8]) {
        if line.is_empty() {
            self.dispatch();
            return;
        }
        let (name, value) = match memchr(b':', line) {
            Some(0) => return, // a comment
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &b""[..]),
        };
        match name {
            b"data" => {
                let Ok(value) = std::str::from_utf8(value) else {
                    return self.fail(SseError::InvalidUtf8);
                };
                self.seen_field = true;
                // One allocation for a one-line event, not two.
                self.data.reserve(value.len() + 1);
                self.data.push_str(value);
                self.data.push('\n');
            }
            b"event" => {
                let Ok(value) = std::str::from_utf8(value) else {
                    return self.fail(SseError::InvalidUtf8);
                };
                self.seen_field = true;
                clear(&mut self.event_type);
                self.event_type.push_str(value);
            }
            b"id" => {
                let Ok(value) = std::str::from_utf8(value) else {
                    return self.fail(SseError::InvalidUtf8);
                };
                self.seen_field = true;
                if !value.contains('\0') {
                    self.id_buffer = (!value.is_empty()).then(|| Arc::from(value));
                    self.block_id = true;
                }
            }
            b"retry" => {
                self.seen_field = true;
                if !value.is_empty() && value.iter().all(u8::is_ascii_digit) {
                    // All ASCII digits, so only an overflow can fail: ignore it.
                    if let Some(ms) = std::str::from_utf8(value)
                        .ok()
                        .and_then(|v| v.parse::<u64>().ok())
                    {
                        let retry = Duration::from_millis(ms);
                        self.retry = Some(retry);
                        self.block_retry = Some(retry);
                    }
                }
            }
            _ => {}
        }
    }

    /// A blank line: dispatches the block, if it had a field.
    fn dispatch(&mut self) {
        if !self.seen_field {
            clear(&mut self.event_type);
            return;
        }
        let mut data = std::mem::take(&mut self.data);
        if data.ends_with('\n') {
            data.pop();
        }
        let event = (!self.event_type.is_empty()).then(|| std::mem::take(&mut self.event_type));
        // Shared, not copied: a long id costs its bytes once, however many
        // events carry it.
        self.last_event_id.clone_from(&self.id_buffer);
        self.ready = Some(Ok(SseEvent {
            event,
            data,
            id: self.last_event_id.clone(),
            own_id: std::mem::take(&mut self.block_id),
            retry: self.block_retry.take(),
        }));
        self.seen_field = false;
        clear(&mut self.event_type);
    }

    /// Makes `error` the next result, drops the block being read and skips
    /// to its end.
    fn fail(&mut self, error: SseError) {
        self.ready = Some(Err(error));
        self.line = Vec::new();
        self.reset_block();
        self.discarding = true;
        self.discard_line_nonempty = false;
    }

    /// Forgets the block being read, releasing its memory.
    fn reset_block(&mut self) {
        self.data = String::new();
        self.event_type = String::new();
        self.id_buffer.clone_from(&self.last_event_id);
        self.block_retry = None;
        self.block_id = false;
        self.seen_field = false;
    }
}

/// Where the value of a `data` field's line starts, if it is one with a
/// colon (as [`SseDecoder::process_line`] reads it).
fn data_value_start(line: &[u8]) -> Option<usize> {
    let rest = line.strip_prefix(b"data:")?;
    Some(if rest.starts_with(b" ") { 6 } else { 5 })
}

/// Empties `buffer`, releasing its memory if it grew large.
fn clear(buffer: &mut String) {
    if buffer.capacity() > KEEP_CAPACITY {
        *buffer = String::new();
    } else {
        buffer.clear();
    }
}

impl Default for SseDecoder {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for SseDecoder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Sizes only: the buffers may be megabytes of untrusted text.
        f.debug_struct("SseDecoder")
            .field("max_event_size", &self.max)
            .field("buffered_len", &self.buffered_len())
            .field("ready", &self.ready.is_some())
            .field("last_event_id", &self.last_event_id)
            .field("retry", &self.retry)
            .field("discarding", &self.discarding)
            .finish_non_exhaustive()
    }
}

/// One dispatched event block.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SseEvent {
    /// The `event` field: `None` for the default type, `message`.
    pub event: Option<String>,
    /// The `data` lines joined with LF (no trailing LF); empty if none.
    pub data: String,
    /// The stream's last event id as of this event (it carries over from
    /// earlier events when this one has no `id` field). Shared with the
    /// decoder and with the other events that carry it: cloning it is cheap
    /// whatever its length.
    pub id: Option<Arc<str>>,
    /// Whether this event has an `id` field of its own (then `id` is its
    /// id), rather than carrying an earlier event's over.
    pub own_id: bool,
    /// The reconnection time set by a valid `retry` field of this block.
    pub retry: Option<Duration>,
}

impl SseEvent {
    /// Whether the event carries data: false for an MCP priming event (an
    /// `id` with empty `data`) and for `id`-, `event`- or `retry`-only blocks.
    pub fn has_data(&self) -> bool {
        !self.data.is_empty()
    }
}

/// Why a stream could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SseError {
    /// An event (or one of its lines) passed the decoder's size limit.
    #[non_exhaustive]
    EventTooLarge {
        /// The limit in bytes.
        limit: usize,
    },
    /// A `data`, `event` or `id` value is not valid UTF-8.
    InvalidUtf8,
}

impl fmt::Display for SseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::EventTooLarge { limit } => write!(f, "SSE event exceeds the {limit}-byte limit"),
            Self::InvalidUtf8 => f.write_str("SSE event field value is not valid UTF-8"),
        }
    }
}

impl std::error::Error for SseError {}

#[cfg(test)]
mod tests {
    use super::*;

    /// Decodes `chunks` pushed one by one, then `finish`.
    fn decode_with(mut decoder: SseDecoder, chunks: &[&[u8]]) -> Vec<Result<SseEvent, SseError>> {
        let mut out = Vec::new();
        for chunk in chunks {
            decoder.push(chunk);
            loop {
                match decoder.next_event() {
                    Ok(Some(event)) => out.push(Ok(event)),
                    Ok(None) => break,
                    Err(error) => out.push(Err(error)),
                }
            }
        }
        assert_eq!(decoder.finish(), Ok(None));
        out
    }

    fn decode(chunks: &[&[u8]]) -> Vec<Result<SseEvent, SseError>> {
        decode_with(SseDecoder::new(), chunks)
    }

    fn msg(data: &str) -> Result<SseEvent, SseError> {
        Ok(SseEvent {
            event: None,
            data: data.into(),
            id: None,
            own_id: false,
            retry: None,
        })
    }

    /// Every way of cutting `input` in two or three chunks decodes alike.
    fn assert_split_invariant(input: &[u8], expected: &[Result<SseEvent, SseError>]) {
        assert_eq!(decode(&[input]), expected, "whole input");
        for i in 0..=input.len() {
            assert_eq!(
                decode(&[&input[..i], &input[i..]]),
                expected,
                "split at {i}"
            );
            for j in i..=input.len() {
                let chunks = [&input[..i], &input[i..j], &input[j..]];
                assert_eq!(decode(&chunks), expected, "split at {i}, {j}");
            }
        }
        let bytes: Vec<&[u8]> = input.chunks(1).collect();
        assert_eq!(decode(&bytes), expected, "byte by byte");
    }

    #[test]
    fn lf_cr_and_crlf_line_ends() {
        assert_split_invariant(
            b"data: a\n\ndata: b\r\rdata: c\r\n\r\ndata: d\r\ndata: e\n\r",
            &[msg("a"), msg("b"), msg("c"), msg("d\ne")],
        );
    }

    #[test]
    fn crlf_split_between_chunks_is_one_line_end() {
        // Were the LF taken for a second line end, "a" would be dispatched
        // alone and "b" after it.
        assert_eq!(decode(&[b"data: a\r", b"\ndata: b\r\n\r\n"]), [msg("a\nb")]);
        assert_eq!(
            decode(&[b"data: a\r\n\r", b"\ndata: b\r\n\r", b"\n"]),
            [msg("a"), msg("b")]
        );
        // A lone CR at a chunk end, then another line: CR alone is a line end.
        assert_eq!(decode(&[b"data: a\r", b"\r"]), [msg("a")]);
    }

    #[test]
    fn leading_bom_is_stripped_once() {
        assert_split_invariant(b"\xEF\xBB\xBFdata: x\n\n", &[msg("x")]);
        // A second BOM is not at the stream's start: it is part of the line,
        // whose field name is then unknown.
        assert_eq!(
            decode(&[b"\xEF\xBB\xBF\xEF\xBB\xBFdata: x\n\ndata: y\n\n"]),
            [msg("y")]
        );
        // A partial BOM is stream content (and invalid UTF-8 in a name: ignored).
        assert_eq!(
            decode(&[b"\xEF\xBB", b"data: x\n\ndata: y\n\n"]),
            [msg("y")]
        );
    }

    #[test]
    fn comments_are_ignored() {
        assert_split_invariant(
            b": hello\n\n:\n: x\ndata: a\n: y\ndata: b\n\n",
            &[msg("a\nb")],
        );
    }

    #[test]
    fn priming_event_sets_the_last_event_id_and_has_no_data() {
        let mut decoder = SseDecoder::new();
        decoder.push(b"id: 42\ndata:\n\n");
        let priming = decoder.next_event().unwrap().unwrap();
        assert!(!priming.has_data());
        assert_eq!(priming.id.as_deref(), Some("42"));
        assert_eq!(decoder.last_event_id(), Some("42"));
        decoder.push(b"data: {}\n\n");
        let real = decoder.next_event().unwrap().unwrap();
        assert!(real.has_data());
        assert_eq!(real.id.as_deref(), Some("42"), "the id carries over");
        // An id-only block is an event too.
        decoder.push(b"id: 43\n\n");
        let id_only = decoder.next_event().unwrap().unwrap();
        assert!(!id_only.has_data());
        assert_eq!(decoder.last_event_id(), Some("43"));
    }

    #[test]
    fn id_semantics() {
        let mut decoder = SseDecoder::new();
        decoder.push(b"id: a\0b\ndata: x\n\n");
        assert_eq!(
            decoder.next_event().unwrap().unwrap().id,
            None,
            "NUL id ignored"
        );
        decoder.push(b"id: 1\ndata: x\n\nid\ndata: y\n\n");
        assert_eq!(
            decoder.next_event().unwrap().unwrap().id.as_deref(),
            Some("1")
        );
        assert_eq!(
            decoder.next_event().unwrap().unwrap().id,
            None,
            "empty id clears"
        );
        assert_eq!(decoder.last_event_id(), None);
        // The id is committed at dispatch: an unterminated block does not set it.
        decoder.push(b"id: 2\ndata: z\n");
        assert_eq!(decoder.next_event(), Ok(None));
        assert_eq!(decoder.last_event_id(), None);
        assert_eq!(decoder.finish(), Ok(None));
        assert_eq!(decoder.last_event_id(), None);
    }

    #[test]
    fn retry_is_parsed_and_retry_only_blocks_are_events() {
        let mut decoder = SseDecoder::new();
        decoder.push(b"retry: 1500\n\n");
        let event = decoder.next_event().unwrap().unwrap();
        assert_eq!(event.retry, Some(Duration::from_millis(1500)));
        assert!(!event.has_data());
        assert_eq!(decoder.retry(), Some(Duration::from_millis(1500)));
        // Invalid values are ignored: not digits only, signed, empty, overflow.
        decoder.push(b"retry: 15s\nretry: -1\nretry: +3\nretry:\nretry: 99999999999999999999999\ndata: x\n\n");
        let event = decoder.next_event().unwrap().unwrap();
        assert_eq!(event.retry, None);
        assert_eq!(decoder.retry(), Some(Duration::from_millis(1500)));
        decoder.push(b"retry:0\ndata: y\n\n");
        assert_eq!(
            decoder.next_event().unwrap().unwrap().retry,
            Some(Duration::ZERO)
        );
    }

    #[test]
    fn field_forms() {
        assert_split_invariant(
            b"data\n\ndata:x\ndata: y\ndata:  z\n\ndata\ndata\n\n",
            &[msg(""), msg("x\ny\n z"), msg("\n")],
        );
        let events = decode(&[b"event: ping\ndata: a:b\nunknown: q\nevent\ndata\n\nevent: up\nevent: down\ndata: 1\n\n"]);
        assert_eq!(
            events,
            [
                msg("a:b\n"),
                Ok(SseEvent {
                    event: Some("down".into()),
                    data: "1".into(),
                    id: None,
                    own_id: false,
                    retry: None
                }),
            ]
        );
        // Comment-only and unknown-field-only blocks yield nothing.
        assert_eq!(decode(&[b": c\n\nfoo: bar\n\n\n\n"]), []);
    }

    #[test]
    fn unterminated_event_is_discarded_at_finish() {
        assert_eq!(decode(&[b"data: a\n\ndata: b\n"]), [msg("a")]);
        assert_eq!(decode(&[b"data: a\n\ndata: b"]), [msg("a")]);
        let mut decoder = SseDecoder::new();
        decoder.push(b"data: a\n\ndata: b\n\n");
        // finish drains what is queued first.
        assert_eq!(decoder.finish(), Ok(Some(msg("a").unwrap())));
        assert_eq!(decoder.finish(), Ok(Some(msg("b").unwrap())));
        assert_eq!(decoder.finish(), Ok(None));
        // And then the decoder reads a new stream, BOM and all.
        decoder.push(b"\xEF\xBB\xBFdata: c\n\n");
        assert_eq!(decoder.next_event(), Ok(Some(msg("c").unwrap())));
    }

    #[test]
    fn endless_line_errors_with_bounded_memory() {
        let limit = 1024 * 1024;
        let mut decoder = SseDecoder::with_max_event_size(limit);
        let chunk = vec![b'x'; 8 * 1024];
        let mut errors = 0;
        decoder.push(b"data: ");
        for _ in 0..(64 * 1024 / 8) {
            decoder.push(&chunk);
            assert!(decoder.buffered_len() <= limit);
            loop {
                match decoder.next_event() {
                    Ok(None) => break,
                    Ok(Some(event)) => panic!("unexpected {event:?}"),
                    Err(error) => {
                        assert_eq!(error, SseError::EventTooLarge { limit });
                        errors += 1;
                    }
                }
            }
        }
        assert_eq!(errors, 1, "one error, then the line is skipped");
        // The decoder resynchronizes after the next blank line.
        decoder.push(b"\ndata: dropped\n\ndata: ok\n\n");
        assert_eq!(decoder.next_event(), Ok(Some(msg("ok").unwrap())));
    }

    #[test]
    fn endless_comment_and_unknown_field_lines_are_bounded_too() {
        for start in [&b":"[..], b"x", b"data", b""] {
            let mut decoder = SseDecoder::with_max_event_size(100);
            decoder.push(start);
            let mut results = Vec::new();
            for _ in 0..100 {
                decoder.push(&[b'y'; 7]);
                assert!(decoder.buffered_len() <= 100);
                while let Some(result) = decoder.next_event().transpose() {
                    results.push(result);
                }
            }
            assert_eq!(results, [Err(SseError::EventTooLarge { limit: 100 })]);
        }
    }

    #[test]
    fn many_data_lines_past_the_limit_error() {
        let limit = 64 * 1024;
        let mut decoder = SseDecoder::with_max_event_size(limit);
        let lines = b"data: 0123456789\n".repeat(100);
        let mut result = Ok(None);
        for _ in 0..1000 {
            decoder.push(&lines);
            assert!(decoder.buffered_len() <= limit);
            result = decoder.next_event();
            if result.is_err() {
                break;
            }
        }
        assert_eq!(result, Err(SseError::EventTooLarge { limit }));
        // Empty data lines count too (each holds a newline).
        let mut decoder = SseDecoder::with_max_event_size(100);
        decoder.push(&b"data\n".repeat(101));
        assert_eq!(
            decoder.next_event(),
            Err(SseError::EventTooLarge { limit: 100 })
        );
        assert!(decoder.buffered_len() <= 100);
    }

    #[test]
    fn an_event_up_to_the_limit_passes() {
        // "data: " + 94 bytes = 100 bytes held while the line is read.
        let payload = "p".repeat(94);
        let input = format!("data: {payload}\n\n");
        assert_eq!(
            decode_with(SseDecoder::with_max_event_size(100), &[input.as_bytes()]),
            [msg(&payload)]
        );
        assert_eq!(
            decode_with(SseDecoder::with_max_event_size(99), &[input.as_bytes()]),
            [Err(SseError::EventTooLarge { limit: 99 })]
        );
    }

    #[test]
    fn multibyte_utf8_split_across_chunks() {
        let input = "event: é\u{1F600}\ndata: ünï\u{20AC}ode \u{1F980}\n\n".as_bytes();
        let expected = [Ok(SseEvent {
            event: Some("é\u{1F600}".into()),
            data: "ünï\u{20AC}ode \u{1F980}".into(),
            id: None,
            own_id: false,
            retry: None,
        })];
        assert_split_invariant(input, &expected);
    }

    #[test]
    fn invalid_utf8_is_an_error_and_the_event_is_skipped() {
        for bad in [
            &b"data: \xFF\n"[..],
            b"event: \xC3\n",
            b"id: \xE2\x82\n",
            b"data: \xED\xA0\x80\n",
        ] {
            let mut input = b"data: a\n\n".to_vec();
            input.extend_from_slice(bad);
            input.extend_from_slice(b"data: skipped\n\ndata: b\n\n");
            assert_eq!(
                decode(&[&input]),
                [msg("a"), Err(SseError::InvalidUtf8), msg("b")],
                "{bad:?}"
            );
        }
        // Invalid bytes in a comment or an unknown field's line are ignored.
        assert_eq!(decode(&[b": \xFF\n\xFF: 1\ndata: a\n\n"]), [msg("a")]);
    }

    #[test]
    fn errors_keep_stream_order() {
        let mut decoder = SseDecoder::with_max_event_size(16);
        decoder.push(b"data: 1\n\ndata: far too long a line\n\ndata: 2\n\n");
        assert_eq!(decoder.next_event(), Ok(Some(msg("1").unwrap())));
        let error = decoder.next_event().unwrap_err();
        assert_eq!(error.to_string(), "SSE event exceeds the 16-byte limit");
        assert_eq!(decoder.next_event(), Ok(Some(msg("2").unwrap())));
        assert_eq!(decoder.next_event(), Ok(None));
    }

    #[test]
    fn default_limit_message() {
        let error = SseError::EventTooLarge {
            limit: SseDecoder::DEFAULT_MAX_EVENT_SIZE,
        };
        assert_eq!(
            error.to_string(),
            "SSE event exceeds the 8388608-byte limit"
        );
        let _: &dyn std::error::Error = &error;
    }

    #[test]
    fn an_event_tells_its_own_id_from_a_carried_one() {
        let mut decoder = SseDecoder::new();
        decoder.push(b"id: 1\ndata: a\n\ndata: b\n\nid\ndata: c\n\n");
        let first = decoder.next_event().unwrap().unwrap();
        let second = decoder.next_event().unwrap().unwrap();
        let third = decoder.next_event().unwrap().unwrap();
        assert_eq!((first.id.as_deref(), first.own_id), (Some("1"), true));
        assert_eq!((second.id.as_deref(), second.own_id), (Some("1"), false));
        // An empty `id` clears the last event id, and is the event's own.
        assert_eq!((third.id.as_deref(), third.own_id), (None, true));
    }
    #[test]
    fn a_long_id_is_shared_by_the_events_that_carry_it() {
        let id = "i".repeat(64 * 1024);
        let mut decoder = SseDecoder::new();
        decoder.push(format!("id: {id}\n\n").as_bytes());
        let first = decoder.next_event().unwrap().unwrap();
        let mut events = vec![first];
        decoder.push(&b"event\n\ndata: x\n\n".repeat(100));
        while let Some(event) = decoder.next_event().unwrap() {
            events.push(event);
        }
        assert_eq!(events.len(), 201);
        let shared = events[0].id.clone().unwrap();
        assert_eq!(&*shared, id);
        for event in &events {
            assert!(Arc::ptr_eq(event.id.as_ref().unwrap(), &shared), "a copy");
        }
        // Held once: by the decoder, not per event.
        assert_eq!(decoder.buffered_len(), id.len());
    }

    #[test]
    fn events_are_decoded_as_they_are_taken() {
        let chunk = b"id: 1\ndata: x\n\n".repeat(1000);
        let mut decoder = SseDecoder::with_max_event_size(64);
        decoder.push(&chunk);
        // One event decoded, the rest of the chunk kept as it is.
        assert!(decoder.ready.is_some());
        assert_eq!(decoder.pending().len(), chunk.len() - 15);
        assert!(decoder.buffered_len() <= chunk.len());
        let mut taken = 0;
        while let Some(event) = decoder.next_event().unwrap() {
            assert_eq!(event.data, "x");
            taken += 1;
            assert!(decoder.buffered_len() <= chunk.len() - 15 * taken + 2);
        }
        assert_eq!(taken, 1000);
        assert_eq!(decoder.buffered_len(), 1, "the last event id");
    }

    #[test]
    fn buffers_that_grew_large_are_released() {
        let mut decoder = SseDecoder::new();
        let long = "v".repeat(1024 * 1024);
        decoder.push(format!("event: {long}").as_bytes());
        decoder.push(format!("\nevent\ndata: {long}").as_bytes());
        decoder.push(b"\n\n");
        let event = decoder.next_event().unwrap().unwrap();
        assert_eq!(event.event, None);
        assert_eq!(event.data.len(), long.len());
        assert!(decoder.line.capacity() <= KEEP_CAPACITY);
        assert!(decoder.event_type.capacity() <= KEEP_CAPACITY);
        assert!(decoder.data.capacity() <= KEEP_CAPACITY);
    }

    #[test]
    fn bytes_pushed_as_bytes_decode_alike() {
        let input = b"\xEF\xBB\xBFid: 1\ndata: a\r\n\r\ndata: b\n\n";
        let mut decoder = SseDecoder::new();
        let mut out = Vec::new();
        for piece in [&input[..1], &input[1..9], &input[9..22], &input[22..]] {
            decoder.push_bytes(Bytes::copy_from_slice(piece));
            while let Some(event) = decoder.next_event().unwrap() {
                out.push(event);
            }
        }
        assert_eq!(
            out,
            decode(&[input])
                .into_iter()
                .map(Result::unwrap)
                .collect::<Vec<_>>()
        );
        assert_eq!(out.len(), 2);
    }
    #[test]
    fn a_long_data_line_carried_over_chunks_decodes_as_a_whole_one() {
        let long = "é".repeat(50 * 1024);
        for (input, want) in [
            (format!("data: {long}\ndata: b\n\n"), format!("{long}\nb")),
            (format!("data:{long}\n\n"), long.clone()),
            (format!("data:  {long}\r\n\r\n"), format!(" {long}")),
            (format!("data: a\ndata: {long}\n\n"), format!("a\n{long}")),
            (format!("event: x\ndata: {long}\n\n"), long.clone()),
        ] {
            let input = input.as_bytes();
            let whole = decode(&[input]);
            assert_eq!(whole.len(), 1);
            assert_eq!(whole[0].as_ref().unwrap().data, want);
            for cut in [1, 7, 4096, input.len() / 2 + 1, input.len() - 3] {
                let chunks: Vec<&[u8]> = input.chunks(cut).collect();
                assert_eq!(decode(&chunks), whole, "chunks of {cut}");
            }
        }
        // Invalid UTF-8 in a long line is an error, and the event is skipped.
        let mut input = b"data: ".to_vec();
        input.extend_from_slice(&[b'x'; 100 * 1024]);
        input.extend_from_slice(b"\xFF\ndata: skipped\n\ndata: ok\n\n");
        let chunks: Vec<&[u8]> = input.chunks(8192).collect();
        assert_eq!(decode(&chunks), [Err(SseError::InvalidUtf8), msg("ok")]);
    }
}
