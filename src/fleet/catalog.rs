//! The merged catalog of every ready server, and the hub that publishes
//! it with the fleet's events.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use tokio::sync::broadcast;

use super::spec::{
    ToolFilter, changed_prefix, looks_changed, qualify, qualify_uri, split_qualified,
};

use super::changes::Qualifier;
pub use super::changes::{CatalogChanges, ListChanges};
use super::lock;
use super::state::{FleetEvent, SlotState};
use crate::{Catalog, Entry, ProtocolVersion, SessionId, SessionInfo};

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
    /// listed again that reads differently (an entry added, removed, or
    /// the same name with other JSON; see [`CatalogChanges`]). A list
    /// listed again the same (after a renewal, or a `list_changed` that
    /// changed nothing) is no change, and neither is a new order alone.
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
    /// How its list's names are qualified.
    qualifier: Qualifier,
}

impl QualifiedEntry<'_> {
    /// The entry's own name (a tool's or prompt's `name`, a resource's
    /// `uri`), when it has one.
    pub fn name(&self) -> Option<&str> {
        self.entry.key()
    }

    /// The name qualified by the server: a tool's or prompt's as a model
    /// may be given it ([`qualify`](super::qualify): `server__name`, or
    /// cleaned, cut and hashed when that is not a name a model accepts), a
    /// resource's or template's `server__uri`
    /// ([`qualify_uri`](super::qualify_uri)).
    pub fn qualified_name(&self) -> Option<String> {
        self.name().map(|name| (self.qualifier)(self.server, name))
    }
}

impl FleetCatalog {
    fn entries<'a>(
        &'a self,
        list: impl Fn(&'a Catalog) -> &'a [Entry] + 'a,
        qualifier: Qualifier,
    ) -> impl Iterator<Item = QualifiedEntry<'a>> + 'a {
        self.servers.iter().flat_map(move |(server, catalog)| {
            list(catalog).iter().map(move |entry| QualifiedEntry {
                server,
                entry,
                qualifier,
            })
        })
    }

    /// Every ready server's tools, by server name, then in the server's
    /// order.
    pub fn tools(&self) -> impl Iterator<Item = QualifiedEntry<'_>> {
        self.entries(|c| &c.tools, qualify)
    }

    /// Every ready server's prompts.
    pub fn prompts(&self) -> impl Iterator<Item = QualifiedEntry<'_>> {
        self.entries(|c| &c.prompts, qualify)
    }

    /// Every ready server's resources.
    pub fn resources(&self) -> impl Iterator<Item = QualifiedEntry<'_>> {
        self.entries(|c| &c.resources, qualify_uri)
    }

    /// Every ready server's resource templates (named by URI template).
    pub fn resource_templates(&self) -> impl Iterator<Item = QualifiedEntry<'_>> {
        self.entries(|c| &c.resource_templates, qualify_uri)
    }

    /// How many tools, from every ready server.
    pub fn tool_count(&self) -> usize {
        self.servers.values().map(|c| c.tools.len()).sum()
    }

    /// The tool with this qualified name (see [`qualify`](super::qualify)).
    pub fn tool(&self, qualified: &str) -> Option<QualifiedEntry<'_>> {
        self.find(qualified, |c| &c.tools)
    }

    /// The prompt with this qualified name.
    pub fn prompt(&self, qualified: &str) -> Option<QualifiedEntry<'_>> {
        self.find(qualified, |c| &c.prompts)
    }

    /// A plain name is split and looked up; one [`qualify`] changed (or
    /// none found so) is searched for among the list's names.
    fn find<'a>(
        &'a self,
        qualified: &str,
        list: impl Fn(&'a Catalog) -> &'a [Entry] + Copy + 'a,
    ) -> Option<QualifiedEntry<'a>> {
        let plain = split_qualified(qualified).and_then(|(server, name)| {
            let (server, catalog) = self.servers.get_key_value(server)?;
            let entry = list(catalog).iter().find(|e| e.key() == Some(name))?;
            Some(QualifiedEntry {
                server,
                entry,
                qualifier: qualify,
            })
        });
        if let Some(found) = plain.filter(|e| e.qualified_name().as_deref() == Some(qualified)) {
            return Some(found);
        }
        // Only a name shaped as a changed one (`_` and the hash's 10 hex
        // digits at the end) is searched for, and only among the servers
        // its text begins with: a miss costs no scan of every tool.
        if !looks_changed(qualified) {
            return None;
        }
        self.servers
            .iter()
            .filter(|(server, _)| qualified.starts_with(&changed_prefix(server)))
            .flat_map(|(server, catalog)| {
                list(catalog).iter().map(move |entry| QualifiedEntry {
                    server,
                    entry,
                    qualifier: qualify,
                })
            })
            .find(|e| e.qualified_name().as_deref() == Some(qualified))
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
    /// The tool filters of the owners that have one.
    filters: HashMap<Arc<str>, Arc<ToolFilter>>,
    /// The lists of each filtered owner as its session has them: what a
    /// changed filter is applied to.
    unfiltered: HashMap<Arc<str>, Arc<Catalog>>,
}

