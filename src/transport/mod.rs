//! The Streamable HTTP wire (MCP revisions 2025-03-26, 2025-06-18 and
//! 2025-11-25), client side.
//!
//! [`StreamableHttp`] sends one JSON-RPC message per POST and reads what comes
//! back; it keeps the session id and the negotiated revision and puts them on
//! every later request. It does not run the MCP lifecycle itself (that is the
//! session layer's job); it does exactly what the transport spec asks of one
//! exchange:
//!
//! - every POST carries `Content-Type: application/json` and
//!   `Accept: application/json, text/event-stream`;
//! - a notification or response answered with any 2xx is done (a body, if
//!   any, is not read);
//! - a request may be answered `application/json` or `text/event-stream`
//!   (media-type parameters and case tolerated); anything else, or a 2xx with
//!   no body, is a protocol error;
//! - an HTTP error status becomes an [`Error`] with the status, the
//!   `WWW-Authenticate` challenge and any JSON-RPC error object in the body
//!   (typically id-less), surfaced rather than matched to a request;
//! - `Mcp-Session-Id` is taken only from the answer to `initialize`, validated
//!   (visible ASCII 0x21-0x7E, at most [`TransportConfig::max_session_id_len`]
//!   bytes) and never echoed when invalid; it goes on every later request,
//!   GET and DELETE included, marked sensitive;
//! - `MCP-Protocol-Version` goes on every request after `initialize` once a
//!   revision from 2025-06-18 on is negotiated;
//! - the GET stream answers 405 when the server has none: `Ok(None)`;
//! - DELETE answered 2xx, 404 or 405 means the session has ended.
//!
//! # Redirects
//!
//! Only a 307 or 308 to the **same origin** (scheme, host and port) is
//! followed, at most [`TransportConfig::max_redirects`] times, with the same
//! method, body and headers. A redirect to another origin is refused (our
//! headers and the session id must not reach it), and so is a 301, 302 or 303,
//! which clients commonly turn into a GET.

// The decoder's whole API is public with the raw wire; the session uses
// only part of it.
#[cfg_attr(not(feature = "wire"), allow(dead_code))]
pub mod sse;

#[cfg_attr(not(feature = "wire"), allow(unreachable_pub))]
pub(crate) mod metadata;
mod replay;
mod session;
#[cfg(feature = "stdio")]
mod stdio;
mod stream;
mod wire;

use std::fmt;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::header::{ACCEPT, CONTENT_TYPE, LOCATION, WWW_AUTHENTICATE};
use http::{HeaderMap, HeaderValue, Method, StatusCode, Uri};
use http_body_util::Full;
use serde_json::{Map, Value};
use tracing::Instrument;

pub use crate::version::{ProtocolVersion, TransportKind};
pub(crate) use replay::ReplayFilter;
pub use session::{DEFAULT_MAX_SESSION_ID_LEN, SessionId};
#[cfg(feature = "stdio")]
pub(crate) use stdio::{OUTGOING_LINES, StdioWire};
pub use stream::MessageStream;
pub(crate) use wire::Wire;

use crate::body::read_limited_charged;
use crate::budget::{Account, Charge, messages_cost};
use crate::deadline::Deadline;
use crate::error::{BODY_EXCERPT, Error, Result, body_excerpt, status_error};
use crate::http_client::{HttpClient, ResponseBody, ScopeId};
use crate::jsonrpc::{
    Batch, Message, Notification, Request, Response, encode, encode_call, parse_messages,
};
use crate::origin::Origin;
use crate::sync::lock;

pub use crate::headers::{LAST_EVENT_ID, MCP_PROTOCOL_VERSION, MCP_SESSION_ID};

const ACCEPT_POST: HeaderValue = HeaderValue::from_static("application/json, text/event-stream");
const ACCEPT_SSE: HeaderValue = HeaderValue::from_static("text/event-stream");
const APPLICATION_JSON: HeaderValue = HeaderValue::from_static("application/json");

/// Limits and policies of the wire. Every default is safe for an untrusted
/// server.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct TransportConfig {
    /// Largest `application/json` body read. Default: 8 MiB.
    pub max_json_body: usize,
    /// Largest SSE event (and longest SSE line). Default: 8 MiB.
    pub max_sse_event: usize,
    /// Longest session id accepted. Default: 512 bytes.
    pub max_session_id_len: usize,
    /// Same-origin 307/308 redirects followed per request. Default: 5.
    pub max_redirects: usize,
    /// Bytes of an error body read to find a JSON-RPC error. Default: 64 KiB.
    pub max_error_body: usize,
    /// Messages (notifications, server requests) kept while waiting for the
    /// response in the raw wire's `StreamableHttp::request` (feature
    /// `wire`). Default: 1024.
    pub max_preceding_messages: usize,
    /// Most messages in one batch, which servers that negotiated 2025-03-26
    /// may send: a JSON answer that is an array, or one SSE event whose data
    /// is. A larger batch is refused when its message past the limit is
    /// reached, before it is built, so that a body or event of many tiny
    /// messages does not expand into as many values. Default: 1024.
    pub max_batch_messages: usize,
}

impl Default for TransportConfig {
    fn default() -> Self {
        TransportConfig {
            max_json_body: 8 * 1024 * 1024,
            max_sse_event: 8 * 1024 * 1024,
            max_session_id_len: DEFAULT_MAX_SESSION_ID_LEN,
            max_redirects: 5,
            max_error_body: 64 * 1024,
            max_preceding_messages: 1024,
            max_batch_messages: 1024,
        }
    }
}

