//! Capped exponential backoff: one schedule, two jitter policies.
//!
//! The fleet's slots draw a delay per failure count with full jitter
//! ([`Backoff`], public); the engine's reconnect loops (listeners,
//! resumption, renewals) keep a count in [`Retries`], jitter over the upper
//! half of the step and honour the server's `retry`.
//!
//! Why not a crate. `backon` (the usual choice) adds its jitter *on top* of
//! the step (`d + d × rand`, so up to twice the cap) and has neither full
//! nor upper-half jitter; tower's `retry::backoff::ExponentialBackoff` (the
//! `retry` feature) also adds jitter above the step, rejects a zero cap and
//! yields a `Sleep` rather than the duration, which the fleet reports
//! (`next_at`) and the engine raises to the server's `retry:` floor. What we
//! need on top of either — the floor, a count that starts anew only on
//! progress, [`MIN_BACKOFF`] — is most of this module, so we keep the
//! schedule (a shift and a min) too, with no dependency.

use std::hash::BuildHasher as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The least wait [`Retries`] ever returns, whatever it is configured
/// with: every reconnect loop is bounded in rate by construction.
pub(crate) const MIN_BACKOFF: Duration = Duration::from_millis(1);

/// Where in the step a delay is drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Jitter {
    /// Uniform in `[0, step]`: the widest spread ("full jitter").
    Full,
    /// Uniform in `[step / 2, step]`: spread, while each wait stays at
    /// least half the step, so the rate is bounded whatever the draw.
    UpperHalf,
}

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
    /// Full for every backoff built through the public API.
    jitter: Jitter,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff::new(Duration::from_millis(500), Duration::from_secs(60))
    }
}

impl Backoff {
    /// A backoff from `initial`, capped at `max`.
    pub fn new(initial: Duration, max: Duration) -> Self {
        Backoff {
            initial,
            max,
            jitter: Jitter::Full,
        }
    }

    /// The ceiling of the delay after failure `attempt` (1-based).
    pub fn ceiling(&self, attempt: u32) -> Duration {
        let doublings = attempt.saturating_sub(1).min(31);
        self.initial.saturating_mul(1u32 << doublings).min(self.max)
    }

    /// A delay for failure `attempt`: uniform in `[0, ceiling(attempt)]`.
    pub fn delay(&self, attempt: u32) -> Duration {
        self.delay_drawn(attempt, random())
    }

    /// The delay `draw` (0 is the least, `u64::MAX` the ceiling) picks
    /// for `attempt`, under this backoff's jitter.
    fn delay_drawn(&self, attempt: u32, draw: u64) -> Duration {
        let ceiling = self.ceiling(attempt);
        let least = match self.jitter {
            Jitter::Full => Duration::ZERO,
            Jitter::UpperHalf => ceiling / 2,
        };
        let span = u128::from(u64::try_from((ceiling - least).as_nanos()).unwrap_or(u64::MAX));
        let nanos = span * u128::from(draw) / u128::from(u64::MAX);
        // `nanos <= span <= u64::MAX`: the conversion cannot fail.
        least + Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }
}

/// Waits between attempts, the one type every reconnect loop of the engine
/// (the listeners of every era, resumption, renewals) uses: a step that
/// doubles per attempt up to a cap, jittered over its upper half (so that
/// sessions cut off together do not come back together, while the rate
/// stays bounded), and never shorter than the server's `retry` (capped) or
/// [`MIN_BACKOFF`].
#[derive(Debug)]
pub(crate) struct Retries {
    schedule: Backoff,
    /// Waits since the last progress.
    attempt: u32,
}

impl Retries {
    /// Steps from `first`, doubling to `max` (`first` is at most `max`;
    /// both at least [`MIN_BACKOFF`]).
    pub(crate) fn new(first: Duration, max: Duration) -> Self {
        let max = max.max(MIN_BACKOFF);
        Retries {
            schedule: Backoff {
                initial: first.clamp(MIN_BACKOFF, max),
                max,
                jitter: Jitter::UpperHalf,
            },
            attempt: 0,
        }
    }

    /// The next wait, and the step doubles (up to the cap).
    pub(crate) fn wait(&mut self, server_retry: Option<Duration>) -> Duration {
        self.attempt = self.attempt.saturating_add(1);
        let server = server_retry.unwrap_or_default().min(self.schedule.max);
        self.schedule
            .delay(self.attempt)
            .max(MIN_BACKOFF)
            .max(server)
    }

    /// Progress: the next wait starts from the first step again.
    pub(crate) fn reset(&mut self) {
        self.attempt = 0;
    }

    /// The longest wait.
    pub(crate) fn max(&self) -> Duration {
        self.schedule.max
    }
}

/// A uniform `u64` from the standard library's per-process random hash
/// keys (no random number crate for one draw per retry; not for secrets).
fn random() -> u64 {
    static DRAWS: AtomicU64 = AtomicU64::new(0);
    std::hash::RandomState::new().hash_one(DRAWS.fetch_add(1, Ordering::Relaxed))
}

