//! Discovery (FAULTS.md F12-F16, F18): every page of every list the server
//! declares, all or nothing, bounded, over an owned and a borrowed client.
//! Each scenario ends with the baseline check.

use std::collections::HashSet;

use crate::support::baseline::{Baseline, Caller};
use crate::support::*;
use mcp_scoped_http::{ConnectPhase, Connector, Discovery, MemoryBudget, Session, SessionRelease};
use serde_json::{Value, json};

/// One list after the other (not the default: the F-scenarios check
/// where discovery stopped, which only that order defines; listing at
/// once has its own test at the end).
fn sequential() -> Discovery {
    Discovery::default().concurrent(false)
}

/// A connector for `server`, over the caller's client when `borrowed`,
/// listing one kind after the other.
fn connector(server: &TestServer, caller: &Caller, borrowed: bool) -> Connector {
    let connector = Connector::new(server.url())
        .bearer("discovery-token")
        .discovery(sequential());
    if borrowed {
        connector.client(caller.client.clone())
    } else {
        connector
    }
}

/// Whether `prompts/list` went out before the second `tools/list` page,
/// in a server's order of JSON-RPC methods: with a slow first tools page,
/// only listing the kinds at once does that.
fn listed_at_once(order: &[String]) -> bool {
    let second_tools_page = order
        .iter()
        .enumerate()
        .filter(|(_, m)| *m == "tools/list")
        .nth(1)
        .map(|(i, _)| i)
        .expect("a second tools page");
    let prompts = order
        .iter()
        .position(|m| m == "prompts/list")
        .expect("prompts");
    prompts < second_tools_page
}

/// A warm caller and the baseline taken with it.
async fn start(server: &TestServer) -> (Caller, Baseline) {
    let caller = Caller::new();
    caller.own_request(server).await;
    let baseline = Baseline::take(Some(&caller));
    (caller, baseline)
}

/// 20 tools over pages of 4: five `tools/list` pages.
fn paged_server() -> TestServer {
    TestServer::start(ServerConfig::default().with_tools(20).with_page_size(4))
}

/// The `Mcp-Session-Id` values the server saw on our requests, in order of
/// first appearance (the caller's own requests carry none).
fn session_ids_seen(server: &TestServer) -> Vec<String> {
    let mut ids: Vec<String> = Vec::new();
    for r in server.requests() {
        if let Some(id) = r.header("mcp-session-id") {
            if !ids.iter().any(|seen| seen == id) {
                ids.push(id.to_owned());
            }
        }
    }
    ids
}

/// The `cursor` param of a recorded list request, if any.
fn cursor_of(r: &RecordedRequest) -> Option<&str> {
    r.body.as_ref()?.get("params")?.get("cursor")?.as_str()
}

/// A JSON answer with `result` for whatever request id it answers.
fn result_page(result: Value) -> FaultAction {
    let body = json!({"jsonrpc": "2.0", "id": "__ID__", "result": result})
        .to_string()
        .replace("\"__ID__\"", "{id}");
    FaultAction::raw(200, "application/json", &body)
}

/// A JSON-RPC error answer (HTTP 200) to whatever request it answers.
fn rpc_error(code: i64, message: &str) -> FaultAction {
    let body =
        json!({"jsonrpc": "2.0", "id": "__ID__", "error": {"code": code, "message": message}})
            .to_string()
            .replace("\"__ID__\"", "{id}");
    FaultAction::raw(200, "application/json", &body)
}

async fn close_deleted(session: Session) {
    let released = session.close().await;
    assert!(
        matches!(released.session, SessionRelease::Deleted(s) if s == 200),
        "{released:?}"
    );
}

// ------------------------------------------------------------ happy path

#[test]
fn every_page_is_followed_in_order_with_the_cursors_sent_verbatim() {
    scenario(async {
        for borrowed in [false, true] {
            let server = paged_server();
            let (caller, baseline) = start(&server).await;

            let session = connector(&server, &caller, borrowed)
                .connect()
                .await
                .unwrap();
            let expected: Vec<String> = (0..20).map(|i| format!("tool-{i:03}")).collect();
            assert_eq!(
                session.catalog().tool_names().collect::<Vec<_>>(),
                expected,
                "borrowed={borrowed}"
            );
            assert_eq!(session.catalog().duplicates_dropped, 0);

            let pages = seen(&server, "tools/list");
            assert_eq!(pages.len(), 5, "borrowed={borrowed}");
            assert_eq!(cursor_of(&pages[0]), None, "page 1 carries no cursor");
            let cursors: Vec<&str> = pages[1..]
                .iter()
                .map(|r| cursor_of(r).expect("pages 2.. carry a cursor"))
                .collect();
            assert_eq!(cursors.iter().collect::<HashSet<_>>().len(), 4);
            // The testkit answers an unknown or altered cursor with -32602, so
            // five pages and all twenty tools mean each cursor went back as is.
            close_deleted(session).await;
            baseline.check(&server, 1).await;
        }
    });
}

