//! The owned client's TLS configuration: the roots it trusts and the
//! identity it shows a server that asks for one (mTLS).
//!
//! The system's roots come from `rustls-native-certs`, not
//! `rustls-platform-verifier`: it gives plain root certificates, which sit
//! in one `RootCertStore` beside the bundled Mozilla roots and the caller's
//! extra ones, under rustls' own WebPKI verifier (so certificate errors
//! read the same whichever root failed); it reads `SSL_CERT_FILE` and
//! `SSL_CERT_DIR` as OpenSSL does; and on Linux it adds only
//! `openssl-probe` to a build. The platform verifier hands verification to
//! the OS instead, which does not combine with an extra root store on every
//! platform and needs set-up on Android.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use http::Uri;
use hyper::rt::{Read, ReadBufCursor, Write};
use hyper_util::client::legacy::connect::{Connected, Connection};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tower::Service;

use crate::error::{BoxError, Error, Result};
use crate::sync::lock;

/// A client certificate chain and its key, PEM encoded, as given: parsed
/// when the client is built. `Debug` shows neither.
#[derive(Clone, PartialEq, Eq, Hash)]
pub(super) struct ClientIdentity {
    pub(super) cert_chain_pem: Vec<u8>,
    pub(super) key_pem: Vec<u8>,
}

impl fmt::Debug for ClientIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientIdentity")
            .field(
                "cert_chain_pem",
                &format_args!("{} bytes", self.cert_chain_pem.len()),
            )
            .field("key_pem", &"<redacted>")
            .finish()
    }
}

/// What a client trusts and shows.
pub(super) struct Trust<'a> {
    /// The Mozilla roots bundled by webpki-roots.
    pub(super) built_in_roots: bool,
    /// The system's roots (or `SSL_CERT_FILE` / `SSL_CERT_DIR`).
    pub(super) system_roots: bool,
    /// More roots, DER encoded.
    pub(super) extra_roots: &'a [Vec<u8>],
    pub(super) identity: Option<&'a ClientIdentity>,
}

impl Trust<'_> {
    pub(super) fn client_config(&self) -> Result<rustls::ClientConfig> {
        let mut roots = rustls::RootCertStore::empty();
        if self.built_in_roots {
            roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        }
        if self.system_roots {
            add_system_roots(&mut roots);
        }
        for der in self.extra_roots {
            roots
                .add(CertificateDer::from(der.clone()))
                .map_err(|e| Error::builder("invalid root certificate").with_source(e))?;
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| Error::builder("TLS configuration").with_source(e))?
            .with_root_certificates(roots);
        match self.identity {
            None => Ok(config.with_no_client_auth()),
            Some(identity) => {
                let (chain, key) = identity.parse()?;
                config.with_client_auth_cert(chain, key).map_err(|e| {
                    Error::builder("the client certificate and key do not go together")
                        .with_source(e)
                })
            }
        }
    }
}

impl ClientIdentity {
    fn parse(&self) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)> {
        let chain = CertificateDer::pem_slice_iter(&self.cert_chain_pem)
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| {
                Error::builder("the client certificate is not valid PEM").with_source(e)
            })?;
        if chain.is_empty() {
            return Err(Error::builder(
                "the client certificate PEM holds no CERTIFICATE section",
            ));
        }
        // No source: the PEM parser's error may quote the key's text.
        let key = PrivateKeyDer::from_pem_slice(&self.key_pem).map_err(|_| {
            Error::builder("the client key is not a PEM private key (PKCS#8, PKCS#1 or SEC1)")
        })?;
        Ok((chain, key))
    }
}

