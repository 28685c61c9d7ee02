//! A stdio server's process tree as a resource: spawned in a session and
//! process group of its own, under a watchdog, released by the spec's
//! sequence, and never outliving the host.
//!
//! # The tree
//!
//! A server is often a wrapper (`npx`, `uvx`, `sh -c`) whose real server is
//! a grandchild, and wrappers rarely forward signals: killing the pid we
//! spawned leaves the grandchild running, reparented to init. So every
//! signal goes to the whole process group, and the child starts one of its
//! own with `setsid()` (also a session of its own: a terminal's Ctrl-C to
//! the host's foreground group does not reach servers). The group id is
//! the child's pid. `Command::process_group` is not used: `setsid` fails
//! in a process that already leads a group.
//!
//! # The watchdog (Linux)
//!
//! Releasing on every way out of the host's code is not enough: a host
//! killed with SIGKILL, aborted by a panic, or ended by `exit` runs no
//! destructor, and its servers must not survive it. `PR_SET_PDEATHSIG`
//! reaches only the direct child, and fires when the spawning *thread*
//! ends (tokio's threads come and go). So, between fork and exec:
//!
//! 1. The host makes a pipe, the *lifeline*. Its write end stays in the
//!    host (close-on-exec, so no other program the host runs keeps it), in
//!    [`ProcessTree`]; since file tables are per process, it closes when
//!    the host process dies, whatever its threads do, or when the tree is
//!    dropped.
//! 2. The forked child calls `setsid()`, then forks again. The grandchild
//!    gets default signal dispositions, an empty signal mask, SIGKILL as
//!    its parent-death signal (its parent, the watchdog, is
//!    single-threaded, so this one holds), and close-on-exec on every
//!    descriptor above the standard streams (the host's descriptors opened
//!    without it reach no server); std execs the server in it (in the new
//!    group).
//! 3. The child becomes the **watchdog** and never returns to std: it
//!    closes every descriptor but the lifeline (the server's pipes, so the
//!    host sees them close when the server does, and std's exec-error
//!    channel, whose end std's `spawn` waits for), becomes a child
//!    subreaper (a wrapper's orphaned descendants are reparented to it, not
//!    to init), ignores the signals a release or a terminal sends
//!    (SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGPIPE), turns core dumps off,
//!    and waits on a `signalfd` for SIGCHLD and on the lifeline with
//!    `poll`, reaping every child. When no child is left, the whole tree
//!    is gone: it exits mirroring the server's status (its exit code, or
//!    the same signal). When the lifeline reads end-of-file, the host is
//!    gone (or dropped the tree): it sends SIGKILL to its own group, itself
//!    included.
//!
//! If the watchdog itself is killed (by someone outside: it ignores the
//! signals a release sends), the server dies of its parent-death signal,
//! and the host, reaping the leader and finding members of its group
//! still there, sends the group SIGKILL; the release report says so
//! ([`ProcessEnd::WatchdogEnded`]). The watchdog is named `mcp-watchdog`
//! and is not dumpable: its memory is a copy-on-write copy of the host's.
//!
//! So the host's child is the watchdog, the group's leader, and its status
//! (the [`ProcessTree::exit`] watch) is the server's, seen once the whole
//! tree is gone. A group SIGTERM reaches the server and its descendants but
//! not the watchdog, which sees them end; a group SIGKILL ends everything.
//! Descendants that leave the group (`setsid`, `setpgid`: daemons) escape
//! group signals; the watchdog still waits for them while it lives.
//!
//! # Elsewhere
//!
//! Other unix systems (macOS, the BSDs) have no `signalfd` or subreaper
//! here: the child only calls `setsid()` and is the server itself, and the
//! release's group signals reach its tree; a host killed with SIGKILL
//! leaves the tree running there. Windows is not compiled (the module is
//! `cfg(unix)`); the planned answer is a Job Object with
//! `JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE`, which the system closes with the
//! host.

// The one module of the crate with `unsafe`: `pre_exec` and the raw libc
// calls between fork and exec (and a few around them), each with its proof.
#![allow(unsafe_code)]
// Used by the stdio wire (issue 27), which lands in its own commit: until
// then only the tests use this module.

use std::ffi::OsString;
use std::io;
use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::watch;

use crate::error::{Error, Result};
use crate::ledger::{Count, Field};

/// How long a release waits for the tree after a SIGKILL to its group
/// before it reports [`ProcessEnd::Unconfirmed`]: a process ends at once on
/// SIGKILL unless it is in uninterruptible sleep (a hung disk or mount).
const KILL_WAIT: Duration = Duration::from_secs(2);

/// How long each step of a stdio server's release may take. The whole
/// release takes at most `stdin + terminate` and 2 s more.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Grace {
    /// How long the server has to exit by itself once its stdin is closed,
    /// as the spec asks it to, before SIGTERM goes to its group. Default:
    /// 2 s.
    pub stdin: Duration,
    /// How long its group has to end after SIGTERM before SIGKILL. Default:
    /// 2 s.
    pub terminate: Duration,
}

