//! The owned client through a real HTTP proxy: proxy.py (PyPI `proxy.py`),
//! which `.ci/install-peers` installs under `.peers/proxy`. Without it
//! these tests are ignored:
//!
//! ```text
//! .ci/install-peers
//! cargo test --all-features --test it -- --ignored proxy::
//! ```
//!
//! `MCP_SCOPED_HTTP_PROXY_PY` names another proxy.py executable. Each test
//! starts its own proxy on 127.0.0.1 on a free port (`--port 0`, the port
//! read from `--port-file`), reads its access log to know what went through
//! it, and kills it when the test ends, however it ends. The targets are
//! the test kit's servers, plain and TLS (a certificate made by rcgen).
//!
//! Most tests name the proxy on the builder; the environment is read in a
//! child process (this binary again, with the variables set), so no test
//! changes this process's environment under another.

#![cfg(all(feature = "proxy", feature = "rustls"))]

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use crate::support::processes::{Group, SpawnGroup};
use crate::support::*;
use mcp_scoped_http::wire::StreamableHttp;
use mcp_scoped_http_testkit::TlsIdentity;

/// How long proxy.py gets to start listening (Python on 2 busy cores).
const STARTUP: Duration = Duration::from_secs(30);
/// How long a child process of this binary may run.
const CHILD_RUN: Duration = Duration::from_secs(60);
/// How long the proxy takes to log an exchange once its connection closed.
const LOGGED: Duration = Duration::from_secs(10);

const USER: &str = "agent";
const PASSWORD: &str = "PROXY-PASSWORD-SECRET";

fn proxy_py() -> PathBuf {
    let path = std::env::var_os("MCP_SCOPED_HTTP_PROXY_PY")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".peers/proxy/bin/proxy")
        });
    assert!(
        path.exists(),
        "{} is missing: run .ci/install-peers first",
        path.display()
    );
    path
}

/// A proxy.py process on 127.0.0.1, in a process group of its own, killed
/// whole (and reaped) on drop.
struct Proxy {
    child: Group,
    port: u16,
    dir: PathBuf,
}

impl Proxy {
    /// A proxy that asks for no credentials.
    fn open() -> Proxy {
        Proxy::start(None)
    }

    /// A proxy that asks for `USER:PASSWORD`.
    fn with_credentials() -> Proxy {
        Proxy::start(Some(&format!("{USER}:{PASSWORD}")))
    }

