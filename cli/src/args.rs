//! The command line, parsed with clap.

use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use mcp_scoped_http::Connector;
use mcp_scoped_http::oauth::{ClientCredentials, LoopbackAgent, OAuth, TokenAuthMethod};
use mcp_scoped_http::stdio::StdioCommand;
use mcp_scoped_http::{ProtocolVersion, SessionId};
use mcp_scoped_http_testkit::Eras;

use crate::Failure;

/// An MCP client over Streamable HTTP with strict resource scoping.
#[derive(Debug, Parser)]
#[command(name = "mcp-scoped-http", version, about)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Connect (initialize, discovery), show what the server offers and how
    /// long each phase took, then close and show what was released. With no
    /// URL, probes the embedded test server on 127.0.0.1; with `--
    /// COMMAND [ARGS..]`, starts that stdio server instead (its whole
    /// process tree is released at the end).
    Probe {
        /// The MCP endpoint, e.g. http://127.0.0.1:8000/mcp.
        url: Option<String>,
        /// A stdio server to start instead: `-- npx -y some-server`.
        #[arg(last = true, value_name = "COMMAND")]
        command: Vec<String>,
        #[command(flatten)]
        common: Common,
    },
    /// Connect, call one tool, print its result, close: `call URL TOOL
    /// [ARGS_JSON]`, or `call TOOL [ARGS_JSON] -- COMMAND [ARGS..]` for a
    /// stdio server.
    Call {
        /// URL TOOL [ARGS_JSON]: the MCP endpoint (not with a stdio
        /// COMMAND), the tool's name, and its arguments, a JSON object
        /// (default `{}`).
        #[arg(value_name = "URL TOOL [ARGS_JSON]", num_args = 1..=3, required = true)]
        positional: Vec<String>,
        /// A stdio server to start instead of a URL.
        #[arg(last = true, value_name = "COMMAND")]
        command: Vec<String>,
        #[command(flatten)]
        common: Common,
    },
    /// Reconnect churn: each cycle connects (initialize, discovery), calls a
    /// tool when asked, and closes (DELETE), with the GET stream off. Prints
    /// cycles/s, mean, p50 and p99 latency, CPU per cycle and what is left
    /// afterwards. With no URL, churns against the embedded test server and
    /// calls one of its tools.
    Churn(ChurnArgs),
    /// Run the embedded test server until interrupted (Ctrl-C).
    Serve {
        /// The port on 127.0.0.1 (0: any free port).
        #[arg(long, default_value_t = 0)]
        port: u16,
        /// How many tools it offers.
        #[arg(long, default_value_t = 3)]
        tools: usize,
        /// Items per page of every list (0: no pagination).
        #[arg(long, default_value_t = 0)]
        page_size: usize,
        /// How many prompts it offers.
        #[arg(long, default_value_t = 2)]
        prompts: usize,
        /// How many resources it offers.
        #[arg(long, default_value_t = 2)]
        resources: usize,
        /// Answer POSTed requests with SSE streams instead of JSON.
        #[arg(long)]
        sse: bool,
        /// Which protocol revisions it serves: `2025-11-25` (the 2025
        /// Streamable HTTP revisions, 2025-03-26 to 2025-11-25: initialize,
        /// sessions, GET stream, DELETE), `2026-07-28` (stateless: request
        /// metadata on every POST, server/discover, no GET/DELETE), `both`
        /// (each request by its MCP-Protocol-Version header, as Python mcp
        /// 2.x does) or `2024-11-05` (the deprecated HTTP+SSE transport: GET
        /// the URL for the stream, POST to the URI of its `endpoint` event).
        #[arg(
            long,
            value_name = "REVISION",
            default_value = "2025-11-25",
            value_parser = parse_revision
        )]
        revision: Eras,
        /// Require tokens from an embedded authorization server that
        /// approves every request (its metadata is served beside the
        /// endpoint).
        #[arg(long)]
        oauth: bool,
        /// Serve on standard input and output instead (a stdio server, one
        /// JSON-RPC message a line), until standard input ends: the 2025
        /// revisions only (a request before `initialize`, such as a
        /// `server/discover` probe, is answered with an error). Nothing
        /// else is written to standard output.
        #[arg(long, conflicts_with_all = ["port", "sse", "oauth", "revision", "ask"])]
        stdio: bool,
        /// Also offer `ask-elicitation`, `ask-sampling` and `ask-roots`:
        /// 2026-07-28 tools answered `input_required` once (an
        /// `elicitation/create`, a `sampling/createMessage`, a
        /// `roots/list`), then with what the client answered, for trying a
        /// host's handlers. A 2025 call of them is a tool error.
        #[arg(long)]
        ask: bool,
    },
    /// The client under test for the official MCP conformance suite: acts
    /// on MCP_CONFORMANCE_SCENARIO (and MCP_CONFORMANCE_CONTEXT).
    Conformance {
        /// The scenario's server URL (the suite appends it).
        url: String,
        #[command(flatten)]
        common: Common,
    },
    /// Run a fleet of the servers of an `mcpServers` config file (HTTP
    /// entries, and stdio entries: `command`, `args`, `env`, `cwd`) until
    /// interrupted (SIGINT, SIGTERM): one line per state change (starting,
    /// ready, retrying, auth_required, failed, stopped) and per catalog change (with --json, one JSON object a
    /// line), per server notification ({"server", "notification":
    /// {"method", "params"}}), and one "settled" line once every server
    /// has settled or --ready-timeout passed (ready and pending servers);
    /// the file is read again on SIGHUP and when it changes, and
    /// reconciled by name. Commands on standard input, one JSON object a
    /// line, each answered by one JSON line (carrying the command's "id",
    /// if any): {"call": {"server", "tool", "arguments", "waitMs"}} ("tool"
    /// alone: the qualified name the catalog gives),
    /// {"reconnect": NAME}, {"status": true} (each server's state; a ready
    /// one's also "protocolVersion", "serverInfo", "capabilities" and
    /// "instructions", as it sent them); a call with "progress": true
    /// gets {"id", "progress": {"progress", "total", "message"}} lines
    /// before its answer; at most 64 calls run at once
    /// (one more is refused at once), and every other command is answered
    /// at once, whatever runs. The file must be a regular file, read within
    /// 5 s (else the reload fails and the running set stays). Ends with a
    /// "shutdown" line (each server's outcome, the ledger); exit status 0
    /// when everything was released. --timeout and --no-listen apply to
    /// every server; headers and credentials come from the file only.
    Fleet(FleetArgs),
}

