//! Response bodies and the smallest responses, for every server of the
//! kit (the MCP eras and the auth server): a leaf that imports none of them.

use std::io;

use bytes::Bytes;
use http::header::{CONTENT_TYPE, HeaderValue};
use http::{Response, StatusCode};
use http_body::Body;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};

pub(super) type RespBody = UnsyncBoxBody<Bytes, io::Error>;
pub(super) type Resp = Response<RespBody>;

pub(super) fn boxed<B>(body: B) -> RespBody
where
    B: Body<Data = Bytes, Error = io::Error> + Send + 'static,
{
    UnsyncBoxBody::new(body)
}

pub(super) fn full(status: u16, content_type: Option<&str>, body: impl Into<Bytes>) -> Resp {
    let mut resp = Response::new(boxed(
        Full::new(body.into()).map_err(|never| match never {}),
    ));
    *resp.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    if let Some(ct) = content_type {
        if let Ok(v) = HeaderValue::from_str(ct) {
            resp.headers_mut().insert(CONTENT_TYPE, v);
        }
    }
    resp
}

pub(super) fn empty(status: u16) -> Resp {
    full(status, None, Bytes::new())
}

pub(super) fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0),
    );
    h.finish()
}
