//! `Debug` never shows more of an endpoint than its origin (rule 12): a
//! path or query can carry secrets (`?token=...`), and session ids and
//! header values never show at all.

use mcp_scoped_http::Connector;

const ENDPOINT: &str = "http://127.0.0.1:1/mcp/PATH-SECRET?token=QUERY-SECRET";

fn assert_origin_only(shown: &str) {
    for secret in [
        "PATH-SECRET",
        "QUERY-SECRET",
        "token=",
        "/mcp",
        "BEARER-SECRET",
    ] {
        assert!(!shown.contains(secret), "{secret:?} shown: {shown}");
    }
    assert!(
        shown.contains("127.0.0.1:1"),
        "the origin is shown: {shown}"
    );
}

#[test]
fn a_connectors_debug_shows_the_endpoints_origin_only() {
    let _shared = crate::support::shared();
    let connector = Connector::new(ENDPOINT).bearer("BEARER-SECRET");
    assert_origin_only(&format!("{connector:?}"));
    assert_origin_only(&format!("{connector:#?}"));
}

#[test]
fn a_connector_for_an_invalid_endpoint_shows_none_of_it() {
    let _shared = crate::support::shared();
    let shown = format!(
        "{:?}",
        Connector::new("not a url/PATH-SECRET?token=QUERY-SECRET")
    );
    for secret in ["PATH-SECRET", "QUERY-SECRET"] {
        assert!(!shown.contains(secret), "{secret:?} shown: {shown}");
    }
}

#[cfg(feature = "rmcp")]
#[test]
fn an_rmcp_transport_builders_debug_shows_the_endpoints_origin_only() {
    let _shared = crate::support::shared();
    use mcp_scoped_http::adapters::ScopedTransport;
    let builder = ScopedTransport::builder(ENDPOINT).bearer("BEARER-SECRET");
    assert_origin_only(&format!("{builder:?}"));
    assert_origin_only(&format!("{builder:#?}"));
}

use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

use crate::support::*;
use serde_json::json;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

/// Every field of every span and event, at every level, as text.
#[derive(Clone, Default)]
struct Capture {
    text: Arc<Mutex<String>>,
    spans: Arc<std::sync::atomic::AtomicU64>,
}

struct Text<'a>(&'a mut String);

impl Visit for Text<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        let _ = write!(self.0, "{}={value:?} ", field.name());
    }
}

impl Subscriber for Capture {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }

    fn new_span(&self, span: &Attributes<'_>) -> Id {
        let mut text = self.text.lock().unwrap();
        let _ = write!(text, "\n{} ", span.metadata().name());
        span.record(&mut Text(&mut text));
        Id::from_u64(
            1 + self
                .spans
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        )
    }

    fn record(&self, _: &Id, values: &Record<'_>) {
        values.record(&mut Text(&mut self.text.lock().unwrap()));
    }

    fn record_follows_from(&self, _: &Id, _: &Id) {}

    fn event(&self, event: &Event<'_>) {
        let mut text = self.text.lock().unwrap();
        text.push('\n');
        event.record(&mut Text(&mut text));
    }

    fn enter(&self, _: &Id) {}

    fn exit(&self, _: &Id) {}
}

/// No session id, token, path or query reaches tracing, at any level,
/// through a whole session: connect, calls, a server request, an expiry
/// and its renewal, a failing call, close.
#[test]
fn no_secret_reaches_tracing_at_any_level() {
    let capture = Capture::default();
    let dispatch = tracing::Dispatch::new(capture.clone());
    tracing::dispatcher::with_default(&dispatch, || {
        scenario(async {
            // The secret path is the server's own; the query goes along.
            let server = TestServer::start(
                ServerConfig::default()
                    .with_listen(ListenMode::Open)
                    .with_path("/mcp/PATH-SECRET"),
            );
            let endpoint = format!("{}?token=QUERY-SECRET", server.url());
            assert!(endpoint.contains("/mcp/PATH-SECRET?"), "{endpoint}");
            let session = Connector::new(endpoint)
                .bearer("BEARER-SECRET")
                .roots(vec![json!({"uri": "file:///r", "name": "r"})])
                .connect()
                .await
                .expect("connect");
            session.call_tool("tool-000", json!({})).await.unwrap();
            server.push_fault(
                Fault::on_rpc(
                    "tools/call",
                    FaultAction::ServerRequest {
                        method: "roots/list".into(),
                        params: json!({}),
                    },
                )
                .times(1),
            );
            session.call_tool("tool-001", json!({})).await.unwrap();
            server.push_fault(Fault::on_rpc("tools/call", FaultAction::status(500)).times(1));
            session.call_tool("tool-000", json!({})).await.unwrap_err();
            server.expire_sessions();
            session.call_tool("tool-000", json!({})).await.unwrap();
            session.close().await;
            drop(session);
            mcp_scoped_http::shutdown().await;
            let ids: Vec<String> = server.session_log().into_iter().map(|r| r.id).collect();
            assert_eq!(ids.len(), 2);
            let text = capture.text.lock().unwrap().clone();
            assert!(text.contains("mcp.close"), "tracing was captured: {text}");
            for secret in ids.iter().map(String::as_str).chain([
                "BEARER-SECRET",
                "PATH-SECRET",
                "QUERY-SECRET",
            ]) {
                assert!(
                    !text.contains(secret),
                    "{secret:?} reached tracing:\n{text}"
                );
            }
        });
    });
}

