//! The watchdog program (`watchdog.c`, built by `build.rs`): where its
//! image is run from, and the host's side of its control socket.
//!
//! The image is embedded in the crate, so a host's `main` has nothing to
//! install or call. It is run from a sealed memfd on Linux (nothing on
//! disk; the host keeps the descriptor for its life). Where that cannot
//! run (no memfd, `/proc` not mounted, `vm.memfd_noexec=2`), and on other
//! Unix systems, it is written once to a private directory of the user's
//! under the temporary directory (`mcp-scoped-http-<uid>`, mode 0700,
//! checked to be the user's own), named by a hash of its content.

// Raw descriptors for the memfd and for SCM_RIGHTS, each with its proof.
#![allow(unsafe_code)]

use std::io::{self, Write as _};
use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd, RawFd};
use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _, OpenOptionsExt as _};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};

/// The program, as built for this target.
static PROGRAM: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/mcp-watchdog"));

/// The name it runs under (`argv[0]`; on Linux also its `comm`).
pub(super) const NAME: &str = "mcp-watchdog";

/// The exit code of a watchdog started wrongly (too few arguments): what
/// the check of an image expects to see.
const USAGE_EXIT: i32 = 2;

/// A runnable copy of the program.
pub(super) struct Image {
    path: PathBuf,
    /// The memfd the path names (`/proc/self/fd/N`), kept open for the
    /// host's life.
    memfd: Option<OwnedFd>,
}

impl Image {
    /// The path to exec.
    pub(super) fn path(&self) -> &Path {
        &self.path
    }
}

/// The image every spawn uses, found (and checked to run) once it works:
/// a failure (no descriptor left, say) is not kept, so the next spawn
/// tries again; a file a temporary-directory cleaner removed is written
/// again.
pub(super) fn image() -> io::Result<Arc<Image>> {
    static IMAGE: Mutex<Option<Arc<Image>>> = Mutex::new(None);
    let mut kept = crate::sync::lock(&IMAGE);
    if let Some(image) = kept.as_ref() {
        if image.memfd.is_some() || image.path.is_file() {
            return Ok(Arc::clone(image));
        }
        tracing::debug!(path = ?image.path, "the stdio watchdog's file is gone; writing it again");
    }
    // Under the lock: one memfd, one file write at a time.
    let image = Arc::new(find()?);
    *kept = Some(Arc::clone(&image));
    Ok(image)
}

/// The first image that runs: a memfd (Linux), else a file.
fn find() -> io::Result<Image> {
    #[cfg(target_os = "linux")]
    match memfd() {
        Ok(image) if runs(&image.path) => return Ok(image),
        Ok(_) => tracing::debug!("the stdio watchdog cannot run from a memfd; using a file"),
        Err(error) => tracing::debug!(%error, "no memfd for the stdio watchdog; using a file"),
    }
    let image = on_disk()?;
    if runs(&image.path) {
        Ok(image)
    } else {
        Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "the stdio watchdog {:?} does not run (a noexec temporary directory?)",
                image.path
            ),
        ))
    }
}

/// Whether the image at `path` runs: started with no arguments, it says
/// how it is meant to be started and exits with [`USAGE_EXIT`].
fn runs(path: &Path) -> bool {
    std::process::Command::new(path)
        .arg0(NAME)
        .env_clear()
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map_or_else(
            // SIGCHLD ignored by the host: the system reaped it unseen, so
            // whether it ran cannot be told here; a spawn will tell.
            |error| error.raw_os_error() == Some(libc::ECHILD),
            |status| status.code() == Some(USAGE_EXIT),
        )
}