/// The system's roots, read as OpenSSL reads them: `SSL_CERT_FILE` and
/// `SSL_CERT_DIR` when set, else the platform's store. One that cannot be
/// read or parsed is skipped with a warning, as a browser would: the other
/// roots still work, and a server it was needed for fails with "not
/// trusted".
///
/// Read once per process, and again when either variable changes: reading
/// and parsing a distribution's bundle takes milliseconds (about 8 ms for
/// Debian's in a release build), too much for every client a host builds.
fn add_system_roots(roots: &mut rustls::RootCertStore) {
    type Anchors = Arc<[rustls::pki_types::TrustAnchor<'static>]>;
    static LOADED: Mutex<Option<(Variables, Anchors)>> = Mutex::new(None);
    type Variables = [Option<std::ffi::OsString>; 2];

    let variables = ["SSL_CERT_FILE", "SSL_CERT_DIR"].map(std::env::var_os);
    let mut loaded = lock(&LOADED);
    let anchors = match &*loaded {
        Some((read_with, anchors)) if *read_with == variables => anchors.clone(),
        _ => {
            let anchors: Anchors = read_system_roots().roots.into();
            *loaded = Some((variables, anchors.clone()));
            anchors
        }
    };
    drop(loaded);
    roots.roots.extend(anchors.iter().cloned());
}

fn read_system_roots() -> rustls::RootCertStore {
    let mut roots = rustls::RootCertStore::empty();
    let loaded = rustls_native_certs::load_native_certs();
    for error in &loaded.errors {
        tracing::warn!(%error, "a system root certificate could not be read");
    }
    let (added, ignored) = roots.add_parsable_certificates(loaded.certs);
    if ignored > 0 {
        tracing::warn!(
            ignored,
            "system root certificates that do not parse were skipped"
        );
    }
    tracing::debug!(added, "system root certificates");
    roots
}

/// Destinations whose alert is remembered, at most: past it the record
/// starts over (an error loses its words, nothing leaks).
const MAX_ALERTS: usize = 64;
/// How long an alert explains a failed exchange.
const ALERT_FRESH: Duration = Duration::from_secs(10);

/// The TLS alerts servers sent after the handshake, by `host:port`.
///
/// With TLS 1.3 a server checks our client certificate after our side of
/// the handshake is done, so its refusal ("certificate required", "unknown
/// CA") arrives as the connection's first read, which hyper reports to the
/// waiting request only as "connection closed". The owned client looks
/// here when an exchange fails, so the error names the refusal.
#[derive(Clone, Debug, Default)]
pub(super) struct Alerts(Arc<Mutex<HashMap<Box<str>, Noted>>>);

/// An alert, and when it was read.
type Noted = (Instant, rustls::Error);

impl Alerts {
    fn record(&self, key: &str, alert: rustls::Error) {
        let mut alerts = lock(&self.0);
        if alerts.len() >= MAX_ALERTS && !alerts.contains_key(key) {
            alerts.clear();
        }
        alerts.insert(key.into(), (Instant::now(), alert));
    }

    /// The alert `uri`'s server sent lately, if any (taken: it explains one
    /// failure).
    pub(super) fn take(&self, uri: &Uri) -> Option<rustls::Error> {
        let mut alerts = lock(&self.0);
        if alerts.is_empty() {
            return None;
        }
        let (at, alert) = alerts.remove(key(uri)?.as_str())?;
        (at.elapsed() < ALERT_FRESH).then_some(alert)
    }
}

/// `host:port` of `uri`.
fn key(uri: &Uri) -> Option<String> {
    let host = uri.host()?;
    let port = uri
        .port_u16()
        .unwrap_or(if uri.scheme_str() == Some("https") {
            443
        } else {
            80
        });
    Some(format!("{host}:{port}"))
}

/// An exchange that failed because the server ended the TLS session with
/// an alert: the alert is its cause, for the error's words.
#[derive(Debug)]
pub(crate) struct ServerAlert {
    alert: rustls::Error,
    /// What hyper said ("connection closed"), for `Debug`.
    #[allow(dead_code)]
    exchange: BoxError,
}

impl ServerAlert {
    pub(super) fn new(alert: rustls::Error, exchange: BoxError) -> Self {
        ServerAlert { alert, exchange }
    }
}

impl fmt::Display for ServerAlert {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the server ended the TLS session")
    }
}

impl std::error::Error for ServerAlert {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.alert)
    }
}

/// Wraps the TLS connector: each connection notes a TLS error it reads in
/// [`Alerts`].
#[derive(Clone, Debug)]
pub(crate) struct AlertConnector<C> {
    inner: C,
    alerts: Alerts,
}

impl<C> AlertConnector<C> {
    pub(super) fn new(inner: C, alerts: Alerts) -> Self {
        AlertConnector { inner, alerts }
    }
}

type Connecting<S> = Pin<Box<dyn Future<Output = Result<AlertStream<S>, BoxError>> + Send>>;

impl<C> Service<Uri> for AlertConnector<C>
where
    C: Service<Uri, Error = BoxError>,
    C::Future: Send + 'static,
    C::Response: Send + 'static,
{
    type Response = AlertStream<C::Response>;
    type Error = BoxError;
    type Future = Connecting<C::Response>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, dst: Uri) -> Self::Future {
        let key = key(&dst).map(Box::from);
        let alerts = self.alerts.clone();
        let connecting = self.inner.call(dst);
        Box::pin(async move {
            let io = connecting.await?;
            Ok(AlertStream {
                io,
                key,
                alerts,
                write_error: None,
            })
        })
    }
}

