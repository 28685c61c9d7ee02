//! Where a request goes: one URL parser for both the decision and the
//! destination.
//!
//! A [`Target`] is built only by parsing with the `url` crate (the WHATWG
//! URL standard, which browsers and the `oauth2` crate follow), and it is
//! what a request is then sent to ([`Target::uri`]): the check of its
//! scheme and host is about the host the bytes actually reach. Splitting a
//! URL by hand disagrees with that parser on inputs like
//! `http://other:1\@127.0.0.1/`, where WHATWG reads `\` as `/` and the host
//! as `other`, and a hand-made split saw `127.0.0.1`.
//!
//! A [`SecureTarget`] is a target that may carry secrets (codes, verifiers,
//! client credentials, tokens): HTTPS, or plain HTTP to this machine
//! (`localhost`, `127.0.0.0/8`, `::1`), as OAuth 2.1 and RFC 8252 allow. It
//! can only be built through that check (or through an explicit opt-out
//! the caller chose), so a function that takes one cannot be handed an
//! unchecked URL.

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};

use http::Uri;
use url::{Host, Url};

/// An absolute `http` or `https` URL with a host, parsed once, without
/// user name or password (never sent, never shown).
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Target {
    url: Url,
    /// Whether the text parsed had a user name or password (dropped).
    had_userinfo: bool,
}

/// Why a string is not a [`Target`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NotATarget {
    /// Not a URL at all.
    Unparsable,
    /// A URL of another scheme than `http` or `https`.
    Scheme,
    /// Not something `http::Uri` (what the request is built from) reads
    /// the same way; never expected of the `url` crate's output.
    Unsendable,
}

impl fmt::Display for NotATarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NotATarget::Unparsable => "not a valid URL",
            NotATarget::Scheme => "not an http(s) URL",
            NotATarget::Unsendable => "not a URL a request can be sent to",
        })
    }
}

