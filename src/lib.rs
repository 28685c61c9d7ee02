//! placeholder crate docs (written later in this change).
#![warn(missing_docs)]

pub mod client;
pub mod error;
pub mod jsonrpc;
#[cfg(feature = "testkit")]
pub mod testkit;
pub mod transport;

pub use client::{HttpClient, HttpClientBuilder, Ownership};
pub use error::{Error, Result};
