//! The test kit's three eras, driven with raw HTTP (a plain hyper-util
//! client, none of this crate's client code): 2026-07-28 (validation
//! ladder, discover, multi round-trip tools, `subscriptions/listen`), the
//! dual-era endpoint, the 2025 answer to a modern request, and the
//! 2024-11-05 HTTP+SSE transport. Every wait is bounded; only 127.0.0.1.

use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderMap, Request};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use mcp_scoped_http::TransportKind;
use mcp_scoped_http_testkit::{
    Era, Eras, Fault, FaultAction, InputRequest, InvalidHeader, ResponseMode, ServerConfig,
    SseEndpoint, TestServer, TestTool,
};
use serde_json::{Value, json};
use tokio::time::timeout;

const LIMIT: Duration = Duration::from_secs(10);
const MODERN: &str = "2026-07-28";

type Http = Client<HttpConnector, Full<Bytes>>;

fn client() -> Http {
    Client::builder(TokioExecutor::new()).build_http()
}

struct Reply {
    status: u16,
    headers: HeaderMap,
    body: Bytes,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|_| panic!("JSON body, got {:?}", String::from_utf8_lossy(&self.body)))
    }
    fn code(&self) -> i64 {
        self.json()["error"]["code"]
            .as_i64()
            .expect("a JSON-RPC error")
    }
}

async fn send(c: &Http, req: Request<Full<Bytes>>) -> Reply {
    let fut = async {
        let resp = c.request(req).await.expect("response");
        let (parts, body) = resp.into_parts();
        let body = body.collect().await.expect("body").to_bytes();
        Reply {
            status: parts.status.as_u16(),
            headers: parts.headers,
            body,
        }
    };
    timeout(LIMIT, fut).await.expect("request timed out")
}

/// Opens a request whose answer is read as a stream.
async fn open(c: &Http, req: Request<Full<Bytes>>) -> http::Response<hyper::body::Incoming> {
    timeout(LIMIT, c.request(req))
        .await
        .expect("response head timed out")
        .expect("response")
}

/// One SSE event: `(event name, id, data)`.
type Event = (Option<String>, Option<String>, String);

fn parse_event(e: &str) -> Event {
    let (mut name, mut id, mut data) = (None, None, Vec::new());
    for line in e.lines() {
        if let Some(v) = line.strip_prefix("event: ") {
            name = Some(v.to_owned());
        } else if let Some(v) = line.strip_prefix("id: ") {
            id = Some(v.to_owned());
        } else if let Some(v) = line.strip_prefix("data:") {
            data.push(v.strip_prefix(' ').unwrap_or(v).to_owned());
        }
    }
    (name, id, data.join("\n"))
}

/// Every event of a whole SSE body (LF or CRLF), comments left out.
fn events(body: &[u8]) -> Vec<Event> {
    let text = std::str::from_utf8(body)
        .expect("UTF-8")
        .replace("\r\n", "\n");
    text.split("\n\n")
        .filter(|e| !e.is_empty() && !e.starts_with(':'))
        .map(parse_event)
        .collect()
}

/// Reads an SSE body event by event, as the events arrive.
struct SseReader {
    body: hyper::body::Incoming,
    /// Raw bytes, as received.
    raw: Vec<u8>,
    buf: String,
}

impl SseReader {
    fn new(resp: http::Response<hyper::body::Incoming>) -> Self {
        assert_eq!(resp.status(), 200);
        assert_eq!(resp.headers()["content-type"], "text/event-stream");
        SseReader {
            body: resp.into_body(),
            raw: Vec::new(),
            buf: String::new(),
        }
    }

    /// The next event (comments skipped); `None` once the stream has ended.
    /// Waits at most [`LIMIT`] in all.
    async fn next(&mut self) -> Option<Event> {
        let deadline = tokio::time::Instant::now() + LIMIT;
        loop {
            if let Some(at) = self.buf.find("\n\n") {
                let raw: String = self.buf.drain(..at + 2).collect();
                let raw = raw.trim_end_matches('\n');
                if raw.starts_with(':') {
                    continue;
                }
                return Some(parse_event(raw));
            }
            let frame = tokio::time::timeout_at(deadline, self.body.frame())
                .await
                .expect("SSE event timed out")?
                .ok()?;
            if let Ok(data) = frame.into_data() {
                self.raw.extend_from_slice(&data);
                let text = std::str::from_utf8(&data).expect("UTF-8");
                self.buf.push_str(&text.replace("\r\n", "\n"));
            }
        }
    }

    /// Reads until the raw bytes received hold `needle` (events read stay
    /// queued for [`next`](Self::next)). Waits at most [`LIMIT`].
    async fn until_raw_contains(&mut self, needle: &str) {
        let deadline = tokio::time::Instant::now() + LIMIT;
        while !String::from_utf8_lossy(&self.raw).contains(needle) {
            let frame = tokio::time::timeout_at(deadline, self.body.frame())
                .await
                .unwrap_or_else(|_| panic!("{needle:?} timed out"))
                .expect("the stream ended")
                .expect("a frame");
            if let Ok(data) = frame.into_data() {
                self.raw.extend_from_slice(&data);
                let text = std::str::from_utf8(&data).expect("UTF-8");
                self.buf.push_str(&text.replace("\r\n", "\n"));
            }
        }
    }

