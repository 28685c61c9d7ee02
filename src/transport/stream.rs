//! The messages a response (JSON or SSE) or the GET stream carries.

use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::BodyExt;

use super::replay::ReplayKey;
use super::sse::{SseDecoder, SseError};
use crate::budget::{Account, Charge, messages_cost};
use crate::error::{Error, Result};
use crate::http_client::ResponseBody;
use crate::jsonrpc::{Batch, Message, ParseError, parse_messages};

/// The server's messages on one HTTP response, in the order sent.
///
/// For an `application/json` answer they are all there already. For an SSE
/// stream they are decoded as the body arrives, one event at a time, with
/// memory bounded by the configured event size: the next body frame is read
/// only once every event of the last one has been taken. Events that carry
/// no data (priming events: an id and an empty `data`) and events of a type
/// other than `message` yield no message, but their `id` and `retry` are kept
/// for resumption. A batch (a JSON array, in a JSON body or in one event) of
/// more messages than [`TransportConfig::max_batch_messages`] is refused.
///
/// [`TransportConfig::max_batch_messages`]: super::TransportConfig::max_batch_messages
pub struct MessageStream {
    /// The next message, ahead of `queue`: a body or event of one message
    /// (the usual case) never needs the queue.
    front: Option<Message>,
    queue: VecDeque<Message>,
    body: Option<ResponseBody>,
    // Boxed: the decoder is large and a JSON answer never needs one.
    decoder: Option<Box<SseDecoder>>,
    failed: bool,
    max_batch: usize,
    /// The own id of the event the queued messages came from, if it had one.
    event_id: Option<Arc<str>>,
    /// The index in that event of the message at the front of the queue.
    next_index: usize,
    /// Where the message `next` returned last came from.
    replay_key: Option<ReplayKey>,
    /// What the stream holds, charged to the session's memory account
    /// (when it has one): the decoder's bytes, an event's data while it is
    /// parsed, and the messages queued, by their parsed size.
    charge: Option<Charge>,
    /// The parsed size of the messages queued (front included).
    queued: usize,
}

impl MessageStream {
    pub(crate) fn from_messages(messages: Batch) -> Self {
        let (front, queue) = match messages {
            Batch::One(message) => (Some(message), VecDeque::new()),
            Batch::Many(messages) => (None, messages.into()),
        };
        MessageStream {
            front,
            queue,
            body: None,
            decoder: None,
            failed: false,
            max_batch: usize::MAX,
            event_id: None,
            next_index: 0,
            replay_key: None,
            charge: None,
            queued: 0,
        }
    }

    /// An SSE answer: events of at most `max_event_size` bytes, batches of
    /// at most `max_batch` messages.
    pub(crate) fn from_sse(body: ResponseBody, max_event_size: usize, max_batch: usize) -> Self {
        MessageStream {
            front: None,
            queue: VecDeque::new(),
            body: Some(body),
            decoder: Some(Box::new(SseDecoder::with_max_event_size(max_event_size))),
            failed: false,
            max_batch,
            event_id: None,
            next_index: 0,
            replay_key: None,
            charge: None,
            queued: 0,
        }
    }

    /// Charges what the stream holds to `account` from now on (an SSE
    /// stream, before its first read).
    pub(crate) fn charged_to(mut self, account: Option<&Account>) -> Self {
        self.charge = account.map(Account::holding);
        self
    }

    /// A JSON answer read under `charge`, its messages costing `cost`
    /// parsed.
    pub(crate) fn with_charge(mut self, charge: Option<Charge>, cost: usize) -> Self {
        self.charge = charge;
        self.queued = cost;
        self
    }

    /// Charges what the stream holds now, and `more` bytes about to be
    /// built: the decoder's bytes and the messages still queued.
    fn settle(&mut self, more: usize) -> Result<()> {
        if self.front.is_none() && self.queue.is_empty() {
            self.queued = 0;
        }
        let Some(charge) = &self.charge else {
            return Ok(());
        };
        let buffered = self.decoder.as_ref().map_or(0, |d| d.allocated_len());
        charge
            .resize(buffered.saturating_add(self.queued).saturating_add(more))
            .map_err(|spent| spent.reading("a server's message"))
    }

    /// Whether the server answered with an SSE stream.
    pub fn is_sse(&self) -> bool {
        self.decoder.is_some()
    }

    /// The id of the last SSE event seen, for `Last-Event-ID` on resumption.
    pub fn last_event_id(&self) -> Option<&str> {
        self.decoder.as_ref()?.last_event_id()
    }

    /// The id of the SSE event the last message came from, when that event
    /// had an `id` field of its own. One event may hold several messages (a
    /// batch), which share it.
    #[cfg(feature = "wire")]
    pub fn event_id(&self) -> Option<&str> {
        self.replay_key.as_ref().map(|key| &*key.event_id)
    }

