//! The listening policy, the same for the 2025 GET stream and 2026-07-28's
//! `subscriptions/listen`: progress is a new message (not the
//! acknowledgement, not a priming event); an end without progress is
//! followed by a capped, jittered backoff, for as long as the session
//! lasts; a refusal or a graceful end stops; a 404 to the GET checks the
//! session (a `ping`), which renews an expired one.
//!
//! Rates are proved by counting the server's requests over a bounded
//! window, not by timing single waits.

use crate::support;

use std::time::Duration;

use crate::support::*;
use http::Method;
use mcp_scoped_http::Connector;
use serde_json::json;

const PROMPT: Duration = Duration::from_secs(5);

fn listens(server: &TestServer) -> usize {
    seen(server, "subscriptions/listen").len()
}

fn gets(server: &TestServer) -> usize {
    seen_http(server, Method::GET).len()
}

/// The acknowledgement every subscription stream starts with.
fn ack_event() -> String {
    let ack = json!({
        "jsonrpc": "2.0",
        "method": "notifications/subscriptions/acknowledged",
        "params": {"notifications": {"toolsListChanged": true}},
    });
    format!("event: message\ndata: {ack}\n\n")
}

/// Issue 20, item 3: a 2026-07-28 server that acknowledges every
/// `subscriptions/listen` and then drops the stream got about ten a second
/// forever (the acknowledgement counted as progress). With the default
/// backoff (500 ms doubling, jittered over each step's upper half) at most
/// four opens fit in two seconds; and listening goes on.
#[test]
fn a_subscription_acknowledged_then_dropped_is_reopened_at_a_bounded_rate() {
    scenario(async {
        let server = TestServer::start(ServerConfig::default().with_eras(Eras::Modern).with_fault(
            Fault::on_rpc(
                "subscriptions/listen",
                FaultAction::raw(200, "text/event-stream", &ack_event()),
            ),
        ));
        let session = Connector::new(server.url()).connect().await.unwrap();
        assert!(eventually(PROMPT, || listens(&server) >= 1).await);
        let first = std::time::Instant::now();
        // A bounded window, then a count.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let opened = listens(&server);
        let window = first.elapsed();
        assert!(
            (2..=5).contains(&opened),
            "{opened} subscriptions/listen in {window:?}"
        );
        assert_eq!(session.ledger().tasks, 1, "listening goes on");
        assert!(session.is_listening());
        session.close().await;
        assert!(!session.is_listening());
    });
}

/// The same server ending each subscription gracefully (its
/// `subscriptions/listen` response) is taken at its word: one open, then
/// listening stops, and the session carries on.
#[test]
fn a_subscription_ended_gracefully_is_not_reopened() {
    scenario(async {
        let end = "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":{id},\
                   \"result\":{\"resultType\":\"complete\"}}\n\n";
        let server = TestServer::start(ServerConfig::default().with_eras(Eras::Modern).with_fault(
            Fault::on_rpc(
                "subscriptions/listen",
                FaultAction::raw(200, "text/event-stream", &(ack_event() + end)),
            ),
        ));
        let session = Connector::new(server.url()).connect().await.unwrap();
        assert!(eventually(PROMPT, || session.ledger().tasks == 0).await);
        // Absence can only be watched for: a window past several backoffs.
        tokio::time::sleep(Duration::from_millis(1200)).await;
        assert_eq!(listens(&server), 1);
        assert!(!session.is_listening(), "the end is visible");
        session
            .call_tool("tool-000", json!({}))
            .await
            .expect("the session carries on");
        session.close().await;
    });
}