#[derive(Debug, Args)]
pub(crate) struct FleetArgs {
    /// The config file: {"mcpServers": {NAME: {"url", "headers", "type"} or
    /// {"command", "args", "env", "cwd"}}}, plus "timeout",
    /// "protocolVersion", "healthInterval", ... per entry; ${VAR} and
    /// ${VAR:-default} are read from this process's environment (the
    /// guide's config page). --timeout and --no-listen win over the file's.
    pub(crate) config: std::path::PathBuf,
    /// Caps the retry delay, in seconds (default 60; the first retry waits
    /// up to 0.5 s, or this cap if smaller).
    #[arg(long, value_name = "SECONDS", value_parser = parse_seconds)]
    pub(crate) max_backoff: Option<Duration>,
    /// Shut down at the end of standard input, once every command read has
    /// been answered.
    #[arg(long)]
    pub(crate) exit_on_eof: bool,
    /// Bound on each server's connect and on each request, in seconds.
    #[arg(long, value_name = "SECONDS", value_parser = parse_seconds)]
    pub(crate) timeout: Option<Duration>,
    /// Do not listen for server messages (the GET stream; in 2026-07-28,
    /// subscriptions/listen), on any server.
    #[arg(long)]
    pub(crate) no_listen: bool,
    /// One JSON object a line on stdout instead of text.
    #[arg(long)]
    pub(crate) json: bool,
    /// How long to wait for every server to settle (ready, or its first
    /// attempt ended) before the "settled" line, in seconds.
    #[arg(long, value_name = "SECONDS", value_parser = parse_seconds, default_value = "30")]
    pub(crate) ready_timeout: Duration,
    /// How often a ready server is pinged to notice a loss, in seconds
    /// (default 30).
    #[arg(long, value_name = "SECONDS", value_parser = parse_seconds)]
    pub(crate) health_interval: Option<Duration>,
    /// Server requests the host answers over stdin, comma-separated:
    /// `sampling` and `elicitation` come out as lines {"server", "request":
    /// {"id", "method", "params"}}, answered with {"respond": {"server",
    /// "id", "result"}} (or "error") within --answer-timeout;
    /// `roots` declares roots, set with {"roots": [{"uri", "name"}]}. Only
    /// what is named is declared to the servers.
    #[arg(long, value_name = "LIST", value_delimiter = ',', value_enum)]
    pub(crate) handle: Vec<Handled>,
    /// How long the host has to answer a server request (--handle), in
    /// seconds; then the server is told it was not answered. A 2025
    /// server's request is also cut at the request timeout (--timeout, or
    /// the entry's; 60 s by default), whichever comes first.
    #[arg(long, value_name = "SECONDS", value_parser = parse_seconds, default_value = "60")]
    pub(crate) answer_timeout: Duration,
}

