//! Dropping a request future where no tokio runtime is current (rule 11:
//! `Drop` never panics): after its runtime's `block_on` returned, or on a
//! thread that never had one. The request is in flight when dropped (the
//! server hangs), so its drop owes the server a `notifications/cancelled`.
//!
//! These tests build their own runtimes, so they do not run through
//! `support::scenario`; they still hold one lock, so that the baseline's
//! descriptor counts are not disturbed by each other.

use crate::support;

use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::support::baseline::Caller;
use crate::support::*;
use mcp_scoped_http::{Connector, Session};
use serde_json::json;

const PROMPT: Duration = Duration::from_secs(5);

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
}

fn message(panic: &(dyn Any + Send)) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_else(|| "a non-string panic".to_owned())
}

/// Polls `future` until the server has seen its `tools/call` (bounded):
/// it is in flight.
async fn until_in_flight<F: Future + Unpin>(future: &mut F, server: &TestServer) {
    let deadline = Instant::now() + PROMPT;
    while seen(server, "tools/call").is_empty() {
        assert!(
            Instant::now() < deadline,
            "the request never reached the server"
        );
        tokio::select! {
            _ = &mut *future => panic!("the request finished against a hanging server"),
            _ = tokio::time::sleep(Duration::from_millis(2)) => {}
        }
    }
}

async fn open(server: &TestServer, caller: &Caller, borrowed: bool) -> Session {
    let mut connector = Connector::new(server.url()).bearer("outside").listen(false);
    if borrowed {
        connector = connector.client(caller.client.clone());
    }
    connector.connect().await.expect("connect")
}

#[test]
fn dropping_a_request_future_after_its_runtime_returned_does_not_panic() {
    let _one = support::serial();
    for borrowed in [false, true] {
        let what = if borrowed { "borrowed" } else { "owned" };
        let runtime = runtime();
        let (server, caller, baseline, session) = runtime.block_on(async {
            let (server, caller, baseline) = support::baseline::scene(TestServer::start(
                ServerConfig::default().with_fault(Fault::on_rpc("tools/call", FaultAction::Hang)),
            ))
            .await;
            let session = open(&server, &caller, borrowed).await;
            (server, caller, baseline, session)
        });
        let mut call = Box::pin(session.call_tool("tool-000", json!({})));
        runtime.block_on(until_in_flight(&mut call, &server));

        // `block_on` has returned: no runtime is current on this thread.
        assert!(tokio::runtime::Handle::try_current().is_err());
        let dropped = std::panic::catch_unwind(AssertUnwindSafe(|| drop(call)));

        runtime.block_on(async {
            session.close().await;
            drop(session);
            mcp_scoped_http::shutdown().await;
        });
        if let Err(panic) = dropped {
            panic!(
                "{what}: dropping the request future outside the runtime panicked: {}",
                message(&*panic)
            );
        }
        runtime.block_on(async {
            assert_each_session_deleted_once(&server, what).await;
            baseline.check(&server, 1).await;
        });
        drop(caller);
    }
}

#[test]
fn dropping_a_request_future_on_a_thread_without_a_runtime_does_not_panic() {
    let _one = support::serial();
    for borrowed in [false, true] {
        let what = if borrowed { "borrowed" } else { "owned" };
        let runtime = runtime();
        let (server, caller, baseline, session) = runtime.block_on(async {
            let (server, caller, baseline) = support::baseline::scene(TestServer::start(
                ServerConfig::default().with_fault(Fault::on_rpc("tools/call", FaultAction::Hang)),
            ))
            .await;
            let session = Arc::new(open(&server, &caller, borrowed).await);
            (server, caller, baseline, session)
        });
        let mut call: Pin<Box<dyn Future<Output = _> + Send>> = Box::pin({
            let session = session.clone();
            async move { session.call_tool("tool-000", json!({})).await }
        });
        runtime.block_on(until_in_flight(&mut call, &server));

        // The runtime lives on; this thread never had one.
        let dropped = std::thread::spawn(move || {
            assert!(tokio::runtime::Handle::try_current().is_err());
            drop(call);
        })
        .join();

        runtime.block_on(async {
            session.close().await;
            drop(session);
            mcp_scoped_http::shutdown().await;
        });
        if let Err(panic) = dropped {
            panic!(
                "{what}: dropping the request future on a thread without a runtime panicked: {}",
                message(&*panic)
            );
        }
        runtime.block_on(async {
            assert_each_session_deleted_once(&server, what).await;
            baseline.check(&server, 1).await;
        });
        drop(caller);
    }
}