/// A GET stream that ends at once after a priming event (a proxy that
/// closes streams, a server that makes the client poll with nothing to
/// say): the listener gave up after four GETs; now it goes on for the
/// session's life, at a rate the backoff bounds (here 10 ms doubling to
/// 40 ms: at least 5, 10, 20, then 20 ms apart).
#[test]
fn a_get_stream_that_keeps_ending_is_reopened_for_the_sessions_life_at_a_bounded_rate() {
    scenario(async {
        for borrowed in [false, true] {
            let (server, caller, baseline) = support::baseline::scene(TestServer::start(
                ServerConfig::default()
                    .with_listen(ListenMode::Open)
                    .with_fault(Fault::on_http(
                        Method::GET,
                        FaultAction::raw(200, "text/event-stream", "id: p\ndata:\n\n"),
                    )),
            ))
            .await;
            let mut connector = Connector::new(server.url())
                .listen_backoff(Duration::from_millis(10), Duration::from_millis(40));
            if borrowed {
                connector = connector.client(caller.client.clone());
            }
            let session = connector.connect().await.unwrap();
            assert!(eventually(PROMPT, || gets(&server) >= 1).await);
            let start = std::time::Instant::now();
            assert!(
                eventually(PROMPT, || gets(&server) >= 12).await,
                "the listener stopped after {} GETs",
                gets(&server)
            );
            let elapsed = start.elapsed();
            assert!(session.is_listening());
            // Bounded: 11 reopens need at least 5+10+9*20 ms (less the
            // polling's slack); without a backoff they take a few ms.
            assert!(elapsed >= Duration::from_millis(150), "{elapsed:?}");
            // Each reopen resumes after the last event id.
            let all = seen_http(&server, Method::GET);
            assert!(
                all[1..]
                    .iter()
                    .all(|g| g.header("last-event-id") == Some("p"))
            );
            session.close().await;
            drop(session);
            baseline.check(&server, 1).await;
        }
    });
}

/// Listening lasts as long as the session: the server expires it (the GET
/// stream ends, the reconnect gets 404) while no request is made. The 404
/// checks the session with a `ping`, which renews it, and the new session
/// listens; before, the listener gave up and the session stayed expired
/// until the next request.
#[test]
fn a_404_to_the_get_checks_the_session_and_renews_an_expired_one() {
    scenario(async {
        for borrowed in [false, true] {
            let (server, caller, baseline) = support::baseline::scene(TestServer::start(
                ServerConfig::default().with_listen(ListenMode::Open),
            ))
            .await;
            let mut connector = Connector::new(server.url())
                .listen_backoff(Duration::from_millis(10), Duration::from_millis(40));
            if borrowed {
                connector = connector.client(caller.client.clone());
            }
            let session = connector.connect().await.unwrap();
            let old = session.session_id().unwrap();
            assert!(eventually(PROMPT, || server.stats().listen_streams_open == 1).await);
            server.expire_sessions();
            let renewed = eventually(PROMPT, || {
                session.session_id().is_some_and(|id| id != old)
                    && server.stats().listen_streams_open == 1
            })
            .await;
            assert!(
                renewed,
                "no renewal: {:?}, pings {}",
                server.stats(),
                seen(&server, "ping").len()
            );
            assert_eq!(seen(&server, "initialize").len(), 2);
            assert!(!seen(&server, "ping").is_empty(), "the session was checked");
            // The notifications of the new session arrive.
            let mut notifications = session.notifications().unwrap();
            let note = json!({"jsonrpc": "2.0", "method": "notifications/message",
                              "params": {"level": "info", "data": "after renewal"}});
            assert_eq!(server.notify_listeners(&note), 1);
            let got = tokio::time::timeout(PROMPT, notifications.recv()).await;
            assert!(matches!(got, Ok(Some(_))), "{got:?}");
            session.close().await;
            drop(session);
            mcp_scoped_http::shutdown().await;
            let log = assert_each_session_deleted_once(&server, "listener 404").await;
            baseline.check(&server, deletes_owed(&log)).await;
        }
    });
}

/// A 404 to the GET while the session is alive (the `ping` is answered):
/// the server does not serve the GET that way; listening stops after one
/// GET and one ping, and the session carries on.
#[test]
fn a_404_to_the_get_on_a_live_session_stops_listening_after_one_ping() {
    scenario(async {
        let server = TestServer::start(
            ServerConfig::default()
                .with_listen(ListenMode::Open)
                .with_fault(Fault::on_http(Method::GET, FaultAction::status(404))),
        );
        let session = Connector::new(server.url())
            .listen_backoff(Duration::from_millis(10), Duration::from_millis(40))
            .connect()
            .await
            .unwrap();
        assert!(eventually(PROMPT, || session.ledger().tasks == 0).await);
        // Absence can only be watched for: a window past several backoffs.
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(gets(&server), 1);
        assert_eq!(seen(&server, "ping").len(), 1);
        assert_eq!(seen(&server, "initialize").len(), 1, "not renewed");
        assert!(!session.is_listening(), "the end is visible");
        session
            .call_tool("tool-000", json!({}))
            .await
            .expect("the session carries on");
        session.close().await;
    });
}
