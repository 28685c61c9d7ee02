//! Self-tests of the test kit, driven by a plain hyper-util client (no client
//! code of this crate). Every wait is bounded.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderMap, Method, Request};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::{Connect, HttpConnector};
use hyper_util::rt::TokioExecutor;
use mcp_scoped_http_testkit::{
    Fault, FaultAction, ListenMode, ResponseMode, ServerConfig, TestServer, TlsIdentity,
};
use serde_json::{Value, json};
use tokio::time::timeout;

const LIMIT: Duration = Duration::from_secs(10);

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
        serde_json::from_slice(&self.body).expect("JSON body")
    }
    /// `(id, data)` of every SSE event.
    fn events(&self) -> Vec<(Option<String>, String)> {
        let text = std::str::from_utf8(&self.body).expect("UTF-8");
        text.split("\n\n")
            .filter(|e| !e.is_empty())
            .map(parse_event)
            .collect()
    }
}

/// `(id, data)` of one SSE event (without its blank line).
fn parse_event(e: &str) -> (Option<String>, String) {
    let mut id = None;
    let mut data = Vec::new();
    for line in e.lines() {
        if let Some(v) = line.strip_prefix("id: ") {
            id = Some(v.to_owned());
        } else if let Some(v) = line.strip_prefix("data:") {
            data.push(v.strip_prefix(' ').unwrap_or(v).to_owned());
        }
    }
    (id, data.join("\n"))
}

/// Reads an SSE body event by event, as the events arrive.
struct SseReader {
    body: hyper::body::Incoming,
    buf: String,
}

impl SseReader {
    fn new(resp: http::Response<hyper::body::Incoming>) -> Self {
        assert_eq!(resp.headers()["content-type"], "text/event-stream");
        SseReader {
            body: resp.into_body(),
            buf: String::new(),
        }
    }

    /// The next event `(id, data)`; `None` once the stream has ended
    /// (cleanly or not). Waits at most [`LIMIT`].
    async fn next(&mut self) -> Option<(Option<String>, String)> {
        loop {
            if let Some(at) = self.buf.find("\n\n") {
                let raw: String = self.buf.drain(..at + 2).collect();
                return Some(parse_event(raw.trim_end_matches('\n')));
            }
            let frame = timeout(LIMIT, self.body.frame())
                .await
                .expect("SSE event timed out")?
                .ok()?;
            if let Ok(data) = frame.into_data() {
                self.buf
                    .push_str(std::str::from_utf8(&data).expect("UTF-8"));
            }
        }
    }

    /// The next event's data parsed as JSON.
    async fn next_json(&mut self) -> Value {
        let (id, data) = self.next().await.expect("an event");
        assert!(id.is_some(), "events carry ids");
        serde_json::from_str(&data).expect("JSON event data")
    }
}

/// Opens a request whose answer is read as a stream.
async fn open(c: &Http, req: Request<Full<Bytes>>) -> http::Response<hyper::body::Incoming> {
    timeout(LIMIT, c.request(req))
        .await
        .expect("response head timed out")
        .expect("response")
}

fn cancel_msg(id: Value) -> Value {
    json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": id, "reason": "test"}})
}

async fn send<C>(
    client: &Client<C, Full<Bytes>>,
    req: Request<Full<Bytes>>,
) -> Result<Reply, String>
where
    C: Connect + Clone + Send + Sync + 'static,
{
    let fut = async {
        let resp = client.request(req).await.map_err(|e| format!("{e:?}"))?;
        let (parts, body) = resp.into_parts();
        let body = body
            .collect()
            .await
            .map_err(|e| format!("body: {e:?}"))?
            .to_bytes();
        Ok(Reply {
            status: parts.status.as_u16(),
            headers: parts.headers,
            body,
        })
    };
    timeout(LIMIT, fut).await.expect("request timed out")
}

fn post(url: &str, session: Option<&str>, body: &Value) -> Request<Full<Bytes>> {
    let mut b = Request::post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream");
    if let Some(s) = session {
        b = b.header("mcp-session-id", s);
    }
    b.body(Full::new(Bytes::from(body.to_string()))).unwrap()
}

