//! The path of one kernel: refusal check, negative cache, tiers, then a single-flight compile in
//! a worker, publish, answer. Everything a job does per kernel goes through [`Engine::resolve`].

use crate::config::Limits;
use crate::domain::{KernelJob, KernelSource};
use crate::explain::identity::Identity;
use crate::explain::misses::MissLog;
use crate::explain::store::RecipeStore;
use crate::fleet::{Claim, Fleet, Found};
use crate::gpu::load_check::{LoadCheck, LoadVerdict};
use crate::metrics::ResultLabels;
use crate::metrics::{CompileLabels, Metrics, ToolchainLabels};
use crate::scheduler::flight::{Flights, Join, Leader};
use crate::scheduler::gate::{Gate, Priority};
use crate::store::tiered::{Hit, TieredStore};
use crate::store::{Stored, TierName};
use crate::toolchain::set::Toolchains;
use crate::toolchain::{Compiled, Toolchain};
use bytes::Bytes;
use kiln_proto::envelope::{self, Artifact};
use kiln_proto::pb::{self, ArtifactMeta, KernelAttributes, LoweredName};
use kiln_proto::{CacheKey, Target};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::task::TaskTracker;

/// The answer for one kernel.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub ok: bool,
    pub tier: pb::Tier,
    /// The verified artifact; `None` when the kernel failed.
    pub artifact: Option<Arc<Artifact>>,
    pub log: String,
    pub lowered_names: Vec<LoweredName>,
    /// What the artifact cost when it was compiled, even when this answer was a hit.
    pub compile_micros: u64,
    pub metadata_json: String,
    pub ptx: String,
}

impl Outcome {
    fn failed(tier: pb::Tier, log: String, compile_micros: u64) -> Self {
        Outcome {
            ok: false,
            tier,
            artifact: None,
            log,
            lowered_names: Vec::new(),
            compile_micros,
            metadata_json: String::new(),
            ptx: String::new(),
        }
    }

    fn from_artifact(artifact: Arc<Artifact>, tier: pb::Tier) -> Self {
        Outcome {
            ok: true,
            tier,
            log: artifact.meta.log.clone(),
            lowered_names: artifact.meta.lowered_names.clone(),
            compile_micros: artifact.meta.compile_micros,
            metadata_json: artifact.meta.metadata_json.clone(),
            ptx: artifact.meta.ptx.clone(),
            artifact: Some(artifact),
        }
    }
}

/// What [`Engine::prefetch`] found, and whether the fleet cache was asked for the rest.
#[derive(Debug, Default)]
pub struct Prefetched {
    pub found: HashMap<CacheKey, Outcome>,
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
pub struct Engine {
    pub toolchains: Toolchains,
    /// The fleet cache's leases and notifications, when kilnd has `--remote`.
    pub fleet: Option<Fleet>,
    pub store: Arc<TieredStore>,
    pub metrics: Arc<Metrics>,
    pub gate: Arc<Gate>,
    /// Failed compiles, kept for `negative_ttl` so a herd asking for a broken kernel pays one
    /// compile, not one each. Never on disk; the fleet gets a failure as a short-lived negative
    /// entry (see `publish`), which releases other hosts' waiters with its log.
    negative: moka::future::Cache<CacheKey, Arc<Failure>>,
    flights: Arc<Flights<Outcome>>,
    /// Compile tasks outlive the request that started them (a compile keeps going to fill the
    /// cache when its client disconnects); shutdown waits for them here.
    pub tracker: TaskTracker,
    limits: Limits,
    /// Why recent compiles happened; see [`Engine::misses`].
    misses: MissLog,
    /// The recipes of this host's compiled keys, by kernel identity; see `crate::explain`.
    recipes: RecipeStore,
    /// Loads fresh cubins on a local GPU before they are cached; `None` without a GPU or with
    /// `validate_cubins = false`, and then `load_check_off` says which (the artifact's
    /// `validation` note).
    load_check: Option<LoadCheck>,
    load_check_off: String,
}

impl Engine {
    pub fn new(
        toolchains: Toolchains,
        fleet: Option<Fleet>,
        store: TieredStore,
        metrics: Arc<Metrics>,
        concurrency: usize,
        limits: Limits,
    ) -> Self {
        let negative = moka::future::Cache::builder().max_capacity(100_000).time_to_live(limits.negative_ttl).build();
        let misses = MissLog::new(&metrics);
        Engine {
            misses,
            recipes: RecipeStore::in_memory(),
            toolchains,
            fleet,
            store: Arc::new(store),
            metrics,
            gate: Gate::new(concurrency),
            negative,
            flights: Arc::default(),
            tracker: TaskTracker::new(),
            limits,
            load_check: None,
            load_check_off: "not validated: no GPU on this host".into(),
        }
    }

