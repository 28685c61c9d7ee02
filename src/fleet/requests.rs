//! What the fleet answers to its servers' requests: the host's sampling
//! and elicitation handlers, told which server asks, and the roots the
//! fleet holds. Set on the [`FleetBuilder`](super::FleetBuilder), put on
//! every slot's connector (a connector a spec brought that handles a
//! method itself keeps its own), so a config-file entry and a
//! programmatic one are answered alike, in every era.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use super::lock;
use crate::Connector;
use crate::jsonrpc::ErrorObject;

type Answer = Pin<Box<dyn Future<Output = Result<Value, ErrorObject>> + Send>>;

/// A host's handler for one kind of server request: the asking server's
/// name and the request's params, to the result or a JSON-RPC error.
pub(crate) type FleetHandler = Arc<dyn Fn(Arc<str>, Value) -> Answer + Send + Sync>;

pub(crate) fn fleet_handler<F, Fut>(f: F) -> FleetHandler
where
    F: Fn(Arc<str>, Value) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Value, ErrorObject>> + Send + 'static,
{
    Arc::new(move |server, params| Box::pin(f(server, params)) as Answer)
}

/// The fleet's answers, shared by its slots.
#[derive(Clone, Default)]
pub(crate) struct Requests {
    pub(crate) sampling: Option<FleetHandler>,
    pub(crate) elicitation: Option<FleetHandler>,
    /// `Some` once the host declared roots: what `roots/list` answers now.
    pub(crate) roots: Option<Arc<Mutex<Arc<Value>>>>,
    /// Bumped by every [`set_roots`](Self::set_roots), after the roots
    /// changed: a slot that connected meanwhile tells its server itself.
    roots_generation: Arc<AtomicU64>,
}

impl Requests {
    /// `connector` with the fleet's answers for `server`, each where the
    /// connector has none of its own; and whether the fleet's roots are
    /// the ones it answers (so its server is to hear of their changes).
    pub(crate) fn apply(&self, server: &Arc<str>, mut connector: Connector) -> (Connector, bool) {
        let fleet_roots = self.roots.is_some() && !connector.handles("roots/list");
        if let Some(handler) = self
            .sampling
            .as_ref()
            .filter(|_| !connector.handles("sampling/createMessage"))
        {
            let (handler, server) = (handler.clone(), server.clone());
            connector = connector.on_sampling(move |params| handler(server.clone(), params));
        }
        if let Some(handler) = self
            .elicitation
            .as_ref()
            .filter(|_| !connector.handles("elicitation/create"))
        {
            let (handler, server) = (handler.clone(), server.clone());
            connector = connector.on_elicitation(move |params| handler(server.clone(), params));
        }
        if let Some(roots) = self
            .roots
            .as_ref()
            .filter(|_| !connector.handles("roots/list"))
        {
            let roots = roots.clone();
            connector = connector.on_roots(move |_| {
                // Read when asked: a change since the connect is answered.
                let now = lock(&roots).clone();
                async move { Ok(json!({ "roots": *now })) }
            });
        }
        (connector, fleet_roots)
    }

    /// How many times the roots were replaced so far.
    pub(crate) fn roots_generation(&self) -> u64 {
        self.roots_generation.load(Ordering::SeqCst)
    }

    /// Replaces the roots; false when the host declared none.
    pub(crate) fn set_roots(&self, roots: Vec<Value>) -> bool {
        match &self.roots {
            Some(held) => {
                *lock(held) = Arc::new(Value::Array(roots));
                self.roots_generation.fetch_add(1, Ordering::SeqCst);
                true
            }
            None => false,
        }
    }
}

impl fmt::Debug for Requests {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Requests")
            .field("sampling", &self.sampling.is_some())
            .field("elicitation", &self.elicitation.is_some())
            .field("roots", &self.roots.is_some())
            .finish()
    }
}
