//! The sending half of a stdio server's pipe: whole lines to the writer
//! task, which alone writes the child's stdin.
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
use crate::sync::lock;

/// Lines waiting for the writer, at most.
pub(crate) const OUTGOING_LINES: usize = 16;

/// What every generation of one process shares.
struct Pipe {
    outgoing: mpsc::Sender<Vec<u8>>,
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
    /// A wire sending lines to `outgoing` (the writer task's channel),
    /// charging what is read to `account`; `program` names the server.
    pub(crate) fn new(
        outgoing: mpsc::Sender<Vec<u8>>,
        account: Account,
        program: Arc<str>,
    ) -> Self {
        StdioWire {
            pipe: Arc::new(Pipe {
                outgoing,
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

    /// Hands one line to the writer within `deadline`. serde_json escapes
    /// every newline inside strings, so the only one is the delimiter.
    async fn send(&self, mut line: Vec<u8>, deadline: Deadline) -> Result<()> {
        line.push(b'\n');
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
        Ok(())
    }
}
