//! stdio servers: an MCP server run as a child process, spoken to over its
//! standard streams (newline-delimited JSON-RPC), under the same guard
//! stack and the same [`Session`](crate::Session) as an HTTP server.
//!
//! ```no_run
//! # async fn run() -> mcp_scoped_http::Result<()> {
//! use mcp_scoped_http::Connector;
//! use mcp_scoped_http::stdio::StdioCommand;
//!
//! let server = StdioCommand::new("npx")
//!     .args(["-y", "@modelcontextprotocol/server-everything"])
//!     .env("API_KEY", "only this server sees it");
//! let session = Connector::stdio(server).connect().await?;
//! println!("{} tools", session.catalog().tools.len());
//! let released = session.close().await;
//! println!("the server {:?}", released.process); // e.g. Some(Exited(0))
//! # Ok(()) }
//! ```
//!
//! # What the process is given
//!
//! - **The environment:** only the host's variables named in
//!   [`DEFAULT_ENV_ALLOWLIST`] (as both official SDKs do), then the
//!   command's own [`env`](StdioCommand::env) over them; everything else
//!   of the host's (its API keys) stays in the host unless
//!   [`inherit_env`](StdioCommand::inherit_env) says otherwise.
//! - **The program** is found on the `PATH` the child gets, as a shell
//!   would; a missing one fails the connect with an error naming it
//!   ([`Error::is_builder`](crate::Error::is_builder): not retried).
//! - **Its own session and process group**, under a watchdog: a small
//!   program of its own embedded in the crate (see `process`), never a
//!   copy of the host, forked for each server by the host's *launcher*
//!   (`mcp-launcher`: one small process started at the first server,
//!   which ends with the host). The whole tree is released together, and it does
//!   not outlive the host even when the host is killed with SIGKILL; on
//!   Linux that includes descendants that leave the group (daemons).
//! - **The program is exec'd as it is**: no `PATH` search in the child
//!   and no shell for a file in no executable format (a script missing
//!   its `#!` line is refused, not run as shell code).
//!
//! # How it ends
//!
//! On every way out (close, a failed connect, a dropped future, the
//! session dropped): stdin closed, [`Grace::stdin`] for it to exit by
//! itself, SIGTERM to the whole group, [`Grace::terminate`], SIGKILL to the
//! whole group, reaped. [`Released::process`](crate::Released::process)
//! says how it ended. A server that exits on its own ends the session:
//! requests fail with its exit status and the last lines of its stderr.
//!
//! # What is read
//!
//! stdout, one message per line, charged to the session's
//! [`MemoryBudget`](crate::MemoryBudget); a line longer than
//! [`TransportConfig::max_json_body`] fails the session without being
//! buffered; lines that are not JSON-RPC (logs) are skipped with a
//! rate-limited warning. stderr is always drained (a chatty server never
//! blocks), each line a `tracing` record (target
//! `mcp_scoped_http::stdio::stderr`), the last
//! [`stderr_tail`](StdioCommand::stderr_tail) bytes kept for errors.
//!
//! Windows is not supported yet: there the module builds (nothing above it
//! has a platform `cfg`), and a connect fails with an
//! [`is_builder`](crate::Error::is_builder) error naming the program,
//! before anything is started.

// Everything but the process tree is the same on every platform; the tree
// is Unix's (`process`, `watchdog`), and elsewhere a stand-in that refuses
// to start one, so the layers above need no platform `cfg`.
mod end;
mod env;
mod framing;
#[cfg(unix)]
mod launcher;
#[cfg(unix)]
mod process;
#[cfg(not(unix))]
#[path = "elsewhere.rs"]
mod process;
pub(crate) mod stderr;
#[cfg(unix)]
mod watchdog;

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;
#[cfg(not(unix))]
use tokio::io::AsyncWriteExt as _;
use tokio::sync::{mpsc, watch};

pub use end::{Grace, ProcessEnd};
pub use env::DEFAULT_ENV_ALLOWLIST;
#[cfg(feature = "wire")]
#[doc(hidden)]
pub use framing::stdio_lines;
pub(crate) use framing::{Lines, Noise};
pub(crate) use process::{ProcessTree, ended_how};
pub(crate) use stderr::{StderrTail, drain as drain_stderr};

use crate::budget::Account;
use crate::error::Result;
use crate::transport::{StdioWire, TransportConfig};

