//! Why kernels missed: `kiln_misses_total{reason}` and a bounded list of the most recent misses,
//! kept together so the list and the metric never disagree. Recorded on the compile path only
//! (a leader that is about to compile), never on a hit.

use super::identity::Identity;
use crate::metrics::{Metrics, MissLabels};
use crate::runtime::toolchain::Toolchain;
use kiln_proto::CacheKey;
use kiln_proto::pb;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

/// Misses kept in [`MissLog::recent`]: enough for a status page's table, small enough that a
/// herd of misses costs no memory to speak of.
pub const RECENT_MISSES: usize = 256;

/// Why a key missed, as the `reason` label of `kiln_misses_total`. A fixed set, so the metric's
/// cardinality is bounded. When several inputs changed at once, the reason is the first that
/// differs in the order of [`MissReason::ALL`]: the broad causes (another compiler, another GPU,
/// other flags) before the narrow ones (one source, one header).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MissReason {
    /// No recipe of this identity was ever seen, here or in the fleet.
    New,
    /// The same inputs were compiled before: the artifact was evicted (or the cache cleared).
    Evicted,
    /// Another toolchain, or another build of it (its fingerprint).
    Toolchain,
    /// Another GPU architecture.
    Target,
    /// NVRTC or ptxas options.
    Options,
    /// NVRTC name expressions.
    NameExpressions,
    TritonSignature,
    TritonConstexprs,
    TritonAttributes,
    /// `num_warps`, `num_stages`, `num_ctas`, `maxnreg`, `enable_fp_fusion`.
    TritonOptions,
    Source,
    Header,
}

impl MissReason {
    /// Every reason, in the order that picks the label of a miss with several differences.
    pub const ALL: [MissReason; 12] = [
        MissReason::New,
        MissReason::Evicted,
        MissReason::Toolchain,
        MissReason::Target,
        MissReason::Options,
        MissReason::NameExpressions,
        MissReason::TritonSignature,
        MissReason::TritonConstexprs,
        MissReason::TritonAttributes,
        MissReason::TritonOptions,
        MissReason::Source,
        MissReason::Header,
    ];

    pub fn label(self) -> &'static str {
        match self {
            MissReason::New => "new",
            MissReason::Evicted => "evicted",
            MissReason::Toolchain => "toolchain",
            MissReason::Target => "target",
            MissReason::Options => "options",
            MissReason::NameExpressions => "name_expressions",
            MissReason::TritonSignature => "triton_signature",
            MissReason::TritonConstexprs => "triton_constexprs",
            MissReason::TritonAttributes => "triton_attributes",
            MissReason::TritonOptions => "triton_options",
            MissReason::Source => "source",
            MissReason::Header => "header",
        }
    }
}

/// One miss that led to a compile.
#[derive(Debug, Clone, PartialEq)]
pub struct MissRecord {
    pub at: SystemTime,
    pub identity: Identity,
    pub key: CacheKey,
    pub toolchain: Toolchain,
    pub reason: MissReason,
    /// One line for a person: `header `common.cuh`: content differs`.
    pub detail: String,
}

impl MissRecord {
    pub fn to_pb(&self) -> pb::RecentMiss {
        pb::RecentMiss {
            unix_millis: self.at.duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0),
            graph: self.identity.graph.clone(),
            kernel_id: self.identity.kernel_id.clone(),
            kernel_name: self.identity.kernel_name.clone(),
            toolchain: self.toolchain.as_str().into(),
            reason: self.reason.label().into(),
            detail: self.detail.clone(),
            key: self.key.to_hex(),
        }
    }
}

/// The most recent misses (newest last inside, newest first out) and the per-reason counter.
#[derive(Debug)]
pub struct MissLog {
    /// A std Mutex: a push or a copy, never held across an await.
    recent: Mutex<VecDeque<MissRecord>>,
    counter: Family<MissLabels, Counter>,
}

impl MissLog {
    /// A log counting into `metrics`' `kiln_misses_total`, whose every reason starts at zero
    /// (a dashboard's `rate()` then has a series from the start).
    pub fn new(metrics: &Metrics) -> Self {
        let counter = metrics.misses.clone();
        for reason in MissReason::ALL {
            let _ = counter.get_or_create(&MissLabels { reason: reason.label() });
        }
        MissLog { recent: Mutex::new(VecDeque::with_capacity(RECENT_MISSES)), counter }
    }

    /// Counts a miss under its reason and keeps it, dropping the oldest past [`RECENT_MISSES`].
    pub fn record(&self, identity: Identity, key: CacheKey, toolchain: Toolchain, reason: MissReason, detail: String) {
        self.counter.get_or_create(&MissLabels { reason: reason.label() }).inc();
        let record = MissRecord { at: SystemTime::now(), identity, key, toolchain, reason, detail };
        let mut recent = self.recent.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if recent.len() == RECENT_MISSES {
            recent.pop_front();
        }
        recent.push_back(record);
    }

    /// The kept misses, newest first.
    pub fn recent(&self) -> Vec<MissRecord> {
        let recent = self.recent.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        recent.iter().rev().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: usize) -> Identity {
        Identity::new("g", &format!("k{n}"), "")
    }

    #[test]
    fn keeps_the_newest_and_counts_every_reason() {
        let metrics = Metrics::new();
        let log = MissLog::new(&metrics);
        for n in 0..RECENT_MISSES + 10 {
            let reason = if n % 2 == 0 { MissReason::Header } else { MissReason::New };
            log.record(id(n), CacheKey::from_bytes([0; 32]), Toolchain::Nvrtc, reason, format!("miss {n}"));
        }
        let recent = log.recent();
        assert_eq!(recent.len(), RECENT_MISSES);
        assert_eq!(recent[0].identity, id(RECENT_MISSES + 9), "newest first");
        assert_eq!(recent.last().unwrap().identity, id(10), "the oldest were dropped");
        let text = metrics.render();
        assert!(text.contains("kiln_misses_total{reason=\"header\"} 133"), "{text}");
        assert!(text.contains("kiln_misses_total{reason=\"new\"} 133"), "{text}");
        assert!(text.contains("kiln_misses_total{reason=\"triton_options\"} 0"), "every reason starts at zero");
    }

    #[test]
    fn labels_are_distinct() {
        let labels: std::collections::HashSet<_> = MissReason::ALL.iter().map(|r| r.label()).collect();
        assert_eq!(labels.len(), MissReason::ALL.len());
    }
}
