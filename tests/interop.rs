//! Interop with MCP servers written by others, on loopback: the official
//! Python SDK (stateful, stateless, JSON-response, a paginated `tools/list`),
//! the TypeScript `server-everything`, and a server on the official Rust SDK
//! (`rmcp`). Their sources are in `tests/peers/`; `.ci/install-peers`
//! installs them under `.peers/`. Without them these tests are ignored:
//!
//! ```text
//! .ci/install-peers
//! cargo test --all-features --test interop -- --ignored --test-threads 1
//! ```
//!
//! Each test starts its server on 127.0.0.1 on a free port, waits for it
//! (bounded), and kills it when the test ends, however it ends. Every peer
//! prints `SEEN <METHOD> <path> <status>` per HTTP exchange (a wrapper in
//! the Python script, a preload for node, a middleware in the rmcp crate),
//! which is how a test knows that the server saw our DELETE.

use std::io::{BufRead, BufReader, Read};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mcp_scoped_http::jsonrpc::Message;
use mcp_scoped_http::{Connector, Session, SessionRelease};
use serde_json::{Value, json};

/// How long a peer gets to start listening (node on 2 busy cores is slow).
const STARTUP: Duration = Duration::from_secs(60);
/// How long one test's exchanges with its peer may take, in all.
const EXCHANGES: Duration = Duration::from_secs(60);

fn peers_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".peers")
}

fn sources_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/peers")
}

fn installed(path: PathBuf) -> PathBuf {
    assert!(
        path.exists(),
        "{} is missing: run .ci/install-peers first",
        path.display()
    );
    path
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port on 127.0.0.1")
        .port()
}

/// A peer server process, killed (and reaped) on drop.
struct Peer {
    name: &'static str,
    child: Child,
    port: u16,
    stdout: Arc<Mutex<Vec<String>>>,
    stderr: Arc<Mutex<String>>,
}

impl Peer {
    fn start(name: &'static str, mut command: Command, port: u16) -> Peer {
        command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = command
            .spawn()
            .unwrap_or_else(|e| panic!("{name} did not start: {e}"));
        let stdout = Arc::new(Mutex::new(Vec::new()));
        let stderr = Arc::new(Mutex::new(String::new()));
        let out = child.stdout.take().expect("piped stdout");
        let lines = stdout.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                lines.lock().unwrap().push(line);
            }
        });
        let mut err = child.stderr.take().expect("piped stderr");
        let text = stderr.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n @ 1..) = err.read(&mut buf) {
                text.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        // The guard exists from here on: a panic below kills the process.
        let mut peer = Peer {
            name,
            child,
            port,
            stdout,
            stderr,
        };
        peer.wait_listening();
        peer
    }

    fn wait_listening(&mut self) {
        let addr = SocketAddr::from(([127, 0, 0, 1], self.port));
        let deadline = Instant::now() + STARTUP;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "{} exited before listening ({status}):\n{}",
                    self.name,
                    self.stderr.lock().unwrap()
                );
            }
            if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{} did not listen on {addr} within {STARTUP:?}:\n{}",
                self.name,
                self.stderr.lock().unwrap()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }

    /// The HTTP exchanges the server reported: (method, status).
    fn seen(&self) -> Vec<(String, u16)> {
        self.stdout
            .lock()
            .unwrap()
            .iter()
            .filter_map(|line| {
                let mut words = line.strip_prefix("SEEN ")?.split_whitespace();
                let method = words.next()?.to_owned();
                let _path = words.next()?;
                Some((method, words.next()?.parse().ok()?))
            })
            .collect()
    }

    fn deletes(&self) -> Vec<u16> {
        self.seen()
            .into_iter()
            .filter(|(method, _)| method == "DELETE")
            .map(|(_, status)| status)
            .collect()
    }

    /// The DELETE statuses, once `n` were seen or after 5 s: the server
    /// prints each line before it answers, but our reader thread may lag.
    async fn deletes_seen(&self, n: usize) -> Vec<u16> {
        let deadline = Instant::now() + Duration::from_secs(5);
        while self.deletes().len() < n && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.deletes()
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn python(mode: &str) -> Peer {
    let port = free_port();
    let mut command = Command::new(installed(peers_dir().join("venv/bin/python")));
    command.arg(sources_dir().join("python_server.py")).args([
        "--port",
        &port.to_string(),
        "--mode",
        mode,
    ]);
    Peer::start("the Python SDK server", command, port)
}

fn server_everything() -> Peer {
    let port = free_port();
    let node_modules = peers_dir().join("node/node_modules");
    let main =
        installed(node_modules.join("@modelcontextprotocol/server-everything/dist/index.js"));
    let mut command = Command::new("node");
    command
        .arg("--require")
        .arg(sources_dir().join("loopback.cjs"))
        .arg(main)
        .arg("streamableHttp")
        .env("PORT", port.to_string());
    Peer::start("server-everything", command, port)
}

fn rmcp(args: &[&str]) -> Peer {
    let port = free_port();
    let mut command = Command::new(installed(peers_dir().join("rmcp-target/debug/rmcp-peer")));
    command.args(["--port", &port.to_string()]).args(args);
    Peer::start("the rmcp server", command, port)
}

/// What one peer should show.
struct Expect {
    /// Tools that discovery must find.
    tools: &'static [&'static str],
    /// Whether those are all of them.
    exact: bool,
    /// A tool, its arguments, and a text its first content block must hold.
    call: (&'static str, Value, &'static str),
    /// A tool that streams progress when given a token, and its arguments.
    progress: (&'static str, Value),
    /// Whether the server delivers that progress (the Python SDK's
    /// JSON-response mode drops every notification tied to a request).
    delivers_progress: bool,
    /// Whether the server issues a session id (and so is owed a DELETE).
    stateful: bool,
}

fn text_of(result: &Value) -> &str {
    result["content"][0]["text"].as_str().unwrap_or_default()
}

fn tool_names(session: &Session) -> Vec<String> {
    let mut names: Vec<String> = session.catalog().tool_names().map(str::to_owned).collect();
    names.sort();
    names
}

/// Walks `tools/list` page by page, independently of discovery.
async fn walk_tools(session: &Session) -> (Vec<String>, usize) {
    let mut names = Vec::new();
    let mut cursor = None;
    let mut pages = 0;
    loop {
        let page = session.list_tools(cursor.as_deref()).await.unwrap();
        pages += 1;
        names.extend(
            page.items
                .iter()
                .map(|t| t["name"].as_str().expect("a tool name").to_owned()),
        );
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => break,
        }
        assert!(pages < 50, "tools/list never ends");
    }
    names.sort();
    (names, pages)
}