#[test]
fn opaque_cursors_go_back_byte_for_byte() {
    scenario(async {
        // Cursors are opaque: spaces, slashes, padding, non-ASCII, JSON-looking.
        let cursors = ["a b/c==", "ü-✓-\u{1F600}", "{\"k\":[1,2]}"];
        for borrowed in [false, true] {
            let server = TestServer::start(
                ServerConfig::default()
                    .with_prompts(0)
                    .with_resources(0)
                    .with_resource_templates(0),
            );
            let names = ["p1", "p2", "p3", "p4"];
            for (i, name) in names.iter().enumerate() {
                let mut result =
                    json!({"tools": [{"name": name, "inputSchema": {"type": "object"}}]});
                if let Some(next) = cursors.get(i) {
                    result["nextCursor"] = json!(next);
                }
                server.push_fault(Fault::on_rpc("tools/list", result_page(result)).times(1));
            }
            let (caller, baseline) = start(&server).await;

            let session = connector(&server, &caller, borrowed)
                .connect()
                .await
                .unwrap();
            assert_eq!(
                session.catalog().tool_names().collect::<Vec<_>>(),
                names,
                "borrowed={borrowed}"
            );
            // Entries are the server's JSON, verbatim.
            assert_eq!(
                session.catalog().tool("p1").unwrap(),
                &json!({"name": "p1", "inputSchema": {"type": "object"}})
            );
            let pages = seen(&server, "tools/list");
            assert_eq!(pages.len(), 4);
            let sent: Vec<Option<&str>> = pages.iter().map(cursor_of).collect();
            assert_eq!(
                sent,
                [None, Some(cursors[0]), Some(cursors[1]), Some(cursors[2])]
            );
            close_deleted(session).await;
            baseline.check(&server, 1).await;
        }
    });
}

#[test]
fn exactly_max_pages_pages_is_fine_and_one_more_is_a_limit_error() {
    scenario(async {
        for borrowed in [false, true] {
            let server = paged_server();
            let (caller, baseline) = start(&server).await;

            // Five pages with a cap of five: complete.
            let session = connector(&server, &caller, borrowed)
                .discovery(sequential().max_pages(5))
                .connect()
                .await
                .unwrap();
            assert_eq!(session.catalog().tools.len(), 20);
            close_deleted(session).await;

            // Five pages with a cap of four: the fifth is never asked for.
            server.clear_requests();
            let error = connector(&server, &caller, borrowed)
                .discovery(sequential().max_pages(4))
                .connect()
                .await
                .unwrap_err();
            assert!(error.is_limit(), "{error:?}");
            assert_eq!(seen(&server, "tools/list").len(), 4);
            assert_eq!(seen(&server, "prompts/list").len(), 0, "stopped at tools");
            baseline.check(&server, 2).await;
        }
    });
}

// ------------------------------------------------------------ F12

