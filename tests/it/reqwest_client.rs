//! A caller's `reqwest::Client` lent to sessions (feature `reqwest`): the
//! sessions' headers stay on their own requests, the caller's own requests
//! on the same client never carry them, and the client works after every
//! session is closed, failed or dropped.

use std::collections::HashMap;
use std::time::Duration;

use crate::support::baseline::{Baseline, Caller};
use crate::support::*;
use http::Method;
use mcp_scoped_http::{Connector, HttpClient, Session};
use serde_json::json;
use tokio::task::JoinSet;

const WAIT: Duration = Duration::from_secs(5);

/// The caller's reqwest client. Redirects are left to this crate, as the
/// adapter's docs ask; idle pooled connections expire quickly, so that the
/// baseline's task and descriptor counts, which cannot tell the caller's
/// reqwest connections from ours, settle within the check's bound.
fn callers_reqwest() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .pool_idle_timeout(Duration::from_millis(100))
        .default_headers(http::HeaderMap::from_iter([(
            http::HeaderName::from_static("x-caller-default"),
            http::HeaderValue::from_static("yes"),
        )]))
        .build()
        .expect("a reqwest client")
}

/// The baseline's caller, lending `client` instead of a hyper client.
fn caller_lending(client: &reqwest::Client) -> Caller {
    let mut caller = Caller::new();
    caller.client = HttpClient::from_reqwest(client.clone());
    caller
}

/// A request of the caller's own, straight through its reqwest client.
async fn own_reqwest(client: &reqwest::Client, server: &TestServer, tag: &str) {
    let response = client
        .post(server.url())
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("x-caller", tag)
        .body(r#"{"jsonrpc":"2.0","id":"caller","method":"ping"}"#)
        .send()
        .await
        .expect("the caller's reqwest client works");
    response.bytes().await.expect("its body reads");
}

fn values(request: &RecordedRequest, name: &str) -> Vec<String> {
    request
        .headers
        .get_all(name)
        .iter()
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .collect()
}

/// The error and its causes, as text.
fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(next) = cause {
        text = format!("{text}: {next}");
        cause = next.source();
    }
    text
}

fn describe(r: &RecordedRequest) -> String {
    format!("{} {:?} {:?}", r.method, r.rpc_method, r.header("x-caller"))
}

fn connector(lent: &HttpClient, server: &TestServer, name: &str) -> Connector {
    Connector::new(server.url())
        .client(lent.clone())
        .bearer(&format!("token-{name}"))
        .header("x-session-hook", name)
}

