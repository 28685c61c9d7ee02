//! Queues of server messages waiting for the caller, bounded in bytes as
//! well as in count. A leaf, below the session and the adapters: every
//! queue of what a server sent is made by [`bounded`], so none can forget
//! the byte bound (a count bound alone lets 256 parsed messages of 8 MiB of
//! wire, ~16x that once parsed, wait).
//!
//! The receiver is a plain [`mpsc::Receiver`] (the caller's type). What it
//! has taken is released from the bound by the sender at its next send: the
//! channel is first in, first out, so the messages still queued are the
//! last `max_capacity - capacity` sent, and the sizes of the others are
//! let go. The bound is exact whenever it decides.

use std::collections::VecDeque;
use std::mem::size_of;
use std::sync::Mutex;

use serde_json::Value;
use tokio::sync::mpsc;

use crate::jsonrpc::{Message, RequestId, Response};
use crate::sync::lock;

/// What a queued message holds, in bytes: its slot in the queue and what it
/// owns on the heap, as parsed (not its wire size).
pub(crate) trait Weigh {
    /// Bytes held while queued.
    fn weight(&self) -> usize;
}

/// A queue of at most `count` messages and `bytes` bytes ([`Weigh`]);
/// `what` names the queue and its bound in logs.
pub(crate) fn bounded<T: Weigh>(
    count: usize,
    bytes: usize,
    what: &'static str,
) -> (Sender<T>, mpsc::Receiver<T>) {
    let (tx, rx) = mpsc::channel(count.max(1));
    let sender = Sender {
        inner: Mutex::new(Inner {
            tx: Some(tx),
            sizes: VecDeque::new(),
            held: 0,
            dropped: 0,
        }),
        limit: bytes,
        what,
    };
    (sender, rx)
}

/// The sending side of a [`bounded`] queue.
pub(crate) struct Sender<T> {
    inner: Mutex<Inner<T>>,
    limit: usize,
    what: &'static str,
}

struct Inner<T> {
    /// `None` once closed.
    tx: Option<mpsc::Sender<T>>,
    /// The weight of each message sent and maybe still queued, oldest
    /// first.
    sizes: VecDeque<usize>,
    /// Their sum.
    held: usize,
    /// Messages dropped since the last one queued.
    dropped: u64,
}

impl<T> Inner<T> {
    /// Lets go of the sizes of the messages the receiver has taken.
    fn release(&mut self) {
        let Some(tx) = &self.tx else {
            return;
        };
        // Reserved permits count as queued: the estimate errs high.
        let queued = tx.max_capacity() - tx.capacity();
        while self.sizes.len() > queued {
            let size = self.sizes.pop_front().unwrap_or(0);
            self.held -= size;
        }
    }

    /// Records the weight of a message just sent, under the lock it was
    /// sent under: the order of `sizes` is the channel's.
    fn record(&mut self, weight: usize) {
        self.sizes.push_back(weight);
        self.held += weight;
    }
}

/// What became of a message offered to a queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Offered {
    Queued,
    /// The queue is full (in count or bytes): the message was dropped.
    Dropped,
    /// Nobody will read the queue any more.
    Closed,
}

impl<T: Weigh> Sender<T> {
    /// Queues `item` if the queue has room for it in count and in bytes;
    /// never waits. Over either bound, the message is dropped, with a
    /// warning at the first drop and at the end of a run of drops saying
    /// how many.
    pub(crate) fn offer(&self, item: T) -> Offered {
        let weight = item.weight();
        let mut inner = lock(&self.inner);
        inner.release();
        let Some(tx) = &inner.tx else {
            return Offered::Closed;
        };
        let fits = inner
            .held
            .checked_add(weight)
            .is_some_and(|total| total <= self.limit);
        let outcome = if fits {
            match tx.try_send(item) {
                Ok(()) => Offered::Queued,
                Err(mpsc::error::TrySendError::Full(_)) => Offered::Dropped,
                Err(mpsc::error::TrySendError::Closed(_)) => Offered::Closed,
            }
        } else {
            Offered::Dropped
        };
        match outcome {
            Offered::Queued => {
                inner.record(weight);
                let dropped = std::mem::take(&mut inner.dropped);
                if dropped > 0 {
                    tracing::warn!(
                        dropped,
                        "{}: {dropped} dropped while it was full",
                        self.what
                    );
                }
            }
            Offered::Dropped => {
                inner.dropped += 1;
                if inner.dropped == 1 {
                    tracing::warn!(
                        queued = inner.sizes.len(),
                        held = inner.held,
                        weight,
                        limit = self.limit,
                        "{}: full ({} messages, {} of {} bytes held; this one weighs {weight}): \
                         dropping what comes until the caller takes some",
                        self.what,
                        inner.sizes.len(),
                        inner.held,
                        self.limit,
                    );
                }
            }
            Offered::Closed => {}
        }
        outcome
    }