impl Default for Grace {
    fn default() -> Self {
        Grace {
            stdin: Duration::from_secs(2),
            terminate: Duration::from_secs(2),
        }
    }
}

impl Grace {
    /// Sets [`stdin`](Self::stdin).
    #[must_use]
    pub fn stdin(mut self, grace: Duration) -> Self {
        self.stdin = grace;
        self
    }

    /// Sets [`terminate`](Self::terminate).
    #[must_use]
    pub fn terminate(mut self, grace: Duration) -> Self {
        self.terminate = grace;
        self
    }

    /// The longest a release with these periods takes: both, and the wait
    /// for the reap after SIGKILL.
    pub(crate) fn bound(&self) -> Duration {
        self.stdin
            .saturating_add(self.terminate)
            .saturating_add(KILL_WAIT)
    }
}

/// How a stdio server's process ended (in the release report).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProcessEnd {
    /// It exited by itself (before, or within `Grace::stdin` after, its
    /// stdin was closed), with this status: its exit code, or the signal
    /// that ended it. On Linux, the tree's end: the server and every
    /// descendant gone.
    Exited(ExitStatus),
    /// It (its whole group) ended after SIGTERM.
    Terminated,
    /// SIGKILL to its group was needed.
    Killed,
    /// Its watchdog (Linux) ended before the tree it watched, with this
    /// status: something outside killed it. The server then got SIGKILL
    /// (its parent-death signal), and so did whatever was left of its
    /// group; the server's own status is lost.
    WatchdogEnded(ExitStatus),
    /// Not seen to end within the bound even after SIGKILL (a process in
    /// uninterruptible sleep), or its end could not be observed (the host
    /// set SIGCHLD to be ignored, so the system reaped it unseen): left to
    /// the watchdog and init. Rare.
    Unconfirmed,
}

/// A spawned server: its tree, and the host's ends of its three standard
/// streams.
pub(crate) struct Spawned {
    /// The process tree, released by [`ProcessTree::release`] or on drop.
    pub(crate) tree: ProcessTree,
    /// The server's stdin: dropping it is the first step of a release.
    pub(crate) stdin: tokio::process::ChildStdin,
    /// The server's stdout (its messages).
    pub(crate) stdout: tokio::process::ChildStdout,
    /// The server's stderr (its log), to be drained always.
    pub(crate) stderr: tokio::process::ChildStderr,
}

