//! The command line tool, run as a process: output, exit status, and what
//! the server saw.

use std::process::{Command, Output};

use mcp_scoped_http::Connector;
use mcp_scoped_http::ProtocolVersion;
use mcp_scoped_http_testkit::{Eras, Fault, FaultAction, ServerConfig, TestServer};
use serde_json::Value;

fn cli(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mcp-scoped-http"))
        .args(args)
        .env_remove("MCP_CONFORMANCE_SCENARIO")
        .env("RUST_BACKTRACE", "1")
        .output()
        .expect("run mcp-scoped-http")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[track_caller]
fn assert_exit(output: &Output, code: i32) {
    assert_eq!(
        output.status.code(),
        Some(code),
        "stdout: {}\nstderr: {}",
        stdout(output),
        stderr(output)
    );
    let err = stderr(output);
    assert!(!err.contains("panicked"), "{err}");
    assert!(!err.contains("backtrace"), "{err}");
}

#[test]
fn probe_without_url_uses_the_embedded_server() {
    let _shared = crate::support::shared();
    let output = cli(&["probe"]);
    assert_exit(&output, 0);
    let out = stdout(&output);
    for expected in [
        "mcp-scoped-http-testkit",
        "2025-11-25",
        "session id issued: yes",
        "tool-000",
        "tool-004",
        "prompt-000",
        "file:///r/000",
        "discovery",
        "DELETE answered 200",
        "0 owned client(s)",
    ] {
        assert!(out.contains(expected), "no {expected:?} in:\n{out}");
    }
}

#[test]
fn probe_json_is_one_object_with_every_field() {
    let _shared = crate::support::shared();
    let output = cli(&["probe", "--json"]);
    assert_exit(&output, 0);
    let probe: Value = serde_json::from_str(stdout(&output).trim()).expect("one JSON object");
    assert_eq!(probe["server"]["name"], "mcp-scoped-http-testkit");
    assert_eq!(probe["protocolVersion"], "2025-11-25");
    assert_eq!(probe["sessionIssued"], true);
    let tools: Vec<&str> = probe["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .map(|t| t["name"].as_str().expect("name"))
        .collect();
    // Five tools on pages of two: every page was read.
    assert_eq!(
        tools,
        ["tool-000", "tool-001", "tool-002", "tool-003", "tool-004"]
    );
    assert_eq!(probe["prompts"].as_array().expect("prompts").len(), 2);
    assert_eq!(probe["resources"].as_array().expect("resources").len(), 2);
    assert_eq!(
        probe["resourceTemplates"]
            .as_array()
            .expect("templates")
            .len(),
        1
    );
    for phase in ["initializeMicros", "initializedMicros", "discoveryMicros"] {
        assert!(probe["timings"][phase].is_u64(), "{phase}: {probe}");
    }
    assert_eq!(probe["released"]["session"], "deleted");
    assert_eq!(probe["released"]["deleteStatus"], 200);
    assert_eq!(probe["released"]["ownedClientReleased"], true);
    let ledger = probe["ledger"].as_object().expect("ledger");
    for field in [
        "hooks",
        "ownedClients",
        "tasks",
        "ownedSessions",
        "pendingReaps",
    ] {
        assert_eq!(ledger[field], 0, "{field} after close: {probe}");
    }
}

#[test]
fn call_prints_the_result_and_sends_the_headers() {
    let _shared = crate::support::shared();
    let server = TestServer::start(ServerConfig::default());
    let output = cli(&[
        "call",
        &server.url(),
        "tool-001",
        r#"{"text":"hello from the shell"}"#,
        "--header",
        "X-Probe: yes",
        "--bearer",
        "secret-token",
    ]);
    assert_exit(&output, 0);
    let out = stdout(&output);
    assert!(out.contains("tool-001"), "{out}");
    assert!(out.contains("hello from the shell"), "{out}");
    let requests = server.requests();
    let call = requests
        .iter()
        .find(|r| r.rpc_method.as_deref() == Some("tools/call"))
        .expect("a tools/call");
    assert_eq!(call.header("x-probe"), Some("yes"));
    assert_eq!(call.header("authorization"), Some("Bearer secret-token"));
    assert_eq!(server.stats().deletes, 1);
    assert_eq!(server.stats().live_sessions, 0);
}

#[test]
fn usage_errors_exit_2() {
    let _shared = crate::support::shared();
    for args in [
        &["call", "http://127.0.0.1:9/mcp"][..],
        &["churn", "--cycles", "many"],
        &["probe", "--no-such-option"],
        &["probe", "--session-id", "abc"],
        &["call", "http://127.0.0.1:9/mcp", "tool", "[1, 2]"],
        &[
            "call",
            "http://127.0.0.1:9/mcp",
            "tool",
            "--header",
            "no colon",
        ],
        &["bogus-command"],
    ] {
        let output = cli(args);
        assert_exit(&output, 2);
        assert!(!stderr(&output).is_empty(), "{args:?}");
    }
}

#[test]
fn unknown_conformance_scenario_is_a_usage_error() {
    let _shared = crate::support::shared();
    let output = Command::new(env!("CARGO_BIN_EXE_mcp-scoped-http"))
        .args(["conformance", "http://127.0.0.1:9/mcp"])
        .env("MCP_CONFORMANCE_SCENARIO", "no-such-scenario")
        .output()
        .expect("run");
    assert_exit(&output, 2);
    assert!(stderr(&output).contains("no-such-scenario"));
}

#[test]
fn server_failures_exit_1_naming_the_status_and_the_phase() {
    let _shared = crate::support::shared();
    let cases = [
        (
            Fault::on_rpc("initialize", FaultAction::status(500)),
            "initialize",
            "500",
        ),
        (
            Fault::on_rpc("tools/list", FaultAction::status(503)),
            "discovery",
            "503",
        ),
        (
            Fault::on_rpc(
                "tools/call",
                FaultAction::status_with_rpc_error(400, -32602, "bad arguments"),
            ),
            "call",
            "-32602",
        ),
    ];
    for (fault, phase, code) in cases {
        let server = TestServer::start(ServerConfig::default().with_fault(fault));
        let output = cli(&["call", &server.url(), "tool-000", "{}"]);
        assert_exit(&output, 1);
        let err = stderr(&output);
        assert!(err.contains(&format!("{phase} failed")), "{phase}: {err}");
        assert!(err.contains(code), "{code}: {err}");
        assert_eq!(
            server.stats().live_sessions,
            0,
            "{phase}: the session was left behind"
        );
    }

    // Nothing listening at all: the connect phase.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let output = cli(&["probe", &format!("http://127.0.0.1:{port}/mcp")]);
    assert_exit(&output, 1);
    assert!(
        stderr(&output).contains("connect failed"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn churn_json_reports_rates_and_returns_to_its_baseline() {
    let _shared = crate::support::shared();
    let output = cli(&["churn", "--cycles", "20", "--concurrency", "2", "--json"]);
    assert_exit(&output, 0);
    let churn: Value = serde_json::from_str(stdout(&output).trim()).expect("one JSON object");
    assert_eq!(churn["cycles"], 20);
    for field in [
        "seconds",
        "cyclesPerSecond",
        "p50Micros",
        "p99Micros",
        "tasksBefore",
        "tasksAfter",
        "fdsBefore",
        "fdsAfter",
    ] {
        assert!(churn[field].is_number(), "{field}: {churn}");
    }
    assert!(
        churn["p50Micros"].as_u64() <= churn["p99Micros"].as_u64(),
        "{churn}"
    );
    let (before, after) = (churn["tasksBefore"].as_u64(), churn["tasksAfter"].as_u64());
    assert!(after <= before.map(|n| n + 1), "tasks leaked: {churn}");
    let (before, after) = (churn["fdsBefore"].as_u64(), churn["fdsAfter"].as_u64());
    assert!(
        after <= before.map(|n| n + 2),
        "descriptors leaked: {churn}"
    );
}

#[test]
fn churn_with_a_borrowed_client_against_a_url() {
    let _shared = crate::support::shared();
    let server = TestServer::start(ServerConfig::default());
    let output = cli(&[
        "churn",
        &server.url(),
        "--cycles",
        "10",
        "--warmup",
        "0",
        "--client",
        "borrowed",
        "--call",
        "tool-002",
        "--args",
        r#"{"text":"x"}"#,
    ]);
    assert_exit(&output, 0);
    assert!(stdout(&output).contains("10 cycles"), "{}", stdout(&output));
    let calls = server
        .requests()
        .iter()
        .filter(|r| r.rpc_method.as_deref() == Some("tools/call"))
        .count();
    assert_eq!(calls, 10);
    assert_eq!(server.stats().sessions_created, 10);
    assert_eq!(server.stats().deletes, 10);
}

#[test]
fn churn_floor_replays_the_same_exchanges_and_reports_the_ratio() {
    let _shared = crate::support::shared();
    let server = TestServer::start(ServerConfig::default());
    let output = cli(&[
        "churn",
        &server.url(),
        "--cycles",
        "30",
        "--warmup",
        "5",
        "--call",
        "tool-001",
        "--floor",
        "--json",
    ]);
    assert_exit(&output, 0);
    let churn: Value = serde_json::from_str(stdout(&output).trim()).expect("one JSON object");
    // initialize, initialized, 4 lists, the call, DELETE.
    assert_eq!(churn["exchangesPerCycle"], 8, "{churn}");
    assert_eq!(churn["floor"]["cycles"], 30, "{churn}");
    assert_eq!(churn["floor"]["failures"], 0, "{churn}");
    assert!(
        churn["perCycleOverFloor"].as_f64().is_some_and(|r| r > 0.0),
        "{churn}"
    );
    for ratio in ["cpuOverFloor", "p50OverFloor", "allocationsOverFloor"] {
        assert!(
            churn[ratio].as_f64().is_some_and(|r| r > 0.0),
            "{ratio}: {churn}"
        );
    }
    // The CLI counts its allocations: a cycle makes some on both sides.
    assert!(
        churn["allocationsPerCycle"]
            .as_f64()
            .is_some_and(|n| n > 0.0),
        "{churn}"
    );
    assert!(churn["cpuMicrosPerCycle"].is_number(), "{churn}");
    // Ours: 5 + 30 cycles, the recording's warm-up and recorded cycles,
    // then the floor's 5 + 30, each a session created and DELETEd (the
    // floor replays the DELETE too).
    let stats = server.stats();
    assert_eq!(stats.sessions_created, 72, "{stats:?}");
    assert_eq!(stats.deletes, 72, "{stats:?}");
    assert_eq!(stats.live_sessions, 0, "{stats:?}");
    let calls = server
        .requests()
        .iter()
        .filter(|r| r.rpc_method.as_deref() == Some("tools/call"))
        .count();
    assert_eq!(calls, 72);
}

#[tokio::test]
async fn attach_sends_no_initialize_and_no_delete() {
    let _shared = crate::support::shared();
    let server = TestServer::start(ServerConfig::default());
    let owner = Connector::new(server.url())
        .listen(false)
        .connect()
        .await
        .expect("the owner's session");
    let id = owner.session_id().expect("a session id");
    server.clear_requests();

    let url = server.url();
    let id_text = id.expose().to_owned();
    let output = tokio::task::spawn_blocking(move || {
        cli(&[
            "call",
            &url,
            "tool-000",
            r#"{"text":"attached"}"#,
            "--session-id",
            &id_text,
            "--protocol-version",
            ProtocolVersion::V2025_11_25.as_str(),
        ])
    })
    .await
    .expect("the CLI ran");
    assert_exit(&output, 0);
    assert!(stdout(&output).contains("attached"), "{}", stdout(&output));

    let requests = server.requests();
    assert!(
        requests
            .iter()
            .all(|r| r.rpc_method.as_deref() != Some("initialize")),
        "an attached session was initialized"
    );
    assert!(
        requests.iter().all(|r| r.method != http::Method::DELETE),
        "an attached session was deleted"
    );
    assert!(
        requests
            .iter()
            .filter(|r| r.rpc_method.is_some())
            .all(|r| r.header("mcp-session-id") == Some(id.expose())),
        "a request without the attached session id"
    );
    assert_eq!(server.stats().deletes, 0);
    assert_eq!(server.stats().live_sessions, 1);

    // The session is still the owner's, alive and usable.
    owner
        .call_tool("tool-000", serde_json::json!({"text": "still mine"}))
        .await
        .expect("the owner's session still works");
    owner.close().await;
    assert_eq!(server.stats().deletes, 1);
}

#[test]
fn timeout_bounds_connect_and_calls() {
    let _shared = crate::support::shared();
    for (fault, phase) in [
        (Fault::on_rpc("initialize", FaultAction::Hang), "initialize"),
        (Fault::on_rpc("tools/call", FaultAction::Hang), "call"),
    ] {
        let server = TestServer::start(ServerConfig::default().with_fault(fault));
        let started = std::time::Instant::now();
        let output = cli(&["call", &server.url(), "tool-000", "--timeout", "0.5"]);
        assert_exit(&output, 1);
        let err = stderr(&output);
        assert!(err.contains(&format!("{phase} failed")), "{err}");
        assert!(
            err.contains("timed out") || err.contains("no response"),
            "{err}"
        );
        assert!(started.elapsed() < std::time::Duration::from_secs(10));
        // Even a session whose initialize hung is not left behind.
        assert_eq!(server.stats().live_sessions, 0, "{phase}");
    }
}

#[test]
fn probe_reports_the_era_it_found() {
    let _shared = crate::support::shared();
    for (eras, version, transport) in [
        (Eras::Modern, "2026-07-28", "streamable-http"),
        (Eras::Streamable2025, "2025-11-25", "streamable-http"),
        (Eras::HttpSse, "2024-11-05", "http+sse"),
    ] {
        let server = TestServer::start(ServerConfig::default().with_eras(eras));
        let output = cli(&["probe", &server.url(), "--json"]);
        assert_exit(&output, 0);
        let probe: Value = serde_json::from_str(stdout(&output).trim()).expect("one JSON object");
        assert_eq!(probe["protocolVersion"], version, "{probe}");
        assert_eq!(probe["transport"], transport, "{probe}");
        assert_eq!(probe["detected"], true, "{probe}");
        // Pinned: no probing, the same era.
        let output = cli(&[
            "probe",
            &server.url(),
            "--json",
            "--protocol-version",
            version,
        ]);
        assert_exit(&output, 0);
        let probe: Value = serde_json::from_str(stdout(&output).trim()).expect("one JSON object");
        assert_eq!(probe["protocolVersion"], version, "{probe}");
        assert_eq!(probe["detected"], false, "{probe}");
    }
}

/// `probe --oauth` against a protected server: the authorization URL is
/// printed, a "browser" (this test) opens it and follows the redirect to
/// the CLI's loopback listener, and the probe goes on.
#[test]
fn probe_with_oauth_takes_the_loopback_redirect() {
    let _shared = crate::support::shared();
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    use std::time::{Duration, Instant};

    use mcp_scoped_http_testkit::{AuthConfig, AuthServer};

    let auth = AuthServer::start(AuthConfig::default());
    let server = TestServer::start(ServerConfig::default().with_authorization(auth.resource()));
    let mut child = Command::new(env!("CARGO_BIN_EXE_mcp-scoped-http"))
        .args(["probe", "--oauth", "--no-browser", "--json", &server.url()])
        .env_remove("MCP_CONFORMANCE_SCENARIO")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run mcp-scoped-http");
    let stderr = BufReader::new(child.stderr.take().expect("stderr"));
    let mut seen = Vec::new();
    let mut url = None;
    for line in stderr.lines() {
        let line = line.expect("a line");
        seen.push(line.clone());
        if line.trim_start().starts_with("http://") && line.contains("/authorize?") {
            url = Some(line.trim().to_owned());
            break;
        }
    }
    let url = url.unwrap_or_else(|| panic!("the authorization URL was printed: {seen:?}"));
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
        .block_on(async {
            let client = mcp_scoped_http::HttpClient::owned().expect("a client");
            let get = |url: &str| {
                http::Request::get(url)
                    .body(http_body_util::Full::new(bytes::Bytes::new()))
                    .expect("a request")
            };
            let answer = client.send(get(&url)).await.expect("authorize");
            let location = answer.headers()["location"].to_str().unwrap().to_owned();
            assert!(location.starts_with("http://127.0.0.1:"), "{location}");
            let answer = client.send(get(&location)).await.expect("the redirect");
            assert!(answer.status().is_success());
        });
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if Instant::now() > deadline {
            child.kill().ok();
            panic!("probe --oauth did not finish");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut out = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().unwrap(), &mut out).unwrap();
    assert!(status.success(), "{status}: {out}");
    let probe: Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(probe["tools"].as_array().map(Vec::len), Some(3), "{probe}");
    assert_eq!(auth.stats().code_grants, 1);
}

/// Runs the CLI with `env` set and the secret variables otherwise unset.
fn cli_with_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_mcp-scoped-http"));
    command
        .args(args)
        .env_remove("MCP_CONFORMANCE_SCENARIO")
        .env_remove("MCP_SCOPED_HTTP_BEARER")
        .env_remove("MCP_SCOPED_HTTP_CLIENT_SECRET")
        .env("RUST_BACKTRACE", "1");
    for (name, value) in env {
        command.env(name, value);
    }
    command.output().expect("run mcp-scoped-http")
}

/// Extra arguments and environment variables of one run.
type Extra<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)]);

/// A file only this user reads, holding `text`, removed when dropped.
struct SecretFile(std::path::PathBuf);

impl SecretFile {
    fn new(name: &str, text: &str) -> SecretFile {
        use std::io::Write as _;
        let path =
            std::env::temp_dir().join(format!("mcp-scoped-http-cli-{}-{name}", std::process::id()));
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create(true).truncate(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let mut file = options.open(&path).expect("a secret file");
        file.write_all(text.as_bytes()).expect("written");
        SecretFile(path)
    }

    fn path(&self) -> &str {
        self.0.to_str().expect("a UTF-8 path")
    }
}

impl Drop for SecretFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// `--client-id`/`--client-secret` were sent to whatever authorization
/// server the MCP server named: a secret now needs `--issuer`, the
/// authorization server it was registered with, wherever it comes from
/// (the command line, a file, the environment); refused otherwise, before
/// anything is sent, without showing the secret.
#[test]
fn a_client_secret_needs_the_issuer_it_was_registered_with() {
    let _shared = crate::support::shared();
    let file = SecretFile::new("client-secret", "secret-from-file\n");
    let base = [
        "probe",
        "http://127.0.0.1:9/mcp",
        "--oauth",
        "--no-browser",
        "--client-id",
        "the-client",
    ];
    let cases: [Extra<'_>; 3] = [
        (&["--client-secret", "secret-on-the-line"], &[]),
        (&["--client-secret-file", file.path()], &[]),
        (&[], &[("MCP_SCOPED_HTTP_CLIENT_SECRET", "secret-from-env")]),
    ];
    for (extra, env) in cases {
        let args: Vec<&str> = base.iter().chain(extra).copied().collect();
        let output = cli_with_env(&args, env);
        assert_exit(&output, 2);
        let err = stderr(&output);
        assert!(err.contains("--issuer"), "{args:?} {env:?}: {err}");
        assert!(!err.contains("secret-"), "{err}");
    }
    // A public client (no secret) may go without.
    let output = cli_with_env(&base, &[]);
    assert_exit(&output, 1);
}

/// `--bearer` was taken only on the command line, where other local users
/// see it in the process list: a file (`--bearer-file`, its first line) or
/// `MCP_SCOPED_HTTP_BEARER` give it too; the command line comes first.
#[test]
fn the_bearer_comes_from_a_file_or_the_environment() {
    let _shared = crate::support::shared();
    let file = SecretFile::new("bearer", "token-from-file\nnot this line\n");
    let server = TestServer::start(ServerConfig::default());
    let url = server.url();
    let env: &[(&str, &str)] = &[("MCP_SCOPED_HTTP_BEARER", "token-from-env")];
    let cases: [(&[&str], &str); 3] = [
        (&["--bearer-file", file.path()], "Bearer token-from-file"),
        (&[], "Bearer token-from-env"),
        (
            &["--bearer", "token-on-the-line"],
            "Bearer token-on-the-line",
        ),
    ];
    for (extra, expected) in cases {
        let mut args = vec!["call", url.as_str(), "tool-001"];
        args.extend_from_slice(extra);
        let output = cli_with_env(&args, env);
        assert_exit(&output, 0);
        let requests = server.requests();
        let call = requests
            .iter()
            .rev()
            .find(|r| r.rpc_method.as_deref() == Some("tools/call"))
            .expect("a tools/call");
        assert_eq!(call.header("authorization"), Some(expected), "{extra:?}");
    }
    let output = cli_with_env(
        &["call", &url, "tool-001", "--bearer-file", "/nonexistent/x"],
        &[],
    );
    assert_exit(&output, 2);
    assert!(
        stderr(&output).contains("--bearer-file"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn each_command_s_help_shows_only_the_options_it_uses() {
    let _shared = crate::support::shared();
    let client_only = ["--bearer", "--session-id", "--client-id", "--header"];
    for command in ["serve", "fleet"] {
        let help = stdout(&cli(&[command, "--help"]));
        for option in client_only {
            assert!(
                !help.contains(option),
                "`{command} --help` lists {option}:\n{help}"
            );
        }
    }
    let serve = stdout(&cli(&["serve", "--help"]));
    assert!(
        serve.contains("--oauth") && serve.contains("--revision"),
        "{serve}"
    );
    // A client option given to serve is an error, not ignored.
    assert_exit(&cli(&["serve", "--bearer", "x"]), 2);
    for command in ["probe", "call", "churn", "conformance"] {
        let help = stdout(&cli(&[command, "--help"]));
        assert!(
            help.contains("--bearer") && help.contains("--timeout"),
            "{command}: {help}"
        );
    }
}

/// A server's text with DEL or C1 controls (a lone U+009B is a CSI to many
/// terminals) stays one valid JSON line with --json, escaped the JSON way.
#[test]
fn json_output_with_c1_controls_stays_valid_json() {
    let _shared = crate::support::shared();
    let server = TestServer::start(ServerConfig::default());
    // The test kit's tools echo their arguments in the result.
    let output = cli(&[
        "call",
        &server.url(),
        "tool-000",
        r#"{"text":"csi \u009b[2J del \u007f"}"#,
        "--json",
    ]);
    assert_exit(&output, 0);
    let out = stdout(&output);
    assert!(!out.contains(['\u{9b}', '\u{7f}']), "raw controls: {out:?}");
    let result: Value = serde_json::from_str(out.trim()).expect("one JSON value");
    assert_eq!(
        result["structuredContent"]["arguments"]["text"], "csi \u{9b}[2J del \u{7f}",
        "{out}"
    );
}

/// What Python's `str.splitlines()` treats as a line end: a consumer that
/// splits output that way must see one line per JSON value.
fn split_lines_like_python(text: &str) -> Vec<&str> {
    text.split([
        '\n', '\r', '\u{b}', '\u{c}', '\u{1c}', '\u{1d}', '\u{1e}', '\u{85}', '\u{2028}',
        '\u{2029}',
    ])
    .filter(|line| !line.is_empty())
    .collect()
}

/// Server text with U+2028, U+2029 (line breaks to JavaScript and Python)
/// and U+202E (reverses the rest of a terminal line) stays one valid JSON
/// line with --json, under a `str.splitlines()`-like split too.
#[test]
fn json_output_escapes_unicode_line_separators_and_format_characters() {
    let _shared = crate::support::shared();
    let server = TestServer::start(ServerConfig::default());
    let output = cli(&[
        "call",
        &server.url(),
        "tool-000",
        r#"{"text":"a\u2028b\u2029c\u202ed\u200be"}"#,
        "--json",
    ]);
    assert_exit(&output, 0);
    let out = stdout(&output);
    assert!(
        !out.contains(['\u{2028}', '\u{2029}', '\u{202e}', '\u{200b}']),
        "raw separators or format characters: {out:?}"
    );
    let lines = split_lines_like_python(&out);
    assert_eq!(lines.len(), 1, "{out:?}");
    let result: Value = serde_json::from_str(lines[0]).expect("one JSON value");
    assert_eq!(
        result["structuredContent"]["arguments"]["text"], "a\u{2028}b\u{2029}c\u{202e}d\u{200b}e",
        "{out}"
    );
}

/// In readable output, Unicode format characters (category Cf: bidi
/// overrides, zero-width spaces, the soft hyphen) and the line and
/// paragraph separators reach the terminal escaped.
#[test]
fn readable_output_escapes_unicode_format_characters() {
    let _shared = crate::support::shared();
    let server = TestServer::start(ServerConfig::default());
    let hostile = "a\u{2028}b\u{2029}c\u{202e}d\u{200b}e\u{ad}f\u{2066}g\u{feff}h\u{e0041}i";
    let arguments = serde_json::json!({ "text": hostile }).to_string();
    let output = cli(&["call", &server.url(), "tool-000", &arguments]);
    assert_exit(&output, 0);
    let out = stdout(&output);
    for c in hostile.chars().filter(|c| !c.is_ascii()) {
        assert!(!out.contains(c), "raw U+{:04X} in {out:?}", u32::from(c));
    }
    assert!(
        out.contains(r"\u{202e}") && out.contains(r"\u{2028}"),
        "{out}"
    );
}

const STDIO_FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../tests/it/support/stdio_server.py"
);

#[test]
fn probe_and_call_a_stdio_server_after_a_double_dash() {
    let _shared = crate::support::shared();
    let output = cli(&[
        "probe",
        "--json",
        "--",
        "python3",
        "-u",
        STDIO_FIXTURE,
        "--era",
        "legacy",
    ]);
    assert_exit(&output, 0);
    let probed: Value = serde_json::from_str(&stdout(&output)).expect("one JSON object");
    assert_eq!(probed["transport"], "stdio");
    assert_eq!(probed["protocolVersion"], "2025-11-25");
    assert!(
        probed["released"]["process"]
            .as_str()
            .is_some_and(|end| end.starts_with("exited by itself")),
        "{probed}"
    );

    let output = cli(&[
        "call",
        "echo",
        r#"{"text": "over stdio"}"#,
        "--",
        "python3",
        "-u",
        STDIO_FIXTURE,
    ]);
    assert_exit(&output, 0);
    assert_eq!(stdout(&output).trim(), "over stdio");

    // HTTP's own options are refused for a stdio command, naming them.
    let output = cli(&["probe", "--bearer", "t", "--", "python3", STDIO_FIXTURE]);
    assert_exit(&output, 2);
    assert!(stderr(&output).contains("--bearer"), "{}", stderr(&output));
    // A server that cannot start: its stderr is in the error.
    let output = cli(&[
        "probe",
        "--",
        "python3",
        "-u",
        STDIO_FIXTURE,
        "--crash-at-start",
    ]);
    assert_exit(&output, 1);
    assert!(
        stderr(&output).contains("fatal: bad config"),
        "{}",
        stderr(&output)
    );
}

/// `probe` of an `http` URL never opens what `SSL_CERT_FILE` names (the
/// trust store is read only for `https`): a FIFO with no writer, which
/// would block whatever opened it, changes nothing.
#[test]
fn probe_of_an_http_url_returns_whatever_ssl_cert_file_names() {
    let _shared = crate::support::shared();
    let server = TestServer::start(ServerConfig::default());
    let dir = std::env::temp_dir().join(format!("mcp-scoped-http-cli-fifo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let fifo = dir.join("fifo.pem");
    let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success(), "mkfifo");
    let mut command = Command::new(env!("CARGO_BIN_EXE_mcp-scoped-http"));
    command
        .args(["probe", &server.url(), "--timeout", "2"])
        .env("SSL_CERT_FILE", &fifo)
        .env_remove("SSL_CERT_DIR")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let (ok, output) = crate::support::run_child(command, std::time::Duration::from_secs(20));
    let _ = std::fs::remove_dir_all(&dir);
    assert!(ok, "{output}");
    assert_eq!(crate::support::seen(&server, "initialize").len(), 1);
}
