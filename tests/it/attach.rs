//! Attached sessions (the caller's): no initialize, no initialized, never a
//! DELETE, never replaced; on failure (F17) left exactly as they were. Each
//! scenario runs over an owned and a borrowed client and ends with the
//! baseline check.

use std::time::Duration;

use crate::support::baseline::{Baseline, Caller};
use crate::support::*;
use mcp_scoped_http::wire::StreamableHttp;
use mcp_scoped_http::{ClientOwnership, Connector, SessionOwnership, SessionRelease};
use mcp_scoped_http::{ProtocolVersion, SessionId};
use serde_json::json;

/// The caller's own session, made with its own transport over its own
/// client: what an attaching program was handed.
struct Owned {
    wire: StreamableHttp,
    id: SessionId,
    version: ProtocolVersion,
}

impl Owned {
    async fn create(server: &TestServer, caller: &Caller) -> Owned {
        let wire = wire(caller.client.clone(), server);
        handshake(&wire).await;
        let id = wire.session_id().expect("the server issued an id");
        let version = wire.protocol_version().expect("negotiated");
        Owned { wire, id, version }
    }

    /// The caller can still use its session: a request of its own with
    /// its id succeeds.
    async fn still_works(&self, id: i64) {
        let exchange = self
            .wire
            .request(request(id, "tools/list", None))
            .await
            .expect("the caller's session still works");
        assert!(exchange.result["tools"].is_array());
    }
}

/// A caller with a session of its own and a warm client, and the baseline.
async fn start(server: &TestServer) -> (Caller, Owned, Baseline) {
    let caller = Caller::new();
    let owned = Owned::create(server, &caller).await;
    caller.own_request(server).await;
    let baseline = Baseline::take(Some(&caller));
    (caller, owned, baseline)
}

fn attach(server: &TestServer, caller: &Caller, owned: &Owned, borrowed: bool) -> Connector {
    let connector = Connector::new(server.url())
        .bearer("attach-token")
        .attach(SessionId::new(owned.id.expose()).unwrap(), owned.version);
    if borrowed {
        connector.client(caller.client.clone())
    } else {
        connector
    }
}

/// Our requests: neither the caller's handshake nor its own requests.
fn ours(server: &TestServer) -> Vec<RecordedRequest> {
    server
        .requests()
        .into_iter()
        .filter(|r| r.header("authorization") == Some("Bearer attach-token"))
        .collect()
}

fn rpc_error(code: i64, message: &str) -> FaultAction {
    let body =
        json!({"jsonrpc": "2.0", "id": "__ID__", "error": {"code": code, "message": message}})
            .to_string()
            .replace("\"__ID__\"", "{id}");
    FaultAction::raw(200, "application/json", &body)
}

/// Nothing of the caller's session was touched: never initialized again,
/// never DELETEd, still alive on the server.
fn untouched(server: &TestServer, context: &str) {
    assert_eq!(
        seen(server, "initialize").len(),
        1,
        "{context}: only the caller's"
    );
    assert_eq!(
        seen(server, "notifications/initialized").len(),
        1,
        "{context}: only the caller's"
    );
    assert_eq!(server.stats().sessions_created, 1, "{context}");
    assert_eq!(server.stats().live_sessions, 1, "{context}");
    assert!(
        seen_http(server, http::Method::DELETE).is_empty(),
        "{context}"
    );
}

#[test]
fn attach_discovers_with_the_callers_session_and_close_sends_no_delete() {
    scenario(async {
        for borrowed in [false, true] {
            let server = TestServer::start(
                ServerConfig::default()
                    .with_tools(5)
                    .with_page_size(2)
                    .with_listen(ListenMode::Open),
            );
            let (caller, owned, baseline) = start(&server).await;

            let session = attach(&server, &caller, &owned, borrowed)
                .connect()
                .await
                .unwrap();
            let info = session.info();
            assert_eq!(info.ownership, SessionOwnership::Attached);
            assert_eq!(
                info.client_ownership,
                if borrowed {
                    ClientOwnership::Borrowed
                } else {
                    ClientOwnership::Owned
                }
            );
            assert_eq!(info.protocol_version, owned.version);
            assert_eq!(session.session_id(), Some(owned.id.clone()));
            assert_eq!(session.catalog().tools.len(), 5);
            assert_eq!(session.catalog().prompts.len(), 2);

            // No handshake of ours; every request carried the caller's id and
            // revision; capabilities unknown, so every list was asked for.
            let requests = ours(&server);
            assert!(!requests.is_empty());
            for r in &requests {
                assert_eq!(r.method, http::Method::POST, "no GET: listen is off");
                assert_eq!(r.header("mcp-session-id"), Some(owned.id.expose()));
                assert_eq!(
                    r.header("mcp-protocol-version"),
                    Some(owned.version.as_str())
                );
            }
            // The lists go side by side: their order is the network's.
            let mut methods: Vec<_> = requests
                .iter()
                .filter_map(|r| r.rpc_method.clone())
                .collect();
            methods.sort();
            assert_eq!(
                methods,
                [
                    "prompts/list",
                    "resources/list",
                    "resources/templates/list",
                    "tools/list",
                    "tools/list",
                    "tools/list",
                ]
            );

            let result = session
                .call_tool("tool-001", json!({"text": "x"}))
                .await
                .unwrap();
            assert_eq!(result["structuredContent"]["tool"], "tool-001");

            let released = session.close().await;
            assert!(
                matches!(released.session, SessionRelease::NotOwned),
                "{released:?}"
            );
            assert_eq!(released.hooks_removed, 1);
            assert_eq!(released.owned_client_released, !borrowed);
            untouched(&server, &format!("borrowed={borrowed}"));
            owned.still_works(100).await;
            drop(session);
            baseline.check(&server, 0).await;
        }
    });
}

