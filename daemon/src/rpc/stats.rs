//! The `Stats` answer: read from the metrics and the tiers, so there is one source of truth.

use crate::metrics::Metrics;
use crate::rpc::state::State;
use kiln_proto::pb;
use prometheus_client::metrics::counter::Counter;

/// Compiles with this outcome, all toolchains together.
fn counter_value(
    family: &prometheus_client::metrics::family::Family<crate::metrics::CompileLabels, Counter>,
    outcome: &'static str,
) -> u64 {
    crate::runtime::toolchain::Toolchain::ALL
        .into_iter()
        .map(|t| family.get_or_create(&crate::metrics::CompileLabels { toolchain: t.as_str(), outcome }).get())
        .sum()
}

pub fn collect(s: &State) -> pb::StatsResponse {
    let m = &s.metrics;
    let fleet = s.cache.fleet_report();
    let tiers = s
        .cache
        .usage()
        .into_iter()
        .map(|(tier, usage)| pb::TierStats {
            tier: tier.as_str().into(),
            entries: usage.entries,
            bytes: usage.bytes,
            capacity_bytes: usage.capacity_bytes,
            hits: m.lookups_of(tier, "hit"),
            misses: m.lookups_of(tier, "miss"),
            integrity_failures: m.integrity_failures_of(tier),
        })
        .collect();
    pb::StatsResponse {
        version: env!("CARGO_PKG_VERSION").into(),
        toolchains: s.toolchains.infos(),
        gpus: s.gpus.gpus.clone(),
        default_target: s.default_target.map(|t| t.to_string()).unwrap_or_default(),
        tiers,
        compiles_ok: counter_value(&m.compiles, "ok"),
        compiles_failed: counter_value(&m.compiles, "failed"),
        queue_depth: m.queue_depth.get().max(0) as u64,
        inflight_compiles: m.inflight.get().max(0) as u64,
        jobs_total: m.jobs.get(),
        compile_seconds_saved: m.seconds_saved.get(),
        concurrency: s.config.concurrency as u32,
        remote: s.config.remote.as_ref().map(|r| r.uri.clone()).unwrap_or_default(),
        remote_up: fleet.as_ref().is_some_and(|f| f.usable) && m.remote_up.get() == 1,
        remote_state: fleet.as_ref().map(|f| f.state.to_owned()).unwrap_or_default(),
        remote_reason: fleet.as_ref().map(|f| f.reason.clone()).unwrap_or_default(),
        audit: fleet.map(|f| f.audit),
        snapshots: Some(snapshots(m)),
        recent_misses: recent_misses(s),
        torch_graphs: Some(s.torch_graphs.stats()),
    }
}

/// Kernels' misses and torch graphs' compiles, failures and fallbacks, newest first.
fn recent_misses(s: &State) -> Vec<pb::RecentMiss> {
    let mut misses: Vec<pb::RecentMiss> = s.engine.misses().recent().iter().map(|m| m.to_pb()).collect();
    misses.extend(s.torch_graphs.events());
    misses.sort_by_key(|m| std::cmp::Reverse(m.unix_millis));
    misses
}

fn snapshots(m: &Metrics) -> pb::SnapshotStats {
    use crate::metrics::DirectionLabels;
    let bytes = |direction| m.snapshot_bytes.get_or_create(&DirectionLabels { direction }).get();
    pb::SnapshotStats {
        saves_changed: Metrics::counted(&m.snapshot_saves, "changed"),
        saves_unchanged: Metrics::counted(&m.snapshot_saves, "unchanged"),
        restores_found: Metrics::counted(&m.snapshot_restores, "found"),
        restores_missing: Metrics::counted(&m.snapshot_restores, "missing"),
        files_fetched: Metrics::counted(&m.snapshot_restore_files, "fetched"),
        files_present: Metrics::counted(&m.snapshot_restore_files, "present"),
        files_missing: Metrics::counted(&m.snapshot_restore_files, "missing"),
        bytes_fetched: bytes("out"),
        bytes_stored: bytes("in"),
    }
}
