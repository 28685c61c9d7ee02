//! `mcp-scoped-http`: probe, call, churn and serve MCP servers over
//! Streamable HTTP from the shell, and act as the client under test for the
//! official MCP conformance suite.
//!
//! Exit status: 0 on success, 1 when the server or the protocol failed (the
//! message names the HTTP status or JSON-RPC code and the phase), 2 for a
//! usage error.

/// `println!` that never panics: a closed stdout (`| head`) is ignored, so
/// the session is still closed properly. What it prints passes through
/// [`terminal_safe`]: much of it is server text.
macro_rules! out {
    ($($arg:tt)*) => {{
        let line = $crate::terminal_safe(&format!($($arg)*)).into_owned();
        $crate::output::write_line(line);
    }};
}

mod output;

// `churn` reports allocations per cycle, ours and the floor's; the count
// is one relaxed atomic add per allocation.
#[global_allocator]
static ALLOCATOR: mcp_scoped_http_testkit::churn::CountingAllocator =
    mcp_scoped_http_testkit::churn::CountingAllocator;

/// One JSON value on one line of stdout. serde_json escapes C0 controls;
/// DEL and the C1 controls (U+0080 to U+009F: a lone U+009B is a CSI to
/// many terminals) it leaves raw, so they are escaped here, the JSON way:
/// the line stays valid JSON and safe to show (`out!` would escape them
/// Rust's way, `\u{9b}`, which no JSON parser reads). U+2028, U+2029 and
/// the format characters are escaped too (see `is_line_separator`,
/// `is_format`).
pub(crate) fn out_json(value: &serde_json::Value) {
    let text = value.to_string();
    let escaped = |c: char| c.is_control() || is_line_separator(c) || is_format(c);
    let safe = if text.contains(escaped) {
        let mut safe = String::with_capacity(text.len() + 16);
        for c in text.chars() {
            if escaped(c) {
                // Astral format characters (tags) as a surrogate pair, the
                // only way JSON writes them as an escape.
                for unit in c.encode_utf16(&mut [0; 2]) {
                    safe.push_str(&format!("\\u{unit:04x}"));
                }
            } else {
                safe.push(c);
            }
        }
        safe
    } else {
        text
    };
    output::write_line(safe);
}

/// U+2028 and U+2029: line ends to JavaScript and to Python's
/// `str.splitlines()`, so a raw one splits a JSON line in two for them.
fn is_line_separator(c: char) -> bool {
    matches!(c, '\u{2028}' | '\u{2029}')
}

/// Unicode format characters (general category Cf, Unicode 16): invisible,
/// and some reorder what follows on a terminal line (U+202E shows the rest
/// reversed). A table rather than a crate: the set is small and changes
/// rarely; a character added to Cf later is shown raw, as before.
fn is_format(c: char) -> bool {
    matches!(
        c,
        '\u{ad}'
            | '\u{600}'..='\u{605}'
            | '\u{61c}'
            | '\u{6dd}'
            | '\u{70f}'
            | '\u{890}'..='\u{891}'
            | '\u{8e2}'
            | '\u{180e}'
            | '\u{200b}'..='\u{200f}'
            | '\u{202a}'..='\u{202e}'
            | '\u{2060}'..='\u{2064}'
            | '\u{2066}'..='\u{206f}'
            | '\u{feff}'
            | '\u{fff9}'..='\u{fffb}'
            | '\u{110bd}'
            | '\u{110cd}'
            | '\u{13430}'..='\u{1343f}'
            | '\u{1bca0}'..='\u{1bca3}'
            | '\u{1d173}'..='\u{1d17a}'
            | '\u{e0001}'
            | '\u{e0020}'..='\u{e007f}'
    )
}

/// `text` with every control character but newline and tab, the Unicode
/// line and paragraph separators and every format character written as a
/// visible `\u{..}` escape: names, results and error messages come from
/// the server, and a hostile one could otherwise send escape sequences to
/// the user's terminal (ESC ] 52 writes the clipboard, ESC [ 2J clears the
/// screen, a bare CR overwrites the line).
pub(crate) fn terminal_safe(text: &str) -> std::borrow::Cow<'_, str> {
    let unsafe_char = |c: char| {
        (c.is_control() && c != '\n' && c != '\t') || is_line_separator(c) || is_format(c)
    };
    if !text.contains(unsafe_char) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut safe = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if unsafe_char(c) {
            safe.extend(c.escape_unicode());
        } else {
            safe.push(c);
        }
    }
    std::borrow::Cow::Owned(safe)
}

mod args;
mod asks;
mod churn;
mod commands;
mod conformance;
mod fleet;
mod phase;

use std::process::ExitCode;

