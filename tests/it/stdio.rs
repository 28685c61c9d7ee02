//! stdio servers: a `Session` over a child process, every era, and the
//! process tree released on every way out. The server is
//! `tests/it/support/stdio_server.py` (Python's standard library only); the
//! SDKs' own stdio servers are in tests/it/interop.rs.

use crate::support;

use std::time::Duration;

use mcp_scoped_http::stdio::{ProcessEnd, StdioCommand};
use mcp_scoped_http::{Connector, ProtocolVersion, TransportKind};
use serde_json::json;

/// The fixture server with `args`, carrying this binary's marker (a test
/// that checks a tree of its own sets one of its own).
fn fixture(args: &[&str]) -> StdioCommand {
    StdioCommand::new("python3")
        .arg("-u")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/it/support/stdio_server.py"
        ))
        .args(args)
        .env(MARKER, binary_marker())
}

/// The marker of every server this test binary starts.
fn binary_marker() -> String {
    format!("stdio-binary-{}", std::process::id())
}

/// One test's scene: this binary's serial lock (the ledger and the process
/// table are process-wide), and at its end the process table's baseline:
/// no server of this binary is left, and no descendant of this process.
struct Scene {
    _serial: support::Serial,
}

fn scene() -> Scene {
    Scene {
        _serial: support::serial(),
    }
}

impl Drop for Scene {
    fn drop(&mut self) {
        if std::thread::panicking() {
            return;
        }
        support::processes::assert_no_marker(MARKER, &binary_marker(), Duration::from_secs(10));
        support::processes::assert_no_descendants(Duration::from_secs(10));
    }
}

