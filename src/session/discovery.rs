//! Discovery: every page of tools, prompts, resources and resource templates.

use std::collections::HashSet;
use std::hash::{BuildHasher, RandomState};
use std::sync::Arc;
use std::time::Duration;

use hashbrown::HashTable;
use serde::Serialize;
use serde_json::{Value, json};
use tracing::Instrument;

use crate::budget::{Account, MemoryBudget, Spent};
use crate::engine::{Deadline, Engine, Front};
use crate::error::{Error, Result};
use crate::jsonrpc::{Request, codes};
use crate::transport::metadata::param_headers;

use serde_json::value::RawValue;

use super::entry::{Entry, PageError, read_page};

/// What discovery lists, and how far it follows a server's cursors.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Discovery {
    /// List tools (when the server declares `tools`). Default: true.
    pub tools: bool,
    /// List prompts (when the server declares `prompts`). Default: true.
    pub prompts: bool,
    /// List resources (when the server declares `resources`). Default: true.
    pub resources: bool,
    /// List resource templates (when the server declares `resources`).
    /// Default: true.
    pub resource_templates: bool,
    /// Most pages followed per list; one more is an error. Default: 100.
    pub max_pages: usize,
    /// List the kinds at once (each kind's pages still in order), after
    /// `notifications/initialized` has been accepted: a connect then takes
    /// about as long as its longest list instead of all of them. Every
    /// transport allows requests side by side (a client MAY send a request
    /// before the last is answered), but a server that mishandles them
    /// (answers one with an error, or holds a lock per session) needs
    /// `concurrent(false)`; a fleet's config says so with
    /// `"concurrentDiscovery": false`.
    ///
    /// Default: `None`, at once where it costs nothing: over a lent client
    /// (its pool holds connections after the first connect) and over
    /// stdio; one after the other with a session's own new client, which
    /// over HTTP/1 would open a connection per kind (three more handshakes,
    /// TLS ones on `https`). `Some(true)`: at once always; `Some(false)`:
    /// never.
    pub concurrent: Option<bool>,
    /// What the session may keep of the catalog: every page read (at
    /// connect, in a re-discovery, by `Session::list_*`) and every value
    /// parsed from an entry is charged to one account per session. Default:
    /// [`MemoryBudget::default`] (64 MiB, 100 000 entries, cursors of
    /// 4 KiB).
    pub memory: MemoryBudget,
    /// The least time between the starts of two re-listings of one kind
    /// after `list_changed` (changes announced meanwhile make one more
    /// run), so a server cannot make the client re-list back to back.
    /// Default: 1 s.
    pub relist_interval: Duration,
}

impl Default for Discovery {
    fn default() -> Self {
        Discovery {
            tools: true,
            prompts: true,
            resources: true,
            resource_templates: true,
            max_pages: 100,
            concurrent: None,
            memory: MemoryBudget::default(),
            relist_interval: Duration::from_secs(1),
        }
    }
}

impl Discovery {
    /// Lists nothing: connect ends after the handshake.
    #[must_use]
    pub fn none() -> Self {
        Discovery {
            tools: false,
            prompts: false,
            resources: false,
            resource_templates: false,
            ..Discovery::default()
        }
    }

    /// Sets [`tools`](Self::tools).
    #[must_use]
    pub fn tools(mut self, list: bool) -> Self {
        self.tools = list;
        self
    }

    /// Sets [`prompts`](Self::prompts).
    #[must_use]
    pub fn prompts(mut self, list: bool) -> Self {
        self.prompts = list;
        self
    }

    /// Sets [`resources`](Self::resources).
    #[must_use]
    pub fn resources(mut self, list: bool) -> Self {
        self.resources = list;
        self
    }

    /// Sets [`resource_templates`](Self::resource_templates).
    #[must_use]
    pub fn resource_templates(mut self, list: bool) -> Self {
        self.resource_templates = list;
        self
    }

