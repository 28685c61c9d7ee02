//! A stdio server's stderr: always read to its end, so that a chatty server
//! never blocks on a full pipe, each line logged and the last few KiB kept
//! for the error a host shows its user when the server fails.

// Until the transport (`super`) starts a drain for each server.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::watch;

use crate::sync::lock;
use crate::text::{MARK, escape};

/// The bytes read from stderr at a time: the drain's one buffer.
const READ_BUFFER: usize = 8 * 1024;

/// The most bytes of a line in its `tracing` record.
const RECORD_MAX: usize = 1024;

/// The last few KiB of a server's stderr, shared with the drain.
#[derive(Clone)]
pub(crate) struct StderrTail(Arc<Shared>);

/// What a [`StderrTail`] and its drain share.
struct Shared {
    /// The most bytes of [`StderrTail::text`].
    max_bytes: usize,
    /// The lines kept.
    kept: Mutex<Kept>,
    /// `true` once the drain has ended, whichever way.
    closed: watch::Sender<bool>,
}

/// The lines kept, escaped.
#[derive(Default)]
struct Kept {
    /// Oldest first. A deque of lines, not one string: dropping the oldest
    /// is then O(1), where a flood of short lines would otherwise move the
    /// whole tail for each.
    lines: VecDeque<Box<str>>,
    /// The bytes of the lines joined by `\n`.
    bytes: usize,
    /// Whether anything was dropped (the text then starts with [`MARK`]).
    cut: bool,
}

impl Kept {
    /// The most bytes the lines may take: the mark needs room once cut.
    fn budget(&self, max_bytes: usize) -> usize {
        if self.cut {
            max_bytes.saturating_sub(MARK.len())
        } else {
            max_bytes
        }
    }

    /// Adds a line, dropping the oldest (or the start of the one line
    /// left) to stay within `max_bytes`.
    fn push(&mut self, line: String, max_bytes: usize) {
        let separator = usize::from(!self.lines.is_empty());
        self.bytes = self.bytes.saturating_add(line.len() + separator);
        self.lines.push_back(line.into_boxed_str());
        while self.bytes > self.budget(max_bytes) {
            self.cut = true;
            if self.lines.len() > 1 {
                if let Some(oldest) = self.lines.pop_front() {
                    self.bytes -= oldest.len() + 1;
                }
                continue;
            }
            // One line, over the budget alone: keep its end, the newest.
            let budget = self.budget(max_bytes);
            if let Some(only) = self.lines.front_mut() {
                let mut start = only.len().saturating_sub(budget);
                while !only.is_char_boundary(start) {
                    start += 1;
                }
                *only = only[start..].into();
                self.bytes = only.len();
            }
            break;
        }
    }
}

impl StderrTail {
    /// A tail of at most `max_bytes` of text (the caller's default: 8 KiB).
    pub(crate) fn new(max_bytes: usize) -> Self {
        StderrTail(Arc::new(Shared {
            max_bytes,
            kept: Mutex::new(Kept::default()),
            closed: watch::Sender::new(false),
        }))
    }

    /// The lines kept, oldest first, control characters (other than the
    /// newlines between lines) escaped, at most `max_bytes` (cut at a line
    /// boundary when possible, marked with a leading "…" when cut), for an
    /// error message a host shows its user.
    pub(crate) fn text(&self) -> String {
        let kept = lock(&self.0.kept);
        let mut text = String::with_capacity(kept.bytes + MARK.len());
        // A tail too small for the mark gets none (it is then empty).
        if kept.cut && self.0.max_bytes >= MARK.len() {
            text.push_str(MARK);
        }
        for (i, line) in kept.lines.iter().enumerate() {
            if i > 0 {
                text.push('\n');
            }
            text.push_str(line);
        }
        text
    }

    /// Waits until the drain has reached the stream's end (or failed, or
    /// was dropped).
    pub(crate) async fn closed(&self) {
        let mut closed = self.0.closed.subscribe();
        // The sender lives in `self`: `wait_for` cannot fail for want of it.
        let _ = closed.wait_for(|closed| *closed).await;
    }

    /// Keeps a line (already escaped).
    fn push(&self, line: String) {
        lock(&self.0.kept).push(line, self.0.max_bytes);
    }
}

/// Marks the tail closed when the drain ends, on every way out (its end,
/// an error, its future dropped, even before its first poll).
struct Closing(StderrTail);

impl Drop for Closing {
    fn drop(&mut self) {
        // `send_replace`: it stores the value even with no receiver yet.
        self.0.0.closed.send_replace(true);
    }
}