/// A sealed memfd holding the program, run as `/proc/self/fd/N` (std's
/// `posix_spawn` resolves it in the child, where the descriptor is still
/// open at exec even though it is close-on-exec).
#[cfg(target_os = "linux")]
fn memfd() -> io::Result<Image> {
    // Not in every libc crate version: from linux/memfd.h.
    const MFD_EXEC: libc::c_uint = 0x0010;
    let flags = libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING;
    // SAFETY: a C string and flags; returns a new descriptor or -1.
    let mut fd = unsafe { libc::memfd_create(c"mcp-watchdog".as_ptr(), flags | MFD_EXEC) };
    if fd == -1 && io::Error::last_os_error().raw_os_error() == Some(libc::EINVAL) {
        // Kernels before 6.3 know no MFD_EXEC: their memfds are executable.
        // SAFETY: as above.
        fd = unsafe { libc::memfd_create(c"mcp-watchdog".as_ptr(), flags) };
    }
    if fd == -1 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: memfd_create returned a new descriptor that nothing else owns.
    let memfd = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut file = std::fs::File::from(memfd);
    file.write_all(PROGRAM)?;
    let seals = libc::F_SEAL_SEAL | libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_WRITE;
    // SAFETY: fcntl on a descriptor we own; no memory effects.
    if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_ADD_SEALS, seals) } == -1 {
        return Err(io::Error::last_os_error());
    }
    let memfd = OwnedFd::from(file);
    let path = PathBuf::from(format!("/proc/self/fd/{}", memfd.as_raw_fd()));
    Ok(Image {
        path,
        memfd: Some(memfd),
    })
}

/// The program written to `<temp>/mcp-scoped-http-<uid>/mcp-watchdog-<hash>`
/// (once: a file of that name with the same content is used as it is).
fn on_disk() -> io::Result<Image> {
    // SAFETY: getuid has no failure and no memory effects.
    let uid = unsafe { libc::getuid() };
    let dir = std::env::temp_dir().join(format!("mcp-scoped-http-{uid}"));
    match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
        Ok(()) => {}
        Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {}
        Err(error) => return Err(error),
    }
    // Another user must not have made it, nor be able to write in it: what
    // is there is run.
    let meta = std::fs::symlink_metadata(&dir)?;
    if !meta.is_dir() || meta.uid() != uid || meta.mode() & 0o022 != 0 {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("{dir:?} is not a private directory of this user's"),
        ));
    }
    let path = dir.join(format!("{NAME}-{:016x}", fnv1a(PROGRAM)));
    if std::fs::read(&path).is_ok_and(|content| content == PROGRAM) {
        return Ok(Image { path, memfd: None });
    }
    // Written under a name of its own, then renamed: a spawn never runs a
    // half-written file.
    let partial = dir.join(format!("{NAME}.{}.partial", std::process::id()));
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o700)
        .open(&partial)?;
    file.write_all(PROGRAM)?;
    file.sync_all()?;
    drop(file);
    std::fs::rename(&partial, &path)?;
    Ok(Image { path, memfd: None })
}

/// FNV-1a, 64 bits: names the image by its content (not a security
/// measure: the directory is the user's own).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// A record the watchdog sends: a tag and a native-endian `i32`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Record {
    /// The server was exec'd: its pid, which is its group's id.
    Started(u32),
    /// The server could not be exec'd: the `errno`. Nothing ran.
    NotStarted(i32),
    /// The server's working directory could not be entered: the `errno`.
    /// Nothing ran.
    NoDirectory(i32),
    /// The server was reaped: its raw wait status.
    Reaped(i32),
    /// A watchdog the launcher forked: its pid (the host is not its
    /// parent). Sent first.
    Watchdog(u32),
    /// The whole tree is gone; the watchdog exits now. Its absence at the
    /// end of file means it was killed from outside.
    Done,
}

/// The size of a record on the wire.
pub(super) const RECORD: usize = 5;

impl Record {
    /// Reads a record; `None` for bytes that are none (a watchdog that is
    /// not ours).
    pub(super) fn parse(bytes: [u8; RECORD]) -> Option<Record> {
        let [tag, a, b, c, d] = bytes;
        let value = i32::from_ne_bytes([a, b, c, d]);
        match tag {
            b'O' => u32::try_from(value)
                .ok()
                .filter(|&pid| pid > 1)
                .map(Record::Started),
            b'E' => Some(Record::NotStarted(value)),
            b'D' => Some(Record::NoDirectory(value)),
            b'Z' => Some(Record::Reaped(value)),
            b'W' => u32::try_from(value)
                .ok()
                .filter(|&pid| pid > 1)
                .map(Record::Watchdog),
            b'X' => Some(Record::Done),
            _ => None,
        }
    }
}

/// What the host sends at a release's SIGTERM step: the watchdog sends
/// SIGTERM to the server's group and to every child it has (descendants
/// that left the group, reparented to it), which the host's group signal
/// does not reach.
const TERMINATE: u8 = b'T';

