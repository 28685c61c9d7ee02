//! The merged catalog of every ready server, and the hub that publishes
//! it with the fleet's events.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use tokio::sync::broadcast;

use super::spec::{qualify, split_qualified};
use super::state::{FleetEvent, SlotState};
use crate::session::{Catalog, Entry};
use crate::sync::lock;

/// What every ready server offers, under names qualified by server (see
/// [`qualify`](super::qualify)): a snapshot, replaced as a whole on every
/// change.
///
/// A server's lists are here from the moment its slot is
/// [`Ready`](SlotState::Ready) until it leaves that state. The lists are
/// the server's session's ([`Session::catalog`](crate::Session::catalog)),
/// shared, not copied.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct FleetCatalog {
    /// Bumped on every change: a server ready or lost, a list of one
    /// re-listed, a server's session renewed (see
    /// [`SessionEvent`](crate::SessionEvent)).
    pub generation: u64,
    /// Each ready server's catalog, by server name.
    pub servers: BTreeMap<Arc<str>, Arc<Catalog>>,
}

/// One entry of the merged catalog: whose it is, and the server's entry.
#[derive(Clone, Copy, Debug)]
pub struct QualifiedEntry<'a> {
    /// The server's name.
    pub server: &'a str,
    /// The entry as the server listed it.
    pub entry: &'a Entry,
}

impl QualifiedEntry<'_> {
    /// The entry's own name (a tool's or prompt's `name`, a resource's
    /// `uri`), when it has one.
    pub fn name(&self) -> Option<&str> {
        self.entry.key()
    }

    /// The name qualified by the server (`server__name`).
    pub fn qualified_name(&self) -> Option<String> {
        self.name().map(|name| qualify(self.server, name))
    }
}

impl FleetCatalog {
    fn entries<'a>(
        &'a self,
        list: impl Fn(&'a Catalog) -> &'a [Entry] + 'a,
    ) -> impl Iterator<Item = QualifiedEntry<'a>> + 'a {
        self.servers.iter().flat_map(move |(server, catalog)| {
            list(catalog)
                .iter()
                .map(move |entry| QualifiedEntry { server, entry })
        })
    }

    /// Every ready server's tools, by server name, then in the server's
    /// order.
    pub fn tools(&self) -> impl Iterator<Item = QualifiedEntry<'_>> {
        self.entries(|c| &c.tools)
    }

    /// Every ready server's prompts.
    pub fn prompts(&self) -> impl Iterator<Item = QualifiedEntry<'_>> {
        self.entries(|c| &c.prompts)
    }

    /// Every ready server's resources.
    pub fn resources(&self) -> impl Iterator<Item = QualifiedEntry<'_>> {
        self.entries(|c| &c.resources)
    }

    /// How many tools, from every ready server.
    pub fn tool_count(&self) -> usize {
        self.servers.values().map(|c| c.tools.len()).sum()
    }

    /// The tool with this qualified name (`server__tool`).
    pub fn tool(&self, qualified: &str) -> Option<QualifiedEntry<'_>> {
        let (server, name) = split_qualified(qualified)?;
        let (server, catalog) = self.servers.get_key_value(server)?;
        catalog
            .tool(name)
            .map(|entry| QualifiedEntry { server, entry })
    }

    /// The prompt with this qualified name (`server__prompt`).
    pub fn prompt(&self, qualified: &str) -> Option<QualifiedEntry<'_>> {
        let (server, name) = split_qualified(qualified)?;
        let (server, catalog) = self.servers.get_key_value(server)?;
        let entry = catalog.prompts.iter().find(|p| p.key() == Some(name))?;
        Some(QualifiedEntry { server, entry })
    }
}

/// What the slots publish to: the fleet's events and its catalog.
///
/// Each server name has one owner: the slot last started for it
/// ([`claim`](Hub::claim)). Only the owner's states reach the fleet's events
/// and only its lists the catalog: a replaced slot ending after its
/// successor is up (its DELETE slow) neither takes the successor's lists
/// out nor announces the server stopped.
pub(crate) struct Hub {
    current: Mutex<Current>,
}

