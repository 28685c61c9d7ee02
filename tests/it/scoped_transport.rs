//! `adapters::ScopedTransport` driven with raw JSON-RPC messages, as an SDK
//! that runs the protocol itself (the Python package's) drives it: the
//! handshake, a request whose answer is received while another send is in
//! flight, close, and a transport dropped unclosed. Each ends with the
//! baseline check of FAULTS.md. rmcp over the same transport is in
//! `rmcp_transport`.

use std::time::Duration;

use crate::support::baseline::World;
use crate::support::*;
use mcp_scoped_http::adapters::ScopedTransport;
use mcp_scoped_http::jsonrpc::Message;
use mcp_scoped_http::{ProtocolVersion, SessionRelease};
use serde_json::{Value, json};

/// Past this, something hung.
const HUNG: Duration = Duration::from_secs(20);

fn message(value: Value) -> Message {
    serde_json::from_value(value).expect("a JSON-RPC message")
}

fn initialize(id: u64) -> Message {
    message(json!({
        "jsonrpc": "2.0", "id": id, "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "an-sdk", "version": "1"}
        }
    }))
}

async fn send(transport: &ScopedTransport, message: Message) {
    tokio::time::timeout(HUNG, transport.send_message(message))
        .await
        .expect("send hung")
        .expect("sent");
}

/// The next response, skipping what the server sent unasked.
async fn response(transport: &ScopedTransport) -> Value {
    loop {
        let message = tokio::time::timeout(HUNG, transport.receive_message())
            .await
            .expect("receive hung")
            .expect("a message before the end");
        let value = serde_json::to_value(&message).expect("serializes");
        if value.get("id").is_some() && value.get("method").is_none() {
            return value;
        }
    }
}

fn transport(world: &World, borrowed: bool) -> ScopedTransport {
    let builder =
        ScopedTransport::builder(world.server.url()).delete_timeout(Duration::from_secs(2));
    let builder = if borrowed {
        builder.client(world.caller.client.clone())
    } else {
        builder
    };
    builder.build().expect("a transport")
}

#[test]
fn raw_messages_run_the_handshake_and_close_deletes_once() {
    scenario(async {
        for borrowed in [false, true] {
            let world = World::new(ServerConfig::default().with_tools(3)).await;
            let mut transport = transport(&world, borrowed);
            let report = transport.release_report();
            send(&transport, initialize(1)).await;
            let answer = response(&transport).await;
            assert_eq!(answer["id"], 1);
            assert_eq!(answer["result"]["protocolVersion"], "2025-06-18");
            assert!(transport.session_id().is_some());
            send(
                &transport,
                message(json!({"jsonrpc": "2.0", "method": "notifications/initialized"})),
            )
            .await;

            // A receive waiting while the request is sent: both borrow the
            // transport, and the answer reaches the receive that waited.
            let list = message(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}));
            let (answer, ()) = tokio::join!(response(&transport), send(&transport, list));
            assert_eq!(answer["id"], 2);
            assert_eq!(answer["result"]["tools"].as_array().map(Vec::len), Some(3));

            tokio::time::timeout(HUNG, transport.close())
                .await
                .expect("close hung")
                .expect("close never fails");
            // Closed: the end of the stream, at once.
            assert!(transport.receive_message().await.is_none());
            let released = report.released().await.expect("closed, not dropped");
            assert!(
                matches!(released.session, SessionRelease::Deleted(s) if s == 200),
                "{released:?}"
            );
            assert_eq!(released.owned_client_released, !borrowed);
            // A second close is a no-op.
            transport.close().await.expect("idempotent");
            drop(transport);
            tokio::time::timeout(HUNG, mcp_scoped_http::shutdown())
                .await
                .expect("the reaper finishes");
            assert_eq!(world.server.stats().deletes, 1);
            world.baseline.check(&world.server, 1).await;
        }
    });
}

#[test]
fn a_transport_dropped_unclosed_is_deleted_by_the_reaper() {
    scenario(async {
        for borrowed in [false, true] {
            let world = World::new(ServerConfig::default()).await;
            let mut transport = transport(&world, borrowed);
            let report = transport.release_report();
            send(&transport, initialize(1)).await;
            response(&transport).await;
            drop(transport);
            assert!(report.released().await.is_none(), "dropped, not closed");
            tokio::time::timeout(HUNG, mcp_scoped_http::shutdown())
                .await
                .expect("the reaper finishes");
            assert_eq!(world.server.stats().deletes, 1);
            world.baseline.check(&world.server, 1).await;
        }
    });
}

#[test]
fn a_request_before_the_handshake_is_a_protocol_error_and_leaves_nothing() {
    scenario(async {
        let world = World::new(ServerConfig::default()).await;
        let transport = transport(&world, true);
        let list = message(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}));
        let error = tokio::time::timeout(HUNG, transport.send_message(list))
            .await
            .expect("send hung")
            .expect_err("no session yet");
        assert!(error.is_protocol(), "{error}");
        transport.close().await.expect("close");
        assert_eq!(world.server.stats().sessions_created, 0);
        world.baseline.check(&world.server, 0).await;
    });
}

