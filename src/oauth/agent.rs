//! The two user agents shipped: a loopback redirect listener for a person
//! at a browser, and a headless one for servers that approve on their own.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::fmt;
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{CONTENT_TYPE, LOCATION};
use http::{Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::task::{AbortHandle, JoinSet};

use super::{AuthorizationRequest, AuthorizationResponse, BoxFuture, Redirect, UserAgent};
use crate::deadline::Deadline;
use crate::error::{Error, Result};
use crate::url_target::Target;

/// Redirects a headless agent follows on the authorization server's own
/// origin before reaching the redirect URI.
const MAX_HOPS: usize = 5;

/// The bound on each of the headless agent's requests.
const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(30);

/// A user agent with no user: it GETs the authorization URL itself and
/// reads the redirect to `redirect_uri` from `Location`, without ever
/// requesting it. For authorization servers that approve without a person
/// (test servers, the conformance suite, some machine-to-machine setups);
/// one that shows a login page is reported as needing a person.
#[derive(Clone, Debug)]
pub struct HeadlessAgent {
    redirect_uri: String,
}

impl HeadlessAgent {
    /// Registers and sends `redirect_uri` (an absolute URL; nothing listens
    /// there).
    pub fn new(redirect_uri: impl Into<String>) -> HeadlessAgent {
        HeadlessAgent {
            redirect_uri: redirect_uri.into(),
        }
    }
}

impl UserAgent for HeadlessAgent {
    fn prepare(&self) -> BoxFuture<'_, Result<Box<dyn Redirect>>> {
        let redirect = HeadlessRedirect {
            redirect_uri: self.redirect_uri.clone(),
        };
        Box::pin(async move { Ok(Box::new(redirect) as Box<dyn Redirect>) })
    }
}

struct HeadlessRedirect {
    redirect_uri: String,
}

impl Redirect for HeadlessRedirect {
    fn redirect_uri(&self) -> &str {
        &self.redirect_uri
    }

    fn authorize(
        self: Box<Self>,
        request: AuthorizationRequest,
    ) -> BoxFuture<'static, Result<AuthorizationResponse>> {
        Box::pin(async move {
            let not_http = || Error::auth("the authorization endpoint is not an http(s) URL");
            let mut url = Target::parse(&request.url).map_err(|_| not_http())?;
            let first = url.clone();
            // Compared parsed, without query or fragment.
            let redirect_uri = ::url::Url::parse(&self.redirect_uri)
                .ok()
                .map(without_query);
            let is_redirect_uri =
                |next: &::url::Url| redirect_uri.as_ref() == Some(&without_query(next.clone()));
            for _ in 0..MAX_HOPS {
                let (status, location) = redirect_of(&request, &url).await?;
                if !status.is_redirection() {
                    return Err(Error::auth(format!(
                        "the authorization server answered HTTP {status} instead of \
                         redirecting: it wants a person (use a LoopbackAgent)"
                    ))
                    .with_status(status));
                }
                let location = location.ok_or_else(|| {
                    Error::auth("the authorization server redirected without a Location")
                })?;
                let next = ::url::Url::parse(url.as_str())
                    .and_then(|base| base.join(&location))
                    .map_err(|_| Error::auth("the authorization server's redirect is not a URL"))?;
                if is_redirect_uri(&next) {
                    return Ok(AuthorizationResponse::from_redirect(next.as_str()));
                }
                let next = Target::parse(next.as_str())
                    .ok()
                    .filter(|next| next.same_origin(&first))
                    .ok_or_else(|| {
                        Error::auth(
                            "the authorization server redirected to another origin than the \
                             redirect URI; not followed",
                        )
                    })?;
                url = next;
            }
            Err(Error::auth(
                "too many redirects from the authorization server",
            ))
        })
    }
}

/// `url` without its query and fragment.
fn without_query(mut url: ::url::Url) -> ::url::Url {
    url.set_query(None);
    url.set_fragment(None);
    url
}

/// GETs `url` (no redirect followed) and returns its status and `Location`,
/// within [`EXCHANGE_TIMEOUT`].
async fn redirect_of(
    request: &AuthorizationRequest,
    url: &Target,
) -> Result<(StatusCode, Option<String>)> {
    let mut get = Request::new(Full::new(Bytes::new()));
    *get.uri_mut() = url.uri();
    let deadline = Deadline::after(Some(EXCHANGE_TIMEOUT));
    let response = deadline
        .run(request.client.send(get))
        .await
        .map_err(|error| {
            if error.is_timeout() {
                let message = format!("the authorization request: {error}");
                error.with_message(message)
            } else {
                error
            }
        })?;
    let location = response
        .headers()
        .get(LOCATION)
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned);
    Ok((response.status(), location))
}

impl fmt::Debug for HeadlessRedirect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HeadlessRedirect").finish_non_exhaustive()
    }
}

