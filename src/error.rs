//! The crate's one error type.
//!
//! [`Error`] is opaque on purpose: what is stable is the set of predicates
//! (`is_status()`, `is_timeout()`, ...) and accessors (`status()`,
//! `rpc_error()`, ...), not the internal representation, so new kinds of
//! failure can be added without breaking callers.
//!
//! # Secrets
//!
//! Neither `Display` nor `Debug` ever shows a header value we sent (tokens) or
//! a session id, valid or not. Messages name what went wrong, the HTTP status
//! and the JSON-RPC code, never the credentials involved.

use http::StatusCode;
use std::fmt;
use std::sync::Arc;

use crate::jsonrpc::ErrorObject;

/// A boxed error, as carried in the cause chain.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// `Result<T, mcp_scoped_http::Error>`.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong between this crate and an MCP server.
pub struct Error {
    inner: Box<Inner>,
}

struct Inner {
    kind: Kind,
    status: Option<StatusCode>,
    rpc: Option<ErrorObject>,
    www_authenticate: Option<String>,
    /// The start of an error status's text body, escaped and cut.
    body: Option<Box<str>>,
    message: Option<String>,
    // Shared, so that one failure can be reported to every request that
    // waited on it.
    source: Option<Arc<dyn std::error::Error + Send + Sync + 'static>>,
    cleanup: Vec<Error>,
    session_expired: bool,
    phase: Option<ConnectPhase>,
    /// `host:port` a transport failure was trying to reach (never user
    /// info, path or query: those may hold secrets).
    target: Option<Box<str>>,
    /// The last lines a stdio server wrote on its stderr before it ended:
    /// kept apart from the message.
    stderr: Option<Arc<str>>,
    /// The message says it all: shown without the kind's words.
    bare: bool,
}

/// The step of [`Connector::connect`](crate::Connector::connect) an error
/// came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum ConnectPhase {
    /// Reaching the server at all: nothing came back.
    Connect,
    /// `initialize` and the version negotiation.
    Initialize,
    /// `notifications/initialized`.
    Initialized,
    /// Listing tools, prompts, resources and templates.
    Discovery,
}

impl fmt::Display for ConnectPhase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ConnectPhase::Connect => "connect",
            ConnectPhase::Initialize => "initialize",
            ConnectPhase::Initialized => "initialized",
            ConnectPhase::Discovery => "discovery",
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Building a client or a request failed (bad URL, bad header value).
    Builder,
    /// The HTTP exchange failed below the HTTP status: connect, TLS, reset.
    Transport,
    /// A stdio server's pipe: its process ended, or closed its stdout.
    #[cfg(feature = "stdio")]
    Stdio,
    /// The server answered with a non-success HTTP status.
    Status,
    /// The server answered with a JSON-RPC error object.
    Rpc,
    /// The server broke the protocol: wrong content type, malformed JSON, a
    /// stream that ended without the response, an invalid session id.
    Protocol,
    /// A configured size limit was exceeded.
    Limit,
    /// A redirect we refuse to follow.
    Redirect,
    /// A header hook's provider failed.
    Hook,
    /// The OAuth authorization flow failed or was refused.
    Auth,
    /// The session is closed or closing.
    Closed,
    /// A deadline of ours passed.
    Timeout,
}

impl Error {
    pub(crate) fn new(kind: Kind) -> Self {
        Error {
            inner: Box::new(Inner {
                kind,
                status: None,
                rpc: None,
                www_authenticate: None,
                body: None,
                message: None,
                source: None,
                cleanup: Vec::new(),
                session_expired: false,
                target: None,
                stderr: None,
                bare: false,
                phase: None,
            }),
        }
    }

    pub(crate) fn with_message(mut self, message: impl Into<String>) -> Self {
        self.inner.message = Some(message.into());
        self
    }

    pub(crate) fn with_source(self, source: impl Into<BoxError>) -> Self {
        self.with_boxed_source(source.into())
    }

    fn with_boxed_source(mut self, source: BoxError) -> Self {
        self.inner.source = Some(Arc::from(source));
        self
    }

