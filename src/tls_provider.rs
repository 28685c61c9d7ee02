//! Which rustls crypto provider the crate's TLS uses (the owned client's,
//! and the test kit server's).
//!
//! In order: the one the caller gave
//! ([`HttpClientBuilder::crypto_provider`](crate::http_client::HttpClientBuilder::crypto_provider)),
//! the process default (a host that chose FIPS, or one provider for every
//! rustls user in the process, installs it with
//! `CryptoProvider::install_default`), then the one a feature brings:
//! aws-lc-rs (default, post-quantum hybrid key exchange first), else ring.
//! With none of these, building a TLS configuration is an error that says
//! how to get one, never a panic inside rustls.

use std::sync::Arc;

use rustls::crypto::CryptoProvider;

use crate::error::{Error, Result};

/// The provider to build a TLS configuration with.
pub(crate) fn choose(given: Option<&Arc<CryptoProvider>>) -> Result<Arc<CryptoProvider>> {
    if let Some(provider) = given {
        return Ok(provider.clone());
    }
    if let Some(provider) = CryptoProvider::get_default() {
        return Ok(provider.clone());
    }
    built_in().ok_or_else(|| {
        Error::builder(
            "no TLS crypto provider: enable the feature `aws-lc-rs` (default) or `ring`, \
             install a process default with rustls' CryptoProvider::install_default, \
             or give one to HttpClientBuilder::crypto_provider",
        )
    })
}

/// The provider a feature brings, aws-lc-rs before ring.
fn built_in() -> Option<Arc<CryptoProvider>> {
    #[cfg(feature = "aws-lc-rs")]
    return Some(Arc::new(rustls::crypto::aws_lc_rs::default_provider()));
    #[cfg(all(feature = "ring", not(feature = "aws-lc-rs")))]
    {
        // Deprecated by rustls for lacking post-quantum key exchange: here
        // only because the user turned `aws-lc-rs` off and `ring` on, a
        // trade the features table states.
        #[allow(deprecated)]
        return Some(Arc::new(rustls::crypto::ring::default_provider()));
    }
    #[allow(unreachable_code)]
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_given_provider_is_the_one_used() {
        let given = Arc::new(CryptoProvider {
            kx_groups: Vec::new(),
            ..match built_in() {
                Some(p) => CryptoProvider::clone(&p),
                None => return,
            }
        });
        let chosen = choose(Some(&given)).unwrap();
        assert!(Arc::ptr_eq(&chosen, &given));
    }

    #[cfg(feature = "aws-lc-rs")]
    #[test]
    fn the_default_offers_post_quantum_key_exchange_first() {
        // No process default is installed in this test binary.
        let chosen = choose(None).unwrap();
        let first = chosen.kx_groups.first().map(|group| group.name());
        assert_eq!(first, Some(rustls::NamedGroup::X25519MLKEM768));
    }

    #[cfg(not(any(feature = "aws-lc-rs", feature = "ring")))]
    #[test]
    fn with_no_provider_the_error_says_how_to_get_one() {
        let error = choose(None).unwrap_err();
        assert!(error.to_string().contains("aws-lc-rs"), "{error}");
    }
}
