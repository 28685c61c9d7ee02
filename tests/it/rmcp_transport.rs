//! rmcp (the official Rust SDK) over `adapters::ScopedTransport`,
//! against the test kit server: the success path, failures during rmcp's
//! own `initialize`, a dropped `serve` future, and a failure during
//! `list_all_tools`. Each runs over an owned and a borrowed client and ends
//! with the baseline check of FAULTS.md.

use crate::support;

use std::time::Duration;

use crate::support::baseline::World;
use crate::support::*;
use http::Method;
use mcp_scoped_http::adapters::rmcp::scoped_error;
use mcp_scoped_http::adapters::{ReleaseReport, ScopedTransport, ScopedTransportBuilder};
use mcp_scoped_http::{Error, ProtocolVersion, Released, SessionRelease};
use mcp_scoped_http_testkit::{Eras, InputRequest, TestTool};
use rmcp::model::CallToolRequestParams;
use rmcp::service::{ClientInitializeError, RoleClient, RunningService};
use rmcp::{ServiceError, ServiceExt};
use serde_json::json;

const TOKEN: &str = "secret-token";
const BEARER: &str = "Bearer secret-token";
/// Past this, something hung.
const HUNG: Duration = Duration::from_secs(20);

impl World {
    /// A transport with our bearer hook, over the caller's client or an
    /// owned one.
    fn transport(&self, borrowed: bool) -> (ScopedTransport, ReleaseReport) {
        self.transport_with(borrowed, |builder| builder)
    }

    fn transport_with(
        &self,
        borrowed: bool,
        configure: impl FnOnce(ScopedTransportBuilder) -> ScopedTransportBuilder,
    ) -> (ScopedTransport, ReleaseReport) {
        let builder = configure(
            ScopedTransport::builder(self.server.url())
                .bearer(TOKEN)
                .delete_timeout(Duration::from_secs(2)),
        );
        let builder = if borrowed {
            builder.client(self.caller.client.clone())
        } else {
            builder
        };
        let mut transport = builder.build().expect("a valid transport");
        let report = transport.release_report();
        (transport, report)
    }

    /// Our hooks on the caller's client (those beyond the baseline's none).
    fn our_hooks(&self) -> usize {
        self.caller.client.hooks().len()
    }

    /// Waits for the reaper, then the baseline check.
    async fn reaped_and_checked(&self, deletes: usize) {
        tokio::time::timeout(HUNG, mcp_scoped_http::shutdown())
            .await
            .expect("the reaper finishes");
        self.baseline.check(&self.server, deletes).await;
    }

    /// Every DELETE the server saw: authenticated, naming a session.
    fn deletes_are_authenticated(&self) {
        for delete in seen_http(&self.server, Method::DELETE) {
            assert_eq!(delete.header("authorization"), Some(BEARER));
            assert!(delete.header("mcp-session-id").is_some());
        }
    }
}

fn mode(borrowed: bool) -> &'static str {
    if borrowed { "borrowed" } else { "owned" }
}

async fn serve(
    transport: ScopedTransport,
) -> Result<RunningService<RoleClient, ()>, ClientInitializeError> {
    tokio::time::timeout(HUNG, ().serve(transport))
        .await
        .expect("serve hung")
}

async fn serve_fails(transport: ScopedTransport) -> ClientInitializeError {
    match serve(transport).await {
        Ok(_) => panic!("rmcp's initialize succeeded"),
        Err(error) => error,
    }
}

/// Cancels the service and returns what the transport released.
async fn cancel<S: rmcp::Service<RoleClient>>(
    client: RunningService<RoleClient, S>,
    report: ReleaseReport,
) -> Released {
    tokio::time::timeout(HUNG, client.cancel())
        .await
        .expect("cancel hung")
        .expect("the service task ends");
    tokio::time::timeout(HUNG, report.released())
        .await
        .expect("the report arrives")
        .expect("rmcp closed the transport")
}

