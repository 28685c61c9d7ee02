//! A stdio server's process tree as a resource: spawned in a session and
//! process group of its own, under a watchdog, released by the spec's
//! sequence, and never outliving the host.
//!
//! # The tree
//!
//! A server is often a wrapper (`npx`, `uvx`, `sh -c`) whose real server is
//! a grandchild, and wrappers rarely forward signals: killing the pid we
//! spawned leaves the grandchild running, reparented to init. So every
//! signal goes to the whole process group, and the server starts one of its
//! own with `setsid()` (also a session of its own: a terminal's Ctrl-C to
//! the host's foreground group does not reach servers). The group id is
//! the server's pid.
//!
//! # The watchdog
//!
//! Releasing on every way out of the host's code is not enough: a host
//! killed with SIGKILL, aborted by a panic, or ended by `exit` runs no
//! destructor, and its servers must not survive it. And a descendant that
//! leaves the group (a `setsid` child, a double-forked daemon) gets no
//! group signal at all. So the server's parent is not the host but its
//! **watchdog**, `mcp-watchdog` (`watchdog.c`): a program of its own, a
//! few KiB embedded in the crate (see `watchdog`). The host starts it once
//! as its *launcher* (see `launcher`) with `posix_spawn` (no `pre_exec`: no
//! code of the host runs in the child, and nothing of the host's memory is
//! copied, so a spawn costs the same whatever the host's size), and the
//! launcher forks a watchdog per server (ahead of the request: a spare
//! waits for it), which holds its own few pages, not a copy-on-write image
//! of the host's heap. Where the launcher cannot
//! serve, the watchdog is `posix_spawn`ed itself, the host's child.
//!
//! 1. The host makes a Unix socket pair, the *control socket*, and the
//!    server's three pipes. The launcher gets, in one message, the
//!    watchdog's end of the socket, the pipes' server ends and the
//!    server's path, arguments, environment and working directory, and
//!    forks the watchdog, which puts them in place and says its pid. (A
//!    watchdog started as a program gets its end of the socket as its
//!    stdin and the stdout and stderr pipes as its own; the stdin pipe's
//!    read end follows over the socket, `SCM_RIGHTS`, since std puts
//!    nothing on descriptors above 2.) The host's end is close-on-exec,
//!    so it closes when the host process dies (whatever its threads do),
//!    or when the tree lets it go: that end of file is the *lifeline*.
//! 2. The watchdog leaves the host's session, becomes (Linux) a child
//!    subreaper, so every orphan of the tree is reparented to it and not to
//!    init, opens a pidfd of the host (Linux: the host's death is seen even
//!    if a fork of the host holds the socket), closes every descriptor the
//!    host let through, and starts the server (on Linux a clone sharing its
//!    memory until the exec, as `posix_spawn` does; a fork elsewhere): a
//!    session and group of its
//!    own, default signal dispositions, an empty mask, SIGKILL as its
//!    parent-death signal (the watchdog is single-threaded, so this holds),
//!    its stdin in place, then `execve` of the resolved path: no `PATH`
//!    search, no shell for a file in no executable format.
//! 3. It reports over the socket: the server's pid once it is exec'd, or
//!    the exec's `errno` (nothing ran: [`spawn`] fails with it, naming the
//!    program); later the server's status when it is reaped, and that the
//!    tree is gone just before it exits. It ignores the
//!    signals a release or a terminal sends, and ends when nothing of the
//!    tree is left: by itself once every child is reaped; at once, killing
//!    the server's group and then every child it has (reparented
//!    daemons included, and the groups they lead) until none is left, when
//!    the lifeline reads end of file or when the host dies. At a release's
//!    SIGTERM step the host asks it to send SIGTERM to those children too,
//!    so a daemon gets the same sequence as the group.
//!
//! The exit watch's status ([`ProcessTree::exit`]) is the server's, seen
//! once the watchdog is gone, that is once the whole tree is. A watchdog
//! killed from outside (SIGKILL: it ignores the signals a release sends)
//! still takes its tree: the server dies of its parent-death signal, and
//! the host, seeing the watchdog end without having reported the tree
//! gone, sends the server's group SIGKILL ([`ProcessEnd::WatchdogEnded`]).
//! Only orphans already reparented to it then escape.
//!
//! # Elsewhere
//!
//! macOS and the BSDs run the same watchdog with the same lifeline, less
//! what Linux alone has: no child subreaper (a descendant that leaves the
//! group is reparented to init and not reached), no parent-death signal
//! (a watchdog killed from outside leaves the server to the host's group
//! SIGKILL), no pidfd. Off Unix this module is replaced by `elsewhere`,
//! which refuses to start a server; Windows' planned answer is a Job Object with
//! `JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE`, which the system closes with the
//! host.

// Raw libc calls around the spawn (signals to groups), each with its
// proof; the watchdog's own code is C and runs in a process of its own.
#![allow(unsafe_code)]

use std::ffi::OsString;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::process::ExitStatusExt as _;
use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::io::AsyncReadExt as _;
use tokio::net::unix::OwnedWriteHalf;
use tokio::sync::watch;

use super::Spawned;
use super::end::{Grace, KILL_WAIT, ProcessEnd};
use super::launcher;
use super::watchdog::{self, RECORD, Record};
use crate::error::{Error, Result};
use crate::ledger::{Count, Field};

/// The host's end of a server's stdin: a pipe tokio writes without a
/// thread of its own.
pub(crate) type Stdin = tokio::net::unix::pipe::Sender;
/// The host's end of a server's stdout.
pub(crate) type Stdout = tokio::net::unix::pipe::Receiver;
/// The host's end of a server's stderr.
pub(crate) type Stderr = tokio::net::unix::pipe::Receiver;

/// Spawns `program` (already resolved: see `env::resolve_program`) with
/// exactly `env`, in `cwd`, with its three standard streams piped, in a
/// session and process group of its own, under its watchdog (see the
/// module docs), and waits until it is exec'd. Must run inside a tokio
/// runtime.
///
/// A working directory that is not one, and a program the system refuses
/// to run (missing, not executable, in no executable format, a missing
/// `#!` interpreter), are [`Error::is_builder`] errors naming it: the
/// configuration is wrong, and trying again would fail again. A lack of
/// resources (processes, descriptors, memory) is a retryable transport
/// error. Nothing is left running after an error, nor when the future is
/// dropped (the lifeline closes: the watchdog ends what it started).
pub(crate) async fn spawn(
    program: &Path,
    args: &[OsString],
    env: &[(OsString, OsString)],
    cwd: Option<&Path>,
) -> Result<Spawned> {
    let image = watchdog::image().map_err(|error| {
        Error::stdio(Box::new(error))
            .with_message(format!("could not start {program:?}: no watchdog"))
    })?;
    spawn_with(image.path(), true, program, args, env, cwd).await
}

/// [`spawn`], under the watchdog program at `image`, run as a program.
#[cfg(test)]
async fn spawn_under(
    image: &Path,
    program: &Path,
    args: &[OsString],
    env: &[(OsString, OsString)],
    cwd: Option<&Path>,
) -> Result<Spawned> {
    spawn_with(image, false, program, args, env, cwd).await
}

/// What the launcher is sent for one server (see `watchdog.c`): a native
/// `u32` argc and envc, then NUL-terminated strings: the working directory
/// (the host's, made explicit: the launcher's own may be older), the path,
/// `argv` (the path first), `NAME=VALUE`. None when it cannot say it: a
/// NUL inside a string (refused, naming it, by the other way), no working
/// directory of the host's to name.
fn launch_request(
    program: &Path,
    args: &[OsString],
    env: &[(OsString, OsString)],
    cwd: Option<&Path>,
) -> Option<Vec<u8>> {
    // Absolute: the launcher's own directory is not the host's.
    let cwd = match cwd {
        Some(cwd) => std::path::absolute(cwd).ok()?,
        None => std::env::current_dir().ok()?,
    };
    let argc = u32::try_from(args.len() + 1).ok()?;
    let envc = u32::try_from(env.len()).ok()?;
    let mut request = Vec::with_capacity(256);
    request.extend_from_slice(&argc.to_ne_bytes());
    request.extend_from_slice(&envc.to_ne_bytes());
    let mut string = |parts: &[&[u8]]| -> Option<()> {
        for part in parts {
            if part.contains(&0) {
                return None;
            }
            request.extend_from_slice(part);
        }
        request.push(0);
        Some(())
    };
    string(&[cwd.as_os_str().as_encoded_bytes()])?;
    string(&[program.as_os_str().as_encoded_bytes()])?;
    string(&[program.as_os_str().as_encoded_bytes()])?;
    for arg in args {
        string(&[arg.as_encoded_bytes()])?;
    }
    for (name, value) in env {
        string(&[name.as_encoded_bytes(), b"=", value.as_encoded_bytes()])?;
    }
    Some(request)
}

