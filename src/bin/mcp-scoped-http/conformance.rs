//! `conformance URL`: the client under test for the official MCP
//! conformance suite (`@modelcontextprotocol/conformance`), which names the
//! scenario in `MCP_CONFORMANCE_SCENARIO` and appends its server URL.

use mcp_scoped_http::jsonrpc::ErrorObject;
use serde_json::{Map, Value, json};

use crate::args::Common;
use crate::commands::{call_tool, close_outcome};
use crate::phase;
use crate::{Failure, Outcome};

/// The scenarios this client acts on.
const SCENARIOS: [&str; 4] = [
    "initialize",
    "tools_call",
    "elicitation-sep1034-client-defaults",
    "sse-retry",
];

/// An `elicitation/create` answer that accepts with every default of the
/// requested schema.
pub(crate) fn accept_defaults(params: &Value) -> Value {
    let content: Map<String, Value> = params["requestedSchema"]["properties"]
        .as_object()
        .map(|properties| {
            properties
                .iter()
                .filter_map(|(name, schema)| Some((name.clone(), schema.get("default")?.clone())))
                .collect()
        })
        .unwrap_or_default();
    json!({ "action": "accept", "content": content })
}

pub(crate) async fn run(url: &str, common: &Common) -> Outcome {
    let scenario = std::env::var("MCP_CONFORMANCE_SCENARIO").map_err(|_| {
        Failure::usage("MCP_CONFORMANCE_SCENARIO is not set (the conformance suite sets it)")
    })?;
    // Auth scenarios pass their context as JSON; none of ours needs it, but
    // a malformed one is still worth saying.
    if let Ok(context) = std::env::var("MCP_CONFORMANCE_CONTEXT") {
        if serde_json::from_str::<Value>(&context).is_err() {
            return Err(Failure::usage("MCP_CONFORMANCE_CONTEXT is not valid JSON"));
        }
    }
    if !SCENARIOS.contains(&scenario.as_str()) {
        return Err(Failure::usage(format!(
            "unknown conformance scenario {scenario:?} (known: {})",
            SCENARIOS.join(", ")
        )));
    }
    // sse-retry's server answers the pending tools/call on whichever GET it
    // sees first, the listener's or the resumption's: the library takes the
    // response on either.
    let mut connector = common.connector(url)?;
    let mut listen_watch = None;
    if scenario == "elicitation-sep1034-client-defaults" {
        // This server sends `elicitation/create` on the GET listening
        // stream, and drops it if that stream is not open yet: the call
        // waits until the listener's GET has been answered.
        listen_watch = phase::ListenWatch::install();
        connector = connector.on_elicitation(|params: Value| async move {
            Ok::<_, ErrorObject>(accept_defaults(&params))
        });
    }
    let session = phase::connect(connector, common.timeout).await?;
    if let Some(watch) = &listen_watch {
        if !common.no_listen {
            watch.wait(std::time::Duration::from_secs(5)).await;
        }
    }
    let call = match scenario.as_str() {
        "initialize" => None,
        "tools_call" => Some(("add_numbers".to_owned(), json!({ "a": 2, "b": 3 }))),
        _ => {
            // The tool the scenario's server offers.
            let tool = session.catalog().tool_names().next().map(str::to_owned);
            match tool {
                Some(tool) => Some((tool, json!({}))),
                None => {
                    session.close().await;
                    return Err(Failure::server(
                        "discovery failed: the scenario's server offers no tool",
                    ));
                }
            }
        }
    };
    let outcome = match call {
        Some((tool, arguments)) => call_tool(&session, &tool, arguments, common.timeout)
            .await
            .map(|result| {
                if !common.json {
                    eprintln!("{scenario}: {tool} answered {result}");
                }
            }),
        None => Ok(()),
    };
    let released = session.close().await;
    outcome?;
    close_outcome(&released)
}