/// A kind of server request `fleet --handle` answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Handled {
    /// `sampling/createMessage`, asked of the host.
    Sampling,
    /// `elicitation/create`, asked of the host.
    Elicitation,
    /// `roots/list`, answered from the roots the host set.
    Roots,
}

#[derive(Debug, Args)]
pub(crate) struct ChurnArgs {
    /// The MCP endpoint (default: the embedded test server).
    pub(crate) url: Option<String>,
    /// How many connect/close cycles.
    #[arg(long, default_value_t = 100)]
    pub(crate) cycles: usize,
    /// How many cycles run at once.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) concurrency: u32,
    /// Whether each session builds its own HTTP client or borrows one shared
    /// client.
    #[arg(long, value_enum, default_value_t = ClientKind::Owned)]
    pub(crate) client: ClientKind,
    /// A tool to call in every cycle.
    #[arg(long)]
    pub(crate) call: Option<String>,
    /// The tool's arguments, a JSON object.
    #[arg(long, requires = "call")]
    pub(crate) args: Option<String>,
    /// Cycles run first and not measured.
    #[arg(long, default_value_t = 10)]
    pub(crate) warmup: usize,
    /// Also measure the bare-HTTP floor: the same HTTP exchanges (recorded
    /// from one cycle) sent through the same hyper client with no MCP
    /// logic, and print ours over the floor's: time, client CPU, p50 and
    /// allocations per cycle.
    #[arg(long)]
    pub(crate) floor: bool,
    /// Read the lists one after the other at connect (default: the
    /// library's, side by side with `--client borrowed`; the floor replays
    /// one after the other either way).
    #[arg(long)]
    pub(crate) sequential_discovery: bool,
    /// The async runtime both sides run on: `multi-thread` (tokio's
    /// default, a worker per core) or `current-thread`.
    #[arg(long, value_enum, default_value_t = RuntimeKind::MultiThread)]
    pub(crate) runtime: RuntimeKind,
    #[command(flatten)]
    pub(crate) common: Common,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum RuntimeKind {
    /// Tokio's multi-thread runtime, a worker per core.
    MultiThread,
    /// Tokio's current-thread runtime.
    CurrentThread,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum ClientKind {
    /// A client built for each session and dropped with it.
    Owned,
    /// One client shared by every session, lent to each.
    Borrowed,
}

/// The client's options: every command that connects takes them.
#[derive(Clone, Debug, Args)]
pub(crate) struct Common {
    /// An extra request header, 'Name: value' (repeatable).
    #[arg(long = "header", value_name = "'NAME: VALUE'")]
    pub(crate) headers: Vec<String>,
    /// Sends `Authorization: Bearer TOKEN`. On the command line, the token
    /// shows in the process list: prefer --bearer-file, or the environment
    /// variable MCP_SCOPED_HTTP_BEARER (used when neither option is given).
    #[arg(long, value_name = "TOKEN")]
    pub(crate) bearer: Option<String>,
    /// Reads the bearer token from PATH (its first line; `-`: standard
    /// input).
    #[arg(long, value_name = "PATH", conflicts_with = "bearer")]
    pub(crate) bearer_file: Option<std::path::PathBuf>,
    /// Attach to a session the caller owns (no initialize, no DELETE);
    /// needs --protocol-version.
    #[arg(long, value_name = "ID", requires = "protocol_version")]
    pub(crate) session_id: Option<String>,
    /// Speak this revision without probing (2026-07-28, 2025-11-25,
    /// 2025-06-18, 2025-03-26, or 2024-11-05 for HTTP+SSE); with
    /// --session-id, the revision of the attached session.
    #[arg(long, value_name = "V")]
    pub(crate) protocol_version: Option<String>,
    /// Bound on connect and on each request, in seconds.
    #[arg(long, value_name = "SECONDS", value_parser = parse_seconds)]
    pub(crate) timeout: Option<Duration>,
    /// Do not listen for server messages (the GET stream; in 2026-07-28,
    /// subscriptions/listen).
    #[arg(long)]
    pub(crate) no_listen: bool,
    /// Print one JSON object on stdout instead of text.
    #[arg(long)]
    pub(crate) json: bool,
    /// Authorize with OAuth 2.1 when the server asks: prints the
    /// authorization URL, opens a browser, and takes the redirect on
    /// 127.0.0.1 (requests may then take up to 6 minutes, unless --timeout).
    #[arg(long)]
    pub(crate) oauth: bool,
    /// With --oauth: print the authorization URL only, open no browser.
    #[arg(long, requires = "oauth")]
    pub(crate) no_browser: bool,
    /// With --oauth: a client registered in advance (else the server's
    /// registration is used). Used only with the authorization server
    /// --issuer names; without --issuer, only a public client (no secret)
    /// and with any authorization server.
    #[arg(long, value_name = "ID", requires = "oauth")]
    pub(crate) client_id: Option<String>,
    /// With --client-id: the issuer of the authorization server it is
    /// registered with (its metadata's `issuer`, exactly). The client and
    /// its secret are used with that authorization server only. Required
    /// with a client secret.
    #[arg(long, value_name = "URL", requires = "client_id")]
    pub(crate) issuer: Option<String>,
    /// With --client-id and --issuer: its secret (client_secret_basic). On
    /// the command line, the secret shows in the process list: prefer
    /// --client-secret-file, or the environment variable
    /// MCP_SCOPED_HTTP_CLIENT_SECRET (used with --client-id when neither
    /// option is given).
    #[arg(long, value_name = "SECRET", requires = "client_id")]
    pub(crate) client_secret: Option<String>,
    /// With --client-id and --issuer: reads its secret from PATH (its first
    /// line; `-`: standard input).
    #[arg(
        long,
        value_name = "PATH",
        requires = "client_id",
        conflicts_with = "client_secret"
    )]
    pub(crate) client_secret_file: Option<std::path::PathBuf>,
    /// With --oauth: a scope to ask for (repeatable; else the server's).
    #[arg(long = "scope", value_name = "SCOPE", requires = "oauth")]
    pub(crate) scopes: Vec<String>,
    /// With --oauth: the port of the 127.0.0.1 redirect listener (default:
    /// any free one).
    #[arg(long, value_name = "PORT", requires = "oauth")]
    pub(crate) redirect_port: Option<u16>,
}