/// F12: an error on page N >= 2 of `tools/list` fails the connect, exposes
/// nothing, DELETEs the session once, and a retry is a fresh session.
#[test]
fn f12_an_error_on_a_later_tools_page_unwinds_and_a_retry_starts_fresh() {
    scenario(async {
        // (page, fault, what the caller must be told)
        type Check = fn(&mcp_scoped_http::Error) -> bool;
        let cases: Vec<(usize, FaultAction, Check)> = vec![
            (2, FaultAction::status(500), |e| {
                e.is_status() && e.status() == Some(http::StatusCode::INTERNAL_SERVER_ERROR)
            }),
            (5, FaultAction::status(500), |e| {
                e.is_status() && e.status() == Some(http::StatusCode::INTERNAL_SERVER_ERROR)
            }),
            (3, rpc_error(-32603, "page store offline"), |e| {
                e.is_rpc() && e.rpc_code() == Some(-32603)
            }),
            (
                2,
                FaultAction::status_with_rpc_error(503, -32000, "overloaded"),
                |e| {
                    e.is_status()
                        && e.status() == Some(http::StatusCode::SERVICE_UNAVAILABLE)
                        && e.rpc_code() == Some(-32000)
                },
            ),
        ];
        for (page, action, names_the_cause) in cases {
            for borrowed in [false, true] {
                let context = format!("page {page}, {action:?}, borrowed={borrowed}");
                let server = paged_server();
                server.push_fault(
                    Fault::on_rpc("tools/list", action.clone())
                        .page(page)
                        .times(1),
                );
                let (caller, baseline) = start(&server).await;

                let error = connector(&server, &caller, borrowed)
                    .connect()
                    .await
                    .unwrap_err();
                assert!(names_the_cause(&error), "{context}: {error:?}");
                assert!(error.cleanup_errors().is_empty(), "{context}: {error:?}");
                // It stopped at the failing page: nothing after it was asked.
                assert_eq!(seen(&server, "tools/list").len(), page, "{context}");
                assert_eq!(seen(&server, "prompts/list").len(), 0, "{context}");

                // Exactly one DELETE, for the session that was created.
                let first_ids = session_ids_seen(&server);
                assert_eq!(first_ids.len(), 1, "{context}");
                let deletes = seen_http(&server, http::Method::DELETE);
                assert_eq!(deletes.len(), 1, "{context}");
                assert_eq!(
                    deletes[0].header("mcp-session-id"),
                    Some(first_ids[0].as_str())
                );
                assert_eq!(
                    deletes[0].header("authorization"),
                    Some("Bearer discovery-token")
                );
                assert_eq!(server.stats().live_sessions, 0, "{context}");

                // The retry: a new initialize, a new id, the whole catalog.
                let session = connector(&server, &caller, borrowed)
                    .connect()
                    .await
                    .unwrap();
                assert_eq!(seen(&server, "initialize").len(), 2, "{context}");
                assert_eq!(server.stats().sessions_created, 2);
                let retry_id = session.session_id().unwrap().expose().to_owned();
                assert_ne!(retry_id, first_ids[0], "{context}: the id was reused");
                assert_eq!(session_ids_seen(&server), [first_ids[0].clone(), retry_id]);
                assert_eq!(session.catalog().tools.len(), 20, "{context}");
                close_deleted(session).await;
                baseline.check(&server, 2).await;
            }
        }
    });
}

// ------------------------------------------------------------ F13

/// F13: a later list fails after earlier ones succeeded: the connect fails
/// as a whole (there is no session, so no partial catalog can be seen), the
/// session is DELETEd once.
#[test]
fn f13_a_later_list_failing_drops_everything_found_so_far() {
    scenario(async {
        let failing = [
            ("prompts/list", 1),
            ("prompts/list", 2),
            ("resources/list", 1),
            ("resources/templates/list", 1),
        ];
        for (method, page) in failing {
            for borrowed in [false, true] {
                let context = format!("{method} page {page}, borrowed={borrowed}");
                let server = TestServer::start(
                    ServerConfig::default()
                        .with_tools(6)
                        .with_prompts(4)
                        .with_resources(3)
                        .with_resource_templates(2)
                        .with_page_size(2),
                );
                server.push_fault(
                    Fault::on_rpc(method, FaultAction::status(500))
                        .page(page)
                        .times(1),
                );
                let (caller, baseline) = start(&server).await;

                let error = connector(&server, &caller, borrowed)
                    .connect()
                    .await
                    .unwrap_err();
                assert_eq!(
                    error.status(),
                    Some(http::StatusCode::INTERNAL_SERVER_ERROR),
                    "{context}: {error:?}"
                );
                // tools/list did succeed, every page of it, before the failure.
                assert_eq!(seen(&server, "tools/list").len(), 3, "{context}");
                assert_eq!(seen(&server, method).len(), page, "{context}");
                assert_eq!(seen_http(&server, http::Method::DELETE).len(), 1);
                assert_eq!(server.stats().live_sessions, 0, "{context}");
                baseline.check(&server, 1).await;
            }
        }
    });
}

/// An owned session knows the server's capabilities, so a declared list
/// answered "method not found" is a failure, not "not offered" (that
/// leniency is for attached sessions only, see tests/it/attach.rs).
#[test]
fn a_declared_list_answering_method_not_found_fails_an_owned_session() {
    scenario(async {
        for borrowed in [false, true] {
            let server = TestServer::start(ServerConfig::default());
            server.push_fault(Fault::on_rpc(
                "prompts/list",
                rpc_error(-32601, "Method not found"),
            ));
            let (caller, baseline) = start(&server).await;
            let error = connector(&server, &caller, borrowed)
                .connect()
                .await
                .unwrap_err();
            assert_eq!(error.rpc_code(), Some(-32601), "{error:?}");
            baseline.check(&server, 1).await;
        }
    });
}

