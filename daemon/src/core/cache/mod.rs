//! The daemon's cache, apart from the compile engine: the negative cache (failed compiles, in
//! memory), this host's tiers (`crate::core::store`: memory, then disk) and the fleet tier
//! (`crate::core::fleet`: kiln-cache behind its breaker, and its leases). The engine, jobs, `Warm`,
//! blobs, snapshots and torch graphs all read and write through a [`Cache`]; none of them holds a
//! tier of its own.
//!
//! - here: lookups (one key, or a graph's keys with one fleet round trip), adopting another
//!   host's result, and this host's writes;
//! - [`publish`]: what goes to the fleet cache: a compile's result and lease, graph manifests,
//!   and the bound an answer waits for those writes ([`PUBLISH_WAIT`]);
//! - `fleet_questions.rs`: what the RPC surface asks about the fleet, by name;
//! - [`produce`]: who produces a missing entry (single flight on this host and in the fleet);
//!   [`holders`] is its part on this host, tied to the producers' open streams.

mod fleet_questions;
pub(crate) mod holders;
pub mod produce;
pub mod publish;
mod watches;

pub use produce::{Claimed, Decision, Grant, Producer};
pub use publish::ForFleet;

use crate::core::fleet::{Fleet, Found};
use crate::core::store::tiered::{Hit, TieredStore};
use crate::core::store::{Stored, Usage};
use crate::core::work::Work;
use crate::domain::Answer;
use crate::domain::TierName;
use crate::metrics::Metrics;
use bytes::Bytes;
use kiln_proto::CacheKey;
use kiln_proto::envelope::Artifact;
use kiln_proto::pb;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// What [`Cache::prefetch`] found, and whether the fleet cache was asked for the rest.
#[derive(Debug, Default)]
pub struct Prefetched {
    pub found: HashMap<CacheKey, Answer>,
    /// The fleet cache answered for every key not in `found`, so they need not be read again.
    pub fleet_asked: bool,
}

/// Whether a fleet answer is stored in this host's tiers too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Adopt {
    /// Memory now, disk just after: what a compile's graph wants, since this host will ask again.
    Locally,
    /// Not at all: the caller keeps the bytes itself (a snapshot restore writes them into the
    /// job's directory), and a copy here would cost a disk write and an fsync per file, next to
    /// the job that is starting.
    No,
}

/// A remembered compile failure.
#[derive(Debug)]
struct Failure {
    log: String,
    compile_micros: u64,
}

#[derive(Debug)]
pub struct Cache {
    /// This host's tiers, memory then disk.
    store: Arc<TieredStore>,
    /// Failed compiles, kept for `negative_ttl` so a herd asking for a broken kernel pays one
    /// compile, not one each. Never on disk; the fleet gets a failure as a short-lived negative
    /// entry (see [`Cache::hand_to_fleet`]), which releases other hosts' waiters with its log.
    negative: moka::future::Cache<CacheKey, Arc<Failure>>,
    /// The fleet cache's tier, leases and notifications, when kilnd has `--remote`.
    fleet: Option<Fleet>,
    /// Graph manifests this daemon published to the fleet lately (see [`Cache::publish_manifest`]).
    manifests: moka::sync::Cache<CacheKey, ()>,
    metrics: Arc<Metrics>,
    /// Disk writes and fleet publishes outlive the answer; shutdown waits for them here.
    work: Work,
    /// The fleet watches this host's waiting requests share (see [`Cache::published_elsewhere`]).
    watches: watches::Watches,
}

impl Cache {
    pub fn new(
        store: TieredStore,
        fleet: Option<Fleet>,
        metrics: Arc<Metrics>,
        work: Work,
        negative_ttl: Duration,
    ) -> Self {
        Cache {
            store: Arc::new(store),
            negative: moka::future::Cache::builder().max_capacity(100_000).time_to_live(negative_ttl).build(),
            fleet,
            manifests: publish::manifest_memory(),
            metrics,
            work,
            watches: watches::Watches::default(),
        }
    }

    /// Compares a fleet kernel held back from an unvetted publisher under `key` with this host's
    /// compile of it, `compiled` (see `crate::core::audit::vetting`).
    pub async fn settle_vetting(&self, key: &CacheKey, compiled: &crate::runtime::toolchain::Output) {
        if let Some(fleet) = self.fleet() {
            fleet.settle_vetting(key, compiled).await;
        }
    }

    /// Drops `key` from this host's tiers and negative cache: the fleet quarantined it.
    pub async fn forget(&self, key: &CacheKey) {
        self.negative.invalidate(key).await;
        self.store.remove(key).await;
    }

    /// The fleet, configured (`--remote`), whether or not it answers now. The core's own parts
    /// (the engine, the audit, the recipe books) call it; the RPC surface asks the cache instead
    /// (`fleet_questions.rs`).
    pub(in crate::core) fn fleet(&self) -> Option<&Fleet> {
        self.fleet.as_ref()
    }