/// Reads `stderr` to its end, whatever comes, so a chatty server never
/// blocks on a full pipe: each line goes into `tail` and to a
/// `tracing::debug!` record (target `mcp_scoped_http::stdio::stderr`, with
/// the `server` field, the line escaped and cut to ~1 KiB). Memory bounded:
/// a fixed read buffer and the tail; a line of any length (even with no
/// newline ever) costs no more.
///
/// A line is its bytes up to `\n` (a `\r` before it dropped), shown
/// lossily as UTF-8 with control characters escaped; of a line longer than
/// the tail (or than 1 KiB, if the tail is smaller), only its start is
/// kept, followed by "… (N more bytes)". A read error ends the drain as the
/// stream's end does, logged. The tail is closed when the future ends or
/// is dropped, polled or not.
pub(crate) fn drain(
    stderr: impl AsyncRead + Unpin,
    tail: StderrTail,
    server: Arc<str>,
) -> impl Future<Output = ()> {
    // Made before the future: a drain dropped unpolled (its task aborted
    // at once) closes the tail all the same.
    let closing = Closing(tail);
    async move {
        let Closing(tail) = &closing;
        read_to_end(stderr, tail, &server).await;
    }
}

/// The drain's loop: reads `stderr` to its end into `tail`.
async fn read_to_end(mut stderr: impl AsyncRead + Unpin, tail: &StderrTail, server: &str) {
    let mut line = Line {
        keep: tail.0.max_bytes.max(RECORD_MAX),
        bytes: Vec::new(),
        more: 0,
    };
    let mut buffer = vec![0; READ_BUFFER].into_boxed_slice();
    loop {
        let read = match stderr.read(&mut buffer).await {
            Ok(0) => break,
            Ok(read) => read,
            Err(error) => {
                tracing::debug!(
                    target: "mcp_scoped_http::stdio::stderr",
                    server = %server,
                    %error,
                    "reading the server's stderr failed",
                );
                break;
            }
        };
        let mut rest = &buffer[..read];
        while let Some(end) = memchr::memchr(b'\n', rest) {
            line.extend(&rest[..end]);
            line.finish(tail, server);
            rest = &rest[end + 1..];
        }
        line.extend(rest);
    }
    // A last line without its newline is a line all the same.
    if !line.bytes.is_empty() || line.more > 0 {
        line.finish(tail, server);
    }
}

/// The line being read: its first `keep` bytes and how many more came.
struct Line {
    /// The most bytes of a line kept.
    keep: usize,
    /// The line's first bytes, at most `keep`.
    bytes: Vec<u8>,
    /// The bytes of the line past `keep`, dropped.
    more: u64,
}

impl Line {
    /// Adds bytes of the line, keeping at most `keep`.
    fn extend(&mut self, bytes: &[u8]) {
        let room = self.keep.saturating_sub(self.bytes.len()).min(bytes.len());
        self.bytes.extend_from_slice(&bytes[..room]);
        self.more = self.more.saturating_add((bytes.len() - room) as u64);
    }

    /// Logs the line, keeps it in `tail`, and starts the next.
    fn finish(&mut self, tail: &StderrTail, server: &str) {
        let mut bytes = &self.bytes[..];
        if self.more == 0 {
            bytes = bytes.strip_suffix(b"\r").unwrap_or(bytes);
        }
        let mut text = escape(&String::from_utf8_lossy(bytes), usize::MAX);
        if self.more > 0 {
            text.push_str(&format!("{MARK} ({} more bytes)", self.more));
        }
        tracing::debug!(
            target: "mcp_scoped_http::stdio::stderr",
            server = %server,
            line = %cut(&text, RECORD_MAX),
            "stderr",
        );
        tail.push(text);
        self.bytes.clear();
        self.more = 0;
    }
}