/// A page that is JSON but not a list page says which: unreadable (a
/// cursor no `Value` holds) or without its array; in discovery (which then
/// unwinds) and in `list_tools` alike.
#[test]
fn a_page_that_cannot_be_read_is_told_apart_from_one_without_its_array() {
    scenario(async {
        let unreadable = r#"{"jsonrpc":"2.0","id":{id},"result":{"tools":[],"nextCursor":1e400}}"#;
        let cases = [
            (
                FaultAction::raw(200, "application/json", unreadable),
                "cannot be read",
            ),
            (result_page(json!({"prompts": []})), "has no `tools` array"),
        ];
        for (answer, said) in cases {
            let server = TestServer::start(ServerConfig::default());
            server.push_fault(Fault::on_rpc("tools/list", answer.clone()).times(1));
            let (caller, baseline) = start(&server).await;
            let error = connector(&server, &caller, true)
                .connect()
                .await
                .unwrap_err();
            assert!(error.is_protocol(), "{error:?}");
            assert!(error.to_string().contains(said), "{error}");
            baseline.check(&server, 1).await;

            let session = connector(&server, &caller, true).connect().await.unwrap();
            server.push_fault(Fault::on_rpc("tools/list", answer).times(1));
            let error = session.list_tools(None).await.unwrap_err();
            assert!(error.is_protocol(), "{error:?}");
            assert!(error.to_string().contains(said), "{error}");
            close_deleted(session).await;
        }
    });
}

// ------------------------------------------------------------ F15

/// F15: a server whose `nextCursor` never ends is stopped at the page cap
/// with a limit error; memory is bounded by that cap.
#[test]
fn f15_an_endless_cursor_stops_at_max_pages() {
    scenario(async {
        for borrowed in [false, true] {
            let server = TestServer::start(ServerConfig::default());
            // Every page: one new tool and a cursor never seen before (both
            // derived from the request id, which changes on every page).
            server.push_fault(Fault::on_rpc(
                "tools/list",
                FaultAction::raw(
                    200,
                    "application/json",
                    r#"{"jsonrpc":"2.0","id":{id},"result":{"tools":[{"name":"t-{id}"}],"nextCursor":"c-{id}"}}"#,
                ),
            ));
            let (caller, baseline) = start(&server).await;

            let error = connector(&server, &caller, borrowed)
                .discovery(sequential().max_pages(5))
                .connect()
                .await
                .unwrap_err();
            assert!(error.is_limit(), "{error:?}");
            assert!(error.to_string().contains("tools/list"), "{error}");
            let pages = seen(&server, "tools/list");
            assert_eq!(pages.len(), 5, "borrowed={borrowed}");
            // Each cursor was fresh, so only the cap could stop it.
            let cursors: HashSet<_> = pages.iter().filter_map(cursor_of).collect();
            assert_eq!(cursors.len(), 4);
            assert_eq!(seen(&server, "prompts/list").len(), 0);
            baseline.check(&server, 1).await;
        }
    });
}

/// F15: a cursor the server already gave is a loop: stopped with a protocol
/// error at the page that repeats it, not at the cap.
#[test]
fn f15_a_repeated_cursor_is_a_protocol_error() {
    scenario(async {
        for borrowed in [false, true] {
            // The same cursor on every page: stops after the second page.
            let server = TestServer::start(ServerConfig::default());
            server.push_fault(Fault::on_rpc(
                "tools/list",
                result_page(json!({"tools": [], "nextCursor": "again"})),
            ));
            let (caller, baseline) = start(&server).await;
            let error = connector(&server, &caller, borrowed)
                .connect()
                .await
                .unwrap_err();
            assert!(error.is_protocol(), "{error:?}");
            assert!(error.to_string().contains("repeated a cursor"), "{error}");
            assert_eq!(seen(&server, "tools/list").len(), 2, "borrowed={borrowed}");
            baseline.check(&server, 1).await;

            // A → B → A: an earlier cursor, not just the last one.
            let server = TestServer::start(ServerConfig::default());
            for (i, next) in ["A", "B", "A"].into_iter().enumerate() {
                server.push_fault(
                    Fault::on_rpc(
                        "tools/list",
                        result_page(
                            json!({"tools": [{"name": format!("t{i}")}], "nextCursor": next}),
                        ),
                    )
                    .times(1),
                );
            }
            let (caller, baseline) = start(&server).await;
            let error = connector(&server, &caller, borrowed)
                .connect()
                .await
                .unwrap_err();
            assert!(error.is_protocol(), "{error:?}");
            assert_eq!(seen(&server, "tools/list").len(), 3, "borrowed={borrowed}");
            baseline.check(&server, 1).await;
        }
    });
}

