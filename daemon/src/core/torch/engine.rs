//! The torch graph engine: what happens to a graph a process asks for. It keys the graph (the
//! client's environment, this host's GPUs, the payload), then answers it from the tiers, hands a
//! claim's process the compile, waits on whoever compiles it, or has a torch worker compile it.
//! Single flight is the cache's `Producer`'s, as for named blobs (this host's holders, then the
//! fleet lease). A request that waits for nobody (`no_worker`) is answered at once: a stored
//! answer, the claim where nobody holds one, or "compile it yourself".
//!
//! The `kiln.v1.TorchGraphs` handlers validate each request, then call here. The rest of the
//! engine: [`super::claims`] (a claim's life, from its grant to its publish or release),
//! [`super::workers`] (the torch workers and what they compile), [`super::replies`] (the replies
//! a graph gets, and a stored graph's files) and [`super::jobs`] (the processes' accounts).

use super::forward::Forwarder;
use super::ledger::{Ledger, Outcome};
use super::recipe::{Explanation, Recipe};
use super::replies::{BUSY, UNSHARED, failed_reply, reply_of_entry, unshared_reply};
use crate::config::Limits;
use crate::core::blob::{Scope, entry};
use crate::core::cache::{Decision, Grant, Producer};
use crate::domain;
use crate::error::Error;
use crate::runtime::toolchain::torch::{Environment, Settings, TorchWorkers};
use bytes::Bytes;
use kiln_proto::CacheKey;
use kiln_proto::pb;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::OnceCell;

/// The blob namespace graphs are stored under.
pub const NAMESPACE: &str = "torch-graph";

/// The torch graph engine of this host: its tiers and single flight, its ledger, its torch
/// workers and the claims open now.
#[derive(Debug)]
pub struct GraphEngine {
    /// Single flight for graphs: this host's holders, then the fleet lease, and the tiers.
    pub producer: Arc<Producer>,
    pub ledger: Arc<Ledger>,
    pub settings: Settings,
    /// This host's GPUs (names and capabilities), in every key: a graph compiled for one GPU is
    /// never served to another.
    pub gpus: String,
    pub compile_timeout: Duration,
    pub max_payload_bytes: u64,
    /// Sends each process's account on to the fleet ledger; `None` without a fleet cache.
    pub forward: Option<Arc<Forwarder>>,
    /// Whether a process may claim a cold graph and publish its own compile (`torch_claims`).
    pub claims_allowed: bool,
    pub(super) workers: OnceCell<TorchWorkers>,
    /// The keys granted to processes' ClaimTorchGraph streams, open now: the only keys
    /// PublishTorchGraph takes.
    pub(super) claims: Mutex<HashMap<CacheKey, Claim>>,
}

/// An open claim: who compiles the graph in its own process, and why no tier held it.
#[derive(Debug)]
pub(super) struct Claim {
    pub(super) job: String,
    pub(super) name: String,
    pub(super) why: Option<Explanation>,
}

/// How a request starts: with its answer, or (a claim) with the compile handed to its process.
pub(super) enum Start {
    Answer(pb::TorchGraphReply),
    CompileHere(Box<Handover>),
}

/// A compile handed to a process, with its grant (none where the request waited past its bound),
/// kept while its stream is open.
pub(super) struct Handover {
    pub(super) key: CacheKey,
    pub(super) claim: Claim,
    pub(super) timeout: Duration,
    pub(super) grant: Option<Grant>,
}

impl GraphEngine {
    pub fn new(
        producer: Arc<Producer>,
        ledger: Arc<Ledger>,
        settings: Settings,
        gpus: String,
        limits: &Limits,
    ) -> Self {
        GraphEngine {
            producer,
            ledger,
            settings,
            gpus,
            compile_timeout: limits.compile_timeout,
            max_payload_bytes: limits.max_artifact_bytes,
            forward: None,
            claims_allowed: true,
            workers: OnceCell::new(),
            claims: Mutex::new(HashMap::new()),
        }
    }

