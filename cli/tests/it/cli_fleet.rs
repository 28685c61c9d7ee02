//! `mcp-scoped-http fleet CONFIG`, run as a process against test kit
//! servers and a dead port: its lines, its commands on standard input, its
//! reloads, and its shutdown.
//!
//! Every wait is bounded: output is read by a thread into a channel and
//! waited for with `recv_timeout` up to a deadline; the child is killed by
//! its guard when a test fails.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mcp_scoped_http::fleet::qualify;
use mcp_scoped_http_testkit::{
    Fault, FaultAction, ListenMode, ResponseMode, ServerConfig, TestServer,
};
use serde_json::{Value, json};

/// The bound on any one wait for a line (2 busy cores, a debug build).
const WAIT: Duration = Duration::from_secs(30);

/// A config file in the temporary directory, removed on drop.
struct ConfigFile(PathBuf);

impl ConfigFile {
    fn new(servers: &Value) -> ConfigFile {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let path = std::env::temp_dir().join(format!(
            "cli-fleet-{}-{}.json",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let file = ConfigFile(path);
        file.write(servers);
        file
    }

    /// Replaces the file whole (a new file renamed over the old one, as
    /// editors do), so the fleet never reads half of it.
    fn write(&self, servers: &Value) {
        let next = self.0.with_extension("next");
        std::fs::write(&next, json!({"mcpServers": servers}).to_string()).expect("write");
        std::fs::rename(&next, &self.0).expect("rename");
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for ConfigFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The scriptable stdio server of the tests (Python's standard library).
const STDIO_FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../tests/it/support/stdio_server.py"
);

/// A URL on 127.0.0.1 where nothing listens.
fn dead_url() -> String {
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    format!("http://127.0.0.1:{port}/mcp")
}

/// The running CLI: killed and reaped on drop (a failed test leaves no
/// process behind).
struct Fleet {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    /// Every stdout line so far, in order.
    seen: Vec<String>,
    stderr: Arc<Mutex<String>>,
    /// The stdout reader saw the end of the stream.
    closed: bool,
}

impl Fleet {
    fn start(args: &[&str], config: &ConfigFile) -> Fleet {
        let mut child = Command::new(env!("CARGO_BIN_EXE_mcp-scoped-http"))
            .arg("fleet")
            .args(args)
            .arg(config.path())
            .env_remove("MCP_CONFORMANCE_SCENARIO")
            .env_remove("MCP_SCOPED_HTTP_BEARER")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run mcp-scoped-http fleet");
        let stdout = child.stdout.take().expect("stdout");
        let (send, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if send.send(line).is_err() {
                    break;
                }
            }
        });
        let stderr = Arc::new(Mutex::new(String::new()));
        let mut err = child.stderr.take().expect("stderr");
        let text = stderr.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n @ 1..) = err.read(&mut buf) {
                text.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        Fleet {
            stdin: child.stdin.take(),
            child,
            lines,
            seen: Vec::new(),
            stderr,
            closed: false,
        }
    }

    fn context(&self) -> String {
        format!(
            "stdout:\n{}\nstderr:\n{}",
            self.seen.join("\n"),
            self.stderr.lock().unwrap()
        )
    }

    /// Reads lines until one after `from` (an index into `seen`) matches,
    /// within [`WAIT`]; returns its index.
    #[track_caller]
    fn wait_from(&mut self, from: usize, what: &str, matches: impl Fn(&str) -> bool) -> usize {
        self.wait_from_within(from, what, WAIT, matches)
    }

    /// [`wait_from`](Self::wait_from), within `within`.
    #[track_caller]
    fn wait_from_within(
        &mut self,
        from: usize,
        what: &str,
        within: Duration,
        matches: impl Fn(&str) -> bool,
    ) -> usize {
        let deadline = Instant::now() + within;
        let mut index = from;
        loop {
            while index < self.seen.len() {
                if matches(&self.seen[index]) {
                    return index;
                }
                index += 1;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => self.seen.push(line),
                Err(RecvTimeoutError::Timeout) => {
                    panic!("no {what} within {within:?}\n{}", self.context())
                }
                Err(RecvTimeoutError::Disconnected) => {
                    self.closed = true;
                    panic!("no {what} before the output ended\n{}", self.context())
                }
            }
        }
    }

    /// The first JSON line (from `from` on) for which `matches` holds.
    #[track_caller]
    fn wait_json(&mut self, from: usize, what: &str, matches: impl Fn(&Value) -> bool) -> Value {
        let at = self.wait_from(from, what, |line| {
            serde_json::from_str::<Value>(line).is_ok_and(|v| matches(&v))
        });
        serde_json::from_str(&self.seen[at]).expect("JSON")
    }

    /// `server`'s first line in `state`.
    #[track_caller]
    fn wait_state(&mut self, server: &str, state: &str) -> Value {
        self.wait_json(0, &format!("`{server}` {state}"), |v| {
            v["server"] == server && v["state"] == state
        })
    }

    /// Sends one line on standard input and returns the answer: the first
    /// new line that is no event, state change, notification or server
    /// request.
    #[track_caller]
    fn command(&mut self, line: &[u8]) -> Value {
        let from = self.seen.len();
        self.send(line);
        self.wait_json(from, "an answer", |v| {
            ["event", "state", "notification", "request"]
                .iter()
                .all(|key| v.get(key).is_none())
        })
    }

    /// Sends one line and waits for the answer whose `id` is `id`, within
    /// `within`; returns it and how long it took.
    #[track_caller]
    fn answer_within(&mut self, line: &[u8], id: u64, within: Duration) -> (Value, Duration) {
        let from = self.seen.len();
        let sent = Instant::now();
        self.send(line);
        let at = self.wait_from_within(from, &format!("the answer to {id}"), within, |line| {
            serde_json::from_str::<Value>(line).is_ok_and(|v| v["id"] == id)
        });
        let took = sent.elapsed();
        (serde_json::from_str(&self.seen[at]).expect("JSON"), took)
    }

    fn send(&mut self, line: &[u8]) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin.write_all(line).expect("write a command");
        stdin.write_all(b"\n").expect("write a command");
        stdin.flush().expect("flush");
    }

    fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .args(["-s", name, &self.child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -s {name}");
    }

    /// Waits for the end of the output, then for the exit, within [`WAIT`].
    #[track_caller]
    fn finish(&mut self) -> ExitStatus {
        let deadline = Instant::now() + WAIT;
        while !self.closed {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => self.seen.push(line),
                Err(RecvTimeoutError::Disconnected) => self.closed = true,
                Err(RecvTimeoutError::Timeout) => {
                    panic!("the fleet did not end within {WAIT:?}\n{}", self.context())
                }
            }
        }
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "the fleet closed its output but did not exit\n{}",
                self.context()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The shutdown event, after the process has ended with status 0.
    #[track_caller]
    fn shutdown_event(&mut self) -> Value {
        let status = self.finish();
        assert!(status.success(), "{status}\n{}", self.context());
        let line = self
            .seen
            .iter()
            .rev()
            .find_map(|line| {
                let v: Value = serde_json::from_str(line).ok()?;
                (v["event"] == "shutdown").then_some(v)
            })
            .unwrap_or_else(|| panic!("no shutdown event\n{}", self.context()));
        for field in [
            "hooks",
            "ownedClients",
            "tasks",
            "ownedSessions",
            "pendingReaps",
        ] {
            assert_eq!(line["ledger"][field], 0, "{field}: {line}");
        }
        let stderr = self.stderr.lock().unwrap().clone();
        assert!(!stderr.contains("panicked"), "{stderr}");
        assert!(!stderr.contains("internal error"), "{stderr}");
        line
    }

    /// Every stdout line is one JSON object.
    #[track_caller]
    fn assert_all_json(&self) {
        for line in &self.seen {
            let value: Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("not JSON ({e}): {line:?}\n{}", self.context()));
            assert!(value.is_object(), "{line}");
        }
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// DELETE requests a test kit server received.
fn deletes(server: &TestServer) -> usize {
    server
        .requests()
        .iter()
        .filter(|r| r.method == http::Method::DELETE)
        .count()
}

/// Every state, the catalog, every command (a malformed line among them),
/// and SIGTERM: a shutdown event with a report per server, every session
/// DELETEd once, exit 0.
#[test]
fn json_lines_commands_and_sigterm() {
    let _shared = crate::support::shared();
    let up = TestServer::start(
        ServerConfig::default()
            .with_server_name("up-server")
            .with_instructions("Prefer tool-001."),
    );
    let locked = TestServer::start(
        ServerConfig::default().with_fault(Fault::on_rpc("initialize", FaultAction::status(401))),
    );
    let config = ConfigFile::new(&json!({
        "up": {"url": up.url()},
        "down": {"url": dead_url()},
        "locked": {"url": locked.url()},
        "broken": {"url": "not a url"},
        "local": {"command": "python3", "args": ["-u", STDIO_FIXTURE, "--era", "legacy"]},
        "gone": {"command": "no-such-mcp-server-here"},
        "crashy": {"command": "python3", "args": ["-u", STDIO_FIXTURE, "--crash-at-start"]},
    }));
    let mut fleet = Fleet::start(&["--json", "--max-backoff", "0.2"], &config);

    let applied = fleet.wait_json(0, "the applied event", |v| v["event"] == "applied");
    assert_eq!(
        applied["started"],
        json!(["broken", "crashy", "down", "gone", "local", "locked", "up"]),
        "{applied}"
    );
    // A crash: its exit status in the error, its stderr in a field apart.
    let crashy = fleet.wait_state("crashy", "retrying");
    assert_eq!(
        crashy["error"],
        "stdio transport failed: the stdio server `python3` exited with status 1, during connect",
        "{crashy}"
    );
    assert_eq!(
        crashy["stderr"], "starting up\nfatal: bad config (no API key)",
        "{crashy}"
    );
    // A stdio entry runs as a slot; a program that is not there fails for
    // good, naming it.
    let local = fleet.wait_state("local", "ready");
    assert!(local["tools"].as_u64().unwrap() >= 8, "{local}");
    let gone = fleet.wait_state("gone", "failed");
    assert!(
        gone["error"]
            .as_str()
            .unwrap()
            .contains("no-such-mcp-server-here"),
        "{gone}"
    );
    fleet.wait_state("up", "starting");
    let ready = fleet.wait_state("up", "ready");
    assert_eq!(ready["tools"], 3, "{ready}");
    let retrying = fleet.wait_state("down", "retrying");
    assert!(retrying["attempt"].as_u64().unwrap() >= 1, "{retrying}");
    assert!(retrying["retryInMs"].as_u64().unwrap() <= 200, "{retrying}");
    assert!(
        retrying["error"].as_str().unwrap().contains("refused"),
        "{retrying}"
    );
    let auth = fleet.wait_state("locked", "auth_required");
    assert!(auth["error"].as_str().unwrap().contains("401"), "{auth}");
    let failed = fleet.wait_state("broken", "failed");
    assert!(failed["error"].is_string(), "{failed}");
    let catalog = fleet.wait_json(0, "a catalog event", |v| {
        v["event"] == "catalog" && v["tools"].as_u64() >= Some(3)
    });
    assert!(catalog["generation"].as_u64().unwrap() >= 1, "{catalog}");

    // A call, answered with its result, its id echoed.
    let answer = fleet.command(
        br#"{"id": 7, "call": {"server": "up", "tool": "tool-001", "arguments": {"text": "hi there"}}}"#,
    );
    assert_eq!(answer["id"], 7, "{answer}");
    assert_eq!(answer["server"], "up", "{answer}");
    assert!(
        answer["result"].to_string().contains("hi there"),
        "{answer}"
    );
    // A call to a server that is not ready fails at once, naming it.
    let answer = fleet.command(br#"{"call": {"server": "down", "tool": "t"}}"#);
    assert!(
        answer["error"].as_str().unwrap().contains("not ready"),
        "{answer}"
    );
    // Or waits for it, when asked to, up to `waitMs`.
    let answer = fleet.command(br#"{"call": {"server": "down", "tool": "t", "waitMs": 50}}"#);
    assert!(
        answer["error"]
            .as_str()
            .unwrap()
            .contains("not ready within"),
        "{answer}"
    );
    let answer =
        fleet.command(br#"{"call": {"server": "up", "tool": "tool-002", "waitMs": 5000}}"#);
    assert!(answer["result"].is_object(), "{answer}");
    // Server text with C1 control characters still makes one JSON line.
    let answer = fleet.command(
        "{\"call\": {\"server\": \"up\", \"tool\": \"tool-000\", \"arguments\": {\"text\": \"a\\u009b2Jb\\u007f\"}}}"
            .as_bytes(),
    );
    assert!(answer["result"].to_string().contains("2Jb"), "{answer}");

    let answer = fleet.command(br#"{"reconnect": "down"}"#);
    assert_eq!(answer["ok"], true, "{answer}");
    let answer = fleet.command(br#"{"reconnect": "nobody"}"#);
    assert!(
        answer["error"].as_str().unwrap().contains("nobody"),
        "{answer}"
    );

    // Malformed lines get one error line each and the run goes on.
    for bad in [
        &b"not json"[..],
        b"[1, 2]",
        b"{\"frobnicate\": 1}",
        b"\xff\xfe{}",
    ] {
        let answer = fleet.command(bad);
        assert!(answer["error"].is_string(), "{bad:?}: {answer}");
    }
    let status = fleet.command(br#"{"status": true}"#);
    assert_eq!(status["status"]["up"]["state"], "ready", "{status}");
    assert_eq!(status["status"]["up"]["tools"], 3, "{status}");
    // What each ready server said about itself, as it sent it.
    let up_line = &status["status"]["up"];
    assert_eq!(up_line["serverInfo"]["name"], "up-server", "{status}");
    assert_eq!(up_line["instructions"], "Prefer tool-001.", "{status}");
    assert!(up_line["capabilities"]["tools"].is_object(), "{status}");
    assert!(
        up_line["protocolVersion"]
            .as_str()
            .is_some_and(|v| v.starts_with("20")),
        "{status}"
    );
    assert!(
        status["status"]["local"]["serverInfo"]["name"].is_string(),
        "a stdio server's too: {status}"
    );
    assert_eq!(
        status["status"]["locked"]["state"], "auth_required",
        "{status}"
    );
    assert!(
        status["status"]["locked"]["serverInfo"].is_null(),
        "{status}"
    );
    // A call by the qualified name alone, as a model names the tool.
    let answer = fleet.command(
        br#"{"id": 7, "call": {"tool": "up__tool-000", "arguments": {"text": "by name"}}}"#,
    );
    assert!(answer["result"].to_string().contains("by name"), "{answer}");
    let answer = fleet.command(br#"{"call": {"tool": "nobody_has_this"}}"#);
    assert!(
        answer["error"]
            .as_str()
            .unwrap()
            .contains("no such qualified tool"),
        "{answer}"
    );
    assert_eq!(status["status"]["local"]["state"], "ready", "{status}");
    let answer = fleet.command(
        br#"{"id": 8, "call": {"server": "local", "tool": "echo", "arguments": {"text": "piped"}}}"#,
    );
    assert!(answer["result"].to_string().contains("piped"), "{answer}");
    assert!(
        ["retrying", "starting"].contains(&status["status"]["down"]["state"].as_str().unwrap()),
        "{status}"
    );
    assert_eq!(
        status["tools"],
        3 + local["tools"].as_u64().unwrap(),
        "{status}"
    );

    fleet.signal("TERM");
    let shutdown = fleet.shutdown_event();
    assert_eq!(shutdown["servers"]["up"]["outcome"], "closed", "{shutdown}");
    assert_eq!(
        shutdown["servers"]["up"]["session"], "deleted",
        "{shutdown}"
    );
    assert_eq!(
        shutdown["servers"]["down"]["outcome"], "no_session",
        "{shutdown}"
    );
    assert_eq!(
        shutdown["servers"]["locked"]["outcome"], "no_session",
        "{shutdown}"
    );
    // The stdio server exited when its stdin closed.
    assert!(
        shutdown["servers"]["local"]["process"]
            .as_str()
            .is_some_and(|end| end.starts_with("exited by itself")),
        "{shutdown}"
    );
    fleet.assert_all_json();
    assert_eq!(up.stats().sessions_created, 1);
    assert_eq!(deletes(&up), 1);
    assert_eq!(up.stats().live_sessions, 0);
}

/// The config file edited: the new server starts, the removed one stops
/// (its session DELETEd); SIGHUP reads the file again (unchanged here: the
/// running server is left alone); SIGINT shuts down.
#[test]
fn config_edits_and_sighup_reconcile_by_name() {
    let _shared = crate::support::shared();
    let first = TestServer::start(ServerConfig::default());
    let second = TestServer::start(ServerConfig::default().with_tools(2));
    let config = ConfigFile::new(&json!({"first": {"url": first.url()}}));
    let mut fleet = Fleet::start(&["--json", "--max-backoff", "0.2"], &config);
    fleet.wait_state("first", "ready");

    config.write(&json!({"second": {"url": second.url()}}));
    let reloaded = fleet.wait_json(0, "a reload", |v| v["event"] == "reloaded");
    assert_eq!(reloaded["started"], json!(["second"]), "{reloaded}");
    assert_eq!(reloaded["stopped"], json!(["first"]), "{reloaded}");
    fleet.wait_state("first", "stopped");
    fleet.wait_state("second", "ready");
    // `apply` has returned: the removed server's session is gone.
    assert_eq!(deletes(&first), 1);
    assert_eq!(first.stats().live_sessions, 0);

    let from = fleet.seen.len();
    fleet.signal("HUP");
    let reloaded = fleet.wait_json(from, "a reload on SIGHUP", |v| v["event"] == "reloaded");
    assert_eq!(reloaded["unchanged"], json!(["second"]), "{reloaded}");
    assert_eq!(reloaded["started"], json!([]), "{reloaded}");

    // A broken edit keeps what runs, and says why.
    std::fs::write(config.path(), "{\"mcpServers\": ").expect("write");
    let error = fleet.wait_json(from, "a reload error", |v| {
        v["event"] == "reload" && v["error"].is_string()
    });
    assert!(error["error"].as_str().unwrap().contains("JSON"), "{error}");

    fleet.signal("INT");
    let shutdown = fleet.shutdown_event();
    assert_eq!(
        shutdown["servers"]["second"]["outcome"], "closed",
        "{shutdown}"
    );
    assert!(shutdown["servers"].get("first").is_none(), "{shutdown}");
    fleet.assert_all_json();
    assert_eq!(second.stats().sessions_created, 1, "SIGHUP restarted it");
    assert_eq!(deletes(&second), 1);
    assert_eq!(deletes(&first), 1);
}

/// One bad entry never empties the file: in VS Code's shape (`servers`,
/// with `type`), an unset variable, an unknown `type`, a missing
/// `command` and a name the fleet cannot take each print a `failed` line
/// naming the entry and the key (never a value), and the two good entries
/// run. A broken entry that is disabled stays disabled.
#[test]
fn bad_entries_fail_alone_and_the_rest_runs() {
    let _shared = crate::support::shared();
    let up = TestServer::start(ServerConfig::default());
    let path = std::env::temp_dir().join(format!("cli-fleet-vscode-{}.json", std::process::id()));
    let config = ConfigFile(path);
    std::fs::write(
        config.path(),
        json!({"inputs": [], "servers": {
            "up": {"type": "http", "url": up.url()},
            "local": {"type": "stdio", "command": "python3",
                      "args": ["-u", STDIO_FIXTURE, "--era", "legacy"]},
            "unset": {"type": "http", "url": "http://127.0.0.1:9/${MCP_CLI_TEST_UNSET_VAR}"},
            "odd": {"type": "websocket", "url": "ws://127.0.0.1:9/"},
            "nocommand": {"type": "stdio", "args": ["s3cret-arg"]},
            "my server.v2": {"type": "http", "url": up.url()},
            "off": {"type": "http", "url": "${MCP_CLI_TEST_UNSET_VAR}", "disabled": true},
        }})
        .to_string(),
    )
    .expect("write");
    let mut fleet = Fleet::start(&["--json", "--max-backoff", "0.2"], &config);
    fleet.wait_state("up", "ready");
    fleet.wait_state("local", "ready");
    // Any name is the user's: it runs, and a call by its qualified name
    // (one a model accepts) reaches it.
    fleet.wait_state("my server.v2", "ready");
    let called = fleet.command(
        json!({"id": 3, "call": {"tool": qualify("my server.v2", "tool-000")}})
            .to_string()
            .as_bytes(),
    );
    assert_eq!(
        called["result"]["structuredContent"]["tool"], "tool-000",
        "{called}"
    );
    for (server, says) in [
        (
            "unset",
            "`url`: the variable `MCP_CLI_TEST_UNSET_VAR` is not set",
        ),
        ("odd", "`type` `websocket` is none of"),
        ("nocommand", "no `command`"),
    ] {
        let line = fleet.wait_state(server, "failed");
        let error = line["error"].as_str().unwrap_or_default();
        assert!(
            error.contains(&format!("server `{server}`")) && error.contains(says),
            "{server}: {line}"
        );
        assert!(!error.contains("s3cret"), "{line}");
    }
    let status = fleet.command(br#"{"status": true}"#);
    assert_eq!(status["status"]["up"]["state"], "ready", "{status}");
    assert_eq!(status["status"]["odd"]["state"], "failed", "{status}");
    assert_eq!(
        status["status"]["my server.v2"]["state"], "ready",
        "{status}"
    );
    assert!(
        ["stopped", "disabled"].contains(&status["status"]["off"]["state"].as_str().unwrap_or(""))
            || status["status"].get("off").is_none(),
        "a disabled entry is not failed: {status}"
    );
    fleet.signal("INT");
    let shutdown = fleet.shutdown_event();
    assert_eq!(shutdown["servers"]["up"]["outcome"], "closed", "{shutdown}");
    fleet.assert_all_json();
}

/// With --exit-on-eof, the end of input shuts the fleet down, but only
/// once every command read has been answered: a slow call is not cut.
#[test]
fn end_of_input_answers_pending_calls_then_shuts_down() {
    let _shared = crate::support::shared();
    let slow = TestServer::start(ServerConfig::default().with_fault(Fault::on_rpc(
        "tools/call",
        FaultAction::Delay(Duration::from_millis(300)),
    )));
    let config = ConfigFile::new(&json!({"slow": {"url": slow.url()}}));
    let mut fleet = Fleet::start(&["--json", "--exit-on-eof"], &config);
    fleet.wait_state("slow", "ready");
    fleet.send(
        br#"{"call": {"server": "slow", "tool": "tool-002", "arguments": {"text": "late"}}}"#,
    );
    drop(fleet.stdin.take());
    // Answered with its result, before the shutdown (not cut by it).
    let answer = fleet.wait_json(0, "the call's answer", |v| {
        v["server"] == "slow" && v.get("tool").is_some()
    });
    assert!(answer["result"].to_string().contains("late"), "{answer}");
    let shutdown = fleet.shutdown_event();
    assert_eq!(
        shutdown["servers"]["slow"]["outcome"], "closed",
        "{shutdown}"
    );
    assert_eq!(deletes(&slow), 1);
}

/// SIGINT (or SIGTERM) ends the run while standard input is still open (a
/// terminal, a host that keeps its pipe): nothing waits for a read that
/// never ends.
#[test]
fn sigint_with_standard_input_open_exits() {
    let _shared = crate::support::shared();
    let up = TestServer::start(ServerConfig::default());
    let config = ConfigFile::new(&json!({"up": {"url": up.url()}}));
    let mut fleet = Fleet::start(&["--json"], &config);
    fleet.wait_state("up", "ready");
    fleet.signal("INT");
    let shutdown = fleet.shutdown_event();
    assert_eq!(shutdown["servers"]["up"]["outcome"], "closed", "{shutdown}");
    assert!(fleet.stdin.is_some(), "standard input stayed open");
    assert_eq!(deletes(&up), 1);
}

/// A line that is not UTF-8 is one malformed command: one error line, and
/// the next command is still read and answered.
#[test]
fn a_line_that_is_not_utf8_is_answered_and_reading_goes_on() {
    let _shared = crate::support::shared();
    let up = TestServer::start(ServerConfig::default());
    let config = ConfigFile::new(&json!({"up": {"url": up.url()}}));
    let mut fleet = Fleet::start(&["--json", "--exit-on-eof"], &config);
    fleet.wait_state("up", "ready");
    let answer = fleet.command(b"{\"status\": \"\xff\"}");
    assert!(answer["error"].is_string(), "{answer}");
    let status = fleet.command(br#"{"status": true}"#);
    assert_eq!(status["status"]["up"]["state"], "ready", "{status}");
    drop(fleet.stdin.take());
    fleet.shutdown_event();
}

/// A command line over the bound (1 MiB) is refused with one error line,
/// never held whole; the next one is answered.
#[test]
fn an_over_long_command_line_is_refused() {
    let _shared = crate::support::shared();
    let up = TestServer::start(ServerConfig::default());
    let config = ConfigFile::new(&json!({"up": {"url": up.url()}}));
    let mut fleet = Fleet::start(&["--json", "--exit-on-eof"], &config);
    fleet.wait_state("up", "ready");
    let mut long = br#"{"status": ""#.to_vec();
    long.resize(long.len() + (1 << 20), b'x');
    long.extend_from_slice(br#""}"#);
    let answer = fleet.command(&long);
    assert!(
        answer["error"]
            .as_str()
            .unwrap()
            .contains("at most 1048576 bytes"),
        "{answer}"
    );
    let status = fleet.command(br#"{"status": true}"#);
    assert_eq!(status["status"]["up"]["state"], "ready", "{status}");
    drop(fleet.stdin.take());
    fleet.shutdown_event();
}

/// A tool's result with C1 control characters (U+009B is a CSI to many
/// terminals) and DEL is still one valid JSON line, with them escaped.
#[test]
fn server_text_with_c1_controls_stays_one_json_line() {
    let _shared = crate::support::shared();
    let up = TestServer::start(ServerConfig::default());
    let config = ConfigFile::new(&json!({"up": {"url": up.url()}}));
    let mut fleet = Fleet::start(&["--json", "--exit-on-eof"], &config);
    fleet.wait_state("up", "ready");
    let from = fleet.seen.len();
    fleet.send(
        br#"{"call": {"server": "up", "tool": "tool-000", "arguments": {"text": "a\u009b2Jb\u007f"}}}"#,
    );
    let at = fleet.wait_from(from, "the call's answer", |line| line.contains("tool-000"));
    let line = fleet.seen[at].clone();
    assert!(!line.contains(char::is_control), "raw controls: {line:?}");
    let answer: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line:?}"));
    assert!(line.contains(r"a\u009b2Jb\u007f"), "{line}");
    assert_eq!(
        answer["result"]["structuredContent"]["arguments"]["text"], "a\u{9b}2Jb\u{7f}",
        "{answer}"
    );
    drop(fleet.stdin.take());
    fleet.shutdown_event();
}

/// `tools/list` answers these tools (a fault: the test kit's own tools
/// only grow and shrink at the end).
fn tools_answer(tools: Value) -> Fault {
    let body = json!({"jsonrpc": "2.0", "id": "ID", "result": {"tools": tools}})
        .to_string()
        .replace("\"ID\"", "{id}");
    Fault::on_rpc(
        "tools/list",
        FaultAction::raw(200, "application/json", &body),
    )
}

/// A renewed session is one line naming the server and the era, never
/// its ids (credentials); a catalog line names the tools added, removed
/// and changed; a list listed again the same is no line.
#[test]
fn renewed_and_catalog_lines() {
    let _shared = crate::support::shared();
    let up = TestServer::start(
        ServerConfig::default()
            .with_listen(mcp_scoped_http_testkit::ListenMode::Open)
            .with_fault(tools_answer(json!([{"name": "keep"}, {"name": "lose"}]))),
    );
    let config = ConfigFile::new(&json!({"up": {"url": up.url()}}));
    let mut fleet = Fleet::start(&["--json", "--exit-on-eof"], &config);
    fleet.wait_state("up", "ready");
    let ready = fleet.wait_json(0, "the first catalog line", |v| v["event"] == "catalog");
    assert_eq!(
        ready,
        json!({"event": "catalog", "generation": 1, "tools": 2, "server": "up",
               "added": ["up__keep", "up__lose"], "removed": [], "changed": [],
               "prompts": {"added": ["up__prompt-000", "up__prompt-001"], "removed": [], "changed": []},
               "resources": {"added": ["up__file:///r/000", "up__file:///r/001"], "removed": [], "changed": []},
               "resourceTemplates": {"added": ["up__file:///t/{name}"], "removed": [], "changed": []}}),
    );

    // The server forgets the session; the next call renews it.
    up.expire_sessions();
    let answer = fleet.command(br#"{"call": {"server": "up", "tool": "keep"}}"#);
    assert!(answer["result"].is_object(), "{answer}");
    let renewed = fleet.wait_json(0, "a renewed line", |v| v["event"] == "renewed");
    assert_eq!(
        renewed,
        json!({"server": "up", "event": "renewed", "era": "2025-11-25"})
    );

    // The same list again is no line; a changed one is one.
    let from = fleet.seen.len();
    // Told once the new session's listener is up to hear it.
    let deadline = Instant::now() + WAIT;
    while up.list_changed("tools") == 0 {
        assert!(
            Instant::now() < deadline,
            "no listener\n{}",
            fleet.context()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    up.clear_faults();
    up.push_fault(tools_answer(
        json!([{"name": "keep", "description": "new"}, {"name": "gain"}]),
    ));
    assert!(up.list_changed("tools") > 0);
    let changed = fleet.wait_json(from, "a catalog line", |v| v["event"] == "catalog");
    assert_eq!(
        changed,
        json!({"event": "catalog", "generation": 2, "tools": 2, "server": "up",
               "added": ["up__gain"], "removed": ["up__lose"], "changed": ["up__keep"]}),
    );
    drop(fleet.stdin.take());
    fleet.shutdown_event();
    for session in up.session_log() {
        assert!(
            fleet.seen.iter().all(|line| !line.contains(&session.id)),
            "a session id in the output\n{}",
            fleet.context()
        );
    }
    assert_eq!(
        fleet
            .seen
            .iter()
            .filter(|line| line.contains("\"renewed\""))
            .count(),
        1,
        "{}",
        fleet.context()
    );
}

/// Without --json: the same, as readable lines.
#[test]
fn readable_lines_without_json() {
    let _shared = crate::support::shared();
    let up = TestServer::start(ServerConfig::default());
    let config = ConfigFile::new(
        &json!({"up": {"url": up.url()}, "local": {"command": "no-such-mcp-server-here"}}),
    );
    let mut fleet = Fleet::start(&["--exit-on-eof"], &config);
    fleet.wait_from(0, "a readable ready line", |l| {
        l == "server=up state=ready tools=3"
    });
    fleet.wait_from(0, "a readable failed line", |l| {
        l.starts_with("server=local state=failed error=")
    });
    fleet.wait_from(0, "a readable catalog line", |l| {
        l.starts_with("server=up event=catalog added=[\"up__tool-000\",")
            && l.contains(" generation=")
            && !l.contains("removed=")
            && l.ends_with("tools=3")
    });
    drop(fleet.stdin.take());
    let status = fleet.finish();
    assert!(status.success(), "{status}\n{}", fleet.context());
    fleet.wait_from(0, "a readable shutdown line", |l| {
        l.starts_with("event=shutdown ")
    });
    assert_eq!(deletes(&up), 1);
}

/// Options the fleet cannot honour for every server are refused (a
/// --bearer would go to every server in the file), as is a missing file.
#[test]
fn usage_errors_exit_2() {
    let _shared = crate::support::shared();
    let config = ConfigFile::new(&json!({}));
    let path = config.path().to_str().unwrap().to_owned();
    for args in [
        vec!["fleet", &path, "--bearer", "secret"],
        vec!["fleet", &path, "--header", "X-Key: secret"],
        vec!["fleet", &path, "--oauth"],
        vec!["fleet", &path, "--max-backoff", "0"],
        vec!["fleet", "/nonexistent/fleet.json"],
        vec!["fleet", "--json", "/nonexistent/fleet.json"],
    ] {
        let output = Command::new(env!("CARGO_BIN_EXE_mcp-scoped-http"))
            .args(&args)
            // Ends a fleet that started anyway, instead of running on.
            .arg("--exit-on-eof")
            .stdin(Stdio::null())
            .output()
            .expect("run");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(!stderr.contains("secret"), "{args:?} echoes: {stderr}");
    }
}

/// --timeout bounds every server's connect (and requests): a server that
/// never answers `initialize` is retried after it, not waited for 30 s.
#[test]
fn timeout_applies_to_every_server() {
    let _shared = crate::support::shared();
    // Connections are taken (the backlog), never answered.
    let deaf = TcpListener::bind("127.0.0.1:0").expect("a port");
    let url = format!("http://{}/mcp", deaf.local_addr().expect("its address"));
    let config = ConfigFile::new(&json!({"deaf": {"url": url}}));
    let mut fleet = Fleet::start(
        &[
            "--json",
            "--exit-on-eof",
            "--timeout",
            "0.3",
            "--max-backoff",
            "0.2",
        ],
        &config,
    );
    let retrying = fleet.wait_state("deaf", "retrying");
    let error = retrying["error"].as_str().unwrap();
    assert!(error.contains("300ms"), "{retrying}");
    drop(fleet.stdin.take());
    let shutdown = fleet.shutdown_event();
    assert_eq!(
        shutdown["servers"]["deaf"]["outcome"], "no_session",
        "{shutdown}"
    );
}

/// Without --json, a server's text with a newline (here the message of its
/// JSON-RPC error, in a state line's `error`) stays on its line: it cannot
/// forge a line of its own (`server=forged state=ready`). Before, a newline
/// passed through to stdout as is.
#[test]
fn readable_lines_cannot_be_forged_by_server_text() {
    let _shared = crate::support::shared();
    let evil = TestServer::start(ServerConfig::default().with_fault(Fault::on_http(
        http::Method::POST,
        FaultAction::status_with_rpc_error(500, -32000, "boom\nserver=forged state=ready tools=99"),
    )));
    let config = ConfigFile::new(&json!({"evil": {"url": evil.url()}}));
    let mut fleet = Fleet::start(&["--exit-on-eof", "--max-backoff", "0.05"], &config);
    let at = fleet.wait_from(0, "evil's error", |l| {
        l.starts_with("server=evil ") && l.contains("boom")
    });
    drop(fleet.stdin.take());
    let status = fleet.finish();
    assert!(status.success(), "{status}\n{}", fleet.context());
    assert!(
        fleet.seen.iter().all(|l| !l.starts_with("server=forged")),
        "a forged line: {:?}",
        &fleet.seen[at..]
    );
    assert!(
        fleet.seen[at].contains(r"boom\nserver=forged"),
        "{}",
        fleet.seen[at]
    );
}

/// A configuration file is read up to a bound (a thousand servers take
/// about 200 KiB): a huge file (or a path like /dev/zero) is refused with
/// the limit named, never read whole into memory. Before, it was read
/// whole, whatever its size.
#[test]
fn a_huge_config_file_is_refused() {
    let _shared = crate::support::shared();
    let config = ConfigFile::new(&json!({}));
    let padding = " ".repeat(5 << 20);
    std::fs::write(config.path(), format!("{{{padding}\"mcpServers\": {{}}}}")).unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_mcp-scoped-http"))
        .args(["fleet", "--exit-on-eof"])
        .arg(config.path())
        .stdin(Stdio::null())
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("MiB"), "{stderr}");
}

/// Secrets in a config file (a URL's user info and query, header values, a
/// header value with CR/LF, a `file://` URL) reach no line of the CLI's
/// output, on stdout or stderr, whatever becomes of each server: refused
/// (a dead port), refused credentials (401), an invalid header, a URL that
/// is not HTTP.
#[test]
fn config_secrets_reach_no_output() {
    let _shared = crate::support::shared();
    let guarded = TestServer::start(ServerConfig::default().with_fault(Fault::on_http(
        http::Method::POST,
        FaultAction::unauthorized("Bearer realm=\"x\""),
    )));
    let with_secrets = |url: &str| {
        let url = url.replacen("http://", "http://us3r:pa55word@", 1);
        format!("{url}?api_key=qu3rysecret")
    };
    let config = ConfigFile::new(&json!({
        "dead": {"url": with_secrets(&dead_url()), "headers": {"X-Key": "h3adersecret"}},
        "guarded": {"url": with_secrets(&guarded.url()), "headers": {"Authorization": "Bearer t0kensecret"}},
        "crlf": {"url": guarded.url(), "headers": {"X-Key": "crlf5ecret\r\nX-Injected: 1"}},
        "file": {"url": "file:///etc/f1lesecret"},
    }));
    let mut fleet = Fleet::start(
        &["--json", "--exit-on-eof", "--max-backoff", "0.05"],
        &config,
    );
    fleet.wait_state("dead", "retrying");
    fleet.wait_state("guarded", "auth_required");
    fleet.wait_state("crlf", "failed");
    fleet.wait_state("file", "failed");
    fleet.send(br#"{"status": true}"#);
    fleet.wait_from(0, "status", |l| l.contains("\"status\""));
    drop(fleet.stdin.take());
    fleet.shutdown_event();
    let everything = fleet.context();
    for secret in [
        "us3r",
        "pa55word",
        "qu3rysecret",
        "h3adersecret",
        "t0kensecret",
        "crlf5ecret",
        "f1lesecret",
    ] {
        assert!(
            !everything.contains(secret),
            "{secret} shown:\n{everything}"
        );
    }
    assert!(
        guarded
            .requests()
            .iter()
            .all(|r| r.header("x-injected").is_none())
    );
}

/// How long a command may take to be answered whatever the fleet is doing:
/// 100 ms is the promise; the margin is for 2 busy cores and a debug build.
const PROMPT: Duration = Duration::from_secs(2);

/// The config file replaced by a named pipe no one writes to: the reload
/// refuses it (not a regular file) instead of blocking in `open` for ever,
/// a status is still answered at once and SIGTERM still ends the run.
/// Before, the main loop hung in `open`: no command answered, SIGTERM
/// ignored.
#[test]
fn a_config_replaced_by_a_fifo_neither_blocks_commands_nor_signals() {
    let _shared = crate::support::shared();
    let up = TestServer::start(ServerConfig::default());
    let config = ConfigFile::new(&json!({"up": {"url": up.url()}}));
    let mut fleet = Fleet::start(&["--json"], &config);
    fleet.wait_state("up", "ready");
    let fifo = config.path().with_extension("fifo");
    let made = Command::new("mkfifo").arg(&fifo).status().expect("mkfifo");
    assert!(made.success(), "mkfifo");
    std::fs::rename(&fifo, config.path()).expect("rename");

    let error = fleet.wait_json(0, "a reload error", |v| {
        v["event"] == "reload" && v["error"].is_string()
    });
    assert!(
        error["error"]
            .as_str()
            .unwrap()
            .contains("not a regular file"),
        "{error}"
    );
    let (status, took) = fleet.answer_within(br#"{"id": 1, "status": true}"#, 1, PROMPT);
    assert_eq!(status["status"]["up"]["state"], "ready", "{status}");
    eprintln!("status answered in {took:?} with the config a FIFO");

    let signalled = Instant::now();
    fleet.signal("TERM");
    let shutdown = fleet.shutdown_event();
    eprintln!("SIGTERM to exit: {:?}", signalled.elapsed());
    assert_eq!(shutdown["servers"]["up"]["outcome"], "closed", "{shutdown}");
    assert_eq!(deletes(&up), 1);
}

/// A reload that removes a server whose DELETE never answers runs aside:
/// a status sent meanwhile is answered at once, not after the DELETE
/// timeout (5 s). Before, the main loop awaited the reconcile: the status
/// came after 5 s.
#[test]
fn a_reload_stuck_on_a_delete_does_not_hold_commands() {
    let _shared = crate::support::shared();
    let stuck = TestServer::start(
        ServerConfig::default()
            .with_fault(Fault::on_http(http::Method::DELETE, FaultAction::HangDeaf)),
    );
    let config = ConfigFile::new(&json!({"stuck": {"url": stuck.url()}}));
    let mut fleet = Fleet::start(&["--json"], &config);
    fleet.wait_state("stuck", "ready");
    config.write(&json!({}));
    // The DELETE has arrived (and hangs): the reload is under way.
    let deadline = Instant::now() + WAIT;
    while deletes(&stuck) == 0 {
        assert!(Instant::now() < deadline, "no DELETE\n{}", fleet.context());
        std::thread::sleep(Duration::from_millis(10));
    }
    let (status, took) = fleet.answer_within(br#"{"id": 1, "status": true}"#, 1, PROMPT);
    assert!(status["status"].is_object(), "{status}");
    eprintln!("status answered in {took:?} during a stuck DELETE");
    // The reload ends within the DELETE timeout, and says so.
    let reloaded = fleet.wait_json(0, "the reload", |v| v["event"] == "reloaded");
    assert_eq!(reloaded["stopped"], json!(["stuck"]), "{reloaded}");
}

/// 64 calls in flight to a tool that never answers: a status is still
/// answered at once, and a 65th call is refused at once with an error that
/// says why. Before, standard input was not read until a call ended (60 s
/// by default).
#[test]
fn a_full_window_of_calls_still_answers_commands() {
    let _shared = crate::support::shared();
    let slow = TestServer::start(
        ServerConfig::default().with_fault(Fault::on_rpc("tools/call", FaultAction::Hang)),
    );
    let config = ConfigFile::new(&json!({"slow": {"url": slow.url()}}));
    let mut fleet = Fleet::start(&["--json"], &config);
    fleet.wait_state("slow", "ready");
    for id in 0..64 {
        fleet.send(
            format!(r#"{{"id": {id}, "call": {{"server": "slow", "tool": "tool-000"}}}}"#)
                .as_bytes(),
        );
    }
    let calls = || {
        slow.requests()
            .iter()
            .filter(|r| r.rpc_method.as_deref() == Some("tools/call"))
            .count()
    };
    let deadline = Instant::now() + WAIT;
    while calls() < 64 {
        assert!(
            Instant::now() < deadline,
            "{} calls in flight\n{}",
            calls(),
            fleet.context()
        );
        std::thread::sleep(Duration::from_millis(10));
    }

    let (status, took) = fleet.answer_within(br#"{"id": 100, "status": true}"#, 100, PROMPT);
    assert_eq!(status["status"]["slow"]["state"], "ready", "{status}");
    eprintln!("status answered in {took:?} with 64 calls in flight");
    let (refused, took) = fleet.answer_within(
        br#"{"id": 101, "call": {"server": "slow", "tool": "tool-000"}}"#,
        101,
        PROMPT,
    );
    let error = refused["error"].as_str().unwrap_or_default();
    assert!(error.contains("64 calls"), "{refused}");
    assert_eq!(refused["server"], "slow", "{refused}");
    eprintln!("65th call refused in {took:?}");
    assert_eq!(calls(), 64, "the 65th call was sent");

    // SIGTERM ends the run with every call in flight, each answered.
    fleet.signal("TERM");
    fleet.shutdown_event();
    for id in 0..64 {
        assert!(
            fleet
                .seen
                .iter()
                .any(|line| serde_json::from_str::<Value>(line).is_ok_and(|v| v["id"] == id)),
            "call {id} unanswered\n{}",
            fleet.context()
        );
    }
}

/// More servers than the fleet's maximum (1000): refused at start with a
/// usage error naming the bound, before any server is contacted (before,
/// 20,000 were all started at once: 696 MiB in 10 s).
#[test]
fn a_config_over_the_server_maximum_is_refused() {
    let _shared = crate::support::shared();
    let servers: serde_json::Map<String, serde_json::Value> = (0..1001)
        .map(|n| (format!("s{n}"), json!({"url": "http://127.0.0.1:9/mcp"})))
        .collect();
    let config = ConfigFile::new(&serde_json::Value::Object(servers));
    let output = Command::new(env!("CARGO_BIN_EXE_mcp-scoped-http"))
        .args([
            "fleet",
            config.path().to_str().unwrap(),
            "--json",
            "--exit-on-eof",
        ])
        .stdin(Stdio::null())
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("1001 servers") && stderr.contains("maximum of 1000"),
        "{stderr}"
    );
    assert!(
        output.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&output.stdout)
    );
}

/// Issue 26 (review): output was written in place, so a host that stopped
/// reading the fleet's stdout blocked its loop on the full pipe: no signal,
/// command or event was served again (SIGTERM waited for the host to read).
/// Lines now go to stdout through a bounded queue of their own, and past it
/// they are dropped and counted: with stdout never read and thousands of
/// answers owed, SIGTERM still ends the process.
#[test]
fn a_host_that_stops_reading_stdout_does_not_make_the_fleet_deaf() {
    let _shared = crate::support::shared();
    let config = ConfigFile::new(&json!({"down": {"url": dead_url()}}));
    let child = Command::new(env!("CARGO_BIN_EXE_mcp-scoped-http"))
        .args(["fleet", "--json"])
        .arg(config.path())
        .env_remove("MCP_CONFORMANCE_SCENARIO")
        .env_remove("MCP_SCOPED_HTTP_BEARER")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("run mcp-scoped-http fleet");
    // Killed and reaped however the test ends.
    let mut child = scopeguard::guard(child, |mut child| {
        let _ = child.kill();
        let _ = child.wait();
    });
    // Held open and never read.
    let _stdout = child.stdout.take().expect("stdout");
    let mut stdin = child.stdin.take().expect("stdin");
    // Far more answers than a pipe holds (64 KiB): each is a status line.
    // Written aside: a deaf fleet stops reading them too, and the writer
    // ends with the process (a broken pipe).
    let (wrote, written) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let status = b"{\"status\":true}\n".repeat(8000);
        let _ = wrote.send(
            stdin
                .write_all(&status)
                .and_then(|()| stdin.flush())
                .is_ok(),
        );
    });
    // All read: the fleet took every command while its stdout was full.
    assert_eq!(
        written.recv_timeout(WAIT),
        Ok(true),
        "the commands were not read"
    );
    let kill = Command::new("kill")
        .args(["-s", "TERM", &child.id().to_string()])
        .status()
        .expect("run kill");
    assert!(kill.success());
    let deadline = Instant::now() + WAIT;
    let exited = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break Some(status);
        }
        if Instant::now() > deadline {
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(
        exited.is_some(),
        "SIGTERM not served within {WAIT:?} while stdout was not read"
    );
}

/// One "settled" line once every server has settled or --ready-timeout
/// passed (ready, not ready, pending); each server notification as a line
/// with its server; a call with "progress": true gets its progress lines,
/// with its id, before its answer.
#[test]
fn settled_notifications_and_progress_lines() {
    let _shared = crate::support::shared();
    let up = TestServer::start(
        ServerConfig::default()
            .with_listen(ListenMode::Open)
            .with_response_mode(ResponseMode::Sse),
    );
    let hung = TestServer::start(
        ServerConfig::default().with_fault(Fault::on_rpc("initialize", FaultAction::Hang)),
    );
    let config = ConfigFile::new(&json!({
        "up": {"url": up.url()},
        "dead": {"url": dead_url()},
        "hung": {"url": hung.url()},
    }));
    let mut fleet = Fleet::start(
        &[
            "--json",
            "--ready-timeout",
            "5",
            "--health-interval",
            "3600",
        ],
        &config,
    );
    let settled = fleet.wait_json(0, "the settled line", |v| v["event"] == "settled");
    assert_eq!(settled["ready"], json!(["up"]), "{settled}");
    assert_eq!(settled["notReady"], json!(["dead"]), "{settled}");
    assert_eq!(settled["pending"], json!(["hung"]), "{settled}");
    // Every state it sums up was told before it.
    let before: Vec<Value> = fleet
        .seen
        .iter()
        .take_while(|line| !line.contains(r#""event":"settled""#))
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect();
    for (server, states) in [
        ("up", &["ready"][..]),
        ("dead", &["retrying", "failed"][..]),
    ] {
        assert!(
            before
                .iter()
                .any(|v| v["server"] == server && states.iter().any(|s| v["state"] == *s)),
            "{server}: {}",
            fleet.context()
        );
    }

    // A log message of the server, once its listening stream is up.
    let log = json!({"jsonrpc": "2.0", "method": "notifications/message",
                     "params": {"level": "info", "data": "hello"}});
    let deadline = Instant::now() + WAIT;
    while up.notify_listeners(&log) == 0 {
        assert!(Instant::now() < deadline, "no listening stream");
        std::thread::sleep(Duration::from_millis(20));
    }
    let note = fleet.wait_json(0, "a notification", |v| {
        v["server"] == "up" && v["notification"]["method"] == "notifications/message"
    });
    assert_eq!(note["notification"]["params"]["data"], "hello", "{note}");

    let from = fleet.seen.len();
    fleet.send(br#"{"id": 7, "call": {"server": "up", "tool": "tool-000", "progress": true}}"#);
    let at = fleet.wait_from(from, "the call's answer", |line| {
        serde_json::from_str::<Value>(line).is_ok_and(|v| v["id"] == 7 && v.get("result").is_some())
    });
    let progress: Vec<Value> = fleet.seen[from..at]
        .iter()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|v| v["id"] == 7)
        .map(|v| v["progress"]["progress"].clone())
        .collect();
    assert_eq!(
        progress,
        [json!(1.0), json!(2.0), json!(3.0)],
        "{}",
        fleet.context()
    );

    fleet.signal("TERM");
    fleet.shutdown_event();
    let settled_lines = fleet
        .seen
        .iter()
        .filter(|line| line.contains(r#""event":"settled""#))
        .count();
    assert_eq!(settled_lines, 1, "{}", fleet.context());
    fleet.assert_all_json();
}

/// Issue 28: `${VAR}` references in the file are read from the CLI's own
/// environment (set on the child here, never on the test process): the
/// expanded header reaches the server and no output line; an unset
/// Runs `fleet CONFIG --exit-on-eof` with `args` and the variables set
/// (`Some`) or removed (`None`), sends one call (id `id`) to `up`'s
/// `tool-000` that waits up to 20 s for the server, ends the input, and
/// returns the output once the CLI has exited.
fn run_one_call(
    config: &ConfigFile,
    args: &[&str],
    vars: &[(&str, Option<&str>)],
    id: u64,
) -> std::process::Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_mcp-scoped-http"));
    command
        .arg("fleet")
        .args(args)
        .arg("--exit-on-eof")
        .arg(config.path());
    for (name, value) in vars {
        match value {
            Some(value) => command.env(name, value),
            None => command.env_remove(name),
        };
    }
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run mcp-scoped-http fleet");
    let mut stdin = child.stdin.take().unwrap();
    let call = json!({"id": id, "call": {"server": "up", "tool": "tool-000", "arguments": {}, "waitMs": 20000}});
    stdin.write_all(format!("{call}\n").as_bytes()).unwrap();
    drop(stdin);
    child.wait_with_output().unwrap()
}

/// variable is a startup error naming the entry and the variable.
#[test]
fn config_variables_come_from_the_cli_s_environment_and_reach_no_output() {
    let _shared = crate::support::shared();
    let server = TestServer::start(ServerConfig::default());
    let config = ConfigFile::new(&json!({
        "up": {"url": "${CFG_URL}", "required": true, "timeout": 20,
               "headers": {"X-Key": "${CFG_KEY}", "X-Default": "${CFG_UNSET:-fallback}"}},
    }));
    // Answered once the server is ready; then the end of input ends it.
    let output = run_one_call(
        &config,
        &["--json"],
        &[
            ("CFG_URL", Some(&server.url())),
            ("CFG_KEY", Some("env5ecret")),
            ("CFG_UNSET", None),
        ],
        1,
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}{stderr}");
    let answer = stdout
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .find(|v| v["id"] == 1)
        .unwrap_or_else(|| panic!("no answer: {stdout}{stderr}"));
    assert!(answer.get("result").is_some(), "{answer}");
    let call = server
        .requests()
        .into_iter()
        .rfind(|r| r.rpc_method.as_deref() == Some("tools/call"))
        .expect("the call reached the server");
    assert_eq!(call.header("x-key"), Some("env5ecret"));
    assert_eq!(call.header("x-default"), Some("fallback"));
    assert!(!stdout.contains("env5ecret") && !stderr.contains("env5ecret"));

    // Unset: the entry fails alone (the fleet runs, with nothing to do),
    // the entry and the variable named, the other variable's value
    // nowhere.
    // A call that waits for the server: answered once its slot settled
    // (failed), so the end of input comes after the state line.
    let output = run_one_call(
        &config,
        &[],
        &[("CFG_URL", None), ("CFG_KEY", Some("env5ecret"))],
        2,
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let failed = stdout
        .lines()
        .find(|line| line.contains("failed"))
        .unwrap_or_else(|| panic!("no failed line: {stdout}{stderr}"));
    assert!(
        failed.contains("server `up`: `url`: the variable `CFG_URL` is not set"),
        "{stdout}{stderr}"
    );
    assert!(!stdout.contains("env5ecret") && !stderr.contains("env5ecret"));
}

/// The CLI as a host's whole server layer: server requests out as lines
/// and answered on stdin, in both eras; roots set from stdin and told to
/// the 2025 server; the catalog with every server's own words.
#[test]
fn a_host_answers_server_requests_sets_roots_and_reads_the_catalog_over_the_cli() {
    let _shared = crate::support::shared();
    let config = ConfigFile::new(&json!({
        "old": {"command": "python3", "args": ["-u", STDIO_FIXTURE, "--era", "legacy"]},
        "new": {"command": "python3", "args": ["-u", STDIO_FIXTURE, "--era", "modern"]},
    }));
    let mut fleet = Fleet::start(
        &["--json", "--handle", "sampling,elicitation,roots"],
        &config,
    );
    fleet.wait_state("old", "ready");
    fleet.wait_state("new", "ready");

    let roots = fleet.command(br#"{"id": 1, "roots": [{"uri": "file:///work", "name": "work"}]}"#);
    assert_eq!(roots, json!({"id": 1, "roots": {"told": ["old"]}}));

    for (n, server) in [(10, "old"), (20, "new")] {
        let sample = json!({"messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}], "maxTokens": 3});
        let call = json!({"id": n, "call": {"server": server, "tool": "ask",
                          "arguments": {"method": "sampling/createMessage", "params": sample}}});
        let from = fleet.seen.len();
        fleet.send(call.to_string().as_bytes());
        let asked = fleet.wait_json(from, "a server request", |v| v.get("request").is_some());
        assert_eq!(asked["server"], server, "{asked}");
        assert_eq!(
            asked["request"]["method"], "sampling/createMessage",
            "{asked}"
        );
        assert_eq!(asked["request"]["params"], sample, "{asked}");
        let id = asked["request"]["id"].as_u64().expect("an id");
        // Without the server, or in another server's name, nothing is
        // answered.
        let anonymous = fleet.command(
            json!({"respond": {"id": id, "result": {}}})
                .to_string()
                .as_bytes(),
        );
        assert!(
            anonymous["error"].as_str().unwrap().contains("\"server\""),
            "{anonymous}"
        );
        let other = if server == "old" { "new" } else { "old" };
        let refused = fleet.command(
            json!({"respond": {"server": other, "id": id, "result": {}}})
                .to_string()
                .as_bytes(),
        );
        assert!(refused["error"].as_str().is_some(), "{refused}");
        let result = json!({"role": "assistant", "model": "host", "content": {"type": "text", "text": format!("to {server}")}});
        let ok = fleet.command(
            json!({"respond": {"server": server, "id": id, "result": result}})
                .to_string()
                .as_bytes(),
        );
        assert_eq!(ok, json!({"respond": id, "ok": true}));
        let answer = fleet.wait_json(from, "the call's answer", |v| v["id"] == n);
        let text = answer["result"]["content"][0]["text"]
            .as_str()
            .expect("text");
        assert_eq!(
            serde_json::from_str::<Value>(text).unwrap(),
            result,
            "{answer}"
        );
        // Answered once: a second answer finds nothing waiting.
        let late = fleet.command(
            json!({"respond": {"server": server, "id": id, "result": {}}})
                .to_string()
                .as_bytes(),
        );
        assert!(
            late["error"].as_str().unwrap().contains("no request"),
            "{late}"
        );

        // Roots, from what the host set.
        let call = json!({"id": n + 1, "call": {"server": server, "tool": "ask",
                          "arguments": {"method": "roots/list"}}});
        let answer = fleet.command(call.to_string().as_bytes());
        let text = answer["result"]["content"][0]["text"]
            .as_str()
            .expect("text");
        assert_eq!(
            serde_json::from_str::<Value>(text).unwrap(),
            json!({"roots": [{"uri": "file:///work", "name": "work"}]}),
            "{answer}"
        );
    }

    let catalog = fleet.command(br#"{"catalog": true}"#);
    let tools = catalog["catalog"]["tools"].as_array().expect("tools");
    let echo = tools
        .iter()
        .find(|t| t["name"] == "old__echo")
        .unwrap_or_else(|| panic!("{catalog}"));
    assert_eq!(echo["server"], "old");
    assert_eq!(echo["tool"], "echo");
    assert_eq!(echo["inputSchema"], json!({"type": "object"}));
    assert_eq!(
        tools.len(),
        catalog["catalog"]["tools"].as_array().unwrap().len()
    );
    assert!(tools.iter().any(|t| t["name"] == "new__echo"), "{catalog}");
    for list in ["prompts", "resources", "resourceTemplates"] {
        assert!(catalog["catalog"][list].is_array(), "{catalog}");
    }

    fleet.signal("TERM");
    fleet.shutdown_event();
    fleet.assert_all_json();
}

#[test]
fn without_handle_server_requests_are_not_declared_and_respond_is_refused() {
    let _shared = crate::support::shared();
    let config = ConfigFile::new(&json!({
        "old": {"command": "python3", "args": ["-u", STDIO_FIXTURE, "--era", "legacy"]},
    }));
    let mut fleet = Fleet::start(&["--json"], &config);
    fleet.wait_state("old", "ready");
    let answer = fleet.command(
        br#"{"id": 1, "call": {"server": "old", "tool": "ask", "arguments": {"method": "sampling/createMessage"}}}"#,
    );
    let text = answer["result"]["content"][0]["text"]
        .as_str()
        .expect("text");
    assert_eq!(
        serde_json::from_str::<Value>(text).unwrap()["error"]["code"],
        -32601,
        "{answer}"
    );
    let refused = fleet.command(br#"{"respond": {"id": 1, "result": {}}}"#);
    assert!(
        refused["error"].as_str().unwrap().contains("--handle"),
        "{refused}"
    );
    let roots = fleet.command(br#"{"roots": []}"#);
    assert!(
        roots["roots"]["error"].as_str().unwrap().contains("roots"),
        "{roots}"
    );
    fleet.signal("TERM");
    fleet.shutdown_event();
}

/// A server request the host never answers is an error to the server
/// once --answer-timeout has passed; a late answer finds nothing waiting.
#[test]
fn an_unanswered_server_request_is_an_error_to_the_server_after_the_timeout() {
    let _shared = crate::support::shared();
    let config = ConfigFile::new(&json!({
        "old": {"command": "python3", "args": ["-u", STDIO_FIXTURE, "--era", "legacy"]},
    }));
    let mut fleet = Fleet::start(
        &["--json", "--handle", "elicitation", "--answer-timeout", "1"],
        &config,
    );
    fleet.wait_state("old", "ready");
    let from = fleet.seen.len();
    fleet.send(
        br#"{"id": 1, "call": {"server": "old", "tool": "ask", "arguments": {"method": "elicitation/create", "params": {"message": "sure?"}}}}"#,
    );
    let asked = fleet.wait_json(from, "the request", |v| v.get("request").is_some());
    let id = asked["request"]["id"].as_u64().expect("an id");
    let answer = fleet.wait_json(from, "the call's answer", |v| v["id"] == 1);
    let text = answer["result"]["content"][0]["text"]
        .as_str()
        .expect("text");
    let told: Value = serde_json::from_str(text).unwrap();
    assert_eq!(told["error"]["code"], -32603, "{answer}");
    assert!(
        told["error"]["message"]
            .as_str()
            .unwrap()
            .contains("did not answer within 1s"),
        "{answer}"
    );
    let late = fleet.command(
        json!({"respond": {"server": "old", "id": id, "result": {}}})
            .to_string()
            .as_bytes(),
    );
    assert!(
        late["error"].as_str().unwrap().contains("no request"),
        "{late}"
    );
    fleet.signal("TERM");
    fleet.shutdown_event();
}
