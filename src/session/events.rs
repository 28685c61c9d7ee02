//! What happened to a session, as a stream: [`Session::events`].
//!
//! [`Session::events`]: super::Session::events

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::broadcast;

use super::discovery::ListKind;
use crate::sync::lock;
use crate::transport::{ProtocolVersion, SessionId};

/// Events kept for the slowest reader of [`Session::events`]; older ones
/// are dropped for it, and it is told how many
/// ([`RecvError::Lagged`](broadcast::error::RecvError::Lagged)). Events
/// are rare (a change, a renewal, a listener's open or end, which its
/// backoff bounds), so a reader that reads at all keeps up; the buffer,
/// about 2 KiB, is made when the first reader asks for it.
///
/// [`Session::events`]: super::Session::events
pub const SESSION_EVENT_CAPACITY: usize = 32;

/// One list of a [`Catalog`](super::Catalog).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CatalogList {
    /// [`Catalog::tools`](super::Catalog::tools).
    Tools,
    /// [`Catalog::prompts`](super::Catalog::prompts).
    Prompts,
    /// [`Catalog::resources`](super::Catalog::resources).
    Resources,
    /// [`Catalog::resource_templates`](super::Catalog::resource_templates).
    ResourceTemplates,
}

impl From<ListKind> for CatalogList {
    fn from(kind: ListKind) -> Self {
        match kind {
            ListKind::Tools => CatalogList::Tools,
            ListKind::Prompts => CatalogList::Prompts,
            ListKind::Resources => CatalogList::Resources,
            ListKind::ResourceTemplates => CatalogList::ResourceTemplates,
        }
    }
}

/// One thing that happened to a [`Session`](super::Session), on
/// [`Session::events`](super::Session::events).
///
/// Events say what changed; the session's accessors say what is:
/// [`Session::catalog`](super::Session::catalog),
/// [`Session::session_id`](super::Session::session_id),
/// [`Session::is_listening`](super::Session::is_listening). A reader that
/// lagged (and lost events) reads those.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum SessionEvent {
    /// The server expired the session and a new one replaced it (a new
    /// `initialize`): requests go to it from now on. Its lists are being
    /// listed again: a [`CatalogChanged`](Self::CatalogChanged) per list
    /// follows once each is in place.
    #[non_exhaustive]
    Renewed {
        /// The new session's id, if the server issued one (a credential:
        /// see [`SessionId`]).
        session_id: Option<SessionId>,
        /// The revision negotiated with the new session.
        revision: ProtocolVersion,
    },
    /// A list of the catalog was listed again (after a
    /// `notifications/*/list_changed`, a renewal, or a 2026-07-28
    /// `HeaderMismatch`) and is in place: [`Session::catalog`] shows it
    /// when this event is read.
    ///
    /// [`Session::catalog`]: super::Session::catalog
    #[non_exhaustive]
    CatalogChanged {
        /// The session's catalog generation after the change
        /// ([`Session::catalog_generation`](super::Session::catalog_generation)):
        /// one more per list re-listed, never going back.
        generation: u64,
        /// The list that was listed again.
        list: CatalogList,
    },
    /// A listening stream opened (the GET stream in 2025, a
    /// `subscriptions/listen` in 2026-07-28): what the server sends unasked
    /// reaches the session. Follows the listener's actual opens, which the
    /// listening policy bounds in rate (see
    /// [`Session::is_listening`](super::Session::is_listening)).
    ListenerUp,
    /// A listening stream ended, or the listener stopped.
    #[non_exhaustive]
    ListenerDown {
        /// Why, for people (a log line, not a contract).
        reason: String,
        /// Whether the listener opens the stream again (after its
        /// backoff); `false` when it stopped for good (see
        /// [`Session::is_listening`](super::Session::is_listening)).
        retrying: bool,
    },
    /// The server ended the session and it cannot be replaced (an HTTP+SSE
    /// stream that ended, or broke the protocol or a limit): every request
    /// fails from now on, until the session is closed. A host reconnects.
    #[non_exhaustive]
    Ended {
        /// Why, for people (a log line, not a contract).
        reason: String,
    },
    /// The session is closing ([`Session::close`](super::Session::close) or
    /// drop): the last event; the stream ends after it.
    Closed,
}

