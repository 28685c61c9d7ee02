//! The protocol's own header names: set by the wire, never by a hook.

use http::HeaderName;

/// The `Mcp-Session-Id` header.
pub const MCP_SESSION_ID: HeaderName = HeaderName::from_static("mcp-session-id");
/// The `MCP-Protocol-Version` header.
pub const MCP_PROTOCOL_VERSION: HeaderName = HeaderName::from_static("mcp-protocol-version");
/// The `Last-Event-ID` header, for resuming an SSE stream.
pub const LAST_EVENT_ID: HeaderName = HeaderName::from_static("last-event-id");
/// The `Mcp-Method` header (2026-07-28): the request's method.
pub const MCP_METHOD: HeaderName = HeaderName::from_static("mcp-method");
/// The `Mcp-Name` header (2026-07-28): the tool, prompt or resource named.
pub const MCP_NAME: HeaderName = HeaderName::from_static("mcp-name");
