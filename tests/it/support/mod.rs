//! Shared fixtures: clients of both ownerships and the MCP handshake.
#![allow(dead_code)]

pub mod alloc;
pub mod baseline;
pub mod fleet;
pub mod hostile_http;
pub mod oauth;
pub mod peers;
pub mod processes;
pub mod server_process;

use std::time::{Duration, Instant};

use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use mcp_scoped_http::ClientOwnership;
use mcp_scoped_http::ProtocolVersion;
use mcp_scoped_http::jsonrpc::{Notification, Request};
use mcp_scoped_http::wire::{Exchange, StreamableHttp};
use serde_json::json;

pub use mcp_scoped_http::HttpClient;
#[allow(unused_imports)]
pub use mcp_scoped_http_testkit::{
    Eras, Fault, FaultAction, FaultMatch, ListenMode, RecordedRequest, ResponseMode, ServerConfig,
    ServerStats, SessionRecord, TestServer,
};

/// The caller's own client, as a borrowed client is usually made: a bare
/// hyper-util client.
pub fn callers_hyper_client()
-> Client<hyper_util::client::legacy::connect::HttpConnector, http_body_util::Full<bytes::Bytes>> {
    Client::builder(TokioExecutor::new()).build_http()
}

/// One owned and one borrowed client, so each test runs over both.
pub fn clients() -> Vec<HttpClient> {
    vec![
        HttpClient::owned().expect("owned client"),
        HttpClient::borrowed(callers_hyper_client()),
    ]
}

pub fn label(client: &HttpClient) -> &'static str {
    match client.ownership() {
        ClientOwnership::Owned => "owned",
        _ => "borrowed",
    }
}

pub fn wire(client: HttpClient, server: &TestServer) -> StreamableHttp {
    StreamableHttp::new(client, &server.url()).expect("valid endpoint")
}

pub fn initialize_request(id: i64, version: &str) -> Request {
    Request {
        id: id.into(),
        method: "initialize".into(),
        params: Some(json!({
            "protocolVersion": version,
            "capabilities": {},
            "clientInfo": {"name": "mcp-scoped-http-tests", "version": "0"},
        })),
    }
}

/// initialize (proposing `version`), record the answer's revision, then
/// notifications/initialized.
pub async fn handshake_with(wire: &StreamableHttp, version: &str) -> Exchange {
    let init = wire
        .request(initialize_request(1, version))
        .await
        .expect("initialize");
    let negotiated: ProtocolVersion = init.result["protocolVersion"]
        .as_str()
        .expect("protocolVersion")
        .parse()
        .expect("supported revision");
    wire.set_protocol_version(negotiated);
    let initialized = Notification {
        method: "notifications/initialized".into(),
        params: None,
    };
    wire.post_notification(&initialized)
        .await
        .expect("initialized");
    init
}

pub async fn handshake(wire: &StreamableHttp) -> Exchange {
    handshake_with(wire, ProtocolVersion::LATEST.as_str()).await
}

pub fn request(id: i64, method: &str, params: Option<serde_json::Value>) -> Request {
    Request {
        id: id.into(),
        method: method.into(),
        params,
    }
}

/// The workspace's root (where `.peers` and `tests/` are), from the
/// library's directory or a member crate's.
pub fn repo_root() -> std::path::PathBuf {
    let here = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    here.ancestors()
        .find(|dir| dir.join("tests/it/support").is_dir())
        .unwrap_or(here)
        .to_path_buf()
}

/// An MCP URL on 127.0.0.1 where nothing listens (a port that was free a
/// moment ago): a connect there is refused.
pub fn refused_url() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    drop(listener);
    format!("http://127.0.0.1:{port}/mcp")
}

/// Requests the server saw for one JSON-RPC method.
pub fn seen(server: &TestServer, rpc_method: &str) -> Vec<RecordedRequest> {
    server
        .requests()
        .into_iter()
        .filter(|r| r.rpc_method.as_deref() == Some(rpc_method))
        .collect()
}

/// Requests the server saw with one HTTP method.
pub fn seen_http(server: &TestServer, method: http::Method) -> Vec<RecordedRequest> {
    server
        .requests()
        .into_iter()
        .filter(|r| r.method == method)
        .collect()
}