    /// The same error again, for a second party waiting on one failure.
    pub(crate) fn duplicate(&self) -> Error {
        let inner = &self.inner;
        Error {
            inner: Box::new(Inner {
                kind: inner.kind,
                status: inner.status,
                rpc: inner.rpc.clone(),
                www_authenticate: inner.www_authenticate.clone(),
                body: inner.body.clone(),
                message: inner.message.clone(),
                source: inner.source.clone(),
                cleanup: inner.cleanup.iter().map(Error::duplicate).collect(),
                session_expired: inner.session_expired,
                phase: inner.phase,
                target: inner.target.clone(),
                stderr: inner.stderr.clone(),
                bare: inner.bare,
            }),
        }
    }

    /// Notes where a transport failure was going: `host:port` of `uri`.
    pub(crate) fn with_target(mut self, uri: &http::Uri) -> Self {
        if let Some(host) = uri.host() {
            let port = uri.port_u16().unwrap_or(match uri.scheme_str() {
                Some("https") => 443,
                _ => 80,
            });
            self.inner.target = Some(format!("{host}:{port}").into());
        }
        self
    }

    pub(crate) fn with_status(mut self, status: StatusCode) -> Self {
        self.inner.status = Some(status);
        self
    }

    pub(crate) fn with_rpc(mut self, rpc: ErrorObject) -> Self {
        self.inner.rpc = Some(rpc);
        self
    }

    pub(crate) fn with_www_authenticate(mut self, challenge: Option<String>) -> Self {
        self.inner.www_authenticate = challenge;
        self
    }

    /// Attaches the start of an error status's body, already escaped and
    /// cut (see [`body_excerpt`](Self::body_excerpt)).
    pub(crate) fn with_body_excerpt(mut self, excerpt: Option<Box<str>>) -> Self {
        self.inner.body = excerpt;
        self
    }

    /// Attaches errors of cleanup steps that failed after this one; they
    /// never replace it.
    pub(crate) fn with_cleanup(mut self, errors: Vec<Error>) -> Self {
        self.inner.cleanup.extend(errors);
        self
    }

    /// Puts `context` before the message, keeping the kind, the status and
    /// the codes (the fleet names the server and what became of a call).
    pub(crate) fn context(mut self, context: impl Into<String>) -> Self {
        let context = context.into();
        self.inner.message = Some(match self.inner.message.take() {
            Some(message) => format!("{context}: {message}"),
            None => context,
        });
        self
    }

    /// Adds `hint` after the message: what may explain the failure.
    #[cfg(feature = "stdio")]
    pub(crate) fn with_hint(mut self, hint: impl Into<String>) -> Self {
        let hint = hint.into();
        self.inner.message = Some(match self.inner.message.take() {
            Some(message) => format!("{message}; {hint}"),
            None => hint,
        });
        self
    }

    pub(crate) fn builder(message: impl Into<String>) -> Self {
        Error::new(Kind::Builder).with_message(message)
    }

    /// This error, whose message says what happened in a host's words
    /// ("no server named `x` in the fleet"), shown alone: without the
    /// kind's words ("invalid configuration: ..."), which stay its kind.
    #[cfg(feature = "fleet")]
    pub(crate) fn plainly(mut self) -> Self {
        self.inner.bare = true;
        self
    }

    // `BoxError`, not `impl Into<BoxError>`: the generic form trips a rustc
    // limitation ("implementation of `From` is not general enough") when the
    // calling future is checked for `Send`.
    pub(crate) fn transport(source: BoxError) -> Self {
        Error::new(Kind::Transport).with_boxed_source(source)
    }

    pub(crate) fn protocol(message: impl Into<String>) -> Self {
        Error::new(Kind::Protocol).with_message(message)
    }

    pub(crate) fn limit(message: impl Into<String>) -> Self {
        Error::new(Kind::Limit).with_message(message)
    }

    pub(crate) fn redirect(message: impl Into<String>) -> Self {
        Error::new(Kind::Redirect).with_message(message)
    }

    pub(crate) fn hook(source: BoxError) -> Self {
        Error::new(Kind::Hook).with_boxed_source(source)
    }

    #[cfg(feature = "oauth")]
    pub(crate) fn auth(message: impl Into<String>) -> Self {
        Error::new(Kind::Auth).with_message(message)
    }

