//! The processes' accounts of torch.compile jobs: a report merged into this host's ledger and
//! sent on to the fleet's, and jobs' returns, the fleet's where it answers.

use super::engine::GraphEngine;
use crate::error::Error;
use kiln_proto::pb;

/// The most jobs one `TorchJobs` answer carries.
const MAX_JOBS_LISTED: u32 = 1000;

impl GraphEngine {
    /// Merges a report into this host's ledger and sends it on to the fleet's: the job's return,
    /// the fleet's when it answered.
    pub async fn report(&self, report: pb::TorchGraphReport) -> Result<pb::TorchGraphReportReply, Error> {
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
    pub async fn jobs(&self, request: pb::TorchJobsRequest) -> Result<pb::TorchJobsReply, Error> {
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