    /// The next event's data as JSON (its name must be `message`).
    async fn next_message(&mut self) -> Value {
        let (name, _, data) = self.next().await.expect("an event");
        assert_eq!(name.as_deref(), Some("message"), "{data}");
        serde_json::from_str(&data).expect("JSON event data")
    }
}

/// Polls `cond` until it holds, for at most [`LIMIT`].
async fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < LIMIT, "not reached in time: {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientInfo": {"name": "eras-test", "version": "0"},
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}},
    })
}

/// A well-formed 2026-07-28 request: `_meta` added to `params`, and the
/// request metadata headers (`Mcp-Name` from `name` or `uri`).
fn modern(url: &str, id: u64, method: &str, mut params: Value) -> Request<Full<Bytes>> {
    params["_meta"] = meta();
    let name = match method {
        "tools/call" | "prompts/get" => params["name"].as_str().map(str::to_owned),
        "resources/read" => params["uri"].as_str().map(str::to_owned),
        _ => None,
    };
    let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    let mut b = Request::post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", MODERN)
        .header("mcp-method", method);
    if let Some(name) = name {
        b = b.header("mcp-name", name);
    }
    b.body(Full::new(Bytes::from(body.to_string()))).unwrap()
}

/// A request with these headers and this body, nothing added.
fn raw_post(url: &str, headers: &[(&str, &str)], body: &Value) -> Request<Full<Bytes>> {
    let mut b = Request::post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream");
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    b.body(Full::new(Bytes::from(body.to_string()))).unwrap()
}

