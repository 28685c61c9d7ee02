//! Header hooks: headers added to requests, scoped to one origin and to one
//! owner (a session, or the client as a whole).
//!
//! Hooks are kept in a registry on the [`HttpClient`](super::HttpClient), not
//! installed into the underlying service: a borrowed client is never changed,
//! and the caller's own requests through it never see our headers. A request
//! a session sends gets the hooks of that session and the client-wide hooks
//! for the request's origin, in registration order; a later hook's header
//! replaces an earlier one of the same name. Every value is marked sensitive.
//! Hooks can never set the protocol's own headers (`Content-Type`, `Accept`,
//! `Mcp-Session-Id`, `MCP-Protocol-Version`, `Last-Event-ID`, `Host`,
//! `Content-Length`).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use http::header::{ACCEPT, AUTHORIZATION, CONTENT_LENGTH, CONTENT_TYPE, HOST};
use http::{HeaderMap, HeaderName, HeaderValue};

use crate::error::{BoxError, Error, Result};
use crate::headers::{LAST_EVENT_ID, MCP_PROTOCOL_VERSION, MCP_SESSION_ID};
use crate::ledger::{Count, Counters, Field};
use crate::origin::Origin;
use crate::sync::lock;

type ProviderFuture = Pin<Box<dyn Future<Output = Result<HeaderMap, BoxError>> + Send>>;
type Provider = dyn Fn() -> ProviderFuture + Send + Sync;

/// Headers to add to requests: fixed ones, or an async provider asked for
/// every request (for a token that refreshes).
#[derive(Clone)]
pub struct HeaderHook {
    source: Source,
}

/// A configured header value as RFC 9110 reads a field value: visible
/// ASCII, spaces and tabs, and bytes from 0x80 up (so UTF-8 passes as its
/// bytes). `HeaderValue::from_str` took the same until http 1.6 narrowed it
/// to ASCII; a host's config that worked must keep working.
fn field_value(value: &str) -> std::result::Result<HeaderValue, http::header::InvalidHeaderValue> {
    HeaderValue::from_bytes(value.as_bytes())
}

#[derive(Clone)]
enum Source {
    Fixed(HeaderMap),
    Provider(Arc<Provider>),
}

impl HeaderHook {
    /// `Authorization: Bearer <token>`.
    pub fn bearer(token: &str) -> Result<HeaderHook> {
        let value = field_value(&format!("Bearer {token}"))
            .map_err(|_| Error::builder("the bearer token is not a valid header value"))?;
        Ok(HeaderHook::fixed(HeaderMap::from_iter([(
            AUTHORIZATION,
            value,
        )])))
    }

    /// One fixed header.
    pub fn header(name: &str, value: &str) -> Result<HeaderHook> {
        let name = HeaderName::try_from(name)
            .map_err(|e| Error::builder("invalid header name").with_source(e))?;
        // The value is a credential as far as we know: never quote it.
        let value = field_value(value)
            .map_err(|_| Error::builder(format!("the value of header {name} is not valid")))?;
        Ok(HeaderHook::fixed(HeaderMap::from_iter([(name, value)])))
    }

    /// Fixed headers.
    pub fn fixed(mut headers: HeaderMap) -> HeaderHook {
        for value in headers.values_mut() {
            value.set_sensitive(true);
        }
        HeaderHook {
            source: Source::Fixed(headers),
        }
    }

    /// Headers from `provider`, asked before every request. An error from it
    /// fails that request ([`Error::is_hook`]).
    pub fn provider<F, Fut>(provider: F) -> HeaderHook
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<HeaderMap, BoxError>> + Send + 'static,
    {
        HeaderHook {
            source: Source::Provider(Arc::new(move || Box::pin(provider()) as ProviderFuture)),
        }
    }

    /// Whether `other` is this hook: fixed headers equal by value, a
    /// provider only to clones of itself (a closure cannot be compared).
    #[cfg_attr(not(feature = "fleet"), allow(dead_code))]
    pub(crate) fn same_hook(&self, other: &HeaderHook) -> bool {
        match (&self.source, &other.source) {
            (Source::Fixed(a), Source::Fixed(b)) => a == b,
            (Source::Provider(a), Source::Provider(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }

    async fn headers(&self) -> Result<HeaderMap> {
        match &self.source {
            Source::Fixed(headers) => Ok(headers.clone()),
            Source::Provider(provider) => provider().await.map_err(Error::hook),
        }
    }
}

impl fmt::Debug for HeaderHook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.source {
            // Names only: values are secrets.
            Source::Fixed(headers) => f
                .debug_struct("HeaderHook")
                .field("headers", &headers.keys().collect::<Vec<_>>())
                .finish(),
            Source::Provider(_) => f
                .debug_struct("HeaderHook")
                .field("provider", &"..")
                .finish(),
        }
    }
}

/// Identifies one registered hook; removal is by identity, never position.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HookId(u64);

/// Identifies one session's scope on a shared client.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ScopeId(u64);

impl ScopeId {
    pub(crate) fn next() -> ScopeId {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        ScopeId(NEXT.fetch_add(1, Ordering::Relaxed))
    }
}

/// Whose requests a hook applies to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum HookOwner {
    /// Every request through the client to the hook's origin.
    Client,
    /// Only the requests of one session.
    Session(ScopeId),
}

