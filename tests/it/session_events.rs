//! Session events (issues 21 and 22): one bounded stream per session of
//! what happened to it: a renewal (new id), a catalog list re-listed and in
//! place, the listener up and down, the close. A slow reader is told how
//! many it lost; the session never waits for it.

use std::time::Duration;

use crate::support::*;
use http::Method;
use mcp_scoped_http::{CatalogList, Connector, SESSION_EVENT_CAPACITY, Session, SessionEvent};
use serde_json::json;
use tokio::sync::broadcast::Receiver;
use tokio::sync::broadcast::error::{RecvError, TryRecvError};

const PROMPT: Duration = Duration::from_secs(5);

/// The next event, within [`PROMPT`].
async fn next(events: &mut Receiver<SessionEvent>) -> Result<SessionEvent, RecvError> {
    tokio::time::timeout(PROMPT, events.recv())
        .await
        .expect("an event within 5 s")
}

/// Reads events until one matches, within [`PROMPT`] overall; the ones
/// skipped are returned with it.
async fn until(
    events: &mut Receiver<SessionEvent>,
    wanted: impl Fn(&SessionEvent) -> bool,
) -> (SessionEvent, Vec<SessionEvent>) {
    let mut skipped = Vec::new();
    let found = tokio::time::timeout(PROMPT, async {
        loop {
            match events.recv().await {
                Ok(event) if wanted(&event) => return event,
                Ok(event) => skipped.push(event),
                Err(error) => panic!("{error:?} before the event; skipped {skipped:?}"),
            }
        }
    })
    .await;
    match found {
        Ok(event) => (event, skipped),
        Err(_) => panic!("no such event within 5 s; skipped {skipped:?}"),
    }
}

fn gets(server: &TestServer) -> usize {
    seen_http(server, Method::GET).len()
}

/// A 404 expiry: the session renews on the next call, says so with the new
/// id, and the renewal's re-listing follows as catalog changes.
#[test]
fn a_renewal_after_a_404_expiry_says_so_with_the_new_id() {
    scenario(async {
        let server = TestServer::start(ServerConfig::default());
        // No listener: its events are another test's.
        let session = Connector::new(server.url())
            .listen(false)
            .connect()
            .await
            .unwrap();
        let old = session.session_id().unwrap();
        let mut events = session.events();
        server.expire_sessions();
        session
            .call_tool("tool-000", json!({}))
            .await
            .expect("sent again on the new session");
        let new = session.session_id().unwrap();
        assert_ne!(new, old);
        let (renewed, skipped) =
            until(&mut events, |e| matches!(e, SessionEvent::Renewed { .. })).await;
        assert!(skipped.is_empty(), "{skipped:?}");
        let SessionEvent::Renewed {
            session_id,
            revision,
            ..
        } = renewed
        else {
            unreachable!()
        };
        assert_eq!(session_id.as_ref(), Some(&new));
        assert_eq!(revision, session.protocol_version());
        // The renewal lists again: the tools, in place when announced.
        let (changed, _) = until(&mut events, |e| {
            matches!(
                e,
                SessionEvent::CatalogChanged {
                    list: CatalogList::Tools,
                    ..
                }
            )
        })
        .await;
        let SessionEvent::CatalogChanged { generation, .. } = changed else {
            unreachable!()
        };
        assert!(generation >= 1);
        assert!(session.catalog_generation() >= generation);
        assert_eq!(session.catalog().tools.len(), 3);
        session.close().await;
    });
}

/// A `list_changed` in each era that has one (2025 GET stream, 2026-07-28
/// subscription, HTTP+SSE stream): the event comes once the new list is
/// in place, so the new tool is there when it is read.
#[test]
fn a_list_changed_is_announced_with_the_new_list_in_place_in_every_era() {
    scenario(async {
        for eras in [Eras::Streamable2025, Eras::Modern, Eras::HttpSse] {
            let server = TestServer::start(
                ServerConfig::default()
                    .with_eras(eras)
                    .with_listen(ListenMode::Open),
            );
            let session = Connector::new(server.url())
                .discovery(
                    mcp_scoped_http::Discovery::default().relist_interval(Duration::from_millis(1)),
                )
                .connect()
                .await
                .unwrap();
            assert_eq!(session.catalog().tools.len(), 3, "{eras:?}");
            assert_eq!(session.catalog_generation(), 0);
            let mut events = session.events();
            server.set_tools(5);
            // Announced once the session listens to hear it.
            assert!(
                eventually(PROMPT, || server.list_changed("tools") > 0).await,
                "{eras:?}: nobody listens"
            );
            let (changed, _) = until(&mut events, |e| {
                matches!(e, SessionEvent::CatalogChanged { .. })
            })
            .await;
            let SessionEvent::CatalogChanged {
                generation, list, ..
            } = changed
            else {
                unreachable!()
            };
            assert_eq!(list, CatalogList::Tools, "{eras:?}");
            assert_eq!(generation, 1, "{eras:?}");
            let catalog = session.catalog();
            assert_eq!(catalog.tools.len(), 5, "{eras:?}: the event came first");
            assert!(catalog.tool("tool-004").is_some(), "{eras:?}");
            assert!(session.catalog_generation() >= 1);
            session.close().await;
        }
    });
}

