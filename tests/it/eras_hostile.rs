//! Hostile servers against the three eras: 2026-07-28 (stateless, MRTR),
//! era detection, and the deprecated HTTP+SSE transport. Every server here
//! is the test's own (tests/it/support/hostile_http.rs), so a scenario can do
//! what no well-behaved server does.

use crate::support::hostile_http;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use hostile_http::*;
use http::Method;
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use mcp_scoped_http::HeaderHook;
use mcp_scoped_http::client::HookInfo;
use mcp_scoped_http::{Connector, HttpClient, Ledger, ProtocolVersion, TransportKind};
use serde_json::{Value, json};

// ---------------------------------------------------------------------------
// Harness: one scenario at a time (the ledger is process-wide), the caller's
// own client, and the baseline.

fn scenario(test: impl Future<Output = ()>) {
    crate::support::scenario(test);
}

fn alive_tasks() -> usize {
    tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks()
}

/// Counts the tasks of the caller's own client (its pooled connections are
/// the caller's, not ours).
#[derive(Clone, Default)]
struct CountingExecutor(Arc<AtomicUsize>);

impl<F> hyper::rt::Executor<F> for CountingExecutor
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    fn execute(&self, future: F) {
        let live = self.0.clone();
        live.fetch_add(1, Ordering::SeqCst);
        tokio::spawn(async move {
            let _done = scopeguard::guard((), move |()| {
                live.fetch_sub(1, Ordering::SeqCst);
            });
            future.await;
        });
    }
}

/// The caller: its client, lent to sessions, with a hook of its own.
struct Caller {
    client: HttpClient,
    executor: CountingExecutor,
    _hook: mcp_scoped_http::HookHandle,
}

impl Caller {
    fn new(origin: &str) -> Caller {
        let executor = CountingExecutor::default();
        let raw: Client<_, Full<Bytes>> = Client::builder(executor.clone())
            .pool_idle_timeout(None)
            .build_http();
        let client = HttpClient::borrowed(raw);
        let hook = client
            .add_hook(origin, HeaderHook::header("x-caller", "mine").unwrap())
            .unwrap();
        Caller {
            client,
            executor,
            _hook: hook,
        }
    }

    fn live(&self) -> usize {
        self.executor.0.load(Ordering::SeqCst)
    }
}

struct Before {
    ledger: Ledger,
    tasks: usize,
    caller_tasks: usize,
    hooks: Vec<HookInfo>,
}

impl Before {
    fn take(caller: Option<&Caller>) -> Before {
        Before {
            ledger: mcp_scoped_http::ledger(),
            tasks: alive_tasks(),
            caller_tasks: caller.map_or(0, Caller::live),
            hooks: caller.map(|c| c.client.hooks()).unwrap_or_default(),
        }
    }

    /// Nothing of ours is left: ledger, tasks, hooks on the caller's client,
    /// and no stream left open on the server.
    async fn check(&self, caller: Option<&Caller>, server: &Server, context: &str) {
        let settle = Duration::from_secs(5);
        let ledger = eventually(settle, || mcp_scoped_http::ledger() == self.ledger).await;
        assert!(
            ledger,
            "{context}: ledger {:?}, before {:?}",
            mcp_scoped_http::ledger(),
            self.ledger
        );
        let theirs = || caller.map_or(0, Caller::live);
        let tasks = eventually(settle, || {
            alive_tasks().saturating_sub(theirs()) <= self.tasks.saturating_sub(self.caller_tasks)
        })
        .await;
        assert!(
            tasks,
            "{context}: live tasks {} (caller's {}), before {} (caller's {})",
            alive_tasks(),
            theirs(),
            self.tasks,
            self.caller_tasks
        );
        if let Some(caller) = caller {
            assert_eq!(caller.client.hooks(), self.hooks, "{context}: hooks");
        }
        let streams = eventually(settle, || server.state.streams.load(Ordering::SeqCst) == 0).await;
        assert!(
            streams,
            "{context}: {} stream(s) still open on the server",
            server.state.streams.load(Ordering::SeqCst)
        );
    }
}

/// Polls the inner future `left` times, then drops it.
struct Stop<F: Future> {
    inner: Pin<Box<F>>,
    left: usize,
}

impl<F: Future> Future for Stop<F> {
    type Output = Option<F::Output>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if self.left == 0 {
            return Poll::Ready(None);
        }
        self.left -= 1;
        match self.inner.as_mut().poll(cx) {
            Poll::Ready(value) => Poll::Ready(Some(value)),
            Poll::Pending => {
                if self.left == 0 {
                    cx.waker().wake_by_ref();
                }
                Poll::Pending
            }
        }
    }
}

// ---------------------------------------------------------------------------
// The eras, as handlers.

fn has_id(seen: &Seen) -> bool {
    seen.body.as_ref().is_some_and(|b| b.get("id").is_some())
}

/// A 2025-11-25 Streamable HTTP server (no discover).
fn era_2025(seen: &Seen) -> http::Response<Out> {
    match (&seen.method, seen.rpc()) {
        (&Method::POST, Some("server/discover")) => whole(400, Some("text/plain"), "bad request"),
        (&Method::POST, Some("initialize")) => {
            let mut r = json_response(
                200,
                &result(
                    &seen.id(),
                    json!({"protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
                           "serverInfo": {"name": "s25", "version": "1"}}),
                ),
            );
            r.headers_mut()
                .insert("mcp-session-id", "sess-25".parse().unwrap());
            r
        }
        (&Method::POST, Some("tools/list")) => {
            json_response(200, &result(&seen.id(), json!({"tools": []})))
        }
        (&Method::POST, _) if has_id(seen) => json_response(200, &result(&seen.id(), json!({}))),
        (&Method::POST, _) => empty(202),
        (&Method::DELETE, _) => empty(200),
        _ => empty(405),
    }
}

fn discover_result(id: &Value) -> Value {
    result(
        id,
        json!({
            "supportedVersions": ["2026-07-28"],
            "capabilities": {"tools": {}},
            "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "s26", "version": "1"}},
        }),
    )
}

fn mirrored_tool() -> Value {
    json!({"name": "echo", "inputSchema": {"type": "object", "properties": {
        "region": {"type": "string", "x-mcp-header": "Region"}}}})
}

/// A 2026-07-28 server, modern only: `initialize` is refused with
/// `UnsupportedProtocolVersion`, as the spec asks.
fn era_2026(seen: &Seen) -> http::Response<Out> {
    match (&seen.method, seen.rpc()) {
        (&Method::POST, Some("server/discover")) => {
            json_response(200, &discover_result(&seen.id()))
        }
        (&Method::POST, Some("initialize")) => json_response(
            400,
            &rpc_error(&seen.id(), -32022, json!({"supported": ["2026-07-28"]})),
        ),
        (&Method::POST, Some("tools/list")) => json_response(
            200,
            &result(&seen.id(), json!({"tools": [mirrored_tool()]})),
        ),
        (&Method::POST, Some("tools/call")) => json_response(
            200,
            &result(&seen.id(), json!({"content": [], "resultType": "complete"})),
        ),
        (&Method::POST, _) if has_id(seen) => json_response(200, &result(&seen.id(), json!({}))),
        (&Method::POST, _) => empty(202),
        _ => empty(405),
    }
}