fn rpc(id: u64, method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

fn init_msg(version: &str) -> Value {
    rpc(
        1,
        "initialize",
        json!({"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}),
    )
}

/// Initializes and returns the session id.
async fn initialize(c: &Http, url: &str) -> String {
    let r = send(c, post(url, None, &init_msg("2025-11-25")))
        .await
        .unwrap();
    assert_eq!(r.status, 200);
    r.header("mcp-session-id").expect("session id").to_owned()
}

/// Polls `cond` until it holds, for at most [`LIMIT`].
async fn wait_until(mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < LIMIT, "condition not reached in time");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test]
async fn initialize_mints_session_and_negotiates() {
    let _shared = crate::support::shared();
    let server = TestServer::start(ServerConfig::default().with_prompts(0));
    assert!(server.url().starts_with("http://127.0.0.1:"));
    assert!(server.url().ends_with("/mcp"));
    let c = client();
    let r = send(&c, post(&server.url(), None, &init_msg("2025-06-18")))
        .await
        .unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("application/json"));
    let sid = r.header("mcp-session-id").unwrap();
    assert!(sid.starts_with("s-1-"));
    assert!(sid.bytes().all(|b| (0x21..=0x7e).contains(&b)));
    let v = r.json();
    assert_eq!(v["id"], 1);
    assert_eq!(v["result"]["protocolVersion"], "2025-06-18");
    assert_eq!(v["result"]["serverInfo"]["name"], "mcp-scoped-http-testkit");
    let caps = &v["result"]["capabilities"];
    assert_eq!(caps["tools"]["listChanged"], true);
    assert!(caps.get("prompts").is_none());
    assert!(caps.get("resources").is_some());

    let r = send(&c, post(&server.url(), None, &init_msg("1999-01-01")))
        .await
        .unwrap();
    assert_eq!(r.json()["result"]["protocolVersion"], "2025-11-25");

    let stats = server.stats();
    assert_eq!(stats.sessions_created, 2);
    assert_eq!(stats.live_sessions, 2);
    let reqs = server.requests();
    assert_eq!(reqs.len(), 2);
    assert_eq!(reqs[0].rpc_method.as_deref(), Some("initialize"));
    assert_eq!(reqs[0].header("Content-Type"), Some("application/json"));
    assert!(reqs[0].connection >= 1);
    server.clear_requests();
    assert!(server.requests().is_empty());
}

#[tokio::test]
async fn http_level_validation() {
    let _shared = crate::support::shared();
    let server = TestServer::start(ServerConfig::default());
    let url = server.url();
    let c = client();
    let sid = initialize(&c, &url).await;
    let ping = rpc(2, "ping", json!({}));

    let r = send(&c, post(&url, None, &ping)).await.unwrap();
    assert_eq!(r.status, 400, "missing session");
    let r = send(&c, post(&url, Some("nope"), &ping)).await.unwrap();
    assert_eq!(r.status, 404, "unknown session");
    let r = send(&c, post(&url, Some(&sid), &ping)).await.unwrap();
    assert_eq!((r.status, r.json()["result"].clone()), (200, json!({})));

    let mut req = post(&url, Some(&sid), &ping);
    req.headers_mut()
        .insert("mcp-protocol-version", "2000-01-01".parse().unwrap());
    assert_eq!(send(&c, req).await.unwrap().status, 400);

    let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let r = send(&c, post(&url, Some(&sid), &note)).await.unwrap();
    assert_eq!((r.status, r.body.len()), (202, 0));

    let mut req = post(&url, Some(&sid), &ping);
    req.headers_mut()
        .insert("content-type", "text/plain".parse().unwrap());
    assert_eq!(send(&c, req).await.unwrap().status, 415);
    let mut req = post(&url, Some(&sid), &ping);
    req.headers_mut()
        .insert("accept", "application/json".parse().unwrap());
    assert_eq!(send(&c, req).await.unwrap().status, 406);

    let mut req = post(&url, Some(&sid), &ping);
    *req.body_mut() = Full::new(Bytes::from_static(b"{oops"));
    let r = send(&c, req).await.unwrap();
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["error"]["code"], -32700);
    assert_eq!(r.json()["id"], Value::Null);

    let r = send(&c, post(&url, Some(&sid), &rpc(3, "nope/nope", json!({}))))
        .await
        .unwrap();
    assert_eq!(r.json()["error"]["code"], -32601);

    let other = url.replace("/mcp", "/other");
    assert_eq!(
        send(&c, post(&other, None, &ping)).await.unwrap().status,
        404
    );
}

#[tokio::test]
async fn json_batch_and_tool_calls() {
    let _shared = crate::support::shared();
    let server = TestServer::start(ServerConfig::default());
    let url = server.url();
    let c = client();
    let sid = initialize(&c, &url).await;
    let batch = json!([
        rpc(5, "tools/call", json!({"name": "tool-001", "arguments": {"text": "hi"}})),
        {"jsonrpc": "2.0", "method": "notifications/progress", "params": {}},
        rpc(6, "tools/call", json!({"name": "missing"})),
    ]);
    let r = send(&c, post(&url, Some(&sid), &batch)).await.unwrap();
    let v = r.json();
    let arr = v.as_array().expect("array");
    assert_eq!(arr.len(), 2);
    assert_eq!(arr[0]["id"], 5);
    assert_eq!(
        arr[0]["result"]["content"][0]["text"],
        r#"tool-001:{"text":"hi"}"#
    );
    assert_eq!(
        arr[0]["result"]["structuredContent"]["arguments"]["text"],
        "hi"
    );
    assert_eq!(arr[1]["result"]["isError"], true);
}

#[tokio::test]
async fn sse_mode_events() {
    let _shared = crate::support::shared();
    let server = TestServer::start(
        ServerConfig::default()
            .with_response_mode(ResponseMode::Sse)
            .with_notifications_before_response(2),
    );
    let url = server.url();
    let c = client();
    let r = send(&c, post(&url, None, &init_msg("2025-11-25")))
        .await
        .unwrap();
    assert_eq!(r.header("content-type"), Some("text/event-stream"));
    let sid = r.header("mcp-session-id").unwrap().to_owned();
    let ev = r.events();
    assert_eq!(ev.len(), 4);
    assert!(ev.iter().all(|(id, _)| id.is_some()));
    assert_eq!(ev[0].1, "", "priming event");
    let note: Value = serde_json::from_str(&ev[1].1).unwrap();
    assert_eq!(note["method"], "notifications/message");
    let resp: Value = serde_json::from_str(&ev[3].1).unwrap();
    assert_eq!(resp["result"]["protocolVersion"], "2025-11-25");

    let call = rpc(
        9,
        "tools/call",
        json!({"name": "tool-000", "arguments": {}, "_meta": {"progressToken": "p1"}}),
    );
    let ev = send(&c, post(&url, Some(&sid), &call))
        .await
        .unwrap()
        .events();
    let methods: Vec<Value> = ev[1..]
        .iter()
        .map(|(_, d)| serde_json::from_str::<Value>(d).unwrap()["method"].clone())
        .collect();
    assert_eq!(ev.len(), 1 + 2 + 3 + 1);
    assert_eq!(methods[2], "notifications/progress");
    assert_eq!(methods[4], "notifications/progress");
    let last: Value = serde_json::from_str(&ev[6].1).unwrap();
    assert_eq!(last["id"], 9);
}

