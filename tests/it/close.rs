//! Close and drop: idempotent, valid from any state, bounded (F29-F31).

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::support::baseline::{Baseline, Caller};
use crate::support::*;
use mcp_scoped_http::{Connector, Session, SessionRelease};

async fn connect(server: &TestServer, caller: Option<&Caller>) -> Session {
    let mut connector = Connector::new(server.url())
        .bearer("close-token")
        .delete_timeout(Duration::from_millis(300));
    if let Some(caller) = caller {
        connector = connector.client(caller.client.clone());
    }
    connector.connect().await.expect("connect")
}

fn start() -> (TestServer, Caller) {
    let server = TestServer::start(ServerConfig::default().with_listen(ListenMode::Open));
    (server, Caller::new())
}

#[test]
fn close_twice_and_concurrently_sends_one_delete() {
    scenario(async {
        for borrowed in [false, true] {
            let (server, caller) = start();
            caller.own_request(&server).await;
            let baseline = Baseline::take(Some(&caller));
            let session = connect(&server, borrowed.then_some(&caller)).await;
            let (a, b) = tokio::join!(session.close(), session.close());
            assert!(
                a.already_closed != b.already_closed,
                "exactly one close did the work"
            );
            assert!(session.close().await.already_closed);
            drop(session);
            mcp_scoped_http::shutdown().await;
            baseline.check(&server, 1).await;
        }
    });
}

#[test]
fn in_flight_calls_fail_fast_with_closed() {
    scenario(async {
        for borrowed in [false, true] {
            let (server, caller) = start();
            caller.own_request(&server).await;
            let baseline = Baseline::take(Some(&caller));
            let session = Arc::new(connect(&server, borrowed.then_some(&caller)).await);
            server.push_fault(Fault::on_rpc("tools/call", FaultAction::Hang));
            let call = tokio::spawn({
                let session = session.clone();
                async move { session.call_tool("tool-000", serde_json::json!({})).await }
            });
            assert!(
                eventually(Duration::from_secs(5), || !seen(&server, "tools/call")
                    .is_empty())
                .await
            );
            let started = Instant::now();
            let released = session.close().await;
            assert!(
                matches!(released.session, SessionRelease::Deleted(_)),
                "{released:?}"
            );
            let error = tokio::time::timeout(Duration::from_secs(5), call)
                .await
                .expect("the in-flight call ended when the session closed")
                .unwrap()
                .unwrap_err();
            assert!(error.is_closed(), "{error}");
            assert!(
                started.elapsed() < Duration::from_secs(2),
                "close and the call's failure were prompt"
            );
            assert!(
                session
                    .call_tool("tool-000", serde_json::json!({}))
                    .await
                    .unwrap_err()
                    .is_closed()
            );
            drop(session);
            baseline.check(&server, 1).await;
        }
    });
}

#[test]
fn close_completes_whatever_the_delete_answers() {
    scenario(async {
        for (status, ended) in [
            (200u16, true),
            (202, true),
            (204, true),
            (404, true),
            (405, true),
            (500, false),
        ] {
            for borrowed in [false, true] {
                let (server, caller) = start();
                caller.own_request(&server).await;
                let baseline = Baseline::take(Some(&caller));
                let session = connect(&server, borrowed.then_some(&caller)).await;
                server.push_fault(Fault::on_http(
                    http::Method::DELETE,
                    FaultAction::status(status),
                ));
                let released = session.close().await;
                match released.session {
                    SessionRelease::Deleted(s) => assert!(ended && s.as_u16() == status),
                    SessionRelease::DeleteFailed(e) => {
                        assert!(!ended && e.status().map(|s| s.as_u16()) == Some(status))
                    }
                    other => panic!("{status}: {other:?}"),
                }
                // Local cleanup ran regardless.
                assert_eq!(released.tasks_stopped, 1);
                assert_eq!(released.hooks_removed, 1);
                drop(session);
                baseline.check(&server, 1).await;
            }
        }
    });
}

#[test]
fn a_hanging_delete_is_cut_off_at_the_timeout() {
    scenario(async {
        for borrowed in [false, true] {
            let (server, caller) = start();
            caller.own_request(&server).await;
            let baseline = Baseline::take(Some(&caller));
            let session = connect(&server, borrowed.then_some(&caller)).await;
            server.push_fault(Fault::on_http(http::Method::DELETE, FaultAction::Hang));
            let started = Instant::now();
            let released = session.close().await;
            let SessionRelease::DeleteFailed(error) = released.session else {
                panic!("{released:?}")
            };
            assert!(error.is_timeout(), "{error}");
            assert!(
                started.elapsed() < Duration::from_secs(3),
                "bounded by the 300 ms DELETE timeout"
            );
            assert_eq!(released.hooks_removed, 1);
            drop(session);
            baseline.check(&server, 1).await;
        }
    });
}

