//! The peers (`.ci/install-peers`): the Python, TypeScript and Rust SDKs'
//! servers, each started on a free port in a process group of its own.

use std::io::{BufRead, BufReader, Read};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::processes::{Group, SpawnGroup};

/// How long a peer gets to start listening (node on 2 busy cores is slow).
pub const STARTUP: Duration = Duration::from_secs(60);

pub fn peers_dir() -> PathBuf {
    super::repo_root().join(".peers")
}

pub fn sources_dir() -> PathBuf {
    super::repo_root().join("tests/peers")
}

pub fn installed(path: PathBuf) -> PathBuf {
    assert!(
        path.exists(),
        "{} is missing: run .ci/install-peers first",
        path.display()
    );
    path
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port on 127.0.0.1")
        .port()
}

/// A peer server process, in a process group of its own: the group is
/// killed (and the peer reaped) on drop, whatever the peer forked.
pub struct Peer {
    pub name: &'static str,
    pub child: Group,
    pub port: u16,
    pub stdout: Arc<Mutex<Vec<String>>>,
    pub stderr: Arc<Mutex<String>>,
}

impl Peer {
    pub fn start(name: &'static str, mut command: Command, port: u16) -> Peer {
        command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = command
            .spawn_group()
            .unwrap_or_else(|e| panic!("{name} did not start: {e}"));
        let stdout = Arc::new(Mutex::new(Vec::new()));
        let stderr = Arc::new(Mutex::new(String::new()));
        let out = child.child().stdout.take().expect("piped stdout");
        let lines = stdout.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                lines.lock().unwrap().push(line);
            }
        });
        let mut err = child.child().stderr.take().expect("piped stderr");
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

    pub fn wait_listening(&mut self) {
        let addr = SocketAddr::from(([127, 0, 0, 1], self.port));
        let deadline = Instant::now() + STARTUP;
        loop {
            if let Ok(Some(status)) = self.child.child().try_wait() {
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

    pub fn url(&self) -> String {
        self.url_at("/mcp")
    }

    pub fn url_at(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// Whether the server printed `line` (say `ENDED GET /sse`), waiting
    /// for it at most `limit`: the reader thread may lag.
    pub async fn printed(&self, line: &str, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        loop {
            if self.stdout.lock().unwrap().iter().any(|l| l == line) {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The HTTP exchanges the server reported: (method, status).
    pub fn seen(&self) -> Vec<(String, u16)> {
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

    pub fn deletes(&self) -> Vec<u16> {
        self.seen()
            .into_iter()
            .filter(|(method, _)| method == "DELETE")
            .map(|(_, status)| status)
            .collect()
    }

    /// The DELETE statuses, once `n` were seen or after 5 s: the server
    /// prints each line before it answers, but our reader thread may lag.
    pub async fn deletes_seen(&self, n: usize) -> Vec<u16> {
        let deadline = Instant::now() + Duration::from_secs(5);
        while self.deletes().len() < n && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.deletes()
    }
}

pub fn python(mode: &str) -> Peer {
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

/// The Python SDK 2.x server (`tests/peers/python2_server.py`): 2026-07-28
/// and the 2025 handshake on one endpoint.
pub fn python2(mode: &str) -> Peer {
    let port = free_port();
    let mut command = Command::new(installed(peers_dir().join("venv2/bin/python")));
    command.arg(sources_dir().join("python2_server.py")).args([
        "--port",
        &port.to_string(),
        "--mode",
        mode,
    ]);
    Peer::start("the Python SDK 2.x server", command, port)
}

/// The TypeScript SDK v2 server (`tests/peers/ts2_server.mjs`): 2026-07-28,
/// and a stateless 2025 handshake unless `legacy` is `reject`.
pub fn ts2(legacy: &str) -> Peer {
    let port = free_port();
    let modules = peers_dir().join("node2");
    installed(modules.join("node_modules/@modelcontextprotocol/server/package.json"));
    let mut command = Command::new("node");
    command
        .arg(sources_dir().join("ts2_server.mjs"))
        .args(["--port", &port.to_string(), "--legacy", legacy, "--modules"])
        .arg(modules);
    Peer::start("the TypeScript SDK v2 server", command, port)
}

/// The Python SDK 1.x serving the deprecated HTTP+SSE transport (`/sse`).
pub fn python_sse() -> Peer {
    python("sse")
}

/// The TypeScript SDK v1's `SSEServerTransport` (`/sse`).
pub fn ts_sse() -> Peer {
    let port = free_port();
    let modules = peers_dir().join("node-sse");
    installed(modules.join("node_modules/@modelcontextprotocol/sdk/package.json"));
    let mut command = Command::new("node");
    command
        .arg(sources_dir().join("ts_sse_server.mjs"))
        .args(["--port", &port.to_string(), "--modules"])
        .arg(modules);
    Peer::start("the TypeScript SDK v1 HTTP+SSE server", command, port)
}

pub fn server_everything() -> Peer {
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

pub fn rmcp(args: &[&str]) -> Peer {
    let port = free_port();
    let mut command = Command::new(installed(peers_dir().join("rmcp-target/debug/rmcp-peer")));
    command.args(["--port", &port.to_string()]).args(args);
    Peer::start("the rmcp server", command, port)
}