fn rpc(id: u64, method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

fn modern_server(config: ServerConfig) -> TestServer {
    TestServer::start(config.with_eras(Eras::Modern))
}

#[tokio::test]
async fn modern_discover_lists_and_the_2025_mechanisms_are_gone() {
    let _shared = crate::support::shared();
    let server = modern_server(ServerConfig::default().with_instructions("Be nice."));
    let url = server.url();
    let c = client();

    let r = send(&c, modern(&url, 1, "server/discover", json!({}))).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert!(r.header("mcp-session-id").is_none());
    let result = &r.json()["result"];
    assert_eq!(result["supportedVersions"], json!([MODERN]));
    assert_eq!(result["resultType"], "complete");
    assert_eq!(result["instructions"], "Be nice.");
    assert_eq!(
        result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "mcp-scoped-http-testkit"
    );
    assert_eq!(result["capabilities"]["tools"]["listChanged"], true);

    // Every result carries resultType and the serverInfo stamp.
    let mut req = modern(&url, 2, "tools/list", json!({}));
    req.headers_mut()
        .insert("mcp-session-id", "s-old".parse().unwrap());
    let r = send(&c, req).await;
    assert_eq!(r.status, 200, "a session id is ignored");
    assert!(r.header("mcp-session-id").is_none(), "and never minted");
    let result = &r.json()["result"];
    assert_eq!(result["tools"].as_array().unwrap().len(), 3);
    assert_eq!(result["resultType"], "complete");
    assert!(result["_meta"]["io.modelcontextprotocol/serverInfo"].is_object());

    let r = send(
        &c,
        modern(
            &url,
            3,
            "tools/call",
            json!({"name": "tool-001", "arguments": {"text": "hi"}}),
        ),
    )
    .await;
    assert_eq!(
        r.json()["result"]["structuredContent"]["arguments"]["text"],
        "hi"
    );
    let r = send(
        &c,
        modern(&url, 4, "prompts/get", json!({"name": "prompt-000"})),
    )
    .await;
    assert_eq!(r.json()["result"]["messages"][0]["role"], "user");
    let r = send(
        &c,
        modern(&url, 5, "resources/read", json!({"uri": "file:///r/001"})),
    )
    .await;
    assert_eq!(r.json()["result"]["contents"][0]["uri"], "file:///r/001");
    let r = send(
        &c,
        modern(&url, 6, "resources/read", json!({"uri": "file:///nope"})),
    )
    .await;
    assert_eq!((r.status, r.code()), (400, -32602), "unknown resource");

    for method in [http::Method::GET, http::Method::DELETE] {
        let req = Request::builder()
            .method(method.clone())
            .uri(&url)
            .header("accept", "text/event-stream")
            .header("mcp-protocol-version", MODERN)
            .body(Full::new(Bytes::new()))
            .unwrap();
        let r = send(&c, req).await;
        assert_eq!(r.status, 405, "{method}");
        assert_eq!(r.header("allow"), Some("POST"));
    }
    assert_eq!(server.stats().sessions_created, 0);
    assert!(server.requests().iter().all(|r| r.era == Some(Era::Modern)));
}

#[tokio::test]
async fn modern_validation_ladder_codes_statuses_and_order() {
    let _shared = crate::support::shared();
    let server = modern_server(ServerConfig::default());
    let url = server.url();
    let c = client();
    let hdrs =
        |method: &'static str| vec![("mcp-protocol-version", MODERN), ("mcp-method", method)];

    // 1. The `_meta` envelope: -32602, before anything else (the headers
    // are missing too).
    let r = send(&c, raw_post(&url, &[], &rpc(1, "tools/list", json!({})))).await;
    assert_eq!((r.status, r.code()), (400, -32602));
    assert_eq!(r.json()["id"], 1);
    let no_caps = json!({"_meta": {"io.modelcontextprotocol/protocolVersion": MODERN}});
    let r = send(
        &c,
        raw_post(&url, &hdrs("tools/list"), &rpc(2, "tools/list", no_caps)),
    )
    .await;
    assert_eq!((r.status, r.code()), (400, -32602));
    // clientInfo is optional (spec, Python 2.x)...
    let pair = json!({"_meta": {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
    }});
    let r = send(
        &c,
        raw_post(
            &url,
            &hdrs("tools/list"),
            &rpc(3, "tools/list", pair.clone()),
        ),
    )
    .await;
    assert_eq!(r.status, 200);

    // 2. Headers against the body: -32020.
    let r = send(
        &c,
        raw_post(
            &url,
            &[("mcp-method", "tools/list")],
            &rpc(4, "tools/list", pair.clone()),
        ),
    )
    .await;
    assert_eq!((r.status, r.code()), (400, -32020), "no version header");
    let r = send(
        &c,
        raw_post(
            &url,
            &[
                ("mcp-protocol-version", "2025-11-25"),
                ("mcp-method", "tools/list"),
            ],
            &rpc(5, "tools/list", pair.clone()),
        ),
    )
    .await;
    assert_eq!(
        (r.status, r.code()),
        (400, -32020),
        "version header differs"
    );
    let r = send(
        &c,
        raw_post(
            &url,
            &[("mcp-protocol-version", MODERN)],
            &rpc(6, "tools/list", pair.clone()),
        ),
    )
    .await;
    assert_eq!((r.status, r.code()), (400, -32020), "no Mcp-Method");
    let r = send(
        &c,
        raw_post(
            &url,
            &hdrs("prompts/list"),
            &rpc(7, "tools/list", pair.clone()),
        ),
    )
    .await;
    assert_eq!((r.status, r.code()), (400, -32020), "Mcp-Method differs");
    let mut call = pair.clone();
    call["name"] = json!("tool-000");
    let r = send(
        &c,
        raw_post(
            &url,
            &hdrs("tools/call"),
            &rpc(8, "tools/call", call.clone()),
        ),
    )
    .await;
    assert_eq!((r.status, r.code()), (400, -32020), "no Mcp-Name");
    let mut h = hdrs("tools/call");
    h.push(("mcp-name", "tool-001"));
    let r = send(&c, raw_post(&url, &h, &rpc(9, "tools/call", call.clone()))).await;
    assert_eq!((r.status, r.code()), (400, -32020), "Mcp-Name differs");
    let mut h = hdrs("tools/call");
    h.push(("mcp-name", "=?base64?dG9vbC0wMDA=?="));
    let r = send(&c, raw_post(&url, &h, &rpc(10, "tools/call", call.clone()))).await;
    assert_eq!(r.status, 200, "a base64 Mcp-Name is decoded: {:?}", r.body);
    let mut h = hdrs("tools/call");
    h.push(("mcp-name", "tool-000"));
    h.push(("mcp-name", "tool-000"));
    let r = send(&c, raw_post(&url, &h, &rpc(11, "tools/call", call))).await;
    assert_eq!((r.status, r.code()), (400, -32020), "Mcp-Name twice");

    // 3. The version: -32022 with the supported list; a header that
    // disagrees with the body is told so first.
    let old = json!({"_meta": {
        "io.modelcontextprotocol/protocolVersion": "2099-01-01",
        "io.modelcontextprotocol/clientCapabilities": {},
    }});
    let h = [
        ("mcp-protocol-version", "2099-01-01"),
        ("mcp-method", "tools/list"),
    ];
    let r = send(&c, raw_post(&url, &h, &rpc(12, "tools/list", old.clone()))).await;
    assert_eq!((r.status, r.code()), (400, -32022));
    let data = &r.json()["error"]["data"];
    assert_eq!(data["supported"], json!([MODERN]));
    assert_eq!(data["requested"], "2099-01-01");
    let r = send(
        &c,
        raw_post(&url, &hdrs("tools/list"), &rpc(13, "tools/list", old)),
    )
    .await;
    assert_eq!(r.code(), -32020, "header mismatch before version");

    // 4. The method: HTTP 404 with -32601, `initialize` and `ping` included.
    for method in ["nope/nothing", "initialize", "ping"] {
        let r = send(&c, modern(&url, 14, method, json!({}))).await;
        assert_eq!((r.status, r.code()), (404, -32601), "{method}");
    }
    // A legacy client's `initialize` fails on the envelope, and is told
    // which versions the server speaks.
    let init = rpc(
        30,
        "initialize",
        json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}),
    );
    let r = send(&c, raw_post(&url, &[], &init)).await;
    assert_eq!((r.status, r.code()), (400, -32602));
    let message = r.json()["error"]["message"].as_str().unwrap().to_owned();
    assert!(message.contains(MODERN), "{message}");

    // Bodies that are no single request.
    let mut req = modern(&url, 15, "tools/list", json!({}));
    *req.body_mut() = Full::new(Bytes::from_static(b"{oops"));
    let r = send(&c, req).await;
    assert_eq!((r.status, r.code()), (400, -32700));
    let batch = json!([rpc(16, "tools/list", json!({"_meta": meta()}))]);
    let r = send(&c, raw_post(&url, &hdrs("tools/list"), &batch)).await;
    assert_eq!((r.status, r.code()), (400, -32600), "a batch");
    let response = json!({"jsonrpc": "2.0", "id": 1, "result": {}});
    let r = send(&c, raw_post(&url, &hdrs("tools/list"), &response)).await;
    assert_eq!((r.status, r.code()), (400, -32600), "a client response");

    // Notifications: 202 at a served version, -32022 otherwise.
    let note =
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}});
    let r = send(
        &c,
        raw_post(&url, &[("mcp-protocol-version", MODERN)], &note),
    )
    .await;
    assert_eq!((r.status, r.body.len()), (202, 0));
    let r = send(
        &c,
        raw_post(&url, &[("mcp-protocol-version", "2099-01-01")], &note),
    )
    .await;
    assert_eq!((r.status, r.code()), (400, -32022));

    // Accept must list both (SSE answers) or JSON (JSON answers).
    let mut req = modern(&url, 17, "tools/list", json!({}));
    req.headers_mut()
        .insert("accept", "text/event-stream".parse().unwrap());
    assert_eq!(send(&c, req).await.status, 406);

    // clientInfo, when required.
    let server = modern_server(ServerConfig::default().with_require_client_info(true));
    let r = send(
        &c,
        raw_post(
            &server.url(),
            &hdrs("tools/list"),
            &rpc(1, "tools/list", pair),
        ),
    )
    .await;
    assert_eq!((r.status, r.code()), (400, -32602));
}