/// Spawns `program` (already resolved: see `env::resolve_program`) with
/// exactly `env`, in `cwd`, with its three standard streams piped, in a
/// session and process group of its own, under a watchdog (see the module
/// docs). Must run inside a tokio runtime.
///
/// A working directory that is not one, and a program the system refuses
/// to run (missing, not executable, not an executable format, a missing
/// `#!` interpreter), are [`Error::is_builder`] errors naming it: the
/// configuration is wrong, and trying again would fail again. A lack of
/// resources (processes, descriptors, memory) is a retryable transport
/// error. Nothing is left running after an error.
pub(crate) fn spawn(
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
    let mut command = tokio::process::Command::new(program);
    command
        .args(args)
        .env_clear()
        .envs(env.iter().map(|(name, value)| (name, value)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(cwd) = cwd {
        command.current_dir(cwd);
    }
    #[cfg(target_os = "linux")]
    let lifeline = linux::Lifeline::new().map_err(|error| {
        Error::transport(Box::new(error)).with_message(format!(
            "could not start {program:?}: no pipe for its watchdog"
        ))
    })?;
    #[cfg(target_os = "linux")]
    let hook = linux::pre_exec(lifeline.child_end());
    #[cfg(not(target_os = "linux"))]
    let hook = other::pre_exec();
    // SAFETY: the hook runs between fork and exec in the child and only
    // makes async-signal-safe calls on plain integers it captured; see
    // `linux::pre_exec` and `other::pre_exec` for the proof.
    unsafe {
        command.pre_exec(hook);
    }
    let mut child = command
        .spawn()
        .map_err(|error| spawn_error(program, error))?;
    #[cfg(target_os = "linux")]
    let lifeline = lifeline.into_host_end();
    let Some(group) = child.id() else {
        // Only after a wait, which nothing did yet.
        return Err(Error::protocol(format!(
            "{program:?} was spawned but has no process id"
        )));
    };
    let (Some(stdin), Some(stdout), Some(stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        // Piped above, so always there. The group is ours to end.
        kill_group(group, libc::SIGKILL);
        return Err(Error::protocol(format!(
            "{program:?} was spawned without its standard streams"
        )));
    };
    let (ended, exit) = watch::channel(None);
    let outlived = Arc::new(AtomicBool::new(false));
    let waiter = tokio::spawn({
        let outlived = Arc::clone(&outlived);
        async move {
            match child.wait().await {
                Ok(status) => {
                    // The watchdog, the leader, ends last, once nothing of its
                    // tree is left: a member still there means it was killed
                    // from outside, and what it watched is ended here. The
                    // group's id is not someone else's yet: it stays taken while
                    // a member lives, and Linux hands out pids cyclically.
                    #[cfg(target_os = "linux")]
                    if kill_group(group, libc::SIGKILL) {
                        outlived.store(true, Ordering::Relaxed);
                    }
                    #[cfg(not(target_os = "linux"))]
                    let _ = &outlived;
                    ended.send_replace(Some(status));
                }
                // Only when the system reaped it for us (SIGCHLD ignored): the
                // closed watch says so.
                Err(error) => tracing::warn!(%error, group, "could not wait for a stdio server"),
            }
        }
    });
    Ok(Spawned {
        tree: ProcessTree {
            group,
            exit,
            outlived,
            #[cfg(target_os = "linux")]
            lifeline: Some(lifeline),
            waiter,
            count: Some(Count::new(Field::Processes, None)),
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
        return Error::transport(Box::new(error))
            .with_message(format!("could not start {program:?}"));
    }
    // The file is there, yet the system found nothing: it is a script whose
    // `#!` interpreter is missing.
    let hint = if error.kind() == io::ErrorKind::NotFound && program.is_file() {
        " (the interpreter named on its #! line may be missing)"
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
    /// The group's id: the group leader's pid (the watchdog on Linux).
    group: u32,
    /// The tree's end, as the waiter task saw it.
    exit: watch::Receiver<Option<ExitStatus>>,
    /// Set by the waiter when the leader ended before the rest of its
    /// group (the watchdog killed from outside).
    outlived: Arc<AtomicBool>,
    /// The host's end of the lifeline: dropping it makes the watchdog kill
    /// the group.
    #[cfg(target_os = "linux")]
    lifeline: Option<std::os::fd::OwnedFd>,
    /// The task that waits for (and reaps) the group leader.
    waiter: tokio::task::JoinHandle<()>,
    /// The ledger's count of this tree, until it is seen gone.
    count: Option<Count>,
    /// How far a release went.
    stage: Stage,
    /// The release's report, once it finished.
    end: Option<ProcessEnd>,
}

impl ProcessTree {
    /// The process group's id (the group leader's pid).
    pub(crate) fn group(&self) -> u32 {
        self.group
    }

    /// A watch of the tree's end: `None` while it runs, then its status.
    ///
    /// On Linux the status is the server's own (its exit code, or the signal
    /// that ended it), seen once the server and all its descendants are
    /// gone; after a group SIGKILL it is the watchdog's (killed by SIGKILL).
    /// The watch closes still `None` if the end cannot be observed (the
    /// host ignores SIGCHLD).
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
        // The watchdog kills the group too when its lifeline closes: a
        // second line if the signal could not be sent.
        #[cfg(target_os = "linux")]
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
    /// lifeline closed (the watchdog's own kill), the waiter stopped; the
    /// leader is then reaped by tokio's orphan reaper (which is why the
    /// child is not `kill_on_drop`: it might be a pid already reaped).
    fn drop(&mut self) {
        if self
            .end
            .as_ref()
            .is_none_or(|end| *end == ProcessEnd::Unconfirmed)
        {
            self.signal(libc::SIGKILL);
        }
        #[cfg(target_os = "linux")]
        drop(self.lifeline.take());
        self.waiter.abort();
    }
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

/// The watchdog: Linux, where `signalfd` and child subreapers exist.
#[cfg(target_os = "linux")]
mod linux {
    use std::io;
    use std::mem::MaybeUninit;
    use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd, RawFd};

    use libc::c_int;

    /// The lifeline pipe, both ends the host's until the spawn.
    pub(super) struct Lifeline {
        /// The end the watchdog inherits and polls.
        child: OwnedFd,
        /// The end the host keeps: its close is the watchdog's signal.
        host: OwnedFd,
    }

    impl Lifeline {
        /// A close-on-exec pipe whose child end is above the standard
        /// streams (std puts the server's pipes on 0, 1 and 2 before the
        /// hook runs, which would replace a lifeline there).
        pub(super) fn new() -> io::Result<Lifeline> {
            let mut fds = [0 as c_int; 2];
            // SAFETY: `fds` is a valid array of two ints for pipe2 to fill.
            if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } == -1 {
                return Err(io::Error::last_os_error());
            }
            // SAFETY: pipe2 succeeded: both are open descriptors that
            // nothing else owns.
            let (mut child, host) =
                unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
            if child.as_raw_fd() <= 2 {
                // SAFETY: duplicating an open descriptor we own.
                let moved = unsafe { libc::fcntl(child.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 3) };
                if moved == -1 {
                    return Err(io::Error::last_os_error());
                }
                // SAFETY: fcntl returned a new open descriptor, ours alone.
                child = unsafe { OwnedFd::from_raw_fd(moved) };
            }
            Ok(Lifeline { child, host })
        }

        /// The child's end, for the hook (which captures the number only).
        pub(super) fn child_end(&self) -> RawFd {
            self.child.as_raw_fd()
        }

        /// After the spawn: the host closes its copy of the child's end
        /// (the watchdog has its own) and keeps the other.
        pub(super) fn into_host_end(self) -> OwnedFd {
            self.host
        }
    }

    /// The largest signal number on Linux (`_NSIG - 1`).
    const LAST_SIGNAL: c_int = 64;

    /// The `pre_exec` hook: `setsid`, then fork the server off and become
    /// its watchdog (see the module docs).
    ///
    /// # Safety (of running it between fork and exec)
    ///
    /// It runs in the forked child of a possibly multi-threaded host,
    /// where only async-signal-safe functions may be called. It captures
    /// one `c_int`, allocates nothing, takes no lock, never panics (no
    /// indexing, no arithmetic that can overflow, no `unwrap`), and calls
    /// only `setsid`, `getpid`, `fork` (the child is single-threaded, so
    /// its second fork cannot inherit a lock held by another thread;
    /// glibc's fork handlers reset its own locks), `signal`, `sigemptyset`,
    /// `sigaddset`, `sigprocmask`, `prctl`, `getrlimit`, `syscall`
    /// (close_range), in the server `getppid` and `fcntl`, and in the
    /// watchdog `close`, `setrlimit`, `signalfd`,
    /// `poll`, `read`, `waitpid`, `kill`, `raise` and `_exit`: raw system
    /// calls. The only value built on the way back to std (whose own code
    /// then execs) is `io::Error::last_os_error()`, an integer, as std's
    /// own child code builds. The watchdog never returns, so std's code
    /// after the hook runs only in the server.
    pub(super) fn pre_exec(lifeline: RawFd) -> impl FnMut() -> io::Result<()> + Send + Sync {
        move || {
            // SAFETY: see the function's docs: async-signal-safe calls only,
            // on plain integers and on stack values they fill.
            unsafe {
                if libc::setsid() == -1 {
                    return Err(io::Error::last_os_error());
                }
                let watchdog_pid = libc::getpid();
                match libc::fork() {
                    -1 => Err(io::Error::last_os_error()),
                    0 => {
                        server_defaults(watchdog_pid);
                        Ok(())
                    }
                    server => watchdog(lifeline, server),
                }
            }
        }
    }

    /// In the server, before exec: default dispositions for every signal
    /// (an ignored one would survive the exec) and an empty mask (std
    /// keeps the forking thread's); SIGKILL when the watchdog dies (it is
    /// single-threaded, so its death is its thread's: the parent-death
    /// signal holds here, where it would not for the host's child); and
    /// close-on-exec on every descriptor above the standard streams, so
    /// the host's descriptors opened without it (by a C library, or
    /// inherited) reach no server.
    ///
    /// # Safety
    ///
    /// Between fork and exec only: async-signal-safe calls.
    unsafe fn server_defaults(watchdog: libc::pid_t) {
        // SAFETY: async-signal-safe calls on integers and on a stack value
        // they fill.
        unsafe {
            let zero: libc::c_ulong = 0;
            libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                zero,
                zero,
                zero,
            );
            // The watchdog may have died before the line above.
            if libc::getppid() != watchdog {
                libc::_exit(137);
            }
            cloexec_from(3);
            for signal in 1..=LAST_SIGNAL {
                if signal != libc::SIGKILL && signal != libc::SIGSTOP {
                    // Fails harmlessly for numbers the C library reserves.
                    libc::signal(signal, libc::SIG_DFL);
                }
            }
            let mut none = MaybeUninit::<libc::sigset_t>::uninit();
            libc::sigemptyset(none.as_mut_ptr());
            libc::sigprocmask(libc::SIG_SETMASK, none.as_ptr(), std::ptr::null_mut());
        }
    }

    /// The watchdog's life: watch the tree and the lifeline, end with the
    /// tree (mirroring the server's status) or end the tree when the
    /// lifeline closes.
    ///
    /// # Safety
    ///
    /// Between fork and exec only, never returning to std: async-signal-safe
    /// calls.
    unsafe fn watchdog(lifeline: c_int, server: libc::pid_t) -> ! {
        // SAFETY: async-signal-safe calls only, on integers and on stack
        // values they fill (the pollfd array, the sigset, the status, the
        // siginfo buffer, each of the size the call is told).
        unsafe {
            close_all_but(lifeline);
            // Seen as what it is in `ps`; and never dumped or traced by
            // another process of the user: its memory is a copy of the
            // host's, secrets included.
            libc::prctl(
                libc::PR_SET_NAME,
                c"mcp-watchdog".as_ptr() as libc::c_ulong,
                0 as libc::c_ulong,
                0 as libc::c_ulong,
                0 as libc::c_ulong,
            );
            libc::prctl(
                libc::PR_SET_DUMPABLE,
                0 as libc::c_ulong,
                0 as libc::c_ulong,
                0 as libc::c_ulong,
                0 as libc::c_ulong,
            );
            // Orphaned descendants come to us, not to init: we see them
            // end, and the tree is not gone until they are.
            let zero: libc::c_ulong = 0;
            libc::prctl(
                libc::PR_SET_CHILD_SUBREAPER,
                1 as libc::c_ulong,
                zero,
                zero,
                zero,
            );
            // The host's handlers are not ours; and a release's SIGTERM
            // (or a terminal's signals) must not end the one who watches.
            for signal in 1..=LAST_SIGNAL {
                if signal != libc::SIGKILL && signal != libc::SIGSTOP {
                    libc::signal(signal, libc::SIG_DFL);
                }
            }
            for signal in [
                libc::SIGTERM,
                libc::SIGINT,
                libc::SIGHUP,
                libc::SIGQUIT,
                libc::SIGPIPE,
            ] {
                libc::signal(signal, libc::SIG_IGN);
            }
            // Mirroring a crash re-raises its signal here: no second core.
            let no_core = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            libc::setrlimit(libc::RLIMIT_CORE, &no_core);

            let mut child_signal = MaybeUninit::<libc::sigset_t>::uninit();
            libc::sigemptyset(child_signal.as_mut_ptr());
            libc::sigaddset(child_signal.as_mut_ptr(), libc::SIGCHLD);
            libc::sigprocmask(
                libc::SIG_SETMASK,
                child_signal.as_ptr(),
                std::ptr::null_mut(),
            );
            let children = libc::signalfd(
                -1,
                child_signal.as_ptr(),
                libc::SFD_CLOEXEC | libc::SFD_NONBLOCK,
            );

            let mut status: Option<c_int> = None;
            loop {
                // Before each wait, and first right after the signalfd: a
                // child may have ended before SIGCHLD was blocked.
                reap(server, &mut status);
                let mut fds = [
                    libc::pollfd {
                        fd: lifeline,
                        events: libc::POLLIN,
                        revents: 0,
                    },
                    libc::pollfd {
                        fd: children,
                        events: libc::POLLIN,
                        revents: 0,
                    },
                ];
                // Without a signalfd (it failed: no memory), look again
                // every 100 ms.
                let (count, timeout) = if children >= 0 { (2, -1) } else { (1, 100) };
                if libc::poll(fds.as_mut_ptr(), count, timeout) == -1 {
                    if errno() == libc::EINTR {
                        continue;
                    }
                    // Cannot watch: end the tree rather than leave it
                    // unwatched.
                    kill_tree();
                }
                let [host, reaped] = fds;
                if host.revents != 0 {
                    let mut byte = 0u8;
                    let read = libc::read(lifeline, (&raw mut byte).cast(), 1);
                    // End of file (the host is gone or let go), or an
                    // error that is not a retry: the lifeline is cut.
                    if read == 0 || (read == -1 && errno() != libc::EINTR) {
                        kill_tree();
                    }
                }
                if children >= 0 && reaped.revents != 0 {
                    let mut info = MaybeUninit::<libc::signalfd_siginfo>::uninit();
                    let size = std::mem::size_of::<libc::signalfd_siginfo>();
                    while libc::read(children, info.as_mut_ptr().cast(), size) > 0 {}
                }
            }
        }
    }

    /// Reaps every ended child, noting the server's status; exits once no
    /// child is left.
    ///
    /// # Safety
    ///
    /// In the watchdog only (it may exit the process).
    unsafe fn reap(server: libc::pid_t, status: &mut Option<c_int>) {
        loop {
            let mut raw: c_int = 0;
            // SAFETY: `raw` is a valid int for waitpid to fill.
            let pid = unsafe { libc::waitpid(-1, &mut raw, libc::WNOHANG) };
            if pid > 0 {
                if pid == server {
                    *status = Some(raw);
                }
                continue;
            }
            if pid == 0 {
                return;
            }
            match errno() {
                libc::EINTR => continue,
                // SAFETY: in the watchdog, as this function requires.
                libc::ECHILD => unsafe { exit_as(*status) },
                _ => return,
            }
        }
    }

    /// Ends the watchdog as the server ended: its exit code, or the signal
    /// that killed it (raised again here, default action, unblocked).
    ///
    /// # Safety
    ///
    /// In the watchdog only.
    unsafe fn exit_as(status: Option<c_int>) -> ! {
        // SAFETY: async-signal-safe calls on integers and a stack sigset.
        unsafe {
            match status {
                Some(raw) if libc::WIFEXITED(raw) => libc::_exit(libc::WEXITSTATUS(raw)),
                Some(raw) if libc::WIFSIGNALED(raw) => {
                    let signal = libc::WTERMSIG(raw);
                    libc::signal(signal, libc::SIG_DFL);
                    let mut only = MaybeUninit::<libc::sigset_t>::uninit();
                    libc::sigemptyset(only.as_mut_ptr());
                    libc::sigaddset(only.as_mut_ptr(), signal);
                    libc::sigprocmask(libc::SIG_UNBLOCK, only.as_ptr(), std::ptr::null_mut());
                    libc::raise(signal);
                    // A signal whose default is not to end the process
                    // cannot have ended the server; the shell's convention.
                    libc::_exit(128 + (signal & 0x7f))
                }
                // The server's status was never seen (it cannot be reaped
                // by anyone else): say so with an unusual code.
                _ => libc::_exit(255),
            }
        }
    }

    /// SIGKILL to our whole group, ourselves included.
    ///
    /// # Safety
    ///
    /// In the watchdog only.
    unsafe fn kill_tree() -> ! {
        // SAFETY: async-signal-safe calls; `kill(0)` is our own group, of
        // which we lead a session of our own.
        unsafe {
            libc::kill(0, libc::SIGKILL);
            libc::_exit(137)
        }
    }

    /// Closes every descriptor but `keep`.
    ///
    /// # Safety
    ///
    /// In the watchdog only (it closes descriptors others may think open).
    unsafe fn close_all_but(keep: c_int) {
        // SAFETY: `close_range` and `close` on descriptor numbers: no
        // memory effects; `getrlimit` fills a stack value.
        unsafe {
            let below = keep <= 0
                || libc::syscall(
                    libc::SYS_close_range,
                    0 as libc::c_uint,
                    (keep - 1) as libc::c_uint,
                    0 as libc::c_uint,
                ) == 0;
            let above = libc::syscall(
                libc::SYS_close_range,
                (keep + 1) as libc::c_uint,
                libc::c_uint::MAX,
                0 as libc::c_uint,
            ) == 0;
            if below && above {
                return;
            }
            // Kernels before 5.9: one by one, up to the descriptor limit.
            for fd in 0..descriptor_limit() {
                if fd != keep {
                    libc::close(fd);
                }
            }
        }
    }

    /// Sets close-on-exec on every descriptor from `first` up.
    ///
    /// # Safety
    ///
    /// Between fork and exec only (it changes descriptors others own).
    unsafe fn cloexec_from(first: c_int) {
        // SAFETY: `close_range` and `fcntl` on descriptor numbers: no
        // memory effects; `getrlimit` fills a stack value.
        unsafe {
            if libc::syscall(
                libc::SYS_close_range,
                first as libc::c_uint,
                libc::c_uint::MAX,
                libc::CLOSE_RANGE_CLOEXEC,
            ) == 0
            {
                return;
            }
            // Kernels before 5.11: one by one, up to the descriptor limit.
            for fd in first..descriptor_limit() {
                let flags = libc::fcntl(fd, libc::F_GETFD);
                if flags != -1 && flags & libc::FD_CLOEXEC == 0 {
                    libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC);
                }
            }
        }
    }

    /// The highest descriptor number to visit one by one (capped: a limit
    /// of millions would make it slow, and such numbers are rarely used).
    fn descriptor_limit() -> c_int {
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: `getrlimit` fills a stack value of the right type.
        if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0 {
            limit.rlim_cur.min(1 << 20) as c_int
        } else {
            1 << 16
        }
    }

    /// This thread's `errno`, read without building an `io::Error`.
    fn errno() -> c_int {
        // SAFETY: `__errno_location` returns this thread's errno slot,
        // always valid to read.
        unsafe { *libc::__errno_location() }
    }
}

/// Other unix systems: a session and group of its own, no watchdog.
#[cfg(not(target_os = "linux"))]
mod other {
    use std::io;

    /// The `pre_exec` hook: `setsid()` only.
    ///
    /// # Safety (of running it between fork and exec)
    ///
    /// `setsid` is async-signal-safe; the hook captures nothing and builds
    /// only an integer `io::Error`.
    pub(super) fn pre_exec() -> impl FnMut() -> io::Result<()> + Send + Sync {
        || {
            // SAFETY: async-signal-safe, no memory effects.
            if unsafe { libc::setsid() } == -1 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        }
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use crate::stdio::env::{DEFAULT_ENV_ALLOWLIST, child_env};
    use std::os::unix::process::ExitStatusExt as _;
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

    /// `/bin/sh -c script`, marked.
    fn sh(script: &str, marker: &str) -> Spawned {
        let args = [OsString::from("-c"), OsString::from(script)];
        match spawn(Path::new("/bin/sh"), &args, &marked_env(marker), None) {
            Ok(spawned) => spawned,
            Err(error) => panic!("spawning /bin/sh failed: {error}"),
        }
    }

    /// The processes whose environment holds `MARKER=marker` (a zombie's
    /// reads empty: it is gone but for its status).
    fn marked(marker: &str) -> Vec<u32> {
        let wanted = format!("{MARKER}={marker}");
        let Ok(dir) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        dir.filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
            .filter(|pid| {
                std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|environ| {
                    environ
                        .split(|&byte| byte == 0)
                        .any(|variable| variable == wanted.as_bytes())
                })
            })
            .collect()
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
        let marker = unique("wrapper");
        let _sweep = Sweep(marker.clone());
        let Spawned {
            mut tree,
            stdin,
            stdout,
            stderr: _stderr,
        } = sh(WRAPPER, &marker);
        expect_line(&mut BufReader::new(stdout), "up", Duration::from_secs(20)).await;
        let tree_pids = marked(&marker);
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
        let marker = unique("eof");
        let _sweep = Sweep(marker.clone());
        let Spawned {
            mut tree, stdin, ..
        } = sh("cat >/dev/null; exit 3", &marker);
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
        let marker = unique("stubborn");
        let _sweep = Sweep(marker.clone());
        let Spawned {
            mut tree,
            stdin,
            stdout,
            ..
        } = sh(STUBBORN, &marker);
        expect_line(&mut BufReader::new(stdout), "up", Duration::from_secs(20)).await;
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
        let marker = unique("cut");
        let _sweep = Sweep(marker.clone());
        let Spawned {
            mut tree,
            stdin,
            stdout,
            ..
        } = sh(STUBBORN, &marker);
        expect_line(&mut BufReader::new(stdout), "up", Duration::from_secs(20)).await;
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
        let marker = unique("dropped");
        let _sweep = Sweep(marker.clone());
        let Spawned { tree, stdout, .. } = sh(WRAPPER, &marker);
        expect_line(&mut BufReader::new(stdout), "up", Duration::from_secs(20)).await;
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
        let marker = unique("exit");
        let _sweep = Sweep(marker.clone());
        let spawned = sh("exit 7", &marker);
        assert_eq!(wait(spawned.tree.exit()).await.code(), Some(7));

        // A death by signal is mirrored as that signal.
        let spawned = sh("kill -USR1 $$", &marker);
        assert_eq!(
            wait(spawned.tree.exit()).await.signal(),
            Some(libc::SIGUSR1)
        );

        // A descendant outliving the server: the status comes when it is
        // gone too.
        let started = Instant::now();
        let spawned = sh("sleep 0.5 & exit 5", &marker);
        assert_eq!(wait(spawned.tree.exit()).await.code(), Some(5));
        assert!(started.elapsed() >= Duration::from_millis(500));
        assert!(marked(&marker).is_empty(), "the whole tree is gone");
    }

    #[tokio::test]
    async fn the_host_killed_with_sigkill_leaves_no_process() {
        let marker = unique("host");
        let _sweep = Sweep(marker.clone());
        let mut host = rerun(
            "host_for_the_sigkill_test",
            &format!("host_for_the_sigkill_test={marker}"),
            &[],
        );
        let stdout = host.stdout.take().expect("piped");
        expect_line(
            &mut BufReader::new(stdout),
            &format!("tree up {marker}"),
            Duration::from_secs(60),
        )
        .await;
        assert!(marked(&marker).len() >= 2, "the host's tree runs");
        host.start_kill().expect("SIGKILL to the host");
        host.wait().await.expect("the host reaped");
        assert_gone(&marker, Duration::from_secs(10)).await;
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
        let Spawned { tree, stdout, .. } = sh(WRAPPER, &marker);
        expect_line(&mut BufReader::new(stdout), "up", Duration::from_secs(20)).await;
        // On a line of its own: libtest's "test ... " has no newline yet.
        println!("\ntree up {marker}");
        let mut stdin = tokio::io::stdin();
        let mut byte = [0u8; 1];
        let _ = tokio::time::timeout(
            Duration::from_secs(60),
            tokio::io::AsyncReadExt::read(&mut stdin, &mut byte),
        )
        .await;
        drop(tree);
    }

    #[tokio::test]
    async fn spawning_a_missing_program_or_in_a_missing_directory_fails_clearly() {
        let env = marked_env(&unique("missing"));
        let missing = Path::new("/nonexistent-mcp-scoped-http/no-such-server");
        let Err(error) = spawn(missing, &[], &env, None) else {
            panic!("spawned a missing program");
        };
        assert!(error.is_builder(), "{error}");
        assert!(error.to_string().contains("no-such-server"), "{error}");

        let Err(error) = spawn(
            Path::new("/bin/sh"),
            &[],
            &env,
            Some(Path::new("/nonexistent-mcp-scoped-http")),
        ) else {
            panic!("spawned in a missing directory");
        };
        assert!(error.is_builder(), "{error}");
        let text = error.to_string();
        assert!(text.contains("working directory"), "{text}");
        assert!(text.contains("/nonexistent-mcp-scoped-http"), "{text}");

        // And nothing is left: checked in a process of its own, where any
        // child at all would show.
        let mut child = rerun(
            "child_for_the_spawn_failure_test",
            "child_for_the_spawn_failure_test=",
            &[],
        );
        drop(child.stdin.take());
        let status = tokio::time::timeout(Duration::from_secs(60), child.wait())
            .await
            .expect("the re-run ends")
            .expect("waited");
        assert!(status.success(), "{status:?}");
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
        assert!(spawn(missing, &[], &env, None).is_err());
        // A script whose interpreter is missing fails at exec, in the
        // server, after the watchdog is up.
        let dir = std::env::temp_dir().join(unique("interp"));
        std::fs::create_dir(&dir).expect("a temporary directory");
        let script = dir.join("server");
        std::fs::write(&script, "#!/nonexistent-mcp-scoped-http/interp\n").expect("write");
        std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .expect("chmod");
        let failed = spawn(&script, &[], &env, None);
        let _ = std::fs::remove_dir_all(&dir);
        let Err(error) = failed else {
            panic!("spawned a script without its interpreter");
        };
        assert!(error.is_builder(), "{error}");
        assert!(error.to_string().contains("interpreter"), "{error}");
        let mut status = 0;
        // SAFETY: waitpid fills a valid int; no child of ours is expected.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        assert_eq!(pid, -1, "a child is left");
        assert_eq!(
            io::Error::last_os_error().raw_os_error(),
            Some(libc::ECHILD)
        );
    }

    #[tokio::test]
    async fn a_host_secret_reaches_the_server_only_when_everything_is_inherited() {
        let mut child = rerun(
            "child_for_the_env_test",
            "child_for_the_env_test=",
            &[(SECRET, "hunter2")],
        );
        drop(child.stdin.take());
        let status = tokio::time::timeout(Duration::from_secs(60), child.wait())
            .await
            .expect("the re-run ends")
            .expect("waited");
        assert!(status.success(), "{status:?}");
    }

    #[tokio::test]
    async fn a_watchdog_killed_from_outside_leaves_no_process_and_says_so() {
        let marker = unique("watchdog");
        let _sweep = Sweep(marker.clone());
        let Spawned {
            mut tree,
            stdin,
            stdout,
            stderr: _stderr,
        } = sh(WRAPPER, &marker);
        expect_line(&mut BufReader::new(stdout), "up", Duration::from_secs(20)).await;
        let watchdog = libc::pid_t::try_from(tree.group()).expect("a pid");
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

    #[tokio::test]
    async fn a_server_that_leaves_the_group_still_dies_with_its_watchdog() {
        let marker = unique("pdeathsig");
        let _sweep = Sweep(marker.clone());
        let exe = std::env::current_exe().expect("the test binary's path");
        let args = [
            "--exact",
            "stdio::process::tests::child_that_leaves_its_group",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ]
        .map(OsString::from);
        let mut env = marked_env(&marker);
        env.push((ROLE.into(), "child_that_leaves_its_group=".into()));
        let Spawned {
            tree,
            stdin: _stdin,
            stdout,
            stderr: _stderr,
        } = spawn(&exe, &args, &env, None).expect("spawned");
        expect_line(&mut BufReader::new(stdout), "left", Duration::from_secs(30)).await;
        let watchdog = libc::pid_t::try_from(tree.group()).expect("a pid");
        // SAFETY: a signal to this test's own watchdog.
        assert_eq!(unsafe { libc::kill(watchdog, libc::SIGKILL) }, 0);
        // No group signal reaches it: only its parent-death signal does.
        assert_gone(&marker, Duration::from_secs(5)).await;
    }

    /// A server that moves to a group of its own, then lives on (bounded).
    #[test]
    #[ignore = "a helper: run by a_server_that_leaves_the_group_still_dies_with_its_watchdog"]
    fn child_that_leaves_its_group() {
        if role("child_that_leaves_its_group").is_none() {
            return;
        }
        // SAFETY: moves this process to a new group; no memory effects.
        assert_eq!(unsafe { libc::setpgid(0, 0) }, 0);
        // On a line of its own: the harness has begun one with the name.
        println!("\nleft");
        std::thread::sleep(Duration::from_secs(60));
    }

    #[tokio::test]
    async fn the_hosts_descriptors_without_close_on_exec_reach_no_server() {
        // SAFETY: `open` of a constant path; the descriptor is ours, closed
        // below. Deliberately without O_CLOEXEC.
        let fd = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY) };
        assert!(fd > 2, "{fd}");
        let marker = unique("cloexec");
        let _sweep = Sweep(marker.clone());
        let script = format!("[ -e /proc/self/fd/{fd} ] && echo leaked || echo clean; read _");
        let Spawned {
            tree: _tree,
            stdin: _stdin,
            stdout,
            stderr: _stderr,
        } = sh(&script, &marker);
        let mut line = String::new();
        tokio::time::timeout(
            Duration::from_secs(20),
            BufReader::new(stdout).read_line(&mut line),
        )
        .await
        .expect("a line in time")
        .expect("read");
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
                }) = spawn(Path::new("/bin/sh"), &args, &env, None)
                else {
                    panic!("spawn");
                };
                let mut line = String::new();
                tokio::time::timeout(
                    Duration::from_secs(20),
                    BufReader::new(stdout).read_line(&mut line),
                )
                .await
                .expect("a line in time")
                .expect("read");
                line.trim_end().to_owned()
            }
        };
        let path = std::env::var("PATH").unwrap_or_else(|_| "unset".to_owned());
        assert_eq!(seen(false).await, format!("unset|1|{path}"));
        assert_eq!(seen(true).await, format!("hunter2|1|{path}"));
    }
}
