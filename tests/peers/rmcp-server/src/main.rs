//! A small MCP server on the official Rust SDK (`rmcp`), a peer for
//! `tests/interop.rs`: three tools (`echo`, `add`, `count_down`, the last
//! streaming progress), Streamable HTTP on 127.0.0.1 at `/mcp`.
//!
//! `rmcp-peer --port P [--stateless] [--json]`. Prints `LISTENING <port>`
//! once bound, and `SEEN <METHOD> <path> <status>` for every HTTP exchange,
//! so that a test can check what the server saw (the DELETE, above all).

use std::time::Duration;

use axum::{extract::Request, middleware::Next, response::Response};
use rmcp::{
    ErrorData, Peer, RoleServer, ServerHandler,
    handler::server::{router::tool::ToolRouter, wrapper::Parameters},
    model::{
        Implementation, ProgressNotificationParam, RequestMetaObject, ServerCapabilities,
        ServerConfig,
    },
    schemars, tool, tool_handler, tool_router,
    transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
    },
};
use std::io::Write;

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
struct EchoArgs {
    /// The text to send back.
    text: String,
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
struct AddArgs {
    a: i64,
    b: i64,
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
struct CountDownArgs {
    /// How many progress notifications to send.
    steps: u32,
}

#[derive(Clone)]
struct Peerless {
    #[allow(dead_code, reason = "read by the tool_handler macro")]
    tool_router: ToolRouter<Self>,
}

#[tool_router]
impl Peerless {
    #[tool(description = "Echoes the text back")]
    fn echo(&self, Parameters(EchoArgs { text }): Parameters<EchoArgs>) -> String {
        text
    }

    #[tool(description = "Adds two integers")]
    fn add(&self, Parameters(AddArgs { a, b }): Parameters<AddArgs>) -> String {
        (a + b).to_string()
    }

    #[tool(description = "Sends `steps` progress notifications, then answers")]
    async fn count_down(
        &self,
        Parameters(CountDownArgs { steps }): Parameters<CountDownArgs>,
        meta: RequestMetaObject,
        client: Peer<RoleServer>,
    ) -> Result<String, ErrorData> {
        if let Some(token) = meta.get_progress_token() {
            for step in 1..=steps {
                let _ = client
                    .notify_progress(
                        ProgressNotificationParam::new(token.clone(), f64::from(step))
                            .with_total(f64::from(steps))
                            .with_message(format!("step {step}")),
                    )
                    .await;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        Ok(format!("counted {steps}"))
    }
}

#[tool_handler]
impl ServerHandler for Peerless {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("rmcp-peer", env!("CARGO_PKG_VERSION")))
    }
}

async fn log_exchange(request: Request, next: Next) -> Response {
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    let response = next.run(request).await;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "SEEN {method} {path} {}", response.status().as_u16());
    let _ = out.flush();
    response
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let mut port = 0u16;
    let mut stateless = false;
    let mut json = false;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--port" => port = args.next().and_then(|p| p.parse().ok()).expect("--port P"),
            "--stateless" => stateless = true,
            "--json" => json = true,
            other => panic!("unknown argument {other}"),
        }
    }
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(!stateless)
        .with_json_response(json);
    let service: StreamableHttpService<Peerless, LocalSessionManager> = StreamableHttpService::new(
        || {
            Ok(Peerless {
                tool_router: Peerless::tool_router(),
            })
        },
        Default::default(),
        config,
    );
    let router = axum::Router::new()
        .nest_service("/mcp", service)
        .layer(axum::middleware::from_fn(log_exchange));
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    println!("LISTENING {}", listener.local_addr()?.port());
    axum::serve(listener, router)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await
}