    /// Sets [`concurrent`](Self::concurrent).
    #[must_use]
    pub fn concurrent(mut self, at_once: bool) -> Self {
        self.concurrent = Some(at_once);
        self
    }

    /// Sets [`max_pages`](Self::max_pages).
    #[must_use]
    pub fn max_pages(mut self, pages: usize) -> Self {
        self.max_pages = pages;
        self
    }

    /// Sets [`relist_interval`](Self::relist_interval).
    #[must_use]
    pub fn relist_interval(mut self, interval: Duration) -> Self {
        self.relist_interval = interval;
        self
    }

    /// Sets [`memory`](Self::memory).
    #[must_use]
    pub fn memory(mut self, budget: MemoryBudget) -> Self {
        self.memory = budget;
        self
    }
}

/// What the server offers, as discovered at connect. Entries are the
/// server's JSON text, verbatim (schemas, `_meta` and all), read when
/// looked into (see [`Entry`]); it serializes them verbatim, which only
/// serde_json understands (see [`Entry`]'s `Serialize`).
///
/// Duplicate names across pages: the first entry with a name is kept and
/// later ones are dropped (counted in
/// [`duplicates_dropped`](Self::duplicates_dropped)), so a tool name always
/// means one tool.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct Catalog {
    /// `tools/list`, every page.
    pub tools: Vec<Entry>,
    /// `prompts/list`, every page.
    pub prompts: Vec<Entry>,
    /// `resources/list`, every page.
    pub resources: Vec<Entry>,
    /// `resources/templates/list`, every page.
    pub resource_templates: Vec<Entry>,
    /// Entries dropped because an earlier one had the same name (or URI).
    pub duplicates_dropped: usize,
}

impl Catalog {
    /// The tool called `name`.
    pub fn tool(&self, name: &str) -> Option<&Entry> {
        self.tools.iter().find(|t| t.key() == Some(name))
    }

    /// The names of the tools, in the server's order.
    pub fn tool_names(&self) -> impl Iterator<Item = &str> {
        self.tools.iter().filter_map(Entry::key)
    }
}

/// One of the four lists.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ListKind {
    Tools,
    Prompts,
    Resources,
    ResourceTemplates,
}

impl ListKind {
    pub(crate) const ALL: [ListKind; 4] = [
        ListKind::Tools,
        ListKind::Prompts,
        ListKind::Resources,
        ListKind::ResourceTemplates,
    ];

    /// Whether `discovery` asks for this list.
    pub(crate) fn wanted(self, discovery: &Discovery) -> bool {
        match self {
            ListKind::Tools => discovery.tools,
            ListKind::Prompts => discovery.prompts,
            ListKind::Resources => discovery.resources,
            ListKind::ResourceTemplates => discovery.resource_templates,
        }
    }

    /// Whether the server declares the capability (unknown: assumed).
    pub(crate) fn offered(self, capabilities: Option<&Value>) -> bool {
        let capability = match self {
            ListKind::Tools => "tools",
            ListKind::Prompts => "prompts",
            ListKind::Resources | ListKind::ResourceTemplates => "resources",
        };
        capabilities.is_none_or(|c| c.get(capability).is_some())
    }