#[test]
fn a_session_dropped_after_a_failed_call_is_still_deleted() {
    scenario(async {
        for borrowed in [false, true] {
            let (server, caller) = start();
            caller.own_request(&server).await;
            let baseline = Baseline::take(Some(&caller));
            let session = connect(&server, borrowed.then_some(&caller)).await;
            server.push_fault(Fault::on_rpc("tools/call", FaultAction::status(500)).times(1));
            let error = session
                .call_tool("tool-000", serde_json::json!({}))
                .await
                .unwrap_err();
            assert_eq!(
                error.status(),
                Some(http::StatusCode::INTERNAL_SERVER_ERROR)
            );
            drop(session);
            mcp_scoped_http::shutdown().await;
            let delete = seen_http(&server, http::Method::DELETE)
                .pop()
                .expect("reaped");
            assert_eq!(delete.header("authorization"), Some("Bearer close-token"));
            baseline.check(&server, 1).await;
        }
    });
}

#[test]
fn dropping_close_half_way_hands_the_rest_to_the_reaper() {
    scenario(async {
        let (server, caller) = start();
        caller.own_request(&server).await;
        let baseline = Baseline::take(Some(&caller));
        let session = connect(&server, Some(&caller)).await;
        server.push_fault(Fault::on_http(
            http::Method::DELETE,
            FaultAction::Delay(Duration::from_millis(50)),
        ));
        let abandoned = mcp_scoped_http::abandoned_deletes();
        // The close future is dropped while its DELETE is in flight: the reaper
        // takes over the same DELETE; none is abandoned, none sent twice.
        let cut = tokio::time::timeout(Duration::from_millis(10), session.close()).await;
        assert!(cut.is_err());
        mcp_scoped_http::shutdown().await;
        assert_eq!(mcp_scoped_http::abandoned_deletes(), abandoned);
        drop(session);
        baseline.check(&server, 1).await;
    });
}

/// `close()` dropped while its DELETE is in flight: the DELETE still
/// pending is the reaper's at once (a tracked reap, counted in the ledger),
/// and `shutdown()` returns only once it has finished, with nothing of the
/// session left running.
#[test]
fn a_close_cut_off_during_its_delete_leaves_a_tracked_reap_that_shutdown_waits_for() {
    scenario(async {
        for borrowed in [false, true] {
            let (server, caller) = start();
            caller.own_request(&server).await;
            let baseline = Baseline::take(Some(&caller));
            let before = mcp_scoped_http::ledger();
            let session = connect(&server, borrowed.then_some(&caller)).await;
            server.push_fault(Fault::on_http(
                http::Method::DELETE,
                FaultAction::Delay(Duration::from_millis(150)),
            ));
            let mut close = Box::pin(session.close());
            // Driven until the DELETE has reached the server, then dropped.
            let reached = tokio::time::timeout(Duration::from_secs(5), async {
                while server.stats().deletes == 0 {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            });
            tokio::select! {
                _ = &mut close => panic!("close finished inside the DELETE's delay"),
                reached = reached => reached.expect("the DELETE reaches the server"),
            }
            drop(close);
            assert_eq!(
                mcp_scoped_http::ledger().pending_reaps,
                before.pending_reaps + 1,
                "the DELETE in flight was not handed to a tracked reap"
            );
            mcp_scoped_http::shutdown().await;
            // At once, no settling: shutdown waited for the reap.
            let after = mcp_scoped_http::ledger();
            assert_eq!(after.pending_reaps, before.pending_reaps);
            assert_eq!(
                after.owned_sessions, before.owned_sessions,
                "the session's task still runs after shutdown() returned"
            );
            drop(session);
            baseline.check(&server, 1).await;
        }
    });
}

/// The notification receiver ends at close (it stayed open until the
/// `Session` value was dropped): what was queued is still read first.
#[test]
fn the_notification_receiver_ends_at_close() {
    scenario(async {
        let (server, _caller) = start();
        let session = connect(&server, None).await;
        let mut notifications = session.notifications().unwrap();
        assert!(
            eventually(Duration::from_secs(5), || server
                .stats()
                .listen_streams_open
                == 1)
            .await
        );
        let note = serde_json::json!({"jsonrpc": "2.0", "method": "notifications/message",
                                      "params": {"level": "info", "data": "queued"}});
        assert_eq!(server.notify_listeners(&note), 1);
        // Delivered (queued), then close.
        let queued = tokio::time::timeout(Duration::from_secs(5), notifications.recv()).await;
        assert!(matches!(queued, Ok(Some(_))), "{queued:?}");
        session.close().await;
        let ended = tokio::time::timeout(Duration::from_secs(1), notifications.recv()).await;
        assert!(
            matches!(ended, Ok(None)),
            "the receiver is still open: {ended:?}"
        );
        drop(session);
    });
}
