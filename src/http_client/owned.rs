//! The client this crate builds and owns.

use std::future::Future;
use std::time::Duration;

use http_body_util::BodyExt;
use hyper_util::client::legacy::{Client, connect::HttpConnector};
use hyper_util::rt::TokioTimer;
use tokio_util::task::TaskTracker;

#[cfg(feature = "proxy")]
use super::proxy::{self, Proxies, ProxyConnector, ProxySetting, ProxyUrl};
use super::quickack::QuickAckConnector;
#[cfg(feature = "rustls")]
use super::tls::{AlertConnector, Alerts, ClientIdentity, LazyHttps, LazyTls, ServerAlert};
use super::{ClientOwnership, HttpClient, RequestBody};
use crate::error::{BoxError, Result};

/// Builds an owned [`HttpClient`].
///
/// Every default is listed with its setter. The client is a
/// `hyper_util::client::legacy::Client` with connection pooling; its
/// connection tasks run on a tracked executor, so
/// [`HttpClient::connection_tasks`] tells when dropping it has released them.
///
/// # TLS trust
///
/// With the `rustls` feature (a default one), a server's certificate is
/// trusted when it chains to one of: the Mozilla roots bundled by
/// webpki-roots ([`built_in_roots`](Self::built_in_roots)); the system's
/// roots, from `SSL_CERT_FILE` and
/// `SSL_CERT_DIR` when they are set, as OpenSSL reads them, else from the
/// platform's store ([`system_roots`](Self::system_roots),
/// rustls-native-certs); the roots added with
/// [`add_root_certificate`](Self::add_root_certificate). A server that
/// asks for a client certificate (mTLS) gets the one given to
/// [`client_identity`](Self::client_identity). A lent client's TLS is its
/// lender's business.
///
/// The system's roots are read when a client makes its first `https`
/// connection, inside that connection's deadline, never for `http://`
/// targets; `SSL_CERT_FILE` and `SSL_CERT_DIR` within
/// [`MAX_TRUST_STORE_BYTES`](crate::http_client::MAX_TRUST_STORE_BYTES) and
/// [`MAX_TRUST_STORE_FILES`](crate::http_client::MAX_TRUST_STORE_FILES), and only
/// regular files (see [`system_roots`](Self::system_roots)).
///
/// # Proxies
///
/// With the `proxy` feature (a default one), the client goes through the
/// proxies the environment names, read as curl reads them when the client
/// is built: `HTTPS_PROXY` for `https` destinations, `HTTP_PROXY` for
/// `http` ones, `ALL_PROXY` for both where those are unset, and `NO_PROXY`
/// for the hosts that go direct (each variable upper case first, then lower
/// case; all of them ignored in a CGI program, where `REQUEST_METHOD` is
/// set). [`proxy`](Self::proxy) names one proxy instead and
/// [`no_proxy`](Self::no_proxy) turns proxying off. An `https` destination
/// is reached through a `CONNECT` tunnel, TLS running end to end to the
/// target; a plain `http` one by sending the request to the proxy. Only
/// `http://` proxies are spoken. Credentials in a proxy URL
/// (`http://user:pass@proxy:3128`) go to the proxy alone, in
/// `Proxy-Authorization`, and never show in `Debug`, errors or traces.
/// A proxy URL (from the builder or any of the variables) that does not
/// parse, has an invalid port (past 65535, two of them) or no host, or a
/// scheme other than `http`, fails [`build`](Self::build) with an error
/// naming the variable (never its credentials): no request is sent, neither
/// direct nor anywhere else. Proxy URLs are read with the parser targets
/// are read with (WHATWG), so where a request goes is where that parser
/// says. A lent client ([`HttpClient::borrowed`]) never goes through these:
/// its proxies are its lender's business.
///
/// Behind a corporate proxy and a private CA, with a client certificate:
///
/// ```no_run
/// # #[cfg(all(feature = "proxy", feature = "rustls"))]
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use mcp_scoped_http::HttpClient;
///
/// let client = HttpClient::builder()
///     // Or nothing: HTTPS_PROXY and NO_PROXY are read by default.
///     .proxy("http://agent:secret@proxy.corp.example:3128")
///     .proxy_bypass("localhost, .internal.example")
///     // Or nothing: the system's roots and SSL_CERT_FILE are trusted.
///     .add_root_certificate(std::fs::read("corp-ca.der")?)
///     .client_identity(std::fs::read("agent.pem")?, std::fs::read("agent.key")?)
///     .build()?;
/// # drop(client);
/// # Ok(())
/// # }
/// # #[cfg(not(all(feature = "proxy", feature = "rustls")))]
/// # fn main() {}
/// ```
///
/// # Equality
///
/// Two builders are equal (and hash alike) when their settings are: every
/// setter's value, root certificates compared by their bytes. The TLS
/// configuration a builder caches for the clients it builds is no setting
/// and is left out. This is what lets a fleet (feature `fleet`) share one
/// client among the servers that ask for equal settings.
#[derive(Clone, Debug)]
#[must_use]
pub struct HttpClientBuilder {
    settings: Settings,
    /// The TLS configuration, built once for every client this builder (or
    /// a clone of it) builds; a TLS setter starts a new one.
    #[cfg(feature = "rustls")]
    tls: std::sync::Arc<std::sync::OnceLock<std::sync::Arc<LazyTls>>>,
}

