//! The owned client's TLS configuration: the roots it trusts and the
//! identity it shows a server that asks for one (mTLS).
//!
//! The system's roots come from `rustls-native-certs`, not
//! `rustls-platform-verifier`: it gives plain root certificates, which sit
//! in one `RootCertStore` beside the bundled Mozilla roots and the caller's
//! extra ones, under rustls' own WebPKI verifier (so certificate errors
//! read the same whichever root failed); and on Linux it adds only
//! `openssl-probe` to a build. The platform verifier hands verification to
//! the OS instead, which does not combine with an extra root store on every
//! platform and needs set-up on Android. `SSL_CERT_FILE` and
//! `SSL_CERT_DIR` are read here rather than by rustls-native-certs, which
//! reads whatever they name to its end (a FIFO, `/dev/zero`).

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
    /// The crypto provider (see `tls_provider::choose`).
    pub(super) provider: &'a Arc<rustls::crypto::CryptoProvider>,
}

impl Trust<'_> {
    /// The configuration, with `system` (the system's roots, when they are
    /// trusted and read).
    pub(super) fn client_config(&self, system: &[Anchor]) -> Result<rustls::ClientConfig> {
        let mut roots = rustls::RootCertStore::empty();
        if self.built_in_roots {
            roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        }
        if self.system_roots {
            roots.roots.extend(system.iter().cloned());
        }
        for der in self.extra_roots {
            roots
                .add(CertificateDer::from(der.clone()))
                .map_err(|e| Error::builder("invalid root certificate").with_source(e))?;
        }
        let config = rustls::ClientConfig::builder_with_provider(self.provider.clone())
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

/// The most bytes read from `SSL_CERT_FILE` and the files in
/// `SSL_CERT_DIR`, all together: 16 MiB, some 80 times a distribution's
/// bundle. A trust store past it is refused (the `https` connection that
/// needed it fails naming the variable and the limit), not read.
pub const MAX_TRUST_STORE_BYTES: u64 = 16 << 20;

/// The most files read from the directories `SSL_CERT_DIR` names: 4096,
/// some 15 times a distribution's `/etc/ssl/certs` (links to a file already
/// read do not count). A directory with more is refused, not read in part,
/// so that what is trusted never depends on the order a directory lists;
/// so is one that lists more than four times as many entries (links and
/// others included), each of which costs a `stat`.
pub const MAX_TRUST_STORE_FILES: usize = 4096;

/// A trust store that could not be used: `SSL_CERT_FILE` or
/// `SSL_CERT_DIR` names something that is not a regular file (a FIFO, a
/// device, a directory for `SSL_CERT_FILE`), or more than
/// [`MAX_TRUST_STORE_BYTES`] or [`MAX_TRUST_STORE_FILES`]. The `https`
/// connection that needed it fails with this as its cause.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TrustStoreError {
    message: Arc<str>,
}

impl TrustStoreError {
    fn new(message: String) -> Self {
        TrustStoreError {
            message: message.into(),
        }
    }
}

impl fmt::Display for TrustStoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for TrustStoreError {}

/// The system's roots, read as OpenSSL reads them: `SSL_CERT_FILE` and
/// `SSL_CERT_DIR` when set, else the platform's store. One that cannot be
/// opened or parsed is skipped with a warning, as a browser would: the
/// other roots still work, and a server it was needed for fails with "not
/// trusted". One that is not a regular file, or past the limits, is an
/// error: reading it could block or take all memory.
///
/// Read once per process, and again when either variable changes: reading
/// and parsing a distribution's bundle takes milliseconds (about 8 ms for
/// Debian's in a release build), too much for every client a host builds.
/// Blocking: call it off the async workers.
fn system_roots() -> std::result::Result<Anchors, TrustStoreError> {
    static LOADED: Mutex<Option<(Variables, Anchors)>> = Mutex::new(None);
    type Variables = [Option<std::ffi::OsString>; 2];

    let variables = [ENV_CERT_FILE, ENV_CERT_DIR].map(std::env::var_os);
    let mut loaded = lock(&LOADED);
    let anchors = match &*loaded {
        Some((read_with, anchors)) if *read_with == variables => anchors.clone(),
        _ => {
            // A failure is not kept here: the caller keeps it for its client.
            let anchors: Anchors = read_system_roots(&variables)?.roots.into();
            *loaded = Some((variables, anchors.clone()));
            anchors
        }
    };
    drop(loaded);
    Ok(anchors)
}