// ------------------------------------------------------------ F16

/// F16: duplicate names across pages. The rule: the first entry with a name
/// is kept, later ones are dropped and counted in `duplicates_dropped`.
///
/// Why first-kept: a tool name must mean exactly one tool when `call_tool`
/// is used, so one of them has to go; keeping the first depends only on the
/// server's order (not on page size, hashing or timing), matches what a
/// caller reading the list top-down would pick, and never lets a later page
/// silently replace a schema already shown. The count lets the caller see
/// that the server misbehaved. The same rule holds for prompts (by name),
/// resources (by uri) and templates (by uriTemplate); the kinds do not
/// share a namespace.
#[test]
fn f16_duplicate_names_across_pages_keep_the_first_and_are_counted() {
    scenario(async {
        for borrowed in [false, true] {
            let server = TestServer::start(
                ServerConfig::default()
                    .with_resources(0)
                    .with_resource_templates(0),
            );
            let pages = [
                json!({"tools": [
                    {"name": "alpha", "description": "first alpha"},
                    {"name": "beta", "description": "first beta"},
                ], "nextCursor": "p2"}),
                json!({"tools": [
                    {"name": "beta", "description": "second beta"},
                    {"name": "gamma"},
                    {"name": "alpha", "description": "second alpha"},
                ], "nextCursor": "p3"}),
                json!({"tools": [
                    {"name": "gamma", "description": "second gamma"},
                    {"name": "delta"},
                ]}),
            ];
            let script = |server: &TestServer| {
                for page in &pages {
                    server.push_fault(
                        Fault::on_rpc("tools/list", result_page(page.clone())).times(1),
                    );
                }
                // A prompt named like a tool is no duplicate: separate kinds.
                server.push_fault(
                    Fault::on_rpc(
                        "prompts/list",
                        result_page(
                            json!({"prompts": [{"name": "alpha"}, {"name": "p"}, {"name": "p"}]}),
                        ),
                    )
                    .times(1),
                );
            };
            script(&server);
            let (caller, baseline) = start(&server).await;

            // Twice against the same script: the same outcome both times.
            let mut outcomes = Vec::new();
            for _ in 0..2 {
                let session = connector(&server, &caller, borrowed)
                    .connect()
                    .await
                    .unwrap();
                let catalog = session.catalog().clone();
                close_deleted(session).await;
                outcomes.push(catalog);
                script(&server);
            }
            for catalog in &outcomes {
                assert_eq!(
                    catalog.tool_names().collect::<Vec<_>>(),
                    ["alpha", "beta", "gamma", "delta"],
                    "borrowed={borrowed}"
                );
                assert_eq!(catalog.tool("alpha").unwrap()["description"], "first alpha");
                assert_eq!(catalog.tool("beta").unwrap()["description"], "first beta");
                assert_eq!(catalog.tool("gamma").unwrap().get("description"), None);
                let prompts: Vec<_> = catalog.prompts.iter().map(|p| &p["name"]).collect();
                assert_eq!(prompts, [&json!("alpha"), &json!("p")]);
                // beta, alpha, gamma among tools; p among prompts.
                assert_eq!(catalog.duplicates_dropped, 4);
            }
            assert_eq!(
                serde_json::to_value(&*outcomes[0]).unwrap(),
                serde_json::to_value(&*outcomes[1]).unwrap()
            );
            baseline.check(&server, 2).await;
        }
    });
}

// ------------------------------------------------------------ F18

