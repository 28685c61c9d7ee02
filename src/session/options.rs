//! Per-request settings ([`RequestOptions`]): a timeout, a progress
//! callback, extra `_meta`, and the resumption token of the answer.

use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value};

use crate::jsonrpc::RequestId;
use crate::transport::SessionId;

/// A progress callback, shared by the clones of its options.
pub(crate) type ProgressFn = Arc<dyn Fn(Progress) + Send + Sync>;
/// A resumption token callback.
pub(crate) type TokenFn = Arc<dyn Fn(ResumptionToken) + Send + Sync>;

/// One `notifications/progress` of a request (see
/// [`RequestOptions::on_progress`]).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Progress {
    /// How far along: increases with each notification.
    pub progress: f64,
    /// The total, when the server knows it.
    pub total: Option<f64>,
    /// What the server is doing, when it says.
    pub message: Option<String>,
}

impl Progress {
    /// A notification's params as progress; `None` without a numeric
    /// `progress`.
    pub(crate) fn from_params(params: &Value) -> Option<Progress> {
        Some(Progress {
            progress: params.get("progress")?.as_f64()?,
            total: params.get("total").and_then(Value::as_f64),
            message: params
                .get("message")
                .and_then(Value::as_str)
                .map(str::to_owned),
        })
    }
}

/// Where the answer to a request had got to, to resume it from there (see
/// [`RequestOptions::on_resumption_token`] and
/// [`Session::resume`](super::Session::resume)): the request's id, the
/// last SSE event id seen on its answer, and the session it was sent on.
///
/// The TypeScript SDK's `onresumptiontoken`. To keep it across a restart,
/// store [`request_id`](Self::request_id),
/// [`last_event_id`](Self::last_event_id), the
/// [`progress_token`](Self::progress_token) if any, and the session id (a
/// credential: store it as one), attach to the session again
/// ([`Connector::attach`](super::Connector::attach)) and make the token
/// again ([`ResumptionToken::new`],
/// [`with_progress_token`](Self::with_progress_token)).
#[derive(Clone, PartialEq, Eq)]
pub struct ResumptionToken {
    request_id: RequestId,
    last_event_id: String,
    session_id: Option<SessionId>,
    progress_token: Option<Value>,
}

impl ResumptionToken {
    /// A token stored earlier: the request's id and the last event id seen
    /// on its answer. Resumed on whatever session is in use.
    pub fn new(request_id: RequestId, last_event_id: impl Into<String>) -> Self {
        ResumptionToken {
            request_id,
            last_event_id: last_event_id.into(),
            session_id: None,
            progress_token: None,
        }
    }

    /// The progress token the request was sent with (stored from
    /// [`progress_token`](Self::progress_token)): a resumption with
    /// [`RequestOptions::on_progress`] routes the progress on the resumed
    /// answer to it.
    #[must_use]
    pub fn with_progress_token(mut self, token: Value) -> Self {
        self.progress_token = Some(token);
        self
    }

    pub(crate) fn on_session(mut self, session_id: Option<SessionId>) -> Self {
        self.session_id = session_id;
        self
    }

    /// The id of the request whose answer this resumes.
    pub fn request_id(&self) -> &RequestId {
        &self.request_id
    }

    /// The last SSE event id seen on the answer: resumed with it as
    /// `Last-Event-ID`.
    pub fn last_event_id(&self) -> &str {
        &self.last_event_id
    }

    /// The session the request was sent on, when the token was reported
    /// by this crate (a credential: see [`SessionId`]).
    pub fn session_id(&self) -> Option<&SessionId> {
        self.session_id.as_ref()
    }

    /// The progress token the session made for the request, when it asked
    /// for progress ([`RequestOptions::on_progress`]).
    pub fn progress_token(&self) -> Option<&Value> {
        self.progress_token.as_ref()
    }
}

impl fmt::Debug for ResumptionToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The session id's Debug never shows it.
        f.debug_struct("ResumptionToken")
            .field("request_id", &self.request_id)
            .field("last_event_id", &self.last_event_id)
            .field("session_id", &self.session_id)
            .field("progress_token", &self.progress_token)
            .finish()
    }
}