    pub(crate) fn timeout(message: impl Into<String>) -> Self {
        Error::new(Kind::Timeout).with_message(message)
    }

    pub(crate) fn delete_timeout(after: std::time::Duration) -> Self {
        Error::new(Kind::Timeout).with_message(format!("the DELETE took longer than {after:?}"))
    }

    /// Notes the connect step this error came from (the first one noted
    /// stays).
    pub(crate) fn in_phase(mut self, phase: ConnectPhase) -> Self {
        self.inner.phase.get_or_insert(phase);
        self
    }

    pub(crate) fn connect_timeout(after: std::time::Duration, phase: ConnectPhase) -> Self {
        Error::new(Kind::Timeout)
            .with_message(format!("connect took longer than {after:?}"))
            .in_phase(phase)
    }

    pub(crate) fn request_timeout(after: std::time::Duration) -> Self {
        Error::new(Kind::Timeout).with_message(format!("no response within {after:?}"))
    }

    /// A stdio server could not be started, or its pipes failed: that
    /// transport (a new process may work).
    #[cfg(feature = "stdio")]
    pub(crate) fn stdio(source: BoxError) -> Self {
        Error::new(Kind::Stdio).with_boxed_source(source)
    }

    /// A stdio server's process ended, or closed its stdout: the pipe,
    /// which is that transport, is gone (a new process may work).
    #[cfg(feature = "stdio")]
    pub(crate) fn server_exited(message: impl Into<String>) -> Self {
        Error::new(Kind::Stdio).with_message(message)
    }

    /// Keeps the end of a stdio server's stderr with the error.
    #[cfg(feature = "stdio")]
    pub(crate) fn with_stderr(mut self, tail: impl Into<Arc<str>>) -> Self {
        self.inner.stderr = Some(tail.into());
        self
    }

    /// The last lines a stdio server wrote on its stderr before its
    /// process ended (or closed its stdout), as this error's cause: what
    /// a user needs to fix a crash ("fatal: no API key"). Kept apart from
    /// the message: `Display` leaves it out, so a host shows the one-line
    /// state and the server's own words where it wants them. Bounded by
    /// [`StdioCommand::stderr_tail`](crate::stdio::StdioCommand::stderr_tail);
    /// `None` for every other error, and for a server that wrote nothing.
    pub fn stderr_tail(&self) -> Option<&str> {
        self.inner.stderr.as_deref()
    }

    pub(crate) fn closed() -> Self {
        Error::new(Kind::Closed)
    }

    pub(crate) fn rpc(rpc: ErrorObject) -> Self {
        Error::new(Kind::Rpc).with_rpc(rpc)
    }

    /// True when the server answered with an HTTP status we treat as failure;
    /// [`status`](Self::status) has it.
    pub fn is_status(&self) -> bool {
        self.inner.kind == Kind::Status
    }

    /// True when the server answered with a JSON-RPC error;
    /// [`rpc_error`](Self::rpc_error) has it.
    ///
    /// An HTTP error status whose body was a JSON-RPC error is a status error
    /// (`is_status()`) that also carries the JSON-RPC error.
    pub fn is_rpc(&self) -> bool {
        self.inner.kind == Kind::Rpc
    }