impl TransportConfig {
    /// Sets [`max_json_body`](Self::max_json_body).
    #[must_use]
    pub fn max_json_body(mut self, bytes: usize) -> Self {
        self.max_json_body = bytes;
        self
    }

    /// Sets [`max_sse_event`](Self::max_sse_event).
    #[must_use]
    pub fn max_sse_event(mut self, bytes: usize) -> Self {
        self.max_sse_event = bytes;
        self
    }

    /// Sets [`max_session_id_len`](Self::max_session_id_len).
    #[must_use]
    pub fn max_session_id_len(mut self, bytes: usize) -> Self {
        self.max_session_id_len = bytes;
        self
    }

    /// Sets [`max_redirects`](Self::max_redirects).
    #[must_use]
    pub fn max_redirects(mut self, hops: usize) -> Self {
        self.max_redirects = hops;
        self
    }

    /// Sets [`max_preceding_messages`](Self::max_preceding_messages).
    #[must_use]
    pub fn max_preceding_messages(mut self, count: usize) -> Self {
        self.max_preceding_messages = count;
        self
    }

    /// Sets [`max_batch_messages`](Self::max_batch_messages).
    #[must_use]
    pub fn max_batch_messages(mut self, count: usize) -> Self {
        self.max_batch_messages = count;
        self
    }
}

/// The result of a request, with what the server sent before it.
#[cfg(feature = "wire")]
#[derive(Debug)]
#[non_exhaustive]
pub struct Exchange {
    /// The `result` of the response.
    pub result: Value,
    /// Notifications and server requests that came first, in order.
    pub preceding: Vec<Message>,
}

/// How a DELETE ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SessionEnd {
    /// There was no session id, so nothing was sent.
    NoSession,
    /// The server answered this (2xx, 404 or 405): the session is over.
    Ended(StatusCode),
}

#[derive(Default)]
struct SessionState {
    id: Option<SessionId>,
    /// `id` as a header value, made once: a clone per request shares it.
    id_header: Option<HeaderValue>,
    version: Option<ProtocolVersion>,
    /// HTTP+SSE (2024-11-05): where messages are POSTed, from the stream's
    /// `endpoint` event.
    post_uri: Option<Uri>,
}

/// One MCP endpoint over Streamable HTTP, through an [`HttpClient`].
pub struct StreamableHttp {
    client: HttpClient,
    endpoint: Uri,
    origin: Origin,
    config: TransportConfig,
    state: Mutex<SessionState>,
    scope: Option<ScopeId>,
    /// `clientInfo` and `clientCapabilities` as `_meta` fields, for the
    /// requests of 2026-07-28.
    client_meta: Option<Arc<Map<String, Value>>>,
    /// The session's OAuth authorizer: the bearer on every request, and
    /// the flow when one is refused.
    #[cfg(feature = "oauth")]
    auth: Option<Arc<crate::oauth::Authorizer>>,
    /// The session's memory account, which every message read is charged
    /// to while the transport holds it (none for a bare transport).
    account: Option<Account>,
}

impl StreamableHttp {
    /// A transport for `endpoint` (an `http` or `https` URL) with the default
    /// [`TransportConfig`].
    pub fn new(client: HttpClient, endpoint: &str) -> Result<Self> {
        let endpoint: Uri = endpoint
            .parse()
            .map_err(|e| Error::builder("the endpoint is not a valid URL").with_source(e))?;
        let origin = Origin::of(&endpoint)
            .ok_or_else(|| Error::builder("the endpoint must be an absolute http or https URL"))?;
        Ok(StreamableHttp {
            client,
            endpoint,
            origin,
            config: TransportConfig::default(),
            state: Mutex::default(),
            scope: None,
            client_meta: None,
            #[cfg(feature = "oauth")]
            auth: None,
            account: None,
        })
    }

    /// Charges every message read to `account` (the session's).
    pub(crate) fn with_account(mut self, account: Account) -> Self {
        self.account = Some(account);
        self
    }

    /// The session's memory account, if this transport charges one.
    pub(crate) fn account(&self) -> Option<&Account> {
        self.account.as_ref()
    }

    /// The `_meta` fields every request of 2026-07-28 carries
    /// ([`metadata::client_meta`]).
    pub(crate) fn with_client_meta(mut self, meta: Arc<Map<String, Value>>) -> Self {
        self.client_meta = Some(meta);
        self
    }

    /// Replaces the configuration.
    pub fn with_config(mut self, config: TransportConfig) -> Self {
        self.config = config;
        self
    }

    /// Authorizes with OAuth: `auth` adds the bearer, and runs the flow
    /// when a request is refused.
    #[cfg(feature = "oauth")]
    pub(crate) fn with_auth(mut self, auth: Arc<crate::oauth::Authorizer>) -> Self {
        self.auth = Some(auth);
        self
    }

    /// Sends as `scope`: its session hooks apply.
    pub(crate) fn with_scope(mut self, scope: ScopeId) -> Self {
        self.scope = Some(scope);
        self
    }

    /// The HTTP client in use.
    pub(crate) fn http_client(&self) -> &HttpClient {
        &self.client
    }

    pub(crate) fn origin(&self) -> &Origin {
        &self.origin
    }

    /// The endpoint URL.
    #[cfg(feature = "wire")]
    pub fn endpoint(&self) -> &Uri {
        &self.endpoint
    }

    /// The HTTP client in use.
    #[cfg(feature = "wire")]
    pub fn client(&self) -> &HttpClient {
        &self.client
    }

