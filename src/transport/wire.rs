//! How a generation's messages travel: Streamable HTTP (and HTTP+SSE), or
//! a stdio server's pipes. What every wire has (the revision, the session
//! id, the memory account, where the server is) is asked here; the engine
//! sends by matching the two (each arm awaited where it is, so that no
//! combinator nests every request's future one level deeper); what only
//! HTTP has (GET streams, DELETE, resumption) is reached through
//! [`Wire::http`].

use std::sync::Arc;

#[cfg(feature = "stdio")]
use super::stdio::StdioWire;
use super::{ProtocolVersion, SessionId, StreamableHttp};
use crate::budget::Account;

/// One server session's transport.
#[derive(Clone)]
pub(crate) enum Wire {
    /// Streamable HTTP, or the HTTP+SSE transport of 2024-11-05.
    Http(Arc<StreamableHttp>),
    /// A child process's stdin and stdout: every answer comes on the one
    /// shared stdout, read by the session's reader task.
    #[cfg(feature = "stdio")]
    Stdio(Arc<StdioWire>),
}

impl Wire {
    /// The HTTP transport, for what only HTTP has.
    pub(crate) fn http(&self) -> Option<&Arc<StreamableHttp>> {
        match self {
            Wire::Http(http) => Some(http),
            #[cfg(feature = "stdio")]
            Wire::Stdio(_) => None,
        }
    }

    /// Whether answers come on one shared stream rather than on each
    /// request's own: then a waiter takes its response from the reader of
    /// that stream. Over stdio always; over HTTP, the HTTP+SSE transport.
    pub(crate) fn shares_one_stream(&self) -> bool {
        match self {
            Wire::Http(http) => http.is_http_sse(),
            #[cfg(feature = "stdio")]
            Wire::Stdio(_) => true,
        }
    }

    /// Whether this is a stdio server's pipe.
    pub(crate) fn is_stdio(&self) -> bool {
        !matches!(self, Wire::Http(_))
    }

    /// The session id the server assigned, if any (never over stdio).
    pub(crate) fn session_id(&self) -> Option<SessionId> {
        match self {
            Wire::Http(http) => http.session_id(),
            #[cfg(feature = "stdio")]
            Wire::Stdio(_) => None,
        }
    }

    /// The negotiated revision, once set.
    pub(crate) fn protocol_version(&self) -> Option<ProtocolVersion> {
        match self {
            Wire::Http(http) => http.protocol_version(),
            #[cfg(feature = "stdio")]
            Wire::Stdio(stdio) => stdio.protocol_version(),
        }
    }

    /// Records the negotiated revision.
    pub(crate) fn set_protocol_version(&self, version: ProtocolVersion) {
        match self {
            Wire::Http(http) => http.set_protocol_version(version),
            #[cfg(feature = "stdio")]
            Wire::Stdio(stdio) => stdio.set_protocol_version(version),
        }
    }

    /// The session's memory account, if this transport charges one.
    pub(crate) fn account(&self) -> Option<&Account> {
        match self {
            Wire::Http(http) => http.account(),
            #[cfg(feature = "stdio")]
            Wire::Stdio(stdio) => Some(stdio.account()),
        }
    }

    /// A transport for a new server session: no session id and no
    /// revision yet (over stdio, the same process).
    pub(crate) fn fresh(&self) -> Wire {
        match self {
            Wire::Http(http) => Wire::Http(Arc::new(http.fresh())),
            #[cfg(feature = "stdio")]
            Wire::Stdio(stdio) => Wire::Stdio(Arc::new(stdio.fresh())),
        }
    }

    /// Where the server is, as shown in spans and errors: an HTTP origin
    /// (never a path or query), or `stdio:` and the program's name.
    pub(crate) fn label(&self) -> String {
        match self {
            Wire::Http(http) => http.origin().to_string(),
            #[cfg(feature = "stdio")]
            Wire::Stdio(stdio) => format!("stdio:{}", stdio.program()),
        }
    }

    /// The peer's address and port, for telemetry (the program's name
    /// and no port over stdio).
    pub(crate) fn peer_address(&self) -> (String, Option<u16>) {
        match self {
            Wire::Http(http) => (http.origin().host().to_owned(), Some(http.origin().port())),
            #[cfg(feature = "stdio")]
            Wire::Stdio(stdio) => (stdio.program().to_owned(), None),
        }
    }
}