/// [`spawn`]: the watchdog forked by the launcher if `by_launcher` and it can
/// be, else the image at `image` run as a program of its own.
async fn spawn_with(
    image: &Path,
    by_launcher: bool,
    program: &Path,
    args: &[OsString],
    env: &[(OsString, OsString)],
    cwd: Option<&Path>,
) -> Result<Spawned> {
    if let Some(cwd) = cwd {
        // Checked here to name it: the child's `chdir` failing reads the
        // same as a missing program (ENOENT).
        match std::fs::metadata(cwd) {
            Ok(meta) if meta.is_dir() => {}
            Ok(_) => {
                return Err(Error::builder(format!(
                    "the working directory {cwd:?} of {program:?} is not a directory"
                )));
            }
            Err(error) => {
                return Err(Error::builder(format!(
                    "the working directory {cwd:?} of {program:?} cannot be used: {error}"
                ))
                .with_source(error));
            }
        }
    }
    let unavailable = |what: &str, error: io::Error| {
        Error::stdio(Box::new(error)).with_message(format!("could not start {program:?}: {what}"))
    };
    let (control, watchdog_end) = std::os::unix::net::UnixStream::pair()
        .map_err(|error| unavailable("no socket for its watchdog", error))?;
    let watchdog_end = OwnedFd::from(watchdog_end);
    let (stdin_read, stdin_write) =
        watchdog::pipe().map_err(|error| unavailable("no pipe for its stdin", error))?;
    let (stdout_read, stdout_write) =
        watchdog::pipe().map_err(|error| unavailable("no pipe for its stdout", error))?;
    let (stderr_read, stderr_write) =
        watchdog::pipe().map_err(|error| unavailable("no pipe for its stderr", error))?;
    // Counted from here: a tree that is dropped before it is built is the
    // watchdog's to end, and it is gone as soon as it is (no wait here).
    let count = Count::new(Field::Processes, None);
    let launched = by_launcher
        .then(|| launch_request(program, args, env, cwd))
        .flatten()
        .and_then(|request| {
            let fds = [&watchdog_end, &stdin_read, &stdout_write, &stderr_write];
            launcher::launch(image, &request, fds)
        });
    let mut child = None;
    if launched.is_some() {
        // The launcher holds its copies now: ours must close, or the
        // watchdog's end is never seen closed, nor the server's stdout.
        drop((watchdog_end, stdin_read, stdout_write, stderr_write));
    } else {
        let mut command = tokio::process::Command::new(image);
        command
            .arg0(watchdog::NAME)
            .arg(std::process::id().to_string())
            // Entered in the server (empty: the host's), not by std, which
            // would fork the host where posix_spawn cannot chdir.
            .arg(cwd.map_or_else(OsString::new, |cwd| cwd.as_os_str().to_owned()))
            .arg(program)
            // The server's argv[0]: its path, as std gives a program.
            .arg(program)
            .args(args)
            // The server's environment, less what the dynamic loader reads:
            // that is sent on the control socket (below), so what is meant
            // for the server (LD_PRELOAD, LD_LIBRARY_PATH) never loads into
            // the watchdog.
            .env_clear()
            .envs(
                env.iter()
                    .filter(|(name, _)| !watchdog::for_the_loader(name))
                    .map(|(name, value)| (name, value)),
            )
            .stdin(Stdio::from(watchdog_end))
            .stdout(Stdio::from(stdout_write))
            .stderr(Stdio::from(stderr_write));
        let spawned = command.spawn();
        // The watchdog's end of the control socket and the server's
        // stdout and stderr, held by the command: ours must close now, or
        // a watchdog that dies before it reports is never seen gone.
        drop(command);
        let started = spawned.map_err(|error| {
            // What the system refused of the server's own argv or environment
            // (a NUL byte, past the argument size limit) is the configuration's.
            if error.kind() == io::ErrorKind::InvalidInput
                || error.raw_os_error() == Some(libc::E2BIG)
            {
                spawn_error(program, error)
            } else {
                unavailable("its watchdog did not start", error)
            }
        })?;
        // The host's copy of the read end closes when this returns: the
        // watchdog and the server hold theirs.
        watchdog::send_fd(&control, &stdin_read)
            .map_err(|error| unavailable("could not hand its stdin to its watchdog", error))?;
        watchdog::send_loader_env(&control, env).map_err(|error| {
            unavailable("could not hand its environment to its watchdog", error)
        })?;
        drop(stdin_read);
        child = Some(started);
    }
    let mut watchdog_pid = child
        .as_ref()
        .and_then(tokio::process::Child::id)
        .unwrap_or(0);
    control
        .set_nonblocking(true)
        .map_err(|error| unavailable("control socket", error))?;
    let control = tokio::net::UnixStream::from_std(control)
        .map_err(|error| unavailable("control socket", error))?;
    let (mut reports, lifeline) = control.into_split();
    // From here until the tree exists, a dropped future drops `lifeline`
    // and `child`: the watchdog ends the tree, and tokio (or the launcher)
    // reaps it.
    let mut record = [0u8; RECORD];
    let group = loop {
        let reading = reports.read_exact(&mut record);
        let first = if let Some(generation) = launched.filter(|_| watchdog_pid == 0) {
            // A watchdog of the launcher's takes it at once: a launcher
            // whose do not (stopped, wedged) is let go, so the next spawn starts another, and this
            // one fails retryably instead of waiting on it.
            match tokio::time::timeout(launcher::FORK_WAIT, reading).await {
                Ok(read) => read.ok().map(|_| Record::parse(record)),
                Err(_elapsed) => {
                    launcher::abandon(generation);
                    return Err(Error::stdio(Box::new(io::Error::from(
                        io::ErrorKind::TimedOut,
                    )))
                    .with_message(format!(
                        "could not start {program:?}: the stdio launcher started no watchdog \
                         within {:?}",
                        launcher::FORK_WAIT
                    )));
                }
            }
        } else {
            reading.await.ok().map(|_| Record::parse(record))
        };
        match first {
            Some(Some(Record::Watchdog(pid))) => watchdog_pid = pid,
            Some(Some(Record::Started(pid))) => break pid,
            Some(Some(Record::NotStarted(errno))) => {
                // It exits at once: reaped here (or by the launcher), so
                // nothing, not even a zombie, outlives the error.
                if let Some(mut child) = child {
                    let _ = child.wait().await;
                }
                return Err(spawn_error(program, io::Error::from_raw_os_error(errno)));
            }
            Some(Some(Record::NoDirectory(errno))) => {
                if let Some(mut child) = child {
                    let _ = child.wait().await;
                }
                let error = io::Error::from_raw_os_error(errno);
                let cwd = cwd.unwrap_or(Path::new("."));
                return Err(Error::builder(format!(
                    "the working directory {cwd:?} of {program:?} cannot be used: {error}"
                ))
                .with_source(error));
            }
            Some(_) | None => {
                drop(lifeline);
                let status = match child {
                    Some(mut child) => child
                        .wait()
                        .await
                        .map_or_else(|error| error.to_string(), |status| status.to_string()),
                    None => "forked by the launcher".to_owned(),
                };
                return Err(Error::stdio(Box::new(io::Error::other(format!(
                    "the watchdog ended before starting the server ({status})"
                ))))
                .with_message(format!("could not start {program:?}")));
            }
        }
    };
    let stdin = tokio::net::unix::pipe::Sender::from_owned_fd(stdin_write)
        .map_err(|error| unavailable("its stdin", error))?;
    let stdout = tokio::net::unix::pipe::Receiver::from_owned_fd(stdout_read)
        .map_err(|error| unavailable("its stdout", error))?;
    let stderr = tokio::net::unix::pipe::Receiver::from_owned_fd(stderr_read)
        .map_err(|error| unavailable("its stderr", error))?;
    let (ended, exit) = watch::channel(None);
    let outlived = Arc::new(AtomicBool::new(false));
    let waiter = tokio::spawn({
        let outlived = Arc::clone(&outlived);
        async move {
            // Until the watchdog is gone: it alone holds the other end.
            let (mut server, mut done) = (None, false);
            while reports.read_exact(&mut record).await.is_ok() {
                match Record::parse(record) {
                    Some(Record::Reaped(raw)) => server = Some(ExitStatus::from_raw(raw)),
                    Some(Record::Done) => done = true,
                    _ => {}
                }
            }
            // The launcher's children are its to reap; ours are reaped here.
            let own = match child {
                Some(mut child) => match child.wait().await {
                    Ok(own) => Some(own),
                    // Only when the system reaped it for us (SIGCHLD
                    // ignored): the closed watch says so.
                    Err(error) => {
                        tracing::warn!(%error, group, "could not wait for a stdio server");
                        return;
                    }
                },
                None => None,
            };
            let status = match server {
                // It says it is done only once the whole tree is gone.
                Some(status) if done => status,
                _ => {
                    // Killed from outside (it ignores every other signal):
                    // what it watched is ended here. The group's id is not
                    // someone else's yet: it stays taken while a member lives.
                    outlived.store(true, Ordering::Relaxed);
                    kill_group(group, libc::SIGKILL);
                    own.unwrap_or_else(|| ExitStatus::from_raw(libc::SIGKILL))
                }
            };
            ended.send_replace(Some(status));
        }
    });
    Ok(Spawned {
        tree: ProcessTree {
            group,
            watchdog: watchdog_pid,
            exit,
            outlived,
            lifeline: Some(lifeline),
            waiter,
            count: Some(count),
            stage: Stage::Running,
            end: None,
        },
        stdin,
        stdout,
        stderr,
    })
}

