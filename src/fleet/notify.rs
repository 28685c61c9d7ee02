//! What the fleet's servers say unasked: one bounded stream for all of
//! them ([`Fleet::notifications`](super::Fleet::notifications)).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::broadcast;

use super::{escape, lock};
use crate::jsonrpc::{Message, Notification};
use crate::{MemoryCharge, MemoryPool};

/// One notification a server sent on its own (a log message, a resource
/// update, a list change, progress not tied to a call), on
/// [`Fleet::notifications`](super::Fleet::notifications).
///
/// Its size stays charged to the fleet's memory budget while the stream's
/// buffer or any clone of it holds it: a clone is cheap (shared).
#[derive(Clone)]
#[non_exhaustive]
pub struct ServerNotification {
    /// The server's name.
    pub server: Arc<str>,
    /// The notification: its method (`notifications/message`, ...) and
    /// params, verbatim.
    pub message: Arc<Notification>,
    /// The message's weight on the fleet's account, given back when the
    /// last clone goes.
    _charge: Arc<MemoryCharge>,
}

impl std::fmt::Debug for ServerNotification {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The charge is bookkeeping, not part of the message.
        f.debug_struct("ServerNotification")
            .field("server", &self.server)
            .field("message", &self.message)
            .finish_non_exhaustive()
    }
}

impl ServerNotification {
    /// The notification's method.
    pub fn method(&self) -> &str {
        &self.message.method
    }

    /// The notification's params, if any.
    pub fn params(&self) -> Option<&serde_json::Value> {
        self.message.params.as_ref()
    }
}

/// The sending side, shared by every slot.
pub(crate) struct Notices {
    /// `None` once the fleet is shut down: the stream ends.
    tx: Mutex<Option<broadcast::Sender<ServerNotification>>>,
    /// Bounds what the buffer (and the readers' clones) hold, in bytes; a
    /// share of the fleet's pool, so the fleet's bound holds too.
    pool: MemoryPool,
    /// The most one notification may weigh: the buffer's share of the
    /// bytes bound, so that a full buffer (and the one being sent before
    /// the oldest is dropped for it) always fits. Without it, a receiver
    /// nobody reads keeps a few big notifications in the buffer, the
    /// bound is reached, and every later one is refused for every reader:
    /// the buffer only drops its oldest for a newer one it was given.
    max_one: usize,
    /// Notifications refused by the budget, for rate-limited warnings.
    refused: AtomicU64,
}

impl Notices {
    pub(crate) fn new(capacity: usize, max_bytes: usize, fleet: &MemoryPool) -> Notices {
        let capacity = capacity.max(1);
        let (tx, _) = broadcast::channel(capacity);
        // The channel rounds its capacity up to a power of two.
        let slots = capacity.checked_next_power_of_two().unwrap_or(usize::MAX);
        Notices {
            max_one: max_bytes / slots.saturating_add(1),
            tx: Mutex::new(Some(tx)),
            pool: MemoryPool::builder(max_bytes)
                .name(
                    "the memory budget of Fleet::notifications",
                    "FleetBuilder::notification_memory",
                )
                .parent(fleet)
                .build(),
            refused: AtomicU64::new(0),
        }
    }

    pub(crate) fn subscribe(&self) -> broadcast::Receiver<ServerNotification> {
        match lock(&self.tx).as_ref() {
            Some(tx) => tx.subscribe(),
            // Shut down: a stream that has ended.
            None => broadcast::channel(1).1,
        }
    }

    /// Ends the stream: readers get what is buffered, then the end.
    pub(crate) fn close(&self) {
        lock(&self.tx).take();
    }