fn ours<'a>(error: &'a (dyn std::error::Error + 'static)) -> &'a Error {
    scoped_error(error).unwrap_or_else(|| panic!("no mcp-scoped-http error in {error:?}"))
}

fn deleted(released: &Released) {
    assert!(
        matches!(released.session, SessionRelease::Deleted(s) if s == 200),
        "{released:?}"
    );
}

async fn call(client: &RunningService<RoleClient, ()>, tool: &'static str) {
    let result = client
        .peer()
        .call_tool(
            CallToolRequestParams::new(tool)
                .with_arguments(json!({"text": "hi"}).as_object().unwrap().clone()),
        )
        .await
        .expect("tools/call");
    let structured = result.structured_content.expect("structured content");
    assert_eq!(structured["tool"], tool);
}

// ------------------------------------------------------------ success

#[test]
fn lists_every_page_calls_a_tool_and_cancel_deletes_once() {
    scenario(async {
        for (borrowed, response_mode) in [
            (false, ResponseMode::Json),
            (true, ResponseMode::Json),
            (false, ResponseMode::Sse),
            (true, ResponseMode::Sse),
        ] {
            let world = World::new(
                ServerConfig::default()
                    .with_tools(7)
                    .with_page_size(2)
                    .with_response_mode(response_mode)
                    .with_listen(ListenMode::Open),
            )
            .await;
            let (transport, report) = world.transport(borrowed);
            let client = serve(transport).await.expect("rmcp initializes");
            if borrowed {
                assert_eq!(world.our_hooks(), 1, "our hook, scoped to the session");
            }
            let tools = client.peer().list_all_tools().await.expect("every page");
            let names: Vec<_> = tools.iter().map(|t| t.name.to_string()).collect();
            let want: Vec<_> = (0..7).map(|i| format!("tool-{i:03}")).collect();
            assert_eq!(names, want, "{}", mode(borrowed));
            assert_eq!(seen(&world.server, "tools/list").len(), 4, "2 a page");
            call(&client, "tool-005").await;
            // The era was probed once (`server/discover`, refused by this
            // 2025 server). Every request of ours carried the hook and,
            // after initialize, the session id and revision.
            assert_eq!(seen(&world.server, "server/discover").len(), 1);
            for request in world
                .server
                .requests()
                .into_iter()
                .filter(|r| r.header("x-caller").is_none())
            {
                assert_eq!(request.header("authorization"), Some(BEARER));
                if !matches!(
                    request.rpc_method.as_deref(),
                    Some("initialize" | "server/discover")
                ) {
                    assert!(request.header("mcp-session-id").is_some(), "{request:?}");
                    assert_eq!(request.header("mcp-protocol-version"), Some("2025-11-25"));
                }
            }
            assert_eq!(world.server.stats().deletes, 0, "no DELETE before close");

            let released = cancel(client, report).await;
            deleted(&released);
            assert_eq!(released.hooks_removed, 1);
            assert_eq!(released.owned_client_released, !borrowed, "{released:?}");
            assert!(released.tasks_stopped >= 1, "the GET listener at least");
            world.deletes_are_authenticated();
            world.reaped_and_checked(1).await;
        }
    });
}

#[test]
fn dropping_the_running_service_closes_the_transport() {
    scenario(async {
        for borrowed in [false, true] {
            let world = World::new(ServerConfig::default()).await;
            let (transport, report) = world.transport(borrowed);
            let client = serve(transport).await.expect("rmcp initializes");
            call(&client, "tool-000").await;
            // rmcp's task sees the cancellation and closes the transport.
            drop(client);
            let released = tokio::time::timeout(HUNG, report.released())
                .await
                .expect("the report arrives")
                .expect("rmcp closed the transport");
            deleted(&released);
            assert_eq!(released.owned_client_released, !borrowed);
            world.reaped_and_checked(1).await;
        }
    });
}

#[test]
fn server_requests_reach_rmcp_and_its_answers_are_posted() {
    scenario(async {
        for borrowed in [false, true] {
            let world = World::new(
                ServerConfig::default()
                    .with_listen(ListenMode::Open)
                    .with_fault(
                        Fault::on_rpc(
                            "tools/call",
                            FaultAction::ServerRequest {
                                method: "roots/list".into(),
                                params: json!({}),
                            },
                        )
                        .times(1),
                    ),
            )
            .await;
            let (transport, report) = world.transport(borrowed);
            let client = serve(transport).await.expect("rmcp initializes");

            // On a POST's SSE answer: rmcp answers `roots/list` (no roots).
            let result = client
                .peer()
                .call_tool(CallToolRequestParams::new("tool-001"))
                .await
                .expect("tools/call");
            let structured = result.structured_content.expect("structured content");
            assert_eq!(
                structured["clientAnswer"],
                json!({"roots": []}),
                "{structured}"
            );

            // On the GET stream: a ping, answered by rmcp with a POST.
            assert!(
                eventually(HUNG, || world.server.stats().listen_streams_open == 1).await,
                "the GET stream opens"
            );
            assert_eq!(world.server.request_listeners("ping", json!({})), 1);
            assert!(
                eventually(HUNG, || world.server.client_answers().len() == 2).await,
                "{:?}",
                world.server.client_answers()
            );

            let released = cancel(client, report).await;
            deleted(&released);
            world.reaped_and_checked(1).await;
        }
    });
}

// --------------------------------------------------------- initialize

#[test]
fn initialize_answered_500_fails_with_the_status_and_leaves_nothing() {
    scenario(async {
        for borrowed in [false, true] {
            let world = World::new(
                ServerConfig::default()
                    .with_fault(Fault::on_rpc("initialize", FaultAction::status(500)).times(1)),
            )
            .await;
            let (transport, report) = world.transport(borrowed);
            let error = serve_fails(transport).await;
            let cause = ours(&error);
            assert_eq!(cause.status().map(|s| s.as_u16()), Some(500), "{error}");
            // Dropped by rmcp, never closed: released on drop.
            assert!(report.released().await.is_none());
            // No session id was issued: nothing to DELETE.
            world.reaped_and_checked(0).await;

            // A retry starts from scratch and works.
            let (transport, report) = world.transport(borrowed);
            let client = serve(transport).await.expect("the retry initializes");
            deleted(&cancel(client, report).await);
            world.reaped_and_checked(1).await;
        }
    });
}

#[test]
fn initialize_answered_with_a_jsonrpc_error_reaches_rmcp_as_one() {
    scenario(async {
        for borrowed in [false, true] {
            let world = World::new(ServerConfig::default().with_fault(
                Fault::on_rpc(
                    "initialize",
                    FaultAction::Raw {
                        status: 200,
                        content_type: "application/json".into(),
                        body: r#"{"jsonrpc":"2.0","id":{id},"error":{"code":-32602,"message":"no"}}"#
                            .into(),
                    },
                )
                .times(1),
            ))
            .await;
            let (transport, _report) = world.transport(borrowed);
            match serve_fails(transport).await {
                ClientInitializeError::JsonRpcError(error) => {
                    assert_eq!(error.code.0, -32602, "{error:?}")
                }
                other => panic!("{}: {other:?}", mode(borrowed)),
            }
            world.reaped_and_checked(0).await;
        }
    });
}

#[test]
fn an_unknown_protocol_version_fails_initialize_and_the_session_is_deleted() {
    scenario(async {
        for borrowed in [false, true] {
            let world = World::new(
                ServerConfig::default().with_fault(
                    Fault::on_rpc(
                        "initialize",
                        FaultAction::ProtocolVersion("2099-01-01".into()),
                    )
                    .times(1),
                ),
            )
            .await;
            let (transport, _report) = world.transport(borrowed);
            let error = serve_fails(transport).await;
            assert!(ours(&error).is_protocol(), "{error}");
            assert_eq!(world.server.stats().sessions_created, 1);
            world.reaped_and_checked(1).await;
            world.deletes_are_authenticated();
            assert_eq!(world.server.stats().live_sessions, 0);
        }
    });
}

#[test]
fn a_failed_initialized_notification_fails_serve_and_the_session_is_deleted() {
    scenario(async {
        for borrowed in [false, true] {
            let world = World::new(ServerConfig::default().with_fault(
                Fault::on_rpc("notifications/initialized", FaultAction::status(500)).times(1),
            ))
            .await;
            let (transport, _report) = world.transport(borrowed);
            let error = serve_fails(transport).await;
            assert_eq!(
                ours(&error).status().map(|s| s.as_u16()),
                Some(500),
                "{error}"
            );
            world.reaped_and_checked(1).await;
            world.deletes_are_authenticated();
            assert_eq!(world.server.stats().live_sessions, 0);
        }
    });
}

/// The caller walks away from rmcp's `serve` while the `initialize` POST
/// is in flight: the POST finishes in the reaper, which learns the session
/// id and DELETEs it.
#[test]
fn dropping_serve_during_initialize_deletes_the_session_it_created() {
    scenario(async {
        for borrowed in [false, true] {
            let world = World::new(
                ServerConfig::default().with_fault(
                    Fault::on_rpc("initialize", FaultAction::Delay(Duration::from_millis(300)))
                        .times(1),
                ),
            )
            .await;
            let (transport, report) = world.transport(borrowed);
            let cut = tokio::time::timeout(Duration::from_millis(50), ().serve(transport)).await;
            assert!(cut.is_err(), "initialize was still in flight");
            assert!(report.released().await.is_none(), "dropped, not closed");
            world.reaped_and_checked(1).await;
            world.deletes_are_authenticated();
            assert_eq!(world.server.stats().sessions_created, 1);
            assert_eq!(world.server.stats().live_sessions, 0);
        }
    });
}

/// The same, cut while `notifications/initialized` is in flight: the id is
/// known, the DELETE goes through the reaper.
#[test]
fn dropping_serve_during_the_initialized_notification_deletes_the_session() {
    scenario(async {
        for borrowed in [false, true] {
            let world = World::new(
                ServerConfig::default().with_fault(
                    Fault::on_rpc(
                        "notifications/initialized",
                        FaultAction::Delay(Duration::from_millis(300)),
                    )
                    .times(1),
                ),
            )
            .await;
            let (transport, _report) = world.transport(borrowed);
            // Boxed, so that dropping it drops the future itself.
            let mut serving = Box::pin(().serve(transport));
            let cut = tokio::time::timeout(Duration::from_secs(5), async {
                // Poll until the initialized notification has reached the
                // server, then walk away.
                tokio::select! {
                    _ = &mut serving => panic!("serve finished despite the delay"),
                    _ = eventually(HUNG, || !seen(&world.server, "notifications/initialized").is_empty()) => {}
                }
            })
            .await;
            assert!(cut.is_ok());
            drop(serving);
            world.reaped_and_checked(1).await;
            world.deletes_are_authenticated();
        }
    });
}

/// `initialize` hangs: the caller's deadline wins, and since the server
/// never answered, no id was issued and nothing is DELETEd; the hung POST is
/// cut off within the DELETE timeout.
#[test]
fn a_hung_initialize_is_cut_by_the_callers_deadline() {
    scenario(async {
        for borrowed in [false, true] {
            let world = World::new(
                ServerConfig::default()
                    .with_fault(Fault::on_rpc("initialize", FaultAction::Hang).times(1)),
            )
            .await;
            let (transport, _report) = world.transport(borrowed);
            let started = std::time::Instant::now();
            let cut = tokio::time::timeout(Duration::from_millis(100), ().serve(transport)).await;
            assert!(cut.is_err());
            assert!(started.elapsed() < Duration::from_secs(2));
            world.reaped_and_checked(0).await;
        }
    });
}

// ---------------------------------------------------- list_all_tools

/// 5 tools, one per page; `tools/list` page 3 (once) answered by `action`.
fn paged_with_fault_on_page_3(action: FaultAction) -> ServerConfig {
    ServerConfig::default()
        .with_tools(5)
        .with_page_size(1)
        .with_fault(Fault::on_rpc("tools/list", action).page(3).times(1))
}

/// `tools/list` fails on page 3: rmcp's `list_all_tools` gets the error (the
/// status, through `scoped_error`), the session stays usable, and cancel
/// releases everything with one DELETE.
#[test]
fn list_all_tools_failing_on_page_3_then_cancel_releases_everything() {
    scenario(async {
        for borrowed in [false, true] {
            let world = World::new(paged_with_fault_on_page_3(FaultAction::status(500))).await;
            let (transport, report) = world.transport(borrowed);
            let client = serve(transport).await.expect("rmcp initializes");
            let error = client.peer().list_all_tools().await.unwrap_err();
            let ServiceError::TransportSend(_) = &error else {
                panic!("{}: {error:?}", mode(borrowed));
            };
            assert_eq!(ours(&error).status().map(|s| s.as_u16()), Some(500));
            assert_eq!(seen(&world.server, "tools/list").len(), 3);
            // One request's failure is that request's only.
            call(&client, "tool-004").await;

            let released = cancel(client, report).await;
            deleted(&released);
            assert_eq!(released.owned_client_released, !borrowed);
            world.reaped_and_checked(1).await;
        }
    });
}

/// Page 3's SSE answer ends without the response: the request resolves with
/// a JSON-RPC error naming the cause instead of waiting forever.
#[test]
fn a_page_whose_answer_ends_without_the_response_resolves_as_an_error() {
    scenario(async {
        for borrowed in [false, true] {
            let world = World::new(
                paged_with_fault_on_page_3(FaultAction::SseEndWithoutResponse)
                    .with_response_mode(ResponseMode::Sse),
            )
            .await;
            let (transport, report) = world.transport(borrowed);
            let client = serve(transport).await.expect("rmcp initializes");
            let error = tokio::time::timeout(HUNG, client.peer().list_all_tools())
                .await
                .expect("the request resolves")
                .unwrap_err();
            let ServiceError::McpError(rpc) = &error else {
                panic!("{}: {error:?}", mode(borrowed));
            };
            assert_eq!(rpc.code.0, -32603);
            assert!(
                rpc.message.contains("ended without the response"),
                "{rpc:?}"
            );
            let released = cancel(client, report).await;
            deleted(&released);
            world.reaped_and_checked(1).await;
        }
    });
}

/// The caller drops `list_all_tools` half-way (page 3 hangs), then cancels:
/// the hung reader is stopped, one DELETE, nothing left.
#[test]
fn list_all_tools_dropped_on_a_hung_page_then_cancel_releases_everything() {
    scenario(async {
        for borrowed in [false, true] {
            let world = World::new(
                paged_with_fault_on_page_3(FaultAction::Hang).with_response_mode(ResponseMode::Sse),
            )
            .await;
            let (transport, report) = world.transport(borrowed);
            let client = serve(transport).await.expect("rmcp initializes");
            let cut =
                tokio::time::timeout(Duration::from_millis(300), client.peer().list_all_tools())
                    .await;
            assert!(cut.is_err(), "page 3 hangs");
            let released = cancel(client, report).await;
            deleted(&released);
            world.reaped_and_checked(1).await;
        }
    });
}

/// A client whose answer to a server `ping` never comes, until the service
/// ends. (rmcp runs each handler as a detached task: one that ignores its
/// cancellation token outlives the service.)
#[derive(Clone)]
struct Stalling;

impl rmcp::ClientHandler for Stalling {
    async fn ping(
        &self,
        context: rmcp::service::RequestContext<RoleClient>,
    ) -> Result<(), rmcp::ErrorData> {
        context.ct.cancelled().await;
        Err(rmcp::ErrorData::internal_error("the client closed", None))
    }
}

/// rmcp is closed while page 3's answer is being read (the server sent a
/// `ping` on it and waits for an answer that never comes): the reader of
/// that answer is stopped with the session, the pending `list_all_tools`
/// resolves, one DELETE.
#[test]
fn cancel_while_a_page_is_being_read_stops_its_reader() {
    scenario(async {
        for borrowed in [false, true] {
            let world = World::new(paged_with_fault_on_page_3(FaultAction::ServerRequest {
                method: "ping".into(),
                params: json!({}),
            }))
            .await;
            // No GET listener: the only background task left is the reader.
            let (transport, report) = world.transport_with(borrowed, |b| b.listen(false));
            let client = tokio::time::timeout(HUNG, Stalling.serve(transport))
                .await
                .expect("serve hung")
                .expect("rmcp initializes");
            let peer = client.peer().clone();
            let listing = tokio::spawn(async move { peer.list_all_tools().await });
            assert!(
                eventually(HUNG, || seen(&world.server, "tools/list").len() == 3).await,
                "page 3 requested"
            );
            let released = tokio::time::timeout(HUNG, client.cancel())
                .await
                .expect("cancel hung")
                .map(|_| ());
            released.expect("the service task ends");
            let released = report.released().await.expect("closed");
            deleted(&released);
            assert!(released.tasks_stopped >= 1, "page 3's reader: {released:?}");
            let outcome = tokio::time::timeout(HUNG, listing)
                .await
                .expect("list_all_tools resolves")
                .expect("the task ends");
            assert!(outcome.is_err(), "{outcome:?}");
            world.reaped_and_checked(1).await;
        }
    });
}

/// The release order: the GET listener is stopped before the DELETE is
/// sent (the DELETE is held by the server for a while, and the listening
/// stream is already gone during it).
#[test]
fn the_listener_stops_before_the_delete() {
    scenario(async {
        for borrowed in [false, true] {
            let world = World::new(
                ServerConfig::default()
                    .with_listen(ListenMode::Open)
                    .with_fault(
                        Fault::on_http(Method::DELETE, FaultAction::Delay(Duration::from_secs(1)))
                            .times(1),
                    ),
            )
            .await;
            let (transport, report) = world.transport(borrowed);
            let client = serve(transport).await.expect("rmcp initializes");
            assert!(
                eventually(HUNG, || world.server.stats().listen_streams_open == 1).await,
                "the GET stream opens"
            );
            let closing = tokio::spawn(client.cancel());
            assert!(
                eventually(HUNG, || world.server.stats().deletes == 1).await,
                "the DELETE arrives"
            );
            // The server holds the DELETE for 1 s; had the listener been
            // left for after it, its stream would stay open that long.
            assert!(
                eventually(Duration::from_millis(500), || world
                    .server
                    .stats()
                    .listen_streams_open
                    == 0)
                .await,
                "{}: the listening stream outlived the DELETE",
                mode(borrowed)
            );
            closing
                .await
                .expect("cancel")
                .expect("the service task ends");
            deleted(&report.released().await.expect("closed"));
            world.reaped_and_checked(1).await;
        }
    });
}

/// 401 on rmcp's `initialize`: the error carries the status and the
/// challenge; no retry; another session on the same borrowed client keeps
/// its own header and works on.
#[test]
fn initialize_answered_401_carries_the_challenge_and_spares_other_sessions() {
    scenario(async {
        let world = World::new(ServerConfig::default()).await;
        // Another session on the caller's client, with its own token.
        let mut other = ScopedTransport::builder(world.server.url())
            .client(world.caller.client.clone())
            .header("x-session-hook", "other")
            .build()
            .unwrap();
        let other_report = other.release_report();
        let other = serve(other).await.expect("the other session");

        world.server.push_fault(
            Fault::on_rpc(
                "initialize",
                FaultAction::unauthorized("Bearer realm=\"mcp\""),
            )
            .times(1),
        );
        let (transport, _report) = world.transport(true);
        let error = serve_fails(transport).await;
        let cause = ours(&error);
        assert_eq!(cause.status().map(|s| s.as_u16()), Some(401), "{error}");
        assert_eq!(cause.www_authenticate(), Some("Bearer realm=\"mcp\""));
        assert_eq!(seen(&world.server, "initialize").len(), 2, "no retry");

        // The other session's hook is still there, and still its own.
        assert_eq!(world.our_hooks(), 1);
        world.server.clear_requests();
        call(&other, "tool-002").await;
        let ours_now: Vec<_> = world
            .server
            .requests()
            .into_iter()
            .filter(|r| r.header("x-caller").is_none())
            .collect();
        assert!(!ours_now.is_empty());
        for request in ours_now {
            assert_eq!(request.header("x-session-hook"), Some("other"));
            assert_eq!(request.header("authorization"), None, "not our token");
        }
        deleted(&cancel(other, other_report).await);
        world.reaped_and_checked(1).await;
    });
}

/// The runtime shuts down under a live rmcp session (rmcp's service task is
/// dropped with our transport in it): no panic, no hang; hooks are removed
/// from the borrowed client and the owned client is dropped anyway; the
/// DELETE, which no runtime can send any more, is counted as abandoned.
#[test]
fn runtime_shutdown_under_a_live_rmcp_session_releases_what_it_can() {
    scenario(async {
        for borrowed in [false, true] {
            let world = World::new(ServerConfig::default()).await;
            let (transport, report) = world.transport(borrowed);
            let abandoned = mcp_scoped_http::abandoned_deletes();
            // The other runtime runs on its own thread while this one keeps
            // running: the caller's pooled connection lives here.
            let (done, hooks_during) = tokio::sync::oneshot::channel();
            let thread = std::thread::spawn(move || {
                let runtime = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(1)
                    .enable_all()
                    .build()
                    .unwrap();
                let (client, hooks) = runtime.block_on(async {
                    let client = ().serve(transport).await.expect("rmcp initializes");
                    (client, mcp_scoped_http::ledger().hooks)
                });
                // Kept alive past the runtime: rmcp's task goes with it.
                drop(runtime);
                drop(client);
                let _ = done.send(hooks);
            });
            let hooks_during = tokio::time::timeout(HUNG, hooks_during)
                .await
                .expect("the other runtime shuts down")
                .expect("no panic during runtime shutdown");
            thread.join().expect("no panic");
            assert!(hooks_during >= 1);
            assert!(report.released().await.is_none(), "never closed");
            assert_eq!(mcp_scoped_http::abandoned_deletes(), abandoned + 1);
            world.reaped_and_checked(0).await;
        }
    });
}

/// Many concurrent rmcp calls on one session, answered as JSON or SSE:
/// each caller gets its own result.
#[test]
fn concurrent_calls_each_get_their_own_result() {
    scenario(async {
        for (borrowed, response_mode) in [(false, ResponseMode::Sse), (true, ResponseMode::Json)] {
            let world = World::new(
                ServerConfig::default()
                    .with_tools(8)
                    .with_response_mode(response_mode),
            )
            .await;
            let (transport, report) = world.transport(borrowed);
            let client = serve(transport).await.expect("rmcp initializes");
            let mut calls = tokio::task::JoinSet::new();
            for i in 0..24 {
                let peer = client.peer().clone();
                calls.spawn(async move {
                    let tool = format!("tool-{:03}", i % 8);
                    let result = peer
                        .call_tool(CallToolRequestParams::new(tool.clone()))
                        .await
                        .expect("tools/call");
                    (
                        tool,
                        result.structured_content.expect("structured")["tool"].clone(),
                    )
                });
            }
            while let Some(joined) = calls.join_next().await {
                let (tool, answered) = joined.expect("the call task");
                assert_eq!(answered, tool.as_str(), "{}", mode(borrowed));
            }
            deleted(&cancel(client, report).await);
            world.reaped_and_checked(1).await;
        }
    });
}

/// The first `tools/call` is answered with `body` (HTTP 200, JSON): that
/// call resolves at once with a JSON-RPC error, whose code is returned;
/// the next call works and the session ends back at baseline.
async fn first_call_answered_with(body: String, borrowed: bool, label: &str) -> i32 {
    let world = World::new(
        ServerConfig::default().with_fault(
            Fault::on_rpc(
                "tools/call",
                FaultAction::Raw {
                    status: 200,
                    content_type: "application/json".into(),
                    body: body.into(),
                },
            )
            .times(1),
        ),
    )
    .await;
    let (transport, report) = world.transport(borrowed);
    let client = serve(transport).await.expect("rmcp initializes");
    let error = tokio::time::timeout(
        Duration::from_secs(5),
        client
            .peer()
            .call_tool(CallToolRequestParams::new("tool-000")),
    )
    .await
    .unwrap_or_else(|_| panic!("{label}: the call was never resolved"))
    .unwrap_err();
    let ServiceError::McpError(rpc) = &error else {
        panic!("{label}: {error:?}");
    };
    call(&client, "tool-001").await;
    deleted(&cancel(client, report).await);
    world.reaped_and_checked(1).await;
    rpc.code.0
}

/// The server answers a call with an id-less JSON-RPC error (it could not
/// read the request): that call resolves with it, at once, and the next
/// call works.
#[test]
fn an_id_less_error_on_a_calls_answer_resolves_that_call() {
    scenario(async {
        for borrowed in [false, true] {
            let body =
                r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse error"}}"#;
            let code = first_call_answered_with(body.into(), borrowed, mode(borrowed)).await;
            assert_eq!(code, -32700);
        }
    });
}

/// The server answers a call with a result that is JSON (kept as text by
/// the engine) but not a `serde_json::Value` (a number beyond `f64`, a lone
/// surrogate): that call still resolves, with an error, at once, and the
/// next call works.
#[test]
fn a_result_no_value_can_hold_resolves_that_call_with_an_error() {
    scenario(async {
        for result in [
            r#"{"content":[],"n":1e400}"#,
            r#"{"content":[{"type":"text","text":"\ud800"}]}"#,
        ] {
            let body = format!(r#"{{"jsonrpc":"2.0","id":{{id}},"result":{result}}}"#);
            let code = first_call_answered_with(body, false, result).await;
            assert_eq!(code, -32603, "{result}");
        }
    });
}

// --------------------------------------- expiry, attach, initialize streamed

/// The server expires the session rmcp's handshake created: the transport
/// opens a new one through the guard stack (rmcp never sees it), the call
/// that met the 404 is sent again and succeeds, and at the end every
/// session the server created is ended exactly once.
#[test]
fn an_expired_session_is_replaced_and_the_call_goes_through() {
    scenario(async {
        for borrowed in [false, true] {
            let world = World::new(ServerConfig::default().with_listen(ListenMode::Open)).await;
            let (transport, report) = world.transport(borrowed);
            let client = serve(transport).await.expect("serve");
            let first = seen(&world.server, "initialize");
            world.server.expire_sessions();
            call(&client, "tool-001").await;
            let initializes = seen(&world.server, "initialize");
            assert_eq!(initializes.len(), 2, "{}: one new session", mode(borrowed));
            // rmcp's own initialize params, our own id: rmcp saw no answer.
            assert_eq!(
                initializes[1].body.as_ref().unwrap()["params"],
                first[0].body.as_ref().unwrap()["params"]
            );
            assert!(initializes[1].body.as_ref().unwrap()["id"].is_string());
            assert!(initializes[1].header("mcp-session-id").is_none());
            // The new session got its handshake and its listener.
            assert_eq!(seen(&world.server, "notifications/initialized").len(), 2);
            assert!(
                eventually(HUNG, || world.server.stats().listen_streams_open == 1).await,
                "{}: a listener on the new session",
                mode(borrowed)
            );
            let released = cancel(client, report).await;
            deleted(&released);
            assert!(
                matches!(released.earlier_sessions[..], [SessionRelease::Expired]),
                "{released:?}"
            );
            assert_each_session_deleted_once(&world.server, mode(borrowed)).await;
            world.deletes_are_authenticated();
            world.reaped_and_checked(1).await;
        }
    });
}

/// Attached to a session the caller owns, rmcp runs without a handshake
/// (`serve_directly`): no initialize, no DELETE, and the caller's session
/// still works afterwards.
#[test]
fn an_attached_transport_runs_rmcp_on_the_callers_session() {
    scenario(async {
        for borrowed in [false, true] {
            let world = World::new(ServerConfig::default()).await;
            let owner = mcp_scoped_http::Connector::new(world.server.url())
                .listen(false)
                .connect()
                .await
                .expect("the caller's own session");
            let id = owner.session_id().expect("an id");
            let (transport, report) =
                world.transport_with(borrowed, |b| b.attach(id.clone(), owner.protocol_version()));
            assert_eq!(transport.session_id(), Some(id.clone()));
            let client = rmcp::service::serve_directly((), transport, None);
            let tools = tokio::time::timeout(HUNG, client.peer().list_all_tools())
                .await
                .expect("hung")
                .expect("tools/list on the caller's session");
            assert_eq!(tools.len(), 3);
            call(&client, "tool-000").await;
            assert_eq!(
                seen(&world.server, "initialize").len(),
                1,
                "never initialized"
            );
            // The caller's own connect: the era probe, initialize, initialized.
            for post in seen_http(&world.server, Method::POST).iter().skip(3) {
                assert_eq!(post.header("mcp-session-id"), Some(id.expose()));
            }
            let released = cancel(client, report).await;
            assert!(
                matches!(released.session, SessionRelease::NotOwned),
                "{released:?}"
            );
            assert_eq!(
                world.server.stats().deletes,
                0,
                "the caller's session stays"
            );
            owner
                .call_tool("tool-002", json!({}))
                .await
                .expect("still works");
            owner.close().await;
            world.reaped_and_checked(1).await;
        }
    });
}

/// `serve` (which sends `initialize`) on an attached transport is refused:
/// the caller's session is never replaced.
#[test]
fn initialize_on_an_attached_transport_is_refused() {
    scenario(async {
        let world = World::new(ServerConfig::default()).await;
        let owner = mcp_scoped_http::Connector::new(world.server.url())
            .listen(false)
            .connect()
            .await
            .unwrap();
        let id = owner.session_id().unwrap();
        let (transport, _report) =
            world.transport_with(true, |b| b.attach(id.clone(), owner.protocol_version()));
        let error = serve_fails(transport).await;
        let cause = ours(&error);
        assert!(cause.is_builder(), "{error}");
        assert!(cause.to_string().contains("serve_directly"), "{cause}");
        assert_eq!(seen(&world.server, "initialize").len(), 1);
        assert_eq!(owner.session_id(), Some(id));
        owner.close().await;
        world.reaped_and_checked(1).await;
    });
}

/// Attaching needs a 2025 session: 2026-07-28 has none and HTTP+SSE none
/// that can be named. Refused at `build`, before anything is acquired.
#[test]
fn attaching_to_a_revision_without_sessions_is_refused_at_build() {
    let _shared = crate::support::shared();
    let id = mcp_scoped_http::SessionId::new("s-1").expect("an id");
    for version in [ProtocolVersion::V2026_07_28, ProtocolVersion::V2024_11_05] {
        let error = ScopedTransport::builder("http://127.0.0.1:9/mcp")
            .attach(id.clone(), version)
            .build()
            .expect_err("no session to attach to");
        assert!(error.is_builder(), "{error}");
        assert!(error.to_string().contains("2025 revision"), "{error}");
    }
}

/// A server that asks rmcp something (a `ping`) on the `initialize` answer
/// and waits for the reply before sending the result: the answer is handed
/// to rmcp as it comes, so rmcp replies and the handshake completes, at
/// once, not after the server gives up.
#[test]
fn a_server_request_before_the_initialize_result_is_answered_at_once() {
    scenario(async {
        for borrowed in [false, true] {
            let world = World::new(
                ServerConfig::default().with_fault(
                    Fault::on_rpc(
                        "initialize",
                        FaultAction::ServerRequest {
                            method: "ping".into(),
                            params: json!({}),
                        },
                    )
                    .times(1),
                ),
            )
            .await;
            let (transport, report) = world.transport(borrowed);
            let started = std::time::Instant::now();
            let client = serve(transport).await.expect("serve");
            // The server gives up on its ping after 10 s.
            assert!(
                started.elapsed() < Duration::from_secs(8),
                "{}: waited {:?}",
                mode(borrowed),
                started.elapsed()
            );
            let answers = world.server.client_answers();
            assert_eq!(answers.len(), 1, "rmcp answered the ping: {answers:?}");
            let answer = seen_http(&world.server, Method::POST)
                .into_iter()
                .find(|r| r.rpc_method.is_none())
                .expect("the ping's answer was POSTed");
            assert!(answer.header("mcp-session-id").is_some(), "on the session");
            call(&client, "tool-000").await;
            deleted(&cancel(client, report).await);
            world.reaped_and_checked(1).await;
        }
    });
}

/// A server request (a `ping`) on the `initialize` answer of the session
/// that replaces an expired one: rmcp's answer goes out on that new session
/// at once, so the server, which holds the `initialize` result until it has
/// the answer, lets the renewal finish and the call goes through.
#[test]
fn a_server_request_on_a_renewals_initialize_answer_is_answered_at_once() {
    scenario(async {
        for borrowed in [false, true] {
            let world = World::new(ServerConfig::default()).await;
            let (transport, report) = world.transport(borrowed);
            let client = serve(transport).await.expect("serve");
            world.server.push_fault(
                Fault::on_rpc(
                    "initialize",
                    FaultAction::ServerRequest {
                        method: "ping".into(),
                        params: json!({}),
                    },
                )
                .times(1),
            );
            world.server.expire_sessions();
            let started = std::time::Instant::now();
            call(&client, "tool-001").await;
            // The server gives up on its ping after 10 s.
            assert!(
                started.elapsed() < Duration::from_secs(8),
                "{}: the renewal waited {:?} for rmcp's answer",
                mode(borrowed),
                started.elapsed()
            );
            assert_eq!(seen(&world.server, "initialize").len(), 2);
            let answers = world.server.client_answers();
            assert_eq!(answers.len(), 1, "rmcp answered the ping: {answers:?}");
            let new = world
                .server
                .session_log()
                .last()
                .expect("the new session")
                .id
                .clone();
            let answer = seen_http(&world.server, Method::POST)
                .into_iter()
                .find(|r| r.rpc_method.is_none())
                .expect("the ping's answer was POSTed");
            assert_eq!(answer.header("mcp-session-id"), Some(new.as_str()));
            deleted(&cancel(client, report).await);
            assert_each_session_deleted_once(&world.server, mode(borrowed)).await;
            world.reaped_and_checked(1).await;
        }
    });
}

/// rmcp gives up on a call (its future dropped at the caller's deadline:
/// rmcp sends `notifications/cancelled`) whose answer the server holds
/// open without end, ignoring the cancellation. The transport stops
/// reading that answer: its task and connection go now, not when the
/// transport closes, so a long session against such a server does not
/// pile them up.
#[test]
fn a_call_rmcp_gives_up_on_is_read_no_more() {
    scenario(async {
        for borrowed in [false, true] {
            let world = World::new(ServerConfig::default()).await;
            let idle = mcp_scoped_http::ledger().tasks;
            let (transport, report) = world.transport_with(borrowed, |b| b.listen(false));
            let client = serve(transport).await.expect("serve");
            assert!(
                eventually(HUNG, || mcp_scoped_http::ledger().tasks == idle).await,
                "the initialize reader ends"
            );
            for round in 0..3 {
                world
                    .server
                    .push_fault(Fault::on_rpc("tools/call", FaultAction::SseStall).times(1));
                let stalled = client
                    .peer()
                    .call_tool(CallToolRequestParams::new("tool-000"));
                assert!(
                    tokio::time::timeout(Duration::from_millis(200), stalled)
                        .await
                        .is_err(),
                    "the stalled call answered"
                );
                assert!(
                    eventually(HUNG, || world.server.cancelled().len() == round + 1).await,
                    "rmcp cancelled the call"
                );
                assert!(
                    eventually(Duration::from_secs(5), || mcp_scoped_http::ledger().tasks
                        == idle)
                    .await,
                    "{}, round {round}: the cancelled call's reader still runs: {:?}",
                    mode(borrowed),
                    mcp_scoped_http::ledger()
                );
            }
            call(&client, "tool-001").await;
            deleted(&cancel(client, report).await);
            world.reaped_and_checked(1).await;
        }
    });
}

/// The same, with the server holding even the head of the call's answer
/// (the POST still in flight when rmcp gives up): the transport's send of
/// that request ends too, rather than holding rmcp's send task and the
/// connection until the transport closes.
#[test]
fn a_call_rmcp_gives_up_on_before_its_answer_began_is_sent_no_more() {
    scenario(async {
        for borrowed in [false, true] {
            let world = World::new(ServerConfig::default()).await;
            let (transport, report) = world.transport_with(borrowed, |b| b.listen(false));
            let client = serve(transport).await.expect("serve");
            let idle =
                || support::baseline::alive_tasks().saturating_sub(world.caller.live_tasks());
            call(&client, "tool-000").await;
            let before = idle();
            world
                .server
                .push_fault(Fault::on_rpc("tools/call", FaultAction::HangDeaf).times(1));
            let held = client
                .peer()
                .call_tool(CallToolRequestParams::new("tool-000"));
            assert!(
                tokio::time::timeout(Duration::from_millis(200), held)
                    .await
                    .is_err(),
                "the held call answered"
            );
            assert!(
                eventually(HUNG, || world.server.cancelled().len() == 1).await,
                "rmcp cancelled the call"
            );
            assert!(
                eventually(Duration::from_secs(5), || idle() <= before).await,
                "{}: the cancelled call is still being sent: {} tasks, {before} before",
                mode(borrowed),
                idle()
            );
            call(&client, "tool-001").await;
            deleted(&cancel(client, report).await);
            world.reaped_and_checked(1).await;
        }
    });
}

/// `value` as a message rmcp's client sends.
fn rmcp_message(value: serde_json::Value) -> rmcp::service::TxJsonRpcMessage<RoleClient> {
    serde_json::from_value(value).expect("an rmcp message")
}

/// What rmcp's client does first, by hand on `transport` (rmcp's loop not
/// running): `initialize`, its answer, `notifications/initialized`.
async fn initialize_by_hand(transport: &mut ScopedTransport) {
    use rmcp::transport::Transport;
    transport
        .send(rmcp_message(
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                       "clientInfo": {"name": "by-hand", "version": "1"}}}),
        ))
        .await
        .expect("initialize sent");
    let answer = tokio::time::timeout(HUNG, transport.receive()).await;
    assert!(matches!(answer, Ok(Some(_))), "{answer:?}");
    transport
        .send(rmcp_message(
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        ))
        .await
        .expect("initialized sent");
}

