//! The test kit's catalog served over a pair of byte streams, one JSON-RPC
//! message per line: the stdio transport's server side, for
//! `mcp-scoped-http serve --stdio` (a fast stdio server to measure
//! against: a Python one's start-up would swamp a churn figure).
//!
//! It speaks the 2025 revisions only, through the same answers as the
//! HTTP server's 2025 path (`initialize`, the paginated lists,
//! `tools/call`, `ping`, `prompts/get`, `resources/read`). A request before
//! `initialize` (a 2026-07-28 client's `server/discover` probe) is answered
//! with a JSON-RPC error, which a client takes as "no 2026-07-28 here" and
//! falls back to `initialize` at once. Notifications and responses are read
//! and dropped; scripted faults, eras and authorization do not apply.

use serde_json::Value;
use tokio::io::{AsyncBufRead, AsyncBufReadExt as _, AsyncRead, AsyncReadExt as _, AsyncWrite};
use tokio::io::{AsyncWriteExt as _, BufReader, BufWriter};

use super::ServerConfig;
use super::mcp::{self, Catalog, Kind};

/// The longest line read; a longer one is answered with a parse error and
/// skipped (read and dropped in pieces of this size, never held whole).
pub const MAX_LINE: usize = 16 * 1024 * 1024;

/// Serves `config`'s catalog: reads requests from `input`, one per line,
/// and writes each answer to `output` as one line, until `input` ends
/// (the client closed the server's stdin), which returns `Ok`.
///
/// Answers are flushed whenever no more input is waiting, so requests the
/// client wrote together are answered in one write. An error reading
/// `input` or writing `output` (the client is gone) is returned.
pub async fn serve_lines<R, W>(config: &ServerConfig, input: R, output: W) -> std::io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut input = BufReader::new(input);
    let mut output = BufWriter::new(output);
    let mut server = LineServer::new(config);
    let mut line = Vec::new();
    loop {
        line.clear();
        let read = (&mut input)
            .take(MAX_LINE as u64)
            .read_until(b'\n', &mut line)
            .await?;
        if read == 0 {
            break;
        }
        if line.last() != Some(&b'\n') && read == MAX_LINE {
            skip_rest_of_line(&mut input).await?;
            write_message(&mut output, &too_long()).await?;
        } else {
            for answer in server.answer_line(&line) {
                write_message(&mut output, &answer).await?;
            }
        }
        // Flush only once nothing more is waiting: a client's pipelined
        // requests are answered in one write, a lone one at once.
        // (The buffer, not a read: a read would wait for the next
        // request before this answer left.)
        if input.buffer().is_empty() {
            output.flush().await?;
        }
    }
    output.flush().await?;
    Ok(())
}

/// Reads and drops the rest of an over-long line, a buffer at a time.
async fn skip_rest_of_line<R: AsyncBufRead + Unpin>(input: &mut R) -> std::io::Result<()> {
    loop {
        let buffer = input.fill_buf().await?;
        if buffer.is_empty() {
            return Ok(());
        }
        match memchr::memchr(b'\n', buffer) {
            Some(end) => {
                input.consume(end + 1);
                return Ok(());
            }
            None => {
                let all = buffer.len();
                input.consume(all);
            }
        }
    }
}

/// The parse error an over-long line gets (its id was never read).
fn too_long() -> Value {
    mcp::error(
        &Value::Null,
        mcp::PARSE_ERROR,
        &format!("line longer than {MAX_LINE} bytes"),
    )
}

/// Writes `message` and its newline (serde_json escapes every newline
/// inside strings, so the only one is the delimiter).
async fn write_message<W: AsyncWrite + Unpin>(
    output: &mut BufWriter<W>,
    message: &Value,
) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(message).map_err(std::io::Error::other)?;
    line.push(b'\n');
    output.write_all(&line).await
}

/// One stdio session's state: the catalog and whether `initialize` has
/// been answered.
struct LineServer<'a> {
    /// What is served (tools' behaviors, names).
    config: &'a ServerConfig,
    /// The catalog's counts, fixed for the session.
    catalog: Catalog,
    /// Whether `initialize` was answered: until then, other requests
    /// (but `ping`) are refused.
    initialized: bool,
}

impl<'a> LineServer<'a> {
    /// A session that has not seen `initialize` yet.
    fn new(config: &'a ServerConfig) -> Self {
        LineServer {
            config,
            catalog: Catalog::of(config),
            initialized: false,
        }
    }

