//! An [`rmcp`] client transport (feature `rmcp`): the official Rust SDK
//! drives the protocol, this crate owns what the session acquires.
//!
//! [`ScopedTransport`] implements rmcp's [`Transport<RoleClient>`], so
//! `().serve(transport)` (or `ClientInfo { .. }.serve(transport)`, or
//! [`rmcp::serve_client`]) runs over this crate's wire and guard stack, in
//! every era the crate speaks: rmcp sends `initialize` itself, and the
//! transport opens the server's era from it as
//! [`ScopedTransport`]'s docs say (2026-07-28 by
//! `server/discover`, the 2025 revisions, 2024-11-05's HTTP+SSE, stdio).
//! Since rmcp knows 2026-07-28, it drives multi round-trip results itself:
//! [`RunningService::call_tool`] (and `get_prompt`, `read_resource`)
//! answers each `input_required` result's requests through the
//! [`ClientHandler`] (elicitation, sampling, roots) and sends the request
//! again with `inputResponses`.
//!
//! # Every way out
//!
//! - **rmcp closes the service** ([`RunningService::cancel`], or dropping the
//!   [`RunningService`], whose task then closes the transport): the stack
//!   unwinds in order, as [`ScopedTransport::close`] says. What was
//!   released is reported through [`ReleaseReport`](super::ReleaseReport).
//! - **rmcp's `initialize` fails** or **the `serve` future is dropped
//!   half-way**: rmcp drops the transport without closing it, and the drop
//!   hands what needs waiting for (the DELETE) to the reaper, which
//!   [`crate::shutdown`] waits for. (rmcp 3.11's own Streamable HTTP
//!   client, as its source reads, DELETEs from a detached worker task that
//!   nothing can wait for, and not at all when the `initialize` answer
//!   fails after its head carried a session id. Its `TokioChildProcess`
//!   keeps a stdio server's child alone, with no group and nothing when the
//!   host dies.)
//!
//! # Errors
//!
//! The transport's error type is this crate's [`Error`]: rmcp wraps it (in
//! `ClientInitializeError::TransportError`, `ServiceError::TransportSend`);
//! [`scoped_error`] finds it again, with its status, JSON-RPC code and
//! predicates. A JSON-RPC error answered to `initialize` reaches rmcp as
//! such (`ClientInitializeError::JsonRpcError`).
//!
//! # Limits
//!
//! - rmcp must start with `initialize` (`serve`, `serve_client`) or with
//!   its own `server/discover` (`serve_client_with_lifecycle` in `Discover`
//!   or `Auto` mode). rmcp's `Discover` mode opens no
//!   `subscriptions/listen` stream of ours (rmcp subscribes itself).
//! - [`attach`](super::ScopedTransportBuilder::attach): start rmcp with
//!   [`rmcp::service::serve_directly`], which sends no `initialize`.
//! - 2026-07-28: rmcp's low-level [`Peer::call_tool`] reads an
//!   `input_required` result as `ServiceError::UnexpectedResponse` (its
//!   documented behaviour): use [`RunningService::call_tool`], which
//!   answers the input requests, or `call_tool_once` to drive the rounds
//!   yourself. rmcp's `ping` and `notifications/cancelled` are sent as
//!   2026-07-28 requests.
//! - A response rmcp cannot read (or whose result no `Value` can hold)
//!   still resolves its request, as a JSON-RPC error naming the cause;
//!   another message rmcp cannot read is dropped with a debug log.
//! - rmcp 3.11 needs Rust 1.88: this feature raises the crate's MSRV to it.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let server = mcp_scoped_http_testkit::TestServer::start(Default::default());
//! # let url = server.url();
//! use mcp_scoped_http::adapters::ScopedTransport;
//! use rmcp::ServiceExt;
//!
//! let mut transport = ScopedTransport::builder(url).bearer("token").build()?;
//! let report = transport.release_report();
//! let client = ().serve(transport).await?; // rmcp's initialize, our stack
//! let tools = client.peer().list_all_tools().await?;
//! # assert!(!tools.is_empty());
//! client.cancel().await?; // tasks, DELETE, hooks, then the owned client
//! let released = report.released().await.expect("closed, not dropped");
//! assert!(released.owned_client_released);
//! # Ok(())
//! # }
//! ```
//!
//! [`Transport<RoleClient>`]: rmcp::transport::Transport
//! [`RunningService::cancel`]: rmcp::service::RunningService::cancel
//! [`RunningService`]: rmcp::service::RunningService
//! [`RunningService::call_tool`]: rmcp::service::RunningService::call_tool
//! [`ClientHandler`]: rmcp::ClientHandler
//! [`Peer::call_tool`]: rmcp::Peer::call_tool

