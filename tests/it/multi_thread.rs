//! The session core on a multi-threaded runtime: renewals, closes, drops
//! and request deadlines racing each other on different workers. Every
//! session the server minted is DELETEd exactly once (the expired
//! excepted), every request resolves, and nothing leaks.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use crate::support::baseline::Caller;
use crate::support::*;
use mcp_scoped_http::{Connector, RequestOptions};
use serde_json::json;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime")
}

fn who(borrowed: bool) -> &'static str {
    if borrowed { "borrowed" } else { "owned" }
}

fn connector(server: &TestServer, caller: &Caller, borrowed: bool) -> Connector {
    let connector = Connector::new(server.url())
        .bearer("multi-thread")
        .delete_timeout(Duration::from_secs(2));
    if borrowed {
        connector.client(caller.client.clone())
    } else {
        connector
    }
}

const ROUNDS: u64 = 40;
const CALLERS: usize = 6;
/// Past this, something hung.
const HUNG: Duration = Duration::from_secs(20);

/// How a round ends.
#[derive(Clone, Copy, Debug)]
enum End {
    /// `close()` from the test's task while the calls run.
    Close,
    /// Every handle dropped: the last one by whichever caller finishes last,
    /// on whichever worker.
    Drop,
}

#[test]
fn renewals_closes_and_drops_racing_on_two_workers_leak_no_session() {
    let _one = support::serial();
    runtime().block_on(async {
        for borrowed in [false, true] {
            let (server, caller, baseline) = support::baseline::scene(TestServer::start(
                ServerConfig::default().with_listen(ListenMode::Open),
            ))
            .await;
            for round in 0..ROUNDS {
                let end = if round % 2 == 0 {
                    End::Close
                } else {
                    End::Drop
                };
                let what = format!("{}, round {round}, {end:?}", who(borrowed));
                let session = Arc::new(
                    connector(&server, &caller, borrowed)
                        .connect()
                        .await
                        .unwrap_or_else(|e| panic!("{what}: connect: {e}")),
                );
                // The renewal's initialize head comes after 0-4 ms: the cut
                // lands before, inside or after it.
                server.push_fault(
                    Fault::on_rpc(
                        "initialize",
                        FaultAction::HoldHead(Duration::from_millis(round % 5)),
                    )
                    .times(1),
                );
                server.expire_sessions();
                let calls: Vec<_> = (0..CALLERS)
                    .map(|i| {
                        let session = session.clone();
                        tokio::spawn(async move {
                            let options = RequestOptions::default()
                                .timeout(Duration::from_millis(2 + (i as u64) * 3));
                            let outcome = session
                                .request_with(
                                    "tools/call",
                                    Some(json!({"name": "tool-000", "arguments": {"i": i}})),
                                    options,
                                )
                                .await;
                            drop(session);
                            outcome
                        })
                    })
                    .collect();
                // A jitter, not a wait for a condition: where the end lands.
                tokio::time::sleep(Duration::from_micros(500 * (round % 7))).await;
                match end {
                    End::Close => {
                        tokio::time::timeout(HUNG, session.close())
                            .await
                            .unwrap_or_else(|_| panic!("{what}: close hung"));
                        drop(session);
                    }
                    End::Drop => drop(session),
                }
                for call in calls {
                    let outcome = tokio::time::timeout(HUNG, call)
                        .await
                        .unwrap_or_else(|_| panic!("{what}: a request hung"))
                        .expect("the caller's task");
                    if let Err(error) = outcome {
                        assert!(
                            error.is_closed() || error.is_timeout() || error.is_session_expired(),
                            "{what}: {error}"
                        );
                    }
                }
            }
            tokio::time::timeout(HUNG, mcp_scoped_http::shutdown())
                .await
                .expect("the reaper finishes");
            let log = assert_each_session_deleted_once(&server, who(borrowed)).await;
            baseline.check(&server, deletes_owed(&log)).await;
        }
    });
}

/// Rounds of the single-flight test.
const WAVES: usize = 60;

