//! Header hooks are scoped: to the session that registered them, to the
//! endpoint's origin, and to the session's lifetime. The caller's own hooks
//! and requests are never touched (F25 and ownership rule 5).

use crate::support;

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use crate::support::baseline::{Baseline, Caller};
use crate::support::*;
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method};
use http_body_util::Full;
use mcp_scoped_http::{Connector, HeaderHook, Session, SessionRelease};
use serde_json::json;
use tokio::task::JoinSet;

const WAIT: Duration = Duration::from_secs(5);

/// Every request of ours (not the caller's own through its raw client).
fn ours(server: &TestServer) -> Vec<RecordedRequest> {
    server
        .requests()
        .into_iter()
        .filter(|r| r.header("x-caller").is_none())
        .collect()
}

/// All values of header `name` on a request.
fn values(request: &RecordedRequest, name: &str) -> Vec<String> {
    request
        .headers
        .get_all(name)
        .iter()
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .collect()
}

fn describe(r: &RecordedRequest) -> String {
    format!("{} {:?}", r.method, r.rpc_method)
}

/// A URL on 127.0.0.1 at a port nobody listens on: another origin.
fn other_origin() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    format!("http://127.0.0.1:{port}/mcp")
}

async fn session_on(caller: &Caller, server: &TestServer, name: &str) -> Session {
    Connector::new(server.url())
        .client(caller.client.clone())
        .bearer(&format!("token-{name}"))
        .header("x-session-hook", name)
        .connect()
        .await
        .unwrap()
}

/// A request through the caller's `HttpClient` itself (not its raw hyper
/// client): client-wide hooks apply, no session's do.
async fn callers_request_through_http_client(caller: &Caller, server: &TestServer) {
    let request = http::Request::post(server.url())
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("x-caller", "via-http-client")
        .body(Full::new(Bytes::from_static(
            br#"{"jsonrpc":"2.0","id":"caller","method":"ping"}"#,
        )))
        .unwrap();
    caller
        .client
        .send(request)
        .await
        .expect("the caller's send works");
}