use std::borrow::Cow;

use futures_util::future::Either;
use rmcp::RoleClient;
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::{DynamicTransportError, Transport};

use super::ScopedTransport;
use crate::error::{Error, Result};
use crate::jsonrpc::{ErrorObject, Message, Response, codes};

/// rmcp's message as ours.
fn from_rmcp(message: TxJsonRpcMessage<RoleClient>) -> Result<Message> {
    serde_json::to_value(&message)
        .and_then(Message::from_value)
        .map_err(|e| Error::protocol("rmcp sent a message that is not JSON-RPC").with_source(e))
}

/// Ours as rmcp's. A response rmcp cannot read still resolves its request,
/// as an error; so does one whose result is JSON no `Value` can hold (a
/// number beyond `f64`, a lone surrogate: the engine keeps results as text).
fn to_rmcp(message: Message) -> Option<RxJsonRpcMessage<RoleClient>> {
    // Read from its text, as rmcp's own transports do: no `Value` of the
    // whole message is built on the way (a result is text until here).
    let read = serde_json::to_string(&message).and_then(|text| serde_json::from_str(&text));
    match read {
        Ok(message) => Some(message),
        Err(error) => match message {
            Message::Response(Response { id: Some(id), .. }) => {
                let fallback = Message::Response(Response {
                    id: Some(id),
                    outcome: Err(ErrorObject {
                        code: codes::INTERNAL_ERROR,
                        message: format!("rmcp could not read the response: {error}"),
                        data: None,
                    }),
                });
                serde_json::to_value(&fallback)
                    .ok()
                    .and_then(|v| serde_json::from_value(v).ok())
            }
            other => {
                tracing::debug!(method = ?other.method(), %error, "dropped a server message rmcp cannot read");
                None
            }
        },
    }
}

impl Transport<RoleClient> for ScopedTransport {
    type Error = Error;

    fn name() -> Cow<'static, str> {
        Cow::Borrowed("mcp-scoped-http")
    }

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<()>> + Send + 'static {
        // Either, not an async block holding the send: the future sits in
        // rmcp's serve task, whose stack a debug build fills.
        match from_rmcp(item) {
            Ok(message) => Either::Left(self.send_message(message)),
            Err(error) => Either::Right(std::future::ready(Err(error))),
        }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        loop {
            if let Some(message) = to_rmcp(self.receive_message().await?) {
                return Some(message);
            }
        }
    }

    /// See [`ScopedTransport::close`].
    async fn close(&mut self) -> Result<()> {
        ScopedTransport::close(self).await
    }
}

/// This crate's [`Error`] inside an rmcp error, if it came from a
/// [`ScopedTransport`]: in `ClientInitializeError::TransportError`, in
/// `ServiceError::TransportSend`, or anywhere down a source chain.
pub fn scoped_error<'a>(error: &'a (dyn std::error::Error + 'static)) -> Option<&'a Error> {
    if let Some(rmcp::service::ClientInitializeError::TransportError { error, .. }) =
        error.downcast_ref::<rmcp::service::ClientInitializeError>()
    {
        return scoped_error(error);
    }
    let mut current = Some(error);
    while let Some(error) = current {
        if let Some(ours) = error.downcast_ref::<Error>() {
            return Some(ours);
        }
        if let Some(dynamic) = error.downcast_ref::<DynamicTransportError>() {
            if let Some(ours) = dynamic.error.downcast_ref::<Error>() {
                return Some(ours);
            }
        }
        current = error.source();
    }
    None
}