/// A 2026-07-28 server whose tools change: `subscriptions/listen` is
/// answered with a stream that stays open.
fn era_2026_listening(seen: &Seen, state: &Arc<State>) -> http::Response<Out> {
    match seen.rpc() {
        Some("server/discover") => json_response(
            200,
            &result(
                &seen.id(),
                json!({"supportedVersions": ["2026-07-28"],
                       "capabilities": {"tools": {"listChanged": true}}}),
            ),
        ),
        Some("subscriptions/listen") => {
            let (tx, response) = state.sse();
            let _ = tx.try_send(Bytes::from_static(b": open\n\n"));
            response
        }
        _ => era_2026(seen),
    }
}

/// The answer a 2024-11-05 server puts on its stream for `seen`.
fn sse_answer(seen: &Seen) -> Value {
    match seen.rpc() {
        Some("initialize") => result(
            &seen.id(),
            json!({"protocolVersion": "2024-11-05", "capabilities": {"tools": {}},
                   "serverInfo": {"name": "s24", "version": "1"}}),
        ),
        Some("tools/list") => result(
            &seen.id(),
            json!({"tools": [{"name": "echo", "inputSchema": {"type": "object"}}]}),
        ),
        _ => result(&seen.id(), json!({"content": []})),
    }
}

/// The stream `sid=N` of a POST to the HTTP+SSE message endpoint.
fn sse_writer(seen: &Seen, state: &State) -> Option<tokio::sync::mpsc::Sender<Bytes>> {
    let sid: usize = seen.path.split("sid=").nth(1)?.parse().ok()?;
    state.writers.lock().unwrap().get(sid).cloned()
}

/// A 2024-11-05 HTTP+SSE server at `/sse`, posting to `/messages?sid=N`.
fn era_sse(seen: &Seen, state: &Arc<State>) -> http::Response<Out> {
    match (&seen.method, seen.path.as_str()) {
        (&Method::GET, "/sse") => {
            let sid = state.writers.lock().unwrap().len();
            let (tx, response) = state.sse();
            let _ = tx.try_send(event(Some("endpoint"), &format!("/messages?sid={sid}")));
            response
        }
        (&Method::POST, path) if path.starts_with("/messages") => {
            if has_id(seen) && seen.rpc().is_some() {
                if let Some(writer) = sse_writer(seen, state) {
                    let _ = writer.try_send(message(&sse_answer(seen)));
                }
            }
            empty(202)
        }
        _ => empty(405),
    }
}

fn owned_connector(url: &str) -> Connector {
    Connector::new(url)
        .listen(false)
        .request_timeout(Duration::from_secs(5))
}

// ---------------------------------------------------------------------------
// Detection

/// A client remembers 2025-11-25 for an endpoint; the server is upgraded to
/// a modern-only 2026-07-28 server, which refuses `initialize` with
/// `UnsupportedProtocolVersion` naming 2026-07-28 (as the spec asks of
/// it). That error proves the remembered era wrong: the next connect must
/// probe again and speak 2026-07-28, not fail.
#[test]
fn a_remembered_2025_era_is_probed_again_when_the_server_turned_modern() {
    scenario(async {
        let server = Server::start(|seen, state| async move {
            if state.mode() == 0 {
                era_2025(&seen)
            } else {
                era_2026(&seen)
            }
        });
        let connector = owned_connector(&server.url("/mcp"));
        let session = connector.connect().await.expect("a 2025 server");
        assert_eq!(
            session.info().protocol_version,
            ProtocolVersion::V2025_11_25
        );
        session.close().await;
        server.state.mode.store(1, Ordering::SeqCst);
        let session = connector
            .connect()
            .await
            .expect("the server turned modern: probe again");
        assert_eq!(
            session.info().protocol_version,
            ProtocolVersion::V2026_07_28
        );
        assert!(session.info().probed);
        session.close().await;
    });
}

/// A remembered HTTP+SSE era that proves wrong (the stream opens and names
/// its endpoint, but the endpoint refuses `initialize` with a 404): the
/// stream of that attempt must be let go before detection goes on, not
/// kept (and read) for the life of the session that detection opens.
#[test]
fn a_failed_http_sse_attempt_lets_go_of_its_stream() {
    scenario(async {
        let server = Server::start(|seen, state| async move {
            match (state.mode(), &seen.method, seen.path.as_str()) {
                (2, &Method::GET, "/sse") => {
                    let response = era_sse(&seen, &state);
                    state.end_streams();
                    response
                }
                (2, &Method::POST, p) if p.starts_with("/messages") => {
                    // Long enough for the client to see the stream end.
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    empty(404)
                }
                (_, &Method::GET, "/sse") => era_sse(&seen, &state),
                (0, _, _) => era_sse(&seen, &state),
                // Now a 2025 server on the same URL, whose old message
                // endpoint is gone.
                (_, &Method::POST, p) if p.starts_with("/messages") => empty(404),
                _ => era_2025(&seen),
            }
        });
        let connector = owned_connector(&server.url("/sse")).bearer("secret");
        let session = connector.connect().await.expect("an HTTP+SSE server");
        assert_eq!(session.info().transport, TransportKind::HttpSse);
        session.close().await;
        assert!(
            eventually(Duration::from_secs(2), || server
                .state
                .streams
                .load(Ordering::SeqCst)
                == 0)
            .await
        );
        server.state.mode.store(1, Ordering::SeqCst);
        let session = connector.connect().await.expect("probed again: 2025");
        assert_eq!(session.info().transport, TransportKind::StreamableHttp);
        let released = eventually(Duration::from_secs(2), || {
            server.state.streams.load(Ordering::SeqCst) == 0
        })
        .await;
        assert!(
            released,
            "the stream of the failed HTTP+SSE attempt is still open during the session"
        );
        session
            .request("ping", None)
            .await
            .expect("the session is not the old stream's");
        session.close().await;

        // Again, with the old stream ending at once (before the 404 comes):
        // the end of a failed attempt's stream must not end the session
        // that detection opens after it.
        server.state.mode.store(0, Ordering::SeqCst);
        let session = connector.connect().await.expect("an HTTP+SSE server");
        assert_eq!(session.info().transport, TransportKind::HttpSse);
        session.close().await;
        server.state.mode.store(2, Ordering::SeqCst);
        let session = connector.connect().await.expect("a 2025 server");
        assert_eq!(session.info().transport, TransportKind::StreamableHttp);
        session
            .request("ping", None)
            .await
            .expect("the session is not the old stream's");
        session.close().await;
    });
}