#[tokio::test]
async fn a_2025_server_over_stdio_connects_calls_and_exits_when_stdin_closes() {
    let _scene = scene();
    let session = Connector::stdio(fixture(&["--era", "legacy"]))
        .connect()
        .await
        .expect("connect");
    let info = session.info();
    assert_eq!(info.transport, TransportKind::Stdio);
    assert_eq!(info.protocol_version, ProtocolVersion::V2025_11_25);
    assert!(session.catalog().tools.len() >= 7);
    let result = session
        .call_tool("echo", json!({"text": "hi"}))
        .await
        .expect("call");
    assert_eq!(result["content"][0]["text"], "hi");
    let released = session.close().await;
    match released.process {
        Some(ProcessEnd::Exited(status)) => assert!(status.success(), "{status}"),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_2026_server_over_stdio_is_found_by_its_probe() {
    let _scene = scene();
    let session = Connector::stdio(fixture(&["--era", "modern"]))
        .connect()
        .await
        .expect("connect");
    assert_eq!(session.info().protocol_version, ProtocolVersion::MODERN);
    assert!(session.info().probed);
    let result = session
        .call_tool("echo", json!({"text": "modern"}))
        .await
        .expect("call");
    assert_eq!(result["content"][0]["text"], "modern");
    let released = session.close().await;
    assert!(
        matches!(released.process, Some(ProcessEnd::Exited(_))),
        "{released:?}"
    );
}

#[tokio::test]
async fn a_server_that_crashes_at_start_fails_the_connect_with_its_stderr() {
    let _scene = scene();
    let error = Connector::stdio(fixture(&["--crash-at-start"]))
        .connect_timeout(Duration::from_secs(20))
        .connect()
        .await
        .expect_err("it crashed");
    let text = error.to_string();
    assert!(text.contains("exited with status 1"), "{text}");
    // Its stderr is kept apart from the one-line message.
    assert!(!text.contains("fatal"), "{text}");
    let stderr = error.stderr_tail().expect("its stderr");
    assert_eq!(stderr, "starting up\nfatal: bad config (no API key)");
}

/// A program that answers nothing but prints something else (a log line,
/// a banner, not an MCP server at all): its connect times out naming what
/// it printed.
#[tokio::test]
async fn a_server_that_prints_no_json_rpc_times_out_naming_what_it_printed() {
    let _scene = scene();
    let banner = StdioCommand::new("sh")
        .arg("-c")
        .arg("echo 'Server listening on port 3000'; echo '{\"level\":\"info\"}'; exec sleep 100");
    let error = Connector::stdio(banner)
        .connect_timeout(Duration::from_secs(2))
        .connect()
        .await
        .expect_err("never answers");
    assert!(error.is_timeout(), "{error:?}");
    let text = error.to_string();
    assert!(
        text.contains(
            "the server wrote 2 line(s) on its stdout that are not JSON-RPC \
             (the first: `Server listening on port 3000`)"
        ),
        "{text}"
    );
    // A silent server's timeout says nothing of the kind.
    let silent = StdioCommand::new("sleep").arg("100");
    let error = Connector::stdio(silent)
        .connect_timeout(Duration::from_secs(1))
        .connect()
        .await
        .expect_err("never answers");
    assert!(!error.to_string().contains("stdout"), "{error}");
}

#[tokio::test]
async fn a_server_of_both_eras_speaks_2026_and_a_pinned_2025_skips_the_probe() {
    let _scene = scene();
    let modern = Connector::stdio(fixture(&["--era", "both"]))
        .connect()
        .await
        .expect("connect");
    assert_eq!(modern.info().protocol_version, ProtocolVersion::MODERN);
    modern.close().await;

    let pinned = Connector::stdio(fixture(&["--era", "both"]))
        .protocol_version(ProtocolVersion::V2025_06_18)
        .connect()
        .await
        .expect("connect");
    assert_eq!(pinned.info().protocol_version, ProtocolVersion::V2025_06_18);
    assert!(!pinned.info().probed);
    pinned.close().await;
}

#[tokio::test]
async fn a_2025_server_silent_to_the_probe_is_initialized_after_the_probe_timeout() {
    let _scene = scene();
    let session = Connector::stdio(fixture(&["--era", "legacy", "--probe", "silent"]))
        .connect()
        .await
        .expect("connect");
    assert_eq!(
        session.info().protocol_version,
        ProtocolVersion::V2025_11_25
    );
    let result = session
        .call_tool("echo", json!({"text": "late"}))
        .await
        .expect("call");
    assert_eq!(result["content"][0]["text"], "late");
    session.close().await;
}

/// Connects to the fixture of `era` that sleeps `delay` before it reads
/// its stdin, pinned or not, with the connector's defaults (the start
/// counts against the connect timeout, 60 s); calls a tool, closes, and
/// hands back the revision spoken, whether it probed, and how long the
/// connect took.
async fn slow_start(
    era: &str,
    delay: Duration,
    pinned: Option<ProtocolVersion>,
) -> (ProtocolVersion, bool, Duration) {
    let seconds = delay.as_secs().to_string();
    let mut connector = Connector::stdio(fixture(&["--era", era, "--start-delay", &seconds]));
    if let Some(version) = pinned {
        connector = connector.protocol_version(version);
    }
    let started = std::time::Instant::now();
    let what = format!("{era}, {delay:?} to start, pinned {pinned:?}");
    let session = connector
        .connect()
        .await
        .unwrap_or_else(|error| panic!("{what}: {error}"));
    let took = started.elapsed();
    assert!(took >= delay, "{what}: connected after {took:?}");
    let info = (session.info().protocol_version, session.info().probed, took);
    let result = session
        .call_tool("echo", json!({"text": "slow"}))
        .await
        .unwrap_or_else(|error| panic!("{what}: {error}"));
    assert_eq!(result["content"][0]["text"], "slow", "{what}");
    session.close().await;
    info
}

/// A server slow to start (4 s, 8 s before it reads its stdin) connects:
/// unpinned, the probe's late answer opens 2026-07-28 (the `initialize`
/// sent meanwhile, refused with `-32022`, changes nothing); pinned to
/// 2026-07-28, nothing shorter than the connect bounds it. A server of
/// both eras takes that `initialize` too, after the probe: the session
/// speaks the revision it settled on last, 2025. All at once, so the test
/// takes the longest delay, not the sum.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_slow_to_start_connects_unpinned_and_pinned() {
    let _scene = scene();
    let (four, eight) = (Duration::from_secs(4), Duration::from_secs(8));
    let modern = Some(ProtocolVersion::MODERN);
    let (unpinned_4, unpinned_8, pinned_4, pinned_8, both_4) = tokio::join!(
        slow_start("modern", four, None),
        slow_start("modern", eight, None),
        slow_start("modern", four, modern),
        slow_start("modern", eight, modern),
        slow_start("both", four, None),
    );
    for (what, (version, probed, took)) in [("4 s", unpinned_4), ("8 s", unpinned_8)] {
        assert_eq!(version, ProtocolVersion::MODERN, "unpinned, {what}");
        assert!(probed, "unpinned, {what}");
        eprintln!("unpinned, {what} to start: connected in {took:?}");
    }
    for (what, (version, probed, took)) in [("4 s", pinned_4), ("8 s", pinned_8)] {
        assert_eq!(version, ProtocolVersion::MODERN, "pinned, {what}");
        assert!(!probed, "pinned, {what}");
        eprintln!("pinned, {what} to start: connected in {took:?}");
    }
    assert_eq!(both_4.0, ProtocolVersion::V2025_11_25, "both eras, 4 s");
    eprintln!("both eras, 4 s to start: connected in {:?}", both_4.2);
}

/// A 2026-07-28 server that leaves the probe unanswered, then refuses the
/// `initialize` sent after it with `-32022` naming 2026-07-28: that is a
/// redirection, followed in the same connect (`server/discover` with the
/// revision named), not a verdict.
#[tokio::test]
async fn an_initialize_refused_naming_2026_is_followed_in_the_same_connect() {
    let _scene = scene();
    let session = Connector::stdio(fixture(&["--era", "modern", "--probe", "silent"]))
        .connect()
        .await
        .expect("connect");
    assert_eq!(session.info().protocol_version, ProtocolVersion::MODERN);
    assert!(session.info().probed);
    let result = session
        .call_tool("echo", json!({"text": "followed"}))
        .await
        .expect("call");
    assert_eq!(result["content"][0]["text"], "followed");
    session.close().await;
}

#[tokio::test]
async fn a_2025_server_request_over_stdio_is_answered() {
    let _scene = scene();
    let session = Connector::stdio(fixture(&["--era", "legacy"]))
        .roots(vec![json!({"uri": "file:///work", "name": "work"})])
        .connect()
        .await
        .expect("connect");
    let result = session.call_tool("roots", json!({})).await.expect("call");
    let roots: serde_json::Value =
        serde_json::from_str(result["content"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(roots["roots"][0]["uri"], "file:///work");
    session.close().await;
}

/// The stdio page: cancellation is a `notifications/cancelled`, in every
/// era (there is no stream of the request's own to close).
#[tokio::test]
async fn an_abandoned_call_is_cancelled_with_a_notice_in_both_eras() {
    let _scene = scene();
    for era in ["legacy", "modern"] {
        let session = Connector::stdio(fixture(&["--era", era]))
            .connect()
            .await
            .expect("connect");
        let slow = session.call_tool("slow", json!({"seconds": 30}));
        assert!(
            tokio::time::timeout(Duration::from_millis(300), slow)
                .await
                .is_err(),
            "{era}: the slow call answered"
        );
        let cancelled = poll(Duration::from_secs(10), || async {
            let result = session.call_tool("cancelled", json!({})).await.ok()?;
            let ids: Vec<serde_json::Value> =
                serde_json::from_str(result["content"][0]["text"].as_str()?).ok()?;
            (!ids.is_empty()).then_some(ids)
        })
        .await;
        assert_eq!(cancelled.len(), 1, "{era}: {cancelled:?}");
        session.close().await;
    }
}

#[tokio::test]
async fn a_call_in_flight_when_the_server_dies_fails_and_later_calls_say_why() {
    let _scene = scene();
    let session = Connector::stdio(fixture(&["--era", "legacy"]))
        .connect()
        .await
        .expect("connect");
    let error = session
        .call_tool("crash", json!({}))
        .await
        .expect_err("it crashed");
    let text = error.to_string();
    assert!(text.contains("exited with status 3"), "{text}");
    assert!(!text.contains("crashing"), "{text}");
    assert!(
        error
            .stderr_tail()
            .is_some_and(|tail| tail.contains("crashing on purpose")),
        "{error:?}"
    );
    assert!(error.is_retryable(), "{text}");
    let later = session
        .call_tool("echo", json!({"text": "x"}))
        .await
        .expect_err("the server is gone");
    assert!(
        later.to_string().contains("exited with status 3"),
        "{later}"
    );
    let released = session.close().await;
    match released.process {
        Some(ProcessEnd::Exited(status)) => assert_eq!(status.code(), Some(3)),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_server_flooding_stderr_and_logging_on_stdout_still_connects() {
    let _scene = scene();
    let session = Connector::stdio(fixture(&[
        "--era",
        "legacy",
        "--stderr-flood",
        "2000000",
        "--noise",
    ]))
    .connect()
    .await
    .expect("connect");
    let result = session
        .call_tool("echo", json!({"text": "through"}))
        .await
        .expect("call");
    assert_eq!(result["content"][0]["text"], "through");
    session.close().await;
}

#[tokio::test]
async fn the_hosts_environment_stays_in_the_host_unless_asked() {
    let _scene = scene();
    // Cargo sets CARGO_MANIFEST_DIR for the test process: a host variable
    // outside the allowlist.
    assert!(std::env::var_os("CARGO_MANIFEST_DIR").is_some());
    let session = Connector::stdio(fixture(&["--era", "legacy"]).env("GIVEN", "to it"))
        .connect()
        .await
        .expect("connect");
    assert_eq!(env_of(&session, "CARGO_MANIFEST_DIR").await, json!(null));
    assert_eq!(env_of(&session, "GIVEN").await, json!("to it"));
    assert!(env_of(&session, "PATH").await.is_string());
    session.close().await;

    let everything = Connector::stdio(fixture(&["--era", "legacy"]).inherit_env(true))
        .connect()
        .await
        .expect("connect");
    assert!(env_of(&everything, "CARGO_MANIFEST_DIR").await.is_string());
    everything.close().await;
}

#[tokio::test]
async fn a_missing_program_is_a_configuration_error_naming_it() {
    let _scene = scene();
    let error = Connector::stdio(StdioCommand::new("no-such-mcp-server-here"))
        .connect()
        .await
        .expect_err("missing");
    assert!(error.is_builder(), "{error}");
    assert!(!error.is_retryable(), "{error}");
    assert!(
        error.to_string().contains("no-such-mcp-server-here"),
        "{error}"
    );
}

#[tokio::test]
async fn a_line_over_the_limit_ends_the_session_with_a_limit_error() {
    let _scene = scene();
    let session = Connector::stdio(fixture(&["--era", "legacy"]))
        .transport_config(mcp_scoped_http::TransportConfig::default().max_json_body(64 * 1024))
        .connect()
        .await
        .expect("connect");
    let error = session
        .call_tool("big", json!({"bytes": 1_000_000}))
        .await
        .map(drop)
        .expect_err("over the limit");
    assert!(error.is_limit(), "{error}");
    session.close().await;
}

#[tokio::test]
async fn a_server_that_ignores_eof_and_sigterm_is_killed_within_the_bound() {
    let _scene = scene();
    let grace = mcp_scoped_http::stdio::Grace::default()
        .stdin(Duration::from_millis(200))
        .terminate(Duration::from_millis(200));
    let session = Connector::stdio(
        fixture(&["--era", "legacy", "--ignore-eof", "--ignore-term"]).grace(grace),
    )
    .connect()
    .await
    .expect("connect");
    let started = std::time::Instant::now();
    let released = session.close().await;
    assert_eq!(released.process, Some(ProcessEnd::Killed), "{released:?}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn a_server_that_ignores_eof_ends_on_sigterm() {
    let _scene = scene();
    let grace = mcp_scoped_http::stdio::Grace::default().stdin(Duration::from_millis(200));
    let session = Connector::stdio(fixture(&["--era", "legacy", "--ignore-eof"]).grace(grace))
        .connect()
        .await
        .expect("connect");
    let released = session.close().await;
    assert_eq!(
        released.process,
        Some(ProcessEnd::Terminated),
        "{released:?}"
    );
}

/// The value of the variable `name` in the fixture server's environment.
async fn env_of(session: &mcp_scoped_http::Session, name: &str) -> serde_json::Value {
    let result = session
        .call_tool("env", json!({"name": name}))
        .await
        .expect("call");
    result["content"][0]["text"].clone()
}

/// Polls `check` until it gives a value, at most `within`.
async fn poll<T, F, Fut>(within: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let end = std::time::Instant::now() + within;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(std::time::Instant::now() < end, "not within {within:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A list change reaches the catalog in both eras: as a plain
/// notification in 2025, on `subscriptions/listen` in 2026-07-28 (whose
/// notifications share stdout with everything else).
#[tokio::test]
async fn a_list_change_updates_the_catalog_in_both_eras() {
    let _scene = scene();
    for era in ["legacy", "modern"] {
        let session = Connector::stdio(fixture(&["--era", era]))
            .connect()
            .await
            .expect("connect");
        let before = session.catalog().tools.len();
        let changed = poll(Duration::from_secs(10), || async {
            let result = session.call_tool("change", json!({})).await.ok()?;
            (result["content"][0]["text"] == "changed").then_some(())
        })
        .await;
        let () = changed;
        poll(Duration::from_secs(10), || async {
            (session.catalog().tools.len() > before).then_some(())
        })
        .await;
        session.close().await;
    }
}

/// The variable every process of a test's tree carries (inherited from
/// the server it starts), so a scan of `/proc` finds survivors.
const MARKER: &str = "MCP_SCOPED_HTTP_TEST_MARKER";

/// A fresh marker value for one test.
fn marker() -> String {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("stdio-{}-{n}", std::process::id())
}

/// The fixture behind a wrapper that forwards no signal (the `npx`
/// shape), with a grandchild of its own and two descendants that leave
/// its group (a `setsid` child and a double-forked daemon): with the
/// watchdog, a tree of [`TREE`], all carrying `marker`.
fn wrapped(marker: &str, args: &[&str]) -> StdioCommand {
    let mut all = vec!["--wrap", "--grandchild", "--daemons"];
    all.extend_from_slice(args);
    fixture(&all).env(MARKER, marker)
}

/// The processes of a [`wrapped`] tree: the watchdog, the wrapper, the
/// server, its grandchild and its two daemons.
const TREE: usize = 6;

/// No process of the tree marked `marker` is left (bounded).
fn assert_tree_gone(marker: &str) {
    support::processes::assert_no_marker(MARKER, marker, Duration::from_secs(10));
}

/// Polls until the tree marked `marker` has `n` live processes at least.
async fn until_tree(marker: &str, n: usize) {
    let marker = marker.to_owned();
    poll(Duration::from_secs(20), || {
        let marker = marker.clone();
        async move { (support::processes::with_marker(MARKER, &marker).len() >= n).then_some(()) }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrappers_grandchild_is_gone_after_close() {
    let _scene = scene();
    let marker = marker();
    let session = Connector::stdio(wrapped(&marker, &["--era", "legacy"]))
        .connect()
        .await
        .expect("connect");
    until_tree(&marker, TREE).await;
    let released = session.close().await;
    assert!(released.process.is_some(), "{released:?}");
    assert_tree_gone(&marker);
    poll(Duration::from_secs(5), || async {
        mcp_scoped_http::ledger().is_empty().then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrappers_grandchild_is_gone_after_a_failed_connect() {
    let _scene = scene();
    let marker = marker();
    // Silent to the probe, and a connect too short to wait it out.
    let error = Connector::stdio(wrapped(&marker, &["--era", "legacy", "--probe", "silent"]))
        .connect_timeout(Duration::from_millis(1500))
        .connect()
        .await
        .expect_err("the probe outlasts the connect");
    assert!(error.is_timeout(), "{error}");
    assert_tree_gone(&marker);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrappers_grandchild_is_gone_after_the_session_is_dropped() {
    let _scene = scene();
    let marker = marker();
    let session = Connector::stdio(wrapped(&marker, &["--era", "legacy", "--ignore-term"]))
        .connect()
        .await
        .expect("connect");
    until_tree(&marker, TREE).await;
    drop(session);
    // The release runs in the reaper, which `shutdown` waits for.
    mcp_scoped_http::shutdown().await;
    assert_tree_gone(&marker);
}

/// Dropping the connect future after K polls, for every K until it
/// completes: each time, nothing of the tree is left once the reaper is
/// done, and the ledger is empty.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connect_dropped_at_every_await_leaves_no_process() {
    let _scene = scene();
    for era in ["legacy", "modern"] {
        let mut completed = None;
        for polls in 0..500 {
            let marker = marker();
            let connect = Connector::stdio(wrapped(&marker, &["--era", era])).connect();
            match support::poll_at_most(connect, polls).await {
                None => {
                    mcp_scoped_http::shutdown().await;
                    assert_tree_gone(&marker);
                    // A reap's count goes a moment after `shutdown` wakes.
                    poll(Duration::from_secs(5), || async {
                        mcp_scoped_http::ledger().is_empty().then_some(())
                    })
                    .await;
                }
                Some(session) => {
                    session
                        .expect("an undisturbed connect succeeds")
                        .close()
                        .await;
                    assert_tree_gone(&marker);
                    completed = Some(polls);
                    break;
                }
            }
        }
        let completed = completed.expect("the connect completes");
        // The probe, then (2025) `initialize`, then discovery: each pends.
        assert!(completed >= 3, "{era}: {completed} polls");
    }
}

/// The host killed with SIGKILL (no destructor runs): the watchdog ends
/// the whole tree, a wrapper's grandchild included, though the server
/// ignores both stdin's end and SIGTERM. The host is this binary again
/// ([`host_with_a_tree`]), killed once its session is up.
#[test]
fn a_host_killed_with_sigkill_leaves_no_process() {
    let _scene = scene();
    let marker = marker();
    let mut host = std::process::Command::new(std::env::current_exe().expect("this binary"))
        .args([
            "--exact",
            &support::this_test(module_path!(), "host_with_a_tree"),
            "--ignored",
            "--nocapture",
        ])
        .env(HOST_MARKER, &marker)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("the host");
    let stdout = host.stdout.take().unwrap();
    let ready = std::thread::spawn(move || {
        use std::io::BufRead as _;
        std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .any(|line| line == HOST_READY)
    });
    // Bounded: the host is killed below whatever happens.
    let end = std::time::Instant::now() + Duration::from_secs(30);
    while !ready.is_finished() && std::time::Instant::now() < end {
        std::thread::sleep(Duration::from_millis(20));
    }
    let tree = support::processes::with_marker(MARKER, &marker);
    host.kill().expect("SIGKILL the host");
    host.wait().expect("reap the host");
    assert!(ready.join().unwrap(), "the server never became ready");
    assert!(tree.len() >= TREE, "the tree: {tree:?}");
    assert_tree_gone(&marker);
}

/// The host's marker for its tree.
const HOST_MARKER: &str = "MCP_SCOPED_HTTP_TEST_HOST_MARKER";
/// What the host prints once its session is up.
const HOST_READY: &str = "host: ready";

/// The host of [`a_host_killed_with_sigkill_leaves_no_process`]: one
/// session with a wrapped tree that ignores stdin's end and SIGTERM,
/// then a wait that the test's SIGKILL ends.
#[tokio::test]
#[ignore = "the host of a_host_killed_with_sigkill_leaves_no_process, which runs it"]
async fn host_with_a_tree() {
    let Ok(marker) = std::env::var(HOST_MARKER) else {
        return;
    };
    let server = StdioCommand::new("python3")
        .arg("-u")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/it/support/stdio_server.py"
        ))
        .args([
            "--wrap",
            "--grandchild",
            "--daemons",
            "--ignore-term",
            "--ignore-eof",
            "--era",
            "legacy",
        ])
        .env(MARKER, &marker);
    let session = Connector::stdio(server)
        .connect_timeout(Duration::from_secs(30))
        .connect()
        .await
        .expect("the server connects");
    println!("{HOST_READY}");
    // Killed long before this ends: the test's bound is 30 s.
    tokio::time::sleep(Duration::from_secs(120)).await;
    drop(session);
}

#[tokio::test]
async fn a_server_that_closes_its_stdout_but_lives_ends_the_session_and_is_terminated() {
    let _scene = scene();
    let grace = mcp_scoped_http::stdio::Grace::default().stdin(Duration::from_millis(300));
    let session = Connector::stdio(fixture(&["--era", "legacy", "--ignore-eof"]).grace(grace))
        .connect()
        .await
        .expect("connect");
    let error = session
        .call_tool("close_stdout", json!({}))
        .await
        .expect_err("no answer can come");
    assert!(error.to_string().contains("closed its stdout"), "{error}");
    let released = session.close().await;
    assert_eq!(
        released.process,
        Some(ProcessEnd::Terminated),
        "{released:?}"
    );
}

#[tokio::test]
async fn a_line_that_is_not_utf8_ends_the_session_with_a_clear_error() {
    let _scene = scene();
    let session = Connector::stdio(fixture(&["--era", "legacy"]))
        .connect()
        .await
        .expect("connect");
    let error = session
        .call_tool("bad_utf8", json!({}))
        .await
        .expect_err("the stream is broken");
    assert!(error.to_string().contains("UTF-8"), "{error}");
    session.close().await;
}

#[tokio::test]
async fn a_server_that_stops_reading_its_stdin_fails_calls_within_their_deadline() {
    let _scene = scene();
    let session = Connector::stdio(fixture(&["--era", "legacy", "--no-read-after-init"]))
        .request_timeout(Duration::from_secs(1))
        .connect()
        .await
        .expect("connect");
    // Enough to fill the pipe (64 KiB) and the writer's queue behind it.
    let text = "x".repeat(256 * 1024);
    let started = std::time::Instant::now();
    let calls = (0..20).map(|_| session.call_tool("echo", json!({ "text": text })));
    for outcome in futures_util::future::join_all(calls).await {
        let error = outcome.map(drop).expect_err("nothing is read");
        assert!(error.is_timeout(), "{error}");
    }
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    session.close().await;
}

/// rmcp (the official Rust SDK) over `ScopedTransport::stdio`: the same
/// supervision as `Connector::stdio`.
#[cfg(feature = "rmcp")]
mod rmcp_over_stdio {
    use super::*;
    use mcp_scoped_http::adapters::ScopedTransport;
    use rmcp::ServiceExt;
    use rmcp::model::CallToolRequestParams;

    /// Spawns `command`, runs rmcp's handshake, lists and calls `echo`,
    /// cancels; returns the revision rmcp was told and how the process
    /// ended.
    async fn round_trip(
        command: StdioCommand,
        pinned: Option<ProtocolVersion>,
    ) -> (String, Option<ProcessEnd>) {
        let mut builder = ScopedTransport::stdio(command);
        if let Some(version) = pinned {
            builder = builder.protocol_version(version);
        }
        let mut transport = builder.spawn().await.expect("spawn");
        let report = transport.release_report();
        let client = ().serve(transport).await.expect("rmcp initializes");
        let revision = client
            .peer_info()
            .map(|info| info.protocol_version.to_string())
            .unwrap_or_default();
        let tools = client.peer().list_all_tools().await.expect("tools/list");
        assert!(tools.iter().any(|tool| tool.name == "echo"), "{tools:?}");
        let mut arguments = serde_json::Map::new();
        arguments.insert("text".into(), "rmcp".into());
        let result = client
            .call_tool(CallToolRequestParams::new("echo").with_arguments(arguments))
            .await
            .expect("tools/call");
        let text = serde_json::to_value(&result.content).unwrap();
        assert_eq!(text[0]["text"], "rmcp", "{result:?}");
        client.cancel().await.expect("cancel");
        let released = report.released().await.expect("closed, not dropped");
        (revision, released.process)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn rmcp_speaks_every_era_over_stdio_and_the_server_exits_on_close() {
        let _scene = scene();
        let cases = [
            ("legacy", None, "2025-11-25"),
            ("modern", None, "2026-07-28"),
            ("both", None, "2026-07-28"),
            ("both", Some(ProtocolVersion::V2025_11_25), "2025-11-25"),
            ("modern", Some(ProtocolVersion::MODERN), "2026-07-28"),
        ];
        for (era, pinned, expected) in cases {
            let (revision, ended) = round_trip(fixture(&["--era", era]), pinned).await;
            assert_eq!(revision, expected, "{era}, pinned {pinned:?}");
            assert!(
                matches!(ended, Some(ProcessEnd::Exited(status)) if status.success()),
                "{era}, pinned {pinned:?}: {ended:?}"
            );
        }
    }

    /// What one stdio transport found a command line to speak, the next
    /// one (another builder, as an SDK makes per connect) opens at once:
    /// no probe. Seen from the server's own log, each transport's server
    /// a process of its own.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_next_stdio_transport_to_a_command_line_skips_the_probe() {
        let _scene = scene();
        // Unique: the log's path is part of the command line remembered.
        let log = std::env::temp_dir().join(format!("stdio-era-memory-{}.log", marker()));
        let command = fixture(&["--era", "legacy", "--log", log.to_str().expect("UTF-8")]);
        let mut opened = Vec::new();
        for _ in 0..2 {
            let (revision, _) = round_trip(command.clone(), None).await;
            assert_eq!(revision, "2025-11-25");
            opened.push(std::fs::read_to_string(&log).expect("the log"));
            std::fs::remove_file(&log).expect("removed");
        }
        assert_eq!(
            opened[0], "server/discover\ninitialize\ncall echo\n",
            "the first probes"
        );
        assert_eq!(
            opened[1], "initialize\ncall echo\n",
            "the next one does not"
        );
    }

    /// A server 4 s slow to start: rmcp's `initialize` waits for it, as a
    /// connect does.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn rmcp_waits_for_a_server_slow_to_start() {
        let _scene = scene();
        let (revision, _) =
            round_trip(fixture(&["--era", "modern", "--start-delay", "4"]), None).await;
        assert_eq!(revision, "2026-07-28");
    }

    /// The whole tree (a wrapper, a grandchild, two daemons) is gone when
    /// rmcp's service is dropped without a close, and when the transport
    /// is dropped before rmcp ever used it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_dropped_rmcp_service_or_transport_leaves_no_process() {
        let _scene = scene();
        let marker = marker();
        let transport =
            ScopedTransport::stdio(wrapped(&marker, &["--era", "legacy", "--ignore-term"]))
                .spawn()
                .await
                .expect("spawn");
        let client = ().serve(transport).await.expect("rmcp initializes");
        until_tree(&marker, TREE).await;
        drop(client);
        mcp_scoped_http::shutdown().await;
        assert_tree_gone(&marker);

        let marker = super::marker();
        let transport = ScopedTransport::stdio(wrapped(&marker, &["--era", "legacy"]))
            .spawn()
            .await
            .expect("spawn");
        until_tree(&marker, TREE).await;
        drop(transport);
        mcp_scoped_http::shutdown().await;
        assert_tree_gone(&marker);
    }

    /// A program that does not exist: a configuration error from `spawn`,
    /// nothing started.
    #[tokio::test]
    async fn a_missing_program_fails_spawn_naming_it() {
        let _scene = scene();
        let error = ScopedTransport::stdio(StdioCommand::new("no-such-mcp-server-here"))
            .spawn()
            .await
            .expect_err("no such program");
        assert!(error.is_builder(), "{error}");
        assert!(
            error.to_string().contains("no-such-mcp-server-here"),
            "{error}"
        );
    }
}