    /// The stored key of a payload, under this environment and these GPUs.
    pub(super) fn key(&self, environment: &Environment, payload: &[u8]) -> (Scope, CacheKey) {
        let scope = Scope { namespace: NAMESPACE.into(), tool_version: environment.torch.clone() };
        let mut caller = Vec::with_capacity(96);
        caller.extend_from_slice(environment.identity().as_bytes());
        caller.extend_from_slice(blake3::hash(self.gpus.as_bytes()).as_bytes());
        caller.extend_from_slice(blake3::hash(payload).as_bytes());
        let key = scope.key(&caller);
        (scope, key)
    }

    /// Answers one CompileTorchGraph, validated by its handler: it never hands over the compile.
    pub async fn compile(self: &Arc<Self>, request: pb::TorchGraphRequest) -> Result<pb::TorchGraphReply, Error> {
        match self.start(request, false).await? {
            Start::Answer(reply) => Ok(reply),
            Start::CompileHere(_) => unreachable!("only a claim is handed its compile"),
        }
    }

    /// Answers a request from the tiers, by waiting on whoever compiles it, or by compiling it in
    /// a worker; a claim (`here`) whose graph nobody has is handed the compile instead.
    pub(super) async fn start(
        self: &Arc<Self>,
        mut request: pb::TorchGraphRequest,
        here: bool,
    ) -> Result<Start, Error> {
        let timeout = match request.timeout_ms {
            0 => self.compile_timeout,
            ms => Duration::from_millis(u64::from(ms)),
        };
        // The client's environment keys the graph, so a stored answer needs no worker. A client
        // that declares only its torch is taken to run the rest of the workers' (started now);
        // its torch is checked, as every environment is, before a compile.
        let environment = match declared(&request) {
            Some(environment) => environment,
            None => {
                let workers = self.workers().await.inspect_err(|_| self.ledger.count(Outcome::Refused))?;
                Environment { torch: request.torch_version.clone(), ..workers.environment.clone() }
            }
        };
        let payload = Bytes::from(std::mem::take(&mut request.payload));
        let (scope, key) = self.key(&environment, &payload);
        let recipe = Recipe::of(&environment, &self.gpus, &payload);
        // A graph that failed within the negative TTL fails again at once: a herd asking for a
        // graph that does not compile pays one failure, not one each.
        if let Some(domain::Answer::Failed { log, compile_micros, tier }) =
            self.producer.cache().remembered_failure(&key).await
        {
            self.ledger.count(Outcome::Failed);
            return Ok(Start::Answer(failed_reply(log, compile_micros, &key, tier)));
        }
        let open = |answer: &domain::Answer| entry::open(answer.artifact()?, &scope.namespace, answer.tier());
        if request.no_worker {
            // The process compiles the graph as fast as torch would: it takes a stored answer,
            // and otherwise compiles it at once. Waiting for another's compile would add its
            // publish and the load (a rank's twin on another GPU traces it beside it), and on
            // hosts that start together each would wait on the others' lazy compiles. A claim
            // nobody else holds is granted, so that its compile is shared.
            let decided = if here {
                self.producer.decide_now(&key, open).await
            } else {
                self.producer.cache().cached(&key).await.as_ref().and_then(open).map(Decision::Found)
            };
            let why = match decided {
                Some(Decision::Found(found)) => return Ok(Start::Answer(self.found(&request, &key, recipe, &found))),
                Some(Decision::Granted(grant)) => {
                    let why = self.ledger.recipes.saw(&request.job, &request.name, &key, recipe, true);
                    let claim = Claim { job: request.job.clone(), name: request.name.clone(), why };
                    return Ok(Start::CompileHere(Box::new(Handover { key, claim, timeout, grant: Some(grant) })));
                }
                Some(Decision::Proceed(_)) | None if here => BUSY,
                Some(Decision::Proceed(_)) | None => UNSHARED,
            };
            self.ledger.event(&request.job, &request.name, &key.to_hex(), "in-process", why.into());
            return Ok(Start::Answer(unshared_reply(why)));
        }
        if request.wait_for_claim_ms > 0 {
            self.wait_for_claim(&key, Duration::from_millis(u64::from(request.wait_for_claim_ms))).await;
        }
        // A graph compile can take minutes: wait for another producer as long as one may take.
        let wait = timeout.max(self.producer.default_wait());
        let (grant, why) = match self.producer.decide(&key, wait, open).await {
            Decision::Found(found) => return Ok(Start::Answer(self.found(&request, &key, recipe, &found))),
            Decision::Proceed(reason) => {
                tracing::info!(%key, %reason, job = %request.job, "compiling a torch graph without a lease");
                (None, self.ledger.recipes.saw(&request.job, &request.name, &key, recipe, true))
            }
            Decision::Granted(grant) => {
                (Some(grant), self.ledger.recipes.saw(&request.job, &request.name, &key, recipe, true))
            }
        };
        if here {
            let claim = Claim { job: request.job.clone(), name: request.name.clone(), why };
            return Ok(Start::CompileHere(Box::new(Handover { key, claim, timeout, grant })));
        }
        let reply = match self.workers_to_compile(&environment, &request, &key).await {
            Ok(workers) => Ok(self.produce(workers, &key, payload, timeout, &request, why).await),
            Err(e) => {
                // Nothing will be published: the waiters must not wait for it.
                self.producer.published(&key);
                Err(e)
            }
        };
        if let Some(grant) = grant {
            grant.release().await;
        }
        reply.map(Start::Answer)
    }

