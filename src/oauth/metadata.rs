//! The two metadata documents of MCP authorization, read and checked:
//! the protected resource metadata of the MCP endpoint (RFC 9728) and its
//! authorization server's metadata (RFC 8414 / OpenID Connect Discovery).
//! Values the flow sends back (`resource`, `issuer`) stay the exact
//! strings the server wrote.

use serde_json::Value;

use crate::error::{Error, Result};
use crate::url_target::Target;

/// Protected resource metadata, checked against the endpoint it is for.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ProtectedResource {
    /// `resource`, as written: sent as the `resource` parameter (RFC 8707).
    pub resource: String,
    /// `authorization_servers`, in the server's order.
    pub authorization_servers: Vec<String>,
    /// `scopes_supported`, if given.
    pub scopes_supported: Option<Vec<String>>,
}

impl ProtectedResource {
    /// Reads the document fetched for the MCP endpoint `endpoint`. Its
    /// `resource` must name that endpoint: the same origin, and a path
    /// that is the endpoint's or a parent of it, segment by segment (a
    /// server may name its origin for all its endpoints). Anything else
    /// is refused: a token for another resource must never be asked for.
    ///
    /// A `resource` with a fragment is refused (RFC 8707 §2 forbids one).
    /// One with a query is refused too unless the endpoint's URL has the
    /// very same query: RFC 8707 discourages a query, and a different one
    /// would name another resource than this endpoint.
    pub fn from_json(document: &Value, endpoint: &str) -> Result<ProtectedResource> {
        let resource = document
            .get("resource")
            .and_then(Value::as_str)
            .ok_or_else(|| invalid("protected resource metadata has no `resource`"))?;
        let parsed = Target::parse(resource)
            .map_err(|why| invalid(format!("the protected resource's `resource` is {why}")))?;
        if parsed.had_userinfo() {
            return Err(invalid(
                "the protected resource's `resource` has a user name or password; refused",
            ));
        }
        if parsed.fragment().is_some() {
            return Err(invalid(
                "the protected resource's `resource` has a fragment, which RFC 8707 forbids; refused",
            ));
        }
        let endpoint =
            Target::parse(endpoint).map_err(|why| invalid(format!("the MCP endpoint is {why}")))?;
        if parsed.query().is_some() && parsed.query() != endpoint.query() {
            return Err(invalid(
                "the protected resource's `resource` has a query that is not the endpoint's; refused",
            ));
        }
        if !names_endpoint(&parsed, &endpoint) {
            return Err(invalid(
                "the protected resource metadata names another resource than this endpoint; refused",
            ));
        }
        let authorization_servers = strings(document.get("authorization_servers"))
            .filter(|servers| !servers.is_empty())
            .ok_or_else(|| {
                invalid("protected resource metadata lists no `authorization_servers`")
            })?;
        Ok(ProtectedResource {
            resource: resource.to_owned(),
            authorization_servers,
            scopes_supported: strings(document.get("scopes_supported")),
        })
    }
}

/// Authorization server metadata, checked against the issuer it was
/// fetched for.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct AuthorizationServer {
    /// `issuer`, exactly the string asked for.
    pub issuer: String,
    /// `authorization_endpoint`.
    pub authorization_endpoint: String,
    /// `token_endpoint`.
    pub token_endpoint: String,
    /// `registration_endpoint`, when it offers Dynamic Client Registration.
    pub registration_endpoint: Option<String>,
    /// `scopes_supported`, if given.
    pub scopes_supported: Option<Vec<String>>,
    /// `token_endpoint_auth_methods_supported` (RFC 8414 default:
    /// `client_secret_basic`).
    pub token_endpoint_auth_methods: Vec<String>,
    /// `client_id_metadata_document_supported`.
    pub client_id_metadata_documents: bool,
    /// `authorization_response_iss_parameter_supported` (RFC 9207).
    pub iss_parameter: bool,
}