/// Starts the launcher now: the small process that forks each stdio
/// server's watchdog (see the [guide](crate::guide)'s stdio page), which
/// is otherwise started at the first server and lives as long as the
/// host. Its servers carry the limits, `umask`, cgroup and namespaces the
/// host had when it started (never its environment: a server gets exactly
/// its own, and its own working directory); a host whose user or group
/// ids change gets a new one at its next server. A host that sets those
/// up first, or counts its descriptors (the launcher holds one socket),
/// starts it at the moment of its choosing. Nothing is done when it runs
/// already.
///
/// # Errors
///
/// The watchdog program cannot be written or run, or no process can be
/// started; off Unix, always (there are no stdio servers there yet).
pub fn start_launcher() -> std::io::Result<()> {
    #[cfg(unix)]
    {
        launcher::ensure(watchdog::image()?.path())
    }
    #[cfg(not(unix))]
    {
        Err(std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            "stdio servers are not supported on this platform yet",
        ))
    }
}

/// The default of [`StdioCommand::stderr_tail`]: 8 KiB.
pub const DEFAULT_STDERR_TAIL: usize = 8 * 1024;

/// A stdio server to start: its program, arguments, environment and
/// working directory, and how it is ended. Give it to
/// [`Connector::stdio`](crate::Connector::stdio).
///
/// Defaults: no arguments; the environment is the host's variables in
/// [`DEFAULT_ENV_ALLOWLIST`] and nothing else; the host's working
/// directory; [`Grace::default`]; a stderr tail of
/// [`DEFAULT_STDERR_TAIL`].
#[derive(Clone, PartialEq, Eq)]
#[must_use]
pub struct StdioCommand {
    program: OsString,
    args: Vec<OsString>,
    env: Vec<(OsString, OsString)>,
    cwd: Option<PathBuf>,
    inherit_env: bool,
    allow_env: Vec<OsString>,
    grace: Grace,
    stderr_tail: usize,
}

impl StdioCommand {
    /// A command running `program`: a path, or a name found on the `PATH`
    /// the child gets.
    pub fn new(program: impl Into<OsString>) -> Self {
        StdioCommand {
            program: program.into(),
            args: Vec::new(),
            env: Vec::new(),
            cwd: None,
            inherit_env: false,
            allow_env: DEFAULT_ENV_ALLOWLIST.iter().map(OsString::from).collect(),
            grace: Grace::default(),
            stderr_tail: DEFAULT_STDERR_TAIL,
        }
    }

    /// Adds an argument.
    pub fn arg(mut self, arg: impl Into<OsString>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// Adds arguments.
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Sets a variable of the server's environment (over the host's
    /// allowlisted ones); the last one set for a name wins.
    pub fn env(mut self, name: impl Into<OsString>, value: impl Into<OsString>) -> Self {
        let name = name.into();
        self.env.retain(|(n, _)| *n != name);
        self.env.push((name, value.into()));
        self
    }

    /// Sets variables of the server's environment, as [`env`](Self::env).
    pub fn envs<I, K, V>(mut self, vars: I) -> Self
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<OsString>,
        V: Into<OsString>,
    {
        for (name, value) in vars {
            self = self.env(name, value);
        }
        self
    }

    /// The server's working directory. Default: the host's.
    pub fn current_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.cwd = Some(dir.into());
        self
    }

    /// Passes the host's whole environment to the server (its secrets
    /// included), not only the allowlisted variables. Default: false.
    pub fn inherit_env(mut self, inherit: bool) -> Self {
        self.inherit_env = inherit;
        self
    }

    /// Passes the host's variable `name`, if set, beside
    /// [`DEFAULT_ENV_ALLOWLIST`].
    pub fn allow_env(mut self, name: impl Into<OsString>) -> Self {
        self.allow_env.push(name.into());
        self
    }

    /// How long each step of ending the server may take. Default:
    /// [`Grace::default`].
    pub fn grace(mut self, grace: Grace) -> Self {
        self.grace = grace;
        self
    }

    /// Bytes of the server's last stderr lines kept for errors. Default:
    /// [`DEFAULT_STDERR_TAIL`] (8 KiB).
    pub fn stderr_tail(mut self, bytes: usize) -> Self {
        self.stderr_tail = bytes;
        self
    }

    /// The program, as given.
    pub fn get_program(&self) -> &OsStr {
        &self.program
    }

    /// The arguments.
    pub fn get_args(&self) -> impl Iterator<Item = &OsStr> {
        self.args.iter().map(OsString::as_os_str)
    }

    /// The variables set for the server (names and values).
    pub fn get_envs(&self) -> impl Iterator<Item = (&OsStr, &OsStr)> {
        self.env.iter().map(|(n, v)| (n.as_os_str(), v.as_os_str()))
    }

    /// The working directory, if set.
    pub fn get_current_dir(&self) -> Option<&Path> {
        self.cwd.as_deref()
    }

    /// The grace periods of its release.
    pub fn get_grace(&self) -> Grace {
        self.grace
    }

