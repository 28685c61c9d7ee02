//! `list_changed` (F28): a background re-discovery of that list only, at
//! most one per kind in flight (a change during a run owes exactly one more
//! run), and a failed run keeps the previous catalog whole. Each test runs
//! over an owned and a borrowed client and ends with the baseline check.

use crate::support;

use crate::support::hostile_http;

use std::time::Duration;

use crate::support::baseline::Caller;
use crate::support::*;
use mcp_scoped_http::{Catalog, Connector, Session};

const BORROWED: [bool; 2] = [false, true];

fn who(borrowed: bool) -> &'static str {
    if borrowed { "borrowed" } else { "owned" }
}

async fn open(server: &TestServer, caller: &Caller, borrowed: bool) -> Session {
    let mut connector = Connector::new(server.url()).bearer("list-changed");
    if borrowed {
        connector = connector.client(caller.client.clone());
    }
    let session = connector.connect().await.unwrap();
    assert!(
        eventually(Duration::from_secs(5), || server
            .stats()
            .listen_streams_open
            == 1)
        .await,
        "the listener is up"
    );
    session
}

fn tool_names(catalog: &Catalog) -> Vec<String> {
    catalog.tool_names().map(str::to_owned).collect()
}

fn listed(server: &TestServer, method: &str) -> usize {
    seen(server, method).len()
}

#[test]
fn a_tools_list_changed_updates_the_catalog() {
    scenario(async {
        for borrowed in BORROWED {
            let (server, caller, baseline) = support::baseline::scene(TestServer::start(
                ServerConfig::default().with_listen(ListenMode::Open),
            ))
            .await;
            let session = open(&server, &caller, borrowed).await;
            assert_eq!(session.catalog().tools.len(), 3);
            server.set_tools(5);
            // Sent until a stream takes it: a send that reaches none has no effect,
            // and the listener may be between its GET and its registration.
            assert!(eventually(Duration::from_secs(5), || server.list_changed("tools") == 1).await);
            assert!(
                eventually(Duration::from_secs(5), || session.catalog().tools.len()
                    == 5)
                .await,
                "{}: {:?}",
                who(borrowed),
                tool_names(&session.catalog())
            );
            assert_eq!(
                tool_names(&session.catalog()),
                ["tool-000", "tool-001", "tool-002", "tool-003", "tool-004"]
            );
            let result = session
                .call_tool("tool-004", serde_json::json!({}))
                .await
                .unwrap();
            assert_eq!(result["structuredContent"]["tool"], "tool-004");
            session.close().await;
            drop(session);
            baseline.check(&server, 1).await;
        }
    });
}

#[test]
fn a_list_changed_storm_runs_one_rediscovery_at_a_time_and_ends_current() {
    scenario(async {
        for borrowed in BORROWED {
            let (server, caller, baseline) = support::baseline::scene(TestServer::start(
                ServerConfig::default().with_listen(ListenMode::Open),
            ))
            .await;
            let session = open(&server, &caller, borrowed).await;
            let before = listed(&server, "tools/list");
            server.push_fault(Fault::on_rpc(
                "tools/list",
                FaultAction::Delay(Duration::from_millis(100)),
            ));
            for _ in 0..25 {
                // Sent until a stream takes it: a send that reaches none has no effect,
                // and the listener may be between its GET and its registration.
                assert!(
                    eventually(Duration::from_secs(5), || server.list_changed("tools") == 1).await
                );
            }
            // The first run is under way (slow): the others wait for it.
            assert!(
                eventually(Duration::from_secs(5), || listed(&server, "tools/list")
                    > before)
                .await
            );
            // Changed while the first run is in flight: it owes one more.
            server.set_tools(7);
            for _ in 0..25 {
                // Sent until a stream takes it: a send that reaches none has no effect,
                // and the listener may be between its GET and its registration.
                assert!(
                    eventually(Duration::from_secs(5), || server.list_changed("tools") == 1).await
                );
            }
            tokio::time::sleep(Duration::from_millis(40)).await;
            assert_eq!(
                listed(&server, "tools/list") - before,
                1,
                "{}: one re-discovery in flight",
                who(borrowed)
            );
            assert!(
                eventually(Duration::from_secs(5), || session.catalog().tools.len()
                    == 7)
                .await,
                "{}: the catalog ends current: {:?}",
                who(borrowed),
                tool_names(&session.catalog())
            );
            // The owed run starts a second (the re-listing interval) after
            // the first; let it finish before counting.
            assert!(
                eventually(Duration::from_secs(5), || listed(&server, "tools/list")
                    >= before + 2)
                .await,
                "{}: the owed run never came",
                who(borrowed)
            );
            tokio::time::sleep(Duration::from_millis(400)).await;
            let runs = listed(&server, "tools/list") - before;
            assert!(
                (2..=3).contains(&runs),
                "{}: {runs} tools/list for a storm of 50",
                who(borrowed)
            );
            assert_eq!(session.catalog().tools.len(), 7);
            // The state machine is idle again: one more change, one more run.
            server.clear_faults();
            server.set_tools(2);
            server.list_changed("tools");
            assert!(
                eventually(Duration::from_secs(5), || session.catalog().tools.len()
                    == 2)
                .await
            );
            session.close().await;
            drop(session);
            baseline.check(&server, 1).await;
        }
    });
}

