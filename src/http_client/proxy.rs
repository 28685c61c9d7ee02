//! Proxies for the owned client: which destinations go through one (the
//! environment, read as curl reads it, or the builder's setting), and the
//! connector that reaches them through it.
//!
//! hyper-util does the matching (`Matcher`, curl's `NO_PROXY` rules) and the
//! `CONNECT` tunnel (`Tunnel`); this module chooses between them per
//! destination and turns a proxy's refusal into an error that names the
//! proxy, never its credentials.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::Uri;
use http::header::{CONNECTION, HeaderValue, PROXY_AUTHORIZATION};
use hyper_util::client::legacy::connect::proxy::Tunnel;
use hyper_util::client::proxy::matcher::Matcher;
use tower::Service;

use super::quickack::{QuickAckConnector, QuickAckStream};
use crate::error::{BoxError, Error, HopError, Result};

/// Where the owned client's proxy comes from (a builder setting).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) enum ProxySetting {
    /// `HTTP_PROXY`, `HTTPS_PROXY`, `ALL_PROXY` and `NO_PROXY` (each upper
    /// case first, then lower case), read when the client is built.
    Environment,
    /// No proxy, whatever the environment says.
    Off,
    /// This proxy for every destination the bypass list does not name.
    Explicit(ProxyUrl),
}

/// A proxy URL as given, which may hold credentials: `Debug` shows its
/// scheme and host only.
#[derive(Clone, PartialEq, Eq, Hash)]
pub(super) struct ProxyUrl(pub(super) String);

impl fmt::Debug for ProxyUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("ProxyUrl").field(&redacted(&self.0)).finish()
    }
}

/// `url` with its credentials, path and query left out.
fn redacted(url: &str) -> String {
    let (scheme, rest) = match scheme_of(url) {
        Some((scheme, rest)) => (format!("{scheme}://"), rest),
        None => (String::new(), url),
    };
    // All up to the last `@` may be credentials, whatever it holds: a `#`,
    // `?` or `/` in a password ends nothing here.
    let (credentials, host) = match rest.rsplit_once('@') {
        Some((_, host)) => ("<credentials>@", host),
        None => ("", rest),
    };
    let host = &host[..host.find(['/', '?', '#']).unwrap_or(host.len())];
    format!("{scheme}{credentials}{host}")
}

/// The scheme `text` starts with (letters, digits, `+`, `-`, `.`, then
/// `://`) and what follows it; `None` when it starts with none: a `://`
/// later on (in a password, a query) is no scheme.
fn scheme_of(text: &str) -> Option<(&str, &str)> {
    let (scheme, rest) = text.split_once("://")?;
    let mut chars = scheme.chars();
    let is_scheme = chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    is_scheme.then_some((scheme, rest))
}

/// The proxy rules of a built client; `None` when nothing goes through a
/// proxy.
pub(super) type Proxies = Option<Arc<Matcher>>;

/// The rules for `setting`, with `bypass` (`NO_PROXY` syntax) in place of
/// the environment's `NO_PROXY` when given.
///
/// Every proxy URL is checked here, when the client is built: one that does
/// not parse, has an invalid port or no host, or a scheme other than
/// `http`, fails the build with an error naming where it came from (the
/// variable, or the builder), so no request is sent anywhere, neither
/// direct nor to a host the URL did not mean.
pub(super) fn proxies(setting: &ProxySetting, bypass: Option<&str>) -> Result<Proxies> {
    Ok(match setting {
        ProxySetting::Off => None,
        ProxySetting::Environment => from_variables(|name| std::env::var(name).ok(), bypass)?,
        ProxySetting::Explicit(url) => Some(
            Matcher::builder()
                .all(canonical("the proxy URL", &url.0)?)
                .no(bypass.unwrap_or_default().to_owned())
                .build(),
        ),
    }
    .map(Arc::new))
}

