//! Size limits: an answer over the limit is a clear error, read with bounded
//! memory, and the transport carries on.

mod support;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use mcp_scoped_http::transport::TransportConfig;
use support::*;

/// Counts live heap bytes and their peak, so a test can prove that an endless
/// answer is read with bounded memory.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every method forwards to `System` with the same arguments and only
// adds relaxed counter updates, so `System`'s guarantees carry over unchanged.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as received; the caller upholds `alloc`'s contract.
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            let live = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(live, Ordering::Relaxed);
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded as received; `ptr` came from `alloc` above.
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Runs `f` and returns how far the heap grew above where it started.
async fn peak_growth<T>(f: impl std::future::Future<Output = T>) -> (T, usize) {
    let base = LIVE.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    let out = f.await;
    (out, PEAK.load(Ordering::Relaxed).saturating_sub(base))
}

const LIMIT: usize = 64 * 1024;
/// Generous against the noise of other tests in this binary, and far below
/// what the server sends (hundreds of MiB).
const BOUND: usize = 48 * 1024 * 1024;

fn limited(server: &TestServer) -> mcp_scoped_http::transport::StreamableHttp {
    wire(HttpClient::owned().unwrap(), server).with_config(
        TransportConfig::default()
            .max_json_body(LIMIT)
            .max_sse_event(LIMIT),
    )
}

#[tokio::test]
async fn a_json_body_over_the_limit_is_refused() {
    let server = TestServer::start(ServerConfig::default());
    let wire = limited(&server);
    handshake(&wire).await;
    server.push_fault(Fault::on_rpc("tools/list", FaultAction::OversizeJson { bytes: 64 * 1024 * 1024 }).times(1));
    let (result, growth) = peak_growth(wire.request(request(2, "tools/list", None))).await;
    let error = result.unwrap_err();
    assert!(error.is_limit(), "{error}");
    assert!(error.to_string().contains(&LIMIT.to_string()), "{error}");
    assert!(growth < BOUND, "heap grew {growth} bytes");
    wire.request(request(3, "tools/list", None)).await.unwrap();
}

#[tokio::test]
async fn an_sse_event_over_the_limit_is_refused() {
    let server = TestServer::start(ServerConfig::default().with_response_mode(ResponseMode::Sse));
    let wire = limited(&server);
    handshake(&wire).await;
    server.push_fault(Fault::on_rpc("tools/list", FaultAction::OversizeSseEvent { bytes: 64 * 1024 * 1024 }).times(1));
    let (result, growth) = peak_growth(wire.request(request(2, "tools/list", None))).await;
    let error = result.unwrap_err();
    assert!(error.is_limit(), "{error}");
    assert!(growth < BOUND, "heap grew {growth} bytes");
    wire.request(request(3, "tools/list", None)).await.unwrap();
}

#[tokio::test]
async fn an_sse_line_that_never_ends_is_refused_with_bounded_memory() {
    let server = TestServer::start(ServerConfig::default().with_response_mode(ResponseMode::Sse));
    let wire = limited(&server);
    handshake(&wire).await;
    server.push_fault(Fault::on_rpc("tools/list", FaultAction::SseNeverEndingLine).times(1));
    let (result, growth) = peak_growth(wire.request(request(2, "tools/list", None))).await;
    let error = result.unwrap_err();
    assert!(error.is_limit(), "{error}");
    assert!(growth < BOUND, "heap grew {growth} bytes");
    wire.request(request(3, "tools/list", None)).await.unwrap();
}

#[tokio::test]
async fn defaults_are_documented_values() {
    let config = TransportConfig::default();
    assert_eq!(config.max_json_body, 8 * 1024 * 1024);
    assert_eq!(config.max_sse_event, 8 * 1024 * 1024);
    assert_eq!(config.max_session_id_len, 512);
}
