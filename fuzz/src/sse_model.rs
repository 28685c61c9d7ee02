//! A reference `text/event-stream` decoder, written from the HTML
//! standard's "Parsing an event stream" and the crate's documented
//! extensions, for whole inputs only (no chunking, no incremental state).
//!
//! It is deliberately simple: split the whole stream into lines, then run
//! the spec's per-line steps. The targets compare the crate's incremental
//! `SseDecoder` against it. What it models, beyond the standard:
//!
//! - a block dispatches when any of `data`, `id`, `event`, `retry` appeared
//!   in it (priming events and retry-only blocks are events);
//! - each event tells whether its `id` is its own (`own_id`) and carries the
//!   `retry` of its block;
//! - the size limit: when a line is complete, the event's data (with its
//!   joining LFs), its event type, an id the block set itself and the whole
//!   line together must not pass `max`; an unterminated last line is checked
//!   the same way;
//! - a `data`, `event` or `id` value that is not UTF-8 is an error;
//! - after an error the rest of the block is skipped, up to and including
//!   the next blank line.

use std::time::Duration;

/// One decoded event, fields as the crate's `SseEvent` has them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// The event type, `None` when empty or absent.
    pub event: Option<String>,
    /// The data lines joined with LF.
    pub data: String,
    /// The last event id as of this event.
    pub id: Option<String>,
    /// Whether the block had an `id` field (that was not ignored for NUL).
    pub own_id: bool,
    /// The block's last valid `retry`.
    pub retry: Option<Duration>,
}

/// An event or an error, in stream order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Item {
    /// A dispatched event.
    Event(Event),
    /// An event or line over the limit.
    TooLarge,
    /// A `data`, `event` or `id` value that is not UTF-8.
    InvalidUtf8,
}

/// What one stream decodes to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decoded {
    /// Events and errors in order.
    pub items: Vec<Item>,
    /// The last event id after the stream.
    pub last_event_id: Option<String>,
    /// The last valid `retry` after the stream.
    pub retry: Option<Duration>,
}

struct State {
    max: usize,
    items: Vec<Item>,
    data: String,
    event_type: String,
    id_buffer: Option<String>,
    last_event_id: Option<String>,
    block_id: bool,
    block_retry: Option<Duration>,
    retry: Option<Duration>,
    seen_field: bool,
    discarding: bool,
}

/// Decodes a whole stream with limit `max`, starting from the last event
/// id and retry a previous stream left (both `None` for a first stream).
pub fn decode(
    input: &[u8],
    max: usize,
    last_event_id: Option<String>,
    retry: Option<Duration>,
) -> Decoded {
    let input = input.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(input);
    let mut state = State {
        max,
        items: Vec::new(),
        data: String::new(),
        event_type: String::new(),
        id_buffer: last_event_id.clone(),
        last_event_id,
        block_id: false,
        block_retry: None,
        retry,
        seen_field: false,
        discarding: false,
    };
    let (lines, rest) = split_lines(input);
    for line in lines {
        state.line(line);
    }
    // An unterminated last line is never processed, but it is held while
    // it arrives, so it can pass the limit.
    if !rest.is_empty() && !state.discarding && state.held() + rest.len() > state.max {
        state.fail(Item::TooLarge);
    }
    Decoded {
        items: state.items,
        last_event_id: state.last_event_id,
        retry: state.retry,
    }
}

/// Splits at CRLF, LF or CR: the complete lines, and what follows the last
/// line end.
pub fn split_lines(input: &[u8]) -> (Vec<&[u8]>, &[u8]) {
    let mut lines = Vec::new();
    let mut start = 0;
    let mut i = 0;
    while i < input.len() {
        match input[i] {
            b'\n' => {
                lines.push(&input[start..i]);
                i += 1;
                start = i;
            }
            b'\r' => {
                lines.push(&input[start..i]);
                i += 1;
                if input.get(i) == Some(&b'\n') {
                    i += 1;
                }
                start = i;
            }
            _ => i += 1,
        }
    }
    (lines, &input[start..])
}