/// F18: lists whose capability the server does not declare are not asked
/// for at all.
#[test]
fn f18_lists_the_server_does_not_declare_are_never_requested() {
    scenario(async {
        for borrowed in [false, true] {
            let server = TestServer::start(
                ServerConfig::default()
                    .with_tools(2)
                    .with_prompts(0)
                    .with_resources(0)
                    .with_resource_templates(0),
            );
            let (caller, baseline) = start(&server).await;
            let session = connector(&server, &caller, borrowed)
                .connect()
                .await
                .unwrap();
            let capabilities = &session.info().capabilities;
            assert!(capabilities.get("tools").is_some(), "{capabilities}");
            for absent in ["prompts", "resources"] {
                assert!(capabilities.get(absent).is_none(), "{capabilities}");
            }
            assert_eq!(session.catalog().tools.len(), 2);
            assert!(session.catalog().prompts.is_empty());
            assert!(session.catalog().resources.is_empty());
            assert!(session.catalog().resource_templates.is_empty());
            close_deleted(session).await;

            let lists: Vec<String> = server
                .requests()
                .into_iter()
                .filter_map(|r| r.rpc_method)
                .filter(|m| m.ends_with("/list"))
                .collect();
            assert_eq!(lists, ["tools/list"], "borrowed={borrowed}");
            baseline.check(&server, 1).await;
        }
    });
}

/// F18, the other way round: no tools capability, no `tools/list`; and a
/// `resources` capability alone brings both resource lists.
#[test]
fn f18_a_server_without_tools_gets_no_tools_list() {
    scenario(async {
        for borrowed in [false, true] {
            let server = TestServer::start(
                ServerConfig::default()
                    .with_tools(0)
                    .with_prompts(0)
                    .with_resources(0)
                    .with_resource_templates(1),
            );
            let (caller, baseline) = start(&server).await;
            let session = connector(&server, &caller, borrowed)
                .connect()
                .await
                .unwrap();
            assert!(session.catalog().tools.is_empty());
            assert_eq!(session.catalog().resource_templates.len(), 1);
            close_deleted(session).await;
            let lists: Vec<String> = server
                .requests()
                .into_iter()
                .filter_map(|r| r.rpc_method)
                .filter(|m| m.ends_with("/list"))
                .collect();
            assert_eq!(
                lists,
                ["resources/list", "resources/templates/list"],
                "borrowed={borrowed}"
            );
            baseline.check(&server, 1).await;
        }
    });
}

/// What the caller turns off is not listed either, whatever the server
/// declares; `Discovery::none()` lists nothing.
#[test]
fn lists_turned_off_by_the_caller_are_never_requested() {
    scenario(async {
        for borrowed in [false, true] {
            let server = TestServer::start(ServerConfig::default());
            let (caller, baseline) = start(&server).await;

            let mut only_prompts = sequential();
            only_prompts.tools = false;
            only_prompts.resources = false;
            only_prompts.resource_templates = false;
            let session = connector(&server, &caller, borrowed)
                .discovery(only_prompts)
                .connect()
                .await
                .unwrap();
            assert_eq!(session.catalog().prompts.len(), 2);
            assert!(session.catalog().tools.is_empty());
            close_deleted(session).await;

            let session = connector(&server, &caller, borrowed)
                .discovery(Discovery::none())
                .connect()
                .await
                .unwrap();
            assert!(session.catalog().prompts.is_empty());
            close_deleted(session).await;

            let lists: Vec<String> = server
                .requests()
                .into_iter()
                .filter_map(|r| r.rpc_method)
                .filter(|m| m.ends_with("/list"))
                .collect();
            assert_eq!(lists, ["prompts/list"], "borrowed={borrowed}");
            baseline.check(&server, 2).await;
        }
    });
}

/// `Discovery::concurrent`: the kinds are listed at once (each kind's
/// pages in order), after `notifications/initialized`, with the same
/// catalog as one after the other; a failing list drops the others and
/// the session (all or nothing).
#[test]
fn concurrent_discovery_lists_the_kinds_at_once_all_or_nothing() {
    scenario(async {
        for borrowed in [false, true] {
            let server = TestServer::start(
                ServerConfig::default()
                    .with_tools(20)
                    .with_page_size(4)
                    .with_prompts(6)
                    .with_resources(6)
                    // The first tools page is slow: the other kinds are
                    // asked for before the second tools page.
                    .with_fault(
                        Fault::on_rpc(
                            "tools/list",
                            FaultAction::Delay(std::time::Duration::from_millis(200)),
                        )
                        .page(1),
                    ),
            );
            let (caller, baseline) = start(&server).await;
            let sequential = connector(&server, &caller, borrowed)
                .discovery(sequential())
                .connect()
                .await
                .expect("sequential");
            let expected = sequential.catalog().clone();
            sequential.close().await;
            server.clear_requests();

            let session = connector(&server, &caller, borrowed)
                .discovery(Discovery::default().concurrent(true))
                .connect()
                .await
                .expect("concurrent");
            assert_eq!(session.catalog().tools, expected.tools);
            assert_eq!(session.catalog().prompts, expected.prompts);
            assert_eq!(session.catalog().resources, expected.resources);
            assert_eq!(
                session.catalog().resource_templates,
                expected.resource_templates
            );
            session.close().await;
            let order: Vec<String> = server
                .requests()
                .iter()
                .filter_map(|r| r.rpc_method.clone())
                .collect();
            let initialized = order
                .iter()
                .position(|m| m == "notifications/initialized")
                .expect("initialized");
            let first_list = order
                .iter()
                .position(|m| m.ends_with("/list"))
                .expect("a list");
            assert!(initialized < first_list, "{order:?}");
            assert!(listed_at_once(&order), "at once: {order:?}");

            // One list fails: the connect fails, nothing is left.
            server.push_fault(Fault::on_rpc("prompts/list", FaultAction::status(500)).times(1));
            let error = connector(&server, &caller, borrowed)
                .discovery(Discovery::default().concurrent(true))
                .connect()
                .await
                .expect_err("a list failed");
            assert!(error.is_status(), "{error:?}");
            baseline.check(&server, 3).await;
        }
    });
}

