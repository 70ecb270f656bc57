//! Artifact tiers and the tiered store over them.
//!
//! - [`Store`]: the small trait each tier implements, with its hit/miss/error contract.
//! - [`memory`]: a byte-bounded LRU in this process.
//! - [`disk`]: content-addressed files, atomic writes, a size cap with LRU eviction.
//! - [`tiered`]: looks tiers up fastest first, verifies every envelope it reads, evicts and counts
//!   corrupt ones, backfills faster tiers on a hit, and writes slowest first.

pub mod disk;
pub mod memory;
pub mod tiered;

use crate::domain::TierName;
use bytes::Bytes;
use kiln_proto::CacheKey;
use kiln_proto::envelope::Artifact;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// A boxed future, so that tiers can sit in one list as trait objects.
pub type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A tier failed (I/O, a full disk). Never a failed compile: the caller counts it as a miss.
#[derive(Debug, thiserror::Error)]
#[error("{tier} tier: {source}")]
pub struct StoreError {
    pub tier: TierName,
    #[source]
    pub source: std::io::Error,
}

/// What a tier holds for a key: the envelope, and for tiers that keep it unpacked (memory) the
/// artifact too, so a hit there skips decompression. `unpacked` is set only by code that sealed
/// the envelope itself or opened (so verified) it in this process; the memory tier relies on
/// that and checks such entries for their key, not their digest again.
#[derive(Debug, Clone)]
pub struct Stored {
    pub envelope: Bytes,
    pub unpacked: Option<Arc<Artifact>>,
}

impl Stored {
    pub fn packed(envelope: Bytes) -> Self {
        Stored { envelope, unpacked: None }
    }
}

/// Size of a tier now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub entries: u64,
    pub bytes: u64,
    pub capacity_bytes: u64,
}

/// One cache tier, holding sealed envelopes by key.
///
/// Contract:
/// - `get` returns `Ok(Some(stored))` on a hit and `Ok(None)` on a miss. It returns the envelope as
///   stored, unverified: the caller verifies the digest and the key of every envelope it reads,
///   whatever the tier, and evicts the entry with `remove` when they do not match.
/// - `Err` means the tier could not answer. Callers treat it as a miss plus a metric, never as a
///   failed compile.
/// - `put` makes the entry visible whole or not at all: no reader ever sees a partial envelope.
pub trait Store: Send + Sync + std::fmt::Debug {
    fn name(&self) -> TierName;
    fn get<'a>(&'a self, key: &'a CacheKey) -> StoreFuture<'a, Result<Option<Stored>, StoreError>>;
    /// `get` for many keys, answered in order. A tier whose every call has a fixed cost (the
    /// disk tier's trip to a blocking thread) answers them all in one call: a graph's lookups
    /// are one trip, not one per kernel.
    fn get_many<'a>(&'a self, keys: &'a [CacheKey]) -> StoreFuture<'a, Vec<Result<Option<Stored>, StoreError>>> {
        Box::pin(async move {
            let mut out = Vec::with_capacity(keys.len());
            for key in keys {
                out.push(self.get(key).await);
            }
            out
        })
    }
    /// Stores `stored.envelope`; a tier that keeps artifacts unpacked uses `stored.unpacked` when
    /// the caller has it, instead of unpacking the envelope again.
    fn put<'a>(&'a self, key: &'a CacheKey, stored: Stored) -> StoreFuture<'a, Result<(), StoreError>>;
    fn remove<'a>(&'a self, key: &'a CacheKey) -> StoreFuture<'a, Result<(), StoreError>>;
    /// Brings `usage` up to date, for tiers that account lazily; a no-op for the others.
    fn settle(&self) -> StoreFuture<'_, ()> {
        Box::pin(async {})
    }

    fn usage(&self) -> Usage;
}
