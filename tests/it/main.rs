//! The integration tests: one binary, a module per concern (the issue
//! or fault each file covers says so in its own docs), and the shared
//! fixtures in `support`.
//!
//! Tests that read process-wide numbers (the ledger, descriptors) hold
//! [`support::serial`] alone; every other test that makes what they count
//! holds [`support::shared`], so a baseline never sees another test's
//! servers, clients or processes. Tests that need a process of their own
//! (a host killed with SIGKILL, a descriptor limit, a memory peak) run this
//! binary again for that one test ([`support::this_test`]). The memory
//! attacks, measured as the resident size of a process of their own, are
//! a binary apart (`tests/memory`).

mod support;

#[global_allocator]
static ALLOCATOR: support::alloc::Counting = support::alloc::Counting;

mod attach;
mod cancellation;
mod close;
mod connect_faults;
mod creation_window;
mod deadlines;
mod debug_redaction;
mod delete;
mod discovery;
mod drop_outside_runtime;
mod eras;
mod eras_faults;
mod eras_hostile;
mod error_messages;
mod expiry;
mod fleet;
mod fleet_chaos;
mod fleet_clients;
mod fleet_limits;
mod fleet_memory;
mod fleet_seams;
mod fuzz_regressions;
mod get_stream;
mod hooks;
mod hostile;
mod interop;
mod leak_gate;
mod lifecycle;
mod lifecycle_methods;
mod limits;
mod list_changed;
mod listening;
mod modern;
mod multi_thread;
mod oauth;
mod oauth_hostile;
mod oauth_lifecycle;
mod post;
mod processes;
mod protocol_version;
mod proxy;
mod redirects;
mod rediscovery_races;
mod reinitialize;
mod request_options;
#[cfg(feature = "reqwest")]
mod reqwest_client;
mod resumption;
#[cfg(feature = "rmcp")]
mod rmcp_transport;
mod scoped_transport;
mod server_requests;
mod session_events;
mod session_id;
mod shutdown;
mod soak;
mod sse;
mod sse_answers;
mod sse_batches;
mod stdio;
mod stdio_fleet;
mod stdio_hostile;
mod steady_state;
mod telemetry;
mod testkit;
mod testkit_auth;
mod testkit_eras;
mod tls;
mod tower_stack;
