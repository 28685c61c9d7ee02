//! The fleet's own memory budget (issue 26, item 2): every slot's session
//! draws from `FleetBuilder::memory` as well as from its own
//! `MemoryBudget`, so N hostile servers cost one budget, not N. A server
//! whose catalog or answer the fleet's budget cannot hold fails with a
//! limit error naming it and the fleet's budget; the others stay ready and
//! answer calls. Every test ends with the baseline check.

use crate::support::baseline::World;
use crate::support::fleet::*;
use crate::support::*;
use bytes::Bytes;
use mcp_scoped_http::Backoff;
use mcp_scoped_http::fleet::Fleet;
use serde_json::json;

const MIB: usize = 1024 * 1024;
/// The fleet's budget in these tests: far above what the test kit's
/// ordinary catalogs and answers take, below one hostile page.
const FLEET_BUDGET: usize = 4 * MIB;
/// One hostile page or answer: within a session's own budget (64 MiB) and
/// the transport's body limit (8 MiB), over the fleet's.
const BIG: usize = 7 * MIB + MIB / 2;

/// A fleet as `support::fleet::fleet()`, with a small memory budget.
fn fleet_with_budget() -> Fleet {
    Fleet::builder()
        .backoff(Backoff::new(20 * MS, 200 * MS))
        .health_interval(None)
        .shutdown_timeout(SETTLE)
        .memory(FLEET_BUDGET)
        .build()
}

/// A JSON-RPC answer whose `result` is `result`, whatever was asked.
fn raw_result(result: &str) -> FaultAction {
    let body = format!(r#"{{"jsonrpc":"2.0","id":{{id}},"result":{result}}}"#);
    FaultAction::Raw {
        status: 200,
        content_type: "application/json".into(),
        body: Bytes::from(body),
    }
}

/// A `tools/list` result of about `bytes`: ordinary tools, each with an
/// 8 KiB description, and no next page.
fn big_tools_page(bytes: usize) -> String {
    let description = "d".repeat(8 * 1024);
    let mut page = String::from(r#"{"tools":["#);
    let mut i = 0;
    while page.len() < bytes {
        if i > 0 {
            page.push(',');
        }
        page.push_str(&format!(
            r#"{{"name":"big-{i}","description":"{description}","inputSchema":{{"type":"object"}}}}"#
        ));
        i += 1;
    }
    page.push_str("]}");
    page
}

/// A server whose catalog (one 7.5 MiB page, sent on every connect) fits
/// its session's budget but not the fleet's: its slot fails with the
/// fleet's limit, named, and keeps retrying; the two ordinary servers are
/// ready and answer. Before the fleet had a budget, it was ready.
#[test]
fn a_catalog_over_the_fleets_budget_fails_its_slot_and_the_others_answer() {
    scenario(async {
        // Before the baseline: servers are not what it counts.
        let other = TestServer::start(ServerConfig::default());
        let hostile = TestServer::start(
            ServerConfig::default()
                .with_record_requests(false)
                .with_faults(vec![Fault::on_rpc(
                    "tools/list",
                    raw_result(&big_tools_page(BIG)),
                )]),
        );
        let world = World::new(ServerConfig::default()).await;
        let fleet = fleet_with_budget();
        fleet
            .apply([
                ("a", spec(&world.server).required(true)),
                ("b", spec(&other).required(true)),
                ("big", spec(&hostile)),
            ])
            .await
            .unwrap();
        fleet.ready(SETTLE).await.unwrap();

        let refused = |fleet: &Fleet| {
            fleet.state("big").and_then(|state| {
                let error = state.error()?.clone();
                (state.name() == "retrying" && error.is_limit()).then_some(error)
            })
        };
        assert!(
            eventually(SETTLE, || refused(&fleet).is_some()).await,
            "{:?}",
            fleet.states()
        );
        let error = refused(&fleet).unwrap().to_string();
        assert!(
            error.contains("server `big`: ")
                && error.contains("the fleet's memory budget of 4 MiB (FleetBuilder::memory)"),
            "{error}"
        );
        // Retried, and refused again: nothing of its earlier tries is kept.
        assert!(
            eventually(SETTLE, || fleet
                .state("big")
                .and_then(|s| s.attempt())
                .is_some_and(|n| n >= 3))
            .await,
            "{:?}",
            fleet.states()
        );
        assert!(fleet.catalog().tool("big__big-0").is_none());

        // The others keep working, whatever the hostile one does.
        for server in ["a", "b"] {
            assert!(is(&fleet, server, "ready"), "{:?}", fleet.states());
            let result = fleet
                .call_tool(server, "tool-000", json!({"text": "hi"}))
                .await
                .unwrap();
            assert_eq!(result["structuredContent"]["tool"], "tool-000");
        }
        finish(fleet, &world, &[&other, &hostile], "fleet budget, catalog").await;
    });
}

/// A server whose answer to a call (7.5 MiB) fits its session's budget but
/// not the fleet's: that call fails with the fleet's limit, naming the
/// server; the budget is given back (its next call, and the other
/// server's, are answered), and both stay ready. Before the fleet had a
/// budget, the call was answered.
#[test]
fn an_answer_over_the_fleets_budget_fails_that_call_and_names_the_server() {
    scenario(async {
        let hostile = TestServer::start(ServerConfig::default().with_record_requests(false));
        let world = World::new(ServerConfig::default()).await;
        let text = "x".repeat(BIG);
        hostile.push_fault(
            Fault::on_rpc(
                "tools/call",
                raw_result(&format!(
                    r#"{{"content":[{{"type":"text","text":"{text}"}}]}}"#
                )),
            )
            .times(1),
        );
        let fleet = fleet_with_budget();
        fleet
            .apply([
                ("a", spec(&world.server).required(true)),
                ("big", spec(&hostile).required(true)),
            ])
            .await
            .unwrap();
        fleet.ready(SETTLE).await.unwrap();

        let error = match fleet.call_tool("big", "tool-000", json!({})).await {
            Err(error) => error,
            // Not the 7.5 MiB answer itself in the test's output.
            Ok(result) => panic!("answered, {} bytes", result.to_string().len()),
        };
        assert!(error.is_limit(), "{error:?}");
        let said = error.to_string();
        assert!(
            said.contains("server `big`: ")
                && said.contains("the fleet's memory budget of 4 MiB (FleetBuilder::memory)"),
            "{said}"
        );
        for server in ["a", "big"] {
            let result = fleet
                .call_tool(server, "tool-001", json!({}))
                .await
                .unwrap();
            assert_eq!(result["structuredContent"]["tool"], "tool-001");
            assert!(is(&fleet, server, "ready"), "{:?}", fleet.states());
        }
        finish(fleet, &world, &[&hostile], "fleet budget, answer").await;
    });
}
