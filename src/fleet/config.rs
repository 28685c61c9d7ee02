//! The `mcpServers` configuration shape that hosts already use.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Map, Value};

use super::spec::{MAX_NAME_LEN, ServerSpec, name_clash, name_problem};
use crate::ProtocolVersion;
use crate::{Error, Result};

/// What [`parse_mcp_servers`] found in a configuration.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct LoadedConfig {
    /// The servers, by name, ready for [`Fleet::apply`](super::Fleet::apply).
    /// An entry that cannot be used is here too, as a
    /// [`ServerSpec::invalid`]: its slot is `failed` with the reason, and
    /// the others run.
    pub servers: BTreeMap<String, ServerSpec>,
    /// The entries that cannot be used, and why (each also in
    /// [`servers`](Self::servers) as a [`ServerSpec::invalid`], or in
    /// [`skipped`](Self::skipped) when the fleet cannot take its name).
    pub invalid: Vec<Skipped>,
    /// Entries left out, and why: a name the fleet cannot take (see
    /// [`qualify`](super::qualify)), a stdio server when the crate is
    /// built without its `stdio` feature.
    pub skipped: Vec<Skipped>,
    /// Keys that were ignored, each naming the entry and the key (never a
    /// value).
    pub warnings: Vec<String>,
}

/// An entry of the configuration that was left out or cannot be used.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Skipped {
    /// The entry's name.
    pub server: String,
    /// Why.
    pub reason: String,
}

/// The keys this loader reads in every entry, HTTP or stdio (`listen` and
/// `bearerEnv` on a stdio entry only to warn that they are ignored).
const KNOWN_SETTINGS: [&str; 15] = [
    "type",
    "disabled",
    "enabled",
    "required",
    "timeout",
    "connectTimeout",
    "requestTimeout",
    "protocolVersion",
    "listen",
    "healthInterval",
    "logLevel",
    "bearerEnv",
    "concurrentDiscovery",
    "enabledTools",
    "disabledTools",
];

/// The keys of an HTTP entry this loader reads, besides [`KNOWN_SETTINGS`].
const KNOWN: [&str; 2] = ["url", "headers"];

/// The keys of a stdio entry this loader reads, besides [`KNOWN_SETTINGS`].
#[cfg(feature = "stdio")]
const KNOWN_STDIO: [&str; 4] = ["command", "args", "env", "cwd"];

/// The longest value a `${...}` expansion may give (and the longest
/// `bearerEnv` token): a hostile environment or default cannot make one
/// value large.
pub const MAX_EXPANDED_VALUE: usize = 64 << 10;

/// The most text that expansions may substitute into one configuration in
/// all: many references to one large variable cannot make the whole large.
const MAX_SUBSTITUTED: usize = 16 << 20;

/// The longest time a timeout or health interval may be, in seconds (a
/// day): a larger number is a typo (milliseconds) more often than a wish.
const MAX_SECONDS: f64 = 86_400.0;

/// The shortest, in seconds (a millisecond): a smaller positive number would
/// round to zero.
const MIN_SECONDS: f64 = 0.001;

use crate::LOG_LEVELS;

/// Reads the common `mcpServers` shape, with `${VAR}` references read from
/// this process's environment (see [`parse_mcp_servers_with`], which says
/// everything):
///
/// ```json
/// {"mcpServers": {
///     "search": {"url": "https://search.example/mcp",
///                "headers": {"Authorization": "Bearer ${SEARCH_TOKEN}"}},
///     "legacy": {"type": "sse", "url": "https://legacy.example/sse", "timeout": 10},
///     "local":  {"command": "npx", "args": ["some-server"], "env": {"KEY": "${KEY}"}}
/// }}
/// ```
///
/// A variable whose value is not UTF-8 counts as unset.
///
/// # Errors
///
/// As [`parse_mcp_servers_with`].
pub fn parse_mcp_servers(json: &str) -> Result<LoadedConfig> {
    parse_mcp_servers_with(json, |name| std::env::var(name).ok())
}