#[test]
fn a_failed_rediscovery_keeps_the_previous_catalog_whole() {
    scenario(async {
        for borrowed in BORROWED {
            let (server, caller, baseline) = support::baseline::scene(TestServer::start(
                ServerConfig::default()
                    .with_listen(ListenMode::Open)
                    .with_tools(6)
                    .with_page_size(2),
            ))
            .await;
            let session = open(&server, &caller, borrowed).await;
            let previous = session.catalog();
            assert_eq!(previous.tools.len(), 6);
            let before = listed(&server, "tools/list");
            server.push_fault(
                Fault::on_rpc("tools/list", FaultAction::status(500))
                    .page(2)
                    .times(1),
            );
            // Fewer tools now: a run that kept its first page would show.
            server.set_tools(5);
            // Sent until a stream takes it: a send that reaches none has no effect,
            // and the listener may be between its GET and its registration.
            assert!(eventually(Duration::from_secs(5), || server.list_changed("tools") == 1).await);
            assert!(
                eventually(Duration::from_secs(5), || listed(&server, "tools/list")
                    == before + 2)
                .await,
                "page 1, then the failing page 2"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
            assert_eq!(listed(&server, "tools/list"), before + 2, "no page 3");
            let kept = session.catalog();
            assert_eq!(kept.tools, previous.tools, "{}", who(borrowed));
            assert_eq!(tool_names(&kept), tool_names(&previous));
            assert_eq!(kept.prompts, previous.prompts);
            assert_eq!(kept.resources, previous.resources);
            assert_eq!(kept.resource_templates, previous.resource_templates);
            // The failure left the kind idle: the next change re-lists.
            // Sent until a stream takes it: a send that reaches none has no effect,
            // and the listener may be between its GET and its registration.
            assert!(eventually(Duration::from_secs(5), || server.list_changed("tools") == 1).await);
            assert!(
                eventually(Duration::from_secs(5), || session.catalog().tools.len()
                    == 5)
                .await,
                "{}: {:?}",
                who(borrowed),
                tool_names(&session.catalog())
            );
            assert_eq!(listed(&server, "tools/list"), before + 5);
            session.close().await;
            drop(session);
            baseline.check(&server, 1).await;
        }
    });
}

#[test]
fn a_prompts_list_changed_relists_prompts_only() {
    scenario(async {
        for borrowed in BORROWED {
            let (server, caller, baseline) = support::baseline::scene(TestServer::start(
                ServerConfig::default().with_listen(ListenMode::Open),
            ))
            .await;
            let session = open(&server, &caller, borrowed).await;
            let previous = session.catalog();
            assert_eq!(previous.prompts.len(), 2);
            let methods = [
                "tools/list",
                "prompts/list",
                "resources/list",
                "resources/templates/list",
            ];
            let counts = || methods.map(|m| listed(&server, m));
            let before = counts();
            server.set_prompts(4);
            server.set_tools(9);
            // Sent until a stream takes it: a send that reaches none has no effect,
            // and the listener may be between its GET and its registration.
            assert!(
                eventually(Duration::from_secs(5), || server.list_changed("prompts")
                    == 1)
                .await
            );
            assert!(
                eventually(Duration::from_secs(5), || session.catalog().prompts.len()
                    == 4)
                .await,
                "{}",
                who(borrowed)
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
            let after = counts();
            assert_eq!(
                [after[0], after[1], after[2], after[3]],
                [before[0], before[1] + 1, before[2], before[3]],
                "{}: only prompts/list, once",
                who(borrowed)
            );
            let now = session.catalog();
            assert_eq!(now.tools, previous.tools, "tools untouched");
            assert_eq!(now.resources, previous.resources);
            assert_eq!(now.resource_templates, previous.resource_templates);
            session.close().await;
            drop(session);
            baseline.check(&server, 1).await;
        }
    });
}

/// The tools change while connect is still discovering (its `tools/list`
/// is done, `prompts/list` is slow), and the server says so on the GET
/// stream: the re-discovery that follows finishes first, and connect's own,
/// older tools must not overwrite it when connect ends.
#[test]
fn a_list_changed_during_connect_discovery_is_not_undone_by_connect() {
    scenario(async {
        for borrowed in BORROWED {
            let (server, caller, baseline) = support::baseline::scene(TestServer::start(
                ServerConfig::default()
                    .with_listen(ListenMode::Open)
                    .with_fault(
                        Fault::on_rpc(
                            "prompts/list",
                            FaultAction::Delay(Duration::from_millis(400)),
                        )
                        .times(1),
                    ),
            ))
            .await;
            let mut connector = Connector::new(server.url()).bearer("list-changed");
            if borrowed {
                connector = connector.client(caller.client.clone());
            }
            let connect = tokio::spawn(connector.connect());
            // Connect is in its slow prompts/list, with the listener up.
            assert!(
                eventually(Duration::from_secs(5), || {
                    listed(&server, "prompts/list") == 1 && server.stats().listen_streams_open == 1
                })
                .await,
                "connect reached prompts/list with its listener up"
            );
            server.set_tools(5);
            // Sent until a stream takes it: a send that reaches none has no effect,
            // and the listener may be between its GET and its registration.
            assert!(eventually(Duration::from_secs(5), || server.list_changed("tools") == 1).await);
            // The re-discovery has listed the new tools, before connect ends.
            assert!(
                eventually(Duration::from_secs(5), || listed(&server, "tools/list")
                    == 2)
                .await,
                "the re-discovery ran"
            );
            let session = connect.await.unwrap().expect("connect");
            assert!(
                eventually(Duration::from_secs(5), || session.catalog().tools.len()
                    == 5)
                .await,
                "{}: connect's older tools replaced the re-discovered ones: {:?}",
                who(borrowed),
                tool_names(&session.catalog())
            );
            session.close().await;
            drop(session);
            baseline.check(&server, 1).await;
        }
    });
}

/// A server that puts `notifications/tools/list_changed` in every answer to
/// `tools/list` (one that regenerates its list on each read, or a hostile
/// one): each re-discovery's own answer asks for the next one. Re-listings
/// of one kind start at most once a second (what arrives meanwhile is
/// coalesced into one more run); before the fix the client re-listed back
/// to back, ~5,000 `tools/list` in 2 s.
#[test]
fn list_changed_inside_the_listing_does_not_relist_back_to_back_forever() {
    use hostile_http::{Server, empty, json_response, message, result, whole};
    use http::Method;
    use serde_json::json;
    scenario(async {
        let server = Server::start(|seen, _state| async move {
            let has_id = seen.body.as_ref().is_some_and(|b| b.get("id").is_some());
            match (&seen.method, seen.rpc()) {
                (&Method::POST, Some("initialize")) => {
                    let mut r = json_response(
                        200,
                        &result(
                            &seen.id(),
                            json!({"protocolVersion": "2025-11-25",
                                   "capabilities": {"tools": {"listChanged": true}},
                                   "serverInfo": {"name": "s25", "version": "1"}}),
                        ),
                    );
                    r.headers_mut()
                        .insert("mcp-session-id", "sess".parse().unwrap());
                    r
                }
                (&Method::POST, Some("tools/list")) => {
                    let changed = json!({"jsonrpc": "2.0",
                                         "method": "notifications/tools/list_changed"});
                    let answer = result(&seen.id(), json!({"tools": []}));
                    let mut body = message(&changed).to_vec();
                    body.extend_from_slice(&message(&answer));
                    whole(200, Some("text/event-stream"), body)
                }
                (&Method::POST, _) if has_id => json_response(200, &result(&seen.id(), json!({}))),
                (&Method::POST, _) => empty(202),
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
        let at_connect = server.state.rpcs("tools/list");
        tokio::time::sleep(Duration::from_secs(2)).await;
        let later = server.state.rpcs("tools/list") - at_connect;
        session.close().await;
        // One re-listing a second, at most: 3 in 2 s with the edges.
        assert!(
            later <= 4,
            "{later} tools/list requests in 2 s after connect"
        );
        assert!(later >= 1, "the change was not listed at all");
    });
}
