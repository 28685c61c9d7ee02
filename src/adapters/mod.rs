//! Adapters between this crate and other HTTP and MCP libraries, each
//! behind its own feature.
//!
//! - `reqwest` (feature `reqwest`): lend a caller's `reqwest::Client` to
//!   sessions with `HttpClient::from_reqwest`.

#[cfg(feature = "reqwest")]
pub mod reqwest;