    /// The key the revision a server speaks is remembered under: the
    /// program and its arguments.
    pub(crate) fn era_key(&self) -> String {
        let mut key = String::from("stdio:");
        for part in std::iter::once(self.get_program()).chain(self.get_args()) {
            key.push_str(&part.to_string_lossy());
            key.push('\0');
        }
        key
    }

    /// The program's name, for spans and errors: its last path component.
    pub(crate) fn name(&self) -> Arc<str> {
        let name = Path::new(&self.program)
            .file_name()
            .unwrap_or(&self.program)
            .to_string_lossy();
        Arc::from(name.as_ref())
    }
}

impl fmt::Debug for StdioCommand {
    // Values of the environment and the arguments may hold secrets (a
    // token on the command line is common): names and counts only.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let env: Vec<_> = self.env.iter().map(|(name, _)| name).collect();
        f.debug_struct("StdioCommand")
            .field("program", &self.program)
            .field("args", &self.args.len())
            .field("env", &env)
            .field("cwd", &self.cwd)
            .field("inherit_env", &self.inherit_env)
            .field("grace", &self.grace)
            .finish_non_exhaustive()
    }
}

/// A spawned server: its tree, and the host's ends of its three standard
/// streams.
pub(crate) struct Spawned {
    /// The process tree, released by `ProcessTree::release` or on drop.
    pub(crate) tree: ProcessTree,
    /// The server's stdin: dropping it is the first step of a release.
    pub(crate) stdin: process::Stdin,
    /// The server's stdout (its messages).
    pub(crate) stdout: process::Stdout,
    /// The server's stderr (its log), to be drained always.
    pub(crate) stderr: process::Stderr,
}

/// A started server, before its pipes are read: the tree (for the guard
/// stack, at once), the wire its generations send on, and its pipes.
pub(crate) struct Started {
    pub(crate) tree: ProcessTree,
    pub(crate) wire: StdioWire,
    pub(crate) io: Io,
}

/// A started server's pipes and what its reader needs.
pub(crate) struct Io {
    pub(crate) stdin: process::Stdin,
    pub(crate) stdout: process::Stdout,
    pub(crate) stderr: process::Stderr,
    /// The writer's lines, from the wire.
    pub(crate) outgoing: mpsc::Receiver<Vec<u8>>,
    /// What the writer shares with the wire.
    pub(crate) lane: Arc<StdinLane>,
    pub(crate) tail: StderrTail,
    pub(crate) exit: watch::Receiver<Option<std::process::ExitStatus>>,
    pub(crate) program: Arc<str>,
    pub(crate) max_line: usize,
    pub(crate) max_batch: usize,
    pub(crate) account: Account,
    /// What its stdout had that is not JSON-RPC.
    pub(crate) noise: framing::Noise,
}

/// Starts `command`'s process: the environment it gets, its program found
/// on that `PATH`, spawned in a group of its own under its watchdog, and
/// waited for until it is exec'd. Nothing is read or written yet.
pub(crate) async fn start(
    command: &StdioCommand,
    account: &Account,
    config: &TransportConfig,
    client_meta: Arc<serde_json::Map<String, Value>>,
) -> Result<Started> {
    let env = env::child_env(command.inherit_env, &command.allow_env, &command.env);
    let program =
        env::resolve_program(&command.program, env::path_of(&env), command.cwd.as_deref())?;
    let spawned = process::spawn(&program, &command.args, &env, command.cwd.as_deref()).await?;
    tracing::debug!(
        group = spawned.tree.group(),
        watchdog = spawned.tree.watchdog(),
        program = %command.name(),
        "started a stdio server"
    );
    let name = command.name();
    let (outgoing_tx, outgoing) = mpsc::channel(crate::transport::OUTGOING_LINES);
    let lane = Arc::new(StdinLane::default());
    let wire = StdioWire::new(outgoing_tx, lane.clone(), account.clone(), name.clone())
        .with_client_meta(client_meta);
    let exit = spawned.tree.exit();
    Ok(Started {
        tree: spawned.tree,
        wire,
        io: Io {
            stdin: spawned.stdin,
            stdout: spawned.stdout,
            stderr: spawned.stderr,
            outgoing,
            lane,
            tail: StderrTail::new(command.stderr_tail),
            exit,
            program: name,
            max_line: config.max_json_body,
            max_batch: config.max_batch_messages,
            account: account.clone(),
            noise: framing::Noise::default(),
        },
    })
}

/// What the wire and the writer task share of a server's stdin: a line
/// the writer would take at once (nothing queued before it, the pipe has
/// room) is written straight from the sender's thread, saving the writer's
/// wake-up; any other goes through the writer's channel, in order.
#[derive(Default)]
pub(crate) struct StdinLane {
    state: std::sync::Mutex<LaneState>,
}

