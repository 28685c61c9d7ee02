//! What changed in the merged catalog, per server and list: the payload of
//! [`FleetEvent::Catalog`](super::FleetEvent::Catalog). Below both the
//! catalog (which computes it) and the events (which carry it), so neither
//! reaches up into the other.

use std::collections::{HashMap, HashSet};

use serde_json::Value;

use super::spec::{MAX_QUALIFIED_LEN, qualify, qualify_uri};
use crate::{Catalog, Entry};

/// How a list's names are qualified: [`qualify`] for tools and prompts,
/// [`qualify_uri`] for resources and templates.
pub(super) type Qualifier = fn(&str, &str) -> String;

/// What changed in one server's lists, by qualified name (`server__name`,
/// see [`qualify`](super::qualify)): the payload of
/// [`FleetEvent::Catalog`](super::FleetEvent::Catalog).
///
/// Entries are matched by name (a resource's by URI, a template's by URI
/// template); one with the same name counts as changed when its JSON
/// differs as a value (whitespace and the order of keys are no change;
/// an entry over 64 KiB is compared as text only).
/// Entries without a name are not compared.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CatalogChanges {
    /// The tools.
    pub tools: ListChanges,
    /// The prompts.
    pub prompts: ListChanges,
    /// The resources.
    pub resources: ListChanges,
    /// The resource templates.
    pub resource_templates: ListChanges,
}

/// What changed in one list, by qualified name; see [`CatalogChanges`].
///
/// Bounded, as the fleet's events are kept for slow readers and a server
/// may replace a list of 100 000 entries every second: at most
/// [`ListChanges::MAX_NAMES`] names and [`ListChanges::MAX_NAME_BYTES`]
/// bytes of them in all three lists together, the rest only counted
/// (`more_added`, `more_removed`, `more_changed`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ListChanges {
    /// Names new to the list, in the server's order.
    pub added: Vec<String>,
    /// Names gone from the list, in the order it had them.
    pub removed: Vec<String>,
    /// Names still listed whose entry reads differently, in the server's
    /// order.
    pub changed: Vec<String>,
    /// Names added but left out of `added` (over the bound).
    pub more_added: usize,
    /// Names removed but left out of `removed` (over the bound).
    pub more_removed: usize,
    /// Names changed but left out of `changed` (over the bound).
    pub more_changed: usize,
}

/// Which of a [`ListChanges`]' lists a name goes to.
#[derive(Clone, Copy)]
enum Change {
    Added,
    Removed,
    Changed,
}

impl ListChanges {
    /// The most names one list's changes hold (added, removed and changed
    /// together); the rest are counted.
    pub const MAX_NAMES: usize = 256;
    /// The most bytes of names one list's changes hold; the rest are
    /// counted.
    pub const MAX_NAME_BYTES: usize = 8 * 1024;

    /// Whether nothing changed.
    pub fn is_empty(&self) -> bool {
        self.added.is_empty()
            && self.removed.is_empty()
            && self.changed.is_empty()
            && self.more() == 0
    }

    /// How many names were left out, in all three lists.
    pub fn more(&self) -> usize {
        self.more_added
            .saturating_add(self.more_removed)
            .saturating_add(self.more_changed)
    }

    /// Records `name` of `server` as `change`: kept while within the
    /// bounds (qualified only then), counted otherwise.
    fn record(
        &mut self,
        bytes: &mut usize,
        change: Change,
        (server, name): (&str, &str),
        qualifier: Qualifier,
    ) {
        let held = self.added.len() + self.removed.len() + self.changed.len();
        // Over a bound, counted: never a half-kept list of one change
        // while its later names are kept in another. `server__name` may
        // be longer than the qualified name (cut) or shorter (hashed): a
        // name is made only when it may fit, and measured as made.
        let plain = server.len().saturating_add(2).saturating_add(name.len());
        let made = (held < Self::MAX_NAMES
            && self.more() == 0
            && bytes.saturating_add(plain.min(MAX_QUALIFIED_LEN)) <= Self::MAX_NAME_BYTES)
            .then(|| qualifier(server, name))
            .filter(|made| bytes.saturating_add(made.len()) <= Self::MAX_NAME_BYTES);
        let (names, more) = match change {
            Change::Added => (&mut self.added, &mut self.more_added),
            Change::Removed => (&mut self.removed, &mut self.more_removed),
            Change::Changed => (&mut self.changed, &mut self.more_changed),
        };
        match made {
            Some(made) => {
                *bytes += made.len();
                names.push(made);
            }
            None => *more = more.saturating_add(1),
        }
    }