#[tokio::test]
async fn modern_x_mcp_header_tools() {
    let _shared = crate::support::shared();
    let mut config = ServerConfig::default()
        .with_tools(1)
        .with_tool(TestTool::header_param("route", "region", "Region"));
    for kind in InvalidHeader::ALL {
        config = config.with_tool(TestTool::invalid_header(kind));
    }
    let server = modern_server(config);
    let url = server.url();
    let c = client();

    let r = send(&c, modern(&url, 1, "tools/list", json!({}))).await;
    let tools = r.json()["result"]["tools"].as_array().unwrap().clone();
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "tool-000",
            "route",
            "bad-header-number",
            "bad-header-duplicate",
            "bad-header-items",
            "bad-header-one-of",
            "bad-header-empty",
            "bad-header-not-a-token"
        ]
    );
    assert_eq!(
        tools[1]["inputSchema"]["properties"]["region"]["x-mcp-header"],
        "Region"
    );
    assert_eq!(
        tools[2]["inputSchema"]["properties"]["ratio"]["type"],
        "number"
    );

    let call = |id, region: Option<&str>, arg: &str| {
        let mut req = modern(
            &url,
            id,
            "tools/call",
            json!({"name": "route", "arguments": {"region": arg, "text": "q"}}),
        );
        if let Some(region) = region {
            req.headers_mut()
                .insert("mcp-param-region", region.parse().unwrap());
        }
        req
    };
    let r = send(&c, call(2, None, "us-west1")).await;
    assert_eq!((r.status, r.code()), (400, -32020), "header missing");
    let r = send(&c, call(3, Some("eu-west1"), "us-west1")).await;
    assert_eq!((r.status, r.code()), (400, -32020), "header differs");
    let r = send(&c, call(4, Some("us-west1"), "us-west1")).await;
    assert_eq!(r.status, 200);
    assert_eq!(
        r.json()["result"]["structuredContent"]["arguments"]["region"],
        "us-west1"
    );
    let r = send(
        &c,
        call(5, Some("=?base64?SGVsbG8sIOS4lueVjA==?="), "Hello, 世界"),
    )
    .await;
    assert_eq!(r.status, 200, "base64 sentinel decoded");
    // A header for an absent argument is refused too.
    let mut req = modern(
        &url,
        6,
        "tools/call",
        json!({"name": "route", "arguments": {"text": "q"}}),
    );
    req.headers_mut()
        .insert("mcp-param-region", "us-west1".parse().unwrap());
    let r = send(&c, req).await;
    assert_eq!((r.status, r.code()), (400, -32020));

    // What arrived is on record, decoded.
    let recorded = server.requests();
    let last_ok = recorded
        .iter()
        .rfind(|r| r.mcp_param("Region").as_deref() == Some("Hello, 世界"))
        .expect("the base64 call recorded");
    assert_eq!(last_ok.mcp_method(), Some("tools/call"));
    assert_eq!(last_ok.mcp_name().as_deref(), Some("route"));
    assert_eq!(last_ok.protocol_version_header(), Some(MODERN));
    assert_eq!(last_ok.meta_protocol_version(), Some(MODERN));
    assert_eq!(last_ok.meta_client_info().unwrap()["name"], "eras-test");
    assert!(last_ok.meta_client_capabilities().unwrap()["elicitation"].is_object());
    assert_eq!(
        last_ok.mcp_params(),
        vec![("region".to_owned(), "Hello, 世界".to_owned())]
    );
    assert!(
        last_ok
            .header("mcp-param-region")
            .unwrap()
            .starts_with("=?base64?")
    );
}