    /// The configuration in force.
    #[cfg(feature = "wire")]
    pub fn config(&self) -> &TransportConfig {
        &self.config
    }

    /// The session id the server assigned (or the caller attached), if any.
    pub fn session_id(&self) -> Option<SessionId> {
        self.state().id.clone()
    }

    /// The negotiated revision, once set.
    pub fn protocol_version(&self) -> Option<ProtocolVersion> {
        self.state().version
    }

    /// Records the revision negotiated in `initialize`; from now on it goes
    /// in `MCP-Protocol-Version` (from 2025-06-18 on).
    pub fn set_protocol_version(&self, version: ProtocolVersion) {
        self.state().version = Some(version);
    }

    /// Uses a session the caller already has (no `initialize` needed).
    pub fn attach(&self, id: SessionId, version: ProtocolVersion) {
        let mut state = self.state();
        state.id_header = Some(id.header_value());
        state.id = Some(id);
        state.version = Some(version);
    }

    /// A transport for a new server session on the same endpoint, client,
    /// configuration and scope: no session id and no revision yet.
    pub(crate) fn fresh(&self) -> StreamableHttp {
        StreamableHttp {
            client: self.client.clone(),
            endpoint: self.endpoint.clone(),
            origin: self.origin.clone(),
            config: self.config.clone(),
            state: Mutex::default(),
            scope: self.scope,
            client_meta: self.client_meta.clone(),
            #[cfg(feature = "oauth")]
            auth: self.auth.clone(),
            account: self.account.clone(),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, SessionState> {
        lock(&self.state)
    }

    /// POSTs a request and returns its answer, JSON or SSE, as a stream of
    /// messages.
    ///
    /// For `initialize` no session or version header is sent, and the
    /// `Mcp-Session-Id` of a successful answer (validated) becomes the
    /// session id, or clears it when absent. A request answered 202 or with
    /// an empty 2xx is a protocol error (over HTTP+SSE, where answers come
    /// on the event stream, any 2xx is the rule, its body unread: the
    /// stream returned is empty).
    ///
    /// The raw wire sets no deadline: bound it with your own timeout.
    #[cfg(feature = "wire")]
    pub async fn post_request(&self, request: &Request) -> Result<MessageStream> {
        self.post_request_with(request, &HeaderMap::new(), Deadline::none())
            .await
    }

    /// [`post_request`](Self::post_request) with `extra` headers (the
    /// `Mcp-Param-*` of a tool call), up to the answer's head (a JSON
    /// answer: its body too) within `deadline`.
    pub(crate) async fn post_request_with(
        &self,
        request: &Request,
        extra: &HeaderMap,
        deadline: Deadline,
    ) -> Result<MessageStream> {
        let is_initialize = request.method == "initialize";
        let span =
            tracing::debug_span!("mcp.post", endpoint = %self.origin, method = %request.method);
        let exchange = async {
            let (mut headers, version) = self.headers_and_version(!is_initialize);
            let params = request.params.as_ref();
            let body = match self.with_metadata(version, &request.method, params, &mut headers) {
                Some(params) => {
                    headers.extend(
                        extra
                            .iter()
                            .map(|(name, value)| (name.clone(), value.clone())),
                    );
                    encode_call(Some(&request.id), &request.method, &params)
                }
                None => encode(request),
            };
            let response = self
                .post_body(body, headers, is_initialize, deadline)
                .await?;
            if self.is_http_sse() {
                // Over HTTP+SSE the answer comes on the event stream; a 2xx
                // only says the POST was accepted, whatever it carries
                // (servers send `Accepted` as text/plain, or an empty JSON
                // body). The body is not read.
                return Ok(MessageStream::from_messages(Batch::Many(Vec::new())));
            }
            self.read_answer(response).await
        };
        deadline.run(exchange).instrument(span).await
    }

    /// 2026-07-28 (when `version` is): the params to send, with `_meta`,
    /// after adding the headers mirrored from the body to `headers`.
    /// `None`: the message goes as it is.
    fn with_metadata<'a>(
        &'a self,
        version: Option<ProtocolVersion>,
        method: &str,
        params: Option<&'a Value>,
        headers: &mut HeaderMap,
    ) -> Option<metadata::WithMeta<'a>> {
        let version = version.filter(|v| v.is_modern())?;
        metadata::standard_headers(method, params, headers);
        Some(metadata::WithMeta::new(
            params,
            self.client_meta.as_deref(),
            version.as_str(),
        ))
    }

    /// POSTs a notification; any 2xx accepts it (a body, if any, is not
    /// read). The raw wire sets no deadline: bound it with your own timeout.
    #[cfg(feature = "wire")]
    pub async fn post_notification(&self, notification: &Notification) -> Result<()> {
        self.post_notification_within(notification, Deadline::none())
            .await
    }

    /// [`post_notification`](Self::post_notification), within `deadline`.
    pub(crate) async fn post_notification_within(
        &self,
        notification: &Notification,
        deadline: Deadline,
    ) -> Result<()> {
        let span = tracing::debug_span!("mcp.post", endpoint = %self.origin, method = %notification.method);
        let (mut headers, version) = self.headers_and_version(true);
        let params = notification.params.as_ref();
        let body = match self.with_metadata(version, &notification.method, params, &mut headers) {
            Some(params) => encode_call(None, &notification.method, &params),
            None => encode(notification),
        };
        deadline
            .run(self.post_body(body, headers, false, deadline))
            .instrument(span)
            .await
            .map(drop)
    }

