//! A caller's tower-http stack lent as a borrowed client: its own auth
//! header, tracing, a timeout and decompression around its hyper client.
//! The stack runs for every request of the session; the session's token is
//! added before the stack sees the request, for that session only.
//!
//! ```text
//! cargo run --example tower_stack --features testkit
//! ```

use std::time::Duration;

use http::{HeaderName, HeaderValue, StatusCode};
use http_body_util::BodyExt;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use mcp_scoped_http::BoxError;
use mcp_scoped_http::{Connector, HttpClient, Result};
use mcp_scoped_http_testkit::{ServerConfig, TestServer};
use serde_json::json;
use tower::ServiceBuilder;
use tower_http::decompression::DecompressionLayer;
use tower_http::map_response_body::MapResponseBodyLayer;
use tower_http::set_header::SetRequestHeaderLayer;
use tower_http::timeout::TimeoutLayer;
use tower_http::trace::TraceLayer;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<()> {
    let server = TestServer::start(ServerConfig::default());

    let stack = ServiceBuilder::new()
        // The caller's own credentials for its gateway.
        .layer(SetRequestHeaderLayer::overriding(
            HeaderName::from_static("x-caller-auth"),
            HeaderValue::from_static("caller-secret"),
        ))
        .layer(TraceLayer::new_for_http().on_request(
            |request: &http::Request<_>, _span: &tracing::Span| {
                println!("  [trace] {} {}", request.method(), request.uri().path());
            },
        ))
        // 504 when no response head within 10 s.
        .layer(TimeoutLayer::with_status_code(
            StatusCode::GATEWAY_TIMEOUT,
            Duration::from_secs(10),
        ))
        .layer(DecompressionLayer::new())
        // tower-http's timeout needs a body type with a `Default`.
        .layer(MapResponseBodyLayer::new(|body: hyper::body::Incoming| {
            body.map_err(BoxError::from).boxed_unsync()
        }))
        .service(Client::builder(TokioExecutor::new()).build_http());

    let session = Connector::new(server.url())
        .client(HttpClient::borrowed(stack))
        .bearer("session-token")
        .listen(false)
        .connect()
        .await?;
    session.call_tool("tool-000", json!({})).await?;
    session.close().await;

    let sent = server.requests();
    println!("the server saw {} requests of the session:", sent.len());
    for request in &sent {
        println!(
            "  {} {:<26} x-caller-auth: {}, authorization: {}, accept-encoding: {}",
            request.method,
            request.rpc_method.as_deref().unwrap_or("-"),
            request.header("x-caller-auth").unwrap_or("none"),
            request.header("authorization").unwrap_or("none"),
            request.header("accept-encoding").unwrap_or("none"),
        );
        assert_eq!(request.header("x-caller-auth"), Some("caller-secret"));
        assert_eq!(
            request.header("authorization"),
            Some("Bearer session-token")
        );
    }
    Ok(())
}
