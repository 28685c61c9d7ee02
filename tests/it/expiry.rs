//! Session expiry (F19): a 404 to a request that carried our session id.

use crate::support;

use crate::support::hostile_http;

use std::sync::Arc;
use std::time::Duration;

use crate::support::*;
use http::Method;
use mcp_scoped_http::Connector;

#[test]
fn an_owned_session_reinitializes_once_for_many_concurrent_404s() {
    scenario(async {
        for borrowed in [false, true] {
            let (server, caller, baseline) = support::baseline::scene(TestServer::start(
                ServerConfig::default().with_listen(ListenMode::Open),
            ))
            .await;
            let mut connector = Connector::new(server.url()).bearer("expiry");
            if borrowed {
                connector = connector.client(caller.client.clone());
            }
            let session = Arc::new(connector.connect().await.unwrap());
            let old = session.session_id().unwrap();
            server.expire_sessions();

            let calls: Vec<_> = (0..8)
                .map(|i| {
                    let session = session.clone();
                    tokio::spawn(async move {
                        session
                            .call_tool("tool-000", serde_json::json!({ "i": i }))
                            .await
                    })
                })
                .collect();
            for call in calls {
                let result = call.await.unwrap().expect("retried after re-initialize");
                assert_eq!(result["structuredContent"]["tool"], "tool-000");
            }
            assert_eq!(
                seen(&server, "initialize").len(),
                2,
                "one re-initialize, single flight"
            );
            let new = session.session_id().unwrap();
            assert_ne!(new, old);
            // The old id is never sent again: each call carried it at most
            // once (its first try, which may reach the server after the
            // re-initialize over another connection), and every retry
            // carried the new one.
            let calls = seen(&server, "tools/call");
            let with = |id: &mcp_scoped_http::SessionId| {
                calls
                    .iter()
                    .filter(|r| r.header("mcp-session-id") == Some(id.expose()))
                    .count()
            };
            assert!(with(&old) <= 8, "a retry reused the old id");
            assert_eq!(with(&new), 8, "every call succeeded on the new session");
            assert_eq!(with(&old) + with(&new), calls.len());
            let reinit = seen(&server, "initialize").pop().unwrap();
            assert!(reinit.header("mcp-session-id").is_none());
            // One listener on the new session: the old one's reconnect and
            // the re-initialize's restart never both run.
            let one_stream = || server.stats().listen_streams_open == 1;
            assert!(eventually(Duration::from_secs(5), one_stream).await);
            // Absence can only be watched for: a bounded window longer than
            // the listener's reconnect backoff (100 ms).
            tokio::time::sleep(Duration::from_millis(300)).await;
            assert_eq!(
                server.stats().listen_streams_open,
                1,
                "a second GET stream appeared"
            );
            let released = session.close().await;
            assert!(matches!(
                released.session,
                mcp_scoped_http::SessionRelease::Deleted(_)
            ));
            let delete = seen_http(&server, Method::DELETE).pop().unwrap();
            assert_eq!(delete.header("mcp-session-id"), Some(new.expose()));
            drop(session);
            baseline.check(&server, 1).await;
        }
    });
}

#[test]
fn a_second_404_right_after_reinitializing_is_an_error_not_a_loop() {
    scenario(async {
        let (server, caller, baseline) =
            support::baseline::scene(TestServer::start(ServerConfig::default())).await;
        let session = Connector::new(server.url())
            .client(caller.client.clone())
            .connect()
            .await
            .unwrap();
        server.push_fault(Fault::on_rpc("tools/call", FaultAction::status(404)));
        let error = session
            .call_tool("tool-000", serde_json::json!({}))
            .await
            .unwrap_err();
        assert!(error.is_session_expired(), "{error}");
        assert_eq!(seen(&server, "initialize").len(), 2);
        assert_eq!(seen(&server, "tools/call").len(), 2, "one retry, no loop");
        // Both sessions answered 404: the server said it ended them, so
        // neither is DELETEd (this server only pretended, for the second).
        let released = session.close().await;
        assert!(
            matches!(released.session, mcp_scoped_http::SessionRelease::Expired),
            "{released:?}"
        );
        drop(session);
        baseline.check(&server, 0).await;
    });
}