    /// POSTs a response (the answer to a server request); any 2xx accepts
    /// it. The raw wire sets no deadline: bound it with your own timeout.
    #[cfg(feature = "wire")]
    pub async fn post_response(&self, response: &Response) -> Result<()> {
        self.post_response_within(response, Deadline::none()).await
    }

    /// [`post_response`](Self::post_response), within `deadline`.
    pub(crate) async fn post_response_within(
        &self,
        response: &Response,
        deadline: Deadline,
    ) -> Result<()> {
        let span = tracing::debug_span!("mcp.post", endpoint = %self.origin, method = "response");
        deadline
            .run(self.post_body(encode(response), self.headers(true), false, deadline))
            .instrument(span)
            .await
            .map(drop)
    }

    /// POSTs one encoded message; a success status is returned with its body
    /// unread, any other becomes an [`Error`].
    async fn post_body(
        &self,
        body: Vec<u8>,
        headers: HeaderMap,
        is_initialize: bool,
        deadline: Deadline,
    ) -> Result<http::Response<ResponseBody>> {
        let sent_session = headers.contains_key(MCP_SESSION_ID);
        let target = self.state().post_uri.clone();
        let target = target.unwrap_or_else(|| self.endpoint.clone());
        let response = self
            .send(
                Method::POST,
                target,
                &headers,
                Some(Bytes::from(body)),
                deadline,
            )
            .await?;
        let response = self.successful(response, sent_session).await?;
        // Taken only from a successful answer to initialize, and never over
        // HTTP+SSE, whose session is its stream: a header that transport
        // does not have would be echoed on every POST and DELETEd at close.
        if is_initialize && !self.is_http_sse() {
            self.take_session_id(response.headers())?;
        }
        Ok(response)
    }

    /// POSTs a request and reads its answer up to the response for its id.
    ///
    /// Notifications and server requests that arrive first are returned in
    /// [`Exchange::preceding`] (at most
    /// [`TransportConfig::max_preceding_messages`]); responses to other ids
    /// are dropped. A JSON-RPC error response becomes [`Error::is_rpc`].
    #[cfg(feature = "wire")]
    pub async fn request(&self, request: Request) -> Result<Exchange> {
        let mut stream = self.post_request(&request).await?;
        let mut preceding = Vec::new();
        while let Some(message) = stream.next().await {
            match message? {
                Message::Response(response) if response.id.as_ref() == Some(&request.id) => {
                    let result = response.outcome.map_err(Error::rpc)?;
                    return crate::error::result_value(&result, &request.method)
                        .map(|result| Exchange { result, preceding });
                }
                Message::Response(Response { id: None, outcome }) => {
                    // An error about a message the server could not read.
                    return Err(crate::error::idless_response(outcome));
                }
                Message::Response(other) => {
                    tracing::debug!(id = ?other.id, "dropped a response to another request");
                }
                other => {
                    if preceding.len() >= self.config.max_preceding_messages {
                        return Err(Error::limit(format!(
                            "more than {} messages before the response",
                            self.config.max_preceding_messages
                        )));
                    }
                    preceding.push(other);
                }
            }
        }
        Err(Error::protocol(format!(
            "the answer ended without the response to request {}",
            request.id
        )))
    }

    /// Opens the GET stream for server-initiated messages, resuming after
    /// `last_event_id` when given. `Ok(None)` when the server has none (405).
    /// The raw wire sets no deadline: bound it with your own timeout.
    #[cfg(feature = "wire")]
    pub async fn open_get_stream(
        &self,
        last_event_id: Option<&str>,
    ) -> Result<Option<MessageStream>> {
        self.open_get_stream_within(last_event_id, Deadline::none())
            .await
    }

    /// [`open_get_stream`](Self::open_get_stream), its head within
    /// `deadline` (the stream itself lasts as long as the server keeps it).
    pub(crate) async fn open_get_stream_within(
        &self,
        last_event_id: Option<&str>,
        deadline: Deadline,
    ) -> Result<Option<MessageStream>> {
        let span = tracing::debug_span!("mcp.get", endpoint = %self.origin);
        let opening = async {
            let mut headers = self.headers(true);
            headers.insert(ACCEPT, ACCEPT_SSE);
            headers.remove(CONTENT_TYPE);
            if let Some(id) = last_event_id {
                let value = HeaderValue::from_str(id).map_err(|e| {
                    Error::protocol("the last event id is not a valid header value").with_source(e)
                })?;
                headers.insert(LAST_EVENT_ID, value);
            }
            let response = self
                .send(Method::GET, self.endpoint.clone(), &headers, None, deadline)
                .await?;
            let status = response.status();
            tracing::debug!(status = status.as_u16(), "answered");
            if status == StatusCode::METHOD_NOT_ALLOWED {
                return Ok(None);
            }
            if !status.is_success() {
                let with_session = headers.contains_key(MCP_SESSION_ID);
                return Err(self.error_from(response, with_session).await);
            }
            match media_type(response.headers()) {
                Some(Media::EventStream) => Ok(Some(self.sse_stream(response.into_body()))),
                _ => Err(Error::protocol(
                    "the GET stream was answered without Content-Type: text/event-stream",
                )),
            }
        };
        deadline.run(opening).instrument(span).await
    }

    /// Whether this is an HTTP+SSE (2024-11-05) session: its POSTs go to
    /// the `endpoint` its event stream named.
    pub(crate) fn is_http_sse(&self) -> bool {
        self.state().post_uri.is_some()
    }