/// Many requests on two workers meet the 404 of one expiry at once, round
/// after round: each expiry is answered by exactly one re-initialize, and
/// every request goes through on the new session.
#[test]
fn concurrent_404s_on_two_workers_start_one_renewal() {
    let _one = support::serial();
    runtime().block_on(async {
        for borrowed in [false, true] {
            let (server, caller, baseline) =
                support::baseline::scene(TestServer::start(ServerConfig::default())).await;
            let session = Arc::new(
                connector(&server, &caller, borrowed)
                    .listen(false)
                    .connect()
                    .await
                    .expect("connect"),
            );
            for wave in 0..WAVES {
                let before = seen(&server, "initialize").len();
                server.expire_sessions();
                let start = Arc::new(tokio::sync::Barrier::new(CALLERS));
                let calls: Vec<_> = (0..CALLERS)
                    .map(|i| {
                        let (session, start) = (session.clone(), start.clone());
                        tokio::spawn(async move {
                            start.wait().await;
                            session.call_tool("tool-000", json!({"i": i})).await
                        })
                    })
                    .collect();
                for call in calls {
                    tokio::time::timeout(HUNG, call)
                        .await
                        .expect("a request hung")
                        .expect("the caller's task")
                        .unwrap_or_else(|e| panic!("wave {wave}: {e}"));
                }
                assert_eq!(
                    seen(&server, "initialize").len(),
                    before + 1,
                    "{}, wave {wave}: one re-initialize per expiry",
                    who(borrowed)
                );
            }
            session.close().await;
            drop(session);
            tokio::time::timeout(HUNG, mcp_scoped_http::shutdown())
                .await
                .expect("the reaper finishes");
            let log = assert_each_session_deleted_once(&server, who(borrowed)).await;
            baseline.check(&server, deletes_owed(&log)).await;
        }
    });
}

/// The rmcp adapter on two workers: rmcp's calls, an expiry and its
/// renewal, and the service cancelled or dropped at a jittered moment.
#[cfg(feature = "rmcp")]
#[test]
fn rmcp_renewals_cancels_and_drops_racing_on_two_workers_leak_no_session() {
    use mcp_scoped_http::adapters::ScopedTransport;
    use rmcp::ServiceExt;
    use rmcp::model::CallToolRequestParams;

    const RMCP_ROUNDS: u64 = 24;
    let _one = support::serial();
    runtime().block_on(async {
        for borrowed in [false, true] {
            let (server, caller, baseline) = support::baseline::scene(TestServer::start(
                ServerConfig::default().with_listen(ListenMode::Open),
            ))
            .await;
            for round in 0..RMCP_ROUNDS {
                let what = format!("rmcp, {}, round {round}", who(borrowed));
                let mut builder = ScopedTransport::builder(server.url())
                    .bearer("multi-thread")
                    .delete_timeout(Duration::from_secs(2));
                if borrowed {
                    builder = builder.client(caller.client.clone());
                }
                let transport = builder.build().expect("a transport");
                let client = match tokio::time::timeout(HUNG, ().serve(transport)).await {
                    Ok(Ok(client)) => client,
                    Ok(Err(error)) => panic!("{what}: serve: {error}"),
                    Err(_) => panic!("{what}: serve hung"),
                };
                server.push_fault(
                    Fault::on_rpc(
                        "initialize",
                        FaultAction::HoldHead(Duration::from_millis(round % 5)),
                    )
                    .times(1),
                );
                server.expire_sessions();
                let calls: Vec<_> = (0..CALLERS)
                    .map(|i| {
                        let peer = client.peer().clone();
                        tokio::spawn(async move {
                            let arguments = json!({"i": i}).as_object().unwrap().clone();
                            tokio::time::timeout(
                                Duration::from_secs(5),
                                peer.call_tool(
                                    CallToolRequestParams::new("tool-000")
                                        .with_arguments(arguments),
                                ),
                            )
                            .await
                        })
                    })
                    .collect();
                tokio::time::sleep(Duration::from_micros(700 * (round % 6))).await;
                if round % 2 == 0 {
                    tokio::time::timeout(HUNG, client.cancel())
                        .await
                        .unwrap_or_else(|_| panic!("{what}: cancel hung"))
                        .expect("the service task");
                } else {
                    drop(client);
                }
                for call in calls {
                    let outcome = tokio::time::timeout(HUNG, call)
                        .await
                        .unwrap_or_else(|_| panic!("{what}: a call hung"))
                        .expect("the caller's task");
                    assert!(outcome.is_ok(), "{what}: a call outlived its service");
                }
            }
            tokio::time::timeout(HUNG, mcp_scoped_http::shutdown())
                .await
                .expect("the reaper finishes");
            let log = assert_each_session_deleted_once(&server, who(borrowed)).await;
            baseline.check(&server, deletes_owed(&log)).await;
        }
    });
}
