//! The `kiln.v1.TorchGraphs` handlers: validate ([`super::validate`]), key the graph, then answer
//! it from the tiers, wait on the process or host that compiles it, hand a claim's process the
//! compile, or compile it in a torch worker, and store it everywhere. Single flight is the cache's
//! `Producer`'s, as for named blobs (this host's holders, then the fleet lease).

use super::validate;
use crate::config::Limits;
use crate::core::cache::{Decision, Grant, Producer};
use crate::core::store::Stored;
use crate::core::torch::forward::Forwarder;
use crate::core::torch::ledger::{Ledger, Outcome};
use crate::core::torch::recipe::{Explanation, Recipe};
use crate::domain;
use crate::error::{Error, invalid};
use crate::rpc::blob::entry;
use crate::rpc::blob::validate::Scope;
use crate::runtime::toolchain::torch::{Environment, Settings, TorchWorkers};
use bytes::Bytes;
use kiln_proto::pb::{self, BlobFile, Tier};
use kiln_proto::{CacheKey, torch_ledger};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use tokio::sync::{OnceCell, mpsc};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

/// The blob namespace graphs are stored under.
pub const NAMESPACE: &str = "torch-graph";
/// How often that wait looks for a claim.
const CLAIM_POLL: Duration = Duration::from_millis(25);
/// The files of a stored graph.
const ARTIFACTS_FILE: &str = "artifacts";
const MICROS_FILE: &str = "compile_micros";

#[derive(Debug, Clone)]
pub struct GraphService(pub Arc<GraphState>);

#[derive(Debug)]
pub struct GraphState {
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
    workers: OnceCell<TorchWorkers>,
    /// The keys granted to processes' ClaimTorchGraph streams, open now: the only keys
    /// PublishTorchGraph takes.
    claims: Mutex<HashMap<CacheKey, Claim>>,
}

/// An open claim: who compiles the graph in its own process, and why no tier held it.
#[derive(Debug)]
struct Claim {
    job: String,
    name: String,
    why: Option<Explanation>,
}

/// How a request starts: with its answer, or (a claim) with the compile handed to its process.
enum Start {
    Answer(pb::TorchGraphReply),
    CompileHere(Box<Handover>),
}

/// A compile handed to a process, with its grant (none where the request waited past its bound),
/// kept while its stream is open.
struct Handover {
    key: CacheKey,
    claim: Claim,
    timeout: Duration,
    grant: Option<Grant>,
}