#[test]
fn sessions_sharing_a_borrowed_client_each_send_only_their_own_headers() {
    scenario(async {
        let server = TestServer::start(ServerConfig::default().with_listen(ListenMode::Open));
        let caller = Caller::new();
        // The caller's own client-wide hooks: one for this server, one for
        // another origin.
        let tenant = caller
            .client
            .add_hook(&server.url(), HeaderHook::header("x-tenant", "t1").unwrap())
            .unwrap();
        let elsewhere = caller
            .client
            .add_hook(
                &other_origin(),
                HeaderHook::header("x-other", "o1").unwrap(),
            )
            .unwrap();
        let callers_hooks = caller.client.hooks();
        assert_eq!(callers_hooks.len(), 2);
        caller.own_request(&server).await;
        let baseline = Baseline::take(Some(&caller));

        let a = Arc::new(session_on(&caller, &server, "a").await);
        let b = Arc::new(session_on(&caller, &server, "b").await);
        assert_eq!(caller.client.hooks().len(), 2 + 4, "two hooks per session");
        assert_eq!(
            caller.client.hooks()[..2],
            callers_hooks[..],
            "ours go after"
        );

        // Concurrent calls on both sessions.
        let mut calls = JoinSet::new();
        for i in 0..12 {
            let session = if i % 2 == 0 { a.clone() } else { b.clone() };
            calls.spawn(async move {
                session
                    .call_tool(&format!("tool-00{}", i % 3), json!({"i": i}))
                    .await
            });
        }
        while let Some(done) = calls.join_next().await {
            done.unwrap().unwrap();
        }
        callers_request_through_http_client(&caller, &server).await;

        let id_a = a.session_id().unwrap().expose().to_owned();
        let id_b = b.session_id().unwrap().expose().to_owned();
        let mut initializes = Vec::new();
        let mut calls_per_session = [0, 0];
        for r in ours(&server) {
            if r.header("x-caller") == Some("via-http-client")
                || r.rpc_method.as_deref() == Some("server/discover")
            {
                // The era probe (the first connect through the client)
                // carries no session id.
                continue;
            }
            let name: String = match r.header("mcp-session-id") {
                Some(id) if id == id_a => "a".into(),
                Some(id) if id == id_b => "b".into(),
                Some(_) => panic!("an unknown session id on {}", describe(&r)),
                None => {
                    assert_eq!(
                        r.rpc_method.as_deref(),
                        Some("initialize"),
                        "{}",
                        describe(&r)
                    );
                    let name = values(&r, "x-session-hook").pop().unwrap_or_default();
                    initializes.push(name.clone());
                    name
                }
            };
            assert_eq!(
                values(&r, "authorization"),
                [format!("Bearer token-{name}")],
                "{}",
                describe(&r)
            );
            assert_eq!(
                values(&r, "x-session-hook"),
                [name.as_str()],
                "{}",
                describe(&r)
            );
            assert_eq!(
                values(&r, "x-tenant"),
                ["t1"],
                "the caller's hook applies: {}",
                describe(&r)
            );
            assert!(
                values(&r, "x-other").is_empty(),
                "another origin's hook: {}",
                describe(&r)
            );
            if r.rpc_method.as_deref() == Some("tools/call") {
                calls_per_session[usize::from(name == "b")] += 1;
            }
        }
        initializes.sort();
        assert_eq!(initializes, ["a", "b"]);
        assert_eq!(calls_per_session, [6, 6]);

        // Through the caller's HttpClient: its own hook, none of a session's.
        let via = server
            .requests()
            .into_iter()
            .find(|r| r.header("x-caller") == Some("via-http-client"))
            .unwrap();
        assert_eq!(values(&via, "x-tenant"), ["t1"]);
        assert!(values(&via, "authorization").is_empty());
        assert!(values(&via, "x-session-hook").is_empty());
        assert!(values(&via, "x-other").is_empty());
        assert!(via.header("mcp-session-id").is_none());

        // Closing removes exactly that session's hooks, by identity.
        let released = a.close().await;
        assert_eq!(released.hooks_removed, 2);
        let left = caller.client.hooks();
        assert_eq!(left[..2], callers_hooks[..]);
        assert_eq!(left.len(), 4, "b's hooks stay while b lives");
        b.call_tool("tool-001", json!({})).await.unwrap();
        let released = b.close().await;
        assert_eq!(released.hooks_removed, 2);
        assert_eq!(
            caller.client.hooks(),
            callers_hooks,
            "the caller's hooks, same order"
        );

        drop((a, b));
        baseline.check(&server, 2).await;
        // The caller's hooks are the caller's to remove.
        assert_eq!(caller.client.hooks(), callers_hooks);
        drop((tenant, elsewhere));
        assert!(caller.client.hooks().is_empty());
    });
}

