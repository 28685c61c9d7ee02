//! Reading a response body within a byte limit: a leaf, used by the
//! transport and by the OAuth flow alike (neither imports the other for
//! it).

use bytes::{Bytes, BytesMut};
use http_body::Body as _;
use http_body_util::BodyExt as _;
use http_body_util::combinators::UnsyncBoxBody;

use crate::budget::Charge;
use crate::error::{BoxError, Error, Result};

/// Reads the whole body of `response`, refusing more than `limit` bytes
/// with a limit error that names `what` and the limit (OAuth's documents,
/// which no session's budget covers).
#[cfg(feature = "oauth")]
pub(crate) async fn read_limited(
    response: http::Response<UnsyncBoxBody<Bytes, BoxError>>,
    limit: usize,
    what: &str,
) -> Result<Bytes> {
    read_limited_charged(response, limit, what, None).await
}

/// Reads the whole body of `response`, refusing more than `limit` bytes
/// with a limit error that names `what` and the limit, every byte read
/// charged to `charge` as it arrives (the body's bytes held, not yet what
/// parsing them will cost).
pub(crate) async fn read_limited_charged(
    response: http::Response<UnsyncBoxBody<Bytes, BoxError>>,
    limit: usize,
    what: &str,
    charge: Option<&Charge>,
) -> Result<Bytes> {
    let too_large = || Error::limit(format!("the {what} exceeds the {limit}-byte limit"));
    let mut body = response.into_body();
    // A shortcut only (a declared Content-Length shows in the size hint):
    // the loop below is what bounds the read.
    if body.size_hint().lower() > limit as u64 {
        return Err(too_large());
    }
    // Not `http_body_util::Limited`: its `Into<BoxError>` bound on a boxed
    // body trips a rustc limitation when the caller's future must be `Send`.
    // Sized once from a declared length (at most the limit): growing by
    // doubling holds the old and the new buffer at once, up to twice the
    // body for a moment.
    let declared = usize::try_from(body.size_hint().lower()).unwrap_or(limit);
    let reserved = declared.min(limit);
    let over = |spent: crate::budget::Spent| spent.reading(&format!("the {what}"));
    if let Some(charge) = charge {
        charge.resize(reserved).map_err(over)?;
    }
    let mut collected = BytesMut::with_capacity(reserved);
    while let Some(frame) = body.frame().await {
        let frame = frame
            .map_err(|e| Error::transport(e).with_message(format!("reading the {what} failed")))?;
        if let Ok(data) = frame.into_data() {
            if collected.len() + data.len() > limit {
                return Err(too_large());
            }
            if let Some(charge) = charge {
                charge
                    .resize(reserved.max(collected.len() + data.len()))
                    .map_err(over)?;
            }
            collected.extend_from_slice(&data);
        }
    }
    Ok(collected.freeze())
}
