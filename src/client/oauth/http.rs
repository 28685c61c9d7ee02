//! The flow's own HTTP exchanges, through the session's client port: no
//! session hooks, no redirects followed, bodies read within a bound, each
//! exchange within the configured timeout.

use std::time::Duration;

use bytes::Bytes;
use http::header::{ACCEPT, CONTENT_TYPE};
use http::{HeaderValue, Method, Request, StatusCode};
use http_body_util::Full;
use serde_json::Value;

use crate::HttpClient;
use crate::error::{Error, Result};

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

/// Sends `request` and reads the answer (at most [`MAX_BODY`] bytes),
/// within `timeout`. `what` names the exchange in errors.
pub(super) fn exchange<'a>(
    client: &'a HttpClient,
    request: Request<Full<Bytes>>,
    timeout: Duration,
    what: &'a str,
) -> super::BoxFuture<'a, Result<Answer>> {
    // Boxed here, where its lifetimes are concrete: a boxed `Send` future
    // built around it elsewhere trips the compiler's higher-ranked checks.
    Box::pin(exchange_inner(client, request, timeout, what))
}

async fn exchange_inner(
    client: &HttpClient,
    request: Request<Full<Bytes>>,
    timeout: Duration,
    what: &str,
) -> Result<Answer> {
    let work = async {
        let response = client.send_scoped(request, None).await?;
        let status = response.status();
        let content_type = response.headers().get(CONTENT_TYPE).cloned();
        let body = crate::transport::read_limited(response, MAX_BODY, what).await?;
        Ok(Answer {
            status,
            content_type,
            body,
        })
    };
    tokio::time::timeout(timeout, work)
        .await
        .map_err(|_| Error::timeout(format!("{what} took longer than {timeout:?}")))?
}

/// GETs a JSON document.
pub(super) async fn get(
    client: &HttpClient,
    url: &str,
    timeout: Duration,
    what: &str,
) -> Result<Answer> {
    let request = Request::builder()
        .method(Method::GET)
        .uri(url)
        .header(ACCEPT, "application/json")
        .body(Full::new(Bytes::new()))
        .map_err(|_| Error::auth(format!("{what}: not a valid URL")))?;
    exchange(client, request, timeout, what).await
}

/// POSTs a JSON document.
pub(super) async fn post_json(
    client: &HttpClient,
    url: &str,
    body: &Value,
    timeout: Duration,
    what: &str,
) -> Result<Answer> {
    let request = Request::builder()
        .method(Method::POST)
        .uri(url)
        .header(ACCEPT, "application/json")
        .header(CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .map_err(|_| Error::auth(format!("{what}: not a valid URL")))?;
    exchange(client, request, timeout, what).await
}

/// The HTTP client the `oauth2` crate calls for the token endpoint: ours,
/// with its bound.
pub(super) struct ForOAuth2 {
    pub(super) client: HttpClient,
    pub(super) timeout: Duration,
}

impl<'c> oauth2::AsyncHttpClient<'c> for ForOAuth2 {
    type Error = Error;
    type Future = super::BoxFuture<'c, Result<oauth2::HttpResponse>>;

    fn call(&'c self, request: oauth2::HttpRequest) -> Self::Future {
        Box::pin(async move {
            let (parts, body) = request.into_parts();
            let request = Request::from_parts(parts, Full::new(Bytes::from(body)));
            let answer = exchange(&self.client, request, self.timeout, "the token request").await?;
            let mut response = http::Response::new(answer.body.to_vec());
            *response.status_mut() = answer.status;
            if let Some(content_type) = answer.content_type {
                response.headers_mut().insert(CONTENT_TYPE, content_type);
            }
            Ok(response)
        })
    }
}