impl Target {
    /// Parses `text` as the sender will: an absolute `http(s)` URL (WHATWG
    /// parsing: `\` is `/`, hosts are lowercased, IPv4 in any notation is
    /// normalized), user name and password dropped.
    pub(crate) fn parse(text: &str) -> Result<Target, NotATarget> {
        let mut url = Url::parse(text).map_err(|_| NotATarget::Unparsable)?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(NotATarget::Scheme);
        }
        // An http(s) URL always has a host in WHATWG parsing; said again
        // here because everything below relies on it.
        if url.host().is_none() {
            return Err(NotATarget::Unparsable);
        }
        let had_userinfo = !url.username().is_empty() || url.password().is_some();
        // Cannot fail on a URL with a host.
        let _ = url.set_username("");
        let _ = url.set_password(None);
        let target = Target { url, had_userinfo };
        // What the request is built from must read the same host and port.
        let uri = target.uri_checked().ok_or(NotATarget::Unsendable)?;
        if !target.agrees_with(&uri) {
            return Err(NotATarget::Unsendable);
        }
        Ok(target)
    }

    /// Whether the text parsed had a user name or password (dropped).
    pub(crate) fn had_userinfo(&self) -> bool {
        self.had_userinfo
    }

    /// Whether the scheme is `https`.
    pub(crate) fn is_https(&self) -> bool {
        self.url.scheme() == "https"
    }

    /// The scheme: `http` or `https`.
    pub(crate) fn scheme(&self) -> &str {
        self.url.scheme()
    }

    /// The host, as it is connected to (a domain lowercased, or an IP).
    pub(crate) fn host(&self) -> Host<&str> {
        // Checked at parse.
        self.url.host().unwrap_or(Host::Domain(""))
    }

    /// The port, explicit or the scheme's default.
    pub(crate) fn port(&self) -> u16 {
        self.url.port_or_known_default().unwrap_or(0)
    }

    /// Whether the host is this machine: `localhost`, `127.0.0.0/8` or
    /// `::1`.
    pub(crate) fn is_loopback(&self) -> bool {
        match self.host() {
            Host::Domain(domain) => domain == "localhost",
            Host::Ipv4(ip) => ip.is_loopback(),
            Host::Ipv6(ip) => ip.is_loopback(),
        }
    }

    /// Whether secrets may be sent here: HTTPS, or plain HTTP to this
    /// machine.
    pub(crate) fn may_carry_secrets(&self) -> bool {
        self.is_https() || self.is_loopback()
    }

    /// The origin, `scheme://host[:port]` (the port when not the
    /// default), as the `url` crate writes it.
    pub(crate) fn origin(&self) -> String {
        self.url.origin().ascii_serialization()
    }

    /// Whether `other` has the same scheme, host and port.
    pub(crate) fn same_origin(&self, other: &Target) -> bool {
        self.url.origin() == other.url.origin()
    }

    /// The path, percent-encoded, always starting with `/`.
    pub(crate) fn path(&self) -> &str {
        self.url.path()
    }

    /// The query, when there is one.
    pub(crate) fn query(&self) -> Option<&str> {
        self.url.query()
    }

    /// The fragment, when there is one.
    pub(crate) fn fragment(&self) -> Option<&str> {
        self.url.fragment()
    }

    /// The URL as the `url` crate writes it.
    pub(crate) fn as_str(&self) -> &str {
        self.url.as_str()
    }

    /// A URL on this origin with `path` (an absolute path) and no query.
    pub(crate) fn with_path(&self, path: &str) -> Result<Target, NotATarget> {
        Target::parse(&format!("{}{path}", self.origin()))
    }

    /// What a request to this target is sent to: the same URL, without
    /// the fragment.
    pub(crate) fn uri(&self) -> Uri {
        // Checked at parse: this conversion succeeds and agrees.
        self.uri_checked()
            .unwrap_or_else(|| Uri::from_static("http://invalid./"))
    }

    fn uri_checked(&self) -> Option<Uri> {
        let mut url = self.url.clone();
        url.set_fragment(None);
        Uri::try_from(url.as_str()).ok()
    }

    /// Whether `uri` (what the request is built from) has this target's
    /// scheme, host and port.
    fn agrees_with(&self, uri: &Uri) -> bool {
        let Some(host) = uri.host() else {
            return false;
        };
        let same_host = match self.host() {
            Host::Domain(domain) => host == domain,
            Host::Ipv4(ip) => host.parse::<Ipv4Addr>().is_ok_and(|h| h == ip),
            Host::Ipv6(ip) => host
                .strip_prefix('[')
                .and_then(|h| h.strip_suffix(']'))
                .and_then(|h| h.parse::<Ipv6Addr>().ok())
                .is_some_and(|h| h == ip),
        };
        let default_port = if self.is_https() { 443 } else { 80 };
        same_host
            && uri.scheme_str() == Some(self.scheme())
            && uri.port_u16().unwrap_or(default_port) == self.port()
    }
}

impl fmt::Display for Target {
    /// Scheme, host and port only: a path or query may hold what should
    /// not be printed.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.origin())
    }
}

impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Target({})", self.origin())
    }
}

/// A [`Target`] secrets may be sent to: HTTPS, or plain HTTP to this
/// machine, unless the caller chose to allow plain HTTP everywhere.
#[derive(Clone, PartialEq, Eq, Debug)]
pub(crate) struct SecureTarget(Target);

/// Why a URL may not carry secrets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    /// Not an http(s) URL the sender reads the same way.
    Invalid(NotATarget),
    /// Plain HTTP to another machine.
    PlainHttp,
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refused::Invalid(why) => why.fmt(f),
            Refused::PlainHttp => {
                f.write_str("plain HTTP to another machine (only HTTPS, or HTTP to localhost, 127.0.0.0/8 or ::1)")
            }
        }
    }
}

impl SecureTarget {
    /// Parses `text` and checks it: HTTPS or loopback, or any http(s) URL
    /// when `allow_plain_http`.
    pub(crate) fn parse(text: &str, allow_plain_http: bool) -> Result<SecureTarget, Refused> {
        let target = Target::parse(text).map_err(Refused::Invalid)?;
        SecureTarget::check(target, allow_plain_http)
    }