/// A trusted root.
pub(super) type Anchor = rustls::pki_types::TrustAnchor<'static>;
/// The system's roots, shared.
type Anchors = Arc<[Anchor]>;

const ENV_CERT_FILE: &str = "SSL_CERT_FILE";
const ENV_CERT_DIR: &str = "SSL_CERT_DIR";

fn read_system_roots(
    variables: &[Option<std::ffi::OsString>; 2],
) -> std::result::Result<rustls::RootCertStore, TrustStoreError> {
    let mut roots = rustls::RootCertStore::empty();
    let certs = match variables {
        [None, None] => {
            let loaded = rustls_native_certs::load_native_certs();
            for error in &loaded.errors {
                tracing::warn!(%error, "a system root certificate could not be read");
            }
            loaded.certs
        }
        [file, dirs] => read_named_roots(file.as_deref(), dirs.as_deref())?,
    };
    let (added, ignored) = roots.add_parsable_certificates(certs);
    if ignored > 0 {
        tracing::warn!(
            ignored,
            "system root certificates that do not parse were skipped"
        );
    }
    tracing::debug!(added, "system root certificates");
    Ok(roots)
}

/// What the bounded reads have used so far.
#[derive(Default)]
struct Budget {
    bytes: u64,
    files: usize,
    /// `(device, inode)` of each file read: the links `openssl rehash`
    /// makes are read once.
    #[cfg(unix)]
    seen: std::collections::HashSet<(u64, u64)>,
}

/// `SSL_CERT_FILE` and `SSL_CERT_DIR` read here, not by
/// rustls-native-certs, which reads whatever they name to its end.
fn read_named_roots(
    file: Option<&std::ffi::OsStr>,
    dirs: Option<&std::ffi::OsStr>,
) -> std::result::Result<Vec<CertificateDer<'static>>, TrustStoreError> {
    let mut budget = Budget::default();
    let mut certs = Vec::new();
    if let Some(file) = file {
        let path = std::path::Path::new(file);
        if let Some(pem) = read_bounded(ENV_CERT_FILE, path, &mut budget, true)? {
            parse_pem(path, &pem, &mut certs);
        }
    }
    for dir in dirs.into_iter().flat_map(std::env::split_paths) {
        if dir.as_os_str().is_empty() {
            continue;
        }
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(error) => {
                tracing::warn!(%error, dir = %dir.display(), "SSL_CERT_DIR could not be listed");
                continue;
            }
        };
        let mut listed = 0usize;
        for entry in entries {
            let Ok(entry) = entry else { continue };
            // Each entry costs a stat even when skipped: count them too, so
            // a directory of millions of links is not walked to its end.
            listed += 1;
            if listed > MAX_TRUST_STORE_FILES * 4 {
                return Err(too_many_files(&dir));
            }
            let path = entry.path();
            if let Some(pem) = read_bounded(ENV_CERT_DIR, &path, &mut budget, false)? {
                parse_pem(&path, &pem, &mut certs);
            }
        }
    }
    Ok(certs)
}

fn too_many_files(dir: &std::path::Path) -> TrustStoreError {
    TrustStoreError::new(format!(
        "SSL_CERT_DIR names {}, which holds more than the {MAX_TRUST_STORE_FILES} files \
         a trust store may have (MAX_TRUST_STORE_FILES)",
        dir.display()
    ))
}

fn parse_pem(path: &std::path::Path, pem: &[u8], certs: &mut Vec<CertificateDer<'static>>) {
    for cert in CertificateDer::pem_slice_iter(pem) {
        match cert {
            Ok(cert) => certs.push(cert),
            Err(error) => {
                tracing::warn!(%error, path = %path.display(), "a root certificate file does not parse");
            }
        }
    }
}

