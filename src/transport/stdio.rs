//! The sending half of a stdio server's pipe: whole lines to the writer
//! task, or straight into the child's stdin when none is queued and the
//! pipe takes the line whole at once (see `StdinLane`).
//!
//! A line is handed to the writer whole, or not at all: a caller whose
//! deadline passes (or whose future is dropped) while stdin is full has
//! sent nothing, and the next line never lands in the middle of another.
//! The channel is small, so a server that stops reading its stdin holds
//! up senders (each within its deadline), never the host's memory.

use std::sync::{Arc, Mutex};

use serde_json::{Map, Value};
use tokio::sync::mpsc;

use super::metadata;
use super::{MessageStream, ProtocolVersion};
use crate::budget::Account;
use crate::deadline::Deadline;
use crate::error::{Error, Result};
use crate::jsonrpc::{Batch, Notification, Request, Response, encode, encode_call};
use crate::stdio::{Now, StdinLane};
use crate::sync::lock;

/// Lines waiting for the writer, at most.
pub(crate) const OUTGOING_LINES: usize = 16;

/// What every generation of one process shares.
struct Pipe {
    outgoing: mpsc::Sender<Vec<u8>>,
    lane: Arc<StdinLane>,
    account: Account,
    program: Arc<str>,
}

/// One generation's view of a stdio server's pipe: its own revision (a
/// probe's and the session's may differ), the same process.
pub(crate) struct StdioWire {
    pipe: Arc<Pipe>,
    version: Mutex<Option<ProtocolVersion>>,
    /// `clientInfo` and `clientCapabilities` as `_meta` fields, for the
    /// requests of 2026-07-28.
    client_meta: Option<Arc<Map<String, Value>>>,
}

impl StdioWire {
    /// A wire sending lines to `outgoing` (the writer task's channel), or
    /// straight in through `lane` when none is queued, charging what is
    /// read to `account`; `program` names the server.
    pub(crate) fn new(
        outgoing: mpsc::Sender<Vec<u8>>,
        lane: Arc<StdinLane>,
        account: Account,
        program: Arc<str>,
    ) -> Self {
        StdioWire {
            pipe: Arc::new(Pipe {
                outgoing,
                lane,
                account,
                program,
            }),
            version: Mutex::default(),
            client_meta: None,
        }
    }

    /// The `_meta` fields every request of 2026-07-28 carries
    /// ([`metadata::client_meta`]).
    pub(crate) fn with_client_meta(mut self, meta: Arc<Map<String, Value>>) -> Self {
        self.client_meta = Some(meta);
        self
    }

    /// Another generation on the same process: no revision yet.
    pub(crate) fn fresh(&self) -> StdioWire {
        StdioWire {
            pipe: self.pipe.clone(),
            version: Mutex::default(),
            client_meta: self.client_meta.clone(),
        }
    }

    /// The server's program, as configured (its name, not its path).
    pub(crate) fn program(&self) -> &str {
        &self.pipe.program
    }

    pub(crate) fn account(&self) -> &Account {
        &self.pipe.account
    }

    pub(crate) fn protocol_version(&self) -> Option<ProtocolVersion> {
        *lock(&self.version)
    }

    pub(crate) fn set_protocol_version(&self, version: ProtocolVersion) {
        *lock(&self.version) = Some(version);
    }

    /// `params` as sent: in 2026-07-28 with `_meta` (the revision and the
    /// client's identity), which over stdio is all the request metadata
    /// there is (no headers).
    fn params<'a>(&'a self, params: Option<&'a Value>) -> Option<metadata::WithMeta<'a>> {
        let version = self.protocol_version().filter(|v| v.is_modern())?;
        Some(metadata::WithMeta::new(
            params,
            self.client_meta.as_deref(),
            version.as_str(),
        ))
    }

    /// Writes `request`; its response comes on stdout, to the reader. The
    /// stream returned is empty.
    pub(crate) async fn send_request(
        &self,
        request: &Request,
        deadline: Deadline,
    ) -> Result<MessageStream> {
        let line = match self.params(request.params.as_ref()) {
            Some(params) => encode_call(Some(&request.id), &request.method, &params),
            None => encode(request),
        };
        self.send(line, deadline).await?;
        Ok(MessageStream::from_messages(Batch::Many(Vec::new())))
    }

    pub(crate) async fn send_notification(
        &self,
        notification: &Notification,
        deadline: Deadline,
    ) -> Result<()> {
        let line = match self.params(notification.params.as_ref()) {
            Some(params) => encode_call(None, &notification.method, &params),
            None => encode(notification),
        };
        self.send(line, deadline).await
    }

    pub(crate) async fn send_response(
        &self,
        response: &Response,
        deadline: Deadline,
    ) -> Result<()> {
        self.send(encode(response), deadline).await
    }

    /// Writes one line straight in, or hands it to the writer within
    /// `deadline`. serde_json escapes
    /// every newline inside strings, so the only one is the delimiter.
    async fn send(&self, mut line: Vec<u8>, deadline: Deadline) -> Result<()> {
        line.push(b'\n');
        let ticket = match self.pipe.lane.write_now(&line) {
            Now::Written => return Ok(()),
            Now::Queue(ticket) => ticket,
        };
        let reserve = async {
            self.pipe.outgoing.reserve().await.map_err(|_| {
                Error::closed().with_message(format!(
                    "the stdio server `{}` is gone: its stdin is closed",
                    self.pipe.program
                ))
            })
        };
        let permit = deadline.run(reserve).await.map_err(|error| {
            if error.is_timeout() {
                Error::timeout(format!(
                    "the stdio server `{}` did not read its stdin in time ({error})",
                    self.pipe.program
                ))
            } else {
                error
            }
        })?;
        permit.send(line);
        ticket.handed();
        Ok(())
    }
}

