//! What every front end acquires to reach one endpoint: the client (lent,
//! or built and owned), the session's header hooks, the transport.

use std::fmt;
use std::sync::Arc;

use crate::budget::Account;
use crate::error::{Error, Result};
use crate::http_client::{ClientOwnership, HeaderHook, HttpClient, HttpClientBuilder, ScopeId};
use crate::origin::Origin;
use crate::scope::GuardStack;
use crate::transport::{StreamableHttp, TransportConfig};

/// The endpoint settings shared by the builders of the front ends
/// ([`Connector`](crate::Connector), the rmcp adapter's builder).
#[derive(Clone)]
pub(crate) struct Endpoint {
    url: String,
    pub(crate) client: Option<HttpClient>,
    pub(crate) builder: HttpClientBuilder,
    hooks: Vec<std::result::Result<HeaderHook, Deferred>>,
    pub(crate) transport: TransportConfig,
    /// OAuth for the session's requests.
    #[cfg(feature = "oauth")]
    pub(crate) oauth: Option<crate::oauth::OAuth>,
}

/// A setter's error, reported by every connect.
struct Deferred(Error);

impl Clone for Deferred {
    fn clone(&self) -> Self {
        Deferred(self.0.duplicate())
    }
}

impl Endpoint {
    pub(crate) fn new(url: String) -> Self {
        Endpoint {
            url,
            client: None,
            builder: HttpClientBuilder::new(),
            hooks: Vec::new(),
            transport: TransportConfig::default(),
            #[cfg(feature = "oauth")]
            oauth: None,
        }
    }

    /// The endpoint URL (never shown: see [`origin`](Self::origin)).
    pub(crate) fn url(&self) -> &str {
        &self.url
    }

    /// Adds a hook, or the error of building it (reported when acquiring).
    pub(crate) fn push_hook(&mut self, hook: Result<HeaderHook>) {
        self.hooks.push(hook.map_err(Deferred));
    }

    /// Whether header hooks (or the errors of building them) were added.
    #[cfg(feature = "stdio")]
    pub(crate) fn has_hooks(&self) -> bool {
        !self.hooks.is_empty()
    }

    /// The endpoint's origin, the only part of it ever shown.
    pub(crate) fn origin(&self) -> Result<Origin> {
        Origin::parse(&self.url)
            .ok_or_else(|| Error::builder("the endpoint must be an absolute http or https URL"))
    }

    /// Acquires, each onto `stack` the moment it exists: an owned client
    /// (unless one is lent), then the hooks (scoped to this session's
    /// requests), then the transport every server session starts from.
    pub(crate) fn acquire(
        &self,
        stack: &mut GuardStack,
        client_meta: Option<Arc<serde_json::Map<String, serde_json::Value>>>,
        account: &Account,
    ) -> Result<(Arc<StreamableHttp>, ClientOwnership)> {
        let (client, ownership) = match &self.client {
            Some(client) => (client.clone(), ClientOwnership::Borrowed),
            None => {
                let client = self.builder.build()?;
                stack.set_counters(client.counters().clone());
                stack.push_owned_client(client.clone());
                (client, ClientOwnership::Owned)
            }
        };
        let scope = ScopeId::next();
        for hook in &self.hooks {
            let hook = hook.clone().map_err(|deferred| deferred.0)?;
            stack.push_hook(client.add_session_hook(&self.url, scope, hook)?);
        }
        let mut template = StreamableHttp::new(client.clone(), &self.url)?
            .with_config(self.transport.clone())
            .with_scope(scope)
            .with_account(account.clone());
        if let Some(meta) = client_meta {
            template = template.with_client_meta(meta);
        }
        // The authorizer (its tokens, its in-memory store) lives with the
        // transport on the stack and goes with it.
        #[cfg(feature = "oauth")]
        if let Some(oauth) = &self.oauth {
            template = template.with_auth(Arc::new(crate::oauth::Authorizer::new(
                oauth,
                &self.url,
                client.clone(),
            )));
        }
        let template = Arc::new(template);
        stack.push_transport(template.clone());
        Ok((template, ownership))
    }

    /// The counters a stack for this endpoint starts with: the lent
    /// client's, or fresh ones until an owned client exists.
    pub(crate) fn counters(&self) -> Arc<crate::ledger::Counters> {
        match &self.client {
            Some(client) => client.counters().clone(),
            None => Arc::default(),
        }
    }
}

impl fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The origin only: a path or query may carry secrets.
        let origin = self
            .origin()
            .map_or_else(|_| "<invalid URL>".to_owned(), |origin| origin.to_string());
        f.debug_struct("Endpoint")
            .field("origin", &origin)
            .field("client", &self.client)
            .field("hooks", &self.hooks.len())
            .field("transport", &self.transport)
            .finish_non_exhaustive()
    }
}
