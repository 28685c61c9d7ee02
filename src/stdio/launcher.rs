//! The launcher: one small process per host (`mcp-watchdog HOST_PID`, its
//! `comm` `mcp-launcher`) that forks a watchdog for each stdio server, so
//! a server costs the host one message and a fork of that process, where
//! starting the watchdog program cost a `posix_spawn`, an exec and the
//! dynamic loader on every connect's critical path (about 0.6 ms of time
//! and of CPU here, as much as the server's own exec). The fork is done
//! ahead: the launcher keeps one *spare* child waiting on the socket, which
//! takes the next request itself and becomes its watchdog, and the
//! launcher then forks the next spare. The spare is in the launcher's
//! group (a signal to the group reaches it) until it takes a request, and
//! ends with the launcher (a pipe only the launcher writes to closes).
//!
//! Started at the first server (from the same image as a watchdog, with an
//! empty environment), it lives as long as the host: it ends when its
//! socket's other end closes (the host's end is close-on-exec, so its
//! death closes it) or, on Linux, when its pidfd of the host says the host
//! is gone. A watchdog it forked watches its own tree with its own lifeline
//! and its own look at the host, so it needs the launcher no more once it
//! has its request: a launcher killed from outside takes no tree with it,
//! and the next spawn starts another (the host asks whether it lives
//! before each request: its spare may hold the socket open a while), as does a host whose user or group ids
//! changed since (its servers run with the ids the launcher has), and a
//! child of the host's `fork`. Where the launcher cannot serve (a request
//! too large, no `SOCK_SEQPACKET`, a full queue), the watchdog is started
//! as a program of its own, the host's child.

// Raw descriptors for the socket pair and SCM_RIGHTS, each with its proof.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd};
use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::Mutex;

/// Its `argv[0]`.
pub(super) const NAME: &str = "mcp-launcher";

/// The largest request the launcher reads (`REQUEST_MAX` in `watchdog.c`);
/// a larger one is started the other way.
pub(super) const REQUEST_MAX: usize = 64 * 1024;

/// How long a request may wait for a watchdog of the launcher's to take
/// it (its spare takes it at once, or the launcher forks one, a small
/// process): past this the launcher is taken for wedged and let go.
#[cfg(not(test))]
pub(super) const FORK_WAIT: std::time::Duration = std::time::Duration::from_secs(10);
#[cfg(test)]
pub(super) const FORK_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// The descriptors a request carries: the watchdog's end of the control
/// socket, the server's stdin (read end), stdout and stderr (write ends).
pub(super) const REQUEST_FDS: usize = 4;

struct Launcher {
    child: Child,
    /// The host's end (`SOCK_SEQPACKET`, close-on-exec).
    socket: OwnedFd,
    /// The process that started it: a child of the host's `fork` has its
    /// own.
    host: u32,
    /// The host's ids when it started: its servers run with them, so a
    /// host whose ids changed since (privileges dropped) gets a new one.
    ids: Ids,
    /// Which launcher of the process this is (a pid may be reused).
    generation: u64,
}

impl Launcher {
    /// Whether it takes this process's requests: this process started it,
    /// with `ids`, and it has not ended. Asked before every request: its
    /// spare (see `watchdog.c`) holds the socket too, so a send to a
    /// launcher killed from outside may not fail.
    fn serves(&mut self, ids: &Ids) -> bool {
        self.host == std::process::id()
            && self.ids == *ids
            && matches!(self.child.try_wait(), Ok(None))
    }
}

/// A process's user and group ids, effective ones and supplementary
/// groups included.
#[derive(PartialEq, Eq)]
struct Ids {
    uid: libc::uid_t,
    euid: libc::uid_t,
    gid: libc::gid_t,
    egid: libc::gid_t,
    groups: Vec<libc::gid_t>,
}

impl Ids {
    fn now() -> Ids {
        // SAFETY: these four never fail and touch no memory of ours.
        let (uid, euid, gid, egid) = unsafe {
            (
                libc::getuid(),
                libc::geteuid(),
                libc::getgid(),
                libc::getegid(),
            )
        };
        // SAFETY: a count of 0 with a null list asks for the number only.
        let count = unsafe { libc::getgroups(0, std::ptr::null_mut()) };
        let mut groups = vec![0; usize::try_from(count).unwrap_or(0)];
        // SAFETY: `groups` has room for its length in ids; getgroups writes
        // at most that many and says how many it wrote (or -1).
        let written = unsafe {
            libc::getgroups(
                libc::c_int::try_from(groups.len()).unwrap_or(0),
                groups.as_mut_ptr(),
            )
        };
        groups.truncate(usize::try_from(written).unwrap_or(0));
        groups.sort_unstable();
        Ids {
            uid,
            euid,
            gid,
            egid,
            groups,
        }
    }
}

static LAUNCHER: Mutex<Option<Launcher>> = Mutex::new(None);

/// The generation of the next launcher started.
static GENERATION: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// Hands `request` and its descriptors to the launcher, started from
/// `image` if there is none yet (or it is gone, or the host's ids changed
/// since it started): the launcher's generation once sent, None when it
/// cannot be (the caller starts the watchdog itself). Never waits on the
/// launcher: a full queue is a None.
pub(super) fn launch(image: &Path, request: &[u8], fds: [&OwnedFd; REQUEST_FDS]) -> Option<u64> {
    if request.len() > REQUEST_MAX {
        return None;
    }
    let ids = Ids::now();
    let mut kept = crate::sync::lock(&LAUNCHER);
    // Twice at most: a launcher found gone is replaced once.
    for _ in 0..2 {
        if kept.as_mut().is_none_or(|launcher| !launcher.serves(&ids)) {
            if let Some(old) = kept.take() {
                retire(old);
            }
            match start(image) {
                Ok(launcher) => *kept = Some(launcher),
                Err(error) => {
                    tracing::debug!(%error, "no stdio launcher; starting the watchdog itself");
                    return None;
                }
            }
        }
        let launcher = kept.as_ref()?;
        match send(&launcher.socket, request, fds) {
            Ok(()) => return Some(launcher.generation),
            Err(error) if gone(&error) => {
                tracing::debug!(%error, "the stdio launcher is gone; starting another");
                if let Some(old) = kept.take() {
                    retire(old);
                }
            }
            Err(error) => {
                tracing::debug!(%error, "the stdio launcher cannot take a request now");
                return None;
            }
        }
    }
    None
}