/// Every setting of a builder, and nothing else: equality and hashing
/// derive from it, so a setting added here is compared without a second
/// thought (a cache, like the TLS configuration, belongs outside).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Settings {
    connect_timeout: Option<Duration>,
    pool_idle_timeout: Option<Duration>,
    pool_max_idle_per_host: usize,
    tcp_keepalive: Option<Duration>,
    tcp_quickack: bool,
    #[cfg(feature = "rustls")]
    extra_roots: Vec<Vec<u8>>,
    #[cfg(feature = "rustls")]
    built_in_roots: bool,
    #[cfg(feature = "rustls")]
    system_roots: bool,
    #[cfg(feature = "rustls")]
    client_identity: Option<ClientIdentity>,
    #[cfg(feature = "rustls")]
    crypto_provider: GivenProvider,
    #[cfg(feature = "proxy")]
    proxy: ProxySetting,
    #[cfg(feature = "proxy")]
    proxy_bypass: Option<String>,
}

/// A provider the caller gave, a setting compared by identity (a provider
/// has no equality of its own).
#[cfg(feature = "rustls")]
#[derive(Clone)]
struct GivenProvider(Option<std::sync::Arc<rustls::crypto::CryptoProvider>>);

#[cfg(feature = "rustls")]
impl PartialEq for GivenProvider {
    fn eq(&self, other: &Self) -> bool {
        match (&self.0, &other.0) {
            (None, None) => true,
            (Some(a), Some(b)) => std::sync::Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

#[cfg(feature = "rustls")]
impl Eq for GivenProvider {}

#[cfg(feature = "rustls")]
impl std::hash::Hash for GivenProvider {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.as_ref().map(std::sync::Arc::as_ptr).hash(state);
    }
}

#[cfg(feature = "rustls")]
impl std::fmt::Debug for GivenProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() { "given" } else { "default" })
    }
}

impl PartialEq for HttpClientBuilder {
    fn eq(&self, other: &Self) -> bool {
        self.settings == other.settings
    }
}

impl Eq for HttpClientBuilder {}

impl std::hash::Hash for HttpClientBuilder {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.settings.hash(state);
    }
}

impl Default for HttpClientBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl HttpClientBuilder {
    /// A builder with the documented defaults.
    pub fn new() -> Self {
        HttpClientBuilder {
            settings: Settings {
                connect_timeout: Some(Duration::from_secs(10)),
                pool_idle_timeout: Some(Duration::from_secs(30)),
                pool_max_idle_per_host: 32,
                tcp_keepalive: Some(Duration::from_secs(60)),
                tcp_quickack: true,
                #[cfg(feature = "rustls")]
                extra_roots: Vec::new(),
                #[cfg(feature = "rustls")]
                built_in_roots: true,
                #[cfg(feature = "rustls")]
                system_roots: true,
                #[cfg(feature = "rustls")]
                client_identity: None,
                #[cfg(feature = "rustls")]
                crypto_provider: GivenProvider(None),
                #[cfg(feature = "proxy")]
                proxy: ProxySetting::Environment,
                #[cfg(feature = "proxy")]
                proxy_bypass: None,
            },
            #[cfg(feature = "rustls")]
            tls: Default::default(),
        }
    }

