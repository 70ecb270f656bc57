//! The compile engine: the path of one kernel that the caches did not answer. A single flight
//! per key on this host, then the fleet's ([`crate::core::fleet::Fleet::claim`]), a slot, the kernel's
//! toolchain, the load check, and the result handed to the [`Cache`] (this host's tiers now, the
//! fleet's just after). Everything a job compiles goes through [`Engine::resolve`]; the caches
//! themselves are `crate::core::cache`'s, and a miss's recipe is the [`Recorder`]'s.

use crate::config::Limits;
use crate::core::cache::{Cache, Claimed, ForFleet};
use crate::core::concurrency::flight::{Flights, Join, Leader};
use crate::core::concurrency::gate::Gate;
use crate::core::explain::identity::Identity;
use crate::core::explain::misses::MissLog;
use crate::core::explain::record::Recorder;
use crate::core::explain::store::RecipeStore;
use crate::core::store::Stored;
use crate::core::work::Work;
use crate::domain::{Answer, KernelJob, KernelSource, Priority};
use crate::metrics::ResultLabels;
use crate::metrics::{CompileLabels, Metrics, ToolchainLabels};
use crate::runtime::gpu::load_check::{LoadCheck, LoadVerdict};
use crate::runtime::toolchain::{Compiled, Compiler, Toolchain};
use bytes::Bytes;
use kiln_proto::envelope::{self, Artifact};
use kiln_proto::pb::{self, ArtifactMeta, KernelAttributes, KeyRecipe};
use kiln_proto::{CacheKey, Target};
use std::sync::Arc;

/// What the load check says about a fresh cubin that it did not refuse: the entry points'
/// attributes and how (or whether) the cubin was loaded, the artifact's `validation` note.
#[derive(Debug, Default)]
struct LoadReport {
    attributes: Vec<KernelAttributes>,
    note: String,
}

#[derive(Debug)]
pub struct Engine {
    /// The toolchains (`Toolchains`; a fake in the tests).
    compiler: Arc<dyn Compiler>,
    /// Where answers are looked up before a compile and stored after it.
    cache: Arc<Cache>,
    /// Why recent compiles happened, and the recipes of this host's compiled keys.
    recorder: Recorder,
    metrics: Arc<Metrics>,
    gate: Arc<Gate>,
    flights: Arc<Flights<Answer>>,
    /// Compile tasks outlive the request that started them (a compile keeps going to fill the
    /// cache when its client disconnects); shutdown waits for them here.
    work: Work,
    limits: Limits,
    /// Loads fresh cubins on a local GPU before they are cached; `None` without a GPU or with
    /// `validate_cubins = false`, and then `load_check_off` says which (the artifact's
    /// `validation` note).
    load_check: Option<LoadCheck>,
    load_check_off: String,
}

/// What an [`Engine`] is made of besides its toolchains and cache.
#[derive(Debug)]
pub struct Parts {
    /// Where the recipes of compiled keys are kept (`RecipeStore::open`, or in memory).
    pub recipes: RecipeStore,
    pub metrics: Arc<Metrics>,
    /// Compiles at once.
    pub concurrency: usize,
    pub limits: Limits,
    /// The daemon's tracked work, which shutdown drains.
    pub work: Work,
}

impl Engine {
    pub fn new(compiler: Arc<dyn Compiler>, cache: Arc<Cache>, parts: Parts) -> Self {
        let Parts { recipes, metrics, concurrency, limits, work } = parts;
        Engine {
            recorder: Recorder::new(recipes, &metrics, Arc::clone(&cache)),
            compiler,
            cache,
            metrics,
            gate: Gate::new(concurrency),
            flights: Arc::default(),
            work,
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

    /// The cache this engine answers from and stores into.
    pub fn cache(&self) -> &Arc<Cache> {
        &self.cache
    }

    /// The tracked work the engine spawns, which shutdown waits for; the audit's on-demand runs
    /// join it.
    pub fn work(&self) -> &Work {
        &self.work
    }

    /// The recipe books and recent misses this engine records.
    pub fn recorder(&self) -> &Recorder {
        &self.recorder
    }

    /// The most recent misses that led to a compile (see [`Recorder::misses`]).
    pub fn misses(&self) -> &MissLog {
        self.recorder.misses()
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
        self.compiler.compile(source, target, self.limits.compile_timeout).await
    }

    /// Compiles waiting for a slot now.
    pub fn queued(&self) -> usize {
        self.gate.queued()
    }

    /// The recipe of `source` for `target` as this host would compile it now; `None` for a
    /// toolchain that is not running.
    pub fn recipe(&self, source: &KernelSource, target: &Target) -> Option<KeyRecipe> {
        Some(self.recorder.recipe(self.compiler.build_of(source)?, source, target))
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
            let hit = if fleet_asked {
                self.cache.cached_here(&kernel.key).await
            } else {
                self.cache.cached(&kernel.key).await
            };
            fleet_asked = true;
            if let Some(hit) = hit {
                return hit;
            }
            match self.flights.join(&kernel.key) {
                Join::Follow(rx) => {
                    if let Some(answer) = Flights::follow(rx).await {
                        if answer.is_ok() {
                            self.cache.saved(answer.compile_micros());
                        }
                        return answer.joined();
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
                        Ok(answer) => answer,
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
        if let Some(hit) = self.cache.cached_here(&kernel.key).await {
            leader.finish(hit.clone());
            return hit;
        }
        let lease = match self.cache.claim_or_hit(&kernel.key).await {
            Claimed::Lease(lease) => lease,
            Claimed::Hit(answer) => {
                leader.finish(answer.clone());
                return answer;
            }
        };
        // A miss: its recipe is recorded beside the queue and the compile, so the answer waits
        // for neither the other.
        let compile = async {
            self.metrics.queue_depth.inc();
            let permit = self.gate.acquire(priority).await;
            self.metrics.queue_depth.dec();
            self.metrics.inflight.inc();
            let compiled = self.compiler.compile(&kernel.source, &target, self.limits.compile_timeout).await;
            self.metrics.inflight.dec();
            drop(permit);
            compiled
        };
        let record = async {
            // The toolchain's build (fingerprint and version) is part of the recipe; a toolchain
            // that is not running has none, and the miss goes unrecorded.
            if let Some(build) = self.compiler.build_of(&kernel.source) {
                self.recorder.miss(self.recorder.recipe(build, &kernel.source, &target), identity, kernel).await;
            }
        };
        let (compiled, ()) = tokio::join!(compile, record);
        let (compiled, loaded) = self.load_check(compiled, &target).await;
        if let Compiled::Ok(output) = &compiled {
            self.cache.settle_vetting(&kernel.key, output).await;
        }
        let (answer, for_fleet) = self.publish(&kernel.key, &target, kernel.source.toolchain(), compiled, loaded).await;
        self.cache.hand_to_fleet(kernel.key, for_fleet, lease).await;
        leader.finish(answer.clone());
        answer
    }

    /// Loads a fresh cubin on a local GPU of its target (see [`crate::runtime::gpu::load_check`]). A cubin
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
    /// [`Cache::hand_to_fleet`] sends.
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
        self.cache.store_locally(key, stored).await;
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
        self.cache.remember_failure(key, log.clone(), compile_micros).await;
        (Answer::failed(pb::Tier::Compiled, log.clone(), compile_micros), ForFleet::Failure { log, compile_micros })
    }
}

#[cfg(test)]
mod tests;