    /// Checks a parsed target.
    pub(crate) fn check(target: Target, allow_plain_http: bool) -> Result<SecureTarget, Refused> {
        if allow_plain_http || target.may_carry_secrets() {
            Ok(SecureTarget(target))
        } else {
            Err(Refused::PlainHttp)
        }
    }

    /// What the request is sent to.
    pub(crate) fn uri(&self) -> Uri {
        self.0.uri()
    }

    /// The URL as the `url` crate writes it.
    pub(crate) fn as_str(&self) -> &str {
        self.0.as_str()
    }
}

/// Where the OAuth flow sends a request that carries secrets (a code, a
/// PKCE verifier, client credentials) for the URL `url`: the URI the
/// request is built with, when the guard lets it go (HTTPS, or plain HTTP
/// to `localhost`, `127.0.0.0/8` or `::1`), `None` when it refuses. The
/// verdict and the URI come from one parsed value, so the verdict is about
/// the host the request reaches. For tests and fuzzing of that guard.
#[cfg(feature = "wire")]
pub fn secure_request_uri(url: &str) -> Option<Uri> {
    SecureTarget::parse(url, false)
        .ok()
        .map(|target| target.uri())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_go_over_https_or_to_this_machine_only() {
        for url in [
            "https://as.example.com/token",
            "HTTPS://AS.EXAMPLE.COM/token",
            "http://localhost:3000/token",
            "http://LOCALHOST:3000/token",
            "http://127.0.0.1:1/token",
            "http://127.9.9.9/token",
            "http://127.1/token",
            "http://0x7f000001/token",
            "http://[::1]:8080/token",
            "http://user:pass@127.0.0.1/token",
        ] {
            let target = SecureTarget::parse(url, false).unwrap_or_else(|e| panic!("{url}: {e}"));
            assert!(target.0.may_carry_secrets(), "{url}");
        }
        for url in [
            "http://as.example.com/token",
            "http://localhost.example.com/token",
            "http://127.0.0.1.example.com/token",
            "http://localhost@evil.example.com/token",
            "http://10.0.0.1/token",
            "http://[::ffff:127.0.0.1]/token",
            // The backslash bypass: WHATWG reads `\` as `/`, so the host
            // is `otherhost`, whatever follows.
            "http://otherhost:8080\\@127.0.0.1/token",
            "http://otherhost\\@localhost/token",
            "http://otherhost\\.localhost/token",
        ] {
            assert_eq!(
                SecureTarget::parse(url, false),
                Err(Refused::PlainHttp),
                "{url}"
            );
            assert!(SecureTarget::parse(url, true).is_ok(), "{url}");
        }
        for url in [
            "ftp://localhost/token",
            "not a url",
            "mailto:a@b",
            "http://",
        ] {
            assert!(
                matches!(SecureTarget::parse(url, true), Err(Refused::Invalid(_))),
                "{url}"
            );
        }
    }

    #[test]
    fn the_checked_host_is_the_one_sent_to() {
        let target = Target::parse("http://otherhost:8080\\@127.0.0.1/token").unwrap();
        assert_eq!(target.host(), Host::Domain("otherhost"));
        let uri = target.uri();
        assert_eq!(uri.host(), Some("otherhost"));
        assert_eq!(uri.port_u16(), Some(8080));
        assert_eq!(uri.path(), "/@127.0.0.1/token");
        // The user name and password are never sent nor shown.
        let target = Target::parse("https://user:pass@as.example.com:444/t?q#f").unwrap();
        assert_eq!(target.as_str(), "https://as.example.com:444/t?q#f");
        assert_eq!(target.uri(), "https://as.example.com:444/t?q");
        assert_eq!(target.origin(), "https://as.example.com:444");
        assert_eq!(target.to_string(), "https://as.example.com:444");
    }
}