/// Connect (discovery), call a tool, call one that streams progress, close;
/// returns the number of `tools/list` pages the server served.
async fn exercise(peer: &Peer, expect: Expect) -> usize {
    let run = async {
        let session = Connector::new(peer.url())
            .connect()
            .await
            .unwrap_or_else(|e| panic!("connect to {}: {e}", peer.name));
        let mut notifications = session.notifications().expect("the receiver, once");
        assert_eq!(session.info().session_id_issued, expect.stateful);
        assert_eq!(session.session_id().is_some(), expect.stateful);

        // Discovery found every tool, on every page.
        let (walked, pages) = walk_tools(&session).await;
        let found = tool_names(&session);
        assert_eq!(found, walked, "discovery against a page-by-page walk");
        for tool in expect.tools {
            assert!(found.iter().any(|t| t == tool), "{tool} not in {found:?}");
        }
        if expect.exact {
            assert_eq!(found.len(), expect.tools.len(), "{found:?}");
        }

        // A call.
        let (tool, arguments, text) = expect.call;
        let result = session.call_tool(tool, arguments).await.unwrap();
        assert_ne!(result["isError"], true, "{result}");
        assert!(text_of(&result).contains(text), "{result}");

        // A call that streams progress.
        let (tool, arguments) = expect.progress;
        let token = "interop-progress";
        let result = session
            .request(
                "tools/call",
                Some(json!({
                    "name": tool,
                    "arguments": arguments,
                    "_meta": { "progressToken": token },
                })),
            )
            .await
            .unwrap();
        assert_ne!(result["isError"], true, "{result}");
        let mut progress = Vec::new();
        let wait = if expect.delivers_progress { 5000 } else { 300 };
        let deadline = tokio::time::Instant::now() + Duration::from_millis(wait);
        while progress.len() < 2 || !expect.delivers_progress {
            match tokio::time::timeout_at(deadline, notifications.recv()).await {
                Ok(Some(Message::Notification(n))) if n.method == "notifications/progress" => {
                    let params = n.params.unwrap_or_default();
                    assert_eq!(params["progressToken"], token, "{params}");
                    progress.push(params["progress"].as_f64().expect("a progress number"));
                }
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => break,
            }
        }
        if expect.delivers_progress {
            assert!(
                progress.len() >= 2,
                "{} sent {} progress notifications",
                peer.name,
                progress.len()
            );
            assert!(progress.windows(2).all(|w| w[0] < w[1]), "{progress:?}");
        } else {
            assert!(
                progress.is_empty(),
                "{progress:?}: update `delivers_progress`"
            );
        }

        // Close: the DELETE, when a session is owed one.
        let released = session.close().await;
        assert!(released.owned_client_released, "{released:?}");
        assert!(!released.already_closed);
        if expect.stateful {
            let SessionRelease::Deleted(status) = released.session else {
                panic!("{}: {released:?}", peer.name);
            };
            assert!(status.is_success(), "{}: DELETE got {status}", peer.name);
            assert_eq!(
                peer.deletes_seen(1).await,
                [status.as_u16()],
                "{} saw {:?}",
                peer.name,
                peer.seen()
            );
        } else {
            assert!(
                matches!(released.session, SessionRelease::NoSessionId),
                "{released:?}"
            );
            assert!(peer.deletes().is_empty(), "{:?}", peer.seen());
        }
        mcp_scoped_http::shutdown().await;
        // Shown with --nocapture: what the server saw, for the record.
        println!("{} saw: {:?}", peer.name, peer.seen());
        pages
    };
    tokio::time::timeout(EXCHANGES, run)
        .await
        .unwrap_or_else(|_| panic!("{}: no end within {EXCHANGES:?}", peer.name))
}