impl State {
    fn held(&self) -> usize {
        // An id the block set itself counts; one carried over does not.
        let own_id = if self.block_id {
            self.id_buffer.as_ref().map_or(0, String::len)
        } else {
            0
        };
        self.data.len() + self.event_type.len() + own_id
    }

    fn line(&mut self, line: &[u8]) {
        if self.discarding {
            if line.is_empty() {
                self.discarding = false;
            }
            return;
        }
        if self.held() + line.len() > self.max {
            return self.fail(Item::TooLarge);
        }
        if line.is_empty() {
            return self.dispatch();
        }
        if line[0] == b':' {
            return;
        }
        let (name, value) = match line.iter().position(|&b| b == b':') {
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &b""[..]),
        };
        match name {
            b"data" | b"event" | b"id" => {
                let Ok(value) = std::str::from_utf8(value) else {
                    return self.fail(Item::InvalidUtf8);
                };
                self.seen_field = true;
                match name {
                    b"data" => {
                        self.data.push_str(value);
                        self.data.push('\n');
                    }
                    b"event" => value.clone_into(&mut self.event_type),
                    _ => {
                        if !value.contains('\0') {
                            self.id_buffer = (!value.is_empty()).then(|| value.to_owned());
                            self.block_id = true;
                        }
                    }
                }
            }
            b"retry" => {
                self.seen_field = true;
                if !value.is_empty() && value.iter().all(u8::is_ascii_digit) {
                    // Digits only: parsing fails only on overflow, ignored.
                    if let Ok(ms) = std::str::from_utf8(value).unwrap().parse::<u64>() {
                        self.retry = Some(Duration::from_millis(ms));
                        self.block_retry = self.retry;
                    }
                }
            }
            _ => {}
        }
    }

    fn dispatch(&mut self) {
        if self.seen_field {
            let mut data = std::mem::take(&mut self.data);
            if data.ends_with('\n') {
                data.pop();
            }
            self.last_event_id.clone_from(&self.id_buffer);
            self.items.push(Item::Event(Event {
                event: (!self.event_type.is_empty()).then(|| self.event_type.clone()),
                data,
                id: self.last_event_id.clone(),
                own_id: self.block_id,
                retry: self.block_retry,
            }));
        }
        self.reset_block();
    }

    fn fail(&mut self, item: Item) {
        self.items.push(item);
        self.reset_block();
        self.discarding = true;
    }

    fn reset_block(&mut self) {
        self.data.clear();
        self.event_type.clear();
        self.id_buffer.clone_from(&self.last_event_id);
        self.block_id = false;
        self.block_retry = None;
        self.seen_field = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(input: &[u8]) -> Vec<Item> {
        decode(input, 1 << 20, None, None).items
    }

    fn msg(data: &str) -> Item {
        Item::Event(Event {
            event: None,
            data: data.into(),
            id: None,
            own_id: false,
            retry: None,
        })
    }

    #[test]
    fn basics() {
        assert_eq!(
            events(b"\xEF\xBB\xBFdata: a\r\n\r\ndata: b\r\rdata:c\ndata\n\n:x\n\n"),
            [msg("a"), msg("b"), msg("c\n")]
        );
        assert_eq!(events(b"data: a\n\ndata: b\n"), [msg("a")]);
        assert_eq!(
            events(b"data: \xFF\ndata: skipped\n\ndata: b\n\n"),
            [Item::InvalidUtf8, msg("b")]
        );
        let decoded = decode(b"id: 7\nretry: 10\n\ndata: x\n\n", 100, None, None);
        assert_eq!(decoded.last_event_id.as_deref(), Some("7"));
        assert_eq!(decoded.retry, Some(Duration::from_millis(10)));
        assert_eq!(
            decode(b"data: 01234567890\n\n", 16, None, None).items,
            [Item::TooLarge]
        );
        assert_eq!(
            decode(b"data: 0123456789\n\n", 16, None, None).items,
            [msg("0123456789")]
        );
    }
}
