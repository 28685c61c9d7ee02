//! The process side of stdio off Unix: not built yet, so a stdio server
//! fails its connect with a clear error and nothing is started.
//!
//! The Unix tree (`process.rs`) rests on process groups, `posix_spawn` and
//! a watchdog that sees the host die; Windows' answer is a Job Object with
//! `JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE`, which the system closes with the
//! host. Until it exists, the types the layers above hold are here with
//! no value: a [`ProcessTree`] cannot be made, so nothing above needs a
//! platform `cfg` of its own.

use std::ffi::OsString;
use std::path::Path;
use std::process::ExitStatus;

use tokio::sync::watch;

use super::Spawned;
use super::end::{Grace, ProcessEnd};
use crate::error::{Error, Result};

/// The host's end of a server's stdin.
pub(crate) type Stdin = tokio::process::ChildStdin;
/// The host's end of a server's stdout.
pub(crate) type Stdout = tokio::process::ChildStdout;
/// The host's end of a server's stderr.
pub(crate) type Stderr = tokio::process::ChildStderr;

/// Refuses, naming the program: stdio servers are supervised on Unix only.
/// A configuration error ([`Error::is_builder`]): trying again would fail
/// again.
pub(crate) async fn spawn(
    program: &Path,
    _args: &[OsString],
    _env: &[(OsString, OsString)],
    _cwd: Option<&Path>,
) -> Result<Spawned> {
    Err(Error::builder(format!(
        "cannot start {program:?}: stdio servers need a Unix host (no process supervision for this platform yet)"
    )))
}

/// A process tree: no value exists off Unix.
pub(crate) enum ProcessTree {}

impl ProcessTree {
    pub(crate) fn group(&self) -> u32 {
        match *self {}
    }

    pub(crate) fn watchdog(&self) -> u32 {
        match *self {}
    }

    pub(crate) fn exit(&self) -> watch::Receiver<Option<ExitStatus>> {
        match *self {}
    }

    pub(crate) async fn release(&mut self, _grace: Grace) -> ProcessEnd {
        match *self {}
    }
}

/// How a process ended, in words.
pub(crate) fn ended_how(status: ExitStatus) -> String {
    match status.code() {
        Some(code) => format!("exited with status {code}"),
        None => format!("ended ({status})"),
    }
}
