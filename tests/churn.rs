//! Reconnect churn (F33): thousands of connect/close cycles, successful and
//! failing, owned and borrowed clients, with no growth in tasks,
//! descriptors, hooks, the ledger, or heap.

mod support;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::Duration;

use mcp_scoped_http::Connector;
use support::baseline::{Baseline, Caller, alive_tasks, open_fds};
use support::*;

/// Counts live heap bytes on every thread: the client, its tasks, the
/// reaper, the resolver's blocking threads and the test server all count
/// (memory often moves between threads, so a per-thread count would drift).
/// This binary holds one test, so nothing else runs beside it.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every method forwards to `System` with the same arguments and only
// adds a relaxed counter update, so `System`'s guarantees carry over
// unchanged.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as received.
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded as received; `ptr` came from `alloc` above.
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

#[derive(Clone, Copy, Debug)]
enum Cycle {
    /// connect, call a tool, close.
    Closed,
    /// connect, call a tool, drop (the reaper DELETEs).
    Dropped,
    /// initialize answered 500: nothing to DELETE.
    InitializeFails,
    /// page 2 of tools/list fails after the session exists: one DELETE.
    DiscoveryFails,
    /// the caller's deadline cuts discovery off: the reaper DELETEs.
    Cancelled,
}

const CYCLES: [Cycle; 5] = [
    Cycle::Closed,
    Cycle::Dropped,
    Cycle::InitializeFails,
    Cycle::DiscoveryFails,
    Cycle::Cancelled,
];

fn churn_server() -> TestServer {
    TestServer::start(
        ServerConfig::default()
            .with_tools(6)
            .with_page_size(3)
            .with_listen(ListenMode::Open),
    )
}

async fn run(cycle: Cycle, server: &TestServer, caller: Option<&Caller>) {
    let mut connector = Connector::new(server.url()).bearer("churn");
    if let Some(caller) = caller {
        connector = connector.client(caller.client.clone());
    }
    match cycle {
        Cycle::Closed | Cycle::Dropped => {
            let session = connector.connect().await.expect("connect");
            session
                .call_tool("tool-000", serde_json::json!({}))
                .await
                .expect("call");
            if let Cycle::Closed = cycle {
                session.close().await;
            }
        }
        Cycle::InitializeFails => {
            server.push_fault(Fault::on_rpc("initialize", FaultAction::status(500)).times(1));
            let error = connector.connect().await.unwrap_err();
            assert_eq!(
                error.status(),
                Some(http::StatusCode::INTERNAL_SERVER_ERROR)
            );
        }
        Cycle::DiscoveryFails => {
            server.push_fault(
                Fault::on_rpc("tools/list", FaultAction::status(502))
                    .page(2)
                    .times(1),
            );
            let error = connector.connect().await.unwrap_err();
            assert_eq!(error.status(), Some(http::StatusCode::BAD_GATEWAY));
        }
        Cycle::Cancelled => {
            server.push_fault(
                Fault::on_rpc("tools/list", FaultAction::Hang)
                    .page(2)
                    .times(1),
            );
            let cut = tokio::time::timeout(Duration::from_millis(20), connector.connect()).await;
            assert!(cut.is_err());
        }
    }
}

async fn batch(server: &TestServer, caller: Option<&Caller>, rounds: usize) {
    for _ in 0..rounds {
        for cycle in CYCLES {
            run(cycle, server, caller).await;
        }
        mcp_scoped_http::shutdown().await;
        // The server's record of requests would grow with the run.
        server.clear_requests();
    }
}

/// Rounds of all five cycles per client kind, after a warm-up.
const ROUNDS: usize = 200;
const WARM_UP: usize = 20;
/// Heap a run may end with above where it started, for structures that grow
/// to a high-water mark. Measured here: exactly 0. A leak of 16 bytes per
/// cycle would leave 16 000.
const HEAP_SLACK: isize = 16 * 1024;

#[test]
fn thousands_of_cycles_leave_nothing_behind() {
    scenario(async {
        for borrowed in [false, true] {
            let server = churn_server();
            let caller = Caller::new();
            caller.own_request(&server).await;
            let caller_ref = borrowed.then_some(&caller);
            batch(&server, caller_ref, WARM_UP).await;

            let baseline = Baseline::take(Some(&caller));
            let deletes_before = server.stats().deletes;
            let sessions_before = server.stats().sessions_created;
            let (tasks, fds) = (alive_tasks(), open_fds());
            let heap_before = LIVE.load(Ordering::Relaxed);

            batch(&server, caller_ref, ROUNDS).await;

            let stats = server.stats();
            // Every session created was ended by exactly one DELETE: closed,
            // dropped, discovery-failed and cancelled cycles make one (a cycle
            // cut before initialize reached the server makes none), a failed
            // initialize makes none.
            assert_eq!(
                stats.deletes - deletes_before,
                stats.sessions_created - sessions_before,
                "one DELETE per session created"
            );
            assert!(stats.sessions_created - sessions_before >= 3 * ROUNDS);
            assert_eq!(stats.live_sessions, 0);
            baseline.check(&server, stats.deletes).await;
            // Measured once everything has settled (connections closed, tasks
            // gone), so buffers still in flight do not count.
            let heap_growth = LIVE.load(Ordering::Relaxed) - heap_before;
            assert!(
                heap_growth < HEAP_SLACK,
                "{}: heap grew {heap_growth} bytes over {} cycles",
                if borrowed { "borrowed" } else { "owned" },
                ROUNDS * CYCLES.len()
            );
            eprintln!(
                "{}: {} cycles, heap {heap_growth:+} bytes, tasks {} -> {}, fds {} -> {}",
                if borrowed { "borrowed" } else { "owned" },
                ROUNDS * CYCLES.len(),
                tasks,
                alive_tasks(),
                fds,
                open_fds()
            );
        }
    });
}