/// The rules the variables `var` reads give: hyper-util's `from_env`, with
/// the lookup and `NO_PROXY` replaceable (tests, `proxy_bypass`), and each
/// proxy URL checked and rewritten by [`canonical`].
fn from_variables(
    var: impl Fn(&str) -> Option<String>,
    bypass: Option<&str>,
) -> Result<Option<Matcher>> {
    // In a CGI program `HTTP_PROXY` can come from a request's `Proxy:`
    // header ("httpoxy"): hyper-util and curl ignore the variables there.
    if var("REQUEST_METHOD").is_some() {
        return Ok(None);
    }
    let first = |names: [&'static str; 2]| {
        names.iter().find_map(|name| {
            var(name)
                .filter(|value| !value.is_empty())
                .map(|value| (*name, value))
        })
    };
    let proxy = |names| match first(names) {
        Some((name, value)) => canonical(name, &value),
        None => Ok(String::new()),
    };
    let all = proxy(["ALL_PROXY", "all_proxy"])?;
    let http = proxy(["HTTP_PROXY", "http_proxy"])?;
    let https = proxy(["HTTPS_PROXY", "https_proxy"])?;
    if all.is_empty() && http.is_empty() && https.is_empty() {
        return Ok(None);
    }
    let no = match bypass {
        Some(bypass) => bypass.to_owned(),
        None => first(["NO_PROXY", "no_proxy"])
            .map(|(_, value)| value)
            .unwrap_or_default(),
    };
    Ok(Some(
        Matcher::builder()
            .all(all)
            .http(http)
            .https(https)
            .no(no)
            .build(),
    ))
}

/// The proxy URL `text` (from `source`: a variable's name, or "the proxy
/// URL"), read with the parser targets are read with (the `url` crate,
/// WHATWG: `crate::url_target`), written back as
/// `http://[user[:password]@]host:port` with the port explicit, which
/// hyper-util's matcher (`http::Uri`) reads the same way: where the bytes
/// go is what this parser decided. A URL without a scheme is `http://`, as
/// curl reads it.
///
/// Errors name `source` and why, never the URL: it may hold credentials
/// (the `url` crate's reasons quote nothing).
fn canonical(source: &str, text: &str) -> Result<String> {
    use crate::url_target::{NotATarget, Target};

    let text = text.trim();
    let with_scheme;
    let text = if scheme_of(text).is_some() {
        text
    } else {
        with_scheme = format!("http://{text}");
        &with_scheme
    };
    let invalid = |why: &dyn fmt::Display| {
        Error::builder(format!(
            "{source} is not a valid URL ({why}): no request is sent"
        ))
    };
    let url = url::Url::parse(text).map_err(|e| invalid(&e))?;
    if url.scheme() != "http" {
        return Err(Error::builder(format!(
            "{source} uses the proxy scheme {}://, which is not supported (only http:// proxies)",
            url.scheme()
        )));
    }
    // The same parse, checked the way a target is: `http::Uri` must read
    // the host and port the `url` crate read.
    let target = Target::parse(text).map_err(|e| match e {
        NotATarget::Unparsable => invalid(&"no host"),
        other => invalid(&other),
    })?;
    let host = url.host_str().filter(|host| !host.is_empty());
    let Some(host) = host else {
        return Err(invalid(&"no host"));
    };
    let userinfo = match (url.username(), url.password()) {
        ("", None) => String::new(),
        (user, None) => format!("{user}@"),
        (user, Some(password)) => format!("{user}:{password}@"),
    };
    Ok(format!("http://{userinfo}{host}:{}", target.port()))
}

/// The proxy a plain-`http` request goes through, if any, with its
/// `Proxy-Authorization` already added to the request (marked sensitive).
/// `https` requests go through a tunnel the connector opens: their proxy
/// credentials go in the `CONNECT` alone.
///
/// A request that carries the credentials also asks the proxy to close
/// the connection after it: some proxies (proxy.py among them) strip
/// `Proxy-Authorization` from the first request of a connection only and
/// then pipe the rest through to the target as is, credentials included.
/// One connection per such request costs a TCP handshake to the proxy;
/// leaking the proxy's password to every server would cost more.
pub(super) fn prepare(
    proxies: &Proxies,
    request: &mut http::Request<super::RequestBody>,
) -> Option<ProxyName> {
    let proxies = proxies.as_deref()?;
    if request.uri().scheme_str() != Some("http") {
        return None;
    }
    let proxy = proxies.intercept(request.uri())?;
    let name = ProxyName::of(proxy.uri(), proxy.basic_auth().is_some());
    if let Some(auth) = proxy.basic_auth() {
        let mut auth = auth.clone();
        auth.set_sensitive(true);
        // A header the caller set (a hook with another scheme) stays.
        let headers = request.headers_mut();
        headers.entry(PROXY_AUTHORIZATION).or_insert(auth);
        headers.insert(CONNECTION, HeaderValue::from_static("close"));
    }
    Some(name)
}