#[tokio::test]
async fn modern_multi_round_trip_tools() {
    let _shared = crate::support::shared();
    let server = modern_server(
        ServerConfig::default()
            .with_tool(TestTool::input_required(
                "ask",
                InputRequest::Elicitation,
                2,
            ))
            .with_tool(TestTool::input_required_forever(
                "nag",
                InputRequest::Elicitation,
            ))
            .with_tool(TestTool::input_required(
                "sample",
                InputRequest::Sampling,
                1,
            )),
    );
    let url = server.url();
    let c = client();
    let call = |id, name: &str, extra: Value| {
        let mut params = json!({"name": name, "arguments": {"text": "x"}});
        if let (Some(p), Some(e)) = (params.as_object_mut(), extra.as_object()) {
            p.extend(e.clone());
        }
        modern(&url, id, "tools/call", params)
    };

    let r = send(&c, call(1, "ask", json!({}))).await;
    assert_eq!(r.status, 200);
    let result = r.json()["result"].clone();
    assert_eq!(result["resultType"], "input_required");
    let request = &result["inputRequests"]["confirm"];
    assert_eq!(request["method"], "elicitation/create");
    assert_eq!(request["params"]["mode"], "form");
    let state1 = result["requestState"].as_str().unwrap().to_owned();

    // Retried without the response: asked again, same round.
    let r = send(&c, call(2, "ask", json!({"requestState": state1}))).await;
    assert_eq!(r.json()["result"]["requestState"], state1.as_str());

    let answer = json!({"confirm": {"action": "accept", "content": {"ok": true}}});
    let r = send(
        &c,
        call(
            3,
            "ask",
            json!({"requestState": state1, "inputResponses": answer}),
        ),
    )
    .await;
    let result = r.json()["result"].clone();
    assert_eq!(result["resultType"], "input_required", "round 2");
    let state2 = result["requestState"].as_str().unwrap().to_owned();
    assert_ne!(state1, state2);
    let r = send(
        &c,
        call(
            4,
            "ask",
            json!({"requestState": state2, "inputResponses": answer}),
        ),
    )
    .await;
    let result = r.json()["result"].clone();
    assert_eq!(result["resultType"], "complete");
    assert_eq!(result["structuredContent"]["rounds"], 2);
    assert_eq!(result["structuredContent"]["inputResponses"], answer);
    assert_eq!(server.stats().input_required_sent, 3);

    // A state this server did not issue for this tool.
    let r = send(
        &c,
        call(
            5,
            "ask",
            json!({"requestState": "00ff", "inputResponses": answer}),
        ),
    )
    .await;
    assert_eq!((r.status, r.code()), (400, -32602));

    // The tool that asks forever.
    let mut state = None::<String>;
    for id in 10..15 {
        let extra = match &state {
            None => json!({}),
            Some(s) => json!({"requestState": s, "inputResponses": answer}),
        };
        let r = send(&c, call(id, "nag", extra)).await;
        let result = r.json()["result"].clone();
        assert_eq!(result["resultType"], "input_required");
        state = Some(result["requestState"].as_str().unwrap().to_owned());
    }
    assert_eq!(server.stats().input_required_sent, 8);

    // Sampling was not declared: -32021 naming it.
    let r = send(&c, call(20, "sample", json!({}))).await;
    assert_eq!((r.status, r.code()), (400, -32021));
    assert!(r.json()["error"]["data"]["requiredCapabilities"]["sampling"].is_object());
}

