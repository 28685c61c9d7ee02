//! stdio servers: a `Session` over a child process, every era, and the
//! process tree released on every way out. The server is
//! `tests/support/stdio_server.py` (Python's standard library only); the
//! SDKs' own stdio servers are in tests/interop.rs.

mod support;

use std::time::Duration;

use mcp_scoped_http::stdio::{ProcessEnd, StdioCommand};
use mcp_scoped_http::{Connector, ProtocolVersion, TransportKind};
use serde_json::json;

/// The fixture server with `args`.
fn fixture(args: &[&str]) -> StdioCommand {
    StdioCommand::new("python3")
        .arg("-u")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/support/stdio_server.py"
        ))
        .args(args)
}

#[tokio::test]
async fn a_2025_server_over_stdio_connects_calls_and_exits_when_stdin_closes() {
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
    let error = Connector::stdio(fixture(&["--crash-at-start"]))
        .connect_timeout(Duration::from_secs(20))
        .connect()
        .await
        .expect_err("it crashed");
    let text = error.to_string();
    assert!(text.contains("exit status: 1"), "{text}");
    assert!(text.contains("fatal: bad config"), "{text}");
}

#[tokio::test]
async fn a_server_of_both_eras_speaks_2026_and_a_pinned_2025_skips_the_probe() {
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

#[tokio::test]
async fn a_2025_server_request_over_stdio_is_answered() {
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
    let session = Connector::stdio(fixture(&["--era", "legacy"]))
        .connect()
        .await
        .expect("connect");
    let error = session
        .call_tool("crash", json!({}))
        .await
        .expect_err("it crashed");
    let text = error.to_string();
    assert!(text.contains("exit status: 3"), "{text}");
    assert!(text.contains("crashing on purpose"), "{text}");
    assert!(error.is_retryable(), "{text}");
    let later = session
        .call_tool("echo", json!({"text": "x"}))
        .await
        .expect_err("the server is gone");
    assert!(later.to_string().contains("exit status: 3"), "{later}");
    let released = session.close().await;
    match released.process {
        Some(ProcessEnd::Exited(status)) => assert_eq!(status.code(), Some(3)),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_server_flooding_stderr_and_logging_on_stdout_still_connects() {
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