/// A probe that is never answered: the connect fails with a timeout,
/// bounded by the request timeout, with no fallback to `initialize`.
#[test]
fn a_probe_that_is_never_answered_times_out_without_fallback() {
    scenario(async {
        let server = Server::start(|seen, _| async move {
            if seen.rpc() == Some("server/discover") {
                tokio::time::sleep(Duration::from_secs(30)).await;
            }
            era_2025(&seen)
        });
        let before = Before::take(None);
        let started = Instant::now();
        let error = Connector::new(server.url("/mcp"))
            .listen(false)
            .request_timeout(Duration::from_millis(200))
            .connect()
            .await
            .expect_err("no answer");
        assert!(error.is_timeout(), "{error:?}");
        assert!(started.elapsed() < Duration::from_secs(3));
        assert_eq!(
            server.state.rpcs("initialize"),
            0,
            "no fallback on a timeout"
        );
        before.check(None, &server, "probe timeout").await;
    });
}

/// Many connects at once through one lent client, era unknown: each may
/// probe, but every one ends on the right era and the verdict is right.
#[test]
fn concurrent_connects_through_one_client_agree_on_the_era() {
    scenario(async {
        let server = Server::start(|seen, _| async move { era_2025(&seen) });
        let url = server.url("/mcp");
        let caller = Caller::new(&url);
        let before = Before::take(Some(&caller));
        let connects = (0..8).map(|_| {
            owned_connector(&url)
                .client(caller.client.clone())
                .bearer("secret")
                .connect()
        });
        let mut sessions = Vec::new();
        for joined in futures_join(connects.collect()).await {
            let session = joined.expect("connects");
            assert_eq!(
                session.info().protocol_version,
                ProtocolVersion::V2025_11_25
            );
            sessions.push(session);
        }
        assert_eq!(
            caller.client.known_revision(&url),
            Some(ProtocolVersion::V2025_11_25)
        );
        // Another URL on the same origin learned nothing.
        assert_eq!(caller.client.known_revision(&server.url("/other")), None);
        for session in sessions {
            session.close().await;
        }
        before.check(Some(&caller), &server, "concurrent").await;
    });
}

