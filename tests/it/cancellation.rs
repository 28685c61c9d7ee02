//! Dropping the connect future at every await point (F02, F14): poll it K
//! times, drop it, check the baseline, for every K up to completion, in
//! every era (2025 sessions, 2026-07-28, HTTP+SSE), each found by
//! detection.

use crate::support;

use std::future::Future;
use std::time::Duration;

use crate::support::baseline::{Baseline, Caller};
use crate::support::*;
use mcp_scoped_http::{Connector, Result, Session};

/// A server of `eras` on which every step pends at least once: every POST
/// and GET is delayed, so each exchange has an await that is really
/// pending.
fn slow_server(eras: Eras) -> TestServer {
    let delay = |method: &str| Fault::on_rpc(method, FaultAction::Delay(Duration::from_millis(1)));
    TestServer::start(
        ServerConfig::default()
            .with_eras(eras)
            .with_tools(7)
            .with_page_size(3)
            .with_prompts(2)
            .with_resources(2)
            .with_listen(ListenMode::Open)
            .with_faults(vec![
                delay("server/discover"),
                delay("initialize"),
                delay("notifications/initialized"),
                delay("tools/list"),
                delay("prompts/list"),
                delay("resources/list"),
                delay("resources/templates/list"),
                Fault::on_http(
                    http::Method::GET,
                    FaultAction::Delay(Duration::from_millis(1)),
                ),
            ]),
    )
}

fn connector(
    server: &TestServer,
    caller: Option<&Caller>,
) -> impl Future<Output = Result<Session>> {
    let mut connector = Connector::new(server.url()).bearer("k-token");
    if let Some(caller) = caller {
        connector = connector.client(caller.client.clone());
    }
    connector.connect()
}

/// The bound on K: far above the polls a connect takes here (about 10).
const MAX_POLLS: usize = 2_000;

#[test]
fn dropping_connect_after_any_number_of_polls_leaves_nothing_behind() {
    scenario(async {
        for (eras, borrowed) in [Eras::Streamable2025, Eras::Modern, Eras::HttpSse]
            .into_iter()
            .flat_map(|eras| [(eras, false), (eras, true)])
        {
            // Only 2025 sessions are DELETEd; the others end by themselves.
            let deletes = |stats: &ServerStats| match eras {
                Eras::Streamable2025 => stats.sessions_created,
                _ => 0,
            };
            let (server, caller, baseline) = support::baseline::scene(slow_server(eras)).await;
            let caller = borrowed.then_some(&caller);

            let mut completed_at = None;
            for polls in 0..MAX_POLLS {
                match poll_at_most(connector(&server, caller), polls).await {
                    None => {
                        // Dropped half-way: what it created is DELETEd by the
                        // reaper; everything else is already gone.
                        mcp_scoped_http::shutdown().await;
                        // An HTTP+SSE session ends when the server sees its
                        // stream close, a moment after the client let go.
                        let ended = eventually(Duration::from_secs(5), || {
                            server.stats().live_sessions == 0
                        })
                        .await;
                        let stats = server.stats();
                        assert!(
                            ended,
                            "{eras}, K={polls}: a session was left on the server: {stats:?}"
                        );
                        baseline.check(&server, deletes(&stats)).await;
                    }
                    Some(session) => {
                        let session = session.expect("an undisturbed connect succeeds");
                        assert_eq!(session.catalog().tools.len(), 7);
                        session.close().await;
                        completed_at = Some(polls);
                        break;
                    }
                }
            }
            let completed_at = completed_at.expect("connect completes within the bound");
            // The probe(s), the opening exchanges, 3 pages of tools, prompts,
            // resources, templates: each exchange pends at least once.
            assert!(
                completed_at >= 8,
                "{eras}: every step pended at least once: {completed_at} polls"
            );
            let ended =
                eventually(Duration::from_secs(5), || server.stats().live_sessions == 0).await;
            let stats = server.stats();
            assert!(ended, "{eras}: {stats:?}");
            // Every session created, by any of the dropped attempts or the last
            // one, was ended exactly once (2025: DELETEd, with credentials;
            // HTTP+SSE: its stream closed).
            baseline.check(&server, deletes(&stats)).await;
            for delete in seen_http(&server, http::Method::DELETE) {
                assert_eq!(delete.header("authorization"), Some("Bearer k-token"));
            }
            if eras != Eras::Modern {
                assert!(
                    stats.sessions_created > 1,
                    "{eras}: some drops came after the session was created"
                );
            }
        }
    });
}

#[test]
fn a_caller_deadline_mid_discovery_wins_and_the_session_is_deleted() {
    scenario(async {
        let server = TestServer::start(ServerConfig::default().with_tools(9).with_page_size(3));
        server.push_fault(Fault::on_rpc("tools/list", FaultAction::Hang).page(2));
        let caller = Caller::new();
        caller.own_request(&server).await;
        let baseline = Baseline::take(Some(&caller));
        let connect = Connector::new(server.url())
            .client(caller.client.clone())
            .connect();
        let outcome = tokio::time::timeout(Duration::from_millis(100), connect).await;
        assert!(outcome.is_err(), "the caller's deadline wins");
        mcp_scoped_http::shutdown().await;
        assert_eq!(server.stats().live_sessions, 0);
        baseline.check(&server, 1).await;
    });
}