#[test]
fn an_attached_session_reports_expiry_and_is_not_replaced() {
    scenario(async {
        let (server, caller, baseline) =
            support::baseline::scene(TestServer::start(ServerConfig::default())).await;
        // The caller's own session, which it will lend by id.
        let owner = Connector::new(server.url())
            .listen(false)
            .connect()
            .await
            .unwrap();
        let session = Connector::new(server.url())
            .client(caller.client.clone())
            .attach(owner.session_id().unwrap(), owner.protocol_version())
            .connect()
            .await
            .unwrap();
        server.expire_sessions();
        let error = session
            .call_tool("tool-000", serde_json::json!({}))
            .await
            .unwrap_err();
        assert!(error.is_session_expired(), "{error}");
        assert_eq!(seen(&server, "initialize").len(), 1, "never re-initialized");
        session.close().await;
        drop(session);
        assert_eq!(server.stats().deletes, 0);
        drop(owner);
        mcp_scoped_http::shutdown().await;
        baseline.check(&server, 1).await;
    });
}

/// The session that replaces an expired one is answered with another
/// revision: the session follows it (its header, `protocol_version`).
/// Then a replacement whose revision we do not speak: that request fails
/// with the cause, the session the server created for it is DELETEd at
/// once (not only at close), and the next request opens one that works.
#[test]
fn a_renewal_answered_with_another_revision_or_none_we_speak() {
    scenario(async {
        for borrowed in [false, true] {
            let (server, caller, baseline) =
                support::baseline::scene(TestServer::start(ServerConfig::default())).await;
            let mut connector = Connector::new(server.url()).bearer("expiry").listen(false);
            if borrowed {
                connector = connector.client(caller.client.clone());
            }
            let session = connector.connect().await.unwrap();
            assert_eq!(session.protocol_version().as_str(), "2025-11-25");

            server.push_fault(
                Fault::on_rpc(
                    "initialize",
                    FaultAction::ProtocolVersion("2025-06-18".into()),
                )
                .times(1),
            );
            server.expire_sessions();
            session
                .call_tool("tool-000", serde_json::json!({}))
                .await
                .expect("retried on the new session");
            assert_eq!(session.protocol_version().as_str(), "2025-06-18");
            let call = seen(&server, "tools/call").pop().unwrap();
            assert_eq!(call.header("mcp-protocol-version"), Some("2025-06-18"));

            server.push_fault(
                Fault::on_rpc(
                    "initialize",
                    FaultAction::ProtocolVersion("1999-01-01".into()),
                )
                .times(1),
            );
            server.expire_sessions();
            let error = session
                .call_tool("tool-000", serde_json::json!({}))
                .await
                .expect_err("no revision we speak");
            assert!(
                error.to_string().contains("unsupported protocol version"),
                "{error}"
            );
            // The session minted for the failed renewal is ended now.
            let failed = server.session_log()[2].clone();
            assert!(
                eventually(Duration::from_secs(5), || server.session_log()[2].deletes
                    == 1)
                .await,
                "the failed renewal's session was not DELETEd before close: {failed:?}"
            );
            session
                .call_tool("tool-000", serde_json::json!({}))
                .await
                .expect("the next request opens a session that works");
            assert_eq!(seen(&server, "initialize").len(), 4);
            session.close().await;
            drop(session);
            mcp_scoped_http::shutdown().await;
            let log = assert_each_session_deleted_once(&server, "revisions").await;
            baseline.check(&server, deletes_owed(&log)).await;
        }
    });
}

