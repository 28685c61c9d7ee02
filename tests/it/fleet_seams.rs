//! The public seams a fleet is built on (issue 38), used as a host that
//! supervises sessions of its own would: a reaper it holds and drains, and
//! a memory pool its sessions share.

use std::time::Duration;

use futures_util::FutureExt as _;

use crate::support::*;
use mcp_scoped_http::{Connector, MemoryPool, Reaper};

/// The most a test waits for something that should happen at once.
const BOUND: Duration = Duration::from_secs(10);

/// A host's own reaper counts the reaps handed to it (and to its children),
/// its drain waits for exactly those, and another reaper sees none of them.
#[test]
fn a_host_s_reaper_drains_what_it_started_and_nothing_else() {
    scenario(async {
        let host = Reaper::new();
        let child = host.child();
        let other = Reaper::new();
        let (release, released) = tokio::sync::oneshot::channel::<()>();
        assert!(child.reap(BOUND, async {
            let _ = released.await;
        }));
        assert_eq!(
            (host.pending(), child.pending(), other.pending()),
            (1, 1, 0)
        );
        // Another reaper's drain does not wait for it.
        assert!(other.drain().now_or_never().is_some());
        // Ours does, until the reap has finished.
        let mut drain = Box::pin(host.drain());
        assert!((&mut drain).now_or_never().is_none());
        release.send(()).unwrap();
        tokio::time::timeout(BOUND, drain)
            .await
            .expect("the drain ends once its reap has");
        assert_eq!((host.pending(), child.pending()), (0, 0));
    });
}

/// A reap is waited for no longer than its bound, even if it never ends.
#[test]
fn a_drain_gives_up_on_a_reap_past_its_bound() {
    scenario(async {
        let host = Reaper::new();
        assert!(host.reap(Duration::from_millis(50), std::future::pending()));
        tokio::time::timeout(BOUND, host.drain())
            .await
            .expect("the drain gives up at the reap's bound");
        assert_eq!(
            host.pending(),
            1,
            "still running: only no longer waited for"
        );
    });
}

/// A session dropped without `close` hands its DELETE to its connector's
/// reaper: the host's drain waits for it, and the DELETE has reached the
/// server when it returns.
#[test]
fn a_dropped_session_s_delete_is_reaped_by_its_connector_s_reaper() {
    scenario(async {
        let server = TestServer::start(ServerConfig::default());
        let host = Reaper::global().child();
        let session = Connector::new(server.url())
            .reaper(host.clone())
            .delete_timeout(Duration::from_secs(5))
            .connect()
            .await
            .expect("connect");
        server.push_fault(Fault::on_http(
            http::Method::DELETE,
            FaultAction::Delay(Duration::from_millis(100)),
        ));
        drop(session);
        assert_eq!(host.pending(), 1, "the DELETE was not handed to our reaper");
        tokio::time::timeout(BOUND, host.drain())
            .await
            .expect("the drain ends");
        assert_eq!(host.pending(), 0);
        assert_eq!(
            server.stats().deletes,
            1,
            "drained before the DELETE was sent"
        );
    });
}

/// Sessions of two connectors sharing a pool both draw from it, give it
/// all back when they close, and a pool too small for one refuses its
/// connect with an error naming the pool.
#[test]
fn a_shared_pool_is_charged_by_every_session_under_it() {
    scenario(async {
        let server = TestServer::start(ServerConfig::default());
        let pool = MemoryPool::new(64 << 20);
        let a = Connector::new(server.url()).memory_pool(pool.clone());
        let b = Connector::new(server.url()).memory_pool(pool.clone());
        let one = a.connect().await.expect("connect a");
        let alone = pool.held();
        assert!(alone > 0, "a session's catalog is not charged to the pool");
        let two = b.connect().await.expect("connect b");
        assert!(pool.held() > alone, "the second session is not charged");
        one.close().await;
        two.close().await;
        // What a session kept (its catalog) goes with the handle.
        drop((one, two));
        assert!(
            eventually(BOUND, || pool.held() == 0).await,
            "{} bytes still held",
            pool.held()
        );

        let tiny = MemoryPool::builder(16)
            .name("the host's memory budget", "Host::memory")
            .build();
        let error = Connector::new(server.url())
            .memory_pool(tiny.clone())
            .connect()
            .await
            .expect_err("over the pool");
        assert!(error.is_limit(), "{error}");
        assert!(
            error
                .to_string()
                .contains("the host's memory budget of 16 bytes (Host::memory)"),
            "{error}"
        );
        assert_eq!(tiny.held(), 0);
        assert!(tiny.refusals() > 0);
    });
}