    pub(crate) fn method(self) -> &'static str {
        match self {
            ListKind::Tools => "tools/list",
            ListKind::Prompts => "prompts/list",
            ListKind::Resources => "resources/list",
            ListKind::ResourceTemplates => "resources/templates/list",
        }
    }

    /// The result field that holds the entries.
    pub(crate) fn result_field(self) -> &'static str {
        match self {
            ListKind::Tools => "tools",
            ListKind::Prompts => "prompts",
            ListKind::Resources => "resources",
            ListKind::ResourceTemplates => "resourceTemplates",
        }
    }

    /// The field that names an entry, for spotting duplicates.
    pub(crate) fn key(self) -> &'static str {
        match self {
            ListKind::Tools | ListKind::Prompts => "name",
            ListKind::Resources => "uri",
            ListKind::ResourceTemplates => "uriTemplate",
        }
    }

    pub(crate) fn index(self) -> usize {
        self as usize
    }

    /// Reads one page of this kind's `result`: its entries and its
    /// `nextCursor`, charged to the session's `account`. With `stateless`
    /// (2026-07-28), a tool whose `x-mcp-header` is invalid is left out.
    /// `page` numbers the page in errors.
    pub(crate) fn read_page(
        self,
        result: Box<RawValue>,
        stateless: bool,
        page: Option<usize>,
        account: &Account,
    ) -> Result<(Vec<Entry>, Option<Value>)> {
        let which = || page.map(|p| format!(" (page {p})")).unwrap_or_default();
        let method = self.method();
        let over = |spent: Spent| {
            Error::limit(format!(
                "the {method} result{} was not kept: {spent}",
                which()
            ))
        };
        let listed = read_page(result.into(), self.result_field(), self.key(), account).map_err(
            |e| match e {
                PageError::Json(e) => Error::protocol(format!(
                    "the {method} result{} cannot be read: {e}",
                    which()
                )),
                PageError::Spent(spent) => over(spent),
            },
        )?;
        let Some(mut entries) = listed.entries else {
            return Err(Error::protocol(format!(
                "the {method} result{} has no `{}` array",
                which(),
                self.result_field()
            )));
        };
        if stateless && self == ListKind::Tools {
            let mut spent = None;
            entries.retain(|tool| match valid_tool(tool) {
                Ok(valid) => valid,
                Err(over) => {
                    spent.get_or_insert(over);
                    false
                }
            });
            if let Some(spent) = spent {
                return Err(over(spent));
            }
        }
        Ok((entries, listed.next_cursor))
    }

    /// The catalog's list of this kind.
    pub(crate) fn field(self, catalog: &mut Catalog) -> &mut Vec<Entry> {
        match self {
            ListKind::Tools => &mut catalog.tools,
            ListKind::Prompts => &mut catalog.prompts,
            ListKind::Resources => &mut catalog.resources,
            ListKind::ResourceTemplates => &mut catalog.resource_templates,
        }
    }

    /// The lists a `notifications/*/list_changed` invalidates, if it is one.
    pub(crate) fn changed_by(method: &str) -> Option<&'static [ListKind]> {
        match method {
            "notifications/tools/list_changed" => Some(&[ListKind::Tools]),
            "notifications/prompts/list_changed" => Some(&[ListKind::Prompts]),
            "notifications/resources/list_changed" => {
                Some(&[ListKind::Resources, ListKind::ResourceTemplates])
            }
            _ => None,
        }
    }
}

/// Lists what `capabilities` declares and `discovery` asks for; with
/// `capabilities` unknown (an attached session), lists everything asked for
/// and treats "method not found" as "not offered". All or nothing.
pub(crate) async fn discover(
    lister: &mut Lister<'_, impl Front>,
    capabilities: Option<&Value>,
    at_once: bool,
) -> Result<Catalog> {
    let discovery = lister.discovery;
    let mut catalog = Catalog::default();
    let wanted = |kind: ListKind| kind.wanted(discovery) && kind.offered(capabilities);
    if at_once {
        // All or nothing: the first failure drops the other lists.
        let shared = &*lister;
        let list = |kind: ListKind| async move {
            if wanted(kind) {
                // Boxed: four engine calls side by side make a future too
                // large for a stack.
                Box::pin(shared.list_counted(kind)).await.map(Some)
            } else {
                Ok(None)
            }
        };
        let [tools, prompts, resources, templates] = ListKind::ALL;
        let lists = tokio::try_join!(list(tools), list(prompts), list(resources), list(templates))?;
        let lists = [
            (tools, lists.0),
            (prompts, lists.1),
            (resources, lists.2),
            (templates, lists.3),
        ];
        for (kind, listed) in lists {
            if let Some((items, duplicates)) = listed {
                *kind.field(&mut catalog) = items;
                catalog.duplicates_dropped += duplicates;
            }
        }
        return Ok(catalog);
    }
    for kind in ListKind::ALL {
        if wanted(kind) {
            *kind.field(&mut catalog) = lister.list(kind).await?;
        }
    }
    catalog.duplicates_dropped = lister.duplicates;
    Ok(catalog)
}