    /// The fleet, while its breaker lets calls through: a fleet cache believed down is skipped,
    /// not asked and counted as an error on every lookup.
    pub(in crate::core) fn fleet_up(&self) -> Option<&Fleet> {
        self.fleet.as_ref().filter(|f| f.usable())
    }

    /// Whether the fleet cache holds `key`, asked without downloading it; `None` with no fleet,
    /// one believed down, or no answer.
    pub async fn fleet_holds(&self, key: &CacheKey) -> Option<bool> {
        self.fleet_up()?.holds(key).await
    }

    /// Looks `key` up in this host's tiers only: no negative cache, no fleet, nothing counted as
    /// saved (snapshots and `Explain` read their own entries this way).
    pub async fn local(&self, key: &CacheKey) -> Option<Hit> {
        self.store.get(key).await
    }

    /// The size of each of this host's tiers, for `Stats`.
    pub fn usage(&self) -> Vec<(TierName, Usage)> {
        self.store.usage()
    }

    /// Brings the tiers' sizes up to date (before `Stats` reads them).
    pub async fn settle(&self) {
        self.store.settle().await;
    }

    /// Whether a compile of `key` failed within the negative TTL (for `Explain`, which must not
    /// count a lookup).
    pub fn failed_recently(&self, key: &CacheKey) -> bool {
        self.negative.contains_key(key)
    }

    /// Answers from the caches only: this host's, then the fleet's (one Get; its negative
    /// entries included).
    pub async fn cached(&self, key: &CacheKey) -> Option<Answer> {
        if let Some(hit) = self.cached_here(key).await {
            return Some(hit);
        }
        self.cached_in_fleet(key).await
    }

    /// The fleet's answer (one Get), stored in this host's tiers.
    pub async fn cached_in_fleet(&self, key: &CacheKey) -> Option<Answer> {
        let found = self.fleet_up()?.fetch(key).await?;
        Some(self.adopt(key, found).await)
    }

    /// Answers from this host's caches: the negative cache, then the tiers.
    pub async fn cached_here(&self, key: &CacheKey) -> Option<Answer> {
        if let Some(failed) = self.remembered_failure(key).await {
            return Some(failed);
        }
        Some(self.hit_answer(self.store.get(key).await?))
    }

    /// A remembered failure of `key`, counted: a compile that failed within the negative TTL is
    /// answered with its log rather than run again.
    pub async fn remembered_failure(&self, key: &CacheKey) -> Option<Answer> {
        let f = self.negative.get(key).await?;
        self.metrics.negative_hits.inc();
        Some(Answer::failed(pb::Tier::Memory, f.log.clone(), f.compile_micros))
    }

    fn hit_answer(&self, hit: Hit) -> Answer {
        self.saved(hit.artifact.meta.compile_micros);
        Answer::from_artifact(hit.artifact, hit.tier.to_pb())
    }

    /// Counts the compile time an answer from a cache (or another request's compile) saved.
    pub fn saved(&self, compile_micros: u64) {
        self.metrics.seconds_saved.inc_by(compile_micros as f64 / 1e6);
    }

    /// Answers as many of `keys` as the caches can, asking the fleet cache for all the local
    /// misses in one BatchGet: a fresh host warm-starts a whole graph in one round trip.
    pub async fn prefetch(&self, keys: &[CacheKey]) -> Prefetched {
        self.prefetch_where(keys, |_, _| true, Adopt::Locally).await
    }