/// With `listen(true)` an attached session opens the GET stream on the
/// caller's session; close stops it and still sends no DELETE.
#[test]
fn an_attached_listener_stops_at_close_and_the_session_lives_on() {
    scenario(async {
        for borrowed in [false, true] {
            let server = TestServer::start(ServerConfig::default().with_listen(ListenMode::Open));
            let (caller, owned, baseline) = start(&server).await;

            let session = attach(&server, &caller, &owned, borrowed)
                .listen(true)
                .connect()
                .await
                .unwrap();
            assert!(
                eventually(Duration::from_secs(5), || server
                    .stats()
                    .listen_streams_open
                    == 1)
                .await
            );
            let get = seen_http(&server, http::Method::GET).pop().unwrap();
            assert_eq!(get.header("mcp-session-id"), Some(owned.id.expose()));

            let released = session.close().await;
            assert_eq!(released.tasks_stopped, 1);
            assert!(matches!(released.session, SessionRelease::NotOwned));
            assert!(
                eventually(Duration::from_secs(5), || server
                    .stats()
                    .listen_streams_open
                    == 0)
                .await
            );
            untouched(&server, &format!("borrowed={borrowed}"));
            owned.still_works(100).await;
            drop(session);
            baseline.check(&server, 0).await;
        }
    });
}

/// Dropping an attached session without close: hooks and tasks go, and no
/// DELETE is ever handed to the reaper.
#[test]
fn dropping_an_attached_session_sends_no_delete() {
    scenario(async {
        for borrowed in [false, true] {
            let server = TestServer::start(ServerConfig::default().with_listen(ListenMode::Open));
            let (caller, owned, baseline) = start(&server).await;

            let session = attach(&server, &caller, &owned, borrowed)
                .listen(true)
                .connect()
                .await
                .unwrap();
            drop(session);
            assert_eq!(
                mcp_scoped_http::ledger().pending_reaps,
                0,
                "nothing to reap"
            );
            mcp_scoped_http::shutdown().await;
            assert_eq!(server.stats().deletes, 0);
            untouched(&server, &format!("borrowed={borrowed}"));
            owned.still_works(100).await;
            baseline.check(&server, 0).await;
        }
    });
}

/// F17: discovery fails on an attached session: the caller gets the cause,
/// its session is neither DELETEd nor re-initialized, and its id still works.
#[test]
fn f17_failed_discovery_leaves_the_attached_session_untouched() {
    scenario(async {
        let cases: Vec<(&str, Fault)> = vec![
            (
                "500 on tools/list",
                Fault::on_rpc("tools/list", FaultAction::status(500)).times(1),
            ),
            (
                "JSON-RPC error on tools/list page 2",
                Fault::on_rpc("tools/list", rpc_error(-32603, "boom"))
                    .page(2)
                    .times(1),
            ),
            (
                "method not found on tools/list page 2",
                Fault::on_rpc("tools/list", rpc_error(-32601, "gone"))
                    .page(2)
                    .times(1),
            ),
            (
                "connection closed on prompts/list",
                Fault::on_rpc("prompts/list", FaultAction::CloseConnection).times(1),
            ),
            (
                "401 on resources/list",
                Fault::on_rpc(
                    "resources/list",
                    FaultAction::unauthorized("Bearer realm=\"x\""),
                )
                .times(1),
            ),
        ];
        for (what, fault) in cases {
            for borrowed in [false, true] {
                let context = format!("{what}, borrowed={borrowed}");
                let server = TestServer::start(
                    ServerConfig::default()
                        .with_tools(4)
                        .with_page_size(2)
                        .with_listen(ListenMode::Open),
                );
                let (caller, owned, baseline) = start(&server).await;
                server.push_fault(fault.clone());

                let error = attach(&server, &caller, &owned, borrowed)
                    .listen(true)
                    .connect()
                    .await
                    .unwrap_err();
                match what {
                    w if w.starts_with("500") => {
                        assert_eq!(
                            error.status(),
                            Some(http::StatusCode::INTERNAL_SERVER_ERROR)
                        )
                    }
                    w if w.starts_with("JSON-RPC") => assert_eq!(error.rpc_code(), Some(-32603)),
                    w if w.starts_with("method not found") => {
                        // Past page 1, "not found" is no longer "not offered".
                        assert_eq!(error.rpc_code(), Some(-32601))
                    }
                    w if w.starts_with("connection") => assert!(error.is_transport(), "{error:?}"),
                    _ => {
                        assert_eq!(error.status(), Some(http::StatusCode::UNAUTHORIZED));
                        assert_eq!(error.www_authenticate(), Some("Bearer realm=\"x\""));
                    }
                }
                assert!(error.cleanup_errors().is_empty(), "{context}: {error:?}");
                // Our listener on the caller's session is gone too.
                assert!(
                    eventually(Duration::from_secs(5), || server
                        .stats()
                        .listen_streams_open
                        == 0)
                    .await,
                    "{context}"
                );
                untouched(&server, &context);
                owned.still_works(100).await;
                baseline.check(&server, 0).await;
            }
        }
    });
}

