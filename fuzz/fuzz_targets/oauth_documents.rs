//! What OAuth reads from servers: the `Bearer` challenge of a
//! `WWW-Authenticate` header, the protected resource metadata, the
//! authorization server metadata, and the query of a redirect.
//!
//! The first byte picks which; the rest is the input (lossily UTF-8).
//!
//! Checked:
//! - nothing panics;
//! - accepted resource metadata names the endpoint's origin (read by the
//!   `url` crate, the parser the flow uses), with the endpoint's path or a
//!   parent of it, no user name, password or fragment, keeps its
//!   `resource` byte for byte, and lists an authorization server;
//! - accepted authorization server metadata has exactly the issuer asked
//!   for, lists S256, and has http(s) authorization and token endpoints
//!   (to the `url` crate);
//! - a redirect's `code` never shows in `Debug` (it reads the same with
//!   any other code).

#![no_main]

use libfuzzer_sys::fuzz_target;
use mcp_scoped_http::oauth::{AuthorizationResponse, Secret};
use mcp_scoped_http::wire::oauth::{AuthorizationServer, BearerChallenge, ProtectedResource};
use serde_json::Value;

const ENDPOINT: &str = "http://localhost:3000/mcp";
const ISSUER: &str = "http://localhost:4000/tenant";

fn is_http(url: &str) -> bool {
    url::Url::parse(url).is_ok_and(|url| matches!(url.scheme(), "http" | "https"))
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(rest);
    match mode % 4 {
        0 => {
            let _ = BearerChallenge::parse(&text);
        }
        1 => {
            let Ok(document) = serde_json::from_str::<Value>(&text) else {
                return;
            };
            if let Ok(resource) = ProtectedResource::from_json(&document, ENDPOINT) {
                assert_eq!(
                    Some(resource.resource.as_str()),
                    document.get("resource").and_then(Value::as_str)
                );
                let named = url::Url::parse(&resource.resource).expect("a URL");
                let endpoint = url::Url::parse(ENDPOINT).expect("a URL");
                assert_eq!(named.origin(), endpoint.origin(), "{}", resource.resource);
                assert!(named.username().is_empty() && named.password().is_none());
                assert!(named.fragment().is_none(), "{}", resource.resource);
                assert!(named.query().is_none(), "{}", resource.resource);
                let path = named.path().trim_end_matches('/');
                assert!(
                    path.is_empty() || path == "/mcp",
                    "{}: {path}",
                    resource.resource
                );
                assert!(!resource.authorization_servers.is_empty());
            }
        }
        2 => {
            let Ok(document) = serde_json::from_str::<Value>(&text) else {
                return;
            };
            if let Ok(server) = AuthorizationServer::from_json(&document, ISSUER) {
                assert_eq!(server.issuer, ISSUER);
                assert!(is_http(&server.authorization_endpoint));
                assert!(is_http(&server.token_endpoint));
                let methods = document["code_challenge_methods_supported"].as_array();
                assert!(methods.is_some_and(|m| m.iter().any(|m| m == "S256")));
            }
        }
        _ => {
            let response = AuthorizationResponse::from_redirect(&text);
            if response.code.is_some() {
                // The same as with any other code: the value never shows.
                let mut other = response.clone();
                other.code = Some(Secret::new("stand-in"));
                assert_eq!(format!("{response:?}"), format!("{other:?}"));
            }
        }
    }
});
