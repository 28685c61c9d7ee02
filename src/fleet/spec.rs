//! What the host wants of one server, and the rules for server names.

use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::Catalog;
use crate::{Connector, HeaderHook, HttpClient, HttpClientBuilder, ProtocolVersion};
use crate::{Error, Result};

/// What separates the server's name from a tool's (or prompt's) name in
/// the fleet's catalog: `weather__forecast` is the tool `forecast` of the
/// server `weather`. See [`qualify`] and [`split_qualified`].
pub const SEPARATOR: &str = "__";

/// The longest server name [`Fleet::apply`](super::Fleet::apply) accepts.
pub const MAX_NAME_LEN: usize = 64;

/// The longest qualified name, and what a qualified name may hold: ASCII
/// letters, digits, `_` and `-`, 1 to 64 of them (`^[a-zA-Z0-9_-]{1,64}$`),
/// what the common LLM APIs take as a tool's name.
pub const MAX_QUALIFIED_LEN: usize = 64;

/// The hex digits of the hash that ends a qualified name [`qualify`] had
/// to change.
const HASH_DIGITS: usize = 10;

/// The qualified name of `item` (a tool's or a prompt's name) of
/// `server`, a name a model accepts as a tool's (see
/// [`MAX_QUALIFIED_LEN`]):
///
/// - `server__item` ([`SEPARATOR`] between) when that already is one:
///   `item` holds only ASCII letters, digits, `_` and `-`, `server` too
///   with no `__` inside and no `_` at the end, and the whole is at most
///   64 bytes;
/// - else the server's name cleaned (every other character made `_`, a
///   run of `_` made one, none at either end: `my files` is `my_files`),
///   `__`, the item with every other character made `_`, all cut to 53
///   bytes, then `_` and 10 hex digits of a hash of the original pair
///   (`files.read` of `docs`: `docs__files_read_` and the digits).
///
/// The same server and item always give the same name, whatever else the
/// catalog holds, across restarts, reloads and versions of this crate
/// (the hash is FNV-1a, fixed here). Two items that clean to the same
/// text (`files.read`, `files read`, `files_read`) get different names:
/// the first two end with their own hashes, the third stays plain. Names
/// collide only if two hashes of 40 bits do (about one chance in 10^8 for
/// 150 changed names), or a plain name of the same server happens to end
/// with a changed one's hash; a changed name holds `__` only right after
/// its whole cleaned server name, so it is never another server's plain
/// name but by such a hash's coincidence.
pub fn qualify(server: &str, item: &str) -> String {
    let safe = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
    let plain = server.len() + SEPARATOR.len() + item.len();
    let mut name = String::with_capacity(plain.min(MAX_QUALIFIED_LEN));
    if plain <= MAX_QUALIFIED_LEN
        && !item.is_empty()
        && is_plain_server(server)
        && item.chars().all(safe)
    {
        name.push_str(server);
        name.push_str(SEPARATOR);
        name.push_str(item);
        return name;
    }
    let keep = MAX_QUALIFIED_LEN - HASH_DIGITS - 1;
    let server_part = clean_server(server);
    for c in server_part
        .chars()
        .chain(SEPARATOR.chars())
        .chain(item.chars())
    {
        if name.len() == keep {
            break;
        }
        name.push(if safe(c) { c } else { '_' });
    }
    // Cut within the server's name or the separator: no `_` left at the
    // end, so no `__` comes before the hash, and the name never splits as
    // another server's plain one (`aaa_b` cut to `aaa_` would read as the
    // tool `<hash>` of `aaa`).
    if name.len() <= server_part.len() + SEPARATOR.len() {
        while name.ends_with('_') {
            name.pop();
        }
    }
    let hash = fnv1a(server, item) >> (64 - 4 * HASH_DIGITS);
    name.push('_');
    name.push_str(&format!("{hash:0width$x}", width = HASH_DIGITS));
    name
}

/// Whether `qualified` has the shape of a name [`qualify`] changed: at
/// most 64 bytes, ending with `_` and the hash's hex digits.
pub(crate) fn looks_changed(qualified: &str) -> bool {
    let bytes = qualified.as_bytes();
    bytes.len() <= MAX_QUALIFIED_LEN
        && bytes.len() > HASH_DIGITS
        && bytes[bytes.len() - HASH_DIGITS - 1] == b'_'
        && bytes[bytes.len() - HASH_DIGITS..]
            .iter()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b))
}

/// What every name [`qualify`] changed for `server` begins with.
pub(crate) fn changed_prefix(server: &str) -> String {
    let keep = MAX_QUALIFIED_LEN - HASH_DIGITS - 1;
    let mut prefix = clean_server(server).into_owned();
    // Clean text is ASCII: any cut is at a character.
    prefix.truncate(keep);
    prefix.truncate(prefix.trim_end_matches('_').len());
    prefix
}

/// Whether a server name goes into qualified names as it is: 1 or more
/// ASCII letters, digits, `-` and `_`, with no [`SEPARATOR`] inside and no
/// `_` at the end, so that `server__item` splits back one way only.
pub(crate) fn is_plain_server(server: &str) -> bool {
    !server.is_empty()
        && server
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        && !server.contains(SEPARATOR)
        && !server.ends_with('_')
}