/// The listener's opens and ends, as they happen: a stream cut and
/// reopened is down (retrying) then up; a stream the server then refuses
/// (405) is down for good, and nothing more follows.
#[test]
fn the_listener_going_up_and_down_is_announced() {
    scenario(async {
        let server = TestServer::start(ServerConfig::default().with_listen(ListenMode::Open));
        let session = Connector::new(server.url())
            .listen_backoff(Duration::from_millis(10), Duration::from_millis(40))
            .connect()
            .await
            .unwrap();
        assert!(eventually(PROMPT, || server.stats().listen_streams_open == 1).await);
        let mut events = session.events();
        let note = json!({"jsonrpc": "2.0", "method": "notifications/message",
                          "params": {"level": "info", "data": "bye"}});
        // The reopen resumes the cut stream (its replay, then its end),
        // then opens a live one: downs and ups alternate, each up once a
        // stream opened.
        assert_eq!(server.cut_listeners_after(&note), 1);
        // The first stream's up may come after the server counted it open.
        let (_, skipped) = until(&mut events, |e| {
            matches!(e, SessionEvent::ListenerDown { retrying: true, .. })
        })
        .await;
        assert!(
            matches!(skipped.as_slice(), [] | [SessionEvent::ListenerUp]),
            "{skipped:?}"
        );
        match next(&mut events).await {
            Ok(SessionEvent::ListenerUp) => {}
            other => panic!("{other:?}"),
        }
        assert!(eventually(PROMPT, || server.stats().listen_streams_open == 1).await);
        // Downs and ups alternate; on a loaded machine a stream can still
        // drop and reopen here, so a down already sent waits for its up.
        let mut up = true;
        let mut round = 0;
        loop {
            let event = match events.try_recv() {
                Ok(event) => event,
                Err(_) if up => break,
                Err(_) => next(&mut events).await.expect("the up after a down"),
            };
            match event {
                SessionEvent::ListenerDown { retrying: true, .. } if up => up = false,
                SessionEvent::ListenerUp if !up => up = true,
                other => panic!("out of turn: {other:?}"),
            }
            round += 1;
            assert!(round < 1000, "the listener never settles");
        }
        assert!(up, "the live stream is up");
        assert!(session.is_listening());

        // Refused from now on: down, and then down for good.
        server.push_fault(Fault::on_http(Method::GET, FaultAction::status(405)));
        assert_eq!(server.cut_listeners_after(&note), 1);
        let (stopped, skipped) = until(&mut events, |e| {
            matches!(
                e,
                SessionEvent::ListenerDown {
                    retrying: false,
                    ..
                }
            )
        })
        .await;
        assert!(
            matches!(
                skipped.as_slice(),
                [SessionEvent::ListenerDown { retrying: true, .. }]
                    | [
                        SessionEvent::ListenerDown { retrying: true, .. },
                        SessionEvent::ListenerUp,
                        SessionEvent::ListenerDown { retrying: true, .. }
                    ]
            ),
            "{skipped:?}"
        );
        let SessionEvent::ListenerDown { reason, .. } = stopped else {
            unreachable!()
        };
        assert!(reason.contains("405"), "{reason}");
        assert!(eventually(PROMPT, || !session.is_listening()).await);
        // Absence can only be watched for: a window past several backoffs.
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(
            matches!(events.try_recv(), Err(TryRecvError::Empty)),
            "no storm of events"
        );
        session.close().await;
    });
}

/// 2026-07-28: the `subscriptions/listen` stream going up is announced
/// (held back here so that the reader is there first); a close then ends
/// the stream with `Closed`, no down.
#[test]
fn a_subscription_going_up_is_announced_in_2026() {
    scenario(async {
        let server = TestServer::start(
            ServerConfig::default().with_eras(Eras::Modern).with_fault(
                Fault::on_rpc(
                    "subscriptions/listen",
                    FaultAction::Delay(Duration::from_secs(1)),
                )
                .times(1),
            ),
        );
        let session = Connector::new(server.url()).connect().await.unwrap();
        let mut events = session.events();
        match next(&mut events).await {
            Ok(SessionEvent::ListenerUp) => {}
            other => panic!("{other:?}"),
        }
        assert!(session.is_listening());
        assert!(eventually(PROMPT, || server.list_changed("tools") > 0).await);
        let (changed, _) = until(&mut events, |e| {
            matches!(e, SessionEvent::CatalogChanged { .. })
        })
        .await;
        assert!(matches!(
            changed,
            SessionEvent::CatalogChanged {
                list: CatalogList::Tools,
                ..
            }
        ));
        session.close().await;
        match next(&mut events).await {
            Ok(SessionEvent::Closed) => {}
            other => panic!("{other:?}"),
        }
    });
}

