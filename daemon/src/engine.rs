//! The path of one kernel: refusal check, negative cache, tiers, then a single-flight compile in
//! a worker, publish, answer. Everything a job does per kernel goes through [`Engine::resolve`].

use crate::concurrency::flight::{Flights, Join, Leader};
use crate::concurrency::gate::Gate;
use crate::config::Limits;
use crate::domain::{KernelJob, KernelSource, Priority};
use crate::explain::identity::Identity;
use crate::explain::misses::MissLog;
use crate::explain::store::RecipeStore;
use crate::fleet::lease::HeldLease;
use crate::fleet::{Claim, Fleet, Found};
use crate::gpu::load_check::{LoadCheck, LoadVerdict};
use crate::metrics::ResultLabels;
use crate::metrics::{CompileLabels, Metrics, ToolchainLabels};
use crate::store::tiered::{Hit, TieredStore};
use crate::store::{Stored, TierName};
use crate::toolchain::set::Toolchains;
use crate::toolchain::{Compiled, Toolchain};
use crate::work::Work;
use bytes::Bytes;
use kiln_proto::envelope::{self, Artifact};
use kiln_proto::pb::{self, ArtifactMeta, KernelAttributes};
use kiln_proto::{CacheKey, Target};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// The answer for one kernel, and the tier that gave it.
#[derive(Debug, Clone)]
pub enum Answer {
    /// A verified artifact; its metadata holds the compile's log, lowered names, cost and PTX.
    Ok { artifact: Arc<Artifact>, tier: pb::Tier },
    /// No artifact: a failed compile (now, remembered, or another host's), or a refusal.
    Failed {
        log: String,
        /// What the failed compile cost, even when this answer was a remembered failure.
        compile_micros: u64,
        tier: pb::Tier,
    },
}

impl Answer {
    fn failed(tier: pb::Tier, log: String, compile_micros: u64) -> Self {
        Answer::Failed { log, compile_micros, tier }
    }

    fn from_artifact(artifact: Arc<Artifact>, tier: pb::Tier) -> Self {
        Answer::Ok { artifact, tier }
    }

    pub fn is_ok(&self) -> bool {
        matches!(self, Answer::Ok { .. })
    }

    pub fn tier(&self) -> pb::Tier {
        match self {
            Answer::Ok { tier, .. } | Answer::Failed { tier, .. } => *tier,
        }
    }

    /// The artifact, when the kernel has one.
    pub fn artifact(&self) -> Option<&Artifact> {
        match self {
            Answer::Ok { artifact, .. } => Some(artifact),
            Answer::Failed { .. } => None,
        }
    }

    /// What the answer cost when it was compiled, even when this answer was a hit.
    pub fn compile_micros(&self) -> u64 {
        match self {
            Answer::Ok { artifact, .. } => artifact.meta.compile_micros,
            Answer::Failed { compile_micros, .. } => *compile_micros,
        }
    }

    /// The same answer, as a follower of another request's compile gets it.
    fn joined(self) -> Self {
        match self {
            Answer::Ok { artifact, .. } => Answer::Ok { artifact, tier: pb::Tier::Joined },
            Answer::Failed { log, compile_micros, .. } => {
                Answer::Failed { log, compile_micros, tier: pb::Tier::Joined }
            }
        }
    }
}

/// What a compile leaves for the fleet cache, published after the answer's local stores.
#[derive(Debug)]
enum ForFleet {
    /// The sealed envelope of a fresh artifact.
    Artifact(Bytes),
    /// A failed compile, published as a short-lived negative entry that releases every waiter.
    Failure { log: String, compile_micros: u64 },
}

/// What [`Engine::prefetch`] found, and whether the fleet cache was asked for the rest.
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

