//! Where MCP authorization discovery looks, in the spec's order (2025-11-25
//! and 2026-07-28, "Authorization Server Discovery"): the protected
//! resource metadata (RFC 9728) of the MCP endpoint, then the metadata of
//! its authorization server (RFC 8414, then OpenID Connect Discovery).
//!
//! Every URL here is a [`Target`], parsed once by the one URL parser
//! (`crate::url_target`); the well-known URLs are built from its origin
//! and path, never from the string split by hand. The `resource` and
//! `issuer` values themselves stay the strings the server wrote (they are
//! compared and sent back byte for byte); only where requests go is parsed.

use crate::url_target::Target;

/// The path of `target` without a trailing `/` (`""` for the root).
fn trimmed_path(target: &Target) -> &str {
    target.path().trim_end_matches('/')
}

/// Builds `origin` + `path`, a URL on `base`'s origin.
fn at(base: &Target, path: &str) -> Option<Target> {
    base.with_path(path).ok()
}

/// The protected resource metadata URLs of the MCP endpoint `resource`, in
/// the order to try them: the path-based one (when the endpoint has a
/// path), then the one at the root. (A `resource_metadata` URL from the
/// server's challenge, when there is one, comes before both, as given.)
pub(crate) fn resource_metadata_urls(resource: &Target) -> Vec<Target> {
    let root = "/.well-known/oauth-protected-resource";
    let path = trimmed_path(resource);
    let paths = if path.is_empty() {
        vec![root.to_owned()]
    } else {
        vec![format!("{root}{path}"), root.to_owned()]
    };
    paths.iter().filter_map(|path| at(resource, path)).collect()
}

/// The authorization server metadata URLs of `issuer`, in the spec's
/// order: with a path, OAuth 2.0 metadata with the path inserted, OpenID
/// Connect with the path inserted, OpenID Connect with the path appended;
/// without one, OAuth 2.0 then OpenID Connect at the root.
pub(crate) fn authorization_server_metadata_urls(issuer: &Target) -> Vec<Target> {
    let path = trimmed_path(issuer);
    let paths = if path.is_empty() {
        vec![
            "/.well-known/oauth-authorization-server".to_owned(),
            "/.well-known/openid-configuration".to_owned(),
        ]
    } else {
        vec![
            format!("/.well-known/oauth-authorization-server{path}"),
            format!("/.well-known/openid-configuration{path}"),
            format!("{path}/.well-known/openid-configuration"),
        ]
    };
    paths.iter().filter_map(|path| at(issuer, path)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(targets: Vec<Target>) -> Vec<String> {
        targets.iter().map(|t| t.as_str().to_owned()).collect()
    }

    fn target(url: &str) -> Target {
        Target::parse(url).unwrap()
    }

    #[test]
    fn protected_resource_metadata_is_path_based_first() {
        assert_eq!(
            strings(resource_metadata_urls(&target("http://localhost:3000/mcp"))),
            [
                "http://localhost:3000/.well-known/oauth-protected-resource/mcp",
                "http://localhost:3000/.well-known/oauth-protected-resource",
            ]
        );
        assert_eq!(
            strings(resource_metadata_urls(&target("https://h/a/b/?q=1#f"))),
            [
                "https://h/.well-known/oauth-protected-resource/a/b",
                "https://h/.well-known/oauth-protected-resource",
            ]
        );
        assert_eq!(
            strings(resource_metadata_urls(&target("http://localhost:3000"))),
            ["http://localhost:3000/.well-known/oauth-protected-resource"]
        );
        // A user name and password are not carried over.
        assert_eq!(
            strings(resource_metadata_urls(&target("http://u:p@localhost:3000"))),
            ["http://localhost:3000/.well-known/oauth-protected-resource"]
        );
    }

    #[test]
    fn authorization_server_metadata_follows_the_spec_order() {
        assert_eq!(
            strings(authorization_server_metadata_urls(&target(
                "http://localhost:4000/tenant1"
            ))),
            [
                "http://localhost:4000/.well-known/oauth-authorization-server/tenant1",
                "http://localhost:4000/.well-known/openid-configuration/tenant1",
                "http://localhost:4000/tenant1/.well-known/openid-configuration",
            ]
        );
        assert_eq!(
            strings(authorization_server_metadata_urls(&target(
                "http://localhost:4000"
            ))),
            [
                "http://localhost:4000/.well-known/oauth-authorization-server",
                "http://localhost:4000/.well-known/openid-configuration",
            ]
        );
        // A trailing slash is no path.
        assert_eq!(
            authorization_server_metadata_urls(&target("http://localhost:4000/")),
            authorization_server_metadata_urls(&target("http://localhost:4000"))
        );
    }
}
