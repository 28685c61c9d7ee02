//! Batches in SSE events (F38): a 2025-03-26 server may put several
//! messages, say a notification and the response, in one event with an
//! `id:`. Every message is delivered once; a replay of such an event on a
//! resumed stream is still ignored, whole. Each test runs over an owned and
//! a borrowed client and ends with the baseline check.

use std::time::Duration;

use crate::support::*;
use http::Method;
use mcp_scoped_http::Resumption;
use mcp_scoped_http::jsonrpc::Message;
use mcp_scoped_http::{Connector, Session};
use serde_json::json;

fn sse_server() -> TestServer {
    // No GET stream (405): a client that lost the response and tries to
    // resume fails at once instead of waiting on a listening stream.
    TestServer::start(
        ServerConfig::default()
            .with_response_mode(ResponseMode::Sse)
            .with_listen(ListenMode::Unsupported),
    )
}

async fn connect(server: &TestServer, caller: &baseline::Caller, borrowed: bool) -> Session {
    let mut connector = Connector::new(server.url())
        .bearer("batches")
        .resumption(Resumption::default().first_backoff(Duration::from_millis(5)));
    if borrowed {
        connector = connector.client(caller.client.clone());
    }
    connector.connect().await.unwrap()
}

/// The `data` of each notification waiting in `notifications`, in order.
fn notes(notifications: &mut tokio::sync::mpsc::Receiver<Message>) -> Vec<String> {
    let mut notes = Vec::new();
    while let Ok(message) = notifications.try_recv() {
        match message {
            Message::Notification(n) => notes.push(
                n.params
                    .as_ref()
                    .and_then(|p| p["data"].as_str())
                    .map_or_else(|| format!("{} without data", n.method), str::to_owned),
            ),
            other => panic!("not a notification: {other:?}"),
        }
    }
    notes
}

/// The GETs that resumed an answer (they carry `Last-Event-ID`).
fn resumptions(server: &TestServer) -> Vec<RecordedRequest> {
    seen_http(server, Method::GET)
        .into_iter()
        .filter(|r| r.header("last-event-id").is_some())
        .collect()
}

#[test]
fn f38_a_notification_and_the_response_in_one_event_are_both_delivered() {
    scenario(async {
        for borrowed in [false, true] {
            let (server, caller, baseline) = baseline::scene(sse_server()).await;
            let session = connect(&server, &caller, borrowed).await;
            let mut notifications = session.notifications().unwrap();
            server.push_fault(
                Fault::on_rpc("tools/call", FaultAction::SseBatchEvent { replay: false }).times(1),
            );
            let who = if borrowed { "borrowed" } else { "owned" };
            let result = session
                .call_tool("tool-001", json!({ "n": 1 }))
                .await
                .unwrap_or_else(|e| panic!("{who}: {e}"));
            assert_eq!(result["structuredContent"]["tool"], "tool-001", "{who}");
            // Dispatched before the response was read: already waiting.
            assert_eq!(notes(&mut notifications), ["note 1"], "{who}");
            assert!(resumptions(&server).is_empty(), "{who}: nothing was lost");
            // The session carries on.
            session.call_tool("tool-000", json!({})).await.unwrap();
            session.close().await;
            drop(session);
            baseline.check(&server, 1).await;
        }
    });
}

#[test]
fn f38_a_batch_event_replayed_after_a_cut_is_ignored_and_the_response_comes_once() {
    scenario(async {
        for borrowed in [false, true] {
            let (server, caller, baseline) = baseline::scene(sse_server()).await;
            let session = connect(&server, &caller, borrowed).await;
            let mut notifications = session.notifications().unwrap();
            // The POST's stream: a batch event ["note 1", "note 2"], then a
            // cut. The resuming GET: that event again (same id), then a
            // batch event ["note 3", response].
            server.push_fault(
                Fault::on_rpc("tools/call", FaultAction::SseBatchEvent { replay: true }).times(1),
            );
            let who = if borrowed { "borrowed" } else { "owned" };
            let result = session
                .call_tool("tool-002", json!({}))
                .await
                .unwrap_or_else(|e| panic!("{who}: {e}"));
            assert_eq!(result["structuredContent"]["tool"], "tool-002", "{who}");
            assert_eq!(
                notes(&mut notifications),
                ["note 1", "note 2", "note 3"],
                "{who}: each message once, the replayed event not again"
            );
            let gets = resumptions(&server);
            assert_eq!(gets.len(), 1, "{who}: one resumption");
            assert_eq!(seen(&server, "tools/call").len(), 1, "{who}: not re-sent");
            session.close().await;
            drop(session);
            baseline.check(&server, 1).await;
        }
    });
}

