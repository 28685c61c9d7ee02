//! `mcp-scoped-http fleet CONFIG`: a fleet run, reloaded, asked and
//! drained through the command's standard input and output.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{ServerConfig, TestServer};

/// The tool's stdout, one JSON value a line, and every line seen.
struct Lines {
    incoming: mpsc::Receiver<Value>,
    seen: Vec<Value>,
}

impl Lines {
    /// The next line that `matches`, within a bound.
    fn next(&mut self, what: &str, matches: impl Fn(&Value) -> bool) -> Value {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let line = self.incoming.recv_timeout(left).unwrap_or_else(|_| {
                let last = &self.seen[self.seen.len().saturating_sub(10)..];
                panic!("no line with {what}; the last seen: {last:?}")
            });
            self.seen.push(line.clone());
            if matches(&line) {
                return line;
            }
        }
    }
}

#[test]
fn the_fleet_command_runs_reloads_answers_and_drains() {
    // Under the scenario lock: its descriptors would upset another
    // test's baseline.
    crate::support::scenario(async { run_the_fleet_command() });
}

#[test]
fn the_fleet_command_drains_on_sigterm() {
    crate::support::scenario(async {
        let server = TestServer::start(ServerConfig::default());
        let dir = std::env::temp_dir().join(format!("mcp-fleet-term-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("servers.json");
        let config = json!({"mcpServers": {"a": {"url": server.url()}}});
        std::fs::write(&path, config.to_string()).unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_mcp-scoped-http"))
            .args(["fleet", "--json"])
            .arg(&path)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("the binary runs");
        let stdout = child.stdout.take().unwrap();
        let (send, incoming) = mpsc::channel();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if send
                    .send(serde_json::from_str(&line).expect("JSON"))
                    .is_err()
                {
                    return;
                }
            }
        });
        let mut lines = Lines {
            incoming,
            seen: Vec::new(),
        };
        lines.next("a ready", |l| l["server"] == "a" && l["state"] == "ready");
        let killed = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap();
        assert!(killed.success());
        let shutdown = lines.next("shutdown", |l| l["event"] == "shutdown");
        assert_eq!(shutdown["servers"]["a"]["outcome"], "closed", "{shutdown}");
        assert!(child.wait().unwrap().success());
        reader.join().unwrap();
        assert_eq!(server.stats().deletes, 1);
        let _ = std::fs::remove_dir_all(&dir);
    });
}

fn run_the_fleet_command() {
    let server = TestServer::start(ServerConfig::default());
    let dead = crate::support::refused_url();
    let dir = std::env::temp_dir().join(format!("mcp-fleet-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("servers.json");
    let config = |with_dead: bool| {
        let mut servers = json!({
            "a": {"url": server.url(), "headers": {"X-Team": "blue"}},
            "local": {"command": "no-such-mcp-server-here"},
        });
        if with_dead {
            servers["dead"] = json!({"url": dead});
        }
        json!({"mcpServers": servers}).to_string()
    };
    std::fs::write(&path, config(true)).unwrap();

    let mut child = Command::new(env!("CARGO_BIN_EXE_mcp-scoped-http"))
        .args(["fleet", "--json", "--max-backoff", "0.05", "--exit-on-eof"])
        .arg(&path)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("the binary runs");
    let stdout = child.stdout.take().unwrap();
    let (send, incoming) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let value = serde_json::from_str(&line).expect("every line is JSON");
            if send.send(value).is_err() {
                return;
            }
        }
    });
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = Lines {
        incoming,
        seen: Vec::new(),
    };

    lines.next("local failed (no such program)", |l| {
        l["server"] == "local"
            && l["state"] == "failed"
            && l["error"]
                .as_str()
                .is_some_and(|e| e.contains("no-such-mcp-server-here"))
    });
    let ready = lines.next("a ready", |l| l["server"] == "a" && l["state"] == "ready");
    assert_eq!(ready["tools"], 3);
    let retrying = lines.next("dead retrying", |l| {
        l["server"] == "dead" && l["state"] == "retrying"
    });
    assert!(retrying["attempt"].as_u64().unwrap() >= 1);
    assert!(retrying["retryInMs"].as_u64().unwrap() <= 50);
    // The catalog changed before `a` was announced ready.
    let at = |matches: &dyn Fn(&Value) -> bool| lines.seen.iter().position(matches);
    let catalog = at(&|l| l["event"] == "catalog");
    let ready_at = at(&|l| l["server"] == "a" && l["state"] == "ready");
    assert!(catalog.is_some() && catalog < ready_at);

    writeln!(
        stdin,
        r#"{{"call": {{"server": "a", "tool": "tool-001", "arguments": {{"x": 1}}}}}}"#
    )
    .unwrap();
    let answer = lines.next("the call's answer", |l| l.get("tool").is_some());
    assert_eq!(
        answer["result"]["structuredContent"]["tool"], "tool-001",
        "{answer}"
    );
    writeln!(stdin, r#"{{"status": true}}"#).unwrap();
    let status = lines.next("status", |l| l.get("status").is_some());
    assert_eq!(status["status"]["a"]["state"], "ready");
    assert_eq!(status["tools"], 3);

    // The file changes: `dead` goes, `a` (and the failed `local`) are
    // left alone.
    std::fs::write(&path, config(false)).unwrap();
    let reloaded = lines.next("reloaded", |l| l["event"] == "reloaded");
    assert_eq!(reloaded["stopped"], json!(["dead"]), "{reloaded}");
    assert_eq!(reloaded["unchanged"], json!(["a", "local"]));

    // End of input: drain and report.
    drop(stdin);
    let shutdown = lines.next("shutdown", |l| l["event"] == "shutdown");
    assert_eq!(shutdown["servers"]["a"]["outcome"], "closed", "{shutdown}");
    assert_eq!(shutdown["ledger"]["tasks"], 0, "{shutdown}");
    let status = child.wait().unwrap();
    assert!(status.success(), "{status}");
    reader.join().unwrap();
    assert_eq!(server.stats().sessions_created, 1);
    assert_eq!(server.stats().deletes, 1);
    let call = crate::support::seen(&server, "tools/call").pop().unwrap();
    assert_eq!(call.header("x-team"), Some("blue"));
    let _ = std::fs::remove_dir_all(&dir);
}