    /// Time allowed for the TCP connect. Default: 10 s.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.settings.connect_timeout = Some(timeout);
        self
    }

    /// No limit on the TCP connect (the system's own applies).
    pub fn no_connect_timeout(mut self) -> Self {
        self.settings.connect_timeout = None;
        self
    }

    /// How long an idle pooled connection is kept. Default: 30 s.
    pub fn pool_idle_timeout(mut self, timeout: Duration) -> Self {
        self.settings.pool_idle_timeout = Some(timeout);
        self
    }

    /// Idle pooled connections are kept until the server closes them.
    pub fn no_pool_idle_timeout(mut self) -> Self {
        self.settings.pool_idle_timeout = None;
        self
    }

    /// Most idle connections kept per host. Default: 32. `0` disables pooling.
    pub fn pool_max_idle_per_host(mut self, max: usize) -> Self {
        self.settings.pool_max_idle_per_host = max;
        self
    }

    /// TCP keepalive probe interval. Default: 60 s.
    pub fn tcp_keepalive(mut self, interval: Duration) -> Self {
        self.settings.tcp_keepalive = Some(interval);
        self
    }

    /// No TCP keepalive probes.
    pub fn no_tcp_keepalive(mut self) -> Self {
        self.settings.tcp_keepalive = None;
        self
    }

    /// Whether received data is acknowledged at once (`TCP_QUICKACK`,
    /// re-armed after every read; Linux and Android only). Default: true.
    ///
    /// Servers that leave Nagle's algorithm on (axum's default, among
    /// others) send a streamed response in small segments, each held until
    /// the previous one is acknowledged; a kept-alive connection delays that
    /// acknowledgement by up to 40 ms, so every SSE answer stalls. With this
    /// on, pooled connections never stall on such servers, for one
    /// `setsockopt` per read.
    pub fn tcp_quickack(mut self, enabled: bool) -> Self {
        self.settings.tcp_quickack = enabled;
        self
    }

    /// Trusts one more root certificate (DER), for example a private CA.
    #[cfg(feature = "rustls")]
    pub fn add_root_certificate(mut self, der: impl Into<Vec<u8>>) -> Self {
        self.settings.extra_roots.push(der.into());
        self.tls = Default::default();
        self
    }

    /// Whether the Mozilla root set (webpki-roots) is trusted. Default: true.
    #[cfg(feature = "rustls")]
    pub fn built_in_roots(mut self, enabled: bool) -> Self {
        self.settings.built_in_roots = enabled;
        self.tls = Default::default();
        self
    }

    /// Whether the system's roots are trusted: the files `SSL_CERT_FILE`
    /// and `SSL_CERT_DIR` name when either is set (as OpenSSL reads them),
    /// else the platform's store (on Linux the distribution's CA bundle,
    /// where a corporate TLS-inspecting gateway's root is usually
    /// installed). Default: true.
    ///
    /// They are read when a client makes its first `https` connection
    /// (never for `http://` targets), inside that connection's deadline,
    /// once per process and again when either variable has changed since.
    /// A root file that cannot be opened is skipped with a `tracing`
    /// warning. A path that is not a regular file (a FIFO, a device, a
    /// directory for `SSL_CERT_FILE`), or a trust store past
    /// [`MAX_TRUST_STORE_BYTES`](crate::http_client::MAX_TRUST_STORE_BYTES) or
    /// [`MAX_TRUST_STORE_FILES`](crate::http_client::MAX_TRUST_STORE_FILES), is
    /// refused without being read: the client's `https` connections fail
    /// with a [`TrustStoreError`](crate::http_client::TrustStoreError) naming the
    /// variable and the path (the client keeps that outcome; build another
    /// once it is fixed).
    #[cfg(feature = "rustls")]
    pub fn system_roots(mut self, enabled: bool) -> Self {
        self.settings.system_roots = enabled;
        self.tls = Default::default();
        self
    }

    /// The certificate chain (leaf first) and private key (PKCS#8, PKCS#1 or
    /// SEC1), both PEM encoded, shown to a server that asks for a client
    /// certificate (mTLS). Default: none.
    ///
    /// PEM that does not parse, or a key that does not go with the
    /// certificate, fails [`build`](Self::build); neither shows in `Debug`
    /// or in errors.
    #[cfg(feature = "rustls")]
    pub fn client_identity(
        mut self,
        cert_chain_pem: impl Into<Vec<u8>>,
        key_pem: impl Into<Vec<u8>>,
    ) -> Self {
        self.settings.client_identity = Some(ClientIdentity {
            cert_chain_pem: cert_chain_pem.into(),
            key_pem: key_pem.into(),
        });
        self.tls = Default::default();
        self
    }

    /// The rustls crypto provider for `https` connections. Default: the
    /// process default if one is installed
    /// (`rustls::crypto::CryptoProvider::install_default`), else aws-lc-rs
    /// (feature `aws-lc-rs`, on by default: post-quantum hybrid key
    /// exchange, X25519MLKEM768, offered first), else ring (feature `ring`).
    /// With none of them, [`build`](Self::build) fails saying so.
    ///
    /// Two builders given the same `Arc` compare equal; clones of one
    /// provider in two `Arc`s do not.
    #[cfg(feature = "rustls")]
    pub fn crypto_provider(
        mut self,
        provider: std::sync::Arc<rustls::crypto::CryptoProvider>,
    ) -> Self {
        self.settings.crypto_provider = GivenProvider(Some(provider));
        self.tls = Default::default();
        self
    }

    /// The provider a builder uses when none is given to
    /// [`crypto_provider`](Self::crypto_provider): the process default,
    /// else the one a feature brings (aws-lc-rs, then ring), else an error
    /// that says how to get one. For TLS of your own (a test server, a
    /// client you lend) that should match the owned client's.
    #[cfg(feature = "rustls")]
    pub fn default_crypto_provider() -> Result<std::sync::Arc<rustls::crypto::CryptoProvider>> {
        crate::tls_provider::choose(None)
    }

    /// Sends every request through the proxy at `url` (`http://host:port`,
    /// with `user:password@` before the host if the proxy asks for them),
    /// whatever the environment says; destinations named by
    /// [`proxy_bypass`](Self::proxy_bypass) go direct. Default: the proxies
    /// the environment names (see [the type's docs](Self#proxies)).
    ///
    /// An invalid URL (an invalid port, no host), or a scheme other than
    /// `http`, fails [`build`](Self::build) with an error that does not
    /// repeat the URL.
    #[cfg(feature = "proxy")]
    pub fn proxy(mut self, url: impl Into<String>) -> Self {
        self.settings.proxy = ProxySetting::Explicit(ProxyUrl(url.into()));
        self
    }

    /// No proxy for any destination, whatever the environment says.
    #[cfg(feature = "proxy")]
    pub fn no_proxy(mut self) -> Self {
        self.settings.proxy = ProxySetting::Off;
        self
    }

    /// The destinations that go direct, in `NO_PROXY`'s syntax: host names
    /// (each with its subdomains; a leading dot is allowed), IP addresses,
    /// networks (`10.0.0.0/8`), or `*` for all. It replaces the
    /// environment's `NO_PROXY`. Default: `NO_PROXY` (or `no_proxy`) with
    /// the environment's proxies, nothing with [`proxy`](Self::proxy).
    #[cfg(feature = "proxy")]
    pub fn proxy_bypass(mut self, hosts: impl Into<String>) -> Self {
        self.settings.proxy_bypass = Some(hosts.into());
        self
    }

    /// Builds the client. Fails only on an invalid setting: a TLS root
    /// certificate or client identity that does not parse, a proxy URL (set
    /// here or in the environment) this client cannot use.
    pub fn build(&self) -> Result<HttpClient> {
        let tasks = TaskTracker::new();
        let extras = self.extras()?;
        let client = self.hyper_client_with(
            TrackedExecutor {
                tasks: tasks.clone(),
            },
            &extras,
        )?;
        Ok(HttpClient::from_parts(
            boxed(client, extras),
            ClientOwnership::Owned,
            Some(OwnedParts { tasks }),
        ))
    }

    fn extras(&self) -> Result<Extras> {
        Ok(Extras {
            #[cfg(feature = "proxy")]
            proxies: proxy::proxies(&self.settings.proxy, self.settings.proxy_bypass.as_deref())?,
            #[cfg(feature = "rustls")]
            alerts: Alerts::default(),
        })
    }

    fn hyper_client_with(
        &self,
        executor: TrackedExecutor,
        #[allow(unused_variables)] extras: &Extras,
    ) -> Result<Client<Connector, RequestBody>> {
        let mut http = HttpConnector::new();
        // MCP exchanges are small request/response pairs: Nagle only adds
        // latency to them.
        http.set_nodelay(true);
        http.set_connect_timeout(self.settings.connect_timeout);
        http.set_keepalive(self.settings.tcp_keepalive);
        http.enforce_http(false);
        let http = QuickAckConnector::with_enabled(http, self.settings.tcp_quickack);
        #[cfg(feature = "proxy")]
        let http = ProxyConnector::new(http, extras.proxies.clone());

        #[cfg(feature = "rustls")]
        let connector = LazyHttps::new(http, self.tls_config()?.clone());
        #[cfg(feature = "rustls")]
        let connector = AlertConnector::new(connector, extras.alerts.clone());
        #[cfg(not(feature = "rustls"))]
        let connector = http;

        Ok(Client::builder(executor)
            .pool_timer(TokioTimer::new())
            .timer(TokioTimer::new())
            .pool_idle_timeout(self.settings.pool_idle_timeout)
            .pool_max_idle_per_host(self.settings.pool_max_idle_per_host)
            .build(connector))
    }

    #[cfg(feature = "rustls")]
    fn tls_config(&self) -> Result<&std::sync::Arc<LazyTls>> {
        if let Some(config) = self.tls.get() {
            return Ok(config);
        }
        let config = self.new_tls_config()?;
        Ok(self.tls.get_or_init(|| config))
    }

    #[cfg(feature = "rustls")]
    fn new_tls_config(&self) -> Result<std::sync::Arc<LazyTls>> {
        LazyTls::new(
            self.settings.built_in_roots,
            self.settings.system_roots,
            self.settings.extra_roots.clone(),
            self.settings.client_identity.clone(),
            self.settings.crypto_provider.0.as_ref(),
        )
        .map(std::sync::Arc::new)
    }
}