    /// True when a deadline passed.
    pub fn is_timeout(&self) -> bool {
        self.inner.kind == Kind::Timeout
            || self.chain().any(|cause| {
                cause.is::<tokio::time::error::Elapsed>()
                    || cause
                        .downcast_ref::<std::io::Error>()
                        .is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut)
            })
    }

    /// True when the server broke the protocol: an unexpected content type,
    /// malformed JSON, a stream that ended without the response, an invalid
    /// session id.
    pub fn is_protocol(&self) -> bool {
        self.inner.kind == Kind::Protocol
    }

    /// True when a configured size limit (JSON body, SSE event) was exceeded.
    pub fn is_limit(&self) -> bool {
        self.inner.kind == Kind::Limit
    }

    /// True when the server redirected and we refused to follow.
    pub fn is_redirect(&self) -> bool {
        self.inner.kind == Kind::Redirect
    }

    /// True when a header hook's provider failed (for example, a token
    /// refresh).
    pub fn is_hook(&self) -> bool {
        self.inner.kind == Kind::Hook
    }

    /// True when the OAuth authorization flow (feature `oauth`) failed or
    /// refused to go on: metadata that does not check out, an
    /// authorization server that refused, a server still refusing after
    /// the bounded number of authorizations.
    pub fn is_auth(&self) -> bool {
        self.inner.kind == Kind::Auth
    }

    /// True when the session was closed (or was closing) before the call
    /// could finish.
    pub fn is_closed(&self) -> bool {
        self.inner.kind == Kind::Closed
    }

    /// True when the HTTP exchange failed below the HTTP layer (refused,
    /// reset, TLS) or the client could not be used; or a stdio server's
    /// process ended (or closed its stdout) under the session.
    pub fn is_transport(&self) -> bool {
        match self.inner.kind {
            Kind::Transport => true,
            #[cfg(feature = "stdio")]
            Kind::Stdio => true,
            _ => false,
        }
    }

    /// True when the failure is ours before anything was sent: an invalid URL
    /// or header value, a client that could not be built.
    pub fn is_builder(&self) -> bool {
        self.inner.kind == Kind::Builder
    }

    /// True when a request that carried a session id was answered 404: the
    /// server ended the session (see the transport spec, "Session
    /// Management"). A 404 to a request without a session id is only a
    /// status error.
    pub fn is_session_expired(&self) -> bool {
        self.inner.session_expired
    }

    /// Marks a 404 to a request that carried a session id.
    pub(crate) fn with_session_expired(mut self) -> Self {
        self.inner.session_expired = self.inner.status == Some(StatusCode::NOT_FOUND);
        self
    }

    /// True when trying again later may succeed where this failed: a new
    /// connect, or the same request on a live session. For a supervisor
    /// deciding between a retry with backoff and waiting for a person.
    ///
    /// Retryable: the HTTP exchange failed below HTTP (refused, reset,
    /// cut) except a refused TLS handshake; a timeout; HTTP 404 to a
    /// session (it expired: a new one may work), 408, 425, 429 and every
    /// 5xx; a header provider that failed (a token refresh may work next
    /// time); a closed session (a new one may work); a stdio server whose
    /// process ended (a new one may work).
    ///
    /// Not retryable, since the same attempt would fail the same way until
    /// something changes: an invalid configuration
    /// ([`is_builder`](Self::is_builder)); 401 and 403 and a failed
    /// authorization ([`is_auth`](Self::is_auth)), which need credentials;
    /// other 4xx; a JSON-RPC error (the server answered); a protocol
    /// violation, an exceeded size limit, a refused redirect.
    pub fn is_retryable(&self) -> bool {
        match self.inner.kind {
            Kind::Transport => !self.chain().any(|cause| {
                // hyper-rustls reports a refused handshake or certificate
                // as an `InvalidData` I/O error.
                let refused = cause
                    .downcast_ref::<std::io::Error>()
                    .is_some_and(|io| io.kind() == std::io::ErrorKind::InvalidData);
                // A TLS failure after the handshake (a refused client
                // certificate) fails again.
                #[cfg(feature = "rustls")]
                let refused = refused || cause.is::<rustls::Error>();
                // A hop that refused (a proxy's 407, a refused CONNECT)
                // refuses again.
                #[cfg(feature = "proxy")]
                let refused = refused
                    || cause
                        .downcast_ref::<HopError>()
                        .is_some_and(|hop| !hop.retryable);
                refused
            }),
            Kind::Timeout | Kind::Hook | Kind::Closed => true,
            // A new process may work (a crash loop is the backoff's).
            #[cfg(feature = "stdio")]
            Kind::Stdio => true,
            Kind::Status => {
                self.inner.session_expired
                    || self.inner.status.is_some_and(|status| {
                        status.is_server_error() || matches!(status.as_u16(), 408 | 425 | 429)
                    })
            }
            Kind::Builder
            | Kind::Rpc
            | Kind::Protocol
            | Kind::Limit
            | Kind::Redirect
            | Kind::Auth => false,
        }
    }

    /// The HTTP status of the answer, when there was one.
    pub fn status(&self) -> Option<StatusCode> {
        self.inner.status
    }

    /// The JSON-RPC error the server sent, when there was one (in a response
    /// to our request, or as the id-less body of an HTTP error).
    pub fn rpc_error(&self) -> Option<&ErrorObject> {
        self.inner.rpc.as_ref()
    }

    /// The JSON-RPC error code, when there was one.
    pub fn rpc_code(&self) -> Option<i64> {
        self.inner.rpc.as_ref().map(|rpc| rpc.code)
    }

    /// The `WWW-Authenticate` challenge of a 401 or 403, so an OAuth layer can
    /// act on it. It is the server's text, not ours.
    pub fn www_authenticate(&self) -> Option<&str> {
        self.inner.www_authenticate.as_deref()
    }

    /// The start of an HTTP error status's body, when it was text (a
    /// `text/*` type, or JSON that held no JSON-RPC error): at most
    /// [`BODY_EXCERPT`] bytes, whitespace runs as one space, a run of 24 or
    /// more characters a credential is made of (a token the server repeats)
    /// as `[redacted]`, control and
    /// invisible characters escaped (`\u{1b}`), `…` where it was cut. Often
    /// where a server says what to fix ("Access is only allowed at
    /// localhost:8931"); also in the error's `Display`. The server's text,
    /// not ours.
    pub fn body_excerpt(&self) -> Option<&str> {
        self.inner.body.as_deref()
    }

    /// The step of `connect` this error came from, for an error of
    /// [`Connector::connect`](crate::Connector::connect).
    pub fn connect_phase(&self) -> Option<ConnectPhase> {
        self.inner.phase
    }

    /// Cleanup steps that failed after this error (for example the DELETE of
    /// a session whose connect failed). The error itself is the first cause.
    pub fn cleanup_errors(&self) -> &[Error] {
        &self.inner.cleanup
    }

    /// Every cause below this error. An `io::Error` wrapping another error
    /// hides it from `source()` (it returns the wrapped error's source), so
    /// the wrapped error is visited too: hyper-rustls puts its TLS error
    /// two `io::Error`s deep.
    fn chain(&self) -> impl Iterator<Item = &(dyn std::error::Error + 'static)> {
        let mut next = std::error::Error::source(self);
        std::iter::from_fn(move || {
            let current = next?;
            next = match current.downcast_ref::<std::io::Error>() {
                Some(io) => match io.get_ref() {
                    Some(inner) => Some(inner as &(dyn std::error::Error + 'static)),
                    None => current.source(),
                },
                None => current.source(),
            };
            Some(current)
        })
    }

    /// The deepest cause of a transport failure, in a few words: what a
    /// person can act on (refused, reset, untrusted certificate), else the
    /// deepest cause's own text.
    fn root_cause(&self) -> Option<String> {
        let cause = self.deepest_cause()?;
        // A hop's failure (a proxy's) names the hop, then what went wrong
        // below it.
        #[cfg(feature = "proxy")]
        if let Some(hop) = self
            .chain()
            .find_map(|cause| cause.downcast_ref::<HopError>())
        {
            if std::error::Error::source(hop).is_some() {
                return Some(format!("{hop}: {cause}"));
            }
        }
        Some(cause)
    }

    fn deepest_cause(&self) -> Option<String> {
        let deepest = self.chain().last()?;
        #[cfg(feature = "rustls")]
        if let Some(tls) = self
            .chain()
            .find_map(|cause| cause.downcast_ref::<rustls::Error>())
        {
            return Some(describe_tls(tls));
        }
        if let Some(io) = self
            .chain()
            .filter_map(|cause| cause.downcast_ref::<std::io::Error>())
            .last()
        {
            use std::io::ErrorKind as K;
            let words = match io.kind() {
                K::ConnectionRefused => Some("connection refused"),
                K::ConnectionReset => Some("connection reset by the server"),
                K::ConnectionAborted => Some("connection aborted"),
                K::TimedOut => Some("timed out"),
                K::AddrNotAvailable => Some("address not available"),
                K::UnexpectedEof => Some("the connection closed early"),
                _ => None,
            };
            if let Some(words) = words {
                return Some(words.to_owned());
            }
        }
        Some(deepest.to_string())
    }

    fn kind_str(&self) -> &'static str {
        match self.inner.kind {
            Kind::Builder => "invalid configuration",
            Kind::Transport => "HTTP transport failed",
            #[cfg(feature = "stdio")]
            Kind::Stdio => "stdio transport failed",
            Kind::Status => "server answered with an error status",
            Kind::Rpc => "server answered with a JSON-RPC error",
            Kind::Protocol => "protocol violation",
            Kind::Limit => "size limit exceeded",
            Kind::Redirect => "redirect refused",
            Kind::Hook => "a header provider failed",
            Kind::Auth => "authorization failed",
            Kind::Closed => "the session is closed",
            Kind::Timeout => "timed out",
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.inner.bare {
            if let Some(message) = &self.inner.message {
                f.write_str(message)?;
            }
            if let Some(phase) = self.inner.phase {
                write!(f, ", during {phase}")?;
            }
            return Ok(());
        }
        f.write_str(self.kind_str())?;
        if let Some(status) = self.inner.status {
            write!(f, ": HTTP {status}")?;
        }
        if let Some(rpc) = &self.inner.rpc {
            write!(f, ": JSON-RPC error {}: {}", rpc.code, rpc.message)?;
        }
        if let Some(body) = &self.inner.body {
            write!(f, ": the server said \"{body}\"")?;
        }
        if self.inner.session_expired {
            f.write_str(": the server ended the session")?;
        }
        if let Some(message) = &self.inner.message {
            write!(f, ": {message}")?;
        }
        // The root cause a host shows its user, in words (the chain keeps
        // the details).
        let shows_cause = self.inner.kind == Kind::Transport;
        #[cfg(feature = "stdio")]
        let shows_cause = shows_cause || self.inner.kind == Kind::Stdio;
        if shows_cause {
            if let Some(cause) = self.root_cause() {
                write!(f, ": {cause}")?;
            }
            if let Some(target) = &self.inner.target {
                write!(f, " ({target})")?;
            }
        }
        if let Some(phase) = self.inner.phase {
            write!(f, ", during {phase}")?;
        }
        if let Some(first) = self.inner.cleanup.first() {
            write!(f, " (cleanup also failed: {first}")?;
            if self.inner.cleanup.len() > 1 {
                write!(f, ", and {} more", self.inner.cleanup.len() - 1)?;
            }
            f.write_str(")")?;
        }
        Ok(())
    }
}

/// A refused TLS handshake in words; a certificate problem named as one.
#[cfg(feature = "rustls")]
fn describe_tls(error: &rustls::Error) -> String {
    use rustls::CertificateError as C;
    match error {
        rustls::Error::InvalidCertificate(C::UnknownIssuer) => {
            "the server's certificate is not trusted (unknown issuer)".to_owned()
        }
        rustls::Error::InvalidCertificate(C::Expired | C::ExpiredContext { .. }) => {
            "the server's certificate has expired".to_owned()
        }
        rustls::Error::InvalidCertificate(
            C::NotValidForName | C::NotValidForNameContext { .. },
        ) => "the server's certificate is not valid for this host name".to_owned(),
        rustls::Error::InvalidCertificate(other) => {
            format!("the server's certificate was refused: {other:?}")
        }
        // The server's verdict on our client certificate (mTLS).
        rustls::Error::AlertReceived(rustls::AlertDescription::CertificateRequired) => {
            "the server asks for a client certificate (HttpClientBuilder::client_identity)"
                .to_owned()
        }
        rustls::Error::AlertReceived(
            alert @ (rustls::AlertDescription::BadCertificate
            | rustls::AlertDescription::UnsupportedCertificate
            | rustls::AlertDescription::CertificateRevoked
            | rustls::AlertDescription::CertificateExpired
            | rustls::AlertDescription::CertificateUnknown
            | rustls::AlertDescription::UnknownCA
            | rustls::AlertDescription::AccessDenied),
        ) => format!("the server refused our client certificate ({alert:?})"),
        other => format!("TLS failed: {other}"),
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("mcp_scoped_http::Error");
        d.field("kind", &self.inner.kind);
        if let Some(phase) = self.inner.phase {
            d.field("phase", &phase);
        }
        if let Some(status) = self.inner.status {
            d.field("status", &status);
        }
        if let Some(rpc) = &self.inner.rpc {
            d.field("rpc_code", &rpc.code);
            d.field("rpc_message", &rpc.message);
        }
        if let Some(body) = &self.inner.body {
            d.field("body", body);
        }
        if let Some(message) = &self.inner.message {
            d.field("message", message);
        }
        if let Some(source) = &self.inner.source {
            d.field("source", source);
        }
        if !self.inner.cleanup.is_empty() {
            d.field("cleanup", &self.inner.cleanup);
        }
        d.finish()
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.inner
            .source
            .as_ref()
            .map(|source| &**source as &(dyn std::error::Error + 'static))
    }
}

/// A failure of a hop between this client and the server (a proxy that
/// could not be reached, or that refused us), with the verdict of the code
/// that met it: whether the same attempt may succeed later.
///
/// It rides in an [`Error`]'s cause chain, where [`Error`] reads the verdict
/// and puts the hop's words first without knowing who made it.
/// Transparent: it shows (`Display`, `Debug`) and has the causes of the
/// error it wraps.
#[cfg(feature = "proxy")]
pub(crate) struct HopError {
    error: BoxError,
    retryable: bool,
}

#[cfg(feature = "proxy")]
impl HopError {
    /// `error`, which a later attempt may not meet: the hop was down, or
    /// cut the connection short.
    pub(crate) fn transient(error: impl Into<BoxError>) -> Self {
        HopError {
            error: error.into(),
            retryable: true,
        }
    }

    /// `error`, a refusal the same attempt meets again until something
    /// changes (credentials, configuration).
    pub(crate) fn refusal(error: impl Into<BoxError>) -> Self {
        HopError {
            error: error.into(),
            retryable: false,
        }
    }
}

#[cfg(feature = "proxy")]
impl fmt::Display for HopError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.error, f)
    }
}