    /// Opens an HTTP+SSE (2024-11-05) session: a GET on the endpoint whose
    /// first event, `endpoint`, names where to POST (resolved against the
    /// endpoint URL; another origin is refused, so that no header of ours
    /// reaches it). The stream returned carries every later message of the
    /// session; dropping it ends the session. Its head and the `endpoint`
    /// event come within `deadline`; `found` is set once the event came
    /// (the server speaks HTTP+SSE, whether or not its endpoint is taken).
    pub(crate) async fn open_sse_session(
        &self,
        deadline: Deadline,
        found: &std::sync::atomic::AtomicBool,
    ) -> Result<MessageStream> {
        let span = tracing::debug_span!("mcp.get", endpoint = %self.origin, transport = "http+sse");
        let opening = async {
            let mut headers = self.headers(false);
            headers.insert(ACCEPT, ACCEPT_SSE);
            headers.remove(CONTENT_TYPE);
            let (response, answered_at) = self
                .send_following(
                    Method::GET,
                    self.endpoint.clone(),
                    &headers,
                    None,
                    true,
                    deadline,
                )
                .await?;
            let response = self.successful(response, false).await?;
            if media_type(response.headers()) != Some(Media::EventStream) {
                return Err(Error::protocol(
                    "the HTTP+SSE stream was answered without Content-Type: text/event-stream",
                )
                .with_status(response.status()));
            }
            let mut stream = self.sse_stream(response.into_body());
            let named = stream.endpoint_event().await?;
            found.store(true, std::sync::atomic::Ordering::Relaxed);
            // Relative to the URL that answered, after a same-origin
            // redirect as before one.
            let target = resolve_endpoint(&answered_at, &named)?;
            if Origin::of(&target).as_ref() != Some(&self.origin) {
                return Err(Error::protocol(format!(
                    "the HTTP+SSE endpoint event names another origin; refused \
                     (our headers stay with {})",
                    self.origin
                )));
            }
            self.state().post_uri = Some(target);
            Ok(stream)
        };
        deadline.run(opening).instrument(span).await
    }

    /// Ends the session with a DELETE. 2xx, 404 and 405 all mean it is
    /// over, and the id is forgotten. Without a session id nothing is sent.
    /// The raw wire sets no deadline: bound it with your own timeout.
    #[cfg(feature = "wire")]
    pub async fn delete_session(&self) -> Result<SessionEnd> {
        self.delete_session_within(Deadline::none()).await
    }

    /// [`delete_session`](Self::delete_session), within `deadline`.
    pub(crate) async fn delete_session_within(&self, deadline: Deadline) -> Result<SessionEnd> {
        if self.state().id.is_none() {
            return Ok(SessionEnd::NoSession);
        }
        let span = tracing::debug_span!("mcp.delete", endpoint = %self.origin);
        let deleting = async {
            let mut headers = self.headers(true);
            headers.remove(CONTENT_TYPE);
            headers.remove(ACCEPT);
            let response = self
                .send(
                    Method::DELETE,
                    self.endpoint.clone(),
                    &headers,
                    None,
                    deadline,
                )
                .await?;
            let status = response.status();
            tracing::debug!(status = status.as_u16(), "answered");
            if status.is_success()
                || status == StatusCode::NOT_FOUND
                || status == StatusCode::METHOD_NOT_ALLOWED
            {
                // Ended: the id is never sent again, not even by a second
                // DELETE.
                *self.state() = SessionState::default();
                Ok(SessionEnd::Ended(status))
            } else {
                Err(self.error_from(response, true).await)
            }
        };
        deadline.run(deleting).instrument(span).await
    }

    /// The headers of a POST; with `session`, the session id and revision.
    fn headers(&self, session: bool) -> HeaderMap {
        self.headers_and_version(session).0
    }

    /// [`headers`](Self::headers), and the revision they name (with
    /// `session`), read under one lock.
    fn headers_and_version(&self, session: bool) -> (HeaderMap, Option<ProtocolVersion>) {
        let mut headers = HeaderMap::with_capacity(4);
        headers.insert(CONTENT_TYPE, APPLICATION_JSON);
        headers.insert(ACCEPT, ACCEPT_POST);
        if !session {
            return (headers, None);
        }
        let state = self.state();
        if let Some(id) = &state.id_header {
            headers.insert(MCP_SESSION_ID, id.clone());
        }
        if let Some(version) = state.version.filter(|v| v.sends_version_header()) {
            headers.insert(
                MCP_PROTOCOL_VERSION,
                HeaderValue::from_static(version.as_str()),
            );
        }
        (headers, state.version)
    }

    fn take_session_id(&self, headers: &HeaderMap) -> Result<()> {
        let id = match headers.get(MCP_SESSION_ID) {
            Some(value) => Some(SessionId::with_max_len(
                value.as_bytes().to_vec(),
                self.config.max_session_id_len,
            )?),
            None => None,
        };
        let mut state = self.state();
        state.id_header = id.as_ref().map(SessionId::header_value);
        state.id = id;
        state.version = None;
        Ok(())
    }

    /// Sends a request, following same-origin 307/308 redirects only, up
    /// to the answer's head within `deadline`.
    async fn send(
        &self,
        method: Method,
        uri: Uri,
        headers: &HeaderMap,
        body: Option<Bytes>,
        deadline: Deadline,
    ) -> Result<http::Response<ResponseBody>> {
        // Only a POST is worth a person's attention: a listener's GET or a
        // DELETE refused for want of authorization only refreshes.
        let interactive = method == Method::POST;
        self.send_following(method, uri, headers, body, interactive, deadline)
            .await
            .map(|(response, _)| response)
    }