struct Current {
    /// `None` once the fleet is shut down: its stream ends.
    events: Option<broadcast::Sender<FleetEvent>>,
    catalog: Arc<FleetCatalog>,
    /// The owning slot's id, by server name: while a slot of that name runs.
    owners: HashMap<Arc<str>, u64>,
}

impl Hub {
    pub(crate) fn new(capacity: usize) -> Hub {
        Hub {
            current: Mutex::new(Current {
                events: Some(broadcast::channel(capacity.max(1)).0),
                catalog: Arc::default(),
                owners: HashMap::new(),
            }),
        }
    }

    /// The events from now on; after [`close`](Self::close), a stream
    /// that has ended.
    pub(crate) fn subscribe(&self) -> broadcast::Receiver<FleetEvent> {
        match &lock(&self.current).events {
            Some(events) => events.subscribe(),
            None => broadcast::channel(1).1,
        }
    }

    /// Ends the event stream (the fleet is shut down): readers get the
    /// events still buffered, then the end.
    pub(crate) fn close(&self) {
        lock(&self.current).events = None;
    }

    pub(crate) fn catalog(&self) -> Arc<FleetCatalog> {
        lock(&self.current).catalog.clone()
    }

    /// Makes slot `id` the owner of `server`, before it runs: the lists of
    /// a slot it replaces leave the catalog now (they are no longer
    /// routed to), and that slot is heard from no more.
    pub(crate) fn claim(&self, server: &Arc<str>, id: u64) {
        let mut current = lock(&self.current);
        current.owners.insert(server.clone(), id);
        self.update(&mut current, server, None, false);
    }

    /// Slot `id` has ended: `server` has no owner now, unless another
    /// slot has claimed it since.
    pub(crate) fn release(&self, server: &Arc<str>, id: u64) {
        let mut current = lock(&self.current);
        if current.owners.get(server) == Some(&id) {
            current.owners.remove(server);
        }
    }

    /// Slot `id` of `server` changed state: announced if it owns the name.
    pub(crate) fn state(&self, server: &Arc<str>, id: u64, state: SlotState) {
        let current = lock(&self.current);
        if current.owners.get(server) != Some(&id) {
            return;
        }
        // No receiver is no error: nobody is watching. Sent under the
        // lock, so a successor's claim never comes between check and send.
        if let Some(events) = &current.events {
            let _ = events.send(FleetEvent::State {
                server: server.clone(),
                state,
            });
        }
    }

    /// Sets (or, with `None`, removes) one server's lists, if slot `id`
    /// owns the name; a change bumps the generation and is announced.
    pub(crate) fn set_catalog(&self, server: &Arc<str>, id: u64, catalog: Option<Arc<Catalog>>) {
        let mut current = lock(&self.current);
        if current.owners.get(server) == Some(&id) {
            self.update(&mut current, server, catalog, false);
        }
    }

    /// A ready server's session says its catalog changed (a list re-listed,
    /// or a renewal: a new server session): its lists are replaced, and the
    /// generation bumped and announced even when they read the same.
    pub(crate) fn catalog_changed(&self, server: &Arc<str>, id: u64, catalog: Arc<Catalog>) {
        let mut current = lock(&self.current);
        if current.owners.get(server) == Some(&id) {
            self.update(&mut current, server, Some(catalog), true);
        }
    }

    fn update(
        &self,
        current: &mut Current,
        server: &Arc<str>,
        catalog: Option<Arc<Catalog>>,
        always: bool,
    ) {
        let unchanged = match (&catalog, current.catalog.servers.get(server)) {
            (Some(new), Some(old)) => Arc::ptr_eq(new, old),
            (None, None) => true,
            _ => false,
        };
        if unchanged && !always {
            return;
        }
        let mut next = FleetCatalog::clone(&current.catalog);
        match catalog {
            Some(catalog) => next.servers.insert(server.clone(), catalog),
            None => next.servers.remove(server),
        };
        next.generation += 1;
        let event = FleetEvent::Catalog {
            generation: next.generation,
            tools: next.tool_count(),
        };
        current.catalog = Arc::new(next);
        // Sent under the lock, so events come in generation order.
        if let Some(events) = &current.events {
            let _ = events.send(event);
        }
    }
}
