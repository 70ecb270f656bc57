//! Prometheus metrics, with the names the README lists, served as text on `--metrics ADDR` at
//! `/metrics`. Label values: `tier` memory|disk|remote, `result` hit|miss|error, `outcome`
//! ok|failed, `toolchain` nvrtc|ptxas|triton, `direction` read|write.

use crate::domain::TierName;
use kiln_serve::metrics::TorchJobGauges;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

pub use kiln_serve::metrics::{DirectionLabels, PublisherLabels};

kiln_serve::label_sets! {
    LookupLabels { tier: &'static str, result: &'static str }
    CompileLabels { toolchain: &'static str, outcome: &'static str }
    ToolchainLabels { toolchain: &'static str }
    TierLabels { tier: &'static str }
    LeaseLabels {
        /// A [`LeaseResult`]'s name.
        result: &'static str,
    }
}

/// What came of asking kiln-cache for a key's lease: the `result` label of `kiln_lease_total`,
/// spelt here only. The fleet counts them, `/metrics` starts each at zero, the host page lists
/// them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LeaseResult {
    /// This host took the lease, and compiles.
    Acquired,
    /// Another host held it, so this one waited for its publish.
    Waited,
    /// A waiter took the lease over from a holder that released it without a result or died.
    Takeover,
    /// The key held an entry already, so it was read instead.
    Present,
    /// A waiter passed the hedge bound and compiled by itself.
    Timeout,
    /// kiln-cache did not answer the acquire, so this host compiled without a lease.
    Error,
}

impl LeaseResult {
    /// Every result, in the order the host page lists them.
    pub const ALL: [LeaseResult; 6] = [
        LeaseResult::Acquired,
        LeaseResult::Waited,
        LeaseResult::Takeover,
        LeaseResult::Present,
        LeaseResult::Timeout,
        LeaseResult::Error,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            LeaseResult::Acquired => "acquired",
            LeaseResult::Waited => "waited",
            LeaseResult::Takeover => "takeover",
            LeaseResult::Present => "present",
            LeaseResult::Timeout => "timeout",
            LeaseResult::Error => "error",
        }
    }
}

