//! # mcp-scoped-http
//!
//! A Model Context Protocol (MCP) client whose promise is **resource
//! scoping**: whatever it acquires for a session is released exactly once,
//! in reverse order, on every way out (close after success, failure at any
//! step of connect, or the caller dropping a future half-way), and whatever
//! the caller lent it (its own HTTP client, a session it owns) is never
//! closed, replaced or deleted.
//!
//! It speaks MCP over HTTP in every era, found per endpoint by probing
//! (2026-07-28's stateless Streamable HTTP, the 2025 revisions with
//! sessions, the deprecated HTTP+SSE of 2024-11-05; [`SessionInfo`] says
//! which, [`Connector::protocol_version`] pins one), and over stdio to
//! servers run as child processes (feature `stdio`: each process tree
//! supervised, released by the spec's sequence, never outliving the host).
//! Above the session, `fleet::Fleet` (feature `fleet`) keeps a host's many
//! named servers connected: reconnects, reconcile by name, a merged catalog,
//! a draining shutdown.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> mcp_scoped_http::Result<()> {
//! # let server = mcp_scoped_http_testkit::TestServer::start(Default::default());
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
//! ```
//!
//! # Where to read on
//!
//! - [`Connector`]: the connect lifecycle, its settings and their defaults
//!   (`Connector::new` for a URL, `Connector::stdio` for a command);
//!   [`Session`]: calls, the catalog, events, `close`.
//! - The [`guide`], a chapter per concern: [`guide::design`] (ownership, the
//!   guard stack, cancel safety, the steady state), [`guide::guarantees`],
//!   [`guide::limits`], [`guide::eras`], [`guide::config`] (the
//!   `mcpServers` file), [`guide::stdio`], `guide::oauth`,
//!   [`guide::integrations`] (lent clients, rmcp, reqwest, tower),
//!   [`guide::interop`], [`guide::layout`], [`guide::known_gaps`].
//!
//! # Features
//!
//! - `aws-lc-rs` (default): `https` for the owned client (hyper-rustls, the
//!   bundled and the system's roots) with rustls' default provider,
//!   post-quantum key exchange first.
//! - `ring`: the same with the `ring` provider, a smaller and faster build
//!   without post-quantum key exchange.
//! - `rustls`: the TLS with no provider of its own (enabled by both above).
//! - `proxy` (default): the owned client through an HTTP proxy, from the
//!   environment or `HttpClientBuilder::proxy`.
//! - `stdio`: servers as child processes (Unix; a small C watchdog is built
//!   with the target's C compiler and embedded). It builds on every
//!   platform; elsewhere a stdio connect fails with a configuration error.
//! - `fleet`: `fleet::Fleet`, many named servers under one owner.
//! - `oauth`: OAuth 2.1 for servers that require it (`oauth`).
//! - `rmcp`: rmcp 3.11's `Transport` on `adapters::ScopedTransport` (the
//!   transport for an SDK that runs the protocol itself; needs Rust 1.88).
//! - `reqwest`: `HttpClient::from_reqwest`, a caller's `reqwest::Client` lent
//!   to sessions.
//! - `otel`: W3C trace context in each request's `_meta` and the
//!   `mcp.client.*.duration` histograms.
//! - `wire`: the raw Streamable HTTP wire with no guard stack, for tests and
//!   tooling. Unstable: it also needs `--cfg mcp_scoped_http_unstable_wire`
//!   in `RUSTFLAGS` (and `RUSTDOCFLAGS`), and may change in any release.
//!
//! The fault-injecting test server (every era, OAuth, stdio) and the churn
//! harness are the crate `mcp-scoped-http-testkit`; the `mcp-scoped-http`
//! command (`probe`, `call`, `churn`, `serve`, `conformance`, `fleet`) is
//! the crate `mcp-scoped-http-cli`.

#![warn(missing_docs)]
// `deny`, not `forbid`: the stdio process tree (`stdio::process`,
// `stdio::watchdog`) signals groups, seals a memfd and passes a descriptor
// over a socket with raw libc, and allows it there alone.
#![deny(unsafe_code)]

pub mod adapters;
// The public `Backoff` (the fleet's, or a host's own supervisor's) and
// the engine's `Retries`.
mod backoff;
mod body;
mod budget;
mod deadline;
mod engine;
mod error;
#[cfg(feature = "fleet")]
pub mod fleet;
pub mod guide;
mod headers;
mod http_client;
pub mod jsonrpc;
mod ledger;
#[cfg(feature = "oauth")]
pub mod oauth;
mod origin;
mod queue;
mod scope;
mod session;
#[cfg(feature = "stdio")]
pub mod stdio;
mod sync;
pub mod telemetry;
mod text;
#[cfg(feature = "rustls")]
mod tls_provider;
mod transport;
// The one URL parser: OAuth's secret-carrying targets, and proxy URLs.
#[cfg(any(feature = "oauth", feature = "proxy"))]
#[cfg_attr(not(feature = "oauth"), allow(dead_code))]
mod url_target;
mod version;