/// Reads the common `mcpServers` shape, with `${VAR}` references read
/// through `env` (a variable's value, or `None` when it is unset), so a
/// caller chooses what a file may read.
///
/// Per HTTP entry:
///
/// | key | value |
/// |---|---|
/// | `url` (required) | a string, expanded |
/// | `type` | `"http"`, `"streamable-http"` or `"streamableHttp"` (the era is detected); `"sse"` (the HTTP+SSE transport of 2024-11-05) |
/// | `headers` | an object of strings, values expanded |
/// | `bearerEnv` | the name of an environment variable whose value is sent as `Authorization: Bearer ...` ([`ServerSpec::bearer`]); not with an `Authorization` header |
/// | `listen` | a boolean ([`ServerSpec::listen`]) |
///
/// Per stdio entry (one with a `command`, or of type `"stdio"`:
/// [`ServerSpec::stdio`]): `command` (a string, required), `args` (an array
/// of strings), `env` (an object of strings, over the allowlisted host
/// variables: see [`crate::stdio`]) and `cwd` (a string), all expanded
/// (`env`'s values, not its names). `listen` and `bearerEnv` are HTTP's:
/// ignored with a warning. Built without the `stdio` feature, such an entry
/// is listed in [`LoadedConfig::skipped`], never an error for the file.
///
/// Per entry of either kind:
///
/// | key | value |
/// |---|---|
/// | `disabled`, `enabled` | booleans ([`ServerSpec::enabled`]) |
/// | `required` | a boolean ([`ServerSpec::required`]) |
/// | `timeout` | seconds: both `connectTimeout` and `requestTimeout`, where those are not given |
/// | `connectTimeout` | seconds ([`ServerSpec::connect_timeout`]) |
/// | `requestTimeout` | seconds ([`ServerSpec::request_timeout`]) |
/// | `protocolVersion` | a revision this crate speaks, such as `"2025-11-25"` ([`ServerSpec::protocol_version`]); with `"type": "sse"`, only `"2024-11-05"` |
/// | `healthInterval` | seconds, or `0` or `null` for never ([`ServerSpec::health_interval`]) |
/// | `logLevel` | `"debug"`, `"info"`, `"notice"`, `"warning"`, `"error"`, `"critical"`, `"alert"` or `"emergency"` ([`ServerSpec::log_level`]) |
/// | `concurrentDiscovery` | `false` for a server that mishandles requests side by side ([`ServerSpec::concurrent_discovery`]) |
/// | `enabledTools` | tool names: only these are offered ([`ServerSpec::enabled_tools`]) |
/// | `disabledTools` | tool names: every tool but these is offered ([`ServerSpec::disabled_tools`]) |
///
/// Seconds are a JSON number from 0.001 to 86400, fractions allowed.
///
/// Other keys, in an entry or at the top, are ignored with a warning.
///
/// # Expansion
///
/// As Claude Code does, in the values said above (never in names, keys or
/// other settings):
///
/// - `${NAME}`, NAME being `[A-Za-z_][A-Za-z0-9_]*`, is the variable's
///   value. A variable set to the empty string is set: it gives `""`.
/// - `${NAME:-default}` is the variable's value, or `default` when it is
///   unset **or empty** (as in a POSIX shell). `default` is literal text up
///   to the first `}`: it is not expanded, and a `${` in it is an error
///   (nested references are not supported).
/// - A `$` not followed by `{` is literal (`$HOME`, `$$`, a trailing `$`).
///   There is no escape: a `${` always starts a reference, as in Claude
///   Code, so a value cannot hold a literal `${`.
/// - An unset variable without a default, an unterminated `${`, a name
///   that does not fit the grammar, or another form (`${A-x}`, `${A:=x}`)
///   is an error naming the entry, the key and the variable. A value
///   longer than [`MAX_EXPANDED_VALUE`] once expanded is an error too.
///
/// An expanded value is never printed: errors and warnings name keys and
/// variables only, and [`ServerSpec`]'s `Debug` shows no header value,
/// token, URL path or query, argument or `env` value. It does show a URL's
/// origin, and a stdio entry's program and `cwd`: keep secrets out of those.
///
/// # Shapes
///
/// `{"mcpServers": {...}}` (Claude Desktop, Cursor, Claude Code),
/// `{"servers": {...}}` (VS Code's `mcp.json`, its `"type": "stdio" |
/// "http" | "sse"` included) and `{"mcp": {"servers": {...}}}` (VS Code's
/// settings): the first found is read, other top-level keys are warned
/// of.
///
/// # One bad entry fails alone
///
/// An entry that cannot be used (a missing or non-string `url` or
/// `command`, an unknown `type`, a header that is not a string, a flag
/// that is not a boolean, a number of seconds out of range, an unknown
/// `protocolVersion` or `logLevel`, a failed expansion, a `bearerEnv`
/// variable unset or empty) is listed in [`LoadedConfig::invalid`] with a
/// reason naming the entry and the key, never a value, and is in
/// [`LoadedConfig::servers`] as a [`ServerSpec::invalid`]: applied, its
/// slot is `failed` with that reason, and the other entries run. An entry
/// whose name the fleet cannot take (see [`qualify`](super::qualify)) is
/// in [`LoadedConfig::skipped`] instead. A broken entry that says
/// `"disabled": true` stays disabled.
///
/// # Errors
///
/// [`Error::is_builder`] only for the file as a whole: not JSON, not a
/// JSON object, or none of the shapes above. Nothing is applied from such
/// a file, so a half-written file never stops a server that was running.
pub fn parse_mcp_servers_with(
    json: &str,
    mut env: impl FnMut(&str) -> Option<String>,
) -> Result<LoadedConfig> {
    let root: Value = serde_json::from_str(json)
        .map_err(|e| Error::builder(format!("the configuration is not JSON: {e}")))?;
    let Value::Object(root) = root else {
        return Err(Error::builder("the configuration is not a JSON object"));
    };
    let mut loaded = LoadedConfig::default();
    // The shapes hosts write: `mcpServers` (Claude Desktop, Cursor, Claude
    // Code), `servers` (VS Code's `mcp.json`), `mcp.servers` (VS Code's
    // settings). The first found is read; the other keys are warned of.
    let (key, servers) = match (root.get("mcpServers"), root.get("servers"), root.get("mcp")) {
        (Some(servers), _, _) => ("mcpServers", servers),
        (None, Some(servers), _) => ("servers", servers),
        (None, None, Some(Value::Object(mcp))) if mcp.contains_key("servers") => {
            ("mcp.servers", &mcp["servers"])
        }
        _ => {
            return Err(Error::builder(
                "no `mcpServers` object (nor VS Code's `servers` or `mcp.servers`)",
            ));
        }
    };
    let Value::Object(servers) = servers else {
        return Err(Error::builder(format!("`{key}` is not an object")));
    };
    let read = key.split('.').next().unwrap_or(key);
    for key in root.keys().filter(|key| *key != read) {
        loaded
            .warnings
            .push(format!("unknown top-level key `{key}` ignored"));
    }
    let mut expander = Expander {
        env: &mut env,
        budget: MAX_SUBSTITUTED,
    };
    for (name, entry) in servers {
        match entry_spec(name, entry, &mut expander, &mut loaded) {
            Ok(Some(spec)) => {
                loaded.servers.insert(name.clone(), spec);
            }
            Ok(None) => {}
            // This entry fails, the others run (a typo in one entry stops
            // only its own server). A name is the host's, not a secret,
            // but a long one is cut.
            Err(problem) => {
                let shown: String = name.chars().take(MAX_NAME_LEN).collect();
                let invalid = Skipped {
                    server: name.clone(),
                    reason: format!("server `{shown}`: {problem}"),
                };
                if name_problem(name).is_none() {
                    // Disabled stays disabled; required stays required,
                    // so `Fleet::ready` fails for it.
                    let spec = ServerSpec::invalid(invalid.reason.clone())
                        .enabled(entry_enabled(entry))
                        .required(entry.get("required") == Some(&Value::Bool(true)));
                    loaded.servers.insert(name.clone(), spec);
                } else {
                    loaded.skipped.push(invalid.clone());
                }
                loaded.invalid.push(invalid);
            }
        }
    }
    // A name that cleans to another entry's: that entry runs, this one
    // fails (naming both), so the file as a whole still applies.
    let names: Vec<String> = loaded.servers.keys().cloned().collect();
    for name in &names {
        if let Some(other) = name_clash(name, names.iter().map(String::as_str)) {
            let reason = format!(
                "server `{name}`: its qualified tool names would be those of `{other}` \
                 (`{other}__...`): rename one"
            );
            let entry = &servers[name.as_str()];
            let spec = ServerSpec::invalid(reason.clone())
                .enabled(entry_enabled(entry))
                .required(entry.get("required") == Some(&Value::Bool(true)));
            loaded.servers.insert(name.clone(), spec);
            loaded.invalid.push(Skipped {
                server: name.clone(),
                reason,
            });
        }
    }
    Ok(loaded)
}

/// Whether an entry is enabled, as far as it says (an entry that cannot
/// be used but is disabled stays disabled, not failed).
fn entry_enabled(entry: &Value) -> bool {
    entry.get("disabled") != Some(&Value::Bool(true))
        && entry.get("enabled") != Some(&Value::Bool(false))
}

