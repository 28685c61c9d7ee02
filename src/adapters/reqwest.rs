//! A caller's [`reqwest::Client`] as a borrowed client (feature `reqwest`).
//!
//! ```no_run
//! # async fn run(url: &str) -> mcp_scoped_http::Result<()> {
//! use mcp_scoped_http::{Connector, HttpClient};
//!
//! // The application's own client, built once with whatever features and
//! // settings it needs, and used for its own requests too.
//! let client = reqwest::Client::builder()
//!     .redirect(reqwest::redirect::Policy::none())
//!     .build()
//!     .expect("a reqwest client");
//! let lent = HttpClient::from_reqwest(client.clone());
//!
//! let session = Connector::new(url).client(lent).bearer("token").connect().await?;
//! session.close().await; // the session's hooks are gone; `client` is untouched
//! # Ok(())
//! # }
//! ```
//!
//! The client is lent, never owned: it is cloned for each request (a
//! `reqwest::Client` is a handle to one shared pool) and only ever called.
//! Sessions' header hooks are added to the `http::Request` of that
//! session's request before it is handed to reqwest, so they never reach
//! the client's default headers, another session's requests, or the
//! caller's own requests on the same client.
//!
//! # What the lent client decides
//!
//! Its settings apply to every request a session sends through it, and this
//! crate cannot change them per request:
//!
//! - **Redirects.** Build the client with
//!   `redirect(reqwest::redirect::Policy::none())`, so that every redirect
//!   reaches this crate, which follows only a 307 or 308 to the same origin
//!   (see [the crate docs](crate#redirects)). The request body is handed to reqwest as a
//!   stream, so reqwest never replays a POST for a 307 or 308 on its own;
//!   but with reqwest's default policy it follows a 301, 302 or 303 itself,
//!   turning the POST into a GET that carries the session id and our hook
//!   headers (reqwest strips only `Authorization` and cookies when the
//!   origin changes). The adapter refuses any answer that comes from
//!   another URL than the one requested, with a transport error, but by
//!   then the redirected request has been sent.
//! - **Timeouts.** A `timeout` on the client bounds the whole exchange,
//!   body included: it also cuts the long-lived GET listening stream and
//!   slow SSE answers. Prefer `connect_timeout` and `read_timeout` on a
//!   client lent to sessions, and [`Connector::request_timeout`] for the
//!   requests. A reqwest timeout is reported as [`Error::is_timeout`].
//! - **Default headers** of the client are sent on the sessions' requests
//!   too, like the headers a caller's tower layer adds. reqwest adds a
//!   default only where the request has no header of that name, so a
//!   session's hook (its `Authorization`, say) wins over a default of the
//!   same name on that session's requests, and on no one else's.
//!
//! Errors from reqwest are passed on without their URL
//! (`reqwest::Error::without_url`): a URL can carry secrets in its query.
//!
//! [`Connector::request_timeout`]: crate::Connector::request_timeout
//! [`Error::is_timeout`]: crate::Error::is_timeout

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http_body_util::BodyExt;
use http_body_util::combinators::MapErr;
use tower::Service;

use crate::error::BoxError;
use crate::http_client::{HttpClient, RequestBody};

/// The body of a response from [`ReqwestService`]: reqwest's own body, with
/// its errors stripped of their URL.
pub type ReqwestResponseBody = MapErr<reqwest::Body, fn(reqwest::Error) -> BoxError>;

/// The future of a [`ReqwestService`] call.
pub type ReqwestFuture =
    Pin<Box<dyn Future<Output = Result<http::Response<ReqwestResponseBody>, BoxError>> + Send>>;

/// A `reqwest::Client` as a `tower::Service` of `http::Request<Full<Bytes>>`,
/// the shape [`HttpClient::borrowed`] takes.
///
/// [`HttpClient::from_reqwest`] is the short way; use this type to put the
/// client under tower layers of your own first.
#[derive(Clone)]
pub struct ReqwestService {
    client: reqwest::Client,
}

impl ReqwestService {
    /// Wraps `client` (a handle: the pool stays shared with every clone).
    pub fn new(client: reqwest::Client) -> ReqwestService {
        ReqwestService { client }
    }

    /// The wrapped client.
    pub fn client(&self) -> &reqwest::Client {
        &self.client
    }
}

impl fmt::Debug for ReqwestService {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReqwestService").finish_non_exhaustive()
    }
}

impl Service<http::Request<RequestBody>> for ReqwestService {
    type Response = http::Response<ReqwestResponseBody>;
    type Error = BoxError;
    type Future = ReqwestFuture;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        // A reqwest client is always ready: it queues on its own pool.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<RequestBody>) -> ReqwestFuture {
        let client = self.client.clone();
        Box::pin(async move {
            // A streaming body, not a reusable one: reqwest cannot replay it,
            // so it hands a 307 or 308 back to us instead of following it
            // with our headers to wherever it points.
            let request = reqwest::Request::try_from(request.map(reqwest::Body::wrap))
                .map_err(without_url)?;
            let requested = request.url().clone();
            let response = client.execute(request).await.map_err(without_url)?;
            if *response.url() != requested {
                return Err(FollowedRedirect.into());
            }
            let response = http::Response::<reqwest::Body>::from(response);
            Ok(response.map(|body| body.map_err(without_url as fn(_) -> _)))
        })
    }
}

impl HttpClient {
    /// Lends the caller's `reqwest::Client` (feature `reqwest`): a borrowed
    /// client, only ever called, never closed or changed. The caller keeps
    /// using its client for its own requests, which never carry a session's
    /// headers.
    ///
    /// Build the client with `redirect(reqwest::redirect::Policy::none())`;
    /// see [`adapters::reqwest`](crate::adapters::reqwest) for what else
    /// the client's settings decide.
    pub fn from_reqwest(client: reqwest::Client) -> HttpClient {
        HttpClient::borrowed(ReqwestService::new(client))
    }
}

/// A reqwest error without its URL; a timeout becomes an `io::Error` of kind
/// `TimedOut`, which [`crate::Error::is_timeout`] recognizes.
fn without_url(error: reqwest::Error) -> BoxError {
    let timed_out = error.is_timeout();
    let error = error.without_url();
    if timed_out {
        Box::new(std::io::Error::new(std::io::ErrorKind::TimedOut, error))
    } else {
        Box::new(error)
    }
}

/// The lent client followed a redirect on its own.
#[derive(Debug)]
struct FollowedRedirect;

impl fmt::Display for FollowedRedirect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(
            "the reqwest client followed a redirect on its own; lend one built with \
             `redirect(reqwest::redirect::Policy::none())`",
        )
    }
}

impl std::error::Error for FollowedRedirect {}