kiln_serve::label_sets! {
    BytesLabels { tier: &'static str, direction: &'static str }
    ResultLabels { result: &'static str }
    BlobLookupLabels {
        namespace: String,
        /// memory | disk | remote, or none for a miss.
        tier: &'static str,
        result: &'static str,
    }
    NamespaceLabels { namespace: String }
    BlobLeaseLabels {
        namespace: String,
        /// granted | found | proceed | expired
        result: &'static str,
    }
    ReasonLabels { reason: String }
    /// The label of `kiln_misses_total`: a miss reason's label (`explain::misses::MissReason`).
    MissLabels { reason: &'static str }
}

/// Distinct `namespace` label values kept; later ones are counted as `other`, so a client
/// inventing namespaces cannot grow the metrics without bound.
const MAX_NAMESPACES: usize = 32;

fn compile_histogram() -> Histogram {
    // 10 ms to about 20 minutes.
    Histogram::new(exponential_buckets(0.01, 2.0, 18))
}

kiln_serve::metric_set! {
    /// Every metric kilnd exports. Cloning a metric shares its value, so holders update in place.
    pub struct Metrics {
        pub lookups: Family<LookupLabels, Counter> => "cache_lookups", "Cache lookups by tier and result";
        /// Writes by tier and result (ok | error): a full disk or a full Redis shows here.
        pub writes: Family<LookupLabels, Counter> => "cache_writes", "Cache writes by tier and result";
        pub compiles: Family<CompileLabels, Counter> => "compiles", "Compiles by toolchain and outcome";
        pub compile_seconds: Family<ToolchainLabels, Histogram, fn() -> Histogram>
            = Family::new_with_constructor(compile_histogram)
            => "compile_seconds", "Time one compile took";
        pub seconds_saved: Counter<f64, AtomicU64>
            => "compile_seconds_saved", "Compile seconds that cache hits did not pay";
        pub queue_depth: Gauge => "queue_depth", "Compiles waiting for a slot";
        pub inflight: Gauge => "inflight_compiles", "Compiles running now";
        pub artifact_bytes: Family<BytesLabels, Counter>
            => "artifact_bytes", "Envelope bytes read from and written to each tier";
        pub integrity_failures: Family<TierLabels, Counter>
            => "integrity_failures", "Envelopes refused on read: bad digest, wrong key, bad frame";
        pub negative_hits: Counter
            => "negative_cache_hits", "Requests answered by a remembered compile failure";
        pub jobs: Counter => "jobs", "Jobs accepted";
        /// torch.compile graph requests by result: compiled | failed | hit | refused.
        pub torch_graphs: Family<ResultLabels, Counter>
            => "torch_graphs", "torch.compile graph requests: compiled, failed, hit, refused";
        /// In-process compiles that jobs reported instead of kilnd's, by reason.
        pub torch_graph_fallbacks: Family<ReasonLabels, Counter>
            => "torch_graph_fallbacks", "In-process torch.compile compiles that jobs reported, by reason";
        /// Per job (the 64 most recently reported): eager over compiled step time, the steps after
        /// which the compile pays for itself (each only once known), the compile seconds paid, and
        /// those the caches saved it (stored compile times of its warm graphs).
        pub torch_jobs: TorchJobGauges = TorchJobGauges::new(false)
            => "torch_job", "Eager over compiled step time, per job measured both ways (no series until then)";
        pub leases: Family<LeaseLabels, Counter>
            => "lease", "Fleet leases: acquired, waited, takeover, present, timeout, error";
        /// Fresh cubins by load-check result: loaded | skipped | refused (exported as
        /// `kiln_gpu_validations_total`, its name since before the load check was called so).
        pub load_checks: Family<ResultLabels, Counter>
            => "gpu_validations", "Fresh cubins checked on a local GPU: loaded, skipped, refused";
        pub blob_lookups: Family<BlobLookupLabels, Counter>
            => "blob_lookups", "Named-blob lookups by namespace, tier and result";
        pub blob_puts: Family<NamespaceLabels, Counter> => "blob_puts", "Named blobs stored, by namespace";
        pub blob_put_bytes: Family<NamespaceLabels, Counter>
            => "blob_put_bytes", "Bytes of named blobs stored, by namespace";
        pub blob_leases: Family<BlobLeaseLabels, Counter>
            => "blob_leases", "Named-blob leases: granted, found while waiting, proceed without, expired";
        /// Snapshot saves by result: changed | unchanged | refused.
        pub snapshot_saves: Family<ResultLabels, Counter>
            => "snapshot_saves", "Job snapshot saves: changed, unchanged, refused";
        /// Snapshot lookups for a restore by result: found | missing.
        pub snapshot_restores: Family<ResultLabels, Counter>
            => "snapshot_restores", "Job snapshot lookups for a restore: found, missing";
        /// Files of restores by result: fetched | present | missing.
        pub snapshot_restore_files: Family<ResultLabels, Counter>
            => "snapshot_restore_files",
            "Files of snapshot restores: fetched, present at the client, missing in every tier";
        /// Snapshot file bytes by direction: in (stored) | out (sent to a restore).
        pub snapshot_bytes: Family<DirectionLabels, Counter>
            => "snapshot_bytes", "Snapshot file bytes stored (in) and sent to restores (out)";
        /// How long kilnd took to send one restore's files.
        pub snapshot_restore_seconds: Histogram
            // 1 ms to about a minute.
            = Histogram::new(exponential_buckets(0.001, 2.0, 17))
            => "snapshot_restore_seconds", "Time kilnd took to send one restore's files";
        /// Misses that led to a compile, by reason (`explain::misses::MissReason`); counted by
        /// `MissLog::record` only, so the metric and the list of recent misses agree, and each
        /// reason's series started at zero by `MissLog::new`.
        pub misses: Family<MissLabels, Counter>
            => "misses",
            "Misses that led to a compile, by the first input that differs from the nearest earlier recipe";
        /// Audits of fleet artifacts by result: clean | mismatch | absent | failed | dropped.
        pub audits: Family<ResultLabels, Counter> => "audits", "Audits of fleet artifacts by result";
        /// Fleet kernels of unvetted publishers: held (compiled here instead), vouched, mismatch.
        pub vetting: Family<ResultLabels, Counter>
            => "vetting", "Fleet kernels of publishers not yet vetted, compiled here before use, by result";
        /// Audits that found a fleet artifact differing from this host's compile, by its publisher.
        pub audit_mismatches: Family<PublisherLabels, Counter>
            => "audit_mismatches",
            "Fleet artifacts that differed from this host's compile of their inputs, by publisher";
        /// Quarantined keys this host knows of.
        pub quarantined_keys: Gauge => "quarantined_keys", "Quarantined keys this host knows of";
        /// Fleet answers refused because they are bytes the fleet quarantined.
        pub quarantine_refusals: Counter
            => "quarantine_refusals", "Fleet answers refused because the fleet quarantined those bytes";
        /// 1 while the fleet cache answers, 0 while it does not (registered by
        /// [`Metrics::enable_remote_up`], so absent without --remote).
        pub remote_up: Gauge;
        /// Writes to the fleet cache that an answer stopped waiting for after `PUBLISH_WAIT`
        /// (they went on in the background): a slow or cut-off kiln-cache shows here. Registered
        /// with `remote_up`.
        pub fleet_writes_backgrounded: Counter;
        namespaces: std::sync::Mutex<std::collections::HashSet<String>>;
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let m = Metrics::registered(Registry::with_prefix("kiln"));
        m.zero(&TierName::LOCAL);
        for toolchain in crate::domain::Toolchain::ALL.map(|t| t.as_str()) {
            for outcome in ["ok", "failed"] {
                let _ = m.compiles.get_or_create(&CompileLabels { toolchain, outcome });
            }
            let _ = m.compile_seconds.get_or_create(&ToolchainLabels { toolchain });
        }
        for result in ["loaded", "skipped", "refused"] {
            let _ = m.load_checks.get_or_create(&ResultLabels { result });
        }
        for result in ["changed", "unchanged", "refused"] {
            let _ = m.snapshot_saves.get_or_create(&ResultLabels { result });
        }
        for result in ["found", "missing"] {
            let _ = m.snapshot_restores.get_or_create(&ResultLabels { result });
        }
        for result in ["fetched", "present", "missing"] {
            let _ = m.snapshot_restore_files.get_or_create(&ResultLabels { result });
        }
        for direction in ["in", "out"] {
            let _ = m.snapshot_bytes.get_or_create(&DirectionLabels { direction });
        }
        m
    }

    /// Creates the series of `tiers` at zero, so that a dashboard's `rate()` has a series from
    /// the start and a quiet tier reads 0 rather than "no data".
    fn zero(&self, tiers: &[TierName]) {
        for tier in tiers.iter().map(|t| t.as_str()) {
            for result in ["hit", "miss", "error"] {
                let _ = self.lookups.get_or_create(&LookupLabels { tier, result });
            }
            for result in ["ok", "error"] {
                let _ = self.writes.get_or_create(&LookupLabels { tier, result });
            }
            for direction in ["read", "write"] {
                let _ = self.artifact_bytes.get_or_create(&BytesLabels { tier, direction });
            }
            let _ = self.integrity_failures.get_or_create(&TierLabels { tier });
        }
    }

    /// Registers `kiln_remote_up` and the remote tier's series; only a daemon with a fleet cache
    /// has them.
    pub fn enable_remote_up(&mut self) {
        self.registry.register("remote_up", "Whether the fleet cache answers", self.remote_up.clone());
        self.registry.register(
            "fleet_writes_backgrounded",
            "Fleet cache writes an answer stopped waiting for; they went on in the background",
            self.fleet_writes_backgrounded.clone(),
        );
        self.zero(&[TierName::Remote]);
        for result in LeaseResult::ALL {
            let _ = self.leases.get_or_create(&LeaseLabels { result: result.as_str() });
        }
    }

    pub fn audit(&self, result: &'static str) {
        self.audits.get_or_create(&ResultLabels { result }).inc();
    }

    pub fn vetting(&self, result: &'static str) {
        self.vetting.get_or_create(&ResultLabels { result }).inc();
    }

    pub fn audit_mismatch(&self, publisher: &str) {
        self.audit_mismatches.get_or_create(&PublisherLabels { publisher: publisher.to_owned() }).inc();
    }

    pub fn lease(&self, result: LeaseResult) {
        self.leases.get_or_create(&LeaseLabels { result: result.as_str() }).inc();
    }

    /// The leases that came to `result` so far, for the host page.
    pub fn leases_of(&self, result: LeaseResult) -> u64 {
        self.leases.get_or_create(&LeaseLabels { result: result.as_str() }).get()
    }

    /// The `namespace` label for `namespace`: itself among the first few seen, else `other`.
    fn namespace(&self, namespace: &str) -> String {
        let mut seen = self.namespaces.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if seen.contains(namespace) || (seen.len() < MAX_NAMESPACES && seen.insert(namespace.to_string())) {
            namespace.to_string()
        } else {
            "other".to_string()
        }
    }

    /// One named-blob lookup: a hit in `tier`, or a miss.
    pub fn blob_lookup(&self, namespace: &str, tier: Option<i32>) {
        let tier = match tier.and_then(|t| kiln_proto::pb::Tier::try_from(t).ok()) {
            None => "none",
            Some(t) => TierName::from_pb(t).unwrap_or(TierName::Remote).as_str(),
        };
        let result = if tier == "none" { "miss" } else { "hit" };
        self.blob_lookups.get_or_create(&BlobLookupLabels { namespace: self.namespace(namespace), tier, result }).inc();
    }

    pub fn blob_put(&self, namespace: &str, bytes: usize) {
        let labels = NamespaceLabels { namespace: self.namespace(namespace) };
        self.blob_puts.get_or_create(&labels).inc();
        self.blob_put_bytes.get_or_create(&labels).inc_by(bytes as u64);
    }

    pub fn blob_lease(&self, namespace: &str, result: &'static str) {
        self.blob_leases.get_or_create(&BlobLeaseLabels { namespace: self.namespace(namespace), result }).inc();
    }

    /// Adds `n` to the counter of `family` labelled `result`.
    pub fn count(family: &Family<ResultLabels, Counter>, result: &'static str, n: u64) {
        family.get_or_create(&ResultLabels { result }).inc_by(n);
    }

    /// The counter of `family` labelled `result`, for `Stats`.
    pub fn counted(family: &Family<ResultLabels, Counter>, result: &'static str) -> u64 {
        family.get_or_create(&ResultLabels { result }).get()
    }

    pub fn lookup(&self, tier: TierName, result: &'static str) {
        self.lookups.get_or_create(&LookupLabels { tier: tier.as_str(), result }).inc();
    }

    /// The lookups of `tier` with `result` so far, for `Stats` and the host page.
    pub fn lookups_of(&self, tier: TierName, result: &'static str) -> u64 {
        self.lookups.get_or_create(&LookupLabels { tier: tier.as_str(), result }).get()
    }

    pub fn write(&self, tier: TierName, result: &'static str) {
        self.writes.get_or_create(&LookupLabels { tier: tier.as_str(), result }).inc();
    }

    pub fn bytes(&self, tier: TierName, direction: &'static str, n: usize) {
        self.artifact_bytes.get_or_create(&BytesLabels { tier: tier.as_str(), direction }).inc_by(n as u64);
    }

    /// An envelope of `tier` refused on read.
    pub fn integrity_failure(&self, tier: TierName) {
        self.integrity_failures.get_or_create(&TierLabels { tier: tier.as_str() }).inc();
    }

    /// The envelopes of `tier` refused on read so far.
    pub fn integrity_failures_of(&self, tier: TierName) -> u64 {
        self.integrity_failures.get_or_create(&TierLabels { tier: tier.as_str() }).get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_design() {
        let m = Metrics::new();
        m.lookup(TierName::Memory, "hit");
        m.compiles.get_or_create(&CompileLabels { toolchain: "nvrtc", outcome: "ok" }).inc();
        m.integrity_failure(TierName::Disk);
        m.compile_seconds.get_or_create(&ToolchainLabels { toolchain: "nvrtc" }).observe(0.5);
        let text = m.render();
        for name in [
            "kiln_cache_lookups_total{tier=\"memory\",result=\"hit\"} 1",
            "kiln_compiles_total{toolchain=\"nvrtc\",outcome=\"ok\"} 1",
            "kiln_integrity_failures_total{tier=\"disk\"} 1",
            "kiln_compile_seconds_bucket{",
            "kiln_compile_seconds_saved_total",
            "kiln_queue_depth",
            "kiln_inflight_compiles",
        ] {
            assert!(text.contains(name), "missing {name} in\n{text}");
        }
    }

    #[test]
    fn every_lease_result_has_its_series_from_the_start_with_a_fleet() {
        let mut m = Metrics::new();
        m.enable_remote_up();
        m.lease(LeaseResult::Present);
        let text = m.render();
        for result in LeaseResult::ALL {
            let n = if result == LeaseResult::Present { 1 } else { 0 };
            let series = format!("kiln_lease_total{{result=\"{}\"}} {n}", result.as_str());
            assert!(text.contains(&series), "missing {series} in\n{text}");
        }
        let names: std::collections::HashSet<_> = LeaseResult::ALL.map(LeaseResult::as_str).into();
        assert_eq!(names.len(), LeaseResult::ALL.len());
    }
}