impl AuthorizationServer {
    /// Reads the metadata fetched for `issuer` (the string the protected
    /// resource metadata named). Its `issuer` must be exactly that string
    /// (RFC 8414 §3.3), and PKCE with `S256` must be listed: a server that
    /// does not say so is not used.
    pub fn from_json(document: &Value, issuer: &str) -> Result<AuthorizationServer> {
        let named = document.get("issuer").and_then(Value::as_str);
        if named != Some(issuer) {
            return Err(invalid(
                "the authorization server metadata names another issuer than the one asked for; refused",
            ));
        }
        let s256 = strings(document.get("code_challenge_methods_supported"))
            .is_some_and(|methods| methods.iter().any(|m| m == "S256"));
        if !s256 {
            return Err(invalid(
                "the authorization server does not list PKCE S256 in code_challenge_methods_supported; refused",
            ));
        }
        let endpoint = |field: &str| -> Result<String> {
            let url = document.get(field).and_then(Value::as_str).ok_or_else(|| {
                invalid(format!("authorization server metadata has no `{field}`"))
            })?;
            // Codes and tokens go there: an http(s) URL, nothing else.
            Target::parse(url).map_err(|why| invalid(format!("the `{field}` is {why}")))?;
            Ok(url.to_owned())
        };
        Ok(AuthorizationServer {
            issuer: issuer.to_owned(),
            authorization_endpoint: endpoint("authorization_endpoint")?,
            token_endpoint: endpoint("token_endpoint")?,
            registration_endpoint: document
                .get("registration_endpoint")
                .is_some()
                .then(|| endpoint("registration_endpoint"))
                .transpose()?,
            scopes_supported: strings(document.get("scopes_supported")),
            token_endpoint_auth_methods: strings(
                document.get("token_endpoint_auth_methods_supported"),
            )
            .unwrap_or_else(|| vec!["client_secret_basic".to_owned()]),
            client_id_metadata_documents: document
                .get("client_id_metadata_document_supported")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            iss_parameter: document
                .get("authorization_response_iss_parameter_supported")
                .and_then(Value::as_bool)
                .unwrap_or(false),
        })
    }

    /// Reads metadata found by the 2025-03-26 fallback at `origin` (a
    /// server with no protected resource metadata). Fetched from the
    /// origin's root, its `issuer` must be on that origin (that revision
    /// put the authorization server there; a path is allowed, as servers
    /// of that time used, `/oauth` say), as written in the document (the
    /// origin when it names none): an issuer elsewhere would have the
    /// credentials kept for it sent to this server's token endpoint. S256
    /// is still required.
    pub(crate) fn from_json_legacy(document: &Value, origin: &str) -> Result<AuthorizationServer> {
        let issuer = document
            .get("issuer")
            .and_then(Value::as_str)
            .unwrap_or(origin)
            .to_owned();
        let elsewhere = match (Target::parse(&issuer), Target::parse(origin)) {
            (Ok(named), Ok(origin)) => {
                !named.same_origin(&origin) || named.query().is_some() || named.fragment().is_some()
            }
            _ => true,
        };
        if elsewhere {
            return Err(invalid(
                "the authorization server metadata at the MCP server's origin names an \
                 issuer elsewhere; refused",
            ));
        }
        let mut document = document.clone();
        if let Some(object) = document.as_object_mut() {
            object.insert("issuer".into(), Value::String(issuer.clone()));
        }
        AuthorizationServer::from_json(&document, &issuer)
    }

    /// The 2025-03-26 default endpoints at `origin`, for a server with no
    /// metadata at all (PKCE S256 assumed, as that revision required it).
    pub(crate) fn legacy_defaults(origin: &str) -> AuthorizationServer {
        AuthorizationServer {
            issuer: origin.to_owned(),
            authorization_endpoint: format!("{origin}/authorize"),
            token_endpoint: format!("{origin}/token"),
            registration_endpoint: Some(format!("{origin}/register")),
            scopes_supported: None,
            token_endpoint_auth_methods: vec!["client_secret_basic".to_owned()],
            client_id_metadata_documents: false,
            iss_parameter: false,
        }
    }

