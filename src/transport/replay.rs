//! Spotting the messages a resumed SSE stream replays.
//!
//! A server that resumes a stream after `Last-Event-ID` may send again
//! events the client has seen (at-least-once delivery). One event may carry a
//! batch of messages (2025-03-26 allows batches), so a message is known by
//! its event's id **and** its place in the event: keying on the id alone
//! would take the second message of a batch for a replay of the first.

use std::collections::hash_map::RandomState;
use std::collections::{HashSet, VecDeque};
use std::hash::BuildHasher;
use std::sync::Arc;

/// Where a message came from on an SSE stream: the event's own id and the
/// message's index in that event (0 unless the event holds a batch).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ReplayKey {
    /// The `id` field of the event (not one carried over from an earlier
    /// event), shared with the decoder.
    pub(crate) event_id: Arc<str>,
    /// The message's index in the event's batch.
    pub(crate) index: usize,
}

/// The messages already seen on one request's streams, to drop what a
/// resumed stream replays.
///
/// Bounded in entries and in bytes: it remembers the last
/// [`REMEMBERED`](Self::REMEMBERED) keys as 64-bit hashes (keyed by a
/// per-filter random state, so a server cannot aim for collisions), never the
/// ids themselves; only the id it hashed last is kept, shared, so that the
/// messages of one batch hash a long id once rather than once each. A false
/// match, which would drop a message, has a chance of about 2^-54 per
/// message.
pub(crate) struct ReplayFilter {
    state: RandomState,
    /// The one hash seen, while there is one: most answers are a single
    /// event, and remembering it costs no allocation.
    only: Option<u64>,
    /// Hashes in the order seen, oldest first, from the second one on.
    order: VecDeque<u64>,
    seen: HashSet<u64>,
    /// The id hashed last and its hash.
    last_id: Option<(Arc<str>, u64)>,
}

impl ReplayFilter {
    /// How many keys a filter remembers; older ones are forgotten.
    pub(crate) const REMEMBERED: usize = 1024;

    pub(crate) fn new() -> Self {
        ReplayFilter {
            state: RandomState::new(),
            only: None,
            order: VecDeque::new(),
            seen: HashSet::new(),
            last_id: None,
        }
    }

    /// True the first time `key` is seen (among the last
    /// [`REMEMBERED`](Self::REMEMBERED)); false for a replay.
    pub(crate) fn first(&mut self, key: &ReplayKey) -> bool {
        let id_hash = match &self.last_id {
            Some((id, hash)) if Arc::ptr_eq(id, &key.event_id) => *hash,
            _ => {
                let hash = self.state.hash_one(&*key.event_id);
                self.last_id = Some((key.event_id.clone(), hash));
                hash
            }
        };
        let hash = self.state.hash_one((id_hash, key.index));
        if self.order.is_empty() {
            match self.only {
                None => {
                    self.only = Some(hash);
                    return true;
                }
                Some(only) if only == hash => return false,
                Some(only) => {
                    self.only = None;
                    self.order.push_back(only);
                    self.seen.insert(only);
                }
            }
        }
        if self.seen.contains(&hash) {
            return false;
        }
        if self.order.len() == Self::REMEMBERED {
            if let Some(oldest) = self.order.pop_front() {
                self.seen.remove(&oldest);
            }
        }
        self.order.push_back(hash);
        self.seen.insert(hash);
        true
    }
}

impl Default for ReplayFilter {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(id: &Arc<str>, index: usize) -> ReplayKey {
        ReplayKey {
            event_id: id.clone(),
            index,
        }
    }

    #[test]
    fn each_message_of_a_batch_passes_once() {
        let mut filter = ReplayFilter::new();
        let id: Arc<str> = Arc::from("ev-1");
        for index in 0..3 {
            assert!(filter.first(&key(&id, index)), "message {index}");
        }
        let other: Arc<str> = Arc::from("ev-2");
        assert!(filter.first(&key(&other, 0)));
    }

    /// The usual answer, one event, is remembered without a set; its
    /// replay is still dropped, and a second event moves both into the set.
    #[test]
    fn a_lone_event_replayed_is_dropped() {
        let mut filter = ReplayFilter::new();
        let id: Arc<str> = Arc::from("ev-1");
        assert!(filter.first(&key(&id, 0)));
        assert!(filter.order.is_empty() && filter.seen.capacity() == 0);
        assert!(!filter.first(&key(&Arc::from("ev-1"), 0)));
        assert!(filter.first(&key(&Arc::from("ev-2"), 0)));
        assert_eq!(filter.order.len(), 2);
        assert!(!filter.first(&key(&Arc::from("ev-1"), 0)));
        assert!(!filter.first(&key(&Arc::from("ev-2"), 0)));
    }

    #[test]
    fn an_event_replayed_later_is_dropped_whole() {
        let mut filter = ReplayFilter::new();
        let first: Arc<str> = Arc::from("ev-1");
        let second: Arc<str> = Arc::from("ev-2");
        assert!(filter.first(&key(&first, 0)));
        assert!(filter.first(&key(&first, 1)));
        assert!(filter.first(&key(&second, 0)));
        // The replay comes in a new stream: equal ids, other allocations.
        let replayed: Arc<str> = Arc::from("ev-1");
        assert!(!filter.first(&key(&replayed, 0)));
        assert!(!filter.first(&key(&replayed, 1)));
        // A message the first delivery did not have is new.
        assert!(filter.first(&key(&replayed, 2)));
        assert!(!filter.first(&key(&Arc::from("ev-2"), 0)));
    }

    #[test]
    fn the_oldest_keys_are_forgotten() {
        let mut filter = ReplayFilter::new();
        let ids: Vec<Arc<str>> = (0..=ReplayFilter::REMEMBERED)
            .map(|n| Arc::from(format!("ev-{n}")))
            .collect();
        for id in &ids {
            assert!(filter.first(&key(id, 0)));
        }
        assert_eq!(filter.order.len(), ReplayFilter::REMEMBERED);
        assert_eq!(filter.seen.len(), ReplayFilter::REMEMBERED);
        // The first was forgotten; the last is still known.
        assert!(filter.first(&key(&ids[0], 0)));
        assert!(!filter.first(&key(&ids[ReplayFilter::REMEMBERED], 0)));
    }

    #[test]
    fn memory_does_not_grow_with_the_id_length() {
        let mut filter = ReplayFilter::new();
        let mut ids = Vec::new();
        for n in 0..2 * ReplayFilter::REMEMBERED {
            // Long ids, each its own allocation, as a hostile server's.
            let id: Arc<str> = Arc::from(format!("{n:08}{}", "x".repeat(64 * 1024)));
            assert!(filter.first(&key(&id, 0)));
            assert!(filter.first(&key(&id, 1)));
            ids.push(Arc::downgrade(&id));
        }
        // Entries are capped, and each is a hash, whatever the ids' length.
        assert_eq!(filter.order.len(), ReplayFilter::REMEMBERED);
        assert_eq!(filter.seen.len(), ReplayFilter::REMEMBERED);
        assert!(filter.order.capacity() <= 2 * ReplayFilter::REMEMBERED);
        assert!(filter.seen.capacity() <= 4 * ReplayFilter::REMEMBERED);
        // No id outlives its event but the one hashed last.
        let alive = ids.iter().filter(|id| id.upgrade().is_some()).count();
        assert_eq!(alive, 1);
        assert!(ids.last().unwrap().upgrade().is_some());
    }
}