/// No OAuth secret (access and refresh tokens, codes, verifiers, client
/// secrets) reaches tracing, an error, or the `Debug` of anything that
/// holds one, through a registration, a step-up, a refresh and refused
/// flows.
#[test]
fn no_oauth_secret_reaches_tracing_errors_or_debug() {
    use base64::Engine as _;
    use mcp_scoped_http::oauth::{CredentialStore, HeadlessAgent, MemoryStore, OAuth};
    use mcp_scoped_http_testkit::{AuthConfig, AuthFault, AuthServer};

    let capture = Capture::default();
    let dispatch = tracing::Dispatch::new(capture.clone());
    tracing::dispatcher::with_default(&dispatch, || {
        scenario(async {
            let auth = AuthServer::start(AuthConfig::default());
            let server = TestServer::start(
                ServerConfig::default()
                    .with_authorization(auth.resource().with_tool_scope("tool-001", "mcp:write")),
            );
            let store = Arc::new(MemoryStore::new());
            let oauth =
                OAuth::new(HeadlessAgent::new("http://127.0.0.1:9/cb")).store(store.clone());
            let connector = Connector::new(server.url()).oauth(oauth.clone());
            let session = connector.connect().await.expect("connect");
            session.call_tool("tool-000", json!({})).await.unwrap();
            session.call_tool("tool-001", json!({})).await.unwrap();
            auth.expire_all_tokens();
            session.call_tool("tool-000", json!({})).await.unwrap();
            let mut shown = vec![
                format!("{session:?}"),
                format!("{connector:?}"),
                format!("{oauth:?}"),
                format!("{store:?}"),
                // What the store holds: tokens and the registered client.
                format!("{:?}", store.token(&server.url()).expect("a token")),
                format!("{:?}", store.client(&auth.issuer()).expect("a client")),
            ];
            // Refused: a refresh, then a redirect with a wrong iss; then a
            // token endpoint that fails.
            auth.revoke_all_tokens();
            auth.push_fault(AuthFault::WrongIss);
            let error = session.call_tool("tool-000", json!({})).await.unwrap_err();
            shown.push(format!("{error} {error:?}"));
            auth.clear_faults();
            auth.push_fault(AuthFault::TokenError(400));
            let error = session.call_tool("tool-000", json!({})).await.unwrap_err();
            shown.push(format!("{error} {error:?}"));
            let released = session.close().await;
            shown.push(format!("{released:?}"));
            mcp_scoped_http::shutdown().await;

            let mut secrets: Vec<String> =
                auth.tokens().into_iter().map(|t| t.access_token).collect();
            for request in auth.requests() {
                for name in ["code", "code_verifier", "refresh_token", "client_secret"] {
                    if let Some(value) = request.param(name) {
                        secrets.push(value.to_owned());
                    }
                }
                if let Some(basic) = request
                    .header("authorization")
                    .and_then(|h| h.strip_prefix("Basic "))
                {
                    secrets.push(basic.to_owned());
                    let decoded = base64::engine::general_purpose::STANDARD
                        .decode(basic)
                        .expect("base64");
                    let decoded = String::from_utf8(decoded).expect("utf-8");
                    let (_, secret) = decoded.split_once(':').expect("id:secret");
                    secrets.push(secret.to_owned());
                }
            }
            let kinds = ["code", "code_verifier", "refresh_token"]
                .iter()
                .filter(|name| auth.requests().iter().any(|r| r.param(name).is_some()))
                .count();
            assert_eq!(kinds, 3, "codes, verifiers and refresh tokens were sent");
            assert!(secrets.len() > 8, "{}", secrets.len());
            let text = capture.text.lock().unwrap().clone();
            assert!(text.contains("mcp.oauth"), "the flow was traced: {text}");
            for secret in &secrets {
                assert!(
                    !text.contains(secret.as_str()),
                    "a secret reached tracing:\n{text}"
                );
                for shown in &shown {
                    assert!(
                        !shown.contains(secret.as_str()),
                        "a secret was shown: {shown}"
                    );
                }
            }
        });
    });
}