    /// [`send`](Self::send), also returning the URL that answered (after
    /// the redirects followed). With OAuth, a request refused for want of
    /// authorization is sent again once the authorizer has recovered, at
    /// most its bound of times; without `interactive`, only by a refresh
    /// (never the user agent). The whole of it, OAuth flow included, within
    /// `deadline`.
    async fn send_following(
        &self,
        method: Method,
        uri: Uri,
        headers: &HeaderMap,
        body: Option<Bytes>,
        interactive: bool,
        deadline: Deadline,
    ) -> Result<(http::Response<ResponseBody>, Uri)> {
        deadline
            .run(self.send_authorized(method, uri, headers, body, interactive))
            .await
    }

    /// [`send_following`](Self::send_following) without its deadline.
    async fn send_authorized(
        &self,
        method: Method,
        uri: Uri,
        headers: &HeaderMap,
        body: Option<Bytes>,
        interactive: bool,
    ) -> Result<(http::Response<ResponseBody>, Uri)> {
        #[cfg(feature = "oauth")]
        if let Some(auth) = &self.auth {
            let mut authorizations = 0;
            loop {
                let mut headers = headers.clone();
                let sent = auth.add_bearer(&mut headers).await?;
                let (response, answered) = self
                    .send_redirects(method.clone(), uri.clone(), &headers, body.clone())
                    .await?;
                let Some(refusal) = crate::oauth::Refusal::of(&response) else {
                    return Ok((response, answered));
                };
                if authorizations >= auth.max_authorizations() {
                    return Err(Error::auth(format!(
                        "the server still refuses after {authorizations} authorizations"
                    ))
                    .with_status(refusal.status()));
                }
                authorizations += 1;
                drop(response);
                auth.recover(&refusal, sent, interactive).await?;
            }
        }
        #[cfg(not(feature = "oauth"))]
        let _ = interactive;
        self.send_redirects(method, uri, headers, body).await
    }

    /// One request, following same-origin 307/308 redirects only.
    //
    // Why not tower-http's `FollowRedirect` with a custom `Policy` (tried on
    // tower-http 0.6.11): over a service calling `send_scoped` (hooks per
    // hop) and with `clone_body`, its policy can follow 307/308 only, refuse
    // another origin or a 301/302/303 before anything is sent (it sees the
    // status and the resolved target, and may return our `Error`), and cut a
    // loop. But a 3xx it will not follow for its own reasons (no
    // `Location`, one not UTF-8 or not a URL, a 300 or 304, a body it
    // cannot clone) comes back as an ordinary `Ok` response, the policy
    // never asked: we would still read `Location` ourselves to say why
    // (tests/it/redirects.rs, `..._without_a_usable_location_...`), box a
    // future per hop, and put tower-http in default features, to replace
    // this loop. One difference in its favour: it resolves
    // relative-path references (`Location: mcp`), which `redirect_target`
    // refuses.
    async fn send_redirects(
        &self,
        method: Method,
        mut uri: Uri,
        headers: &HeaderMap,
        body: Option<Bytes>,
    ) -> Result<(http::Response<ResponseBody>, Uri)> {
        for _ in 0..=self.config.max_redirects {
            let mut request = http::Request::new(Full::new(body.clone().unwrap_or_default()));
            *request.method_mut() = method.clone();
            *request.uri_mut() = uri.clone();
            *request.headers_mut() = headers.clone();
            let response = self.client.send_scoped(request, self.scope).await?;
            let status = response.status();
            if !status.is_redirection() {
                return Ok((response, uri));
            }
            if status != StatusCode::TEMPORARY_REDIRECT && status != StatusCode::PERMANENT_REDIRECT
            {
                return Err(Error::redirect(format!(
                    "HTTP {status} would turn the {method} into a GET; not followed"
                ))
                .with_status(status));
            }
            let target = redirect_target(&uri, response.headers())
                .map_err(|message| Error::redirect(message).with_status(status))?;
            let target_origin = Origin::of(&target).ok_or_else(|| {
                Error::redirect("the redirect target is not an http or https URL")
                    .with_status(status)
            })?;
            if target_origin != self.origin {
                return Err(Error::redirect(format!(
                    "refused a redirect to another origin ({target_origin}): \
                     the session id and headers stay with {}",
                    self.origin
                ))
                .with_status(status));
            }
            tracing::debug!(status = status.as_u16(), "following a same-origin redirect");
            uri = target;
        }
        Err(Error::redirect(format!(
            "more than {} redirects",
            self.config.max_redirects
        )))
    }

    /// An SSE stream under this transport's limits, charged to its
    /// session's memory account.
    fn sse_stream(&self, body: ResponseBody) -> MessageStream {
        MessageStream::from_sse(
            body,
            self.config.max_sse_event,
            self.config.max_batch_messages,
        )
        .charged_to(self.account.as_ref())
    }

    /// Reads the answer to a request: JSON (bounded) or an SSE stream.
    async fn read_answer(&self, response: http::Response<ResponseBody>) -> Result<MessageStream> {
        match media_type(response.headers()) {
            Some(Media::Json) => {
                let (messages, charge, cost) = self
                    .read_json(
                        response,
                        self.config.max_json_body,
                        "JSON body",
                        "the JSON answer",
                    )
                    .await?;
                Ok(MessageStream::from_messages(messages).with_charge(charge, cost))
            }
            Some(Media::EventStream) => Ok(self.sse_stream(response.into_body())),
            Some(Media::Other) => Err(Error::protocol(format!(
                "a request was answered HTTP {} with an unexpected Content-Type \
                 (neither application/json nor text/event-stream)",
                response.status()
            ))),
            None => Err(Error::protocol(format!(
                "a request was answered HTTP {} with no content",
                response.status()
            ))
            .with_status(response.status())),
        }
    }