/// `text`'s first `max` bytes at most, at a character boundary, with
/// [`MARK`] after it when it was cut.
fn cut(text: &str, max: usize) -> std::borrow::Cow<'_, str> {
    if text.len() <= max {
        return text.into();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{MARK}", &text[..end]).into()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use futures_util::FutureExt;
    use std::time::Duration;
    use tokio::io::AsyncWriteExt;
    use tracing::field::{Field, Visit};
    use tracing_subscriber::layer::{Context, SubscriberExt};

    /// One `tracing` event: its target, level and fields, as text.
    #[derive(Debug)]
    pub(crate) struct Event {
        /// The event's target.
        pub(crate) target: String,
        /// The event's level.
        pub(crate) level: tracing::Level,
        /// Each field's name and value, as text.
        fields: Vec<(&'static str, String)>,
    }

    impl Event {
        /// A field's value, as text.
        pub(crate) fn field(&self, name: &str) -> Option<&str> {
            let (_, value) = self.fields.iter().find(|(n, _)| *n == name)?;
            Some(value)
        }
    }

    impl Visit for Event {
        fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
            self.fields.push((field.name(), format!("{value:?}")));
        }
    }

    /// Records every event of this thread while it is the default.
    #[derive(Clone, Default)]
    pub(crate) struct Capture(Arc<Mutex<Vec<Event>>>);

    impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Capture {
        fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
            let metadata = event.metadata();
            let mut captured = Event {
                target: metadata.target().to_owned(),
                level: *metadata.level(),
                fields: Vec::new(),
            };
            event.record(&mut captured);
            lock(&self.0).push(captured);
        }
    }

    impl Capture {
        /// Makes this the thread's subscriber until the guard is dropped.
        pub(crate) fn set_default(&self) -> tracing::subscriber::DefaultGuard {
            tracing::subscriber::set_default(tracing_subscriber::registry().with(self.clone()))
        }

        /// The events so far, taken.
        pub(crate) fn events(&self) -> Vec<Event> {
            std::mem::take(&mut *lock(&self.0))
        }
    }

    /// Drains `stderr` in a task of its own, as the transport will.
    fn spawn_drain(
        stderr: tokio::io::DuplexStream,
        tail: &StderrTail,
    ) -> tokio::task::JoinHandle<()> {
        tokio::spawn(drain(stderr, tail.clone(), Arc::from("test")))
    }

    /// Bounds a wait in a test: a drain that hangs fails the test.
    async fn bounded<T>(what: &str, future: impl Future<Output = T>) -> T {
        tokio::time::timeout(Duration::from_secs(30), future)
            .await
            .unwrap_or_else(|_| panic!("{what} took over 30 s"))
    }

    #[test]
    fn control_characters_and_hidden_ones_come_out_escaped() {
        assert_eq!(
            escape("\u{1b}[31mred\u{1b}[0m\tx\r\u{0}\u{7f}", usize::MAX),
            r"\u{1b}[31mred\u{1b}[0m\tx\r\u{0}\u{7f}"
        );
        assert_eq!(
            escape("a\u{202e}b\u{200b}", usize::MAX),
            r"a\u{202e}b\u{200b}"
        );
        // Printable non-ASCII stays as it is.
        assert_eq!(escape("héllo → ✓", usize::MAX), "héllo → ✓");
        // Cut between characters, never inside an escape.
        assert_eq!(escape("abc\u{1b}def", 8), "abc…");
        assert_eq!(escape("ééé", 5), "éé…");
        assert_eq!(cut("ééé", 3), "é…");
        assert_eq!(cut("abc", 3), "abc");
    }

    #[test]
    fn the_tail_keeps_the_newest_lines_within_its_bytes() {
        let tail = StderrTail::new(16);
        tail.push("one".into());
        tail.push("two".into());
        assert_eq!(tail.text(), "one\ntwo");
        tail.push("three".into());
        tail.push("four".into());
        // 3+1+3+1+5+1+4 = 18 > 16: the oldest goes, cut at a line boundary.
        let text = tail.text();
        // Once cut, the mark counts: "…two\nthree\nfour" would be 17.
        assert_eq!(text, "…three\nfour");
        assert!(text.len() <= 16, "{}", text.len());
        // One line over the tail alone: its end is kept, at a char boundary.
        tail.push("ééééééééééééé".into());
        let text = tail.text();
        assert!(text.len() <= 16 && text.starts_with('…'), "{text}");
        assert!(text.ends_with("éé"), "{text}");
        // Empty lines count their newline: a flood of them stays bounded.
        let tail = StderrTail::new(4);
        for _ in 0..1000 {
            tail.push(String::new());
        }
        assert!(lock(&tail.0.kept).lines.len() <= 4);
        assert!(tail.text().len() <= 4);
        // Too small for the mark: nothing, rather than over the bound.
        let tail = StderrTail::new(2);
        tail.push("abcdef".into());
        assert_eq!(tail.text(), "");
    }

    #[tokio::test]
    async fn a_flood_is_read_to_its_end_within_the_tail() {
        let tail = StderrTail::new(8 * 1024);
        let (mut writer, reader) = tokio::io::duplex(64 * 1024);
        let drain = spawn_drain(reader, &tail);
        let line = format!("{}\n", "x".repeat(99));
        let chunk = line.repeat(1000); // 100 KB
        // 32 MB: far more than any pipe holds, so the writer only finishes
        // if the drain keeps reading.
        let mut total = 0usize;
        for _ in 0..320 {
            bounded("a write", writer.write_all(chunk.as_bytes()))
                .await
                .unwrap();
            total += chunk.len();
        }
        writer.write_all(b"last words\n").await.unwrap();
        drop(writer);
        bounded("closed", tail.closed()).await;
        bounded("the drain", drain).await.unwrap();
        assert!(total >= 32_000_000);
        let text = tail.text();
        assert!(text.len() <= 8 * 1024, "{}", text.len());
        assert!(
            text.starts_with('…') && text.ends_with("\nlast words"),
            "{text:.40}"
        );
        assert!(lock(&tail.0.kept).lines.len() <= 8 * 1024 / 100 + 1);
    }

    #[tokio::test]
    async fn a_line_with_no_newline_of_10_mib_keeps_only_its_start() {
        let tail = StderrTail::new(8 * 1024);
        let (mut writer, reader) = tokio::io::duplex(64 * 1024);
        let drain = spawn_drain(reader, &tail);
        let block = vec![b'y'; 1024 * 1024];
        for _ in 0..10 {
            bounded("a write", writer.write_all(&block)).await.unwrap();
        }
        drop(writer);
        bounded("closed", tail.closed()).await;
        bounded("the drain", drain).await.unwrap();
        let text = tail.text();
        assert!(text.len() <= 8 * 1024, "{}", text.len());
        let more = 10 * 1024 * 1024 - 8 * 1024;
        assert!(
            text.ends_with(&format!("y… ({more} more bytes)")),
            "{text:.40}"
        );
        assert!(text.starts_with('…'), "the line was cut to fit");
    }

    #[tokio::test]
    async fn escapes_ansi_shows_invalid_utf8_lossily_and_drops_cr() {
        let tail = StderrTail::new(1024);
        let (mut writer, reader) = tokio::io::duplex(1024);
        let drain = spawn_drain(reader, &tail);
        writer
            .write_all(b"\x1b[31merror\x1b[0m: bad\r\nbytes \xff\xfe here\n\nlast")
            .await
            .unwrap();
        drop(writer);
        bounded("closed", tail.closed()).await;
        bounded("the drain", drain).await.unwrap();
        assert_eq!(
            tail.text(),
            "\\u{1b}[31merror\\u{1b}[0m: bad\nbytes \u{fffd}\u{fffd} here\n\nlast"
        );
    }

    #[tokio::test]
    async fn closed_returns_once_the_writer_is_dropped_or_the_drain_is() {
        let tail = StderrTail::new(1024);
        let (writer, reader) = tokio::io::duplex(1024);
        let drain = spawn_drain(reader, &tail);
        // Still open: `closed` waits, however often the drain ran.
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert!(
            tail.closed().now_or_never().is_none(),
            "closed before its end"
        );
        drop(writer);
        bounded("closed", tail.closed()).await;
        // And stays so.
        bounded("closed again", tail.closed()).await;
        bounded("the drain", drain).await.unwrap();

        // A drain dropped half-way closes the tail too.
        let tail = StderrTail::new(1024);
        let (_writer, reader) = tokio::io::duplex(1024);
        let drain = spawn_drain(reader, &tail);
        drain.abort();
        bounded("closed after abort", tail.closed()).await;
    }

    /// The current-thread runtime polls the drain on this thread, where
    /// the capture is the default subscriber.
    #[tokio::test]
    async fn each_line_is_a_debug_record_naming_the_server_escaped_and_cut() {
        let capture = Capture::default();
        let _default = capture.set_default();
        let tail = StderrTail::new(64);
        let (mut writer, reader) = tokio::io::duplex(4096);
        let drain = tokio::spawn(drain(reader, tail.clone(), Arc::from("everything")));
        let long = "w".repeat(3000);
        writer
            .write_all(format!("starting \u{1b}[1mserver\n{long}\n").as_bytes())
            .await
            .unwrap();
        drop(writer);
        bounded("the drain", drain).await.unwrap();
        let events = capture.events();
        assert_eq!(events.len(), 2, "{events:?}");
        for event in &events {
            assert_eq!(event.target, "mcp_scoped_http::stdio::stderr");
            assert_eq!(event.level, tracing::Level::DEBUG);
            assert_eq!(event.field("server"), Some("everything"));
        }
        assert_eq!(events[0].field("line"), Some(r"starting \u{1b}[1mserver"));
        let line = events[1].field("line").unwrap();
        assert_eq!(line, format!("{}…", "w".repeat(RECORD_MAX)));
    }
}