/// Issue 20 (hostile review): what waits for rmcp's `receive` was bounded
/// by count only (64), each message kept parsed. Driven by hand (rmcp's
/// loop, busy elsewhere, has not called `receive`), the GET stream brings
/// 10 notifications of 100 000 `0`s (4 MiB each once parsed), then a small
/// one and its end. The queue holds at most 16 MiB: three of the big ones
/// wait, the others are dropped (the listener read on, and reconnected),
/// and the small one still arrives.
#[test]
fn what_waits_for_receive_is_bounded_in_bytes() {
    use rmcp::transport::Transport;
    scenario(async {
        let world = World::new(ServerConfig::default().with_listen(ListenMode::Open)).await;
        let (mut transport, report) = world.transport(false);
        initialize_by_hand(&mut transport).await;
        let probe = json!({"jsonrpc": "2.0", "method": "notifications/message",
                           "params": {"level": "info", "data": "probe"}});
        assert!(
            eventually(HUNG, || world.server.notify_listeners(&probe) > 0).await,
            "no listening stream"
        );
        let big = json!({"jsonrpc": "2.0", "method": "notifications/message",
                         "params": {"level": "info", "data": vec![0; 100_000]}});
        for _ in 0..10 {
            assert_eq!(world.server.notify_listeners(&big), 1);
        }
        drop(big);
        let last = json!({"jsonrpc": "2.0", "method": "notifications/message",
                          "params": {"level": "info", "data": "last"}});
        world.server.cut_listeners_after(&last);
        // The listener reconnects once it has read (and queued or dropped)
        // everything the first stream brought.
        assert!(
            eventually(HUNG, || seen_http(&world.server, Method::GET).len() >= 2).await,
            "the listener did not read its stream to the end"
        );
        let (mut bigs, mut got_last) = (0, false);
        while !got_last {
            let received = tokio::time::timeout(HUNG, transport.receive())
                .await
                .expect("the last notification")
                .expect("the transport is open");
            let text = serde_json::to_string(&received).unwrap();
            bigs += usize::from(text.len() > 100_000);
            got_last = text.contains("\"last\"");
        }
        assert!(
            bigs <= 4,
            "{bigs} notifications of 4 MiB (parsed) waited for receive"
        );
        transport.close().await.expect("closes");
        deleted(&report.released().await.expect("closed"));
        world.reaped_and_checked(1).await;
    });
}

