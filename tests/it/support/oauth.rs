//! Shared OAuth fixtures: a headless agent, a server behind the test kit's
//! authorization server, a call to whatever tool it offers.

use mcp_scoped_http::Session;
use mcp_scoped_http::oauth::{HeadlessAgent, OAuth};
use mcp_scoped_http_testkit::{Eras, ResourceAuth, ServerConfig, TestServer};
use serde_json::json;

/// Nothing listens there: the headless agent reads the redirect from
/// `Location`.
pub const REDIRECT: &str = "http://127.0.0.1:9/callback";

/// OAuth with the headless agent and the defaults.
pub fn headless() -> OAuth {
    OAuth::new(HeadlessAgent::new(REDIRECT))
}

/// A server of `eras` with two tools that requires `resource`'s tokens.
pub fn protected(eras: Eras, resource: ResourceAuth) -> TestServer {
    TestServer::start(
        ServerConfig::default()
            .with_eras(eras)
            .with_tools(2)
            .with_authorization(resource),
    )
}

/// Calls the first tool the session found, with `{}`.
pub async fn call_first_tool(session: &Session) -> mcp_scoped_http::Result<serde_json::Value> {
    let tool = session
        .catalog()
        .tool_names()
        .next()
        .expect("a tool")
        .to_owned();
    session.call_tool(&tool, json!({})).await
}