/// Issue 29: by default the kinds are listed at once over a lent client
/// (its pool has the connections) and one after the other with a
/// session's own new client (at once would open a connection per kind).
#[test]
fn by_default_a_lent_client_lists_at_once_and_an_own_client_in_turn() {
    scenario(async {
        for borrowed in [false, true] {
            let server = TestServer::start(
                ServerConfig::default()
                    .with_tools(20)
                    .with_page_size(4)
                    .with_prompts(6)
                    // A slow first tools page: at once, prompts are asked
                    // for before the second tools page; in turn, after all.
                    .with_fault(
                        Fault::on_rpc(
                            "tools/list",
                            FaultAction::Delay(std::time::Duration::from_millis(200)),
                        )
                        .page(1),
                    ),
            );
            let (caller, baseline) = start(&server).await;
            server.clear_requests();
            let mut connector = Connector::new(server.url()).bearer("discovery-token");
            if borrowed {
                connector = connector.client(caller.client.clone());
            }
            let session = connector.connect().await.expect("connects");
            assert_eq!(session.catalog().tools.len(), 20);
            session.close().await;
            let order: Vec<String> = server
                .requests()
                .iter()
                .filter(|r| r.header("authorization") == Some("Bearer discovery-token"))
                .filter_map(|r| r.rpc_method.clone())
                .collect();
            assert_eq!(
                listed_at_once(&order),
                borrowed,
                "borrowed={borrowed}: {order:?}"
            );
            baseline.check(&server, 1).await;
        }
    });
}

// ------------------------------------------------------------ issue 20: the memory budget

/// Issue 20: a catalog over any bound of the session's memory budget (its
/// bytes, its entries) fails the connect with a limit error naming the
/// bound and the page, DELETEs the session and leaves nothing behind.
#[test]
fn i20_a_catalog_over_the_memory_budget_unwinds_the_connect() {
    scenario(async {
        for borrowed in [false, true] {
            for (budget, says, pages) in [
                // 20 tools in pages of 4: the third page takes it to 12.
                (
                    MemoryBudget::default().max_entries(10),
                    "MemoryBudget::max_entries",
                    3,
                ),
                // A few pages' text and entries, not five.
                (
                    MemoryBudget::default().max_bytes(2 * 1024),
                    "MemoryBudget::max_bytes",
                    2,
                ),
            ] {
                let server = paged_server();
                let (caller, baseline) = start(&server).await;
                let error = connector(&server, &caller, borrowed)
                    .discovery(sequential().memory(budget))
                    .connect()
                    .await
                    .unwrap_err();
                assert!(error.is_limit(), "{error:?}");
                assert_eq!(error.connect_phase(), Some(ConnectPhase::Discovery));
                let text = error.to_string();
                assert!(text.contains(says), "{text}");
                assert!(text.contains("tools/list"), "{text}");
                let listed = seen(&server, "tools/list").len();
                assert!((2..=pages).contains(&listed), "{text}: {listed} pages");
                baseline.check(&server, 1).await;
            }
        }
    });
}