#[cfg(all(test, unix))]
mod tests {
    use std::time::Duration;

    use serde_json::json;
    use tokio::io::AsyncReadExt as _;
    use tokio::net::unix::pipe;

    use super::*;
    use crate::budget::MemoryBudget;
    use crate::stdio::write_lines;

    /// A wire and its writer task on a pipe of ours: the test reads the
    /// server's end.
    fn wire_on_a_pipe() -> (Arc<StdioWire>, pipe::Receiver, tokio::task::JoinHandle<()>) {
        let (stdin, server) = pipe::pipe().expect("a pipe");
        let (outgoing_tx, outgoing) = mpsc::channel(OUTGOING_LINES);
        let lane = Arc::new(StdinLane::default());
        let writer = tokio::spawn(write_lines(stdin, lane.clone(), outgoing));
        let account = Account::new(MemoryBudget::default());
        let wire = StdioWire::new(outgoing_tx, lane, account, Arc::from("test"));
        (Arc::new(wire), server, writer)
    }

    fn numbered(sender: usize, n: usize) -> Notification {
        Notification {
            method: "notifications/message".into(),
            // About 1 KiB a line: the pipe (64 KiB) fills within the test.
            params: Some(json!({"sender": sender, "n": n, "pad": "x".repeat(1000)})),
        }
    }

    /// Four senders, 150 lines each, more than the pipe and the writer's
    /// channel hold while nobody reads: lines go straight in while the pipe
    /// has room, then through the writer, then straight in again. Each
    /// sender's lines arrive whole and in its order.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn lines_stay_whole_and_in_order_as_the_pipe_fills_and_drains() {
        const SENDERS: usize = 4;
        const LINES: usize = 150;
        let (wire, mut server, _writer) = wire_on_a_pipe();
        let senders: Vec<_> = (0..SENDERS)
            .map(|sender| {
                let wire = wire.clone();
                tokio::spawn(async move {
                    for n in 0..LINES {
                        let deadline = Deadline::after(Some(Duration::from_secs(20)));
                        wire.send_notification(&numbered(sender, n), deadline)
                            .await
                            .expect("sent");
                    }
                })
            })
            .collect();
        // Until the pipe is full and lines wait for the writer (bounded).
        let queued = async {
            while wire.pipe.lane.queued() == 0 {
                tokio::task::yield_now().await;
            }
        };
        tokio::time::timeout(Duration::from_secs(20), queued)
            .await
            .expect("lines queued behind a full pipe");
        let mut text = Vec::new();
        let read = async {
            let mut chunk = [0u8; 8192];
            while text.iter().filter(|byte| **byte == b'\n').count() < SENDERS * LINES {
                let got = server.read(&mut chunk).await.expect("read");
                assert!(got > 0, "the pipe ended early");
                text.extend_from_slice(&chunk[..got]);
            }
        };
        tokio::time::timeout(Duration::from_secs(20), read)
            .await
            .expect("every line in time");
        for sender in senders {
            sender.await.expect("the sender");
        }
        let mut next = [0usize; SENDERS];
        for line in text
            .split(|byte| *byte == b'\n')
            .filter(|line| !line.is_empty())
        {
            let message: Value = serde_json::from_slice(line).expect("a whole JSON line");
            let sender = message["params"]["sender"].as_u64().expect("sender") as usize;
            let n = message["params"]["n"].as_u64().expect("n") as usize;
            assert_eq!(n, next[sender], "sender {sender}'s lines out of order");
            next[sender] += 1;
        }
        assert_eq!(next, [LINES; SENDERS]);
    }

    /// The lane holds the pipe only while the writer runs: the writer gone,
    /// the server sees its stdin end though the wire lives on, and a send
    /// says the server is gone.
    #[tokio::test]
    async fn stdin_closes_with_the_writer_while_the_wire_lives() {
        let (wire, mut server, writer) = wire_on_a_pipe();
        let deadline = || Deadline::after(Some(Duration::from_secs(5)));
        // Twice: the first may reach the writer's channel before it runs,
        // the second then goes straight in.
        for n in 0..2 {
            wire.send_notification(&numbered(0, n), deadline())
                .await
                .expect("sent");
        }
        let mut text = Vec::new();
        let mut chunk = [0u8; 4096];
        while text.iter().filter(|byte| **byte == b'\n').count() < 2 {
            let got = tokio::time::timeout(Duration::from_secs(20), server.read(&mut chunk))
                .await
                .expect("both lines in time")
                .expect("read");
            assert!(got > 0, "the pipe ended early");
            text.extend_from_slice(&chunk[..got]);
        }
        writer.abort();
        tokio::time::timeout(Duration::from_secs(20), server.read_to_end(&mut text))
            .await
            .expect("stdin ends with the writer")
            .expect("read");
        assert_eq!(text.iter().filter(|byte| **byte == b'\n').count(), 2);
        let error = wire
            .send_notification(&numbered(0, 1), deadline())
            .await
            .expect_err("the writer is gone");
        assert!(error.is_closed(), "{error}");
    }
}
