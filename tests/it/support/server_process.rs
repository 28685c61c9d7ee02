//! A test kit server in its own process (`mcp-scoped-http serve`), which a
//! test kills, stops, resumes and restarts on the same port: a real server
//! going away, with its sessions, its connections and its port.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::time::Duration;

use mcp_scoped_http::testkit::Eras;

use super::processes::{self, Group, SpawnGroup};

/// How long a started process may take to listen.
const STARTUP: Duration = Duration::from_secs(10);

/// A `serve --port P --revision R` process, in a process group of its own,
/// killed whole when dropped.
pub struct ServerProcess {
    port: u16,
    eras: Eras,
    child: Option<Group>,
    /// Stopped with SIGSTOP (and not resumed yet).
    paused: bool,
    /// How many times it was started.
    pub starts: usize,
}

/// A port on 127.0.0.1 that was free a moment ago.
pub fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("addr").port()
}

impl ServerProcess {
    /// Starts a server of `eras` on a free port and waits until it listens.
    pub async fn start(eras: Eras) -> ServerProcess {
        let mut server = ServerProcess {
            port: free_port(),
            eras,
            child: None,
            paused: false,
            starts: 0,
        };
        server.restart().await;
        server
    }

    /// Its MCP endpoint.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }

    pub fn eras(&self) -> Eras {
        self.eras
    }

    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    pub fn is_paused(&self) -> bool {
        self.paused
    }

    /// Kills it (SIGKILL to its group, paused or not) and reaps it: its
    /// sessions and connections are gone, its port free.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill();
        }
        self.paused = false;
    }

    /// Starts it again on the same port (killing a running one first) and
    /// waits, bounded, until it accepts connections.
    pub async fn restart(&mut self) {
        self.kill();
        let child = Command::new(env!("CARGO_BIN_EXE_mcp-scoped-http"))
            .args([
                "serve",
                "--port",
                &self.port.to_string(),
                "--revision",
                self.eras.as_str(),
            ])
            .env_remove("MCP_CONFORMANCE_SCENARIO")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn_group()
            .expect("run mcp-scoped-http serve");
        self.child = Some(child);
        self.starts += 1;
        let addr = SocketAddr::from(([127, 0, 0, 1], self.port));
        let started = tokio::time::Instant::now();
        loop {
            // A probe connection: the forwarder listens only once the
            // server behind it runs.
            if TcpStream::connect_timeout(&addr, Duration::from_millis(100)).is_ok() {
                return;
            }
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.child().try_wait().ok().flatten())
            {
                panic!("serve --port {} exited at start: {status}", self.port);
            }
            assert!(
                started.elapsed() < STARTUP,
                "serve --port {} did not listen within {STARTUP:?}",
                self.port
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Stops it (SIGSTOP): connections stay open and nothing is answered,
    /// a server slowed to a halt.
    pub fn pause(&mut self) {
        if !self.paused && self.signal("STOP") {
            self.paused = true;
        }
    }

    /// Resumes a paused server (SIGCONT).
    pub fn resume(&mut self) {
        if self.paused && self.signal("CONT") {
            self.paused = false;
        }
    }

    fn signal(&self, signal: &str) -> bool {
        self.child
            .as_ref()
            .is_some_and(|child| processes::signal(signal, child.id()))
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        self.kill();
    }
}