/// Whether the dynamic loader reads variable `name` (`LD_*`, `DYLD_*`):
/// kept out of the watchdog's own environment.
pub(super) fn for_the_loader(name: &std::ffi::OsStr) -> bool {
    let name = name.as_encoded_bytes();
    name.starts_with(b"LD_") || name.starts_with(b"DYLD_")
}

/// Sends the loader's variables of the server's environment (see
/// [`for_the_loader`]): a native `u32` length, then `NAME=VALUE` strings
/// each ending in a NUL. Blocking, before the socket is the runtime's; the
/// watchdog reads it at once.
pub(super) fn send_loader_env(
    socket: &std::os::unix::net::UnixStream,
    env: &[(std::ffi::OsString, std::ffi::OsString)],
) -> io::Result<()> {
    let mut block = Vec::new();
    for (name, value) in env.iter().filter(|(name, _)| for_the_loader(name)) {
        block.extend_from_slice(name.as_encoded_bytes());
        block.push(b'=');
        block.extend_from_slice(value.as_encoded_bytes());
        block.push(0);
    }
    let length = u32::try_from(block.len())
        .ok()
        .filter(|length| *length <= 1 << 20)
        .ok_or_else(|| io::Error::other("the loader's variables are over 1 MiB"))?;
    let mut message = length.to_ne_bytes().to_vec();
    message.extend_from_slice(&block);
    let mut rest = &message[..];
    while !rest.is_empty() {
        // SAFETY: `rest` is a live slice; send reads at most its length.
        // MSG_NOSIGNAL: a watchdog gone is EPIPE, not a signal to the host.
        let sent = unsafe {
            libc::send(
                socket.as_raw_fd(),
                rest.as_ptr().cast(),
                rest.len(),
                NO_SIGPIPE,
            )
        };
        match usize::try_from(sent) {
            Ok(sent) => rest = &rest[sent..],
            Err(_) if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return Err(io::Error::last_os_error()),
        }
    }
    Ok(())
}

/// Sends [`TERMINATE`] on the lifeline: one byte into an idle socket's
/// buffer, so it never blocks; with no SIGPIPE if the watchdog is gone
/// (a host that is not Rust may not ignore it).
pub(super) fn send_terminate(lifeline: &tokio::net::unix::OwnedWriteHalf) {
    let socket: &tokio::net::UnixStream = lifeline.as_ref();
    let byte = TERMINATE;
    // SAFETY: one byte from a live local, on a descriptor the half keeps
    // open for the call; MSG_DONTWAIT never blocks.
    let _ = unsafe {
        libc::send(
            socket.as_raw_fd(),
            (&raw const byte).cast(),
            1,
            NO_SIGPIPE | libc::MSG_DONTWAIT,
        )
    };
}

/// Sends `fd` over the control socket `socket` (one byte and the
/// descriptor, `SCM_RIGHTS`): the server's stdin, which std cannot put
/// on any descriptor but the watchdog's own 0, 1 and 2.
pub(super) fn send_fd(socket: &std::os::unix::net::UnixStream, fd: &OwnedFd) -> io::Result<()> {
    match send_with_fds(socket.as_raw_fd(), b"F", &[fd.as_raw_fd()], 0)? {
        1 => Ok(()),
        _ => Err(io::Error::new(
            io::ErrorKind::WriteZero,
            "sendmsg sent nothing",
        )),
    }
}

/// The most descriptors [`send_with_fds`] sends at once.
const MAX_FDS: usize = 4;

