//! Prometheus metrics of kiln-cache, served as text on `--metrics ADDR` at `/metrics`.
//!
//! - `kiln_server_requests_total{op,code}`: every RPC, `code` the gRPC code in snake case.
//! - `kiln_server_redis_errors_total`: Redis commands that failed.
//! - `kiln_server_redis_up`: 1 while the last Redis command or probe succeeded.
//! - `kiln_server_pubsub_up`: 1 while the publish subscription is live.
//! - `kiln_server_integrity_failures_total`: stored values refused on read (and deleted).
//! - `kiln_server_artifact_bytes_total{direction="in|out"}`: envelope bytes put and served.
//! - `kiln_server_watch_streams`: open WatchPublish streams.
//! - `kiln_server_lookups_total{via,result}`: keys read, one per key: `via` the RPC that read it
//!   (`get`, `batch_get`, or `watch` for an entry a WatchPublish sent), `result` `hit`,
//!   `negative`, `miss` or `corrupt`. The fleet's hit rate, and a count of how often clients ask
//!   for one key.
//!
//! - `kiln_server_torch_job_speedup{torch_job}`, `..._break_even_steps`, `..._compile_seconds`,
//!   `..._saved_seconds`, `..._first_step_skew_seconds`, `..._steps` (each by `torch_job`): the fleet ledger's torch.compile jobs (the
//!   [`crate::status::PAGE_JOBS`] most recently reported), refreshed with the fleet page. A job
//!   not measured both ways has no speedup series, and one that never pays no break-even series:
//!   a 0 would read as a measured figure.
//!
//! Beside them, [`Metrics::tally`] counts the same lookups (and stores and leases) per minute for
//! the fleet status page, which flushes them to Redis; kept here so that every place that counts
//! a lookup for Prometheus counts it for the page too.

use kiln_proto::pb::TorchJobReturn;
use kiln_serve::metrics::TorchJobGauges;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::collections::HashSet;
use std::sync::Mutex;
use tonic::Code;

pub use kiln_serve::metrics::{DirectionLabels, PublisherLabels};

