//! kilnd's report of itself to kiln-cache (`ReportHost`), for the fleet status page: host name
//! and instance (its socket, so two kilnds on one machine are two entries), version, GPUs,
//! toolchain fingerprints, compiles running, seconds saved and recent misses.
//!
//! Sent every [`REPORT_EVERY`] through the fleet tier (so it passes the breaker: a report never
//! waits on a kiln-cache that is down). kiln-cache keeps a report for 45 s, so a host that stops
//! drops off the page after a few missed reports. A report that fails is logged once per outage,
//! at debug level: the page is a convenience, compiles never depend on it.

use crate::core::fleet::tier::RemoteTier;
use crate::rpc::state::State;
use crate::runtime::host::wire_name;
use kiln_proto::pb::{self, HostGpu, HostMiss, HostReport, HostToolchain};
use kiln_serve::every::Every;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How often a host reports.
pub const REPORT_EVERY: Duration = Duration::from_secs(10);

/// kiln-cache's bounds on a report's text fields (see `HostReport` in cache.proto): a longer
/// value is cut here rather than refused there.
const MAX_VERSION: usize = 64;
const MAX_TOOLCHAIN_VERSION: usize = 128;
const MAX_GPU_NAME: usize = 128;
const MAX_GPUS: usize = 64;
const MAX_MISSES: usize = 32;
const MAX_INSTANCE: usize = 256;

/// The first `n` characters of `s`, with control characters (which kiln-cache refuses) dropped.
fn cut(s: &str, n: usize) -> String {
    s.chars().filter(|c| !c.is_control()).take(n).collect()
}

/// Who reports: the host's name (see [`wire_name`], the ledger's too) and which kilnd of it this is.
#[derive(Debug, Clone)]
pub struct Reporter {
    pub host: String,
    /// This kilnd's Unix socket: stable across restarts, and two live kilnds never share one.
    pub instance: String,
}

impl Reporter {
    /// This host, and the kilnd listening on `socket`.
    pub fn new(host: &str, socket: &std::path::Path) -> Self {
        Reporter { host: wire_name(host), instance: cut(&socket.display().to_string(), MAX_INSTANCE) }
    }
}

/// The report for `stats`, this host's `Stats` answer, from `who`.
pub fn build(who: &Reporter, stats: &pb::StatsResponse) -> HostReport {
    let local = |f: fn(&pb::TierStats) -> u64| stats.tiers.iter().map(f).collect::<Vec<_>>();
    // A key no local tier held is a miss of the last local tier (the disk).
    let local_misses = local(|t| t.misses).last().copied().unwrap_or(0);
    HostReport {
        host: who.host.clone(),
        instance: who.instance.clone(),
        version: cut(&stats.version, MAX_VERSION),
        gpus: stats
            .gpus
            .iter()
            .take(MAX_GPUS)
            .map(|g| HostGpu { name: cut(&g.name, MAX_GPU_NAME), target: cut(&g.target, 16) })
            .collect(),
        default_target: cut(&stats.default_target, 16),
        // A toolchain that is not running (ptxas missing, Triton not started) has no fingerprint
        // to compare, and is left out.
        toolchains: stats
            .toolchains
            .iter()
            .filter(|t| t.fingerprint.parse::<kiln_proto::Fingerprint>().is_ok())
            .map(|t| HostToolchain {
                name: t.name.clone(),
                version: cut(&t.version, MAX_TOOLCHAIN_VERSION),
                fingerprint: t.fingerprint.clone(),
            })
            .collect(),
        inflight_compiles: stats.inflight_compiles,
        queue_depth: stats.queue_depth,
        compile_seconds_saved: stats.compile_seconds_saved.max(0.0),
        recent_misses: misses(&stats.recent_misses),
        local_hits: local(|t| t.hits).iter().sum(),
        local_misses,
    }
}