/// A proxy as errors and traces name it: `host:port`, never credentials.
#[derive(Clone, Debug)]
pub(super) struct ProxyName {
    host_port: Box<str>,
    credentials: bool,
}

impl ProxyName {
    fn of(uri: &Uri, credentials: bool) -> Self {
        // The matcher's URI holds no user info: it moved into the
        // authorization header.
        let host = uri.host().unwrap_or_default();
        let port = uri.port_u16().unwrap_or(match uri.scheme_str() {
            Some("https") => 443,
            _ => 80,
        });
        ProxyName {
            host_port: format!("{host}:{port}").into(),
            credentials,
        }
    }

    /// The error for a `407` from this proxy.
    pub(super) fn auth_required(self) -> BoxError {
        ProxyError {
            proxy: self,
            failure: Failure::AuthRequired,
            source: None,
        }
        .boxed()
    }
}

/// A proxy failed us: unreachable, or it refused. It leaves this module
/// only [`boxed`](Self::boxed), with its verdict.
#[derive(Debug)]
struct ProxyError {
    proxy: ProxyName,
    failure: Failure,
    source: Option<BoxError>,
}

#[derive(Debug)]
enum Failure {
    /// Connecting to the proxy failed (the source says how).
    Unreachable,
    /// `407 Proxy Authentication Required`.
    AuthRequired,
    /// The proxy refused the `CONNECT`.
    TunnelRefused,
    /// The tunnel failed otherwise (closed early, an I/O error).
    Tunnel,
    /// A proxy scheme (from the environment) this client does not speak.
    Scheme(Box<str>),
}

impl ProxyError {
    /// This error as the connector returns it: a [`HopError`], whose
    /// verdict is ours to give. The same attempt may succeed later through
    /// an unreachable proxy or a tunnel cut short, not through a refusal.
    fn boxed(self) -> BoxError {
        match self.failure {
            Failure::Unreachable | Failure::Tunnel => HopError::transient(self),
            Failure::AuthRequired | Failure::TunnelRefused | Failure::Scheme(_) => {
                HopError::refusal(self)
            }
        }
        .into()
    }

    /// hyper-util's tunnel error, sorted by its words: its type is not
    /// exported, so its text is all there is to go on (pinned by the unit
    /// tests below against a scripted proxy).
    fn tunnel(proxy: ProxyName, error: BoxError) -> Self {
        let text = error.to_string();
        let failure = if text.contains("proxy authorization required") {
            Failure::AuthRequired
        } else if text.contains("unsuccessful") {
            Failure::TunnelRefused
        } else if text.contains("failed to create underlying connection") {
            Failure::Unreachable
        } else {
            Failure::Tunnel
        };
        let source = match failure {
            Failure::Unreachable | Failure::Tunnel => Some(error),
            _ => None,
        };
        ProxyError {
            proxy,
            failure,
            source,
        }
    }
}

impl fmt::Display for ProxyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let proxy = &self.proxy.host_port;
        match &self.failure {
            Failure::Unreachable => write!(f, "could not reach the proxy {proxy}"),
            Failure::AuthRequired if self.proxy.credentials => write!(
                f,
                "the proxy {proxy} refused the credentials in its URL \
                 (407 Proxy Authentication Required)"
            ),
            Failure::AuthRequired => write!(
                f,
                "the proxy {proxy} asks for credentials (407 Proxy Authentication \
                 Required): put them in the proxy URL"
            ),
            Failure::TunnelRefused => {
                write!(f, "the proxy {proxy} refused to open a tunnel (CONNECT)")
            }
            Failure::Tunnel => write!(f, "the tunnel through the proxy {proxy} failed"),
            Failure::Scheme(scheme) => write!(
                f,
                "the proxy {proxy} is a {scheme}:// proxy, which this client does \
                 not speak (only http:// proxies)"
            ),
        }
    }
}

impl std::error::Error for ProxyError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|source| source as &(dyn std::error::Error + 'static))
    }
}

/// The owned client's TCP connector, through a proxy where the rules say
/// so: a tunnel (`CONNECT`) for `https`, which TLS then runs over to the
/// target; a connection to the proxy itself for `http`, marked proxied so
/// that hyper-util sends requests on it in absolute form.
#[derive(Clone)]
pub(crate) struct ProxyConnector {
    inner: QuickAckConnector,
    proxies: Proxies,
}

