//! The client port: the HTTP client a session sends through.
//!
//! An [`HttpClient`] is either **owned** (built here by [`HttpClient::builder`]:
//! a hyper-util pooled client whose connection tasks are tracked) or
//! **borrowed** (the caller's own `tower::Service`, through
//! [`HttpClient::borrowed`]). Which one is a value fixed at construction
//! ([`ClientOwnership`]); it never changes and is never inferred later.
//!
//! A borrowed client is only ever *called*: this crate never shuts it down,
//! reconfigures it, or adds anything to it. Cloning an `HttpClient` is cheap
//! and shares the underlying client.

mod hooks;
pub(crate) mod owned;
#[cfg(feature = "proxy")]
pub(crate) mod proxy;
mod quickack;
#[cfg(feature = "rustls")]
mod tls;

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body::Body;
use http_body_util::{BodyExt, Full, combinators::UnsyncBoxBody};
use tower::{Service, ServiceExt};

pub use hooks::{HeaderHook, HookHandle, HookId, HookInfo, HookOwner, ScopeId};
pub use owned::HttpClientBuilder;
use owned::OwnedParts;
pub use quickack::{QuickAckConnecting, QuickAckConnector, QuickAckStream};
#[cfg(feature = "rustls")]
pub use tls::{MAX_TRUST_STORE_BYTES, MAX_TRUST_STORE_FILES, TrustStoreError};

use crate::error::{BoxError, Error, Result};
use crate::ledger::{Count, Counters, Field, Ledger};
use crate::sync::lock;
use crate::version::ProtocolVersion;

/// Endpoints whose revision a client remembers, at most; past it the
/// record starts over (one extra probe per endpoint, not a leak).
const MAX_REMEMBERED_REVISIONS: usize = 1024;

/// The revision each endpoint was found to speak: kept by an
/// [`HttpClient`] for the sessions that share it, and by a connector for
/// the owned clients it builds.
#[derive(Debug, Default)]
pub(crate) struct RevisionMemory(Mutex<HashMap<String, ProtocolVersion>>);

impl RevisionMemory {
    pub(crate) fn get(&self, endpoint: &str) -> Option<ProtocolVersion> {
        lock(&self.0).get(endpoint).copied()
    }

    /// Records what `endpoint` speaks.
    pub(crate) fn remember(&self, endpoint: &str, version: ProtocolVersion) {
        let mut revisions = lock(&self.0);
        if revisions.len() >= MAX_REMEMBERED_REVISIONS && !revisions.contains_key(endpoint) {
            revisions.clear();
        }
        revisions.insert(endpoint.to_owned(), version);
    }

    /// Forgets what `endpoint` speaks: the record proved wrong.
    pub(crate) fn forget(&self, endpoint: &str) {
        lock(&self.0).remove(endpoint);
    }
}

/// The request body type the client port is called with.
pub type RequestBody = Full<Bytes>;

/// The response body type the client port hands back, boxed.
pub type ResponseBody = UnsyncBoxBody<Bytes, BoxError>;

/// Sends one request: the lent or built service behind a function, so that
/// a request costs one boxed future, not a boxed clone of the service too.
type SendFn = dyn Fn(
        http::Request<RequestBody>,
    ) -> Pin<
        Box<
            dyn Future<Output = std::result::Result<http::Response<ResponseBody>, BoxError>> + Send,
        >,
    > + Send
    + Sync;

/// `service` as a [`SendFn`]: each request calls a clone of it (tower
/// services are called through `&mut`), taken under a lock because a
/// service need not be `Sync`; the lock is never held across a call.
fn send_fn<S>(service: S) -> Box<SendFn>
where
    S: Service<
            http::Request<RequestBody>,
            Response = http::Response<ResponseBody>,
            Error = BoxError,
        > + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    let service = Mutex::new(service);
    Box::new(move |request| {
        let service = lock(&service).clone();
        Box::pin(service.oneshot(request))
    })
}

/// Who owns an [`HttpClient`], fixed when it is made.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ClientOwnership {
    /// Built by this crate; released by this crate.
    Owned,
    /// Lent by the caller; only ever called, never closed or changed.
    Borrowed,
}

/// An HTTP client a session sends its requests through.
#[derive(Clone)]
pub struct HttpClient {
    inner: Arc<Inner>,
}

struct Inner {
    send: Box<SendFn>,
    ownership: ClientOwnership,
    owned: Option<OwnedParts>,
    hooks: Arc<hooks::Registry>,
    counters: Arc<Counters>,
    /// The revision each endpoint was found to speak (era detection), so
    /// that sessions sharing this client probe an endpoint once.
    revisions: RevisionMemory,
    // Declared last: counted as an owned client until everything above has
    // been dropped.
    _owned_count: Option<Count>,
}

impl HttpClient {
    /// A builder for an owned client (hyper-util, pooled, TCP_NODELAY and
    /// TCP_QUICKACK, TLS through rustls with the `rustls` feature).
    pub fn builder() -> HttpClientBuilder {
        HttpClientBuilder::new()
    }

    /// An owned client with the builder's defaults.
    pub fn owned() -> Result<HttpClient> {
        HttpClientBuilder::new().build()
    }