/// What an owned client's send function needs beside the hyper client.
struct Extras {
    /// Which destinations go through a proxy.
    #[cfg(feature = "proxy")]
    proxies: Proxies,
    /// TLS alerts that explain a failed exchange.
    #[cfg(feature = "rustls")]
    alerts: Alerts,
}

fn boxed<C>(
    client: Client<C, RequestBody>,
    #[allow(unused_variables)] extras: Extras,
) -> Box<super::SendFn>
where
    C: hyper_util::client::legacy::connect::Connect + Clone + Send + Sync + 'static,
{
    // A hyper-util client is called through `&self`: no clone per request.
    #[allow(unused_mut)]
    Box::new(move |mut request: http::Request<RequestBody>| {
        #[cfg(feature = "proxy")]
        let via = proxy::prepare(&extras.proxies, &mut request);
        #[cfg(feature = "rustls")]
        let (alerts, uri) = (extras.alerts.clone(), request.uri().clone());
        let response = client.request(request);
        Box::pin(async move {
            let response = match response.await {
                Ok(response) => response,
                Err(error) => {
                    #[cfg(feature = "rustls")]
                    if let Some(alert) = alerts.take(&uri) {
                        return Err(ServerAlert::new(alert, error.into()).into());
                    }
                    return Err(error.into());
                }
            };
            // A plain-http request the proxy refused: its error, naming the
            // proxy, rather than a status the server never sent.
            #[cfg(feature = "proxy")]
            if let Some(proxy) = via {
                if response.status() == http::StatusCode::PROXY_AUTHENTICATION_REQUIRED {
                    return Err(proxy.auth_required());
                }
            }
            Ok::<_, BoxError>(response.map(|body| body.map_err(BoxError::from).boxed_unsync()))
        })
    })
}

