//! A stdio server's stdout as JSON-RPC messages: newline-delimited, one
//! message (or, from a 2025-03-26 server, one batch) per line, read under
//! the same body limit and memory budget as an HTTP answer.

// Until the transport (`super`) reads each server's stdout through it.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};

use crate::budget::{Account, Charge, messages_cost};
use crate::error::{Error, Result};
use crate::jsonrpc::{Batch, Message, ParseError, parse_messages};

/// The bytes read from stdout at a time: a line that fits is parsed where
/// it lies, never copied. Fixed for the reader's life, and not charged to
/// the account (as a connection's socket buffers are not).
const READ_BUFFER: usize = 8 * 1024;

/// The most capacity the line buffer keeps between lines: one 8 MiB line
/// must not pin 8 MiB for the session's life.
const KEEP: usize = 64 * 1024;

/// At most one warning about skipped lines per this long, per reader.
const WARN_EVERY: Duration = Duration::from_secs(10);

/// The most bytes of a skipped line quoted in the warning.
const EXCERPT: usize = 120;

/// Reads a stdio server's stdout: one JSON-RPC message (or batch) per line.
///
/// A line ends at `\n`, a `\r` before it dropped; a last line without one
/// is read at the end of the stream. Blank lines are skipped silently;
/// lines that are not JSON-RPC (servers that log to stdout) are skipped,
/// counted ([`skipped`](Self::skipped)) and warned about at most once per
/// 10 s. Everything held is charged to the session's account: the line
/// while it is read (as its bytes are buffered), the estimate of what
/// parsing it builds (before it is built), and the messages of a batch
/// still to be handed out.
pub(crate) struct Lines<R> {
    reader: BufReader<R>,
    /// A line that did not fit in the read buffer at once, as read so far.
    line: Vec<u8>,
    state: State,
}

/// Everything of [`Lines`] but its reader and line buffer, which are
/// borrowed apart from it.
struct State {
    /// Messages of a batch not yet handed out.
    queue: VecDeque<Message>,
    /// What parsing the queued messages cost (estimated), held until the
    /// queue is empty.
    queued: usize,
    /// The longest line read, `\r` not counted.
    max_line: usize,
    /// The most messages of a batch.
    max_batch: usize,
    /// What is held, charged to the session's account (when it has one).
    charge: Option<Charge>,
    skips: Skips,
    /// Where skipped lines are told to a connect that may time out.
    noise: Option<Noise>,
    /// Lines read, for errors to name where.
    lines: u64,
    /// Where the next line starts in the stream, for errors to name.
    offset: u64,
    /// At the end of the stream, or failed: nothing more is read.
    ended: bool,
}

impl<R: AsyncRead + Unpin> Lines<R> {
    /// `max_line`: the longest line read (the transport's
    /// `TransportConfig::max_json_body`, 8 MiB by default); `max_batch`:
    /// `TransportConfig::max_batch_messages`; `account`: the session's
    /// memory account, when it has one.
    pub(crate) fn new(
        reader: R,
        max_line: usize,
        max_batch: usize,
        account: Option<Account>,
    ) -> Self {
        Lines {
            reader: BufReader::with_capacity(READ_BUFFER, reader),
            line: Vec::new(),
            state: State {
                queue: VecDeque::new(),
                queued: 0,
                max_line,
                max_batch,
                charge: account.as_ref().map(Account::holding),
                skips: Skips::default(),
                noise: None,
                lines: 0,
                offset: 0,
                ended: false,
            },
        }
    }

