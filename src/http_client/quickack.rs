//! TCP connections that acknowledge what they receive at once.
//!
//! Many MCP servers leave Nagle's algorithm on (axum's and most Python
//! servers' default). They write a response's head and its first SSE event
//! in separate small segments; Nagle holds the second until the first is
//! acknowledged. Linux, seeing a request/response ("pingpong") pattern on a
//! kept-alive connection, delays that acknowledgement by up to 40 ms. The
//! result is a stall of about 40 ms on every streamed response over a pooled
//! connection, while a fresh connection (still in quick-ack mode) does not
//! stall. Re-arming `TCP_QUICKACK` after each read that returned data makes
//! the kernel acknowledge at once, so a pooled connection never stalls on
//! such servers. It costs one `setsockopt` per read, and is a no-op on
//! systems without the option.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use hyper::rt::{Read, ReadBufCursor, Write};
use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tower::Service;

/// An [`HttpConnector`] whose connections re-arm `TCP_QUICKACK` after each
/// read (Linux and Android; elsewhere it is the plain connector): the
/// owned client's fix for servers that leave Nagle on, for a hyper-util
/// client of your own that you lend to sessions.
///
/// ```
/// use hyper_util::client::legacy::Client;
/// use hyper_util::client::legacy::connect::HttpConnector;
/// use hyper_util::rt::TokioExecutor;
/// use mcp_scoped_http::HttpClient;
/// use mcp_scoped_http::client::{QuickAckConnector, RequestBody};
///
/// let mut http = HttpConnector::new();
/// http.set_nodelay(true);
/// let hyper = Client::builder(TokioExecutor::new())
///     .build::<_, RequestBody>(QuickAckConnector::new(http));
/// let lent = HttpClient::borrowed(hyper);
/// # let _ = lent;
/// ```
///
/// For `https`, wrap it as any `HttpConnector` (hyper-rustls:
/// `HttpsConnectorBuilder::...().wrap_connector(QuickAckConnector::new(http))`).
#[derive(Clone, Debug)]
pub struct QuickAckConnector {
    inner: HttpConnector,
    enabled: bool,
}

impl QuickAckConnector {
    /// Wraps `inner`: its connections acknowledge every read at once.
    pub fn new(inner: HttpConnector) -> Self {
        QuickAckConnector {
            inner,
            enabled: true,
        }
    }

    /// Wraps `inner`, re-arming only when `enabled` (the owned client's
    /// `tcp_quickack` setting).
    pub(super) fn with_enabled(inner: HttpConnector, enabled: bool) -> Self {
        QuickAckConnector { inner, enabled }
    }
}

impl Service<http::Uri> for QuickAckConnector {
    type Response = QuickAckStream;
    type Error = <HttpConnector as Service<http::Uri>>::Error;
    type Future = QuickAckConnecting;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, uri: http::Uri) -> Self::Future {
        QuickAckConnecting {
            inner: self.inner.call(uri),
            enabled: self.enabled,
        }
    }
}

/// The connect future of a [`QuickAckConnector`]: hyper-util's, with the
/// stream wrapped.
pub struct QuickAckConnecting {
    inner: <HttpConnector as Service<http::Uri>>::Future,
    enabled: bool,
}

impl std::fmt::Debug for QuickAckConnecting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QuickAckConnecting")
            .field("enabled", &self.enabled)
            .finish_non_exhaustive()
    }
}

impl Future for QuickAckConnecting {
    type Output = Result<QuickAckStream, <HttpConnector as Service<http::Uri>>::Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let quickack = self.enabled;
        // hyper-util's connect future is `Unpin` (it boxes its state).
        Pin::new(&mut self.inner)
            .poll(cx)
            .map_ok(|io| QuickAckStream {
                io,
                quickack,
                proxied: false,
            })
    }
}

/// A TCP connection from a [`QuickAckConnector`].
#[derive(Debug)]
pub struct QuickAckStream {
    io: TokioIo<TcpStream>,
    quickack: bool,
    /// Connected to an HTTP proxy (not tunnelled): hyper-util then sends
    /// requests in absolute form.
    proxied: bool,
}

impl QuickAckStream {
    /// This connection goes to an HTTP proxy for its requests.
    #[cfg(feature = "proxy")]
    pub(super) fn into_proxied(mut self) -> Self {
        self.proxied = true;
        self
    }

    fn acknowledge_now(&mut self) {
        #[cfg(any(target_os = "linux", target_os = "android"))]
        if self.quickack {
            // Best effort: on error (say, the socket is already shut down)
            // the connection behaves like any other; stop trying.
            let socket = socket2::SockRef::from(self.io.inner());
            if socket.set_tcp_quickack(true).is_err() {
                self.quickack = false;
            }
        }
    }
}

impl Read for QuickAckStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.io).poll_read(cx, buf);
        // Data arrived (or EOF, where the call is harmless): acknowledge it
        // now rather than when the delayed-ACK timer fires.
        if matches!(polled, Poll::Ready(Ok(()))) {
            self.acknowledge_now();
        }
        polled
    }
}

impl Write for QuickAckStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }
}

impl Connection for QuickAckStream {
    fn connected(&self) -> Connected {
        self.io.connected().proxy(self.proxied)
    }
}