/// Joins futures on the current task (no spawn), in order.
async fn futures_join<F: Future>(futures: Vec<F>) -> Vec<F::Output> {
    let mut futures: Vec<Pin<Box<F>>> = futures.into_iter().map(Box::pin).collect();
    let mut outputs: Vec<Option<F::Output>> = futures.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (future, output) in futures.iter_mut().zip(outputs.iter_mut()) {
            if output.is_none() {
                match future.as_mut().poll(cx) {
                    Poll::Ready(value) => *output = Some(value),
                    Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
    outputs.into_iter().map(Option::unwrap).collect()
}

/// The connect future dropped after K polls, for every K: through a 2026
/// probe, a 2025 fallback and an HTTP+SSE fallback, with the caller's
/// client lent: nothing of ours is left (ledger, tasks, hooks, streams),
/// and every 2025 session the server created is DELETEd.
#[test]
fn dropping_connect_after_any_number_of_polls_leaks_nothing() {
    scenario(async {
        type Make = fn(&Seen, &Arc<State>) -> http::Response<Out>;
        let eras: [(&str, &str, Make); 4] = [
            ("2026", "/mcp", |seen, _| era_2026(seen)),
            ("2026, listening", "/mcp", era_2026_listening),
            ("2025", "/mcp", |seen, _| era_2025(seen)),
            ("http+sse", "/sse", era_sse),
        ];
        for (name, path, make) in eras {
            let server = Server::start(move |seen, state| async move { make(&seen, &state) });
            let url = server.url(path);
            let caller = Caller::new(&url);
            let mut completed = false;
            for k in 1..=300 {
                let before = Before::take(Some(&caller));
                let connect = Connector::new(&url)
                    .client(caller.client.clone())
                    .bearer("secret")
                    .request_timeout(Duration::from_secs(5))
                    .connect();
                let outcome = Stop {
                    inner: Box::pin(connect),
                    left: k,
                }
                .await;
                let context = format!("{name}: dropped after {k} polls");
                match outcome {
                    None => {}
                    Some(Ok(session)) => {
                        session.close().await;
                        completed = true;
                    }
                    Some(Err(error)) => panic!("{context}: {error:?}"),
                }
                before.check(Some(&caller), &server, &context).await;
                if completed {
                    break;
                }
            }
            assert!(completed, "{name}: connect never completed");
            let seen = server.state.seen();
            let inits = seen
                .iter()
                .filter(|s| s.rpc() == Some("initialize") && s.path == "/mcp")
                .count();
            let deletes = || {
                server
                    .state
                    .seen()
                    .iter()
                    .filter(|s| s.method == Method::DELETE)
                    .count()
            };
            if name == "2025" {
                assert!(
                    eventually(Duration::from_secs(5), || deletes() == inits).await,
                    "{name}: {} DELETEs for {inits} sessions",
                    deletes()
                );
            } else {
                assert_eq!(deletes(), 0, "{name}: no session id, no DELETE");
            }
        }
    });
}

// ---------------------------------------------------------------------------
// HTTP+SSE

/// Over HTTP+SSE the answers come on the stream; what the POST itself is
/// answered with (202, or a 200 with a body, as some servers send:
/// `Accepted` as text/plain, or an empty JSON body) is no answer and no
/// error.
#[test]
fn an_http_sse_post_answered_with_content_is_accepted() {
    for (content_type, body) in [
        ("text/plain", "Accepted"),
        ("text/html; charset=utf-8", "<p>ok</p>"),
        ("application/json", ""),
    ] {
        scenario(async move {
            let server = Server::start(move |seen, state| async move {
                let answered = era_sse(&seen, &state);
                if seen.path.starts_with("/messages") {
                    whole(202, Some(content_type), body)
                } else {
                    answered
                }
            });
            let before = Before::take(None);
            let session = owned_connector(&server.url("/sse"))
                .protocol_version(ProtocolVersion::V2024_11_05)
                .connect()
                .await
                .unwrap_or_else(|e| panic!("{content_type}: {e:?}"));
            session
                .call_tool("echo", json!({}))
                .await
                .unwrap_or_else(|e| panic!("{content_type}: {e:?}"));
            session.close().await;
            before.check(None, &server, content_type).await;
        });
    }
}

/// A stream that never names its endpoint holds the connect no longer than
/// the request timeout, and nothing is left.
#[test]
fn an_endpoint_event_that_never_comes_is_bounded() {
    scenario(async {
        let server = Server::start(|seen, state| async move {
            if seen.method == Method::GET {
                let (tx, response) = state.sse();
                let _ = tx.try_send(Bytes::from_static(b": hello\n\n"));
                response
            } else {
                empty(405)
            }
        });
        let before = Before::take(None);
        let started = Instant::now();
        let error = Connector::new(server.url("/sse"))
            .listen(false)
            .request_timeout(Duration::from_millis(300))
            .connect()
            .await
            .expect_err("no endpoint");
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "{:?}",
            started.elapsed()
        );
        // The fallback's own timeout is not the error shown: the
        // Streamable HTTP answer (405) says more.
        assert_eq!(error.status().map(|s| s.as_u16()), Some(405), "{error:?}");
        before.check(None, &server, "no endpoint").await;
        // Pinned: the timeout itself.
        let error = Connector::new(server.url("/sse"))
            .listen(false)
            .protocol_version(ProtocolVersion::V2024_11_05)
            .request_timeout(Duration::from_millis(300))
            .connect()
            .await
            .expect_err("no endpoint");
        assert!(error.is_timeout(), "{error:?}");
        before.check(None, &server, "no endpoint, pinned").await;
    });
}

/// Endpoints elsewhere (another origin, another scheme, a protocol-relative
/// reference, a backslash trick) are refused, and neither the bearer token
/// nor a hook's header ever reaches another origin.
#[test]
fn an_endpoint_elsewhere_is_refused_and_no_secret_leaves_the_origin() {
    scenario(async {
        let elsewhere = Server::start(|_, _| async { empty(202) });
        let other = elsewhere.addr;
        let targets = [
            format!("http://{other}/messages"),
            format!("//{other}/messages"),
            format!("\\\\{other}/messages"),
            format!("https://{other}/messages"),
            "ftp://127.0.0.1/messages".to_string(),
            "data:text/plain,hi".to_string(),
            "javascript:alert(1)".to_string(),
            "http://[::1".to_string(),
        ];
        for target in targets {
            let server = Server::start(move |seen, state| {
                let target = target.clone();
                async move {
                    if seen.method == Method::GET {
                        let (tx, response) = state.sse();
                        let _ = tx.try_send(event(Some("endpoint"), &target));
                        response
                    } else {
                        empty(405)
                    }
                }
            });
            let caller = Caller::new(&server.url("/"));
            let before = Before::take(Some(&caller));
            let error = owned_connector(&server.url("/sse"))
                .client(caller.client.clone())
                .bearer("secret-token")
                .header("x-session-hook", "secret-hook")
                .protocol_version(ProtocolVersion::V2024_11_05)
                .connect()
                .await
                .expect_err("refused");
            assert!(error.is_protocol(), "{error:?}");
            before
                .check(Some(&caller), &server, "endpoint elsewhere")
                .await;
        }
        assert!(
            elsewhere.state.seen().is_empty(),
            "another origin was reached: {:?}",
            elsewhere.state.seen()
        );
    });
}

/// A stream whose first event is not `endpoint`, and a huge endpoint event:
/// refused with a clear error, bounded.
#[test]
fn streams_that_do_not_begin_with_a_sane_endpoint_are_refused() {
    let huge = format!("/messages?{}", "a".repeat(9 * 1024 * 1024));
    for first in [
        message(&json!({"jsonrpc": "2.0", "method": "notifications/message", "params": {}})),
        event(None, "/messages"),
        event(Some("endpoint"), &huge),
    ] {
        scenario(async move {
            let server = Server::start(move |seen, state| {
                let first = first.clone();
                async move {
                    if seen.method == Method::GET {
                        let (tx, response) = state.sse();
                        let _ = tx.try_send(first);
                        response
                    } else {
                        empty(405)
                    }
                }
            });
            let before = Before::take(None);
            let error = owned_connector(&server.url("/sse"))
                .protocol_version(ProtocolVersion::V2024_11_05)
                .connect()
                .await
                .expect_err("refused");
            assert!(error.is_protocol() || error.is_limit(), "{error:?}");
            before.check(None, &server, "bad first event").await;
        });
    }
}

/// The stream ends mid-session: the request in flight fails at once with
/// the cause, and so do later ones; close still releases everything.
#[test]
fn an_http_sse_stream_that_ends_fails_requests_promptly() {
    scenario(async {
        let server = Server::start(|seen, state| async move {
            if seen.rpc() == Some("tools/call") {
                // Never answered; the stream ends instead.
                state.end_streams();
                return empty(202);
            }
            era_sse(&seen, &state)
        });
        let before = Before::take(None);
        let session = owned_connector(&server.url("/sse"))
            .request_timeout(Duration::from_secs(20))
            .connect()
            .await
            .expect("connects");
        let started = Instant::now();
        let error = session
            .call_tool("echo", json!({}))
            .await
            .expect_err("the stream ended");
        assert!(started.elapsed() < Duration::from_secs(3));
        assert!(error.to_string().contains("ended"), "{error}");
        let started = Instant::now();
        let error = session.request("ping", None).await.expect_err("ended");
        assert!(started.elapsed() < Duration::from_secs(1));
        assert!(error.to_string().contains("ended"), "{error}");
        session.close().await;
        before.check(None, &server, "stream ended").await;
    });
}

/// Responses to ids nobody asked for are dropped; a request in flight at
/// close fails as closed; close ends the stream on the server's side, with
/// an owned client and with a lent one.
#[test]
fn http_sse_close_ends_the_stream_and_requests_in_flight() {
    scenario(async {
        let server = Server::start(|seen, state| async move {
            if seen.rpc() == Some("tools/call") {
                if let Some(writer) = sse_writer(&seen, &state) {
                    for id in [999, -1] {
                        let _ = writer.try_send(message(&result(&json!(id), json!({}))));
                    }
                    let _ = writer.try_send(message(&result(&json!("x"), json!({}))));
                }
                // The real answer never comes.
                return empty(202);
            }
            era_sse(&seen, &state)
        });
        let url = server.url("/sse");
        for borrowed in [false, true] {
            let caller = Caller::new(&url);
            let before = Before::take(Some(&caller));
            let mut connector = owned_connector(&url).bearer("secret");
            if borrowed {
                connector = connector.client(caller.client.clone());
            }
            let session = Arc::new(connector.connect().await.expect("connects"));
            assert_eq!(server.state.streams.load(Ordering::SeqCst), 1);
            let in_flight = {
                let session = session.clone();
                tokio::spawn(async move { session.call_tool("echo", json!({})).await })
            };
            assert!(
                eventually(Duration::from_secs(2), || server.state.rpcs("tools/call")
                    > usize::from(borrowed))
                .await
            );
            session.close().await;
            let error = tokio::time::timeout(Duration::from_secs(2), in_flight)
                .await
                .expect("the request in flight ends at close")
                .unwrap()
                .expect_err("closed");
            assert!(error.is_closed(), "{error:?}");
            drop(session);
            before.check(Some(&caller), &server, "close").await;
        }
    });
}

// ---------------------------------------------------------------------------
// 2026-07-28

async fn modern_session(server: &Server, connector: Connector) -> mcp_scoped_http::Session {
    let _ = server;
    connector
        .protocol_version(ProtocolVersion::V2026_07_28)
        .connect()
        .await
        .expect("a 2026 session")
}

fn input_required(id: &Value, requests: Value, state: Option<&str>) -> Value {
    let mut r = json!({"resultType": "input_required", "inputRequests": requests});
    if let Some(state) = state {
        r["requestState"] = json!(state);
    }
    result(id, r)
}

/// A server that asks for input forever is stopped after the round limit;
/// one asking too much at once, or in a shape that is no map, is refused at
/// once; one asking on a method that may not ask is refused.
#[test]
fn mrtr_abuse_is_bounded() {
    scenario(async {
        let server = Server::start(|seen, state| async move {
            let elicit = json!({"method": "elicitation/create", "params": {"message": "?"}});
            match (seen.rpc(), state.mode()) {
                (Some("tools/call"), 0) => json_response(
                    200,
                    &input_required(&seen.id(), json!({"a": elicit}), Some("s")),
                ),
                (Some("tools/call"), 1) => {
                    let many: serde_json::Map<String, Value> = (0..10_000)
                        .map(|i| (format!("k{i}"), elicit.clone()))
                        .collect();
                    json_response(200, &input_required(&seen.id(), Value::Object(many), None))
                }
                (Some("tools/call"), 2) => {
                    json_response(200, &input_required(&seen.id(), json!([elicit]), None))
                }
                (Some("tools/call"), 3) => json_response(
                    200,
                    &input_required(&seen.id(), json!({"a": {"params": {}}}), None),
                ),
                (Some("ping"), _) => json_response(
                    200,
                    &input_required(&seen.id(), json!({"a": elicit}), Some("s")),
                ),
                _ => era_2026(&seen),
            }
        });
        let before = Before::take(None);
        let session = modern_session(
            &server,
            owned_connector(&server.url("/mcp"))
                .on_elicitation(|_| async { Ok(json!({"action": "decline"})) }),
        )
        .await;
        let error = session
            .call_tool("echo", json!({}))
            .await
            .expect_err("forever");
        assert!(error.is_limit(), "{error:?}");
        assert_eq!(server.state.rpcs("tools/call"), 9, "one call and 8 retries");
        // Every retry echoes the state and has an id of its own.
        let calls: Vec<Seen> = server
            .state
            .seen()
            .into_iter()
            .filter(|s| s.rpc() == Some("tools/call"))
            .collect();
        let ids: std::collections::HashSet<String> =
            calls.iter().map(|s| s.id().to_string()).collect();
        assert_eq!(ids.len(), calls.len());
        for call in &calls[1..] {
            assert_eq!(call.body.as_ref().unwrap()["params"]["requestState"], "s");
        }
        for (mode, want) in [(1, "limit"), (2, "protocol"), (3, "protocol")] {
            server.state.mode.store(mode, Ordering::SeqCst);
            let error = session
                .call_tool("echo", json!({}))
                .await
                .expect_err("refused");
            match want {
                "limit" => assert!(error.is_limit(), "mode {mode}: {error:?}"),
                _ => assert!(error.is_protocol(), "mode {mode}: {error:?}"),
            }
        }
        let error = session
            .request("ping", None)
            .await
            .expect_err("no MRTR on ping");
        assert!(error.is_protocol(), "{error:?}");
        session.close().await;
        before.check(None, &server, "mrtr").await;
    });
}

/// `resultType` that is not a string is junk, not "complete".
#[test]
fn a_result_type_that_is_not_a_string_is_refused() {
    for junk in [
        json!(7),
        json!({"kind": "complete"}),
        json!(["complete"]),
        json!(true),
    ] {
        scenario(async move {
            let server = Server::start(move |seen, _| {
                let junk = junk.clone();
                async move {
                    if seen.rpc() == Some("tools/call") {
                        json_response(
                            200,
                            &result(&seen.id(), json!({"content": [], "resultType": junk})),
                        )
                    } else {
                        era_2026(&seen)
                    }
                }
            });
            let session = modern_session(&server, owned_connector(&server.url("/mcp"))).await;
            let outcome = session.call_tool("echo", json!({})).await;
            assert!(
                outcome.as_ref().is_err_and(|e| e.is_protocol()),
                "junk resultType accepted: {outcome:?}"
            );
            session.close().await;
        });
    }
}

/// `-32022` on every request and `-32020` on every call: one recovery
/// each, then the server's error, with its code.
#[test]
fn modern_recovery_loops_are_bounded() {
    scenario(async {
        let server = Server::start(|seen, state| async move {
            match (seen.rpc(), state.mode()) {
                (Some("tools/call"), 0) => json_response(
                    400,
                    &rpc_error(&seen.id(), -32022, json!({"supported": ["2026-07-28"]})),
                ),
                (Some("tools/call"), _) => {
                    json_response(400, &rpc_error(&seen.id(), -32020, json!(null)))
                }
                _ => era_2026(&seen),
            }
        });
        let before = Before::take(None);
        let session = modern_session(&server, owned_connector(&server.url("/mcp"))).await;
        let error = session
            .call_tool("echo", json!({}))
            .await
            .expect_err("-32022");
        assert_eq!(error.rpc_code(), Some(-32022), "{error:?}");
        assert_eq!(server.state.rpcs("tools/call"), 2);
        server.state.mode.store(1, Ordering::SeqCst);
        let lists = server.state.rpcs("tools/list");
        let error = session
            .call_tool("echo", json!({}))
            .await
            .expect_err("-32020");
        assert_eq!(error.rpc_code(), Some(-32020), "{error:?}");
        assert_eq!(server.state.rpcs("tools/call"), 4);
        assert_eq!(server.state.rpcs("tools/list"), lists + 1);
        session.close().await;
        before.check(None, &server, "recovery").await;
    });
}

/// Server requests on a 2026 SSE answer are never answered with a POST,
/// and an `Mcp-Session-Id` on a 2026 answer is never sent back (nor
/// DELETEd).
#[test]
fn a_2026_server_cannot_make_us_answer_or_keep_a_session() {
    scenario(async {
        let server = Server::start(|seen, state| async move {
            let mut response = match seen.rpc() {
                Some("tools/call") => {
                    let (tx, response) = state.sse();
                    let _ = tx.try_send(message(&json!({"jsonrpc": "2.0", "id": "srv-1",
                        "method": "roots/list"})));
                    let _ = tx.try_send(message(&json!({"jsonrpc": "2.0", "id": "srv-2",
                        "method": "ping"})));
                    let _ = tx.try_send(message(&result(&seen.id(), json!({"content": []}))));
                    drop(tx);
                    state.end_streams();
                    response
                }
                _ => era_2026(&seen),
            };
            response
                .headers_mut()
                .insert("mcp-session-id", "sneaky".parse().unwrap());
            response
        });
        let before = Before::take(None);
        let session = modern_session(
            &server,
            owned_connector(&server.url("/mcp")).roots(vec![json!({"uri": "file:///secret"})]),
        )
        .await;
        session
            .call_tool("echo", json!({}))
            .await
            .expect("answered");
        session
            .call_tool("echo", json!({}))
            .await
            .expect("answered");
        session.close().await;
        before.check(None, &server, "2026 server requests").await;
        let seen = server.state.seen();
        assert!(
            !seen.iter().any(Seen::is_response),
            "a server request was answered in 2026-07-28"
        );
        assert!(
            !seen.iter().any(|s| s.header("mcp-session-id").is_some()),
            "a 2026 session id was sent back"
        );
        assert!(!seen.iter().any(|s| s.method == Method::DELETE));
    });
}

/// CR, LF and non-ASCII in a tool name or a mirrored argument never split
/// a header: the server sees no header it was not meant to.
#[test]
fn mirrored_values_cannot_inject_headers() {
    scenario(async {
        let server = Server::start(|seen, _| async move { era_2026(&seen) });
        let session = modern_session(&server, owned_connector(&server.url("/mcp"))).await;
        let evil = "eu\r\nx-injected: 1\r\n\r\nGET / HTTP/1.1";
        let _ = session
            .call_tool("echo", json!({"region": evil}))
            .await
            .expect("called");
        let _ = session.call_tool(evil, json!({})).await;
        let _ = session
            .call_tool("naïve\u{0}\u{7f}", json!({"region": "é\t"}))
            .await;
        let _ = session.request("x\r\ny: z", None).await;
        let _ = session.read_resource("file:///a\r\nx-injected: 1").await;
        session.close().await;
        let seen = server.state.seen();
        assert!(!seen.iter().any(|s| s.header("x-injected").is_some()));
        assert!(!seen.iter().any(|s| s.header("y").is_some()));
        let calls: Vec<&Seen> = seen
            .iter()
            .filter(|s| s.rpc() == Some("tools/call"))
            .collect();
        assert!(calls.len() >= 2, "{calls:?}");
        for call in &calls {
            for (name, value) in &call.headers {
                let value = value.to_str().expect("ASCII header values");
                assert!(!value.contains(['\r', '\n', '\0']), "{name}: {value:?}");
            }
        }
        assert!(
            calls[0]
                .header("mcp-param-region")
                .is_some_and(|v| v.starts_with("=?base64?")),
            "{:?}",
            calls[0].headers
        );
    });
}

/// `subscriptions/listen` answered by a stream that ends at once, forever:
/// listening goes on for the session's life (issue 20), at a rate the
/// listeners' backoff bounds (500 ms doubling: at most four tries in two
/// seconds), while the session goes on.
#[test]
fn a_subscription_that_ends_at_once_is_retried_at_a_bounded_rate() {
    scenario(async {
        let server = Server::start(|seen, state| async move {
            match seen.rpc() {
                Some("server/discover") => json_response(
                    200,
                    &result(
                        &seen.id(),
                        json!({"supportedVersions": ["2026-07-28"],
                               "capabilities": {"tools": {"listChanged": true}}}),
                    ),
                ),
                Some("subscriptions/listen") => {
                    let (tx, response) = state.sse();
                    drop(tx);
                    state.end_streams();
                    response
                }
                _ => era_2026(&seen),
            }
        });
        let before = Before::take(None);
        let session = Connector::new(server.url("/mcp"))
            .request_timeout(Duration::from_secs(5))
            .protocol_version(ProtocolVersion::V2026_07_28)
            .connect()
            .await
            .expect("connects");
        assert!(
            eventually(Duration::from_secs(5), || server
                .state
                .rpcs("subscriptions/listen")
                >= 1)
            .await
        );
        // A bounded window, then a count.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let tries = server.state.rpcs("subscriptions/listen");
        assert!((2..=5).contains(&tries), "{tries} tries");
        assert_eq!(session.ledger().tasks, 1, "listening goes on");
        session.call_tool("echo", json!({})).await.expect("works");
        session.close().await;
        before.check(None, &server, "subscription").await;
    });
}

/// A 2024-11-05 server that puts an `Mcp-Session-Id` on its answers (a
/// header its transport does not have) gets it neither echoed nor DELETEd:
/// the HTTP+SSE session is the stream.
#[test]
fn an_http_sse_session_id_header_is_not_taken() {
    scenario(async {
        let server = Server::start(|seen, state| async move {
            let mut response = era_sse(&seen, &state);
            response
                .headers_mut()
                .insert("mcp-session-id", "legacy-sneaky".parse().unwrap());
            response
        });
        let before = Before::take(None);
        let session = owned_connector(&server.url("/sse"))
            .connect()
            .await
            .expect("connects");
        assert_eq!(session.info().transport, TransportKind::HttpSse);
        assert!(session.session_id().is_none());
        session.call_tool("echo", json!({})).await.expect("works");
        session.close().await;
        before.check(None, &server, "sse session id").await;
        let seen = server.state.seen();
        assert!(
            !seen
                .iter()
                .any(|s| s.path.starts_with("/messages") && s.header("mcp-session-id").is_some()),
            "the id was echoed"
        );
        assert!(
            !seen.iter().any(|s| s.method == Method::DELETE),
            "a DELETE for an HTTP+SSE session"
        );
    });
}

/// 2026-07-28: a call dropped by its caller closes its answer stream (the
/// cancellation), and sends no `notifications/cancelled`.
#[test]
fn a_dropped_2026_call_closes_its_stream() {
    scenario(async {
        let server = Server::start(|seen, state| async move {
            if seen.rpc() == Some("tools/call") {
                let (tx, response) = state.sse();
                let _ = tx.try_send(Bytes::from_static(b": working\n\n"));
                return response;
            }
            era_2026(&seen)
        });
        let before = Before::take(None);
        let session = modern_session(&server, owned_connector(&server.url("/mcp"))).await;
        let call = session.call_tool("echo", json!({}));
        let outcome = tokio::time::timeout(Duration::from_millis(300), call).await;
        assert!(outcome.is_err(), "never answered");
        assert!(
            eventually(Duration::from_secs(2), || server
                .state
                .streams
                .load(Ordering::SeqCst)
                == 0)
            .await,
            "the dropped call's stream is still open"
        );
        session.close().await;
        before.check(None, &server, "2026 cancel").await;
        assert_eq!(server.state.rpcs("notifications/cancelled"), 0);
    });
}
/// HTTP+SSE: every answer comes on the one stream. A server request whose
/// handler takes its time (a person answering an elicitation) must not
/// hold up the responses to other requests behind it.
#[test]
fn a_slow_handler_does_not_hold_up_other_answers_on_the_http_sse_stream() {
    scenario(async {
        let server = Server::start(|seen, state| async move {
            if seen.rpc() == Some("tools/call") {
                if let Some(writer) = sse_writer(&seen, &state) {
                    let ask = json!({"jsonrpc": "2.0", "id": "srv-1", "method": "elicitation/create",
                                     "params": {"message": "?"}});
                    let _ = writer.try_send(message(&ask));
                }
                return empty(202);
            }
            era_sse(&seen, &state)
        });
        let handling = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let asked = handling.clone();
        let before = Before::take(None);
        let session = Arc::new(
            owned_connector(&server.url("/sse"))
                .on_elicitation(move |_| {
                    asked.store(true, Ordering::SeqCst);
                    async {
                        tokio::time::sleep(Duration::from_secs(3)).await;
                        Ok(json!({"action": "decline"}))
                    }
                })
                .connect()
                .await
                .expect("connects"),
        );
        let slow = {
            let session = session.clone();
            tokio::spawn(async move { session.call_tool("echo", json!({})).await })
        };
        assert!(
            eventually(Duration::from_secs(2), || server.state.rpcs("tools/call")
                == 1)
            .await
        );
        // The elicitation is in the handler.
        assert!(eventually(Duration::from_secs(2), || handling.load(Ordering::SeqCst)).await);
        let started = Instant::now();
        session
            .request_with(
                "ping",
                None,
                mcp_scoped_http::RequestOptions::default().timeout(Duration::from_secs(1)),
            )
            .await
            .expect("answered while the handler works");
        assert!(started.elapsed() < Duration::from_secs(1));
        slow.abort();
        let _ = slow.await;
        Arc::try_unwrap(session).ok().unwrap().close().await;
        before.check(None, &server, "slow handler").await;
    });
}

/// HTTP+SSE: a flood of server requests is answered with a bounded number
/// of tasks at once (what the backlog cannot hold is dropped), and the
/// session keeps working.
#[test]
fn a_flood_of_http_sse_server_requests_stays_bounded() {
    const FLOOD: usize = 1000;
    scenario(async {
        let server = Server::start(|seen, state| async move {
            if seen.rpc() == Some("tools/call") {
                if let Some(writer) = sse_writer(&seen, &state) {
                    let id = seen.id();
                    tokio::spawn(async move {
                        for i in 0..FLOOD {
                            let ask =
                                json!({"jsonrpc": "2.0", "id": format!("p{i}"), "method": "ping"});
                            let _ = writer.send(message(&ask)).await;
                        }
                        let _ = writer
                            .send(message(&result(&id, json!({"content": []}))))
                            .await;
                    });
                }
                return empty(202);
            }
            era_sse(&seen, &state)
        });
        let before = Before::take(None);
        let session = owned_connector(&server.url("/sse"))
            .request_timeout(Duration::from_secs(60))
            .connect()
            .await
            .expect("connects");
        let call = session.call_tool("echo", json!({}));
        tokio::pin!(call);
        let mut most = 0;
        let outcome = loop {
            tokio::select! {
                outcome = &mut call => break outcome,
                _ = tokio::time::sleep(Duration::from_millis(2)) => {
                    most = most.max(session.ledger().tasks);
                }
            }
        };
        outcome.expect("answered after the flood");
        assert!(most <= 1 + 16 + 1, "{most} tasks at once");
        // 16 answered at once and 256 waiting (issue 26, item 11): past
        // that, pings are dropped unanswered rather than hold up the
        // stream; every one accepted is answered.
        let answered = || {
            server
                .state
                .seen()
                .iter()
                .filter(|s| s.is_response())
                .count()
        };
        let enough = eventually(Duration::from_secs(30), || answered() >= 16 + 256).await;
        assert!(enough, "{} pings answered", answered());
        assert!(answered() <= FLOOD);
        session.close().await;
        before.check(None, &server, "flood").await;
    });
}

/// Detection reached an HTTP+SSE server (its stream named its endpoint),
/// whose `initialize` then failed: the error shown is that failure (a 401
/// with its challenge, a JSON-RPC error), not the 405 that sent detection
/// there.
#[test]
fn a_failure_of_a_found_http_sse_server_is_the_error_shown() {
    for failure in 0..3 {
        scenario(async move {
            let server = Server::start(move |seen, state| async move {
                if seen.rpc() == Some("initialize") && seen.path.starts_with("/messages") {
                    match failure {
                        0 => {
                            let mut r = empty(401);
                            r.headers_mut().insert(
                                "www-authenticate",
                                "Bearer realm=\"mcp\"".parse().unwrap(),
                            );
                            return r;
                        }
                        1 => {
                            if let Some(writer) = sse_writer(&seen, &state) {
                                let _ = writer.try_send(message(&rpc_error(
                                    &seen.id(),
                                    -32602,
                                    json!(null),
                                )));
                            }
                            return empty(202);
                        }
                        _ => {
                            if let Some(writer) = sse_writer(&seen, &state) {
                                let answer = result(
                                    &seen.id(),
                                    json!({"protocolVersion": "1999-01-01", "capabilities": {}}),
                                );
                                let _ = writer.try_send(message(&answer));
                            }
                            return empty(202);
                        }
                    }
                }
                era_sse(&seen, &state)
            });
            let before = Before::take(None);
            let error = owned_connector(&server.url("/sse"))
                .connect()
                .await
                .expect_err("initialize fails");
            match failure {
                0 => {
                    assert_eq!(error.status().map(|s| s.as_u16()), Some(401), "{error:?}");
                    assert!(error.www_authenticate().is_some(), "{error:?}");
                }
                1 => assert_eq!(error.rpc_code(), Some(-32602), "{error:?}"),
                _ => assert!(
                    error.is_protocol() && error.to_string().contains("1999-01-01"),
                    "{error:?}"
                ),
            }
            before.check(None, &server, "found HTTP+SSE").await;
        });
    }
}

/// `subscriptions/listen` flooding list changes: re-listing runs one at a
/// time (a change during a run owes one more), not once per notification.
#[test]
fn a_flood_of_list_changes_on_a_subscription_stays_bounded() {
    const FLOOD: usize = 5000;
    scenario(async {
        let server = Server::start(|seen, state| async move {
            if seen.rpc() == Some("subscriptions/listen") && state.mode() == 0 {
                state.mode.store(1, Ordering::SeqCst);
                let (tx, response) = state.sse();
                tokio::spawn(async move {
                    let changed = message(
                        &json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}),
                    );
                    for _ in 0..FLOOD {
                        if tx.send(changed.clone()).await.is_err() {
                            return;
                        }
                    }
                    // Held open.
                    tx.closed().await;
                });
                return response;
            }
            if seen.rpc() == Some("subscriptions/listen") {
                let (_, response) = state.sse();
                state.end_streams();
                return response;
            }
            era_2026_listening(&seen, &state)
        });
        let before = Before::take(None);
        let session = Connector::new(server.url("/mcp"))
            .request_timeout(Duration::from_secs(5))
            .protocol_version(ProtocolVersion::V2026_07_28)
            .connect()
            .await
            .expect("connects");
        let lists_before = server.state.rpcs("tools/list");
        // Wait until the flood has been read (the lists settle).
        let mut last = usize::MAX;
        let settled = eventually(Duration::from_secs(10), || {
            let now = server.state.rpcs("tools/list");
            let same = now == last && session.ledger().tasks <= 1;
            last = now;
            same
        })
        .await;
        assert!(settled);
        let lists = server.state.rpcs("tools/list") - lists_before;
        // Coalesced: one run at a time for as long as the flood lasts,
        // not one per notification.
        assert!(
            lists <= FLOOD / 10,
            "{lists} re-listings for {FLOOD} changes"
        );
        session.call_tool("echo", json!({})).await.expect("works");
        session.close().await;
        before.check(None, &server, "list_changed flood").await;
    });
}