    /// The next message; `Ok(None)` at the end of the stream (EOF).
    ///
    /// What it hands out is the caller's to charge: nothing of it stays
    /// charged here. An error ends the stream (a line over `max_line`, the
    /// budget spent, invalid UTF-8, a batch over `max_batch`, a failed
    /// read): `next` returns `Ok(None)` after it, having let go of what it
    /// held.
    ///
    /// Cancellation: the transport drops the reader when `next` is
    /// cancelled, so it need not be cancel-safe. It happens to be: its one
    /// await is the read buffer's `fill_buf`, and a line is taken from the
    /// buffer only with no await between, so a dropped `next` loses nothing.
    pub(crate) async fn next(&mut self) -> Result<Option<Message>> {
        loop {
            if let Some(message) = self.state.queue.pop_front() {
                if self.state.queue.is_empty() {
                    // What is handed out is the caller's to charge. A
                    // shrink cannot fail.
                    self.state.queued = 0;
                    let _ = self.state.hold(self.line.capacity(), 0);
                }
                return Ok(Some(message));
            }
            if self.state.ended {
                return Ok(None);
            }
            if let Err(error) = self.step().await {
                self.fail();
                return Err(error);
            }
        }
    }

    /// Tells `noise` of every line skipped as not JSON-RPC.
    pub(crate) fn with_noise(mut self, noise: Noise) -> Self {
        self.state.noise = Some(noise);
        self
    }

    /// Lines skipped so far because they were not JSON-RPC.
    pub(crate) fn skipped(&self) -> u64 {
        self.state.skips.total
    }

    /// Reads what the buffer holds (or the next bytes): to the end of a
    /// line, which is then parsed, or all of it into the line buffer.
    async fn step(&mut self) -> Result<()> {
        let state = &mut self.state;
        let buffer = match self.reader.fill_buf().await {
            Ok(buffer) => buffer,
            Err(error) => {
                return Err(Error::stdio(Box::new(error))
                    .with_message("reading the server's stdout failed"));
            }
        };
        if buffer.is_empty() {
            state.ended = true;
            if self.line.is_empty() {
                return Ok(());
            }
            // The end of the stream in the middle of a line: what was
            // there is the last line.
            let read = state.complete(&self.line, self.line.capacity(), false);
            release(&mut self.line, state);
            return read;
        }
        match memchr::memchr(b'\n', buffer) {
            Some(end) if self.line.is_empty() => {
                // The whole line is in the read buffer: parsed there (the
                // line buffer, empty, may keep some capacity all the same).
                let read = state.complete(&buffer[..end], self.line.capacity(), true);
                self.reader.consume(end + 1);
                read
            }
            Some(end) => {
                append(&mut self.line, state, &buffer[..end])?;
                self.reader.consume(end + 1);
                let read = state.complete(&self.line, self.line.capacity(), true);
                release(&mut self.line, state);
                read
            }
            None => {
                let read = buffer.len();
                append(&mut self.line, state, buffer)?;
                self.reader.consume(read);
                Ok(())
            }
        }
    }

    /// Ends the stream after an error, letting go of everything held.
    fn fail(&mut self) {
        let state = &mut self.state;
        state.ended = true;
        state.queue.clear();
        state.queued = 0;
        self.line = Vec::new();
        let _ = state.hold(0, 0);
    }
}

/// Adds `bytes` to the line being read, charged before it is buffered;
/// a line over the limit fails here, before the rest of it is read.
fn append(line: &mut Vec<u8>, state: &State, bytes: &[u8]) -> Result<()> {
    let len = line.len().saturating_add(bytes.len());
    // Room for one `\r` before the `\n`, which `complete` drops.
    let most = state.max_line.saturating_add(1);
    if len > most {
        return Err(state.too_long());
    }
    if len > line.capacity() {
        // Grown by doubling, never past the longest line, and charged
        // before it is allocated.
        let capacity = line
            .capacity()
            .saturating_mul(2)
            .max(READ_BUFFER)
            .min(most)
            .max(len);
        state.hold(capacity, 0)?;
        line.reserve_exact(capacity - line.len());
    }
    line.extend_from_slice(bytes);
    // The charge follows what is held, should the allocator round up.
    state.hold(line.capacity(), 0)
}

/// Empties the line buffer after a line, giving back a large capacity.
fn release(line: &mut Vec<u8>, state: &State) {
    line.clear();
    if line.capacity() > KEEP {
        *line = Vec::new();
    }
    // A shrink, or what is held already: it cannot fail.
    let _ = state.hold(line.capacity(), 0);
}

