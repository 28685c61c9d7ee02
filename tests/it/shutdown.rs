//! The tokio runtime shuts down with live sessions and pending reaps (F32):
//! no panic, no hang, hooks on borrowed clients removed anyway, and every
//! DELETE that could not be sent is counted.

use crate::support;

use std::sync::mpsc;
use std::time::Duration;

use crate::support::baseline::Caller;
use crate::support::*;
use mcp_scoped_http::{Connector, abandoned_deletes, ledger};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Runs `f` on another thread and fails if it does not return in time: a
/// hang is a failure, not a stuck test run.
fn within<T: Send + 'static>(limit: Duration, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (done, wait) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(f());
    });
    wait.recv_timeout(limit).expect("it hung")
}

fn server() -> TestServer {
    TestServer::start(ServerConfig::default().with_listen(ListenMode::Open))
}

#[test]
fn a_session_that_outlives_its_runtime_is_released_without_one() {
    let _serial = support::serial();
    let server = server();
    let caller = Caller::new();
    let before = ledger();
    let abandoned = abandoned_deletes();
    let session = within(Duration::from_secs(10), {
        let (url, caller) = (server.url(), caller.clone());
        move || {
            let runtime = runtime();
            let session = runtime
                .block_on(
                    Connector::new(url)
                        .client(caller.client.clone())
                        .bearer("shutdown-token")
                        .connect(),
                )
                .expect("connect");
            // The runtime goes first, with the session (and its listener) live.
            drop(runtime);
            session
        }
    });
    assert_eq!(caller.client.hooks().len(), 1);
    // No runtime anywhere now: the drop releases what it can, synchronously.
    within(Duration::from_secs(10), move || drop(session));
    assert!(
        caller.client.hooks().is_empty(),
        "the hook left the borrowed client"
    );
    assert_eq!(
        abandoned_deletes(),
        abandoned + 1,
        "the unsendable DELETE is counted"
    );
    assert_eq!(ledger(), before);
    assert_eq!(server.stats().deletes, 0);
}

#[test]
fn a_reap_cut_off_by_runtime_shutdown_still_removes_the_hooks() {
    let _serial = support::serial();
    let server = server();
    server.push_fault(Fault::on_http(http::Method::DELETE, FaultAction::Hang));
    let caller = Caller::new();
    let before = ledger();
    let abandoned = abandoned_deletes();
    within(Duration::from_secs(10), {
        let caller = caller.clone();
        let url = server.url();
        move || {
            let runtime = runtime();
            runtime.block_on(async {
                let session = Connector::new(url)
                    .client(caller.client.clone())
                    .bearer("shutdown-token")
                    .connect()
                    .await
                    .expect("connect");
                // Handed to the reaper, whose DELETE hangs.
                drop(session);
                assert_eq!(ledger().pending_reaps, before.pending_reaps + 1);
                tokio::task::yield_now().await;
            });
            // The runtime shuts down with the reap pending.
            drop(runtime);
        }
    });
    assert!(caller.client.hooks().is_empty());
    assert_eq!(abandoned_deletes(), abandoned + 1);
    assert_eq!(ledger(), before, "nothing pending, nothing held");
}

#[test]
fn a_session_dropped_during_runtime_shutdown_does_not_panic() {
    let _serial = support::serial();
    let server = server();
    let caller = Caller::new();
    let before = ledger();
    let abandoned = abandoned_deletes();
    within(Duration::from_secs(10), {
        let caller = caller.clone();
        let url = server.url();
        move || {
            let runtime = runtime();
            runtime.block_on(async {
                let session = Connector::new(url)
                    .client(caller.client.clone())
                    .connect()
                    .await
                    .expect("connect");
                // A task that holds the session forever: it is dropped by the
                // runtime's shutdown, and with it the session, whose reap
                // can then never run.
                tokio::spawn(async move {
                    let _session = session;
                    std::future::pending::<()>().await;
                });
                tokio::task::yield_now().await;
            });
            drop(runtime);
        }
    });
    assert!(caller.client.hooks().is_empty());
    assert_eq!(abandoned_deletes(), abandoned + 1);
    assert_eq!(ledger(), before);
}

