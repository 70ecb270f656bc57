//! The bearer-token check both daemons put in front of their gRPC services: a tower layer that
//! checks every request against [`kiln_proto::auth::Tokens`] before tonic routes it, so a refused
//! request is answered here and never reaches a handler, and no handler can forget the check.
//!
//! Each daemon brings its [`Policy`] (which calls need no token, a read-only token or a
//! read-write one; a call its policy does not name needs write) and, to count refusals in its
//! own metrics, an observer.

use futures_util::future::{Either, Ready, ready};
use kiln_proto::auth::{Access, Tokens};
use std::sync::Arc;
use std::task::{Context, Poll};
use tonic::{Code, Status};

/// What a call needs, by its gRPC path (`/kiln.v1.Compiler/Compile`): `None` for no token at all
/// (an orchestrator's health probe carries none).
pub type Policy = fn(&str) -> Option<Access>;

/// Told of each refused request: its gRPC path and the code it was answered with.
pub type Refusals = Arc<dyn Fn(&str, Code) + Send + Sync>;

/// Checks each request's bearer token; see the module doc.
#[derive(Clone)]
pub struct TokenLayer {
    tokens: Arc<Tokens>,
    policy: Policy,
    refused: Option<Refusals>,
}

impl std::fmt::Debug for TokenLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenLayer").field("tokens", &self.tokens).finish_non_exhaustive()
    }
}

impl TokenLayer {
    pub fn new(tokens: Arc<Tokens>, policy: Policy) -> Self {
        TokenLayer { tokens, policy, refused: None }
    }

    /// Calls `observer` for every refused request.
    pub fn on_refused(self, observer: impl Fn(&str, Code) + Send + Sync + 'static) -> Self {
        TokenLayer { refused: Some(Arc::new(observer)), ..self }
    }
}

impl<S> tower::Layer<S> for TokenLayer {
    type Service = TokenCheck<S>;

    fn layer(&self, inner: S) -> TokenCheck<S> {
        TokenCheck { inner, layer: self.clone() }
    }
}

/// The service [`TokenLayer`] makes.
#[derive(Clone, Debug)]
pub struct TokenCheck<S> {
    inner: S,
    layer: TokenLayer,
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

    fn call(&mut self, mut request: http::Request<B>) -> Self::Future {
        let path = request.uri().path();
        let Some(needs) = (self.layer.policy)(path) else {
            return Either::Left(self.inner.call(request));
        };
        let authorization = request.headers().get(http::header::AUTHORIZATION).and_then(|v| v.to_str().ok());
        // The RPC as the client named it, without the leading slash: "kiln.v1.Compiler/Compile".
        let op = path.strip_prefix('/').unwrap_or(path);
        match self.layer.tokens.check_header(authorization, op, needs) {
            Ok(caller) => {
                // Handlers that record who wrote (kiln-cache's provenance) read it from here:
                // tonic hands the request's extensions on.
                request.extensions_mut().insert(caller);
                Either::Left(self.inner.call(request))
            }
            Err(e) => {
                let status = Status::from(e);
                if let Some(observer) = &self.layer.refused {
                    observer(path, status.code());
                }
                Either::Right(ready(Ok(status.into_http())))
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use kiln_proto::auth::TokenEntry;
    use std::sync::Mutex;
    use tower::{Layer, Service, ServiceExt};

    const READ: &str = "serve-read-token-0123456789";
    const WRITE: &str = "serve-write-token-0123456789";

    fn policy(path: &str) -> Option<Access> {
        match path {
            "/health" => None,
            "/svc/Read" => Some(Access::Read),
            _ => Some(Access::Write),
        }
    }

    /// The status a request gets through the layer, or `None` when it reached the handler.
    async fn call(layer: &TokenLayer, token: Option<&str>, path: &str) -> Option<Status> {
        let handler = tower::service_fn(|_: http::Request<()>| async {
            Ok::<_, std::convert::Infallible>(http::Response::new(()))
        });
        let mut svc = layer.layer(handler);
        let mut request = http::Request::builder().uri(path);
        if let Some(t) = token {
            request = request.header("authorization", format!("Bearer {t}"));
        }
        let response = svc.ready().await.unwrap().call(request.body(()).unwrap()).await.unwrap();
        Status::from_header_map(response.headers())
    }

    #[tokio::test]
    async fn tokens_are_checked_before_the_handler_and_refusals_are_told() {
        let tokens = Tokens::new(&[
            TokenEntry { token: READ.into(), access: Access::Read },
            TokenEntry { token: WRITE.into(), access: Access::Write },
        ])
        .unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&seen);
        let layer = TokenLayer::new(Arc::new(tokens), policy)
            .on_refused(move |path, code| log.lock().unwrap().push((path.to_string(), code)));
        assert!(call(&layer, Some(WRITE), "/svc/Write").await.is_none());
        assert!(call(&layer, Some(READ), "/svc/Read").await.is_none());
        assert!(call(&layer, None, "/health").await.is_none(), "an open call needs no token");
        let denied = call(&layer, Some(READ), "/svc/Write").await.unwrap();
        assert_eq!(denied.code(), Code::PermissionDenied);
        assert!(denied.message().starts_with("svc/Write needs a read-write token"), "{denied:?}");
        for token in [None, Some("not-a-configured-token-000")] {
            assert_eq!(call(&layer, token, "/svc/Read").await.unwrap().code(), Code::Unauthenticated);
        }
        let seen = seen.lock().unwrap().clone();
        assert_eq!(
            seen,
            [
                ("/svc/Write".to_string(), Code::PermissionDenied),
                ("/svc/Read".to_string(), Code::Unauthenticated),
                ("/svc/Read".to_string(), Code::Unauthenticated)
            ]
        );
    }
}
