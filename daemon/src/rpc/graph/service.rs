//! The `kiln.v1.TorchGraphs` handlers: each validates its request ([`super::validate`]), naming the
//! field it refuses, and hands it to the torch graph engine ([`crate::core::torch::engine`]).

use super::validate;
use crate::core::torch::engine::GraphEngine;
use crate::error::{Error, invalid};
use kiln_proto::{pb, torch_ledger};
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

#[derive(Debug, Clone)]
pub struct GraphService(pub Arc<GraphEngine>);

#[tonic::async_trait]
impl pb::torch_graphs_server::TorchGraphs for GraphService {
    async fn compile_torch_graph(
        &self,
        request: Request<pb::TorchGraphRequest>,
    ) -> Result<Response<pb::TorchGraphReply>, Status> {
        let request = request.into_inner();
        validate::request(&request, self.0.max_payload_bytes)?;
        let engine = Arc::clone(&self.0);
        // The compile goes on when the client goes away: its answer fills the caches for the next.
        let task = tokio::spawn(async move { engine.compile(request).await });
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
        let request = request.into_inner();
        validate::request(&request, self.0.max_payload_bytes)?;
        let (tx, rx) = mpsc::channel(1);
        tokio::spawn(Arc::clone(&self.0).claim(request, tx));
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn publish_torch_graph(
        &self,
        request: Request<pb::PublishTorchGraphRequest>,
    ) -> Result<Response<pb::PublishTorchGraphReply>, Status> {
        let request = request.into_inner();
        let key = validate::publish(&request, self.0.max_payload_bytes)?;
        self.0.publish(key, request).await?;
        Ok(Response::new(pb::PublishTorchGraphReply {}))
    }

    async fn report_torch_graphs(
        &self,
        request: Request<pb::TorchGraphReport>,
    ) -> Result<Response<pb::TorchGraphReportReply>, Status> {
        let report = request.into_inner();
        validate::report(&report)?;
        Ok(Response::new(self.0.report(report).await?))
    }

    async fn torch_jobs(&self, request: Request<pb::TorchJobsRequest>) -> Result<Response<pb::TorchJobsReply>, Status> {
        let request = request.into_inner();
        torch_ledger::check_job("job", &request.job, 0).map_err(|e| invalid(e.field, e.reason))?;
        Ok(Response::new(self.0.jobs(request).await?))
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