#[tokio::test]
async fn pagination_with_cursors() {
    let _shared = crate::support::shared();
    let server = TestServer::start(ServerConfig::default().with_tools(5).with_page_size(2));
    let url = server.url();
    let c = client();
    let sid = initialize(&c, &url).await;
    let mut names = Vec::new();
    let mut cursor: Option<String> = None;
    for page in 1.. {
        assert!(page <= 3);
        let params = match &cursor {
            Some(c) => json!({"cursor": c}),
            None => json!({}),
        };
        let r = send(&c, post(&url, Some(&sid), &rpc(page, "tools/list", params)))
            .await
            .unwrap();
        let v = r.json();
        for t in v["result"]["tools"].as_array().unwrap() {
            assert_eq!(t["inputSchema"]["properties"]["text"]["type"], "string");
            names.push(t["name"].as_str().unwrap().to_owned());
        }
        match v["result"]["nextCursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => break,
        }
    }
    assert_eq!(
        names,
        ["tool-000", "tool-001", "tool-002", "tool-003", "tool-004"]
    );
    let bad = rpc(9, "tools/list", json!({"cursor": "not-a-cursor"}));
    let r = send(&c, post(&url, Some(&sid), &bad)).await.unwrap();
    assert_eq!(r.json()["error"]["code"], -32602);

    let r = send(
        &c,
        post(
            &url,
            Some(&sid),
            &rpc(10, "resources/templates/list", json!({})),
        ),
    )
    .await
    .unwrap();
    assert_eq!(
        r.json()["result"]["resourceTemplates"][0]["uriTemplate"],
        "file:///t/{name}"
    );
    let r = send(
        &c,
        post(&url, Some(&sid), &rpc(11, "resources/list", json!({}))),
    )
    .await
    .unwrap();
    assert_eq!(r.json()["result"]["resources"][1]["uri"], "file:///r/001");
}

#[tokio::test]
async fn delete_is_counted() {
    let _shared = crate::support::shared();
    let server = TestServer::start(ServerConfig::default().with_delete_status(204));
    let url = server.url();
    let c = client();
    let sid = initialize(&c, &url).await;
    let del = |s: &str| {
        Request::delete(&url)
            .header("mcp-session-id", s)
            .body(Full::new(Bytes::new()))
            .unwrap()
    };
    assert_eq!(send(&c, del(&sid)).await.unwrap().status, 204);
    assert_eq!(send(&c, del(&sid)).await.unwrap().status, 404);
    let r = send(&c, post(&url, Some(&sid), &rpc(2, "ping", json!({}))))
        .await
        .unwrap();
    assert_eq!(r.status, 404, "deleted session");
    let stats = server.stats();
    assert_eq!((stats.deletes, stats.live_sessions), (2, 0));

    let stateless = TestServer::start(ServerConfig::default().with_stateful(false));
    let r = send(&c, post(&stateless.url(), None, &init_msg("2025-11-25")))
        .await
        .unwrap();
    assert!(r.header("mcp-session-id").is_none());
    let r = send(&c, post(&stateless.url(), None, &rpc(2, "ping", json!({}))))
        .await
        .unwrap();
    assert_eq!(r.status, 200);
    let req = Request::delete(stateless.url())
        .body(Full::new(Bytes::new()))
        .unwrap();
    assert_eq!(send(&c, req).await.unwrap().status, 405);
    assert_eq!(stateless.stats().deletes, 1);
}

fn get(url: &str, session: &str) -> Request<Full<Bytes>> {
    Request::get(url)
        .header("accept", "text/event-stream")
        .header("mcp-session-id", session)
        .body(Full::new(Bytes::new()))
        .unwrap()
}

#[tokio::test]
async fn get_405_or_open_stream() {
    let _shared = crate::support::shared();
    let server = TestServer::start(ServerConfig::default());
    let c = client();
    let sid = initialize(&c, &server.url()).await;
    assert_eq!(
        send(&c, get(&server.url(), &sid)).await.unwrap().status,
        405
    );

    let server = TestServer::start(ServerConfig::default().with_listen(ListenMode::Open));
    let url = server.url();
    let sid = initialize(&c, &url).await;
    let resp = timeout(LIMIT, c.request(get(&url, &sid)))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let mut body = resp.into_body();
    let first = timeout(LIMIT, body.frame())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(first.data_ref().unwrap().starts_with(b"id: "));
    assert_eq!(server.stats().listen_streams_open, 1);

    let note = json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"});
    assert_eq!(server.notify_listeners(&note), 1);
    let frame = timeout(LIMIT, body.frame())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let text = String::from_utf8(frame.into_data().unwrap().to_vec()).unwrap();
    assert!(text.contains("list_changed"), "{text}");

    let del = Request::delete(&url)
        .header("mcp-session-id", &sid)
        .body(Full::new(Bytes::new()))
        .unwrap();
    assert_eq!(send(&c, del).await.unwrap().status, 200);
    // The stream ends after the DELETE.
    let end = timeout(LIMIT, body.frame()).await.unwrap();
    assert!(end.is_none(), "stream should end");
    wait_until(|| server.stats().listen_streams_open == 0).await;
}

#[tokio::test]
async fn status_accepted_redirect_raw_faults() {
    let _shared = crate::support::shared();
    let server = TestServer::start(
        ServerConfig::default()
            .with_fault(
                Fault::on_rpc(
                    "initialize",
                    FaultAction::unauthorized("Bearer realm=\"t\""),
                )
                .times(1),
            )
            .with_fault(Fault::on_rpc("initialize", FaultAction::Accepted).times(1)),
    );
    let url = server.url();
    let c = client();
    let r = send(&c, post(&url, None, &init_msg("2025-11-25")))
        .await
        .unwrap();
    assert_eq!(r.status, 401);
    assert_eq!(r.header("www-authenticate"), Some("Bearer realm=\"t\""));
    let r = send(&c, post(&url, None, &init_msg("2025-11-25")))
        .await
        .unwrap();
    assert_eq!((r.status, r.body.len()), (202, 0));
    assert_eq!(server.stats().sessions_created, 0);
    let sid = initialize(&c, &url).await;
    assert_eq!(server.requests().len(), 3, "faulted requests are recorded");

    server.push_fault(Fault::on_rpc(
        "ping",
        FaultAction::Redirect {
            status: 307,
            location: "{self}/elsewhere".into(),
        },
    ));
    let r = send(&c, post(&url, Some(&sid), &rpc(2, "ping", json!({}))))
        .await
        .unwrap();
    assert_eq!(r.status, 307);
    assert_eq!(
        r.header("location").unwrap(),
        format!("http://{}/elsewhere", server.addr())
    );
    server.clear_faults();

    server.push_fault(Fault::on_rpc(
        "ping",
        FaultAction::raw(
            200,
            "application/json",
            r#"{"jsonrpc":"2.0","id":{id},"result":{"raw":true}}"#,
        ),
    ));
    let mut msg = rpc(0, "ping", json!({}));
    msg["id"] = json!("abc");
    let r = send(&c, post(&url, Some(&sid), &msg)).await.unwrap();
    assert_eq!(r.json()["id"], "abc");
    assert_eq!(r.json()["result"]["raw"], true);
}

