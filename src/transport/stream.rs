//! The messages a response (JSON or SSE) or the GET stream carries.

use std::collections::hash_map::RandomState;
use std::collections::{HashSet, VecDeque};
use std::fmt;
use std::hash::BuildHasher;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::BodyExt;

use super::sse::{SseDecoder, SseError};
use crate::client::ResponseBody;
use crate::error::{Error, Result};
use crate::jsonrpc::{Message, parse_messages};

/// The server's messages on one HTTP response, in the order sent.
///
/// For an `application/json` answer they are all there already. For an SSE
/// stream they are decoded as the body arrives, with memory bounded by the
/// configured event size. Events that carry no data (priming events: an id
/// and an empty `data`) and events of a type other than `message` yield no
/// message, but their `id` and `retry` are kept for resumption.
pub struct MessageStream {
    queue: VecDeque<Message>,
    body: Option<ResponseBody>,
    // Boxed: the decoder is large and a JSON answer never needs one.
    decoder: Option<Box<SseDecoder>>,
    failed: bool,
    /// The id of the event the queued messages came from, if it had one.
    event_id: Option<Arc<str>>,
    /// How many messages of that event have been taken.
    taken_in_event: usize,
}

/// Where a message stood on an SSE stream: its event's own id and its
/// place in that event (a batch holds several), so that a resumed stream's
/// replay of it can be recognised.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct ReplayKey {
    event_id: Arc<str>,
    index: usize,
}

/// The messages already seen on one request's streams, to ignore what a
/// resumed stream replays. Per message, not per event (a batch's messages
/// share their event's id), and bounded: it keeps 64-bit hashes of the
/// newest [`ReplayFilter::CAPACITY`] keys, never the ids themselves.
pub(crate) struct ReplayFilter {
    hasher: RandomState,
    order: VecDeque<u64>,
    seen: HashSet<u64>,
}

impl ReplayFilter {
    /// Keys remembered; older ones are forgotten.
    pub(crate) const CAPACITY: usize = 1024;

    pub(crate) fn new() -> Self {
        ReplayFilter {
            hasher: RandomState::new(),
            order: VecDeque::new(),
            seen: HashSet::new(),
        }
    }

    /// True the first time a key is seen.
    pub(crate) fn first(&mut self, key: &ReplayKey) -> bool {
        let hash = self.hasher.hash_one(key);
        if !self.seen.insert(hash) {
            return false;
        }
        if self.order.len() == Self::CAPACITY {
            if let Some(oldest) = self.order.pop_front() {
                self.seen.remove(&oldest);
            }
        }
        self.order.push_back(hash);
        true
    }
}

impl MessageStream {
    pub(crate) fn from_messages(messages: Vec<Message>) -> Self {
        MessageStream {
            queue: messages.into(),
            body: None,
            decoder: None,
            failed: false,
            event_id: None,
            taken_in_event: 0,
        }
    }

    pub(crate) fn from_sse(body: ResponseBody, max_event_size: usize) -> Self {
        MessageStream {
            queue: VecDeque::new(),
            body: Some(body),
            decoder: Some(Box::new(SseDecoder::with_max_event_size(max_event_size))),
            failed: false,
            event_id: None,
            taken_in_event: 0,
        }
    }

    /// Whether the server answered with an SSE stream.
    pub fn is_sse(&self) -> bool {
        self.decoder.is_some()
    }

    /// The id of the last SSE event seen, for `Last-Event-ID` on resumption.
    pub fn last_event_id(&self) -> Option<&str> {
        self.decoder.as_ref()?.last_event_id()
    }

    /// Where the message last taken stood: its SSE event's own id (when the
    /// event had an `id` field of its own) and its place in the event.
    pub(crate) fn replay_key(&self) -> Option<ReplayKey> {
        let event_id = self.event_id.clone()?;
        Some(ReplayKey {
            event_id,
            index: self.taken_in_event.checked_sub(1)?,
        })
    }

    /// The server's last `retry:` value, the wait before resuming.
    pub fn retry(&self) -> Option<Duration> {
        self.decoder.as_ref()?.retry()
    }

    /// The next message; `None` once the response has ended.
    ///
    /// An error ends the stream: a broken connection, an event over the size
    /// limit, an event that is not JSON-RPC. After an error `next` returns
    /// `None`; [`last_event_id`](Self::last_event_id) still tells where the
    /// stream broke.
    pub async fn next(&mut self) -> Option<Result<Message>> {
        if self.failed {
            return None;
        }
        loop {
            if let Some(message) = self.queue.pop_front() {
                self.taken_in_event += 1;
                return Some(Ok(message));
            }
            let decoder = self.decoder.as_mut()?;
            match decoder.next_event() {
                Ok(Some(event)) => {
                    let is_message = event.event.as_deref().is_none_or(|e| e == "message");
                    if is_message && event.has_data() {
                        self.event_id = event
                            .own_id
                            .then(|| event.id.as_deref().map(Arc::from))
                            .flatten();
                        self.taken_in_event = 0;
                        match parse_messages(event.data.as_bytes()) {
                            Ok(messages) => self.queue.extend(messages),
                            Err(e) => {
                                return self.fail(
                                    Error::protocol("an SSE event is not a JSON-RPC message")
                                        .with_source(e),
                                );
                            }
                        }
                    }
                    continue;
                }
                Ok(None) => {}
                Err(e) => return self.fail(sse_error(e)),
            }
            // Every complete event is out; an unterminated last one is
            // discarded at the end, as the SSE spec says.
            let body = self.body.as_mut()?;
            match body.frame().await {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        decoder.push(&data);
                    }
                }
                Some(Err(e)) => {
                    return self.fail(Error::transport(e).with_message("the SSE stream broke off"));
                }
                None => self.body = None,
            }
        }
    }

    fn fail(&mut self, error: Error) -> Option<Result<Message>> {
        // Drop the body now: the connection is not reusable after a broken
        // or over-limit stream, and holding it would keep the server's
        // writes (and memory) coming.
        self.body = None;
        self.queue.clear();
        self.failed = true;
        Some(Err(error))
    }
}

fn sse_error(error: SseError) -> Error {
    match error {
        SseError::EventTooLarge { .. } => Error::limit(error.to_string()),
        _ => Error::protocol("the SSE stream is not valid").with_source(error),
    }
}

impl fmt::Debug for MessageStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MessageStream")
            .field("sse", &self.is_sse())
            .field("queued", &self.queue.len())
            .field("open", &self.body.is_some())
            .finish()
    }
}
