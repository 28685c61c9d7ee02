//! Deadlines: the one place that turns a timeout into an instant and runs a
//! future until it. A leaf, so that the transport, the engine, the session
//! and the OAuth flow all take the same type instead of re-deriving bounds.
//!
//! Every function of the transport that sends something takes a
//! [`Deadline`]: an exchange cannot be written without deciding its bound.
//! [`Deadline::none`] is the one way to say "unbounded", kept for a
//! caller's explicit opt-out (`no_request_timeout`) and for the raw wire,
//! whose user times it.

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
    deadline_after_from(Instant::now(), bound)
}

/// `bound` after `start`; the far future when that overflows.
pub(crate) fn deadline_after_from(start: Instant, bound: Duration) -> Instant {
    start
        .checked_add(bound)
        .unwrap_or_else(|| start + FAR_FUTURE)
}

/// An exchange's deadline: when it ends, and what it was (for the error).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Deadline(Option<Bound>);

#[derive(Clone, Copy, Debug)]
struct Bound {
    at: Instant,
    limit: Duration,
    of: Of,
}

/// Whose limit a deadline is, which its error names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Of {
    /// A request's (or a notification's) timeout.
    Request,
    /// The whole of a connect.
    Connect,
    /// Ending a server session (the DELETE).
    Delete,
}

impl Deadline {
    /// A request's deadline: from now, `limit` (none: never).
    pub(crate) fn after(limit: Option<Duration>) -> Self {
        Deadline(limit.map(|limit| Bound {
            at: deadline_after(limit),
            limit,
            of: Of::Request,
        }))
    }

    /// No deadline: for the raw wire, whose user bounds what it awaits;
    /// rmcp's requests, which rmcp times; and an `initialize` whose caller
    /// bounds its wait while the server session's task bounds the rest.
    /// (A caller's explicit opt-out is `after(None)`.)
    pub(crate) const fn none() -> Self {
        Deadline(None)
    }

    /// The deadline of a whole connect: `limit` from now.
    pub(crate) fn connect(limit: Duration) -> Self {
        Deadline(Some(Bound {
            at: deadline_after(limit),
            limit,
            of: Of::Connect,
        }))
    }

    /// The deadline of a DELETE: at `at`, the end of a DELETE timeout of
    /// `limit` (shared by the sessions a close ends).
    pub(crate) fn delete(at: Instant, limit: Duration) -> Self {
        Deadline(Some(Bound {
            at,
            limit,
            of: Of::Delete,
        }))
    }

    /// The earlier of this deadline and a request timeout of `limit` from
    /// now: one exchange of a connect is bounded by both.
    pub(crate) fn within(self, limit: Option<Duration>) -> Self {
        self.earlier(Deadline::after(limit))
    }

    /// The earlier of two deadlines (none is the latest).
    pub(crate) fn earlier(self, other: Deadline) -> Self {
        match (self.0, other.0) {
            (Some(a), Some(b)) => Deadline(Some(if b.at < a.at { b } else { a })),
            (a, b) => Deadline(a.or(b)),
        }
    }

    /// The instant it ends, if it does.
    pub(crate) fn instant(self) -> Option<Instant> {
        self.0.map(|bound| bound.at)
    }

    /// The error of a future cut off by this deadline.
    pub(crate) fn error(self) -> Error {
        match self.0 {
            Some(Bound {
                limit,
                of: Of::Connect,
                ..
            }) => Error::timeout(format!("connect took longer than {limit:?}")),
            Some(Bound {
                limit,
                of: Of::Delete,
                ..
            }) => Error::delete_timeout(limit),
            Some(Bound { limit, .. }) => Error::request_timeout(limit),
            None => Error::timeout("an unbounded exchange timed out"),
        }
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
            Some(bound) => Either::Right(
                tokio::time::timeout_at(bound.at, future)
                    .map(move |timed| timed.unwrap_or_else(|_| Err(self.error()))),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_earlier_deadline_wins_and_names_its_limit() {
        let connect = Deadline::connect(Duration::from_millis(10));
        let request = connect.within(Some(Duration::from_secs(60)));
        let error = request
            .run(std::future::pending::<Result<()>>())
            .await
            .unwrap_err();
        assert!(error.is_timeout());
        assert!(error.to_string().contains("connect took longer"), "{error}");
        let short =
            Deadline::connect(Duration::from_secs(60)).within(Some(Duration::from_millis(10)));
        let error = short
            .run(std::future::pending::<Result<()>>())
            .await
            .unwrap_err();
        assert!(error.to_string().contains("no response within"), "{error}");
        assert!(Deadline::none().within(None).instant().is_none());
    }
}
