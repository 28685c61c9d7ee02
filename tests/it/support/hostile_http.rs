#![allow(dead_code)]
//! A tiny scriptable HTTP/1.1 server for hostile-server tests: every request
//! is recorded and handed to the test's own handler, which answers with a
//! whole body or an open stream (an SSE stream the test writes to). It runs
//! on a thread and runtime of its own, so the test runtime's task count is
//! the client's alone, and it counts the streams and connections still open
//! (a client that lets go of a stream shows up as the count going down).

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response, StatusCode};
use http_body::{Body, Frame};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};

/// One request as the server saw it.
#[derive(Clone, Debug)]
pub struct Seen {
    pub method: Method,
    /// Path and query.
    pub path: String,
    pub headers: HeaderMap,
    /// The body, when it is JSON.
    pub body: Option<Value>,
}

impl Seen {
    /// The JSON-RPC method, if the body is a request or notification.
    pub fn rpc(&self) -> Option<&str> {
        self.body.as_ref()?.get("method")?.as_str()
    }

    /// The JSON-RPC id (null when none).
    pub fn id(&self) -> Value {
        self.body
            .as_ref()
            .and_then(|b| b.get("id"))
            .cloned()
            .unwrap_or(Value::Null)
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// Whether the body is a JSON-RPC response (the client answering).
    pub fn is_response(&self) -> bool {
        self.body.as_ref().is_some_and(|b| {
            b.get("method").is_none() && (b.get("result").is_some() || b.get("error").is_some())
        })
    }
}

/// What the server holds, shared with the test.
#[derive(Default)]
pub struct State {
    pub seen: Mutex<Vec<Seen>>,
    /// Streamed bodies not yet dropped by hyper (the client has them open).
    pub streams: AtomicUsize,
    /// TCP connections open.
    pub conns: AtomicUsize,
    /// The writers of the streams the handler opened, newest last.
    pub writers: Mutex<Vec<mpsc::Sender<Bytes>>>,
    /// A mode switch for handlers whose behaviour changes mid-test.
    pub mode: AtomicUsize,
    /// A counter for handlers.
    pub count: AtomicUsize,
}

impl State {
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    pub fn rpcs(&self, method: &str) -> usize {
        self.seen()
            .iter()
            .filter(|s| s.rpc() == Some(method))
            .count()
    }

    pub fn mode(&self) -> usize {
        self.mode.load(Ordering::SeqCst)
    }

    /// Opens a stream answer (`text/event-stream`); the test writes events
    /// through the sender, which is also kept in `writers`.
    pub fn sse(self: &Arc<Self>) -> (mpsc::Sender<Bytes>, Response<Out>) {
        let (tx, rx) = mpsc::channel(1024);
        self.writers.lock().unwrap().push(tx.clone());
        self.streams.fetch_add(1, Ordering::SeqCst);
        let body = Out::Stream(rx, StreamGuard(self.clone()));
        let response = Response::builder()
            .header("content-type", "text/event-stream")
            .header("cache-control", "no-cache")
            .body(body)
            .unwrap();
        (tx, response)
    }

    /// Writes to every open stream.
    pub fn broadcast(&self, bytes: Bytes) {
        for w in self.writers.lock().unwrap().iter() {
            let _ = w.try_send(bytes.clone());
        }
    }

    /// Ends every stream the server opened (the server side closes them).
    pub fn end_streams(&self) {
        self.writers.lock().unwrap().clear();
    }
}

pub struct StreamGuard(Arc<State>);

impl Drop for StreamGuard {
    fn drop(&mut self) {
        self.0.streams.fetch_sub(1, Ordering::SeqCst);
    }
}

struct ConnGuard(Arc<State>);

impl Drop for ConnGuard {
    fn drop(&mut self) {
        self.0.conns.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A response body: whole, or a stream the test writes to.
pub enum Out {
    Whole(Option<Bytes>),
    Stream(mpsc::Receiver<Bytes>, StreamGuard),
}

impl Body for Out {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match &mut *self {
            Out::Whole(bytes) => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
            Out::Stream(rx, _) => rx.poll_recv(cx).map(|o| o.map(|b| Ok(Frame::data(b)))),
        }
    }
}

type Handler = Arc<
    dyn Fn(Seen, Arc<State>) -> Pin<Box<dyn Future<Output = Response<Out>> + Send>> + Send + Sync,
>;

pub struct Server {
    pub addr: SocketAddr,
    pub state: Arc<State>,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Server {
    pub fn start<F, Fut>(handler: F) -> Server
    where
        F: Fn(Seen, Arc<State>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Response<Out>> + Send + 'static,
    {
        let handler: Handler = Arc::new(move |seen, state| Box::pin(handler(seen, state)));
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(State::default());
        let (stop, mut stopped) = oneshot::channel::<()>();
        let shared = state.clone();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                loop {
                    tokio::select! {
                        _ = &mut stopped => break,
                        accepted = listener.accept() => {
                            let Ok((tcp, _)) = accepted else { continue };
                            shared.conns.fetch_add(1, Ordering::SeqCst);
                            let guard = ConnGuard(shared.clone());
                            let state = shared.clone();
                            let handler = handler.clone();
                            tokio::spawn(async move {
                                let _guard = guard;
                                let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                                    let state = state.clone();
                                    let handler = handler.clone();
                                    async move {
                                        let (parts, body) = req.into_parts();
                                        let bytes = body.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
                                        let seen = Seen {
                                            method: parts.method,
                                            path: parts.uri.path_and_query().map(|p| p.to_string()).unwrap_or_default(),
                                            headers: parts.headers,
                                            body: serde_json::from_slice(&bytes).ok(),
                                        };
                                        state.seen.lock().unwrap().push(seen.clone());
                                        Ok::<_, Infallible>(handler(seen, state).await)
                                    }
                                });
                                let _ = hyper::server::conn::http1::Builder::new()
                                    .serve_connection(TokioIo::new(tcp), service)
                                    .await;
                            });
                        }
                    }
                }
            });
        });
        Server {
            addr,
            state,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

pub fn whole(status: u16, content_type: Option<&str>, body: impl Into<Bytes>) -> Response<Out> {
    let mut builder = Response::builder().status(StatusCode::from_u16(status).unwrap());
    if let Some(ct) = content_type {
        builder = builder.header("content-type", ct);
    }
    builder.body(Out::Whole(Some(body.into()))).unwrap()
}

pub fn empty(status: u16) -> Response<Out> {
    Response::builder()
        .status(StatusCode::from_u16(status).unwrap())
        .body(Out::Whole(None))
        .unwrap()
}

pub fn json_response(status: u16, value: &Value) -> Response<Out> {
    whole(status, Some("application/json"), value.to_string())
}

pub fn result(id: &Value, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

pub fn rpc_error(id: &Value, code: i64, data: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": "refused", "data": data}})
}

/// One SSE event.
pub fn event(kind: Option<&str>, data: &str) -> Bytes {
    let mut text = String::new();
    if let Some(kind) = kind {
        text.push_str(&format!("event: {kind}\n"));
    }
    for line in data.split('\n') {
        text.push_str(&format!("data: {line}\n"));
    }
    text.push('\n');
    Bytes::from(text)
}

pub fn message(value: &Value) -> Bytes {
    event(Some("message"), &value.to_string())
}

/// Polls `condition` until it holds or `within` passes.
pub async fn eventually(within: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if condition() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