impl GraphState {
    pub fn new(
        producer: Arc<Producer>,
        ledger: Arc<Ledger>,
        settings: Settings,
        gpus: String,
        limits: &Limits,
    ) -> Self {
        GraphState {
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

    /// The pool, started on first use; a failed start is retried by the next request.
    async fn workers(&self) -> Result<&TorchWorkers, Error> {
        self.workers.get_or_try_init(|| TorchWorkers::start(&self.settings)).await.map_err(|reason| {
            Error::TorchUnavailable {
                reason: format!("{reason} (set KILN_PYTHON to an interpreter with torch installed)"),
            }
        })
    }

    /// Starts the pool in the background unless it is up; whether it was up, and its torch.
    pub fn warm(self: &Arc<Self>) -> Option<String> {
        if let Some(torch) = self.workers_up() {
            return Some(torch);
        }
        let state = Arc::clone(self);
        tokio::spawn(async move {
            if let Err(e) = state.workers().await {
                tracing::warn!(error = %e, "the torch workers did not start");
            }
        });
        None
    }

    /// The workers' torch version when they are up, without starting them.
    pub fn workers_up(&self) -> Option<String> {
        self.workers.get().map(|workers| workers.environment.torch.clone())
    }

    /// The stored key of a payload, under this environment and these GPUs.
    fn key(&self, environment: &Environment, payload: &[u8]) -> (Scope, CacheKey) {
        let scope = Scope { namespace: NAMESPACE.into(), tool_version: environment.torch.clone() };
        let mut caller = Vec::with_capacity(96);
        caller.extend_from_slice(environment.identity().as_bytes());
        caller.extend_from_slice(blake3::hash(self.gpus.as_bytes()).as_bytes());
        caller.extend_from_slice(blake3::hash(payload).as_bytes());
        let key = scope.key(&caller);
        (scope, key)
    }

    /// The workers, when they run `environment`; the refusal otherwise (counted).
    async fn workers_for(&self, environment: &Environment) -> Result<&TorchWorkers, Error> {
        let workers = self.workers().await.inspect_err(|_| self.ledger.count(Outcome::Refused))?;
        if let Some((field, client, workers)) = environment.difference(&workers.environment) {
            self.ledger.count(Outcome::Refused);
            return Err(Error::TorchMismatch { field, client, workers });
        }
        Ok(workers)
    }

    /// The workers for a request that must compile: a refusal is a graph event too.
    async fn workers_to_compile(
        &self,
        environment: &Environment,
        request: &pb::TorchGraphRequest,
        key: &CacheKey,
    ) -> Result<&TorchWorkers, Error> {
        self.workers_for(environment).await.inspect_err(|e| {
            self.ledger.event(&request.job, &request.name, &key.to_hex(), "refused", e.to_string());
        })
    }

    async fn compile(self: &Arc<Self>, request: pb::TorchGraphRequest) -> Result<pb::TorchGraphReply, Error> {
        match self.start(request, false).await? {
            Start::Answer(reply) => Ok(reply),
            Start::CompileHere(_) => unreachable!("only a claim is handed its compile"),
        }
    }

    /// Answers a request from the tiers, by waiting on whoever compiles it, or by compiling it in
    /// a worker; a claim (`here`) whose graph nobody has is handed the compile instead.
    async fn start(self: &Arc<Self>, mut request: pb::TorchGraphRequest, here: bool) -> Result<Start, Error> {
        validate::request(&request, self.max_payload_bytes)?;
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
    fn found(
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

    /// Waits up to `bound` for a process on this host to claim `key` (or for its answer to be
    /// stored): a rank that leaves a DDP piece to the rank it falls to claims it only where that
    /// rank does not, so that the ranks of a host split the pieces.
    async fn wait_for_claim(&self, key: &CacheKey, bound: Duration) {
        if self.producer.cache().local(key).await.is_some() {
            return;
        }
        let deadline = Instant::now() + bound;
        while Instant::now() < deadline {
            if self.producer.is_held(key) {
                return;
            }
            tokio::time::sleep(CLAIM_POLL).await;
        }
    }

    /// Runs one ClaimTorchGraph: the answer, or the grant, held until its publish lands, its
    /// compile timeout passes or the process goes away.
    async fn claim(
        self: Arc<Self>,
        request: pb::TorchGraphRequest,
        tx: mpsc::Sender<Result<pb::TorchGraphReply, Status>>,
    ) {
        // A process that prefers the workers compiles the graph itself only where none is idle.
        let idle_worker = request.prefer_workers && self.workers.get().is_some_and(|workers| workers.has_idle());
        let here = self.claims_allowed && !idle_worker;
        let started = tokio::select! {
            started = self.start(request, here) => started,
            _ = tx.closed() => return,
        };
        let handover = match started {
            Err(e) => {
                let _ = tx.send(Err(e.into())).await;
                return;
            }
            Ok(Start::Answer(reply)) => {
                let _ = tx.send(Ok(reply)).await;
                return;
            }
            Ok(Start::CompileHere(handover)) => handover,
        };
        let Handover { key, claim, timeout, mut grant } = *handover;
        let (job, name) = (claim.job.clone(), claim.name.clone());
        self.claims.lock().unwrap_or_else(PoisonError::into_inner).insert(key, claim);
        let reply = pb::TorchGraphReply {
            ok: true,
            compile_here: true,
            tier: Tier::Compiled as i32,
            key: key.to_hex(),
            ..Default::default()
        };
        if tx.send(Ok(reply)).await.is_ok() {
            let published = async {
                match grant.as_mut() {
                    Some(grant) => grant.published().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = published => {}
                _ = tx.closed() => {}
                _ = tokio::time::sleep(timeout) => {
                    tracing::warn!(%key, %job, %name, ?timeout, "a process's claim on a torch graph passed its compile timeout with no publish; released");
                }
            }
        }
        let unpublished = self.claims.lock().unwrap_or_else(PoisonError::into_inner).remove(&key);
        if let Some(claim) = unpublished {
            self.ledger.event(
                &claim.job,
                &claim.name,
                &key.to_hex(),
                "released",
                "the process compiled it and published nothing".into(),
            );
        }
        if let Some(grant) = grant {
            grant.release().await;
        }
    }

    /// Stores what a claim's process compiled, everywhere, and wakes the waiters.
    async fn publish(&self, request: pb::PublishTorchGraphRequest) -> Result<(), Error> {
        let key = validate::publish(&request, self.max_payload_bytes)?;
        let claim =
            self.claims.lock().unwrap_or_else(PoisonError::into_inner).remove(&key).ok_or(Error::NoClaim { key })?;
        let seconds = request.compile_micros as f64 / 1e6;
        self.ledger.count(Outcome::Compiled);
        let missed = claim.why.map_or_else(|| "no tier held it".to_string(), |why| why.line());
        let detail = format!("{missed}: compiled in {seconds:.1} s by the process that claimed it");
        self.ledger.event(&claim.job, &claim.name, &key.to_hex(), "compiled", detail);
        self.store(&key, request.artifacts, request.compile_micros).await;
        Ok(())
    }

    /// Stores a graph's answer in every tier and the fleet, and wakes whoever waits for it.
    async fn store(&self, key: &CacheKey, artifacts: Vec<u8>, compile_micros: u64) {
        let files = vec![
            BlobFile { name: ARTIFACTS_FILE.into(), data: artifacts },
            BlobFile { name: MICROS_FILE.into(), data: compile_micros.to_le_bytes().to_vec() },
        ];
        let (sealed, artifact) = entry::seal(key, NAMESPACE, files);
        let stored = Stored { envelope: Bytes::from(sealed), unpacked: Some(Arc::new(artifact)) };
        self.producer.cache().store_everywhere(key, stored).await;
        self.producer.published(key);
    }

    /// Compiles in a worker and stores a success everywhere (its publish releases the waiters).
    async fn produce(
        &self,
        workers: &TorchWorkers,
        key: &CacheKey,
        payload: Bytes,
        timeout: Duration,
        request: &pb::TorchGraphRequest,
        why: Option<Explanation>,
    ) -> pb::TorchGraphReply {
        let answer = workers.compile(payload, timeout).await;
        let seconds = answer.compile_micros as f64 / 1e6;
        if !answer.ok || answer.artifacts.is_empty() {
            let last = answer.log.lines().last().unwrap_or_default();
            let detail = format!("the compile failed after {seconds:.1} s: {last}");
            self.ledger.event(&request.job, &request.name, &key.to_hex(), "failed", detail);
            self.ledger.count(Outcome::Failed);
            self.producer.cache().remember_failure(key, answer.log.clone(), answer.compile_micros).await;
            self.producer.published(key);
            return failed_reply(answer.log, answer.compile_micros, key, Tier::Compiled);
        }
        self.ledger.count(Outcome::Compiled);
        let phases: Vec<String> = answer.phases.iter().map(|(step, s)| format!("{step} {s:.2} s")).collect();
        let missed = why.map_or_else(|| "no tier held it".to_string(), |why| why.line());
        let detail = format!("{missed}: compiled in {seconds:.1} s ({})", phases.join(", "));
        self.ledger.event(&request.job, &request.name, &key.to_hex(), "compiled", detail);
        self.store(key, answer.artifacts.to_vec(), answer.compile_micros).await;
        pb::TorchGraphReply {
            ok: true,
            artifacts: answer.artifacts,
            tier: Tier::Compiled as i32,
            compile_micros: answer.compile_micros,
            log: answer.log,
            key: key.to_hex(),
            compile_here: false,
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

/// Why a graph asked with `no_worker` is compiled by its own process, for the job's events and
/// the process's own fallback.
const UNSHARED: &str =
    "no tier had it, and its process cannot share its compile (its code names its GPU): compiled there, as torch would";
const BUSY: &str = "no tier had it, and another process or host was compiling it: compiled here too, as torch would, rather than waiting";

/// The answer to a `no_worker` request nobody has stored: compile it yourself, share nothing.
fn unshared_reply(why: &str) -> pb::TorchGraphReply {
    pb::TorchGraphReply {
        ok: true,
        compile_here: true,
        tier: Tier::Compiled as i32,
        log: why.into(),
        ..Default::default()
    }
}

fn failed_reply(log: String, compile_micros: u64, key: &CacheKey, tier: Tier) -> pb::TorchGraphReply {
    pb::TorchGraphReply {
        ok: false,
        artifacts: Bytes::new(),
        tier: tier as i32,
        compile_micros,
        log,
        key: key.to_hex(),
        compile_here: false,
    }
}

fn reply_of_entry(found: &pb::BlobEntry, key: &CacheKey) -> pb::TorchGraphReply {
    let file = |name: &str| found.files.iter().find(|f| f.name == name).map(|f| f.data.as_slice());
    let micros = file(MICROS_FILE).and_then(|b| b.try_into().ok()).map(u64::from_le_bytes).unwrap_or(0);
    pb::TorchGraphReply {
        ok: true,
        artifacts: Bytes::copy_from_slice(file(ARTIFACTS_FILE).unwrap_or_default()),
        tier: found.tier,
        compile_micros: micros,
        log: String::new(),
        key: key.to_hex(),
        compile_here: false,
    }
}

/// The most jobs one `TorchJobs` answer carries.
const MAX_JOBS_LISTED: u32 = 1000;

impl GraphState {
    /// Merges a report into this host's ledger and sends it on to the fleet's: the job's return,
    /// the fleet's when it answered.
    async fn report(&self, report: pb::TorchGraphReport) -> Result<pb::TorchGraphReportReply, Error> {
        validate::report(&report)?;
        let (local, costs) = self.ledger.report(&report);
        let forward = self.forward.as_ref().filter(|_| !report.job.is_empty() && !local.graphs.is_empty());
        if let Some(forward) = forward {
            match forward.send(&report.job, costs).await {
                Ok(fleet) => return Ok(pb::TorchGraphReportReply { job: Some(fleet), source: "fleet".into() }),
                Err(why) => tracing::debug!(job = %report.job, %why, "torch job account kept for the fleet"),
            }
        }
        Ok(pb::TorchGraphReportReply { job: Some(local), source: "kilnd".into() })
    }

    /// Jobs' returns: the fleet's, or this host's when the fleet is not there to ask.
    async fn jobs(&self, request: pb::TorchJobsRequest) -> Result<pb::TorchJobsReply, Error> {
        torch_ledger::check_job("job", &request.job, 0).map_err(|e| invalid(e.field, e.reason))?;
        let limit = if request.limit == 0 { MAX_JOBS_LISTED } else { request.limit.min(MAX_JOBS_LISTED) };
        let detail = match &self.forward {
            Some(forward) => match forward.list(&request.job, limit).await {
                Ok(mut reply) => {
                    let waiting = forward.waiting();
                    if waiting > 0 {
                        reply.source_detail = format!(
                            "{waiting} process accounts of this host wait to be sent (the fleet cache was unreachable)"
                        );
                    }
                    return Ok(reply);
                }
                Err(why) => format!("the fleet cache did not answer ({why}): this host's processes only"),
            },
            None => "no fleet cache (kilnd --remote): this host's processes only".to_owned(),
        };
        Ok(pb::TorchJobsReply {
            jobs: self.ledger.returns(&request.job, limit as usize),
            source: "kilnd".into(),
            source_detail: detail,
        })
    }
}

#[tonic::async_trait]
impl pb::torch_graphs_server::TorchGraphs for GraphService {
    async fn compile_torch_graph(
        &self,
        request: Request<pb::TorchGraphRequest>,
    ) -> Result<Response<pb::TorchGraphReply>, Status> {
        let state = Arc::clone(&self.0);
        // The compile goes on when the client goes away: its answer fills the caches for the next.
        let task = tokio::spawn(async move { state.compile(request.into_inner()).await });
        match task.await {
            Ok(reply) => Ok(Response::new(reply?)),
            Err(e) => Err(Error::TaskFailed { what: "graph", reason: e.to_string() }.into()),
        }
    }

    type ClaimTorchGraphStream = ReceiverStream<Result<pb::TorchGraphReply, Status>>;

    async fn claim_torch_graph(
        &self,
        request: Request<pb::TorchGraphRequest>,
    ) -> Result<Response<Self::ClaimTorchGraphStream>, Status> {
        let (tx, rx) = mpsc::channel(1);
        tokio::spawn(Arc::clone(&self.0).claim(request.into_inner(), tx));
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn publish_torch_graph(
        &self,
        request: Request<pb::PublishTorchGraphRequest>,
    ) -> Result<Response<pb::PublishTorchGraphReply>, Status> {
        self.0.publish(request.into_inner()).await?;
        Ok(Response::new(pb::PublishTorchGraphReply {}))
    }

    async fn report_torch_graphs(
        &self,
        request: Request<pb::TorchGraphReport>,
    ) -> Result<Response<pb::TorchGraphReportReply>, Status> {
        Ok(Response::new(self.0.report(request.into_inner()).await?))
    }

    async fn torch_jobs(&self, request: Request<pb::TorchJobsRequest>) -> Result<Response<pb::TorchJobsReply>, Status> {
        Ok(Response::new(self.0.jobs(request.into_inner()).await?))
    }

    async fn warm_torch_workers(
        &self,
        request: Request<pb::WarmTorchWorkersRequest>,
    ) -> Result<Response<pb::WarmTorchWorkersReply>, Status> {
        let torch_version = if request.into_inner().ask_only { self.0.workers_up() } else { self.0.warm() };
        Ok(Response::new(pb::WarmTorchWorkersReply {
            ready: torch_version.is_some(),
            torch_version: torch_version.unwrap_or_default(),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> pb::TorchGraphRequest {
        pb::TorchGraphRequest { torch_version: "2.11.0".into(), payload: vec![1], ..Default::default() }
    }

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