/// A server name as changed qualified names hold it: itself when plain
/// ([`is_plain_server`]), else every other character made `_`, each run
/// of `_` made one, none at the end (`my server.v2` is `my_server_v2`),
/// and `server` when nothing is left. The hash that ends a changed name
/// is of the name as it is, so two names that clean alike still differ.
pub(crate) fn clean_server(server: &str) -> std::borrow::Cow<'_, str> {
    if is_plain_server(server) {
        return std::borrow::Cow::Borrowed(server);
    }
    let mut clean = String::with_capacity(server.len());
    for c in server.chars() {
        let c = if c.is_ascii_alphanumeric() || c == '-' {
            c
        } else {
            '_'
        };
        if !(c == '_' && clean.ends_with('_')) {
            clean.push(c);
        }
    }
    let kept = clean.trim_matches('_').len();
    if kept == 0 {
        return std::borrow::Cow::Borrowed("server");
    }
    let start = clean.len() - clean.trim_start_matches('_').len();
    std::borrow::Cow::Owned(clean[start..start + kept].to_owned())
}

/// The qualified name of a resource's URI (or a template's) of `server`:
/// `server__uri`, as it is. A URI is given to no model as a tool's name,
/// and a host reads a resource by its own URI; kept readable.
pub fn qualify_uri(server: &str, uri: &str) -> String {
    let mut name = String::with_capacity(server.len() + SEPARATOR.len() + uri.len());
    name.push_str(server);
    name.push_str(SEPARATOR);
    name.push_str(uri);
    name
}

/// FNV-1a (64 bits) of `server`, a byte no UTF-8 text holds, and `item`:
/// stable by construction, unlike `std`'s hashers.
fn fnv1a(server: &str, item: &str) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &byte in server
        .as_bytes()
        .iter()
        .chain(&[0xff])
        .chain(item.as_bytes())
    {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// The way back from a plain [`qualify`] name: `(server, item)`, split at
/// the first [`SEPARATOR`]. Unambiguous for every server name that goes
/// into qualified names as it is (ASCII letters, digits, `-` and `_`, no
/// `__` inside, no `_` at the end); another name's qualified names are
/// all changed ones. A name `qualify` had to
/// change (it ends with a hash) does not split back to the item: look it
/// up in the catalog ([`FleetCatalog::tool`](super::FleetCatalog::tool)),
/// as [`Fleet::call_qualified`](super::Fleet::call_qualified) does.
pub fn split_qualified(qualified: &str) -> Option<(&str, &str)> {
    let at = qualified.find(SEPARATOR)?;
    let (server, item) = (&qualified[..at], &qualified[at + SEPARATOR.len()..]);
    (!server.is_empty() && !item.is_empty()).then_some((server, item))
}

/// What is wrong with a server name, if anything. A name is the user's:
/// any text of 1 to [`MAX_NAME_LEN`] bytes is taken (`my files`,
/// `files.v2`, `日本`), but for control characters, which would break the
/// lines of logs and of the CLI. What a model is shown is the qualified
/// name ([`qualify`]), always one it accepts.
pub(crate) fn name_problem(name: &str) -> Option<String> {
    if name.is_empty() {
        Some("is empty".to_owned())
    } else if name.len() > MAX_NAME_LEN {
        Some(format!("is longer than {MAX_NAME_LEN} bytes"))
    } else if name.chars().any(char::is_control) {
        Some("holds a control character".to_owned())
    } else {
        None
    }
}

/// The name among `names` that a server name (one not plain) would share
/// its tools' qualified names with: the plain name it cleans to
/// (`my files` and `my_files`). Such a pair is refused, or a server could
/// list a tool named as the other's changed names and take its calls.
pub(crate) fn name_clash<'a>(
    name: &str,
    mut names: impl Iterator<Item = &'a str>,
) -> Option<&'a str> {
    if is_plain_server(name) {
        return None;
    }
    let clean = clean_server(name);
    names.find(|other| *other != name && *other == clean)
}

/// Checks a server name (see [`name_problem`]).
pub(crate) fn check_name(name: &str) -> Result<()> {
    match name_problem(name) {
        // Names are the host's, not secrets; a long one is cut.
        Some(problem) => Err(Error::builder(format!(
            "server name `{}` {problem}",
            name.chars().take(MAX_NAME_LEN).collect::<String>()
        ))),
        None => Ok(()),
    }
}