    /// Publishes `message` of `server`, charged to the budget; never
    /// waits. Nobody listening, or over the budget: dropped.
    pub(crate) fn forward(&self, server: &Arc<str>, message: Message) {
        let weight = message.weight();
        let Message::Notification(notification) = message else {
            return;
        };
        let tx = lock(&self.tx);
        let Some(tx) = tx.as_ref().filter(|tx| tx.receiver_count() > 0) else {
            return;
        };
        let charged = if weight > self.max_one {
            Err(format!(
                "{weight} bytes, over the {} bytes one notification may take",
                self.max_one
            ))
        } else {
            self.pool.charge(weight).map_err(|spent| spent.to_string())
        };
        let charge = match charged {
            Ok(charge) => charge,
            Err(spent) => {
                // Rate-limited: the 1st, 2nd, 4th, 8th... refusal.
                let refused = self.refused.fetch_add(1, Ordering::Relaxed) + 1;
                if refused.is_power_of_two() {
                    tracing::warn!(
                        %server,
                        // The server's text: escaped and cut.
                        method = %escape(&notification.method, 128),
                        refused,
                        "fleet: a server notification dropped, over the memory budget of \
                         Fleet::notifications ({spent}); {refused} dropped so far"
                    );
                }
                return;
            }
        };
        // The buffer drops the oldest for a slow reader (who is told):
        // with it goes its charge.
        let _ = tx.send(ServerNotification {
            server: server.clone(),
            message: Arc::new(notification),
            _charge: Arc::new(charge),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Records the `method` field of this thread's events while it is the
    /// default subscriber.
    #[derive(Clone, Default)]
    struct Capture(Arc<Mutex<Option<String>>>);

    impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Capture {
        fn on_event(
            &self,
            event: &tracing::Event<'_>,
            _: tracing_subscriber::layer::Context<'_, S>,
        ) {
            event.record(
                &mut |field: &tracing::field::Field, value: &dyn std::fmt::Debug| {
                    if field.name() == "method" {
                        *lock(&self.0) = Some(format!("{value:?}"));
                    }
                },
            );
        }
    }

    impl Capture {
        fn set_default(&self) -> tracing::subscriber::DefaultGuard {
            use tracing_subscriber::layer::SubscriberExt as _;
            tracing::subscriber::set_default(tracing_subscriber::registry().with(self.clone()))
        }

        fn method(&self) -> Option<String> {
            lock(&self.0).clone()
        }
    }

    fn note(text: &str) -> Message {
        Message::Notification(Notification {
            method: "notifications/message".into(),
            params: Some(json!({"level": "info", "data": text})),
        })
    }

    /// The warning of a refused notification names its method, which is
    /// the server's text: escaped and cut, never a terminal escape or a
    /// megabyte in the host's log.
    #[test]
    fn a_refused_notification_s_method_is_logged_escaped_and_cut() {
        let capture = Capture::default();
        let _guard = capture.set_default();
        // Another test's thread may have registered the call site with no
        // subscriber first and cached "never": ask again.
        tracing::callsite::rebuild_interest_cache();
        let fleet = MemoryPool::new(1 << 20);
        let notices = Notices::new(2, 64, &fleet);
        let _reader = notices.subscribe();
        let method = format!("\u{1b}[31m{}", "x".repeat(100_000));
        notices.forward(
            &"a".into(),
            Message::Notification(Notification {
                method,
                params: None,
            }),
        );
        let logged = capture.method().expect("a warning naming the method");
        assert!(!logged.contains('\u{1b}'), "{logged:.80}");
        assert!(logged.len() <= 256, "{} bytes", logged.len());
    }

    /// A receiver nobody reads (a host that subscribed and forgot it)
    /// must not stop the stream for the readers that do read.
    #[test]
    fn a_forgotten_receiver_does_not_stop_the_stream_for_the_others() {
        let fleet = MemoryPool::new(1 << 30);
        let one = note(&"x".repeat(1000)).weight();
        // Room for the buffer's 8 and one more: one each at most.
        let notices = Notices::new(8, 9 * one, &fleet);
        let server: Arc<str> = "a".into();
        let _forgotten = notices.subscribe();
        let mut reader = notices.subscribe();
        let mut got = 0;
        for _ in 0..100 {
            notices.forward(&server, note(&"x".repeat(1000)));
            loop {
                match reader.try_recv() {
                    Ok(_) => got += 1,
                    Err(broadcast::error::TryRecvError::Lagged(_)) => {}
                    Err(_) => break,
                }
            }
        }
        assert_eq!(got, 100);
        // One over its share is refused, whatever room there is.
        notices.forward(&server, note(&"x".repeat(1001)));
        assert!(reader.try_recv().is_err());
    }

    /// What the buffer holds stays charged until it is dropped, and a
    /// notification over the budget is dropped, never queued uncharged.
    #[test]
    fn buffered_notifications_stay_charged_until_dropped() {
        let fleet = MemoryPool::new(1 << 20);
        let one = note(&"x".repeat(1000)).weight();
        let notices = Notices::new(2, 3 * one, &fleet);
        let server: Arc<str> = "a".into();
        // Nobody listens: nothing is held.
        notices.forward(&server, note(&"x".repeat(1000)));
        assert_eq!(fleet.held(), 0);
        let mut reader = notices.subscribe();
        for _ in 0..3 {
            notices.forward(&server, note(&"x".repeat(1000)));
        }
        // Two kept (the capacity), the oldest dropped with its charge.
        assert_eq!(fleet.held(), 2 * one);
        assert!(matches!(
            reader.try_recv(),
            Err(broadcast::error::TryRecvError::Lagged(1))
        ));
        let held = reader.try_recv().unwrap();
        assert_eq!(held.method(), "notifications/message");
        // Read, the buffer still holds it (for other readers) until a
        // newer one takes its place.
        assert_eq!(fleet.held(), 2 * one);
        // Over the bytes bound: a big one is refused, nothing more held.
        notices.forward(&server, note(&"x".repeat(4000)));
        assert_eq!(fleet.held(), 2 * one);
        drop(held);
        drop(reader);
        notices.close();
        assert_eq!(fleet.held(), 0);
    }
}