    fn between(server: &str, old: &[Entry], new: &[Entry], qualifier: Qualifier) -> ListChanges {
        let mut changes = ListChanges::default();
        // The common case (a list announced again the same) costs one
        // comparison of texts.
        if old == new {
            return changes;
        }
        let before: HashMap<&str, &Entry> = old
            .iter()
            .filter_map(|entry| Some((entry.key()?, entry)))
            .collect();
        let mut listed = HashSet::with_capacity(new.len());
        let mut bytes = 0;
        for entry in new {
            let Some(name) = entry.key() else { continue };
            listed.insert(name);
            match before.get(name) {
                None => changes.record(&mut bytes, Change::Added, (server, name), qualifier),
                Some(was) if !same_json(was, entry) => {
                    changes.record(&mut bytes, Change::Changed, (server, name), qualifier);
                }
                Some(_) => {}
            }
        }
        for name in old.iter().filter_map(Entry::key) {
            if !listed.contains(name) {
                changes.record(&mut bytes, Change::Removed, (server, name), qualifier);
            }
        }
        changes
    }
}

/// The largest entry whose value is parsed to compare it: parsing is
/// uncharged (and done under the hub's lock), and JSON grows about
/// sixteenfold as values (`[0,0,...]`), so a server re-listing one
/// megabytes-long tool written otherwise each time would cost the client
/// hundreds of megabytes each time. A larger one whose text differs counts
/// as changed.
const MAX_COMPARED_ENTRY: usize = 64 * 1024;

/// Whether two entries read the same: their texts, or else their values
/// (parsed here, uncharged and dropped at once: only entries whose text
/// differs get this far, and only small ones).
fn same_json(a: &Entry, b: &Entry) -> bool {
    a.json() == b.json()
        || (a.json().len() <= MAX_COMPARED_ENTRY && b.json().len() <= MAX_COMPARED_ENTRY)
            && matches!(
                (
                    serde_json::from_str::<Value>(a.json()),
                    serde_json::from_str::<Value>(b.json()),
                ),
                (Ok(a), Ok(b)) if a == b
            )
}

impl CatalogChanges {
    /// Whether nothing changed.
    pub fn is_empty(&self) -> bool {
        self.lists().iter().all(|list| list.is_empty())
    }

    /// The four lists: tools, prompts, resources, resource templates.
    fn lists(&self) -> [&ListChanges; 4] {
        [
            &self.tools,
            &self.prompts,
            &self.resources,
            &self.resource_templates,
        ]
    }

    /// From `old` to `new` (`None`: the server was not, or is no longer,
    /// in the catalog).
    pub(super) fn between(
        server: &str,
        old: Option<&Catalog>,
        new: Option<&Catalog>,
    ) -> CatalogChanges {
        let empty = Catalog::default();
        let (old, new) = (old.unwrap_or(&empty), new.unwrap_or(&empty));
        CatalogChanges {
            tools: ListChanges::between(server, &old.tools, &new.tools, qualify),
            prompts: ListChanges::between(server, &old.prompts, &new.prompts, qualify),
            resources: ListChanges::between(server, &old.resources, &new.resources, qualify_uri),
            resource_templates: ListChanges::between(
                server,
                &old.resource_templates,
                &new.resource_templates,
                qualify_uri,
            ),
        }
    }
}