#[cfg(feature = "proxy")]
impl fmt::Debug for HopError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.error, f)
    }
}

#[cfg(feature = "proxy")]
impl std::error::Error for HopError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.error.source()
    }
}

/// A response without an id: the server's error about a message it could
/// not read (an id-less result is no answer to anything).
pub(crate) fn idless_response(
    outcome: std::result::Result<Box<serde_json::value::RawValue>, ErrorObject>,
) -> Error {
    Error::rpc(outcome.err().unwrap_or_else(|| ErrorObject {
        code: crate::jsonrpc::codes::INTERNAL_ERROR,
        message: "a response without an id".into(),
        data: None,
    }))
}

/// A result (JSON text, as the engine returns it) read as a
/// [`serde_json::Value`], for the results the session or its caller reads
/// whole; one that does not read is the server's protocol violation.
pub(crate) fn result_value(
    result: &serde_json::value::RawValue,
    method: &str,
) -> Result<serde_json::Value> {
    serde_json::from_str(result.get())
        .map_err(|e| Error::protocol(format!("the {method} result could not be read: {e}")))
}

/// The most bytes of an error status's body kept in the error
/// ([`Error::body_excerpt`]): enough for a sentence that says what to fix.
pub const BODY_EXCERPT: usize = 300;

/// An error body's start, to show: whitespace runs as one space, escaped
/// (see [`crate::text::escape`]), at most [`BODY_EXCERPT`] bytes. `None`
/// when nothing but whitespace is left.
pub(crate) fn body_excerpt(body: &[u8]) -> Option<Box<str>> {
    let text = String::from_utf8_lossy(body);
    let words: Vec<String> = text.split_whitespace().map(redacted).collect();
    if words.is_empty() {
        return None;
    }
    Some(crate::text::escape(&words.join(" "), BODY_EXCERPT).into())
}