/// 2026-07-28: whether a tool's `x-mcp-header` annotations are valid;
/// a tool with an invalid one is left out of the list, with a warning.
/// The value read for the check is charged while it lives and not kept;
/// `Err` when the session's memory budget cannot hold it.
pub(crate) fn valid_tool(tool: &Entry) -> std::result::Result<bool, Spent> {
    // Only text that spells `x-mcp-header`, plainly or through `\u`
    // escapes, can hold an annotation: any other tool is valid without
    // reading it into a value.
    let text = tool.json();
    if !text.contains("x-mcp-header") && !text.contains("\\u") {
        return Ok(true);
    }
    // Read here and dropped here: never through the entry's `Deref`,
    // which would keep the value for the catalog's life.
    let read = tool.value_charged()?;
    // Annotations that cannot be read cannot be shown valid.
    let checked = match &read {
        None => Err("the tool could not be read".to_owned()),
        Some((value, _charge)) => param_headers(value),
    };
    match checked {
        Ok(_) => Ok(true),
        Err(reason) => {
            let name: String = tool.key().unwrap_or("").chars().take(64).collect();
            tracing::warn!(tool = %name, %reason, "left a tool out: invalid x-mcp-header");
            Ok(false)
        }
    }
}

/// Lists, every page, through a session's engine, charging what it reads
/// to the session's memory account.
pub(crate) struct Lister<'a, F: Front> {
    engine: &'a Arc<Engine<F>>,
    /// The session's memory account, which every page is charged to.
    account: &'a Account,
    discovery: &'a Discovery,
    /// Each page's timeout.
    page_timeout: Option<Duration>,
    /// Whether an expired session is replaced (not during connect).
    renew: bool,
    /// Capabilities unknown: "method not found" on page 1 means "not offered".
    probing: bool,
    duplicates: usize,
}

impl<'a, F: Front> Lister<'a, F> {
    pub(crate) fn new(
        engine: &'a Arc<Engine<F>>,
        account: &'a Account,
        discovery: &'a Discovery,
        page_timeout: Option<Duration>,
        renew: bool,
        probing: bool,
    ) -> Self {
        Lister {
            engine,
            account,
            discovery,
            page_timeout,
            renew,
            probing,
            duplicates: 0,
        }
    }

    pub(crate) async fn list(&mut self, kind: ListKind) -> Result<Vec<Entry>> {
        let (items, duplicates) = self.list_counted(kind).await?;
        self.duplicates += duplicates;
        Ok(items)
    }

    /// Every page of `kind`, and how many duplicates were dropped.
    async fn list_counted(&self, kind: ListKind) -> Result<(Vec<Entry>, usize)> {
        let span = tracing::debug_span!("mcp.discover", method = kind.method());
        self.pages(kind).instrument(span).await
    }

