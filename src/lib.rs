//! # mcp-scoped-http
//!
//! A Model Context Protocol (MCP) client over HTTP whose promise is
//! **resource scoping**: whatever it acquires for a session is released
//! exactly once, in reverse order, on every way out (close after success,
//! failure at any step of connect, or the caller dropping a future
//! half-way), and whatever the caller lent it (its own HTTP client, a
//! session it owns) is never closed, replaced or deleted.
//!
//! It speaks every era of MCP over HTTP, found per endpoint by probing
//! (see [`Connector::protocol_version`] to pin one instead): 2026-07-28
//! (stateless Streamable HTTP: `server/discover`, request metadata in
//! `_meta` and headers, multi round-trip requests), the 2025 revisions
//! (Streamable HTTP with `initialize` and sessions), and the deprecated
//! HTTP+SSE transport of 2024-11-05. [`SessionInfo`] says which.
//!
//! ```
//! # #[cfg(feature = "testkit")]
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> mcp_scoped_http::Result<()> {
//! # let server = mcp_scoped_http::testkit::TestServer::start(Default::default());
//! # let url = server.url();
//! use mcp_scoped_http::Connector;
//! use serde_json::json;
//!
//! // An owned client: built for this session, dropped with it.
//! let session = Connector::new(url).bearer("token").connect().await?;
//! println!("{} tools", session.catalog().tools.len());
//! let result = session.call_tool("tool-000", json!({"text": "hi"})).await?;
//! # assert_eq!(result["structuredContent"]["tool"], "tool-000");
//! let released = session.close().await; // DELETE, then hooks, then the client
//! # assert!(released.owned_client_released);
//! # Ok(())
//! # }
//! # #[cfg(not(feature = "testkit"))]
//! # fn main() {}
//! ```
//!
//! # Ownership rules
//!
//! - **Ownership is a value fixed at construction.** A session's client is
//!   owned (the [`Connector`] built it) or borrowed (passed with
//!   [`Connector::client`]); a session is owned (we sent `initialize`) or
//!   attached ([`Connector::attach`]). See [`SessionInfo`].
//! - **Borrowed is read-only for lifecycle.** A lent client is only ever
//!   called: never shut down, reconfigured or given a hook it can see. An
//!   attached session is never initialized, replaced or DELETEd.
//! - **Hooks are scoped.** A session's header hooks live in a registry on the
//!   [`HttpClient`] and apply only to that session's requests, to the
//!   endpoint's origin; other sessions on the same client and the caller's
//!   own requests never see them. Removal is by identity.
//! - **Every failure is a full unwind.** A failed connect leaves no task, no
//!   hook, no owned client, no partial catalog and no live server session.
//!
//! # The guard stack and the cleanup order
//!
//! A session pushes each resource the moment it exists: the owned client,
//! its hooks, the transport, the entry of the server sessions it creates,
//! background tasks (the GET listener, or `subscriptions/listen` in
//! 2026-07-28, or the HTTP+SSE event stream, which is that era's session;
//! re-initialize, re-discovery).
//! Release is the exact reverse:
//!
//! 1. background tasks are cancelled and joined;
//! 2. every server session we created and the server has not ended is
//!    DELETEd (bounded by [`Connector::delete_timeout`]) while our hooks
//!    and the client are still alive, so the DELETE is authenticated;
//! 3. the hooks are removed from the client;
//! 4. an owned client is dropped, last.
//!
//! Every server session goes through the stack's sessions entry, the one
//! place in the crate that sends `initialize`: the first one at connect,
//! and each one that replaces an expired session (the rmcp adapter's
//! included). It is on the stack from before its `initialize` leaves until
//! its DELETE has been answered or has timed out.
//!
//! # Cancel safety
//!
//! Every future in this crate may be dropped at any `.await`. Dropping
//! [`Connector::connect`] half-way, or [`Session::close`], or the
//! [`Session`] itself, releases at once what can be released without
//! waiting (tasks are aborted; with no DELETE owed, everything), and hands
//! the rest of the stack, hooks and client included, to a reaper task that
//! sends the DELETEs. Each server session runs as a task held by the stack,
//! which sends its `initialize` (up to the response head that carries the
//! session id) and, when told, its DELETE, so a caller walking away never
//! cuts either off: the wait for `initialize` and the DELETE share one
//! bound, the DELETE timeout. A session whose `initialize` head does not
//! come within it cannot be named: it is reported and counted in
//! [`abandoned_deletes`].
//!
//! # What `Drop` can and cannot do
//!
//! `Drop` cannot wait. It never blocks a thread and never panics: it aborts
//! tasks and, when a DELETE is owed, spawns the reaper on the current tokio
//! runtime. [`shutdown`] waits for every pending reap; call it before the
//! runtime ends so the DELETEs reach their servers. When no runtime can run
//! the reaper (the session is dropped outside one, or during runtime
//! shutdown, when a spawned task never runs), the rest is released
//! synchronously (hooks removed, the owned client dropped) and the DELETE is
//! counted in [`abandoned_deletes`]: the server session is left to expire.
//!
//! # The steady state
//!
//! - **Requests** ([`Session::request`], [`Session::call_tool`], the typed
//!   `list_*`, [`Session::read_resource`], [`Session::get_prompt`]) are safe
//!   to run concurrently from many tasks; each resolves on its own: an HTTP
//!   error, a 202 to a request, a malformed answer, a stream that ends
//!   without the response, or the session closing become an error for that
//!   request only.
//! - **Server traffic.** Notifications (from the GET stream and from
//!   answers) arrive on [`Session::notifications`]; server requests are
//!   answered by POSTs carrying the session headers: `ping` always,
//!   `roots/list`, `elicitation/create` and `sampling/createMessage` through
//!   the handlers given to the connector ([`Connector::roots`],
//!   [`Connector::on_elicitation`], [`Connector::on_sampling`]), which also
//!   decide the capabilities sent in `initialize`; without one the answer is
//!   a JSON-RPC "method not found".
//! - **Resumption.** An SSE answer that breaks off after an event id (a
//!   network cut, or the server closing it to make the client poll) is
//!   resumed with a GET carrying `Last-Event-ID`, after the server's `retry`
//!   (or a bounded backoff), up to a capped number of attempts that partial
//!   progress does not reset; replayed events are ignored. A dropped
//!   connection is not a cancellation.
//! - **Expiry.** A 404 to a request that carried our session id means the
//!   server ended that session: it is not DELETEd. An owned session is
//!   replaced by a new one, opened once however many requests met the 404
//!   and whichever of them goes away first (the opening belongs to a
//!   background task, not to a request); the request is sent again on it
//!   and a second 404 is an error. Everything that needs a session
//!   (requests, notifications, answers to server requests, re-discovery,
//!   the listener) waits for the new one, each within its own deadline, and
//!   never goes out without a session id; each session has its own GET
//!   listener and its own `Last-Event-ID`. After a new session, the catalog
//!   is listed again. An attached session reports
//!   [`Error::is_session_expired`] and is left alone.
//! - **The lifecycle is the session's.** [`Session::request`] and
//!   [`Session::notify`] refuse `initialize` and
//!   `notifications/initialized` ([`Error::is_builder`]).
//! - **Timeouts and cancellation.** A per-session default
//!   ([`Connector::request_timeout`]) and per-request timeouts
//!   ([`RequestOptions`]). A request that times out, or whose future
//!   is dropped, is announced with `notifications/cancelled` (never for
//!   `initialize`); its late response is ignored.
//! - **`list_changed`** triggers a background re-discovery of that list: at
//!   most one per kind in flight (a change during a run owes one more run),
//!   each page bounded by the request timeout; a failed one keeps the
//!   previous list.
//! - **Memory** is bounded by the configured limits ([`TransportConfig`]),
//!   whatever the server sends: SSE lines, events, ids, batches and the
//!   replay filter are all counted against them; what the session keeps of
//!   the catalog (page texts, entries, values parsed from them) is charged
//!   to its [`MemoryBudget`] (see [`Discovery::memory`]).
//!
//! # A borrowed client shared by sessions
//!
//! ```
//! # #[cfg(feature = "testkit")]
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> mcp_scoped_http::Result<()> {
//! # let server = mcp_scoped_http::testkit::TestServer::start(Default::default());
//! # let url = server.url();
//! use hyper_util::client::legacy::Client;
//! use hyper_util::rt::TokioExecutor;
//! use mcp_scoped_http::{Connector, HttpClient};
//!
//! // The caller's own client, pooled and shared.
//! let hyper_client = Client::builder(TokioExecutor::new()).build_http();
//! let shared = HttpClient::borrowed(hyper_client.clone());
//!
//! let alice = Connector::new(&url).client(shared.clone()).bearer("alice").connect().await?;
//! let bob = Connector::new(&url).client(shared.clone()).bearer("bob").connect().await?;
//! assert_eq!(shared.hooks().len(), 2); // one per session, each its own
//! alice.close().await;
//! bob.close().await;
//! assert!(shared.hooks().is_empty()); // ours are gone; the client is not
//! # Ok(())
//! # }
//! # #[cfg(not(feature = "testkit"))]
//! # fn main() {}
//! ```
//!
//! # Attaching to a session the caller owns
//!
//! ```
//! # #[cfg(feature = "testkit")]
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> mcp_scoped_http::Result<()> {
//! # let server = mcp_scoped_http::testkit::TestServer::start(Default::default());
//! # let url = server.url();
//! # let owner = Connector::new(&url).connect().await?;
//! # let id = owner.session_id().unwrap();
//! use mcp_scoped_http::ProtocolVersion;
//! use mcp_scoped_http::{Connector, SessionOwnership};
//!
//! // `id` is a session id the caller got elsewhere and owns.
//! let session = Connector::new(&url)
//!     .attach(id, ProtocolVersion::V2025_11_25)
//!     .connect()
//!     .await?; // no initialize: discovery runs on the caller's session
//! assert_eq!(session.info().ownership, SessionOwnership::Attached);
//! session.close().await; // no DELETE: the session is still the caller's
//! # assert_eq!(server.stats().deletes, 0);
//! # owner.close().await;
//! # Ok(())
//! # }
//! # #[cfg(not(feature = "testkit"))]
//! # fn main() {}
//! ```
//!
//! # Redirects
//!
//! Only a 307 or 308 to the **same origin** (scheme, host and port) is
//! followed, at most [`TransportConfig::max_redirects`] times, with the same
//! method, body and headers. A redirect to another origin is refused (our
//! headers and the session id must not reach it), and so is a 301, 302 or
//! 303, which clients commonly turn into a GET.
//!
//! # Layout
//!
//! The modules depend on each other in one direction, top to bottom:
//!
//! - `fleet` (feature `fleet`): many named servers under one owner, built
//!   only on [`Connector`] and [`Session`].
//! - `session` (private; its types are at the crate root): [`Connector`]
//!   (the connect lifecycle), [`Session`], discovery into a [`Catalog`].
//! - `adapters` (features `reqwest`, `rmcp`): this crate's guarantees
//!   under other libraries' APIs; beside `session`, on the same engine.
//! - `engine` (private): the exchange engine every front end uses: the
//!   server session in use and its replacement when it expires, requests
//!   and their answers (resumed, replays ignored, routed by id), the GET
//!   listener.
//! - `scope` (private): the guard stack, the server sessions on it (the
//!   one place that sends `initialize`), the reaper and [`shutdown`].
//! - `transport` (private; the raw [`wire`] with the feature of that
//!   name): the Streamable HTTP wire: POST, the GET stream, DELETE, session
//!   id and protocol version headers, SSE decoding, size limits, redirect
//!   policy.
//! - [`client`]: the client port, owned (built here, hyper-util, rustls) or
//!   borrowed (any `tower::Service` of the caller's), and header hooks.
//! - Leaves: [`error`] (the opaque [`Error`] with `is_*()` predicates;
//!   secrets never appear in its `Display` or `Debug`), [`jsonrpc`]
//!   (messages, lenient on input and exact on output), [`mod@ledger`] (live
//!   hooks, owned clients, tasks, owned sessions and pending reaps,
//!   process-wide and per client), the protocol's header names, and the
//!   three bounds every layer takes rather than re-derives: `deadline`
//!   (every exchange is sent with one), `budget` ([`MemoryBudget`], the
//!   session's memory account) and, with `oauth`, `url_target` (the one
//!   URL parser that decides where an OAuth request goes and whether it
//!   may); `body` reads a body within a byte limit for the transport and
//!   OAuth alike.
//! - `testkit` (feature `testkit`): an in-process MCP server with scripted
//!   faults, for our tests and for yours.
//!
//! # Tracing
//!
//! Spans `mcp.connect` (with the endpoint's origin), `mcp.initialize`,
//! `mcp.initialized`, `mcp.discover` (with the list method), `mcp.request`,
//! `mcp.close` and `mcp.close.delete`, and per exchange `mcp.post`,
//! `mcp.get`, `mcp.delete`. They carry origins and method names, never a
//! path, a query, a header value or a session id.
//!
//! # Optional features
//!
//! - `aws-lc-rs` (default): `https` for the owned client through
//!   hyper-rustls with rustls' default crypto provider, aws-lc-rs
//!   (post-quantum hybrid key exchange first; a C build of AWS-LC), the
//!   Mozilla root set from webpki-roots and the system's roots.
//! - `ring`: the same with the `ring` provider (a smaller, faster build, no
//!   post-quantum key exchange); turn `aws-lc-rs` off to use it.
//! - `rustls`: the TLS with no provider of its own (enabled by both): the
//!   one given to `HttpClientBuilder::crypto_provider`, else the process
//!   default, else the feature's.
//! - `reqwest`: `HttpClient::from_reqwest` lends a caller's
//!   `reqwest::Client` (see `adapters::reqwest` for what the client's own
//!   redirect and timeout settings decide). It enables no reqwest feature:
//!   the caller's client brings its TLS and the rest.
//! - `testkit`: the fault-injecting test server.
//! - `cli`: the `mcp-scoped-http` binary (`probe`, `call`, `churn`, `serve`,
//!   `conformance`); enables `testkit`.
//! - `fleet`: [`fleet::Fleet`], many named servers under one owner: a
//!   slot with one owner task per server, reconcile by name, reconnects
//!   with jittered backoff, a merged catalog, calls routed by name, and a
//!   shutdown that drains them all.
//! - `rmcp`: `adapters::rmcp::ScopedTransport`, an rmcp (3.11) client
//!   transport, so `().serve(transport)` runs rmcp over this crate's guard
//!   stack: a failed or dropped rmcp `initialize` DELETEs the session it
//!   created. rmcp 3.11 needs Rust 1.88.

#![warn(missing_docs)]
// `deny`, not `forbid`: the stdio process tree (`stdio::process`,
// `stdio::watchdog`) signals groups, seals a memfd and passes a descriptor
// over a socket with raw libc, and allows it there alone.
#![deny(unsafe_code)]

#[cfg(any(feature = "reqwest", feature = "rmcp"))]
pub mod adapters;
// The fleet's public `Backoff` and the engine's `Retries`; without the
// fleet, only the latter is used.
#[cfg_attr(not(feature = "fleet"), allow(dead_code))]
mod backoff;
mod body;
mod budget;
pub mod client;
mod deadline;
mod engine;
pub mod error;
#[cfg(feature = "fleet")]
pub mod fleet;
pub mod guide;
mod headers;
pub mod jsonrpc;
pub mod ledger;
mod origin;
mod queue;
mod scope;
mod session;
#[cfg(all(feature = "stdio", unix))]
pub mod stdio;
mod sync;
pub mod telemetry;
#[cfg(feature = "testkit")]
pub mod testkit;
mod text;
#[cfg(any(feature = "rustls", feature = "testkit"))]
mod tls_provider;
mod transport;
// The one URL parser: OAuth's secret-carrying targets, and proxy URLs.
#[cfg(any(feature = "oauth", feature = "proxy"))]
#[cfg_attr(not(feature = "oauth"), allow(dead_code))]
mod url_target;
mod version;

pub use budget::MemoryBudget;
#[cfg(feature = "oauth")]
pub use client::oauth;
pub use client::{HeaderHook, HookHandle, HttpClient, HttpClientBuilder, Ownership};
pub use engine::Resumption;
pub use error::{ConnectPhase, Error, Result};
pub use ledger::{Ledger, abandoned_deletes, ledger};
pub use scope::{Released, SessionRelease, shutdown};
pub use session::{
    Catalog, CatalogList, Connector, Discovery, Entry, Page, Progress, RequestOptions,
    ResumptionToken, SESSION_EVENT_CAPACITY, Session, SessionEvent, SessionInfo, SessionOwnership,
    Timings,
};
pub use transport::{ProtocolVersion, SessionId, TransportConfig, TransportKind};

/// The raw Streamable HTTP wire (feature `wire`): one exchange at a time,
/// with **no guard stack**.
///
/// A [`StreamableHttp`](wire::StreamableHttp) is one server session's
/// transport: it POSTs messages, reads answers (JSON or SSE), opens the GET
/// stream and sends the DELETE, and keeps the session id and revision it
/// learned. It runs no lifecycle, resumes nothing, and releases nothing on
/// its own: whoever uses it owns every session it creates. For tests and
/// tooling; a client wants [`Connector`].
#[cfg(feature = "wire")]
pub mod wire {
    pub use crate::budget::estimated_messages_cost;
    pub use crate::headers::{LAST_EVENT_ID, MCP_PROTOCOL_VERSION, MCP_SESSION_ID};
    pub use crate::session::entry::{ListResult, parse_page};
    /// stdio's line framing (with feature `stdio`, on Unix), for fuzzing.
    #[cfg(all(feature = "stdio", unix))]
    pub use crate::stdio::stdio_lines;
    pub use crate::transport::sse;
    /// 2026-07-28 request metadata: header values and `x-mcp-header`.
    pub mod metadata {
        pub use crate::transport::metadata::{
            ParamHeader, add_param_headers, encode_value, param_headers,
        };
    }
    pub use crate::transport::{
        DEFAULT_MAX_SESSION_ID_LEN, Exchange, MessageStream, SessionEnd, StreamableHttp,
    };
    /// What OAuth reads from the network (with feature `oauth`): the
    /// `Bearer` challenge and the two metadata documents, checked.
    #[cfg(feature = "oauth")]
    pub mod oauth {
        pub use crate::client::oauth::challenge::BearerChallenge;
        pub use crate::client::oauth::metadata::{AuthorizationServer, ProtectedResource};
        pub use crate::url_target::secure_request_uri;
    }
}

// The README's examples compile, so they stay true.
#[cfg(all(doctest, feature = "fleet", feature = "stdio"))]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