/// One server of a fleet: where it is, how to reach it, and what the fleet
/// does with it.
///
/// Two specs are the same server when everything but
/// [`required`](Self::required) is equal. What cannot be compared by
/// value compares by identity: a lent client ([`HttpClient::same_client`]),
/// a [`hook`](Self::hook) made with [`HeaderHook::provider`] (equal only to
/// clones of itself; fixed headers compare by value), OAuth (equal only to
/// clones of the same `OAuth` value, unchanged
/// since), and a connector given whole with
/// [`from_connector`](Self::from_connector) (equal only in clones of the
/// same spec). [`client_settings`](Self::client_settings) compare by value.
/// [`Fleet::apply`](super::Fleet::apply) leaves a slot whose spec is the
/// same server untouched, and replaces it otherwise: a new hook or OAuth
/// value is a changed server, even if it would do the same.
///
/// Defaults: enabled, not required, the fleet's owned client for
/// [`HttpClientBuilder::new`]'s settings (one per distinct
/// [`client_settings`](Self::client_settings), shared by every server that
/// asks for them and lends none, dropped with the last of them), no
/// headers, hooks nor OAuth, a connect timeout of 30 s, and the
/// [`Connector`]'s defaults for the rest.
///
/// # Credentials
///
/// Headers, the bearer token, hooks and OAuth are the server's own: they
/// apply to its session's requests only, also on an owned client shared
/// with other servers, or a lent one.
#[derive(Clone)]
#[must_use]
pub struct ServerSpec {
    source: Source,
    enabled: bool,
    required: bool,
    /// `None`: the fleet's; `Some(None)`: never.
    health_interval: Option<Option<Duration>>,
    log_level: Option<Arc<str>>,
    /// A plain value, not "unset or said": the default said out loud is
    /// the same server.
    concurrent_discovery: bool,
    /// Which of its tools the fleet offers: not part of the server's
    /// identity (a change applies to the running slot).
    tools: Arc<ToolFilter>,
}

/// Which of a server's tools the fleet lists and routes to: those
/// `enabled` names (all when `None`), less the `disabled` ones.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct ToolFilter {
    enabled: Option<BTreeSet<String>>,
    disabled: BTreeSet<String>,
}

impl ToolFilter {
    /// Whether the filter lets every tool through.
    pub(crate) fn is_open(&self) -> bool {
        self.enabled.is_none() && self.disabled.is_empty()
    }

    /// Whether the tool called `name` is offered.
    pub(crate) fn allows(&self, name: &str) -> bool {
        self.enabled.as_ref().is_none_or(|only| only.contains(name))
            && !self.disabled.contains(name)
    }

    /// `catalog` with only the tools offered (a tool without a name is
    /// never offered: it cannot be called).
    pub(crate) fn apply(&self, catalog: &Arc<Catalog>) -> Arc<Catalog> {
        if self.is_open() {
            return catalog.clone();
        }
        let mut kept = Catalog::clone(catalog);
        kept.tools
            .retain(|tool| tool.key().is_some_and(|name| self.allows(name)));
        Arc::new(kept)
    }
}

#[derive(Clone)]
enum Source {
    // Boxed: a spec is moved around far more than it is read.
    Pieces(Box<Pieces>),
    // Compared by identity: a connector's hooks and handlers cannot be.
    Connector(Arc<Connector>),
    /// A stdio server: its command, compared by value (program, arguments,
    /// environment, directory, grace periods).
    #[cfg(feature = "stdio")]
    Stdio(Box<StdioPieces>),
    /// An entry that cannot be used, and why (naming the entry and the
    /// key, never a value): its slot fails at once, and never connects.
    Invalid(Arc<str>),
}

/// A stdio server's spec: the command and the settings that apply to it.
#[cfg(feature = "stdio")]
#[derive(Clone, PartialEq)]
struct StdioPieces {
    command: crate::stdio::StdioCommand,
    protocol_version: Option<ProtocolVersion>,
    connect_timeout: Duration,
    request_timeout: Option<Duration>,
}

#[derive(Clone)]
struct Pieces {
    url: String,
    headers: Vec<(String, String)>,
    bearer: Option<String>,
    hooks: Vec<HeaderHook>,
    #[cfg(feature = "oauth")]
    oauth: Option<crate::oauth::OAuth>,
    client: Option<HttpClient>,
    client_settings: HttpClientBuilder,
    protocol_version: Option<ProtocolVersion>,
    connect_timeout: Duration,
    request_timeout: Option<Duration>,
    delete_timeout: Option<Duration>,
    listen: Option<bool>,
}

impl PartialEq for Pieces {
    fn eq(&self, other: &Self) -> bool {
        let same_client = match (&self.client, &other.client) {
            (None, None) => true,
            (Some(a), Some(b)) => a.same_client(b),
            _ => false,
        };
        #[cfg(feature = "oauth")]
        let same_oauth = match (&self.oauth, &other.oauth) {
            (None, None) => true,
            (Some(a), Some(b)) => Arc::ptr_eq(&a.config, &b.config),
            _ => false,
        };
        #[cfg(not(feature = "oauth"))]
        let same_oauth = true;
        same_client
            && same_oauth
            && self.hooks.len() == other.hooks.len()
            && self
                .hooks
                .iter()
                .zip(&other.hooks)
                .all(|(a, b)| a.same_hook(b))
            && self.client_settings == other.client_settings
            && self.url == other.url
            && self.headers == other.headers
            && self.bearer == other.bearer
            && self.protocol_version == other.protocol_version
            && self.connect_timeout == other.connect_timeout
            && self.request_timeout == other.request_timeout
            && self.delete_timeout == other.delete_timeout
            && self.listen == other.listen
    }
}

impl ServerSpec {
    fn with_source(source: Source) -> Self {
        ServerSpec {
            source,
            enabled: true,
            required: false,
            health_interval: None,
            log_level: None,
            concurrent_discovery: true,
            tools: Arc::default(),
        }
    }