#[tokio::test]
async fn page_skip_and_times() {
    let _shared = crate::support::shared();
    let server = TestServer::start(
        ServerConfig::default()
            .with_tools(6)
            .with_page_size(2)
            .with_fault(
                Fault::on_rpc("tools/list", FaultAction::status(500))
                    .page(2)
                    .skip(1)
                    .times(1),
            ),
    );
    let url = server.url();
    let c = client();
    let sid = initialize(&c, &url).await;
    let p1 = send(&c, post(&url, Some(&sid), &rpc(1, "tools/list", json!({}))))
        .await
        .unwrap()
        .json();
    let cursor = p1["result"]["nextCursor"].clone();
    let page2 = || {
        post(
            &url,
            Some(&sid),
            &rpc(2, "tools/list", json!({"cursor": cursor})),
        )
    };
    assert_eq!(send(&c, page2()).await.unwrap().status, 200, "skipped");
    assert_eq!(send(&c, page2()).await.unwrap().status, 500, "applied");
    assert_eq!(send(&c, page2()).await.unwrap().status, 200, "used up");
    let p1 = send(&c, post(&url, Some(&sid), &rpc(1, "tools/list", json!({}))))
        .await
        .unwrap();
    assert_eq!(p1.status, 200, "page 1 never matched");
}

#[tokio::test]
async fn body_faults() {
    let _shared = crate::support::shared();
    let server = TestServer::start(ServerConfig::default());
    let url = server.url();
    let c = client();
    let sid = initialize(&c, &url).await;
    let ping = || post(&url, Some(&sid), &rpc(2, "ping", json!({})));

    server.push_fault(Fault::on_rpc("ping", FaultAction::MalformedJson).times(1));
    let r = send(&c, ping()).await.unwrap();
    assert_eq!(&r.body[..], b"{not json");

    server.push_fault(Fault::on_rpc("ping", FaultAction::CutBody).times(1));
    let err = send(&c, ping()).await.err().expect("cut body fails");
    assert!(err.starts_with("body"), "{err}");

    server.push_fault(Fault::on_rpc("ping", FaultAction::CloseConnection).times(1));
    assert!(send(&c, ping()).await.is_err());

    server.push_fault(Fault::on_rpc("ping", FaultAction::OversizeJson { bytes: 1 << 20 }).times(1));
    let r = send(&c, ping()).await.unwrap();
    assert!(r.body.len() > 1 << 20);
    assert_eq!(r.json()["id"], 2);

    server.push_fault(
        Fault::on_rpc("ping", FaultAction::OversizeSseEvent { bytes: 100_000 }).times(1),
    );
    let ev = send(&c, ping()).await.unwrap().events();
    assert!(ev.last().unwrap().1.len() > 100_000);

    server.push_fault(
        Fault::on_rpc(
            "ping",
            FaultAction::ContentType("text/event-stream;charset=UTF-8".into()),
        )
        .times(1),
    );
    let r = send(&c, ping()).await.unwrap();
    assert_eq!(
        r.header("content-type"),
        Some("text/event-stream;charset=UTF-8")
    );
    assert_eq!(r.events().len(), 2);

    server.push_fault(Fault::on_rpc("ping", FaultAction::BatchResponse).times(1));
    let v = send(&c, ping()).await.unwrap().json();
    assert_eq!(v[0]["method"], "notifications/message");
    assert_eq!(v[1]["id"], 2);

    server.push_fault(Fault::on_rpc("ping", FaultAction::SseEndWithoutResponse).times(1));
    let r = send(&c, ping()).await.unwrap();
    assert_eq!((r.status, r.body.len()), (200, 0));

    server.push_fault(Fault::on_rpc("ping", FaultAction::SseNeverEndingLine).times(1));
    let resp = timeout(LIMIT, c.request(ping())).await.unwrap().unwrap();
    let mut body = resp.into_body();
    let mut got = 0;
    while got < 4 << 20 {
        let f = timeout(LIMIT, body.frame())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        let d = f.into_data().unwrap();
        assert!(!d.contains(&b'\n'));
        got += d.len();
    }
    drop(body);
}

#[tokio::test]
async fn initialize_faults_session_and_version() {
    let _shared = crate::support::shared();
    let raw_id = b"s\xff id".to_vec();
    let server = TestServer::start(
        ServerConfig::default()
            .with_fault(
                Fault::on_rpc("initialize", FaultAction::SessionId(raw_id.clone())).times(1),
            )
            .with_fault(
                Fault::on_rpc("initialize", FaultAction::ProtocolVersion("1.0".into())).times(1),
            ),
    );
    let c = client();
    let r = send(&c, post(&server.url(), None, &init_msg("2025-11-25")))
        .await
        .unwrap();
    assert_eq!(r.headers["mcp-session-id"].as_bytes(), &raw_id[..]);
    let r = send(&c, post(&server.url(), None, &init_msg("2025-11-25")))
        .await
        .unwrap();
    assert_eq!(r.json()["result"]["protocolVersion"], "1.0");
    assert!(r.header("mcp-session-id").is_some());
    assert_eq!(server.stats().sessions_created, 2);
}