/// Capabilities of an attached session are unknown, so every list is asked
/// for, and "method not found" on page 1 means "not offered".
#[test]
fn an_attached_session_treats_method_not_found_on_page_one_as_not_offered() {
    scenario(async {
        for borrowed in [false, true] {
            let server = TestServer::start(ServerConfig::default().with_tools(3));
            let (caller, owned, baseline) = start(&server).await;
            server.push_fault(Fault::on_rpc(
                "prompts/list",
                rpc_error(-32601, "Method not found"),
            ));
            server.push_fault(Fault::on_rpc(
                "resources/templates/list",
                rpc_error(-32601, "Method not found"),
            ));

            let session = attach(&server, &caller, &owned, borrowed)
                .connect()
                .await
                .unwrap();
            assert_eq!(session.catalog().tools.len(), 3);
            assert!(session.catalog().prompts.is_empty());
            assert_eq!(session.catalog().resources.len(), 2);
            assert!(session.catalog().resource_templates.is_empty());
            assert_eq!(seen(&server, "prompts/list").len(), 1);
            let released = session.close().await;
            assert!(matches!(released.session, SessionRelease::NotOwned));
            untouched(&server, &format!("borrowed={borrowed}"));
            owned.still_works(100).await;
            drop(session);
            baseline.check(&server, 0).await;
        }
    });
}

/// An attached session the server has already ended: connect reports the
/// expiry and does not "repair" it with an initialize of its own.
#[test]
fn an_expired_attached_session_is_reported_not_replaced() {
    scenario(async {
        for borrowed in [false, true] {
            let server = TestServer::start(ServerConfig::default());
            let (caller, owned, baseline) = start(&server).await;
            server.expire_sessions();

            let error = attach(&server, &caller, &owned, borrowed)
                .connect()
                .await
                .unwrap_err();
            assert!(error.is_session_expired(), "{error:?}");
            assert_eq!(error.status(), Some(http::StatusCode::NOT_FOUND));
            assert_eq!(seen(&server, "initialize").len(), 1, "only the caller's");
            assert_eq!(server.stats().sessions_created, 1);
            // It stopped at the 404s: the lists (side by side, so each
            // kind may have gone out once) and nothing after them.
            let methods: Vec<_> = ours(&server)
                .into_iter()
                .map(|r| (r.method, r.rpc_method))
                .collect();
            let lists = [
                "tools/list",
                "prompts/list",
                "resources/list",
                "resources/templates/list",
            ];
            assert!(
                (1..=lists.len()).contains(&methods.len())
                    && methods.iter().all(|(method, rpc)| {
                        method == http::Method::POST
                            && rpc.as_deref().is_some_and(|rpc| lists.contains(&rpc))
                    }),
                "borrowed={borrowed}: {methods:?}"
            );
            baseline.check(&server, 0).await;
        }
    });
}

/// A 404 to one request of an attached session (a path the server does not
/// serve today, a proxy's hiccup): reported to that request; the session
/// is not taken for lost, never re-initialized, and the next request goes
/// out on it as before.
#[test]
fn a_404_on_an_attached_session_fails_that_request_only() {
    scenario(async {
        for borrowed in [false, true] {
            let server = TestServer::start(ServerConfig::default());
            let (caller, owned, baseline) = start(&server).await;
            let session = attach(&server, &caller, &owned, borrowed)
                .connect()
                .await
                .expect("attach");
            server.push_fault(
                Fault::on_rpc(
                    "tools/call",
                    FaultAction::status_with_rpc_error(404, -32001, "gone"),
                )
                .times(1),
            );
            let error = session
                .call_tool("tool-000", json!({}))
                .await
                .expect_err("answered 404");
            assert!(error.is_session_expired(), "{error}");
            session
                .call_tool("tool-000", json!({}))
                .await
                .expect("the attached session is used as before");
            assert_eq!(seen(&server, "initialize").len(), 1, "only the caller's");
            assert_eq!(session.session_id().as_ref(), Some(&owned.id));
            let calls = seen(&server, "tools/call");
            assert_eq!(calls.len(), 2);
            assert!(
                calls
                    .iter()
                    .all(|c| c.header("mcp-session-id") == Some(owned.id.expose()))
            );
            let released = session.close().await;
            assert!(
                matches!(released.session, SessionRelease::NotOwned),
                "{released:?}"
            );
            drop(session);
            owned.still_works(90).await;
            baseline.check(&server, 0).await;
        }
    });
}
