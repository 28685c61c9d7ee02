//! Adapters: this crate's guarantees under other libraries' APIs, each
//! behind its own feature.
//!
//! - `rmcp` (feature `rmcp`): [`rmcp::ScopedTransport`], a client transport
//!   for rmcp, the official Rust SDK. It reuses the session machinery (the
//!   guard stack, the Streamable HTTP wire, session-scoped hooks and the
//!   reaper), so whatever drives the protocol on top, what a session
//!   acquired is released in reverse order on every way out, and what the
//!   caller lent is never closed.
//! - `reqwest` (feature `reqwest`): lend a caller's `reqwest::Client` to
//!   sessions with `HttpClient::from_reqwest`.

#[cfg(feature = "reqwest")]
pub mod reqwest;
#[cfg(feature = "rmcp")]
pub mod rmcp;