/// Issue 26 (review): server requests answered aside (at most 16 at once,
/// so a slow answer never holds up its stream) overtook the notifications
/// behind them through the rmcp adapter, whose front end only queues them
/// for rmcp: a `notifications/cancelled` reached rmcp before the request it
/// cancels, which rmcp then ran to the end. They reach `receive` in the
/// order the server sent them.
#[test]
fn a_server_request_and_the_cancellation_behind_it_keep_their_order() {
    use rmcp::transport::Transport;
    scenario(async {
        // One body, so that both come in one read: nothing between them
        // lets an answering task run first.
        let body = concat!(
            r#"data: {"jsonrpc":"2.0","id":"ask-1","method":"ping"}"#,
            "\n\n",
            r#"data: {"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"ask-1"}}"#,
            "\n\n",
            r#"data: {"jsonrpc":"2.0","id":{id},"result":{"content":[]}}"#,
            "\n\n",
        );
        let world = World::new(ServerConfig::default().with_fault(Fault::on_rpc(
            "tools/call",
            FaultAction::Raw {
                status: 200,
                content_type: "text/event-stream".into(),
                body: body.into(),
            },
        )))
        .await;
        let (mut transport, report) = world.transport(false);
        initialize_by_hand(&mut transport).await;
        transport
            .send(rmcp_message(
                json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                                 "params": {"name": "tool-001"}}),
            ))
            .await
            .expect("tools/call sent");
        let mut order = Vec::new();
        while order.len() < 3 {
            let received = tokio::time::timeout(HUNG, transport.receive())
                .await
                .expect("all three reach receive")
                .expect("the transport is open");
            let text = serde_json::to_string(&received).unwrap();
            order.push(if text.contains("cancelled") {
                "cancel"
            } else if text.contains("ask-1") {
                "request"
            } else {
                "response"
            });
        }
        assert_eq!(order, ["request", "cancel", "response"]);
        transport.close().await.expect("closes");
        deleted(&report.released().await.expect("closed"));
        world.reaped_and_checked(1).await;
    });
}

