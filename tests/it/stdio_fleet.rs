//! stdio servers in a fleet: `command` entries of an `mcpServers` file run
//! as slots, a process kept while its entry is unchanged, replaced when it
//! changes, ended when removed; a crash loop backs off; a missing program
//! fails for good; a call in flight when the process dies is never sent
//! again.

use crate::support;

use std::time::{Duration, Instant};

use mcp_scoped_http::Backoff;

use mcp_scoped_http::fleet::{Fleet, SlotState, parse_mcp_servers};
use serde_json::{Value, json};

const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/it/support/stdio_server.py"
);

fn fleet() -> Fleet {
    Fleet::builder()
        .backoff(Backoff::new(
            Duration::from_millis(50),
            Duration::from_millis(400),
        ))
        .health_interval(None)
        .shutdown_timeout(Duration::from_secs(10))
        .build()
}

/// The variable every process of an entry's tree carries.
const MARKER: &str = "MCP_SCOPED_HTTP_TEST_MARKER";

/// The marker of entry `name`'s processes, in this test process.
fn marker(name: &str) -> String {
    format!("stdio-fleet-{}-{name}", std::process::id())
}

/// No process of entry `name` is left (bounded).
fn assert_gone(name: &str) {
    support::processes::assert_no_marker(MARKER, &marker(name), Duration::from_secs(10));
}

/// An `mcpServers` file of stdio entries: name, then fixture arguments;
/// each runs behind an npx-shaped wrapper with a grandchild, all marked.
fn config(entries: &[(&str, &[&str])]) -> String {
    let servers: serde_json::Map<String, Value> = entries
        .iter()
        .map(|(name, args)| {
            let mut argv = vec![
                json!("-u"),
                json!(FIXTURE),
                json!("--wrap"),
                json!("--grandchild"),
            ];
            argv.extend(args.iter().map(|a| json!(a)));
            let env = json!({ MARKER: marker(name) });
            (
                (*name).to_owned(),
                json!({"command": "python3", "args": argv, "env": env}),
            )
        })
        .collect();
    json!({ "mcpServers": servers }).to_string()
}

async fn apply(fleet: &Fleet, text: &str) {
    let loaded = parse_mcp_servers(text).expect("config");
    assert!(loaded.skipped.is_empty(), "{:?}", loaded.skipped);
    fleet.apply(loaded.servers).await.expect("apply");
}

