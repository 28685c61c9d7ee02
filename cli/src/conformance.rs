//! `conformance URL`: the client under test for the official MCP
//! conformance suite (`@modelcontextprotocol/conformance`), which names the
//! scenario in `MCP_CONFORMANCE_SCENARIO`, the revision it targets in
//! `MCP_CONFORMANCE_PROTOCOL_VERSION` (0.2 sets it always, 0.1 never), an
//! optional JSON context in `MCP_CONFORMANCE_CONTEXT`, and appends its
//! server URL.
//!
//! The library does the protocol (which era the server speaks, headers,
//! `_meta`, version retries, multi round-trip requests, dropping tools with
//! an invalid `x-mcp-header`); this command only does what each scenario
//! asks of an application: which tool to call with which arguments, what
//! the elicitation handler answers.

use mcp_scoped_http::jsonrpc::ErrorObject;
use mcp_scoped_http::oauth::{ClientCredentials, HeadlessAgent, OAuth, TokenAuthMethod};
use mcp_scoped_http::{Connector, ProtocolVersion, Session};
use serde_json::{Map, Value, json};

use crate::args::Common;
use crate::commands::{call_tool, close_outcome};
use crate::phase;
use crate::{Failure, Outcome};

/// The scenarios this client acts on: the 2025-11-25 ones, the 2026-07-28
/// ones (`tools_call` is in both), and one of both revisions.
const SCENARIOS: [&str; 11] = [
    // 2025-11-25
    "initialize",
    "tools_call",
    "elicitation-sep1034-client-defaults",
    "sse-retry",
    // 2026-07-28
    "request-metadata",
    "http-standard-headers",
    "http-custom-headers",
    "http-invalid-tool-headers",
    "sep-2322-client-request-state",
    "json-schema-ref-no-deref",
    // both
    "json-schema-2020-12-preservation",
];

/// The authorization scenarios (`auth/...`): the server and its
/// authorization server approve on their own, so a headless user agent
/// reads the redirect; nothing listens at the redirect URI.
const AUTH_PREFIX: &str = "auth/";
const AUTH_REDIRECT_URI: &str = "http://localhost:3000/callback";
/// The Client ID Metadata Document URL the suite expects where its
/// authorization server supports them.
const AUTH_CLIENT_METADATA_URL: &str = "https://conformance-test.local/client-metadata.json";

/// The tools of `sep-2322-client-request-state`: two multi round-trip
/// flows (with and without `requestState`), one plain tool called while
/// the first flow is under way, and one whose result has no `resultType`.
const MRTR_ECHO_STATE: &str = "test_mrtr_echo_state";
const MRTR_UNRELATED: &str = "test_mrtr_unrelated";
const MRTR_REST: [&str; 2] = ["test_mrtr_no_state", "test_mrtr_no_result_type"];

/// `json-schema-2020-12-preservation`: the tool whose schema the client
/// must hold verbatim, and the tool it echoes that schema through.
const SCHEMA_TOOL: &str = "json_schema_2020_12_tool";
const SCHEMA_ECHO: &str = "json_schema_echo";

/// A value for a schema property that has no default: what a user who
/// accepts would plausibly fill in.
fn sample(schema: &Value) -> Value {
    if let Some(value) = schema.get("default") {
        return value.clone();
    }
    if let Some(first) = schema["enum"].as_array().and_then(|e| e.first()) {
        return first.clone();
    }
    match schema["type"].as_str() {
        Some("boolean") => json!(true),
        Some("integer") => json!(1),
        Some("number") => json!(1.5),
        Some("object") => json!({}),
        Some("array") => json!([]),
        Some("null") => Value::Null,
        _ => json!("conformance"),
    }
}

/// An `elicitation/create` answer that accepts, with every default of the
/// requested schema and a plausible value for each property without one
/// (`confirmed: true` for MRTR's confirmation).
pub(crate) fn accept_defaults(params: &Value) -> Value {
    let content: Map<String, Value> = params["requestedSchema"]["properties"]
        .as_object()
        .map(|properties| {
            properties
                .iter()
                .map(|(name, schema)| (name.clone(), sample(schema)))
                .collect()
        })
        .unwrap_or_default();
    json!({ "action": "accept", "content": content })
}