/// A registered hook, as [`HttpClient::hooks`](super::HttpClient::hooks)
/// lists it (without its headers).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct HookInfo {
    /// Its identity.
    pub id: HookId,
    /// Whose requests it applies to.
    pub owner: HookOwner,
    /// The origin it is scoped to, `scheme://host:port`.
    pub origin: String,
}

struct Entry {
    id: HookId,
    owner: HookOwner,
    origin: Origin,
    hook: HeaderHook,
    _count: Count,
}

/// The hooks of one client.
#[derive(Default)]
pub(crate) struct Registry {
    entries: Mutex<Vec<Entry>>,
}

impl Registry {
    fn entries(&self) -> std::sync::MutexGuard<'_, Vec<Entry>> {
        lock(&self.entries)
    }

    pub(crate) fn register(
        self: &Arc<Self>,
        origin: &str,
        owner: HookOwner,
        hook: HeaderHook,
        counters: &Arc<Counters>,
    ) -> Result<HookHandle> {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        let origin = Origin::parse(origin)
            .ok_or_else(|| Error::builder("a hook's origin must be an http or https URL"))?;
        let id = HookId(NEXT.fetch_add(1, Ordering::Relaxed));
        self.entries().push(Entry {
            id,
            owner,
            origin,
            hook,
            _count: Count::new(Field::Hooks, Some(counters.clone())),
        });
        Ok(HookHandle {
            id,
            registry: Arc::downgrade(self),
        })
    }

    pub(crate) fn list(&self) -> Vec<HookInfo> {
        self.entries()
            .iter()
            .map(|e| HookInfo {
                id: e.id,
                owner: e.owner,
                origin: e.origin.to_string(),
            })
            .collect()
    }

    fn remove(&self, id: HookId) -> bool {
        let mut entries = self.entries();
        let before = entries.len();
        entries.retain(|e| e.id != id);
        before != entries.len()
    }

    /// Adds the headers of every hook that applies to a request of `scope`
    /// to `uri`'s origin.
    pub(crate) async fn apply(
        &self,
        request: &mut http::Request<super::RequestBody>,
        scope: Option<ScopeId>,
    ) -> Result<()> {
        let hooks: Vec<HeaderHook> = {
            let entries = self.entries();
            if entries.is_empty() {
                return Ok(());
            }
            let Some(origin) = Origin::of(request.uri()) else {
                return Ok(());
            };
            entries
                .iter()
                .filter(|e| e.origin == origin)
                .filter(|e| match e.owner {
                    HookOwner::Client => true,
                    HookOwner::Session(owner) => Some(owner) == scope,
                })
                .map(|e| e.hook.clone())
                .collect()
        };
        for hook in hooks {
            let headers = hook.headers().await?;
            let target = request.headers_mut();
            for name in headers.keys() {
                if is_reserved(name) {
                    continue;
                }
                target.remove(name);
                for value in headers.get_all(name) {
                    let mut value = value.clone();
                    value.set_sensitive(true);
                    target.append(name.clone(), value);
                }
            }
        }
        Ok(())
    }
}

fn is_reserved(name: &HeaderName) -> bool {
    [
        &CONTENT_TYPE,
        &ACCEPT,
        &HOST,
        &CONTENT_LENGTH,
        &MCP_SESSION_ID,
        &MCP_PROTOCOL_VERSION,
        &LAST_EVENT_ID,
    ]
    .contains(&name)
}

/// Keeps a hook registered; dropping it removes the hook (by identity).
#[must_use = "the hook is removed when the handle is dropped"]
pub struct HookHandle {
    id: HookId,
    registry: std::sync::Weak<Registry>,
}

impl HookHandle {
    /// The hook's identity.
    pub fn id(&self) -> HookId {
        self.id
    }
}

impl Drop for HookHandle {
    fn drop(&mut self) {
        if let Some(registry) = self.registry.upgrade() {
            registry.remove(self.id);
        }
    }
}

impl fmt::Debug for HookHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("HookHandle").field(&self.id).finish()
    }
}