/// A server request (`ping`) on the `initialize` answer of the session
/// that replaces an expired one, which the server holds until answered:
/// answered at once on that session, and the request goes through.
#[test]
fn a_server_request_on_a_renewals_initialize_answer_is_answered_on_that_session() {
    scenario(async {
        for borrowed in [false, true] {
            let (server, caller, baseline) =
                support::baseline::scene(TestServer::start(ServerConfig::default())).await;
            let mut connector = Connector::new(server.url()).bearer("expiry");
            if borrowed {
                connector = connector.client(caller.client.clone());
            }
            let session = connector.connect().await.unwrap();
            server.push_fault(
                Fault::on_rpc(
                    "initialize",
                    FaultAction::ServerRequest {
                        method: "ping".into(),
                        params: serde_json::json!({}),
                    },
                )
                .times(1),
            );
            server.expire_sessions();
            let started = std::time::Instant::now();
            session
                .call_tool("tool-000", serde_json::json!({}))
                .await
                .expect("retried on the new session");
            assert!(started.elapsed() < Duration::from_secs(8));
            assert_eq!(server.client_answers().len(), 1);
            let answer = seen_http(&server, Method::POST)
                .into_iter()
                .find(|r| r.rpc_method.is_none())
                .expect("the ping's answer");
            assert_eq!(
                answer.header("mcp-session-id"),
                Some(session.session_id().unwrap().expose())
            );
            session.close().await;
            drop(session);
            mcp_scoped_http::shutdown().await;
            let log = assert_each_session_deleted_once(&server, "ping").await;
            baseline.check(&server, deletes_owed(&log)).await;
        }
    });
}

/// A long session whose server expires it again and again: what the
/// session keeps of its past sessions stays bounded (the report of the
/// earlier ones, the sessions counted in the ledger), every one of them
/// is settled, and only the one in use is DELETEd at close.
#[test]
fn many_renewals_keep_a_bounded_record_of_past_sessions() {
    const RENEWALS: usize = 40;
    scenario(async {
        for borrowed in [false, true] {
            let (server, caller, baseline) =
                support::baseline::scene(TestServer::start(ServerConfig::default())).await;
            let mut connector = Connector::new(server.url()).bearer("expiry").listen(false);
            if borrowed {
                connector = connector.client(caller.client.clone());
            }
            let session = connector.connect().await.unwrap();
            let before = mcp_scoped_http::ledger();
            for round in 0..RENEWALS {
                server.expire_sessions();
                session
                    .call_tool("tool-000", serde_json::json!({"round": round}))
                    .await
                    .expect("retried on the new session");
                // One live server session, however many came before.
                assert!(
                    eventually(Duration::from_secs(5), || {
                        mcp_scoped_http::ledger().owned_sessions == before.owned_sessions
                    })
                    .await,
                    "round {round}: {:?}, before {before:?}",
                    mcp_scoped_http::ledger()
                );
            }
            assert_eq!(seen(&server, "initialize").len(), RENEWALS + 1);
            let released = session.close().await;
            assert!(
                matches!(
                    released.session,
                    mcp_scoped_http::SessionRelease::Deleted(_)
                ),
                "{released:?}"
            );
            assert!(
                released.earlier_sessions.len() <= 8,
                "the report of past sessions grew with them: {}",
                released.earlier_sessions.len()
            );
            assert!(
                released
                    .earlier_sessions
                    .iter()
                    .all(|s| matches!(s, mcp_scoped_http::SessionRelease::Expired)),
                "{released:?}"
            );
            drop(session);
            mcp_scoped_http::shutdown().await;
            let log = assert_each_session_deleted_once(&server, "many renewals").await;
            assert_eq!(log.len(), RENEWALS + 1);
            baseline.check(&server, 1).await;
        }
    });
}

