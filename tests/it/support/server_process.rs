//! A test kit server in its own process (this test binary again, running
//! [`serve`] alone), which a test kills, stops, resumes and restarts on the
//! same port: a real server going away, with its sessions, its connections
//! and its port.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::time::Duration;

use mcp_scoped_http_testkit::{Eras, ListenMode, ServerConfig, TestServer};

use super::processes::{self, Group, SpawnGroup};

/// How long a started process may take to listen.
const STARTUP: Duration = Duration::from_secs(10);
/// The port a server process listens on, and the eras it serves.
const PORT: &str = "MCP_SCOPED_HTTP_TEST_SERVER_PORT";
const ERAS: &str = "MCP_SCOPED_HTTP_TEST_SERVER_ERAS";

/// The body of a [`ServerProcess`]: a test server of the eras `ERAS` names,
/// reached on 127.0.0.1:`PORT` through a forwarder (the test server binds
/// a port of its own), until the process is killed. Run by
/// [`ServerProcess::restart`] alone in a process; without `PORT` it
/// returns at once.
#[test]
#[ignore = "the body of a server process: ServerProcess runs it"]
fn serve() {
    let Ok(port) = std::env::var(PORT) else {
        return;
    };
    let eras: Eras = std::env::var(ERAS)
        .expect("the eras to serve")
        .parse()
        .expect("eras");
    // As a long-running server: open to GET streams, no record kept.
    let server = TestServer::start(
        ServerConfig::default()
            .with_eras(eras)
            .with_listen(ListenMode::Open)
            .with_record_requests(false),
    );
    let to = server.addr();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port.parse::<u16>().unwrap()))
            .await
            .expect("the port is free");
        loop {
            let Ok((mut inbound, _)) = listener.accept().await else {
                // Out of descriptors, say: back off rather than spin.
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            };
            let _ = inbound.set_nodelay(true);
            tokio::spawn(async move {
                if let Ok(mut outbound) = tokio::net::TcpStream::connect(to).await {
                    let _ = outbound.set_nodelay(true);
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    });
}

/// A server process on port P serving eras R, in a process group of its
/// own, killed whole when dropped.
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
        let child = Command::new(std::env::current_exe().expect("this test binary"))
            .args([
                "--exact",
                &super::this_test(module_path!(), "serve"),
                "--ignored",
                "--nocapture",
            ])
            .env(PORT, self.port.to_string())
            .env(ERAS, self.eras.as_str())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn_group()
            .expect("run this binary as a server");
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
                panic!("the server on port {} exited at start: {status}", self.port);
            }
            assert!(
                started.elapsed() < STARTUP,
                "the server on port {} did not listen within {STARTUP:?}",
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