/// The TCP connector of an owned client: through a proxy or direct.
#[cfg(feature = "proxy")]
type Tcp = ProxyConnector;
/// The TCP connector of an owned client.
#[cfg(not(feature = "proxy"))]
type Tcp = QuickAckConnector;

/// The connector of an owned client.
#[cfg(feature = "rustls")]
pub(crate) type Connector = AlertConnector<LazyHttps<Tcp>>;
/// The connector of an owned client.
#[cfg(not(feature = "rustls"))]
pub(crate) type Connector = Tcp;

/// What only an owned client has.
pub(super) struct OwnedParts {
    tasks: TaskTracker,
}

impl OwnedParts {
    pub(super) fn live_tasks(&self) -> usize {
        self.tasks.len()
    }
}

/// Runs hyper's connection tasks on tokio, counted by a `TaskTracker`.
#[derive(Clone)]
struct TrackedExecutor {
    tasks: TaskTracker,
}

impl<F> hyper::rt::Executor<F> for TrackedExecutor
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    fn execute(&self, future: F) {
        self.tasks.spawn(future);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    #[test]
    // The TLS cache, the builder's only interior mutability, is not hashed.
    #[allow(clippy::mutable_key_type)]
    fn builders_are_equal_by_their_settings_alone() {
        let built = HttpClientBuilder::new();
        // A builder that built (and cached its TLS configuration) is still
        // equal to a fresh one.
        drop(built.build().unwrap());
        assert_eq!(built, HttpClientBuilder::new());
        let variants = [
            HttpClientBuilder::new().connect_timeout(Duration::from_secs(1)),
            HttpClientBuilder::new().no_connect_timeout(),
            HttpClientBuilder::new().pool_idle_timeout(Duration::from_secs(1)),
            HttpClientBuilder::new().no_pool_idle_timeout(),
            HttpClientBuilder::new().pool_max_idle_per_host(1),
            HttpClientBuilder::new().tcp_keepalive(Duration::from_secs(1)),
            HttpClientBuilder::new().no_tcp_keepalive(),
            HttpClientBuilder::new().tcp_quickack(false),
            #[cfg(feature = "rustls")]
            HttpClientBuilder::new().add_root_certificate(vec![1, 2, 3]),
            #[cfg(feature = "rustls")]
            HttpClientBuilder::new().built_in_roots(false),
            #[cfg(feature = "rustls")]
            HttpClientBuilder::new().system_roots(false),
            #[cfg(feature = "rustls")]
            HttpClientBuilder::new().client_identity("cert", "key"),
            #[cfg(feature = "proxy")]
            HttpClientBuilder::new().proxy("http://proxy:3128"),
            #[cfg(feature = "proxy")]
            HttpClientBuilder::new().no_proxy(),
            #[cfg(feature = "proxy")]
            HttpClientBuilder::new().proxy_bypass("localhost"),
        ];
        let mut seen = HashSet::from([HttpClientBuilder::new()]);
        for variant in &variants {
            assert_ne!(variant, &HttpClientBuilder::new(), "{variant:?}");
            assert!(seen.insert(variant.clone()), "{variant:?}");
            assert_eq!(variant, &variant.clone());
        }
        #[cfg(feature = "rustls")]
        {
            // Roots by their bytes, not by the value that holds them.
            let root = |der: Vec<u8>| HttpClientBuilder::new().add_root_certificate(der);
            assert_eq!(root(vec![1, 2, 3]), root(vec![1, 2, 3]));
            assert_ne!(root(vec![1, 2, 3]), root(vec![1, 2, 4]));
            assert!(seen.contains(&root(vec![1, 2, 3])));
        }
    }
}

#[cfg(all(test, feature = "proxy"))]
mod proxy_tests {
    use super::*;

    #[test]
    fn debug_shows_a_proxy_without_its_credentials() {
        let builder = HttpClientBuilder::new().proxy("http://USER:PASSWORD@proxy.example:3128");
        for shown in [format!("{builder:?}"), format!("{builder:#?}")] {
            assert!(!shown.contains("USER"), "{shown}");
            assert!(!shown.contains("PASSWORD"), "{shown}");
            assert!(shown.contains("proxy.example:3128"), "{shown}");
        }
        let client = builder.build().unwrap();
        assert!(!format!("{client:?}").contains("PASSWORD"));
    }
}
