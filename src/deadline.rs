//! Deadlines: the one place that turns a timeout into an instant and runs a
//! future until it. A leaf, so that the transport, the engine, the session
//! and the OAuth flow all take the same type instead of re-deriving bounds.

use std::future::Future;
use std::time::Duration;

use futures_util::FutureExt as _;
use futures_util::future::Either;
use tokio::time::Instant;

use crate::error::{Error, Result};

/// About thirty years: the deadline of a bound too large to add to now.
const FAR_FUTURE: Duration = Duration::from_secs(30 * 365 * 86_400);

/// The instant `bound` from now; a bound that overflows (a timeout of
/// `Duration::MAX`, meaning none) is the far future, never a panic, which
/// in a `Drop` during unwinding would abort the process.
pub(crate) fn deadline_after(bound: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(bound).unwrap_or_else(|| now + FAR_FUTURE)
}

/// A request's deadline: its timeout, and when it ends.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Deadline(Option<(Duration, Instant)>);

impl Deadline {
    /// From now, `limit` (none: never).
    pub(crate) fn after(limit: Option<Duration>) -> Self {
        Deadline(limit.map(|limit| (limit, deadline_after(limit))))
    }

    /// Runs `future` until the deadline.
    ///
    /// A combinator, not an `async fn`: an `async fn` would hold `future`
    /// twice (as its argument and inside the timeout), doubling the size of
    /// every future above it.
    pub(crate) fn run<T>(
        self,
        future: impl Future<Output = Result<T>>,
    ) -> impl Future<Output = Result<T>> {
        match self.0 {
            None => Either::Left(future),
            Some((limit, at)) => Either::Right(
                tokio::time::timeout_at(at, future)
                    .map(move |timed| timed.unwrap_or_else(|_| Err(Error::request_timeout(limit)))),
            ),
        }
    }
}
