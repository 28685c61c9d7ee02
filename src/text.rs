//! Showing a server's text to people: escaped and bounded, a leaf used by
//! the stdio transport (stderr, stray stdout) and by HTTP error bodies.

/// What marks text that was cut.
pub(crate) const MARK: &str = "…";

/// `text` with its control characters escaped as Rust writes them (`\n`,
/// `\t`, `\u{1b}`), and the invisible characters that reorder or hide what
/// a terminal shows (bidirectional overrides, zero-width ones) as `\u{..}`,
/// so a server's output cannot move a host's cursor, recolour its terminal
/// or disguise itself; at most `max` bytes (cut between two characters,
/// `…` after).
///
/// For a host's own log of what a server sent (the crate's errors and
/// logs already use it): method names, stderr, tool output.
///
/// ```
/// let shown = mcp_scoped_http::escape_server_text("ok\u{1b}[2J\u{202e}", 64);
/// assert_eq!(shown, "ok\\u{1b}[2J\\u{202e}");
/// assert_eq!(mcp_scoped_http::escape_server_text("abcdef", 3), "abc…");
/// ```
pub fn escape(text: &str, max: usize) -> String {
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
            out.push_str(MARK);
            break;
        }
        out.push_str(&piece);
    }
    out
}

/// The format characters that change how the text around them shows:
/// bidirectional controls, zero-width characters, the byte order mark.
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