/// The newest of kilnd's recent misses (its MissLog, through `Stats`), as many as a report holds.
fn misses(recent: &[pb::RecentMiss]) -> Vec<HostMiss> {
    let mut newest: Vec<&pb::RecentMiss> = recent.iter().collect();
    newest.sort_by_key(|m| std::cmp::Reverse(m.unix_millis));
    newest
        .into_iter()
        .take(MAX_MISSES)
        .map(|m| HostMiss {
            unix_ms: m.unix_millis,
            identity: nonempty(cut(&identity(m), 256)),
            toolchain: cut(&m.toolchain, 32),
            reason: nonempty(cut(&m.reason, 64)),
            detail: cut(&m.detail, 512),
        })
        .collect()
}

/// A kernel's identity as `kiln explain` names it: graph, id, and Triton's kernel name.
pub fn identity(m: &pb::RecentMiss) -> String {
    let mut parts = vec![m.graph.as_str(), m.kernel_id.as_str()];
    if !m.kernel_name.is_empty() {
        parts.push(&m.kernel_name);
    }
    parts.retain(|p| !p.is_empty());
    parts.join("/")
}

/// kiln-cache needs at least one character where a field may not be empty.
fn nonempty(s: String) -> String {
    if s.is_empty() { "unknown".to_owned() } else { s }
}

/// Reports every [`REPORT_EVERY`] until `stop`, the first at once.
pub async fn run(tier: Arc<RemoteTier>, state: Arc<State>, who: Reporter, stop: CancellationToken) {
    let mut every = Every::new(REPORT_EVERY, stop);
    let mut failing = false;
    while every.tick().await {
        let report = build(&who, &crate::rpc::stats::collect(&state));
        match tier.report_host(report).await {
            Ok(_) => failing = false,
            Err(e) if !failing => {
                failing = true;
                tracing::debug!(error = %e, "host report to kiln-cache failed; the status page will miss this host");
            }
            Err(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_keeps_what_kiln_cache_accepts() {
        let stats = pb::StatsResponse {
            version: "0.1.0".into(),
            gpus: vec![pb::Gpu { index: 0, name: "H100\u{7}".repeat(50), target: "sm_90".into() }],
            toolchains: vec![
                pb::ToolchainInfo {
                    name: "nvrtc".into(),
                    version: "13.0".into(),
                    fingerprint: "a".repeat(64),
                    ..Default::default()
                },
                pb::ToolchainInfo { name: "triton".into(), version: "not started".into(), ..Default::default() },
            ],
            tiers: vec![
                pb::TierStats { tier: "memory".into(), hits: 3, misses: 5, ..Default::default() },
                pb::TierStats { tier: "disk".into(), hits: 1, misses: 4, ..Default::default() },
            ],
            inflight_compiles: 2,
            compile_seconds_saved: 1.5,
            recent_misses: (0..40)
                .map(|i| pb::RecentMiss {
                    unix_millis: i,
                    graph: "g".into(),
                    kernel_id: "k<1>".into(),
                    reason: "source".into(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        };
        let who = Reporter::new("gpu 1", std::path::Path::new("/run/kiln/kilnd.sock"));
        let r = build(&who, &stats);
        assert_eq!((r.host.as_str(), r.instance.as_str()), ("gpu-1", "/run/kiln/kilnd.sock"));
        assert_eq!(r.toolchains.len(), 1, "a toolchain with no fingerprint is left out");
        assert_eq!(r.gpus[0].name.chars().count(), MAX_GPU_NAME);
        assert!(!r.gpus[0].name.contains('\u{7}'));
        assert_eq!((r.local_hits, r.local_misses, r.inflight_compiles), (4, 4, 2));
        assert_eq!(r.recent_misses.len(), MAX_MISSES);
        assert_eq!(r.recent_misses[0].unix_ms, 39, "newest first");
        assert_eq!(r.recent_misses[0].identity, "g/k<1>");
    }
}
