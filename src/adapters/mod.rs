//! Adapters: this crate's guarantees under other libraries' APIs.
//!
//! - [`ScopedTransport`]: a client transport for an SDK that runs the
//!   protocol itself and sends its own JSON-RPC messages. It reuses the
//!   session machinery (the guard stack, every era's wire, session-scoped
//!   hooks and the reaper), so whatever drives the protocol on top, what a
//!   session acquired is released in reverse order on every way out, and
//!   what the caller lent is never closed. The Python package is built on
//!   it.
//! - `rmcp` (feature `rmcp`): rmcp's `Transport` on [`ScopedTransport`],
//!   for rmcp, the official Rust SDK, and [`rmcp::scoped_error`].
//! - `reqwest` (feature `reqwest`): lend a caller's `reqwest::Client` to
//!   sessions with `HttpClient::from_reqwest`.

#[cfg(feature = "reqwest")]
pub mod reqwest;
#[cfg(feature = "rmcp")]
pub mod rmcp;
mod scoped;

#[cfg(feature = "stdio")]
pub use scoped::StdioTransportBuilder;
pub use scoped::{ReleaseReport, ScopedTransport, ScopedTransportBuilder};
