//! Where MCP authorization discovery looks, in the spec's order (2025-11-25
//! and 2026-07-28, "Authorization Server Discovery"): the protected
//! resource metadata (RFC 9728) of the MCP endpoint, then the metadata of
//! its authorization server (RFC 8414, then OpenID Connect Discovery).
//!
//! URLs stay strings, built by hand from the parts of the one given: a URL
//! parser would normalize `http://host:1` into `http://host:1/`, and the
//! resource and issuer must be sent back byte for byte as the server wrote
//! them.

/// The scheme and authority of `url` (`https://host:1`), and its path
/// (without query or fragment, without a trailing `/`), or `None` when it
/// is not an absolute `http(s)` URL.
fn split(url: &str) -> Option<(&str, &str)> {
    let scheme_len = ["https://", "http://"].into_iter().find_map(|scheme| {
        url.get(..scheme.len())
            .filter(|prefix| prefix.eq_ignore_ascii_case(scheme))
            .map(|_| scheme.len())
    })?;
    let rest = &url[scheme_len..];
    let authority_len = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    if authority_len == 0 {
        return None;
    }
    let origin = &url[..scheme_len + authority_len];
    let rest = &rest[authority_len..];
    let path_len = rest.find(['?', '#']).unwrap_or(rest.len());
    let path = rest[..path_len].trim_end_matches('/');
    Some((origin, path))
}

/// The protected resource metadata URLs of the MCP endpoint `resource`, in
/// the order to try them: the path-based one (when the endpoint has a
/// path), then the one at the root. (A `resource_metadata` URL from the
/// server's challenge, when there is one, comes before both, as given.)
pub(crate) fn resource_metadata_urls(resource: &str) -> Vec<String> {
    let Some((origin, path)) = split(resource) else {
        return Vec::new();
    };
    let root = format!("{origin}/.well-known/oauth-protected-resource");
    if path.is_empty() {
        vec![root]
    } else {
        vec![format!("{root}{path}"), root]
    }
}

/// The authorization server metadata URLs of `issuer`, in the spec's
/// order: with a path, OAuth 2.0 metadata with the path inserted, OpenID
/// Connect with the path inserted, OpenID Connect with the path appended;
/// without one, OAuth 2.0 then OpenID Connect at the root.
pub(crate) fn authorization_server_metadata_urls(issuer: &str) -> Vec<String> {
    let Some((origin, path)) = split(issuer) else {
        return Vec::new();
    };
    if path.is_empty() {
        vec![
            format!("{origin}/.well-known/oauth-authorization-server"),
            format!("{origin}/.well-known/openid-configuration"),
        ]
    } else {
        vec![
            format!("{origin}/.well-known/oauth-authorization-server{path}"),
            format!("{origin}/.well-known/openid-configuration{path}"),
            format!("{origin}{path}/.well-known/openid-configuration"),
        ]
    }
}

/// The origin of `url` as written (`https://host:1`), when it is an
/// absolute `http(s)` URL.
pub(crate) fn origin_of(url: &str) -> Option<&str> {
    split(url).map(|(origin, _)| origin)
}

/// Whether `url` is an absolute `http` or `https` URL with a host.
pub(crate) fn is_http_url(url: &str) -> bool {
    split(url).is_some()
}

/// Whether `url` is on the same origin as `other` (scheme and authority,
/// compared as written, the scheme and host ignoring case).
pub(crate) fn same_origin(url: &str, other: &str) -> bool {
    match (split(url), split(other)) {
        (Some((a, _)), Some((b, _))) => a.eq_ignore_ascii_case(b),
        _ => false,
    }
}

/// Whether secrets may be sent to `url`: HTTPS, or plain HTTP to this
/// machine (`localhost`, `127.0.0.0/8`, `[::1]`), as the spec allows for
/// development and for loopback redirects.
pub(crate) fn is_https_or_loopback(url: &str) -> bool {
    let Some((origin, _)) = split(url) else {
        return false;
    };
    let lower = origin.to_ascii_lowercase();
    if lower.starts_with("https://") {
        return true;
    }
    let authority = &lower["http://".len()..];
    // Credentials in the authority (`user@`) are not a host.
    let host_port = authority.rsplit('@').next().unwrap_or(authority);
    let host = if let Some(rest) = host_port.strip_prefix('[') {
        rest.split(']').next().unwrap_or("")
    } else {
        host_port.split(':').next().unwrap_or("")
    };
    host == "localhost"
        || host == "::1"
        || host
            .parse::<std::net::Ipv4Addr>()
            .is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    #[test]
    fn secrets_go_over_https_or_to_this_machine_only() {
        for url in [
            "https://as.example.com/token",
            "HTTPS://AS.EXAMPLE.COM/token",
            "http://localhost:3000/token",
            "http://127.0.0.1:1/token",
            "http://127.9.9.9/token",
            "http://[::1]:8080/token",
        ] {
            assert!(is_https_or_loopback(url), "{url}");
        }
        for url in [
            "http://as.example.com/token",
            "http://localhost.example.com/token",
            "http://127.0.0.1.example.com/token",
            "http://localhost@evil.example.com/token",
            "http://10.0.0.1/token",
            "ftp://localhost/token",
            "not a url",
        ] {
            assert!(!is_https_or_loopback(url), "{url}");
        }
    }

    use super::*;

    #[test]
    fn protected_resource_metadata_is_path_based_first() {
        assert_eq!(
            resource_metadata_urls("http://localhost:3000/mcp"),
            [
                "http://localhost:3000/.well-known/oauth-protected-resource/mcp",
                "http://localhost:3000/.well-known/oauth-protected-resource",
            ]
        );
        assert_eq!(
            resource_metadata_urls("https://h/a/b/?q=1#f"),
            [
                "https://h/.well-known/oauth-protected-resource/a/b",
                "https://h/.well-known/oauth-protected-resource",
            ]
        );
        assert_eq!(
            resource_metadata_urls("http://localhost:3000"),
            ["http://localhost:3000/.well-known/oauth-protected-resource"]
        );
        assert!(resource_metadata_urls("ftp://h/x").is_empty());
        assert!(resource_metadata_urls("http:///x").is_empty());
    }

    #[test]
    fn authorization_server_metadata_follows_the_spec_order() {
        assert_eq!(
            authorization_server_metadata_urls("http://localhost:4000/tenant1"),
            [
                "http://localhost:4000/.well-known/oauth-authorization-server/tenant1",
                "http://localhost:4000/.well-known/openid-configuration/tenant1",
                "http://localhost:4000/tenant1/.well-known/openid-configuration",
            ]
        );
        assert_eq!(
            authorization_server_metadata_urls("http://localhost:4000"),
            [
                "http://localhost:4000/.well-known/oauth-authorization-server",
                "http://localhost:4000/.well-known/openid-configuration",
            ]
        );
        // A trailing slash is no path.
        assert_eq!(
            authorization_server_metadata_urls("http://localhost:4000/"),
            authorization_server_metadata_urls("http://localhost:4000")
        );
    }

    #[test]
    fn origins_compare_as_written() {
        assert!(same_origin("http://a:1/x", "HTTP://A:1/y"));
        assert!(!same_origin("http://a:1/x", "http://a:2/x"));
        assert!(!same_origin("https://a/x", "http://a/x"));
        assert!(!same_origin("mailto:x", "mailto:x"));
    }
}