/// A connection of an [`AlertConnector`].
#[derive(Debug)]
pub(crate) struct AlertStream<S> {
    io: S,
    key: Option<Box<str>>,
    alerts: Alerts,
    /// A write that failed on a reset connection, reported once the
    /// bytes that came before the reset are read.
    write_error: Option<io::Error>,
}

impl<S> AlertStream<S> {
    /// Notes the TLS error a read failed with.
    fn note(&self, polled: &Poll<io::Result<()>>) {
        if let Poll::Ready(Err(error)) = polled {
            // tokio-rustls reports a TLS error as the `io::Error` around it.
            let tls = error
                .get_ref()
                .and_then(|inner| inner.downcast_ref::<rustls::Error>());
            if let (Some(tls), Some(key)) = (tls, &self.key) {
                self.alerts.record(key, tls.clone());
            }
        }
    }
}

impl<S: Read + Write + Unpin> AlertStream<S> {
    /// After a write: when the server reset the connection (it may have
    /// refused us with an alert and closed, HTTP/2 writing its preface
    /// before it reads), the write's error waits until the bytes that
    /// arrived before the reset are read, for the alert among them. A reset
    /// socket is always readable, so this waits for the reactor's next
    /// turn, no longer; the connection is lost anyway, so the data read is
    /// dropped.
    fn after_write<T>(
        &mut self,
        cx: &mut Context<'_>,
        polled: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        match polled {
            Poll::Ready(Err(error))
                if self.key.is_some()
                    && matches!(
                        error.kind(),
                        io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset
                    ) =>
            {
                self.write_error = Some(error);
                self.drain(cx)
            }
            other => other,
        }
    }

    /// Reads for the alert (a few bounded reads), then fails with the
    /// write's error.
    fn drain<T>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        let mut scratch = [std::mem::MaybeUninit::<u8>::uninit(); 512];
        for _ in 0..4 {
            let mut buf = hyper::rt::ReadBuf::uninit(&mut scratch);
            let read = Pin::new(&mut self.io).poll_read(cx, buf.unfilled());
            self.note(&read);
            match read {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Ok(())) if !buf.filled().is_empty() => continue,
                Poll::Ready(_) => break,
            }
        }
        let error = self
            .write_error
            .take()
            .unwrap_or_else(|| io::ErrorKind::BrokenPipe.into());
        Poll::Ready(Err(error))
    }
}

impl<S: Read + Unpin> Read for AlertStream<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.io).poll_read(cx, buf);
        self.note(&polled);
        polled
    }
}

impl<S: Read + Write + Unpin> Write for AlertStream<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if self.write_error.is_some() {
            return self.drain(cx);
        }
        let polled = Pin::new(&mut self.io).poll_write(cx, buf);
        self.after_write(cx, polled)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.write_error.is_some() {
            return self.drain(cx);
        }
        let polled = Pin::new(&mut self.io).poll_flush(cx);
        self.after_write(cx, polled)
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
        if self.write_error.is_some() {
            return self.drain(cx);
        }
        let polled = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        self.after_write(cx, polled)
    }
}

impl<S: Connection> Connection for AlertStream<S> {
    fn connected(&self) -> Connected {
        self.io.connected()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn identity(cert: &[u8], key: &[u8]) -> ClientIdentity {
        ClientIdentity {
            cert_chain_pem: cert.to_vec(),
            key_pem: key.to_vec(),
        }
    }

    fn trust(identity: &ClientIdentity) -> Result<rustls::ClientConfig> {
        Trust {
            built_in_roots: false,
            system_roots: false,
            extra_roots: &[],
            identity: Some(identity),
        }
        .client_config()
    }

    #[test]
    fn a_client_identity_that_does_not_parse_is_a_builder_error_that_hides_the_key() {
        let key = "-----BEGIN PRIVATE KEY-----\nKEY-SECRET\n-----END PRIVATE KEY-----\n";
        for (id, words) in [
            (identity(b"", key.as_bytes()), "no CERTIFICATE"),
            (identity(b"not pem", key.as_bytes()), "no CERTIFICATE"),
            (
                identity(
                    b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
                    key.as_bytes(),
                ),
                "not a PEM private key",
            ),
        ] {
            let error = trust(&id).unwrap_err();
            assert!(error.is_builder(), "{error}");
            let shown = format!("{error} {error:?} {id:?}");
            assert!(shown.contains(words), "{shown}");
            assert!(!shown.contains("KEY-SECRET"), "{shown}");
        }
    }
}