/// A user agent for a person at a browser: binds an HTTP listener on
/// `127.0.0.1` (RFC 8252 §7.3) for the redirect, shows the authorization
/// URL (and opens a browser when asked), and waits for the redirect.
///
/// The listener exists from [`prepare`](UserAgent::prepare) until the
/// redirect has come back, the wait has timed out, or the flow is
/// dropped; it is closed then, with every connection it accepted.
///
/// Defaults: an ephemeral port, path `/callback`, the URL printed on
/// standard error, no browser opened, a 5 minute wait.
///
/// The listener serves at most 16 connections at once (a new one closes
/// the oldest, so idle connections cannot keep the redirect out), each
/// given 10 s to send its request head and 30 s in all.
#[derive(Clone)]
pub struct LoopbackAgent {
    port: u16,
    path: String,
    open_browser: bool,
    timeout: Duration,
    show: Arc<dyn Fn(&str) + Send + Sync>,
}

impl LoopbackAgent {
    /// A loopback agent with the defaults above.
    pub fn new() -> LoopbackAgent {
        LoopbackAgent {
            port: 0,
            path: "/callback".to_owned(),
            open_browser: false,
            timeout: Duration::from_secs(300),
            show: Arc::new(|url| {
                eprintln!("Open this URL in a browser to authorize:\n  {url}");
            }),
        }
    }

    /// Listens on this port (0: any free one). A fixed port is what an
    /// authorization server that compares redirect URIs exactly needs.
    #[must_use]
    pub fn port(mut self, port: u16) -> Self {
        self.port = port;
        self
    }

    /// The redirect path. Default `/callback`.
    #[must_use]
    pub fn path(mut self, path: impl Into<String>) -> Self {
        let path = path.into();
        self.path = if path.starts_with('/') {
            path
        } else {
            format!("/{path}")
        };
        self
    }

    /// Also opens the system's browser (`xdg-open`, `open`, `rundll32`) on
    /// the URL. Default: off.
    #[must_use]
    pub fn open_browser(mut self, open: bool) -> Self {
        self.open_browser = open;
        self
    }

    /// How long to wait for the redirect. Default 5 minutes.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Shows the authorization URL with `show` instead of printing it.
    #[must_use]
    pub fn on_url(mut self, show: impl Fn(&str) + Send + Sync + 'static) -> Self {
        self.show = Arc::new(show);
        self
    }
}

impl Default for LoopbackAgent {
    fn default() -> Self {
        LoopbackAgent::new()
    }
}

impl fmt::Debug for LoopbackAgent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LoopbackAgent")
            .field("port", &self.port)
            .field("path", &self.path)
            .field("open_browser", &self.open_browser)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl UserAgent for LoopbackAgent {
    fn prepare(&self) -> BoxFuture<'_, Result<Box<dyn Redirect>>> {
        Box::pin(async move {
            let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, self.port))
                .await
                .map_err(|e| {
                    Error::auth(format!(
                        "could not listen on 127.0.0.1:{} for the redirect",
                        self.port
                    ))
                    .with_source(e)
                })?;
            let port = listener
                .local_addr()
                .map_err(|e| Error::auth("the redirect listener has no address").with_source(e))?
                .port();
            Ok(Box::new(LoopbackRedirect {
                redirect_uri: format!("http://127.0.0.1:{port}{}", self.path),
                listener,
                agent: self.clone(),
            }) as Box<dyn Redirect>)
        })
    }
}

struct LoopbackRedirect {
    redirect_uri: String,
    listener: TcpListener,
    agent: LoopbackAgent,
}

impl Redirect for LoopbackRedirect {
    fn redirect_uri(&self) -> &str {
        &self.redirect_uri
    }

    fn authorize(
        self: Box<Self>,
        request: AuthorizationRequest,
    ) -> BoxFuture<'static, Result<AuthorizationResponse>> {
        Box::pin(async move {
            let LoopbackRedirect {
                listener, agent, ..
            } = *self;
            (agent.show)(request.url());
            if agent.open_browser {
                open_browser(request.url());
            }
            // Only the redirect of this request: another local process
            // cannot end the wait with a made-up one.
            let state = AuthorizationResponse::from_redirect(request.url()).state;
            let wait = serve_until_redirect(listener, agent.path.clone(), state, LIMITS);
            tokio::time::timeout(agent.timeout, wait)
                .await
                .map_err(|_| {
                    Error::timeout(format!("no redirect came back within {:?}", agent.timeout))
                })?
        })
    }
}

/// Connections served at once by the redirect listener. A connection
/// beyond them closes the oldest one: idle connections (a browser's
/// preconnects, or another local process's) cannot keep the redirect out.
const MAX_CONNECTIONS: usize = 16;

/// The bounds on each connection to the redirect listener.
#[derive(Clone, Copy, Debug)]
struct Limits {
    /// How long it may take to send its request head; then it is closed.
    header_read: Duration,
    /// How long it may last in all.
    connection: Duration,
}

const LIMITS: Limits = Limits {
    header_read: Duration::from_secs(10),
    connection: Duration::from_secs(30),
};

