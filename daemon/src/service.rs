//! The `kiln.v1.Compiler` gRPC service: validation, jobs and the engine behind the RPCs. Request
//! errors are [`crate::error::Error`]s, made into a `Status` in one place; an engine result is
//! never an RPC error, only a kernel's answer.

use crate::cache::Cache;
use crate::config::Config;
use crate::domain::Job;
use crate::domain::Priority;
use crate::engine::Engine;
use crate::error::{Error, invalid};
use crate::gpu::GpuProbe;
use crate::jobs::{self, Jobs};
use crate::metrics::Metrics;
use crate::toolchain::set::Toolchains;
use crate::validate::{self, Context};
use crate::work::Work;
use kiln_proto::Target;
use kiln_proto::pb::{self, compiler_server::Compiler, job_event::Event};
use std::sync::Arc;
use std::time::Instant;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

/// The daemon's shared state, as the RPC handlers see it.
#[derive(Debug)]
pub struct CompilerService {
    pub engine: Arc<Engine>,
    pub cache: Arc<Cache>,
    pub toolchains: Arc<Toolchains>,
    pub metrics: Arc<Metrics>,
    pub work: Work,
    pub jobs: Arc<Jobs>,
    pub gpus: GpuProbe,
    pub default_target: Option<Target>,
    pub config: Config,
    /// torch.compile graphs answered and the jobs' reports (`kiln.v1.TorchGraphs`).
    pub torch_graphs: Arc<crate::graph::ledger::Ledger>,
}

pub use crate::jobs::EventStream;

impl CompilerService {
    /// Validates a request, starting the Triton pool first when the graph has Triton kernels
    /// (their keys need its fingerprint).
    pub(crate) async fn validate(&self, req: &pb::CompileRequest, default_priority: Priority) -> Result<Job, Error> {
        let toolchains = &self.toolchains;
        let triton_reason;
        let triton = if validate::needs_triton(req) {
            match toolchains.triton().await {
                Ok(t) => Ok(&t.fingerprint),
                Err(why) => {
                    triton_reason = why;
                    Err(triton_reason.as_str())
                }
            }
        } else {
            Err("not needed")
        };
        let nvrtc = &toolchains.nvrtc;
        let no_target_reason = if self.gpus.note.is_empty() { "no GPU was found" } else { self.gpus.note.as_str() };
        let ctx = Context {
            limits: &self.config.limits,
            default_target: self.default_target,
            no_target_reason,
            nvrtc_fingerprint: &nvrtc.fingerprint,
            nvrtc_version: &nvrtc.version,
            ptxas: toolchains.ptxas.as_ref().map(|p| &p.fingerprint).map_err(String::as_str),
            triton,
            supported_targets: &nvrtc.supported,
        };
        validate::request(req, &ctx, default_priority)
    }

    /// Validates, checks the queue bound, and registers the job.
    async fn admit(
        &self,
        req: &pb::CompileRequest,
        default_priority: Priority,
    ) -> Result<(Arc<jobs::JobRecord>, Job), Error> {
        let job = self.validate(req, default_priority).await?;
        let queued = self.engine.queued();
        if queued >= self.config.limits.max_queue {
            return Err(Error::QueueFull { queued, limit: self.config.limits.max_queue });
        }
        self.metrics.jobs.inc();
        Ok((self.jobs.create(default_priority == Priority::Background), job))
    }
}

#[tonic::async_trait]
impl Compiler for CompilerService {
    type CompileStream = EventStream;
    type WatchStream = EventStream;
    type WarmStream = ReceiverStream<Result<pb::WarmProgress, Status>>;
    type LookupStream = tokio_stream::Iter<std::vec::IntoIter<Result<pb::JobEvent, Status>>>;