    /// Loads fresh cubins on a GPU with `load_check`, or records why none is used.
    pub fn with_load_check(self, load_check: Result<LoadCheck, String>) -> Self {
        match load_check {
            Ok(check) => Engine { load_check: Some(check), ..self },
            Err(why) => Engine { load_check: None, load_check_off: why, ..self },
        }
    }

    /// The most recent misses that led to a compile, with their reasons (and
    /// `kiln_misses_total`): for `Stats` and status pages.
    pub fn misses(&self) -> &MissLog {
        &self.misses
    }

    /// Keeps recipes in `recipes` (a store with a disk directory) instead of memory only.
    pub fn with_recipes(self, recipes: RecipeStore) -> Self {
        Engine { recipes, ..self }
    }

    pub fn recipes(&self) -> &RecipeStore {
        &self.recipes
    }

    /// Whether a compile of `key` failed within the negative TTL (for `Explain`, which must not
    /// count a lookup).
    pub fn failed_recently(&self, key: &CacheKey) -> bool {
        self.negative.contains_key(key)
    }

    /// The fleet, while its breaker lets calls through: a fleet cache believed down is skipped,
    /// not asked and counted as an error on every lookup.
    pub fn fleet_up(&self) -> Option<&Fleet> {
        self.fleet.as_ref().filter(|f| f.tier.usable())
    }

    /// Answers from the caches only: this host's, then the fleet's (one Get; its negative
    /// entries included).
    pub async fn cached(&self, key: &CacheKey) -> Option<Outcome> {
        if let Some(hit) = self.cached_here(key).await {
            return Some(hit);
        }
        let found = self.fleet_up()?.fetch(key).await?;
        Some(self.adopt(key, found).await)
    }

    /// Answers from this host's caches: the negative cache, then the tiers.
    async fn cached_here(&self, key: &CacheKey) -> Option<Outcome> {
        if let Some(failed) = self.negative_hit(key).await {
            return Some(failed);
        }
        Some(self.hit_outcome(self.store.get(key).await?))
    }

    /// A remembered failure of `key`, counted.
    async fn negative_hit(&self, key: &CacheKey) -> Option<Outcome> {
        let f = self.negative.get(key).await?;
        self.metrics.negative_hits.inc();
        Some(Outcome::failed(pb::Tier::Memory, f.log.clone(), f.compile_micros))
    }

    fn hit_outcome(&self, hit: Hit) -> Outcome {
        self.metrics.seconds_saved.inc_by(hit.artifact.meta.compile_micros as f64 / 1e6);
        Outcome::from_artifact(hit.artifact, hit.tier.to_pb())
    }

    /// Publishes a graph manifest (graph key → kernel keys) so another host can warm the whole
    /// graph by its key.
    pub async fn publish_manifest(&self, graph_key: &CacheKey, kernel_keys: &[CacheKey]) {
        let Some(fleet) = self.fleet_up() else { return };
        if let Err(e) = fleet.tier.put_manifest(graph_key, kernel_keys).await {
            tracing::warn!(%graph_key, error = %e, "could not publish the graph manifest");
        }
    }