fn parse_seconds(text: &str) -> Result<Duration, String> {
    let seconds: f64 = text
        .parse()
        .map_err(|_| format!("not a number of seconds: {text:?}"))?;
    Duration::try_from_secs_f64(seconds)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(|| format!("not a positive number of seconds: {text:?}"))
}

impl Common {
    /// A connector for the stdio server `command` (a program and its
    /// arguments), with the options that apply to one: the revision, the
    /// timeout. HTTP's own (headers, a bearer, OAuth, a session id) are
    /// refused.
    pub(crate) fn stdio_connector(&self, command: &[String]) -> Result<Connector, Failure> {
        let http_only = [
            (!self.headers.is_empty(), "--header"),
            (
                self.bearer.is_some() || self.bearer_file.is_some(),
                "--bearer",
            ),
            (self.session_id.is_some(), "--session-id"),
            (self.oauth, "--oauth"),
        ];
        if let Some((_, option)) = http_only.iter().find(|(set, _)| *set) {
            return Err(Failure::usage(format!(
                "{option} is for HTTP servers, not a stdio COMMAND"
            )));
        }
        let Some((program, args)) = command.split_first() else {
            return Err(Failure::usage("no COMMAND after `--`"));
        };
        let mut connector = Connector::stdio(StdioCommand::new(program).args(args));
        if let Some(version) = &self.protocol_version {
            let version = version
                .parse::<ProtocolVersion>()
                .map_err(|error| Failure::usage(format!("--protocol-version: {error}")))?;
            connector = connector.protocol_version(version);
        }
        if let Some(timeout) = self.timeout {
            connector = connector.request_timeout(timeout).connect_timeout(timeout);
        }
        Ok(connector)
    }

