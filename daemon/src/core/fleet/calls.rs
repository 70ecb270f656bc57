//! What the rest of the daemon asks the fleet beyond claims and publishes: its state for `Stats`,
//! the audit's view, and the few raw calls that stats, snapshots, Explain, `Warm` and the audit
//! make. Each is one named question, so no caller holds the tier (or the auditor) itself and
//! every call still goes through the tier's breaker.

use super::Fleet;
use crate::core::audit::{Auditor, Sample};
use kiln_cache_client::{ClientError, Difference, Lookup};
use kiln_proto::CacheKey;
use kiln_proto::envelope::{self, Artifact, IntegrityError};
use kiln_proto::pb::{AuditStats, Provenance, QuarantineListRequest, QuarantineListResponse, QuarantineResponse};
use std::sync::Arc;

/// The fleet's answer to a quarantine report.
type Quarantined = Result<QuarantineResponse, ClientError>;

impl Fleet {
    /// Whether the tier's breaker lets calls through: a fleet cache believed down is skipped,
    /// not asked and counted as an error on every call.
    pub fn usable(&self) -> bool {
        self.tier.usable()
    }

    /// The fleet's state in one word, as `Stats` carries it in `remote_state`.
    pub fn state_name(&self) -> &'static str {
        self.tier.state().as_str()
    }

    /// Why the fleet is not fully usable: the state's reason, or, when up, a read-only token
    /// (this host reads from the fleet but its writes are refused).
    pub fn state_reason(&self) -> String {
        let reason = self.tier.state().reason();
        if reason.is_empty() && self.tier.read_only() {
            return "kiln-cache refused a write with kilnd's token (read-only): this host reads from the fleet but \
                    publishes nothing"
                .to_owned();
        }
        reason
    }

    /// The audit's counts, for `Stats`.
    pub fn audit_stats(&self) -> AuditStats {
        self.audit.stats()
    }

    /// Offers a kernel the fleet answered to the audit, which decides whether to recompile it;
    /// `sample` is built only when it does.
    pub fn offer_to_audit(&self, sample: impl FnOnce() -> Sample, key: &CacheKey) {
        self.audit.consider(sample, key);
    }

    /// Who published the artifact this host last fetched from the fleet under `key`, when known.
    pub fn publisher_of(&self, key: &CacheKey) -> Option<Provenance> {
        self.audit.publisher(key).map(|p| (*p).clone())
    }

    /// The auditor, for a task that runs audits beside the fleet (it outlives any borrow).
    pub fn auditor(&self) -> Arc<Auditor> {
        Arc::clone(&self.audit)
    }

    /// Which of `keys` the fleet holds, asked without downloading anything; `None` when it did
    /// not answer.
    pub async fn contains(&self, keys: &[CacheKey]) -> Option<Vec<bool>> {
        self.tier.contains(keys).await.ok()
    }

    /// Whether the fleet holds `key`; `None` when it did not answer.
    pub async fn holds(&self, key: &CacheKey) -> Option<bool> {
        match self.contains(std::slice::from_ref(key)).await.as_deref() {
            Some([held]) => Some(*held),
            _ => None,
        }
    }

    /// The entry under `key` as the fleet stores it: not opened, verified or counted, for callers
    /// that check the bytes their own way (the audit compares them; Explain reads recipe books).
    pub async fn get_raw(&self, key: &CacheKey) -> Result<Lookup, ClientError> {
        self.tier.get(key).await
    }

    /// Stores bytes that are not a compile's artifact (a recipe book) under `key`, uncounted:
    /// the artifact metrics count artifacts only.
    pub async fn put_raw(&self, key: &CacheKey, sealed: Vec<u8>) -> Result<(), ClientError> {
        self.tier.put(key, sealed).await
    }

    /// Opens and verifies an envelope the fleet served for `key`, within this host's artifact
    /// size bound.
    pub fn open(&self, key: &CacheKey, sealed: &[u8]) -> Result<Artifact, IntegrityError> {
        envelope::open(sealed, key, self.max_artifact_bytes)
    }

    /// The kernel keys of the graph `graph_key`, as a host published them; `None` when the
    /// fleet knows no such graph.
    pub async fn get_manifest(&self, graph_key: &CacheKey) -> Result<Option<Vec<CacheKey>>, ClientError> {
        self.tier.get_manifest(graph_key).await
    }

    /// Publishes a graph's kernel keys under its key, so another host can warm the whole graph.
    pub async fn put_manifest(&self, graph_key: &CacheKey, kernel_keys: &[CacheKey]) -> Result<(), ClientError> {
        self.tier.put_manifest(graph_key, kernel_keys).await
    }

    /// Reports that the envelope the fleet `served` under `key` differs from the cubin this host
    /// compiled from its inputs, so the fleet stops serving it; both go by their digests.
    pub async fn quarantine(&self, key: &CacheKey, served: &[u8], cubin: &[u8], why: &str) -> Quarantined {
        let (served, audited) = (blake3::hash(served), blake3::hash(cubin));
        self.tier.quarantine(key, Difference { served: &served, audited: &audited, detail: why }).await
    }

    /// The fleet's quarantine records (or its conflicting writes), as `kiln quarantine` lists them.
    pub async fn list_quarantine(&self, request: QuarantineListRequest) -> Result<QuarantineListResponse, ClientError> {
        self.tier.list_quarantine(request).await
    }
}
