//! Adapters: this crate's guarantees under other libraries' APIs.
//!
//! Each adapter is behind its own feature and reuses the session machinery
//! (the guard stack, the Streamable HTTP wire, session-scoped hooks and the
//! reaper), so whatever drives the protocol on top, what a session acquired
//! is released in reverse order on every way out, and what the caller lent
//! is never closed.

#[cfg(feature = "rmcp")]
pub mod rmcp;
