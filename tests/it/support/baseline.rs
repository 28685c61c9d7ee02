//! The baseline check of FAULTS.md, run at the end of every scenario.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use mcp_scoped_http::HttpClient;
use mcp_scoped_http::client::HookInfo;
use mcp_scoped_http_testkit::TestServer;

/// Live tasks spawned by the caller's own client: its pooled connections are
/// the caller's and may outlive our sessions, so they are discounted.
#[derive(Clone, Default)]
pub struct CountingExecutor {
    live: Arc<AtomicUsize>,
}

impl<F> hyper::rt::Executor<F> for CountingExecutor
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    fn execute(&self, future: F) {
        let live = self.live.clone();
        live.fetch_add(1, Ordering::SeqCst);
        tokio::spawn(async move {
            let _done = scopeguard::guard((), move |()| {
                live.fetch_sub(1, Ordering::SeqCst);
            });
            future.await;
        });
    }
}

/// The caller: its own hyper client (pooled, shared), and the borrowed
/// `HttpClient` that lends it to sessions.
#[derive(Clone)]
pub struct Caller {
    pub raw: Client<HttpConnector, Full<Bytes>>,
    pub executor: CountingExecutor,
    pub client: HttpClient,
}

impl Caller {
    pub fn new() -> Caller {
        let executor = CountingExecutor::default();
        // No idle timeout: the pool then runs no idle-interval task, so
        // every live task of the caller's is a connection (two descriptors,
        // its end and the in-process server's), as the fd check assumes.
        let raw = Client::builder(executor.clone())
            .pool_idle_timeout(None)
            .build_http();
        let client = HttpClient::borrowed(raw.clone());
        Caller {
            raw,
            executor,
            client,
        }
    }

    pub fn live_tasks(&self) -> usize {
        self.executor.live.load(Ordering::SeqCst)
    }

    /// A request of the caller's own, straight through its raw client.
    pub async fn own_request(&self, server: &TestServer) -> http::StatusCode {
        let request = http::Request::post(server.url())
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("x-caller", "own")
            .body(Full::new(Bytes::from_static(
                br#"{"jsonrpc":"2.0","id":"caller","method":"ping"}"#,
            )))
            .unwrap();
        self.raw
            .request(request)
            .await
            .expect("the caller's client still works")
            .status()
    }
}

/// The process's open descriptors that a scenario could leak: less the
/// stdio watchdog's image (a sealed memfd made at the first stdio spawn and
/// kept for the process's life, as a cache is) and tokio runtimes' own
/// (another test's runtime, built before it waits for the lock), with each
/// socket counted once.
pub fn open_fds() -> usize {
    let mut sockets = std::collections::HashSet::new();
    fd_targets()
        .into_iter()
        .filter(|target| {
            // The watchdog's image: open for the process's life once a
            // stdio server was started.
            !target.starts_with("/memfd:mcp-watchdog")
                // A tokio runtime's own (its poll and its waker): the
                // runtime of a `#[tokio::test]` waiting for this binary's
                // lock is built before its body takes the lock, in the
                // middle of whatever scenario holds it. A leak of ours is
                // a connection, a pipe or a file, never a runtime.
                && target != "anon_inode:[eventpoll]"
                && target != "anon_inode:[eventfd]"
        })
        // A socket once, however many descriptors share it (every runtime
        // holds a copy of tokio's one signal socket).
        .filter(|target| !target.starts_with("socket:") || sockets.insert(target.clone()))
        .count()
}

fn fd_targets() -> Vec<String> {
    std::fs::read_dir("/proc/self/fd")
        .map(|dir| {
            dir.filter_map(|e| e.ok())
                .filter_map(|e| std::fs::read_link(e.path()).ok())
                .map(|p| p.display().to_string())
                .collect()
        })
        .unwrap_or_default()
}

pub fn alive_tasks() -> usize {
    tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks()
}

/// What the world looked like before a scenario.
pub struct Baseline {
    tasks: usize,
    fds: usize,
    caller_tasks: usize,
    hooks: Vec<HookInfo>,
    ledger: mcp_scoped_http::Ledger,
    caller: Option<Caller>,
}

impl Baseline {
    /// Takes the baseline. Call it with the caller's client warm (after one
    /// request of its own), so its first pooled connection is already there.
    // `stdio` is a feature of this crate, not of the CLI's tests that
    // share this file (where stdio servers run in the CLI's processes).
    #[allow(unexpected_cfgs)]
    pub fn take(caller: Option<&Caller>) -> Baseline {
        // The numbers are the whole process's: a baseline taken while
        // another test of this binary runs counts that test's resources.
        assert!(
            super::holds_serial(),
            "a baseline is taken under support::serial() or support::scenario()"
        );
        // The stdio launcher's socket is the process's, for its life: held
        // before the count, as a host that counts its descriptors does.
        #[cfg(all(unix, feature = "stdio"))]
        mcp_scoped_http::stdio::start_launcher().expect("the stdio launcher");
        Baseline {
            tasks: alive_tasks(),
            fds: open_fds(),
            caller_tasks: caller.map_or(0, Caller::live_tasks),
            hooks: caller.map(|c| c.client.hooks()).unwrap_or_default(),
            ledger: mcp_scoped_http::ledger(),
            caller: caller.cloned(),
        }
    }