    /// A server at `url` (`http` or `https`). A URL that cannot be used
    /// puts the slot in [`SlotState::Failed`](super::SlotState::Failed).
    pub fn new(url: impl Into<String>) -> Self {
        ServerSpec::with_source(Source::Pieces(Box::new(Pieces {
            url: url.into(),
            headers: Vec::new(),
            bearer: None,
            hooks: Vec::new(),
            #[cfg(feature = "oauth")]
            oauth: None,
            client: None,
            client_settings: HttpClientBuilder::new(),
            protocol_version: None,
            connect_timeout: Duration::from_secs(30),
            request_timeout: None,
            delete_timeout: None,
            listen: None,
        })))
    }

    /// A server reached through `connector`, as configured (its connect
    /// timeout included: set one, or a connect may wait as long as the
    /// server does). The slot connects with it again after each loss.
    pub fn from_connector(connector: Connector) -> Self {
        ServerSpec::with_source(Source::Connector(Arc::new(connector)))
    }

    /// A stdio server: the fleet starts `command` for the slot, and again
    /// after each loss (with its backoff; see [`crate::stdio`]). What is
    /// HTTP's only (headers, bearer, hooks, OAuth, clients, listening) is
    /// ignored; the protocol version and the timeouts apply. The same
    /// server as another spec when the commands are equal (program,
    /// arguments, environment, directory, grace periods) and so are the
    /// settings: then [`Fleet::apply`](super::Fleet::apply) keeps its
    /// process.
    #[cfg(feature = "stdio")]
    pub fn stdio(command: crate::stdio::StdioCommand) -> Self {
        ServerSpec::with_source(Source::Stdio(Box::new(StdioPieces {
            command,
            protocol_version: None,
            connect_timeout: Duration::from_secs(30),
            request_timeout: None,
        })))
    }

    /// An entry that cannot be used: its slot is
    /// [`Failed`](super::SlotState::Failed) with `reason` (an
    /// [`Error::is_builder`] error) and never connects, while the others
    /// run. What [`parse_mcp_servers`](super::parse_mcp_servers) makes of
    /// a bad entry (an unset variable, a missing `command`, an unknown
    /// `type`), and what a host's own loader can make of one. `reason` is
    /// shown: name the key, never a value. The same server as another
    /// spec only when that is invalid for the same reason.
    pub fn invalid(reason: impl Into<String>) -> Self {
        ServerSpec::with_source(Source::Invalid(reason.into().into()))
    }

    /// Why the entry cannot be used, for a spec made with
    /// [`invalid`](Self::invalid).
    pub fn invalid_reason(&self) -> Option<&str> {
        match &self.source {
            Source::Invalid(reason) => Some(reason),
            _ => None,
        }
    }

    /// The stdio command, for a stdio server's spec.
    #[cfg(feature = "stdio")]
    pub fn stdio_command(&self) -> Option<&crate::stdio::StdioCommand> {
        match &self.source {
            Source::Stdio(stdio) => Some(&stdio.command),
            _ => None,
        }
    }

    fn pieces(&mut self) -> Option<&mut Pieces> {
        match &mut self.source {
            Source::Pieces(pieces) => Some(pieces),
            _ => None,
        }
    }