#[tokio::test]
async fn sse_cut_then_resume_with_last_event_id() {
    let _shared = crate::support::shared();
    let server = TestServer::start(ServerConfig::default().with_response_mode(ResponseMode::Sse));
    let url = server.url();
    let c = client();
    let sid = initialize(&c, &url).await;
    server.push_fault(Fault::on_rpc(
        "ping",
        FaultAction::SseCutAfterEvent { retry_ms: Some(10) },
    ));
    let r = send(&c, post(&url, Some(&sid), &rpc(7, "ping", json!({}))))
        .await
        .unwrap();
    assert!(
        std::str::from_utf8(&r.body)
            .unwrap()
            .contains("retry: 10\n")
    );
    let ev = r.events();
    assert_eq!(ev.len(), 1);
    let last = ev[0].0.clone().unwrap();
    let mut resume = get(&url, &sid);
    resume
        .headers_mut()
        .insert("last-event-id", last.parse().unwrap());
    let r = send(&c, resume).await.unwrap();
    let ev = r.events();
    assert_eq!(ev.len(), 1);
    let v: Value = serde_json::from_str(&ev[0].1).unwrap();
    assert_eq!(v["id"], 7);
    // Replayed once only; listening is unsupported here.
    let mut again = get(&url, &sid);
    again
        .headers_mut()
        .insert("last-event-id", last.parse().unwrap());
    assert_eq!(send(&c, again).await.unwrap().status, 405);
}