kiln_serve::label_sets! {
    RequestLabels { op: &'static str, code: &'static str }
    LookupLabels { via: &'static str, result: &'static str }
    /// A conflicting write's writer (its token id) and what became of it: `refused` (a kernel's) or
    /// `replaced` (a blob's, which may legitimately differ between uploaders).
    ConflictLabels { publisher: String, outcome: &'static str }
}

kiln_serve::metric_set! {
    /// Every metric kiln-cache exports. Cloning a metric shares its value.
    pub struct Metrics {
        pub requests: Family<RequestLabels, Counter> => "requests", "RPCs by operation and gRPC code";
        pub redis_errors: Counter => "redis_errors", "Redis commands that failed";
        pub redis_up: Gauge => "redis_up", "1 while Redis answers, 0 while it does not";
        pub pubsub_up: Gauge => "pubsub_up", "1 while the publish subscription is live";
        pub integrity_failures: Counter
            => "integrity_failures", "Stored values refused on read and deleted: bad digest, wrong key, missing piece";
        pub artifact_bytes: Family<DirectionLabels, Counter>
            => "artifact_bytes", "Envelope bytes put (in) and served (out)";
        pub watch_streams: Gauge => "watch_streams", "Open WatchPublish streams";
        pub lookups: Family<LookupLabels, Counter>
            => "lookups", "Keys read, by the RPC that read them and the result";
        /// Keys quarantined through this replica, by who published the bad bytes (host name).
        pub quarantines: Family<PublisherLabels, Counter>
            => "quarantines", "Keys an auditor quarantined through this replica, by the host that published them";
        /// Puts refused because their bytes were quarantined under the key.
        pub quarantined_puts: Counter
            => "quarantined_puts", "Puts refused because the same bytes were quarantined under the key";
        /// Puts that offered other bytes than the key held, by the offering writer's token id (a
        /// configured token's, or `anonymous`: bounded, unlike host names, which writers choose).
        pub conflicting_puts: Family<ConflictLabels, Counter>
            => "conflicting_puts",
            "Puts that offered other bytes than the key held (refused for kernels), by the offering token id";
        /// The fleet ledger's torch.compile jobs (see the module's documentation).
        pub torch_jobs: TorchJobGauges = TorchJobGauges::new(true)
            => "torch_job",
            "Eager over compiled step time of a torch.compile job, in the fleet ledger (no series until measured)";
        /// All requests, for `CacheStats` (a sum over the family would walk every label set).
        pub requests_all: Counter;
        /// The jobs exported now, so those that left the ledger lose their series.
        torch_jobs_exported: Mutex<HashSet<String>>;
        /// The status page's counts, not yet flushed to Redis.
        pub tally: crate::status::tally::Tally;
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        Metrics::registered(Registry::with_prefix("kiln_server"))
    }

    /// Sets the per-job series to `jobs` (the fleet ledger's most recent), removing those of jobs
    /// no longer among them.
    pub fn export_torch_jobs(&self, jobs: &[TorchJobReturn]) {
        let now: HashSet<String> = jobs.iter().map(|j| j.job.clone()).collect();
        let gone: Vec<String> = {
            let mut exported = self.torch_jobs_exported.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let gone = exported.difference(&now).cloned().collect();
            *exported = now;
            gone
        };
        for job in gone {
            self.torch_jobs.remove(&job);
        }
        for j in jobs {
            self.torch_jobs.set(j);
        }
    }

    /// Sets one job's series at once (a report just merged it); the next refresh keeps the bound.
    pub fn export_torch_job(&self, job: &TorchJobReturn) {
        self.torch_jobs_exported.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(job.job.clone());
        self.torch_jobs.set(job);
    }

    pub fn request(&self, op: &'static str, code: Code) {
        self.requests_all.inc();
        self.requests.get_or_create(&RequestLabels { op, code: kiln_proto::code::name(code) }).inc();
    }

    pub fn lookup(&self, via: &'static str, result: &'static str) {
        self.lookups.get_or_create(&LookupLabels { via, result }).inc();
    }

    pub fn bytes(&self, direction: &'static str, n: usize) {
        self.artifact_bytes.get_or_create(&DirectionLabels { direction }).inc_by(n as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_design() {
        let m = Metrics::new();
        m.request("Put", Code::InvalidArgument);
        m.redis_errors.inc();
        m.redis_up.set(1);
        m.integrity_failures.inc();
        m.bytes("in", 10);
        let text = m.render();
        for line in [
            "kiln_server_requests_total{op=\"Put\",code=\"invalid_argument\"} 1",
            "kiln_server_redis_errors_total 1",
            "kiln_server_redis_up 1",
            "kiln_server_pubsub_up 0",
            "kiln_server_integrity_failures_total 1",
            "kiln_server_artifact_bytes_total{direction=\"in\"} 10",
            "kiln_server_watch_streams 0",
        ] {
            assert!(text.contains(line), "missing {line} in\n{text}");
        }
    }

    #[test]
    fn torch_jobs_export_what_is_known_and_drop_jobs_that_left() {
        let m = Metrics::new();
        let job = |name: &str, speedup: f64| TorchJobReturn {
            job: name.into(),
            speedup,
            break_even_steps: if speedup > 1.0 { 100.0 } else { 0.0 },
            compile_s: 30.0,
            steps: 40,
            ..Default::default()
        };
        m.export_torch_jobs(&[job("measured", 2.0), job("unmeasured", 0.0), job("gone", 2.0)]);
        m.export_torch_jobs(&[job("measured", 2.0), job("unmeasured", 0.0)]);
        let text = m.render();
        assert!(text.contains("kiln_server_torch_job_speedup{torch_job=\"measured\"} 2.0"), "{text}");
        assert!(text.contains("kiln_server_torch_job_break_even_steps{torch_job=\"measured\"} 100.0"), "{text}");
        assert!(text.contains("kiln_server_torch_job_compile_seconds{torch_job=\"unmeasured\"} 30.0"), "{text}");
        assert!(!text.contains("kiln_server_torch_job_speedup{torch_job=\"unmeasured\"}"), "{text}");
        assert!(!text.contains("kiln_server_torch_job_break_even_steps{torch_job=\"unmeasured\"}"), "{text}");
        assert!(!text.contains("torch_job=\"gone\""), "{text}");
    }
}