    /// Whether `offline_access` may be asked for (only when listed).
    pub(crate) fn offers_offline_access(&self) -> bool {
        self.scopes_supported
            .as_ref()
            .is_some_and(|scopes| scopes.iter().any(|s| s == "offline_access"))
    }
}

/// Whether `resource` names `endpoint`: same origin, and its path equal to
/// the endpoint's or a parent of it (whole segments).
fn names_endpoint(resource: &Target, endpoint: &Target) -> bool {
    if !resource.same_origin(endpoint) {
        return false;
    }
    let resource = resource.path().trim_end_matches('/');
    let endpoint = endpoint.path().trim_end_matches('/');
    endpoint == resource
        || endpoint
            .strip_prefix(resource)
            .is_some_and(|rest| rest.starts_with('/'))
}

/// A JSON array of strings, if `value` is one (other entries skipped).
fn strings(value: Option<&Value>) -> Option<Vec<String>> {
    Some(
        value?
            .as_array()?
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect(),
    )
}

fn invalid(message: impl Into<String>) -> Error {
    Error::auth(message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const ENDPOINT: &str = "http://localhost:3000/mcp";

    #[test]
    fn a_resource_naming_the_endpoint_or_a_parent_is_kept_verbatim() {
        for resource in [
            "http://localhost:3000/mcp",
            "http://localhost:3000",
            "http://localhost:3000/",
        ] {
            let prm = ProtectedResource::from_json(
                &json!({"resource": resource, "authorization_servers": ["http://localhost:4000"]}),
                ENDPOINT,
            )
            .unwrap_or_else(|e| panic!("{resource}: {e}"));
            assert_eq!(prm.resource, resource, "sent back byte for byte");
        }
    }

    #[test]
    fn a_resource_naming_anything_else_is_refused() {
        for resource in [
            "https://evil.example.com/mcp",
            "http://localhost:3001/mcp",
            "https://localhost:3000/mcp",
            "http://localhost:3000/mcp2",
            "http://localhost:3000/mcp/sub",
            "http://localhost:3000/other",
        ] {
            let error = ProtectedResource::from_json(
                &json!({"resource": resource, "authorization_servers": ["http://a"]}),
                ENDPOINT,
            )
            .expect_err(resource);
            assert!(error.is_auth(), "{resource}: {error:?}");
        }
        for document in [
            json!({"authorization_servers": ["http://a"]}),
            json!({"resource": ENDPOINT}),
            json!({"resource": ENDPOINT, "authorization_servers": []}),
            json!({"resource": ENDPOINT, "authorization_servers": "http://a"}),
        ] {
            assert!(
                ProtectedResource::from_json(&document, ENDPOINT).is_err(),
                "{document}"
            );
        }
    }

    #[test]
    fn a_resource_with_a_fragment_another_query_or_a_user_is_refused() {
        let read = |resource: &str, endpoint: &str| {
            ProtectedResource::from_json(
                &json!({"resource": resource, "authorization_servers": ["http://a"]}),
                endpoint,
            )
        };
        for (resource, endpoint) in [
            ("http://localhost:3000/mcp#f", ENDPOINT),
            ("http://localhost:3000/mcp#", ENDPOINT),
            ("http://localhost:3000/mcp?", ENDPOINT),
            ("http://localhost:3000/mcp?t=1", ENDPOINT),
            (
                "http://localhost:3000/mcp?t=1",
                "http://localhost:3000/mcp?t=2",
            ),
            (
                "http://localhost:3000/mcp?t=1#f",
                "http://localhost:3000/mcp?t=1",
            ),
        ] {
            let error = read(resource, endpoint).expect_err(resource);
            assert!(error.is_auth(), "{resource}: {error:?}");
        }
        for (resource, endpoint) in [
            (
                "http://localhost:3000/mcp?t=1",
                "http://localhost:3000/mcp?t=1",
            ),
            ("http://localhost:3000/mcp", "http://localhost:3000/mcp?t=1"),
        ] {
            assert_eq!(read(resource, endpoint).unwrap().resource, resource);
        }
    }

    fn server(extra: Value) -> Value {
        let mut document = json!({
            "issuer": "http://localhost:4000/tenant1",
            "authorization_endpoint": "http://localhost:4000/tenant1/authorize",
            "token_endpoint": "http://localhost:4000/tenant1/token",
            "code_challenge_methods_supported": ["S256"],
        });
        for (key, value) in extra.as_object().unwrap() {
            document[key] = value.clone();
        }
        document
    }

    #[test]
    fn the_issuer_must_be_the_one_asked_for_exactly() {
        let issuer = "http://localhost:4000/tenant1";
        let metadata = AuthorizationServer::from_json(&server(json!({})), issuer).unwrap();
        assert_eq!(
            metadata.token_endpoint,
            "http://localhost:4000/tenant1/token"
        );
        assert_eq!(
            metadata.token_endpoint_auth_methods,
            ["client_secret_basic"]
        );
        assert!(!metadata.offers_offline_access());
        for asked in [
            "http://localhost:4000/tenant1/",
            "http://localhost:4000",
            "https://attacker.example.com",
        ] {
            assert!(
                AuthorizationServer::from_json(&server(json!({})), asked).is_err(),
                "{asked}"
            );
        }
    }

    #[test]
    fn a_legacy_servers_issuer_must_be_on_its_origin() {
        let origin = "http://localhost:3000";
        let legacy = |issuer: Option<&str>| {
            let mut document = server(json!({}));
            match issuer {
                Some(issuer) => document["issuer"] = json!(issuer),
                None => {
                    document.as_object_mut().unwrap().remove("issuer");
                }
            }
            AuthorizationServer::from_json_legacy(&document, origin)
        };
        for issuer in [
            None,
            Some(origin),
            Some("http://localhost:3000/"),
            // The conformance suite's 2025-03-26 server, as servers then did.
            Some("http://localhost:3000/oauth"),
        ] {
            assert!(legacy(issuer).is_ok(), "{issuer:?}");
        }
        for issuer in [
            "https://trusted.example.com",
            "https://trusted.example.com/localhost:3000",
            "http://localhost:3001",
            "http://localhost:30000",
            "https://localhost:3000",
            "http://localhost:3000?x",
            "http://localhost:3000#x",
        ] {
            assert!(legacy(Some(issuer)).is_err(), "{issuer}");
        }
    }

    #[test]
    fn pkce_s256_and_http_endpoints_are_required() {
        let issuer = "http://localhost:4000/tenant1";
        for extra in [
            json!({"code_challenge_methods_supported": ["plain"]}),
            json!({"code_challenge_methods_supported": null}),
            json!({"token_endpoint": "javascript:alert(1)"}),
            json!({"authorization_endpoint": null}),
            json!({"registration_endpoint": "file:///etc/passwd"}),
        ] {
            assert!(
                AuthorizationServer::from_json(&server(extra.clone()), issuer).is_err(),
                "{extra}"
            );
        }
        let metadata = AuthorizationServer::from_json(
            &server(json!({
                "scopes_supported": ["mcp:basic", "offline_access"],
                "registration_endpoint": "http://localhost:4000/tenant1/register",
                "client_id_metadata_document_supported": true,
                "authorization_response_iss_parameter_supported": true,
                "token_endpoint_auth_methods_supported": ["none"],
            })),
            issuer,
        )
        .unwrap();
        assert!(metadata.offers_offline_access());
        assert!(metadata.client_id_metadata_documents && metadata.iss_parameter);
        assert_eq!(metadata.token_endpoint_auth_methods, ["none"]);
        assert!(metadata.registration_endpoint.is_some());
    }
}