#[cfg(test)]
mod tests {
    use super::*;

    const fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn the_ceiling_doubles_up_to_the_cap() {
        let backoff = Backoff::new(ms(10), ms(50));
        let ceilings: Vec<u128> = (1..=5).map(|n| backoff.ceiling(n).as_millis()).collect();
        assert_eq!(ceilings, [10, 20, 40, 50, 50]);
        assert_eq!(backoff.ceiling(0), ms(10));
        assert_eq!(backoff.ceiling(u32::MAX), ms(50));
        assert_eq!(
            Backoff::new(Duration::from_secs(1), Duration::MAX).ceiling(u32::MAX),
            Duration::from_secs(1) * (1 << 31)
        );
        // Saturates rather than overflowing.
        assert_eq!(
            Backoff::new(Duration::MAX, Duration::MAX).ceiling(40),
            Duration::MAX
        );
    }

    /// The draw's extremes land exactly on the interval's ends: full
    /// jitter reaches zero and the step, upper-half jitter half the step
    /// and the step; every draw in between stays inside.
    #[test]
    fn each_jitter_covers_its_interval_and_no_more() {
        let full = Backoff::new(ms(100), ms(800));
        let upper = Retries::new(ms(100), ms(800)).schedule;
        for attempt in 1..=6 {
            let step = full.ceiling(attempt);
            assert!(step <= ms(800));
            assert_eq!(full.delay_drawn(attempt, 0), Duration::ZERO);
            assert_eq!(full.delay_drawn(attempt, u64::MAX), step);
            assert_eq!(upper.delay_drawn(attempt, 0), step / 2);
            assert_eq!(upper.delay_drawn(attempt, u64::MAX), step);
            for draw in [1, u64::MAX / 3, u64::MAX / 2, u64::MAX - 1] {
                assert!(full.delay_drawn(attempt, draw) <= step);
                let d = upper.delay_drawn(attempt, draw);
                assert!(d >= step / 2 && d <= step, "{d:?} for {step:?}");
            }
            let middle = full.delay_drawn(attempt, u64::MAX / 2);
            assert!(middle.abs_diff(step / 2) <= Duration::from_nanos(1));
        }
        // The largest durations neither overflow nor pass the cap (a span
        // past u64::MAX nanoseconds, 584 years, is drawn within its first
        // 584 years).
        let huge = Backoff::new(Duration::MAX, Duration::MAX);
        let drawn = huge.delay_drawn(1, u64::MAX);
        assert!(drawn >= Duration::from_secs(1 << 34) && drawn <= Duration::MAX);
    }

    #[test]
    fn delays_are_spread_under_the_ceiling() {
        let backoff = Backoff::new(ms(100), ms(100));
        let delays: Vec<Duration> = (0..200).map(|_| backoff.delay(3)).collect();
        assert!(delays.iter().all(|d| *d <= ms(100)));
        let low = delays.iter().filter(|d| **d < ms(50)).count();
        // Full jitter: about half below the middle (200 draws; far from 0 or 200).
        assert!((40..=160).contains(&low), "{low} of 200 below the middle");
        // Both ends of [0, step] are reached: some in the lowest and the
        // highest tenth.
        assert!(delays.iter().any(|d| *d < ms(10)), "{delays:?}");
        assert!(delays.iter().any(|d| *d > ms(90)), "{delays:?}");
    }

    /// Every wait is within the step's upper half (so the rate is bounded
    /// whatever the jitter draws), the step doubles to the cap, the
    /// server's `retry` is a floor (capped), and progress starts again.
    #[test]
    fn retries_are_capped_jittered_and_floored() {
        let mut retries = Retries::new(ms(100), ms(800));
        let mut step = ms(100);
        let mut distinct = std::collections::HashSet::new();
        for _ in 0..50 {
            let wait = retries.wait(None);
            assert!(wait >= step / 2 && wait <= step, "{wait:?} for {step:?}");
            distinct.insert(wait);
            step = (step * 2).min(ms(800));
        }
        assert!(distinct.len() > 10, "jittered: {distinct:?}");
        assert_eq!(retries.wait(Some(Duration::from_secs(60))), ms(800));
        assert_eq!(retries.max(), ms(800));
        retries.reset();
        assert!(retries.wait(Some(Duration::ZERO)) <= ms(100));
        // The server's `retry` raises the first wait above the step.
        retries.reset();
        assert_eq!(retries.wait(Some(ms(300))), ms(300));
        // A zero configuration still waits.
        let mut zero = Retries::new(Duration::ZERO, Duration::ZERO);
        assert!(zero.wait(Some(Duration::ZERO)) >= MIN_BACKOFF);
        assert_eq!(zero.max(), MIN_BACKOFF);
        // The count saturates rather than overflowing.
        let mut long = Retries::new(ms(1), ms(5));
        long.attempt = u32::MAX;
        assert!(long.wait(None) <= ms(5));
    }
}