use clap::Parser;

use args::{Cli, Command};
use mcp_scoped_http_testkit::{InputRequest, ListenMode, ResponseMode, ServerConfig, TestTool};

/// Why the tool stopped early.
#[derive(Debug)]
pub(crate) enum Failure {
    /// Bad arguments (exit status 2).
    Usage(String),
    /// The server or the protocol failed (exit status 1).
    Server(String),
}

impl Failure {
    pub(crate) fn usage(message: impl Into<String>) -> Self {
        Failure::Usage(message.into())
    }

    pub(crate) fn server(message: impl Into<String>) -> Self {
        Failure::Server(message.into())
    }

    /// A library error during `phase`, with what it says about the HTTP
    /// status or JSON-RPC code.
    pub(crate) fn at(phase: phase::Phase, error: &mcp_scoped_http::Error) -> Self {
        let mut message = format!("{phase} failed: {}", with_causes(error));
        // A crashed server's own last words, on lines of their own.
        if let Some(stderr) = error.stderr_tail() {
            message.push_str("\nthe end of the server's stderr:\n");
            message.push_str(stderr);
        }
        Failure::Server(message)
    }
}

/// An error with the causes below the library's own words ("connection
/// refused", an I/O error's text), each said once.
pub(crate) fn with_causes(error: &mcp_scoped_http::Error) -> String {
    let mut text = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

pub(crate) type Outcome = Result<(), Failure>;

fn main() -> ExitCode {
    // Never a backtrace: a bug still ends with one line on stderr.
    std::panic::set_hook(Box::new(|info| {
        let message = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown".to_owned());
        eprintln!("mcp-scoped-http: internal error: {message}");
    }));

    let cli = Cli::parse();
    // A stdio server answers one line at a time: a single thread starts
    // faster (it is started once per session by the stdio churn bench).
    let single_thread = matches!(cli.command, Command::Serve { stdio: true, .. })
        || matches!(&cli.command, Command::Churn(churn) if churn.runtime == args::RuntimeKind::CurrentThread);
    let mut builder = if single_thread {
        tokio::runtime::Builder::new_current_thread()
    } else {
        tokio::runtime::Builder::new_multi_thread()
    };
    let runtime = match builder.enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("mcp-scoped-http: cannot start the async runtime: {error}");
            return ExitCode::from(1);
        }
    };
    let outcome = runtime.block_on(async move {
        let outcome = match cli.command {
            Command::Probe {
                url,
                command,
                common,
            } => commands::probe(url, &command, &common).await,
            Command::Call {
                positional,
                command,
                common,
            } => commands::call(&positional, &command, &common).await,
            Command::Churn(options) => {
                let common = options.common.clone();
                churn::run(options, &common).await
            }
            Command::Serve {
                port,
                tools,
                page_size,
                prompts,
                resources,
                sse,
                revision,
                oauth,
                stdio,
                ask,
            } => {
                let mode = if sse {
                    ResponseMode::Sse
                } else {
                    ResponseMode::Json
                };
                let config = ServerConfig::default()
                    .with_tools(tools)
                    .with_page_size(page_size)
                    .with_prompts(prompts)
                    .with_resources(resources)
                    .with_response_mode(mode)
                    .with_listen(ListenMode::Open)
                    .with_eras(revision)
                    // A long-running server keeps no record of requests.
                    .with_record_requests(false);
                let config = if ask {
                    config
                        .with_tool(TestTool::input_required(
                            "ask-elicitation",
                            InputRequest::Elicitation,
                            1,
                        ))
                        .with_tool(TestTool::input_required(
                            "ask-sampling",
                            InputRequest::Sampling,
                            1,
                        ))
                        .with_tool(TestTool::input_required(
                            "ask-roots",
                            InputRequest::Roots,
                            1,
                        ))
                } else {
                    config
                };
                if stdio {
                    commands::serve_stdio(config).await
                } else {
                    commands::serve(port, config, oauth).await
                }
            }
            Command::Conformance { url, common } => conformance::run(&url, &common).await,
            Command::Fleet(options) => fleet::run(options).await,
        };
        // Let pending DELETEs (handed to the reaper) reach their servers.
        mcp_scoped_http::shutdown().await;
        outcome
    });
    drop(runtime);
    // What waits to be written, if stdout takes it within a bound.
    output::finish(std::time::Duration::from_secs(5));
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Usage(message)) => {
            eprintln!("mcp-scoped-http: usage error: {}", terminal_safe(&message));
            ExitCode::from(2)
        }
        Err(Failure::Server(message)) => {
            eprintln!("mcp-scoped-http: {}", terminal_safe(&message));
            ExitCode::from(1)
        }
    }
}
