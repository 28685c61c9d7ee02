//! Streamable HTTP transport.
pub mod sse;