    /// The answers to one line: none for a blank line, a notification or
    /// a response; one per request (a batch's requests each get one).
    fn answer_line(&mut self, line: &[u8]) -> Vec<Value> {
        let text = line.trim_ascii();
        if text.is_empty() {
            return Vec::new();
        }
        match serde_json::from_slice::<Value>(text) {
            Err(_) => vec![mcp::error(&Value::Null, mcp::PARSE_ERROR, "Parse error")],
            Ok(Value::Array(batch)) if batch.is_empty() => {
                vec![mcp::error(
                    &Value::Null,
                    mcp::INVALID_REQUEST,
                    "empty batch",
                )]
            }
            Ok(Value::Array(batch)) => batch.iter().filter_map(|m| self.answer(m)).collect(),
            Ok(message) => self.answer(&message).into_iter().collect(),
        }
    }

    /// The answer to one message, if it is a request.
    fn answer(&mut self, message: &Value) -> Option<Value> {
        match mcp::classify(message) {
            Kind::NotificationOrResponse => None,
            Kind::Invalid => Some(mcp::error(
                message.get("id").unwrap_or(&Value::Null),
                mcp::INVALID_REQUEST,
                "Invalid request",
            )),
            Kind::Request { id, method, params } => {
                if method == "initialize" {
                    self.initialized = true;
                } else if !self.initialized && method != "ping" {
                    // What the 2025 SDKs answer; to a 2026-07-28 client's
                    // probe it means "fall back to initialize".
                    return Some(mcp::error(
                        id,
                        mcp::INVALID_REQUEST,
                        "Received request before initialization was complete",
                    ));
                }
                let answer =
                    mcp::answer(self.config, self.catalog, id, method, params, false, None);
                Some(answer.response)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// Serves `lines` (joined with newlines) and returns the answers, one
    /// parsed value per line written.
    async fn serve(config: &ServerConfig, input: &[u8]) -> Vec<Value> {
        let mut out = Vec::new();
        serve_lines(config, input, &mut out).await.expect("served");
        out.split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| serde_json::from_slice(l).expect("a JSON line"))
            .collect()
    }

    fn line(message: &Value) -> String {
        format!("{message}\n")
    }

    #[tokio::test]
    async fn a_probe_before_initialize_is_an_error_then_the_2025_path_answers() {
        let config = ServerConfig::default().with_tools(3).with_page_size(2);
        let input = [
            line(&json!({"jsonrpc": "2.0", "id": 0, "method": "server/discover", "params": {}})),
            line(
                &json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18"}}),
            ),
            line(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"})),
            "\n".to_owned(),
            line(&json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})),
            line(&json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "tool-001", "arguments": {"a": 1}}})),
        ]
        .concat();
        let answers = serve(&config, input.as_bytes()).await;
        assert_eq!(answers.len(), 4, "{answers:?}");
        assert_eq!(answers[0]["id"], 0);
        assert_eq!(answers[0]["error"]["code"], mcp::INVALID_REQUEST);
        assert_eq!(answers[1]["result"]["protocolVersion"], "2025-06-18");
        assert_eq!(answers[2]["result"]["tools"].as_array().unwrap().len(), 2);
        assert!(answers[2]["result"]["nextCursor"].is_string());
        assert_eq!(answers[3]["id"], 3);
        assert_eq!(
            answers[3]["result"]["structuredContent"]["tool"],
            "tool-001"
        );
    }

    #[tokio::test]
    async fn garbage_and_over_long_lines_are_answered_and_skipped() {
        let config = ServerConfig::default();
        let mut input = b"not json\n".to_vec();
        input.extend(std::iter::repeat_n(b'x', MAX_LINE + 10));
        input.push(b'\n');
        input.extend(line(&json!({"jsonrpc": "2.0", "id": 7, "method": "ping"})).as_bytes());
        input.extend(b"[]\n");
        input.extend(b"{\"jsonrpc\":\"2.0\",\"id\":8}\n");
        let answers = serve(&config, &input).await;
        let codes: Vec<_> = answers.iter().map(|a| a["error"]["code"].clone()).collect();
        assert_eq!(
            codes,
            [
                json!(mcp::PARSE_ERROR),
                json!(mcp::PARSE_ERROR),
                Value::Null,
                json!(mcp::INVALID_REQUEST),
                json!(mcp::INVALID_REQUEST),
            ],
            "{answers:?}"
        );
        assert_eq!(answers[2]["id"], 7);
        assert_eq!(answers[4]["id"], 8);
    }

    #[tokio::test]
    async fn a_line_cut_by_the_end_of_input_is_still_answered() {
        let config = ServerConfig::default();
        let input = json!({"jsonrpc": "2.0", "id": "last", "method": "ping"}).to_string();
        let answers = serve(&config, input.as_bytes()).await;
        assert_eq!(answers.len(), 1);
        assert_eq!(answers[0]["id"], "last");
    }
}
