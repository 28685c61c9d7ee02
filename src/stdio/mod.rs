//! stdio servers: an MCP server run as a child process, spoken to over its
//! standard streams (newline-delimited JSON-RPC), under the same guard
//! stack as an HTTP session.

// Filled in by the next commits: the process tree (`process`), the
// environment and `PATH` (`env`), the line framing of stdout (`framing`)
// and the drain of stderr (`stderr`).

mod env;
mod process;

/// The host variables a stdio server gets by default, and how its release
/// is bounded and reported.
pub use env::DEFAULT_ENV_ALLOWLIST;
pub use process::{Grace, ProcessEnd};
