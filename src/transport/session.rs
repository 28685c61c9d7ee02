//! Session ids and protocol revisions.

use std::fmt;

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
}