    /// A connector for `url` with the common options applied.
    pub(crate) fn connector(&self, url: &str) -> Result<Connector, Failure> {
        let mut connector = Connector::new(url);
        for header in &self.headers {
            let Some((name, value)) = header.split_once(':') else {
                // Not echoed: the whole argument may be a secret
                // (`X-Api-Key=...` written with `=` for `:`).
                return Err(Failure::usage(
                    "--header wants 'Name: value' (a colon after the name); the value is not shown",
                ));
            };
            let name = name.trim();
            if http::HeaderName::from_bytes(name.as_bytes()).is_err() {
                return Err(Failure::usage(format!(
                    "--header has an invalid name {:?}",
                    name.chars().take(40).collect::<String>()
                )));
            }
            if http::HeaderValue::from_bytes(value.trim().as_bytes()).is_err() {
                // The value may be a secret: never echo it.
                return Err(Failure::usage(format!(
                    "--header {name:?} has an invalid value"
                )));
            }
            connector = connector.header(name, value.trim());
        }
        if let Some(token) = secret_option(
            "--bearer",
            self.bearer.as_deref(),
            self.bearer_file.as_deref(),
            BEARER_ENV,
        )? {
            connector = connector.bearer(&token);
        }
        let version = match &self.protocol_version {
            Some(version) => Some(
                version
                    .parse::<ProtocolVersion>()
                    .map_err(|error| Failure::usage(format!("--protocol-version: {error}")))?,
            ),
            None => None,
        };
        match (&self.session_id, version) {
            (Some(id), Some(version)) => {
                let id = SessionId::new(id.as_str())
                    .map_err(|error| Failure::usage(format!("--session-id: {error}")))?;
                connector = connector.attach(id, version);
            }
            (None, Some(version)) => connector = connector.protocol_version(version),
            _ => {}
        }
        if self.no_listen {
            connector = connector.listen(false);
        }
        if let Some(timeout) = self.timeout {
            connector = connector.request_timeout(timeout).delete_timeout(timeout);
        }
        if self.oauth {
            if self.timeout.is_none() {
                // A person at a browser: the loopback wait (5 minutes), and
                // the rest of the flow.
                connector = connector.request_timeout(Duration::from_secs(360));
            }
            connector = connector.oauth(self.oauth_settings()?);
        }
        Ok(connector)
    }

