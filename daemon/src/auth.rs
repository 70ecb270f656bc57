//! Tokens on kilnd's TCP listener: which calls a read-only token may make, and the tower layer
//! that checks every request against [`kiln_proto::auth::Tokens`] before tonic routes it.
//!
//! A read-only token may ask the caches (Lookup, GetBlobs), read the counters (Stats) and use
//! gRPC health and reflection; everything else needs a read-write token, because it compiles
//! (a Triton kernel is code that runs in kilnd's workers) or writes the caches. A call this list
//! does not name, a new RPC included, needs write until it is added here. The Unix socket has no
//! such layer: its file mode is its guard.

use futures_util::future::{Either, Ready, ready};
use kiln_proto::auth::{Access, Tokens};
use std::sync::Arc;
use std::task::{Context, Poll};
use tonic::Status;

/// gRPC paths a read-only token may call.
const READ_ONLY_CALLS: &[&str] = &["/kiln.v1.Compiler/Lookup", "/kiln.v1.Compiler/Stats", "/kiln.v1.Blobs/GetBlobs"];

/// Services a read-only token may call in full: they read nothing of the caches.
const READ_ONLY_SERVICES: &[&str] =
    &["/grpc.health.v1.Health/", "/grpc.reflection.v1.ServerReflection/", "/grpc.reflection.v1alpha.ServerReflection/"];

/// What a call needs, by its gRPC path.
pub fn needs(path: &str) -> Access {
    if READ_ONLY_CALLS.contains(&path) || READ_ONLY_SERVICES.iter().any(|s| path.starts_with(s)) {
        Access::Read
    } else {
        Access::Write
    }
}

/// Checks each request's bearer token; see the module doc.
#[derive(Debug, Clone)]
pub struct TokenLayer(pub Arc<Tokens>);

impl<S> tower::Layer<S> for TokenLayer {
    type Service = TokenCheck<S>;

    fn layer(&self, inner: S) -> TokenCheck<S> {
        TokenCheck { inner, tokens: Arc::clone(&self.0) }
    }
}

/// The service [`TokenLayer`] makes: a refused request is answered with its status here and
/// never reaches a handler.
#[derive(Debug, Clone)]
pub struct TokenCheck<S> {
    inner: S,
    tokens: Arc<Tokens>,
}

impl<S, B, R> tower::Service<http::Request<B>> for TokenCheck<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<R>>,
    R: Default,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Either<S::Future, Ready<Result<S::Response, S::Error>>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let path = request.uri().path();
        let authorization = request.headers().get(http::header::AUTHORIZATION).and_then(|v| v.to_str().ok());
        // The RPC as the client named it, without the leading slash: "kiln.v1.Compiler/Compile".
        let op = path.strip_prefix('/').unwrap_or(path);
        match self.tokens.check_header(authorization, op, needs(path)) {
            Ok(()) => Either::Left(self.inner.call(request)),
            Err(e) => Either::Right(ready(Ok(Status::from(e).into_http()))),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use kiln_proto::auth::TokenEntry;
    use tower::{Layer, Service, ServiceExt};

    const READ: &str = "kilnd-read-token-0123456789";
    const WRITE: &str = "kilnd-write-token-0123456789";

    #[test]
    fn only_the_named_calls_are_read_only() {
        for path in [
            "/kiln.v1.Compiler/Lookup",
            "/kiln.v1.Compiler/Stats",
            "/kiln.v1.Blobs/GetBlobs",
            "/grpc.health.v1.Health/Check",
            "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
        ] {
            assert_eq!(needs(path), Access::Read, "{path}");
        }
        for path in [
            "/kiln.v1.Compiler/Compile",
            "/kiln.v1.Compiler/Submit",
            "/kiln.v1.Compiler/Warm",
            "/kiln.v1.Blobs/PutBlob",
            "/kiln.v1.Snapshots/SaveSnapshot",
            "/kiln.v1.Compiler/LookupX",
            "/kiln.v1.Compiler/Lookup/",
            "/unknown",
        ] {
            assert_eq!(needs(path), Access::Write, "{path}");
        }
    }

    /// The status a request gets through the layer, or `None` when it reached the handler.
    async fn call(token: Option<&str>, path: &str) -> Option<Status> {
        let tokens = Tokens::new(&[
            TokenEntry { token: READ.into(), access: Access::Read },
            TokenEntry { token: WRITE.into(), access: Access::Write },
        ])
        .unwrap();
        let handler = tower::service_fn(|_: http::Request<()>| async {
            Ok::<_, std::convert::Infallible>(http::Response::new(()))
        });
        let mut svc = TokenLayer(Arc::new(tokens)).layer(handler);
        let mut request = http::Request::builder().uri(path);
        if let Some(t) = token {
            request = request.header("authorization", format!("Bearer {t}"));
        }
        let response = svc.ready().await.unwrap().call(request.body(()).unwrap()).await.unwrap();
        Status::from_header_map(response.headers())
    }

    #[tokio::test]
    async fn tokens_are_checked_before_the_handler() {
        assert!(call(Some(WRITE), "/kiln.v1.Compiler/Compile").await.is_none());
        assert!(call(Some(READ), "/kiln.v1.Compiler/Lookup").await.is_none());
        let denied = call(Some(READ), "/kiln.v1.Compiler/Compile").await.unwrap();
        assert_eq!(denied.code(), tonic::Code::PermissionDenied);
        assert!(denied.message().starts_with("kiln.v1.Compiler/Compile needs a read-write token"), "{denied:?}");
        for token in [None, Some("not-a-configured-token-000")] {
            let refused = call(token, "/kiln.v1.Compiler/Stats").await.unwrap();
            assert_eq!(refused.code(), tonic::Code::Unauthenticated);
        }
    }
}