    /// Where the message [`next`](Self::next) returned last came from: its
    /// event's own id and its index in that event, for spotting what a
    /// resumed stream replays (see [`ReplayFilter`](super::ReplayFilter)).
    /// `None` for a JSON answer, and for an event without an `id` field.
    pub(crate) fn replay_key(&self) -> Option<&ReplayKey> {
        self.replay_key.as_ref()
    }

    /// The server's last `retry:` value, the wait before resuming.
    pub fn retry(&self) -> Option<Duration> {
        self.decoder.as_ref()?.retry()
    }

    /// The next message; `None` once the response has ended.
    ///
    /// An error ends the stream: a broken connection, an event over the size
    /// limit, a batch over its limit, an event that is not JSON-RPC. After an
    /// error `next` returns `None`; [`last_event_id`](Self::last_event_id)
    /// still tells where the stream broke.
    pub async fn next(&mut self) -> Option<Result<Message>> {
        if self.failed {
            return None;
        }
        loop {
            if let Some(message) = self.front.take().or_else(|| self.queue.pop_front()) {
                self.replay_key = self.event_id.clone().map(|event_id| ReplayKey {
                    event_id,
                    index: self.next_index,
                });
                self.next_index += 1;
                // What is handed out is the caller's to charge: only what
                // stays queued is held here. A shrink cannot fail.
                let _ = self.settle(0);
                return Some(Ok(message));
            }
            let decoder = self.decoder.as_mut()?;
            match decoder.next_event() {
                Ok(Some(event)) => {
                    let is_message = event.event.as_deref().is_none_or(|e| e == "message");
                    if is_message && event.has_data() {
                        // Charged before it is built; what the estimate
                        // cannot read is never parsed.
                        let cost = match messages_cost(event.data.as_bytes(), self.max_batch) {
                            Ok(cost) => cost,
                            Err(e) => return self.fail(parse_error(e, "an SSE event")),
                        };
                        if let Err(error) = self.settle(event.data.len().saturating_add(cost)) {
                            return self.fail(error);
                        }
                        self.queued = cost;
                        match parse_messages(event.data.as_bytes(), self.max_batch) {
                            Ok(Batch::One(message)) => self.front = Some(message),
                            Ok(Batch::Many(messages)) => self.queue.extend(messages),
                            Err(e) => return self.fail(parse_error(e, "an SSE event")),
                        }
                        self.event_id = event.id.filter(|_| event.own_id);
                        self.next_index = 0;
                    }
                    continue;
                }
                Ok(None) => {}
                Err(e) => return self.fail(sse_error(e)),
            }
            // Every event pushed is out (the decoder holds nothing ready):
            // only now read the next frame. An unterminated last event is
            // discarded at the end, as the SSE spec says.
            let body = self.body.as_mut()?;
            match body.frame().await {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        decoder.push_bytes(data);
                        if let Err(error) = self.settle(0) {
                            return self.fail(error);
                        }
                    }
                }
                Some(Err(e)) => {
                    return self.fail(Error::transport(e).with_message("the SSE stream broke off"));
                }
                None => self.body = None,
            }
        }
    }

    /// HTTP+SSE (2024-11-05): reads up to the stream's first event, which
    /// must be `endpoint`, and returns its data (the URI to POST to).
    pub(crate) async fn endpoint_event(&mut self) -> Result<String> {
        loop {
            let Some(decoder) = self.decoder.as_mut() else {
                return Err(Error::protocol("not an event stream"));
            };
            match decoder.next_event() {
                Ok(Some(event)) if event.event.as_deref() == Some("endpoint") => {
                    return Ok(event.data.to_string());
                }
                Ok(Some(_)) => {
                    return Err(Error::protocol(
                        "the HTTP+SSE stream did not begin with an `endpoint` event",
                    ));
                }
                Ok(None) => {}
                Err(e) => return Err(sse_error(e)),
            }
            let Some(body) = self.body.as_mut() else {
                return Err(Error::protocol(
                    "the HTTP+SSE stream ended before its `endpoint` event",
                ));
            };
            match body.frame().await {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        decoder.push_bytes(data);
                    }
                }
                Some(Err(e)) => {
                    return Err(Error::transport(e).with_message("the HTTP+SSE stream broke off"));
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
        self.front = None;
        self.queue.clear();
        self.queued = 0;
        // The decoder stays (for `last_event_id`), charged as it holds.
        let _ = self.settle(0);
        self.failed = true;
        Some(Err(error))
    }
}

/// The error for a body (`what`) that is not a JSON-RPC message or batch.
pub(crate) fn parse_error(error: ParseError, what: &str) -> Error {
    match error {
        ParseError::TooMany { max } => {
            Error::limit(format!("{what} holds a batch of more than {max} messages"))
        }
        ParseError::Json(e) => {
            Error::protocol(format!("{what} is not a JSON-RPC message")).with_source(e)
        }
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
            .field(
                "queued",
                &(usize::from(self.front.is_some()) + self.queue.len()),
            )
            .field("open", &self.body.is_some())
            .finish()
    }
}