#[test]
fn sessions_on_a_callers_reqwest_client_keep_their_headers_and_leave_it_working() {
    scenario(async {
        let server = TestServer::start(ServerConfig::default().with_listen(ListenMode::Open));
        let client = callers_reqwest();
        let caller = caller_lending(&client);
        caller.own_request(&server).await;
        own_reqwest(&client, &server, "reqwest-warm").await;
        let baseline = Baseline::take(Some(&caller));

        // Two sessions on one lent reqwest client, with concurrent calls,
        // and the caller's own requests in between.
        let a = connector(&caller.client, &server, "a")
            .connect()
            .await
            .unwrap();
        let b = connector(&caller.client, &server, "b")
            .connect()
            .await
            .unwrap();
        assert_eq!(caller.client.hooks().len(), 4, "two hooks per session");
        let sessions: [std::sync::Arc<Session>; 2] = [a.into(), b.into()];
        let mut calls = JoinSet::new();
        for i in 0..10 {
            let session = sessions[i % 2].clone();
            calls.spawn(async move { session.call_tool("tool-001", json!({"i": i})).await });
        }
        own_reqwest(&client, &server, "reqwest-during").await;
        while let Some(done) = calls.join_next().await {
            done.unwrap().unwrap();
        }
        for session in &sessions {
            session.close().await;
        }
        drop(sessions);
        own_reqwest(&client, &server, "reqwest-after-closed").await;

        // A connect that fails: 401 on initialize, no id, no DELETE.
        server.push_fault(
            Fault::on_rpc(
                "initialize",
                FaultAction::unauthorized("Bearer realm=\"test\""),
            )
            .times(1),
        );
        let error = connector(&caller.client, &server, "c")
            .connect()
            .await
            .unwrap_err();
        assert_eq!(
            error.status(),
            Some(http::StatusCode::UNAUTHORIZED),
            "{error}"
        );
        own_reqwest(&client, &server, "reqwest-after-failed").await;

        // A connect dropped half-way, with the server holding `tools/list`,
        // through another `HttpClient` lending the same reqwest client: the
        // reaper DELETEs the session it had.
        server.push_fault(Fault::on_rpc("tools/list", FaultAction::Hang).times(1));
        let lists_before = seen(&server, "tools/list").len();
        tokio::select! {
            connected = connector(&HttpClient::from_reqwest(client.clone()), &server, "d").connect() => {
                panic!("connect finished against a hung tools/list: {:?}", connected.map(|_| ()))
            }
            reached = eventually(WAIT, || seen(&server, "tools/list").len() > lists_before) => {
                assert!(reached, "tools/list reached the server");
            }
        }
        own_reqwest(&client, &server, "reqwest-after-dropped").await;
        mcp_scoped_http::shutdown().await;

        // The caller's client works after all of it, and its own requests
        // (through reqwest directly, and through the lent HttpClient) carry
        // none of the sessions' headers.
        own_reqwest(&client, &server, "reqwest-after").await;
        let via = http::Request::post(server.url())
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("x-caller", "via-http-client")
            .body(http_body_util::Full::new(bytes::Bytes::from_static(
                br#"{"jsonrpc":"2.0","id":"caller","method":"ping"}"#,
            )))
            .unwrap();
        caller
            .client
            .send(via)
            .await
            .expect("the lent client works");

        let requests = server.requests();
        let mut session_of_id: HashMap<String, String> = HashMap::new();
        let mut ours_per_session: HashMap<String, usize> = HashMap::new();
        for r in &requests {
            if let Some(tag) = r.header("x-caller") {
                assert!(values(r, "authorization").is_empty(), "{}", describe(r));
                assert!(values(r, "x-session-hook").is_empty(), "{}", describe(r));
                assert!(r.header("mcp-session-id").is_none(), "{}", describe(r));
                if tag != "own" {
                    // The hyper client of the baseline has no such default.
                    assert_eq!(values(r, "x-caller-default"), ["yes"], "{}", describe(r));
                }
                continue;
            }
            // Ours: exactly this session's token and header, and the
            // client's default header, which is the caller's to add.
            let name = values(r, "x-session-hook");
            assert_eq!(name.len(), 1, "one session header: {}", describe(r));
            let name = &name[0];
            assert_eq!(
                values(r, "authorization"),
                [format!("Bearer token-{name}")],
                "{}",
                describe(r)
            );
            assert_eq!(values(r, "x-caller-default"), ["yes"], "{}", describe(r));
            if r.method == Method::POST {
                // A streamed body of known size still goes out with a
                // Content-Length, not chunked.
                assert!(r.header("content-length").is_some(), "{}", describe(r));
                assert_eq!(r.header("transfer-encoding"), None, "{}", describe(r));
            }
            if let Some(id) = r.header("mcp-session-id") {
                let owner = session_of_id.entry(id.to_owned()).or_insert(name.clone());
                assert_eq!(owner, name, "one session id, one session: {}", describe(r));
            }
            *ours_per_session.entry(name.clone()).or_default() += 1;
        }
        for name in ["a", "b", "c", "d"] {
            assert!(ours_per_session.contains_key(name), "session {name} sent");
        }
        let tags: Vec<_> = requests
            .iter()
            .filter_map(|r| r.header("x-caller"))
            .collect();
        for tag in [
            "reqwest-during",
            "reqwest-after-closed",
            "reqwest-after-failed",
            "reqwest-after-dropped",
            "reqwest-after",
            "via-http-client",
        ] {
            assert!(tags.contains(&tag), "{tag} reached the server");
        }
        let deletes = seen_http(&server, Method::DELETE);
        let mut deleted: Vec<_> = deletes
            .iter()
            .map(|r| values(r, "x-session-hook").concat())
            .collect();
        deleted.sort();
        assert_eq!(
            deleted,
            ["a", "b", "d"],
            "each DELETE with its session's hooks"
        );

        baseline.check(&server, 3).await;
    });
}

