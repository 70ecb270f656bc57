//! The tiered store: this host's tiers (memory, disk), fastest first. The fleet cache is not one
//! of them: it answers negative entries and leases too, so it lives in `crate::core::fleet`.
//!
//! Reads try each tier in order and verify every envelope (digest and key) before trusting it;
//! an entry the memory tier verified when it stored it is checked for its key only (see `get`).
//! A corrupt or misplaced entry is evicted from its tier, counted in
//! `kiln_integrity_failures_total`, and treated as a miss, so it is refetched from a slower tier
//! or recompiled, and never served. A hit backfills the faster tiers.
//!
//! `put_where` writes the tiers it is given slowest first. The cache calls it twice for a new
//! artifact: memory at once, since this process answers from it, and disk in a tracked task just
//! after, so an fsync never holds up an answer (a crash in between loses only the disk copy,
//! which the fleet or a recompile restores). Write-error policy: a tier that fails to store
//! is logged and counted and the others still get the entry; the compile result is returned to
//! its client either way, because a cache that cannot write must not fail a compile.

use super::{Store, StoreError, Stored, Usage};
use crate::domain::TierName;
use crate::metrics::Metrics;
use kiln_proto::CacheKey;
use kiln_proto::envelope::{self, Artifact};
use std::sync::Arc;

#[derive(Debug)]
pub struct TieredStore {
    tiers: Vec<Arc<dyn Store>>,
    metrics: Arc<Metrics>,
    max_artifact_bytes: u64,
}

/// A verified hit and the tier that served it.
#[derive(Debug)]
pub struct Hit {
    pub artifact: Arc<Artifact>,
    pub tier: TierName,
}

impl TieredStore {
    pub fn new(tiers: Vec<Arc<dyn Store>>, metrics: Arc<Metrics>, max_artifact_bytes: u64) -> Self {
        TieredStore { tiers, metrics, max_artifact_bytes }
    }

    /// Looks `key` up in every tier, fastest first.
    pub async fn get(&self, key: &CacheKey) -> Option<Hit> {
        self.get_many(std::slice::from_ref(key)).await.pop().flatten()
    }

    /// Looks many keys up, each tier asked once for all the keys the faster tiers missed;
    /// answers in the order of `keys`.
    pub async fn get_many(&self, keys: &[CacheKey]) -> Vec<Option<Hit>> {
        let mut hits: Vec<Option<Hit>> = keys.iter().map(|_| None).collect();
        let mut pending: Vec<usize> = (0..keys.len()).collect();
        for (i, tier) in self.tiers.iter().enumerate() {
            if pending.is_empty() {
                break;
            }
            let asked: Vec<CacheKey> = pending.iter().map(|&j| keys[j]).collect();
            let answers = tier.get_many(&asked).await;
            let mut missed = Vec::new();
            for (j, answer) in pending.into_iter().zip(answers) {
                match self.check(i, &keys[j], answer).await {
                    Some(hit) => hits[j] = Some(hit),
                    None => missed.push(j),
                }
            }
            pending = missed;
        }
        hits
    }

    /// Turns tier `i`'s answer for `key` into a verified hit (backfilling the faster tiers), or a
    /// miss: a read error, or a corrupt entry, which is evicted and counted.
    async fn check(&self, i: usize, key: &CacheKey, answer: Result<Option<Stored>, StoreError>) -> Option<Hit> {
        let tier = &self.tiers[i];
        let name = tier.name();
        let stored = match answer {
            Ok(Some(stored)) => stored,
            Ok(None) => {
                self.metrics.lookup(name, "miss");
                return None;
            }
            Err(e) => {
                tracing::warn!(%key, error = %e, "tier read failed; counted as a miss");
                self.metrics.lookup(name, "error");
                return None;
            }
        };
        let bytes = &stored.envelope;
        let verified = match stored.unpacked {
            // The tier verified this envelope whole (digest and key) and unpacked it when it
            // stored it, in this process: hashing it again on every hit would only re-check
            // this process's own memory. What is checked is that the entry is still filed
            // under its key; the unpacked copy is what is served.
            Some(artifact) => envelope::check_key(bytes, key).map(|_| artifact),
            None => envelope::open(bytes, key, self.max_artifact_bytes).map(Arc::new),
        };
        match verified {
            Ok(artifact) => {
                self.metrics.lookup(name, "hit");
                self.metrics.bytes(name, "read", bytes.len());
                let stored = Stored { envelope: bytes.clone(), unpacked: Some(Arc::clone(&artifact)) };
                self.backfill(&self.tiers[..i], key, stored).await;
                Some(Hit { artifact, tier: tier.name() })
            }
            Err(e) => {
                tracing::warn!(%key, tier = %name, error = %e, "corrupt cache entry evicted");
                self.metrics.integrity_failure(name);
                self.metrics.lookup(name, "miss");
                if let Err(e) = tier.remove(key).await {
                    tracing::warn!(%key, error = %e, "could not evict a corrupt entry");
                }
                None
            }
        }
    }