    async fn pages(&self, kind: ListKind) -> Result<(Vec<Entry>, usize)> {
        let mut duplicates = 0;
        let mut items: Vec<Entry> = Vec::new();
        let mut names = Names::default();
        // Only the cursor to send back is kept; the earlier ones as hashes,
        // enough to spot a repeat (each is capped by the budget).
        let cursor_hasher = RandomState::new();
        let mut cursors = HashSet::new();
        let mut cursor: Option<String> = None;
        let account = self.account;
        for page in 1..=self.discovery.max_pages {
            let params = cursor.as_ref().map(|c| json!({ "cursor": c }));
            let id = self.engine.next_id();
            let call = self
                .engine
                .telemetry(None, kind.method(), params.as_ref(), Some(&id));
            let params = call.inject(params);
            let request = Request {
                id,
                method: kind.method().into(),
                params,
            };
            let deadline = Deadline::after(self.page_timeout);
            let page_call = call.run(self.engine.call(&request, deadline, self.renew));
            let result = match page_call.await {
                Ok(result) => result,
                Err(e)
                    if self.probing
                        && page == 1
                        && e.rpc_code() == Some(codes::METHOD_NOT_FOUND) =>
                {
                    return Ok((Vec::new(), 0));
                }
                // Over the budget as it was read: which page says where.
                Err(e) if e.is_limit() => {
                    return Err(e.context(format!("the {} result (page {page})", kind.method())));
                }
                Err(e) => return Err(e),
            };
            let stateless = self.engine.generation().is_some_and(|g| g.is_stateless());
            let (entries, next_cursor) = kind.read_page(result, stateless, Some(page), account)?;
            items.reserve(entries.len());
            names.reserve(&items, entries.len());
            for entry in entries {
                if !names.push(&mut items, entry) {
                    duplicates += 1;
                }
            }
            match next_cursor {
                None => return Ok((items, duplicates)),
                Some(Value::String(next)) => {
                    if !cursors.insert(cursor_hasher.hash_one(&next)) {
                        return Err(Error::protocol(format!(
                            "{} repeated a cursor on page {page}; stopped",
                            kind.method()
                        )));
                    }
                    cursor = Some(next);
                }
                Some(_) => {
                    return Err(Error::protocol(format!(
                        "the {} nextCursor (page {page}) is not a string",
                        kind.method()
                    )));
                }
            }
        }
        Err(Error::limit(format!(
            "{} still had more pages after {}; stopped",
            kind.method(),
            self.discovery.max_pages
        )))
    }
}

/// The names (or URIs) of the entries kept so far, as indexes into them:
/// spotting a duplicate copies no name.
#[derive(Default)]
struct Names {
    hasher: RandomState,
    kept: HashTable<usize>,
}

impl Names {
    /// Room for `more` keys, at once rather than doubling as they come.
    fn reserve(&mut self, items: &[Entry], more: usize) {
        let hasher = &self.hasher;
        self.kept.reserve(more, |&i| {
            hasher.hash_one(items[i].key().unwrap_or_default())
        });
    }