/// One `sendmsg` on `socket` of `data` with `fds` (`SCM_RIGHTS`, at most
/// [`MAX_FDS`]), `flags` beside [`NO_SIGPIPE`]; retried on EINTR. How many
/// bytes went out.
pub(super) fn send_with_fds(
    socket: RawFd,
    data: &[u8],
    fds: &[RawFd],
    flags: libc::c_int,
) -> io::Result<usize> {
    assert!(
        !fds.is_empty() && fds.len() <= MAX_FDS,
        "1 to {MAX_FDS} descriptors"
    );
    let fds_bytes = std::mem::size_of_val(fds);
    let mut iov = libc::iovec {
        iov_base: data.as_ptr().cast_mut().cast(),
        iov_len: data.len(),
    };
    // Room for one cmsghdr with MAX_FDS ints, aligned as cmsghdr wants.
    let mut space = [0u64; 8];
    // SAFETY: CMSG_SPACE is arithmetic.
    let needed = unsafe { libc::CMSG_SPACE(fds_bytes as libc::c_uint) } as usize;
    assert!(needed <= std::mem::size_of_val(&space));
    // SAFETY: an all-zero msghdr is a valid empty one.
    let mut message: libc::msghdr = unsafe { std::mem::zeroed() };
    message.msg_iov = &raw mut iov;
    message.msg_iovlen = 1;
    message.msg_control = space.as_mut_ptr().cast();
    message.msg_controllen = needed as _;
    // SAFETY: `message` points at a control buffer of `needed` bytes, so
    // CMSG_FIRSTHDR is non-null and the header and its ints fit; the
    // writes stay inside `space`, which outlives the sendmsg. `iov` points
    // at `data`, which sendmsg only reads.
    let sent = unsafe {
        let header = libc::CMSG_FIRSTHDR(&raw const message);
        (*header).cmsg_level = libc::SOL_SOCKET;
        (*header).cmsg_type = libc::SCM_RIGHTS;
        (*header).cmsg_len = libc::CMSG_LEN(fds_bytes as libc::c_uint) as _;
        std::ptr::copy_nonoverlapping(
            fds.as_ptr().cast::<u8>(),
            libc::CMSG_DATA(header),
            fds_bytes,
        );
        loop {
            let sent = libc::sendmsg(socket, &raw const message, NO_SIGPIPE | flags);
            if sent == -1 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            break sent;
        }
    };
    usize::try_from(sent).map_err(|_| io::Error::last_os_error())
}

/// No SIGPIPE from a send to a watchdog already gone (a host need not
/// ignore SIGPIPE); where there is no such flag, the error alone.
#[cfg(any(target_os = "linux", target_os = "android", target_os = "freebsd"))]
const NO_SIGPIPE: libc::c_int = libc::MSG_NOSIGNAL;
#[cfg(not(any(target_os = "linux", target_os = "android", target_os = "freebsd")))]
const NO_SIGPIPE: libc::c_int = 0;

/// A pipe, both ends close-on-exec (the server's stdin: the read end goes
/// to the watchdog over the socket, the write end stays in the host).
pub(super) fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as libc::c_int; 2];
    #[cfg(any(target_os = "linux", target_os = "android", target_os = "freebsd"))]
    // SAFETY: `fds` is an array of two ints for pipe2 to fill.
    let made = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) };
    #[cfg(not(any(target_os = "linux", target_os = "android", target_os = "freebsd")))]
    // SAFETY: as above; close-on-exec is set right after (a fork in another
    // thread in between could inherit them, as with std's own pipes here).
    let made = unsafe {
        let made = libc::pipe(fds.as_mut_ptr());
        if made == 0 {
            for fd in fds {
                libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
            }
        }
        made
    };
    if made == -1 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both are new descriptors that nothing else owns.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_parse_and_reject() {
        let record = |tag: u8, value: i32| {
            let [a, b, c, d] = value.to_ne_bytes();
            Record::parse([tag, a, b, c, d])
        };
        assert_eq!(record(b'O', 4242), Some(Record::Started(4242)));
        assert_eq!(
            record(b'E', libc::ENOEXEC),
            Some(Record::NotStarted(libc::ENOEXEC))
        );
        assert_eq!(record(b'Z', 9), Some(Record::Reaped(9)));
        assert_eq!(record(b'W', 4243), Some(Record::Watchdog(4243)));
        assert_eq!(record(b'W', 0), None);
        assert_eq!(record(b'X', 0), Some(Record::Done));
        assert_eq!(
            record(b'D', libc::EACCES),
            Some(Record::NoDirectory(libc::EACCES))
        );
        // A pid that would turn a group signal into one to everything.
        assert_eq!(record(b'O', 1), None);
        assert_eq!(record(b'O', 0), None);
        assert_eq!(record(b'O', -5), None);
        assert_eq!(record(b'?', 1), None);
    }

    #[test]
    fn the_embedded_image_runs() {
        let image = image().expect("an image");
        assert!(runs(image.path()));
    }

    #[test]
    fn the_image_on_disk_runs_and_is_private() {
        let image = on_disk().expect("an image on disk");
        assert!(runs(image.path()));
        let dir = image.path().parent().expect("its directory");
        let mode = std::fs::metadata(dir).expect("metadata").mode();
        assert_eq!(mode & 0o077, 0, "{mode:o}");
    }
}