    /// Queues `item`, waiting for room in count (never in bytes: for what
    /// the caller asked for and waits on, such as a response, which the
    /// number of its requests in flight bounds). It is charged all the
    /// same, so that messages [`offer`](Self::offer)ed meanwhile are
    /// dropped. False when nobody will read the queue any more.
    // Only `adapters::ScopedTransport` waits for room (its responses must
    // not be lost).
    pub(crate) async fn send(&self, item: T) -> bool {
        let weight = item.weight();
        let Some(tx) = lock(&self.inner).tx.clone() else {
            return false;
        };
        let Ok(permit) = tx.reserve_owned().await else {
            return false;
        };
        let mut inner = lock(&self.inner);
        if inner.tx.is_none() {
            return false;
        }
        inner.release();
        permit.send(item);
        inner.record(weight);
        true
    }

    /// Closes the queue: the receiver ends once it has taken what is
    /// queued; later messages are refused.
    pub(crate) fn close(&self) {
        let mut inner = lock(&self.inner);
        inner.tx = None;
        if inner.dropped > 0 {
            tracing::warn!(
                dropped = inner.dropped,
                "{}: {} dropped while it was full",
                self.what,
                inner.dropped
            );
            inner.dropped = 0;
        }
    }

    /// Bytes held by queued messages, as of now.
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        let mut inner = lock(&self.inner);
        inner.release();
        inner.held
    }
}

/// A node of a [`Value`] (in its parent's array or map).
const NODE: usize = size_of::<Value>();
/// A member of a map, beyond its value's heap: its key and value, twice
/// over for the map's nodes and slack (as the catalog's estimate counts).
const MEMBER: usize = 2 * (size_of::<String>() + size_of::<Value>());

