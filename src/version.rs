//! The protocol revisions this crate speaks, and their transports.

use std::fmt;
use std::str::FromStr;

use crate::error::{Error, Result};

/// A protocol revision this crate speaks, in three eras: 2024-11-05 over
/// the deprecated HTTP+SSE transport, the 2025 revisions over Streamable
/// HTTP with sessions and `initialize`, and 2026-07-28 (stateless: no
/// `initialize`, request metadata in every request).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum ProtocolVersion {
    /// 2024-11-05: the deprecated HTTP+SSE transport (an `endpoint` event on
    /// a GET stream, POSTs answered on that stream).
    V2024_11_05,
    /// 2025-03-26: the first Streamable HTTP revision; servers may batch.
    V2025_03_26,
    /// 2025-06-18: no batches; the `MCP-Protocol-Version` header.
    V2025_06_18,
    /// 2025-11-25: priming events and server-initiated polling.
    V2025_11_25,
    /// 2026-07-28: no sessions and no `initialize`; `_meta` and the request
    /// metadata headers on every request; multi round-trip requests.
    V2026_07_28,
}

impl ProtocolVersion {
    /// The revision proposed in `initialize` (the newest with a handshake).
    pub const LATEST: ProtocolVersion = ProtocolVersion::V2025_11_25;

    /// The newest revision: the one detection tries first.
    pub const MODERN: ProtocolVersion = ProtocolVersion::V2026_07_28;

    /// Every revision accepted from a server in an `initialize` answer over
    /// Streamable HTTP, newest first.
    pub const SUPPORTED: [ProtocolVersion; 3] = [
        ProtocolVersion::V2025_11_25,
        ProtocolVersion::V2025_06_18,
        ProtocolVersion::V2025_03_26,
    ];

    /// Every revision this crate speaks, newest first.
    pub const ALL: [ProtocolVersion; 5] = [
        ProtocolVersion::V2026_07_28,
        ProtocolVersion::V2025_11_25,
        ProtocolVersion::V2025_06_18,
        ProtocolVersion::V2025_03_26,
        ProtocolVersion::V2024_11_05,
    ];

    /// The revision's date string.
    pub fn as_str(self) -> &'static str {
        match self {
            ProtocolVersion::V2025_03_26 => "2025-03-26",
            ProtocolVersion::V2025_06_18 => "2025-06-18",
            ProtocolVersion::V2025_11_25 => "2025-11-25",
            ProtocolVersion::V2026_07_28 => "2026-07-28",
            ProtocolVersion::V2024_11_05 => "2024-11-05",
        }
    }

    /// Whether this revision is stateless (2026-07-28 on): no `initialize`,
    /// no session, request metadata in every request.
    pub fn is_modern(self) -> bool {
        self >= ProtocolVersion::V2026_07_28
    }

    /// The transport this revision is spoken over.
    pub fn transport(self) -> TransportKind {
        if self == ProtocolVersion::V2024_11_05 {
            TransportKind::HttpSse
        } else {
            TransportKind::StreamableHttp
        }
    }

    /// Whether requests carry the `MCP-Protocol-Version` header (from
    /// 2025-06-18 on; the header did not exist before).
    pub fn sends_version_header(self) -> bool {
        self >= ProtocolVersion::V2025_06_18
    }
}

/// The transport a session speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TransportKind {
    /// Streamable HTTP (2025-03-26 on): one endpoint, POST per message.
    StreamableHttp,
    /// The deprecated HTTP+SSE transport of 2024-11-05.
    HttpSse,
    /// A child process's standard streams (newline-delimited JSON-RPC).
    Stdio,
}

impl TransportKind {
    /// Its name: `streamable-http`, `http+sse` or `stdio`.
    pub fn as_str(self) -> &'static str {
        match self {
            TransportKind::StreamableHttp => "streamable-http",
            TransportKind::HttpSse => "http+sse",
            TransportKind::Stdio => "stdio",
        }
    }
}

impl fmt::Display for TransportKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Display for ProtocolVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ProtocolVersion {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        ProtocolVersion::ALL
            .into_iter()
            .find(|v| v.as_str() == s)
            .ok_or_else(|| {
                // The server's text is not a secret; quote a bounded prefix.
                let shown: String = s.chars().take(40).collect();
                Error::protocol(format!("unsupported protocol version {shown:?}"))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_round_trip_and_order() {
        for v in ProtocolVersion::SUPPORTED {
            assert_eq!(v.as_str().parse::<ProtocolVersion>().unwrap(), v);
        }
        for v in ProtocolVersion::ALL {
            assert_eq!(v.as_str().parse::<ProtocolVersion>().unwrap(), v);
        }
        assert!("2024-10-07".parse::<ProtocolVersion>().is_err());
        assert!(ProtocolVersion::V2026_07_28.is_modern());
        assert!(!ProtocolVersion::V2025_11_25.is_modern());
        assert_eq!(
            ProtocolVersion::V2024_11_05.transport(),
            TransportKind::HttpSse
        );
        assert!(!ProtocolVersion::V2025_03_26.sends_version_header());
        assert!(ProtocolVersion::V2025_06_18.sends_version_header());
    }
}