#[test]
fn a_provider_hook_is_asked_per_request_and_its_failure_fails_only_that_request() {
    scenario(async {
        for borrowed in [false, true] {
            let (server, caller, baseline) =
                support::baseline::scene(TestServer::start(ServerConfig::default())).await;

            let asked = Arc::new(AtomicUsize::new(0));
            let failing = Arc::new(AtomicBool::new(false));
            let hook = {
                let (asked, failing) = (asked.clone(), failing.clone());
                HeaderHook::provider(move || {
                    let n = asked.fetch_add(1, Ordering::SeqCst);
                    let fail = failing.load(Ordering::SeqCst);
                    async move {
                        if fail {
                            return Err("the token service is down".into());
                        }
                        let mut headers = HeaderMap::new();
                        let value = HeaderValue::from_str(&format!("Bearer fresh-{n}"))?;
                        headers.insert(http::header::AUTHORIZATION, value);
                        Ok(headers)
                    }
                })
            };
            assert!(!format!("{hook:?}").contains("fresh"));
            let mut connector = Connector::new(server.url()).hook(hook).listen(false);
            if borrowed {
                connector = connector.client(caller.client.clone());
            }
            let session = connector.connect().await.unwrap();

            let sent = ours(&server);
            assert_eq!(
                asked.load(Ordering::SeqCst),
                sent.len(),
                "asked once per request"
            );
            let tokens: HashSet<String> = sent
                .iter()
                .map(|r| {
                    let auth = values(r, "authorization");
                    assert_eq!(auth.len(), 1, "{}", describe(r));
                    auth[0].clone()
                })
                .collect();
            assert_eq!(tokens.len(), sent.len(), "a fresh value per request");

            // The provider fails: that request fails, nothing is sent.
            failing.store(true, Ordering::SeqCst);
            let error = session.call_tool("tool-000", json!({})).await.unwrap_err();
            assert!(error.is_hook(), "{error:?}");
            assert_eq!(
                ours(&server).len(),
                sent.len(),
                "nothing sent without headers"
            );
            assert!(!session.is_closed());

            // The session goes on once the provider recovers.
            failing.store(false, Ordering::SeqCst);
            let result = session.call_tool("tool-001", json!({})).await.unwrap();
            assert_eq!(result["structuredContent"]["tool"], "tool-001");
            let before_close = asked.load(Ordering::SeqCst);
            let released = session.close().await;
            assert!(
                matches!(released.session, SessionRelease::Deleted(s) if s == 200),
                "{released:?}"
            );
            assert_eq!(released.hooks_removed, 1);
            assert_eq!(
                asked.load(Ordering::SeqCst),
                before_close + 1,
                "the DELETE too"
            );
            let delete = seen_http(&server, Method::DELETE).pop().unwrap();
            assert_eq!(
                delete.header("authorization"),
                Some(format!("Bearer fresh-{before_close}").as_str())
            );
            // Removed: the caller's later requests never ask it.
            callers_request_through_http_client(&caller, &server).await;
            assert_eq!(asked.load(Ordering::SeqCst), before_close + 1);
            drop(session);
            baseline.check(&server, 1).await;
        }
    });
}

#[test]
fn hook_values_never_show_in_debug_or_errors() {
    scenario(async {
        let secret = "s3cr3t-v4lue";
        let bearer = HeaderHook::bearer(secret).unwrap();
        let header = HeaderHook::header("x-api-key", secret).unwrap();
        let fixed = HeaderHook::fixed(HeaderMap::from_iter([(
            http::header::HeaderName::from_static("x-fixed"),
            HeaderValue::from_str(secret).unwrap(),
        )]));
        let provider = HeaderHook::provider(move || async move {
            let mut headers = HeaderMap::new();
            headers.insert("x-provided", HeaderValue::from_static("s3cr3t-v4lue"));
            Ok(headers)
        });
        let mut shown = Vec::new();
        for hook in [&bearer, &header, &fixed, &provider] {
            shown.push(format!("{hook:?} {hook:#?}"));
        }
        assert!(
            shown[1].contains("x-api-key"),
            "names are fine: {}",
            shown[1]
        );

        let server = TestServer::start(ServerConfig::default());
        let caller = Caller::new();
        let handle = caller
            .client
            .add_hook(&server.url(), header.clone())
            .unwrap();
        let connector = Connector::new(server.url())
            .client(caller.client.clone())
            .hook(bearer.clone())
            .hook(fixed.clone())
            .hook(provider.clone());
        shown.push(format!("{connector:?}"));
        let session = connector.connect().await.unwrap();
        shown.push(format!("{session:?} {:?}", session.info()));
        shown.push(format!(
            "{:?} {handle:?} {:?}",
            caller.client,
            caller.client.hooks()
        ));
        // A value that cannot be a header is refused without quoting it.
        let bad = HeaderHook::bearer(&format!("{secret}\n")).unwrap_err();
        shown.push(format!("{bad} {bad:?}"));
        let bad = HeaderHook::header("x-api-key", &format!("{secret}\r")).unwrap_err();
        shown.push(format!("{bad} {bad:?}"));
        for text in &shown {
            assert!(!text.contains(secret), "a hook value is shown: {text}");
        }
        // They were applied all the same.
        let init = seen(&server, "initialize").pop().unwrap();
        assert_eq!(values(&init, "x-api-key"), [secret]);
        assert_eq!(values(&init, "x-fixed"), [secret]);
        assert_eq!(values(&init, "x-provided"), [secret]);
        assert_eq!(values(&init, "authorization"), [format!("Bearer {secret}")]);
        session.close().await;
        drop(handle);
        assert!(caller.client.hooks().is_empty());
    });
}

