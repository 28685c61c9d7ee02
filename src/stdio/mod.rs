//! stdio servers: an MCP server run as a child process, spoken to over its
//! standard streams (newline-delimited JSON-RPC), under the same guard
//! stack as an HTTP session.

// Filled in by the next commits: the process tree (`process`), the
// environment and `PATH` (`env`).

mod framing;
mod stderr;

// For fuzzing: exported as `wire::stdio_lines`.
#[cfg(feature = "wire")]
#[doc(hidden)]
pub use framing::stdio_lines;
