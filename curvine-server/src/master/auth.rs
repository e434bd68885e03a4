//! Cluster authentication on the master's gRPC service: when `cluster.auth_token` is
//! set, every call must carry it as `x-curvine-token: <token>` or
//! `authorization: Bearer <token>`; anything else is refused (`Unauthenticated`) and
//! logged with the peer address.

use std::sync::Arc;

use tonic::{Request, Status};
use tracing::warn;

/// gRPC metadata key carrying the token.
pub const AUTH_METADATA_KEY: &str = "x-curvine-token";

#[derive(Clone)]
pub struct AuthInterceptor {
    token: Option<Arc<[u8]>>,
}

impl AuthInterceptor {
    /// An empty token disables the check.
    pub fn new(token: &str) -> AuthInterceptor {
        AuthInterceptor {
            token: (!token.is_empty()).then(|| Arc::from(token.as_bytes())),
        }
    }

    /// Whether `given` (from a framed connection's hello) is the token.
    pub fn allows_token(&self, given: &[u8]) -> bool {
        self.token.as_deref().is_none_or(|t| same(given, t))
    }

    /// Whether the metadata of a call carries the token.
    pub fn allows(&self, md: &tonic::metadata::MetadataMap) -> bool {
        let Some(token) = &self.token else {
            return true;
        };
        let raw = md.get(AUTH_METADATA_KEY).map(|v| v.as_bytes());
        let bearer = md
            .get("authorization")
            .and_then(|v| v.as_bytes().strip_prefix(b"Bearer "));
        [raw, bearer]
            .into_iter()
            .flatten()
            .any(|given| same(given, token))
    }
}

/// Compare without an early exit on the first differing byte.
fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl tonic::service::Interceptor for AuthInterceptor {
    fn call(&mut self, req: Request<()>) -> Result<Request<()>, Status> {
        if self.allows(req.metadata()) {
            return Ok(req);
        }
        let peer = req
            .remote_addr()
            .map_or_else(|| "unknown".to_string(), |a| a.to_string());
        let given = if req.metadata().contains_key(AUTH_METADATA_KEY)
            || req.metadata().contains_key("authorization")
        {
            "wrong"
        } else {
            "missing"
        };
        warn!(%peer, token = given, "master RPC refused: {given} cluster auth token");
        Err(curvine_common::FsError::Unauthenticated {
            message: format!("{given} cluster auth token"),
        }
        .into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::service::Interceptor;

    fn req(headers: &[(&'static str, &str)]) -> Request<()> {
        let mut r = Request::new(());
        for (k, v) in headers {
            r.metadata_mut().insert(*k, v.parse().unwrap());
        }
        r
    }

    #[test]
    fn token_is_required_when_set() {
        let mut a = AuthInterceptor::new("s3cret");
        assert!(a.call(req(&[(AUTH_METADATA_KEY, "s3cret")])).is_ok());
        assert!(a.call(req(&[("authorization", "Bearer s3cret")])).is_ok());
        for bad in [
            vec![],
            vec![(AUTH_METADATA_KEY, "s3cre")],
            vec![(AUTH_METADATA_KEY, "s3cret2")],
            vec![("authorization", "s3cret")],
            vec![("authorization", "Bearer wrong")],
        ] {
            let e = a.call(req(&bad)).unwrap_err();
            assert_eq!(e.code(), tonic::Code::Unauthenticated, "{bad:?}");
        }
    }

    #[test]
    fn no_token_configured_allows_all() {
        let mut a = AuthInterceptor::new("");
        assert!(a.call(req(&[])).is_ok());
        assert!(a.call(req(&[(AUTH_METADATA_KEY, "x")])).is_ok());
    }
}
