//! STUB (replaced by the helper's version).
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncRead, AsyncReadExt};
/// Tail.
#[derive(Clone)]
pub(crate) struct StderrTail {
    inner: Arc<Mutex<Vec<u8>>>,
    max: usize,
    done: Arc<tokio::sync::Notify>,
    closed: Arc<std::sync::atomic::AtomicBool>,
}
impl StderrTail {
    pub(crate) fn new(max: usize) -> Self {
        StderrTail {
            inner: Arc::default(),
            max,
            done: Arc::default(),
            closed: Arc::default(),
        }
    }
    pub(crate) fn text(&self) -> String {
        String::from_utf8_lossy(&self.inner.lock().unwrap()).into_owned()
    }
    pub(crate) async fn closed(&self) {
        loop {
            let n = self.done.notified();
            if self.closed.load(std::sync::atomic::Ordering::Acquire) {
                return;
            }
            n.await;
        }
    }
}
pub(crate) async fn drain(mut stderr: impl AsyncRead + Unpin, tail: StderrTail, _server: Arc<str>) {
    let mut buf = [0u8; 4096];
    while let Ok(n) = stderr.read(&mut buf).await {
        if n == 0 {
            break;
        }
        let mut t = tail.inner.lock().unwrap();
        t.extend_from_slice(&buf[..n]);
        let l = t.len();
        if l > tail.max {
            t.drain(..l - tail.max);
        }
    }
    tail.closed
        .store(true, std::sync::atomic::Ordering::Release);
    tail.done.notify_waiters();
}