#[tokio::test]
async fn modern_faults_and_sse_answers() {
    let _shared = crate::support::shared();
    let server = modern_server(
        ServerConfig::default()
            .with_response_mode(ResponseMode::Sse)
            .with_tool(TestTool::header_param("route", "region", "Region"))
            .with_fault(
                Fault::any(FaultAction::UnsupportedVersion {
                    supported: vec!["2026-07-28".into(), "2025-11-25".into()],
                })
                .times(1),
            )
            .with_fault(
                Fault::on_rpc("tools/call", FaultAction::HeaderMismatch)
                    .name("route")
                    .times(1),
            )
            .with_fault(Fault::on_rpc("prompts/list", FaultAction::status(503)).times(1))
            .with_fault(
                Fault::on_rpc(
                    "resources/list",
                    FaultAction::Delay(Duration::from_millis(50)),
                )
                .times(1),
            ),
    );
    let url = server.url();
    let c = client();

    // The first request: -32022 listing the supported versions.
    let r = send(&c, modern(&url, 1, "server/discover", json!({}))).await;
    assert_eq!((r.status, r.code()), (400, -32022));
    assert_eq!(r.json()["id"], 1);
    assert_eq!(
        r.json()["error"]["data"]["supported"],
        json!([MODERN, "2025-11-25"])
    );
    assert_eq!(r.json()["error"]["data"]["requested"], MODERN);

    // Then SSE answers: `event: message`, no ids, no priming event.
    let r = send(&c, modern(&url, 2, "server/discover", json!({}))).await;
    assert_eq!(
        (r.status, r.header("content-type")),
        (200, Some("text/event-stream"))
    );
    let evs = events(&r.body);
    assert_eq!(evs.len(), 1);
    assert_eq!(evs[0].0.as_deref(), Some("message"));
    assert_eq!(evs[0].1, None);
    let v: Value = serde_json::from_str(&evs[0].2).unwrap();
    assert_eq!(v["result"]["supportedVersions"], json!([MODERN]));

    // Progress notifications precede the result.
    let mut req = modern(
        &url,
        3,
        "tools/call",
        json!({"name": "tool-000", "arguments": {}}),
    );
    let mut body: Value =
        serde_json::from_slice(&req.body_mut().clone().collect().await.unwrap().to_bytes())
            .unwrap();
    body["params"]["_meta"]["progressToken"] = json!("p1");
    *req.body_mut() = Full::new(Bytes::from(body.to_string()));
    let evs = events(&send(&c, req).await.body);
    assert_eq!(evs.len(), 4);
    assert!(evs[0].2.contains("notifications/progress"));

    // The route tool's first call: -32020 whatever the headers; then fine.
    let route = |id| {
        let mut req = modern(
            &url,
            id,
            "tools/call",
            json!({"name": "route", "arguments": {"region": "r1"}}),
        );
        req.headers_mut()
            .insert("mcp-param-region", "r1".parse().unwrap());
        req
    };
    let r = send(&c, route(4)).await;
    assert_eq!(
        (r.status, r.code(), r.header("content-type")),
        (400, -32020, Some("application/json"))
    );
    assert_eq!(send(&c, route(5)).await.status, 200);

    // Errors from validation are JSON even in SSE mode.
    let r = send(&c, modern(&url, 6, "nope", json!({}))).await;
    assert_eq!(
        (r.status, r.header("content-type")),
        (404, Some("application/json"))
    );

    // Status and delay faults apply as on the 2025 path.
    assert_eq!(
        send(&c, modern(&url, 7, "prompts/list", json!({})))
            .await
            .status,
        503
    );
    let start = Instant::now();
    let r = send(&c, modern(&url, 8, "resources/list", json!({}))).await;
    assert_eq!(r.status, 200);
    assert!(start.elapsed() >= Duration::from_millis(50));
}