impl State {
    /// Charges what is held: the line buffer's `line` bytes, the queued
    /// messages, and `more` about to be built.
    fn hold(&self, line: usize, more: usize) -> Result<()> {
        let Some(charge) = &self.charge else {
            return Ok(());
        };
        charge
            .resize(line.saturating_add(self.queued).saturating_add(more))
            .map_err(|spent| spent.reading("a line of the server's stdout"))
    }

    /// The error for a line over `max_line`.
    fn too_long(&self) -> Error {
        Error::limit(format!(
            "line {} of the server's stdout is longer than the {}-byte limit \
             (TransportConfig::max_json_body)",
            self.lines + 1,
            self.max_line,
        ))
    }

    /// Reads a whole line (`\n` not included; `ended`: it had one), with
    /// the line buffer's `capacity` charged beside it (the line lies in
    /// it, or in the read buffer, which is not charged): its messages are
    /// queued, or it is skipped, or it fails.
    fn complete(&mut self, line: &[u8], capacity: usize, ended: bool) -> Result<()> {
        let start = self.offset;
        self.offset = start
            .saturating_add(line.len() as u64)
            .saturating_add(u64::from(ended));
        let text = line.strip_suffix(b"\r").unwrap_or(line);
        if text.len() > self.max_line {
            return Err(self.too_long());
        }
        self.lines += 1;
        if text.iter().all(u8::is_ascii_whitespace) {
            return Ok(());
        }
        if let Err(error) = std::str::from_utf8(text) {
            let at = error.valid_up_to();
            return Err(Error::protocol(format!(
                "line {} of the server's stdout is not UTF-8: an invalid byte at offset {at} \
                 of the line (byte {} of the stream)",
                self.lines,
                start.saturating_add(at as u64),
            )));
        }
        // Charged before it is built, with the line still held; what the
        // estimate cannot read is never parsed.
        let cost = match messages_cost(text, self.max_batch) {
            Ok(cost) => cost,
            Err(ParseError::TooMany { max }) => return Err(too_many(max)),
            Err(ParseError::Json(_)) => {
                self.skip(text);
                return Ok(());
            }
        };
        self.hold(capacity, cost)?;
        match parse_messages(text, self.max_batch) {
            Ok(batch) => {
                match batch {
                    Batch::One(message) => self.queue.push_back(message),
                    Batch::Many(messages) => self.queue.extend(messages),
                }
                self.queued = cost;
                Ok(())
            }
            Err(ParseError::TooMany { max }) => Err(too_many(max)),
            Err(ParseError::Json(_)) => {
                // JSON, but not JSON-RPC (a JSON log line, say).
                self.skip(text);
                self.hold(capacity, 0)
            }
        }
    }

    /// Counts a line that is not JSON-RPC, and warns if it is time.
    fn skip(&mut self, text: &[u8]) {
        if let Some(noise) = &self.noise {
            noise.note(text);
        }
        if let Some(count) = self.skips.note(Instant::now()) {
            let excerpt = crate::text::escape(&String::from_utf8_lossy(text), EXCERPT);
            tracing::warn!(
                skipped = count,
                total = self.skips.total,
                last = %excerpt,
                "skipped {count} line(s) of the server's stdout that are not JSON-RPC \
                 (a server that logs to stdout?)",
            );
        }
    }
}

/// The error for a batch over `max_batch`, as the HTTP path gives it.
fn too_many(max: usize) -> Error {
    Error::limit(format!(
        "a line of the server's stdout holds a batch of more than {max} messages"
    ))
}

/// What a server wrote on its stdout that is not JSON-RPC, as a connect
/// that times out names it: how many lines, and the first (cut, escaped).
#[derive(Clone, Default)]
pub(crate) struct Noise(std::sync::Arc<std::sync::Mutex<(u64, Option<String>)>>);

impl Noise {
    fn note(&self, text: &[u8]) {
        let mut seen = crate::sync::lock(&self.0);
        seen.0 = seen.0.saturating_add(1);
        if seen.1.is_none() {
            let line = String::from_utf8_lossy(text);
            seen.1 = Some(crate::text::escape(line.trim_end(), EXCERPT));
        }
    }