    /// Reads a JSON body of at most `limit` bytes and parses its messages,
    /// charged to the session's account (when it has one) as its bytes
    /// arrive and, before anything is built, by what parsing builds: the
    /// one way a JSON body becomes messages, so none is read uncharged.
    /// The charge is returned, with the messages' cost, for whoever holds
    /// them.
    async fn read_json(
        &self,
        response: http::Response<ResponseBody>,
        limit: usize,
        body: &str,
        what: &str,
    ) -> Result<(Batch, Option<Charge>, usize)> {
        let charge = self.account.as_ref().map(Account::holding);
        let bytes = read_limited_charged(response, limit, body, charge.as_ref()).await?;
        let (messages, cost) = self.parse_charged(&bytes, charge.as_ref(), what)?;
        Ok((messages, charge, cost))
    }

    /// Parses the messages of a JSON body read under `charge`, charged
    /// first by what parsing builds (see [`read_json`](Self::read_json));
    /// the messages and their cost.
    fn parse_charged(
        &self,
        bytes: &[u8],
        charge: Option<&Charge>,
        what: &str,
    ) -> Result<(Batch, usize)> {
        let text = strip_bom(bytes);
        // Charged before it is built, with the body still held.
        let cost = if let Some(charge) = charge {
            // What the estimate cannot read is never parsed: nothing is
            // built that was not charged first.
            let cost = messages_cost(text, self.config.max_batch_messages)
                .map_err(|e| stream::parse_error(e, what))?;
            charge
                .resize(bytes.len().saturating_add(cost))
                .map_err(|spent| spent.reading(what))?;
            cost
        } else {
            0
        };
        let messages = parse_messages(text, self.config.max_batch_messages)
            .map_err(|e| stream::parse_error(e, what))?;
        Ok((messages, cost))
    }

    /// Logs an answer's status and lets a successful one through; an error
    /// status becomes its [`Error`] (see [`error_from`](Self::error_from)).
    async fn successful(
        &self,
        response: http::Response<ResponseBody>,
        with_session: bool,
    ) -> Result<http::Response<ResponseBody>> {
        let status = response.status();
        tracing::debug!(status = status.as_u16(), "answered");
        if status.is_success() {
            Ok(response)
        } else {
            Err(self.error_from(response, with_session).await)
        }
    }

    /// Turns an error status into an [`Error`], keeping the challenge, any
    /// JSON-RPC error, and otherwise the start of a text body (what a
    /// server says there is often the fix: "only allowed at localhost"),
    /// from a bounded read of the body.
    async fn error_from(
        &self,
        response: http::Response<ResponseBody>,
        with_session: bool,
    ) -> Error {
        let status = response.status();
        let challenge = response
            .headers()
            .get(WWW_AUTHENTICATE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let (rpc, excerpt) = match media_type(response.headers()) {
            // Charged as an answer is while it is read and parsed; the
            // error object kept is the caller's.
            Some(Media::Json) => {
                let charge = self.account.as_ref().map(Account::holding);
                match read_limited_charged(
                    response,
                    self.config.max_error_body,
                    "error body",
                    charge.as_ref(),
                )
                .await
                {
                    Ok(bytes) => {
                        let rpc = self
                            .parse_charged(&bytes, charge.as_ref(), "the error body")
                            .ok()
                            .and_then(|(batch, _)| first_error(batch));
                        // JSON that is no JSON-RPC error (`{"error": ...}`)
                        // is a server's words all the same.
                        let excerpt = rpc.is_none().then(|| body_excerpt(&bytes)).flatten();
                        (rpc, excerpt)
                    }
                    Err(_) => (None, None),
                }
            }
            _ if is_text(response.headers()) => (None, self.text_excerpt(response).await),
            _ => (None, None),
        };
        let error = status_error(status, rpc, challenge).with_body_excerpt(excerpt);
        if with_session {
            error.with_session_expired()
        } else {
            error
        }
    }

    /// The start of a `text/*` error body: read until the excerpt's bytes
    /// are in, the body ends, or [`EXCERPT_WAIT`] passes (a body that
    /// trickles never costs the status its error), the rest never read.
    /// Charged while it is read.
    async fn text_excerpt(&self, response: http::Response<ResponseBody>) -> Option<Box<str>> {
        use http_body_util::BodyExt as _;
        let charge = self.account.as_ref().map(Account::holding);
        let mut body = response.into_body();
        // Room to collapse whitespace into: a page's start is often mostly
        // indentation.
        let want = 4 * BODY_EXCERPT;
        let mut start = Vec::new();
        let reading = async {
            while start.len() < want {
                let Some(Ok(frame)) = body.frame().await else {
                    break;
                };
                if let Ok(data) = frame.into_data() {
                    let take = data.len().min(want - start.len());
                    if let Some(charge) = &charge {
                        if charge.resize(start.len() + take).is_err() {
                            break;
                        }
                    }
                    start.extend_from_slice(&data[..take]);
                }
            }
        };
        let _ = tokio::time::timeout(EXCERPT_WAIT, reading).await;
        body_excerpt(&start)
    }
}

/// How long an error status waits for the start of its text body.
const EXCERPT_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// The first JSON-RPC error among `batch`'s responses.
fn first_error(batch: Batch) -> Option<crate::jsonrpc::ErrorObject> {
    let messages = match batch {
        Batch::One(message) => vec![message],
        Batch::Many(messages) => messages,
    };
    messages.into_iter().find_map(|m| match m {
        Message::Response(r) => r.outcome.err(),
        _ => None,
    })
}

/// Whether the body is text for people (`text/*` but an event stream).
fn is_text(headers: &HeaderMap) -> bool {
    essence(headers).is_some_and(|essence| {
        // `essence` is visible ASCII (`to_str`): byte slicing is safe.
        essence.len() > 5
            && essence[..5].eq_ignore_ascii_case("text/")
            && !essence.eq_ignore_ascii_case("text/event-stream")
    })
}

impl fmt::Debug for StreamableHttp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.state();
        f.debug_struct("StreamableHttp")
            .field("origin", &self.origin)
            .field("session", &state.id.is_some())
            .field("protocol_version", &state.version)
            .field("client", &self.client)
            .finish()
    }
}

