//! A slot's state, and the fleet's events.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::changes::CatalogChanges;
use crate::Error;
use crate::{ProtocolVersion, SessionId, SessionInfo};

/// Where a server's slot is. Every change is published on the slot's own
/// stream ([`Fleet::watch`](super::Fleet::watch)) and on the fleet's
/// ([`Fleet::events`](super::Fleet::events)).
///
/// ```text
///            connect ok               lost (transport, closed, ping)
/// Starting ─────────────> Ready ───────────────────────────────┐
///    ^  │ connect failed                                        v
///    │  ├──── retryable ─────────────────────────────> Retrying{attempt, next_at}
///    │  ├──── 401, 403, authorization failed ────────> AuthRequired
///    │  └──── no retry can fix it (bad URL, 4xx) ────> Failed
///    └──── backoff passed, or Fleet::reconnect ───────────┘
/// any state ── removed, disabled or replaced by apply, shutdown ──> Stopped
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum SlotState {
    /// Connecting (the first time, or again).
    Starting,
    /// A session is up: calls are routed to it and its catalog is in the
    /// fleet's.
    Ready,
    /// Waiting to connect again.
    #[non_exhaustive]
    Retrying {
        /// Failed connects (and sessions lost before they answered a
        /// request and stayed up for
        /// [`stable_after`](super::FleetBuilder::stable_after)) in a row,
        /// this one included: 1 after the first.
        attempt: u32,
        /// When the next connect starts (earlier with
        /// [`Fleet::reconnect`](super::Fleet::reconnect)).
        next_at: Instant,
        /// Why the last connect failed, or the session was lost.
        error: Arc<Error>,
    },
    /// The server refused our credentials (401, 403, or the OAuth flow
    /// failed): no retry until [`Fleet::reconnect`](super::Fleet::reconnect)
    /// or a changed spec.
    #[non_exhaustive]
    AuthRequired {
        /// The refusal.
        error: Arc<Error>,
    },
    /// Stopped for good: removed, disabled, replaced, or the fleet shut
    /// down. The last state of every slot.
    Stopped,
    /// A connect failed with an error no retry can fix (an invalid URL, a
    /// 4xx other than 401/403, a protocol violation; see
    /// [`Error::is_retryable`]): no retry until
    /// [`Fleet::reconnect`](super::Fleet::reconnect) or a changed spec. (A
    /// session that was up proved the spec right: whatever ends it is
    /// retried.)
    #[non_exhaustive]
    Failed {
        /// The failure.
        error: Arc<Error>,
    },
}

impl SlotState {
    /// The state's name: `starting`, `ready`, `retrying`, `auth_required`,
    /// `stopped` or `failed`.
    pub fn name(&self) -> &'static str {
        match self {
            SlotState::Starting => "starting",
            SlotState::Ready => "ready",
            SlotState::Retrying { .. } => "retrying",
            SlotState::AuthRequired { .. } => "auth_required",
            SlotState::Stopped => "stopped",
            SlotState::Failed { .. } => "failed",
        }
    }

    /// Whether calls are routed to a session now.
    pub fn is_ready(&self) -> bool {
        matches!(self, SlotState::Ready)
    }

    /// The retry count of a [`Retrying`](SlotState::Retrying) slot.
    pub fn attempt(&self) -> Option<u32> {
        match self {
            SlotState::Retrying { attempt, .. } => Some(*attempt),
            _ => None,
        }
    }

    /// The error behind a `Retrying`, `AuthRequired` or `Failed` state.
    pub fn error(&self) -> Option<&Arc<Error>> {
        match self {
            SlotState::Retrying { error, .. }
            | SlotState::AuthRequired { error }
            | SlotState::Failed { error } => Some(error),
            _ => None,
        }
    }
}

impl fmt::Display for SlotState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())?;
        if let SlotState::Retrying {
            attempt, next_at, ..
        } = self
        {
            let left = next_at.saturating_duration_since(Instant::now());
            write!(f, " (attempt {attempt}, next in {})", Millis(left))?;
        }
        if let Some(error) = self.error() {
            write!(f, ": {error}")?;
        }
        Ok(())
    }
}

struct Millis(Duration);

impl fmt::Display for Millis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ms", self.0.as_millis())
    }
}

/// One thing that happened in a fleet, on [`Fleet::events`](super::Fleet::events).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum FleetEvent {
    /// A slot changed state.
    #[non_exhaustive]
    State {
        /// The server's name.
        server: Arc<str>,
        /// Its new state.
        state: SlotState,
    },
    /// The merged catalog changed: a server became ready (its names all
    /// added) or left that state (all removed), or a list of its session
    /// was listed again and reads differently. A list listed again the
    /// same (many servers announce a change that is none) is no event.
    #[non_exhaustive]
    Catalog {
        /// The catalog's new generation ([`FleetCatalog::generation`](super::FleetCatalog::generation)).
        generation: u64,
        /// Tools in it now, from every ready server.
        tools: usize,
        /// The server whose lists changed.
        server: Arc<str>,
        /// What changed in them, by qualified name.
        changes: Arc<CatalogChanges>,
    },
    /// A ready server's session was renewed: the server had expired it
    /// (restarted, say) and a new one replaced it, within the slot, which
    /// stayed [`Ready`](SlotState::Ready). What the server held for the
    /// old session (subscriptions, state of its own) is gone. Its lists
    /// are being listed again: a [`Catalog`](Self::Catalog) event follows
    /// if they changed.
    #[non_exhaustive]
    Renewed {
        /// The server's name.
        server: Arc<str>,
        /// The id of the session replaced, if it had one (a credential:
        /// see [`SessionId`]).
        old_session_id: Option<SessionId>,
        /// The new session's id, if the server issued one (a credential).
        new_session_id: Option<SessionId>,
        /// The revision negotiated with the new session.
        era: ProtocolVersion,
        /// What the server said about itself for the new session
        /// (`serverInfo`, capabilities, instructions, revision), as
        /// [`Fleet::info`](super::Fleet::info) gives it from now on: a
        /// host that put the instructions into its prompt compares them
        /// here. Read when the slot hears of the renewal: after two in
        /// quick succession, the first event may already carry the
        /// second session's (the newest is always right).
        info: Arc<SessionInfo>,
    },
}
