//! One churn cycle on rmcp: connect, discover, call one tool, close.

use std::error::Error;
use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, ClientCapabilities, ClientConfig, Implementation, JsonObject,
};
use rmcp::service::{QuitReason, RoleClient, RunningService, ServiceExt};
use rmcp::transport::streamable_http_client::{
    StreamableHttpClient, StreamableHttpClientTransportConfig,
};
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};

use crate::no_listen::NoListen;

/// Why a cycle failed, for the first-error line on stderr.
pub type CycleError = Box<dyn Error + Send + Sync>;

/// What every cycle does against one server.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The MCP endpoint (empty with `stdio`).
    pub url: Arc<str>,
    /// The tool called once per cycle.
    pub tool: String,
    /// Its arguments.
    pub arguments: JsonObject,
    /// Whether rmcp opens its GET listening stream (its default) or is
    /// told the server has none (see [`NoListen`]).
    pub listen: bool,
    /// A stdio server to start in each cycle instead of the URL: its
    /// program and arguments.
    pub stdio: Option<Arc<[String]>>,
}

/// How many items one cycle's discovery listed, all pages together.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Discovered {
    /// From `tools/list`.
    pub tools: usize,
    /// From `prompts/list`, when the server declares prompts.
    pub prompts: usize,
    /// From `resources/list`, when the server declares resources.
    pub resources: usize,
    /// From `resources/templates/list`, when the server declares resources.
    pub resource_templates: usize,
}

impl std::fmt::Display for Discovered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} tools, {} prompts, {} resources, {} resource templates",
            self.tools, self.prompts, self.resources, self.resource_templates
        )
    }
}

/// The client identity sent in `initialize`.
fn client_config() -> ClientConfig {
    ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new("rmcp-churn", env!("CARGO_PKG_VERSION")),
    )
}

/// Runs one stdio cycle: `TokioChildProcess` spawns `command` (its
/// stderr inherited, rmcp's default), `initialize`, discovery and the
/// call over its pipes, then `cancel`, which closes the child's stdin and
/// waits for it to exit (rmcp's `graceful_shutdown`: SIGTERM, then
/// SIGKILL, only past 3 s each).
pub async fn run_stdio(plan: &Plan, command: &[String]) -> Result<Discovered, CycleError> {
    let (program, args) = command.split_first().ok_or("no stdio command")?;
    let mut child = tokio::process::Command::new(program);
    child.args(args);
    let transport = TokioChildProcess::new(child)?;
    let service = client_config().serve(transport).await?;
    let worked = discover_and_call(plan, &service).await;
    let closed = service.cancel().await;
    let discovered = worked?;
    match closed? {
        QuitReason::JoinError(error) => Err(error.into()),
        _ => Ok(discovered),
    }
}

/// Runs one cycle with `http` (a pooled client shared by all cycles, or
/// one built for this cycle alone).
pub async fn run(plan: &Plan, http: reqwest::Client) -> Result<Discovered, CycleError> {
    let config = StreamableHttpClientTransportConfig::with_uri(plan.url.clone());
    if plan.listen {
        on(plan, http, config).await
    } else {
        on(plan, NoListen(http), config).await
    }
}

async fn on<C: StreamableHttpClient>(
    plan: &Plan,
    client: C,
    config: StreamableHttpClientTransportConfig,
) -> Result<Discovered, CycleError> {
    let transport = StreamableHttpClientTransport::with_client(client, config);
    // initialize, then notifications/initialized.
    let service = client_config().serve(transport).await?;
    let worked = discover_and_call(plan, &service).await;
    // Cancels the service and waits for its transport worker, which
    // DELETEs the session on its way out.
    let closed = service.cancel().await;
    let discovered = worked?;
    match closed? {
        QuitReason::JoinError(error) => Err(error.into()),
        // Cancelled, or Closed when the transport had already ended.
        _ => Ok(discovered),
    }
}

/// Lists everything the server declares (every page), then calls the tool.
async fn discover_and_call<S>(
    plan: &Plan,
    service: &RunningService<RoleClient, S>,
) -> Result<Discovered, CycleError>
where
    S: rmcp::Service<RoleClient>,
{
    let capabilities = service
        .peer_info()
        .map(|info| info.capabilities.clone())
        .ok_or("no server info after initialize")?;
    let mut discovered = Discovered::default();
    if capabilities.tools.is_some() {
        discovered.tools = service.list_all_tools().await?.len();
    }
    if capabilities.prompts.is_some() {
        discovered.prompts = service.list_all_prompts().await?.len();
    }
    if capabilities.resources.is_some() {
        discovered.resources = service.list_all_resources().await?.len();
        discovered.resource_templates = service.list_all_resource_templates().await?.len();
    }
    let params =
        CallToolRequestParams::new(plan.tool.clone()).with_arguments(plan.arguments.clone());
    let result = service.call_tool(params).await?;
    if result.is_error == Some(true) {
        return Err(format!(
            "tool {} answered with an error: {:?}",
            plan.tool, result.content
        )
        .into());
    }
    Ok(discovered)
}
