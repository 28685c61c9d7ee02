//! # mcp-scoped-http
//!
//! A Model Context Protocol (MCP) client transport over Streamable HTTP whose
//! promise is **resource scoping**: what it acquires for a session is released
//! exactly once, in reverse order, on every way out, and what the caller lent
//! it (its own HTTP client, a session it owns) is never closed or replaced.
//!
//! This release is the foundation: the wire ([`transport`]), the JSON-RPC
//! model ([`jsonrpc`]), the client port ([`client`]) and the error type
//! ([`Error`]). The session layer with its guard stack builds on it.
//!
//! ```no_run
//! use mcp_scoped_http::jsonrpc::Request;
//! use mcp_scoped_http::transport::{ProtocolVersion, StreamableHttp};
//! use mcp_scoped_http::HttpClient;
//! use serde_json::json;
//!
//! # async fn run() -> mcp_scoped_http::Result<()> {
//! let wire = StreamableHttp::new(HttpClient::owned()?, "https://example.com/mcp")?;
//! let init = wire
//!     .request(Request {
//!         id: 1.into(),
//!         method: "initialize".into(),
//!         params: Some(json!({
//!             "protocolVersion": ProtocolVersion::LATEST.as_str(),
//!             "capabilities": {},
//!             "clientInfo": {"name": "example", "version": "0.1.0"},
//!         })),
//!     })
//!     .await?;
//! let version: ProtocolVersion = init.result["protocolVersion"]
//!     .as_str()
//!     .unwrap_or_default()
//!     .parse()?;
//! wire.set_protocol_version(version);
//! // ... notifications/initialized, tools/list, ...
//! wire.delete_session().await?;
//! # Ok(())
//! # }
//! ```
//!
//! # Layout
//!
//! - [`error`]: the opaque [`Error`] with `is_*()` predicates; secrets never
//!   appear in its `Display` or `Debug`.
//! - [`jsonrpc`]: messages, lenient on input and exact on output.
//! - [`client`]: the client port, owned (built here, hyper-util) or borrowed
//!   (any `tower::Service` of the caller's).
//! - [`transport`]: the Streamable HTTP wire: POST, the GET stream, DELETE,
//!   session id and protocol version headers, SSE decoding, size limits,
//!   redirect policy.
//! - `testkit` (feature `testkit`): an in-process MCP server with scripted
//!   faults, for our tests and for yours.
//!
//! # Cancel safety
//!
//! Every future here may be dropped at any `.await`: no task is spawned on
//! the caller's behalf, and a dropped exchange drops its connection or stream.
//! The one piece of state, the session id and revision of a
//! [`StreamableHttp`](transport::StreamableHttp), is only written once an
//! answer has arrived.
//!
//! # Optional features
//!
//! - `rustls` (default): `https` for the owned client through hyper-rustls,
//!   with the `ring` crypto provider (built with the system C compiler, no
//!   cmake or nasm) and the Mozilla root set from webpki-roots.
//! - `testkit`: the fault-injecting test server.

#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod client;
pub mod error;
pub mod jsonrpc;
pub mod ledger;
mod origin;
mod scope;
pub mod session;
#[cfg(feature = "testkit")]
pub mod testkit;
pub mod transport;

pub use client::{HeaderHook, HookHandle};
pub use client::{HttpClient, HttpClientBuilder, Ownership};
pub use error::{Error, Result};
pub use ledger::{Ledger, abandoned_deletes, ledger};
pub use scope::{Released, SessionRelease, shutdown};
pub use session::{Catalog, Connector, Discovery, Session, SessionInfo, SessionOwnership};