#[test]
fn an_owned_client_session_outliving_its_runtime_is_released_too() {
    let _serial = support::serial();
    let server = server();
    let before = ledger();
    let url = server.url();
    within(Duration::from_secs(10), move || {
        let runtime = runtime();
        let session = runtime
            .block_on(Connector::new(url).connect())
            .expect("connect");
        assert_eq!(ledger().owned_clients, before.owned_clients + 1);
        drop(runtime);
        drop(session);
    });
    assert_eq!(ledger(), before, "the owned client is gone");
}

#[test]
fn shutdown_waits_for_every_pending_reap() {
    let _serial = support::serial();
    let server = server();
    server.push_fault(Fault::on_http(
        http::Method::DELETE,
        FaultAction::Delay(Duration::from_millis(30)),
    ));
    let caller = Caller::new();
    runtime().block_on(async {
        let mut sessions = Vec::new();
        for _ in 0..5 {
            let connector = Connector::new(server.url()).client(caller.client.clone());
            sessions.push(connector.connect().await.unwrap());
        }
        drop(sessions);
        assert!(ledger().pending_reaps >= 5);
        mcp_scoped_http::shutdown().await;
        assert_eq!(ledger().pending_reaps, 0);
    });
    assert_eq!(server.stats().deletes, 5);
    assert_eq!(server.stats().live_sessions, 0);
}

/// A reap handed to a runtime that nobody drives any more (its `block_on`
/// returned, the runtime itself is kept) never runs: `shutdown()`, awaited
/// elsewhere, must not wait for it forever, only until its own bound.
#[test]
fn shutdown_does_not_wait_forever_for_a_reap_nobody_runs() {
    let _serial = support::serial();
    let server = server();
    let idle = runtime();
    let session = idle
        .block_on(
            Connector::new(server.url())
                .delete_timeout(Duration::from_millis(500))
                .connect(),
        )
        .expect("connect");
    // Dropped inside the runtime: the reaper task is spawned there, and
    // the runtime is never driven again.
    idle.block_on(async move { drop(session) });
    assert_eq!(ledger().pending_reaps, 1, "a reap is pending");
    let waited = within(Duration::from_secs(20), || {
        let started = std::time::Instant::now();
        runtime().block_on(mcp_scoped_http::shutdown());
        started.elapsed()
    });
    assert!(
        waited < Duration::from_secs(10),
        "shutdown waited {waited:?} for a reap that never runs"
    );
    assert_eq!(server.stats().deletes, 0, "that reap never ran");
    // Driven again, the runtime finishes the reap.
    let reaped = idle.block_on(eventually(Duration::from_secs(10), || {
        ledger().pending_reaps == 0
    }));
    assert!(reaped);
    assert_eq!(server.stats().deletes, 1);
    assert_eq!(ledger().pending_reaps, 0);
}

/// The DELETE timeout bounds a reap as a whole: the wait for an
/// `initialize` still in flight and the DELETE after it share it (it used
/// to be one of each).
#[test]
fn a_reap_takes_at_most_one_delete_timeout() {
    let _serial = support::serial();
    // Half the limit for initialize leaves a loaded machine room to send
    // the DELETE in time; the old bound (one wait for initialize and one
    // DELETE timeout) would take LIMIT + DELAY, past the assertion's bound.
    const LIMIT: Duration = Duration::from_millis(2400);
    const DELAY: Duration = Duration::from_millis(1200);
    let server = TestServer::start(
        ServerConfig::default()
            // initialize answers after half the limit; the DELETE hangs.
            .with_fault(Fault::on_rpc("initialize", FaultAction::Delay(DELAY)))
            .with_fault(Fault::on_http(http::Method::DELETE, FaultAction::Hang)),
    );
    let rt = runtime();
    let waited = rt.block_on(async {
        let connect = Connector::new(server.url()).delete_timeout(LIMIT).connect();
        // Dropped while initialize is in flight: the reaper waits for its
        // answer, then DELETEs.
        assert!(
            tokio::time::timeout(Duration::from_millis(50), connect)
                .await
                .is_err()
        );
        let started = std::time::Instant::now();
        mcp_scoped_http::shutdown().await;
        started.elapsed()
    });
    assert_eq!(server.stats().sessions_created, 1);
    assert_eq!(server.stats().deletes, 1, "the DELETE was sent");
    assert!(
        waited < LIMIT + DELAY * 2 / 3,
        "the reap took {waited:?}, more than one DELETE timeout ({LIMIT:?})"
    );
    assert_eq!(ledger().pending_reaps, 0);
}