/// What the load check says about a fresh cubin that it did not refuse: the entry points'
/// attributes and how (or whether) the cubin was loaded, the artifact's `validation` note.
#[derive(Debug, Default)]
struct LoadReport {
    attributes: Vec<KernelAttributes>,
    note: String,
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
    /// Graph manifests this daemon published to the fleet lately. A graph answered wholly from
    /// the caches does not publish its manifest again while it is here: a warm host would
    /// otherwise write to kiln-cache on every hit (thousands of writes a second under load).
    manifests: moka::sync::Cache<CacheKey, ()>,
    flights: Arc<Flights<Answer>>,
    /// Compile tasks outlive the request that started them (a compile keeps going to fill the
    /// cache when its client disconnects); shutdown waits for them here.
    pub work: Work,
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

/// How long a published manifest is not published again by a job the caches answered wholly.
/// kiln-cache slides a manifest's TTL on every read, so a graph in use stays published.
const MANIFEST_MEMORY: std::time::Duration = std::time::Duration::from_secs(600);

/// How long a compile's answer waits for its writes to the fleet cache before it goes out
/// without them. A reachable kiln-cache takes milliseconds, so the answer normally leaves after
/// the publish, and a caller that next asks another host finds the kernel there (`kiln lookup`
/// included, which never waits on a lease). A kiln-cache that does not answer (a partition: every
/// call hangs until the client's 30 s request timeout) costs the answer this much, no more; the
/// write goes on as tracked work, bounded by that timeout, and shutdown waits for it. Other hosts
/// lose nothing by the early answer: the lease is released only after the publish, so until then
/// they see it held and wait for the entry rather than compile.
pub const PUBLISH_WAIT: Duration = Duration::from_millis(500);

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
        let manifests = moka::sync::Cache::builder().max_capacity(100_000).time_to_live(MANIFEST_MEMORY).build();
        let misses = MissLog::new(&metrics);
        Engine {
            manifests,
            misses,
            recipes: RecipeStore::in_memory(),
            toolchains,
            fleet,
            store: Arc::new(store),
            metrics,
            gate: Gate::new(concurrency),
            negative,
            flights: Arc::default(),
            work: Work::default(),
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
    pub async fn cached(&self, key: &CacheKey) -> Option<Answer> {
        if let Some(hit) = self.cached_here(key).await {
            return Some(hit);
        }
        let found = self.fleet_up()?.fetch(key).await?;
        Some(self.adopt(key, found).await)
    }

    /// Answers from this host's caches: the negative cache, then the tiers.
    async fn cached_here(&self, key: &CacheKey) -> Option<Answer> {
        if let Some(failed) = self.negative_hit(key).await {
            return Some(failed);
        }
        Some(self.hit_outcome(self.store.get(key).await?))
    }

    /// A remembered failure of `key`, counted.
    async fn negative_hit(&self, key: &CacheKey) -> Option<Answer> {
        let f = self.negative.get(key).await?;
        self.metrics.negative_hits.inc();
        Some(Answer::failed(pb::Tier::Memory, f.log.clone(), f.compile_micros))
    }

    fn hit_outcome(&self, hit: Hit) -> Answer {
        self.metrics.seconds_saved.inc_by(hit.artifact.meta.compile_micros as f64 / 1e6);
        Answer::from_artifact(hit.artifact, hit.tier.to_pb())
    }

    /// Whether a finished job should publish its graph's manifest, remembering that it will. Asked
    /// on the job's path, so a warm hit that needs no write spawns nothing. `again`: the job
    /// compiled or waited for something, so the fleet may have lost the manifest (Redis restarted
    /// empty) and it is written whatever this daemon published before; otherwise a manifest
    /// published in the last [`MANIFEST_MEMORY`] is not written again. Remembered before the
    /// write, so a burst of hits on one graph sends one.
    pub fn manifest_due(&self, graph_key: &CacheKey, again: bool) -> bool {
        if self.fleet_up().is_none() || (!again && self.manifests.contains_key(graph_key)) {
            return false;
        }
        self.manifests.insert(*graph_key, ());
        true
    }

    /// Publishes a graph manifest (graph key → kernel keys) so another host can warm the whole
    /// graph by its key; after [`Engine::manifest_due`].
    pub async fn publish_manifest(&self, graph_key: &CacheKey, kernel_keys: &[CacheKey]) {
        let Some(fleet) = self.fleet_up() else { return };
        if let Err(e) = fleet.tier.put_manifest(graph_key, kernel_keys).await {
            self.manifests.invalidate(graph_key);
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
        let mut local: Vec<Option<Answer>> = Vec::with_capacity(keys.len());
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
                Some(outcome) if outcome.artifact().is_none_or(|a| accept(key, a)) => {
                    found.insert(*key, outcome);
                }
                Some(outcome) => {
                    // A negative hit has no artifact, so `accept` refused a memory or disk hit.
                    refused(key, TierName::from_pb(outcome.tier()).unwrap_or(TierName::Memory));
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
    ) -> Answer {
        if let Some(reason) = &kernel.refusal {
            return Answer::failed(pb::Tier::Compiled, reason.clone(), 0);
        }
        loop {
            let hit = if fleet_asked { self.cached_here(&kernel.key).await } else { self.cached(&kernel.key).await };
            fleet_asked = true;
            if let Some(hit) = hit {
                return hit;
            }
            match self.flights.join(&kernel.key) {
                Join::Follow(rx) => {
                    if let Some(outcome) = Flights::follow(rx).await {
                        if outcome.is_ok() {
                            self.metrics.seconds_saved.inc_by(outcome.compile_micros() as f64 / 1e6);
                        }
                        return outcome.joined();
                    }
                    // The leader vanished without a result: look again, and maybe lead.
                }
                Join::Lead(leader) => {
                    let this = Arc::clone(self);
                    let kernel = kernel.clone();
                    let identity = Identity::new(graph, &kernel.id, kernel.source.kernel_name());
                    let task = self
                        .work
                        .spawn("compile", async move { this.lead(leader, identity, &kernel, target, priority).await });
                    return match task.await {
                        Ok(outcome) => outcome,
                        Err(e) => Answer::failed(pb::Tier::Compiled, format!("compile task ended abnormally: {e}"), 0),
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
        leader: Leader<Answer>,
        identity: Identity,
        kernel: &KernelJob,
        target: Target,
        priority: Priority,
    ) -> Answer {
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
        let (compiled, ()) = tokio::join!(compile, crate::explain::record::miss(self, identity, kernel, &target));
        let (compiled, loaded) = self.load_check(compiled, &target).await;
        let (outcome, for_fleet) =
            self.publish(&kernel.key, &target, kernel.source.toolchain(), compiled, loaded).await;
        self.hand_to_fleet(kernel.key, for_fleet, lease).await;
        leader.finish(outcome.clone());
        outcome
    }

    /// Publishes a compile's result to the fleet cache and then releases its lease, in that order
    /// (another host either finds the entry or still sees the lease and waits for it), as tracked
    /// work that the answer waits for at most [`PUBLISH_WAIT`]: a leader cut off from kiln-cache
    /// answers its own client from what it just compiled instead of waiting out the fleet call.
    async fn hand_to_fleet(&self, key: CacheKey, result: ForFleet, lease: Option<HeldLease>) {
        let Some(fleet) = self.fleet.clone() else { return };
        self.write_to_fleet("fleet-publish", async move {
            match result {
                // A fleet believed down is skipped, not asked (and counted as an error) again.
                ForFleet::Artifact(envelope) if fleet.tier.usable() => fleet.publish(&key, &envelope).await,
                ForFleet::Artifact(_) => {}
                ForFleet::Failure { log, compile_micros } => fleet.publish_failure(&key, &log, compile_micros).await,
            }
            if let Some(lease) = lease {
                lease.release().await;
            }
        })
        .await;
    }

    /// Runs `write` (calls to the fleet cache) as tracked work of `kind` and waits for it at most
    /// [`PUBLISH_WAIT`]; past that it goes on by itself, and shutdown waits for it.
    pub async fn write_to_fleet(&self, kind: &'static str, write: impl Future<Output = ()> + Send + 'static) {
        let started = std::time::Instant::now();
        if tokio::time::timeout(PUBLISH_WAIT, self.work.spawn(kind, write)).await.is_err() {
            self.metrics.fleet_writes_backgrounded.inc();
            tracing::debug!(kind, waited = ?started.elapsed(), "the fleet cache is slow to answer; answering without it");
        }
    }

    /// Stores a new artifact in every tier: the fleet first, since its publish releases other
    /// hosts' waiters, then this host's. Unlike a compile's publish ([`Engine::hand_to_fleet`]),
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
    async fn store_locally(&self, key: &CacheKey, stored: Stored) {
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

    /// Takes another host's result: an artifact goes into the local tiers, a failure into the
    /// negative cache.
    pub async fn adopt(&self, key: &CacheKey, found: Found) -> Answer {
        let mut disk = Vec::new();
        let answer = self.adopt_into(key, found, &mut disk).await;
        self.write_to_disk(disk);
        answer
    }

    /// [`Engine::adopt`], leaving the disk writes in `disk` for the caller to start together.
    async fn adopt_into(&self, key: &CacheKey, found: Found, disk: &mut Vec<(CacheKey, Stored)>) -> Answer {
        match found {
            Found::Artifact(artifact, bytes) => {
                let artifact: Arc<Artifact> = Arc::from(artifact);
                let stored = Stored { envelope: Bytes::from(bytes), unpacked: Some(Arc::clone(&artifact)) };
                self.store.put_where(key, stored.clone(), |t| t == TierName::Memory).await;
                disk.push((*key, stored));
                self.metrics.seconds_saved.inc_by(artifact.meta.compile_micros as f64 / 1e6);
                Answer::from_artifact(artifact, pb::Tier::Remote)
            }
            Found::Failed { log, compile_micros } => {
                self.negative.insert(*key, Arc::new(Failure { log: log.clone(), compile_micros })).await;
                Answer::failed(pb::Tier::Remote, log, compile_micros)
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

    /// Compiles `source` for an audit: through a slot of the gate at `priority`, into no cache
    /// and no fleet.
    pub(crate) async fn compile_for_audit(
        &self,
        source: &KernelSource,
        target: &Target,
        priority: Priority,
    ) -> Compiled {
        let _permit = self.gate.acquire(priority).await;
        self.compile(source, target).await
    }

    /// Drops `key` from this host's tiers and negative cache: the fleet quarantined it.
    pub async fn forget(&self, key: &CacheKey) {
        self.negative.invalidate(key).await;
        self.store.remove(key).await;
    }

    /// Loads a fresh cubin on a local GPU of its target (see [`crate::gpu::load_check`]). A cubin
    /// the driver refuses turns `compiled` into a failure; otherwise the answer is the entry
    /// points' attributes and a note saying how (or whether) the cubin was checked.
    async fn load_check(&self, compiled: Compiled, target: &Target) -> (Compiled, LoadReport) {
        let Compiled::Ok(output) = compiled else { return (compiled, LoadReport::default()) };
        let Some(load_check) = &self.load_check else {
            return (Compiled::Ok(output), LoadReport { attributes: Vec::new(), note: self.load_check_off.clone() });
        };
        let count = |result| self.metrics.load_checks.get_or_create(&ResultLabels { result }).inc();
        match load_check.check(target, &output.cubin).await {
            LoadVerdict::Loaded { attributes, note } => {
                count("loaded");
                (Compiled::Ok(output), LoadReport { attributes, note })
            }
            LoadVerdict::Skipped(note) => {
                count("skipped");
                (Compiled::Ok(output), LoadReport { attributes: Vec::new(), note })
            }
            LoadVerdict::Refused(why) => {
                count("refused");
                tracing::warn!(%target, %why, "a fresh cubin failed to load on a GPU; it is not cached");
                let log = format!("{}\n{why}\n", output.log);
                let failed = Compiled::Failed { log, compile_micros: output.compile_micros };
                (failed, LoadReport { attributes: Vec::new(), note: why })
            }
        }
    }

    /// Stores a compile's result on this host (an artifact in memory now and on disk just after, a
    /// failure in the negative cache) and says what the fleet cache is to get, which
    /// [`Engine::hand_to_fleet`] sends.
    async fn publish(
        &self,
        key: &CacheKey,
        target: &Target,
        toolchain: Toolchain,
        compiled: Compiled,
        LoadReport { attributes, note: validation }: LoadReport,
    ) -> (Answer, ForFleet) {
        let toolchain = toolchain.as_str();
        let labels = |outcome| CompileLabels { toolchain, outcome };
        let compile_micros = compiled.compile_micros();
        self.metrics.compile_seconds.get_or_create(&ToolchainLabels { toolchain }).observe(compile_micros as f64 / 1e6);
        let max = self.limits.max_artifact_bytes;
        let c = match compiled {
            Compiled::Ok(c) if c.cubin.len() as u64 <= max => c,
            Compiled::Ok(c) => {
                let log = format!("{}\nartifact of {} bytes exceeds the limit of {max}\n", c.log, c.cubin.len());
                return self.remember_failure(key, labels("failed"), log, compile_micros).await;
            }
            Compiled::Failed { log, .. } => {
                return self.remember_failure(key, labels("failed"), log, compile_micros).await;
            }
        };
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
        let stored = Stored { envelope: sealed.clone(), unpacked: Some(Arc::clone(&artifact)) };
        self.store_locally(key, stored).await;
        (Answer::from_artifact(artifact, pb::Tier::Compiled), ForFleet::Artifact(sealed))
    }

    /// Remembers a failed compile here; the fleet gets it as a negative entry (whose publish
    /// releases its waiters with the log).
    async fn remember_failure(
        &self,
        key: &CacheKey,
        labels: CompileLabels,
        log: String,
        compile_micros: u64,
    ) -> (Answer, ForFleet) {
        self.metrics.compiles.get_or_create(&labels).inc();
        let failure = Arc::new(Failure { log: log.clone(), compile_micros });
        self.negative.insert(*key, failure).await;
        (Answer::failed(pb::Tier::Compiled, log.clone(), compile_micros), ForFleet::Failure { log, compile_micros })
    }

    /// Waits up to `bound` for running compiles, their writes and publishes to finish; on
    /// timeout, what was still running, per kind.
    pub async fn drain(&self, bound: Duration) -> Result<(), std::collections::BTreeMap<&'static str, usize>> {
        self.work.drain(bound).await
    }
}