    fn start(basic_auth: Option<&str>) -> Proxy {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "mcp-scoped-http-proxy-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let mut command = Command::new(proxy_py());
        command
            .args(["--hostname", "127.0.0.1", "--port", "0"])
            .arg("--port-file")
            .arg(dir.join("port"))
            .arg("--log-file")
            .arg(dir.join("log"))
            .args(["--num-workers", "1", "--num-acceptors", "1"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if let Some(credentials) = basic_auth {
            command.args(["--basic-auth", credentials]);
        }
        // A group of its own: proxy.py forks its acceptor and worker, which
        // outlived a kill of the parent alone (reparented to init); the
        // whole group is killed on drop.
        let child = command.spawn_group().expect("proxy.py starts");
        // The guard exists from here on: a panic below kills the process.
        let mut proxy = Proxy {
            child,
            port: 0,
            dir,
        };
        let deadline = Instant::now() + STARTUP;
        loop {
            if let Ok(Some(status)) = proxy.child.child().try_wait() {
                panic!(
                    "proxy.py exited before listening ({status}):\n{}",
                    proxy.log()
                );
            }
            let port = std::fs::read_to_string(proxy.dir.join("port")).unwrap_or_default();
            if let Ok(port) = port.trim().parse::<u16>() {
                if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                    proxy.port = port;
                    return proxy;
                }
            }
            assert!(
                Instant::now() < deadline,
                "proxy.py did not listen within {STARTUP:?}:\n{}",
                proxy.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn url_as(&self, user: &str, password: &str) -> String {
        format!("http://{user}:{password}@127.0.0.1:{}", self.port)
    }

    /// What proxy.py logged so far (one access line per exchange, when its
    /// connection closes).
    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("log")).unwrap_or_default()
    }

    /// Whether the access log names `line` within a bounded while.
    async fn logged(&self, line: &str) -> bool {
        eventually(LOGGED, || self.log().contains(line)).await
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        // The whole group, before its files go.
        self.child.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn tls_server() -> (TestServer, Vec<u8>) {
    let generated =
        rcgen::generate_simple_self_signed(vec!["localhost".into(), "127.0.0.1".into()]).unwrap();
    let cert_der = generated.cert.der().to_vec();
    let identity = TlsIdentity {
        cert_chain_der: vec![cert_der.clone()],
        key_der: generated.signing_key.serialize_der(),
    };
    (
        TestServer::start(ServerConfig::default().with_tls(identity)),
        cert_der,
    )
}

/// `host:port` of a test server, as a proxy's log names it.
fn authority(server: &TestServer) -> String {
    let url: http::Uri = server.url().parse().unwrap();
    url.authority().unwrap().to_string()
}

/// A client through `proxy_url` that trusts `root` (if any) alone.
fn client(proxy_url: &str, root: Option<Vec<u8>>) -> HttpClient {
    let mut builder = HttpClient::builder().proxy(proxy_url).built_in_roots(false);
    if let Some(root) = root {
        builder = builder.add_root_certificate(root);
    }
    builder.build().unwrap()
}

/// A whole exchange (handshake, a list, the DELETE), then the client is
/// dropped, which closes its connections (and so has the proxy log them).
async fn exchange(client: HttpClient, server: &TestServer) {
    let wire = wire(client, server);
    handshake(&wire).await;
    let listed = wire.request(request(2, "tools/list", None)).await.unwrap();
    assert!(listed.result["tools"].is_array());
    wire.delete_session().await.unwrap();
}

/// The target saw requests, and none carried the proxy's credentials.
fn assert_target_saw_no_proxy_credentials(server: &TestServer) {
    let requests = server.requests();
    assert!(!requests.is_empty(), "the target saw nothing");
    for recorded in requests {
        assert!(
            recorded.headers.get("proxy-authorization").is_none(),
            "the target saw Proxy-Authorization: {:?}",
            recorded.method
        );
        for (name, value) in &recorded.headers {
            let value = String::from_utf8_lossy(value.as_bytes());
            // The credentials in Basic form start with "agent:" in base64.
            assert!(!value.contains("YWdlbnQ6"), "{name}: the credentials");
            assert!(!value.contains(PASSWORD), "{name}: the password");
        }
    }
}

/// What a failure looks like, checked to name the proxy and not the password.
fn assert_names_the_proxy(error: &mcp_scoped_http::Error, proxy: &Proxy, words: &str) {
    let text = error.to_string();
    let debug = format!("{error:?}");
    assert!(error.is_transport(), "{debug}");
    assert!(
        text.contains(&format!("proxy 127.0.0.1:{}", proxy.port)),
        "{text}"
    );
    assert!(text.contains(words), "{text}");
    for shown in [&text, &debug] {
        assert!(!shown.contains(PASSWORD), "the password shown: {shown}");
        assert!(
            !shown.contains("wrong-password"),
            "the password shown: {shown}"
        );
    }
}

#[tokio::test]
#[ignore = "needs proxy.py: run .ci/install-peers"]
async fn a_plain_http_target_is_reached_through_the_proxy() {
    let _shared = crate::support::shared();
    let proxy = Proxy::open();
    let server = TestServer::start(ServerConfig::default());
    // One connection per request: proxy.py logs the first request of a
    // connection only (it pipes the rest through).
    let client = HttpClient::builder()
        .proxy(proxy.url())
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    exchange(client, &server).await;
    // The proxy forwarded every request, in absolute form, to the target.
    let target = authority(&server);
    assert!(
        proxy.logged(&format!("DELETE {target}/mcp")).await,
        "{}",
        proxy.log()
    );
    let seen = server.requests().len();
    assert!(seen >= 4, "{seen}");
    let through = |log: &str| log.matches(&format!(" {target}/mcp - ")).count();
    assert!(
        eventually(LOGGED, || through(&proxy.log()) == seen).await,
        "the target saw {seen} requests, the proxy logged:\n{}",
        proxy.log()
    );
    assert_eq!(server.stats().deletes, 1);
}

#[tokio::test]
#[ignore = "needs proxy.py: run .ci/install-peers"]
async fn an_https_target_is_reached_through_a_connect_tunnel() {
    let _shared = crate::support::shared();
    let proxy = Proxy::open();
    let (server, root) = tls_server();
    exchange(client(&proxy.url(), Some(root)), &server).await;
    assert!(
        proxy
            .logged(&format!("CONNECT {}", authority(&server)))
            .await,
        "{}",
        proxy.log()
    );
    assert_eq!(server.stats().deletes, 1);
}

#[tokio::test]
#[ignore = "needs proxy.py: run .ci/install-peers"]
async fn credentials_go_to_the_proxy_and_never_to_the_target() {
    let _shared = crate::support::shared();
    let proxy = Proxy::with_credentials();
    let plain = TestServer::start(ServerConfig::default());
    let (tls, root) = tls_server();
    let url = proxy.url_as(USER, PASSWORD);
    exchange(client(&url, None), &plain).await;
    exchange(client(&url, Some(root)), &tls).await;
    assert_target_saw_no_proxy_credentials(&plain);
    assert_target_saw_no_proxy_credentials(&tls);
    assert!(proxy.logged(&format!("CONNECT {}", authority(&tls))).await);
    assert!(
        proxy
            .logged(&format!("POST {}/mcp - 200", authority(&plain)))
            .await
    );
}

#[tokio::test]
#[ignore = "needs proxy.py: run .ci/install-peers"]
async fn wrong_or_missing_credentials_are_a_clear_407_error() {
    let _shared = crate::support::shared();
    let proxy = Proxy::with_credentials();
    let plain = TestServer::start(ServerConfig::default());
    let (tls, root) = tls_server();
    let wrong = proxy.url_as(USER, "wrong-password");
    for (target, root) in [(&plain, None), (&tls, Some(root))] {
        let wire = wire(client(&wrong, root.clone()), target);
        let error = wire
            .request(initialize_request(1, "2025-11-25"))
            .await
            .unwrap_err();
        assert_names_the_proxy(&error, &proxy, "refused the credentials");
        assert!(error.to_string().contains("407"), "{error}");
        assert!(!error.is_retryable(), "{error:?}");

        let wire = wire_without_credentials(&proxy, root, target);
        let error = wire
            .request(initialize_request(1, "2025-11-25"))
            .await
            .unwrap_err();
        assert_names_the_proxy(&error, &proxy, "asks for credentials");
        assert!(!error.is_retryable(), "{error:?}");
    }
    // Nothing reached either target.
    assert!(plain.requests().is_empty());
    assert!(tls.requests().is_empty());
}

fn wire_without_credentials(
    proxy: &Proxy,
    root: Option<Vec<u8>>,
    target: &TestServer,
) -> StreamableHttp {
    wire(client(&proxy.url(), root), target)
}

#[tokio::test]
#[ignore = "needs proxy.py: run .ci/install-peers"]
async fn a_bypassed_destination_goes_direct() {
    let _shared = crate::support::shared();
    let proxy = Proxy::open();
    let server = TestServer::start(ServerConfig::default());
    let direct = HttpClient::builder()
        .proxy(proxy.url())
        .proxy_bypass("localhost, 127.0.0.0/8")
        .build()
        .unwrap();
    exchange(direct, &server).await;
    // A second exchange through the proxy, so that the log is known to be
    // written: the first one is not in it.
    let through = TestServer::start(ServerConfig::default());
    exchange(client(&proxy.url(), None), &through).await;
    assert!(proxy.logged(&authority(&through)).await, "{}", proxy.log());
    assert!(
        !proxy.log().contains(&authority(&server)),
        "{}",
        proxy.log()
    );
    assert_eq!(server.stats().deletes, 1);
}

#[tokio::test]
#[ignore = "needs proxy.py: run .ci/install-peers"]
async fn an_unreachable_proxy_is_named_and_retryable() {
    let _shared = crate::support::shared();
    // Nobody listens on port 1.
    let server = TestServer::start(ServerConfig::default());
    let wire = wire(
        client("http://user:wrong-password@127.0.0.1:1", None),
        &server,
    );
    let error = wire
        .request(initialize_request(1, "2025-11-25"))
        .await
        .unwrap_err();
    let text = error.to_string();
    assert!(
        text.contains("could not reach the proxy 127.0.0.1:1"),
        "{text}"
    );
    assert!(text.contains("connection refused"), "{text}");
    assert!(!text.contains("wrong-password"), "{text}");
    assert!(error.is_retryable(), "{error:?}");
    assert!(server.requests().is_empty());
}

// The environment, read by a child process.

/// Set in a child: the endpoint it connects to.
const CHILD_TARGET: &str = "MCP_SCOPED_HTTP_PROXY_TEST_TARGET";
const VARIABLES: [&str; 8] = [
    "HTTP_PROXY",
    "http_proxy",
    "HTTPS_PROXY",
    "https_proxy",
    "ALL_PROXY",
    "all_proxy",
    "NO_PROXY",
    "no_proxy",
];

/// In a child (`CHILD_TARGET` set): a handshake with the target through
/// an owned client with the defaults, which read the environment. In this
/// process it does nothing.
#[tokio::test]
#[ignore = "run as a child process by the environment tests"]
async fn child_connects_with_the_defaults() {
    let _shared = crate::support::shared();
    let Ok(target) = std::env::var(CHILD_TARGET) else {
        return;
    };
    let client = match HttpClient::owned() {
        Ok(client) => client,
        Err(error) => panic!("CHILD FAILED: {error}"),
    };
    let wire = StreamableHttp::new(client, &target).unwrap();
    if let Err(error) = wire.request(initialize_request(1, "2025-11-25")).await {
        panic!("CHILD FAILED: {error}");
    }
    wire.delete_session().await.ok();
}

/// Runs [`child_connects_with_the_defaults`] against `target` with `vars`
/// (and no other proxy variable); its success and its output.
fn child(target: &TestServer, vars: &[(&str, &str)]) -> (bool, String) {
    child_to(&target.url(), vars)
}

/// [`child`], to the endpoint `url`.
fn child_to(url: &str, vars: &[(&str, &str)]) -> (bool, String) {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args([
            "--exact",
            crate::support::this_test(module_path!(), "child_connects_with_the_defaults").as_str(),
        ])
        .args(["--include-ignored", "--nocapture", "--test-threads", "1"])
        .env(CHILD_TARGET, url)
        .env_remove("REQUEST_METHOD")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for name in VARIABLES {
        command.env_remove(name);
    }
    command.envs(vars.iter().copied());
    run_child(command, CHILD_RUN)
}

#[tokio::test]
#[ignore = "needs proxy.py: run .ci/install-peers"]
async fn the_environment_names_the_proxy() {
    let _shared = crate::support::shared();
    let proxy = Proxy::with_credentials();
    let server = TestServer::start(ServerConfig::default());
    // Lower case, as curl reads `http_proxy`, with credentials in the URL.
    let url = proxy.url_as(USER, PASSWORD);
    let (ok, output) = child(&server, &[("http_proxy", &url)]);
    assert!(ok, "{output}");
    assert!(
        proxy
            .logged(&format!("POST {}/mcp - 200", authority(&server)))
            .await,
        "{}",
        proxy.log()
    );
    assert_target_saw_no_proxy_credentials(&server);
    // ALL_PROXY stands in for HTTP_PROXY; an unreachable one fails, so the
    // variable was read.
    let (ok, output) = child(&server, &[("ALL_PROXY", "http://127.0.0.1:1")]);
    assert!(!ok, "{output}");
    assert!(
        output.contains("could not reach the proxy 127.0.0.1:1"),
        "{output}"
    );
}

#[tokio::test]
#[ignore = "needs proxy.py: run .ci/install-peers"]
async fn no_proxy_in_the_environment_sends_a_destination_direct() {
    let _shared = crate::support::shared();
    let server = TestServer::start(ServerConfig::default());
    // The proxy is unreachable: only a direct connection succeeds.
    let dead = "http://127.0.0.1:1";
    for no_proxy in [
        ("NO_PROXY", "127.0.0.1"),
        ("no_proxy", "localhost,127.0.0.0/8"),
    ] {
        let (ok, output) = child(&server, &[("HTTP_PROXY", dead), no_proxy]);
        assert!(ok, "{no_proxy:?}: {output}");
    }
    assert_eq!(seen(&server, "initialize").len(), 2);
}

// Malformed proxy URLs: refused, never ignored nor misread. No proxy.py
// needed: nothing may be sent at all.

/// Proxy URLs no request may be sent through, each with the password
/// `PASSWORD`: a port past 65535 (read as port 80 by `http::Uri`), two
/// ports, an unclosed `[`, another scheme, no host.
const MALFORMED: [&str; 6] = [
    "http://agent:PROXY-PASSWORD-SECRET@127.0.0.1:99999",
    "http://agent:PROXY-PASSWORD-SECRET@127.0.0.1:3128:1",
    "http://agent:PROXY-PASSWORD-SECRET@[::1:3128",
    "socks5://agent:PROXY-PASSWORD-SECRET@127.0.0.1:1080",
    "http://agent:PROXY-PASSWORD-SECRET@:3128",
    "http://agent:PROXY-PASSWORD-SECRET@",
];

/// A listener on `address` that accepts (and closes) connections on a
/// thread of its own and counts them, until dropped.
struct Watch {
    address: std::net::SocketAddr,
    accepted: std::sync::Arc<AtomicU32>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Watch {
    fn bind(address: &str) -> std::io::Result<Watch> {
        let listener = std::net::TcpListener::bind(address)?;
        listener.set_nonblocking(true)?;
        let address = listener.local_addr()?;
        let accepted = std::sync::Arc::new(AtomicU32::new(0));
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let thread = std::thread::spawn({
            let (accepted, stop) = (accepted.clone(), stop.clone());
            move || {
                while !stop.load(Ordering::Relaxed) {
                    match listener.accept() {
                        Ok(_) => drop(accepted.fetch_add(1, Ordering::Relaxed)),
                        Err(_) => std::thread::sleep(Duration::from_millis(5)),
                    }
                }
            }
        });
        Ok(Watch {
            address,
            accepted,
            stop,
            thread: Some(thread),
        })
    }

    /// Connections accepted so far, counting those still in the backlog.
    fn accepted(&self) -> u32 {
        // One more turn of the accept loop picks up a pending connection.
        let seen = self.accepted.load(Ordering::Relaxed);
        let deadline = Instant::now() + Duration::from_millis(100);
        while Instant::now() < deadline && self.accepted.load(Ordering::Relaxed) == seen {
            std::thread::sleep(Duration::from_millis(10));
        }
        self.accepted.load(Ordering::Relaxed)
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The error names `source`, and shows neither the password nor the URL.
fn assert_names(text: &str, source: &str, url: &str) {
    assert!(text.contains(source), "{url}: {text}");
    assert!(
        !text.contains(PASSWORD),
        "{url}: the password shown: {text}"
    );
}

#[tokio::test]
async fn a_malformed_proxy_on_the_builder_fails_the_build_and_sends_nothing() {
    let _shared = crate::support::shared();
    let target = Watch::bind("127.0.0.1:0").unwrap();
    // Where `:99999` was misread to; on a machine that lets us listen there.
    let port_80 = Watch::bind("127.0.0.1:80").ok();
    for url in MALFORMED {
        let built = HttpClient::builder().proxy(url).build();
        let error = match built {
            Ok(client) => {
                // Still nothing may leave: try, then count below.
                let endpoint = format!("http://{}/mcp", target.address);
                let wire = StreamableHttp::new(client, &endpoint).unwrap();
                let sent = wire.request(initialize_request(1, "2025-11-25")).await;
                panic!("{url}: built, and the request gave {sent:?}");
            }
            Err(error) => error,
        };
        assert!(error.is_builder(), "{url}: {error:?}");
        assert_names(&format!("{error} {error:?}"), "proxy", url);
    }
    assert_eq!(target.accepted(), 0);
    if let Some(port_80) = port_80 {
        assert_eq!(port_80.accepted(), 0);
    }
}

#[test]
fn a_malformed_proxy_in_the_environment_fails_naming_the_variable_and_sends_nothing() {
    let _shared = crate::support::shared();
    let target = Watch::bind("127.0.0.1:0").unwrap();
    let port_80 = Watch::bind("127.0.0.1:80").ok();
    let endpoint = format!("http://{}/mcp", target.address);
    for variable in &VARIABLES[..6] {
        for url in MALFORMED {
            let (ok, output) = child_to(&endpoint, &[(variable, url)]);
            assert!(!ok, "{variable}={url}: {output}");
            assert!(
                output.contains("CHILD FAILED"),
                "{variable}={url}: {output}"
            );
            assert_names(&output, &format!("{variable} "), url);
            assert!(
                output.contains("not a valid URL") || output.contains("not supported"),
                "{variable}={url}: {output}"
            );
        }
    }
    assert_eq!(target.accepted(), 0);
    if let Some(port_80) = port_80 {
        assert_eq!(port_80.accepted(), 0);
    }
}