/// Polls until `server`'s state satisfies `check`, at most 20 s.
async fn until(fleet: &Fleet, server: &str, check: impl Fn(&SlotState) -> bool) -> SlotState {
    let end = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(state) = fleet.state(server).filter(|s| check(s)) {
            return state;
        }
        assert!(
            Instant::now() < end,
            "{server}: still {:?}",
            fleet.state(server)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn ready(state: &SlotState) -> bool {
    matches!(state, SlotState::Ready)
}

async fn pid(fleet: &Fleet, server: &str) -> String {
    let result = fleet
        .call_tool(server, "pid", json!({}))
        .await
        .expect("pid");
    result["content"][0]["text"]
        .as_str()
        .expect("text")
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_entries_run_are_kept_while_unchanged_and_replaced_when_changed() {
    let _shared = crate::support::shared();
    let fleet = fleet();
    let first = config(&[("old", &["--era", "legacy"]), ("new", &["--era", "modern"])]);
    apply(&fleet, &first).await;
    until(&fleet, "old", ready).await;
    until(&fleet, "new", ready).await;
    let result = fleet
        .call_tool("new", "echo", json!({"text": "via the fleet"}))
        .await
        .expect("call");
    assert_eq!(result["content"][0]["text"], "via the fleet");
    let (old, new) = (pid(&fleet, "old").await, pid(&fleet, "new").await);

    // The same file again: both processes stay.
    apply(&fleet, &first).await;
    assert_eq!(pid(&fleet, "old").await, old);
    assert_eq!(pid(&fleet, "new").await, new);

    // `new`'s arguments change: its process is replaced; `old` is removed.
    apply(
        &fleet,
        &config(&[("new", &["--era", "modern", "--tools", "5"])]),
    )
    .await;
    assert!(fleet.state("old").is_none());
    // Removed: its whole tree (wrapper, server, grandchild) is gone.
    assert_gone("old");
    until(&fleet, "new", ready).await;
    assert_ne!(pid(&fleet, "new").await, new);

    let report = fleet.shutdown().await;
    // Its wrapper's grandchild outlives stdin's end: the group got SIGTERM.
    let closed = &report.servers["new"];
    assert!(
        format!("{closed:?}").contains("process: Some(Terminated)"),
        "{closed:?}"
    );
    mcp_scoped_http::shutdown().await;
    assert_gone("new");
}

#[tokio::test]
async fn a_crash_loop_backs_off_and_a_missing_program_fails_for_good() {
    let _shared = crate::support::shared();
    let fleet = fleet();
    let text = json!({"mcpServers": {
        "crashy": {"command": "python3", "args": ["-u", FIXTURE, "--crash-at-start"]},
        "missing": {"command": "no-such-mcp-server-here"}
    }})
    .to_string();
    apply(&fleet, &text).await;
    let failed = until(&fleet, "missing", |s| matches!(s, SlotState::Failed { .. })).await;
    assert!(
        format!("{failed:?}").contains("no-such-mcp-server-here"),
        "{failed:?}"
    );
    // Attempt after attempt, the count never reset (the process never
    // answered), so each wait is drawn under a ceiling that doubles to the
    // cap (the backoff's own tests check the draws): a crash loop backs
    // off instead of restarting at the first step for ever.
    let mut states = fleet.watch("crashy").expect("a slot");
    let mut attempts = Vec::new();
    let end = Instant::now() + Duration::from_secs(30);
    while attempts.last().is_none_or(|&last| last < 6) {
        if let SlotState::Retrying { attempt, error, .. } = &*states.borrow_and_update() {
            assert!(
                error.to_string().contains("exited with status 1"),
                "{error}"
            );
            // The server's own words, kept apart from the state's text.
            assert!(
                error
                    .stderr_tail()
                    .is_some_and(|tail| tail.contains("fatal: bad config")),
                "{error:?}"
            );
            if attempts.last() != Some(attempt) {
                attempts.push(*attempt);
            }
        }
        let left = end.saturating_duration_since(Instant::now());
        assert!(
            tokio::time::timeout(left, states.changed()).await.is_ok(),
            "attempts seen: {attempts:?}"
        );
    }
    assert!(
        attempts.windows(2).all(|pair| pair[1] > pair[0]),
        "the count was reset: {attempts:?}"
    );
    fleet.shutdown().await;
    mcp_scoped_http::shutdown().await;
}

/// An executable in no executable format (a `.js` whose build dropped
/// its `#!` line) is refused at exec, never run by a shell: the slot fails
/// at its first attempt, naming the file, and its first line never ran.
#[tokio::test]
async fn a_file_in_no_executable_format_fails_at_once_and_never_runs() {
    let _shared = crate::support::shared();
    let dir = std::env::temp_dir().join(format!("stdio-fleet-noexec-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let proof = dir.join("ran");
    let server = dir.join("server.js");
    std::fs::write(
        &server,
        format!("echo ran >> {}\nconsole.log('hi')\n", proof.display()),
    )
    .expect("write");
    std::fs::set_permissions(&server, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    let fleet = fleet();
    let mut events = fleet.events();
    let text = json!({"mcpServers": {"broken": {"command": server.to_str().unwrap()}}}).to_string();
    apply(&fleet, &text).await;
    let failed = until(&fleet, "broken", |s| matches!(s, SlotState::Failed { .. })).await;
    let text = format!("{failed:?}");
    assert!(text.contains("server.js"), "{text}");
    assert!(text.contains("executable format"), "{text}");
    // One attempt: the slot went from starting to failed, never retrying.
    let mut seen = Vec::new();
    while let Ok(event) = events.try_recv() {
        if let mcp_scoped_http::fleet::FleetEvent::State { server, state, .. } = event {
            if &*server == "broken" {
                seen.push(state.name());
            }
        }
    }
    assert!(!seen.contains(&"retrying"), "{seen:?}");
    assert_eq!(seen.last(), Some(&"failed"), "{seen:?}");
    let ran = proof.exists();
    fleet.shutdown().await;
    mcp_scoped_http::shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
    assert!(!ran, "its first line ran as shell code");
}

#[tokio::test]
async fn a_call_in_flight_when_the_process_dies_is_never_sent_again() {
    let _shared = crate::support::shared();
    let log = std::env::temp_dir().join(format!("stdio-fleet-{}.log", std::process::id()));
    let _ = std::fs::remove_file(&log);
    let fleet = fleet();
    let text = json!({"mcpServers": {
        "fragile": {"command": "python3",
                    "args": ["-u", FIXTURE, "--era", "legacy", "--log", log.to_str().unwrap()]}
    }})
    .to_string();
    apply(&fleet, &text).await;
    until(&fleet, "fragile", ready).await;
    let error = fleet
        .call_tool("fragile", "crash", json!({}))
        .await
        .expect_err("it crashed");
    assert!(
        error.to_string().contains("exited with status 3"),
        "{error}"
    );
    // The slot starts a new process, which is never asked the call again.
    until(&fleet, "fragile", ready).await;
    fleet
        .call_tool("fragile", "echo", json!({"text": "after"}))
        .await
        .expect("the new process answers");
    let calls = std::fs::read_to_string(&log).expect("log");
    assert_eq!(calls.matches("call crash").count(), 1, "{calls}");
    fleet.shutdown().await;
    mcp_scoped_http::shutdown().await;
    let _ = std::fs::remove_file(&log);
}

/// The text of `server`'s `ask` tool: it asks the client `method` with
/// `params` (a server request in 2025, an input request in 2026-07-28).
async fn ask(fleet: &Fleet, server: &str, method: &str, params: Value) -> Value {
    let result = fleet
        .call_tool(server, "ask", json!({"method": method, "params": params}))
        .await
        .unwrap_or_else(|error| panic!("{server} {method}: {error}"));
    let text = result["content"][0]["text"].as_str().expect("text");
    serde_json::from_str(text).expect("JSON")
}

/// The client capabilities `server` was told of.
async fn capabilities(fleet: &Fleet, server: &str) -> Value {
    let result = fleet
        .call_tool(server, "capabilities", json!({}))
        .await
        .expect("capabilities");
    serde_json::from_str(result["content"][0]["text"].as_str().expect("text")).expect("JSON")
}

/// The methods of the notifications `server` received so far.
async fn notified(fleet: &Fleet, server: &str) -> Vec<String> {
    let result = fleet
        .call_tool(server, "notified", json!({}))
        .await
        .expect("notified");
    serde_json::from_str(result["content"][0]["text"].as_str().expect("text")).expect("JSON")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_file_servers_reach_the_fleet_s_handlers_in_every_era_and_keep_them_across_reloads()
{
    let _shared = crate::support::shared();
    let fleet = Fleet::builder()
        .backoff(Backoff::new(
            Duration::from_millis(50),
            Duration::from_millis(400),
        ))
        .health_interval(None)
        .on_sampling(|server, params| async move {
            Ok(json!({"role": "assistant", "model": "host",
                      "content": {"type": "text", "text": format!("{server} asked: {}", params["messages"][0]["content"]["text"])}}))
        })
        .on_elicitation(|server, params| async move {
            Ok(json!({"action": "accept", "content": {"from": &*server, "message": params["message"]}}))
        })
        .roots(vec![json!({"uri": "file:///first", "name": "first"})])
        .build();
    let text = config(&[("old", &["--era", "legacy"]), ("new", &["--era", "modern"])]);
    apply(&fleet, &text).await;
    until(&fleet, "old", ready).await;
    until(&fleet, "new", ready).await;
    let sample = json!({"messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}], "maxTokens": 5});
    for server in ["old", "new"] {
        // Declared, as a handler exists for each (2026-07-28 has no
        // roots list_changed).
        let roots = if server == "old" {
            json!({"listChanged": true})
        } else {
            json!({})
        };
        assert_eq!(
            capabilities(&fleet, server).await,
            json!({"sampling": {}, "elicitation": {}, "roots": roots}),
            "{server}"
        );
        let sampled = ask(&fleet, server, "sampling/createMessage", sample.clone()).await;
        assert_eq!(
            sampled["content"]["text"],
            format!("{server} asked: \"hi\""),
            "{server}"
        );
        let elicited = ask(
            &fleet,
            server,
            "elicitation/create",
            json!({"message": "sure?", "requestedSchema": {"type": "object"}}),
        )
        .await;
        assert_eq!(
            elicited,
            json!({"action": "accept", "content": {"from": server, "message": "sure?"}})
        );
        let roots = ask(&fleet, server, "roots/list", json!({})).await;
        assert_eq!(roots["roots"][0]["uri"], "file:///first", "{server}");
    }
    let (old, new) = (pid(&fleet, "old").await, pid(&fleet, "new").await);

    // New roots: the 2025 server is told, the 2026-07-28 one has no such
    // notification; both are answered with them from now on.
    let told = fleet
        .set_roots(vec![json!({"uri": "file:///second", "name": "second"})])
        .await
        .expect("roots declared");
    assert_eq!(told, ["old"]);
    assert!(
        notified(&fleet, "old")
            .await
            .contains(&"notifications/roots/list_changed".to_owned())
    );
    assert!(
        !notified(&fleet, "new")
            .await
            .contains(&"notifications/roots/list_changed".to_owned())
    );
    for server in ["old", "new"] {
        let roots = ask(&fleet, server, "roots/list", json!({})).await;
        assert_eq!(
            roots["roots"],
            json!([{"uri": "file:///second", "name": "second"}]),
            "{server}"
        );
    }

    // The file again, unchanged: the handlers are the fleet's, so each
    // entry is the same server and keeps its process.
    apply(&fleet, &text).await;
    assert_eq!(pid(&fleet, "old").await, old);
    assert_eq!(pid(&fleet, "new").await, new);

    fleet.shutdown().await;
    mcp_scoped_http::shutdown().await;
    assert_gone("old");
    assert_gone("new");
}

#[tokio::test]
async fn without_handlers_nothing_is_declared_and_set_roots_is_refused() {
    let _shared = crate::support::shared();
    let fleet = fleet();
    apply(&fleet, &config(&[("plain", &["--era", "legacy"])])).await;
    until(&fleet, "plain", ready).await;
    assert_eq!(capabilities(&fleet, "plain").await, json!({}));
    let refused = ask(&fleet, "plain", "sampling/createMessage", json!({})).await;
    assert_eq!(refused["error"]["code"], -32601, "{refused}");
    let error = fleet.set_roots(vec![]).await.unwrap_err();
    assert!(error.is_builder(), "{error}");
    assert!(error.to_string().contains("FleetBuilder::roots"), "{error}");
    fleet.shutdown().await;
    mcp_scoped_http::shutdown().await;
    assert_gone("plain");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_messages_of_every_era_reach_the_fleet_when_a_level_is_asked() {
    let _shared = crate::support::shared();
    let fleet = fleet();
    let mut notices = fleet.notifications();
    // Each entry with a level, and one without: its server sends none.
    let text = config(&[
        ("old", &["--era", "legacy"]),
        ("new", &["--era", "modern"]),
        ("quiet", &["--era", "modern"]),
    ]);
    let mut file: Value = serde_json::from_str(&text).unwrap();
    for name in ["old", "new"] {
        file["mcpServers"][name]["logLevel"] = json!("info");
    }
    apply(&fleet, &file.to_string()).await;
    for server in ["old", "new", "quiet"] {
        until(&fleet, server, ready).await;
        fleet
            .call_tool(server, "echo", json!({"text": "x"}))
            .await
            .expect("echo");
    }
    // Each call's message came before its answer: all here by now.
    let mut heard = Vec::new();
    while let Ok(notice) = notices.try_recv() {
        if notice.method() == "notifications/message" {
            heard.push((
                notice.server.to_string(),
                notice.params().unwrap()["data"].clone(),
            ));
        }
    }
    assert_eq!(
        heard,
        [
            ("old".to_owned(), json!("calling echo (asked: info)")),
            ("new".to_owned(), json!("calling echo (asked: info)")),
        ]
    );
    // 2026-07-28 has no logging/setLevel: refused here, not sent.
    let refused = fleet.set_log_level("new", "debug").await.unwrap_err();
    assert!(refused.is_builder(), "{refused}");
    fleet
        .set_log_level("old", "debug")
        .await
        .expect("2025 takes it");
    fleet.shutdown().await;
    mcp_scoped_http::shutdown().await;
    for server in ["old", "new", "quiet"] {
        assert_gone(server);
    }
}