/// A listener that finds the session expired (the GET stream ends, the
/// reopen gets 404, its `ping` renews): down, renewed with the new id, and
/// up on the new session.
#[test]
fn a_renewal_by_the_listener_is_announced_with_the_listener_back_up() {
    scenario(async {
        let server = TestServer::start(ServerConfig::default().with_listen(ListenMode::Open));
        let session = Connector::new(server.url())
            .listen_backoff(Duration::from_millis(10), Duration::from_millis(40))
            .connect()
            .await
            .unwrap();
        let old = session.session_id().unwrap();
        assert!(eventually(PROMPT, || server.stats().listen_streams_open == 1).await);
        let mut events = session.events();
        server.expire_sessions();
        let (renewed, skipped) =
            until(&mut events, |e| matches!(e, SessionEvent::Renewed { .. })).await;
        assert!(
            matches!(
                skipped.as_slice(),
                [SessionEvent::ListenerDown { retrying: true, .. }]
                    | [
                        SessionEvent::ListenerUp,
                        SessionEvent::ListenerDown { retrying: true, .. }
                    ]
            ),
            "{skipped:?}"
        );
        let SessionEvent::Renewed { session_id, .. } = renewed else {
            unreachable!()
        };
        let new = session_id.expect("the new session has an id");
        assert_ne!(new, old);
        assert_eq!(session.session_id(), Some(new));
        until(&mut events, |e| matches!(e, SessionEvent::ListenerUp)).await;
        session.close().await;
    });
}

/// Close ends every stream after `Closed`; a stream made after close ends
/// at once; a dropped session ends its streams too.
#[test]
fn close_ends_the_stream_after_closed() {
    scenario(async {
        let server = TestServer::start(ServerConfig::default());
        let session = Connector::new(server.url()).connect().await.unwrap();
        let mut first = session.events();
        let mut second = session.events();
        session.close().await;
        for events in [&mut first, &mut second] {
            assert!(matches!(next(events).await, Ok(SessionEvent::Closed)));
            assert!(matches!(next(events).await, Err(RecvError::Closed)));
        }
        let mut late = session.events();
        assert!(matches!(next(&mut late).await, Err(RecvError::Closed)));

        let session: Session = Connector::new(server.url()).connect().await.unwrap();
        let mut events = session.events();
        drop(session);
        assert!(matches!(next(&mut events).await, Ok(SessionEvent::Closed)));
        assert!(matches!(next(&mut events).await, Err(RecvError::Closed)));
        mcp_scoped_http::shutdown().await;
    });
}

/// A reader that never reads, while the listener opens and ends a stream
/// every few milliseconds (two events each): the session goes on (the
/// listener keeps listening, calls are answered), and the reader is told
/// how many it lost, then reads the newest.
#[test]
fn a_slow_reader_lags_and_the_session_never_waits_for_it() {
    scenario(async {
        let server = TestServer::start(
            ServerConfig::default()
                .with_listen(ListenMode::Open)
                .with_fault(Fault::on_http(
                    Method::GET,
                    FaultAction::raw(200, "text/event-stream", "id: p\ndata:\n\n"),
                )),
        );
        let session = Connector::new(server.url())
            .listen_backoff(Duration::from_millis(1), Duration::from_millis(2))
            .connect()
            .await
            .unwrap();
        let mut events = session.events();
        let from = gets(&server);
        // Each GET is an up and a down: well over the capacity.
        let enough = from + SESSION_EVENT_CAPACITY;
        assert!(
            eventually(PROMPT, || gets(&server) > enough).await,
            "the listener waited for the reader: {} GETs",
            gets(&server) - from
        );
        session
            .call_tool("tool-000", json!({}))
            .await
            .expect("the session answers meanwhile");
        match next(&mut events).await {
            Err(RecvError::Lagged(lost)) => assert!(lost > 0),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            next(&mut events).await,
            Ok(SessionEvent::ListenerUp | SessionEvent::ListenerDown { .. })
        ));
        assert!(session.is_listening());
        session.close().await;
    });
}

/// Issue 26 (3): an HTTP+SSE session whose stream breaks a limit is over:
/// the call waiting on it fails with that limit, the session says so with
/// `Ended` (a host reconnects on it), and later requests fail at once with
/// the same error.
#[test]
fn an_http_sse_stream_over_the_limit_ends_the_session_and_says_so() {
    scenario(async {
        let server = TestServer::start(ServerConfig::default().with_eras(Eras::HttpSse));
        let session = Connector::new(server.url()).connect().await.unwrap();
        let mut events = session.events();
        let huge = format!(
            r#"{{"jsonrpc":"2.0","id":{{id}},"result":{{"text":"{}"}}}}"#,
            "x".repeat(8 * 1024 * 1024)
        );
        server.push_fault(Fault::on_rpc(
            "tools/call",
            FaultAction::StreamRaw(huge.into()),
        ));
        let error = session
            .call_tool("tool-000", json!({}))
            .await
            .expect_err("over the SSE event limit");
        assert!(error.is_limit(), "{error}");
        let (event, _) = until(&mut events, |e| matches!(e, SessionEvent::Ended { .. })).await;
        let SessionEvent::Ended { reason, .. } = event else {
            unreachable!()
        };
        assert!(reason.contains("limit"), "{reason}");
        let later = session.request("ping", None).await.expect_err("ended");
        assert!(later.is_limit(), "{later}");
        session.close().await;
    });
}