#[derive(Default)]
struct LaneState {
    /// The pipe while the writer task runs (it puts it here and takes it
    /// back when it goes, so the pipe closes with the writer).
    #[cfg(unix)]
    stdin: Option<Arc<process::Stdin>>,
    /// Lines on their way through the writer: reserved, queued or being
    /// written. A line goes straight in only when there are none.
    queued: usize,
}

/// Whether [`StdinLane::write_now`] wrote the line.
pub(crate) enum Now {
    /// Written whole.
    #[cfg_attr(not(unix), allow(dead_code))] // nothing is written straight in elsewhere
    Written,
    /// Not written: it must go through the writer (counted by the ticket).
    Queue(Ticket),
}

/// A line counted as on its way through the writer: uncounted on drop
/// unless [`Ticket::handed`] says the writer has it.
pub(crate) struct Ticket {
    lane: Arc<StdinLane>,
    handed: bool,
}

impl Ticket {
    /// The line is in the writer's channel: the writer uncounts it once
    /// it is written.
    pub(crate) fn handed(mut self) {
        self.handed = true;
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if !self.handed {
            self.lane.written();
        }
    }
}

/// The most written to a pipe at once with no other write interleaved
/// (`PIPE_BUF`: 4096 on Linux, 512 the least POSIX allows): a non-blocking
/// write of a line this long lands whole or not at all.
#[cfg(unix)]
const PIPE_ATOMIC: usize = if cfg!(target_os = "linux") { 4096 } else { 512 };

impl StdinLane {
    /// Writes `line` (ending in its newline) now if nothing is queued
    /// before it and the pipe takes it whole; else counts it as queued:
    /// the caller hands it to the writer's channel and marks the ticket.
    pub(crate) fn write_now(self: &Arc<Self>, line: &[u8]) -> Now {
        #[cfg(not(unix))]
        let _ = line;
        let mut state = crate::sync::lock(&self.state);
        #[cfg(unix)]
        if state.queued == 0 && line.len() <= PIPE_ATOMIC {
            if let Some(stdin) = &state.stdin {
                // A pipe takes a non-blocking write of at most PIPE_BUF
                // whole or not at all (POSIX). Not taken (full, or an
                // error) goes to the writer, which meets the same error
                // and ends as it always has.
                if matches!(stdin.try_write(line), Ok(written) if written == line.len()) {
                    return Now::Written;
                }
            }
        }
        state.queued += 1;
        Now::Queue(Ticket {
            lane: self.clone(),
            handed: false,
        })
    }

    /// Lines on their way through the writer now.
    #[cfg(test)]
    pub(crate) fn queued(&self) -> usize {
        crate::sync::lock(&self.state).queued
    }

    /// One line the writer had is written (or given up).
    fn written(&self) {
        let mut state = crate::sync::lock(&self.state);
        state.queued = state.queued.saturating_sub(1);
    }
}

/// Writes the lines handed over to the child's stdin, whole, until the
/// wire is gone or the child stops reading; then drops stdin, which
/// closes it (the server's signal to exit). While it runs, the wire may
/// write a line straight in when none is queued (see [`StdinLane`]).
pub(crate) async fn write_lines(
    stdin: process::Stdin,
    lane: Arc<StdinLane>,
    mut outgoing: mpsc::Receiver<Vec<u8>>,
) {
    #[cfg(unix)]
    let (stdin, _open) = {
        let stdin = Arc::new(stdin);
        crate::sync::lock(&lane.state).stdin = Some(stdin.clone());
        // The lane lets go of the pipe however this future ends, so it
        // closes with the writer.
        let lane = lane.clone();
        let open = scopeguard::guard((), move |()| {
            crate::sync::lock(&lane.state).stdin = None;
        });
        (stdin, open)
    };
    #[cfg(not(unix))]
    let mut stdin = stdin;
    while let Some(line) = outgoing.recv().await {
        #[cfg(unix)]
        let written = write_all(&stdin, &line).await;
        #[cfg(not(unix))]
        let written = stdin.write_all(&line).await;
        lane.written();
        if let Err(error) = written {
            tracing::debug!(%error, "a stdio server's stdin is closed");
            return;
        }
    }
}

/// `line`, all of it, to a pipe the lane shares.
#[cfg(unix)]
async fn write_all(stdin: &process::Stdin, mut line: &[u8]) -> std::io::Result<()> {
    while !line.is_empty() {
        stdin.writable().await?;
        match stdin.try_write(line) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(written) => line = &line[written..],
            Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(error) => return Err(error),
        }
    }
    Ok(())
}
