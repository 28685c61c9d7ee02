//! 2026-07-28 through the test kit's modern server, found by detection:
//! request metadata (`_meta` and the headers), `x-mcp-header` mirroring and
//! the exclusion of invalid tools, `-32020` and `-32022` recovery, multi
//! round-trip requests, `subscriptions/listen`, and a close that leaves
//! nothing (no DELETE: there is no session).

use crate::support;

use std::time::Duration;

use crate::support::baseline::Caller;
use crate::support::*;
use mcp_scoped_http::{Connector, ProtocolVersion, Session, SessionRelease, TransportKind};
use mcp_scoped_http_testkit::{InputRequest, InvalidHeader, TestTool};
use serde_json::{Value, json};

fn modern(config: ServerConfig) -> TestServer {
    TestServer::start(config.with_eras(Eras::Modern))
}

async fn connect(connector: Connector) -> Session {
    let session = connector.connect().await.expect("connects");
    let info = session.info();
    assert_eq!(info.protocol_version, ProtocolVersion::V2026_07_28);
    assert_eq!(info.transport, TransportKind::StreamableHttp);
    assert!(!info.session_id_issued);
    session
}

fn posts(server: &TestServer, method: &str) -> Vec<RecordedRequest> {
    server
        .requests()
        .into_iter()
        .filter(|r| r.rpc_method.as_deref() == Some(method))
        .collect()
}

#[test]
fn every_request_carries_its_metadata_in_meta_and_headers() {
    scenario(async {
        let server = modern(
            ServerConfig::default().with_tool(TestTool::header_param("route", "region", "Region")),
        );
        let caller = Caller::new();
        caller.own_request(&server).await;
        let baseline = support::baseline::Baseline::take(Some(&caller));
        let session = connect(
            Connector::new(server.url())
                .client(caller.client.clone())
                .client_info("meta-test", "9.9"),
        )
        .await;
        assert!(session.info().probed);
        for region in ["us-west1", "Zürich 1", " padded ", "=?base64?x?="] {
            let result = session
                .call_tool("route", json!({"region": region, "text": "t"}))
                .await
                .unwrap_or_else(|e| panic!("route {region:?}: {e}"));
            assert_ne!(result["isError"], true, "{result}");
        }
        session
            .read_resource("file:///r/000")
            .await
            .expect("resources/read");
        session
            .get_prompt("prompt-000", json!({}))
            .await
            .expect("prompts/get");
        let released = session.close().await;
        // No server session in 2026-07-28: none to end, and it says so.
        assert!(matches!(released.session, SessionRelease::Stateless));

        for r in server
            .requests()
            .iter()
            .filter(|r| r.header("x-caller").is_none())
        {
            assert_eq!(r.method, http::Method::POST, "only POSTs in 2026-07-28");
            let method = r.rpc_method.as_deref().unwrap_or_default();
            assert_eq!(r.protocol_version_header(), Some("2026-07-28"), "{method}");
            assert_eq!(r.meta_protocol_version(), Some("2026-07-28"), "{method}");
            assert_eq!(r.mcp_method(), Some(method), "{method}");
            assert_eq!(r.meta_client_info().unwrap()["name"], "meta-test");
            assert!(r.meta_client_capabilities().is_some(), "{method}");
            assert_eq!(r.header("mcp-session-id"), None);
            let name = match method {
                "tools/call" => Some("route".to_owned()),
                "resources/read" => Some("file:///r/000".to_owned()),
                "prompts/get" => Some("prompt-000".to_owned()),
                _ => None,
            };
            assert_eq!(r.mcp_name(), name, "{method}");
        }
        let regions: Vec<String> = posts(&server, "tools/call")
            .iter()
            .map(|r| r.mcp_param("Region").expect("Mcp-Param-Region"))
            .collect();
        assert_eq!(
            regions,
            ["us-west1", "Zürich 1", " padded ", "=?base64?x?="]
        );
        // The raw headers: plain where plain ASCII, else the base64 form.
        let raw: Vec<String> = posts(&server, "tools/call")
            .iter()
            .map(|r| r.header("mcp-param-region").unwrap().to_owned())
            .collect();
        assert_eq!(raw[0], "us-west1");
        assert!(
            raw[1..].iter().all(|v| v.starts_with("=?base64?")),
            "{raw:?}"
        );
        baseline.check(&server, 0).await;
    });
}