#[test]
fn redirects_reach_the_crates_policy_when_the_client_follows_none() {
    scenario(async {
        let other = TestServer::start(ServerConfig::default());
        let server = TestServer::start(ServerConfig::default());
        let client = callers_reqwest();
        let caller = caller_lending(&client);
        caller.own_request(&server).await;
        own_reqwest(&client, &server, "reqwest-warm").await;
        let baseline = Baseline::take(Some(&caller));

        let session = connector(&caller.client, &server, "a")
            .listen(false)
            .connect()
            .await
            .unwrap();
        // A same-origin 307 is followed by this crate, as a POST.
        server.push_fault(
            Fault::on_rpc(
                "tools/list",
                FaultAction::Redirect {
                    status: 307,
                    location: "/mcp".into(),
                },
            )
            .times(1),
        );
        session.request("tools/list", None).await.unwrap();
        // Another origin, and a 303, are refused.
        for (status, location) in [(307, other.url()), (303, "/mcp".to_owned())] {
            server.push_fault(
                Fault::on_rpc("tools/list", FaultAction::Redirect { status, location }).times(1),
            );
            let error = session.request("tools/list", None).await.unwrap_err();
            assert!(error.is_redirect(), "{status}: {error}");
        }
        assert!(other.requests().is_empty());
        let lists = seen(&server, "tools/list");
        assert!(lists.iter().all(|r| r.method == Method::POST));
        session.close().await;
        drop(session);
        baseline.check(&server, 1).await;
    });
}

#[test]
fn with_reqwests_default_redirect_policy_a_307_still_reaches_the_crate() {
    scenario(async {
        let other = TestServer::start(ServerConfig::default());
        let server = TestServer::start(ServerConfig::default());
        // The default policy follows up to 10 redirects of any kind.
        let client = reqwest::Client::builder()
            .pool_idle_timeout(Duration::from_millis(100))
            .build()
            .unwrap();
        let caller = caller_lending(&client);
        caller.own_request(&server).await;
        own_reqwest(&client, &server, "reqwest-warm").await;
        let baseline = Baseline::take(Some(&caller));

        let session = connector(&caller.client, &server, "a")
            .listen(false)
            .connect()
            .await
            .unwrap();
        // The body is a stream reqwest cannot replay, so it hands the 307
        // back and this crate refuses it: nothing reaches the other origin.
        server.push_fault(
            Fault::on_rpc(
                "tools/list",
                FaultAction::Redirect {
                    status: 307,
                    location: other.url(),
                },
            )
            .times(1),
        );
        let error = session.request("tools/list", None).await.unwrap_err();
        assert!(error.is_redirect(), "{error}");
        assert!(other.requests().is_empty(), "{:?}", other.requests());

        // A 303 reqwest follows on its own, as a GET (the documented reason
        // to lend a client with `Policy::none()`); the adapter refuses the
        // answer from the other URL.
        server.push_fault(
            Fault::on_rpc(
                "tools/list",
                FaultAction::Redirect {
                    status: 303,
                    location: other.url(),
                },
            )
            .times(1),
        );
        let error = session.request("tools/list", None).await.unwrap_err();
        assert!(error.is_transport(), "{error}");
        assert!(
            chain(&error).contains("followed a redirect"),
            "{}",
            chain(&error)
        );
        let followed = other.requests();
        assert_eq!(followed.len(), 1);
        assert_eq!(followed[0].method, Method::GET);
        assert_eq!(followed[0].header("authorization"), None);

        // The session carries on.
        session.request("tools/list", None).await.unwrap();
        session.close().await;
        drop(session);
        baseline.check(&server, 1).await;
    });
}

#[test]
fn a_reqwest_timeout_is_reported_as_a_timeout_and_the_session_carries_on() {
    scenario(async {
        let server = TestServer::start(ServerConfig::default());
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .pool_idle_timeout(Duration::from_millis(100))
            .timeout(Duration::from_millis(300))
            .build()
            .unwrap();
        let caller = caller_lending(&client);
        caller.own_request(&server).await;
        own_reqwest(&client, &server, "reqwest-warm").await;
        let baseline = Baseline::take(Some(&caller));

        // `timeout` bounds whole exchanges, so no GET stream here.
        let session = connector(&caller.client, &server, "a")
            .listen(false)
            .connect()
            .await
            .unwrap();
        server.push_fault(
            Fault::on_rpc("tools/call", FaultAction::Delay(Duration::from_secs(3))).times(1),
        );
        let error = session.call_tool("tool-000", json!({})).await.unwrap_err();
        assert!(error.is_timeout(), "{error}");
        let shown = format!("{error} {error:?}");
        // Where it was going (host and port) may show; the URL (its path
        // and query may hold secrets) may not.
        assert!(!shown.contains("/mcp"), "no URL in the error: {shown}");
        session.call_tool("tool-000", json!({})).await.unwrap();
        session.close().await;
        drop(session);
        baseline.check(&server, 1).await;
    });
}
