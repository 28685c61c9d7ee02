//! The window where the server has created a session but the head of the
//! answer carrying its id has not arrived (F02, F34): a caller's deadline
//! that drops the future there must still get that session DELETEd, once.
//!
//! [`FaultAction::HoldHead`] opens the window wide: the server mints the
//! session when `initialize` arrives and sends the head late. (With
//! `Delay`, the session is minted just before the head goes out, and the
//! window is too narrow for any test to land in.)

use crate::support;

use std::time::Duration;

use crate::support::baseline::Caller;
use crate::support::*;
use mcp_scoped_http::Connector;
use serde_json::json;

/// How long the server holds the head of `initialize`.
const HOLD: Duration = Duration::from_millis(400);
/// The caller's deadline: passes while the head is held.
const DEADLINE: Duration = Duration::from_millis(100);

fn connector(server: &TestServer, caller: &Caller, borrowed: bool) -> Connector {
    let connector = Connector::new(server.url()).bearer("window");
    if borrowed {
        connector.client(caller.client.clone())
    } else {
        connector
    }
}

#[test]
fn a_connect_dropped_by_a_deadline_after_the_server_created_the_session_still_deletes_it() {
    scenario(async {
        for borrowed in [false, true] {
            let what = if borrowed { "borrowed" } else { "owned" };
            let (server, caller, baseline) = support::baseline::scene(TestServer::start(
                ServerConfig::default()
                    .with_fault(Fault::on_rpc("initialize", FaultAction::HoldHead(HOLD))),
            ))
            .await;
            let cut =
                tokio::time::timeout(DEADLINE, connector(&server, &caller, borrowed).connect())
                    .await;
            assert!(cut.is_err(), "{what}: the caller's deadline won");
            // Inside the window: created, its id not yet told.
            assert_eq!(server.stats().sessions_created, 1, "{what}");
            mcp_scoped_http::shutdown().await;
            let log = assert_each_session_deleted_once(&server, what).await;
            assert_eq!(log.len(), 1);
            for delete in seen_http(&server, http::Method::DELETE) {
                assert_eq!(delete.header("authorization"), Some("Bearer window"));
            }
            baseline.check(&server, 1).await;
        }
    });
}

#[test]
fn a_reinitialize_cut_by_a_deadline_after_the_server_created_the_session_still_deletes_it() {
    scenario(async {
        for borrowed in [false, true] {
            let what = if borrowed { "borrowed" } else { "owned" };
            let (server, caller, baseline) =
                support::baseline::scene(TestServer::start(ServerConfig::default())).await;
            let session = connector(&server, &caller, borrowed)
                .listen(false)
                .connect()
                .await
                .expect("connect");
            server.push_fault(Fault::on_rpc("initialize", FaultAction::HoldHead(HOLD)).times(1));
            server.expire_sessions();
            // The 404 starts a re-initialize; the caller's deadline drops the
            // request while the server holds the head; the session goes at
            // once after.
            let cut =
                tokio::time::timeout(DEADLINE, session.call_tool("tool-000", json!({}))).await;
            assert!(cut.is_err(), "{what}: the caller's deadline won");
            assert_eq!(
                server.stats().sessions_created,
                2,
                "{what}: inside the window"
            );
            drop(session);
            mcp_scoped_http::shutdown().await;
            let log = assert_each_session_deleted_once(&server, what).await;
            assert_eq!(log.len(), 2);
            baseline.check(&server, deletes_owed(&log)).await;
        }
    });
}

/// The head is held past the DELETE timeout: the session the server
/// created can never be named. It is not silently forgotten: the release
/// reports it, and it is counted with the DELETEs no one could send.
#[test]
fn a_head_held_past_the_delete_timeout_is_counted_as_abandoned() {
    scenario(async {
        for borrowed in [false, true] {
            let what = if borrowed { "borrowed" } else { "owned" };
            let (server, caller, baseline) = support::baseline::scene(TestServer::start(
                ServerConfig::default().with_fault(
                    Fault::on_rpc("initialize", FaultAction::HoldHead(Duration::from_secs(3)))
                        .times(1),
                ),
            ))
            .await;
            let abandoned = mcp_scoped_http::abandoned_deletes();
            let error = connector(&server, &caller, borrowed)
                .delete_timeout(Duration::from_millis(300))
                .connect_timeout(DEADLINE)
                .connect()
                .await
                .expect_err("the connect timeout passes while the head is held");
            assert!(error.is_timeout(), "{what}: {error}");
            let cleanup = error.cleanup_errors();
            assert_eq!(cleanup.len(), 1, "{what}: the release reports it: {error}");
            assert!(cleanup[0].is_timeout(), "{what}: {}", cleanup[0]);
            assert_eq!(
                mcp_scoped_http::abandoned_deletes(),
                abandoned + 1,
                "{what}: counted as abandoned"
            );
            assert_eq!(server.stats().sessions_created, 1, "{what}");
            assert_eq!(
                server.stats().deletes,
                0,
                "{what}: never named, never DELETEd"
            );
            // The server's own session outlives the test's interest in it.
            server.expire_sessions();
            baseline.check(&server, 0).await;
        }
    });
}