/// Ends a server session behind the crate's back: a DELETE of our own,
/// on a plain socket. Returns the status.
fn delete_behind_our_back(peer: &Peer, session: &Session) -> u16 {
    use std::io::Write;
    let id = session.session_id().expect("a session id");
    let mut stream = TcpStream::connect(("127.0.0.1", peer.port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(
        stream,
        "DELETE /mcp HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nMcp-Session-Id: {}\r\n\
         Mcp-Protocol-Version: {}\r\nConnection: close\r\n\r\n",
        peer.port,
        id.expose(),
        session.protocol_version().as_str()
    )
    .unwrap();
    let mut head = String::new();
    BufReader::new(stream).read_line(&mut head).unwrap();
    head.split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("a status line: {head:?}"))
}

/// The server forgets our session: the next call meets its "unknown
/// session" answer. Returns that call's outcome and the session.
async fn forgotten(peer: &Peer) -> (mcp_scoped_http::Result<Value>, Session, String) {
    let session = Connector::new(peer.url()).connect().await.unwrap();
    let before = session.session_id().unwrap().expose().to_owned();
    let status = delete_behind_our_back(peer, &session);
    assert!((200..300).contains(&status), "{status}");
    let outcome = session.call_tool("add", json!({"a": 1, "b": 1})).await;
    (outcome, session, before)
}

const OURS: &[&str] = &["add", "count_down", "echo"];

fn ours(stateful: bool) -> Expect {
    Expect {
        tools: OURS,
        exact: true,
        call: ("add", json!({"a": 2, "b": 3}), "5"),
        progress: ("count_down", json!({"steps": 3})),
        delivers_progress: true,
        stateful,
    }
}

#[tokio::test]
#[ignore = "needs the peers: run .ci/install-peers first"]
async fn python_sdk_stateful() {
    let peer = python("stateful");
    assert_eq!(exercise(&peer, ours(true)).await, 1);
}

#[tokio::test]
#[ignore = "needs the peers: run .ci/install-peers first"]
async fn python_sdk_stateless() {
    let peer = python("stateless");
    exercise(&peer, ours(false)).await;
    // Every exchange stood on its own: nothing was refused for a lack of a
    // session (a GET stream, if tried, may be refused: that is allowed).
    for (method, status) in peer.seen() {
        assert!(method == "GET" || status < 400, "{method} {status}");
    }
}

#[tokio::test]
#[ignore = "needs the peers: run .ci/install-peers first"]
async fn python_sdk_json_response() {
    let peer = python("json");
    // Its answers are application/json, and it drops the notifications tied
    // to a request instead of streaming them (mcp 1.30,
    // `StreamableHTTPServerTransport` with `is_json_response_enabled`): the
    // call still completes, with no progress.
    exercise(
        &peer,
        Expect {
            delivers_progress: false,
            ..ours(true)
        },
    )
    .await;
    let answers: Vec<String> = peer
        .stdout
        .lock()
        .unwrap()
        .iter()
        .filter(|line| line.starts_with("SEEN POST /mcp 200 "))
        .cloned()
        .collect();
    assert!(
        !answers.is_empty() && answers.iter().all(|l| l.ends_with(" application/json")),
        "{answers:?}"
    );
}

#[tokio::test]
#[ignore = "needs the peers: run .ci/install-peers first"]
async fn python_sdk_paginated_tools_list() {
    let peer = python("paginated");
    let pages = exercise(
        &peer,
        Expect {
            tools: &[
                "add",
                "count_down",
                "echo",
                "filler_0",
                "filler_1",
                "filler_2",
                "filler_3",
                "filler_4",
            ],
            ..ours(true)
        },
    )
    .await;
    assert_eq!(pages, 3, "8 tools, 3 a page");
}

#[tokio::test]
#[ignore = "needs the peers: run .ci/install-peers first"]
async fn typescript_server_everything() {
    let peer = server_everything();
    exercise(
        &peer,
        Expect {
            // The tools it registers whatever the client declares.
            tools: &[
                "echo",
                "get-annotated-message",
                "get-env",
                "get-resource-links",
                "get-resource-reference",
                "get-structured-content",
                "get-sum",
                "get-tiny-image",
                "gzip-file-as-resource",
                "toggle-simulated-logging",
                "toggle-subscriber-updates",
                "trigger-long-running-operation",
            ],
            exact: false,
            call: ("get-sum", json!({"a": 2, "b": 3}), "5"),
            progress: (
                "trigger-long-running-operation",
                json!({"duration": 0.3, "steps": 3}),
            ),
            delivers_progress: true,
            stateful: true,
        },
    )
    .await;
}

#[tokio::test]
#[ignore = "needs the peers: run .ci/install-peers first"]
async fn rmcp_stateful() {
    let peer = rmcp(&[]);
    exercise(&peer, ours(true)).await;
}

#[tokio::test]
#[ignore = "needs the peers: run .ci/install-peers first"]
async fn rmcp_stateless_json_response() {
    let peer = rmcp(&["--stateless", "--json"]);
    exercise(&peer, ours(false)).await;
}

/// A server that forgot our session answers 404 (Python, rmcp): the crate
/// re-initializes once, re-discovers, retries the call, and DELETEs the new
/// session at close.
#[tokio::test]
#[ignore = "needs the peers: run .ci/install-peers first"]
async fn forgotten_session_is_reinitialized_on_404() {
    for peer in [python("stateful"), rmcp(&[])] {
        let (outcome, session, before) = forgotten(&peer).await;
        assert_eq!(text_of(&outcome.unwrap()), "2", "{}", peer.name);
        let after = session.session_id().unwrap().expose().to_owned();
        assert_ne!(after, before, "{}: a new session", peer.name);
        assert!(
            peer.seen().contains(&("POST".into(), 404)),
            "{:?}",
            peer.seen()
        );
        assert_eq!(tool_names(&session), OURS, "{}: re-discovered", peer.name);
        let released = session.close().await;
        assert!(
            matches!(released.session, SessionRelease::Deleted(s) if s.is_success()),
            "{}: {released:?}",
            peer.name
        );
        // Ours (behind its back) and the crate's, of the new session.
        assert_eq!(peer.deletes_seen(2).await.len(), 2, "{:?}", peer.seen());
        mcp_scoped_http::shutdown().await;
    }
}

/// server-everything answers an unknown session with 400 (JSON-RPC -32000),
/// not 404. The crate keys expiry off 404 only, so this is an error with the
/// status, not a re-initialize; the DELETE at close gets 400 too and is
/// reported as `DeleteFailed`, local cleanup done.
#[tokio::test]
#[ignore = "needs the peers: run .ci/install-peers first"]
async fn forgotten_session_on_server_everything_is_a_400_error() {
    let peer = server_everything();
    let session = Connector::new(peer.url()).connect().await.unwrap();
    let before = session.session_id().unwrap().expose().to_owned();
    let status = delete_behind_our_back(&peer, &session);
    assert_eq!(status, 200);
    let error = session
        .call_tool("get-sum", json!({"a": 1, "b": 1}))
        .await
        .unwrap_err();
    assert_eq!(error.status().map(|s| s.as_u16()), Some(400), "{error}");
    assert!(!error.is_session_expired(), "{error}");
    assert_eq!(session.session_id().unwrap().expose(), before);
    let released = session.close().await;
    let SessionRelease::DeleteFailed(error) = &released.session else {
        panic!("{released:?}");
    };
    assert_eq!(error.status().map(|s| s.as_u16()), Some(400), "{error}");
    assert!(released.owned_client_released);
    assert_eq!(peer.deletes_seen(2).await, [200, 400], "{:?}", peer.seen());
    mcp_scoped_http::shutdown().await;
}

/// An rmcp client (the official Rust SDK) over this crate's transport
/// (`adapters::rmcp::ScopedTransport`), against the rmcp server: rmcp's own
/// `initialize`, `list_all_tools` and a call, then `cancel`, which DELETEs
/// the session (stateful) or sends nothing (stateless).
#[cfg(feature = "rmcp")]
#[tokio::test]
#[ignore = "needs the peers: run .ci/install-peers first"]
async fn rmcp_client_over_our_transport() {
    use mcp_scoped_http::adapters::rmcp::ScopedTransport;
    use rmcp::ServiceExt;
    use rmcp::model::CallToolRequestParams;

    for (args, stateful) in [(&[][..], true), (&["--stateless", "--json"][..], false)] {
        let peer = rmcp(args);
        let run = async {
            let mut transport = ScopedTransport::new(peer.url()).unwrap();
            let report = transport.release_report();
            let client = ().serve(transport).await.expect("rmcp's initialize");
            let mut tools: Vec<String> = client
                .peer()
                .list_all_tools()
                .await
                .unwrap()
                .into_iter()
                .map(|t| t.name.into_owned())
                .collect();
            tools.sort();
            assert_eq!(tools, OURS);
            let result = client
                .peer()
                .call_tool(
                    CallToolRequestParams::new("add")
                        .with_arguments(json!({"a": 2, "b": 3}).as_object().unwrap().clone()),
                )
                .await
                .unwrap();
            let result = serde_json::to_value(&result).unwrap();
            assert_eq!(text_of(&result), "5", "{result}");

            client.cancel().await.unwrap();
            let released = report.released().await.expect("rmcp closed the transport");
            assert!(released.owned_client_released, "{released:?}");
            if stateful {
                let SessionRelease::Deleted(status) = released.session else {
                    panic!("{released:?}");
                };
                assert!(status.is_success(), "{status}");
                assert_eq!(
                    peer.deletes_seen(1).await,
                    [status.as_u16()],
                    "{:?}",
                    peer.seen()
                );
            } else {
                assert!(
                    matches!(released.session, SessionRelease::NoSessionId),
                    "{released:?}"
                );
                assert!(peer.deletes().is_empty(), "{:?}", peer.seen());
            }
            mcp_scoped_http::shutdown().await;
            println!("{} saw: {:?}", peer.name, peer.seen());
        };
        tokio::time::timeout(EXCHANGES, run)
            .await
            .unwrap_or_else(|_| panic!("{}: no end within {EXCHANGES:?}", peer.name));
    }
}

/// The `serve` future of an rmcp client over our transport is dropped after
/// 0.5 ms, then 1 ms, 2 ms, ... until it completes: cut at whatever step
/// rmcp's handshake is in. Every session the rmcp server created (each
/// `initialize` it answered 200) is DELETEd, by the reaper for the cut ones
/// (`shutdown` waits for them) and by `cancel` for the last.
/// (rmcp's own Streamable HTTP client DELETEs from a detached worker task,
/// which nothing waits for.)
#[cfg(feature = "rmcp")]
#[tokio::test]
#[ignore = "needs the peers: run .ci/install-peers first"]
async fn rmcp_client_cut_during_initialize_deletes_every_session() {
    use mcp_scoped_http::adapters::rmcp::ScopedTransport;
    use rmcp::ServiceExt;

    let peer = rmcp(&[]);
    let mut limit = Duration::from_micros(500);
    let mut cut = 0;
    loop {
        let transport = ScopedTransport::new(peer.url()).unwrap();
        match tokio::time::timeout(limit, ().serve(transport)).await {
            Err(_) => cut += 1,
            Ok(client) => {
                client.expect("rmcp's initialize").cancel().await.unwrap();
                break;
            }
        }
        limit *= 2;
        assert!(limit < EXCHANGES, "serve never completed");
    }
    tokio::time::timeout(EXCHANGES, mcp_scoped_http::shutdown())
        .await
        .expect("the reaper finishes");
    // `initialize` is the only POST the server answers 200 (the initialized
    // notification gets 202).
    let created = peer
        .seen()
        .iter()
        .filter(|(method, status)| method == "POST" && *status == 200)
        .count();
    assert!(cut >= 1 && created >= 2, "cut {cut}, {:?}", peer.seen());
    let deletes = peer.deletes_seen(created).await;
    assert_eq!(deletes.len(), created, "{:?}", peer.seen());
    assert!(
        deletes.iter().all(|s| (200..300).contains(s)),
        "{deletes:?}"
    );
    println!("cut {cut} times; {} saw: {:?}", peer.name, peer.seen());
}