#[tokio::test]
async fn modern_subscriptions_listen() {
    let _shared = crate::support::shared();
    let server =
        modern_server(ServerConfig::default().with_sse_keepalive(Some(Duration::from_millis(20))));
    let url = server.url();
    let c = client();
    let filter = json!({"notifications": {
        "toolsListChanged": true,
        "promptsListChanged": false,
        "resourceSubscriptions": ["file:///r/000"],
        "madeUp": true,
    }});
    let mut stream =
        SseReader::new(open(&c, modern(&url, 41, "subscriptions/listen", filter)).await);
    let ack = stream.next_message().await;
    assert_eq!(ack["method"], "notifications/subscriptions/acknowledged");
    assert_eq!(
        ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        41
    );
    assert_eq!(
        ack["params"]["notifications"],
        json!({"toolsListChanged": true, "resourceSubscriptions": ["file:///r/000"]})
    );
    assert_eq!(server.stats().subscriptions_open, 1);

    assert_eq!(server.list_changed("prompts"), 0, "not asked for");
    assert_eq!(server.list_changed("tools"), 1);
    let note = stream.next_message().await;
    assert_eq!(note["method"], "notifications/tools/list_changed");
    assert_eq!(
        note["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        41
    );
    assert_eq!(server.resource_updated("file:///r/001"), 0);
    assert_eq!(server.resource_updated("file:///r/000"), 1);
    let note = stream.next_message().await;
    assert_eq!(note["method"], "notifications/resources/updated");
    assert_eq!(note["params"]["uri"], "file:///r/000");
    // Keep-alive comments, which a client ignores.
    stream.until_raw_contains(": ping").await;

    // The server ends it gracefully: the listen response, then the end.
    assert_eq!(server.end_subscriptions(), 1);
    let end = stream.next_message().await;
    assert_eq!(end["id"], 41);
    assert_eq!(end["result"]["resultType"], "complete");
    assert_eq!(
        end["result"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        41
    );
    assert!(stream.next().await.is_none());
    wait_until("subscription closed", || {
        server.stats().subscriptions_open == 0
    })
    .await;

    // The client ends one by closing it.
    let stream = SseReader::new(
        open(
            &c,
            modern(
                &url,
                42,
                "subscriptions/listen",
                json!({"notifications": {"toolsListChanged": true}}),
            ),
        )
        .await,
    );
    wait_until("subscription open", || {
        server.stats().subscriptions_open == 1
    })
    .await;
    drop(stream);
    wait_until("closed by the client", || {
        server.stats().subscriptions_open == 0
    })
    .await;
    assert_eq!(server.list_changed("tools"), 0);
}

#[tokio::test]
async fn dual_era_routes_by_the_version_header() {
    let _shared = crate::support::shared();
    let server = TestServer::start(ServerConfig::default().with_eras(Eras::ModernAnd2025));
    let url = server.url();
    let c = client();

    let r = send(&c, modern(&url, 1, "server/discover", json!({}))).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["result"]["supportedVersions"], json!([MODERN]));

    let init = rpc(
        2,
        "initialize",
        json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}),
    );
    let r = send(&c, raw_post(&url, &[], &init)).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["result"]["protocolVersion"], "2025-06-18");
    let sid = r
        .header("mcp-session-id")
        .expect("a 2025 session")
        .to_owned();

    // A 2025 request on the session: no server/discover there.
    let h = [
        ("mcp-session-id", sid.as_str()),
        ("mcp-protocol-version", "2025-06-18"),
    ];
    let r = send(
        &c,
        raw_post(&url, &h, &rpc(3, "server/discover", json!({}))),
    )
    .await;
    assert_eq!((r.status, r.code()), (200, -32601));
    // `initialize` with the modern header goes to the modern path.
    let r = send(&c, modern(&url, 4, "initialize", json!({}))).await;
    assert_eq!((r.status, r.code()), (404, -32601));
    // A request with no version header goes to the 2025 path.
    let r = send(
        &c,
        raw_post(&url, &[], &rpc(5, "tools/list", json!({"_meta": meta()}))),
    )
    .await;
    assert_eq!(r.status, 400, "no session");
    assert!(!(-32022..=-32020).contains(&r.code()));

    let eras: Vec<Option<Era>> = server.requests().iter().map(|r| r.era).collect();
    assert_eq!(
        eras,
        [
            Some(Era::Modern),
            Some(Era::Streamable2025),
            Some(Era::Streamable2025),
            Some(Era::Modern),
            Some(Era::Streamable2025)
        ]
    );
    assert_eq!(server.stats().sessions_created, 1);
}

#[tokio::test]
async fn a_2025_server_answers_a_modern_request_as_2025_servers_do() {
    let _shared = crate::support::shared();
    let server = TestServer::start(ServerConfig::default());
    let url = server.url();
    let c = client();
    let r = send(&c, modern(&url, 1, "server/discover", json!({}))).await;
    assert_eq!(r.status, 400);
    let code = r.code();
    assert!(
        !(-32099..=-32020).contains(&code),
        "no modern error code: {code}"
    );
    assert_eq!(server.requests()[0].era, Some(Era::Streamable2025));
}

fn sse_get(url: &str) -> Request<Full<Bytes>> {
    Request::get(url)
        .header("accept", "text/event-stream")
        .body(Full::new(Bytes::new()))
        .unwrap()
}

/// Opens an HTTP+SSE stream and returns it with the POST URI.
async fn sse_connect(c: &Http, server: &TestServer) -> (SseReader, String) {
    let mut stream = SseReader::new(open(c, sse_get(&server.url())).await);
    let (name, id, endpoint) = stream.next().await.expect("the endpoint event");
    assert_eq!((name.as_deref(), id), (Some("endpoint"), None));
    let post = if endpoint.starts_with('/') {
        format!("http://{}{endpoint}", server.addr())
    } else {
        endpoint
    };
    (stream, post)
}

