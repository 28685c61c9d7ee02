//! OAuth 2.1 for MCP (feature `oauth`): the authorization flow of the MCP
//! spec as a header hook on the guard stack. Groundwork so far: reading
//! the server's `Bearer` challenge, where discovery looks, and the checks
//! of the two metadata documents.
//!
//! # The flow still to build (issue 13), as the conformance suite scores it
//!
//! 1. **Trigger**: a 401, or a 403 with `error="insufficient_scope"`, on
//!    any request (the era probe and `initialize` included: authorization
//!    sits below era detection and resends the refused request), single
//!    flight per credential (the suite's authorization server keeps only
//!    the latest PKCE challenge), at most 3 authorizations per request.
//! 2. **Protected resource metadata**: the challenge's `resource_metadata`
//!    exactly as given and nothing else; without it, the path-based URL,
//!    then the root ([`discovery::resource_metadata_urls`]). None at all:
//!    the 2025-03-26 fallback (the server's origin as the authorization
//!    server; `/authorize`, `/token`, `/register` when it has no metadata
//!    either). The `resource` must name the endpoint
//!    ([`metadata::ProtectedResource`]), before any request to an
//!    authorization server.
//! 3. **Authorization server metadata** of `authorization_servers[0]`, a raw
//!    string: [`discovery::authorization_server_metadata_urls`] in order,
//!    first 200 wins, 4xx tries the next, anything else stops; the issuer
//!    exact ([`metadata::AuthorizationServer`]; not enforced in the
//!    2025-03-26 fallback), S256 required.
//! 4. **Client identity**, per issuer: pre-registered credentials (only for
//!    their issuer), else a Client ID Metadata Document where supported,
//!    else Dynamic Client Registration (`application_type: "native"`,
//!    `grant_types` with `refresh_token`), else an error.
//! 5. **Authorization request**: scope from the challenge, else the
//!    resource's `scopes_supported`, else none; on a step-up the union with
//!    the scopes already asked; `offline_access` only when the
//!    authorization server lists it. PKCE S256, `state`, `resource` verbatim.
//!    The user agent is pluggable: a headless one reads `Location` of the
//!    302 without following it; a loopback one listens on 127.0.0.1.
//! 6. **Callback**: `state` checked; RFC 9207 `iss` equal to the issuer
//!    string exactly when present, and required when the metadata says
//!    `authorization_response_iss_parameter_supported`.
//! 7. **Token request**: form-encoded, `code_verifier`, the same
//!    `redirect_uri` and `resource`; client authentication as registered
//!    (`client_secret_basic`, `client_secret_post` or `none`). Then resend.
//! 8. **Refresh**, single flight, shared by the sessions of one store; a
//!    401 while holding a token fetches the resource metadata again (the
//!    authorization server may have moved: register again for the new one).
//!
//! Pitfalls the suite checks: never normalize `resource` or `issuer`
//! through a URL type (`http://host:1` becomes `http://host:1/`); never
//! fetch the root metadata of a path issuer; a refused flow must fail at
//! once (the suite counts a timeout as a failure).

// Wired in by the OAuth hook, the next step of issue 13.
#![allow(dead_code)]

pub(crate) mod challenge;
pub(crate) mod discovery;
pub(crate) mod metadata;