/// Reads `path` within `budget`: `None` (with a warning) when it cannot be
/// opened, or (in a directory) is not a regular file or was read already.
/// `named`: `variable` names this path itself, so anything but a regular
/// file is an error.
fn read_bounded(
    variable: &str,
    path: &std::path::Path,
    budget: &mut Budget,
    named: bool,
) -> std::result::Result<Option<Vec<u8>>, TrustStoreError> {
    use std::io::Read as _;

    let file = match open_nonblocking(path) {
        Ok(file) => file,
        Err(error) => {
            tracing::warn!(%error, variable, path = %path.display(), "a root certificate file could not be opened");
            return Ok(None);
        }
    };
    // The opened file's type, not the path's: it cannot change under us.
    let metadata = file.metadata().map_err(|error| {
        TrustStoreError::new(format!(
            "{variable} names {}, which could not be examined: {error}",
            path.display()
        ))
    })?;
    if !metadata.is_file() {
        if named {
            return Err(TrustStoreError::new(format!(
                "{variable} names {}, which is not a regular file",
                path.display()
            )));
        }
        return Ok(None);
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        if !budget.seen.insert((metadata.dev(), metadata.ino())) {
            return Ok(None);
        }
    }
    if !named {
        budget.files += 1;
        if budget.files > MAX_TRUST_STORE_FILES {
            return Err(too_many_files(path.parent().unwrap_or(path)));
        }
    }
    let over = || {
        TrustStoreError::new(format!(
            "{variable} names {}, which takes the trust store past its \
             {MAX_TRUST_STORE_BYTES} bytes (MAX_TRUST_STORE_BYTES)",
            path.display()
        ))
    };
    let left = MAX_TRUST_STORE_BYTES - budget.bytes;
    if metadata.len() > left {
        return Err(over());
    }
    // One byte past what is left, so a file that grew since its `fstat` is
    // still caught.
    let mut pem = Vec::with_capacity(metadata.len() as usize);
    if let Err(error) = file.take(left + 1).read_to_end(&mut pem) {
        tracing::warn!(%error, variable, path = %path.display(), "a root certificate file could not be read");
        return Ok(None);
    }
    if pem.len() as u64 > left {
        return Err(over());
    }
    budget.bytes += pem.len() as u64;
    Ok(Some(pem))
}

/// Opens `path` for reading without blocking on it: a FIFO with no writer
/// would otherwise block `open` itself.
#[cfg(unix)]
fn open_nonblocking(path: &std::path::Path) -> io::Result<std::fs::File> {
    use rustix::fs::{Mode, OFlags};
    let fd = rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY,
        Mode::empty(),
    )?;
    Ok(std::fs::File::from(fd))
}

#[cfg(not(unix))]
fn open_nonblocking(path: &std::path::Path) -> io::Result<std::fs::File> {
    std::fs::File::open(path)
}

/// The owned client's TLS settings, turned into a rustls configuration when
/// the first `https` connection needs one: an `http://` client never reads
/// the system's trust store, and the read runs inside the connect future,
/// under the exchange's deadline.
pub(super) struct LazyTls {
    pub(super) built_in_roots: bool,
    pub(super) system_roots: bool,
    pub(super) extra_roots: Vec<Vec<u8>>,
    pub(super) identity: Option<ClientIdentity>,
    provider: Arc<rustls::crypto::CryptoProvider>,
    /// Made once, success or failure: a trust store refused for this
    /// client is refused for its every connection, in the same words,
    /// without being read again. A read the deadline cut short is not
    /// kept, and the next connection tries again.
    config: tokio::sync::OnceCell<std::result::Result<Arc<rustls::ClientConfig>, BoxedShared>>,
}

/// A provider in `Debug`: which key exchange it offers first, not its
/// every table.
struct ProviderName<'a>(&'a rustls::crypto::CryptoProvider);

impl fmt::Debug for ProviderName<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let first = self.0.kx_groups.first().map(|group| group.name());
        write!(f, "CryptoProvider {{ first key exchange: {first:?}, .. }}")
    }
}

/// A failure shared by a client's connections.
type BoxedShared = Arc<dyn std::error::Error + Send + Sync>;

impl fmt::Debug for LazyTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LazyTls")
            .field("built_in_roots", &self.built_in_roots)
            .field("system_roots", &self.system_roots)
            .field("extra_roots", &self.extra_roots.len())
            .field("identity", &self.identity)
            .field("provider", &ProviderName(&self.provider))
            .finish_non_exhaustive()
    }
}

impl LazyTls {
    /// Chooses the provider and checks what can be checked without reading
    /// files (the extra roots, the identity): an invalid one fails the
    /// build, as before.
    pub(super) fn new(
        built_in_roots: bool,
        system_roots: bool,
        extra_roots: Vec<Vec<u8>>,
        identity: Option<ClientIdentity>,
        provider: Option<&Arc<rustls::crypto::CryptoProvider>>,
    ) -> Result<Self> {
        let lazy = LazyTls {
            built_in_roots,
            system_roots,
            extra_roots,
            identity,
            provider: crate::tls_provider::choose(provider)?,
            config: tokio::sync::OnceCell::new(),
        };
        lazy.trust().client_config(&[])?;
        Ok(lazy)
    }