/// Expands `${...}` references through the caller's environment, under
/// the bounds.
struct Expander<'a> {
    env: &'a mut dyn FnMut(&str) -> Option<String>,
    /// What the rest of the file may still substitute, in bytes.
    budget: usize,
}

impl Expander<'_> {
    /// `text` expanded; `key` says where it is, for errors (which never
    /// hold a value).
    fn expand(&mut self, key: &str, text: &str) -> std::result::Result<String, String> {
        if !text.contains("${") {
            return Ok(text.to_owned());
        }
        let mut out = String::new();
        let mut rest = text;
        while let Some(at) = rest.find("${") {
            out.push_str(&rest[..at]);
            let reference = &rest[at + 2..];
            let name_len = reference
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(reference.len());
            let name = &reference[..name_len];
            let after = &reference[name_len..];
            let Some(close) = after.find('}') else {
                return Err(format!("{key}: an unterminated `${{`"));
            };
            if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) {
                return Err(format!(
                    "{key}: `${{` is not followed by a variable name ([A-Za-z_][A-Za-z0-9_]*)"
                ));
            }
            // Between the name and the first `}`: nothing, or `:-default`.
            let (form, tail) = (&after[..close], &after[close + 1..]);
            let default = if form.is_empty() {
                None
            } else if let Some(text) = form.strip_prefix(":-") {
                if text.contains("${") {
                    return Err(format!(
                        "{key}: the default of `{name}` holds a `${{` (nested references are not supported)"
                    ));
                }
                Some(text)
            } else {
                return Err(format!(
                    "{key}: `${{{name}` is followed by neither `}}` nor `:-` (only `${{NAME}}` and `${{NAME:-default}}` are supported)"
                ));
            };
            let value = (self.env)(name);
            let value = match (value, default) {
                // As a shell's `:-`: unset or empty takes the default.
                (Some(value), Some(default)) if value.is_empty() => default.to_owned(),
                (Some(value), _) => value,
                (None, Some(default)) => default.to_owned(),
                (None, None) => {
                    return Err(format!(
                        "{key}: the variable `{name}` is not set (and has no default)"
                    ));
                }
            };
            self.take(key, out.len(), value.len())?;
            out.push_str(&value);
            rest = tail;
        }
        if out.len() + rest.len() > MAX_EXPANDED_VALUE {
            return Err(too_long(key));
        }
        out.push_str(rest);
        Ok(out)
    }

    /// Counts `len` substituted bytes after `so_far`, against both bounds.
    fn take(&mut self, key: &str, so_far: usize, len: usize) -> std::result::Result<(), String> {
        if so_far.saturating_add(len) > MAX_EXPANDED_VALUE {
            return Err(too_long(key));
        }
        self.budget = self.budget.checked_sub(len).ok_or_else(|| {
            format!(
                "{key}: the expansions of the configuration exceed {} MiB in all",
                MAX_SUBSTITUTED >> 20
            )
        })?;
        Ok(())
    }

    /// The value of the variable named by `bearerEnv`, under the same
    /// bounds.
    fn bearer(&mut self, name: &str) -> std::result::Result<String, String> {
        if !is_name(name) {
            return Err("`bearerEnv` is not a variable name ([A-Za-z_][A-Za-z0-9_]*)".to_owned());
        }
        let key = "`bearerEnv`";
        match (self.env)(name) {
            None => Err(format!("{key}: the variable `{name}` is not set")),
            Some(token) if token.is_empty() => {
                Err(format!("{key}: the variable `{name}` is empty"))
            }
            Some(token) => {
                self.take(key, 0, token.len())?;
                Ok(token)
            }
        }
    }
}

fn too_long(key: &str) -> String {
    format!(
        "{key} is longer than {} KiB once expanded",
        MAX_EXPANDED_VALUE >> 10
    )
}