    /// The words for an error, if any line was skipped.
    pub(crate) fn describe(&self) -> Option<String> {
        let seen = crate::sync::lock(&self.0);
        let first = seen.1.as_deref()?;
        Some(format!(
            "the server wrote {} line(s) on its stdout that are not JSON-RPC (the first: \
             `{first}`): a server that logs to stdout, or not an MCP server?",
            seen.0
        ))
    }
}

/// The count of skipped lines, and when to warn about them.
#[derive(Default)]
struct Skips {
    /// Every line skipped.
    total: u64,
    /// Lines skipped since the last warning.
    unwarned: u64,
    /// When the last warning was.
    warned: Option<Instant>,
}

impl Skips {
    /// Counts a line skipped `now`; `Some(lines skipped since the last
    /// warning)` when a warning is due (the first, then one per
    /// [`WARN_EVERY`] at most).
    fn note(&mut self, now: Instant) -> Option<u64> {
        self.total = self.total.saturating_add(1);
        self.unwarned = self.unwarned.saturating_add(1);
        let due = self
            .warned
            .is_none_or(|at| now.saturating_duration_since(at) >= WARN_EVERY);
        if !due {
            return None;
        }
        self.warned = Some(now);
        Some(std::mem::take(&mut self.unwarned))
    }
}

/// An in-memory reader that delivers `bytes` in reads of at most `chunk`
/// bytes, never pending.
#[cfg(any(test, feature = "wire"))]
struct Chunked<'a> {
    /// What is still to be read.
    bytes: &'a [u8],
    /// The most bytes a read hands out (0 reads as 1).
    chunk: usize,
}

#[cfg(any(test, feature = "wire"))]
impl AsyncRead for Chunked<'_> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let n = self.chunk.max(1).min(buf.remaining()).min(self.bytes.len());
        let (now, rest) = self.bytes.split_at(n);
        buf.put_slice(now);
        self.bytes = rest;
        std::task::Poll::Ready(Ok(()))
    }
}

