//! The memory tier: a byte-bounded LRU (moka, weighed by size). Each entry holds the envelope and
//! the artifact unpacked from it at insert time: a read verifies the envelope's digest and key,
//! as in every tier, but skips decompression, which was most of a memory hit's cost.

use super::{Store, StoreError, StoreFuture, Stored, Usage};
use crate::domain::TierName;
use bytes::Bytes;
use kiln_proto::CacheKey;
use kiln_proto::envelope::{self, Artifact};
use std::sync::Arc;

#[derive(Debug)]
struct Entry {
    envelope: Bytes,
    artifact: Arc<Artifact>,
}

#[derive(Debug)]
pub struct MemoryTier {
    cache: moka::future::Cache<CacheKey, Arc<Entry>>,
    capacity: u64,
    /// Largest artifact this tier will unpack, from the daemon's limits.
    max_artifact_bytes: u64,
}

impl MemoryTier {
    pub fn new(capacity_bytes: u64, max_artifact_bytes: u64) -> Self {
        let cache = moka::future::Cache::builder()
            .max_capacity(capacity_bytes)
            .weigher(|_k: &CacheKey, e: &Arc<Entry>| {
                let size =
                    e.envelope.len() + e.artifact.bytes.len() + e.artifact.meta.log.len() + e.artifact.meta.ptx.len();
                u32::try_from(size).unwrap_or(u32::MAX)
            })
            .build();
        MemoryTier { cache, capacity: capacity_bytes, max_artifact_bytes }
    }
}

impl Store for MemoryTier {
    fn name(&self) -> TierName {
        TierName::Memory
    }

    fn get<'a>(&'a self, key: &'a CacheKey) -> StoreFuture<'a, Result<Option<Stored>, StoreError>> {
        Box::pin(async move {
            Ok(self
                .cache
                .get(key)
                .await
                .map(|e| Stored { envelope: e.envelope.clone(), unpacked: Some(Arc::clone(&e.artifact)) }))
        })
    }

    /// Keeps the caller's unpacked artifact, or unpacks the envelope once, here (checking its
    /// digest and key); an envelope that does not open is not stored.
    fn put<'a>(&'a self, key: &'a CacheKey, stored: Stored) -> StoreFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let refused = |e| StoreError { tier: TierName::Memory, source: std::io::Error::other(e) };
            let envelope = stored.envelope;
            let artifact = match stored.unpacked {
                // An unpacked artifact exists only where this process sealed the envelope or
                // opened (so verified) it: hashing it again would re-check its own work. The
                // key it is filed under is still checked.
                Some(artifact) => {
                    envelope::check_key(&envelope, key).map_err(refused)?;
                    artifact
                }
                None => Arc::new(envelope::open(&envelope, key, self.max_artifact_bytes).map_err(refused)?),
            };
            self.cache.insert(*key, Arc::new(Entry { envelope, artifact })).await;
            Ok(())
        })
    }

    fn remove<'a>(&'a self, key: &'a CacheKey) -> StoreFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            self.cache.invalidate(key).await;
            Ok(())
        })
    }

    /// moka applies size accounting lazily (it would cost a warm start from the fleet several
    /// milliseconds to settle it on every insert), so Stats settles it before reading.
    fn settle(&self) -> StoreFuture<'_, ()> {
        Box::pin(self.cache.run_pending_tasks())
    }

    fn usage(&self) -> Usage {
        Usage { entries: self.cache.entry_count(), bytes: self.cache.weighted_size(), capacity_bytes: self.capacity }
    }
}

#[cfg(test)]
impl MemoryTier {
    /// Replaces an entry's envelope behind the tier's back, as memory corruption would.
    pub async fn corrupt(&self, key: &CacheKey, envelope: Bytes) {
        if let Some(e) = self.cache.get(key).await {
            self.cache.insert(*key, Arc::new(Entry { envelope, artifact: Arc::clone(&e.artifact) })).await;
        }
    }
}