/// Where a session's events go.
#[derive(Debug, Default)]
enum Channel {
    /// Nobody has asked for events yet: nothing to send to, and no buffer
    /// held (most sessions are never watched).
    #[default]
    Unwatched,
    Open(broadcast::Sender<SessionEvent>),
    /// Closed: every receiver has ended, and new ones end at once.
    Closed,
}

/// The sending side of a session's events, and its catalog generation.
#[derive(Debug, Default)]
pub(crate) struct Events {
    channel: Mutex<Channel>,
    catalog_generation: AtomicU64,
}

impl Events {
    /// A receiver of the events from now on; one that ends at once after
    /// close. The buffer is made for the first.
    pub(crate) fn subscribe(&self) -> broadcast::Receiver<SessionEvent> {
        let mut channel = lock(&self.channel);
        match &*channel {
            Channel::Open(sender) => sender.subscribe(),
            Channel::Unwatched => {
                let (sender, receiver) = broadcast::channel(SESSION_EVENT_CAPACITY);
                *channel = Channel::Open(sender);
                receiver
            }
            Channel::Closed => broadcast::channel(1).1,
        }
    }

    /// Sends `event`, never waiting: a slow reader loses the oldest.
    pub(crate) fn send(&self, event: SessionEvent) {
        if let Channel::Open(sender) = &*lock(&self.channel) {
            // No receiver is no error: nobody is watching.
            let _ = sender.send(event);
        }
    }

    /// `list` was listed again and is in place: bumps the generation and
    /// says so (under one lock, so events come in generation order).
    pub(crate) fn catalog_changed(&self, list: ListKind) {
        let channel = lock(&self.channel);
        let generation = self.catalog_generation.fetch_add(1, Ordering::AcqRel) + 1;
        if let Channel::Open(sender) = &*channel {
            let _ = sender.send(SessionEvent::CatalogChanged {
                generation,
                list: list.into(),
            });
        }
    }

    pub(crate) fn catalog_generation(&self) -> u64 {
        self.catalog_generation.load(Ordering::Acquire)
    }

    /// Sends [`SessionEvent::Closed`] (once) and ends every receiver.
    pub(crate) fn close(&self) {
        let channel = std::mem::replace(&mut *lock(&self.channel), Channel::Closed);
        if let Channel::Open(sender) = channel {
            let _ = sender.send(SessionEvent::Closed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::broadcast::error::TryRecvError;

    #[test]
    fn changes_come_in_generation_order_and_close_ends_every_receiver() {
        let events = Events::default();
        // Unwatched: counted, not sent, no buffer.
        events.catalog_changed(ListKind::Tools);
        assert!(matches!(*lock(&events.channel), Channel::Unwatched));
        let mut receiver = events.subscribe();
        events.catalog_changed(ListKind::Prompts);
        events.send(SessionEvent::ListenerUp);
        events.close();
        events.close();
        assert!(matches!(
            receiver.try_recv(),
            Ok(SessionEvent::CatalogChanged {
                generation: 2,
                list: CatalogList::Prompts
            })
        ));
        assert!(matches!(receiver.try_recv(), Ok(SessionEvent::ListenerUp)));
        assert!(matches!(receiver.try_recv(), Ok(SessionEvent::Closed)));
        assert!(matches!(receiver.try_recv(), Err(TryRecvError::Closed)));
        assert!(matches!(
            events.subscribe().try_recv(),
            Err(TryRecvError::Closed)
        ));
        assert_eq!(events.catalog_generation(), 2);
    }
}
