//! Requests in 2026-07-28: the `Mcp-Param-*` headers of a tool call,
//! recovery from `HeaderMismatch` and `UnsupportedProtocolVersion`, and
//! multi round-trip requests (MRTR), where the server asks for input
//! (elicitation, sampling, roots) in a result and the request is sent again
//! with the answers.

use std::sync::Arc;

use http::HeaderMap;
use serde_json::{Map, Value};

use super::discovery::{ListKind, Lister};
use super::front::SessionFront;
use super::shared::{HEADER_MISMATCH, result_type, supported_instead};
use crate::engine::{Deadline, Engine};
use crate::error::{Error, Result};
use crate::jsonrpc::Request;
use crate::transport::metadata::{add_param_headers, param_headers};

/// Rounds of input one request may ask for, at most.
pub(crate) const MAX_INPUT_ROUNDS: usize = 8;
/// Input requests in one round, at most.
const MAX_INPUT_REQUESTS: usize = 64;
/// The methods whose results may ask for input.
const MRTR_METHODS: [&str; 3] = ["tools/call", "resources/read", "prompts/get"];

/// Sends a request of 2026-07-28 and returns its complete result: a
/// `HeaderMismatch` on a tool call re-lists the tools and sends it once
/// more; an `UnsupportedProtocolVersion` naming a modern revision we speak
/// switches to it and sends it once more; an `input_required` result is
/// answered through the session's handlers and the request sent again
/// (new id, the answers, the server's `requestState` echoed), for at most
/// [`MAX_INPUT_ROUNDS`] rounds. All within `deadline`.
pub(super) async fn request(
    engine: &Arc<Engine<SessionFront>>,
    method: &str,
    params: Option<Value>,
    deadline: Deadline,
) -> Result<Value> {
    let mut params = params;
    let mut relisted = false;
    let mut switched = false;
    let mut rounds = 0;
    loop {
        let extra = param_headers_for(engine, method, params.as_ref())?;
        let request = Request {
            id: engine.next_id(),
            method: method.into(),
            params: params.clone(),
        };
        crate::telemetry::record_request_id(&tracing::Span::current(), &request.id);
        let result = match engine.call_with(&request, &extra, deadline, false).await {
            Ok(result) => engine.front.result_value(&result, method)?,
            Err(error)
                if error.rpc_code() == Some(HEADER_MISMATCH)
                    && method == "tools/call"
                    && !relisted =>
            {
                tracing::debug!("header mismatch; listing the tools again");
                relisted = true;
                relist_tools(engine, deadline).await?;
                continue;
            }
            Err(error) if !switched => match supported_instead(&error) {
                Some(instead) if instead.is_modern() => {
                    switched = true;
                    if let Some(generation) = engine.generation() {
                        generation.wire().set_protocol_version(instead);
                    }
                    continue;
                }
                _ => return Err(error),
            },
            Err(error) => return Err(error),
        };
        match result_type(&result, method)? {
            None | Some("complete") => return Ok(result),
            Some("input_required") if MRTR_METHODS.contains(&method) => {
                rounds += 1;
                if rounds > MAX_INPUT_ROUNDS {
                    return Err(Error::limit(format!(
                        "{method} still asked for input after {MAX_INPUT_ROUNDS} rounds; stopped"
                    )));
                }
                let answers = deadline.run(answer_inputs(engine, &result)).await?;
                params = Some(retry_params(params, answers, result.get("requestState")));
            }
            Some(kind) => {
                let shown: String = kind.chars().take(40).collect();
                return Err(Error::protocol(format!(
                    "the {method} result has resultType {shown:?}, which this client does not handle"
                )));
            }
        }
    }
}

/// The `Mcp-Param-*` headers of a `tools/call`, from the tool's schema in
/// the catalog (none for a tool the catalog does not hold).
fn param_headers_for(
    engine: &Arc<Engine<SessionFront>>,
    method: &str,
    params: Option<&Value>,
) -> Result<HeaderMap> {
    let mut headers = HeaderMap::new();
    if method != "tools/call" {
        return Ok(headers);
    }
    let Some(name) = params.and_then(|p| p.get("name")).and_then(Value::as_str) else {
        return Ok(headers);
    };
    let catalog = engine.front.catalog();
    let Some(tool) = catalog.tool(name) else {
        return Ok(headers);
    };
    let mirrored = param_headers(tool).map_err(|reason| {
        Error::builder(format!("the tool's x-mcp-header is invalid: {reason}"))
    })?;
    add_param_headers(
        &mirrored,
        params.and_then(|p| p.get("arguments")),
        &mut headers,
    )?;
    Ok(headers)
}

/// Lists the tools again (the catalog's copy), within `deadline`.
async fn relist_tools(engine: &Arc<Engine<SessionFront>>, deadline: Deadline) -> Result<()> {
    let front = &engine.front;
    let mut lister = Lister::new(
        engine,
        front.account(),
        &front.discovery,
        None,
        false,
        false,
    );
    let tools = deadline.run(lister.list(ListKind::Tools)).await?;
    front.set_list(ListKind::Tools, tools);
    Ok(())
}

/// Answers each of a result's `inputRequests` with the session's handlers.
async fn answer_inputs(engine: &Arc<Engine<SessionFront>>, result: &Value) -> Result<Value> {
    let mut answers = Map::new();
    let Some(requests) = result.get("inputRequests") else {
        return Ok(Value::Object(answers));
    };
    let Some(requests) = requests.as_object() else {
        return Err(Error::protocol("inputRequests is not an object"));
    };
    if requests.len() > MAX_INPUT_REQUESTS {
        return Err(Error::limit(format!(
            "more than {MAX_INPUT_REQUESTS} input requests in one result"
        )));
    }
    for (key, request) in requests {
        let Some(method) = request.get("method").and_then(Value::as_str) else {
            return Err(Error::protocol("an input request has no method"));
        };
        let params = request.get("params").cloned();
        let answer = engine
            .front
            .handlers
            .answer(method, params)
            .await
            .map_err(|refused| {
                Error::rpc(refused).with_message(format!(
                    "the server asked for input this client cannot give ({method})"
                ))
            })?;
        answers.insert(key.clone(), answer);
    }
    Ok(Value::Object(answers))
}

/// The original params with the answers and the server's `requestState`
/// (echoed exactly; left out when the server sent none).
fn retry_params(params: Option<Value>, answers: Value, state: Option<&Value>) -> Value {
    let mut params = match params {
        Some(Value::Object(map)) => map,
        _ => Map::new(),
    };
    params.insert("inputResponses".into(), answers);
    match state {
        Some(state) => params.insert("requestState".into(), state.clone()),
        None => params.remove("requestState"),
    };
    Value::Object(params)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn retries_carry_the_answers_and_echo_the_state_exactly() {
        let params = json!({"name": "t", "arguments": {"a": 1}, "requestState": "old"});
        let retried = retry_params(Some(params.clone()), json!({"k": 1}), Some(&json!("s-1")));
        assert_eq!(retried["name"], "t");
        assert_eq!(retried["inputResponses"], json!({"k": 1}));
        assert_eq!(retried["requestState"], "s-1");
        let retried = retry_params(Some(params), json!({}), None);
        assert!(retried.get("requestState").is_none());
    }
}