#[tokio::test]
async fn http_sse_endpoint_posts_answers_and_session_end() {
    let _shared = crate::support::shared();
    let server = TestServer::start(
        ServerConfig::default()
            .with_eras(Eras::HttpSse)
            .with_sse_crlf(true),
    );
    let url = server.url();
    let c = client();

    // A POST to the SSE URL: 405, as real servers answer.
    let r = send(&c, raw_post(&url, &[], &rpc(1, "initialize", json!({})))).await;
    assert_eq!((r.status, r.header("allow")), (405, Some("GET")));

    let (mut stream, post) = sse_connect(&c, &server).await;
    assert!(
        stream.raw.windows(2).any(|w| w == b"\r\n"),
        "CRLF line ends"
    );
    let rel = post.trim_start_matches(&format!("http://{}", server.addr()));
    assert!(rel.starts_with("/messages/?session_id="), "{rel}");
    let session = rel.trim_start_matches("/messages/?session_id=").to_owned();
    assert_eq!(session.len(), 32);
    assert_eq!(server.stats().live_sessions, 1);

    let init = rpc(
        1,
        "initialize",
        json!({"protocolVersion": "2024-11-05", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}),
    );
    let r = send(&c, raw_post(&post, &[], &init)).await;
    assert_eq!((r.status, r.body.len()), (202, 0));
    let answer = stream.next_message().await;
    assert_eq!(answer["id"], 1);
    assert_eq!(answer["result"]["protocolVersion"], "2024-11-05");
    let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    assert_eq!(send(&c, raw_post(&post, &[], &note)).await.status, 202);
    let call = rpc(
        2,
        "tools/call",
        json!({"name": "tool-000", "arguments": {"a": 1}}),
    );
    assert_eq!(send(&c, raw_post(&post, &[], &call)).await.status, 202);
    let answer = stream.next_message().await;
    assert_eq!(answer["id"], 2);
    assert_eq!(answer["result"]["structuredContent"]["arguments"]["a"], 1);

    // Server-initiated messages come on the stream too.
    assert_eq!(server.list_changed("tools"), 1);
    assert_eq!(
        stream.next_message().await["method"],
        "notifications/tools/list_changed"
    );
    assert_eq!(server.request_listeners("roots/list", json!({})), 1);
    let request = stream.next_message().await;
    assert_eq!(request["method"], "roots/list");
    let reply = json!({"jsonrpc": "2.0", "id": request["id"], "result": {"roots": []}});
    assert_eq!(send(&c, raw_post(&post, &[], &reply)).await.status, 202);
    assert_eq!(server.client_answers(), vec![reply]);

    // Bad POSTs.
    let base = format!("http://{}/messages/", server.addr());
    assert_eq!(
        send(&c, raw_post(&base, &[], &call)).await.status,
        400,
        "no session_id"
    );
    let other = format!("{base}?session_id=00000000000000000000000000000000");
    assert_eq!(send(&c, raw_post(&other, &[], &call)).await.status, 404);
    let mut req = raw_post(&post, &[], &call);
    *req.body_mut() = Full::new(Bytes::from_static(b"{oops"));
    assert_eq!(send(&c, req).await.status, 400);

    // Closing the stream ends the session.
    drop(stream);
    wait_until("session ended", || server.stats().live_sessions == 0).await;
    let stats = server.stats();
    assert_eq!(
        (
            stats.sessions_created,
            stats.sse_streams_open,
            stats.sse_streams_closed_by_client
        ),
        (1, 0, 1)
    );
    let log = server.session_log();
    assert_eq!(log.len(), 1);
    assert_eq!(log[0].id, session);
    assert_eq!(log[0].transport, TransportKind::HttpSse);
    assert!(log[0].stream_closed && !log[0].live);
    assert_eq!(send(&c, raw_post(&post, &[], &call)).await.status, 404);

    let recorded = server.requests();
    assert!(recorded.iter().all(|r| r.era == Some(Era::HttpSse)));
    assert!(
        recorded
            .iter()
            .any(|r| r.query.as_deref() == Some(&*format!("session_id={session}")))
    );
}

#[tokio::test]
async fn http_sse_endpoint_forms_and_server_end() {
    let _shared = crate::support::shared();
    let c = client();
    let server = TestServer::start(
        ServerConfig::default()
            .with_eras(Eras::HttpSse)
            .with_sse_endpoint(SseEndpoint::Absolute),
    );
    let (stream, post) = sse_connect(&c, &server).await;
    assert!(post.starts_with(&format!("http://{}/messages/?session_id=", server.addr())));
    assert!(
        !stream.raw.windows(2).any(|w| w == b"\r\n"),
        "LF by default"
    );
    // The server ends it: the stream ends, not counted as the client's.
    let mut stream = stream;
    server.expire_sessions();
    assert!(stream.next().await.is_none());
    wait_until("stream gone", || server.stats().sse_streams_open == 0).await;
    assert_eq!(server.stats().sse_streams_closed_by_client, 0);
    assert!(server.session_log()[0].expired);

    let server = TestServer::start(
        ServerConfig::default()
            .with_eras(Eras::HttpSse)
            .with_sse_endpoint(SseEndpoint::CrossOrigin),
    );
    let (_stream, post) = sse_connect(&c, &server).await;
    assert!(
        post.starts_with("http://127.0.0.1:1/messages/?session_id="),
        "{post}"
    );

    let server = TestServer::start(
        ServerConfig::default()
            .with_eras(Eras::HttpSse)
            .with_path("/sse")
            .with_sse_endpoint(SseEndpoint::Custom(
                "{self}/messages/?sessionId={session}".into(),
            )),
    );
    assert!(server.url().ends_with("/sse"));
    let (_stream, post) = sse_connect(&c, &server).await;
    assert!(post.contains("/messages/?sessionId="), "{post}");
}

#[test]
fn eras_parse_and_print() {
    let _shared = crate::support::shared();
    for eras in Eras::ALL {
        assert_eq!(eras.as_str().parse::<Eras>(), Ok(eras));
    }
    assert_eq!(Eras::default(), Eras::Streamable2025);
    assert!("2030-01-01".parse::<Eras>().is_err());
    assert!(Eras::ModernAnd2025.serves_modern() && Eras::ModernAnd2025.serves_2025());
    assert_eq!(Eras::HttpSse.transport(), TransportKind::HttpSse);
}
