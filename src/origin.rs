//! Origins: scheme, host and port.

use std::fmt;

use http::Uri;

/// What a redirect must keep to be followed, and what a header hook is
/// scoped to.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Origin {
    scheme: String,
    host: String,
    port: u16,
}

impl Origin {
    /// The origin of an absolute `http` or `https` URL.
    pub(crate) fn of(uri: &Uri) -> Option<Origin> {
        let scheme = uri.scheme_str()?.to_ascii_lowercase();
        let default_port = match scheme.as_str() {
            "http" => 80,
            "https" => 443,
            _ => return None,
        };
        Some(Origin {
            host: uri.host()?.to_ascii_lowercase(),
            port: uri.port_u16().unwrap_or(default_port),
            scheme,
        })
    }

    /// The host, lowercased (an IPv6 address in brackets).
    pub(crate) fn host(&self) -> &str {
        &self.host
    }

    /// The port, the scheme's default when the URL named none.
    pub(crate) fn port(&self) -> u16 {
        self.port
    }

    /// Parses a URL and takes its origin.
    pub(crate) fn parse(url: &str) -> Option<Origin> {
        Origin::of(&url.parse().ok()?)
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://{}:{}", self.scheme, self.host, self.port)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_compare_scheme_host_and_port() {
        let a = Origin::parse("http://Example.com/mcp").unwrap();
        assert_eq!(a, Origin::parse("http://example.com:80/other").unwrap());
        assert_ne!(a, Origin::parse("https://example.com/mcp").unwrap());
        assert_ne!(a, Origin::parse("http://example.com:8080/mcp").unwrap());
        assert!(Origin::parse("ftp://example.com/").is_none());
        assert_eq!(a.to_string(), "http://example.com:80");
    }
}
