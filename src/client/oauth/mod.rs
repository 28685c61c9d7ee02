//! OAuth 2.1 for MCP (feature `oauth`): the authorization flow of the MCP
//! spec as a header hook on the guard stack. Groundwork so far: reading
//! the server's `Bearer` challenge, where discovery looks, and the checks
//! of the two metadata documents.

// Wired in by the OAuth hook, the next step of issue 13.
#![allow(dead_code)]

pub(crate) mod challenge;
pub(crate) mod discovery;
pub(crate) mod metadata;
