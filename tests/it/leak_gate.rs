//! The leak gate (F33, issue 6): thousands of churn cycles of every kind
//! (complete, attached, failing at initialize, at initialized, at discovery,
//! dropped half-way), through an owned and a borrowed client, end with
//! live tasks, open descriptors, server-side connections, hooks and the
//! ledger exactly where they started, every session created DELETEd once,
//! and the same number of allocations per cycle at the end as at the start.
//!
//! The cycles are those of the benchmark (`mcp_scoped_http_testkit::churn`).
//!
//! Ignored by a plain `cargo test` (it takes a minute and a half in a
//! debug build); CI runs it with `--ignored leak_gate::`.

use std::sync::atomic::Ordering;

use crate::support::baseline::{Baseline, Caller, alive_tasks, open_fds};
use crate::support::*;
use mcp_scoped_http_testkit::churn::{Churn, Cycle};

use crate::support::alloc::{ALLOCATIONS, LIVE};

/// Cycles of warm-up before anything is measured.
const WARM_UP: usize = 250;
/// Cycles per measured block, and measured blocks.
const BLOCK: usize = 125;
const BLOCKS: usize = 8;
/// Heap growth allowed between the first half of the measured blocks and the
/// second: the lowest heap after a block of the second half against the
/// second lowest of the first half. A leak raises every sample; the caller's
/// own pool (a connection left busy by a dropped request is replaced by a new
/// one, with buffers of another size) adds spikes above the floor, and now
/// and then one dip below it (seen: one sample 15 KB under three level ones),
/// which the second lowest ignores. A leak of 4 bytes per cycle raises the
/// statistic by at least 3 blocks' worth, 1 500 bytes.
const HEAP_SLACK: isize = 1024;
/// Allocations per cycle in the last two blocks may exceed those in the
/// first two by this fraction (timing moves a few buffers around), no more.
const ALLOCATION_SLACK: f64 = 0.02;
/// A dropped connect stops wherever five polls took it, which depends on
/// timing: how much work a cycle did, which of the caller's connections it
/// left busy (and so replaced) and how large their buffers are all vary from
/// block to block. For that kind the heap bound is loose (a leak of 200
/// bytes per cycle would pass it; the other five kinds share the same
/// connect and are held to `HEAP_SLACK`) and allocations per cycle are
/// reported, not compared.
const DROPPED_HEAP_SLACK: isize = 160 * 1024;

fn gate_server(cycle: Cycle) -> TestServer {
    // Like the benchmark's server, smaller: 9 tools over 3 pages (so the
    // discovery fault on page 3 has a page 3), SSE answers.
    TestServer::start(
        mcp_scoped_http_testkit::churn::server_config()
            .with_tools(9)
            .with_page_size(3)
            .with_record_requests(true)
            .with_faults(cycle.faults()),
    )
}

async fn block(churn: &Churn, server: &TestServer, cycles: usize) {
    for i in 0..cycles {
        if let Err(error) = churn.run_once().await {
            panic!("{} cycle {i}: {error}", churn.cycle().name());
        }
    }
    mcp_scoped_http::shutdown().await;
    // The server's record of requests would grow with the run.
    server.clear_requests();
}

