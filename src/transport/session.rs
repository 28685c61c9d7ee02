//! Session ids and protocol revisions.

use std::fmt;
use std::str::FromStr;

use crate::error::{Error, Result};

/// Longest session id accepted by default, in bytes.
///
/// The spec sets no bound; real servers use UUIDs or a few hundred bytes of
/// token. Anything past this is refused rather than stored and echoed.
pub const DEFAULT_MAX_SESSION_ID_LEN: usize = 512;

/// A validated `Mcp-Session-Id`: 1 to the configured maximum of visible ASCII
/// (0x21 to 0x7E), as the transport spec requires.
///
/// It is a credential: `Debug` and `Display` never show it. Use
/// [`expose`](Self::expose) where the value itself is needed, for example to
/// hand it to a process that will attach to the session.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct SessionId(String);

impl SessionId {
    /// Validates a session id with the default length bound.
    pub fn new(value: impl Into<String>) -> Result<SessionId> {
        Self::with_max_len(value.into().into_bytes(), DEFAULT_MAX_SESSION_ID_LEN)
    }

    /// Validates raw header bytes. The error never contains the value.
    pub(crate) fn with_max_len(bytes: Vec<u8>, max_len: usize) -> Result<SessionId> {
        if bytes.is_empty() {
            return Err(Error::protocol("the server sent an empty Mcp-Session-Id"));
        }
        if bytes.len() > max_len {
            return Err(Error::protocol(format!(
                "the server sent an Mcp-Session-Id of {} bytes, over the {max_len}-byte limit",
                bytes.len()
            )));
        }
        if let Some(at) = bytes.iter().position(|b| !(0x21..=0x7e).contains(b)) {
            return Err(Error::protocol(format!(
                "the server sent an Mcp-Session-Id with a byte outside visible ASCII \
                 (0x21-0x7E) at offset {at}"
            )));
        }
        // Visible ASCII is valid UTF-8.
        Ok(SessionId(String::from_utf8(bytes).expect("ASCII is UTF-8")))
    }

    /// The id itself. Treat it like a token.
    pub fn expose(&self) -> &str {
        &self.0
    }

    pub(crate) fn header_value(&self) -> http::HeaderValue {
        let mut value =
            http::HeaderValue::from_str(&self.0).expect("visible ASCII is a valid header value");
        value.set_sensitive(true);
        value
    }
}

impl fmt::Debug for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SessionId(<redacted>)")
    }
}

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted session id>")
    }
}

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

/// The HTTP transport a session speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TransportKind {
    /// Streamable HTTP (2025-03-26 on): one endpoint, POST per message.
    StreamableHttp,
    /// The deprecated HTTP+SSE transport of 2024-11-05.
    HttpSse,
}

impl TransportKind {
    /// Its name: `streamable-http` or `http+sse`.
    pub fn as_str(self) -> &'static str {
        match self {
            TransportKind::StreamableHttp => "streamable-http",
            TransportKind::HttpSse => "http+sse",
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
    fn session_ids_are_visible_ascii_and_bounded() {
        assert!(SessionId::new("abc-123_XYZ~!").is_ok());
        for bad in ["", "has space", "tab\there", "del\x7f", "é"] {
            let error = SessionId::new(bad).unwrap_err();
            assert!(error.is_protocol());
            if !bad.is_empty() {
                assert!(!error.to_string().contains(bad), "{error}");
            }
        }
        assert!(SessionId::new("x".repeat(DEFAULT_MAX_SESSION_ID_LEN)).is_ok());
        assert!(SessionId::new("x".repeat(DEFAULT_MAX_SESSION_ID_LEN + 1)).is_err());
    }

    #[test]
    fn session_ids_are_redacted() {
        let id = SessionId::new("secret-session").unwrap();
        assert!(!format!("{id:?} {id}").contains("secret"));
        assert_eq!(id.expose(), "secret-session");
        assert!(id.header_value().is_sensitive());
    }

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
