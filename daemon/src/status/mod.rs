//! kilnd's side of the status pages: its own host page at `/` on the metrics port, and its
//! periodic report to kiln-cache ([`report`]), which draws the fleet page from every host's.
//!
//! The host page is what an operator opens on one GPU host: its tiers and hit rates, toolchains
//! and fingerprints, compiles running, fleet leases, and whether the fleet cache answers. It is
//! server-side HTML (kiln-proto's escaping builder), works without JavaScript and reloads itself.

pub mod page;
pub mod report;

use crate::service::CompilerService;
use std::sync::Arc;

/// The host page's routes: `/` (HTML) and `/status.json` (the `Stats` answer in proto3 JSON).
pub fn routes(service: Arc<CompilerService>) -> axum::Router {
    use axum::http::header;
    use axum::routing::get;
    let json = Arc::clone(&service);
    axum::Router::new()
        .route(
            "/",
            get(move || {
                let service = Arc::clone(&service);
                async move {
                    let html = page::render(&crate::stats::collect(&service), &service.engine.metrics);
                    ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], html)
                }
            }),
        )
        .route(
            "/status.json",
            get(move || {
                let service = Arc::clone(&json);
                async move {
                    let body = serde_json::to_string(&crate::stats::collect(&service))
                        .unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"));
                    ([(header::CONTENT_TYPE, "application/json")], body)
                }
            }),
        )
}
