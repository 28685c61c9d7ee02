//! STUB (replaced by the helper's version).
#![allow(unsafe_code)]
use crate::error::{Error, Result};
use std::ffi::OsString;
use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;
use tokio::sync::watch;
/// Grace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Grace {
    /// stdin
    pub stdin: Duration,
    /// term
    pub terminate: Duration,
}
impl Grace {
    pub(crate) fn bound(&self) -> Duration {
        self.stdin + self.terminate + Duration::from_secs(3)
    }
}
impl Default for Grace {
    fn default() -> Self {
        Grace {
            stdin: Duration::from_secs(2),
            terminate: Duration::from_secs(2),
        }
    }
}
/// End.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProcessEnd {
    /// x
    Exited(ExitStatus),
    /// x
    Terminated,
    /// x
    Killed,
    /// x
    Unconfirmed,
}
pub(crate) struct Spawned {
    pub(crate) tree: ProcessTree,
    pub(crate) stdin: tokio::process::ChildStdin,
    pub(crate) stdout: tokio::process::ChildStdout,
    pub(crate) stderr: tokio::process::ChildStderr,
}
pub(crate) struct ProcessTree {
    pgid: i32,
    exit: watch::Receiver<Option<ExitStatus>>,
    task: tokio::task::JoinHandle<()>,
    done: bool,
}
pub(crate) fn spawn(
    program: &Path,
    args: &[OsString],
    env: &[(OsString, OsString)],
    cwd: Option<&Path>,
) -> Result<Spawned> {
    let mut c = tokio::process::Command::new(program);
    c.args(args)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    if let Some(cwd) = cwd {
        c.current_dir(cwd);
    }
    let mut child = c.spawn().map_err(|e| {
        Error::builder(format!("cannot start {}", program.display())).with_source(e)
    })?;
    let pgid = child.id().unwrap() as i32;
    let (stdin, stdout, stderr) = (
        child.stdin.take().unwrap(),
        child.stdout.take().unwrap(),
        child.stderr.take().unwrap(),
    );
    let (tx, rx) = watch::channel(None);
    let task = tokio::spawn(async move {
        if let Ok(s) = child.wait().await {
            let _ = tx.send(Some(s));
        }
    });
    Ok(Spawned {
        tree: ProcessTree {
            pgid,
            exit: rx,
            task,
            done: false,
        },
        stdin,
        stdout,
        stderr,
    })
}
impl ProcessTree {
    pub(crate) fn exit(&self) -> watch::Receiver<Option<ExitStatus>> {
        self.exit.clone()
    }
    pub(crate) async fn release(&mut self, grace: Grace) -> ProcessEnd {
        let mut exit = self.exit.clone();
        if let Ok(Ok(s)) = tokio::time::timeout(grace.stdin, exit.wait_for(|s| s.is_some())).await {
            self.done = true;
            return ProcessEnd::Exited(s.unwrap());
        }
        unsafe {
            libc::kill(-self.pgid, libc::SIGTERM);
        }
        if tokio::time::timeout(grace.terminate, exit.wait_for(|s| s.is_some()))
            .await
            .is_ok()
        {
            self.done = true;
            return ProcessEnd::Terminated;
        }
        unsafe {
            libc::kill(-self.pgid, libc::SIGKILL);
        }
        let _ = tokio::time::timeout(Duration::from_secs(2), exit.wait_for(|s| s.is_some())).await;
        self.done = true;
        ProcessEnd::Killed
    }
}
impl Drop for ProcessTree {
    fn drop(&mut self) {
        unsafe {
            libc::kill(-self.pgid, libc::SIGKILL);
        }
        let _ = &self.task;
    }
}
impl Grace {
    /// x
    pub fn stdin(mut self, d: Duration) -> Self {
        self.stdin = d;
        self
    }
    /// x
    pub fn terminate(mut self, d: Duration) -> Self {
        self.terminate = d;
        self
    }
}