/// The shortest run of credential characters (letters, digits, `-._~+/=`:
/// a bearer token, an API key, a JWT) an excerpt does not show: a server
/// that repeats the token it refused ("invalid token: eyJhbGci...") must
/// not put it into a host's logs. Words and host names are shorter.
const CREDENTIAL_RUN: usize = 24;

/// `word` with each run of [`CREDENTIAL_RUN`] or more credential
/// characters replaced by `[redacted]`.
fn redacted(word: &str) -> String {
    let credential = |c: char| c.is_ascii_alphanumeric() || "-._~+/=".contains(c);
    let mut out = String::with_capacity(word.len());
    let mut run = String::new();
    let flush = |run: &mut String, out: &mut String| {
        if run.len() >= CREDENTIAL_RUN {
            out.push_str("[redacted]");
        } else {
            out.push_str(run);
        }
        run.clear();
    };
    for c in word.chars() {
        if credential(c) {
            run.push(c);
        } else {
            flush(&mut run, &mut out);
            out.push(c);
        }
    }
    flush(&mut run, &mut out);
    out
}

/// An HTTP error status, with what the body told us about it.
pub(crate) fn status_error(
    status: StatusCode,
    rpc: Option<ErrorObject>,
    www_authenticate: Option<String>,
) -> Error {
    let mut error = Error::new(Kind::Status)
        .with_status(status)
        .with_www_authenticate(www_authenticate);
    if let Some(rpc) = rpc {
        error = error.with_rpc(rpc);
    }
    error
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_excerpt_shows_no_credential() {
        let token = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.c2lnbmF0dXJl";
        let body = format!(
            "invalid token: Bearer {token} (expired)\nAccess is only allowed at localhost:18401"
        );
        let excerpt = body_excerpt(body.as_bytes()).unwrap();
        assert_eq!(
            &*excerpt,
            "invalid token: Bearer [redacted] (expired) Access is only allowed at localhost:18401"
        );
        assert_eq!(redacted("key=sk_live_0123456789abcdefghij,"), "[redacted],");
        assert_eq!(redacted("short-words_are.shown"), "short-words_are.shown");
    }

    #[test]
    fn status_error_reports_status_and_rpc_code() {
        let rpc = ErrorObject {
            code: -32600,
            message: "bad".into(),
            data: None,
        };
        let error = status_error(StatusCode::BAD_REQUEST, Some(rpc), None);
        assert!(error.is_status());
        assert_eq!(error.status(), Some(StatusCode::BAD_REQUEST));
        assert_eq!(error.rpc_code(), Some(-32600));
        let shown = error.to_string();
        assert!(shown.contains("400"), "{shown}");
        assert!(shown.contains("-32600"), "{shown}");
    }

    #[test]
    fn session_expiry_is_a_404_to_a_request_with_a_session() {
        assert!(
            status_error(StatusCode::NOT_FOUND, None, None)
                .with_session_expired()
                .is_session_expired()
        );
        assert!(!status_error(StatusCode::NOT_FOUND, None, None).is_session_expired());
        assert!(
            !status_error(StatusCode::BAD_REQUEST, None, None)
                .with_session_expired()
                .is_session_expired()
        );
        assert!(!Error::protocol("x").is_session_expired());
    }

    #[test]
    fn retryable_is_what_a_later_attempt_may_fix() {
        let status = |code: u16| status_error(StatusCode::from_u16(code).unwrap(), None, None);
        for code in [408, 425, 429, 500, 502, 503, 504] {
            assert!(status(code).is_retryable(), "{code}");
        }
        for code in [400, 401, 403, 404, 405, 422] {
            assert!(!status(code).is_retryable(), "{code}");
        }
        assert!(status(404).with_session_expired().is_retryable());
        let refused = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        assert!(Error::transport(Box::new(refused)).is_retryable());
        let tls = std::io::Error::new(std::io::ErrorKind::InvalidData, "bad certificate");
        assert!(!Error::transport(Box::new(tls)).is_retryable());
        assert!(Error::timeout("slow").is_retryable());
        assert!(Error::closed().is_retryable());
        assert!(!Error::builder("bad URL").is_retryable());
        assert!(!Error::protocol("html").is_retryable());
        assert!(!Error::limit("big").is_retryable());
        assert!(!Error::redirect("elsewhere").is_retryable());
        let rpc = ErrorObject {
            code: -32601,
            message: "no".into(),
            data: None,
        };
        assert!(!Error::rpc(rpc).is_retryable());
    }

    #[test]
    fn timeout_is_found_in_the_cause_chain() {
        let io = std::io::Error::new(std::io::ErrorKind::TimedOut, "slow");
        assert!(Error::transport(Box::new(io)).is_timeout());
        assert!(!Error::protocol("x").is_timeout());
    }
}
