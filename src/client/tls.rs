//! The owned client's TLS configuration: the roots it trusts and the
//! identity it shows a server that asks for one (mTLS).
//!
//! The system's roots come from `rustls-native-certs`, not
//! `rustls-platform-verifier`: it gives plain root certificates, which sit
//! in one `RootCertStore` beside the bundled Mozilla roots and the caller's
//! extra ones, under rustls' own WebPKI verifier (so certificate errors
//! read the same whichever root failed); it reads `SSL_CERT_FILE` and
//! `SSL_CERT_DIR` as OpenSSL does; and on Linux it adds only
//! `openssl-probe` to a build. The platform verifier hands verification to
//! the OS instead, which does not combine with an extra root store on every
//! platform and needs set-up on Android.

use std::fmt;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::error::{Error, Result};

/// A client certificate chain and its key, PEM encoded, as given: parsed
/// when the client is built. `Debug` shows neither.
#[derive(Clone, PartialEq, Eq, Hash)]
pub(super) struct ClientIdentity {
    pub(super) cert_chain_pem: Vec<u8>,
    pub(super) key_pem: Vec<u8>,
}

impl fmt::Debug for ClientIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientIdentity")
            .field(
                "cert_chain_pem",
                &format_args!("{} bytes", self.cert_chain_pem.len()),
            )
            .field("key_pem", &"<redacted>")
            .finish()
    }
}

/// What a client trusts and shows.
pub(super) struct Trust<'a> {
    /// The Mozilla roots bundled by webpki-roots.
    pub(super) built_in_roots: bool,
    /// The system's roots (or `SSL_CERT_FILE` / `SSL_CERT_DIR`).
    pub(super) system_roots: bool,
    /// More roots, DER encoded.
    pub(super) extra_roots: &'a [Vec<u8>],
    pub(super) identity: Option<&'a ClientIdentity>,
}

impl Trust<'_> {
    pub(super) fn client_config(&self) -> Result<rustls::ClientConfig> {
        let mut roots = rustls::RootCertStore::empty();
        if self.built_in_roots {
            roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        }
        if self.system_roots {
            add_system_roots(&mut roots);
        }
        for der in self.extra_roots {
            roots
                .add(CertificateDer::from(der.clone()))
                .map_err(|e| Error::builder("invalid root certificate").with_source(e))?;
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| Error::builder("TLS configuration").with_source(e))?
            .with_root_certificates(roots);
        match self.identity {
            None => Ok(config.with_no_client_auth()),
            Some(identity) => {
                let (chain, key) = identity.parse()?;
                config.with_client_auth_cert(chain, key).map_err(|e| {
                    Error::builder("the client certificate and key do not go together")
                        .with_source(e)
                })
            }
        }
    }
}

impl ClientIdentity {
    fn parse(&self) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)> {
        let chain = CertificateDer::pem_slice_iter(&self.cert_chain_pem)
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| {
                Error::builder("the client certificate is not valid PEM").with_source(e)
            })?;
        if chain.is_empty() {
            return Err(Error::builder(
                "the client certificate PEM holds no CERTIFICATE section",
            ));
        }
        // No source: the PEM parser's error may quote the key's text.
        let key = PrivateKeyDer::from_pem_slice(&self.key_pem).map_err(|_| {
            Error::builder("the client key is not a PEM private key (PKCS#8, PKCS#1 or SEC1)")
        })?;
        Ok((chain, key))
    }
}

/// The system's roots, read as OpenSSL reads them: `SSL_CERT_FILE` and
/// `SSL_CERT_DIR` when set, else the platform's store. One that cannot be
/// read or parsed is skipped with a warning, as a browser would: the other
/// roots still work, and a server it was needed for fails with "not
/// trusted".
fn add_system_roots(roots: &mut rustls::RootCertStore) {
    let loaded = rustls_native_certs::load_native_certs();
    for error in &loaded.errors {
        tracing::warn!(%error, "a system root certificate could not be read");
    }
    let (added, ignored) = roots.add_parsable_certificates(loaded.certs);
    if ignored > 0 {
        tracing::warn!(
            ignored,
            "system root certificates that do not parse were skipped"
        );
    }
    tracing::debug!(added, "system root certificates");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn identity(cert: &[u8], key: &[u8]) -> ClientIdentity {
        ClientIdentity {
            cert_chain_pem: cert.to_vec(),
            key_pem: key.to_vec(),
        }
    }

    fn trust(identity: &ClientIdentity) -> Result<rustls::ClientConfig> {
        Trust {
            built_in_roots: false,
            system_roots: false,
            extra_roots: &[],
            identity: Some(identity),
        }
        .client_config()
    }

    #[test]
    fn a_client_identity_that_does_not_parse_is_a_builder_error_that_hides_the_key() {
        let key = "-----BEGIN PRIVATE KEY-----\nKEY-SECRET\n-----END PRIVATE KEY-----\n";
        for (id, words) in [
            (identity(b"", key.as_bytes()), "no CERTIFICATE"),
            (identity(b"not pem", key.as_bytes()), "no CERTIFICATE"),
            (
                identity(
                    b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
                    key.as_bytes(),
                ),
                "not a PEM private key",
            ),
        ] {
            let error = trust(&id).unwrap_err();
            assert!(error.is_builder(), "{error}");
            let shown = format!("{error} {error:?} {id:?}");
            assert!(shown.contains(words), "{shown}");
            assert!(!shown.contains("KEY-SECRET"), "{shown}");
        }
    }
}