#[tokio::test]
async fn hang_does_not_block_others_and_client_timeout_wins() {
    let _shared = crate::support::shared();
    let server = TestServer::start(ServerConfig::default());
    let url = server.url();
    let c = client();
    let sid = initialize(&c, &url).await;
    server.push_fault(Fault::on_rpc("tools/list", FaultAction::Hang));
    let hung = timeout(
        Duration::from_millis(200),
        c.request(post(&url, Some(&sid), &rpc(2, "tools/list", json!({})))),
    )
    .await;
    assert!(hung.is_err(), "client deadline wins");
    let r = send(&c, post(&url, Some(&sid), &rpc(3, "ping", json!({}))))
        .await
        .unwrap();
    assert_eq!(r.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_does_not_hang_with_open_requests() {
    let _shared = crate::support::shared();
    let server = TestServer::start(ServerConfig::default().with_listen(ListenMode::Open));
    let url = server.url();
    let c = client();
    let sid = initialize(&c, &url).await;
    server.push_fault(Fault::on_rpc("tools/list", FaultAction::Hang));
    let pending = tokio::spawn({
        let c = c.clone();
        let req = post(&url, Some(&sid), &rpc(2, "tools/list", json!({})));
        async move { c.request(req).await.map(|_| ()) }
    });
    let listen = timeout(LIMIT, c.request(get(&url, &sid)))
        .await
        .unwrap()
        .unwrap();
    wait_until(|| {
        server
            .requests()
            .iter()
            .any(|r| r.rpc_method.as_deref() == Some("tools/list"))
    })
    .await;
    assert_eq!(server.stats().listen_streams_open, 1);
    let started = Instant::now();
    timeout(
        LIMIT,
        tokio::task::spawn_blocking(move || server.shutdown()),
    )
    .await
    .expect("shutdown hung")
    .unwrap();
    assert!(started.elapsed() < LIMIT);
    let outcome = timeout(LIMIT, pending)
        .await
        .expect("request left waiting")
        .unwrap();
    assert!(
        outcome.is_err(),
        "the hung request fails once the server is gone"
    );
    let mut body = listen.into_body();
    let end = timeout(LIMIT, async {
        loop {
            match body.frame().await {
                Some(Ok(_)) => continue,
                other => return other.map(|r| r.is_ok()),
            }
        }
    })
    .await
    .unwrap();
    assert_ne!(end, Some(true));
}

#[tokio::test]
async fn connections_are_counted() {
    let _shared = crate::support::shared();
    let server = TestServer::start(ServerConfig::default());
    {
        let c = client();
        initialize(&c, &server.url()).await;
        assert_eq!(server.stats().connections_accepted, 1);
        assert_eq!(server.stats().connections_open, 1);
    }
    wait_until(|| server.stats().connections_open == 0).await;
    let h2: Http = Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build_http();
    let sid = initialize(&h2, &server.url()).await;
    assert!(sid.starts_with("s-"));
    assert_eq!(server.stats().connections_accepted, 2);
}

#[tokio::test]
async fn tls_with_self_signed_certificate() {
    let _shared = crate::support::shared();
    use tokio_rustls::rustls;
    let ck =
        rcgen::generate_simple_self_signed(vec!["localhost".into(), "127.0.0.1".into()]).unwrap();
    let cert_der = ck.cert.der().to_vec();
    let server = TestServer::start(ServerConfig::default().with_tls(TlsIdentity {
        cert_chain_der: vec![cert_der.clone()],
        key_der: ck.signing_key.serialize_der(),
    }));
    assert!(server.url().starts_with("https://127.0.0.1:"));
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(rustls::pki_types::CertificateDer::from(cert_der))
        .unwrap();
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_only()
        .enable_http1()
        .build();
    let c: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build(https);
    let r = send(&c, post(&server.url(), None, &init_msg("2025-11-25")))
        .await
        .unwrap();
    assert_eq!(r.status, 200);
    assert!(r.header("mcp-session-id").is_some());
    assert_eq!(r.json()["result"]["protocolVersion"], "2025-11-25");
}

#[tokio::test]
async fn delay_expiry_and_delete_faults() {
    let _shared = crate::support::shared();
    let server = TestServer::start(ServerConfig::default());
    let url = server.url();
    let c = client();
    let sid = initialize(&c, &url).await;
    server
        .push_fault(Fault::on_rpc("ping", FaultAction::Delay(Duration::from_millis(50))).times(1));
    let started = Instant::now();
    let r = send(&c, post(&url, Some(&sid), &rpc(2, "ping", json!({}))))
        .await
        .unwrap();
    assert_eq!(r.status, 200);
    assert!(started.elapsed() >= Duration::from_millis(50));

    server.expire_sessions();
    let r = send(&c, post(&url, Some(&sid), &rpc(3, "ping", json!({}))))
        .await
        .unwrap();
    assert_eq!(r.status, 404, "expired session");
    assert_eq!(server.stats().live_sessions, 0);

    let sid = initialize(&c, &url).await;
    server.push_fault(Fault::on_http(Method::DELETE, FaultAction::status(500)).times(1));
    let del = || {
        Request::delete(&url)
            .header("mcp-session-id", &sid)
            .body(Full::new(Bytes::new()))
            .unwrap()
    };
    assert_eq!(send(&c, del()).await.unwrap().status, 500);
    assert_eq!(
        server.stats().live_sessions,
        1,
        "a faulted DELETE keeps the session"
    );
    assert_eq!(send(&c, del()).await.unwrap().status, 200);
    assert_eq!(server.stats().deletes, 2);
}

#[tokio::test]
async fn server_request_fault_round_trip() {
    let _shared = crate::support::shared();
    // JSON mode: the fault forces an SSE answer.
    let server = TestServer::start(
        ServerConfig::default().with_fault(
            Fault::on_rpc(
                "tools/call",
                FaultAction::ServerRequest {
                    method: "sampling/createMessage".into(),
                    params: json!({"messages": [], "maxTokens": 5}),
                },
            )
            .times(1),
        ),
    );
    let url = server.url();
    let c = client();
    let sid = initialize(&c, &url).await;
    let call = rpc(
        5,
        "tools/call",
        json!({"name": "tool-000", "arguments": {}}),
    );
    let mut sse = SseReader::new(open(&c, post(&url, Some(&sid), &call)).await);
    let (priming_id, priming) = sse.next().await.unwrap();
    assert!(priming_id.is_some());
    assert_eq!(priming, "", "priming event");
    let request = sse.next_json().await;
    assert_eq!(request["method"], "sampling/createMessage");
    assert_eq!(request["params"]["maxTokens"], 5);
    let srv_id = request["id"].as_str().expect("string id").to_owned();
    assert!(srv_id.starts_with("srv-"), "{srv_id}");
    assert!(server.client_answers().is_empty());

    let answer =
        json!({"jsonrpc": "2.0", "id": srv_id, "result": {"role": "assistant", "model": "m"}});
    let r = send(&c, post(&url, Some(&sid), &answer)).await.unwrap();
    assert_eq!((r.status, r.body.len()), (202, 0));
    let response = sse.next_json().await;
    assert_eq!(response["id"], 5);
    let result = &response["result"];
    assert_eq!(result["structuredContent"]["clientAnswer"]["model"], "m");
    assert_eq!(result["structuredContent"]["tool"], "tool-000");
    let content = result["content"].as_array().unwrap();
    assert_eq!(content.len(), 2);
    assert!(content[1]["text"].as_str().unwrap().contains("assistant"));
    assert!(sse.next().await.is_none(), "stream ends after the response");
    assert_eq!(server.client_answers(), vec![answer]);

    // Other methods: `_meta.clientAnswer`; an error answer is wrapped.
    server.push_fault(
        Fault::on_rpc(
            "ping",
            FaultAction::ServerRequest {
                method: "elicitation/create".into(),
                params: json!({"mode": "form", "message": "name?"}),
            },
        )
        .times(1),
    );
    let mut sse =
        SseReader::new(open(&c, post(&url, Some(&sid), &rpc(6, "ping", json!({})))).await);
    sse.next().await.unwrap();
    let request = sse.next_json().await;
    assert_eq!(request["method"], "elicitation/create");
    assert_ne!(request["id"], json!(srv_id), "new id");
    let error = json!({"jsonrpc": "2.0", "id": request["id"], "error": {"code": -1, "message": "declined"}});
    // An answer from another session does not count for it.
    let other = initialize(&c, &url).await;
    let wrong = json!({"jsonrpc": "2.0", "id": request["id"], "result": {"wrong": true}});
    let r = send(&c, post(&url, Some(&other), &wrong)).await.unwrap();
    assert_eq!(r.status, 202);
    let r = send(&c, post(&url, Some(&sid), &error)).await.unwrap();
    assert_eq!(r.status, 202);
    let response = sse.next_json().await;
    assert_eq!(response["id"], 6);
    assert_eq!(
        response["result"]["_meta"]["clientAnswer"],
        json!({"error": {"code": -1, "message": "declined"}})
    );
    assert!(sse.next().await.is_none());
    assert_eq!(server.client_answers().len(), 3);
}

#[tokio::test]
async fn request_listeners_collects_answers() {
    let _shared = crate::support::shared();
    let server = TestServer::start(ServerConfig::default().with_listen(ListenMode::Open));
    let url = server.url();
    let c = client();
    assert_eq!(server.request_listeners("roots/list", json!({})), 0);
    let sid = initialize(&c, &url).await;
    let mut listen = SseReader::new(open(&c, get(&url, &sid)).await);
    assert_eq!(listen.next().await.unwrap().1, "", "priming event");
    assert_eq!(server.request_listeners("roots/list", json!({"x": 1})), 1);
    let request = listen.next_json().await;
    assert_eq!(request["method"], "roots/list");
    assert_eq!(request["params"]["x"], 1);
    assert!(request["id"].as_str().unwrap().starts_with("srv-"));
    let answer = json!({"jsonrpc": "2.0", "id": request["id"], "result": {"roots": []}});
    let r = send(&c, post(&url, Some(&sid), &answer)).await.unwrap();
    assert_eq!(r.status, 202);
    assert_eq!(server.client_answers(), vec![answer]);
    // Each request gets a new id.
    assert_eq!(server.request_listeners("roots/list", json!({})), 1);
    assert_ne!(listen.next_json().await["id"], request["id"]);
}

#[tokio::test]
async fn runtime_catalog_and_list_changed() {
    let _shared = crate::support::shared();
    let server = TestServer::start(ServerConfig::default().with_listen(ListenMode::Open));
    let url = server.url();
    let c = client();
    let sid = initialize(&c, &url).await;
    let count = |v: Value, field: &str| v["result"][field].as_array().unwrap().len();
    let list = |id: u64, method: &str| post(&url, Some(&sid), &rpc(id, method, json!({})));
    assert_eq!(
        count(
            send(&c, list(1, "tools/list")).await.unwrap().json(),
            "tools"
        ),
        3
    );

    server.set_tools(5);
    server.set_prompts(0);
    server.set_resources(4);
    let tools = send(&c, list(2, "tools/list")).await.unwrap().json();
    assert_eq!(count(tools.clone(), "tools"), 5);
    assert_eq!(tools["result"]["tools"][4]["name"], "tool-004");
    assert_eq!(
        count(
            send(&c, list(3, "prompts/list")).await.unwrap().json(),
            "prompts"
        ),
        0
    );
    assert_eq!(
        count(
            send(&c, list(4, "resources/list")).await.unwrap().json(),
            "resources"
        ),
        4
    );
    let call = rpc(
        5,
        "tools/call",
        json!({"name": "tool-004", "arguments": {}}),
    );
    let r = send(&c, post(&url, Some(&sid), &call))
        .await
        .unwrap()
        .json();
    assert!(r["result"].get("isError").is_none(), "{r}");
    let init = send(&c, post(&url, None, &init_msg("2025-11-25")))
        .await
        .unwrap()
        .json();
    assert!(init["result"]["capabilities"].get("prompts").is_none());

    assert_eq!(server.list_changed("tools"), 0, "no listener yet");
    let mut listen = SseReader::new(open(&c, get(&url, &sid)).await);
    listen.next().await.unwrap();
    for kind in ["tools", "prompts", "resources"] {
        assert_eq!(server.list_changed(kind), 1);
        let note = listen.next_json().await;
        assert_eq!(note["method"], format!("notifications/{kind}/list_changed"));
        assert!(note.get("id").is_none());
    }
    let bad = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        server.list_changed("roots")
    }));
    assert!(bad.is_err(), "unknown kind panics");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_ends_hang_delay_and_server_request() {
    let _shared = crate::support::shared();
    // JSON mode, Hang: the body fails, no response.
    let server = TestServer::start(ServerConfig::default());
    let url = server.url();
    let c = client();
    let sid = initialize(&c, &url).await;
    server.push_fault(Fault::on_rpc("tools/list", FaultAction::Hang).times(1));
    let pending = tokio::spawn({
        let (c, req) = (
            c.clone(),
            post(&url, Some(&sid), &rpc(2, "tools/list", json!({}))),
        );
        async move { send(&c, req).await }
    });
    let recorded = |m: &'static str| {
        let server = &server;
        move || {
            server
                .requests()
                .iter()
                .any(|r| r.rpc_method.as_deref() == Some(m))
        }
    };
    wait_until(recorded("tools/list")).await;
    let r = send(&c, post(&url, Some(&sid), &cancel_msg(json!(2))))
        .await
        .unwrap();
    assert_eq!(r.status, 202);
    let outcome = timeout(LIMIT, pending).await.expect("still hung").unwrap();
    assert!(outcome.is_err(), "no response for a cancelled request");

    // A cancellation from another session leaves the request alone.
    server
        .push_fault(Fault::on_rpc("ping", FaultAction::Delay(Duration::from_millis(500))).times(1));
    let pending = tokio::spawn({
        let (c, req) = (
            c.clone(),
            post(&url, Some(&sid), &rpc(7, "ping", json!({}))),
        );
        async move { send(&c, req).await }
    });
    wait_until(recorded("ping")).await;
    let other = initialize(&c, &url).await;
    let r = send(&c, post(&url, Some(&other), &cancel_msg(json!(7))))
        .await
        .unwrap();
    assert_eq!(r.status, 202);
    let r = timeout(LIMIT, pending).await.unwrap().unwrap().unwrap();
    assert_eq!((r.status, r.json()["id"].clone()), (200, json!(7)));
    assert_eq!(server.cancelled(), vec![json!(2), json!(7)]);

    // SSE mode, Delay: the stream ends without any event.
    let server = TestServer::start(ServerConfig::default().with_response_mode(ResponseMode::Sse));
    let url = server.url();
    let sid = initialize(&c, &url).await;
    server.push_fault(Fault::on_rpc(
        "tools/list",
        FaultAction::Delay(Duration::from_secs(60)),
    ));
    let mut req = rpc(0, "tools/list", json!({}));
    req["id"] = json!("r-1");
    let pending = tokio::spawn({
        let (c, req) = (c.clone(), post(&url, Some(&sid), &req));
        async move { send(&c, req).await }
    });
    wait_until(|| {
        server
            .requests()
            .iter()
            .any(|r| r.rpc_method.as_deref() == Some("tools/list"))
    })
    .await;
    send(&c, post(&url, Some(&sid), &cancel_msg(json!("r-1"))))
        .await
        .unwrap();
    let r = timeout(LIMIT, pending).await.unwrap().unwrap().unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("text/event-stream"));
    assert!(r.body.is_empty(), "no event at all");
    server.clear_faults();

    // ServerRequest: cancelling the original request ends its stream.
    server.push_fault(Fault::on_rpc(
        "ping",
        FaultAction::ServerRequest {
            method: "roots/list".into(),
            params: json!({}),
        },
    ));
    let mut sse =
        SseReader::new(open(&c, post(&url, Some(&sid), &rpc(9, "ping", json!({})))).await);
    sse.next().await.unwrap();
    assert_eq!(sse.next_json().await["method"], "roots/list");
    send(&c, post(&url, Some(&sid), &cancel_msg(json!(9))))
        .await
        .unwrap();
    assert!(sse.next().await.is_none(), "no response after cancellation");
    assert_eq!(server.cancelled(), vec![json!("r-1"), json!(9)]);
}