/// The HTTP+SSE stream answered after a same-origin redirect names its
/// endpoint relative to where it was answered (`/v2/sse` below), not to the
/// URL first asked.
#[test]
fn an_endpoint_named_after_a_redirect_is_resolved_where_the_stream_answered() {
    scenario(async {
        let server = Server::start(|seen, state| async move {
            match (&seen.method, seen.path.as_str()) {
                (&Method::GET, "/sse") => {
                    let mut response = empty(307);
                    response
                        .headers_mut()
                        .insert(http::header::LOCATION, "/v2/sse".parse().unwrap());
                    response
                }
                (&Method::GET, "/v2/sse") => {
                    let sid = state.writers.lock().unwrap().len();
                    let (tx, response) = state.sse();
                    // Relative to /v2/sse: /v2/messages?sid=N.
                    let _ = tx.try_send(event(Some("endpoint"), &format!("messages?sid={sid}")));
                    response
                }
                (&Method::POST, path) if path.starts_with("/v2/messages") => {
                    if has_id(&seen) && seen.rpc().is_some() {
                        if let Some(writer) = sse_writer(&seen, &state) {
                            let _ = writer.try_send(message(&sse_answer(&seen)));
                        }
                    }
                    empty(202)
                }
                _ => empty(404),
            }
        });
        let session = owned_connector(&server.url("/sse"))
            .protocol_version(ProtocolVersion::V2024_11_05)
            .connect()
            .await
            .expect("connects through the redirect");
        session.call_tool("echo", json!({})).await.expect("call");
        session.close().await;
        let posts: Vec<String> = server
            .state
            .seen()
            .into_iter()
            .filter(|s| s.method == Method::POST)
            .map(|s| s.path)
            .collect();
        assert!(!posts.is_empty());
        assert!(
            posts.iter().all(|p| p.starts_with("/v2/messages?sid=")),
            "{posts:?}"
        );
    });
}

