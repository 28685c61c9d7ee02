//! The `mcpServers` configuration shape that hosts already use.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::spec::{ServerSpec, name_problem};
use crate::ProtocolVersion;
use crate::error::{Error, Result};

/// What [`parse_mcp_servers`] found in a configuration.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct LoadedConfig {
    /// The servers, by name, ready for [`Fleet::apply`](super::Fleet::apply).
    pub servers: BTreeMap<String, ServerSpec>,
    /// Entries left out, and why (a stdio server, when the crate is built
    /// without its `stdio` feature).
    pub skipped: Vec<Skipped>,
    /// Keys that were ignored, each naming the entry and the key.
    pub warnings: Vec<String>,
}

/// An entry of the configuration that was left out.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Skipped {
    /// The entry's name.
    pub server: String,
    /// Why.
    pub reason: String,
}

/// The keys of an HTTP entry this loader reads.
const KNOWN: [&str; 6] = ["url", "type", "headers", "disabled", "enabled", "required"];

/// The keys of a stdio entry this loader reads.
#[cfg(all(feature = "stdio", unix))]
const KNOWN_STDIO: [&str; 8] = [
    "command", "args", "env", "cwd", "type", "disabled", "enabled", "required",
];

/// Reads the common `mcpServers` shape:
///
/// ```json
/// {"mcpServers": {
///     "search": {"url": "https://search.example/mcp", "headers": {"Authorization": "Bearer ..."}},
///     "legacy": {"type": "sse", "url": "https://legacy.example/sse"},
///     "local":  {"command": "npx", "args": ["some-server"]}
/// }}
/// ```
///
/// Per HTTP entry: `url` (required), `type` (`"http"`,
/// `"streamable-http"` or `"streamableHttp"`: the era is detected;
/// `"sse"`: the HTTP+SSE transport of 2024-11-05), `headers` (an object of
/// strings), `disabled` or `enabled`, and `required` (booleans).
///
/// An entry with a `command` (or of type `"stdio"`) is a stdio server
/// ([`ServerSpec::stdio`]): `command` (a string, required), `args` (an
/// array of strings), `env` (an object of strings, over the allowlisted
/// host variables: see [`crate::stdio`]), `cwd` (a string), and the same
/// flags. Built without the `stdio` feature, such an entry is listed in
/// [`LoadedConfig::skipped`], never an error for the file.
///
/// Other keys, in an entry or at the top, are ignored with a warning.
///
/// # Errors
///
/// [`Error::is_builder`], naming every invalid entry and key: a file that
/// is not JSON, no `mcpServers` object, a server name the fleet refuses
/// (see [`qualify`](super::qualify)), a missing or non-string `url`, an
/// unknown `type`, a header that is not a string, a flag that is not a
/// boolean. Nothing is applied from a file with an error, so a typo
/// never stops a server that was running.
pub fn parse_mcp_servers(json: &str) -> Result<LoadedConfig> {
    let root: Value = serde_json::from_str(json)
        .map_err(|e| Error::builder(format!("the configuration is not JSON: {e}")))?;
    let Value::Object(root) = root else {
        return Err(Error::builder("the configuration is not a JSON object"));
    };
    let mut loaded = LoadedConfig::default();
    let mut problems = Vec::new();
    for key in root.keys().filter(|key| *key != "mcpServers") {
        loaded
            .warnings
            .push(format!("unknown top-level key `{key}` ignored"));
    }
    let servers = match root.get("mcpServers") {
        Some(Value::Object(servers)) => servers,
        Some(_) => return Err(Error::builder("`mcpServers` is not an object")),
        None => return Err(Error::builder("no `mcpServers` object")),
    };
    for (name, entry) in servers {
        match entry_spec(name, entry, &mut loaded) {
            Ok(Some(spec)) => {
                loaded.servers.insert(name.clone(), spec);
            }
            Ok(None) => {}
            Err(problem) => problems.push(format!("server `{name}`: {problem}")),
        }
    }
    if problems.is_empty() {
        Ok(loaded)
    } else {
        Err(Error::builder(format!(
            "invalid configuration: {}",
            problems.join("; ")
        )))
    }
}

/// One entry: its spec, `None` when skipped, or what is wrong with it.
fn entry_spec(
    name: &str,
    entry: &Value,
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
        #[cfg(all(feature = "stdio", unix))]
        return stdio_spec(name, entry, loaded).map(Some);
        #[cfg(not(all(feature = "stdio", unix)))]
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
        Some(Value::String(url)) => url,
        Some(_) => return Err("`url` is not a string".into()),
        None => return Err("no `url` (and no `command`)".into()),
    };
    let mut spec = ServerSpec::new(url.clone());
    if let Some(version) = pinned {
        spec = spec.protocol_version(version);
    }
    match entry.get("headers") {
        None => {}
        Some(Value::Object(headers)) => {
            for (header, value) in headers {
                let Value::String(value) = value else {
                    // The name only: the value may be a secret.
                    return Err(format!("header `{header}` is not a string"));
                };
                spec = spec.header(header.clone(), value.clone());
            }
        }
        Some(_) => return Err("`headers` is not an object".into()),
    }
    let spec = flags(entry, spec)?;
    warn_unknown(name, entry, &KNOWN, loaded);
    Ok(Some(spec))
}