#[tokio::test]
async fn server_request_unanswered_gets_error_after_10s() {
    let _shared = crate::support::shared();
    let server = TestServer::start(ServerConfig::default().with_fault(Fault::on_rpc(
        "ping",
        FaultAction::ServerRequest {
            method: "roots/list".into(),
            params: json!({}),
        },
    )));
    let url = server.url();
    let c = client();
    let sid = initialize(&c, &url).await;
    let started = Instant::now();
    let r = timeout(
        2 * LIMIT,
        c.request(post(&url, Some(&sid), &rpc(3, "ping", json!({})))),
    )
    .await
    .unwrap()
    .unwrap();
    let body = timeout(2 * LIMIT, r.into_body().collect())
        .await
        .expect("the server's own wait is bounded")
        .unwrap()
        .to_bytes();
    assert!(started.elapsed() >= Duration::from_secs(9));
    let reply = Reply {
        status: 200,
        headers: HeaderMap::new(),
        body,
    };
    let ev = reply.events();
    assert_eq!(ev.len(), 3, "priming, server request, error");
    let v: Value = serde_json::from_str(&ev[2].1).unwrap();
    assert_eq!(v["id"], 3);
    assert_eq!(v["error"]["code"], -32000);
    assert_eq!(v["error"]["message"], "no answer to the server request");
    assert!(server.client_answers().is_empty());
}