/// Lets the launcher of `generation` go (killed and reaped, if it is this
/// process's, with its spare) unless another has replaced it meanwhile:
/// no watchdog of its took the request within [`FORK_WAIT`]. The next
/// spawn starts another.
pub(super) fn abandon(generation: u64) {
    let mut kept = crate::sync::lock(&LAUNCHER);
    if kept
        .as_ref()
        .is_none_or(|launcher| launcher.generation != generation)
    {
        return;
    }
    if let Some(old) = kept.take() {
        tracing::warn!(
            "no watchdog of the stdio launcher took a request within {FORK_WAIT:?}; starting another"
        );
        retire(old);
    }
}

/// Starts the launcher from `image` unless this process has one, started
/// with its present ids and not seen gone.
pub(super) fn ensure(image: &Path) -> io::Result<()> {
    let ids = Ids::now();
    let mut kept = crate::sync::lock(&LAUNCHER);
    if kept.as_mut().is_some_and(|launcher| launcher.serves(&ids)) {
        return Ok(());
    }
    if let Some(old) = kept.take() {
        retire(old);
    }
    *kept = Some(start(image)?);
    Ok(())
}

/// Whether a send failed because the launcher is gone.
fn gone(error: &io::Error) -> bool {
    matches!(
        error.raw_os_error(),
        Some(libc::EPIPE | libc::ECONNRESET | libc::ENOTCONN | libc::ECONNREFUSED)
    )
}

/// Lets a launcher go: reaped if it is ours and gone (one found gone
/// failed a send, so it is dead or dying), left alone if it is the parent
/// process's (a child of the host's `fork`: only its copy of the socket
/// closes).
fn retire(mut old: Launcher) {
    if old.host != std::process::id() {
        return;
    }
    if let Ok(None) = old.child.try_wait() {
        // Alive (wedged, or replaced for the host's new ids): killed with
        // its spare (its group: it is a session leader; a watchdog that
        // took a request has left it), while it is unreaped, so its pid
        // cannot name another's group (unless this process ignores
        // SIGCHLD, which reaps it the moment it dies), and before our end
        // closes, which would end it. Reaped by a thread of its own, never
        // here under the lock (a process the kill cannot reach would hold
        // every spawn).
        if let Ok(group) = libc::pid_t::try_from(old.child.id()) {
            // SAFETY: kill has no memory effects; a group id > 1 is never
            // "every process" or our own group.
            if group > 1 {
                unsafe { libc::kill(-group, libc::SIGKILL) };
            }
        }
        let _ = old.child.kill();
        drop(old.socket);
        if let Ok(None) = old.child.try_wait() {
            let mut child = old.child;
            let _ = std::thread::Builder::new()
                .name("mcp-launcher-reap".into())
                .spawn(move || child.wait());
        }
    }
    // Gone: our end closes with `old`, and a spare it left (it ends when
    // the launcher's end of its pipe closes) finds nothing more to take.
}

fn start(image: &Path) -> io::Result<Launcher> {
    let (ours, theirs) = seqpacket_pair()?;
    let child = std::process::Command::new(image)
        .arg0(NAME)
        .arg(std::process::id().to_string())
        .env_clear()
        .stdin(Stdio::from(theirs))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    Ok(Launcher {
        child,
        socket: ours,
        host: std::process::id(),
        ids: Ids::now(),
        generation: GENERATION.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
    })
}

/// A `SOCK_SEQPACKET` pair, both ends close-on-exec: each request is one
/// message, whole or not at all, whatever threads send at once.
fn seqpacket_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as libc::c_int; 2];
    #[cfg(any(target_os = "linux", target_os = "android", target_os = "freebsd"))]
    let kind = libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC;
    #[cfg(not(any(target_os = "linux", target_os = "android", target_os = "freebsd")))]
    let kind = libc::SOCK_SEQPACKET;
    // SAFETY: `fds` is an array of two ints for socketpair to fill.
    if unsafe { libc::socketpair(libc::AF_UNIX, kind, 0, fds.as_mut_ptr()) } == -1 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both are new descriptors that nothing else owns.
    let pair = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    #[cfg(not(any(target_os = "linux", target_os = "android", target_os = "freebsd")))]
    for fd in [&pair.0, &pair.1] {
        // SAFETY: fcntl on a descriptor we own; no memory effects.
        unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC) };
    }
    Ok(pair)
}

/// Sends one request: `data` and the descriptors, as one message, without
/// blocking and without SIGPIPE.
fn send(socket: &OwnedFd, data: &[u8], fds: [&OwnedFd; REQUEST_FDS]) -> io::Result<()> {
    let raw = fds.map(|fd| fd.as_raw_fd());
    let sent = super::watchdog::send_with_fds(socket.as_raw_fd(), data, &raw, libc::MSG_DONTWAIT)?;
    if sent == data.len() {
        Ok(())
    } else {
        Err(io::Error::new(
            io::ErrorKind::WriteZero,
            "the request went out in part",
        ))
    }
}