/// Whether `name` fits `[A-Za-z_][A-Za-z0-9_]*`.
fn is_name(name: &str) -> bool {
    name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// One entry: its spec, `None` when skipped, or what is wrong with it.
fn entry_spec(
    name: &str,
    entry: &Value,
    expander: &mut Expander<'_>,
    loaded: &mut LoadedConfig,
) -> std::result::Result<Option<ServerSpec>, String> {
    let Value::Object(entry) = entry else {
        return Err("is not an object".into());
    };
    let kind = match entry.get("type") {
        None => None,
        Some(Value::String(kind)) => Some(kind.as_str()),
        Some(_) => return Err("`type` is not a string".into()),
    };
    if entry.contains_key("command") || kind == Some("stdio") {
        #[cfg(feature = "stdio")]
        return stdio_spec(name, entry, expander, loaded).map(Some);
        #[cfg(not(feature = "stdio"))]
        {
            loaded.skipped.push(Skipped {
                server: name.to_owned(),
                reason: "a stdio server (`command`): built without the `stdio` feature".into(),
            });
            return Ok(None);
        }
    }
    if let Some(problem) = name_problem(name) {
        return Err(format!("the name {problem}"));
    }
    let pinned = match kind {
        None | Some("http" | "streamable-http" | "streamableHttp" | "streamable_http") => None,
        Some("sse") => Some(ProtocolVersion::V2024_11_05),
        Some(other) => {
            return Err(format!(
                "`type` `{other}` is none of \"http\", \"streamable-http\", \"sse\", \"stdio\""
            ));
        }
    };
    let url = match entry.get("url") {
        Some(Value::String(url)) => expander.expand("`url`", url)?,
        Some(_) => return Err("`url` is not a string".into()),
        None => return Err("no `url` (and no `command`)".into()),
    };
    let mut spec = ServerSpec::new(url);
    if let Some(version) = pinned {
        spec = spec.protocol_version(version);
    }
    let mut authorization = false;
    match entry.get("headers") {
        None => {}
        Some(Value::Object(headers)) => {
            for (header, value) in headers {
                let Value::String(value) = value else {
                    // The name only: the value may be a secret.
                    return Err(format!("header `{header}` is not a string"));
                };
                let value = expander.expand(&format!("header `{header}`"), value)?;
                authorization |= header.eq_ignore_ascii_case("authorization");
                spec = spec.header(header.clone(), value);
            }
        }
        Some(_) => return Err("`headers` is not an object".into()),
    }
    match entry.get("bearerEnv") {
        None => {}
        Some(Value::String(_)) if authorization => {
            return Err("both `bearerEnv` and an `Authorization` header".into());
        }
        Some(Value::String(var)) => spec = spec.bearer(expander.bearer(var)?),
        Some(_) => return Err("`bearerEnv` is not a string".into()),
    }
    if let Some(listen) = flag(entry, "listen")? {
        spec = spec.listen(listen);
    }
    let spec = settings(entry, pinned, spec)?;
    warn_unknown(name, entry, &KNOWN, loaded);
    Ok(Some(spec))
}

/// A boolean key: `None` when absent.
fn flag(entry: &Map<String, Value>, key: &str) -> std::result::Result<Option<bool>, String> {
    match entry.get(key) {
        None => Ok(None),
        Some(Value::Bool(on)) => Ok(Some(*on)),
        Some(_) => Err(format!("`{key}` is not a boolean")),
    }
}

/// A number of seconds: `None` when absent.
fn seconds(entry: &Map<String, Value>, key: &str) -> std::result::Result<Option<Duration>, String> {
    match entry.get(key) {
        None => Ok(None),
        Some(Value::Number(number)) => match number.as_f64() {
            Some(s) if (MIN_SECONDS..=MAX_SECONDS).contains(&s) => {
                Ok(Some(Duration::from_secs_f64(s)))
            }
            _ => Err(format!(
                "`{key}` is not from {MIN_SECONDS} to {MAX_SECONDS} seconds"
            )),
        },
        Some(_) => Err(format!("`{key}` is not a number (of seconds)")),
    }
}

/// The keys both kinds of entry read: the flags, the timeouts, the
/// revision (`pinned` by `"type": "sse"`), the health interval and the log
/// level.
fn settings(
    entry: &Map<String, Value>,
    pinned: Option<ProtocolVersion>,
    mut spec: ServerSpec,
) -> std::result::Result<ServerSpec, String> {
    let disabled = flag(entry, "disabled")?.unwrap_or(false);
    let enabled = flag(entry, "enabled")?.unwrap_or(true);
    spec = spec
        .enabled(enabled && !disabled)
        .required(flag(entry, "required")?.unwrap_or(false));
    let timeout = seconds(entry, "timeout")?;
    if let Some(connect) = seconds(entry, "connectTimeout")?.or(timeout) {
        spec = spec.connect_timeout(connect);
    }
    if let Some(request) = seconds(entry, "requestTimeout")?.or(timeout) {
        spec = spec.request_timeout(request);
    }
    match entry.get("protocolVersion") {
        None => {}
        Some(Value::String(version)) => {
            let Ok(version) = version.parse::<ProtocolVersion>() else {
                let known: Vec<&str> = ProtocolVersion::ALL.iter().map(|v| v.as_str()).collect();
                return Err(format!("`protocolVersion` is none of {}", known.join(", ")));
            };
            if pinned.is_some_and(|pinned| pinned != version) {
                return Err(format!(
                    "`protocolVersion` `{version}` with `\"type\": \"sse\"` (2024-11-05)"
                ));
            }
            spec = spec.protocol_version(version);
        }
        Some(_) => return Err("`protocolVersion` is not a string".into()),
    }
    match entry.get("healthInterval") {
        None => {}
        // `null` or 0: never ping (a loss is noticed by calls only).
        Some(Value::Null) => spec = spec.health_interval(None),
        Some(Value::Number(number)) if number.as_f64() == Some(0.0) => {
            spec = spec.health_interval(None);
        }
        Some(_) => spec = spec.health_interval(seconds(entry, "healthInterval")?),
    }
    if let Some(at_once) = flag(entry, "concurrentDiscovery")? {
        spec = spec.concurrent_discovery(at_once);
    }
    if let Some(names) = tool_names(entry, "enabledTools")? {
        spec = spec.enabled_tools(names);
    }
    if let Some(names) = tool_names(entry, "disabledTools")? {
        spec = spec.disabled_tools(names);
    }
    match entry.get("logLevel") {
        None => {}
        Some(Value::String(level)) if LOG_LEVELS.contains(&level.as_str()) => {
            spec = spec.log_level(level.clone());
        }
        Some(_) => {
            return Err(format!(
                "`logLevel` is none of \"{}\"",
                LOG_LEVELS.join("\", \"")
            ));
        }
    }
    Ok(spec)
}

/// The list of tool names at `key`, if given (taken as written: a tool's
/// name is the server's, and is never expanded).
fn tool_names(
    entry: &Map<String, Value>,
    key: &str,
) -> std::result::Result<Option<Vec<String>>, String> {
    let Some(value) = entry.get(key) else {
        return Ok(None);
    };
    value
        .as_array()
        .and_then(|names| {
            names
                .iter()
                .map(|name| name.as_str().map(str::to_owned))
                .collect::<Option<Vec<_>>>()
        })
        .map(Some)
        .ok_or_else(|| format!("`{key}` is not a list of tool names (strings)"))
}

/// A stdio entry: `command`, `args`, `env`, `cwd` and the settings.
#[cfg(feature = "stdio")]
fn stdio_spec(
    name: &str,
    entry: &Map<String, Value>,
    expander: &mut Expander<'_>,
    loaded: &mut LoadedConfig,
) -> std::result::Result<ServerSpec, String> {
    if let Some(problem) = name_problem(name) {
        return Err(format!("the name {problem}"));
    }
    let mut command = match entry.get("command") {
        Some(Value::String(program)) => {
            let program = expander.expand("`command`", program)?;
            if program.is_empty() {
                return Err("`command` is empty".into());
            }
            crate::stdio::StdioCommand::new(program)
        }
        Some(_) => return Err("`command` is not a string".into()),
        None => return Err("`type` is \"stdio\" but there is no `command`".into()),
    };
    match entry.get("args") {
        None => {}
        Some(Value::Array(args)) => {
            for (i, arg) in args.iter().enumerate() {
                let Value::String(arg) = arg else {
                    return Err(format!("`args[{i}]` is not a string"));
                };
                command = command.arg(expander.expand(&format!("`args[{i}]`"), arg)?);
            }
        }
        Some(_) => return Err("`args` is not an array".into()),
    }
    match entry.get("env") {
        None => {}
        Some(Value::Object(vars)) => {
            for (var, value) in vars {
                let Value::String(value) = value else {
                    // The name only: the value may be a secret.
                    return Err(format!("`env` variable `{var}` is not a string"));
                };
                command = command.env(
                    var,
                    expander.expand(&format!("`env` variable `{var}`"), value)?,
                );
            }
        }
        Some(_) => return Err("`env` is not an object".into()),
    }
    match entry.get("cwd") {
        None => {}
        Some(Value::String(dir)) => command = command.current_dir(expander.expand("`cwd`", dir)?),
        Some(_) => return Err("`cwd` is not a string".into()),
    }
    let spec = settings(entry, None, ServerSpec::stdio(command))?;
    for key in ["listen", "bearerEnv"] {
        if entry.contains_key(key) {
            loaded.warnings.push(format!(
                "server `{name}`: `{key}` applies to HTTP servers only; ignored"
            ));
        }
    }
    warn_unknown(name, entry, &KNOWN_STDIO, loaded);
    Ok(spec)
}

fn warn_unknown(name: &str, entry: &Map<String, Value>, known: &[&str], loaded: &mut LoadedConfig) {
    let known = |key: &str| KNOWN_SETTINGS.contains(&key) || known.contains(&key);
    for key in entry.keys().filter(|key| !known(key)) {
        loaded
            .warnings
            .push(format!("server `{name}`: unknown key `{key}` ignored"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a configuration's bad entries say, joined; each is also a
    /// failed spec (or, for a name the fleet cannot take, a skipped
    /// entry), and the file itself parsed.
    fn invalid(loaded: Result<LoadedConfig>) -> String {
        let loaded = loaded.expect("bad entries are no error for the file");
        assert!(!loaded.invalid.is_empty(), "no bad entry: {loaded:?}");
        for bad in &loaded.invalid {
            let failed = loaded
                .servers
                .get(&bad.server)
                .and_then(ServerSpec::invalid_reason);
            let skipped = loaded.skipped.iter().any(|s| s == bad);
            assert!(
                failed == Some(bad.reason.as_str()) || skipped,
                "{bad:?} is neither failed nor skipped"
            );
        }
        let reasons: Vec<&str> = loaded.invalid.iter().map(|i| i.reason.as_str()).collect();
        reasons.join("; ")
    }

    #[test]
    fn http_entries_are_read_stdio_skipped_unknown_keys_warned() {
        let loaded = parse_mcp_servers(
            r#"{"mcpServers": {
                "search": {"url": "http://127.0.0.1:1/mcp", "headers": {"X-Key": "s3cret"},
                           "required": true, "timeout": 5, "autoApprove": []},
                "legacy": {"type": "sse", "url": "http://127.0.0.1:2/sse"},
                "off": {"url": "http://127.0.0.1:3/mcp", "disabled": true},
                "local": {"command": "npx", "args": ["server"]},
                "typed-stdio": {"type": "stdio", "command": "x"}
            }, "globalShortcut": "x"}"#,
        )
        .unwrap();
        #[cfg(feature = "stdio")]
        assert_eq!(
            loaded.servers.keys().collect::<Vec<_>>(),
            ["legacy", "local", "off", "search", "typed-stdio"]
        );
        #[cfg(not(feature = "stdio"))]
        {
            assert_eq!(
                loaded.servers.keys().collect::<Vec<_>>(),
                ["legacy", "off", "search"]
            );
            let skipped: Vec<&str> = loaded.skipped.iter().map(|s| s.server.as_str()).collect();
            assert_eq!(skipped, ["local", "typed-stdio"]);
        }
        assert!(loaded.servers["search"].is_required());
        assert!(!loaded.servers["off"].is_enabled());
        assert_eq!(
            loaded.warnings,
            [
                "unknown top-level key `globalShortcut` ignored",
                "server `search`: unknown key `autoApprove` ignored"
            ]
        );
        // The header's value stays out of what is shown.
        assert!(!format!("{loaded:?}").contains("s3cret"));
    }

    #[cfg(feature = "stdio")]
    #[test]
    fn stdio_entries_are_read_with_args_env_and_cwd() {
        let loaded = parse_mcp_servers(
            r#"{"mcpServers": {
                "files": {"command": "npx", "args": ["-y", "server-files", "/tmp"],
                          "env": {"API_KEY": "s3cret"}, "cwd": "/tmp", "required": true,
                          "timeout": 5},
                "bad-args": {"command": "x", "args": "not a list"},
                "bad-env": {"command": "x", "env": {"K": 1}},
                "no-command": {"type": "stdio"}
            }}"#,
        );
        let shown = invalid(loaded);
        for part in [
            "server `bad-args`: `args` is not an array",
            "server `bad-env`: `env` variable `K` is not a string",
            "server `no-command`: `type` is \"stdio\" but there is no `command`",
        ] {
            assert!(shown.contains(part), "{part} in {shown}");
        }
        let loaded = parse_mcp_servers(
            r#"{"mcpServers": {"files": {"command": "npx", "args": ["-y", "server-files"],
                "env": {"API_KEY": "s3cret"}, "cwd": "/tmp", "required": true, "timeout": 5,
                "autoApprove": []}}}"#,
        )
        .unwrap();
        let spec = &loaded.servers["files"];
        assert!(spec.is_required());
        let command = spec.stdio_command().expect("a stdio spec");
        assert_eq!(command.get_program(), "npx");
        assert_eq!(
            command.get_args().collect::<Vec<_>>(),
            ["-y", "server-files"]
        );
        assert_eq!(
            command.get_envs().collect::<Vec<_>>(),
            [(
                std::ffi::OsStr::new("API_KEY"),
                std::ffi::OsStr::new("s3cret")
            )]
        );
        assert_eq!(
            command.get_current_dir(),
            Some(std::path::Path::new("/tmp"))
        );
        assert_eq!(
            loaded.warnings,
            ["server `files`: unknown key `autoApprove` ignored"]
        );
        assert!(!format!("{loaded:?}").contains("s3cret"));
    }

    /// VS Code's shapes, and one bad entry of each kind beside two good
    /// ones: the good ones are specs, each bad one an invalid spec (or,
    /// for a name the fleet cannot take, skipped), a disabled bad one
    /// disabled.
    #[test]
    fn vs_code_shapes_and_bad_entries_fail_alone() {
        let entries = serde_json::json!({
            "web": {"type": "http", "url": "http://127.0.0.1:1/mcp"},
            "old": {"type": "sse", "url": "http://127.0.0.1:1/sse"},
            "unset": {"type": "http", "url": "${CONFIG_TEST_NEVER_SET}"},
            "odd": {"type": "websocket", "url": "ws://127.0.0.1:1/", "required": true},
            "any.name": {"type": "http", "url": "http://127.0.0.1:1/mcp"},
            "bad\nname": {"type": "http", "url": "http://127.0.0.1:1/mcp"},
            "off": {"url": "${CONFIG_TEST_NEVER_SET}", "disabled": true},
        });
        for json in [
            serde_json::json!({"servers": entries, "inputs": []}),
            serde_json::json!({"mcp": {"servers": entries}}),
            serde_json::json!({"mcpServers": entries, "servers": {}}),
        ] {
            let loaded = parse_mcp_servers_with(&json.to_string(), env(&[])).unwrap();
            for good in ["web", "old", "any.name"] {
                assert!(loaded.servers[good].invalid_reason().is_none(), "{json}");
            }
            let reason = |name: &str| loaded.servers[name].invalid_reason().unwrap_or_default();
            assert!(reason("unset").starts_with("server `unset`: `url`: the variable"));
            assert!(reason("odd").starts_with("server `odd`: `type` `websocket`"));
            assert!(!loaded.servers["off"].is_enabled());
            assert!(
                loaded.servers["odd"].is_required(),
                "required stays required"
            );
            assert!(loaded.servers["unset"].is_enabled());
            assert!(!loaded.servers.contains_key("bad\nname"));
            assert_eq!(loaded.skipped.len(), 1, "{:?}", loaded.skipped);
            assert_eq!(loaded.skipped[0].server, "bad\nname");
            let mut invalid: Vec<&str> = loaded.invalid.iter().map(|i| i.server.as_str()).collect();
            invalid.sort_unstable();
            assert_eq!(invalid, ["bad\nname", "odd", "off", "unset"]);
        }
        // The other shape beside the one read is warned of.
        let loaded = parse_mcp_servers_with(
            r#"{"mcpServers": {}, "servers": {"x": {"url": "http://127.0.0.1:1/mcp"}}}"#,
            env(&[]),
        )
        .unwrap();
        assert!(loaded.servers.is_empty());
        assert_eq!(loaded.warnings, ["unknown top-level key `servers` ignored"]);
        for bad in [
            r#"{"servers": []}"#,
            r#"{"mcp": {"servers": 1}}"#,
            r#"{"mcp": {}}"#,
        ] {
            assert!(parse_mcp_servers(bad).unwrap_err().is_builder(), "{bad}");
        }
    }

    #[test]
    fn invalid_entries_are_named_with_their_key() {
        let error = parse_mcp_servers(
            r#"{"mcpServers": {
                "a": {"url": 5},
                "b": {"url": "http://x/mcp", "headers": {"Authorization": 1}},
                "c": {"url": "http://x/mcp", "type": "websocket"},
                "d": {"url": "http://x/mcp", "required": "yes"},
                "e": {},
                "f\u0000g": {"url": "http://x/mcp"},
                "ok": {"url": "http://x/mcp"}
            }}"#,
        );
        let shown = invalid(error);
        for part in [
            "server `a`: `url` is not a string",
            "server `b`: header `Authorization` is not a string",
            "server `c`: `type` `websocket`",
            "server `d`: `required` is not a boolean",
            "server `e`: no `url`",
            "the name holds a control character",
        ] {
            assert!(shown.contains(part), "{part} in {shown}");
        }
        assert!(!shown.contains("`ok`"), "{shown}");
        for bad in ["", "[]", "{}", r#"{"mcpServers": []}"#] {
            assert!(parse_mcp_servers(bad).unwrap_err().is_builder(), "{bad}");
        }
    }

    /// `got` is `want`: the same server, as enabled and as required.
    fn assert_same(got: &ServerSpec, want: ServerSpec) {
        assert!(
            got.same_server(&want)
                && got.is_enabled() == want.is_enabled()
                && got.is_required() == want.is_required()
                && got.tool_filter() == want.tool_filter(),
            "{got:?} is not {want:?}"
        );
    }

    /// An environment for the tests, never the process's own.
    fn env(vars: &[(&str, &str)]) -> impl FnMut(&str) -> Option<String> {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
    }

    /// `text` expanded as the value of a header, or the error.
    fn expand(text: &str, vars: &[(&str, &str)]) -> std::result::Result<String, String> {
        let mut lookup = env(vars);
        let mut expander = Expander {
            env: &mut lookup,
            budget: MAX_SUBSTITUTED,
        };
        expander.expand("`x`", text)
    }

    #[test]
    fn references_expand_with_defaults_as_a_shell_does() {
        let vars = [("A", "alpha"), ("B", "beta"), ("EMPTY", ""), ("_u9", "u")];
        for (text, want) in [
            ("plain", "plain"),
            ("${A}", "alpha"),
            ("x${A}y", "xalphay"),
            ("${A}${B}", "alphabeta"),
            ("${A}-${B}/${A}", "alpha-beta/alpha"),
            ("${_u9}", "u"),
            // Set but empty is set...
            ("<${EMPTY}>", "<>"),
            // ...but `:-` takes the default for unset or empty, as bash.
            ("${EMPTY:-d}", "d"),
            ("${UNSET:-d}", "d"),
            ("${A:-d}", "alpha"),
            ("${UNSET:-}", ""),
            ("${UNSET:-a b:-c $x {y}", "a b:-c $x {y"),
            // A `$` not followed by `{` is literal.
            ("$A $$ a$ $", "$A $$ a$ $"),
            ("$${A}", "$alpha"),
            ("${A}}", "alpha}"),
        ] {
            assert_eq!(expand(text, &vars).as_deref(), Ok(want), "{text}");
        }
    }

    #[test]
    fn malformed_references_are_errors_naming_the_variable() {
        let vars = [("A", "s3cret")];
        for (text, want) in [
            (
                "${UNSET}",
                "`x`: the variable `UNSET` is not set (and has no default)",
            ),
            ("a${A", "`x`: an unterminated `${`"),
            ("${A}${", "`x`: an unterminated `${`"),
            ("${A:-x", "`x`: an unterminated `${`"),
            ("${}", "`x`: `${` is not followed by a variable name"),
            ("${1A}", "`x`: `${` is not followed by a variable name"),
            ("${:-d}", "`x`: `${` is not followed by a variable name"),
            ("${A-d}", "`x`: `${A` is followed by neither `}` nor `:-`"),
            ("${A:=d}", "`x`: `${A` is followed by neither `}` nor `:-`"),
            ("${A B}", "`x`: `${A` is followed by neither `}` nor `:-`"),
            ("${U:-${A}}", "`x`: the default of `U` holds a `${`"),
        ] {
            let error = expand(text, &vars).unwrap_err();
            assert!(error.starts_with(want), "{text}: {error}");
            assert!(!error.contains("s3cret"), "{error}");
        }
    }

    #[test]
    fn an_expanded_value_is_bounded() {
        let big = "x".repeat(MAX_EXPANDED_VALUE);
        assert_eq!(expand("${BIG}", &[("BIG", &big)]).unwrap().len(), big.len());
        for text in ["${BIG}y", "y${BIG}", "${BIG}${BIG}"] {
            let error = expand(text, &[("BIG", &big)]).unwrap_err();
            assert_eq!(error, "`x` is longer than 64 KiB once expanded", "{text}");
        }
        let long_default = format!("${{U:-{big}}}z");
        assert!(expand(&long_default, &[]).is_err());
        // Many values, each within the bound, are bounded in all.
        let value = "v".repeat(MAX_EXPANDED_VALUE);
        let args = vec!["${V}"; MAX_SUBSTITUTED / MAX_EXPANDED_VALUE + 1];
        let json = serde_json::json!({"mcpServers": {"a": {"url": "http://x/mcp",
            "headers": args.iter().enumerate()
                .map(|(i, a)| (format!("h{i}"), serde_json::json!(a)))
                .collect::<Map<String, Value>>()}}});
        let error = invalid(parse_mcp_servers_with(
            &json.to_string(),
            env(&[("V", &value)]),
        ));
        assert!(error.contains("in all"), "{error}");
    }

    #[test]
    fn http_values_expand_and_a_secret_is_never_shown() {
        let vars = [
            ("HOST", "127.0.0.1:9"),
            ("TOKEN", "s3cret-token"),
            ("QUERY", "key=s3cret-query"),
            ("BEARER", "s3cret-bearer"),
        ];
        let loaded = parse_mcp_servers_with(
            r#"{"mcpServers": {
                "a": {"url": "http://${HOST}/mcp?${QUERY}",
                      "headers": {"Authorization": "Bearer ${TOKEN}", "X-Plain": "${UNSET:-d}"}},
                "b": {"url": "http://${HOST}/mcp", "bearerEnv": "BEARER"}
            }}"#,
            env(&vars),
        )
        .unwrap();
        let shown = format!("{loaded:?}");
        for secret in ["s3cret", "key="] {
            assert!(!shown.contains(secret), "{shown}");
        }
        assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
        // The expanded pieces are what a connect sends.
        let a = loaded.servers["a"].clone();
        let b = loaded.servers["b"].clone();
        let same = parse_mcp_servers_with(
            r#"{"mcpServers": {
                "a": {"url": "http://127.0.0.1:9/mcp?key=s3cret-query",
                      "headers": {"Authorization": "Bearer s3cret-token", "X-Plain": "d"}}
            }}"#,
            env(&[]),
        )
        .unwrap();
        assert_same(&a, same.servers["a"].clone());
        assert_same(
            &b,
            ServerSpec::new("http://127.0.0.1:9/mcp").bearer("s3cret-bearer"),
        );
    }

    #[test]
    fn expansion_errors_name_the_entry_the_key_and_the_variable_never_a_value() {
        let vars = [("SECRET", "s3cret"), ("EMPTY", "")];
        let error = parse_mcp_servers_with(
            r#"{"mcpServers": {
                "u": {"url": "http://x/${NOPE}"},
                "h": {"url": "http://x/mcp", "headers": {"X-Key": "${SECRET}${MISSING_H}"}},
                "b": {"url": "http://x/mcp", "bearerEnv": "MISSING_B"},
                "be": {"url": "http://x/mcp", "bearerEnv": "EMPTY"},
                "bn": {"url": "http://x/mcp", "bearerEnv": "not a name"},
                "bt": {"url": "http://x/mcp", "bearerEnv": 5},
                "both": {"url": "http://x/mcp", "bearerEnv": "SECRET",
                         "headers": {"authorization": "Bearer ${SECRET}"}},
                "t": {"url": "http://x/${SECRET"}
            }}"#,
            env(&vars),
        );
        let shown = invalid(error);
        for part in [
            "server `u`: `url`: the variable `NOPE` is not set",
            "server `h`: header `X-Key`: the variable `MISSING_H` is not set",
            "server `b`: `bearerEnv`: the variable `MISSING_B` is not set",
            "server `be`: `bearerEnv`: the variable `EMPTY` is empty",
            "server `bn`: `bearerEnv` is not a variable name",
            "server `bt`: `bearerEnv` is not a string",
            "server `both`: both `bearerEnv` and an `Authorization` header",
            "server `t`: `url`: an unterminated `${`",
        ] {
            assert!(shown.contains(part), "{part} in {shown}");
        }
        assert!(!shown.contains("s3cret"), "{shown}");
    }

    #[cfg(feature = "stdio")]
    #[test]
    fn stdio_values_expand_and_http_keys_are_warned() {
        let vars = [
            ("BIN", "/usr/bin/server"),
            ("KEY", "s3cret-env"),
            ("ARG", "s3cret-arg"),
            ("DIR", "/srv"),
        ];
        let loaded = parse_mcp_servers_with(
            r#"{"mcpServers": {"files": {"command": "${BIN}", "args": ["--token=${ARG}", "${U:-x}"],
                "env": {"API_KEY": "${KEY}"}, "cwd": "${DIR}/data",
                "listen": false, "bearerEnv": "UNSET_IS_FINE_HERE"}}}"#,
            env(&vars),
        )
        .unwrap();
        let command = loaded.servers["files"].stdio_command().unwrap();
        assert_eq!(command.get_program(), "/usr/bin/server");
        assert_eq!(
            command.get_args().collect::<Vec<_>>(),
            ["--token=s3cret-arg", "x"]
        );
        assert_eq!(
            command.get_envs().collect::<Vec<_>>(),
            [(
                std::ffi::OsStr::new("API_KEY"),
                std::ffi::OsStr::new("s3cret-env")
            )]
        );
        assert_eq!(
            command.get_current_dir(),
            Some(std::path::Path::new("/srv/data"))
        );
        assert_eq!(
            loaded.warnings,
            [
                "server `files`: `listen` applies to HTTP servers only; ignored",
                "server `files`: `bearerEnv` applies to HTTP servers only; ignored"
            ]
        );
        assert!(!format!("{loaded:?}").contains("s3cret"));
        let error = parse_mcp_servers_with(
            r#"{"mcpServers": {
                "c": {"command": "${NO_BIN}"},
                "a": {"command": "x", "args": ["ok", "${NO_ARG}"]},
                "e": {"command": "x", "env": {"K": "${KEY}${NO_ENV}"}},
                "d": {"command": "x", "cwd": "${NO_DIR}"},
                "empty": {"command": "${EMPTY_BIN:-}"}
            }}"#,
            env(&vars),
        );
        let error = invalid(error);
        for part in [
            "server `c`: `command`: the variable `NO_BIN` is not set",
            "server `a`: `args[1]`: the variable `NO_ARG` is not set",
            "server `e`: `env` variable `K`: the variable `NO_ENV` is not set",
            "server `d`: `cwd`: the variable `NO_DIR` is not set",
            "server `empty`: `command` is empty",
        ] {
            assert!(error.contains(part), "{part} in {error}");
        }
        assert!(!error.contains("s3cret"), "{error}");
    }

    #[test]
    fn settings_are_read_for_every_kind_of_entry() {
        let loaded = parse_mcp_servers_with(
            r#"{"mcpServers": {
                "t": {"url": "http://x/mcp", "timeout": 2.5},
                "tc": {"url": "http://x/mcp", "timeout": 2.5, "connectTimeout": 1},
                "tr": {"url": "http://x/mcp", "timeout": 2.5, "requestTimeout": 9},
                "v": {"url": "http://x/mcp", "protocolVersion": "2025-06-18"},
                "sse": {"type": "sse", "url": "http://x/sse", "protocolVersion": "2024-11-05"},
                "l": {"url": "http://x/mcp", "listen": false},
                "h": {"url": "http://x/mcp", "healthInterval": 0.5},
                "h0": {"url": "http://x/mcp", "healthInterval": 0},
                "hn": {"url": "http://x/mcp", "healthInterval": null},
                "g": {"url": "http://x/mcp", "logLevel": "debug"},
                "cd": {"url": "http://x/mcp", "concurrentDiscovery": false}
            }}"#,
            env(&[]),
        )
        .unwrap();
        let base = || ServerSpec::new("http://x/mcp");
        let ms = Duration::from_millis;
        let s = &loaded.servers;
        assert_same(
            &s["t"],
            base().connect_timeout(ms(2500)).request_timeout(ms(2500)),
        );
        assert_same(
            &s["tc"],
            base().connect_timeout(ms(1000)).request_timeout(ms(2500)),
        );
        assert_same(
            &s["tr"],
            base().connect_timeout(ms(2500)).request_timeout(ms(9000)),
        );
        assert_same(
            &s["v"],
            base().protocol_version(ProtocolVersion::V2025_06_18),
        );
        assert_same(
            &s["sse"],
            ServerSpec::new("http://x/sse").protocol_version(ProtocolVersion::V2024_11_05),
        );
        assert_same(&s["l"], base().listen(false));
        assert_eq!(s["h"].health_interval_setting(), Some(Some(ms(500))));
        assert_eq!(s["h0"].health_interval_setting(), Some(None));
        assert_eq!(s["hn"].health_interval_setting(), Some(None));
        assert_eq!(s["t"].health_interval_setting(), None);
        assert_eq!(s["g"].log_level_setting(), Some("debug"));
        assert_eq!(s["t"].log_level_setting(), None);
        assert_same(&s["cd"], base().concurrent_discovery(false));
        assert!(!s["cd"].same_server(&base()));
        assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
        // Defaults: nothing set is the plain spec.
        let plain = parse_mcp_servers_with(
            r#"{"mcpServers": {"p": {"url": "http://x/mcp"}}}"#,
            env(&[]),
        )
        .unwrap();
        assert_same(&plain.servers["p"], base());
    }

    #[cfg(feature = "stdio")]
    #[test]
    fn settings_apply_to_stdio_entries() {
        let loaded = parse_mcp_servers_with(
            r#"{"mcpServers": {"s": {"command": "x", "timeout": 3, "requestTimeout": 4,
                "protocolVersion": "2025-11-25", "healthInterval": 7, "logLevel": "error",
                "enabledTools": ["read", "list"], "disabledTools": ["list"]}}}"#,
            env(&[]),
        )
        .unwrap();
        let want = ServerSpec::stdio(crate::stdio::StdioCommand::new("x"))
            .connect_timeout(Duration::from_secs(3))
            .request_timeout(Duration::from_secs(4))
            .protocol_version(ProtocolVersion::V2025_11_25)
            .health_interval(Some(Duration::from_secs(7)))
            .log_level("error")
            .enabled_tools(["read", "list"])
            .disabled_tools(["list"]);
        let got = &loaded.servers["s"];
        assert_same(got, want.clone());
        assert_eq!(
            got.health_interval_setting(),
            Some(Some(Duration::from_secs(7)))
        );
        assert_eq!(got.log_level_setting(), Some("error"));
        assert_eq!(got.tool_filter(), want.tool_filter());
        assert!(got.tool_filter().allows("read") && !got.tool_filter().allows("list"));
        assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
    }

    #[test]
    fn invalid_settings_are_named_with_their_key() {
        let error = parse_mcp_servers_with(
            r#"{"mcpServers": {
                "t0": {"url": "http://x/mcp", "timeout": 0},
                "tn": {"url": "http://x/mcp", "timeout": -1},
                "tbig": {"url": "http://x/mcp", "connectTimeout": 1e9},
                "ttiny": {"url": "http://x/mcp", "requestTimeout": 1e-9},
                "ts": {"url": "http://x/mcp", "timeout": "5"},
                "v": {"url": "http://x/mcp", "protocolVersion": "2099-01-01"},
                "vn": {"url": "http://x/mcp", "protocolVersion": 5},
                "vsse": {"type": "sse", "url": "http://x/sse", "protocolVersion": "2025-11-25"},
                "l": {"url": "http://x/mcp", "listen": "no"},
                "h": {"url": "http://x/mcp", "healthInterval": -1},
                "hs": {"url": "http://x/mcp", "healthInterval": "30"},
                "g": {"url": "http://x/mcp", "logLevel": "verbose"},
                "gn": {"url": "http://x/mcp", "logLevel": 1},
                "et": {"url": "http://x/mcp", "enabledTools": "read"},
                "dt": {"url": "http://x/mcp", "disabledTools": ["ok", 1]}
            }}"#,
            env(&[]),
        );
        let shown = invalid(error);
        for part in [
            "server `t0`: `timeout` is not from 0.001 to 86400 seconds",
            "server `tn`: `timeout` is not from",
            "server `tbig`: `connectTimeout` is not from",
            "server `ttiny`: `requestTimeout` is not from",
            "server `ts`: `timeout` is not a number",
            "server `v`: `protocolVersion` is none of 2026-07-28, 2025-11-25",
            "server `vn`: `protocolVersion` is not a string",
            "server `vsse`: `protocolVersion` `2025-11-25` with `\"type\": \"sse\"`",
            "server `l`: `listen` is not a boolean",
            "server `h`: `healthInterval` is not from",
            "server `hs`: `healthInterval` is not a number",
            "server `g`: `logLevel` is none of \"debug\"",
            "server `gn`: `logLevel` is none of",
            "server `et`: `enabledTools` is not a list of tool names",
            "server `dt`: `disabledTools` is not a list of tool names",
        ] {
            assert!(shown.contains(part), "{part} in {shown}");
        }
    }

    #[test]
    fn parse_mcp_servers_reads_this_process_s_environment() {
        // Read only: the tests never change the process's environment.
        let json =
            r#"{"mcpServers": {"a": {"url": "http://x/mcp", "headers": {"X-Path": "${PATH}"}}}}"#;
        match std::env::var("PATH") {
            Ok(path) => assert_same(
                &parse_mcp_servers(json).unwrap().servers["a"],
                ServerSpec::new("http://x/mcp").header("X-Path", path),
            ),
            Err(_) => assert!(parse_mcp_servers(json).is_err()),
        }
    }
}