/// Arguments for a tool: a value for each required property of its input
/// schema.
fn arguments_for(tool: &Value) -> Value {
    let schema = &tool["inputSchema"];
    let required = schema["required"].as_array().cloned().unwrap_or_default();
    let arguments: Map<String, Value> = required
        .iter()
        .filter_map(Value::as_str)
        .map(|name| (name.to_owned(), sample(&schema["properties"][name])))
        .collect();
    Value::Object(arguments)
}

/// `http-custom-headers` passes the calls to make in its context:
/// `{"toolCalls": [{"name": ..., "arguments": {...}}, ...]}`.
fn context_calls(context: Option<&Value>) -> Result<Vec<(String, Value)>, Failure> {
    let calls = context
        .and_then(|c| c["toolCalls"].as_array())
        .ok_or_else(|| {
            Failure::usage("MCP_CONFORMANCE_CONTEXT has no toolCalls (the suite passes them)")
        })?;
    calls
        .iter()
        .map(|call| match call["name"].as_str() {
            Some(name) => Ok((name.to_owned(), call["arguments"].clone())),
            None => Err(Failure::usage(
                "MCP_CONFORMANCE_CONTEXT has a tool call without a name",
            )),
        })
        .collect()
}

/// The revision the suite targets, when it is one to pin: a 2026-07-28
/// scenario's server speaks nothing else, so the client skips detection.
/// For any other revision (or none, 0.1) the library detects the era, as it
/// would against a real server.
fn pinned_revision() -> Option<ProtocolVersion> {
    let revision = std::env::var("MCP_CONFORMANCE_PROTOCOL_VERSION").ok()?;
    (revision == ProtocolVersion::V2026_07_28.as_str()).then_some(ProtocolVersion::V2026_07_28)
}

/// Pins the modern revision (no `server/discover` probe of other eras).
fn pin(connector: Connector, revision: ProtocolVersion) -> Connector {
    connector.protocol_version(revision)
}

pub(crate) async fn run(url: &str, common: &Common) -> Outcome {
    let scenario = std::env::var("MCP_CONFORMANCE_SCENARIO").map_err(|_| {
        Failure::usage("MCP_CONFORMANCE_SCENARIO is not set (the conformance suite sets it)")
    })?;
    let context = match std::env::var("MCP_CONFORMANCE_CONTEXT") {
        Ok(text) => Some(
            serde_json::from_str::<Value>(&text)
                .map_err(|_| Failure::usage("MCP_CONFORMANCE_CONTEXT is not valid JSON"))?,
        ),
        Err(_) => None,
    };
    let auth = scenario.starts_with(AUTH_PREFIX);
    if !auth && !SCENARIOS.contains(&scenario.as_str()) {
        return Err(Failure::usage(format!(
            "unknown conformance scenario {scenario:?} (known: {})",
            SCENARIOS.join(", ")
        )));
    }
    // Read before connecting: a usage error should not cost a connect.
    let planned_calls = match scenario.as_str() {
        "http-custom-headers" => Some(context_calls(context.as_ref())?),
        _ => None,
    };

    let mut connector = common.connector(url)?;
    if let Some(revision) = pinned_revision() {
        connector = pin(connector, revision);
    }
    if auth {
        connector = connector.oauth(conformance_oauth(context.as_ref()));
    }
    // sse-retry's server answers the pending tools/call on whichever GET it
    // sees first, the listener's or the resumption's: the library takes the
    // response on either, but the scenario checks the resumption's
    // Last-Event-ID and retry delay, so the call waits until the
    // listener's GET has been answered (else, sent late, it can be the
    // first GET after the call).
    let mut listen_watch = None;
    match scenario.as_str() {
        "sse-retry" => listen_watch = phase::ListenWatch::install(),
        "elicitation-sep1034-client-defaults" => {
            // This server sends `elicitation/create` on the GET listening
            // stream, and drops it if that stream is not open yet: the call
            // waits until the listener's GET has been answered.
            listen_watch = phase::ListenWatch::install();
            connector = connector.on_elicitation(|params: Value| async move {
                Ok::<_, ErrorObject>(accept_defaults(&params))
            });
        }
        "sep-2322-client-request-state" => {
            // The server asks for a confirmation inside the tool's result
            // (an input request); the library hands it to this handler and
            // retries the call with the answer.
            connector = connector.on_elicitation(|params: Value| async move {
                Ok::<_, ErrorObject>(accept_defaults(&params))
            });
        }
        _ => {}
    }
    let session = phase::connect(connector, common.timeout).await?;
    if !common.json {
        let info = session.info();
        eprintln!(
            "{scenario}: connected, protocol version {} over {} ({})",
            info.protocol_version,
            info.transport,
            if info.probed { "probed" } else { "pinned" }
        );
    }
    if let Some(watch) = &listen_watch {
        if !common.no_listen {
            watch.wait(std::time::Duration::from_secs(5)).await;
        }
    }
    let outcome = act(&scenario, &session, planned_calls, common).await;
    let released = session.close().await;
    outcome?;
    close_outcome(&released)
}