/// The error of a failed spawn: the configuration's when the system
/// refused the program, else a retryable lack of resources.
fn spawn_error(program: &Path, error: io::Error) -> Error {
    let configuration = matches!(
        error.kind(),
        io::ErrorKind::NotFound | io::ErrorKind::PermissionDenied | io::ErrorKind::InvalidInput
    ) || matches!(
        error.raw_os_error(),
        Some(libc::ENOEXEC | libc::ENOTDIR | libc::E2BIG | libc::ELOOP | libc::ENAMETOOLONG)
    );
    if !configuration {
        return Error::stdio(Box::new(error)).with_message(format!("could not start {program:?}"));
    }
    // The file is there, yet the system found nothing: it is a script whose
    // `#!` interpreter is missing.
    let hint = if error.kind() == io::ErrorKind::NotFound && program.is_file() {
        " (the interpreter named on its #! line may be missing)"
    } else if error.raw_os_error() == Some(libc::ENOEXEC) {
        // Not run with a shell, as execvp would: its first line would run
        // as shell code.
        " (in no executable format: a script without its #! line, or a truncated binary)"
    } else {
        ""
    };
    Error::builder(format!("could not start {program:?}: {error}{hint}")).with_source(error)
}

/// How far a release went, so that a release cut short and called again
/// goes on from there, and its report says which step ended the tree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    /// No signal sent: an end now is the server's own.
    Running,
    /// SIGTERM sent to the group.
    Terminating,
    /// SIGKILL sent to the group.
    Killing,
}

/// What a wait for the tree's end saw.
enum Seen {
    /// The tree ended, with this status.
    Ended(ExitStatus),
    /// Still running when the wait's time was up.
    Running,
    /// Its end cannot be observed (the wait for it failed).
    Lost,
}

/// A stdio server's process tree, held from its spawn until it is seen
/// gone: released by [`release`](Self::release), else killed on drop.
pub(crate) struct ProcessTree {
    /// The group's id: the server's pid.
    group: u32,
    /// The watchdog's pid (the launcher's child, or the host's).
    watchdog: u32,
    /// The tree's end, as the waiter task saw it.
    exit: watch::Receiver<Option<ExitStatus>>,
    /// Set by the waiter when the watchdog ended before the tree it
    /// watched (killed from outside).
    outlived: Arc<AtomicBool>,
    /// The host's end of the control socket, the lifeline: dropping it
    /// makes the watchdog end the whole tree.
    lifeline: Option<OwnedWriteHalf>,
    /// The task that reads the watchdog's reports and reaps it.
    waiter: tokio::task::JoinHandle<()>,
    /// The ledger's count of this tree, until it is seen gone.
    count: Option<Count>,
    /// How far a release went.
    stage: Stage,
    /// The release's report, once it finished.
    end: Option<ProcessEnd>,
}

impl ProcessTree {
    /// The process group's id (the server's pid).
    pub(crate) fn group(&self) -> u32 {
        self.group
    }

    /// The watchdog's pid.
    pub(crate) fn watchdog(&self) -> u32 {
        self.watchdog
    }

    /// A watch of the tree's end: `None` while it runs, then its status.
    ///
    /// The status is the server's own (its exit code, or the signal that
    /// ended it), seen once the server and all its descendants are gone;
    /// the watchdog's own if it was killed from outside (SIGKILL for one
    /// the launcher forked: its status is the launcher's to see). The
    /// watch closes still `None` if the end cannot be observed (the host
    /// ignores SIGCHLD).
    pub(crate) fn exit(&self) -> watch::Receiver<Option<ExitStatus>> {
        self.exit.clone()
    }

    /// The spec's shutdown, for a caller that has already closed the
    /// child's stdin (dropped the `ChildStdin`): wait `grace.stdin` for the
    /// tree to end by itself, then SIGTERM to the whole group and wait
    /// `grace.terminate`, then SIGKILL to the whole group and wait (at most
    /// 2 s) for the reap. Bounded in total by `grace.stdin +
    /// grace.terminate + 2 s`.
    ///
    /// Cancel-safe: dropped half-way, the tree's `Drop` finishes the job
    /// (SIGKILL), and a later call goes on from the step reached.
    /// Idempotent: once finished, it returns the same report at once.
    pub(crate) async fn release(&mut self, grace: Grace) -> ProcessEnd {
        if let Some(end) = &self.end {
            if *end != ProcessEnd::Unconfirmed || self.exit.borrow().is_none() {
                return end.clone();
            }
            // Seen gone since: it did end, after the SIGKILL.
            self.stage = Stage::Killing;
        }
        let end = self.release_steps(grace).await;
        if end != ProcessEnd::Unconfirmed {
            self.count = None;
        }
        self.end = Some(end.clone());
        end
    }

    /// The steps of [`release`](Self::release), from the stage reached.
    async fn release_steps(&mut self, grace: Grace) -> ProcessEnd {
        if self.stage == Stage::Running {
            match self.wait_end(grace.stdin).await {
                Seen::Ended(status) if self.outlived.load(Ordering::Relaxed) => {
                    return ProcessEnd::WatchdogEnded(status);
                }
                Seen::Ended(status) => return ProcessEnd::Exited(status),
                Seen::Lost => return ProcessEnd::Unconfirmed,
                Seen::Running => {}
            }
            self.stage = Stage::Terminating;
            self.signal(libc::SIGTERM);
            // And what left the group (daemons), through the watchdog. One
            // byte into an idle socket's buffer: it never blocks.
            if let Some(lifeline) = &self.lifeline {
                watchdog::send_terminate(lifeline);
            }
        }
        if self.stage == Stage::Terminating {
            match self.wait_end(grace.terminate).await {
                Seen::Ended(_) => return ProcessEnd::Terminated,
                Seen::Lost => return ProcessEnd::Unconfirmed,
                Seen::Running => {}
            }
            self.stage = Stage::Killing;
            self.signal(libc::SIGKILL);
        }
        // The watchdog then ends the rest: descendants that left the group
        // (daemons) are its children by now, or become so as their parents
        // die.
        drop(self.lifeline.take());
        match self.wait_end(KILL_WAIT).await {
            Seen::Ended(_) => ProcessEnd::Killed,
            Seen::Running | Seen::Lost => ProcessEnd::Unconfirmed,
        }
    }

    /// Waits up to `bound` for the tree's end.
    async fn wait_end(&mut self, bound: Duration) -> Seen {
        let waited = tokio::time::timeout(bound, self.exit.wait_for(Option::is_some))
            .await
            .map(|seen| seen.map(|status| *status));
        match waited {
            Ok(Ok(Some(status))) => Seen::Ended(status),
            Ok(Ok(None)) => Seen::Lost,
            // Closed: the waiter is done; what it left is the answer.
            Ok(Err(_closed)) => match *self.exit.borrow() {
                Some(status) => Seen::Ended(status),
                None => Seen::Lost,
            },
            Err(_elapsed) => Seen::Running,
        }
    }

    /// Sends `signal` to the whole group, unless the tree is known gone:
    /// its group id may then be reused by another.
    fn signal(&self, signal: libc::c_int) {
        if self.exit.borrow().is_none() && self.exit.has_changed().is_ok() {
            kill_group(self.group, signal);
        }
    }
}

impl Drop for ProcessTree {
    /// Never blocks: SIGKILL to the group unless it is known gone, the
    /// lifeline closed (the watchdog ends the rest of the tree), the
    /// waiter stopped; the watchdog is then reaped by tokio's orphan reaper
    /// (which is why it is not `kill_on_drop`: it must live to end the
    /// tree, and it might be a pid already reaped).
    fn drop(&mut self) {
        if self
            .end
            .as_ref()
            .is_none_or(|end| *end == ProcessEnd::Unconfirmed)
        {
            self.signal(libc::SIGKILL);
        }
        drop(self.lifeline.take());
        self.waiter.abort();
    }
}

/// How a process ended, in words: "exited with status 1", "was killed by
/// signal 9 (SIGKILL)".
pub(crate) fn ended_how(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with status {code}"),
        (None, Some(signal)) => match signal_name(signal) {
            Some(name) => format!("was killed by signal {signal} ({name})"),
            None => format!("was killed by signal {signal}"),
        },
        (None, None) => format!("ended ({status})"),
    }
}

/// The usual name of the signals that end a server.
fn signal_name(signal: i32) -> Option<&'static str> {
    Some(match signal {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGTERM => "SIGTERM",
        _ => return None,
    })
}

