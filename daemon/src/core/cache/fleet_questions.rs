//! What the RPC surface asks about the fleet, asked of the [`Cache`] by name. The cache keeps its
//! fleet: no handler holds the `Fleet`, so each of these still goes through the tier's breaker,
//! and a host without `--remote` answers each the same way (nothing there, nothing to wait for).

use super::Cache;
use crate::core::audit::{Auditor, Sample};
use crate::core::fleet::Found;
use crate::domain::Answer;
use kiln_cache_client::{ClientError, Lookup};
use kiln_proto::CacheKey;
use kiln_proto::pb::{AuditStats, Provenance, QuarantineListRequest, QuarantineListResponse};
use std::sync::Arc;

/// The fleet as `Stats` shows it.
#[derive(Debug)]
pub struct FleetReport {
    /// The tier's breaker lets calls through.
    pub usable: bool,
    pub state: &'static str,
    pub reason: String,
    pub audit: AuditStats,
}

impl Cache {
    /// Whether kilnd has a fleet cache (`--remote`), whether or not it answers now.
    pub fn has_fleet(&self) -> bool {
        self.fleet.is_some()
    }

    /// The fleet's state and the audit's counts; `None` without a fleet.
    pub fn fleet_report(&self) -> Option<FleetReport> {
        self.fleet.as_ref().map(|f| FleetReport {
            usable: f.usable(),
            state: f.state_name(),
            reason: f.state_reason(),
            audit: f.audit_stats(),
        })
    }

    /// The auditor, for the task that runs audits and for `kiln audit`; `None` without a fleet.
    pub fn auditor(&self) -> Option<Arc<Auditor>> {
        self.fleet.as_ref().map(|f| f.auditor())
    }

    /// Offers a kernel the fleet answered to the audit, which decides whether to recompile it;
    /// `sample` is built only when it does.
    pub fn offer_to_audit(&self, sample: impl FnOnce() -> Sample, key: &CacheKey) {
        if let Some(fleet) = &self.fleet {
            fleet.offer_to_audit(sample, key);
        }
    }

    /// Who published the artifact this host last fetched from the fleet under `key`, when known.
    pub fn publisher_of(&self, key: &CacheKey) -> Option<Provenance> {
        self.fleet.as_ref().and_then(|f| f.publisher_of(key))
    }

    /// Resolves once another host publishes an artifact under `key`, adopted here; never without
    /// a fleet (the caller bounds the wait). Every request of this host that waits for `key`
    /// shares one watch of the fleet, one fetch and one adoption.
    pub async fn published_elsewhere(self: &Arc<Self>, key: &CacheKey) -> Answer {
        if self.fleet.is_none() {
            return std::future::pending().await;
        }
        let watch = self.watches.join(key, || {
            let (cache, key) = (Arc::clone(self), *key);
            async move {
                let Some(fleet) = &cache.fleet else { return std::future::pending().await };
                let found = fleet.published_elsewhere(&key).await;
                cache.adopt(&key, found).await
            }
        });
        watch.await
    }

    /// How many keys this host watches the fleet for now.
    #[cfg(test)]
    pub(crate) fn watches_open(&self) -> usize {
        self.watches.open()
    }

    /// The fleet's artifact under `key`, read now and adopted here; `None` when the fleet is
    /// down, answers no artifact, or there is none. For entries that change under one key (a
    /// snapshot's manifest), where this host's copy may be stale.
    pub async fn fresh_from_fleet(&self, key: &CacheKey) -> Option<Answer> {
        let found @ Found::Artifact(..) = self.fleet_up()?.fetch(key).await? else { return None };
        Some(self.adopt(key, found).await)
    }

    /// Which of `keys` the fleet holds, asked without downloading anything; `None` when there is
    /// no fleet, it is believed down, or it did not answer.
    pub async fn fleet_contains(&self, keys: &[CacheKey]) -> Option<Vec<bool>> {
        self.fleet_up()?.contains(keys).await
    }

    /// Stores an envelope this host holds in the fleet again (the fleet lost it); nothing
    /// without a fleet.
    pub async fn republish(&self, key: &CacheKey, envelope: &bytes::Bytes) {
        if let Some(fleet) = &self.fleet {
            fleet.publish(key, envelope).await;
        }
    }

    /// The entry under `key` as the fleet stores it, not opened or verified, for a caller that
    /// checks the bytes its own way (Explain's recipe books); `None` on a miss, an error, or no
    /// fleet up.
    pub async fn fleet_raw(&self, key: &CacheKey) -> Option<Vec<u8>> {
        match self.fleet_up()?.get_raw(key).await {
            Ok(Lookup::Hit(sealed, _)) => Some(sealed),
            _ => None,
        }
    }

    /// The kernel keys of a graph as a host published them (`Ok(None)`: the fleet knows no such
    /// graph); `None` without a fleet.
    pub async fn manifest(&self, graph_key: &CacheKey) -> Option<Result<Option<Vec<CacheKey>>, ClientError>> {
        Some(self.fleet.as_ref()?.get_manifest(graph_key).await)
    }

    /// The fleet's quarantine records, as `kiln quarantine` lists them; `None` without a fleet.
    pub async fn list_quarantine(
        &self,
        request: QuarantineListRequest,
    ) -> Option<Result<QuarantineListResponse, ClientError>> {
        Some(self.fleet.as_ref()?.list_quarantine(request).await)
    }
}