/// `disabled`, `enabled` and `required`, on `spec`.
fn flags(entry: &Map<String, Value>, spec: ServerSpec) -> std::result::Result<ServerSpec, String> {
    let flag = |key: &str| match entry.get(key) {
        None => Ok(None),
        Some(Value::Bool(on)) => Ok(Some(*on)),
        Some(_) => Err(format!("`{key}` is not a boolean")),
    };
    let disabled = flag("disabled")?.unwrap_or(false);
    let enabled = flag("enabled")?.unwrap_or(true);
    Ok(spec
        .enabled(enabled && !disabled)
        .required(flag("required")?.unwrap_or(false)))
}

/// A stdio entry: `command`, `args`, `env`, `cwd` and the flags.
#[cfg(all(feature = "stdio", unix))]
fn stdio_spec(
    name: &str,
    entry: &Map<String, Value>,
    loaded: &mut LoadedConfig,
) -> std::result::Result<ServerSpec, String> {
    if let Some(problem) = name_problem(name) {
        return Err(format!("the name {problem}"));
    }
    let mut command = match entry.get("command") {
        Some(Value::String(program)) if !program.is_empty() => {
            crate::stdio::StdioCommand::new(program)
        }
        Some(Value::String(_)) => return Err("`command` is empty".into()),
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
                command = command.arg(arg);
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
                command = command.env(var, value);
            }
        }
        Some(_) => return Err("`env` is not an object".into()),
    }
    match entry.get("cwd") {
        None => {}
        Some(Value::String(dir)) => command = command.current_dir(dir),
        Some(_) => return Err("`cwd` is not a string".into()),
    }
    let spec = flags(entry, ServerSpec::stdio(command))?;
    warn_unknown(name, entry, &KNOWN_STDIO, loaded);
    Ok(spec)
}

fn warn_unknown(name: &str, entry: &Map<String, Value>, known: &[&str], loaded: &mut LoadedConfig) {
    for key in entry.keys().filter(|key| !known.contains(&key.as_str())) {
        loaded
            .warnings
            .push(format!("server `{name}`: unknown key `{key}` ignored"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_entries_are_read_stdio_skipped_unknown_keys_warned() {
        let loaded = parse_mcp_servers(
            r#"{"mcpServers": {
                "search": {"url": "http://127.0.0.1:1/mcp", "headers": {"X-Key": "s3cret"},
                           "required": true, "timeout": 5},
                "legacy": {"type": "sse", "url": "http://127.0.0.1:2/sse"},
                "off": {"url": "http://127.0.0.1:3/mcp", "disabled": true},
                "local": {"command": "npx", "args": ["server"]},
                "typed-stdio": {"type": "stdio", "command": "x"}
            }, "globalShortcut": "x"}"#,
        )
        .unwrap();
        #[cfg(all(feature = "stdio", unix))]
        assert_eq!(
            loaded.servers.keys().collect::<Vec<_>>(),
            ["legacy", "local", "off", "search", "typed-stdio"]
        );
        #[cfg(not(all(feature = "stdio", unix)))]
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
                "server `search`: unknown key `timeout` ignored"
            ]
        );
        // The header's value stays out of what is shown.
        assert!(!format!("{loaded:?}").contains("s3cret"));
    }

    #[cfg(all(feature = "stdio", unix))]
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
        )
        .unwrap_err();
        let shown = loaded.to_string();
        for part in [
            "server `bad-args`: `args` is not an array",
            "server `bad-env`: `env` variable `K` is not a string",
            "server `no-command`: `type` is \"stdio\" but there is no `command`",
        ] {
            assert!(shown.contains(part), "{part} in {shown}");
        }
        let loaded = parse_mcp_servers(
            r#"{"mcpServers": {"files": {"command": "npx", "args": ["-y", "server-files"],
                "env": {"API_KEY": "s3cret"}, "cwd": "/tmp", "required": true, "timeout": 5}}}"#,
        )
        .unwrap();
        let spec = &loaded.servers["files"];
        assert!(spec.is_required());
        let command = spec.get_stdio().expect("a stdio spec");
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
            ["server `files`: unknown key `timeout` ignored"]
        );
        assert!(!format!("{loaded:?}").contains("s3cret"));
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
                "f.g": {"url": "http://x/mcp"},
                "ok": {"url": "http://x/mcp"}
            }}"#,
        )
        .unwrap_err();
        assert!(error.is_builder());
        let shown = error.to_string();
        for part in [
            "server `a`: `url` is not a string",
            "server `b`: header `Authorization` is not a string",
            "server `c`: `type` `websocket`",
            "server `d`: `required` is not a boolean",
            "server `e`: no `url`",
            "server `f.g`: the name may hold only",
        ] {
            assert!(shown.contains(part), "{part} in {shown}");
        }
        assert!(!shown.contains("`ok`"), "{shown}");
        for bad in ["", "[]", "{}", r#"{"mcpServers": []}"#] {
            assert!(parse_mcp_servers(bad).unwrap_err().is_builder(), "{bad}");
        }
    }
}