/// `Session::info` describes the server session in use: after a renewal,
/// the new session's revision (here another one the server answered) and
/// capabilities, not connect's.
#[test]
fn info_describes_the_session_in_use_after_a_renewal() {
    scenario(async {
        let server = TestServer::start(ServerConfig::default());
        let session = Connector::new(server.url())
            .listen(false)
            .connect()
            .await
            .unwrap();
        assert_eq!(session.info().protocol_version.as_str(), "2025-11-25");
        server.push_fault(
            Fault::on_rpc(
                "initialize",
                FaultAction::ProtocolVersion("2025-06-18".into()),
            )
            .times(1),
        );
        server.expire_sessions();
        session
            .call_tool("tool-000", serde_json::json!({}))
            .await
            .expect("retried on the new session");
        assert_eq!(session.protocol_version().as_str(), "2025-06-18");
        let info = session.info();
        assert_eq!(info.protocol_version.as_str(), "2025-06-18", "{info:?}");
        assert!(info.session_id_issued);
        assert_eq!(info.server_info["name"], "mcp-scoped-http-testkit");
        assert!(info.capabilities.is_object(), "{info:?}");
        session.close().await;
    });
}

/// A 2025-11-25 answer to `initialize` on the scripted server, minting
/// session `s-N` (N counted in `state.count`).
fn minted_session(
    seen: &hostile_http::Seen,
    state: &hostile_http::State,
    capabilities: serde_json::Value,
) -> http::Response<hostile_http::Out> {
    let n = state
        .count
        .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let mut response = hostile_http::json_response(
        200,
        &hostile_http::result(
            &seen.id(),
            serde_json::json!({"protocolVersion": "2025-11-25",
                               "capabilities": capabilities,
                               "serverInfo": {"name": "s25", "version": "1"}}),
        ),
    );
    response
        .headers_mut()
        .insert("mcp-session-id", format!("s-{n}").parse().unwrap());
    response
}

fn has_id(seen: &hostile_http::Seen) -> bool {
    seen.body.as_ref().is_some_and(|b| b.get("id").is_some())
}

/// A server whose sessions all expire at once (404 to everything but
/// `initialize`: a non-sticky load balancer, a broken session store). A
/// request renews the session once and fails, as documented; the
/// re-listing that follows a renewal runs in the background and must not
/// renew again (before the fix it did, and each renewal re-listed again:
/// ~1,600 `initialize` in 2 s). And a caller that keeps asking gets a
/// bounded number of renewals, then a clear error naming the repeated
/// expiry.
#[test]
fn sessions_that_always_expire_do_not_renew_forever_in_the_background() {
    use hostile_http::{Server, empty, json_response, result};
    use std::sync::atomic::Ordering;
    scenario(async {
        let server = Server::start(|seen, state| async move {
            let expired = state.mode() == 1;
            match (&seen.method, seen.rpc()) {
                (&Method::POST, Some("initialize")) => {
                    minted_session(&seen, &state, serde_json::json!({"tools": {}}))
                }
                (&Method::POST, Some("notifications/initialized")) => empty(202),
                (&Method::POST, _) if expired => empty(404),
                (&Method::POST, Some("tools/list")) => {
                    json_response(200, &result(&seen.id(), serde_json::json!({"tools": []})))
                }
                (&Method::POST, _) if has_id(&seen) => {
                    json_response(200, &result(&seen.id(), serde_json::json!({})))
                }
                (&Method::DELETE, _) => empty(200),
                _ => empty(405),
            }
        });
        let session = Connector::new(server.url("/mcp"))
            .protocol_version(mcp_scoped_http::ProtocolVersion::V2025_11_25)
            .listen(false)
            .request_timeout(Duration::from_secs(5))
            .connect()
            .await
            .expect("connects");
        server.state.mode.store(1, Ordering::SeqCst);
        let error = session.request("ping", None).await.unwrap_err();
        assert!(error.is_session_expired(), "{error}");
        let after_call = server.state.rpcs("initialize");
        tokio::time::sleep(Duration::from_secs(2)).await;
        let background = server.state.rpcs("initialize") - after_call;
        assert!(
            background <= 1,
            "{background} more initialize requests in 2 s after the failed call (ledger {:?})",
            session.ledger()
        );
        // The caller goes on asking: each request renews at most once, and
        // after a few unproven renewals in a row the session is given up.
        let mut last = error;
        for _ in 0..6 {
            last = session.request("ping", None).await.unwrap_err();
        }
        let renewals = server.state.rpcs("initialize") - after_call;
        let released = session.close().await;
        assert!(renewals <= 3, "{renewals} renewals for 6 more requests");
        // Every session opened on the way is accounted for: the server
        // expired it (its 404 settled it), or close DELETEd it.
        let sessions: Vec<_> = std::iter::once(&released.session)
            .chain(&released.earlier_sessions)
            .collect();
        assert!(
            sessions.iter().all(|s| matches!(
                s,
                mcp_scoped_http::SessionRelease::Expired
                    | mcp_scoped_http::SessionRelease::Deleted(_)
            )),
            "{released:?}"
        );
        assert_eq!(
            sessions.len(),
            server.state.rpcs("initialize"),
            "one record per session: {released:?}"
        );
        assert!(last.is_session_expired(), "{last}");
        assert!(last.to_string().contains("in a row"), "{last}");
    });
}