// ------------------------------------------------------------- eras

/// The revision rmcp was told the server speaks.
fn rmcp_version<S: rmcp::Service<RoleClient>>(client: &RunningService<RoleClient, S>) -> String {
    client
        .peer()
        .peer_info()
        .expect("the server's info")
        .protocol_version
        .to_string()
}

/// A test kit server of `eras` with 7 tools, 2 a page.
fn of_era(eras: Eras) -> ServerConfig {
    ServerConfig::default()
        .with_eras(eras)
        .with_tools(7)
        .with_page_size(2)
        .with_listen(ListenMode::Open)
}

/// What closing released in `eras`: a DELETE in 2025; in 2026-07-28 no
/// session at all; over HTTP+SSE no session id (the session ended with
/// its stream). Nothing to DELETE but in 2025.
fn released_as(eras: Eras, released: &Released) {
    match eras {
        Eras::Streamable2025 => deleted(released),
        Eras::HttpSse => assert!(
            matches!(released.session, SessionRelease::NoSessionId),
            "{eras}: {released:?}"
        ),
        _ => assert!(
            matches!(released.session, SessionRelease::Stateless),
            "{eras}: {released:?}"
        ),
    }
}

/// rmcp's `initialize` against a server of each era, found by detection:
/// 2026-07-28 answered from `server/discover` (and every later request a
/// 2026-07-28 one: `_meta`, the headers, no session, no GET or DELETE),
/// 2025 with rmcp's own `initialize`, 2024-11-05 over HTTP+SSE. Each lists
/// every page, calls a tool and closes, leaving nothing behind.
#[test]
fn rmcp_reaches_a_server_of_every_era() {
    scenario(async {
        for (eras, borrowed) in [
            Eras::Modern,
            Eras::ModernAnd2025,
            Eras::Streamable2025,
            Eras::HttpSse,
        ]
        .into_iter()
        .flat_map(|eras| [(eras, false), (eras, true)])
        {
            let label = format!("{eras}, {}", mode(borrowed));
            let world = World::new(of_era(eras)).await;
            let (transport, report) = world.transport(borrowed);
            let client = serve(transport).await.expect("rmcp initializes");
            let want = match eras {
                Eras::Modern | Eras::ModernAnd2025 => "2026-07-28",
                Eras::Streamable2025 => "2025-11-25",
                _ => "2024-11-05",
            };
            assert_eq!(rmcp_version(&client), want, "{label}");
            if eras == Eras::HttpSse {
                // A server of both may answer a newer revision, which has
                // no initialize over HTTP+SSE.
                let initialize = seen(&world.server, "initialize");
                let proposed =
                    &initialize.last().expect("initialize").params().unwrap()["protocolVersion"];
                assert_eq!(proposed, "2024-11-05", "{label}");
            }
            let tools = client.peer().list_all_tools().await.expect("every page");
            assert_eq!(tools.len(), 7, "{label}");
            assert_eq!(seen(&world.server, "tools/list").len(), 4, "{label}");
            call(&client, "tool-005").await;
            assert_eq!(
                seen(&world.server, "server/discover").len(),
                1,
                "{label}: probed once"
            );
            if want == "2026-07-28" {
                assert!(seen(&world.server, "initialize").is_empty(), "{label}");
                assert!(
                    seen(&world.server, "notifications/initialized").is_empty(),
                    "{label}: rmcp's notification is not sent in 2026-07-28"
                );
                for request in seen_http(&world.server, Method::POST) {
                    if request.header("x-caller").is_some() {
                        continue;
                    }
                    let method = request.rpc_method.clone().expect("a request");
                    assert_eq!(
                        request.header("mcp-protocol-version"),
                        Some("2026-07-28"),
                        "{label}: {request:?}"
                    );
                    assert_eq!(request.mcp_method(), Some(method.as_str()), "{label}");
                    assert_eq!(request.meta_protocol_version(), Some("2026-07-28"));
                    assert_eq!(
                        request.meta_client_info().map(|i| i["name"].clone()),
                        Some(json!("rmcp")),
                        "{label}: rmcp's clientInfo in _meta"
                    );
                    assert!(request.header("mcp-session-id").is_none(), "{label}");
                    if method == "tools/call" {
                        assert_eq!(request.header("mcp-name"), Some("tool-005"));
                    }
                }
                assert!(seen_http(&world.server, Method::GET).is_empty(), "{label}");
                // The server's list changes come on `subscriptions/listen`.
                assert!(
                    eventually(HUNG, || world.server.stats().subscriptions_open == 1).await,
                    "{label}: {:?}",
                    world.server.stats()
                );
            }
            let released = cancel(client, report).await;
            released_as(eras, &released);
            assert_eq!(released.owned_client_released, !borrowed, "{label}");
            if eras == Eras::HttpSse {
                assert!(
                    eventually(HUNG, || world.server.stats().live_sessions == 0).await,
                    "{label}: the stream (the session) ended"
                );
            }
            let deletes = usize::from(eras == Eras::Streamable2025);
            world.reaped_and_checked(deletes).await;
            if deletes == 1 {
                world.deletes_are_authenticated();
            }
        }
    });
}

