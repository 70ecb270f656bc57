//! kilnd's side of the status pages: its own host page at `/` on the metrics port, and its
//! periodic report to kiln-cache ([`report`]), which draws the fleet page from every host's.
//!
//! The host page is what an operator opens on one GPU host: its tiers and hit rates, toolchains
//! and fingerprints, compiles running, fleet leases, and whether the fleet cache answers. It is
//! server-side HTML (kiln-proto's escaping builder), works without JavaScript and reloads itself.

pub mod page;
pub mod report;

use crate::rpc::state::State;
use std::sync::Arc;

/// The host page's routes: `/` (HTML) and `/status.json` (the `Stats` answer in proto3 JSON).
pub fn routes(state: Arc<State>) -> axum::Router {
    let html = Arc::clone(&state);
    kiln_serve::status_routes(
        move || {
            let state = Arc::clone(&state);
            async move { crate::rpc::stats::collect(&state) }
        },
        move |stats: &kiln_proto::pb::StatsResponse| page::render(stats, &html.metrics),
    )
}
