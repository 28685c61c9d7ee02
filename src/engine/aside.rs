//! Server requests answered aside: every stream (a POST's answer, the GET
//! listener, `subscriptions/listen`, the HTTP+SSE stream) hands its server
//! requests to [`Engine::route`], which passes them here and reads on at
//! once. A handler that takes its time (a person answering an elicitation)
//! or an answer POST the server holds never delays the messages behind it,
//! above all the response a call is waiting for.
//!
//! At most [`SERVER_REQUESTS_IN_FLIGHT`] are answered at once per engine,
//! each by a task on the session's spawner (cancelled and joined at close).
//! Past that, requests wait in arrival order in a backlog of at most
//! [`SERVER_REQUESTS_BACKLOG`], each charged to the session's memory budget
//! while it waits and while it is answered; a request past the backlog (or
//! over the budget) is dropped, with a `warn!`: the server gets no answer
//! to it, as if it were lost, and the stream is read on.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use super::{Engine, Front, Generation, ServerMessage};
use crate::budget::Charge;
use crate::jsonrpc::{Message, Request};
use crate::sync::lock;

/// Server requests answered at once per session, at most.
pub(crate) const SERVER_REQUESTS_IN_FLIGHT: usize = 16;

/// Server requests waiting for a free answerer per session, at most (each
/// also charged to the memory budget); later ones are dropped.
pub(crate) const SERVER_REQUESTS_BACKLOG: usize = 256;

/// One server request to answer on the session that asked.
struct Asked {
    generation: Arc<Generation>,
    request: Request,
    /// What it holds, charged until it is answered (none for a bare
    /// transport).
    _charge: Option<Charge>,
}

#[derive(Default)]
struct State {
    /// Answering tasks alive (at most [`SERVER_REQUESTS_IN_FLIGHT`]).
    running: usize,
    /// Waiting for a task, oldest first.
    backlog: VecDeque<Asked>,
    /// Dropped since the last one accepted, for the log.
    dropped: u64,
}

/// The engine's answerers and their backlog.
#[derive(Default)]
pub(super) struct Answering {
    state: Mutex<State>,
}

impl Answering {
    /// The next request for a task that has answered one; `None` (and the
    /// task no longer counted) when nothing waits. One lock for both: a
    /// request queued while the last task ends is never stranded.
    fn next(&self) -> Option<Asked> {
        let mut state = lock(&self.state);
        let next = state.backlog.pop_front();
        if next.is_none() {
            state.running -= 1;
        }
        next
    }

    /// Drops what waits: the session is closing.
    pub(super) fn clear(&self) {
        let backlog = std::mem::take(&mut lock(&self.state).backlog);
        // Dropped with no lock held: a request holds a generation.
        drop(backlog);
    }
}

/// A running task's place, given back however the task ends (answered
/// all, cancelled, or never spawned).
struct Slot<F: Front> {
    engine: Arc<Engine<F>>,
    /// Given back already, by [`Answering::next`].
    done: bool,
}

impl<F: Front> Drop for Slot<F> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let backlog = {
            let mut state = lock(&self.engine.answering.state);
            state.running -= 1;
            // A task cut off by close: nobody will answer what waits.
            if self.engine.closing().is_cancelled() {
                std::mem::take(&mut state.backlog)
            } else {
                VecDeque::new()
            }
        };
        drop(backlog);
    }
}

impl<F: Front> Engine<F> {
    /// Has `request` (from `generation`) answered aside: never waits.
    pub(super) fn answer_aside(self: &Arc<Self>, generation: &Arc<Generation>, request: Request) {
        let message = Message::Request(request);
        let charge = match generation.wire().account() {
            Some(account) => match account.charge(message.weight(), 0) {
                Ok(charge) => Some(charge),
                Err(spent) => {
                    tracing::warn!(%spent, "dropped a server request: over the memory budget");
                    return;
                }
            },
            None => None,
        };
        let Message::Request(request) = message else {
            unreachable!("made a request above")
        };
        let asked = Asked {
            generation: generation.clone(),
            request,
            _charge: charge,
        };
        let mut state = lock(&self.answering.state);
        if self.closing().is_cancelled() {
            return;
        }
        if state.running == SERVER_REQUESTS_IN_FLIGHT {
            if state.backlog.len() == SERVER_REQUESTS_BACKLOG {
                state.dropped += 1;
                // Once per burst: a server can send them faster than logs.
                if state.dropped == 1 {
                    tracing::warn!(
                        method = %asked.request.method,
                        "dropped a server request: {SERVER_REQUESTS_IN_FLIGHT} are being \
                         answered and {SERVER_REQUESTS_BACKLOG} wait"
                    );
                }
                drop(state);
                return;
            }
            if state.dropped > 0 {
                tracing::warn!(
                    dropped = state.dropped,
                    "server requests were dropped: too many at once"
                );
                state.dropped = 0;
            }
            state.backlog.push_back(asked);
            return;
        }
        state.running += 1;
        drop(state);
        let slot = Slot {
            engine: self.clone(),
            done: false,
        };
        // Not spawned (closing): the slot, and the request, are dropped.
        self.spawner.spawn(move |closing| async move {
            let mut slot = slot;
            let mut next = Some(asked);
            while let Some(asked) = next {
                let Asked {
                    generation,
                    request,
                    _charge: charge,
                } = asked;
                let engine = &slot.engine;
                tokio::select! {
                    _ = closing.cancelled() => return,
                    () = F::deliver(engine, &generation, ServerMessage::Request(request)) => {}
                }
                drop(charge);
                next = engine.answering.next();
            }
            slot.done = true;
        });
    }
}