    /// Pushes `entry` onto `items`, unless an entry there has its key:
    /// then returns false.
    fn push(&mut self, items: &mut Vec<Entry>, entry: Entry) -> bool {
        let Some(key) = entry.key() else {
            items.push(entry);
            return true;
        };
        let hash = self.hasher.hash_one(key);
        if self
            .kept
            .find(hash, |&i| items[i].key() == Some(key))
            .is_some()
        {
            return false;
        }
        items.push(entry);
        let (items, hasher) = (&*items, &self.hasher);
        // Only keyed entries are in the table.
        self.kept.insert_unique(hash, items.len() - 1, |&i| {
            hasher.hash_one(items[i].key().unwrap_or_default())
        });
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tools(text: &str) -> Vec<Entry> {
        let result = RawValue::from_string(format!(r#"{{"tools":{text}}}"#)).unwrap();
        crate::session::entry::parse_page(&result, "tools", "name")
            .unwrap()
            .entries
            .unwrap()
    }

    fn valid_tool(tool: &Entry) -> bool {
        super::valid_tool(tool).unwrap()
    }

    /// Only tools whose text can spell `x-mcp-header` are read whole, and
    /// an annotation spelled with `\u` escapes is checked like a plain one.
    #[test]
    fn tools_are_checked_whatever_the_spelling_of_the_annotation() {
        let unreachable = |key: &str| {
            format!(
                r#"{{"name":"t","inputSchema":{{"type":"object","properties":{{"a":{{"type":"array","items":{{"type":"string","{key}":"A"}}}}}}}}}}"#
            )
        };
        for key in ["x-mcp-header", r"x\u002dmcp-header", r"\u0078-mcp-header"] {
            let [tool] = &tools(&format!("[{}]", unreachable(key)))[..] else {
                panic!()
            };
            assert!(!valid_tool(tool), "{key}");
        }
        let plain = tools(
            r#"[{"name":"p","description":"a \"quoted\"\nline","inputSchema":{"type":"object"}},
                {"name":"h","inputSchema":{"type":"object","properties":{"r":{"type":"string","x-mcp-header":"Region"}}}}]"#,
        );
        assert!(plain.iter().all(valid_tool));
    }

    /// Duplicates are spotted by key, escaped or not, across pages, and
    /// entries without a key are all kept.
    #[test]
    fn names_spot_duplicates_by_key() {
        let mut names = Names::default();
        let mut items = Vec::new();
        let page = tools(
            r#"[{"name":"a"},{"name":"b"},{"name":"\u0061"},{"title":"no name"},{"title":"no name"}]"#,
        );
        let kept: Vec<bool> = page
            .into_iter()
            .map(|entry| names.push(&mut items, entry))
            .collect();
        assert_eq!(kept, [true, true, false, true, true]);
        names.reserve(&items, 100);
        for entry in tools(r#"[{"name":"b"},{"name":"c"}]"#) {
            names.push(&mut items, entry);
        }
        let keys: Vec<Option<&str>> = items.iter().map(Entry::key).collect();
        assert_eq!(keys, [Some("a"), Some("b"), None, None, Some("c")]);
    }

    fn tool(extra: &str) -> Entry {
        tools(&format!(
            r#"[{{"name":"t","inputSchema":{{"type":"object","properties":{{"r":{{"type":"string","x-mcp-header":"R"}}}}}}{extra}}}]"#
        ))
        .remove(0)
    }

    /// A tool whose annotations cannot be read (JSON that no `Value` holds)
    /// cannot be shown valid: it is left out, not listed without headers.
    #[test]
    fn a_tool_that_cannot_be_read_is_not_valid() {
        assert!(valid_tool(&tool("")));
        assert!(valid_tool(&tool(r#","description":"caf\u00e9""#)));
        assert!(!valid_tool(&tool(r#","big":1e400"#)));
        assert!(!valid_tool(&tool(r#","description":"\ud800""#)));
    }

    /// Issue 20 (2): the 2026-07-28 `x-mcp-header` check reads tools
    /// with a `\u` escape, and keeps nothing it read: after a stateless
    /// read the account holds what a plain read holds.
    #[test]
    fn the_header_check_keeps_no_parsed_value() {
        let text = r#"{"tools":[{"name":"a","description":"caf\u00e9","inputSchema":{"type":"object","properties":{"r":{"type":"string","x-mcp-header":"R"}}}},{"name":"b","description":"\u00e9","inputSchema":{"type":"object","properties":{"s":{"type":"array","items":{"type":"string","x-mcp-header":"S"}}}}}]}"#;
        let held = |stateless: bool| {
            let account = Account::new(MemoryBudget::default());
            let result = RawValue::from_string(text.into()).unwrap();
            let (tools, _) = ListKind::Tools
                .read_page(result, stateless, Some(1), &account)
                .unwrap();
            let names: Vec<_> = tools.iter().filter_map(Entry::key).collect();
            (names.join(","), account.bytes())
        };
        let (plain, plain_bytes) = held(false);
        let (checked, checked_bytes) = held(true);
        assert_eq!((plain.as_str(), checked.as_str()), ("a,b", "a"));
        // The page (shared by the entries) and the entries, nothing more.
        assert_eq!(checked_bytes, plain_bytes);

        // A budget with room for the page, not for the check's value: a
        // limit error naming the bound, not a tool silently left out.
        let account = Account::new(MemoryBudget::default().max_bytes(text.len() + 2 * 200));
        let result = RawValue::from_string(text.into()).unwrap();
        let error = ListKind::Tools
            .read_page(result, true, Some(1), &account)
            .unwrap_err();
        assert!(error.is_limit(), "{error}");
        assert!(
            error.to_string().contains("MemoryBudget::max_bytes"),
            "{error}"
        );
        assert!(
            error.to_string().contains("tools/list result (page 1)"),
            "{error}"
        );
    }
}