/// Polls `condition` until it holds or `within` passes.
pub async fn eventually(within: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if condition() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Polls `future` at most `polls` times; `None` if it was still pending
/// (and has now been dropped): a drop after exactly `polls` polls.
pub async fn poll_at_most<F: std::future::Future>(future: F, polls: usize) -> Option<F::Output> {
    let mut future = std::pin::pin!(future);
    let mut done = 0;
    std::future::poll_fn(|cx| {
        if done == polls {
            return std::task::Poll::Ready(None);
        }
        done += 1;
        future.as_mut().poll(cx).map(Some)
    })
    .await
}

/// The binary's one lock: [`serial`] holds it alone, [`shared`] with the
/// other tests that hold it shared.
static QUIET: std::sync::RwLock<()> = std::sync::RwLock::new(());

/// What this test's thread holds of [`QUIET`]. Kept until the thread ends,
/// which libtest's threads do once their test returned: a `#[tokio::test]`
/// drops its runtime (and the tasks, clients and sessions still on it)
/// after its body, so a guard of the body's would be let go first, and the
/// next test's baseline would count the runtime's leftovers.
enum Held {
    Nothing,
    Alone(#[allow(dead_code)] std::sync::RwLockWriteGuard<'static, ()>),
    Shared(#[allow(dead_code)] std::sync::RwLockReadGuard<'static, ()>),
}

thread_local! {
    static HELD: std::cell::RefCell<Held> = const { std::cell::RefCell::new(Held::Nothing) };
}

/// [`QUIET`] held alone by this test, for the whole of a test that reads
/// process-wide numbers (the ledger, descriptors): a test starting a server
/// or holding a client in the middle of another's scenario would move that
/// one's baseline. [`Baseline::take`](baseline::Baseline::take) refuses to
/// run without it.
pub struct Serial(());

/// Takes this binary's lock alone ([`Serial`]) for the rest of this test,
/// waiting for every test that holds it; again, it takes nothing more.
pub fn serial() -> Serial {
    HELD.with(|held| {
        let mut held = held.borrow_mut();
        match *held {
            Held::Alone(_) => {}
            Held::Shared(_) => panic!("serial() under shared(): the test would wait for itself"),
            Held::Nothing => {
                let guard = QUIET
                    .write()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                settle_leftovers();
                *held = Held::Alone(guard);
            }
        }
    });
    Serial(())
}

/// Waits, within a bound, until what earlier tests made is gone from the
/// ledger: a test's runtime may still be dropping a client or a session
/// after the test ended (a session handed to the reaper, a connection task
/// ending), and a baseline taken then would count it. Pending reaps are not
/// waited for: one handed to a runtime nobody drives stays pending by
/// design. Past the bound the baseline counts what is left, as before.
fn settle_leftovers() {
    let quiet = || {
        let ledger = mcp_scoped_http::ledger();
        ledger.hooks == 0
            && ledger.owned_clients == 0
            && ledger.owned_sessions == 0
            && ledger.tasks == 0
            && ledger.processes == 0
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    while !quiet() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Whether this test holds the lock alone.
pub fn holds_serial() -> bool {
    HELD.with(|held| matches!(*held.borrow(), Held::Alone(_)))
}

/// This binary's lock held shared: what a test holds while it makes
/// servers, clients, sessions or processes without checking a baseline, so
/// that no baseline is taken or checked meanwhile.
pub struct Shared(());

/// Takes this binary's lock shared ([`Shared`]) for the rest of this test,
/// waiting while a test holds it alone; within [`serial`] (or again) it
/// takes nothing more.
pub fn shared() -> Shared {
    HELD.with(|held| {
        let mut held = held.borrow_mut();
        if let Held::Nothing = *held {
            let guard = QUIET
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            *held = Held::Shared(guard);
        }
    });
    Shared(())
}

/// The name libtest knows the test `name` of the module `module` by
/// (`module_path!()`, less this binary's crate name), for running this
/// binary again with `--exact` for that one test.
pub fn this_test(module: &str, name: &str) -> String {
    let module = module.split_once("::").map_or("", |(_, rest)| rest);
    if module.is_empty() {
        name.to_owned()
    } else {
        format!("{module}::{name}")
    }
}

/// Runs one scenario of this binary at a time, under [`serial`], on a
/// current-thread runtime built only once it holds the lock: the baseline
/// counts process-wide descriptors, and a test building its runtime in the
/// middle of another's scenario would add to them. Every test that checks
/// the baseline, or makes anything the baseline counts, runs through this
/// (or holds [`serial`] itself).
pub fn scenario(test: impl std::future::Future<Output = ()>) {
    let _one = serial();
    run_serial(test);
}

/// [`scenario`] for a test that already holds [`serial`] (it made what the
/// scenario uses before, under the same lock).
pub fn run_serial(test: impl std::future::Future<Output = ()>) {
    assert!(holds_serial(), "run_serial() outside serial()");
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
        .block_on(test);
}

/// Whether every session the server minted is settled: DELETEd exactly
/// once, or expired by the server itself (and then DELETEd at most once);
/// none is left live.
pub fn sessions_settled(log: &[SessionRecord]) -> bool {
    log.iter().all(|r| {
        !r.live
            && if r.expired {
                r.deletes <= 1
            } else {
                r.deletes == 1
            }
    })
}

/// Asserts that every session the server minted was DELETEd exactly once,
/// except those the server expired itself (DELETEd at most once), and that
/// none is live. Polls for a bounded while first, so that a DELETE still on
/// its way (a reaper's) counts; call it after `mcp_scoped_http::shutdown()`.
/// Returns the log.
pub async fn assert_each_session_deleted_once(
    server: &TestServer,
    context: &str,
) -> Vec<SessionRecord> {
    eventually(Duration::from_secs(3), || {
        sessions_settled(&server.session_log())
    })
    .await;
    let log = server.session_log();
    let unsettled: Vec<&SessionRecord> = log
        .iter()
        .filter(|r| !sessions_settled(std::slice::from_ref(*r)))
        .collect();
    assert!(
        unsettled.is_empty(),
        "{context}: sessions not DELETEd exactly once (expired ones excepted): {unsettled:?} \
         (of {} minted: {log:?})",
        log.len()
    );
    log
}

/// How many DELETEs the server saw for the sessions it minted, once
/// [`assert_each_session_deleted_once`] has held: one per session it did
/// not expire, and at most one per session it did (a client that never saw
/// the 404 still ends its session). The `deletes` of the baseline check.
pub fn deletes_owed(log: &[SessionRecord]) -> usize {
    log.iter().map(|r| r.deletes).sum()
}

/// Runs `command` (its output piped) to its end, killing it if it runs
/// longer than `within`: whether it succeeded, and its stdout and stderr.
pub fn run_child(mut command: std::process::Command, within: Duration) -> (bool, String) {
    let mut child = command.spawn().unwrap();
    let deadline = Instant::now() + within;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the child ran longer than {within:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let output = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&output.stdout).into_owned()
        + &String::from_utf8_lossy(&output.stderr);
    (output.status.success(), text)
}