fn strip_bom(bytes: &[u8]) -> &[u8] {
    bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes)
}

#[derive(Debug, PartialEq, Eq)]
enum Media {
    Json,
    EventStream,
    Other,
}

/// The essence of `Content-Type` (parameters cut, spaces trimmed; `""`
/// when it is not visible ASCII). `None` when there is no `Content-Type`.
fn essence(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(CONTENT_TYPE)?;
    Some(
        value
            .to_str()
            .unwrap_or("")
            .split(';')
            .next()
            .unwrap_or("")
            .trim(),
    )
}

/// The kind of `Content-Type`, parameters and case ignored. `None` when
/// there is no `Content-Type` (an empty answer).
fn media_type(headers: &HeaderMap) -> Option<Media> {
    let essence = essence(headers)?;
    Some(if essence.eq_ignore_ascii_case("application/json") {
        Media::Json
    } else if essence.eq_ignore_ascii_case("text/event-stream") {
        Media::EventStream
    } else {
        Media::Other
    })
}

/// Resolves the `endpoint` event's URI reference against the stream's URL.
fn resolve_endpoint(base: &Uri, reference: &str) -> Result<Uri> {
    let invalid = || {
        // The server's text is not a secret, but may be long: not quoted.
        Error::protocol("the HTTP+SSE endpoint event does not hold a valid URI")
    };
    let base = url::Url::parse(&base.to_string()).map_err(|_| invalid())?;
    let joined = base.join(reference.trim()).map_err(|_| invalid())?;
    joined.as_str().parse().map_err(|_| invalid())
}

/// Resolves `Location` against the current URL: absolute URLs and absolute
/// paths; other relative forms are refused.
fn redirect_target(current: &Uri, headers: &HeaderMap) -> std::result::Result<Uri, String> {
    let location = headers
        .get(LOCATION)
        .ok_or("a redirect without Location")?
        .to_str()
        .map_err(|_| "a redirect Location that is not ASCII")?;
    let target: Uri = location
        .parse()
        .map_err(|_| "a redirect Location that is not a URL")?;
    if target.scheme().is_some() {
        return Ok(target);
    }
    if location.starts_with('/') && !location.starts_with("//") {
        let mut parts = current.clone().into_parts();
        parts.path_and_query = target.path_and_query().cloned();
        return Uri::from_parts(parts).map_err(|_| "a redirect Location that is not a URL".into());
    }
    Err("a redirect to a relative path; only absolute URLs and paths are followed".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderName;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        pairs
            .iter()
            .map(|(k, v)| (HeaderName::from_static(k), HeaderValue::from_static(v)))
            .collect()
    }

    #[test]
    fn media_types_ignore_case_and_parameters() {
        let cases = [
            ("application/json", Media::Json),
            ("Application/JSON; charset=utf-8", Media::Json),
            ("text/event-stream;charset=UTF-8", Media::EventStream),
            (" TEXT/EVENT-STREAM ", Media::EventStream),
            ("text/html", Media::Other),
            ("application/jsonp", Media::Other),
        ];
        for (value, want) in cases {
            assert_eq!(
                media_type(&headers(&[("content-type", value)])),
                Some(want),
                "{value}"
            );
        }
        assert_eq!(media_type(&HeaderMap::new()), None);
    }

    #[test]
    fn endpoint_events_resolve_against_the_stream_url() {
        let base: Uri = "http://h:1/sse".parse().unwrap();
        let at = |r: &str| resolve_endpoint(&base, r).unwrap().to_string();
        assert_eq!(
            at("/messages/?session_id=ab"),
            "http://h:1/messages/?session_id=ab"
        );
        assert_eq!(at("messages?x=1"), "http://h:1/messages?x=1");
        assert_eq!(at("http://o:2/m"), "http://o:2/m");
        assert!(resolve_endpoint(&base, "http://[::1").is_err());
    }

    #[test]
    fn redirect_targets_resolve_absolute_forms_only() {
        let current: Uri = "http://h:1/mcp/".parse().unwrap();
        let to = |loc: &'static str| redirect_target(&current, &headers(&[("location", loc)]));
        assert_eq!(
            to("/mcp").unwrap(),
            "http://h:1/mcp".parse::<Uri>().unwrap()
        );
        assert_eq!(
            to("http://o:2/x").unwrap(),
            "http://o:2/x".parse::<Uri>().unwrap()
        );
        assert!(to("mcp").is_err());
        assert!(to("//other/mcp").is_err());
        assert!(redirect_target(&current, &HeaderMap::new()).is_err());
    }
}
