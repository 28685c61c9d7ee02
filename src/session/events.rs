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
/// ([`RecvError::Lagged`](broadcast::error::RecvError::Lagged)).
///
/// [`Session::events`]: super::Session::events
pub const SESSION_EVENT_CAPACITY: usize = 64;

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
    ListenerDown {
        /// Why, for people (a log line, not a contract).
        reason: String,
        /// Whether the listener opens the stream again (after its
        /// backoff); `false` when it stopped for good (see
        /// [`Session::is_listening`](super::Session::is_listening)).
        retrying: bool,
    },
    /// The session is closing ([`Session::close`](super::Session::close) or
    /// drop): the last event; the stream ends after it.
    Closed,
}

/// The sending side of a session's events, and its catalog generation.
#[derive(Debug)]
pub(crate) struct Events {
    /// `None` once closed: every receiver then ends.
    sender: Mutex<Option<broadcast::Sender<SessionEvent>>>,
    catalog_generation: AtomicU64,
}

impl Events {
    pub(crate) fn new() -> Self {
        Events {
            sender: Mutex::new(Some(broadcast::channel(SESSION_EVENT_CAPACITY).0)),
            catalog_generation: AtomicU64::new(0),
        }
    }

    /// A receiver of the events from now on; one that ends at once after
    /// close.
    pub(crate) fn subscribe(&self) -> broadcast::Receiver<SessionEvent> {
        match &*lock(&self.sender) {
            Some(sender) => sender.subscribe(),
            None => broadcast::channel(1).1,
        }
    }

    /// Sends `event`, never waiting: a slow reader loses the oldest.
    pub(crate) fn send(&self, event: SessionEvent) {
        if let Some(sender) = &*lock(&self.sender) {
            // No receiver is no error: nobody is watching.
            let _ = sender.send(event);
        }
    }

    /// `list` was listed again and is in place: bumps the generation and
    /// says so (under one lock, so events come in generation order).
    pub(crate) fn catalog_changed(&self, list: ListKind) {
        let sender = lock(&self.sender);
        let generation = self.catalog_generation.fetch_add(1, Ordering::AcqRel) + 1;
        if let Some(sender) = &*sender {
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
        if let Some(sender) = lock(&self.sender).take() {
            let _ = sender.send(SessionEvent::Closed);
        }
    }
}
