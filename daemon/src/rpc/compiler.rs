//! The `kiln.v1.Compiler` gRPC service: validation, jobs and the engine behind the RPCs. Request
//! errors are [`crate::error::Error`]s, made into a `Status` in one place; an engine result is
//! never an RPC error, only a kernel's answer.

use crate::domain::{Job, Priority};
use crate::error::{Error, invalid};
use crate::rpc::jobs;
use crate::rpc::state::State;
use kiln_proto::pb::{self, compiler_server::Compiler, job_event::Event};
use std::sync::Arc;
use std::time::Instant;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

/// The `Compiler` handlers, over the daemon's [`State`].
#[derive(Debug)]
pub struct CompilerService(pub Arc<State>);

pub use crate::rpc::jobs::EventStream;

impl CompilerService {
    /// Validates, checks the queue bound, and registers the job.
    async fn admit(
        &self,
        req: &pb::CompileRequest,
        default_priority: Priority,
    ) -> Result<(Arc<jobs::JobRecord>, Job), Error> {
        let state = &self.0;
        let job = state.validate(req, default_priority).await?;
        let queued = state.engine.queued();
        if queued >= state.config.limits.max_queue {
            return Err(Error::QueueFull { queued, limit: state.config.limits.max_queue });
        }
        state.metrics.jobs.inc();
        Ok((state.jobs.create(default_priority == Priority::Background), job))
    }
}

#[tonic::async_trait]
impl Compiler for CompilerService {
    type CompileStream = EventStream;
    type WatchStream = EventStream;
    type WarmStream = ReceiverStream<Result<pb::WarmProgress, Status>>;
    type LookupStream = tokio_stream::Iter<std::vec::IntoIter<Result<pb::JobEvent, Status>>>;
    type AuditStream = ReceiverStream<Result<pb::AuditResult, Status>>;

    /// The caches are asked here, in the handler; a request they answer wholly (a warm start)
    /// is finished here too and answered as one ready stream. Otherwise the compiles run in a
    /// task that outlives the request, and the answer follows the job's record.
    async fn compile(&self, request: Request<pb::CompileRequest>) -> Result<Response<Self::CompileStream>, Status> {
        let batches = request.get_ref().batch_results;
        let (record, job) = self.admit(request.get_ref(), Priority::Interactive).await?;
        let begun = jobs::begin(&self.0.cache, &record, job).await;
        let engine = Arc::clone(&self.0.engine);
        if begun.answered_all() {
            jobs::complete(engine, Arc::clone(&record), begun).await;
            return Ok(Response::new(jobs::replay(&record, true, batches)));
        }
        self.0.work.spawn("job", jobs::complete(engine, Arc::clone(&record), begun));
        Ok(Response::new(jobs::watch(record, true, batches)))
    }

    async fn submit(&self, request: Request<pb::CompileRequest>) -> Result<Response<pb::SubmitResponse>, Status> {
        let (record, job) = self.admit(request.get_ref(), Priority::Background).await?;
        self.0.work.spawn("job", jobs::run(Arc::clone(&self.0.engine), Arc::clone(&record), job));
        Ok(Response::new(pb::SubmitResponse { job_id: record.id.clone() }))
    }

    async fn watch(&self, request: Request<pb::WatchRequest>) -> Result<Response<Self::WatchStream>, Status> {
        let id = &request.get_ref().job_id;
        if id.is_empty() {
            return Err(invalid("job_id", "empty").into());
        }
        let record = self.0.jobs.get(id).ok_or_else(|| Error::NoJob { id: id.clone() })?;
        Ok(Response::new(jobs::watch(record, false, request.get_ref().batch_results)))
    }

    async fn lookup(&self, request: Request<pb::CompileRequest>) -> Result<Response<Self::LookupStream>, Status> {
        let batches = request.get_ref().batch_results;
        let job = self.0.validate(request.get_ref(), Priority::Interactive).await?;
        let started = Instant::now();
        let wrap = |event| Ok(pb::JobEvent { job_id: String::new(), event: Some(event) });
        let cached = jobs::from_caches(&self.0.cache, &job, started).await;
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
        Ok(Response::new(crate::rpc::warm::start(Arc::clone(&self.0.cache), &self.0.work, request.get_ref())?))
    }

    async fn explain(&self, request: Request<pb::ExplainRequest>) -> Result<Response<pb::ExplainResponse>, Status> {
        Ok(Response::new(crate::rpc::explain::explain(&self.0, request.get_ref()).await?))
    }

    async fn audit(&self, request: Request<pb::AuditRequest>) -> Result<Response<Self::AuditStream>, Status> {
        let pb::AuditRequest { graph, publisher, report_only } = request.into_inner();
        let compile = pb::CompileRequest { graph, ..Default::default() };
        let job = self.0.validate(&compile, Priority::Interactive).await?;
        Ok(Response::new(crate::core::audit::on_demand(Arc::clone(&self.0.engine), job, publisher, report_only)?))
    }

    async fn list_quarantine(
        &self,
        request: Request<pb::QuarantineListRequest>,
    ) -> Result<Response<pb::QuarantineListResponse>, Status> {
        let answer = self
            .0
            .cache
            .list_quarantine(request.into_inner())
            .await
            .ok_or(Error::NoFleet { what: "list quarantines of" })?
            .map_err(|e| Error::Fleet { code: e.code().unwrap_or(tonic::Code::Unavailable), reason: e.to_string() })?;
        Ok(Response::new(answer))
    }

    async fn stats(&self, _request: Request<pb::StatsRequest>) -> Result<Response<pb::StatsResponse>, Status> {
        self.0.cache.settle().await;
        Ok(Response::new(crate::rpc::stats::collect(&self.0)))
    }
}
