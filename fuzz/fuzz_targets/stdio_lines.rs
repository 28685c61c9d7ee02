//! A stdio server's stdout through the transport's line reader
//! (`wire::stdio_lines`), in memory, checked against a model of the
//! framing written from its rules, line by line.
//!
//! Input layout (missing bytes read as zero):
//!
//! | bytes | meaning |
//! | --- | --- |
//! | 0 | `chunk = 1 + byte`: the reader's reads, 1..=256 bytes |
//! | 1..3 | `max_line = 1 + (u16 little-endian % 4096)`, 1..=4096 |
//! | 3 | low 3 bits: `max_batch = 1 + bits`, 1..=8; bit 3: a tiny memory budget |
//! | 4 | the tiny budget: `512 + 16 * byte` bytes (else 64 MiB) |
//! | the rest | the stream |
//!
//! The model: a line ends at `\n` (a last one at the end of the stream
//! without it); one `\r` before its end is dropped. A line over `max_line`
//! ends the stream with a limit error; a blank line is nothing; a line
//! that is not UTF-8 ends it with a protocol error; a line that
//! `parse_messages` reads gives its messages (a batch over `max_batch`: a
//! limit error), and every such line is one the estimate reads; any other
//! line is skipped and counted. Checked:
//! - never a panic;
//! - the messages are the model's, in order, and none comes from a line
//!   over the limit or after the error that ended the stream;
//! - a clean end reads every line, with the model's count of skipped ones;
//! - an error ends the stream at a line where the model ends it, with its
//!   kind; or, a limit error, at the start of any line when the budget is
//!   tiny (the line's bytes or its estimate refused), or of a line that is
//!   a JSON array (the estimate refuses a batch at its message
//!   `max_batch + 1`, before it sees that the rest is not JSON-RPC).

#![no_main]

use libfuzzer_sys::fuzz_target;
use mcp_scoped_http::jsonrpc::{Batch, Message, parse_messages};
use mcp_scoped_http::wire::{estimated_messages_cost, stdio_lines};

/// What the model says one line does.
enum Line {
    /// Nothing but whitespace: nothing.
    Blank,
    /// Not JSON-RPC: counted; `batch` when it is a JSON array.
    Skip { batch: bool },
    /// These messages, in order.
    Messages(Vec<Message>),
    /// Ends the stream with a limit error.
    Limit,
    /// Ends the stream with a protocol error.
    Protocol,
}

/// The stream's lines, up to the first that ends it.
fn model(stream: &[u8], max_line: usize, max_batch: usize) -> Vec<Line> {
    let mut pieces: Vec<&[u8]> = stream.split(|&b| b == b'\n').collect();
    // After the last `\n`: a line only if something is there.
    if pieces.last().is_some_and(|last| last.is_empty()) {
        pieces.pop();
    }
    let mut lines = Vec::new();
    for piece in pieces {
        let text = piece.strip_suffix(b"\r").unwrap_or(piece);
        let line = if text.len() > max_line {
            Line::Limit
        } else if text.iter().all(u8::is_ascii_whitespace) {
            Line::Blank
        } else if std::str::from_utf8(text).is_err() {
            Line::Protocol
        } else {
            let batch = text.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'[');
            match parse_messages(text, usize::MAX).map(Batch::into_vec) {
                Ok(messages) => {
                    assert!(
                        estimated_messages_cost(text).is_some(),
                        "parsed what the estimate cannot read: {:?}",
                        String::from_utf8_lossy(text)
                    );
                    if batch && messages.len() > max_batch {
                        Line::Limit
                    } else {
                        Line::Messages(messages)
                    }
                }
                Err(_) => Line::Skip { batch },
            }
        };
        let ends = matches!(line, Line::Limit | Line::Protocol);
        lines.push(line);
        if ends {
            break;
        }
    }
    lines
}

fuzz_target!(|data: &[u8]| {
    let byte = |i: usize| data.get(i).copied().unwrap_or(0);
    let chunk = 1 + usize::from(byte(0));
    let max_line = 1 + usize::from(u16::from_le_bytes([byte(1), byte(2)]) % 4096);
    let max_batch = 1 + usize::from(byte(3) & 7);
    let tiny = byte(3) & 8 != 0;
    let budget = if tiny {
        512 + 16 * usize::from(byte(4))
    } else {
        64 << 20
    };
    let stream = data.get(5..).unwrap_or_default();

    let (got, skipped, error) = stdio_lines(stream, chunk, max_line, max_batch, budget);
    let lines = model(stream, max_line, max_batch);

    let expected: Vec<&Message> = lines
        .iter()
        .flat_map(|line| match line {
            Line::Messages(messages) => messages.iter().collect(),
            _ => Vec::new(),
        })
        .collect();
    assert!(
        got.len() <= expected.len(),
        "{} messages, the model has {}",
        got.len(),
        expected.len()
    );
    for (i, (got, want)) in got.iter().zip(&expected).enumerate() {
        assert_eq!(got, *want, "message {i}");
    }

    // Walk the model: where may the stream have stopped, and how?
    let (mut messages, mut skips) = (0usize, 0u64);
    let mut ended = false;
    let mut explained = false;
    for line in &lines {
        let here = got.len() == messages && skipped == skips;
        if here {
            if let Some(error) = &error {
                let limit_anywhere = tiny && error.is_limit();
                explained |= limit_anywhere
                    || match line {
                        Line::Limit => error.is_limit(),
                        Line::Protocol => error.is_protocol(),
                        Line::Skip { batch: true } => error.is_limit(),
                        _ => false,
                    };
            }
        }
        match line {
            Line::Blank => {}
            Line::Skip { .. } => skips += 1,
            Line::Messages(list) => messages += list.len(),
            Line::Limit | Line::Protocol => ended = true,
        }
    }
    match &error {
        None => {
            assert!(!ended, "read to the end past a line that ends the stream");
            assert_eq!(got.len(), expected.len(), "every message read");
            assert_eq!(skipped, skips, "lines skipped");
        }
        Some(error) => assert!(
            explained,
            "stopped after {} messages and {skipped} skipped lines with {error:?}",
            got.len()
        ),
    }
});
