//! The flow's own HTTP exchanges, through the session's client port: no
//! session hooks, no redirects followed, bodies read within a bound, each
//! exchange under a [`Deadline`].
//!
//! Every request here goes to a [`SecureTarget`] (HTTPS, or plain HTTP to
//! this machine, unless the caller allowed plain HTTP) and runs under a
//! [`Deadline`]: both are arguments of [`exchange`], the one function that
//! sends, so a request without either does not compile. The URI sent is
//! the target's own, the value the check was made on.

use bytes::Bytes;
use http::header::{ACCEPT, CONTENT_TYPE};
use http::{HeaderValue, Method, Request, StatusCode};
use http_body_util::Full;
use serde_json::Value;

use crate::HttpClient;
use crate::body::read_limited;
use crate::deadline::Deadline;
use crate::error::{Error, Result};
use crate::url_target::SecureTarget;

/// The largest metadata document, registration or token answer read.
const MAX_BODY: usize = 256 * 1024;

/// A response with its body read.
pub(super) struct Answer {
    pub(super) status: StatusCode,
    pub(super) content_type: Option<HeaderValue>,
    pub(super) body: Bytes,
}

impl Answer {
    /// The body as JSON, when it is an object.
    pub(super) fn json(&self, what: &str) -> Result<Value> {
        let value: Value = serde_json::from_slice(&self.body)
            .map_err(|_| Error::auth(format!("{what} is not JSON")))?;
        if !value.is_object() {
            return Err(Error::auth(format!("{what} is not a JSON object")));
        }
        Ok(value)
    }
}

/// A request about to be sent: its method, headers and body; the URI is
/// the target's, set by [`exchange`].
pub(super) struct Outgoing {
    method: Method,
    headers: http::HeaderMap,
    body: Bytes,
}

/// Sends `outgoing` to `target` and reads the answer (at most
/// [`MAX_BODY`] bytes), all before `deadline`. `what` names the exchange
/// in errors.
pub(super) fn exchange<'a>(
    client: &'a HttpClient,
    target: &'a SecureTarget,
    outgoing: Outgoing,
    deadline: Deadline,
    what: &'a str,
) -> super::BoxFuture<'a, Result<Answer>> {
    // Boxed here, where its lifetimes are concrete: a boxed `Send` future
    // built around it elsewhere trips the compiler's higher-ranked checks.
    Box::pin(exchange_inner(client, target, outgoing, deadline, what))
}

async fn exchange_inner(
    client: &HttpClient,
    target: &SecureTarget,
    outgoing: Outgoing,
    deadline: Deadline,
    what: &str,
) -> Result<Answer> {
    let mut request = Request::new(Full::new(outgoing.body));
    *request.method_mut() = outgoing.method;
    *request.uri_mut() = target.uri();
    *request.headers_mut() = outgoing.headers;
    let work = async {
        let response = client.send_scoped(request, None).await?;
        let status = response.status();
        let content_type = response.headers().get(CONTENT_TYPE).cloned();
        let body = read_limited(response, MAX_BODY, what).await?;
        Ok(Answer {
            status,
            content_type,
            body,
        })
    };
    deadline.run(work).await.map_err(|error| {
        if error.is_timeout() {
            let message = format!("{what}: {error}");
            error.with_message(message)
        } else {
            error
        }
    })
}

/// GETs a JSON document.
pub(super) async fn get(
    client: &HttpClient,
    target: &SecureTarget,
    deadline: Deadline,
    what: &str,
) -> Result<Answer> {
    let mut headers = http::HeaderMap::new();
    headers.insert(ACCEPT, HeaderValue::from_static("application/json"));
    let outgoing = Outgoing {
        method: Method::GET,
        headers,
        body: Bytes::new(),
    };
    exchange(client, target, outgoing, deadline, what).await
}

/// POSTs a JSON document.
pub(super) async fn post_json(
    client: &HttpClient,
    target: &SecureTarget,
    body: &Value,
    deadline: Deadline,
    what: &str,
) -> Result<Answer> {
    let mut headers = http::HeaderMap::new();
    headers.insert(ACCEPT, HeaderValue::from_static("application/json"));
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    let outgoing = Outgoing {
        method: Method::POST,
        headers,
        body: Bytes::from(body.to_string()),
    };
    exchange(client, target, outgoing, deadline, what).await
}

/// The HTTP client the `oauth2` crate calls for the token endpoint: ours,
/// to the checked token endpoint, under the deadline.
///
/// The `oauth2` crate builds the request from its own parse of the same
/// URL; only its method, headers and body are taken: the URI sent is the
/// checked target's.
pub(super) struct ForOAuth2 {
    pub(super) client: HttpClient,
    pub(super) target: SecureTarget,
    pub(super) deadline: Deadline,
}

impl<'c> oauth2::AsyncHttpClient<'c> for ForOAuth2 {
    type Error = Error;
    type Future = super::BoxFuture<'c, Result<oauth2::HttpResponse>>;

    fn call(&'c self, request: oauth2::HttpRequest) -> Self::Future {
        Box::pin(async move {
            let (parts, body) = request.into_parts();
            let outgoing = Outgoing {
                method: parts.method,
                headers: parts.headers,
                body: Bytes::from(body),
            };
            let what = "the token request";
            let answer =
                exchange(&self.client, &self.target, outgoing, self.deadline, what).await?;
            let mut response = http::Response::new(answer.body.to_vec());
            *response.status_mut() = answer.status;
            if let Some(content_type) = answer.content_type {
                response.headers_mut().insert(CONTENT_TYPE, content_type);
            }
            Ok(response)
        })
    }
}