/// With `no_request_timeout` (per-request timeouts only, as its docs
/// suggest), a renewal whose `initialize` the server never answers must
/// not leave the session `Renewing` for good: a renewal is a connect of
/// its own, bounded by the connect timeout (set short here, 300 ms; 60 s
/// by default). Before the fix it waited for the 60 s exchange bound, so
/// every later request (500 ms each) failed although the server answered
/// again; now a later request starts a fresh renewal and succeeds.
#[test]
fn one_unanswered_renewal_does_not_wedge_the_session_for_good() {
    use hostile_http::{Server, empty, json_response, result};
    use mcp_scoped_http::RequestOptions;
    use std::sync::atomic::Ordering;
    scenario(async {
        let server = Server::start(|seen, state| async move {
            match (&seen.method, seen.rpc()) {
                (&Method::POST, Some("initialize")) => {
                    if state.mode() == 1 {
                        // Lost by a proxy: never answered.
                        state.mode.store(2, Ordering::SeqCst);
                        std::future::pending::<()>().await;
                    }
                    minted_session(&seen, &state, serde_json::json!({}))
                }
                (&Method::POST, Some("notifications/initialized")) => empty(202),
                (&Method::POST, _)
                    if state.mode() == 1 && seen.header("mcp-session-id") == Some("s-0") =>
                {
                    empty(404)
                }
                (&Method::POST, _) if has_id(&seen) => {
                    json_response(200, &result(&seen.id(), serde_json::json!({})))
                }
                (&Method::POST, _) => empty(202),
                (&Method::DELETE, _) => empty(200),
                _ => empty(405),
            }
        });
        let session = Connector::new(server.url("/mcp"))
            .protocol_version(mcp_scoped_http::ProtocolVersion::V2025_11_25)
            .listen(false)
            .no_request_timeout()
            .connect_timeout(Duration::from_millis(300))
            .connect()
            .await
            .expect("connects");
        let quick = || RequestOptions::default().timeout(Duration::from_millis(500));
        server.state.mode.store(1, Ordering::SeqCst);
        let first = session.request_with("ping", None, quick()).await;
        assert!(first.is_err(), "the session expired and its renewal hangs");
        // The server answers again (mode 2): a new initialize works.
        let mut outcomes = Vec::new();
        for _ in 0..3 {
            outcomes.push(
                session
                    .request_with("ping", None, quick())
                    .await
                    .map_err(|e| e.to_string()),
            );
        }
        let initializes = server.state.rpcs("initialize");
        session.close().await;
        assert!(
            outcomes.iter().any(Result::is_ok),
            "every later request fails ({initializes} initialize sent): {outcomes:?}"
        );
    });
}