    /// The reply for a graph found stored, counted as a hit.
    pub(super) fn found(
        &self,
        request: &pb::TorchGraphRequest,
        key: &CacheKey,
        recipe: Recipe,
        found: &pb::BlobEntry,
    ) -> pb::TorchGraphReply {
        self.ledger.count(Outcome::Hit);
        self.ledger.recipes.saw(&request.job, &request.name, key, recipe, false);
        let reply = reply_of_entry(found, key);
        // The stored compile's seconds, as a kernel's hit counts its own.
        self.producer.cache().saved(reply.compile_micros);
        reply
    }

    /// Waits up to `bound` for a process on this host to claim `key`, or for another host to
    /// publish it: a rank that leaves a DDP piece to the rank or host it falls to claims it only
    /// where that one does not, so that the ranks and hosts split the pieces. Another host's
    /// claim is not seen here, only its publish: the fleet's publish watch (one stream, no
    /// polling) adopts the piece into this host's tiers the moment it lands, so it is loaded
    /// then, not at the bound.
    async fn wait_for_claim(&self, key: &CacheKey, bound: Duration) {
        if self.producer.cache().local(key).await.is_some() {
            return;
        }
        tokio::select! {
            () = self.producer.until_held(key) => {}
            _ = self.producer.cache().published_elsewhere(key) => {}
            () = tokio::time::sleep(bound) => {}
        }
    }
}

/// The environment the client declared, or None when it declared none (an older client).
fn declared(r: &pb::TorchGraphRequest) -> Option<Environment> {
    let none = r.triton_version.is_empty() && r.python_version.is_empty() && r.cuda_version.is_empty();
    (!none).then(|| Environment {
        torch: r.torch_version.clone(),
        triton: r.triton_version.clone(),
        python: r.python_version.clone(),
        cuda: r.cuda_version.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::fixtures::torch_graph_request as request;

    #[test]
    fn the_declared_environment_keys_the_graph_and_names_a_difference() {
        assert_eq!(declared(&request()), None, "an older client declares nothing");
        let env = |python: &str| Environment {
            torch: "2.11.0".into(),
            triton: "3.6.0".into(),
            python: python.into(),
            cuda: "13.0".into(),
        };
        let r = pb::TorchGraphRequest {
            triton_version: "3.6.0".into(),
            python_version: "3.12.3".into(),
            cuda_version: "13.0".into(),
            ..request()
        };
        assert_eq!(declared(&r), Some(env("3.12.3")));
        assert_ne!(env("3.12.3").identity(), env("3.11.9").identity());
        assert_eq!(
            env("3.12.3").difference(&env("3.11.9")),
            Some(("python_version", "3.12.3".to_owned(), "3.11.9".to_owned()))
        );
        assert_eq!(env("3.12.3").difference(&env("3.12.3")), None);
    }
}