#[tokio::test]
async fn hold_head_mints_the_session_on_receipt_and_sends_the_head_late() {
    let _shared = crate::support::shared();
    let hold = Duration::from_millis(300);
    let server = TestServer::start(
        ServerConfig::default()
            .with_fault(Fault::on_rpc("initialize", FaultAction::HoldHead(hold)).times(1)),
    );
    let url = server.url();
    let c = client();
    let started = Instant::now();
    let pending = tokio::spawn({
        let c = c.clone();
        let url = url.clone();
        async move { send(&c, post(&url, None, &init_msg("2025-11-25"))).await }
    });
    // The session exists while the head is still held.
    wait_until(|| server.stats().live_sessions == 1).await;
    assert!(!pending.is_finished(), "the head is held");
    let log = server.session_log();
    assert_eq!(log.len(), 1);
    assert!(log[0].live && !log[0].expired && log[0].deletes == 0);
    let r = pending.await.unwrap().unwrap();
    assert!(started.elapsed() >= hold);
    assert_eq!(r.status, 200);
    assert_eq!(r.header("mcp-session-id"), Some(log[0].id.as_str()));
    assert_eq!(r.json()["result"]["protocolVersion"], "2025-11-25");

    // A notifications/cancelled ends the wait, as for Delay.
    let sid = log[0].id.clone();
    server
        .push_fault(Fault::on_rpc("ping", FaultAction::HoldHead(Duration::from_secs(60))).times(1));
    let held = tokio::spawn({
        let c = c.clone();
        let url = url.clone();
        let sid = sid.clone();
        async move { send(&c, post(&url, Some(&sid), &rpc(7, "ping", json!({})))).await }
    });
    wait_until(|| {
        server
            .requests()
            .iter()
            .any(|r| r.rpc_method.as_deref() == Some("ping"))
    })
    .await;
    let r = send(&c, post(&url, Some(&sid), &cancel_msg(json!(7))))
        .await
        .unwrap();
    assert_eq!(r.status, 202);
    let outcome = timeout(LIMIT, held)
        .await
        .expect("the cancel ended the hold");
    // JSON mode: the body fails (no JSON-RPC response).
    assert!(outcome.unwrap().is_err());
}

#[tokio::test]
async fn session_log_counts_deletes_and_expiry_per_session() {
    let _shared = crate::support::shared();
    let server = TestServer::start(ServerConfig::default());
    let url = server.url();
    let c = client();
    let a = initialize(&c, &url).await;
    let b = initialize(&c, &url).await;
    let d = initialize(&c, &url).await;
    let del = |s: &str| {
        Request::delete(&url)
            .header("mcp-session-id", s)
            .body(Full::new(Bytes::new()))
            .unwrap()
    };
    assert_eq!(send(&c, del(&a)).await.unwrap().status, 200);
    assert_eq!(send(&c, del(&a)).await.unwrap().status, 404);
    assert!(server.expire_session(&b));
    assert!(!server.expire_session(&b), "already gone");
    assert_eq!(send(&c, del(&b)).await.unwrap().status, 404);
    let r = send(&c, post(&url, Some(&b), &rpc(2, "ping", json!({}))))
        .await
        .unwrap();
    assert_eq!(r.status, 404, "expired");

    let log = server.session_log();
    let ids: Vec<&str> = log.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids, [a.as_str(), b.as_str(), d.as_str()]);
    assert_eq!(
        log.iter()
            .map(|r| (r.deletes, r.expired, r.live))
            .collect::<Vec<_>>(),
        [(2, false, false), (1, true, false), (0, false, true)]
    );

    // ExpireSession: the next matching request finds its session gone.
    server.push_fault(Fault::on_rpc("ping", FaultAction::ExpireSession).times(1));
    let r = send(&c, post(&url, Some(&d), &rpc(3, "ping", json!({}))))
        .await
        .unwrap();
    assert_eq!(r.status, 404);
    assert_eq!(r.json()["error"]["code"], -32001);
    let r = send(&c, post(&url, Some(&d), &rpc(4, "tools/list", json!({}))))
        .await
        .unwrap();
    assert_eq!(r.status, 404, "the session is over, not only that request");
    let last = server.session_log().pop().unwrap();
    assert!(last.expired && !last.live && last.deletes == 0);

    // expire_sessions marks every live session, and only those.
    let e = initialize(&c, &url).await;
    server.expire_sessions();
    let log = server.session_log();
    assert_eq!(log.last().unwrap().id, e);
    assert!(log.last().unwrap().expired);
    assert!(!log[0].expired, "a deleted session is not marked expired");

    // Records of sessions that are over go with the requests; live ones stay.
    let f = initialize(&c, &url).await;
    server.clear_requests();
    let log = server.session_log();
    assert_eq!(log.len(), 1);
    assert_eq!(log[0].id, f);
}