    /// The caches are asked here, in the handler; a request they answer wholly (a warm start)
    /// is finished here too and answered as one ready stream. Otherwise the compiles run in a
    /// task that outlives the request, and the answer follows the job's record.
    async fn compile(&self, request: Request<pb::CompileRequest>) -> Result<Response<Self::CompileStream>, Status> {
        let batches = request.get_ref().batch_results;
        let (record, job) = self.admit(request.get_ref(), Priority::Interactive).await?;
        let begun = jobs::begin(&self.cache, &record, job).await;
        let engine = Arc::clone(&self.engine);
        if begun.answered_all() {
            jobs::complete(engine, Arc::clone(&record), begun).await;
            return Ok(Response::new(jobs::replay(&record, true, batches)));
        }
        self.work.spawn("job", jobs::complete(engine, Arc::clone(&record), begun));
        Ok(Response::new(jobs::watch(record, true, batches)))
    }

    async fn submit(&self, request: Request<pb::CompileRequest>) -> Result<Response<pb::SubmitResponse>, Status> {
        let (record, job) = self.admit(request.get_ref(), Priority::Background).await?;
        self.work.spawn("job", jobs::run(Arc::clone(&self.engine), Arc::clone(&record), job));
        Ok(Response::new(pb::SubmitResponse { job_id: record.id.clone() }))
    }

    async fn watch(&self, request: Request<pb::WatchRequest>) -> Result<Response<Self::WatchStream>, Status> {
        let id = &request.get_ref().job_id;
        if id.is_empty() {
            return Err(invalid("job_id", "empty").into());
        }
        let record = self.jobs.get(id).ok_or_else(|| Error::NoJob { id: id.clone() })?;
        Ok(Response::new(jobs::watch(record, false, request.get_ref().batch_results)))
    }

    async fn lookup(&self, request: Request<pb::CompileRequest>) -> Result<Response<Self::LookupStream>, Status> {
        let batches = request.get_ref().batch_results;
        let job = self.validate(request.get_ref(), Priority::Interactive).await?;
        let started = Instant::now();
        let wrap = |event| Ok(pb::JobEvent { job_id: String::new(), event: Some(event) });
        let cached = jobs::from_caches(&self.cache, &job, started).await;
        // The caches' answers in kernel order, with a `miss` result where they had none.
        let mut answered = cached.answered.into_iter();
        let mut missed = cached.rest.iter().peekable();
        let mut results = Vec::with_capacity(job.kernels.len());
        for (index, kernel) in job.kernels.iter().enumerate() {
            if missed.next_if_eq(&&index).is_some() {
                results.push(pb::KernelResult {
                    id: kernel.id.clone(),
                    key: kernel.key.to_hex(),
                    outcome: pb::Outcome::Miss as i32,
                    elapsed_micros: started.elapsed().as_micros() as u64,
                    toolchain: kernel.source.toolchain().as_str().into(),
                    target: job.target.to_string(),
                    ..Default::default()
                });
            } else {
                results.extend(answered.next());
            }
        }
        let mut events: Vec<Result<pb::JobEvent, Status>> = if batches {
            jobs::batches(results).map(|results| wrap(Event::Kernels(pb::KernelResults { results }))).collect()
        } else {
            results.into_iter().map(|r| wrap(Event::Kernel(r))).collect()
        };
        let graph = jobs::graph_of(&job);
        events.push(wrap(Event::Done(jobs::done(&job, &graph, cached.ok, cached.failed, cached.rest.len() as u32))));
        Ok(Response::new(tokio_stream::iter(events)))
    }

    async fn warm(&self, request: Request<pb::WarmRequest>) -> Result<Response<Self::WarmStream>, Status> {
        Ok(Response::new(crate::warm::start(Arc::clone(&self.cache), &self.work, request.get_ref())?))
    }

    async fn explain(&self, request: Request<pb::ExplainRequest>) -> Result<Response<pb::ExplainResponse>, Status> {
        Ok(Response::new(crate::explain::answer::explain(self, request.get_ref()).await?))
    }

    async fn stats(&self, _request: Request<pb::StatsRequest>) -> Result<Response<pb::StatsResponse>, Status> {
        self.cache.settle().await;
        Ok(Response::new(crate::stats::collect(self)))
    }
}
