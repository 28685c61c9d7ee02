//! The OAuth flow's resources on every way out: a connect dropped at every
//! await of the flow (owned and borrowed clients), and the loopback user
//! agent's listener, closed once the redirect is in and when the flow is
//! dropped while it waits.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::support::baseline::scene;
use crate::support::*;
use bytes::Bytes;
use http_body_util::Full;
use mcp_scoped_http::oauth::{LoopbackAgent, OAuth};
use mcp_scoped_http::{Connector, HttpClient};
use mcp_scoped_http_testkit::{AuthConfig, AuthServer};
use serde_json::json;

/// The bound on K: far above the polls a connect with the flow takes here.
const MAX_POLLS: usize = 2_000;

fn protected(auth: &AuthServer) -> TestServer {
    support::oauth::protected(Eras::Streamable2025, auth.resource())
}

#[test]
fn dropping_connect_at_every_await_of_the_flow_leaves_nothing_behind() {
    scenario(async {
        for borrowed in [false, true] {
            let auth = AuthServer::start(AuthConfig::default());
            let (server, caller, baseline) = scene(protected(&auth)).await;
            let caller = borrowed.then_some(&caller);
            // A store per session (the default): every attempt runs the
            // whole flow.
            let oauth = support::oauth::headless();
            let connect = || {
                let mut connector = Connector::new(server.url()).oauth(oauth.clone());
                if let Some(caller) = caller {
                    connector = connector.client(caller.client.clone());
                }
                connector.connect()
            };
            let mut completed_at = None;
            for polls in 0..MAX_POLLS {
                match poll_at_most(connect(), polls).await {
                    None => {
                        mcp_scoped_http::shutdown().await;
                        let stats = server.stats();
                        baseline.check(&server, stats.sessions_created).await;
                    }
                    Some(session) => {
                        let session = session.expect("an undisturbed connect succeeds");
                        session.close().await;
                        completed_at = Some(polls);
                        break;
                    }
                }
            }
            let completed_at = completed_at.expect("connect completes within the bound");
            baseline
                .check(&server, server.stats().sessions_created)
                .await;
            // Refused initialize, resource metadata, server metadata,
            // registration, authorization, token, initialize again...: each
            // pends at least once, so drops landed in each step.
            assert!(completed_at >= 7, "{completed_at} polls");
            let stats = auth.stats();
            assert!(
                stats.registrations > 1 && stats.token_requests > 1,
                "drops came after registering and after the token request: {stats:?}"
            );
        }
    });
}

/// A browser: opens the authorization URL and follows its redirect to the
/// loopback listener.
async fn browse(url: String) {
    let client = HttpClient::owned().expect("a client");
    let get = |url: &str| {
        http::Request::get(url)
            .body(Full::new(Bytes::new()))
            .expect("a request")
    };
    let response = client
        .send(get(&url))
        .await
        .expect("the authorization request");
    assert!(response.status().is_redirection(), "{}", response.status());
    let location = response.headers()["location"]
        .to_str()
        .expect("a location")
        .to_owned();
    let response = client.send(get(&location)).await.expect("the redirect");
    assert!(response.status().is_success(), "{}", response.status());
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port()
}

fn port_is_free(port: u16) -> bool {
    std::net::TcpListener::bind(("127.0.0.1", port)).is_ok()
}

#[test]
fn the_loopback_agent_takes_the_redirect_then_closes_its_listener() {
    scenario(async {
        let auth = AuthServer::start(AuthConfig::default());
        let (server, _caller, baseline) = scene(protected(&auth)).await;
        let agent = LoopbackAgent::new().on_url(|url| {
            tokio::spawn(browse(url.to_owned()));
        });
        let session = Connector::new(server.url())
            .oauth(OAuth::new(agent))
            .connect()
            .await
            .expect("connect through the loopback redirect");
        session.call_tool("tool-000", json!({})).await.unwrap();
        session.close().await;
        let authorize = auth
            .requests()
            .into_iter()
            .find(|r| r.path.ends_with("/authorize"))
            .expect("an authorization request");
        let redirect_uri = authorize
            .query_param("redirect_uri")
            .expect("a redirect URI");
        let port: u16 = redirect_uri
            .strip_prefix("http://127.0.0.1:")
            .and_then(|rest| rest.strip_suffix("/callback"))
            .and_then(|port| port.parse().ok())
            .unwrap_or_else(|| panic!("a loopback redirect URI: {redirect_uri}"));
        assert!(port_is_free(port), "the listener on {port} was closed");
        // The browser's own client goes with its task.
        baseline
            .check(&server, server.stats().sessions_created)
            .await;
    });
}