    /// Stores an envelope in the tiers `which` selects, slowest first.
    pub async fn put_where(&self, key: &CacheKey, stored: Stored, which: impl Fn(TierName) -> bool) {
        let chosen: Vec<Arc<dyn Store>> = self.tiers.iter().filter(|t| which(t.name())).cloned().collect();
        self.backfill(&chosen, key, stored).await;
    }

    async fn backfill(&self, tiers: &[Arc<dyn Store>], key: &CacheKey, stored: Stored) {
        let envelope = &stored.envelope;
        for tier in tiers.iter().rev() {
            let name = tier.name();
            match tier.put(key, stored.clone()).await {
                Ok(()) => {
                    self.metrics.bytes(name, "write", envelope.len());
                    self.metrics.write(name, "ok");
                }
                Err(e) => {
                    self.metrics.write(name, "error");
                    tracing::warn!(%key, error = %e, "tier write failed; the other tiers still hold the entry");
                }
            }
        }
    }

    /// Settles lazy accounting in every tier (see [`Store::settle`]).
    /// Drops `key` from every tier (the fleet quarantined it); a tier that fails to is logged.
    pub async fn remove(&self, key: &CacheKey) {
        for tier in &self.tiers {
            if let Err(e) = tier.remove(key).await {
                tracing::warn!(%key, error = %e, "could not drop a quarantined key from a tier");
            }
        }
    }

    pub async fn settle(&self) {
        for tier in &self.tiers {
            tier.settle().await;
        }
    }

    pub fn usage(&self) -> Vec<(TierName, Usage)> {
        self.tiers.iter().map(|t| (t.name(), t.usage())).collect()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::core::store::{disk::DiskTier, memory::MemoryTier};
    use bytes::Bytes;
    use kiln_proto::pb::ArtifactMeta;

    fn key(b: u8) -> CacheKey {
        CacheKey::from_bytes([b; 32])
    }

    fn setup(dir: &std::path::Path) -> (TieredStore, Arc<MemoryTier>, Arc<DiskTier>, Arc<Metrics>) {
        let memory = Arc::new(MemoryTier::new(1 << 20, 1 << 20));
        let disk = Arc::new(DiskTier::open(dir, 1 << 20).unwrap());
        let metrics = Arc::new(Metrics::new());
        let store = TieredStore::new(vec![memory.clone(), disk.clone()], metrics.clone(), 1 << 20);
        (store, memory, disk, metrics)
    }

    #[tokio::test]
    async fn disk_hits_backfill_memory() {
        let dir = tempfile::tempdir().unwrap();
        let (store, memory, disk, _) = setup(dir.path());
        let env = envelope::seal(&key(1), ArtifactMeta::default(), b"cubin");
        disk.put(&key(1), Stored::packed(Bytes::from(env))).await.unwrap();
        assert_eq!(store.get(&key(1)).await.unwrap().tier, TierName::Disk);
        assert!(memory.get(&key(1)).await.unwrap().is_some());
        assert_eq!(store.get(&key(1)).await.unwrap().tier, TierName::Memory);
    }

    #[tokio::test]
    async fn corrupt_entries_are_evicted_counted_and_not_served() {
        let dir = tempfile::tempdir().unwrap();
        let (store, memory, disk, metrics) = setup(dir.path());
        let mut env = envelope::seal(&key(1), ArtifactMeta::default(), b"cubin");
        let last = env.len() - 40;
        env[last] ^= 1;
        disk.put(&key(1), Stored::packed(Bytes::from(env))).await.unwrap();
        // A valid envelope for key 2, found under key 3 (the memory tier refuses to store it so,
        // so it is swapped in behind the tier's back).
        let three = Bytes::from(envelope::seal(&key(3), ArtifactMeta::default(), b"x"));
        assert!(
            memory
                .put(&key(3), Stored::packed(Bytes::from(envelope::seal(&key(2), ArtifactMeta::default(), b"x"))))
                .await
                .is_err()
        );
        memory.put(&key(3), Stored::packed(three)).await.unwrap();
        memory.corrupt(&key(3), Bytes::from(envelope::seal(&key(2), ArtifactMeta::default(), b"x"))).await;
        assert!(store.get(&key(1)).await.is_none());
        assert!(store.get(&key(3)).await.is_none());
        assert!(disk.get(&key(1)).await.unwrap().is_none(), "corrupt entry not evicted");
        assert!(memory.get(&key(3)).await.unwrap().is_none(), "misplaced entry not evicted");
        let text = metrics.render();
        assert!(text.contains("kiln_integrity_failures_total{tier=\"disk\"} 1"), "{text}");
        assert!(text.contains("kiln_integrity_failures_total{tier=\"memory\"} 1"), "{text}");
    }
}