#[test]
fn a_pinned_modern_revision_answers_initialize_from_discover() {
    scenario(async {
        let world = World::new(ServerConfig::default().with_eras(Eras::Modern)).await;
        let mut transport = ScopedTransport::builder(world.server.url())
            .protocol_version(ProtocolVersion::V2026_07_28)
            .client(world.caller.client.clone())
            .build()
            .expect("a transport");
        let report = transport.release_report();
        send(&transport, initialize(7)).await;
        let answer = response(&transport).await;
        assert_eq!(answer["id"], 7);
        assert_eq!(answer["result"]["protocolVersion"], "2026-07-28");
        assert!(
            transport.session_id().is_none(),
            "2026-07-28 has no session"
        );
        transport.close().await.expect("close");
        let released = report.released().await.expect("closed");
        assert!(
            matches!(released.session, SessionRelease::Stateless),
            "{released:?}"
        );
        world.baseline.check(&world.server, 0).await;
    });
}

#[test]
fn a_legacy_sdk_is_told_its_own_revision_while_the_wire_speaks_2026() {
    scenario(async {
        let world = World::new(ServerConfig::default().with_eras(Eras::Modern)).await;
        let transport = ScopedTransport::builder(world.server.url())
            .client(world.caller.client.clone())
            .legacy_sdk(true)
            .build()
            .expect("a transport");
        send(&transport, initialize(1)).await;
        let answer = response(&transport).await;
        assert_eq!(answer["result"]["protocolVersion"], "2025-06-18");
        send(
            &transport,
            message(json!({"jsonrpc": "2.0", "method": "notifications/initialized"})),
        )
        .await;
        // The server takes 2026-07-28 requests only: this one is one.
        let list = message(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}));
        send(&transport, list).await;
        let answer = response(&transport).await;
        assert!(answer["result"]["tools"].is_array(), "{answer}");
        for request in seen(&world.server, "tools/list") {
            assert_eq!(request.header("mcp-protocol-version"), Some("2026-07-28"));
        }
        transport.close().await.expect("close");
        world.baseline.check(&world.server, 0).await;
    });
}

#[test]
fn a_request_that_cannot_be_sent_is_answered_when_the_sdk_waits_on_the_read_side() {
    scenario(async {
        // A port nothing listens on: the connect is refused.
        let closed_port = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
            listener.local_addr().expect("its address").port()
        };
        let transport = ScopedTransport::new(format!("http://127.0.0.1:{closed_port}/mcp"))
            .expect("a transport");
        tokio::time::timeout(HUNG, transport.send_message_answered(initialize(3)))
            .await
            .expect("send hung")
            .expect("answered, not raised");
        let answer = response(&transport).await;
        assert_eq!(answer["id"], 3);
        assert_eq!(answer["error"]["code"], -32603, "{answer}");
        assert_eq!(answer["error"]["data"]["transport"], "mcp-scoped-http");
        assert_eq!(answer["error"]["data"]["retryable"], true);
        // A notification that cannot be sent still fails where it was sent.
        let notification =
            message(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        assert!(transport.send_message_answered(notification).await.is_err());
        transport.close().await.expect("close");
        // Closed: no answer is made up, the send fails.
        let error = transport
            .send_message_answered(initialize(4))
            .await
            .expect_err("closed");
        assert!(error.is_closed(), "{error}");
    });
}

#[test]
fn released_in_background_the_report_says_so_and_a_close_after_returns() {
    scenario(async {
        let world = World::new(ServerConfig::default()).await;
        let mut transport = transport(&world, true);
        let report = transport.release_report();
        send(&transport, initialize(1)).await;
        response(&transport).await;
        transport.release_in_background();
        assert!(transport.receive_message().await.is_none(), "receives end");
        tokio::time::timeout(HUNG, transport.close())
            .await
            .expect("a close after does not wait")
            .expect("close");
        let reported = tokio::time::timeout(HUNG, report.released())
            .await
            .expect("the report does not wait for a close that will not come");
        assert!(reported.is_none());
        tokio::time::timeout(HUNG, mcp_scoped_http::shutdown())
            .await
            .expect("the reaper finishes");
        assert_eq!(world.server.stats().deletes, 1);
        world.baseline.check(&world.server, 1).await;
    });
}

#[cfg(feature = "oauth")]
#[test]
fn oauth_runs_inside_the_sdks_initialize_in_every_era() {
    use crate::support::oauth::{headless, protected};
    use mcp_scoped_http_testkit::{AuthConfig, AuthServer};
    scenario(async {
        for eras in [Eras::Streamable2025, Eras::Modern, Eras::HttpSse] {
            let auth = AuthServer::start(AuthConfig::default());
            let server = protected(eras, auth.resource());
            let transport = ScopedTransport::builder(server.url())
                .oauth(headless())
                .build()
                .expect("a transport");
            send(&transport, initialize(1)).await;
            let answer = response(&transport).await;
            assert!(
                answer["result"]["protocolVersion"].is_string(),
                "{eras:?}: {answer}"
            );
            transport.close().await.expect("close");
        }
    });
}
