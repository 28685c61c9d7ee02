//! The lifecycle methods are the session's own (F36): a caller who sends
//! `initialize` or `notifications/initialized` through [`Session::request`]
//! or [`Session::notify`] is refused with a clear error that names the
//! method, nothing goes out, and the session, owned or attached, is
//! unchanged: same id, no new session on the server, no DELETE, still
//! usable. Each case runs over an owned and a borrowed client.

use crate::support;

use std::future::Future;
use std::pin::Pin;

use crate::support::baseline::Caller;
use crate::support::*;
use mcp_scoped_http::{Connector, Result, Session};
use serde_json::{Value, json};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Owned,
    Attached,
}

fn initialize_params() -> Value {
    json!({
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "a-caller", "version": "0"},
    })
}

type Sending<'a> = Pin<Box<dyn Future<Output = Result<()>> + 'a>>;

/// Runs one refused send over every kind of session and client.
fn refused(method: &'static str, send: for<'a> fn(&'a Session) -> Sending<'a>) {
    scenario(async move {
        for kind in [Kind::Owned, Kind::Attached] {
            for borrowed in [false, true] {
                let what = format!(
                    "{method}, {kind:?}, {}",
                    if borrowed { "borrowed" } else { "owned" }
                );
                let (server, caller, baseline) =
                    support::baseline::scene(TestServer::start(ServerConfig::default())).await;
                // For an attached session: the caller's own session, lent by id.
                let owner = match kind {
                    Kind::Attached => Some(
                        Connector::new(server.url())
                            .listen(false)
                            .connect()
                            .await
                            .expect("the owner's session"),
                    ),
                    Kind::Owned => None,
                };
                let session = open(&server, &caller, borrowed, owner.as_ref()).await;
                let id = session.session_id().expect("a session id");
                let before = server.stats();
                let sent_before = seen(&server, method).len();

                let outcome = send(&session).await;

                assert_eq!(
                    seen(&server, method).len(),
                    sent_before,
                    "{what}: went out to the server (answered {outcome:?})"
                );
                let error = outcome.expect_err("refused");
                assert!(
                    error.is_protocol() || error.is_builder(),
                    "{what}: not a clear refusal: {error}"
                );
                assert!(
                    error.to_string().contains(method),
                    "{what}: the error names the method: {error}"
                );
                let after = server.stats();
                assert_eq!(
                    after.sessions_created, before.sessions_created,
                    "{what}: a new session"
                );
                assert_eq!(after.deletes, before.deletes, "{what}: a DELETE");
                assert_eq!(
                    session.session_id(),
                    Some(id.clone()),
                    "{what}: the id changed"
                );
                let ok = session
                    .call_tool("tool-000", json!({"after": method}))
                    .await
                    .unwrap_or_else(|e| panic!("{what}: the session still works: {e}"));
                assert_eq!(ok["structuredContent"]["arguments"]["after"], method);
                let last = seen(&server, "tools/call").pop().unwrap();
                assert_eq!(last.header("mcp-session-id"), Some(id.expose()));

                session.close().await;
                drop(session);
                if let Some(owner) = owner {
                    owner.close().await;
                }
                mcp_scoped_http::shutdown().await;
                let log = assert_each_session_deleted_once(&server, &what).await;
                assert_eq!(log.len(), 1, "{what}: one session in all");
                baseline.check(&server, 1).await;
            }
        }
    });
}

async fn open(
    server: &TestServer,
    caller: &Caller,
    borrowed: bool,
    owner: Option<&Session>,
) -> Session {
    let mut connector = Connector::new(server.url()).bearer("f36");
    if borrowed {
        connector = connector.client(caller.client.clone());
    }
    if let Some(owner) = owner {
        connector = connector.attach(owner.session_id().unwrap(), owner.protocol_version());
    }
    connector.connect().await.expect("connect")
}

#[test]
fn f36_a_request_for_initialize_is_refused_and_the_session_is_unchanged() {
    refused("initialize", |session| {
        Box::pin(async move {
            session
                .request("initialize", Some(initialize_params()))
                .await
                .map(drop)
        })
    });
}

#[test]
fn f36_a_notification_initialized_is_refused_and_the_session_is_unchanged() {
    refused("notifications/initialized", |session| {
        Box::pin(session.notify("notifications/initialized", None))
    });
}

#[test]
fn f36_a_request_for_notifications_initialized_is_refused_and_the_session_is_unchanged() {
    refused("notifications/initialized", |session| {
        Box::pin(async move {
            session
                .request("notifications/initialized", None)
                .await
                .map(drop)
        })
    });
}

#[test]
fn f36_a_notification_named_initialize_is_refused_and_the_session_is_unchanged() {
    refused("initialize", |session| {
        Box::pin(session.notify("initialize", Some(initialize_params())))
    });
}