/// OAuth as the authorization scenarios want it: a headless agent, the
/// suite's metadata document URL, and the pre-registered client of the
/// context (`client_id`, `client_secret`, and in 0.2 its `issuer`).
fn conformance_oauth(context: Option<&Value>) -> OAuth {
    let mut oauth = OAuth::new(HeadlessAgent::new(AUTH_REDIRECT_URI))
        .client_metadata_url(AUTH_CLIENT_METADATA_URL);
    let field = |name: &str| context.and_then(|c| c.get(name)).and_then(Value::as_str);
    if let Some(id) = field("client_id") {
        let credentials = match field("client_secret") {
            Some(secret) => {
                ClientCredentials::confidential(id, secret, TokenAuthMethod::ClientSecretBasic)
            }
            None => ClientCredentials::public(id),
        };
        // The suite's 0.1 context names no issuer: its client is for the
        // scenario's one authorization server, whichever that is.
        oauth = match field("issuer") {
            Some(issuer) => oauth.client(credentials, issuer),
            None => oauth.client_for_any_issuer(credentials),
        };
    }
    oauth
}

/// What the scenario asks of the application once connected.
async fn act(
    scenario: &str,
    session: &Session,
    planned_calls: Option<Vec<(String, Value)>>,
    common: &Common,
) -> Outcome {
    let catalog = session.catalog();
    let calls: Vec<(String, Value)> = match scenario {
        // The handshake (or discovery) is the whole scenario; for
        // request-metadata, so is the library's retry with a supported
        // version, and for json-schema-ref-no-deref, listing the tools
        // without fetching the `$ref` they point to.
        "initialize" | "request-metadata" | "json-schema-ref-no-deref" => Vec::new(),
        "tools_call" => vec![("add_numbers".to_owned(), json!({ "a": 2, "b": 3 }))],
        "http-custom-headers" => planned_calls.unwrap_or_default(),
        // Every tool the library kept (it drops those whose `x-mcp-header`
        // is invalid): the valid one must be called, the others must not.
        "http-invalid-tool-headers" => catalog
            .tools
            .iter()
            .filter_map(|tool| Some((tool["name"].as_str()?.to_owned(), arguments_for(tool))))
            .collect(),
        "http-standard-headers" => return standard_headers(session, common).await,
        "sep-2322-client-request-state" => return request_state(session, common).await,
        "json-schema-2020-12-preservation" => {
            let Some(tool) = catalog.tool(SCHEMA_TOOL) else {
                return Err(Failure::server(format!(
                    "discovery failed: the scenario's server offers no {SCHEMA_TOOL}"
                )));
            };
            vec![(
                SCHEMA_ECHO.to_owned(),
                json!({ "schema": tool["inputSchema"] }),
            )]
        }
        _ => {
            // The one tool the scenario's server offers.
            match catalog.tool_names().next() {
                Some(tool) => vec![(tool.to_owned(), json!({}))],
                None => {
                    return Err(Failure::server(
                        "discovery failed: the scenario's server offers no tool",
                    ));
                }
            }
        }
    };
    for (tool, arguments) in calls {
        call(scenario, session, &tool, arguments, common).await?;
    }
    Ok(())
}