impl ProxyConnector {
    pub(super) fn new(inner: QuickAckConnector, proxies: Proxies) -> Self {
        ProxyConnector { inner, proxies }
    }
}

impl fmt::Debug for ProxyConnector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // hyper-util's matcher shows proxies without their credentials.
        f.debug_struct("ProxyConnector")
            .field("proxies", &self.proxies)
            .finish_non_exhaustive()
    }
}

type Connecting = Pin<Box<dyn Future<Output = Result<QuickAckStream, BoxError>> + Send>>;

impl Service<Uri> for ProxyConnector {
    type Response = QuickAckStream;
    type Error = BoxError;
    type Future = Connecting;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, dst: Uri) -> Connecting {
        let Some(proxy) = self.proxies.as_deref().and_then(|m| m.intercept(&dst)) else {
            let direct = self.inner.call(dst);
            return Box::pin(async move { direct.await.map_err(Into::into) });
        };
        let auth: Option<HeaderValue> = proxy.basic_auth().cloned();
        let name = ProxyName::of(proxy.uri(), auth.is_some());
        tracing::debug!(proxy = %name.host_port, "connecting through a proxy");
        match proxy.uri().scheme_str() {
            Some("http") => {}
            other => {
                let scheme = other.unwrap_or_default().into();
                let error = ProxyError {
                    proxy: name,
                    failure: Failure::Scheme(scheme),
                    source: None,
                };
                return Box::pin(async move { Err(error.boxed()) });
            }
        }
        if dst.scheme_str() == Some("https") {
            let mut tunnel = Tunnel::new(proxy.uri().clone(), self.inner.clone());
            if let Some(auth) = auth {
                // Sent in the CONNECT alone: the target never sees it.
                tunnel = tunnel.with_auth(auth);
            }
            let tunnelling = tunnel.call(dst);
            Box::pin(async move {
                tunnelling
                    .await
                    .map_err(|e| ProxyError::tunnel(name, e.into()).boxed())
            })
        } else {
            let connecting = self.inner.call(proxy.uri().clone());
            Box::pin(async move {
                match connecting.await {
                    Ok(stream) => Ok(stream.into_proxied()),
                    Err(e) => Err(ProxyError {
                        proxy: name,
                        failure: Failure::Unreachable,
                        source: Some(e.into()),
                    }
                    .boxed()),
                }
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn rules(vars: &[(&str, &str)], bypass: Option<&str>) -> Option<Matcher> {
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        from_variables(|name| vars.get(name).cloned(), bypass).unwrap()
    }

    /// The proxy `url` goes through, as `host:port`, or `None` for direct.
    fn via(rules: &Option<Matcher>, url: &str) -> Option<String> {
        let proxy = rules.as_ref()?.intercept(&url.parse().unwrap())?;
        Some(proxy.uri().authority().unwrap().to_string())
    }

    #[test]
    fn the_environment_decides_per_scheme_and_no_proxy_bypasses() {
        let env = rules(
            &[
                ("HTTP_PROXY", "http://plain:3128"),
                ("https_proxy", "http://tls:3128"),
                ("NO_PROXY", "internal.example, 10.0.0.0/8"),
            ],
            None,
        );
        assert_eq!(
            via(&env, "http://a.example/mcp").as_deref(),
            Some("plain:3128")
        );
        assert_eq!(
            via(&env, "https://a.example/mcp").as_deref(),
            Some("tls:3128")
        );
        // NO_PROXY: a domain and its subdomains, a network.
        assert_eq!(via(&env, "https://internal.example/"), None);
        assert_eq!(via(&env, "https://api.internal.example/"), None);
        assert_eq!(via(&env, "http://10.1.2.3:8080/"), None);
        assert_eq!(
            via(&env, "http://notinternal.example/").as_deref(),
            Some("plain:3128")
        );
    }

    #[test]
    fn upper_case_wins_and_all_proxy_fills_in() {
        let env = rules(
            &[
                ("HTTPS_PROXY", "http://upper:1"),
                ("https_proxy", "http://lower:1"),
                ("all_proxy", "http://all:1"),
            ],
            None,
        );
        assert_eq!(via(&env, "https://x/").as_deref(), Some("upper:1"));
        assert_eq!(via(&env, "http://x/").as_deref(), Some("all:1"));
        // Empty variables are unset ones.
        let env = rules(
            &[("HTTP_PROXY", ""), ("http_proxy", "http://lower:1")],
            None,
        );
        assert_eq!(via(&env, "http://x/").as_deref(), Some("lower:1"));
        assert!(rules(&[("NO_PROXY", "*")], None).is_none());
    }

    #[test]
    fn a_bypass_list_replaces_no_proxy_and_cgi_ignores_the_variables() {
        let vars = [("ALL_PROXY", "http://p:1"), ("NO_PROXY", "a.example")];
        let env = rules(&vars, Some("b.example"));
        assert_eq!(via(&env, "http://a.example/").as_deref(), Some("p:1"));
        assert_eq!(via(&env, "http://b.example/"), None);
        let cgi = rules(
            &[("ALL_PROXY", "http://p:1"), ("REQUEST_METHOD", "GET")],
            None,
        );
        assert!(cgi.is_none());
    }

    #[test]
    fn an_explicit_proxy_ignores_the_environment() {
        let explicit = ProxySetting::Explicit(ProxyUrl("http://u:p@proxy:3128".into()));
        let rules = proxies(&explicit, Some("direct.example")).unwrap().unwrap();
        let proxy = rules.intercept(&"https://x/".parse().unwrap()).unwrap();
        assert_eq!(proxy.uri().authority().unwrap().as_str(), "proxy:3128");
        assert!(proxy.basic_auth().is_some());
        assert!(
            rules
                .intercept(&"https://direct.example/".parse().unwrap())
                .is_none()
        );
        assert!(proxies(&ProxySetting::Off, None).unwrap().is_none());
    }

    #[test]
    fn bad_proxy_urls_are_builder_errors_that_do_not_repeat_them() {
        for (url, words) in [
            ("socks5://SECRET:SECRET@p:1", "not supported"),
            ("https://SECRET:SECRET@p:1", "not supported"),
            ("http://SECRET:SECRET@", "not a valid URL"),
            ("not a url SECRET", "not a valid URL"),
        ] {
            let setting = ProxySetting::Explicit(ProxyUrl(url.into()));
            let error = proxies(&setting, None).unwrap_err();
            assert!(error.is_builder(), "{url}: {error}");
            let text = format!("{error} {error:?}");
            assert!(text.contains(words), "{url}: {text}");
            assert!(!text.contains("SECRET"), "{url}: {text}");
        }
    }

    #[test]
    fn a_proxy_url_is_sent_to_where_the_url_parser_read_it() {
        let explicit = |url: &str| {
            let setting = ProxySetting::Explicit(ProxyUrl(url.into()));
            let rules = proxies(&setting, None).unwrap().unwrap();
            let proxy = rules.intercept(&"http://x/".parse().unwrap()).unwrap();
            proxy.uri().authority().map(|a| a.to_string())
        };
        // The port explicit, the default one too; no scheme is http://.
        assert_eq!(explicit("http://u:p@proxy").as_deref(), Some("proxy:80"));
        assert_eq!(explicit("proxy:3128").as_deref(), Some("proxy:3128"));
        assert_eq!(explicit("http://[::1]:3/x").as_deref(), Some("[::1]:3"));
        // Credentials the URL parser percent-encoded reach the proxy as given.
        let setting = ProxySetting::Explicit(ProxyUrl("http://us er:p@ss@proxy:1".into()));
        let rules = proxies(&setting, None).unwrap().unwrap();
        let proxy = rules.intercept(&"http://x/".parse().unwrap()).unwrap();
        assert_eq!(proxy.basic_auth().unwrap(), "Basic dXMgZXI6cEBzcw==");
    }

    #[test]
    fn debug_never_shows_proxy_credentials() {
        let url = ProxyUrl("http://USER:PASS@proxy:3128/path?q=1".into());
        let shown = format!("{url:?}");
        assert_eq!(shown, r#"ProxyUrl("http://<credentials>@proxy:3128")"#);
        assert_eq!(redacted("proxy:3128"), "proxy:3128");
    }

    /// Issue 26 review: `://` later in a scheme-less URL (in a query, or a
    /// password) is no scheme: the user name was read as one and named in
    /// the build error ("uses the proxy scheme agent://"), and `Debug`
    /// showed the whole URL, password included. A `#`, `?` or `/` in a
    /// password showed what came before it.
    #[test]
    fn credentials_stay_hidden_when_the_url_holds_a_later_scheme_or_a_delimiter() {
        for url in [
            "agent:SECRET@proxy:3128/?from=http://x",
            "agent:SE://CRET@proxy:3128",
            "http://agent:SE#CRET@proxy:3128",
            "http://agent:SE?CRET@proxy:3128",
            "http://agent:SE/CRET@proxy:3128",
        ] {
            let shown = format!("{:?}", ProxyUrl(url.into()));
            assert!(
                !shown.contains("SE") && !shown.contains("agent"),
                "{url}: {shown}"
            );
            let setting = ProxySetting::Explicit(ProxyUrl(url.into()));
            if let Err(error) = proxies(&setting, None) {
                let text = format!("{error} {error:?}");
                assert!(
                    !text.contains("SE") && !text.contains("agent"),
                    "{url}: {text}"
                );
            }
        }
        // Read as curl reads it: an http:// proxy with those credentials.
        let setting =
            ProxySetting::Explicit(ProxyUrl("agent:SECRET@proxy:3128/?from=http://x".into()));
        let rules = proxies(&setting, None).unwrap().unwrap();
        let proxy = rules.intercept(&"http://x/".parse().unwrap()).unwrap();
        assert_eq!(
            proxy.uri().authority().map(|a| a.to_string()).as_deref(),
            Some("proxy:3128")
        );
    }

    #[test]
    fn plain_http_requests_carry_the_proxy_credentials_https_ones_do_not() {
        let explicit = ProxySetting::Explicit(ProxyUrl("http://user:pass@proxy:3128".into()));
        let rules = proxies(&explicit, Some("direct.example")).unwrap();
        let request = |uri: &str| {
            http::Request::builder()
                .uri(uri)
                .body(super::super::RequestBody::default())
                .unwrap()
        };
        let mut plain = request("http://target.example/mcp");
        assert!(prepare(&rules, &mut plain).is_some());
        let auth = &plain.headers()[PROXY_AUTHORIZATION];
        assert!(auth.is_sensitive());
        assert_eq!(auth, "Basic dXNlcjpwYXNz");
        assert_eq!(plain.headers()[CONNECTION], "close");
        for uri in ["https://target.example/mcp", "http://direct.example/mcp"] {
            let mut other = request(uri);
            assert!(prepare(&rules, &mut other).is_none(), "{uri}");
            assert!(other.headers().get(PROXY_AUTHORIZATION).is_none(), "{uri}");
        }
    }

    /// A proxy on 127.0.0.1 that answers a `CONNECT` with `status`.
    async fn scripted_proxy(status: &'static str) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut head = [0; 1024];
            let _ = socket.read(&mut head).await;
            let _ = socket
                .write_all(format!("HTTP/1.1 {status}\r\n\r\n").as_bytes())
                .await;
        });
        format!("http://{address}")
    }

    /// The error a request through `proxy` to an https target ends in.
    async fn tunnel_error(proxy: &str) -> Error {
        let setting = ProxySetting::Explicit(ProxyUrl(proxy.into()));
        let mut connector = ProxyConnector::new(
            QuickAckConnector::new(hyper_util::client::legacy::connect::HttpConnector::new()),
            proxies(&setting, None).unwrap(),
        );
        let error = connector
            .call("https://target.example:443/".parse().unwrap())
            .await
            .unwrap_err();
        Error::transport(error)
    }

    /// Each failure in its words (one per kind), with the verdict `Error`
    /// reads from the chain.
    #[tokio::test]
    async fn hyper_utils_tunnel_errors_are_sorted_by_what_the_proxy_did() {
        let error = tunnel_error(&scripted_proxy("407 Proxy Authentication Required").await).await;
        assert!(
            error.to_string().contains("asks for credentials"),
            "{error}"
        );
        assert!(!error.is_retryable());
        let error = tunnel_error(&scripted_proxy("403 Forbidden").await).await;
        assert!(
            error.to_string().contains("refused to open a tunnel"),
            "{error}"
        );
        assert!(!error.is_retryable());
        // Nobody listens on port 1.
        let error = tunnel_error("http://127.0.0.1:1").await;
        assert!(
            error
                .to_string()
                .contains("could not reach the proxy 127.0.0.1:1: "),
            "{error}"
        );
        assert!(error.is_retryable());
    }
}