pub use backoff::Backoff;
pub use budget::{MemoryBudget, MemoryCharge, MemoryPool, MemoryPoolBuilder};
pub use engine::Resumption;
pub use error::{BODY_EXCERPT, BoxError, ConnectPhase, Error, Result};
pub use http_client::{ClientOwnership, HeaderHook, HookHandle, HttpClient, HttpClientBuilder};
pub use ledger::{Ledger, TaskCount, abandoned_deletes, ledger};
pub use scope::{Reaper, Released, SessionRelease, shutdown};
pub use session::{
    Catalog, CatalogList, Connector, Discovery, Entry, LOG_LEVELS, Page, Progress, RequestOptions,
    ResumptionToken, SESSION_EVENT_CAPACITY, Session, SessionEvent, SessionInfo, SessionOwnership,
    Timings,
};
pub use text::escape as escape_server_text;
pub use transport::{ProtocolVersion, SessionId, TransportConfig, TransportKind};

/// The client port's parts, beside [`HttpClient`]: the body types a lent
/// service is called with, the hooks' identities ([`HttpClient::hooks`]),
/// the owned client's quick-ack connector for a hyper-util client of your
/// own, and the trust store's bounds.
pub mod client {
    pub use crate::http_client::{
        HookId, HookInfo, HookOwner, QuickAckConnecting, QuickAckConnector, QuickAckStream,
        RequestBody, ResponseBody, ScopeId,
    };
    #[cfg(feature = "rustls")]
    pub use crate::http_client::{MAX_TRUST_STORE_BYTES, MAX_TRUST_STORE_FILES, TrustStoreError};
}

// hyper's way for unstable API: the feature alone (which another crate's
// feature may turn on) is refused; the cfg is the caller's own consent.
// cargo-fuzz's builds (`cfg(fuzzing)`) count as consent, so the fuzz
// targets build with the plain `cargo fuzz run TARGET`.
#[cfg(all(feature = "wire", not(any(mcp_scoped_http_unstable_wire, fuzzing))))]
compile_error!(
    "the `wire` feature of mcp-scoped-http is unstable: it also needs \
     `--cfg mcp_scoped_http_unstable_wire` in RUSTFLAGS (and RUSTDOCFLAGS for docs)"
);

/// The raw Streamable HTTP wire (feature `wire`): one exchange at a time,
/// with **no guard stack**.
///
/// A [`StreamableHttp`](wire::StreamableHttp) is one server session's
/// transport: it POSTs messages, reads answers (JSON or SSE), opens the GET
/// stream and sends the DELETE, and keeps the session id and revision it
/// learned. It runs no lifecycle, resumes nothing, and releases nothing on
/// its own: whoever uses it owns every session it creates. For tests and
/// tooling; a client wants [`Connector`]. Unstable: it needs `--cfg
/// mcp_scoped_http_unstable_wire` beside the feature, and may change in any
/// release.
#[cfg(all(feature = "wire", any(mcp_scoped_http_unstable_wire, fuzzing)))]
pub mod wire {
    pub use crate::budget::estimated_messages_cost;
    pub use crate::headers::{LAST_EVENT_ID, MCP_PROTOCOL_VERSION, MCP_SESSION_ID};
    pub use crate::session::entry::{ListResult, parse_page};
    /// stdio's line framing (with feature `stdio`), for fuzzing.
    #[cfg(feature = "stdio")]
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
        pub use crate::oauth::challenge::BearerChallenge;
        pub use crate::oauth::metadata::{AuthorizationServer, ProtectedResource};
        pub use crate::url_target::secure_request_uri;
    }
}

// The README's examples compile, so they stay true.
#[cfg(all(doctest, feature = "fleet", feature = "stdio"))]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

// The public handles are moved into tasks and shared between threads:
// checked here, so a change that makes one `!Send` or `!Sync` fails this
// crate's build, not a user's.
const _: () = {
    const fn send_sync<T: Send + Sync>() {}
    send_sync::<Connector>();
    send_sync::<Session>();
    send_sync::<SessionInfo>();
    send_sync::<Catalog>();
    send_sync::<HttpClient>();
    send_sync::<HttpClientBuilder>();
    send_sync::<HookHandle>();
    send_sync::<Error>();
    send_sync::<Released>();
    send_sync::<Reaper>();
    send_sync::<TaskCount>();
    send_sync::<SessionEvent>();
    send_sync::<MemoryBudget>();
    send_sync::<MemoryPool>();
    send_sync::<MemoryCharge>();
    send_sync::<TransportConfig>();
    send_sync::<RequestOptions>();
    #[cfg(feature = "fleet")]
    {
        send_sync::<fleet::Fleet>();
        send_sync::<fleet::FleetBuilder>();
        send_sync::<fleet::ServerSpec>();
        send_sync::<fleet::FleetCatalog>();
        send_sync::<fleet::FleetEvent>();
    }
    #[cfg(feature = "oauth")]
    send_sync::<oauth::OAuth>();
    #[cfg(feature = "stdio")]
    send_sync::<stdio::StdioCommand>();
};