#[test]
fn a_flow_dropped_while_waiting_for_the_redirect_closes_the_listener() {
    scenario(async {
        let auth = AuthServer::start(AuthConfig::default());
        let (server, _caller, baseline) = scene(protected(&auth)).await;
        let port = free_port();
        let shown = Arc::new(AtomicBool::new(false));
        let agent = LoopbackAgent::new().port(port).on_url({
            let shown = shown.clone();
            move |_| shown.store(true, Ordering::SeqCst)
        });
        let mut connect = Box::pin(
            Connector::new(server.url())
                .oauth(OAuth::new(agent))
                .connect(),
        );
        // No browser comes: the flow waits for the redirect.
        tokio::select! {
            _ = &mut connect => panic!("the connect cannot finish without a redirect"),
            shown = eventually(Duration::from_secs(10), || shown.load(Ordering::SeqCst)) => {
                assert!(shown, "the authorization URL was shown");
            }
        }
        assert!(!port_is_free(port), "the listener is up while waiting");
        drop(connect);
        assert!(port_is_free(port), "dropping the flow closed the listener");
        mcp_scoped_http::shutdown().await;
        baseline.check(&server, 0).await;
    });
}

/// Another local process sends a made-up redirect to the listener first:
/// it is answered 400 and the wait goes on until the real one.
#[test]
fn the_loopback_agent_ignores_a_redirect_with_another_state() {
    scenario(async {
        let auth = AuthServer::start(AuthConfig::default());
        let (server, _caller, baseline) = scene(protected(&auth)).await;
        let agent = LoopbackAgent::new().on_url(|url| {
            let url = url.to_owned();
            tokio::spawn(async move {
                let redirect_uri =
                    url::form_urlencoded::parse(url.split_once('?').expect("a query").1.as_bytes())
                        .find(|(name, _)| name == "redirect_uri")
                        .map(|(_, value)| value.into_owned())
                        .expect("a redirect_uri");
                let client = HttpClient::owned().expect("a client");
                let forged = http::Request::get(format!("{redirect_uri}?code=forged&state=forged"))
                    .body(Full::new(Bytes::new()))
                    .expect("a request");
                let answer = client.send(forged).await.expect("the forged redirect");
                assert_eq!(answer.status(), http::StatusCode::BAD_REQUEST);
                browse(url).await;
            });
        });
        let session = Connector::new(server.url())
            .oauth(OAuth::new(agent))
            .connect()
            .await
            .expect("the real redirect wins");
        session.close().await;
        assert_eq!(auth.stats().code_grants, 1);
        baseline
            .check(&server, server.stats().sessions_created)
            .await;
    });
}

/// Sixteen idle connections to the loopback redirect listener, each with
/// a partial request line and nothing more, kept the real redirect out
/// until the wait timed out: the accept loop stopped at 16, and with no
/// timer hyper's header read timeout was off. A new connection now closes
/// the oldest one.
#[test]
fn idle_connections_cannot_keep_the_redirect_out_of_the_loopback_listener() {
    scenario(async {
        let auth = AuthServer::start(AuthConfig::default());
        let server = protected(&auth);
        let port = free_port();
        let idle = Arc::new(std::sync::Mutex::new(Vec::new()));
        let kept = idle.clone();
        let wait = Duration::from_secs(3);
        let agent = LoopbackAgent::new()
            .port(port)
            .timeout(wait)
            .on_url(move |url| {
                let url = url.to_owned();
                let kept = kept.clone();
                tokio::spawn(async move {
                    use tokio::io::AsyncWriteExt as _;
                    for _ in 0..16 {
                        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
                            .await
                            .expect("connect to the listener");
                        stream
                            .write_all(b"GET /callb")
                            .await
                            .expect("a partial line");
                        kept.lock().unwrap().push(stream);
                    }
                    browse(url).await;
                });
            });
        let started = std::time::Instant::now();
        let session = Connector::new(server.url())
            .oauth(OAuth::new(agent))
            .request_timeout(Duration::from_secs(10))
            .connect()
            .await
            .expect("the redirect got through");
        assert!(started.elapsed() < wait, "{:?}", started.elapsed());
        assert_eq!(idle.lock().unwrap().len(), 16);
        session.close().await;
    });
}