    /// [`Cache::prefetch`], answering only artifacts that `accept` takes: a content-addressed
    /// caller checks the bytes against their address here, before a fleet answer is adopted into
    /// the local tiers. A refused artifact reads as a miss and is counted as an integrity failure.
    /// With [`Adopt::No`], fleet answers are passed on without being stored on this host.
    pub async fn prefetch_where(
        &self,
        keys: &[CacheKey],
        accept: impl Fn(&CacheKey, &Artifact) -> bool,
        adopt: Adopt,
    ) -> Prefetched {
        let refused = |key: &CacheKey, tier: TierName| {
            tracing::warn!(%key, %tier, "cache entry refused: its content does not match its address");
            self.metrics.integrity_failure(tier);
        };
        let mut found = HashMap::new();
        let mut missing = Vec::new();
        // This host's answers: the negative cache, then each tier asked once for the whole graph
        // (the disk tier reads them all in one trip to a blocking thread).
        let mut local: Vec<Option<Answer>> = Vec::with_capacity(keys.len());
        let mut ask = Vec::new();
        for key in keys {
            let failed = self.remembered_failure(key).await;
            if failed.is_none() {
                ask.push(*key);
            }
            local.push(failed);
        }
        let mut hits = self.store.get_many(&ask).await.into_iter();
        for slot in local.iter_mut() {
            if slot.is_none() {
                *slot = hits.next().flatten().map(|hit| self.hit_answer(hit));
            }
        }
        for (key, answer) in keys.iter().zip(local) {
            match answer {
                Some(answer) if answer.artifact().is_none_or(|a| accept(key, a)) => {
                    found.insert(*key, answer);
                }
                Some(answer) => {
                    // A negative hit has no artifact, so `accept` refused a memory or disk hit.
                    refused(key, TierName::from_pb(answer.tier()).unwrap_or(TierName::Memory));
                    missing.push(*key);
                }
                None => missing.push(*key),
            }
        }
        let Some(fleet) = self.fleet_up().filter(|_| !missing.is_empty()) else {
            return Prefetched { found, fleet_asked: false };
        };
        let Some(answers) = fleet.lookup_many(&missing).await else {
            return Prefetched { found, fleet_asked: false };
        };
        let mut disk = Vec::new();
        for (key, answer) in answers {
            match answer {
                Some(Found::Artifact(a, _)) if !accept(&key, &a) => refused(&key, TierName::Remote),
                Some(Found::Artifact(a, _)) if adopt == Adopt::No => {
                    found.insert(key, Answer::from_artifact(Arc::from(a), pb::Tier::Remote));
                }
                Some(f) => {
                    found.insert(key, self.adopt_into(&key, f, &mut disk).await);
                }
                None => {}
            }
        }
        self.write_to_disk(disk);
        Prefetched { found, fleet_asked: true }
    }

    /// Takes another host's result: an artifact goes into the local tiers, a failure into the
    /// negative cache.
    pub async fn adopt(&self, key: &CacheKey, found: Found) -> Answer {
        let mut disk = Vec::new();
        let answer = self.adopt_into(key, found, &mut disk).await;
        self.write_to_disk(disk);
        answer
    }

    /// [`Cache::adopt`], leaving the disk writes in `disk` for the caller to start together.
    async fn adopt_into(&self, key: &CacheKey, found: Found, disk: &mut Vec<(CacheKey, Stored)>) -> Answer {
        match found {
            Found::Artifact(artifact, bytes) => {
                let artifact: Arc<Artifact> = Arc::from(artifact);
                let stored = Stored { envelope: Bytes::from(bytes), unpacked: Some(Arc::clone(&artifact)) };
                self.negative.invalidate(key).await;
                self.store.put_where(key, stored.clone(), |t| t == TierName::Memory).await;
                disk.push((*key, stored));
                self.saved(artifact.meta.compile_micros);
                Answer::from_artifact(artifact, pb::Tier::Remote)
            }
            Found::Failed { log, compile_micros } => {
                self.remember_failure(key, log.clone(), compile_micros).await;
                Answer::failed(pb::Tier::Remote, log, compile_micros)
            }
        }
    }

    /// Remembers a failed compile of `key` on this host for the negative TTL.
    pub async fn remember_failure(&self, key: &CacheKey, log: String, compile_micros: u64) {
        self.negative.insert(*key, Arc::new(Failure { log, compile_micros })).await;
    }

    /// Stores a new artifact in every tier: the fleet first, since its publish releases other
    /// hosts' waiters, then this host's. Unlike a compile's publish ([`Cache::hand_to_fleet`]),
    /// this waits for the fleet: snapshots, blobs and torch graphs answer a save once the fleet
    /// holds it, so the next host that asks finds it.
    pub async fn store_everywhere(&self, key: &CacheKey, stored: Stored) {
        if let Some(fleet) = self.fleet_up() {
            fleet.publish(key, &stored.envelope).await;
        }
        self.store_locally(key, stored).await;
    }

    /// Stores an artifact in this host's tiers: memory now, since this host answers from it; the
    /// disk write ends in an fsync, so it goes on in a tracked task rather than in front of the
    /// answer (shutdown waits for it).
    pub async fn store_locally(&self, key: &CacheKey, stored: Stored) {
        // A remembered failure of the key would otherwise answer before the artifact does.
        self.negative.invalidate(key).await;
        self.store.put_where(key, stored.clone(), |t| t == TierName::Memory).await;
        self.write_to_disk(vec![(*key, stored)]);
    }

    /// Writes entries to the disk tier after the answer, in one background task, one after
    /// another: a fresh host's warm start adopts a whole graph at once, and a task per entry
    /// started a blocking thread per entry on a young process, beside the answer.
    fn write_to_disk(&self, entries: Vec<(CacheKey, Stored)>) {
        if entries.is_empty() {
            return;
        }
        let store = Arc::clone(&self.store);
        self.work.spawn("disk-write", async move {
            for (key, stored) in entries {
                store.put_where(&key, stored, |t| t == TierName::Disk).await;
            }
        });
    }
}
