//! The command line tool's tests: one binary, a module per command or
//! concern, run against the binary cargo builds for them
//! (`CARGO_BIN_EXE_mcp-scoped-http`). The fixtures are the library's
//! (`tests/it/support`), the same lock included: a test that counts what
//! this process holds runs alone.

#[path = "../../../tests/it/support/mod.rs"]
mod support;

mod cli;
mod cli_fleet;
mod cli_hostile;
mod fleet_command;
mod interop;
mod testkit_stdio;