/// rmcp's `initialize` refused with `-32022` naming 2026-07-28 (its probe
/// was answered with a bare 404, which says "not this era"): the refusal
/// is a redirection, followed as a `Session` follows it, in the same
/// handshake: rmcp speaks 2026-07-28.
#[test]
fn an_initialize_refused_naming_2026_is_followed() {
    scenario(async {
        let refusal = r#"{"jsonrpc":"2.0","id":{id},"error":{"code":-32022,"message":"Unsupported protocol version","data":{"supported":["2026-07-28"],"requested":"2025-11-25"}}}"#;
        let world = World::new(of_era(Eras::Modern).with_faults(vec![
            Fault::on_rpc("server/discover", FaultAction::status(404)).times(1),
            Fault::on_rpc(
                "initialize",
                FaultAction::raw(400, "application/json", refusal),
            ),
        ]))
        .await;
        let (transport, report) = world.transport(false);
        let client = serve(transport).await.expect("the refusal is followed");
        assert_eq!(rmcp_version(&client), "2026-07-28");
        assert_eq!(seen(&world.server, "server/discover").len(), 2);
        assert_eq!(seen(&world.server, "initialize").len(), 1);
        call(&client, "tool-001").await;
        let released = cancel(client, report).await;
        released_as(Eras::Modern, &released);
        world.reaped_and_checked(0).await;
    });
}