/// Sends `signal` to process group `group`, saying whether the group had
/// a member to send it to. A group already gone (ESRCH) is not a failure;
/// nothing else can fail for a group we created.
fn kill_group(group: u32, signal: libc::c_int) -> bool {
    let Ok(group) = libc::pid_t::try_from(group) else {
        return false;
    };
    // `kill(-g)` for a group: never `kill(0)` (our own group) or -1
    // (everything we may signal), which a 0 or 1 here would turn it into.
    if group <= 1 {
        return false;
    }
    // SAFETY: `kill` has no memory effects; it only sends a signal.
    let sent = unsafe { libc::kill(-group, signal) };
    if sent == -1 {
        let error = io::Error::last_os_error();
        if error.raw_os_error() != Some(libc::ESRCH) {
            tracing::warn!(%error, group, signal, "could not signal a stdio server's group");
        }
        return false;
    }
    true
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use crate::stdio::env::{DEFAULT_ENV_ALLOWLIST, child_env};
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::time::Instant;
    use tokio::io::{AsyncBufReadExt as _, AsyncRead, BufReader};

    /// The variable every test puts in its tree's environment (inherited by
    /// the whole tree), to find its processes in `/proc`.
    const MARKER: &str = "MCP_SCOPED_HTTP_TEST_MARKER";
    /// Which `#[ignore]`d helper a re-run of this test binary acts as, and
    /// the value it works with: `helper_name=value`. The helpers do nothing
    /// without it.
    const ROLE: &str = "MCP_SCOPED_HTTP_TEST_ROLE";
    /// A host secret, set only in a re-run test binary's environment.
    const SECRET: &str = "MCP_SCOPED_HTTP_TEST_SECRET";
    /// The script a re-run host spawns, when not its default.
    const SCRIPT: &str = "MCP_SCOPED_HTTP_TEST_SCRIPT";

    /// A value no other test (or earlier run) uses.
    fn unique(tag: &str) -> String {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.subsec_nanos());
        format!(
            "{tag}-{}-{}-{nanos}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        )
    }

    /// The default environment plus `MARKER=marker`.
    fn marked_env(marker: &str) -> Vec<(OsString, OsString)> {
        let allow: Vec<OsString> = DEFAULT_ENV_ALLOWLIST.iter().map(OsString::from).collect();
        child_env(false, &allow, &[(MARKER.into(), marker.into())])
    }

    /// A watchdog that dies before it reports (the OOM killer, an
    /// operator, a loader that fails): the spawn fails at once, naming it,
    /// and does not wait for a record that never comes. The host must hold
    /// no copy of the watchdog's end of the control socket for its end of
    /// file to be seen.
    #[tokio::test]
    async fn a_watchdog_that_dies_before_it_reports_fails_the_spawn_at_once() {
        let dir = std::env::temp_dir().join(unique("dying-watchdog"));
        std::fs::create_dir_all(&dir).unwrap();
        let image = dir.join("watchdog");
        // Lives past the host's sending of the server's stdin, then ends
        // with no record.
        std::fs::write(&image, "#!/bin/sh\nsleep 0.3\nexit 3\n").unwrap();
        std::fs::set_permissions(&image, std::os::unix::fs::PermissionsExt::from_mode(0o700))
            .unwrap();
        let spawned = tokio::time::timeout(
            Duration::from_secs(10),
            spawn_under(&image, Path::new("/bin/true"), &[], &[], None),
        )
        .await;
        let _ = std::fs::remove_dir_all(&dir);
        let error = match spawned {
            Err(_) => panic!("the spawn waited on a watchdog that was gone"),
            Ok(Ok(_)) => panic!("a server started with no watchdog"),
            Ok(Err(error)) => error,
        };
        assert!(
            error
                .to_string()
                .contains("the watchdog ended before starting the server"),
            "{error}"
        );
    }

    /// `/bin/sh -c script`, marked.
    async fn sh(script: &str, marker: &str) -> Spawned {
        let args = [OsString::from("-c"), OsString::from(script)];
        let spawned = tokio::time::timeout(
            Duration::from_secs(20),
            spawn(Path::new("/bin/sh"), &args, &marked_env(marker), None),
        )
        .await
        .expect("spawned in time");
        match spawned {
            Ok(spawned) => spawned,
            Err(error) => panic!("spawning /bin/sh failed: {error}"),
        }
    }

    /// [`sh`], once the script has said `up` on its stdout (read to there).
    async fn sh_up(script: &str, marker: &str) -> Spawned {
        let mut spawned = sh(script, marker).await;
        expect_line(
            &mut BufReader::new(&mut spawned.stdout),
            "up",
            Duration::from_secs(20),
        )
        .await;
        spawned
    }

    /// The first line a server writes on its stdout (20 s at the most).
    async fn first_line(stdout: Stdout) -> String {
        let mut line = String::new();
        tokio::time::timeout(
            Duration::from_secs(20),
            BufReader::new(stdout).read_line(&mut line),
        )
        .await
        .expect("a line in time")
        .expect("read");
        line
    }

    /// The processes whose environment holds `MARKER=marker` (a zombie's
    /// reads empty: it is gone but for its status), and the watchdogs over
    /// them: one the launcher forked has its (empty) environment, and lives
    /// only while it has a child of the tree.
    fn marked(marker: &str) -> Vec<u32> {
        let wanted = format!("{MARKER}={marker}");
        let Ok(dir) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        let mut found: Vec<u32> = dir
            .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
            .filter(|pid| {
                std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|environ| {
                    environ
                        .split(|&byte| byte == 0)
                        .any(|variable| variable == wanted.as_bytes())
                })
            })
            .collect();
        let watchdogs: Vec<u32> = found
            .iter()
            .filter_map(|&pid| stat(pid))
            .map(|(_, _, parent)| parent)
            .filter(|&parent| {
                stat(parent).is_some_and(|(comm, state, _)| comm == watchdog::NAME && state != 'Z')
            })
            .collect();
        found.extend(watchdogs);
        found.sort_unstable();
        found.dedup();
        found
    }

    /// `comm`, state and parent of `pid`, from `/proc/<pid>/stat`.
    fn stat(pid: u32) -> Option<(String, char, u32)> {
        let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let (head, tail) = text.rsplit_once(')')?;
        let comm = head.split_once(" (")?.1.to_owned();
        let mut fields = tail.split_whitespace();
        let state = fields.next()?.chars().next()?;
        let parent = fields.next()?.parse().ok()?;
        Some((comm, state, parent))
    }

    /// The live launcher the process `host` started, if any.
    fn launcher_of(host: u32) -> Option<u32> {
        std::fs::read_dir("/proc")
            .ok()?
            .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
            .find(|&pid| {
                stat(pid).is_some_and(|(comm, state, parent)| {
                    parent == host && comm == launcher::NAME && state != 'Z'
                })
            })
    }

    /// The live spare of `launcher` (see `watchdog.c`): its child that has
    /// its name still, not a watchdog's.
    fn spare_of(launcher: u32) -> Option<u32> {
        std::fs::read_dir("/proc")
            .ok()?
            .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
            .find(|&pid| {
                stat(pid).is_some_and(|(comm, state, parent)| {
                    parent == launcher && comm == launcher::NAME && state != 'Z'
                })
            })
    }

    /// The spare of `launcher` once there is one (10 s at the most).
    async fn until_spare(launcher: u32) -> u32 {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(spare) = spare_of(launcher) {
                return spare;
            }
            assert!(Instant::now() < deadline, "the launcher has no spare");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Sends `signal` to this process's launcher (there must be one: a
    /// server was spawned), or to its whole group (its spare too: it is a
    /// session leader, so its group's id is its pid); returns its pid.
    fn signal_my_launcher(signal: libc::c_int, group: bool) -> u32 {
        let launcher = launcher_of(std::process::id()).expect("a launcher");
        let pid = libc::pid_t::try_from(launcher).expect("a pid");
        let target = if group { -pid } else { pid };
        // SAFETY: a signal to this process's own launcher, or its group.
        assert_eq!(unsafe { libc::kill(target, signal) }, 0);
        launcher
    }

    /// Kills every process still carrying its marker when dropped: a test
    /// that fails half-way (or a guard removed to see a test fail) leaves
    /// nothing running.
    struct Sweep(String);

    impl Drop for Sweep {
        fn drop(&mut self) {
            for pid in marked(&self.0) {
                if let Ok(pid) = libc::pid_t::try_from(pid) {
                    // SAFETY: a signal to a leftover process of this test.
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                }
            }
        }
    }

    /// A new marker (tagged `tag`), with the [`Sweep`] of its processes.
    fn swept(tag: &str) -> (String, Sweep) {
        let marker = unique(tag);
        let sweep = Sweep(marker.clone());
        (marker, sweep)
    }

    /// Polls (up to `bound`) until no process carries `marker`; survivors
    /// are killed, then reported as a failure.
    async fn assert_gone(marker: &str, bound: Duration) {
        let deadline = Instant::now() + bound;
        let survivors = loop {
            let left = marked(marker);
            if left.is_empty() {
                return;
            }
            if Instant::now() >= deadline {
                break left;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        for &pid in &survivors {
            // SAFETY: a signal to a test's own leftover process.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
        }
        panic!("processes left after {bound:?}: {survivors:?}");
    }

    /// Reads lines until one equals `want` (up to `bound`).
    async fn expect_line<R: AsyncRead + Unpin>(
        reader: &mut BufReader<R>,
        want: &str,
        bound: Duration,
    ) {
        let read = async {
            let mut line = String::new();
            // Bounded by the timeout around it, and by the end of the stream.
            loop {
                line.clear();
                match reader.read_line(&mut line).await {
                    Ok(0) => panic!("the stream ended before {want:?}"),
                    Ok(_) if line.trim_end() == want => return,
                    Ok(_) => {}
                    Err(error) => panic!("reading for {want:?} failed: {error}"),
                }
            }
        };
        if tokio::time::timeout(bound, read).await.is_err() {
            panic!("no line {want:?} within {bound:?}");
        }
    }

    /// This test binary again, running the `#[ignore]`d helper `test` with
    /// `ROLE=role_value` and `envs`: stdin and stdout piped, killed if
    /// dropped.
    fn rerun(test: &str, role_value: &str, envs: &[(&str, &str)]) -> tokio::process::Child {
        let exe = std::env::current_exe().expect("the test binary's path");
        let mut command = tokio::process::Command::new(exe);
        command
            .args([
                "--exact",
                &format!("stdio::process::tests::{test}"),
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(ROLE, role_value)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true);
        for (name, value) in envs {
            command.env(name, value);
        }
        command.spawn().expect("re-running the test binary")
    }

    /// Re-runs the `#[ignore]`d helper `test` (with `envs`), its stdin
    /// closed at once, and expects it to pass within 60 s.
    async fn rerun_passes(test: &str, envs: &[(&str, &str)]) {
        let mut child = rerun(test, &format!("{test}="), envs);
        drop(child.stdin.take());
        let status = tokio::time::timeout(Duration::from_secs(60), child.wait())
            .await
            .expect("the re-run ends")
            .expect("waited");
        assert!(status.success(), "{status:?}");
    }

    /// In a re-run host: waits until its stdin ends (the test is done
    /// with it), 60 s at the most.
    async fn until_stdin_ends() {
        let mut stdin = tokio::io::stdin();
        let mut byte = [0u8; 1];
        let _ = tokio::time::timeout(
            Duration::from_secs(60),
            tokio::io::AsyncReadExt::read(&mut stdin, &mut byte),
        )
        .await;
    }

    /// The value of `ROLE` when this process is a re-run acting as `test`.
    fn role(test: &str) -> Option<String> {
        let value = std::env::var(ROLE).ok()?;
        let (name, value) = value.split_once('=')?;
        (name == test).then(|| value.to_owned())
    }

    /// A wrapper that starts the real server as its child and waits, like
    /// `npx`: it forwards no signal.
    const WRAPPER: &str = "sleep 1000 & echo up; wait";
    /// The same, ignoring SIGTERM (its child inherits that) and stdin EOF.
    const STUBBORN: &str = "trap '' TERM; sleep 1000 & echo up; wait";

    #[tokio::test]
    async fn a_wrapper_that_does_not_forward_signals_leaves_no_process() {
        let (marker, _sweep) = swept("wrapper");
        let Spawned {
            mut tree,
            stdin,
            stderr: _stderr,
            ..
        } = sh_up(WRAPPER, &marker).await;
        let tree_pids: Vec<u32> = marked(&marker)
            .into_iter()
            .filter(|&pid| pid != tree.watchdog())
            .collect();
        assert!(tree_pids.len() >= 2, "the wrapper and its child run");
        let group = libc::pid_t::try_from(tree.group()).expect("a pid");
        for pid in tree_pids {
            let pid = libc::pid_t::try_from(pid).expect("a pid");
            // SAFETY: plain queries of a process's ids.
            let (pgid, sid) = unsafe { (libc::getpgid(pid), libc::getsid(pid)) };
            assert_eq!(
                (pgid, sid),
                (group, group),
                "in the tree's own session and group"
            );
        }
        drop(stdin);
        let grace = Grace::default().stdin(Duration::from_millis(200));
        assert_eq!(tree.release(grace).await, ProcessEnd::Terminated);
        assert_gone(&marker, Duration::from_secs(5)).await;
        assert!(tree.count.is_none(), "the ledger no longer counts it");
        // Idempotent.
        assert_eq!(tree.release(grace).await, ProcessEnd::Terminated);
    }

    #[tokio::test]
    async fn a_server_that_exits_on_stdin_eof_reports_its_status_quickly() {
        let (marker, _sweep) = swept("eof");
        let Spawned {
            mut tree, stdin, ..
        } = sh("cat >/dev/null; exit 3", &marker).await;
        let exit = tree.exit();
        let started = Instant::now();
        drop(stdin);
        let end = tree.release(Grace::default()).await;
        let ProcessEnd::Exited(status) = end else {
            panic!("expected Exited, got {end:?}");
        };
        assert_eq!(status.code(), Some(3));
        assert!(
            started.elapsed() < Grace::default().stdin,
            "no signal was needed: {:?}",
            started.elapsed()
        );
        assert_eq!(*exit.borrow(), Some(status));
        assert_gone(&marker, Duration::from_secs(5)).await;
    }

    #[tokio::test]
    async fn a_server_ignoring_stdin_eof_and_sigterm_is_killed_within_the_bound() {
        let (marker, _sweep) = swept("stubborn");
        let Spawned {
            mut tree, stdin, ..
        } = sh_up(STUBBORN, &marker).await;
        drop(stdin);
        let grace = Grace::default()
            .stdin(Duration::from_millis(300))
            .terminate(Duration::from_millis(300));
        let started = Instant::now();
        assert_eq!(tree.release(grace).await, ProcessEnd::Killed);
        let took = started.elapsed();
        assert!(took >= grace.stdin + grace.terminate, "{took:?}");
        assert!(took < grace.stdin + grace.terminate + KILL_WAIT, "{took:?}");
        assert_gone(&marker, Duration::from_secs(5)).await;
    }

    #[tokio::test]
    async fn a_release_cut_short_goes_on_from_where_it_was() {
        let (marker, _sweep) = swept("cut");
        let Spawned {
            mut tree, stdin, ..
        } = sh_up(STUBBORN, &marker).await;
        drop(stdin);
        let grace = Grace::default()
            .stdin(Duration::from_millis(100))
            .terminate(Duration::from_secs(30));
        // Cut during the SIGTERM grace.
        let cut = tokio::time::timeout(Duration::from_millis(500), tree.release(grace)).await;
        assert!(cut.is_err(), "still in the SIGTERM grace");
        assert_eq!(tree.stage, Stage::Terminating);
        let grace = grace.terminate(Duration::from_millis(100));
        assert_eq!(tree.release(grace).await, ProcessEnd::Killed);
        assert_gone(&marker, Duration::from_secs(5)).await;
    }

    #[tokio::test]
    async fn dropping_the_tree_without_release_leaves_no_process() {
        let (marker, _sweep) = swept("dropped");
        let Spawned { tree, .. } = sh_up(WRAPPER, &marker).await;
        drop(tree);
        assert_gone(&marker, Duration::from_secs(5)).await;
    }

    #[tokio::test]
    async fn the_exit_watch_reports_the_servers_own_status_once_its_tree_is_gone() {
        let wait = |mut exit: watch::Receiver<Option<ExitStatus>>| async move {
            let status =
                tokio::time::timeout(Duration::from_secs(20), exit.wait_for(Option::is_some))
                    .await
                    .expect("the tree ends")
                    .expect("the watch holds its status");
            status.expect("some")
        };
        let (marker, _sweep) = swept("exit");
        let spawned = sh("exit 7", &marker).await;
        assert_eq!(wait(spawned.tree.exit()).await.code(), Some(7));

        // A death by signal is mirrored as that signal.
        let spawned = sh("kill -USR1 $$", &marker).await;
        assert_eq!(
            wait(spawned.tree.exit()).await.signal(),
            Some(libc::SIGUSR1)
        );

        // A descendant outliving the server: the status comes when it is
        // gone too.
        let started = Instant::now();
        let spawned = sh("sleep 0.5 & exit 5", &marker).await;
        assert_eq!(wait(spawned.tree.exit()).await.code(), Some(5));
        assert!(started.elapsed() >= Duration::from_millis(500));
        assert!(marked(&marker).is_empty(), "the whole tree is gone");
    }

    /// A server whose descendants leave its group, as language servers,
    /// browsers and helpers do: a `setsid` child, and a daemon
    /// double-forked by a `setsid` shell that exits at once. Then it says
    /// so and reads stdin until its end.
    const DAEMONS: &str = "setsid sleep 300 </dev/null >/dev/null 2>&1 & \
         setsid sh -c 'sleep 301 &' </dev/null >/dev/null 2>&1; \
         echo up; exec cat >/dev/null";

    /// Polls (bounded) until `n` processes carry `marker`.
    async fn until_marked(marker: &str, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while marked(marker).len() < n {
            assert!(
                Instant::now() < deadline,
                "{:?} of {n} processes",
                marked(marker)
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    #[tokio::test]
    async fn daemons_get_the_releases_sigterm_when_the_server_ends_by_itself() {
        let (marker, _sweep) = swept("daemons-release");
        let Spawned {
            mut tree, stdin, ..
        } = sh_up(DAEMONS, &marker).await;
        // The watchdog, the server and the two that left its group.
        until_marked(&marker, 4).await;
        let grace = Grace::default()
            .stdin(Duration::from_millis(300))
            .terminate(Duration::from_secs(10));
        let started = Instant::now();
        drop(stdin);
        // The server ends on stdin's end; its daemons do not, and get the
        // release's SIGTERM (no group signal reaches them).
        assert_eq!(tree.release(grace).await, ProcessEnd::Terminated);
        assert!(
            started.elapsed() < grace.stdin + grace.terminate,
            "{:?}",
            started.elapsed()
        );
        assert_gone(&marker, Duration::from_secs(5)).await;
    }

    #[tokio::test]
    async fn daemons_are_gone_after_a_release_that_kills_the_server() {
        let (marker, _sweep) = swept("daemons-kill");
        let script = format!("trap '' TERM; {DAEMONS}");
        let Spawned {
            mut tree,
            stdin: _stdin,
            ..
        } = sh_up(&script, &marker).await;
        until_marked(&marker, 4).await;
        // Its stdin is still open: only signals end it.
        let grace = Grace::default()
            .stdin(Duration::from_millis(100))
            .terminate(Duration::from_millis(100));
        assert_eq!(tree.release(grace).await, ProcessEnd::Killed);
        assert_gone(&marker, Duration::from_secs(5)).await;
    }

    #[tokio::test]
    async fn daemons_are_gone_when_the_tree_is_dropped() {
        let (marker, _sweep) = swept("daemons-drop");
        let Spawned {
            tree,
            stdin: _stdin,
            ..
        } = sh_up(DAEMONS, &marker).await;
        until_marked(&marker, 4).await;
        drop(tree);
        assert_gone(&marker, Duration::from_secs(5)).await;
    }

    #[tokio::test]
    async fn the_server_runs_in_its_working_directory() {
        let (marker, _sweep) = swept("cwd");
        let dir = std::env::temp_dir().join(unique("cwd"));
        std::fs::create_dir(&dir).expect("a temporary directory");
        let args = [OsString::from("-c"), OsString::from("pwd -P; read _")];
        let spawned = spawn(
            Path::new("/bin/sh"),
            &args,
            &marked_env(&marker),
            Some(&dir),
        )
        .await;
        let Spawned {
            tree: _tree,
            stdin: _stdin,
            stdout,
            ..
        } = spawned.expect("spawned");
        let line = first_line(stdout).await;
        let expected = dir.canonicalize().expect("canonical");
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(Path::new(line.trim_end()), expected);
    }

    /// The watchdog ignores SIGTERM, SIGPIPE and more, and blocks every
    /// signal while it starts the server in its own memory: none of that
    /// may reach the server.
    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn the_server_starts_with_default_signals_and_an_empty_mask() {
        let (marker, _sweep) = swept("signals");
        let args = [
            OsString::from("-E"),
            OsString::from("^Sig(Blk|Ign):"),
            OsString::from("/proc/self/status"),
        ];
        let spawned = spawn(Path::new("/bin/grep"), &args, &marked_env(&marker), None).await;
        let Spawned {
            tree: _tree,
            stdin: _stdin,
            stdout,
            ..
        } = spawned.expect("spawned");
        let mut text = String::new();
        tokio::time::timeout(
            Duration::from_secs(20),
            BufReader::new(stdout).read_to_string(&mut text),
        )
        .await
        .expect("its output in time")
        .expect("read");
        let mut lines: Vec<&str> = text.lines().map(str::trim_end).collect();
        lines.sort_unstable();
        assert_eq!(
            lines,
            ["SigBlk:\t0000000000000000", "SigIgn:\t0000000000000000"],
            "{text}"
        );
    }

    #[tokio::test]
    async fn a_file_in_no_executable_format_is_refused_and_never_run_by_a_shell() {
        let dir = std::env::temp_dir().join(unique("noexec"));
        std::fs::create_dir(&dir).expect("a temporary directory");
        let proof = dir.join("proof");
        let server = dir.join("server.js");
        // What a `.js` whose build dropped its `#!` line would run as, if
        // a shell ran it: this first line.
        std::fs::write(
            &server,
            format!("touch {}\nconsole.log('hi')\n", proof.display()),
        )
        .expect("write");
        std::fs::set_permissions(&server, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .expect("chmod");
        let failed = spawn(&server, &[], &marked_env(&unique("noexec")), None).await;
        let Err(error) = failed else {
            let _ = std::fs::remove_dir_all(&dir);
            panic!("spawned a file in no executable format");
        };
        let ran = proof.exists();
        let _ = std::fs::remove_dir_all(&dir);
        assert!(error.is_builder(), "{error}");
        let text = error.to_string();
        assert!(text.contains("server.js"), "{text}");
        assert!(text.contains("executable format"), "{text}");
        assert!(!ran, "its first line ran as shell code");
    }

    #[tokio::test]
    async fn the_watchdogs_cost_nothing_of_a_big_host() {
        let (marker, _sweep) = swept("heap");
        let mut host = rerun(
            "host_with_a_big_heap",
            &format!("host_with_a_big_heap={marker}"),
            &[],
        );
        let stdout = host.stdout.take().expect("piped");
        let mut lines = BufReader::new(stdout);
        let read = async {
            let mut line = String::new();
            // Bounded by the timeout around it, and by the end of the stream.
            loop {
                line.clear();
                if lines.read_line(&mut line).await.expect("read") == 0 {
                    panic!("the host ended without its figures");
                }
                if let Some(figures) = line.trim_end().strip_prefix("pss ") {
                    return figures.to_owned();
                }
            }
        };
        let figures = tokio::time::timeout(Duration::from_secs(120), read)
            .await
            .expect("the figures in time");
        drop(host.stdin.take());
        let _ = tokio::time::timeout(Duration::from_secs(30), host.wait()).await;
        let [host_kib, watchdogs_kib, count]: [u64; 3] = figures
            .split(' ')
            .map(|n| n.parse().expect("a number"))
            .collect::<Vec<_>>()
            .try_into()
            .expect("three figures");
        eprintln!("host and watchdogs, Pss in KiB, count: {figures}");
        assert_eq!(count, 4, "{figures}");
        assert!(host_kib > 200 * 1024, "the host holds its heap: {figures}");
        // 2 MiB each at most, whatever the host holds: no copy of its heap.
        assert!(watchdogs_kib < 4 * 2 * 1024, "{figures}");
    }

    /// The Pss of `pid` in KiB (`/proc/PID/smaps_rollup`).
    fn pss_kib(pid: u32) -> u64 {
        let text = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).unwrap_or_default();
        text.lines()
            .find_map(|line| line.strip_prefix("Pss:"))
            .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    }

    /// The host of `the_watchdogs_cost_nothing_of_a_big_host`: touches
    /// 256 MiB, starts 4 servers, rewrites its heap (a fork's copy would
    /// now be its own), and prints `pss HOST WATCHDOGS COUNT` (KiB).
    #[tokio::test]
    #[ignore = "a helper: run by the_watchdogs_cost_nothing_of_a_big_host"]
    async fn host_with_a_big_heap() {
        let Some(marker) = role("host_with_a_big_heap") else {
            return;
        };
        let _sweep = Sweep(marker.clone());
        let mut heap = vec![1u8; 256 << 20];
        let mut trees = Vec::new();
        for _ in 0..4 {
            let Spawned {
                tree,
                stdin,
                stderr,
                ..
            } = sh_up("echo up; exec cat >/dev/null", &marker).await;
            trees.push((tree, stdin, stderr));
        }
        for page in heap.chunks_mut(4096) {
            page[0] = page[0].wrapping_add(1);
        }
        let watchdogs: Vec<u32> = trees.iter().map(|(tree, ..)| tree.watchdog()).collect();
        let sum: u64 = watchdogs.iter().map(|&pid| pss_kib(pid)).sum();
        let host = pss_kib(std::process::id());
        std::hint::black_box(&heap);
        println!("\npss {host} {sum} {}", watchdogs.len());
        until_stdin_ends().await;
        drop(trees);
    }

    #[tokio::test]
    async fn the_host_killed_with_sigkill_leaves_no_process() {
        host_killed_with_sigkill(WRAPPER, 2).await;
    }

    #[tokio::test]
    async fn the_host_killed_with_sigkill_leaves_no_daemon() {
        host_killed_with_sigkill(DAEMONS, 4).await;
    }

    /// A re-run host spawns `script`; once `processes` of its tree run
    /// (the watchdog among them), it is killed with SIGKILL: nothing of
    /// the tree is left.
    async fn host_killed_with_sigkill(script: &str, processes: usize) {
        let (marker, _sweep) = swept("host");
        let mut host = rerun(
            "host_for_the_sigkill_test",
            &format!("host_for_the_sigkill_test={marker}"),
            &[(SCRIPT, script)],
        );
        let stdout = host.stdout.take().expect("piped");
        expect_line(
            &mut BufReader::new(stdout),
            &format!("tree up {marker}"),
            Duration::from_secs(60),
        )
        .await;
        until_marked(&marker, processes).await;
        let launcher = launcher_of(host.id().expect("running")).expect("the host's launcher");
        host.start_kill().expect("SIGKILL to the host");
        host.wait().await.expect("the host reaped");
        assert_gone(&marker, Duration::from_secs(10)).await;
        // The launcher goes with its host.
        let deadline = Instant::now() + Duration::from_secs(10);
        while stat(launcher).is_some_and(|(comm, state, _)| comm == launcher::NAME && state != 'Z')
        {
            assert!(Instant::now() < deadline, "the launcher outlived its host");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The host of `the_host_killed_with_sigkill_leaves_no_process`: spawns
    /// a wrapper with a child, says so, and waits to be killed (at most
    /// 60 s, or until its stdin closes).
    #[tokio::test]
    #[ignore = "a helper: run by the_host_killed_with_sigkill_leaves_no_process"]
    async fn host_for_the_sigkill_test() {
        let Some(marker) = role("host_for_the_sigkill_test") else {
            return;
        };
        let _sweep = Sweep(marker.clone());
        let script = std::env::var(SCRIPT).unwrap_or_else(|_| WRAPPER.to_owned());
        let Spawned {
            tree,
            stdin: _stdin,
            ..
        } = sh_up(&script, &marker).await;
        // On a line of its own: libtest's "test ... " has no newline yet.
        println!("\ntree up {marker}");
        until_stdin_ends().await;
        drop(tree);
    }

    #[tokio::test]
    async fn spawning_a_missing_program_or_in_a_missing_directory_fails_clearly() {
        let env = marked_env(&unique("missing"));
        let missing = Path::new("/nonexistent-mcp-scoped-http/no-such-server");
        let Err(error) = spawn(missing, &[], &env, None).await else {
            panic!("spawned a missing program");
        };
        assert!(error.is_builder(), "{error}");
        assert!(error.to_string().contains("no-such-server"), "{error}");

        let Err(error) = spawn(
            Path::new("/bin/sh"),
            &[],
            &env,
            Some(Path::new("/nonexistent-mcp-scoped-http")),
        )
        .await
        else {
            panic!("spawned in a missing directory");
        };
        assert!(error.is_builder(), "{error}");
        let text = error.to_string();
        assert!(text.contains("working directory"), "{text}");
        assert!(text.contains("/nonexistent-mcp-scoped-http"), "{text}");

        // And nothing is left: checked in a process of its own, where any
        // child at all would show.
        rerun_passes("child_for_the_spawn_failure_test", &[]).await;
    }

    /// In a process of its own: a failed spawn leaves no child, not even a
    /// zombie.
    #[tokio::test]
    #[ignore = "a helper: run by spawning_a_missing_program_or_in_a_missing_directory_fails_clearly"]
    async fn child_for_the_spawn_failure_test() {
        if role("child_for_the_spawn_failure_test").is_none() {
            return;
        }
        let env = marked_env(&unique("missing"));
        let missing = Path::new("/nonexistent-mcp-scoped-http/no-such-server");
        assert!(spawn(missing, &[], &env, None).await.is_err());
        // A script whose interpreter is missing fails at exec, in the
        // server, after the watchdog is up.
        let dir = std::env::temp_dir().join(unique("interp"));
        std::fs::create_dir(&dir).expect("a temporary directory");
        let script = dir.join("server");
        std::fs::write(&script, "#!/nonexistent-mcp-scoped-http/interp\n").expect("write");
        std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .expect("chmod");
        let failed = spawn(&script, &[], &env, None).await;
        let _ = std::fs::remove_dir_all(&dir);
        let Err(error) = failed else {
            panic!("spawned a script without its interpreter");
        };
        assert!(error.is_builder(), "{error}");
        assert!(error.to_string().contains("interpreter"), "{error}");
        let mut status = 0;
        // SAFETY: waitpid fills a valid int; no child of ours is expected
        // but the launcher, which runs.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        assert!(pid <= 0, "a child is left unreaped: {pid}");
        let me = std::process::id();
        let children: Vec<u32> = std::fs::read_dir("/proc")
            .expect("/proc")
            .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
            .filter(|&pid| {
                stat(pid).is_some_and(|(comm, _, parent)| parent == me && comm != launcher::NAME)
            })
            .collect();
        assert!(children.is_empty(), "children left: {children:?}");
    }

    #[tokio::test]
    async fn a_host_secret_reaches_the_server_only_when_everything_is_inherited() {
        rerun_passes("child_for_the_env_test", &[(SECRET, "hunter2")]).await;
    }

    #[tokio::test]
    async fn a_watchdog_killed_from_outside_leaves_no_process_and_says_so() {
        let (marker, _sweep) = swept("watchdog");
        let Spawned {
            mut tree,
            stdin,
            stderr: _stderr,
            ..
        } = sh_up(WRAPPER, &marker).await;
        let watchdog = libc::pid_t::try_from(tree.watchdog()).expect("a pid");
        // SAFETY: a signal to this test's own watchdog.
        assert_eq!(unsafe { libc::kill(watchdog, libc::SIGKILL) }, 0);
        // The wrapper's child is in the group but no child of the watchdog's
        // death signal: the host's group SIGKILL ends it.
        assert_gone(&marker, Duration::from_secs(5)).await;
        drop(stdin);
        match tree.release(Grace::default()).await {
            ProcessEnd::WatchdogEnded(status) => {
                assert_eq!(status.signal(), Some(libc::SIGKILL), "{status}");
            }
            other => panic!("reported as {other:?}"),
        }
    }

    /// Closes `spawned`'s stdin and releases it: it must exit by itself,
    /// with success.
    async fn ends_by_itself(spawned: Spawned) {
        let Spawned {
            mut tree, stdin, ..
        } = spawned;
        drop(stdin);
        let end = tree.release(Grace::default()).await;
        assert!(
            matches!(end, ProcessEnd::Exited(status) if status.success()),
            "{end:?}"
        );
    }

    /// A server's watchdog is forked by the host's launcher, not started
    /// as a program; a request too large for it (an environment over
    /// 64 KiB) is started the other way, as the host's child, and works
    /// the same.
    #[tokio::test]
    async fn the_launcher_forks_watchdogs_and_a_large_request_goes_the_other_way() {
        let me = std::process::id();
        let (marker, _sweep) = swept("launched");
        let launched = sh_up("echo up; exec cat >/dev/null", &marker).await;
        let parent = stat(launched.tree.watchdog()).map(|(_, _, parent)| parent);
        assert_eq!(parent, launcher_of(me), "forked by the launcher");
        assert!(parent.is_some());

        let mut env = marked_env(&marker);
        env.push(("LARGE".into(), "x".repeat(launcher::REQUEST_MAX).into()));
        let args = [
            OsString::from("-c"),
            OsString::from("echo up; exec cat >/dev/null"),
        ];
        let mut large = spawn(Path::new("/bin/sh"), &args, &env, None)
            .await
            .expect("spawned the other way");
        expect_line(
            &mut BufReader::new(&mut large.stdout),
            "up",
            Duration::from_secs(20),
        )
        .await;
        let parent = stat(large.tree.watchdog()).map(|(_, _, parent)| parent);
        assert_eq!(parent, Some(me), "started by the host");
        for spawned in [launched, large] {
            ends_by_itself(spawned).await;
        }
        assert_gone(&marker, Duration::from_secs(5)).await;
    }

    /// The launcher killed from outside takes no tree with it (each
    /// watchdog watches its own), and the next spawn starts another. In a
    /// process of its own: other tests spawn through the same launcher.
    #[tokio::test]
    async fn a_launcher_killed_from_outside_is_replaced_and_its_trees_go_on() {
        rerun_passes("child_for_the_launcher_test", &[]).await;
    }

    #[tokio::test]
    #[ignore = "a helper: run by a_launcher_killed_from_outside_is_replaced_and_its_trees_go_on"]
    async fn child_for_the_launcher_test() {
        if role("child_for_the_launcher_test").is_none() {
            return;
        }
        let me = std::process::id();
        let (marker, _sweep) = swept("relaunched");
        let first = sh_up("echo up; exec cat >/dev/null", &marker).await;
        let spare = until_spare(launcher_of(me).expect("a launcher")).await;
        // The launcher alone: its spare goes with it (it has no request).
        let launcher = signal_my_launcher(libc::SIGKILL, false);
        let deadline = Instant::now() + Duration::from_secs(10);
        while [launcher, spare]
            .iter()
            .any(|&pid| stat(pid).is_some_and(|(_, state, _)| state != 'Z'))
        {
            assert!(
                Instant::now() < deadline,
                "the launcher or its spare did not die"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let second = sh_up("echo up; exec cat >/dev/null", &marker).await;
        let replaced = launcher_of(me).expect("another launcher");
        assert_ne!(replaced, launcher);
        // The first tree's watchdog still watches it: its end is seen.
        for spawned in [first, second] {
            ends_by_itself(spawned).await;
        }
        assert_gone(&marker, Duration::from_secs(5)).await;
        // The killed launcher was reaped when it was replaced.
        assert!(
            stat(launcher).is_none(),
            "the old launcher is left a zombie"
        );
    }

    /// The launcher keeps a spare forked, and the spare is the next
    /// server's watchdog: the request waits for no fork. In a process of
    /// its own: every spawn of a process goes through its launcher.
    #[tokio::test]
    async fn the_next_server_s_watchdog_is_the_spare_forked_ahead() {
        rerun_passes("child_for_the_spare_test", &[]).await;
    }

    #[tokio::test]
    #[ignore = "a helper: run by the_next_server_s_watchdog_is_the_spare_forked_ahead"]
    async fn child_for_the_spare_test() {
        if role("child_for_the_spare_test").is_none() {
            return;
        }
        let (marker, _sweep) = swept("spare");
        let first = sh_up("echo up; exec cat >/dev/null", &marker).await;
        let launcher = launcher_of(std::process::id()).expect("a launcher");
        let spare = until_spare(launcher).await;
        let second = sh_up("echo up; exec cat >/dev/null", &marker).await;
        assert_eq!(second.tree.watchdog(), spare, "the spare took the request");
        let next = until_spare(launcher).await;
        assert_ne!(next, spare, "another spare is forked");
        for spawned in [first, second] {
            ends_by_itself(spawned).await;
        }
        assert_gone(&marker, Duration::from_secs(5)).await;
    }

    /// What the host changes after its launcher started reaches the
    /// servers it starts next as it would without a launcher: a relative
    /// working directory is the host's present one's, and (where the host
    /// may change its ids: root) a host that dropped its privileges gets a
    /// new launcher, so its servers run with the ids it has now. In a
    /// process of its own: both change the whole process.
    #[tokio::test]
    async fn the_hosts_directory_and_ids_of_now_reach_its_next_servers() {
        rerun_passes("child_for_the_host_state_test", &[]).await;
    }

    #[tokio::test]
    #[ignore = "a helper: run by the_hosts_directory_and_ids_of_now_reach_its_next_servers"]
    async fn child_for_the_host_state_test() {
        if role("child_for_the_host_state_test").is_none() {
            return;
        }
        let me = std::process::id();
        let (marker, _sweep) = swept("host-state");
        let first = sh_up("echo up; exec cat >/dev/null", &marker).await;
        let launcher = launcher_of(me).expect("a launcher");
        let dir = std::env::temp_dir().join(unique("host-state"));
        std::fs::create_dir_all(dir.join("sub")).expect("a directory");
        let dir = dir.canonicalize().expect("canonical");
        std::env::set_current_dir(&dir).expect("chdir");
        let args = [
            OsString::from("-c"),
            OsString::from("pwd; exec cat >/dev/null"),
        ];
        let env = marked_env(&marker);
        let here = spawn(Path::new("/bin/sh"), &args, &env, Some(Path::new("sub")))
            .await
            .expect("spawned");
        let mut trees = vec![first, here];
        let pwd = first_line_of(&mut trees[1]).await;
        assert_eq!(Path::new(pwd.trim_end()), dir.join("sub"));
        // SAFETY: reads the effective uid; no memory effects.
        if unsafe { libc::geteuid() } == 0 {
            // SAFETY: drops this (re-run, disposable) process's ids; glibc
            // applies it to every thread.
            assert_eq!(unsafe { libc::setgid(65534) }, 0);
            assert_eq!(unsafe { libc::setuid(65534) }, 0);
            let args = [
                OsString::from("-c"),
                OsString::from("id -u; exec cat >/dev/null"),
            ];
            let mut dropped = spawn(Path::new("/bin/sh"), &args, &env, None)
                .await
                .expect("spawned");
            assert_eq!(first_line_of(&mut dropped).await.trim_end(), "65534");
            assert_ne!(
                launcher_of(me),
                Some(launcher),
                "a new launcher for the new ids"
            );
            trees.push(dropped);
        } else {
            eprintln!("not root: the ids part needs a host that may change its ids");
        }
        for spawned in trees {
            ends_by_itself(spawned).await;
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The first line of a spawned server's stdout (20 s at the most).
    async fn first_line_of(spawned: &mut Spawned) -> String {
        let mut line = String::new();
        tokio::time::timeout(
            Duration::from_secs(20),
            BufReader::new(&mut spawned.stdout).read_line(&mut line),
        )
        .await
        .expect("a line in time")
        .expect("read");
        line
    }

    /// A launcher that forks nothing (stopped here) fails the spawn
    /// retryably within its wait, is killed and reaped, and the next spawn
    /// starts another. In a process of its own, as above.
    #[tokio::test]
    async fn a_wedged_launcher_fails_one_spawn_and_is_replaced() {
        rerun_passes("child_for_the_wedged_launcher_test", &[]).await;
    }

    #[tokio::test]
    #[ignore = "a helper: run by a_wedged_launcher_fails_one_spawn_and_is_replaced"]
    async fn child_for_the_wedged_launcher_test() {
        if role("child_for_the_wedged_launcher_test").is_none() {
            return;
        }
        let me = std::process::id();
        let (marker, _sweep) = swept("wedged");
        let Spawned { tree, stdin, .. } = sh_up("echo up; exec cat >/dev/null", &marker).await;
        drop((tree, stdin));
        let launcher = signal_my_launcher(libc::SIGSTOP, true);
        let args = [
            OsString::from("-c"),
            OsString::from("echo up; exec cat >/dev/null"),
        ];
        let failed = tokio::time::timeout(
            launcher::FORK_WAIT * 10,
            spawn(Path::new("/bin/sh"), &args, &marked_env(&marker), None),
        )
        .await
        .expect("bounded by the launcher's wait");
        let Err(error) = failed else {
            panic!("a stopped launcher started a server");
        };
        assert!(error.is_retryable(), "{error}");
        assert!(error.to_string().contains("started no watchdog"), "{error}");
        assert!(error.is_transport(), "{error}");
        assert!(
            error.to_string().starts_with("stdio transport failed"),
            "{error}"
        );
        // Killed, and reaped by a thread of its own (bounded).
        let deadline = Instant::now() + Duration::from_secs(5);
        while stat(launcher).is_some() {
            assert!(Instant::now() < deadline, "the wedged launcher is left");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let replaced = sh_up("echo up; exec cat >/dev/null", &marker).await;
        assert_ne!(launcher_of(me), Some(launcher));
        ends_by_itself(replaced).await;
        assert_gone(&marker, Duration::from_secs(5)).await;
    }

    /// `ScopedTransport::stdio(..).spawn()` waits for the server's start
    /// no longer than its opening timeout: here a stopped launcher never
    /// forks. In a process of its own, as above.
    #[tokio::test]
    async fn a_transport_s_spawn_waits_no_longer_than_its_opening_timeout() {
        rerun_passes("child_for_the_spawn_bound_test", &[]).await;
    }

    #[tokio::test]
    #[ignore = "a helper: run by a_transport_s_spawn_waits_no_longer_than_its_opening_timeout"]
    async fn child_for_the_spawn_bound_test() {
        if role("child_for_the_spawn_bound_test").is_none() {
            return;
        }
        let (marker, _sweep) = swept("bound");
        let Spawned { tree, stdin, .. } = sh_up("echo up; exec cat >/dev/null", &marker).await;
        drop((tree, stdin));
        let launcher = signal_my_launcher(libc::SIGSTOP, true);
        let command = crate::stdio::StdioCommand::new("/bin/sh")
            .args(["-c", "exec cat >/dev/null"])
            .env(MARKER, &marker);
        let bound = Duration::from_millis(300);
        let started = Instant::now();
        let spawned = tokio::time::timeout(
            launcher::FORK_WAIT * 10,
            crate::adapters::ScopedTransport::stdio(command)
                .opening_timeout(bound)
                .spawn(),
        )
        .await
        .expect("bounded");
        let took = started.elapsed();
        // The request it holds is for nothing once the spawn gave up.
        assert_eq!(signal_my_launcher(libc::SIGKILL, true), launcher);
        let Err(error) = spawned else {
            panic!("a stopped launcher started a server");
        };
        assert!(error.is_timeout(), "{error}");
        assert!(
            took < launcher::FORK_WAIT,
            "{took:?}: waited for the launcher's own bound"
        );
        assert_gone(&marker, Duration::from_secs(5)).await;
    }

    /// A watchdog killed once its server ended by itself, while a daemon
    /// of the tree lives on: the server's status came, the watchdog's
    /// word that the tree is gone did not, so the release says the
    /// watchdog ended (the daemon, reparented to init, escapes: the
    /// guide's known gap; the sweep ends it here).
    #[tokio::test]
    async fn a_watchdog_killed_after_its_server_ended_says_so() {
        let (marker, _sweep) = swept("watchdog-late");
        let script = "setsid sleep 300 </dev/null >/dev/null 2>&1 & echo up; exit 0";
        let Spawned {
            mut tree,
            stdin,
            stderr: _stderr,
            ..
        } = sh_up(script, &marker).await;
        let deadline = Instant::now() + Duration::from_secs(10);
        while stat(tree.group()).is_some() {
            assert!(Instant::now() < deadline, "the server did not end");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let watchdog = libc::pid_t::try_from(tree.watchdog()).expect("a pid");
        // SAFETY: a signal to this test's own watchdog.
        assert_eq!(unsafe { libc::kill(watchdog, libc::SIGKILL) }, 0);
        drop(stdin);
        let end = tree.release(Grace::default()).await;
        assert!(matches!(end, ProcessEnd::WatchdogEnded(_)), "{end:?}");
    }

    #[tokio::test]
    async fn the_hosts_descriptors_without_close_on_exec_reach_no_server() {
        // SAFETY: `open` of a constant path; the descriptor is ours, closed
        // below. Deliberately without O_CLOEXEC.
        let fd = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY) };
        assert!(fd > 2, "{fd}");
        let (marker, _sweep) = swept("cloexec");
        let script = format!("[ -e /proc/self/fd/{fd} ] && echo leaked || echo clean; read _");
        let Spawned {
            tree: _tree,
            stdin: _stdin,
            stdout,
            stderr: _stderr,
        } = sh(&script, &marker).await;
        let line = first_line(stdout).await;
        // SAFETY: our own descriptor, opened above.
        unsafe { libc::close(fd) };
        assert_eq!(line.trim_end(), "clean");
    }

    /// In a process whose environment holds `SECRET` from its start (no
    /// `set_var` racing with other threads): what its servers see.
    #[tokio::test]
    #[ignore = "a helper: run by a_host_secret_reaches_the_server_only_when_everything_is_inherited"]
    async fn child_for_the_env_test() {
        if role("child_for_the_env_test").is_none() {
            return;
        }
        assert_eq!(std::env::var(SECRET).as_deref(), Ok("hunter2"));
        let allow: Vec<OsString> = DEFAULT_ENV_ALLOWLIST.iter().map(OsString::from).collect();
        let extra = [(OsString::from("FROM_CONFIG"), OsString::from("1"))];
        let script = format!(
            "printf '%s|%s|%s\\n' \"${{{SECRET}-unset}}\" \"${{FROM_CONFIG-unset}}\" \"${{PATH-unset}}\""
        );
        let seen = |inherit_all: bool| {
            let env = child_env(inherit_all, &allow, &extra);
            let args = [OsString::from("-c"), OsString::from(script.clone())];
            async move {
                // The tree held (a dropped tree is killed at once).
                let Ok(Spawned {
                    stdout,
                    tree: _tree,
                    ..
                }) = spawn(Path::new("/bin/sh"), &args, &env, None).await
                else {
                    panic!("spawn");
                };
                first_line(stdout).await.trim_end().to_owned()
            }
        };
        let path = std::env::var("PATH").unwrap_or_else(|_| "unset".to_owned());
        assert_eq!(seen(false).await, format!("unset|1|{path}"));
        assert_eq!(seen(true).await, format!("hunter2|1|{path}"));
    }
}