/// Issue 20, defect 5: a client remembers 2025-11-25; the server turns
/// modern-only and answers the old `initialize` with "method not found"
/// (`-32601`) in a 200 or a 500, as servers that do not know a method do.
/// That says "wrong era" as clearly as a 4xx: the remembered verdict is
/// forgotten and the era detected again in the same connect.
#[test]
fn a_remembered_era_answered_method_not_found_is_probed_again() {
    for status in [200_u16, 500] {
        scenario(async move {
            let server = Server::start(move |seen, state| async move {
                match state.mode() {
                    0 => era_2025(&seen),
                    _ if seen.rpc() == Some("initialize") => {
                        json_response(status, &rpc_error(&seen.id(), -32601, json!(null)))
                    }
                    _ => era_2026(&seen),
                }
            });
            let caller = Caller::new(&server.url("/"));
            let client = caller.client.clone();
            let connector = owned_connector(&server.url("/mcp")).client(client.clone());
            let session = connector.connect().await.expect("a 2025 server");
            session.close().await;
            server.state.mode.store(1, Ordering::SeqCst);
            for round in 0..2 {
                let session = connector.connect().await.unwrap_or_else(|error| {
                    panic!("HTTP {status}, round {round}: the server turned modern: {error:?}")
                });
                assert_eq!(
                    session.info().protocol_version,
                    ProtocolVersion::V2026_07_28
                );
                assert_eq!(session.info().probed, round == 0, "round {round}");
                session.close().await;
            }
            assert_eq!(
                client.known_revision(&server.url("/mcp")),
                Some(ProtocolVersion::V2026_07_28)
            );
        });
    }
}

