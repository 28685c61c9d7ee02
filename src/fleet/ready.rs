//! [`Fleet::ready`]: waiting until every server has settled.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures_util::future::try_join_all;

use super::lock;
use super::slot::Slot;
use super::state::SlotState;
use super::{Fleet, shut_down};
use crate::{Error, Result};

/// Where the fleet's servers were when [`Fleet::ready`] returned. Every
/// server it waited for is in exactly one of the three.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct Readiness {
    /// Servers with a session up, calls routed to them, by name.
    pub ready: Vec<String>,
    /// Servers that settled without a session, and their state then: the
    /// first attempt failed and they are waiting to retry
    /// ([`SlotState::Retrying`]), or connecting again after that, or they
    /// need authorization ([`SlotState::AuthRequired`]), failed for good
    /// ([`SlotState::Failed`]) or were stopped meanwhile.
    pub not_ready: BTreeMap<String, SlotState>,
    /// Servers still on their first attempt when the deadline passed
    /// (connecting, or waiting for a connect permit).
    pub pending: Vec<String>,
}

impl Readiness {
    /// Whether every server has settled (nothing [`pending`](Self::pending)).
    pub fn is_settled(&self) -> bool {
        self.pending.is_empty()
    }

    /// Whether every server is ready.
    pub fn all_ready(&self) -> bool {
        self.not_ready.is_empty() && self.pending.is_empty()
    }
}

impl Fleet {
    /// Waits, up to `within`, until every enabled server has **settled**:
    /// it is ready, or its first attempt ended without a session (it is
    /// waiting to retry, needs authorization, or failed for good). Says
    /// where each server is then ([`Readiness`]): a deadline passing with
    /// servers still on their first attempt is no error, they are
    /// [`pending`](Readiness::pending).
    ///
    /// Servers marked [`required`](super::ServerSpec::required) must be
    /// *ready*: a required server waiting to retry is waited for; `ready`
    /// fails at once when one is in [`SlotState::AuthRequired`] or
    /// [`SlotState::Failed`] (no retry will come by itself) or was stopped
    /// meanwhile (removed, disabled, or the fleet shut down), and with [`Error::is_timeout`] when `within` passes before
    /// every required server is ready; the error names each required
    /// server not ready and its state.
    ///
    /// A server replaced meanwhile (its spec changed) is waited for in its
    /// new slot, as that slot is (required or not). After [`shutdown`](Self::shutdown), [`Error::is_closed`].
    pub async fn ready(&self, within: Duration) -> Result<Readiness> {
        let slots: Vec<Arc<Slot>> = {
            let guard = lock(&self.slots);
            let slots = guard.as_ref().ok_or_else(shut_down)?;
            slots.by_name.values().cloned().collect()
        };
        // Every slot at once: a required server's failure is said at once,
        // whatever the others are doing.
        let waiting = try_join_all(slots.iter().map(|slot| self.settle(slot.clone())));
        let waited = tokio::time::timeout(within, waiting).await;
        // Every state seen here has had its event sent.
        self.hub.sync();
        let timed_out = match waited {
            Ok(Ok(_)) => false,
            Ok(Err(error)) => return Err(error),
            Err(_) => true,
        };
        let mut readiness = Readiness::default();
        let mut late = Vec::new();
        for slot in &slots {
            let slot = self.latest(slot);
            let required = slot.required.load(Ordering::Acquire);
            let state = slot.state();
            let name = slot.name.to_string();
            if state.is_ready() {
                readiness.ready.push(name);
                continue;
            }
            if required {
                late.push(format!("`{name}` {state}"));
            }
            if slot.has_settled() {
                readiness.not_ready.insert(name, state);
            } else {
                readiness.pending.push(name);
            }
        }
        if timed_out && !late.is_empty() {
            return Err(Error::timeout(format!(
                "required servers not ready within {within:?}: {}",
                late.join("; ")
            )));
        }
        Ok(readiness)
    }

    /// Waits until `slot` (or the slot that replaced it) has settled: a
    /// required one until ready (an error when it cannot be by itself), the
    /// others until their first attempt has ended.
    async fn settle(&self, mut slot: Arc<Slot>) -> Result<()> {
        loop {
            if slot.required.load(Ordering::Acquire) {
                let state = slot.settled().await;
                if let (SlotState::Stopped, Some(next)) = (&state, self.replacement(&slot)) {
                    // Replaced meanwhile (a reload changed its spec): the
                    // new slot is the one to wait for, as it is now
                    // (required or not).
                    slot = next;
                    continue;
                }
                if !state.is_ready() {
                    return Err(Error::closed()
                        .context(format!("required server `{}` is {state}", slot.name)));
                }
            } else {
                slot.first_settled().await;
                if matches!(slot.state(), SlotState::Stopped) {
                    if let Some(next) = self.replacement(&slot) {
                        slot = next;
                        continue;
                    }
                }
            }
            return Ok(());
        }
    }

    /// The slot that replaced `slot` (same name), if any.
    pub(super) fn replacement(&self, slot: &Slot) -> Option<Arc<Slot>> {
        let guard = lock(&self.slots);
        let next = guard.as_ref()?.by_name.get(&slot.name)?;
        (next.id != slot.id).then(|| next.clone())
    }

    /// The last slot of `slot`'s line of replacements.
    fn latest(&self, slot: &Arc<Slot>) -> Arc<Slot> {
        let mut slot = slot.clone();
        while matches!(slot.state(), SlotState::Stopped) {
            match self.replacement(&slot) {
                Some(next) => slot = next,
                None => break,
            }
        }
        slot
    }
}