/// What a parsed value holds on the heap: each array's capacity, each
/// string's, each map member. Walked with a stack of iterators (as deep as
/// the value, not as wide), without building anything.
pub(crate) fn value_heap(value: &Value) -> usize {
    enum Children<'a> {
        Array(std::slice::Iter<'a, Value>),
        Object(serde_json::map::Iter<'a>),
    }
    let mut total = 0usize;
    let mut stack: Vec<Children<'_>> = Vec::new();
    let mut next = Some(value);
    loop {
        if let Some(value) = next.take() {
            match value {
                Value::String(s) => total = total.saturating_add(s.capacity()),
                Value::Array(a) => {
                    total = total.saturating_add(a.capacity().saturating_mul(NODE));
                    stack.push(Children::Array(a.iter()));
                }
                Value::Object(m) => stack.push(Children::Object(m.iter())),
                Value::Null | Value::Bool(_) | Value::Number(_) => {}
            }
        }
        let Some(top) = stack.last_mut() else {
            return total;
        };
        next = match top {
            Children::Array(items) => items.next(),
            Children::Object(members) => members.next().map(|(key, value)| {
                total = total.saturating_add(MEMBER + key.capacity());
                value
            }),
        };
        if next.is_none() {
            stack.pop();
        }
    }
}

fn id_heap(id: &RequestId) -> usize {
    match id {
        RequestId::String(s) => s.capacity(),
        _ => 0,
    }
}

impl Weigh for Message {
    fn weight(&self) -> usize {
        Message::weight(self)
    }
}

// Inherent, and here beside the other weights rather than in `jsonrpc`:
// it is how every queue of the crate measures a message, so a host's own
// queue (a fleet's notification stream) can bound itself the same way.
impl Message {
    /// The bytes this message holds as parsed: its own size and what it
    /// owns on the heap (not its wire size), as the crate's queues and
    /// memory budgets count it. An estimate, never below what is held.
    pub fn weight(&self) -> usize {
        let heap = match self {
            Message::Request(r) => {
                id_heap(&r.id) + r.method.capacity() + r.params.as_ref().map_or(0, value_heap)
            }
            Message::Notification(n) => {
                n.method.capacity() + n.params.as_ref().map_or(0, value_heap)
            }
            Message::Response(Response { id, outcome }) => {
                id.as_ref().map_or(0, id_heap)
                    + match outcome {
                        Ok(result) => result.get().len(),
                        Err(error) => {
                            error.message.capacity() + error.data.as_ref().map_or(0, value_heap)
                        }
                    }
            }
        };
        size_of::<Message>().saturating_add(heap)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jsonrpc::Notification;
    use serde_json::json;

    fn note(data: Value) -> Message {
        Message::Notification(Notification {
            method: "notifications/message".into(),
            params: Some(json!({ "data": data })),
        })
    }

    #[test]
    fn a_parsed_value_weighs_what_it_holds() {
        let zeros: Value = serde_json::from_str(&format!("[{}0]", "0,".repeat(999))).unwrap();
        assert!(value_heap(&zeros) >= 1000 * NODE, "{}", value_heap(&zeros));
        let deep: Value =
            serde_json::from_str(&format!("{}{}", "[".repeat(100), "]".repeat(100))).unwrap();
        // Each array holding one: at least its slot (a `Vec` keeps room for 4).
        assert!((99 * NODE..=99 * 4 * NODE).contains(&value_heap(&deep)));
        let member = json!({"key": "value"});
        assert!(value_heap(&member) >= MEMBER + 3 + 5);
        assert!(note(zeros).weight() > 1000 * NODE);
    }

    #[tokio::test]
    async fn over_the_bytes_messages_are_dropped_until_the_caller_takes_some() {
        let small = note(json!("x")).weight();
        let (tx, mut rx) = bounded::<Message>(100, 3 * small, "test queue");
        for _ in 0..3 {
            assert_eq!(tx.offer(note(json!("x"))), Offered::Queued);
        }
        assert_eq!(tx.held(), 3 * small);
        // Over the bytes (not the count): dropped.
        assert_eq!(tx.offer(note(json!("x"))), Offered::Dropped);
        assert_eq!(rx.len(), 3);
        // Taken: released, room again.
        rx.recv().await.unwrap();
        assert_eq!(tx.held(), 2 * small);
        assert_eq!(tx.offer(note(json!("x"))), Offered::Queued);
        // A waiting send is charged, never refused for bytes.
        assert!(tx.send(note(json!("big one, over the bound"))).await);
        assert!(tx.held() > 3 * small);
        assert_eq!(tx.offer(note(json!("x"))), Offered::Dropped);
        while rx.try_recv().is_ok() {}
        assert_eq!(tx.held(), 0);
        // Closed: refused, and the receiver ends.
        tx.close();
        assert_eq!(tx.offer(note(json!("x"))), Offered::Closed);
        assert!(!tx.send(note(json!("x"))).await);
        assert!(rx.recv().await.is_none());
    }

    #[tokio::test]
    async fn over_the_count_messages_are_dropped() {
        let (tx, mut rx) = bounded::<Message>(2, usize::MAX, "test queue");
        assert_eq!(tx.offer(note(json!(1))), Offered::Queued);
        assert_eq!(tx.offer(note(json!(2))), Offered::Queued);
        assert_eq!(tx.offer(note(json!(3))), Offered::Dropped);
        rx.recv().await.unwrap();
        assert_eq!(tx.offer(note(json!(4))), Offered::Queued);
        drop(rx);
        assert_eq!(tx.offer(note(json!(5))), Offered::Closed);
    }
}