    /// Adds a fixed header to this server's requests (and no one else's).
    /// Ignored for a spec made [`from_connector`](Self::from_connector).
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        if let Some(pieces) = self.pieces() {
            pieces.headers.push((name.into(), value.into()));
        }
        self
    }

    /// Adds `Authorization: Bearer <token>` to this server's requests.
    /// Ignored for a spec made [`from_connector`](Self::from_connector).
    pub fn bearer(mut self, token: impl Into<String>) -> Self {
        if let Some(pieces) = self.pieces() {
            pieces.bearer = Some(token.into());
        }
        self
    }

    /// Adds a header hook to this server's requests (and no one else's):
    /// fixed headers, or a provider asked before every request (see
    /// [`HeaderHook`]). Hooks apply in the order added, after the
    /// [`header`](Self::header)s and the [`bearer`](Self::bearer), so a
    /// hook's header replaces theirs. A provider compares by identity (see
    /// the type's docs). Ignored for a spec made
    /// [`from_connector`](Self::from_connector).
    pub fn hook(mut self, hook: HeaderHook) -> Self {
        if let Some(pieces) = self.pieces() {
            pieces.hooks.push(hook);
        }
        self
    }

    /// Authorizes with OAuth 2.1 (feature `oauth`; see
    /// [`Connector::oauth`]): a `401` (or a `403` `insufficient_scope`)
    /// runs the flow and the request is sent again. Without OAuth, a `401`
    /// or `403` puts the slot in
    /// [`SlotState::AuthRequired`](super::SlotState::AuthRequired), as does
    /// a flow that fails. Compares by identity (see the type's docs).
    /// Ignored for a spec made [`from_connector`](Self::from_connector).
    #[cfg(feature = "oauth")]
    pub fn oauth(mut self, oauth: crate::oauth::OAuth) -> Self {
        if let Some(pieces) = self.pieces() {
            pieces.oauth = Some(oauth);
        }
        self
    }

    /// Sends through the caller's client, which the fleet only borrows (see
    /// [`Connector::client`]): any number of slots may use it; it is never
    /// closed. [`client_settings`](Self::client_settings) are then unused.
    /// Ignored for a spec made [`from_connector`](Self::from_connector).
    pub fn client(mut self, client: HttpClient) -> Self {
        if let Some(pieces) = self.pieces() {
            pieces.client = Some(client);
        }
        self
    }

    /// The settings of the owned client this server's requests go
    /// through, when it lends none. The fleet keeps one owned client per
    /// distinct settings (compared by value, see [`HttpClientBuilder`]):
    /// servers asking for equal settings share it (made once, even when
    /// they start together), and it is dropped when the last of them goes.
    /// A client that cannot be built (an invalid root certificate) puts
    /// the slot in [`SlotState::Failed`](super::SlotState::Failed).
    /// Default: [`HttpClientBuilder::new`]. Ignored for a spec made
    /// [`from_connector`](Self::from_connector).
    pub fn client_settings(mut self, settings: HttpClientBuilder) -> Self {
        if let Some(pieces) = self.pieces() {
            pieces.client_settings = settings;
        }
        self
    }

    /// Pins the revision (see [`Connector::protocol_version`]).
    pub fn protocol_version(mut self, version: ProtocolVersion) -> Self {
        match &mut self.source {
            Source::Pieces(pieces) => pieces.protocol_version = Some(version),
            #[cfg(feature = "stdio")]
            Source::Stdio(stdio) => stdio.protocol_version = Some(version),
            Source::Connector(_) | Source::Invalid(_) => {}
        }
        self
    }

    /// The bound on each connect (see [`Connector::connect_timeout`]).
    /// Default: 30 s.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        match &mut self.source {
            Source::Pieces(pieces) => pieces.connect_timeout = timeout,
            #[cfg(feature = "stdio")]
            Source::Stdio(stdio) => stdio.connect_timeout = timeout,
            Source::Connector(_) | Source::Invalid(_) => {}
        }
        self
    }

    /// The default timeout of the session's requests (see
    /// [`Connector::request_timeout`]).
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        match &mut self.source {
            Source::Pieces(pieces) => pieces.request_timeout = Some(timeout),
            #[cfg(feature = "stdio")]
            Source::Stdio(stdio) => stdio.request_timeout = Some(timeout),
            Source::Connector(_) | Source::Invalid(_) => {}
        }
        self
    }

    /// The bound on ending a session (see [`Connector::delete_timeout`]).
    pub fn delete_timeout(mut self, timeout: Duration) -> Self {
        if let Some(pieces) = self.pieces() {
            pieces.delete_timeout = Some(timeout);
        }
        self
    }

    /// Whether to listen for server messages (see [`Connector::listen`]).
    pub fn listen(mut self, listen: bool) -> Self {
        if let Some(pieces) = self.pieces() {
            pieces.listen = Some(listen);
        }
        self
    }

    /// Whether the fleet runs this server. A disabled server's slot is
    /// stopped, whatever it was doing. Default: true.
    pub fn enabled(mut self, enabled: bool) -> Self {
        self.enabled = enabled;
        self
    }

    /// Whether [`Fleet::ready`](super::Fleet::ready) waits for this server.
    /// Changing only this never restarts a slot. Default: false.
    pub fn required(mut self, required: bool) -> Self {
        self.required = required;
        self
    }

    /// How often this server's slot pings it when ready, over the fleet's
    /// [`health_interval`](super::FleetBuilder::health_interval); `None`
    /// for never. Default: the fleet's.
    pub fn health_interval(mut self, every: Option<Duration>) -> Self {
        self.health_interval = Some(every);
        self
    }

    /// The least severe `notifications/message` level the server is asked
    /// to send (a level such as `"debug"`, `"info"` or `"error"`), on
    /// every connect, as its revision wants it
    /// ([`Connector::log_level`]: `logging/setLevel` when a 2025 server
    /// offers logging, each request's `_meta` in 2026-07-28). The
    /// messages come on [`Fleet::notifications`](super::Fleet::notifications).
    /// Default: none asked (a 2025 server's own choice; none from a
    /// 2026-07-28 server).
    pub fn log_level(mut self, level: impl Into<String>) -> Self {
        self.log_level = Some(Arc::from(level.into()));
        self
    }

    /// Offers only these of the server's tools (codex's `enabled_tools`,
    /// a config file's `enabledTools`): the others are left out of the
    /// fleet's catalog, and a call to one is refused without reaching the
    /// server. With [`disabled_tools`](Self::disabled_tools) as well,
    /// those are taken out of these. A change is no new server: a running
    /// slot keeps its session, and the catalog follows at once. Default:
    /// every tool.
    pub fn enabled_tools<I, S>(mut self, names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Arc::make_mut(&mut self.tools).enabled = Some(names.into_iter().map(Into::into).collect());
        self
    }

    /// Offers every tool of the server but these (`disabledTools`), as
    /// [`enabled_tools`](Self::enabled_tools) says. Default: none.
    pub fn disabled_tools<I, S>(mut self, names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Arc::make_mut(&mut self.tools).disabled = names.into_iter().map(Into::into).collect();
        self
    }

    /// Which tools are offered.
    pub(crate) fn tool_filter(&self) -> &Arc<ToolFilter> {
        &self.tools
    }

    /// Whether the server's lists may be read side by side at connect
    /// (see [`Discovery::concurrent`](crate::Discovery::concurrent), whose
    /// default applies when true: at once through the fleet's shared
    /// client and over stdio); `false` for a server that mishandles
    /// requests side by side. Not applied to a spec
    /// [from a connector](Self::from_connector), which says it itself.
    /// Default: true.
    pub fn concurrent_discovery(mut self, at_once: bool) -> Self {
        self.concurrent_discovery = at_once;
        self
    }

    /// The health interval set by [`health_interval`](Self::health_interval):
    /// `None` when the fleet's applies.
    pub(crate) fn health_interval_setting(&self) -> Option<Option<Duration>> {
        self.health_interval
    }

    /// The level set by [`log_level`](Self::log_level).
    #[cfg(test)]
    pub(crate) fn log_level_setting(&self) -> Option<&str> {
        self.log_level.as_deref()
    }

    /// Whether the fleet runs this server.
    pub fn is_enabled(&self) -> bool {
        self.enabled
    }

    /// Whether [`Fleet::ready`](super::Fleet::ready) waits for this server.
    pub fn is_required(&self) -> bool {
        self.required
    }

    /// Whether `other` is the same server (everything equal but
    /// `required` and the tool filter, which apply to a running slot), so
    /// its slot is left alone.
    pub(crate) fn same_server(&self, other: &ServerSpec) -> bool {
        if self.health_interval != other.health_interval
            || self.log_level != other.log_level
            || self.concurrent_discovery != other.concurrent_discovery
        {
            return false;
        }
        match (&self.source, &other.source) {
            (Source::Pieces(a), Source::Pieces(b)) => a == b,
            (Source::Connector(a), Source::Connector(b)) => Arc::ptr_eq(a, b),
            #[cfg(feature = "stdio")]
            (Source::Stdio(a), Source::Stdio(b)) => a == b,
            (Source::Invalid(a), Source::Invalid(b)) => a == b,
            _ => false,
        }
    }

    /// The settings of the fleet's owned client this server goes through,
    /// if it takes one: it lends no client and brings no connector of its
    /// own.
    pub(crate) fn owned_client_settings(&self) -> Option<&HttpClientBuilder> {
        match &self.source {
            Source::Pieces(pieces) if pieces.client.is_none() => Some(&pieces.client_settings),
            _ => None,
        }
    }

    /// The connector a slot connects with, every time: through the lent
    /// client, else through `shared` (the fleet's owned client for the
    /// spec's settings), else with an owned client of each session's own,
    /// built with those settings.
    /// An [`invalid`](Self::invalid) spec's reason is the error.
    pub(crate) fn connector(&self, shared: Option<&HttpClient>) -> Result<Connector> {
        let mut connector = self.source_connector(shared)?;
        if !self.concurrent_discovery && !matches!(self.source, Source::Connector(_)) {
            connector = connector.discovery(crate::Discovery::default().concurrent(false));
        }
        if let Some(level) = &self.log_level {
            connector = connector.log_level(&**level);
        }
        Ok(connector)
    }

    /// [`connector`](Self::connector) before the spec's own settings.
    fn source_connector(&self, shared: Option<&HttpClient>) -> Result<Connector> {
        let pieces = match &self.source {
            Source::Invalid(reason) => return Err(Error::builder(reason.to_string())),
            Source::Connector(connector) => return Ok(Connector::clone(connector)),
            #[cfg(feature = "stdio")]
            Source::Stdio(stdio) => {
                let mut connector =
                    Connector::stdio(stdio.command.clone()).connect_timeout(stdio.connect_timeout);
                if let Some(version) = stdio.protocol_version {
                    connector = connector.protocol_version(version);
                }
                if let Some(timeout) = stdio.request_timeout {
                    connector = connector.request_timeout(timeout);
                }
                return Ok(connector);
            }
            Source::Pieces(pieces) => pieces,
        };
        let mut connector =
            Connector::new(pieces.url.clone()).connect_timeout(pieces.connect_timeout);
        match pieces.client.as_ref().or(shared) {
            Some(client) => connector = connector.client(client.clone()),
            None => connector = connector.client_builder(pieces.client_settings.clone()),
        }
        for (name, value) in &pieces.headers {
            connector = connector.header(name, value);
        }
        if let Some(token) = &pieces.bearer {
            connector = connector.bearer(token);
        }
        for hook in &pieces.hooks {
            connector = connector.hook(hook.clone());
        }
        #[cfg(feature = "oauth")]
        if let Some(oauth) = &pieces.oauth {
            connector = connector.oauth(oauth.clone());
        }
        if let Some(version) = pieces.protocol_version {
            connector = connector.protocol_version(version);
        }
        if let Some(timeout) = pieces.request_timeout {
            connector = connector.request_timeout(timeout);
        }
        if let Some(timeout) = pieces.delete_timeout {
            connector = connector.delete_timeout(timeout);
        }
        if let Some(listen) = pieces.listen {
            connector = connector.listen(listen);
        }
        Ok(connector)
    }
}