/// A configured value with non-ASCII UTF-8 (a display name, a workspace
/// path) is a field value under RFC 9110 (obs-text): accepted, and sent as
/// its bytes. http 1.6 narrowed `HeaderValue::from_str` to ASCII; a host's
/// config that worked before must keep working.
#[test]
fn a_header_value_in_utf8_is_sent_as_its_bytes() {
    scenario(async {
        let server = TestServer::start(ServerConfig::default());
        let caller = Caller::new();
        let session = Connector::new(server.url())
            .client(caller.client.clone())
            .header("x-workspace", "/home/zoë/café")
            .bearer("tökén")
            .connect()
            .await
            .unwrap();
        let init = seen(&server, "initialize").pop().unwrap();
        assert_eq!(
            init.headers.get("x-workspace").map(HeaderValue::as_bytes),
            Some("/home/zoë/café".as_bytes())
        );
        assert_eq!(
            init.headers.get("authorization").map(HeaderValue::as_bytes),
            Some("Bearer tökén".as_bytes())
        );
        session.close().await;
        // Control characters are still refused.
        assert!(HeaderHook::header("x-workspace", "café\u{7f}").is_err());
        assert!(HeaderHook::bearer("tö\nkén").is_err());
    });
}

#[test]
fn closing_one_session_mid_request_of_another_breaks_neither() {
    scenario(async {
        let (server, caller, baseline) = support::baseline::scene(TestServer::start(
            ServerConfig::default().with_listen(ListenMode::Open),
        ))
        .await;

        let a = session_on(&caller, &server, "a").await;
        let b = session_on(&caller, &server, "b").await;
        let id_b = b.session_id().unwrap().expose().to_owned();
        server.push_fault(
            Fault::on_rpc("tools/call", FaultAction::Delay(Duration::from_millis(400))).times(1),
        );
        let call_b = b.call_tool("tool-002", json!({"slow": true}));
        let close_a = async {
            assert!(
                eventually(WAIT, || !seen(&server, "tools/call").is_empty()).await,
                "b's call reached the server"
            );
            a.close().await
        };
        let (result_b, released_a) = tokio::time::timeout(Duration::from_secs(10), async {
            tokio::join!(call_b, close_a)
        })
        .await
        .expect("neither hangs");
        assert!(
            matches!(released_a.session, SessionRelease::Deleted(s) if s == 200),
            "{released_a:?}"
        );
        assert_eq!(released_a.hooks_removed, 2);
        let result_b = result_b.expect("b's call survives a's close");
        assert_eq!(result_b["structuredContent"]["tool"], "tool-002");

        // The slow call was b's, with b's headers only; a's DELETE was a's.
        let call = seen(&server, "tools/call").pop().unwrap();
        assert_eq!(call.header("mcp-session-id"), Some(id_b.as_str()));
        assert_eq!(values(&call, "authorization"), ["Bearer token-b"]);
        let delete = seen_http(&server, Method::DELETE).pop().unwrap();
        assert_eq!(values(&delete, "authorization"), ["Bearer token-a"]);
        assert_ne!(delete.header("mcp-session-id"), Some(id_b.as_str()));

        // b goes on, and still only with its own headers.
        b.call_tool("tool-000", json!({})).await.unwrap();
        let call = seen(&server, "tools/call").pop().unwrap();
        assert_eq!(values(&call, "authorization"), ["Bearer token-b"]);
        assert_eq!(values(&call, "x-session-hook"), ["b"]);
        assert!(matches!(
            b.close().await.session,
            SessionRelease::Deleted(_)
        ));
        drop((a, b));
        baseline.check(&server, 2).await;
    });
}
