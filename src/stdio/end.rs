//! How a stdio server's release goes, on every platform: the periods it
//! is given ([`Grace`]) and how it ended ([`ProcessEnd`]).

use std::process::ExitStatus;
use std::time::Duration;

/// How long a release waits for the tree after a SIGKILL to its group
/// before it reports [`ProcessEnd::Unconfirmed`]: a process ends at once on
/// SIGKILL unless it is in uninterruptible sleep (a hung disk or mount).
pub(super) const KILL_WAIT: Duration = Duration::from_secs(2);

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