    /// `--oauth` and its options, with the loopback user agent. A client
    /// secret goes only to the authorization server `--issuer` names.
    fn oauth_settings(&self) -> Result<OAuth, Failure> {
        let mut agent = LoopbackAgent::new().open_browser(!self.no_browser);
        if let Some(port) = self.redirect_port {
            agent = agent.port(port);
        }
        let mut oauth = OAuth::new(agent);
        if let Some(id) = &self.client_id {
            let secret = secret_option(
                "--client-secret",
                self.client_secret.as_deref(),
                self.client_secret_file.as_deref(),
                CLIENT_SECRET_ENV,
            )?;
            let credentials = match &secret {
                Some(secret) => {
                    ClientCredentials::confidential(id, secret, TokenAuthMethod::ClientSecretBasic)
                }
                None => ClientCredentials::public(id),
            };
            oauth = match (&self.issuer, &secret) {
                (Some(issuer), _) => oauth.client(credentials, issuer),
                (None, None) => oauth.client_for_any_issuer(credentials),
                (None, Some(_)) => {
                    return Err(Failure::usage(
                        "a client secret needs --issuer: the authorization server it was \
                         registered with (else it would go to whichever one the MCP server \
                         names)",
                    ));
                }
            };
        }
        if !self.scopes.is_empty() {
            oauth = oauth.scopes(self.scopes.iter().cloned());
        }
        Ok(oauth)
    }
}

/// The environment variable read for `--bearer` when neither `--bearer`
/// nor `--bearer-file` is given.
pub(crate) const BEARER_ENV: &str = "MCP_SCOPED_HTTP_BEARER";
/// The environment variable read for `--client-secret` when neither
/// `--client-secret` nor `--client-secret-file` is given.
pub(crate) const CLIENT_SECRET_ENV: &str = "MCP_SCOPED_HTTP_CLIENT_SECRET";

/// The largest secret file read.
const MAX_SECRET_FILE: u64 = 64 * 1024;

/// A secret given on the command line, in a file, or in the environment
/// variable `env`, in that order. A file's first line is the secret (a
/// trailing newline is not part of it). Errors never show the secret.
fn secret_option(
    option: &str,
    given: Option<&str>,
    file: Option<&std::path::Path>,
    env: &str,
) -> Result<Option<String>, Failure> {
    use std::io::Read as _;
    if let Some(given) = given {
        return Ok(Some(given.to_owned()));
    }
    if let Some(path) = file {
        let mut text = String::new();
        let read = if path.as_os_str() == "-" {
            std::io::stdin()
                .take(MAX_SECRET_FILE + 1)
                .read_to_string(&mut text)
        } else {
            std::fs::File::open(path)
                .and_then(|file| file.take(MAX_SECRET_FILE + 1).read_to_string(&mut text))
        };
        read.map_err(|error| {
            Failure::usage(format!(
                "{option}-file: cannot read {}: {error}",
                path.display()
            ))
        })?;
        if text.len() as u64 > MAX_SECRET_FILE {
            return Err(Failure::usage(format!(
                "{option}-file: {} is larger than {MAX_SECRET_FILE} bytes",
                path.display()
            )));
        }
        let secret = text.lines().next().unwrap_or("").to_owned();
        if secret.is_empty() {
            return Err(Failure::usage(format!(
                "{option}-file: {} is empty",
                path.display()
            )));
        }
        return Ok(Some(secret));
    }
    match std::env::var(env) {
        Ok(secret) if !secret.is_empty() => Ok(Some(secret)),
        Ok(_) | Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(_)) => {
            Err(Failure::usage(format!("{env} is not valid UTF-8")))
        }
    }
}

/// Parses a JSON object argument.
pub(crate) fn json_object(what: &str, text: Option<&str>) -> Result<serde_json::Value, Failure> {
    let Some(text) = text else {
        return Ok(serde_json::json!({}));
    };
    match serde_json::from_str(text) {
        Ok(value @ serde_json::Value::Object(_)) => Ok(value),
        Ok(_) => Err(Failure::usage(format!("{what} must be a JSON object"))),
        Err(error) => Err(Failure::usage(format!("{what} is not valid JSON: {error}"))),
    }
}

/// `serve --revision`: 2026-07-28, 2025-11-25, both or 2024-11-05.
fn parse_revision(value: &str) -> Result<Eras, String> {
    value.parse()
}
