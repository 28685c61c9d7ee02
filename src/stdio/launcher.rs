//! The launcher: one small process per host (`mcp-watchdog HOST_PID`, its
//! `comm` `mcp-launcher`) that forks a watchdog for each stdio server, so
//! a server costs the host one message and a fork of that process, where
//! starting the watchdog program cost a `posix_spawn`, an exec and the
//! dynamic loader on every connect's critical path (about 0.6 ms of time
//! and of CPU here, as much as the server's own exec).
//!
//! Started at the first server (from the same image as a watchdog, with an
//! empty environment), it lives as long as the host: it ends when its
//! socket's other end closes (the host's end is close-on-exec, so its
//! death closes it) or, on Linux, when its pidfd of the host says the host
//! is gone. A watchdog it forked watches its own tree with its own lifeline
//! and its own look at the host, so it needs the launcher no more once
//! forked: a launcher killed from outside takes no tree with it, and the
//! next spawn starts another. Where there is no launcher (a request too
//! large, no `SOCK_SEQPACKET`, a child of the host's `fork`), the watchdog
//! is started as a program of its own, as before.

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

/// How long the launcher may take to fork a watchdog for a request (it
/// does at once, a fork of a small process): past this it is taken for
/// wedged and let go.
#[cfg(not(test))]
pub(super) const FORK_WAIT: std::time::Duration = std::time::Duration::from_secs(10);
#[cfg(test)]
pub(super) const FORK_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

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
}

static LAUNCHER: Mutex<Option<Launcher>> = Mutex::new(None);

/// Hands `request` and its descriptors to the launcher, started from
/// `image` if there is none yet (or it is gone): the launcher's pid once
/// sent, None when it cannot be (the caller starts the watchdog itself).
/// Never blocks on the launcher: a full queue is a None.
pub(super) fn launch(image: &Path, request: &[u8], fds: [&OwnedFd; REQUEST_FDS]) -> Option<u32> {
    if request.len() > REQUEST_MAX {
        return None;
    }
    let mut kept = crate::sync::lock(&LAUNCHER);
    // Twice at most: a launcher found gone is replaced once.
    for _ in 0..2 {
        if kept
            .as_ref()
            .is_none_or(|launcher| launcher.host != std::process::id())
        {
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
            Ok(()) => return Some(launcher.child.id()),
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

/// Lets the launcher `pid` go (killed and reaped, if it is this
/// process's) unless another has replaced it meanwhile: it did not fork
/// within [`FORK_WAIT`]. The next spawn starts another.
pub(super) fn abandon(pid: u32) {
    let mut kept = crate::sync::lock(&LAUNCHER);
    if kept
        .as_ref()
        .is_none_or(|launcher| launcher.child.id() != pid)
    {
        return;
    }
    if let Some(old) = kept.take() {
        tracing::warn!(
            "the stdio launcher forked no watchdog within {FORK_WAIT:?}; starting another"
        );
        retire(old);
    }
}

/// Starts the launcher from `image` unless this process has one.
pub(super) fn ensure(image: &Path) -> io::Result<()> {
    let mut kept = crate::sync::lock(&LAUNCHER);
    if kept
        .as_ref()
        .is_some_and(|launcher| launcher.host == std::process::id())
    {
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
    // Our end closes first: a launcher still alive then ends by itself.
    drop(old.socket);
    match old.child.try_wait() {
        Ok(Some(_)) | Err(_) => {}
        // Alive with its socket broken: it cannot serve; it ends on its
        // socket's end of file, and is reaped here.
        Ok(None) => {
            let _ = old.child.kill();
            let _ = old.child.wait();
        }
    }
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
