//! The `Bearer` challenge of a `WWW-Authenticate` header (RFC 6750 §3,
//! RFC 9728 §5.1): where the protected resource metadata is, the scope the
//! request needed, and why it was refused.

/// What a server's `Bearer` challenge says.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct BearerChallenge {
    /// `resource_metadata`: the URL of the protected resource metadata,
    /// to be used exactly as given.
    pub resource_metadata: Option<String>,
    /// `scope`: the scopes the request needs, space-separated.
    pub scope: Option<String>,
    /// `error`: `invalid_token`, `insufficient_scope`...
    pub error: Option<String>,
}

impl BearerChallenge {
    /// The `Bearer` challenge among those of a `WWW-Authenticate` value, if
    /// there is one. Other schemes (`Basic realm=...`) are skipped; a
    /// malformed header yields what could be read before the fault.
    pub fn parse(header: &str) -> Option<BearerChallenge> {
        let mut parser = Parser {
            rest: header.as_bytes(),
        };
        let mut bearer: Option<BearerChallenge> = None;
        let mut in_bearer = false;
        loop {
            parser.skip_separators();
            if parser.rest.is_empty() {
                break;
            }
            let Some(token) = parser.token() else {
                break;
            };
            parser.skip_spaces();
            if parser.peek() == Some(b'=') {
                parser.advance(1);
                // A token68's padding (`dXNlcg==`), not a parameter.
                if matches!(parser.peek(), None | Some(b'=' | b',')) {
                    while parser.peek() == Some(b'=') {
                        parser.advance(1);
                    }
                    continue;
                }
                // An auth-param of the current challenge.
                parser.skip_spaces();
                let Some(value) = parser.value() else {
                    break;
                };
                if in_bearer {
                    let challenge = bearer.get_or_insert_with(BearerChallenge::default);
                    let slot = match token.to_ascii_lowercase().as_str() {
                        "resource_metadata" => &mut challenge.resource_metadata,
                        "scope" => &mut challenge.scope,
                        "error" => &mut challenge.error,
                        _ => continue,
                    };
                    // The first of a repeated parameter counts.
                    slot.get_or_insert(value);
                }
            } else {
                // A new challenge: its scheme. A token68 may follow
                // (`Basic dXNlcg==`): skipped with the scheme's params.
                if in_bearer && bearer.is_some() {
                    break;
                }
                in_bearer = token.eq_ignore_ascii_case("bearer");
                if in_bearer {
                    bearer.get_or_insert_with(BearerChallenge::default);
                }
            }
        }
        bearer
    }
}

struct Parser<'a> {
    rest: &'a [u8],
}

impl Parser<'_> {
    fn peek(&self) -> Option<u8> {
        self.rest.first().copied()
    }

    fn advance(&mut self, n: usize) {
        self.rest = &self.rest[n.min(self.rest.len())..];
    }

    fn skip_spaces(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t')) {
            self.advance(1);
        }
    }

    fn skip_separators(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b',')) {
            self.advance(1);
        }
    }

    /// An RFC 9110 token (also takes the `=` padding of a token68 along).
    fn token(&mut self) -> Option<String> {
        let len = self
            .rest
            .iter()
            .take_while(|&&b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~/".contains(&b))
            .count();
        if len == 0 {
            return None;
        }
        let token = String::from_utf8_lossy(&self.rest[..len]).into_owned();
        self.advance(len);
        Some(token)
    }

    /// A parameter's value: a quoted-string (backslash escapes undone) or
    /// a token.
    fn value(&mut self) -> Option<String> {
        if self.peek() != Some(b'"') {
            return self.token();
        }
        self.advance(1);
        let mut value = Vec::new();
        loop {
            match self.peek()? {
                b'"' => {
                    self.advance(1);
                    return Some(String::from_utf8_lossy(&value).into_owned());
                }
                b'\\' => {
                    self.advance(1);
                    value.push(self.peek()?);
                    self.advance(1);
                }
                byte => {
                    value.push(byte);
                    self.advance(1);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_conformance_challenges_are_read() {
        let header = r#"Bearer error="invalid_token", error_description="Missing Authorization header", scope="mcp:read mcp:write", resource_metadata="http://localhost:3000/.well-known/oauth-protected-resource/mcp""#;
        let challenge = BearerChallenge::parse(header).unwrap();
        assert_eq!(challenge.error.as_deref(), Some("invalid_token"));
        assert_eq!(challenge.scope.as_deref(), Some("mcp:read mcp:write"));
        assert_eq!(
            challenge.resource_metadata.as_deref(),
            Some("http://localhost:3000/.well-known/oauth-protected-resource/mcp")
        );
    }

    #[test]
    fn other_schemes_tokens_and_escapes_are_handled() {
        let header = r#"Basic realm="a, b", Bearer realm="x", scope="s\"q", error=insufficient_scope, DPoP algs="ES256""#;
        let challenge = BearerChallenge::parse(header).unwrap();
        assert_eq!(challenge.scope.as_deref(), Some("s\"q"));
        assert_eq!(challenge.error.as_deref(), Some("insufficient_scope"));
        assert_eq!(challenge.resource_metadata, None);
        let header = "Basic dXNlcjpwYXNz==, bearer Scope=\"one\"";
        let challenge = BearerChallenge::parse(header).unwrap();
        assert_eq!(challenge.scope.as_deref(), Some("one"), "names ignore case");
        assert_eq!(BearerChallenge::parse(r#"Basic realm="x""#), None);
        assert_eq!(
            BearerChallenge::parse("Bearer"),
            Some(BearerChallenge::default())
        );
    }

    #[test]
    fn malformed_headers_never_panic() {
        for header in [
            "",
            ",,,",
            "Bearer scope=\"unterminated",
            "Bearer scope=\"ends with \\",
            "Bearer =x",
            "Bearer scope=",
            "\u{e9}t\u{e9} Bearer",
            "Bearer error=\"a\", error=\"b\"",
        ] {
            let _ = BearerChallenge::parse(header);
        }
        assert_eq!(
            BearerChallenge::parse("Bearer error=\"a\", error=\"b\"")
                .unwrap()
                .error
                .as_deref(),
            Some("a")
        );
    }
}