impl Hub {
    pub(crate) fn new(capacity: usize) -> Hub {
        Hub {
            current: Mutex::new(Current {
                events: Some(broadcast::channel(capacity.max(1)).0),
                catalog: Arc::default(),
                owners: HashMap::new(),
                filters: HashMap::new(),
                unfiltered: HashMap::new(),
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

    /// Makes slot `id` the owner of `server`, before it runs, offering
    /// the tools `filter` lets through: the lists of a slot it replaces
    /// leave the catalog now (they are no longer routed to), and that
    /// slot is heard from no more.
    pub(crate) fn claim(&self, server: &Arc<str>, id: u64, filter: &Arc<ToolFilter>) {
        let mut current = lock(&self.current);
        current.owners.insert(server.clone(), id);
        current.unfiltered.remove(server);
        if filter.is_open() {
            current.filters.remove(server);
        } else {
            current.filters.insert(server.clone(), filter.clone());
        }
        self.update(&mut current, server, None);
    }

    /// Replaces the tool filter of `server` (owned by slot `id`), and its
    /// lists in the catalog with what the new one lets through.
    pub(crate) fn set_filter(&self, server: &Arc<str>, id: u64, filter: &Arc<ToolFilter>) {
        let mut current = lock(&self.current);
        if current.owners.get(server) != Some(&id) {
            return;
        }
        let listed = match current.unfiltered.remove(server) {
            Some(listed) => Some(listed),
            // Not filtered until now: the catalog holds its lists whole.
            None if !current.filters.contains_key(server) => {
                current.catalog.servers.get(server).cloned()
            }
            None => None,
        };
        if filter.is_open() {
            current.filters.remove(server);
        } else {
            current.filters.insert(server.clone(), filter.clone());
        }
        if let Some(listed) = listed {
            self.publish(&mut current, server, listed);
        }
    }

    /// Whether `server`'s tool `name` is offered (not filtered out).
    pub(crate) fn offers(&self, server: &str, name: &str) -> bool {
        lock(&self.current)
            .filters
            .get(server)
            .is_none_or(|filter| filter.allows(name))
    }

    /// Slot `id` has ended: `server` has no owner now, unless another
    /// slot has claimed it since.
    pub(crate) fn release(&self, server: &Arc<str>, id: u64) {
        let mut current = lock(&self.current);
        if current.owners.get(server) == Some(&id) {
            current.owners.remove(server);
            current.filters.remove(server);
            current.unfiltered.remove(server);
        }
    }

    /// Slot `id` of `server` changed state: `update` (which makes the
    /// new state visible) runs under the hub's lock, and the change is
    /// announced in the same hold if the slot owns the name. So whoever
    /// saw the state and then [`sync`](Self::sync)s finds its event sent.
    pub(crate) fn state(
        &self,
        server: &Arc<str>,
        id: u64,
        state: SlotState,
        update: impl FnOnce(),
    ) {
        let current = lock(&self.current);
        update();
        if current.owners.get(server) != Some(&id) {
            return;
        }
        if let Some(events) = &current.events {
            let _ = events.send(FleetEvent::State {
                server: server.clone(),
                state,
            });
        }
    }

    /// Waits for any state change being announced to be sent.
    pub(crate) fn sync(&self) {
        drop(lock(&self.current));
    }

    /// The session of slot `id` of `server` was renewed: announced if the
    /// slot owns the name.
    pub(crate) fn renewed(
        &self,
        server: &Arc<str>,
        id: u64,
        old_session_id: Option<SessionId>,
        new_session_id: Option<SessionId>,
        era: ProtocolVersion,
        info: Arc<SessionInfo>,
    ) {
        self.announce(server, id, || FleetEvent::Renewed {
            server: server.clone(),
            old_session_id,
            new_session_id,
            era,
            info,
        });
    }

    fn announce(&self, server: &Arc<str>, id: u64, event: impl FnOnce() -> FleetEvent) {
        let current = lock(&self.current);
        if current.owners.get(server) != Some(&id) {
            return;
        }
        // No receiver is no error: nobody is watching. Sent under the
        // lock, so a successor's claim never comes between check and send.
        if let Some(events) = &current.events {
            let _ = events.send(event());
        }
    }

    /// Sets (or, with `None`, removes) one server's lists, if slot `id`
    /// owns the name; a change bumps the generation and is announced.
    /// Compared with what the catalog holds, not with the last event: a
    /// slot that lost session events (a lag) catches up by setting its
    /// session's lists.
    pub(crate) fn set_catalog(&self, server: &Arc<str>, id: u64, catalog: Option<Arc<Catalog>>) {
        let mut current = lock(&self.current);
        if current.owners.get(server) != Some(&id) {
            return;
        }
        match catalog {
            Some(listed) => self.publish(&mut current, server, listed),
            None => {
                current.unfiltered.remove(server);
                self.update(&mut current, server, None);
            }
        }
    }

    /// Puts `server`'s session lists `listed` in the catalog, filtered.
    fn publish(&self, current: &mut Current, server: &Arc<str>, listed: Arc<Catalog>) {
        let shown = match current.filters.get(server) {
            Some(filter) => {
                let shown = filter.apply(&listed);
                current.unfiltered.insert(server.clone(), listed);
                shown
            }
            None => listed,
        };
        self.update(current, server, Some(shown));
    }

    fn update(&self, current: &mut Current, server: &Arc<str>, catalog: Option<Arc<Catalog>>) {
        let old = current.catalog.servers.get(server);
        let changes = match (old, &catalog) {
            (Some(old), Some(new)) if Arc::ptr_eq(old, new) => return,
            (None, None) => return,
            (old, new) => CatalogChanges::between(server, old.map(|c| &**c), new.as_deref()),
        };
        // A server coming or going is a change even with empty lists.
        let same = old.is_some() && catalog.is_some() && changes.is_empty();
        let mut next = FleetCatalog::clone(&current.catalog);
        match catalog {
            Some(catalog) => next.servers.insert(server.clone(), catalog),
            None => next.servers.remove(server),
        };
        if same {
            // Kept all the same, unannounced: the session's lists, not
            // the ones they replaced (whose memory goes with them).
            current.catalog = Arc::new(next);
            return;
        }
        next.generation += 1;
        let event = FleetEvent::Catalog {
            generation: next.generation,
            tools: next.tool_count(),
            server: server.clone(),
            changes: Arc::new(changes),
        };
        current.catalog = Arc::new(next);
        // Sent under the lock, so events come in generation order.
        if let Some(events) = &current.events {
            let _ = events.send(event);
        }
    }
}

// Pages are read with the public `wire::parse_page`, as a fleet of its own
// crate would: so with the feature `wire`.
#[cfg(all(test, feature = "wire"))]
mod tests {
    use super::super::spec::MAX_QUALIFIED_LEN;
    use super::*;
    use crate::wire::parse_page;
    use serde_json::Value;

    fn catalog(tools: &str) -> Arc<Catalog> {
        let text = format!(r#"{{"tools": {tools}}}"#);
        let raw = serde_json::value::RawValue::from_string(text).expect("JSON");
        let page = parse_page(&raw, "tools", "name").expect("a page");
        Arc::new(Catalog {
            tools: page.entries.expect("tools"),
            ..Catalog::default()
        })
    }

    fn tools(event: FleetEvent) -> (u64, ListChanges) {
        match event {
            FleetEvent::Catalog {
                generation,
                changes,
                ..
            } => (generation, changes.tools.clone()),
            other => panic!("{other:?}"),
        }
    }

    fn changes(added: &[&str], removed: &[&str], changed: &[&str]) -> ListChanges {
        let owned = |names: &[&str]| names.iter().map(|n| (*n).to_owned()).collect();
        ListChanges {
            added: owned(added),
            removed: owned(removed),
            changed: owned(changed),
            ..ListChanges::default()
        }
    }

    /// An entry too large to parse for the comparison (uncharged, and
    /// sixteenfold as values) counts as changed when its text differs,
    /// even if only its whitespace does; a small one is compared as JSON.
    #[test]
    fn a_huge_entry_written_otherwise_counts_as_changed_unparsed() {
        let hub = Hub::new(16);
        let server: Arc<str> = "s".into();
        hub.claim(&server, 1, &Arc::default());
        let mut events = hub.subscribe();
        let zeros = vec!["0"; 40_000].join(",");
        let list = |gap: &str| {
            catalog(&format!(
                r#"[{{"name": "big", "v": [{zeros}]}},{gap}{{"name": "small", "v": 1}}]"#
            ))
        };
        hub.set_catalog(&server, 1, Some(list("")));
        let _ = events.try_recv().unwrap();
        let spaced = zeros.replace(',', ", ");
        hub.set_catalog(
            &server,
            1,
            Some(catalog(&format!(
                r#"[{{"name": "big", "v": [{spaced}]}}, {{"v": 1, "name": "small"}}]"#
            ))),
        );
        assert_eq!(
            tools(events.try_recv().unwrap()).1,
            changes(&[], &[], &["s__big"])
        );
    }

    /// A server that replaces a list of 10 000 tools with another: the
    /// event (kept for slow readers, 1024 of them by default) holds a
    /// bounded number of names, and counts the rest.
    #[test]
    fn an_event_holds_a_bounded_number_of_names() {
        let list = |prefix: &str| {
            let tools: Vec<String> = (0..10_000)
                .map(|i| format!(r#"{{"name": "{prefix}{i}"}}"#))
                .collect();
            catalog(&format!("[{}]", tools.join(",")))
        };
        let hub = Hub::new(16);
        let server: Arc<str> = "s".into();
        hub.claim(&server, 1, &Arc::default());
        let mut events = hub.subscribe();
        hub.set_catalog(&server, 1, Some(list("a")));
        let (_, first) = tools(events.try_recv().unwrap());
        assert_eq!(first.added.len(), ListChanges::MAX_NAMES);
        assert_eq!(first.more_added, 10_000 - ListChanges::MAX_NAMES);
        hub.set_catalog(&server, 1, Some(list("b")));
        let (_, flipped) = tools(events.try_recv().unwrap());
        let held = flipped.added.len() + flipped.removed.len() + flipped.changed.len();
        assert!(held <= ListChanges::MAX_NAMES, "{held} names");
        assert_eq!(held + flipped.more(), 20_000);
        let bytes: usize = flipped
            .added
            .iter()
            .chain(&flipped.removed)
            .map(String::len)
            .sum();
        assert!(bytes <= ListChanges::MAX_NAME_BYTES, "{bytes} bytes");
        // Long names: the bytes bound holds too. A tool's qualified name
        // is cut to 64 bytes: 128 of them fill the 8 KiB.
        let long = "x".repeat(4000);
        let tools_json: Vec<String> = (0..200)
            .map(|i| format!(r#"{{"name": "{long}{i}"}}"#))
            .collect();
        hub.set_catalog(
            &server,
            1,
            Some(catalog(&format!("[{}]", tools_json.join(",")))),
        );
        let (_, long) = tools(events.try_recv().unwrap());
        assert_eq!(
            long.added.len(),
            ListChanges::MAX_NAME_BYTES / MAX_QUALIFIED_LEN
        );
        assert!(
            long.added
                .iter()
                .all(|name| name.len() == MAX_QUALIFIED_LEN)
        );
        assert_eq!(long.more_added, 200 - long.added.len());
        assert_eq!(long.more_removed, 10_000);
        assert!(!long.is_empty());
    }

    /// Two servers, one named as the other's cut name and `_b`: a changed
    /// name of the longer one's tool finds that tool, never the other
    /// server's, and the two qualified names differ.
    #[test]
    fn a_changed_name_finds_its_own_server() {
        let a = "a".repeat(52);
        let b = format!("{a}_b");
        let changed = qualify(&b, "files.read");
        let impostor = changed[changed.len() - 10..].to_owned();
        let hub = Hub::new(16);
        let (sa, sb): (Arc<str>, Arc<str>) = (a.as_str().into(), b.as_str().into());
        hub.claim(&sa, 1, &Arc::default());
        hub.claim(&sb, 2, &Arc::default());
        hub.set_catalog(&sb, 2, Some(catalog(r#"[{"name": "files.read"}]"#)));
        let listed = format!(r#"[{{"name": "{impostor}"}}]"#);
        hub.set_catalog(&sa, 1, Some(catalog(&listed)));
        let fleet = hub.catalog();
        let names: Vec<String> = fleet.tools().filter_map(|t| t.qualified_name()).collect();
        assert_ne!(names[0], names[1], "{names:?}");
        let found = fleet.tool(&changed).expect("found");
        assert_eq!(
            (found.server, found.name()),
            (b.as_str(), Some("files.read"))
        );
        assert!(fleet.tool(&format!("{a}_0123456789")).is_none());
    }

    /// Each event is the difference with what the catalog holds, whatever
    /// the slot missed between (a lagged session stream sets the lists as
    /// they are now); the same lists are no event; a slot that does not
    /// own the name is heard from no more.
    #[test]
    fn changes_are_against_what_the_catalog_holds() {
        let hub = Hub::new(16);
        let server: Arc<str> = "s".into();
        hub.claim(&server, 1, &Arc::default());
        let mut events = hub.subscribe();
        let a = r#"[{"name": "x", "v": 1}, {"name": "y"}, {"v": 0}]"#;
        hub.set_catalog(&server, 1, Some(catalog(a)));
        assert_eq!(
            tools(events.try_recv().unwrap()),
            (1, changes(&["s__x", "s__y"], &[], &[]))
        );
        // Listed again the same, and the same written otherwise.
        hub.set_catalog(&server, 1, Some(catalog(a)));
        hub.set_catalog(
            &server,
            1,
            Some(catalog(r#"[{"v":1,"name":"x"},{"name":"y"},{"v":0}]"#)),
        );
        assert!(events.try_recv().is_err());
        assert_eq!(hub.catalog().generation, 1);
        // A list between never set (its event lost): the next one says
        // what changed since the catalog's.
        let c = r#"[{"name": "y", "v": 2}, {"name": "z"}]"#;
        hub.set_catalog(&server, 1, Some(catalog(c)));
        assert_eq!(
            tools(events.try_recv().unwrap()),
            (2, changes(&["s__z"], &["s__x"], &["s__y"]))
        );
        // Not the owner: nothing, not even a renewal.
        hub.set_catalog(&server, 2, None);
        let info = || {
            Arc::new(SessionInfo {
                server_info: Value::Null,
                capabilities: Value::Null,
                instructions: None,
                protocol_version: ProtocolVersion::LATEST,
                transport: crate::TransportKind::StreamableHttp,
                probed: false,
                session_id_issued: false,
                ownership: crate::SessionOwnership::Owned,
                client_ownership: crate::ClientOwnership::Owned,
                timings: crate::Timings::default(),
            })
        };
        hub.renewed(&server, 2, None, None, ProtocolVersion::LATEST, info());
        assert!(events.try_recv().is_err());
        hub.renewed(&server, 1, None, None, ProtocolVersion::LATEST, info());
        assert!(matches!(
            events.try_recv(),
            Ok(FleetEvent::Renewed { server, .. }) if &*server == "s"
        ));
        // Gone: all removed.
        hub.set_catalog(&server, 1, None);
        assert_eq!(
            tools(events.try_recv().unwrap()),
            (3, changes(&[], &["s__y", "s__z"], &[]))
        );
    }
}