/// One tool call, reported on stderr.
async fn call(
    scenario: &str,
    session: &Session,
    tool: &str,
    arguments: Value,
    common: &Common,
) -> Outcome {
    let result = call_tool(session, tool, arguments, common.timeout).await?;
    if !common.json {
        eprintln!(
            "{scenario}: {tool} answered {}",
            crate::terminal_safe(&result.to_string())
        );
    }
    Ok(())
}

/// `http-standard-headers`: one request of each kind that carries
/// `Mcp-Name` (a tool call, a resource read, a prompt get) for every item
/// discovery found; the lists were sent by discovery.
async fn standard_headers(session: &Session, common: &Common) -> Outcome {
    let scenario = "http-standard-headers";
    let catalog = session.catalog();
    for tool in catalog.tool_names() {
        call(scenario, session, tool, json!({}), common).await?;
    }
    for uri in catalog.resources.iter().filter_map(|r| r["uri"].as_str()) {
        let read = phase::bounded(common.timeout, session.read_resource(uri)).await;
        request_outcome(scenario, "resources/read", uri, read, common)?;
    }
    for name in catalog.prompts.iter().filter_map(|p| p["name"].as_str()) {
        let got = phase::bounded(common.timeout, session.get_prompt(name, json!({}))).await;
        request_outcome(scenario, "prompts/get", name, got, common)?;
    }
    Ok(())
}

fn request_outcome(
    scenario: &str,
    method: &str,
    name: &str,
    outcome: Option<mcp_scoped_http::Result<Value>>,
    common: &Common,
) -> Outcome {
    match outcome {
        Some(Ok(result)) => {
            if !common.json {
                eprintln!(
                    "{scenario}: {method} {name} answered {}",
                    crate::terminal_safe(&result.to_string())
                );
            }
            Ok(())
        }
        Some(Err(error)) => Err(phase::call_failure(&error)),
        None => Err(Failure::server(format!("call failed: {method} timed out"))),
    }
}

/// `sep-2322-client-request-state`: the `requestState` flow with the
/// unrelated tool called while it is under way (neither may borrow the
/// other's input responses or state), then the flow without state and the
/// result without `resultType`.
async fn request_state(session: &Session, common: &Common) -> Outcome {
    let scenario = "sep-2322-client-request-state";
    let (echo, unrelated) = tokio::join!(
        call(scenario, session, MRTR_ECHO_STATE, json!({}), common),
        call(scenario, session, MRTR_UNRELATED, json!({}), common),
    );
    echo?;
    unrelated?;
    for tool in MRTR_REST {
        call(scenario, session, tool, json!({}), common).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_with_defaults_and_fills_the_rest() {
        let params = json!({
            "message": "?",
            "requestedSchema": {
                "type": "object",
                "properties": {
                    "name": { "type": "string", "default": "John Doe" },
                    "age": { "type": "integer", "default": 30 },
                    "confirmed": { "type": "boolean" },
                    "status": { "type": "string", "enum": ["active", "inactive"] },
                },
            },
        });
        assert_eq!(
            accept_defaults(&params),
            json!({
                "action": "accept",
                "content": {
                    "name": "John Doe",
                    "age": 30,
                    "confirmed": true,
                    "status": "active",
                },
            })
        );
    }

    #[test]
    fn arguments_cover_the_required_properties() {
        let tool = json!({
            "name": "valid_tool",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "region": { "type": "string", "x-mcp-header": "Region" },
                    "extra": { "type": "integer" },
                },
                "required": ["region"],
            },
        });
        assert_eq!(arguments_for(&tool), json!({ "region": "conformance" }));
        assert_eq!(arguments_for(&json!({ "name": "bare" })), json!({}));
    }

    #[test]
    fn the_context_names_the_calls() {
        let context = json!({
            "name": "http-custom-headers",
            "toolCalls": [
                { "name": "a", "arguments": { "x": 1 } },
                { "name": "b", "arguments": { "y": null } },
            ],
        });
        let calls = context_calls(Some(&context)).unwrap();
        assert_eq!(calls[0], ("a".to_owned(), json!({ "x": 1 })));
        assert_eq!(calls[1], ("b".to_owned(), json!({ "y": null })));
        assert!(context_calls(None).is_err());
        assert!(context_calls(Some(&json!({ "toolCalls": [{}] }))).is_err());
    }
}