    /// Lends the caller's client: any `tower::Service` that takes
    /// `http::Request<Full<Bytes>>` and returns `http::Response<B>`, for
    /// example a bare `hyper_util::client::legacy::Client`, a tower-http
    /// stack, or a boxed service. A `reqwest::Client` goes through
    /// `HttpClient::from_reqwest` (feature `reqwest`).
    ///
    /// The service is cloned for every request and only ever called. Proxies
    /// and TLS trust are its business too: the owned client's proxy and root
    /// settings never apply to it. Redirects
    /// are the service's business: a bare hyper client follows none, and this
    /// crate refuses the ones it sees (see [the crate docs](crate#redirects)); a stack with
    /// its own redirect layer is trusted to apply its own policy.
    pub fn borrowed<S, B>(service: S) -> HttpClient
    where
        S: Service<http::Request<RequestBody>, Response = http::Response<B>>
            + Clone
            + Send
            + 'static,
        S::Future: Send + 'static,
        S::Error: Into<BoxError>,
        B: Body<Data = Bytes> + Send + 'static,
        B::Error: Into<BoxError>,
    {
        let service = service
            .map_response(|response: http::Response<B>| {
                response.map(|body| body.map_err(Into::into).boxed_unsync())
            })
            .map_err(Into::into);
        HttpClient::from_parts(send_fn(service), ClientOwnership::Borrowed, None)
    }

    fn from_parts(
        send: Box<SendFn>,
        ownership: ClientOwnership,
        owned: Option<OwnedParts>,
    ) -> Self {
        let counters = Arc::new(Counters::default());
        let owned_count = (ownership == ClientOwnership::Owned)
            .then(|| Count::new(Field::OwnedClients, Some(counters.clone())));
        HttpClient {
            inner: Arc::new(Inner {
                send,
                ownership,
                owned,
                hooks: Arc::default(),
                counters,
                revisions: RevisionMemory::default(),
                _owned_count: owned_count,
            }),
        }
    }

    /// Registers a hook for every request through this client to `origin`
    /// (an `http` or `https` URL; only its scheme, host and port count). It
    /// stays until the handle is dropped.
    ///
    /// Sessions register their own hooks scoped to themselves; this one is
    /// the caller's, and applies to every session on this client too.
    pub fn add_hook(&self, origin: &str, hook: HeaderHook) -> Result<HookHandle> {
        self.inner
            .hooks
            .register(origin, HookOwner::Client, hook, &self.inner.counters)
    }

    pub(crate) fn add_session_hook(
        &self,
        origin: &str,
        scope: ScopeId,
        hook: HeaderHook,
    ) -> Result<HookHandle> {
        self.inner.hooks.register(
            origin,
            HookOwner::Session(scope),
            hook,
            &self.inner.counters,
        )
    }

    /// The revision `endpoint` was found to speak by a session that
    /// connected through this client (era detection), if any. Sessions
    /// that share the client skip the probe for it.
    pub fn known_revision(&self, endpoint: &str) -> Option<ProtocolVersion> {
        self.inner.revisions.get(endpoint)
    }

    /// Where this client remembers revisions.
    pub(crate) fn revisions(&self) -> &RevisionMemory {
        &self.inner.revisions
    }

    /// The hooks registered on this client, in the order they apply.
    pub fn hooks(&self) -> Vec<HookInfo> {
        self.inner.hooks.list()
    }

    /// What this client holds right now: its hooks, and the sessions, tasks
    /// and reaps that run over it. `owned_clients` is 1 for a live owned
    /// client.
    pub fn ledger(&self) -> Ledger {
        self.inner.counters.snapshot()
    }

    pub(crate) fn counters(&self) -> &Arc<Counters> {
        &self.inner.counters
    }

    /// Whether two handles share one client.
    pub fn same_client(&self, other: &HttpClient) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// Whether this client is owned by the crate or lent by the caller.
    pub fn ownership(&self) -> ClientOwnership {
        self.inner.ownership
    }

    /// Connection tasks of an owned client still alive (`0` for a borrowed
    /// one, whose tasks are not ours to count).
    pub fn connection_tasks(&self) -> usize {
        self.inner.owned.as_ref().map_or(0, OwnedParts::live_tasks)
    }

    /// Sends one request, with this client's client-wide hooks for its
    /// origin, and returns the response head with its body unread.
    pub async fn send(
        &self,
        request: http::Request<RequestBody>,
    ) -> Result<http::Response<ResponseBody>> {
        self.send_scoped(request, None).await
    }

    /// Sends one request of `scope` (a session), with its hooks.
    pub(crate) async fn send_scoped(
        &self,
        mut request: http::Request<RequestBody>,
        scope: Option<ScopeId>,
    ) -> Result<http::Response<ResponseBody>> {
        self.inner.hooks.apply(&mut request, scope).await?;
        let uri = request.uri().clone();
        (self.inner.send)(request)
            .await
            .map_err(|e| Error::transport(e).with_target(&uri))
    }
}

impl fmt::Debug for HttpClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpClient")
            .field("ownership", &self.inner.ownership)
            .field("connection_tasks", &self.connection_tasks())
            .field("hooks", &self.inner.hooks.list().len())
            .finish()
    }
}
