//! What every test kit server does the same way: a listener on
//! `127.0.0.1:0`, a thread with its own runtime, and an accept loop that
//! ends, with every connection, on a cancellation.

use std::future::Future;
use std::net::SocketAddr;
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::net::TcpStream;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// A non-blocking listener on `127.0.0.1:0`, and its address.
///
/// # Panics
///
/// If the socket cannot be bound.
pub(super) fn bind_loopback() -> (std::net::TcpListener, SocketAddr) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("testkit: bind 127.0.0.1:0");
    listener
        .set_nonblocking(true)
        .expect("testkit: set_nonblocking");
    let addr = listener.local_addr().expect("testkit: local_addr");
    (listener, addr)
}

/// Runs `serve` to its end on a thread named `name`, in `runtime`, then
/// gives the runtime's remaining tasks 5 s.
pub(super) fn spawn_thread(
    name: &str,
    runtime: tokio::runtime::Runtime,
    serve: impl Future<Output = ()> + Send + 'static,
) -> JoinHandle<()> {
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            super::counting::mark_server_thread();
            runtime.block_on(serve);
            // Drops every remaining task (stream producers, h2 streams).
            runtime.shutdown_timeout(Duration::from_secs(5));
        })
        .expect("testkit: spawn thread")
}

/// Accepts connections (no delay on each) and serves each with `serve` in
/// a task of its own, until `shutdown`; then closes the listener, calls
/// `stopped`, and aborts and joins the connections.
pub(super) async fn accept_until<F, Fut>(
    std_listener: std::net::TcpListener,
    shutdown: &CancellationToken,
    mut serve: F,
    stopped: impl FnOnce(),
) where
    F: FnMut(TcpStream) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let listener =
        tokio::net::TcpListener::from_std(std_listener).expect("testkit: register listener");
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            () = shutdown.cancelled() => break,
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
            accepted = listener.accept() => {
                let Ok((tcp, _peer)) = accepted else {
                    // Out of descriptors or similar: back off a little
                    // instead of spinning.
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    continue;
                };
                let _ = tcp.set_nodelay(true);
                conns.spawn(serve(tcp));
            }
        }
    }
    drop(listener);
    stopped();
    conns.abort_all();
    while conns.join_next().await.is_some() {}
}