/// Issue 20 (suspected, confirmed: every cursor, up to 8 MiB each, was
/// kept and sent back): a `nextCursor` longer than the cap is a limit error
/// at the page that brings it, and is never sent back; one at the cap is
/// followed.
#[test]
fn i20_a_cursor_over_its_cap_is_never_sent_back() {
    scenario(async {
        let cap = MemoryBudget::default().max_cursor_len;
        // The cap counts the cursor's JSON text, quotes included.
        let at_cap = "a".repeat(cap - 2);
        let server = TestServer::start(ServerConfig::default());
        server.push_fault(
            Fault::on_rpc(
                "tools/list",
                result_page(json!({"tools": [{"name": "t1"}], "nextCursor": at_cap})),
            )
            .times(1),
        );
        server.push_fault(
            Fault::on_rpc(
                "tools/list",
                result_page(json!({"tools": [{"name": "t2"}]})),
            )
            .times(1),
        );
        let (caller, baseline) = start(&server).await;
        let session = connector(&server, &caller, false).connect().await.unwrap();
        let pages = seen(&server, "tools/list");
        assert_eq!(pages.len(), 2);
        assert_eq!(cursor_of(&pages[1]), Some(at_cap.as_str()));
        close_deleted(session).await;
        baseline.check(&server, 1).await;

        let over = "b".repeat(cap - 1);
        let server = TestServer::start(ServerConfig::default());
        server.push_fault(Fault::on_rpc(
            "tools/list",
            result_page(json!({"tools": [{"name": "t1"}], "nextCursor": over})),
        ));
        let (caller, baseline) = start(&server).await;
        let error = connector(&server, &caller, false)
            .connect()
            .await
            .unwrap_err();
        assert!(error.is_limit(), "{error:?}");
        assert!(
            error.to_string().contains("MemoryBudget::max_cursor_len"),
            "{error}"
        );
        assert_eq!(seen(&server, "tools/list").len(), 1, "never sent back");
        baseline.check(&server, 1).await;
    });
}

/// Issue 20: `Session::list_*` pages are charged to the same account as
/// the catalog, for as long as the caller holds them.
#[test]
fn i20_pages_the_caller_holds_are_charged_to_the_session() {
    scenario(async {
        // Three tools in the catalog; room for two pages more, not three.
        let server = TestServer::start(ServerConfig::default());
        let tools_only = Discovery::none()
            .tools(true)
            .memory(MemoryBudget::default().max_entries(9));
        let session = Connector::new(server.url())
            .discovery(tools_only)
            .connect()
            .await
            .unwrap();
        assert_eq!(session.catalog().tools.len(), 3);
        let first = session.list_tools(None).await.unwrap();
        let second = session.list_tools(None).await.unwrap();
        let error = session.list_tools(None).await.unwrap_err();
        assert!(error.is_limit(), "{error:?}");
        assert!(
            error.to_string().contains("MemoryBudget::max_entries"),
            "{error}"
        );
        assert_eq!(first.items.len() + second.items.len(), 6);
        drop(first);
        // Released with the page: room again.
        let third = session.list_tools(None).await.unwrap();
        assert_eq!(third.items.len(), 3);
        drop((second, third));
        close_deleted(session).await;
    });
}

/// Issue 20: a re-discovery (after `list_changed`) is charged to the same
/// account while the list it replaces is still held: one that would go
/// over the budget fails, and the previous list stays; one that fits
/// replaces it, and the old list's charge is released.
#[test]
fn i20_a_rediscovery_over_the_budget_keeps_the_previous_list() {
    scenario(async {
        let server = TestServer::start(ServerConfig::default().with_listen(ListenMode::Open));
        let tools_only = Discovery::none()
            .tools(true)
            .memory(MemoryBudget::default().max_entries(8));
        let session = Connector::new(server.url())
            .discovery(tools_only)
            .connect()
            .await
            .unwrap();
        let bound = std::time::Duration::from_secs(5);
        assert!(
            eventually(bound, || server.stats().listen_streams_open == 1).await,
            "the listener is up"
        );
        assert_eq!(session.catalog().tools.len(), 3);
        let listed = |n: usize| seen(&server, "tools/list").len() == n;

        // 3 held and 6 more: over the 8 entries.
        server.set_tools(6);
        assert_eq!(server.list_changed("tools"), 1);
        assert!(eventually(bound, || listed(2)).await, "re-listed once");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        assert_eq!(session.catalog().tools.len(), 3, "the previous list stays");

        // 3 held and 4 more fit; then the 3 are released: 4 and 4 fit too.
        for (tools, pages) in [(4, 3), (4, 4)] {
            server.set_tools(tools);
            assert_eq!(server.list_changed("tools"), 1);
            assert!(eventually(bound, || listed(pages)).await);
            assert!(
                eventually(bound, || session.catalog().tools.len() == tools).await,
                "{tools} tools"
            );
        }
        close_deleted(session).await;
    });
}
