//! Two small helpers the fleet keeps its own copies of, so that it is
//! built on the crate's public API alone (it could live in a crate of its
//! own): a poison-tolerant lock, and escaping a server's text for a log.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks `mutex`, ignoring poison: every fleet mutex guards a value changed
/// in one step under the lock, so a panic elsewhere cannot leave it
/// half-changed.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// `text` with control characters and the invisible ones that reorder or
/// hide what a terminal shows escaped, and at most `max` bytes (cut between
/// two characters, `…` after): a server's text in the host's log cannot
/// move its cursor or flood it.
pub(crate) fn escape(text: &str, max: usize) -> String {
    let mut out = String::with_capacity(text.len().min(max));
    let mut piece = String::new();
    for c in text.chars() {
        piece.clear();
        if c.is_control() {
            piece.extend(c.escape_default());
        } else if hidden(c) {
            piece.extend(c.escape_unicode());
        } else {
            piece.push(c);
        }
        if out.len().saturating_add(piece.len()) > max {
            out.push('…');
            break;
        }
        out.push_str(&piece);
    }
    out
}

/// Bidirectional controls, zero-width characters, the byte order mark.
fn hidden(c: char) -> bool {
    matches!(
        c,
        '\u{061c}' | '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2060}'..='\u{2069}' | '\u{feff}'
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_hides_nothing_and_cuts() {
        assert_eq!(escape("a\u{1b}[31m\u{202e}b", 64), "a\\u{1b}[31m\\u{202e}b");
        assert_eq!(escape(&"x".repeat(10), 4), "xxxx…");
    }
}