/// Runs every kind of cycle through one kind of client.
async fn gate(borrowed: bool) {
    let kind = if borrowed { "borrowed" } else { "owned" };
    for cycle in Cycle::ALL {
        let server = gate_server(cycle);
        let caller = Caller::new();
        caller.own_request(&server).await;
        let churn = Churn::new(server.url(), cycle, borrowed.then(|| caller.client.clone()))
            .await
            .expect("the churn starts");
        block(&churn, &server, WARM_UP).await;

        let baseline = Baseline::take(Some(&caller));
        let before = server.stats();
        let caller_connections = caller.live_tasks();
        let (tasks, fds) = (alive_tasks(), open_fds());
        let mut allocations_per_block = Vec::new();
        let mut heap_after_block = Vec::new();
        for _ in 0..BLOCKS {
            let start = ALLOCATIONS.load(Ordering::Relaxed);
            block(&churn, &server, BLOCK).await;
            allocations_per_block.push(ALLOCATIONS.load(Ordering::Relaxed) - start);
            settle(tasks).await;
            heap_after_block.push(LIVE.load(Ordering::Relaxed));
        }

        let stats = server.stats();
        let created = stats.sessions_created - before.sessions_created;
        let deleted = stats.deletes - before.deletes;
        let cycles = BLOCK * BLOCKS;
        let name = format!("{kind} {}", cycle.name());
        match cycle {
            Cycle::Attached | Cycle::InitializeFails => {
                assert_eq!((created, deleted), (0, 0), "{name}: sessions, DELETEs");
            }
            // The drop may come before the server minted a session (then
            // there is nothing to DELETE), never after without a DELETE.
            Cycle::Dropped => assert_eq!(deleted, created, "{name}: one DELETE per session"),
            _ => assert_eq!(
                (created, deleted),
                (cycles, cycles),
                "{name}: sessions, DELETEs"
            ),
        }
        baseline.check(&server, stats.deletes).await;
        // Server-side connections: only the caller's own pooled ones remain.
        let connections_back = eventually(std::time::Duration::from_secs(5), || {
            server
                .stats()
                .connections_open
                .saturating_sub(caller.live_tasks())
                <= before.connections_open.saturating_sub(caller_connections)
        })
        .await;
        assert!(
            connections_back,
            "{name}: server connections {} (caller's {}), before {} (caller's {caller_connections})",
            server.stats().connections_open,
            caller.live_tasks(),
            before.connections_open,
        );
        assert_eq!(server.stats().live_sessions, before.live_sessions, "{name}");

        // Each measured once the block's tasks had settled, so buffers in
        // flight do not count.
        let half = BLOCKS / 2;
        let mut first_half = heap_after_block[..half].to_vec();
        first_half.sort_unstable();
        let lowest_later = heap_after_block[half..].iter().copied().min();
        let heap_growth = lowest_later.unwrap_or_default() - first_half[1];
        let deterministic = cycle != Cycle::Dropped;
        let heap_slack = if deterministic {
            HEAP_SLACK
        } else {
            DROPPED_HEAP_SLACK
        };
        assert!(
            heap_growth < heap_slack,
            "{name}: the heap's floor rose {heap_growth} bytes over {} cycles ({heap_after_block:?})",
            BLOCK * (BLOCKS - 1)
        );
        let per_cycle: Vec<f64> = allocations_per_block
            .iter()
            .map(|&n| n as f64 / BLOCK as f64)
            .collect();
        // Two blocks a side, as many cycles as one block of 250 before.
        let mean = |blocks: &[f64]| blocks.iter().sum::<f64>() / blocks.len() as f64;
        let (first, last) = (mean(&per_cycle[..2]), mean(&per_cycle[BLOCKS - 2..]));
        assert!(
            !deterministic || last <= first * (1.0 + ALLOCATION_SLACK),
            "{name}: allocations per cycle grew from {first:.1} to {last:.1} ({per_cycle:?})"
        );
        eprintln!(
            "{name}: {cycles} cycles, {created} sessions, {deleted} DELETEs, heap floor {heap_growth:+} B, \
             allocations/cycle {first:.1} -> {last:.1}, tasks {tasks} -> {}, fds {fds} -> {}",
            alive_tasks(),
            open_fds()
        );
        churn.finish().await;
        mcp_scoped_http::shutdown().await;
    }
}

/// Waits (bounded) until no more tasks are alive than at the baseline.
async fn settle(tasks: usize) {
    eventually(std::time::Duration::from_secs(5), || alive_tasks() <= tasks).await;
}

#[test]
#[ignore = "the leak gate: .ci/run runs it, with --ignored"]
fn owned_clients_leave_nothing_behind() {
    // Boxed: in a debug build the gate's future passes a test thread's stack.
    scenario(Box::pin(gate(false)));
}

#[test]
#[ignore = "the leak gate: .ci/run runs it, with --ignored"]
fn a_borrowed_client_is_left_as_it_was() {
    scenario(Box::pin(gate(true)));
}
