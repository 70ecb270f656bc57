//! Hot values: envelopes this replica read from Redis in the last moment, kept in memory for
//! `BatchGet`.
//!
//! A fleet restart sends every host after the same values at once: a thousand hosts restoring
//! one snapshot ask for each of its files a thousand times within seconds. Without this, each
//! ask is a Redis read, and since every piece of an artifact lives in its key's hash slot, one
//! large file is one Redis shard's load however many shards the cluster has. With it, each
//! replica reads a value once per lifetime ([`HotValues::ttl`], seconds) and serves the rest from
//! memory, already verified: Redis sees replicas × values, not hosts × values, and kiln-cache
//! replicas (stateless) are what scales.
//!
//! Only `BatchGet` reads through here. Its callers ask for content-addressed entries (kernels,
//! snapshot files, blob groups), whose value under a key never changes; entries that do change
//! (a job's snapshot manifest, the listings) are read with `Get`, which always goes to Redis.
//! A `Put` on this replica drops its copy at once; one on another replica is seen here within the
//! lifetime. Negative entries are never kept: a failure must not outlive its own TTL here.

use crate::published::Published;
use kiln_proto::CacheKey;
use std::sync::Arc;
use std::time::Duration;

/// Verified envelopes by key, bounded in bytes and in age.
#[derive(Clone)]
pub struct HotValues {
    cache: Option<moka::sync::Cache<CacheKey, Arc<Published>>>,
}

impl std::fmt::Debug for HotValues {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.cache {
            Some(c) => write!(f, "HotValues({} entries, {} bytes)", c.entry_count(), c.weighted_size()),
            None => f.write_str("HotValues(off)"),
        }
    }
}

impl HotValues {
    /// At most `bytes` of envelopes, each kept `ttl` after it was read; `bytes == 0` turns it off.
    pub fn new(bytes: u64, ttl: Duration) -> Self {
        let cache = (bytes > 0 && !ttl.is_zero()).then(|| {
            moka::sync::Cache::builder()
                .max_capacity(bytes)
                .weigher(|_: &CacheKey, v: &Arc<Published>| u32::try_from(v.envelope.len()).unwrap_or(u32::MAX))
                .time_to_live(ttl)
                .build()
        });
        HotValues { cache }
    }

    pub fn off() -> Self {
        HotValues { cache: None }
    }

    pub fn get(&self, key: &CacheKey) -> Option<Arc<Published>> {
        self.cache.as_ref()?.get(key)
    }

    /// Keeps a verified envelope and its provenance.
    pub fn insert(&self, key: CacheKey, published: &Published) {
        if let Some(cache) = &self.cache {
            cache.insert(key, Arc::new(published.clone()));
        }
    }

    /// Drops `key`: this replica wrote or deleted it.
    pub fn forget(&self, key: &CacheKey) {
        if let Some(cache) = &self.cache {
            cache.invalidate(key);
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn key(n: u8) -> CacheKey {
        CacheKey::from_bytes([n; 32])
    }

    fn value(bytes: &[u8]) -> Published {
        Published { envelope: bytes.to_vec(), provenance: None }
    }

    #[test]
    fn keeps_values_until_forgotten_or_expired() {
        let hot = HotValues::new(1 << 20, Duration::from_millis(200));
        hot.insert(key(1), &value(b"one"));
        assert_eq!(hot.get(&key(1)).map(|v| v.envelope.clone()), Some(b"one".to_vec()));
        hot.forget(&key(1));
        assert!(hot.get(&key(1)).is_none(), "a forgotten value is gone at once");
        hot.insert(key(2), &value(b"two"));
        std::thread::sleep(Duration::from_millis(300));
        assert!(hot.get(&key(2)).is_none(), "a value outlived its lifetime");
    }

    #[test]
    fn off_keeps_nothing() {
        for hot in [HotValues::off(), HotValues::new(0, Duration::from_secs(1))] {
            hot.insert(key(1), &value(b"one"));
            assert!(hot.get(&key(1)).is_none());
        }
    }
}