/// The same over the rmcp adapter, whose reader has its own replay filter:
/// rmcp gets every message of a batch once, and the response.
#[cfg(feature = "rmcp")]
// The test kit's notes are `notifications/message`, whose rmcp type is
// deprecated (logging, SEP-2577) but still delivered.
#[allow(deprecated)]
mod over_rmcp {
    use std::sync::{Arc, Mutex};

    use mcp_scoped_http::SessionRelease;
    use mcp_scoped_http::adapters::ScopedTransport;
    use rmcp::ServiceExt;
    use rmcp::handler::client::ClientHandler;
    use rmcp::model::{CallToolRequestParams, LoggingMessageNotificationParam};
    use rmcp::service::{NotificationContext, RoleClient};

    use super::*;

    /// Records the `data` of every logging notification rmcp hands it.
    #[derive(Clone, Default)]
    struct Notes(Arc<Mutex<Vec<String>>>);

    impl Notes {
        fn taken(&self) -> Vec<String> {
            self.0.lock().unwrap().clone()
        }
    }

    impl ClientHandler for Notes {
        async fn on_logging_message(
            &self,
            params: LoggingMessageNotificationParam,
            _context: NotificationContext<RoleClient>,
        ) {
            let note = params.data.as_str().unwrap_or("no data").to_owned();
            self.0.lock().unwrap().push(note);
        }
    }

    #[test]
    fn f38_rmcp_gets_every_message_of_a_batch_event_once() {
        scenario(async {
            for (borrowed, replay) in [(false, false), (true, false), (false, true), (true, true)] {
                let (server, caller, baseline) = baseline::scene(sse_server()).await;
                let mut builder = ScopedTransport::builder(server.url())
                    .bearer("batches")
                    .resumption(Resumption::default().first_backoff(Duration::from_millis(5)));
                if borrowed {
                    builder = builder.client(caller.client.clone());
                }
                let mut transport = builder.build().unwrap();
                let report = transport.release_report();
                let notes = Notes::default();
                let client =
                    tokio::time::timeout(Duration::from_secs(20), notes.clone().serve(transport))
                        .await
                        .expect("serve hung")
                        .expect("rmcp initializes");
                server.push_fault(
                    Fault::on_rpc("tools/call", FaultAction::SseBatchEvent { replay }).times(1),
                );
                let who = format!(
                    "{} replay={replay}",
                    if borrowed { "borrowed" } else { "owned" }
                );
                let result = client
                    .peer()
                    .call_tool(CallToolRequestParams::new("tool-001"))
                    .await
                    .unwrap_or_else(|e| panic!("{who}: {e}"));
                assert_eq!(
                    result.structured_content.unwrap()["tool"],
                    "tool-001",
                    "{who}"
                );
                let want: &[&str] = if replay {
                    &["note 1", "note 2", "note 3"]
                } else {
                    &["note 1"]
                };
                // rmcp runs notification handlers on tasks of its own.
                eventually(Duration::from_secs(5), || notes.taken().len() >= want.len()).await;
                // One more round trip: a duplicate would have come by now.
                client
                    .peer()
                    .call_tool(CallToolRequestParams::new("tool-000"))
                    .await
                    .unwrap();
                let mut got = notes.taken();
                got.sort();
                assert_eq!(got, want, "{who}");
                assert_eq!(resumptions(&server).len(), usize::from(replay), "{who}");
                tokio::time::timeout(Duration::from_secs(20), client.cancel())
                    .await
                    .expect("cancel hung")
                    .expect("the service task ends");
                let released = report.released().await.expect("rmcp closed the transport");
                assert!(
                    matches!(released.session, SessionRelease::Deleted(s) if s == 200),
                    "{who}: {released:?}"
                );
                tokio::time::timeout(Duration::from_secs(20), mcp_scoped_http::shutdown())
                    .await
                    .expect("the reaper finishes");
                baseline.check(&server, 1).await;
            }
        });
    }
}