    /// Answers as many of `keys` as the caches can, asking the fleet cache for all the local
    /// misses in one BatchGet: a fresh host warm-starts a whole graph in one round trip.
    pub async fn prefetch(&self, keys: &[CacheKey]) -> Prefetched {
        self.prefetch_where(keys, |_, _| true, Adopt::Locally).await
    }

    /// [`Engine::prefetch`], answering only artifacts that `accept` takes: a content-addressed
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
        let mut local: Vec<Option<Outcome>> = Vec::with_capacity(keys.len());
        let mut ask = Vec::new();
        for key in keys {
            let failed = self.negative_hit(key).await;
            if failed.is_none() {
                ask.push(*key);
            }
            local.push(failed);
        }
        let mut hits = self.store.get_many(&ask).await.into_iter();
        for slot in local.iter_mut() {
            if slot.is_none() {
                *slot = hits.next().flatten().map(|hit| self.hit_outcome(hit));
            }
        }
        for (key, outcome) in keys.iter().zip(local) {
            match outcome {
                Some(outcome) if outcome.artifact.as_deref().is_none_or(|a| accept(key, a)) => {
                    found.insert(*key, outcome);
                }
                Some(outcome) => {
                    // A negative hit has no artifact, so `accept` refused a memory or disk hit.
                    refused(key, TierName::from_pb(outcome.tier).unwrap_or(TierName::Memory));
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
        for (key, answer) in answers {
            match answer {
                Some(Found::Artifact(a, _)) if !accept(&key, &a) => refused(&key, TierName::Remote),
                Some(Found::Artifact(a, _)) if adopt == Adopt::No => {
                    found.insert(key, Outcome::from_artifact(Arc::from(a), pb::Tier::Remote));
                }
                Some(f) => {
                    found.insert(key, self.adopt(&key, f).await);
                }
                None => {}
            }
        }
        Prefetched { found, fleet_asked: true }
    }

    /// Looks a kernel up and compiles it on a miss, once per key however many ask at once.
    /// `fleet_asked`: this request has read the key from the fleet cache already (a prefetch's
    /// BatchGet), so it is not read again.
    pub async fn resolve(
        self: &Arc<Self>,
        graph: &str,
        kernel: &KernelJob,
        target: Target,
        priority: Priority,
        mut fleet_asked: bool,
    ) -> Outcome {
        if let Some(reason) = &kernel.refusal {
            return Outcome::failed(pb::Tier::Compiled, reason.clone(), 0);
        }
        loop {
            let hit = if fleet_asked { self.cached_here(&kernel.key).await } else { self.cached(&kernel.key).await };
            fleet_asked = true;
            if let Some(hit) = hit {
                return hit;
            }
            match self.flights.join(&kernel.key) {
                Join::Follow(rx) => {
                    if let Some(mut outcome) = Flights::follow(rx).await {
                        if outcome.ok {
                            self.metrics.seconds_saved.inc_by(outcome.compile_micros as f64 / 1e6);
                        }
                        outcome.tier = pb::Tier::Joined;
                        return outcome;
                    }
                    // The leader vanished without a result: look again, and maybe lead.
                }
                Join::Lead(leader) => {
                    let this = Arc::clone(self);
                    let kernel = kernel.clone();
                    let identity = Identity::new(graph, &kernel.id, kernel.source.kernel_name());
                    let task =
                        self.tracker.spawn(async move { this.lead(leader, identity, &kernel, target, priority).await });
                    return match task.await {
                        Ok(outcome) => outcome,
                        Err(e) => Outcome::failed(pb::Tier::Compiled, format!("compile task ended abnormally: {e}"), 0),
                    };
                }
            }
        }
    }

    /// The leader's work: check this host once more (another flight may have finished since the
    /// first look; a fleet publish since then is what the lease's acquire reports), wait for a
    /// slot, compile, publish, and hand the result to every follower.
    async fn lead(
        &self,
        leader: Leader<Outcome>,
        identity: Identity,
        kernel: &KernelJob,
        target: Target,
        priority: Priority,
    ) -> Outcome {
        if let Some(hit) = self.cached_here(&kernel.key).await {
            leader.finish(hit.clone());
            return hit;
        }
        let lease = match &self.fleet {
            None => None,
            Some(fleet) => match fleet.claim(&kernel.key).await {
                Claim::Compile(lease) => lease,
                Claim::Found(found) => {
                    let outcome = self.adopt(&kernel.key, found).await;
                    leader.finish(outcome.clone());
                    return outcome;
                }
            },
        };
        // A miss: its recipe is recorded beside the queue and the compile, so the answer waits
        // for neither the other.
        let compile = async {
            self.metrics.queue_depth.inc();
            let permit = self.gate.acquire(priority).await;
            self.metrics.queue_depth.dec();
            self.metrics.inflight.inc();
            let compiled = self.compile(&kernel.source, &target).await;
            self.metrics.inflight.dec();
            drop(permit);
            compiled
        };
        let (mut compiled, ()) = tokio::join!(compile, crate::explain::record::miss(self, identity, kernel, &target));
        let loaded = self.load_check(&mut compiled, &target).await;
        let outcome = self.publish(&kernel.key, &target, kernel.source.toolchain(), compiled, loaded).await;
        if let Some(lease) = lease {
            lease.release().await;
        }
        leader.finish(outcome.clone());
        outcome
    }

    /// Stores a new artifact in every tier: the fleet first, since its publish releases other
    /// hosts' waiters, then this host's.
    pub async fn store_everywhere(&self, key: &CacheKey, stored: Stored) {
        if let Some(fleet) = self.fleet_up() {
            fleet.publish(key, &stored.envelope).await;
        }
        self.store_locally(key, stored).await;
    }

    /// Stores an artifact in this host's tiers: memory now, since this host answers from it; the
    /// disk write ends in an fsync, so it goes on in a tracked task rather than in front of the
    /// answer (shutdown waits for it).
    async fn store_locally(&self, key: &CacheKey, stored: Stored) {
        self.store.put_where(key, stored.clone(), |t| t == TierName::Memory).await;
        let (store, key) = (Arc::clone(&self.store), *key);
        self.tracker.spawn(async move { store.put_where(&key, stored, |t| t == TierName::Disk).await });
    }

    /// Takes another host's result: an artifact goes into the local tiers, a failure into the
    /// negative cache.
    pub async fn adopt(&self, key: &CacheKey, found: Found) -> Outcome {
        match found {
            Found::Artifact(artifact, bytes) => {
                let artifact: Arc<Artifact> = Arc::from(artifact);
                let stored = Stored { envelope: Bytes::from(bytes), unpacked: Some(Arc::clone(&artifact)) };
                self.store_locally(key, stored).await;
                self.metrics.seconds_saved.inc_by(artifact.meta.compile_micros as f64 / 1e6);
                Outcome::from_artifact(artifact, pb::Tier::Remote)
            }
            Found::Failed { log, compile_micros } => {
                self.negative.insert(*key, Arc::new(Failure { log: log.clone(), compile_micros })).await;
                Outcome::failed(pb::Tier::Remote, log, compile_micros)
            }
        }
    }

    /// Runs the kernel's toolchain. Validation only passes kernels whose toolchain is available;
    /// the fallbacks here cover a Triton pool that failed to start after validation.
    async fn compile(&self, source: &KernelSource, target: &Target) -> Compiled {
        let timeout = self.limits.compile_timeout;
        let started = std::time::Instant::now();
        match source {
            KernelSource::Cuda(c) => self.toolchains.nvrtc.compile(c, target, timeout).await,
            KernelSource::Ptx(p) => match &self.toolchains.ptxas {
                Ok(ptxas) => ptxas.compile(&p.ptx, &p.options, target, timeout).await,
                Err(why) => Compiled::failed(format!("ptxas is not available: {why}"), started),
            },
            KernelSource::Triton(t) => match self.toolchains.triton().await {
                Ok(triton) => triton.compile(t, target, timeout).await,
                Err(why) => Compiled::failed(format!("Triton is not available: {why}"), started),
            },
        }
    }

    /// Loads a fresh cubin on a local GPU of its target (see [`crate::gpu::load_check`]). A cubin
    /// the driver refuses turns `compiled` into a failure; otherwise the answer is the entry
    /// points' attributes and a note saying how (or whether) the cubin was checked.
    async fn load_check(&self, compiled: &mut Compiled, target: &Target) -> (Vec<KernelAttributes>, String) {
        if !compiled.ok {
            return (Vec::new(), String::new());
        }
        let Some(load_check) = &self.load_check else { return (Vec::new(), self.load_check_off.clone()) };
        match load_check.check(target, &compiled.cubin).await {
            LoadVerdict::Loaded { attributes, note } => {
                self.metrics.load_checks.get_or_create(&ResultLabels { result: "loaded" }).inc();
                (attributes, note)
            }
            LoadVerdict::Skipped(note) => {
                self.metrics.load_checks.get_or_create(&ResultLabels { result: "skipped" }).inc();
                (Vec::new(), note)
            }
            LoadVerdict::Refused(why) => {
                self.metrics.load_checks.get_or_create(&ResultLabels { result: "refused" }).inc();
                tracing::warn!(%target, %why, "a fresh cubin failed to load on a GPU; it is not cached");
                compiled.ok = false;
                compiled.log.push_str(&format!("\n{why}\n"));
                (Vec::new(), why)
            }
        }
    }

    async fn publish(
        &self,
        key: &CacheKey,
        target: &Target,
        toolchain: Toolchain,
        c: Compiled,
        (attributes, validation): (Vec<KernelAttributes>, String),
    ) -> Outcome {
        let toolchain = toolchain.as_str();
        let labels = |outcome| CompileLabels { toolchain, outcome };
        self.metrics
            .compile_seconds
            .get_or_create(&ToolchainLabels { toolchain })
            .observe(c.compile_micros as f64 / 1e6);
        let too_large = c.cubin.len() as u64 > self.limits.max_artifact_bytes;
        if !c.ok || too_large {
            self.metrics.compiles.get_or_create(&labels("failed")).inc();
            let mut log = c.log;
            if too_large {
                log.push_str(&format!(
                    "\nartifact of {} bytes exceeds the limit of {}\n",
                    c.cubin.len(),
                    self.limits.max_artifact_bytes
                ));
            }
            let failure = Arc::new(Failure { log: log.clone(), compile_micros: c.compile_micros });
            self.negative.insert(*key, failure).await;
            if let Some(fleet) = &self.fleet {
                fleet.publish_failure(key, &log, c.compile_micros).await;
            }
            return Outcome::failed(pb::Tier::Compiled, log, c.compile_micros);
        }
        self.metrics.compiles.get_or_create(&labels("ok")).inc();
        let meta = ArtifactMeta {
            toolchain: toolchain.into(),
            target: target.to_string(),
            compile_micros: c.compile_micros,
            log: c.log,
            lowered_names: c.lowered_names,
            raw_bytes: c.cubin.len() as u64,
            metadata_json: c.metadata_json,
            ptx: c.ptx,
            attributes,
            validation,
        };
        let sealed = Bytes::from(envelope::seal(key, meta.clone(), &c.cubin));
        let artifact = Arc::new(Artifact { meta, bytes: c.cubin.into() });
        let stored = Stored { envelope: sealed, unpacked: Some(Arc::clone(&artifact)) };
        self.store_everywhere(key, stored).await;
        Outcome::from_artifact(artifact, pb::Tier::Compiled)
    }

    /// Waits up to `bound` for running compiles to finish.
    pub async fn drain(&self, bound: Duration) -> bool {
        self.tracker.close();
        tokio::time::timeout(bound, self.tracker.wait()).await.is_ok()
    }
}
