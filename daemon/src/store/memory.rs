//! The memory tier: a byte-bounded LRU (moka, weighed by envelope size). It holds envelopes, not
//! decoded artifacts, so a read verifies the digest here like in every other tier.

use super::{Store, StoreError, StoreFuture, TierName, Usage};
use bytes::Bytes;
use kiln_proto::CacheKey;

#[derive(Debug)]
pub struct MemoryTier {
    cache: moka::future::Cache<CacheKey, Bytes>,
    capacity: u64,
}

impl MemoryTier {
    pub fn new(capacity_bytes: u64) -> Self {
        let cache = moka::future::Cache::builder()
            .max_capacity(capacity_bytes)
            .weigher(|_k: &CacheKey, v: &Bytes| u32::try_from(v.len()).unwrap_or(u32::MAX))
            .build();
        MemoryTier { cache, capacity: capacity_bytes }
    }
}

impl Store for MemoryTier {
    fn name(&self) -> TierName {
        TierName::Memory
    }

    fn get<'a>(&'a self, key: &'a CacheKey) -> StoreFuture<'a, Result<Option<Bytes>, StoreError>> {
        Box::pin(async move { Ok(self.cache.get(key).await) })
    }

    fn put<'a>(&'a self, key: &'a CacheKey, envelope: Bytes) -> StoreFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            self.cache.insert(*key, envelope).await;
            // moka applies size accounting lazily; settle it so Stats and eviction see this
            // entry now. Inserts follow compiles or slower-tier hits, so this is off the hot path.
            self.cache.run_pending_tasks().await;
            Ok(())
        })
    }

    fn remove<'a>(&'a self, key: &'a CacheKey) -> StoreFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            self.cache.invalidate(key).await;
            Ok(())
        })
    }

    fn usage(&self) -> Usage {
        Usage { entries: self.cache.entry_count(), bytes: self.cache.weighted_size(), capacity_bytes: self.capacity }
    }
}