    fn trust(&self) -> Trust<'_> {
        Trust {
            built_in_roots: self.built_in_roots,
            system_roots: self.system_roots,
            extra_roots: &self.extra_roots,
            identity: self.identity.as_ref(),
            provider: &self.provider,
        }
    }

    async fn config(self: &Arc<Self>) -> std::result::Result<Arc<rustls::ClientConfig>, BoxError> {
        let made = self
            .config
            .get_or_init(|| {
                let lazy = self.clone();
                async move {
                    // Blocking file reads, off the async workers.
                    let made = tokio::task::spawn_blocking(move || {
                        let system = if lazy.system_roots {
                            system_roots().map_err(|e| Arc::new(e) as BoxedShared)?
                        } else {
                            Anchors::from([])
                        };
                        let config = lazy
                            .trust()
                            .client_config(&system)
                            .map_err(|e| Arc::new(e) as BoxedShared)?;
                        Ok(Arc::new(config))
                    })
                    .await;
                    made.unwrap_or_else(|e| Err(Arc::new(e) as BoxedShared))
                }
            })
            .await;
        made.clone().map_err(|e| Box::new(Shared(e)) as BoxError)
    }
}

/// A [`LazyTls`] failure, for one connection's error.
#[derive(Debug)]
struct Shared(BoxedShared);

impl fmt::Display for Shared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for Shared {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

/// The owned client's connector: `http` straight through `tcp`, `https`
/// through hyper-rustls with [`LazyTls`]'s configuration, made on the first
/// `https` connection.
#[derive(Clone, Debug)]
pub(crate) struct LazyHttps<T> {
    tcp: T,
    tls: Arc<LazyTls>,
}

impl<T> LazyHttps<T> {
    pub(super) fn new(tcp: T, tls: Arc<LazyTls>) -> Self {
        LazyHttps { tcp, tls }
    }
}

type LazyConnecting<S> =
    Pin<Box<dyn Future<Output = Result<hyper_rustls::MaybeHttpsStream<S>, BoxError>> + Send>>;

impl<T> Service<Uri> for LazyHttps<T>
where
    T: Service<Uri> + Clone + Send + Sync + 'static,
    T::Response: Connection + Read + Write + Send + Unpin + 'static,
    T::Future: Send + 'static,
    T::Error: Into<BoxError>,
{
    type Response = hyper_rustls::MaybeHttpsStream<T::Response>;
    type Error = BoxError;
    type Future = LazyConnecting<T::Response>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.tcp.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, dst: Uri) -> Self::Future {
        if dst.scheme() != Some(&http::uri::Scheme::HTTPS) {
            let connecting = self.tcp.call(dst);
            return Box::pin(async move {
                let io = connecting.await.map_err(Into::into)?;
                Ok(hyper_rustls::MaybeHttpsStream::Http(io))
            });
        }
        // `poll_ready` readied `self.tcp`; the clone used below is readied
        // again by `oneshot`.
        let tcp = self.tcp.clone();
        let tls = self.tls.clone();
        Box::pin(async move {
            let config = tls.config().await?;
            let https = hyper_rustls::HttpsConnectorBuilder::new()
                .with_tls_config(rustls::ClientConfig::clone(&config))
                .https_or_http()
                .enable_http1()
                .enable_http2()
                .wrap_connector(tcp);
            tower::ServiceExt::oneshot(https, dst).await
        })
    }
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
            provider: &crate::tls_provider::choose(None)?,
        }
        .client_config(&[])
    }

    #[cfg(unix)]
    #[test]
    fn a_named_trust_store_that_is_not_a_regular_file_is_refused_unread() {
        let error = read_named_roots(Some("/dev/zero".as_ref()), None).unwrap_err();
        assert_eq!(
            error.to_string(),
            "SSL_CERT_FILE names /dev/zero, which is not a regular file"
        );
        let error = read_named_roots(Some("/".as_ref()), None).unwrap_err();
        assert!(error.to_string().contains("not a regular file"), "{error}");
    }

    #[test]
    fn a_trust_store_that_cannot_be_opened_is_skipped() {
        let certs = read_named_roots(
            Some("/nonexistent/ca.pem".as_ref()),
            Some("/nonexistent".as_ref()),
        )
        .unwrap();
        assert!(certs.is_empty());
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