#[test]
fn tools_with_an_invalid_x_mcp_header_are_left_out() {
    scenario(async {
        let mut config = ServerConfig::default().with_tool(TestTool::header_param("ok", "r", "R"));
        for kind in InvalidHeader::ALL {
            config = config.with_tool(TestTool::invalid_header(kind));
        }
        let server = modern(config);
        let session = connect(Connector::new(server.url()).listen(false)).await;
        let names: Vec<String> = session.catalog().tool_names().map(str::to_owned).collect();
        assert_eq!(names, ["tool-000", "tool-001", "tool-002", "ok"]);
        let page = session.list_tools(None).await.expect("tools/list");
        assert_eq!(page.items.len(), 4, "the page API leaves them out too");
        session.close().await;
    });
}

#[test]
fn a_header_mismatch_relists_the_tools_and_retries_once() {
    scenario(async {
        let server = modern(
            ServerConfig::default().with_tool(TestTool::header_param("route", "region", "Region")),
        );
        server.push_fault(
            Fault::on_rpc("tools/call", FaultAction::HeaderMismatch)
                .name("route")
                .times(1),
        );
        let session = connect(Connector::new(server.url()).listen(false)).await;
        let lists_before = posts(&server, "tools/list").len();
        session
            .call_tool("route", json!({"region": "eu"}))
            .await
            .expect("retried after re-listing");
        assert_eq!(posts(&server, "tools/call").len(), 2);
        assert_eq!(posts(&server, "tools/list").len(), lists_before + 1);

        // Refused every time: one recovery, then the server's error.
        server.push_fault(Fault::on_rpc("tools/call", FaultAction::HeaderMismatch).name("route"));
        let error = session
            .call_tool("route", json!({"region": "eu"}))
            .await
            .expect_err("refused again");
        assert_eq!(error.rpc_code(), Some(-32020), "{error}");
        assert_eq!(posts(&server, "tools/call").len(), 4);
        session.close().await;
    });
}

#[test]
fn an_unsupported_version_is_retried_once_with_one_the_server_lists() {
    scenario(async {
        for pinned in [false, true] {
            let server = modern(ServerConfig::default());
            server.push_fault(
                Fault::any(FaultAction::UnsupportedVersion {
                    supported: vec!["2026-07-28".into()],
                })
                .times(1),
            );
            let mut connector = Connector::new(server.url()).listen(false);
            if pinned {
                connector = connector.protocol_version(ProtocolVersion::V2026_07_28);
            }
            let session = connect(connector).await;
            assert_eq!(
                posts(&server, "server/discover").len(),
                2,
                "pinned {pinned}"
            );
            assert!(posts(&server, "initialize").is_empty(), "never falls back");
            session.close().await;
        }
    });
}

#[test]
fn input_requests_are_answered_by_the_handlers_and_the_request_sent_again() {
    scenario(async {
        let server = modern(
            ServerConfig::default()
                .with_tool(TestTool::input_required(
                    "ask",
                    InputRequest::Elicitation,
                    2,
                ))
                .with_tool(TestTool::input_required_forever(
                    "nag",
                    InputRequest::Elicitation,
                )),
        );
        let asked = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = asked.clone();
        let connector =
            Connector::new(server.url())
                .listen(false)
                .on_elicitation(move |params: Value| {
                    counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    async move {
                        assert!(params["message"].as_str().is_some(), "{params}");
                        Ok(json!({"action": "accept", "content": {"ok": true}}))
                    }
                });
        let session = connect(connector).await;
        let result = session
            .call_tool("ask", json!({"text": "go"}))
            .await
            .expect("completes after two rounds");
        assert_ne!(result["isError"], true, "{result}");
        assert_eq!(asked.load(std::sync::atomic::Ordering::SeqCst), 2);
        let calls = posts(&server, "tools/call");
        assert_eq!(calls.len(), 3);
        let ids: std::collections::HashSet<String> = calls
            .iter()
            .map(|r| r.body.as_ref().unwrap()["id"].to_string())
            .collect();
        assert_eq!(ids.len(), 3, "each round is a new request");
        assert!(calls[0].params().unwrap().get("inputResponses").is_none());
        for retry in &calls[1..] {
            let params = retry.params().unwrap();
            assert_eq!(params["inputResponses"]["confirm"]["action"], "accept");
            assert!(params["requestState"].is_string(), "{params}");
            assert_eq!(params["arguments"]["text"], "go", "the original params");
        }
        assert_eq!(
            calls[0].body.as_ref().unwrap()["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"]
                ["elicitation"],
            json!({}),
            "the capability is declared"
        );

        let error = session
            .call_tool("nag", json!({}))
            .await
            .expect_err("a server that asks forever is cut off");
        assert!(error.is_limit(), "{error:?}");
        assert_eq!(posts(&server, "tools/call").len(), 3 + 9, "1 + 8 rounds");
        session.close().await;
    });
}