/// Serves the listener until a GET of `path` with `state` arrives, and
/// returns its query. Connections are served by tasks of a set this future
/// owns: dropping it closes the listener and aborts them. At most
/// [`MAX_CONNECTIONS`] are served at once, the oldest closed for a new one;
/// each within `limits`.
async fn serve_until_redirect(
    listener: TcpListener,
    path: String,
    state: Option<String>,
    limits: Limits,
) -> Result<AuthorizationResponse> {
    let (tx, mut rx) = mpsc::channel::<AuthorizationResponse>(1);
    let mut connections = JoinSet::new();
    // The connections being served, oldest first.
    let mut served: VecDeque<AbortHandle> = VecDeque::with_capacity(MAX_CONNECTIONS);
    loop {
        tokio::select! {
            received = rx.recv() => {
                if let Some(response) = received {
                    return Ok(response);
                }
            }
            accepted = listener.accept() => {
                let (stream, _) = accepted.map_err(|e| {
                    Error::auth("the redirect listener failed").with_source(e)
                })?;
                if served.len() >= MAX_CONNECTIONS {
                    if let Some(oldest) = served.pop_front() {
                        oldest.abort();
                    }
                }
                let (tx, path, state) = (tx.clone(), path.clone(), state.clone());
                let service = service_fn(move |req: Request<hyper::body::Incoming>| {
                    let answer = callback(&req, &path, state.as_deref(), &tx);
                    async move { Ok::<_, Infallible>(answer) }
                });
                served.push_back(connections.spawn(async move {
                    let connection = http1::Builder::new()
                        .timer(TokioTimer::new())
                        .header_read_timeout(limits.header_read)
                        .keep_alive(false)
                        .serve_connection(TokioIo::new(stream), service);
                    let _ = tokio::time::timeout(limits.connection, connection).await;
                }));
            }
            Some(joined) = connections.join_next_with_id(), if !connections.is_empty() => {
                let id = match joined {
                    Ok((id, ())) => id,
                    Err(error) => error.id(),
                };
                served.retain(|handle| handle.id() != id);
            }
        }
    }
}

/// Answers one request to the listener: the redirect (with the `state`
/// sent), a 400 for another, or a 404.
fn callback(
    req: &Request<hyper::body::Incoming>,
    path: &str,
    state: Option<&str>,
    tx: &mpsc::Sender<AuthorizationResponse>,
) -> Response<Full<Bytes>> {
    let page = |status: StatusCode, text: &'static str| {
        let mut response = Response::new(Full::new(Bytes::from_static(text.as_bytes())));
        *response.status_mut() = status;
        response.headers_mut().insert(
            CONTENT_TYPE,
            http::HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        response
    };
    if req.method() != Method::GET || req.uri().path() != path {
        return page(StatusCode::NOT_FOUND, "Not found.\n");
    }
    let query = req.uri().query().unwrap_or("");
    let response = AuthorizationResponse::from_redirect(&format!("?{query}"));
    if response.state.as_deref() != state {
        return page(
            StatusCode::BAD_REQUEST,
            "Not the redirect of this authorization.\n",
        );
    }
    let refused = response.error.is_some();
    // The first redirect wins; a second one finds the channel full.
    let _ = tx.try_send(response);
    if refused {
        page(
            StatusCode::OK,
            "Authorization was refused. You can close this tab.\n",
        )
    } else {
        page(
            StatusCode::OK,
            "Authorization received. You can close this tab.\n",
        )
    }
}

/// Asks the system to open `url` in a browser, without a shell (the URL
/// is one argument, never parsed as a command line); a failure only means
/// the person opens it from the printed line. Not waited for: the opener
/// may live as long as the browser it started, and the runtime reaps it
/// when it exits.
fn open_browser(url: &str) {
    let (program, args): (&str, Vec<&str>) = if cfg!(target_os = "macos") {
        ("open", vec![url])
    } else if cfg!(windows) {
        ("rundll32", vec!["url.dll,FileProtocolHandler", url])
    } else {
        ("xdg-open", vec![url])
    };
    let opened = tokio::process::Command::new(program)
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(false)
        .spawn();
    if opened.is_err() {
        tracing::debug!("could not open a browser; the URL was printed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    /// Without a timer, hyper's header read timeout was silently off: a
    /// connection that sent half a request line was served forever.
    #[tokio::test]
    async fn a_connection_that_never_finishes_its_request_head_is_closed() {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let limits = Limits {
            header_read: Duration::from_millis(100),
            connection: Duration::from_secs(3600),
        };
        let serve = tokio::spawn(serve_until_redirect(
            listener,
            "/callback".to_owned(),
            Some("s".to_owned()),
            limits,
        ));
        let mut stream = tokio::net::TcpStream::connect((Ipv4Addr::LOCALHOST, port))
            .await
            .unwrap();
        stream.write_all(b"GET /callb").await.unwrap();
        let mut answer = Vec::new();
        let closed =
            tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer)).await;
        assert!(closed.is_ok(), "the idle connection is still open");
        serve.abort();
    }
}