    /// The baseline check; `deletes` is the number of DELETEs the server
    /// should have seen in all.
    pub async fn check(&self, server: &TestServer, deletes: usize) {
        let settle = Duration::from_secs(5);
        // 1. Our hooks are gone; other parties' are untouched, same order.
        if let Some(caller) = &self.caller {
            assert_eq!(
                caller.client.hooks(),
                self.hooks,
                "hooks on the borrowed client"
            );
        }
        // 2 and the ledger: owned clients, sessions, tasks, reaps all back.
        let ledger_back =
            super::eventually(settle, || mcp_scoped_http::ledger() == self.ledger).await;
        assert!(
            ledger_back,
            "ledger {:?}, before {:?}",
            mcp_scoped_http::ledger(),
            self.ledger
        );
        // 3. Tasks and descriptors, discounting the caller's own connections.
        let caller_tasks = || self.caller.as_ref().map_or(0, Caller::live_tasks);
        let tasks_back = super::eventually(settle, || {
            alive_tasks().saturating_sub(caller_tasks())
                <= self.tasks.saturating_sub(self.caller_tasks)
        })
        .await;
        assert!(
            tasks_back,
            "live tasks {} (caller's {}), before {} (caller's {})",
            alive_tasks(),
            caller_tasks(),
            self.tasks,
            self.caller_tasks
        );
        // The test server runs in this process: each of the caller's pooled
        // connections is two descriptors, its end and the server's.
        let fds_back = super::eventually(settle, || {
            open_fds().saturating_sub(2 * caller_tasks())
                <= self.fds.saturating_sub(2 * self.caller_tasks)
        })
        .await;
        assert!(
            fds_back,
            "open fds {}, before {} (caller's connections {} now, {} before): {:?}",
            open_fds(),
            self.fds,
            caller_tasks(),
            self.caller_tasks,
            fd_targets()
        );
        // 2. The borrowed client still serves the caller, without our headers.
        if let Some(caller) = &self.caller {
            caller.own_request(server).await;
            let own = server
                .requests()
                .into_iter()
                .rev()
                .find(|r| r.header("x-caller") == Some("own"))
                .expect("the caller's request reached the server");
            assert_eq!(
                own.header("authorization"),
                None,
                "our hook leaked onto the caller's request"
            );
            assert_eq!(own.header("mcp-session-id"), None);
            assert_eq!(own.header("x-session-hook"), None);
        }
        // 6. Exactly the DELETEs there should be.
        assert_eq!(
            server.stats().deletes,
            deletes,
            "DELETEs seen by the server"
        );
    }
}

/// A scenario's opening: the server, the caller with its client warm (one
/// request of its own, so its first pooled connection exists), and the
/// baseline taken after that.
pub async fn scene(server: TestServer) -> (TestServer, Caller, Baseline) {
    let caller = Caller::new();
    caller.own_request(&server).await;
    // The pool may still run a short task for that connection (waiting for
    // it to be ready again); on a multi-threaded runtime it can still be
    // alive here, and would be taken for a connection (two descriptors).
    super::eventually(Duration::from_secs(5), || caller.live_tasks() <= 1).await;
    let baseline = Baseline::take(Some(&caller));
    (server, caller, baseline)
}

/// A server, the caller (warm) and the baseline taken before the scenario;
/// test files add the methods their scenarios need.
pub struct World {
    pub server: TestServer,
    pub caller: Caller,
    pub baseline: Baseline,
}

impl World {
    pub async fn new(config: mcp_scoped_http_testkit::ServerConfig) -> World {
        let (server, caller, baseline) = scene(TestServer::start(config)).await;
        World {
            server,
            caller,
            baseline,
        }
    }
}

/// A runtime built on another thread in the middle of a scenario, as a
/// `#[tokio::test]` waiting for the lock builds its own, leaves the count
/// where it was; a connection opened meanwhile does not.
#[test]
fn a_runtime_built_meanwhile_is_not_counted_and_a_connection_is() {
    let _serial = super::serial();
    // Tokio's one signal socket pair is made by the first runtime and
    // kept: as in any scenario, which runs after others built theirs.
    drop(tokio::runtime::Runtime::new().expect("a runtime"));
    let before = open_fds();
    let (built, waiting) = std::sync::mpsc::channel::<()>();
    let (release, released) = std::sync::mpsc::channel::<()>();
    let other = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        built.send(()).unwrap();
        released.recv().unwrap();
        drop(runtime);
    });
    waiting.recv().unwrap();
    assert_eq!(open_fds(), before, "{:?}", fd_targets());
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    assert_eq!(open_fds(), before + 1, "{:?}", fd_targets());
    drop(listener);
    release.send(()).unwrap();
    other.join().unwrap();
}