/// An rmcp client that accepts every elicitation and counts them.
#[derive(Clone, Default)]
struct Confirms {
    asked: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl rmcp::ClientHandler for Confirms {
    fn get_info(&self) -> rmcp::model::ClientConfig {
        rmcp::model::ClientConfig::new(
            // Sampling declared, but not handled: rmcp's default refuses it.
            serde_json::from_value(json!({"elicitation": {}, "sampling": {}}))
                .expect("capabilities"),
            rmcp::model::Implementation::new("confirms", "1.0.0"),
        )
    }

    async fn create_elicitation(
        &self,
        _request: rmcp::model::ElicitRequestParams,
        _context: rmcp::service::RequestContext<RoleClient>,
    ) -> Result<rmcp::model::ElicitResult, rmcp::ErrorData> {
        self.asked.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(
            rmcp::model::ElicitResult::new(rmcp::model::ElicitationAction::Accept)
                .with_content(json!({"ok": true})),
        )
    }
}

/// A 2026-07-28 tool that asks for input in its result (multi round-trip):
/// rmcp's `call_tool` answers each input request through its
/// `ClientHandler` (an elicitation) and sends the request again with the
/// answers; one that asks for what rmcp's handler cannot give (sampling,
/// which `Confirms` declares but does not handle) is refused with rmcp's
/// error, and one that
/// never stops asking is cut off by rmcp's round limit. The transport
/// hands each `input_required` result to rmcp as it came.
#[test]
fn multi_round_trip_input_is_answered_through_rmcps_handler() {
    scenario(async {
        for borrowed in [false, true] {
            let world = World::new(
                ServerConfig::default()
                    .with_eras(Eras::Modern)
                    .with_tool(TestTool::input_required(
                        "ask",
                        InputRequest::Elicitation,
                        2,
                    ))
                    .with_tool(TestTool::input_required(
                        "sample",
                        InputRequest::Sampling,
                        1,
                    ))
                    .with_tool(TestTool::input_required_forever(
                        "nag",
                        InputRequest::Elicitation,
                    )),
            )
            .await;
            let (transport, report) = world.transport(borrowed);
            let handler = Confirms::default();
            let client = tokio::time::timeout(HUNG, handler.clone().serve(transport))
                .await
                .expect("serve hung")
                .expect("rmcp initializes");
            let result = client
                .call_tool(
                    CallToolRequestParams::new("ask")
                        .with_arguments(json!({"text": "go"}).as_object().unwrap().clone()),
                )
                .await
                .expect("completes after two rounds");
            assert_ne!(result.is_error, Some(true), "{result:?}");
            assert_eq!(handler.asked.load(std::sync::atomic::Ordering::SeqCst), 2);
            let calls = seen(&world.server, "tools/call");
            assert_eq!(calls.len(), 3);
            assert_eq!(
                calls[0]
                    .meta_client_capabilities()
                    .map(|c| c["elicitation"].is_object()),
                Some(true),
                "rmcp's capabilities in _meta: {:?}",
                calls[0].meta()
            );
            for retry in &calls[1..] {
                let params = retry.params().unwrap();
                assert_eq!(params["inputResponses"]["confirm"]["action"], "accept");
                assert!(params["requestState"].is_string(), "{params}");
                assert_eq!(params["arguments"]["text"], "go");
            }

            let refused = client
                .call_tool(CallToolRequestParams::new("sample"))
                .await
                .expect_err("no sampling handler");
            assert!(
                matches!(refused, ServiceError::McpError(_)),
                "{}: {refused:?}",
                mode(borrowed)
            );
            let cut = client
                .call_tool(CallToolRequestParams::new("nag"))
                .await
                .expect_err("a server that asks forever is cut off");
            assert!(
                matches!(cut, ServiceError::InputRequiredRoundsExceeded { .. }),
                "{cut:?}"
            );

            let released = cancel(client, report).await;
            released_as(Eras::Modern, &released);
            world.reaped_and_checked(0).await;
        }
    });
}

/// 2026-07-28: a tool call carries the `Mcp-Param-*` headers of the tool's
/// `x-mcp-header` parameters, learnt from the `tools/list` answers rmcp
/// read (plain and Base64-encoded values). Called before rmcp listed the
/// tools, the server refuses it (`HeaderMismatch`), and the error reaches
/// rmcp as it came.
#[test]
fn mcp_param_headers_come_from_the_tools_rmcp_listed() {
    scenario(async {
        for borrowed in [false, true] {
            let world = World::new(
                ServerConfig::default()
                    .with_eras(Eras::Modern)
                    .with_tool(TestTool::header_param("route", "region", "Region")),
            )
            .await;
            let (transport, report) = world.transport(borrowed);
            let client = serve(transport).await.expect("rmcp initializes");
            let route = |region: &str| {
                CallToolRequestParams::new("route").with_arguments(
                    json!({"region": region, "text": "hi"})
                        .as_object()
                        .unwrap()
                        .clone(),
                )
            };
            let unlisted = client
                .peer()
                .call_tool(route("eu-west1"))
                .await
                .expect_err("no header: refused");
            let cause = ours(&unlisted);
            assert_eq!(cause.rpc_code(), Some(-32020), "{unlisted}");

            client.peer().list_all_tools().await.expect("tools");
            for region in ["eu-west1", "Zürich-1"] {
                client
                    .peer()
                    .call_tool(route(region))
                    .await
                    .unwrap_or_else(|e| panic!("{}: {region}: {e}", mode(borrowed)));
                let call = seen(&world.server, "tools/call").pop().unwrap();
                assert_eq!(call.mcp_param("Region").as_deref(), Some(region));
            }
            released_as(Eras::Modern, &cancel(client, report).await);
            world.reaped_and_checked(0).await;
        }
    });
}

/// A pinned revision skips detection: no `server/discover` before a 2025
/// `initialize` (which proposes the pinned revision), no POST to an
/// HTTP+SSE endpoint's URL.
#[test]
fn a_pinned_revision_skips_detection() {
    scenario(async {
        for borrowed in [false, true] {
            let world = World::new(of_era(Eras::Streamable2025)).await;
            let (transport, report) = world.transport_with(borrowed, |b| {
                b.protocol_version(ProtocolVersion::V2025_06_18)
            });
            let client = serve(transport).await.expect("rmcp initializes");
            assert!(seen(&world.server, "server/discover").is_empty());
            let initialize = seen(&world.server, "initialize");
            assert_eq!(
                initialize[0].params().unwrap()["protocolVersion"],
                "2025-06-18"
            );
            assert_eq!(rmcp_version(&client), "2025-06-18");
            call(&client, "tool-001").await;
            deleted(&cancel(client, report).await);
            world.reaped_and_checked(1).await;

            let world = World::new(of_era(Eras::HttpSse)).await;
            let (transport, report) = world.transport_with(borrowed, |b| {
                b.protocol_version(ProtocolVersion::V2024_11_05)
            });
            let client = serve(transport).await.expect("rmcp initializes");
            assert!(
                seen_http(&world.server, Method::POST)
                    .iter()
                    .all(|r| r.path != "/mcp" || r.header("x-caller").is_some()),
                "no probe of the URL: {:?}",
                seen_http(&world.server, Method::POST)
            );
            call(&client, "tool-001").await;
            released_as(Eras::HttpSse, &cancel(client, report).await);
            assert!(eventually(HUNG, || world.server.stats().live_sessions == 0).await);
            world.reaped_and_checked(0).await;
        }
    });
}

/// The era found is remembered per endpoint: in the lent client, or (with
/// an owned client) in the builder and its clones. The next transport goes
/// straight to it; one that proves wrong (the server changed era) is
/// forgotten and the era detected again within the same `initialize`.
#[test]
fn the_era_is_remembered_per_endpoint() {
    scenario(async {
        for borrowed in [false, true] {
            let world = World::new(of_era(Eras::Streamable2025)).await;
            let mut builder = ScopedTransport::builder(world.server.url()).bearer(TOKEN);
            if borrowed {
                builder = builder.client(world.caller.client.clone());
            }
            for round in 0..2 {
                let mut transport = builder.clone().build().expect("a transport");
                let report = transport.release_report();
                let client = serve(transport).await.expect("rmcp initializes");
                assert_eq!(
                    seen(&world.server, "server/discover").len(),
                    1,
                    "{}: round {round} probes no more",
                    mode(borrowed)
                );
                deleted(&cancel(client, report).await);
            }
            world.reaped_and_checked(2).await;
        }
    });
}

/// rmcp's own discover lifecycle: in `Discover` mode against a 2026-07-28
/// server, rmcp's `server/discover` opens it (no `initialize`, nothing
/// probed besides); in `Auto` mode against a 2025 server, rmcp's probe is
/// refused and its `initialize` follows, which the transport opens without
/// probing again.
#[test]
fn rmcps_own_discover_lifecycle_reaches_2026_and_falls_back_to_2025() {
    let modern = || vec![rmcp::model::ProtocolVersion::V_2026_07_28];
    scenario(async {
        for borrowed in [false, true] {
            let world = World::new(of_era(Eras::Modern)).await;
            let (transport, report) = world.transport(borrowed);
            let lifecycle = rmcp::ClientLifecycleMode::Discover {
                preferred_versions: modern(),
            };
            let client = tokio::time::timeout(
                HUNG,
                rmcp::serve_client_with_lifecycle((), transport, lifecycle),
            )
            .await
            .expect("serve hung")
            .expect("rmcp discovers");
            assert_eq!(rmcp_version(&client), "2026-07-28");
            assert_eq!(seen(&world.server, "server/discover").len(), 1);
            assert!(seen(&world.server, "initialize").is_empty());
            let tools = client.peer().list_all_tools().await.expect("every page");
            assert_eq!(tools.len(), 7);
            call(&client, "tool-005").await;
            for request in seen(&world.server, "tools/call") {
                assert_eq!(request.header("mcp-protocol-version"), Some("2026-07-28"));
                assert_eq!(request.mcp_method(), Some("tools/call"));
            }
            released_as(Eras::Modern, &cancel(client, report).await);
            world.reaped_and_checked(0).await;

            let world = World::new(of_era(Eras::Streamable2025)).await;
            let (transport, report) = world.transport(borrowed);
            let lifecycle = rmcp::ClientLifecycleMode::Auto {
                preferred_versions: modern(),
                legacy_version: None,
            };
            let client = tokio::time::timeout(
                HUNG,
                rmcp::serve_client_with_lifecycle((), transport, lifecycle),
            )
            .await
            .expect("serve hung")
            .expect("rmcp falls back to initialize");
            assert_eq!(rmcp_version(&client), "2025-11-25");
            assert_eq!(
                seen(&world.server, "server/discover").len(),
                1,
                "rmcp's probe only"
            );
            assert_eq!(seen(&world.server, "initialize").len(), 1);
            call(&client, "tool-005").await;
            deleted(&cancel(client, report).await);
            world.reaped_and_checked(1).await;
        }
    });
}

/// The `serve` future is dropped after 0, 1, 2... polls, until it
/// completes, against a server of each era whose every step pends:
/// whatever was created is ended (a 2025 session DELETEd by the reaper, an
/// HTTP+SSE stream closed; a 2026-07-28 server has nothing to end), and
/// the baseline holds after each drop.
#[test]
fn dropping_serve_after_any_number_of_polls_leaves_nothing_behind_in_every_era() {
    const MAX_POLLS: usize = 2_000;
    let delay = |method: &str| Fault::on_rpc(method, FaultAction::Delay(Duration::from_millis(1)));
    scenario(async {
        for (eras, borrowed) in [Eras::Streamable2025, Eras::Modern, Eras::HttpSse]
            .into_iter()
            .flat_map(|eras| [(eras, false), (eras, true)])
        {
            let label = format!("{eras}, {}", mode(borrowed));
            let world = World::new(of_era(eras).with_faults(vec![
                delay("server/discover"),
                delay("initialize"),
                delay("notifications/initialized"),
                delay("tools/list"),
            ]))
            .await;
            let deletes = |stats: &ServerStats| match eras {
                Eras::Streamable2025 => stats.sessions_created,
                _ => 0,
            };
            let mut completed_at = None;
            for polls in 0..MAX_POLLS {
                let (transport, report) = world.transport(borrowed);
                match poll_at_most(().serve(transport), polls).await {
                    None => {
                        mcp_scoped_http::shutdown().await;
                        let ended =
                            eventually(HUNG, || world.server.stats().live_sessions == 0).await;
                        let stats = world.server.stats();
                        assert!(ended, "{label}, K={polls}: a session was left: {stats:?}");
                        world.reaped_and_checked(deletes(&stats)).await;
                    }
                    Some(client) => {
                        let client = client.expect("an undisturbed serve succeeds");
                        let tools = client.peer().list_all_tools().await.expect("tools");
                        assert_eq!(tools.len(), 7, "{label}");
                        released_as(eras, &cancel(client, report).await);
                        completed_at = Some(polls);
                        break;
                    }
                }
            }
            let completed_at = completed_at.expect("serve completes within the bound");
            assert!(completed_at >= 2, "{label}: {completed_at} polls");
            assert!(eventually(HUNG, || world.server.stats().live_sessions == 0).await);
            let stats = world.server.stats();
            world.reaped_and_checked(deletes(&stats)).await;
            if eras == Eras::Streamable2025 {
                world.deletes_are_authenticated();
                assert!(
                    stats.sessions_created > 1,
                    "{label}: some drops came after the session was created"
                );
            }
        }
    });
}
