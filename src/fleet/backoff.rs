//! Capped exponential backoff with full jitter.

use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// How long a slot waits before connecting again: after failure `n` (1,
/// 2, ...), a delay drawn uniformly from zero to
/// `min(max, initial × 2^(n-1))` ("full jitter"), so that the sessions of
/// a restarted server do not all come back at once.
///
/// Default: `initial` 500 ms, `max` 60 s.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Backoff {
    /// The ceiling after the first failure.
    pub initial: Duration,
    /// The ceiling's cap.
    pub max: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            initial: Duration::from_millis(500),
            max: Duration::from_secs(60),
        }
    }
}

impl Backoff {
    /// A backoff from `initial`, capped at `max`.
    pub fn new(initial: Duration, max: Duration) -> Self {
        Backoff { initial, max }
    }

    /// The ceiling of the delay after failure `attempt` (1-based).
    pub fn ceiling(&self, attempt: u32) -> Duration {
        let doublings = attempt.saturating_sub(1).min(32);
        self.initial
            .saturating_mul(1u32 << doublings.min(31))
            .min(self.max)
    }

    /// A delay for failure `attempt`: uniform in `[0, ceiling(attempt)]`.
    pub fn delay(&self, attempt: u32) -> Duration {
        let ceiling = self.ceiling(attempt);
        // Millionths of the ceiling, from a randomly keyed hash of a
        // counter: no random number crate for one draw per retry.
        let fraction = random() % 1_000_001;
        let nanos = ceiling.as_nanos() * u128::from(fraction) / 1_000_000;
        Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }
}

fn random() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    std::collections::hash_map::RandomState::new().hash_one(COUNTER.fetch_add(1, Ordering::Relaxed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ceiling_doubles_up_to_the_cap() {
        let backoff = Backoff::new(Duration::from_millis(10), Duration::from_millis(50));
        let ceilings: Vec<u128> = (1..=5).map(|n| backoff.ceiling(n).as_millis()).collect();
        assert_eq!(ceilings, [10, 20, 40, 50, 50]);
        assert_eq!(backoff.ceiling(u32::MAX), Duration::from_millis(50));
        assert_eq!(
            Backoff::new(Duration::from_secs(1), Duration::MAX).ceiling(u32::MAX),
            Duration::from_secs(1) * (1 << 31)
        );
    }

    #[test]
    fn delays_are_spread_under_the_ceiling() {
        let backoff = Backoff::new(Duration::from_millis(100), Duration::from_millis(100));
        let delays: Vec<Duration> = (0..200).map(|_| backoff.delay(3)).collect();
        assert!(delays.iter().all(|d| *d <= Duration::from_millis(100)));
        let low = delays
            .iter()
            .filter(|d| **d < Duration::from_millis(50))
            .count();
        // Full jitter: about half below the middle (200 draws; far from 0 or 200).
        assert!((40..=160).contains(&low), "{low} of 200 below the middle");
    }
}