impl fmt::Debug for ServerSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("ServerSpec");
        match &self.source {
            Source::Pieces(pieces) => {
                // Header values and the token may be secrets, and a URL's
                // path or query too: names and counts only.
                let origin = url::Url::parse(&pieces.url)
                    .map(|url| url.origin().ascii_serialization())
                    .unwrap_or_else(|_| "<invalid URL>".to_owned());
                let names: Vec<&str> = pieces.headers.iter().map(|(n, _)| n.as_str()).collect();
                d.field("origin", &origin)
                    .field("headers", &names)
                    .field("bearer", &pieces.bearer.is_some())
                    .field("hooks", &pieces.hooks.len())
                    .field("client_lent", &pieces.client.is_some())
                    .field(
                        "default_client_settings",
                        &(pieces.client_settings == HttpClientBuilder::new()),
                    )
                    .field("protocol_version", &pieces.protocol_version)
                    .field("connect_timeout", &pieces.connect_timeout);
                #[cfg(feature = "oauth")]
                d.field("oauth", &pieces.oauth.is_some());
            }
            Source::Connector(connector) => {
                d.field("connector", connector);
            }
            Source::Invalid(reason) => {
                d.field("invalid", reason);
            }
            #[cfg(feature = "stdio")]
            Source::Stdio(stdio) => {
                // The command's Debug shows no argument or variable value.
                d.field("stdio", &stdio.command)
                    .field("protocol_version", &stdio.protocol_version)
                    .field("connect_timeout", &stdio.connect_timeout);
            }
        }
        d.field("enabled", &self.enabled)
            .field("required", &self.required)
            .field("health_interval", &self.health_interval)
            .field("log_level", &self.log_level)
            .field("tools", &self.tools)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `qualify(server, item)`, checked to be a name a model accepts.
    fn model_safe(server: &str, item: &str) -> String {
        let name = qualify(server, item);
        assert!(
            (1..=MAX_QUALIFIED_LEN).contains(&name.len())
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-'),
            "{name:?} for {server:?}, {item:?}"
        );
        name
    }

    /// Hostile names: every qualified name fits `^[a-zA-Z0-9_-]{1,64}$`,
    /// is the same on every call, and differs from every other pair's,
    /// names that clean to the same text included; a plain one is kept.
    #[test]
    fn qualified_names_are_model_safe_stable_and_distinct() {
        let long = "t".repeat(200);
        let server_64 = "s".repeat(64);
        let pairs = [
            ("docs", "files.read"),
            ("docs", "files read"),
            ("docs", "files_read"),
            ("docs", "files/read"),
            ("docs", "ünïcode"),
            ("docs", ""),
            ("docs", long.as_str()),
            ("docs", &long[..199]),
            (server_64.as_str(), "x"),
            (server_64.as_str(), "y"),
            ("a", "file:///tmp/notes.md"),
        ];
        let mut seen = std::collections::HashSet::new();
        for (server, item) in pairs {
            let name = model_safe(server, item);
            assert_eq!(name, qualify(server, item), "stable");
            assert!(seen.insert(name.clone()), "{name} twice");
        }
        assert_eq!(qualify("docs", "files_read"), "docs__files_read");
        let changed = qualify("docs", "files.read");
        assert!(changed.starts_with("docs__files_read_"), "{changed}");
        assert_eq!(changed.len(), "docs__files_read_".len() + HASH_DIGITS);
        // Fixed across versions: a host may have stored it (FNV-1a worked
        // out apart from this code).
        assert_eq!(changed, "docs__files_read_4ee7beee3f");
        let cut = qualify("docs", &long);
        assert_eq!(cut.len(), MAX_QUALIFIED_LEN);
        assert!(cut.starts_with("docs__ttt"), "{cut}");
    }

    /// A name changed for a long server is never another server's plain
    /// name: `aaa…a_b` cut at its `_` would have read as the tool
    /// `<hash>` of `aaa…a`.
    #[test]
    fn a_changed_name_never_splits_as_another_servers() {
        let a = "a".repeat(52);
        let b = format!("{a}_b");
        check_name(&a).unwrap();
        check_name(&b).unwrap();
        let changed = qualify(&b, "files.read");
        assert!(looks_changed(&changed), "{changed}");
        assert!(changed.starts_with(&changed_prefix(&b)));
        assert_ne!(split_qualified(&changed).map(|(s, _)| s), Some(a.as_str()));
        for server in ["s", "s-1", &"x".repeat(64), &b] {
            for item in ["files.read", "", &"y".repeat(100)] {
                let changed = qualify(server, item);
                if let Some((split, _)) = split_qualified(&changed) {
                    assert_eq!(split, server, "{changed}");
                }
            }
        }
        assert!(!looks_changed("docs__files_read"));
    }

    #[test]
    fn qualified_names_split_back_at_the_server() {
        for (server, tool) in [("a", "b"), ("a-b", "__x"), ("a_b", "c__d"), ("x", "_")] {
            check_name(server).unwrap();
            let qualified = qualify(server, tool);
            assert_eq!(split_qualified(&qualified), Some((server, tool)));
        }
        assert_eq!(split_qualified("nosep"), None);
        assert_eq!(split_qualified("__tool"), None);
        assert_eq!(split_qualified("server__"), None);
    }

    #[test]
    fn any_name_is_taken_but_an_empty_or_long_one_or_a_control_character() {
        for name in ["", "a\nb", "tab\there", "\u{7f}", &"x".repeat(65)] {
            let error = check_name(name).unwrap_err();
            assert!(error.is_builder(), "{name:?}: {error}");
        }
        for name in ["a__b", "a_", "a b", "é", "files.v2", "__", &"x".repeat(64)] {
            check_name(name).unwrap();
        }
    }

    /// Names that do not go into qualified names as they are: every
    /// qualified name of theirs is a changed one a model accepts, begins
    /// with the server's cleaned name and `__`, never splits as another
    /// server's, and differs for names that clean alike.
    #[test]
    fn any_server_name_gets_model_safe_distinct_qualified_names() {
        let servers = [
            "my files",
            "my.files",
            "my_files",
            "a__b",
            "a_",
            "é",
            "__",
            "日本語",
            "x y z ",
        ];
        let mut seen = std::collections::HashSet::new();
        for server in servers {
            check_name(server).unwrap();
            for item in ["read", "files.read"] {
                let name = model_safe(server, item);
                assert!(seen.insert(name.clone()), "{name} twice");
                if !is_plain_server(server) {
                    assert!(looks_changed(&name), "{name}");
                    assert!(name.starts_with(&changed_prefix(server)), "{name}");
                    assert_eq!(name.matches(SEPARATOR).count(), 1, "{name}");
                }
            }
        }
        assert_eq!(clean_server("my files"), "my_files");
        assert_eq!(clean_server("a__b"), "a_b");
        assert_eq!(clean_server("x y z "), "x_y_z");
        assert_eq!(clean_server("日本語"), "server");
        assert!(qualify("my files", "read").starts_with("my_files__read_"));
    }

    #[test]
    fn same_server_ignores_required_and_compares_a_lent_client_by_identity() {
        let a = ServerSpec::new("http://127.0.0.1:1/mcp").bearer("t");
        assert!(a.same_server(&a.clone().required(true)));
        assert!(!a.same_server(&a.clone().bearer("u")));
        // Said or not, the default is the same server: a reload that spells
        // it out leaves the slot alone.
        assert!(a.same_server(&a.clone().concurrent_discovery(true)));
        assert!(!a.same_server(&a.clone().concurrent_discovery(false)));
        let client = HttpClient::owned().unwrap();
        let lent = a.clone().client(client.clone());
        assert!(lent.same_server(&a.clone().client(client)));
        assert!(!lent.same_server(&a.clone().client(HttpClient::owned().unwrap())));
        let connector = ServerSpec::from_connector(Connector::new("http://127.0.0.1:1/mcp"));
        assert!(connector.same_server(&connector.clone()));
        assert!(
            !connector.same_server(&ServerSpec::from_connector(Connector::new(
                "http://127.0.0.1:1/mcp"
            )))
        );
    }

    #[test]
    fn hooks_compare_by_identity_and_client_settings_by_value() {
        let a = ServerSpec::new("http://127.0.0.1:1/mcp");
        let provider = HeaderHook::provider(|| async { Ok(http::HeaderMap::new()) });
        let hooked = a.clone().hook(provider.clone());
        assert!(hooked.same_server(&hooked.clone()));
        assert!(hooked.same_server(&a.clone().hook(provider.clone())));
        let lookalike = HeaderHook::provider(|| async { Ok(http::HeaderMap::new()) });
        assert!(!hooked.same_server(&a.clone().hook(lookalike)));
        assert!(!hooked.same_server(&a));
        let fixed = |v: &str| HeaderHook::header("x-key", v).unwrap();
        assert!(
            a.clone()
                .hook(fixed("1"))
                .same_server(&a.clone().hook(fixed("1")))
        );
        assert!(
            !a.clone()
                .hook(fixed("1"))
                .same_server(&a.clone().hook(fixed("2")))
        );

        let settings = || HttpClientBuilder::new().pool_max_idle_per_host(1);
        let custom = a.clone().client_settings(settings());
        assert!(custom.same_server(&a.clone().client_settings(settings())));
        assert!(!custom.same_server(&a));
        assert!(a.same_server(&a.clone().client_settings(HttpClientBuilder::new())));
        assert_eq!(custom.owned_client_settings(), Some(&settings()));
        let lent = custom.clone().client(HttpClient::owned().unwrap());
        assert_eq!(lent.owned_client_settings(), None);
    }

    #[cfg(feature = "oauth")]
    #[test]
    fn oauth_compares_by_identity() {
        let a = ServerSpec::new("http://127.0.0.1:1/mcp");
        let oauth = crate::oauth::OAuth::new(crate::oauth::HeadlessAgent::new(
            "http://127.0.0.1:9/callback",
        ));
        let authorized = a.clone().oauth(oauth.clone());
        assert!(authorized.same_server(&a.clone().oauth(oauth.clone())));
        assert!(!authorized.same_server(&a));
        let another = crate::oauth::OAuth::new(crate::oauth::HeadlessAgent::new(
            "http://127.0.0.1:9/callback",
        ));
        assert!(!authorized.same_server(&a.clone().oauth(another)));
    }

    #[test]
    fn debug_shows_no_secret() {
        let spec = ServerSpec::new("http://127.0.0.1:1/mcp?key=s3cret")
            .bearer("t0ken")
            .header("x-api-key", "v4lue");
        let shown = format!("{spec:?}");
        for secret in ["s3cret", "t0ken", "v4lue"] {
            assert!(!shown.contains(secret), "{shown}");
        }
    }
}
