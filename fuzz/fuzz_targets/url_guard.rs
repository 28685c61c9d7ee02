//! The OAuth HTTPS-or-loopback guard against the sender, differentially:
//! `wire::oauth::secure_request_uri` (the guard's verdict and the URI the
//! request is built with, one parsed value) on any string.
//!
//! Checked:
//! - when it lets a request go, the URI it is sent to (its scheme, its
//!   host as the connector dials it, brackets removed) is HTTPS, or plain
//!   HTTP to this machine by an independent test of that host
//!   (`localhost`, or an IP that `std` reads as loopback);
//! - that scheme, host and port are the ones the `url` crate (WHATWG, the
//!   parser of the `oauth2` crate and of browsers) reads in the input, so
//!   the guard never judges one host while the request goes to another
//!   (the `http://other:1\@127.0.0.1/` bypass);
//! - no user name or password is sent (the URI's authority has no `@`);
//! - when it refuses, the input is not an https or loopback http(s) URL
//!   to WHATWG parsing, or `http::Uri` refuses that URL.

#![no_main]

use std::net::IpAddr;

use libfuzzer_sys::fuzz_target;
use mcp_scoped_http::wire::oauth::secure_request_uri;
use url::{Host, Url};

/// This machine, judged on the host string the connector gets.
fn is_this_machine(host: &str) -> bool {
    host == "localhost" || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// This machine, judged on WHATWG's host.
fn is_loopback(host: Option<Host<&str>>) -> bool {
    match host {
        Some(Host::Domain(domain)) => domain == "localhost",
        Some(Host::Ipv4(ip)) => ip.is_loopback(),
        Some(Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    }
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let whatwg = Url::parse(&text)
        .ok()
        .filter(|url| matches!(url.scheme(), "http" | "https"));
    match secure_request_uri(&text) {
        Some(uri) => {
            let scheme = uri.scheme_str().expect("a scheme");
            let authority = uri.authority().expect("an authority").as_str();
            assert!(!authority.contains('@'), "user info sent: {uri}");
            let host = uri.host().expect("a host");
            let dialed = host
                .strip_prefix('[')
                .and_then(|host| host.strip_suffix(']'))
                .unwrap_or(host);
            let port = uri
                .port_u16()
                .unwrap_or(if scheme == "https" { 443 } else { 80 });
            assert!(
                scheme == "https" || (scheme == "http" && is_this_machine(dialed)),
                "let {text:?} go to {uri}"
            );
            let url = whatwg.unwrap_or_else(|| panic!("{text:?} is no http(s) URL to WHATWG"));
            assert_eq!(url.scheme(), scheme, "{text:?}");
            assert_eq!(url.port_or_known_default(), Some(port), "{text:?}");
            let same_host = match url.host() {
                Some(Host::Domain(domain)) => domain == dialed,
                Some(Host::Ipv4(ip)) => dialed.parse::<IpAddr>().is_ok_and(|d| d == ip),
                Some(Host::Ipv6(ip)) => dialed.parse::<IpAddr>().is_ok_and(|d| d == ip),
                None => false,
            };
            assert!(
                same_host,
                "{text:?}: WHATWG reads {:?}, sent to {dialed}",
                url.host()
            );
        }
        None => {
            let Some(mut url) = whatwg else {
                return;
            };
            if url.scheme() == "https" || is_loopback(url.host()) {
                // Refused only when the URI cannot be built from it.
                let _ = url.set_username("");
                let _ = url.set_password(None);
                url.set_fragment(None);
                assert!(
                    http::Uri::try_from(url.as_str()).is_err(),
                    "refused {text:?}, an https or loopback URL"
                );
            }
        }
    }
});
