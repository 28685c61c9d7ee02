//! The connect lifecycle end to end, over an owned and a borrowed client,
//! ending with close (and, separately, with drop).

use crate::support;

use crate::support::baseline::{Baseline, Caller};
use crate::support::*;
use mcp_scoped_http::{Connector, SessionOwnership, SessionRelease};

fn catalog_server() -> TestServer {
    TestServer::start(
        ServerConfig::default()
            .with_tools(7)
            .with_page_size(3)
            .with_prompts(2)
            .with_resources(2)
            .with_listen(ListenMode::Open),
    )
}

#[test]
fn connect_discovers_everything_and_close_releases_everything() {
    scenario(async {
        for borrowed in [false, true] {
            let (server, caller, baseline) = support::baseline::scene(catalog_server()).await;

            let mut connector = Connector::new(server.url()).bearer("secret-token");
            if borrowed {
                connector = connector.client(caller.client.clone());
            }
            let session = connector.connect().await.unwrap();
            assert_eq!(session.info().ownership, SessionOwnership::Owned);
            assert!(session.info().session_id_issued);
            assert_eq!(session.catalog().tools.len(), 7);
            assert_eq!(session.catalog().prompts.len(), 2);
            assert_eq!(session.catalog().resources.len(), 2);
            assert_eq!(session.catalog().resource_templates.len(), 1);
            assert_eq!(seen(&server, "tools/list").len(), 3);
            assert!(
                eventually(std::time::Duration::from_secs(5), || server
                    .stats()
                    .listen_streams_open
                    == 1)
                .await
            );
            if borrowed {
                assert_eq!(
                    caller.client.hooks().len(),
                    1,
                    "our hook is on the shared client"
                );
            }

            let result = session
                .call_tool("tool-001", serde_json::json!({"text": "x"}))
                .await
                .unwrap();
            assert_eq!(result["structuredContent"]["tool"], "tool-001");

            let released = session.close().await;
            assert_eq!(released.tasks_stopped, 1);
            assert!(
                matches!(released.session, SessionRelease::Deleted(s) if s == 200),
                "{released:?}"
            );
            assert_eq!(released.hooks_removed, 1);
            assert_eq!(released.owned_client_released, !borrowed);
            assert!(session.close().await.already_closed);
            assert!(session.request("ping", None).await.unwrap_err().is_closed());

            // Every request of ours, the DELETE included, was authenticated.
            for r in server
                .requests()
                .iter()
                .filter(|r| r.header("x-caller").is_none())
            {
                assert_eq!(
                    r.header("authorization"),
                    Some("Bearer secret-token"),
                    "{} {:?}",
                    r.method,
                    r.rpc_method
                );
            }
            drop(session);
            baseline.check(&server, 1).await;
        }
    });
}

#[test]
fn a_dropped_session_is_deleted_by_the_reaper() {
    scenario(async {
        for borrowed in [false, true] {
            let (server, caller, baseline) = support::baseline::scene(catalog_server()).await;
            let mut connector = Connector::new(server.url()).bearer("secret-token");
            if borrowed {
                connector = connector.client(caller.client.clone());
            }
            let session = connector.connect().await.unwrap();
            drop(session);
            mcp_scoped_http::shutdown().await;
            let delete = seen_http(&server, http::Method::DELETE)
                .pop()
                .expect("the reaper sent the DELETE");
            assert_eq!(delete.header("authorization"), Some("Bearer secret-token"));
            assert!(delete.header("mcp-session-id").is_some());
            baseline.check(&server, 1).await;
        }
    });
}

#[test]
fn connect_errors_name_the_step_they_came_from() {
    use mcp_scoped_http::ConnectPhase;
    scenario(async {
        let cases = [
            ("initialize", ConnectPhase::Initialize),
            ("notifications/initialized", ConnectPhase::Initialized),
            ("tools/list", ConnectPhase::Discovery),
        ];
        for (method, step) in cases {
            let server = catalog_server();
            server.push_fault(Fault::on_rpc(method, FaultAction::status(500)));
            let error = Connector::new(server.url()).connect().await.unwrap_err();
            assert_eq!(error.connect_phase(), Some(step), "{method}: {error}");
            assert_eq!(
                error.status(),
                Some(http::StatusCode::INTERNAL_SERVER_ERROR)
            );
        }
        let refused = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            format!("http://{}/mcp", listener.local_addr().unwrap())
        };
        let error = Connector::new(refused).connect().await.unwrap_err();
        assert_eq!(
            error.connect_phase(),
            Some(ConnectPhase::Connect),
            "{error}"
        );
    });
}

#[test]
fn a_connect_timeout_names_its_step_and_unwinds_before_returning() {
    use mcp_scoped_http::ConnectPhase;
    scenario(async {
        for borrowed in [false, true] {
            let server = catalog_server();
            server.push_fault(Fault::on_rpc("tools/list", FaultAction::Hang));
            let caller = Caller::new();
            caller.own_request(&server).await;
            let baseline = Baseline::take(Some(&caller));
            let mut connector =
                Connector::new(server.url()).connect_timeout(std::time::Duration::from_millis(200));
            if borrowed {
                connector = connector.client(caller.client.clone());
            }
            let error = connector.connect().await.unwrap_err();
            assert!(error.is_timeout(), "{error}");
            assert_eq!(error.connect_phase(), Some(ConnectPhase::Discovery));
            // DELETEd inline, before connect returned: no reaper needed.
            assert_eq!(server.stats().deletes, 1);
            assert_eq!(server.stats().live_sessions, 0);
            baseline.check(&server, 1).await;
        }
    });
}