/// For fuzzing (feature `wire`): reads `bytes` as a stdio server's stdout
/// through the transport's line reader, delivered in reads of `chunk`
/// bytes (at least 1), with lines of at most `max_line` bytes, batches of
/// at most `max_batch` messages and a fresh memory account of `budget`
/// bytes. Returns the messages read, the lines skipped as not JSON-RPC,
/// and the error that ended the stream, if one did.
#[cfg(feature = "wire")]
pub fn stdio_lines(
    bytes: &[u8],
    chunk: usize,
    max_line: usize,
    max_batch: usize,
    budget: usize,
) -> (Vec<Message>, u64, Option<Error>) {
    use std::future::Future;
    use std::task::{Context, Poll, Waker};

    let account = Account::new(crate::budget::MemoryBudget::default().max_bytes(budget));
    let mut lines = Lines::new(Chunked { bytes, chunk }, max_line, max_batch, Some(account));
    let mut messages = Vec::new();
    let mut context = Context::from_waker(Waker::noop());
    // Each turn takes a message or ends: a message is at least two bytes.
    for _ in 0..bytes.len().saturating_add(2) {
        let next = std::pin::pin!(lines.next()).poll(&mut context);
        match next {
            Poll::Ready(Ok(Some(message))) => messages.push(message),
            Poll::Ready(Ok(None)) => break,
            Poll::Ready(Err(error)) => return (messages, lines.skipped(), Some(error)),
            // The reader never pends.
            Poll::Pending => {
                let error = Error::protocol("the in-memory stdout pended");
                return (messages, lines.skipped(), Some(error));
            }
        }
    }
    (messages, lines.skipped(), None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::MemoryBudget;
    use std::pin::Pin;
    use std::task::{Context, Poll};
    use tokio::io::ReadBuf;

    const MIB: usize = 1024 * 1024;

    /// A `tools/list` request of id `id`, as a server would send it.
    fn request(id: u32) -> String {
        format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/list"}}"#)
    }

    /// A request's id and method.
    fn method(message: &Message) -> Option<(String, &str)> {
        match message {
            Message::Request(r) => Some((r.id.to_string(), &r.method)),
            _ => None,
        }
    }

    /// Every message of `bytes`, read `chunk` bytes at a time.
    async fn read_all(
        bytes: &[u8],
        chunk: usize,
        max_line: usize,
        account: Option<Account>,
    ) -> (Vec<Message>, u64, Option<Error>) {
        let mut lines = Lines::new(Chunked { bytes, chunk }, max_line, 16, account);
        let mut messages = Vec::new();
        for _ in 0..bytes.len() + 2 {
            match lines.next().await {
                Ok(Some(message)) => messages.push(message),
                Ok(None) => return (messages, lines.skipped(), None),
                Err(error) => {
                    // The stream ends after an error.
                    assert!(matches!(lines.next().await, Ok(None)));
                    return (messages, lines.skipped(), Some(error));
                }
            }
        }
        panic!("the reader never ended");
    }

    #[tokio::test]
    async fn lines_end_at_newline_cr_is_dropped_blanks_skipped_last_line_read_at_eof() {
        let text = format!(
            "{}\n{}\r\n\n\r\n   \n{}",
            request(1),
            request(2),
            request(3)
        );
        for chunk in [1, 2, 7, 64, 10_000] {
            let (messages, skipped, error) = read_all(text.as_bytes(), chunk, 1024, None).await;
            assert!(error.is_none(), "{error:?}");
            assert_eq!(skipped, 0, "blank lines are not counted");
            let ids: Vec<_> = messages
                .iter()
                .filter_map(method)
                .map(|(id, _)| id)
                .collect();
            assert_eq!(ids, ["1", "2", "3"], "chunk {chunk}");
        }
        // A batch on one line: its messages in order.
        let batch = format!("[{},{}]\n", request(7), request(8));
        let (messages, _, error) = read_all(batch.as_bytes(), 3, 1024, None).await;
        assert!(error.is_none());
        assert_eq!(messages.len(), 2);
        // Empty input: the end at once.
        let (messages, _, error) = read_all(b"", 1, 1024, None).await;
        assert!(messages.is_empty() && error.is_none());
    }

    #[tokio::test]
    async fn non_json_and_non_jsonrpc_lines_are_skipped_and_counted() {
        let text = format!(
            "Server listening...\n{{\"level\":\"info\",\"msg\":\"up\"}}\n[1,2\n{}\n[]\n",
            request(1)
        );
        let (messages, skipped, error) = read_all(text.as_bytes(), 5, 1024, None).await;
        assert!(error.is_none(), "{error:?}");
        assert_eq!(messages.len(), 1);
        assert_eq!(skipped, 4);
    }

    #[test]
    fn the_skip_warning_is_rate_limited_and_counts_since_the_last() {
        let mut skips = Skips::default();
        let start = Instant::now();
        assert_eq!(skips.note(start), Some(1), "the first warns at once");
        for i in 1..=5 {
            assert_eq!(skips.note(start + Duration::from_secs(i)), None);
        }
        assert_eq!(skips.note(start + Duration::from_secs(10)), Some(6));
        assert_eq!(skips.note(start + Duration::from_secs(19)), None);
        assert_eq!(skips.note(start + Duration::from_secs(21)), Some(2));
        assert_eq!(skips.total, 9);
    }

    #[test]
    fn the_skip_warning_quotes_an_escaped_excerpt() {
        use crate::stdio::stderr::tests::Capture;

        let capture = Capture::default();
        let _default = capture.set_default();
        let log = format!("\u{1b}[32mINFO\u{1b}[0m {}\n", "z".repeat(500));
        let text = log.repeat(3);
        let mut lines = Lines::new(
            Chunked {
                bytes: text.as_bytes(),
                chunk: 64,
            },
            1024,
            16,
            None,
        );
        let end = futures_util::FutureExt::now_or_never(lines.next());
        assert!(matches!(end, Some(Ok(None))));
        assert_eq!(lines.skipped(), 3);
        let events = capture.events();
        // Three lines within 10 s: one warning.
        assert_eq!(events.len(), 1, "{events:?}");
        assert_eq!(events[0].level, tracing::Level::WARN);
        let field = |name| events[0].field(name).expect(name).to_owned();
        assert_eq!(field("skipped"), "1");
        let last = field("last");
        assert!(last.starts_with(r"\u{1b}[32mINFO\u{1b}[0m zzz"), "{last}");
        assert!(last.len() <= EXCERPT + "…".len(), "{}", last.len());
    }

    #[tokio::test]
    async fn invalid_utf8_is_a_protocol_error_naming_the_offset() {
        let mut text = format!("{}\n", request(1)).into_bytes();
        let start = text.len();
        text.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"method\":\"x\xff\"}\n");
        text.extend_from_slice(format!("{}\n", request(2)).as_bytes());
        let (messages, _, error) = read_all(&text, 4, 1024, None).await;
        assert_eq!(messages.len(), 1);
        let error = error.expect("an error");
        assert!(error.is_protocol(), "{error:?}");
        let shown = error.to_string();
        let offset = text[start..].iter().position(|&b| b == 0xff).unwrap();
        assert!(
            shown.contains("line 2 of the server's stdout is not UTF-8")
                && shown.contains(&format!("offset {offset} of the line"))
                && shown.contains(&format!("byte {} of the stream", start + offset)),
            "{shown}"
        );
    }

    #[tokio::test]
    async fn a_batch_over_its_limit_is_refused_as_over_http() {
        let batch = format!("[{}]\n", (0..17).map(request).collect::<Vec<_>>().join(","));
        let (messages, _, error) = read_all(batch.as_bytes(), 100, 4096, None).await;
        assert!(messages.is_empty());
        let error = error.expect("an error");
        assert!(error.is_limit(), "{error:?}");
        assert!(
            error
                .to_string()
                .contains("holds a batch of more than 16 messages"),
            "{error}"
        );
    }

    /// A reader that hands out `prefix`, then endless bytes of `fill`,
    /// counting what it handed out.
    struct Endless {
        /// The bytes first handed out.
        prefix: Vec<u8>,
        /// The byte handed out after them, forever.
        fill: u8,
        /// The bytes handed out so far.
        handed: usize,
    }

    impl AsyncRead for Endless {
        fn poll_read(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<std::io::Result<()>> {
            let n = buf.remaining();
            let from_prefix = self.prefix.len().saturating_sub(self.handed).min(n);
            let start = self.handed.min(self.prefix.len());
            buf.put_slice(&self.prefix[start..start + from_prefix]);
            let fill = vec![self.fill; n - from_prefix];
            buf.put_slice(&fill);
            self.handed += n;
            Poll::Ready(Ok(()))
        }
    }

    #[tokio::test]
    async fn a_line_over_the_limit_fails_at_once_without_reading_the_rest() {
        let account = Account::new(MemoryBudget::default());
        let endless = Endless {
            prefix: format!("{}\n", request(1)).into_bytes(),
            fill: b'a',
            handed: 0,
        };
        let mut lines = Lines::new(endless, MIB, 16, Some(account.clone()));
        assert!(lines.next().await.unwrap().is_some());
        let error = lines.next().await.expect_err("over the limit");
        assert!(error.is_limit(), "{error:?}");
        let shown = error.to_string();
        assert!(
            shown.contains("longer than the 1048576-byte limit")
                && shown.contains("TransportConfig::max_json_body"),
            "{shown}"
        );
        // Read no further than the limit and one read buffer.
        let handed = lines.reader.get_ref().handed;
        assert!(handed <= MIB + 2 * READ_BUFFER + 100, "{handed}");
        // Nothing held after the error.
        assert_eq!(account.bytes(), 0);
        assert!(matches!(lines.next().await, Ok(None)));

        // A line of exactly the limit (and its `\r`) is read.
        let line = format!(
            r#"{{"jsonrpc":"2.0","method":"n","params":{{"p":"{}"}}}}"#,
            "b".repeat(100)
        );
        for ending in ["\n", "\r\n", ""] {
            let text = format!("{line}{ending}");
            let (messages, _, error) = read_all(text.as_bytes(), 7, line.len(), None).await;
            assert!(
                error.is_none() && messages.len() == 1,
                "{ending:?}: {error:?}"
            );
            let (_, _, error) = read_all(text.as_bytes(), 7, line.len() - 1, None).await;
            assert!(error.is_some_and(|e| e.is_limit()), "{ending:?}");
        }
    }

    #[tokio::test]
    async fn a_line_is_charged_as_it_is_buffered_and_refused_over_the_budget() {
        let account = Account::new(MemoryBudget::default().max_bytes(64 * 1024));
        // A line that never ends, far below `max_line`: only the charge of
        // its bytes as they are buffered stops it.
        let endless = Endless {
            prefix: format!("{}\n", request(1)).into_bytes(),
            fill: b'c',
            handed: 0,
        };
        let mut lines = Lines::new(endless, 8 * MIB, 16, Some(account.clone()));
        assert!(lines.next().await.unwrap().is_some());
        let error = lines.next().await.expect_err("over the budget");
        assert!(error.is_limit(), "{error:?}");
        let shown = error.to_string();
        assert!(
            shown.contains("MemoryBudget::max_bytes")
                && shown.contains("reading a line of the server's stdout"),
            "{shown}"
        );
        let handed = lines.reader.get_ref().handed;
        assert!(handed <= 64 * 1024 + 2 * READ_BUFFER, "read {handed}");
        assert_eq!(account.bytes(), 0, "nothing held after the error");
    }

    /// A line whose bytes fit the budget, but not what parsing it would
    /// build (an array of `0`s is about 16 times its wire size once
    /// parsed): refused before it is built.
    #[tokio::test]
    async fn the_estimate_is_charged_before_a_line_is_parsed() {
        let account = Account::new(MemoryBudget::default().max_bytes(64 * 1024));
        let zeros = format!("[{}0]", "0,".repeat(10_000));
        let text = format!(r#"{{"jsonrpc":"2.0","method":"n","params":{{"p":{zeros}}}}}"#);
        assert!(text.len() < 32 * 1024);
        let (messages, _, error) =
            read_all(text.as_bytes(), 4096, MIB, Some(account.clone())).await;
        assert!(messages.is_empty());
        let error = error.expect("the estimate over the budget");
        assert!(error.is_limit(), "{error:?}");
        assert!(
            error.to_string().contains("MemoryBudget::max_bytes"),
            "{error}"
        );
        assert_eq!(account.bytes(), 0);
    }

    #[tokio::test]
    async fn a_large_line_is_charged_then_let_go_and_its_buffer_shrinks() {
        let account = Account::new(MemoryBudget::default());
        let big = format!(
            r#"{{"jsonrpc":"2.0","method":"n","params":{{"p":"{}"}}}}"#,
            "d".repeat(8 * MIB - 100)
        );
        let text = format!("{big}\n{}\n", request(2));
        let mut lines = Lines::new(
            Chunked {
                bytes: text.as_bytes(),
                chunk: 64 * 1024,
            },
            8 * MIB,
            16,
            Some(account.clone()),
        );
        let message = lines.next().await.unwrap().expect("the large message");
        // Handed out: the caller's to charge, nothing of it held here, and
        // the line buffer back to a small capacity.
        assert!(lines.line.capacity() <= KEEP, "{}", lines.line.capacity());
        assert!(account.bytes() <= KEEP, "{}", account.bytes());
        drop(message);
        assert!(lines.next().await.unwrap().is_some());
        assert!(lines.next().await.unwrap().is_none());
        assert_eq!(account.bytes(), lines.line.capacity());
        drop(lines);
        assert_eq!(account.bytes(), 0);
    }

    #[tokio::test]
    async fn a_batch_stays_charged_until_its_last_message_is_out() {
        let batch = format!("[{},{},{}]\n", request(1), request(2), request(3));
        // Parsed in the read buffer, and from the line buffer after reads
        // of 7 bytes (then let go of, the batch still queued).
        for chunk in [1000, 7] {
            let account = Account::new(MemoryBudget::default());
            let reader = Chunked {
                bytes: batch.as_bytes(),
                chunk,
            };
            let mut lines = Lines::new(reader, 4096, 16, Some(account.clone()));
            assert!(lines.next().await.unwrap().is_some());
            let queued = account.bytes() - lines.line.capacity();
            assert!(queued >= 2 * std::mem::size_of::<Message>(), "{queued}");
            lines.next().await.unwrap().unwrap();
            lines.next().await.unwrap().unwrap();
            assert_eq!(account.bytes(), lines.line.capacity(), "all handed out");
            assert!(lines.next().await.unwrap().is_none());
        }
    }

    /// A reader of canned results, pending when it runs out.
    struct Scripted(VecDeque<std::io::Result<Vec<u8>>>);

    impl AsyncRead for Scripted {
        fn poll_read(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<std::io::Result<()>> {
            match self.0.pop_front() {
                None => Poll::Pending,
                Some(Err(error)) => Poll::Ready(Err(error)),
                Some(Ok(bytes)) => {
                    // Tests hand out less than a read buffer at a time.
                    buf.put_slice(&bytes);
                    Poll::Ready(Ok(()))
                }
            }
        }
    }

    #[tokio::test]
    async fn an_io_error_is_an_error_with_its_source() {
        let reader = Scripted(VecDeque::from([
            Ok(format!("{}\n{{\"jsonrpc\"", request(1)).into_bytes()),
            Err(std::io::Error::other("the pipe broke")),
        ]));
        let mut lines = Lines::new(reader, 4096, 16, None);
        assert!(lines.next().await.unwrap().is_some());
        let error = lines.next().await.expect_err("a read error");
        assert!(
            error
                .to_string()
                .contains("reading the server's stdout failed"),
            "{error}"
        );
        let source = std::error::Error::source(&error).expect("its source");
        assert!(source.to_string().contains("the pipe broke"), "{source}");
        assert!(matches!(lines.next().await, Ok(None)));
    }

    #[test]
    fn a_dropped_next_loses_nothing() {
        let line = request(5);
        let (head, tail) = line.split_at(10);
        let reader = Scripted(VecDeque::from([Ok(head.as_bytes().to_vec())]));
        let mut lines = Lines::new(reader, 4096, 16, None);
        // Half a line, then the reader pends: dropped there.
        let pending = futures_util::FutureExt::now_or_never(lines.next());
        assert!(pending.is_none());
        lines
            .reader
            .get_mut()
            .0
            .push_back(Ok(format!("{tail}\n").into_bytes()));
        let next = futures_util::FutureExt::now_or_never(lines.next());
        let message = next.expect("ready").unwrap().expect("the message");
        assert_eq!(method(&message), Some(("5".into(), "tools/list")));
    }

    #[test]
    fn the_fuzzing_hook_reads_what_lines_reads() {
        let text = format!("log\n{}\n{}", request(1), request(2));
        let (messages, skipped, error) = stdio_lines_for_test(text.as_bytes());
        assert_eq!((messages.len(), skipped), (2, 1));
        assert!(error.is_none());
    }

    /// [`stdio_lines`] (feature `wire`).
    #[cfg(feature = "wire")]
    fn stdio_lines_for_test(bytes: &[u8]) -> (Vec<Message>, u64, Option<Error>) {
        stdio_lines(bytes, 3, 1024, 16, 1 << 20)
    }

    /// The same steps as `stdio_lines`, without feature `wire`.
    #[cfg(not(feature = "wire"))]
    fn stdio_lines_for_test(bytes: &[u8]) -> (Vec<Message>, u64, Option<Error>) {
        futures_util::FutureExt::now_or_never(read_all(bytes, 3, 1024, None)).expect("never pends")
    }
}