/// Per-request settings, for [`Session::request_with`](super::Session::request_with)
/// and the `_with` methods ([`call_tool_with`](super::Session::call_tool_with),
/// [`read_resource_with`](super::Session::read_resource_with),
/// [`get_prompt_with`](super::Session::get_prompt_with)).
///
/// ```no_run
/// # async fn run(session: mcp_scoped_http::Session) -> mcp_scoped_http::Result<()> {
/// use mcp_scoped_http::RequestOptions;
/// use serde_json::json;
/// use tokio::sync::watch;
///
/// // The latest progress, for another task to show: bounded (one value).
/// let (progress, shown) = watch::channel(None);
/// let options = RequestOptions::default()
///     .timeout(std::time::Duration::from_secs(120))
///     .on_progress(move |p| {
///         progress.send_replace(Some(p));
///     })
///     .meta(json!({"example.com/trace": "abc"}).as_object().unwrap().clone());
/// let result = session.call_tool_with("build", json!({}), options).await?;
/// # drop((shown, result)); Ok(()) }
/// ```
#[derive(Clone, Default)]
#[non_exhaustive]
pub struct RequestOptions {
    /// Overrides the session's default timeout ([`Connector::request_timeout`](super::Connector::request_timeout));
    /// `Some(None)` means no timeout for this request.
    pub timeout: Option<Option<Duration>>,
    pub(crate) progress: Option<ProgressFn>,
    pub(crate) meta: Map<String, Value>,
    pub(crate) resumption_token: Option<TokenFn>,
}

impl RequestOptions {
    /// This request's timeout.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(Some(timeout));
        self
    }

    /// No timeout for this request.
    #[must_use]
    pub fn no_timeout(mut self) -> Self {
        self.timeout = Some(None);
        self
    }

    /// Asks the server for progress and calls `callback` with each
    /// `notifications/progress` of this request.
    ///
    /// - The session makes the `progressToken` (unique in the session) and
    ///   sends it in `params._meta.progressToken`; a `progressToken` of the
    ///   caller's own there, or in [`meta`](Self::meta), is refused
    ///   ([`Error::is_builder`](crate::Error::is_builder)).
    /// - Progress with that token, from the request's answer or from the
    ///   session's listening stream, goes to `callback` **instead of** the
    ///   shared [`Session::notifications`](super::Session::notifications)
    ///   receiver; progress that arrives after the request ended (by its
    ///   answer, an error, its timeout, or its future being dropped) is
    ///   dropped. Progress with tokens the session did not make still goes
    ///   to the shared receiver.
    /// - Called inline, on the task reading the stream the progress came
    ///   on, in the order it came: bounded by construction (nothing
    ///   queues), but a callback that blocks holds up that stream. Hand the
    ///   value on (a `watch` channel keeps only the latest, as in the
    ///   example above) rather than doing slow work in it. A callback that
    ///   panics is caught, logged, and called again for later progress.
    #[must_use]
    pub fn on_progress(mut self, callback: impl Fn(Progress) + Send + Sync + 'static) -> Self {
        self.progress = Some(Arc::new(callback));
        self
    }

    /// Extra fields for this request's `params._meta`, added to any the
    /// params already carry (over those of the same name). Keys under
    /// `io.modelcontextprotocol/` are the protocol's (the session writes
    /// them in 2026-07-28): refused, as is a `progressToken` with
    /// [`on_progress`](Self::on_progress) set
    /// ([`Error::is_builder`](crate::Error::is_builder)). Params that are
    /// not a JSON object (or a `_meta` that is not) cannot take fields:
    /// refused too. Merged in before each send, so a request sent again (a
    /// renewed session, a 2026-07-28 round of input) carries them each time.
    #[must_use]
    pub fn meta(mut self, meta: Map<String, Value>) -> Self {
        self.meta = meta;
        self
    }

    /// Calls `callback` with a [`ResumptionToken`] each time the answer to
    /// this request brings a new SSE event id (the TypeScript SDK's
    /// `onresumptiontoken`): keep the latest to resume the answer later
    /// with [`Session::resume`](super::Session::resume), in this process or
    /// after a restart.
    ///
    /// Only answers that can be resumed report one: SSE answers with event
    /// ids, in the 2025 revisions. JSON answers, 2026-07-28 (which has no
    /// resumption) and HTTP+SSE (2024-11-05) report none. Called inline on
    /// the task reading the answer, like [`on_progress`](Self::on_progress).
    #[must_use]
    pub fn on_resumption_token(
        mut self,
        callback: impl Fn(ResumptionToken) + Send + Sync + 'static,
    ) -> Self {
        self.resumption_token = Some(Arc::new(callback));
        self
    }
}

impl fmt::Debug for RequestOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RequestOptions")
            .field("timeout", &self.timeout)
            .field("on_progress", &self.progress.is_some())
            .field("meta", &self.meta.keys().collect::<Vec<_>>())
            .field("on_resumption_token", &self.resumption_token.is_some())
            .finish()
    }
}

/// Calls a caller's callback: a panic in it is the caller's bug, but must
/// not unwind through the task reading a stream (the listener's, or the
/// request's own).
pub(crate) fn call_guarded<T>(what: &'static str, callback: &(dyn Fn(T) + Send + Sync), value: T) {
    if catch_unwind(AssertUnwindSafe(|| callback(value))).is_err() {
        tracing::warn!("a {what} callback panicked; the stream is read on");
    }
}
