//! This host's recipe books: a small memory tier in front of a disk tier of their own under
//! `<cache-dir>/recipes`, so recipes survive a restart. The tier types are the artifact tiers'
//! (atomic writes, LRU bounds), but the instances are separate: recipes never take room from
//! cubins and never show in the artifact tiers' hit rates or sizes.

use super::book::{self, Expect};
use crate::core::store::disk::DiskTier;
use crate::core::store::memory::MemoryTier;
use crate::core::store::{Store, Stored};
use bytes::Bytes;
use kiln_proto::CacheKey;
use kiln_proto::pb::RecipeBook;
use std::path::Path;

/// Bytes of books kept in memory: thousands of identities.
const MEMORY_BYTES: u64 = 16 << 20;
/// Bytes of books kept on disk, least recently used evicted first.
pub const DISK_BYTES: u64 = 256 << 20;

#[derive(Debug)]
pub struct RecipeStore {
    memory: MemoryTier,
    /// `None` for a daemon built without a cache directory (some tests).
    disk: Option<DiskTier>,
    /// This host's name, written into every recipe it records (read once).
    host: String,
}

impl RecipeStore {
    pub fn in_memory() -> Self {
        RecipeStore {
            memory: MemoryTier::new(MEMORY_BYTES, book::MAX_BOOK_BYTES as u64),
            disk: None,
            host: crate::runtime::host::name(),
        }
    }

    pub fn host(&self) -> &str {
        &self.host
    }

    /// Opens (creating) `<cache_dir>/recipes`.
    pub fn open(cache_dir: &Path) -> std::io::Result<Self> {
        let disk = DiskTier::open(&cache_dir.join("recipes"), DISK_BYTES)?;
        Ok(RecipeStore { disk: Some(disk), ..Self::in_memory() })
    }

    fn tiers(&self) -> impl Iterator<Item = &dyn Store> {
        std::iter::once(&self.memory as &dyn Store).chain(self.disk.as_ref().map(|d| d as &dyn Store))
    }

    /// The book under `key`, from memory or disk (which then fills memory). A bad entry is
    /// removed and logged, and reads as none.
    pub async fn get(&self, key: &CacheKey, expect: Expect<'_>) -> Option<RecipeBook> {
        for tier in self.tiers() {
            let Ok(Some(stored)) = tier.get(key).await else { continue };
            match book::open(key, &stored.envelope, expect) {
                Ok(found) => {
                    if tier.name() != crate::domain::TierName::Memory {
                        let _ = self.memory.put(key, Stored::packed(stored.envelope)).await;
                    }
                    return Some(found);
                }
                Err(e) => {
                    tracing::warn!(%key, tier = tier.name().as_str(), error = %e, "recipe book refused and removed");
                    let _ = tier.remove(key).await;
                }
            }
        }
        None
    }

    /// Stores a sealed book in memory and on disk (temp file, fsync, rename).
    pub async fn put(&self, key: &CacheKey, sealed: Bytes) {
        for tier in self.tiers() {
            if let Err(e) = tier.put(key, Stored::packed(sealed.clone())).await {
                tracing::warn!(%key, error = %e, "could not keep a recipe book");
            }
        }
    }
}
