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
//! Beside them, [`Metrics::tally`] counts the same lookups (and stores and leases) per minute for
//! the fleet status page, which flushes them to Redis; kept here so that every place that counts
//! a lookup for Prometheus counts it for the page too.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tonic::Code;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub op: &'static str,
    pub code: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LookupLabels {
    pub via: &'static str,
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PublisherLabels {
    pub publisher: String,
}

/// A conflicting write's writer (its token id) and what became of it: `refused` (a kernel's) or
/// `replaced` (a blob's, which may legitimately differ between uploaders).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ConflictLabels {
    pub publisher: String,
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DirectionLabels {
    pub direction: &'static str,
}

/// Every metric kiln-cache exports. Cloning a metric shares its value.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    pub requests: Family<RequestLabels, Counter>,
    /// All requests, for `CacheStats` (a sum over the family would walk every label set).
    pub requests_all: Counter,
    pub redis_errors: Counter,
    pub redis_up: Gauge,
    pub pubsub_up: Gauge,
    pub integrity_failures: Counter,
    pub artifact_bytes: Family<DirectionLabels, Counter>,
    pub watch_streams: Gauge,
    pub lookups: Family<LookupLabels, Counter>,
    /// Keys quarantined through this replica, by who published the bad bytes (host name).
    pub quarantines: Family<PublisherLabels, Counter>,
    /// Puts refused because their bytes were quarantined under the key.
    pub quarantined_puts: Counter,
    /// Puts that offered other bytes than the key held, by the offering writer's token id (a
    /// configured token's, or `anonymous`: bounded, unlike host names, which writers choose).
    pub conflicting_puts: Family<ConflictLabels, Counter>,
    /// The status page's counts, not yet flushed to Redis.
    pub tally: crate::status::tally::Tally,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let m = Metrics {
            registry: Registry::default(),
            requests: Family::default(),
            requests_all: Counter::default(),
            redis_errors: Counter::default(),
            redis_up: Gauge::default(),
            pubsub_up: Gauge::default(),
            integrity_failures: Counter::default(),
            artifact_bytes: Family::default(),
            watch_streams: Gauge::default(),
            lookups: Family::default(),
            quarantines: Family::default(),
            quarantined_puts: Counter::default(),
            conflicting_puts: Family::default(),
            tally: Default::default(),
        };
        let mut registry = Registry::with_prefix("kiln_server");
        registry.register("requests", "RPCs by operation and gRPC code", m.requests.clone());
        registry.register("redis_errors", "Redis commands that failed", m.redis_errors.clone());
        registry.register("redis_up", "1 while Redis answers, 0 while it does not", m.redis_up.clone());
        registry.register("pubsub_up", "1 while the publish subscription is live", m.pubsub_up.clone());
        registry.register(
            "integrity_failures",
            "Stored values refused on read and deleted: bad digest, wrong key, missing piece",
            m.integrity_failures.clone(),
        );
        registry.register("artifact_bytes", "Envelope bytes put (in) and served (out)", m.artifact_bytes.clone());
        registry.register("watch_streams", "Open WatchPublish streams", m.watch_streams.clone());
        registry.register("lookups", "Keys read, by the RPC that read them and the result", m.lookups.clone());
        registry.register(
            "quarantines",
            "Keys an auditor quarantined through this replica, by the host that published them",
            m.quarantines.clone(),
        );
        registry.register(
            "quarantined_puts",
            "Puts refused because the same bytes were quarantined under the key",
            m.quarantined_puts.clone(),
        );
        registry.register(
            "conflicting_puts",
            "Puts that offered other bytes than the key held (refused for kernels), by the offering token id",
            m.conflicting_puts.clone(),
        );
        Metrics { registry, ..m }
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

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        kiln_serve::render(&self.registry)
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
}
