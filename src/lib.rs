//! placeholder: the crate root is being written.

#[cfg(feature = "testkit")]
pub mod testkit;
pub mod transport;
