//! What authorization keeps: client credentials per authorization server,
//! tokens per endpoint, and the store that holds them.

use std::collections::HashMap;
use std::fmt;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use crate::sync::lock;

/// A token, code, verifier or client secret: shown as `Secret(..)` by
/// `Debug` and never in `Display`, errors or tracing. Serializes as the
/// plain string, for a store that writes to disk.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret value.
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    /// The value, for the one place that must send it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(..)")
    }
}

/// How a client authenticates at the token endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum TokenAuthMethod {
    /// `client_secret_basic`: HTTP Basic with the id and secret.
    ClientSecretBasic,
    /// `client_secret_post`: the id and secret in the form body.
    ClientSecretPost,
    /// `none`: a public client, the id alone in the form body.
    None,
}

impl TokenAuthMethod {
    /// The registered name (`client_secret_basic`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            TokenAuthMethod::ClientSecretBasic => "client_secret_basic",
            TokenAuthMethod::ClientSecretPost => "client_secret_post",
            TokenAuthMethod::None => "none",
        }
    }

    pub(crate) fn parse(name: &str) -> Option<TokenAuthMethod> {
        match name {
            "client_secret_basic" => Some(TokenAuthMethod::ClientSecretBasic),
            "client_secret_post" => Some(TokenAuthMethod::ClientSecretPost),
            "none" => Some(TokenAuthMethod::None),
            _ => None,
        }
    }
}

/// A client's identity at one authorization server.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ClientCredentials {
    /// `client_id`.
    pub client_id: String,
    /// `client_secret`, for a confidential client.
    pub client_secret: Option<Secret>,
    /// How it authenticates at the token endpoint.
    pub auth_method: TokenAuthMethod,
}

impl ClientCredentials {
    /// A public client (`none`).
    pub fn public(client_id: impl Into<String>) -> ClientCredentials {
        ClientCredentials {
            client_id: client_id.into(),
            client_secret: None,
            auth_method: TokenAuthMethod::None,
        }
    }

    /// A confidential client authenticating with `method`.
    pub fn confidential(
        client_id: impl Into<String>,
        client_secret: impl Into<String>,
        method: TokenAuthMethod,
    ) -> ClientCredentials {
        ClientCredentials {
            client_id: client_id.into(),
            client_secret: Some(Secret::new(client_secret)),
            auth_method: method,
        }
    }
}

/// Tokens for one endpoint, as the authorization server issued them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct TokenSet {
    /// The bearer token.
    pub access_token: Secret,
    /// The refresh token, when one was issued.
    pub refresh_token: Option<Secret>,
    /// When the access token expires, when the server said.
    pub expires_at: Option<SystemTime>,
    /// The scopes granted (or asked for, when the server did not say).
    pub scopes: Vec<String>,
    /// The issuer of the authorization server that issued them.
    pub issuer: String,
    /// The `resource` they were asked for (RFC 8707).
    pub resource: String,
}

impl TokenSet {
    /// A token set with only an access token (for a store filled by hand).
    pub fn new(
        access_token: impl Into<String>,
        issuer: impl Into<String>,
        resource: impl Into<String>,
    ) -> TokenSet {
        TokenSet {
            access_token: Secret::new(access_token),
            refresh_token: None,
            expires_at: None,
            scopes: Vec::new(),
            issuer: issuer.into(),
            resource: resource.into(),
        }
    }

    /// Whether the access token expires within `margin`.
    pub fn expires_within(&self, margin: Duration) -> bool {
        self.expires_at
            .is_some_and(|at| at <= SystemTime::now() + margin)
    }
}

/// Where clients and tokens are kept. Yours when you give one to
/// [`OAuth::store`](super::OAuth::store): sessions read it, and write to
/// it only what a step issued successfully; they never clear it.
///
/// Calls are made under no lock of the session's, and should be quick (an
/// in-memory map, or a cache in front of your storage).
pub trait CredentialStore: Send + Sync + 'static {
    /// The client registered at `issuer`, if any.
    fn client(&self, issuer: &str) -> Option<ClientCredentials>;
    /// Keeps the client registered at `issuer`.
    fn save_client(&self, issuer: &str, client: ClientCredentials);
    /// The tokens for the MCP endpoint URL `endpoint`, if any.
    fn token(&self, endpoint: &str) -> Option<TokenSet>;
    /// Keeps the tokens for `endpoint`.
    fn save_token(&self, endpoint: &str, token: TokenSet);
}

/// A [`CredentialStore`] in memory.
#[derive(Default)]
pub struct MemoryStore {
    clients: Mutex<HashMap<String, ClientCredentials>>,
    tokens: Mutex<HashMap<String, TokenSet>>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> MemoryStore {
        MemoryStore::default()
    }
}

impl CredentialStore for MemoryStore {
    fn client(&self, issuer: &str) -> Option<ClientCredentials> {
        lock(&self.clients).get(issuer).cloned()
    }

    fn save_client(&self, issuer: &str, client: ClientCredentials) {
        lock(&self.clients).insert(issuer.to_owned(), client);
    }

    fn token(&self, endpoint: &str) -> Option<TokenSet> {
        lock(&self.tokens).get(endpoint).cloned()
    }

    fn save_token(&self, endpoint: &str, token: TokenSet) {
        lock(&self.tokens).insert(endpoint.to_owned(), token);
    }
}

impl fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryStore")
            .field("clients", &lock(&self.clients).len())
            .field("tokens", &lock(&self.tokens).len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_stay_out_of_debug() {
        let token = TokenSet {
            refresh_token: Some(Secret::new("refresh-value")),
            ..TokenSet::new("access-value", "https://as", "https://rs/mcp")
        };
        let client = ClientCredentials::confidential(
            "id",
            "secret-value",
            TokenAuthMethod::ClientSecretBasic,
        );
        let shown = format!("{token:?} {client:?}");
        for secret in ["access-value", "refresh-value", "secret-value"] {
            assert!(!shown.contains(secret), "{shown}");
        }
        // A store on disk gets the values.
        let json = serde_json::to_string(&token).unwrap();
        assert!(json.contains("access-value"));
    }
}