/// Issue 20, defect 8: detection finds an HTTP+SSE server whose endpoint
/// event names another origin: the refusal is the error shown, as when
/// pinned, not the 405 that led to the HTTP+SSE attempt.
#[test]
fn an_endpoint_elsewhere_is_the_error_shown_when_detected() {
    scenario(async {
        let elsewhere = Server::start(|_, _| async { empty(202) });
        let target = format!("http://{}/messages", elsewhere.addr);
        let server = Server::start(move |seen, state| {
            let target = target.clone();
            async move {
                if seen.method == Method::GET {
                    let (tx, response) = state.sse();
                    let _ = tx.try_send(event(Some("endpoint"), &target));
                    response
                } else {
                    empty(405)
                }
            }
        });
        let before = Before::take(None);
        let error = owned_connector(&server.url("/sse"))
            .connect()
            .await
            .expect_err("refused");
        assert!(
            error.is_protocol() && error.to_string().contains("another origin"),
            "{error:?}"
        );
        before.check(None, &server, "endpoint elsewhere").await;
        assert!(elsewhere.state.seen().is_empty());
    });
}

/// Issue 20, defect 9: `server/discover` refused with `-32022` naming a
/// 2025 revision, whose `initialize` is answered "not this era" (405):
/// detection goes on to HTTP+SSE after that one `initialize`, not a
/// second, identical one (three exchanges, as documented).
#[test]
fn detection_sends_one_initialize_after_a_2025_revision_is_named() {
    scenario(async {
        let server = Server::start(|seen, state| async move {
            if seen.path == "/sse" && seen.rpc() == Some("server/discover") {
                return json_response(
                    400,
                    &rpc_error(&seen.id(), -32022, json!({"supported": ["2025-06-18"]})),
                );
            }
            era_sse(&seen, &state)
        });
        let session = owned_connector(&server.url("/sse"))
            .connect()
            .await
            .expect("an HTTP+SSE server");
        assert_eq!(session.info().transport, TransportKind::HttpSse);
        session.close().await;
        let initializes: Vec<String> = server
            .state
            .seen()
            .iter()
            .filter(|s| s.rpc() == Some("initialize") && s.path == "/sse")
            .map(|s| s.body.as_ref().unwrap()["params"]["protocolVersion"].to_string())
            .collect();
        assert_eq!(
            initializes,
            ["\"2025-06-18\""],
            "initialize on the endpoint"
        );
    });
}