#[test]
fn list_changes_come_on_subscriptions_listen_and_close_ends_it() {
    scenario(async {
        let server = modern(ServerConfig::default());
        let session = connect(Connector::new(server.url())).await;
        let subscribed = eventually(Duration::from_secs(5), || {
            server.stats().subscriptions_open == 1
        })
        .await;
        assert!(subscribed, "{:?}", server.stats());
        let listen = posts(&server, "subscriptions/listen");
        assert_eq!(listen.len(), 1);
        let filter = &listen[0].params().unwrap()["notifications"];
        assert_eq!(filter["toolsListChanged"], true, "{filter}");

        let lists = posts(&server, "tools/list").len();
        assert_eq!(server.list_changed("tools"), 1);
        let relisted = eventually(Duration::from_secs(5), || {
            posts(&server, "tools/list").len() > lists
        })
        .await;
        assert!(relisted, "a list change re-lists the tools");

        let released = session.close().await;
        // The subscription's task (and the re-listing's, if still there).
        assert!(released.tasks_stopped >= 1, "{released:?}");
        let closed = eventually(Duration::from_secs(5), || {
            server.stats().subscriptions_open == 0
        })
        .await;
        assert!(closed, "the stream was closed: {:?}", server.stats());
        assert_eq!(server.stats().deletes, 0);
    });
}

#[test]
fn a_server_of_both_eras_is_spoken_to_in_the_newest() {
    scenario(async {
        let server = TestServer::start(ServerConfig::default().with_eras(Eras::ModernAnd2025));
        let session = connect(Connector::new(server.url()).listen(false)).await;
        session
            .call_tool("tool-000", json!({"text": "x"}))
            .await
            .expect("call");
        session.close().await;
        assert!(posts(&server, "initialize").is_empty());
        // Pinned to 2025, the same endpoint serves its handshake.
        let session = Connector::new(server.url())
            .listen(false)
            .protocol_version(ProtocolVersion::V2025_11_25)
            .connect()
            .await
            .expect("the 2025 handshake");
        assert!(session.info().session_id_issued);
        session.close().await;
        assert_eq!(server.stats().deletes, 1);
    });
}

/// 2026-07-28 has no GET: an answer stream that breaks off after an event
/// id (with a `retry`) fails at once, and no GET with `Last-Event-ID` is
/// sent (before, it waited the `retry` and sent one).
#[test]
fn a_broken_answer_is_never_resumed_with_a_get() {
    scenario(async {
        let server = modern(ServerConfig::default());
        let session = connect(Connector::new(server.url()).listen(false)).await;
        server.push_fault(
            Fault::on_rpc(
                "tools/call",
                FaultAction::raw(200, "text/event-stream", "id: cut-1\nretry: 5\ndata:\n\n"),
            )
            .times(1),
        );
        let error = session
            .call_tool("tool-000", json!({}))
            .await
            .expect_err("a broken answer");
        assert!(
            error.is_protocol() && error.to_string().contains("2026-07-28 has no GET"),
            "{error}"
        );
        let gets = server
            .requests()
            .into_iter()
            .filter(|r| r.method == http::Method::GET)
            .count();
        assert_eq!(gets, 0, "no GET in 2026-07-28");
        session.close().await;
    });
}
