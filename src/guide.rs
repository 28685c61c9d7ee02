//! The long-form documentation: one chapter per module, each also a
//! Markdown file in `src/guide/` that reads on its own. The README is the
//! short version; these are what it links to.
//!
//! - [`design`]: ownership, the guard stack and its release order, cancel
//!   safety, what `Drop` can do, the steady state.
//! - [`guarantees`]: what the crate promises, and the tests that prove it.
//! - [`limits`]: every bound (time, memory, counts, rates) with its default.
//! - [`eras`]: the three eras of MCP over HTTP, detection and pinning.
//! - [`oauth`]: OAuth 2.1 (feature `oauth`).
//! - [`config`]: the `mcpServers` file (every key, `${VAR}` expansion) and
//!   what a host gets from the fleet (feature `fleet`).
//! - [`stdio`]: stdio servers, their process trees and the watchdog
//!   (feature `stdio`).
//! - [`integrations`]: owned and lent clients, attaching, rmcp, reqwest,
//!   tower, draining on shutdown.
//! - [`python`]: the Python package, a transport for the official Python
//!   SDK.
//! - [`interop`]: the official conformance suite and the SDKs' servers.
//! - [`layout`]: the modules and how they depend on each other.
//! - [`known_gaps`]: what is not done, or not done well, yet.
//!
//! The benchmarks are in `BENCHMARKS.md` at the top of the repository.

#[doc = include_str!("guide/design.md")]
pub mod design {}

#[doc = include_str!("guide/guarantees.md")]
pub mod guarantees {}

#[doc = include_str!("guide/limits.md")]
pub mod limits {}

#[doc = include_str!("guide/eras.md")]
pub mod eras {}

// Its example needs the feature.
#[cfg(feature = "oauth")]
#[doc = include_str!("guide/oauth.md")]
pub mod oauth {}

#[doc = include_str!("guide/config.md")]
pub mod config {}

#[doc = include_str!("guide/stdio.md")]
pub mod stdio {}

#[doc = include_str!("guide/integrations.md")]
pub mod integrations {}

#[doc = include_str!("guide/python.md")]
pub mod python {}

#[doc = include_str!("guide/interop.md")]
pub mod interop {}

#[doc = include_str!("guide/layout.md")]
pub mod layout {}

#[doc = include_str!("guide/known_gaps.md")]
pub mod known_gaps {}
