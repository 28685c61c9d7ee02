//! The command line tool against a hostile server and a careless user:
//! nothing the server names reaches the terminal as control characters, and
//! no option value that may be a secret is echoed.

use crate::support::hostile_http;

use std::process::{Command, Output};

use hostile_http::*;
use http::Method;
use serde_json::json;

fn cli(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mcp-scoped-http"))
        .args(args)
        .env_remove("MCP_CONFORMANCE_SCENARIO")
        .output()
        .expect("run mcp-scoped-http")
}

/// A `--header` written with `=` instead of `:` (a common slip) is a usage
/// error that does not echo the argument: all of it may be a secret.
#[test]
fn a_malformed_header_option_does_not_echo_its_value() {
    let _shared = crate::support::shared();
    let output = cli(&[
        "probe",
        "http://127.0.0.1:9/mcp",
        "--header",
        "X-Api-Key=sk-live-0123456789abcdef",
    ]);
    let err = String::from_utf8_lossy(&output.stderr);
    assert!(!err.contains("sk-live"), "the secret is echoed: {err}");
}

/// What a server names (tools, its own name, tool output, error messages)
/// reaches the terminal with its control characters escaped: a hostile
/// server's ESC ] 52 would write the clipboard, ESC [ 2J clear the screen.
#[test]
fn server_text_is_not_printed_with_terminal_escapes() {
    let _shared = crate::support::shared();
    let server = Server::start(|seen, _state| async move {
        match (&seen.method, seen.rpc()) {
            (&Method::POST, Some("initialize")) => json_response(
                200,
                &result(
                    &seen.id(),
                    json!({"protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
                           "serverInfo": {"name": "evil\u{1b}]52;c;ZWNobyBoaQ==\u{7}", "version": "1"}}),
                ),
            ),
            (&Method::POST, Some("tools/list")) => json_response(
                200,
                &result(
                    &seen.id(),
                    json!({"tools": [{"name": "t\u{1b}[2J\u{1b}[Hclean", "inputSchema": {"type": "object"}}]}),
                ),
            ),
            (&Method::POST, _) if seen.body.as_ref().is_some_and(|b| b.get("id").is_some()) => {
                json_response(200, &result(&seen.id(), json!({})))
            }
            (&Method::POST, _) => empty(202),
            (&Method::DELETE, _) => empty(200),
            _ => empty(405),
        }
    });
    let output = cli(&[
        "probe",
        &server.url("/mcp"),
        "--protocol-version",
        "2025-11-25",
        "--no-listen",
        "--timeout",
        "5",
    ]);
    let out = String::from_utf8_lossy(&output.stdout);
    assert!(out.contains("clean"), "{out}");
    assert!(
        !out.contains('\u{1b}'),
        "raw escape sequences printed: {out:?}"
    );
}
