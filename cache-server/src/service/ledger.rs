//! The fleet's torch job ledger: ReportTorchJob takes one process's account, checked with
//! `kiln_proto::torch_ledger` and kept by `crate::store::torch_jobs`, and answers the job's
//! return; ListTorchJobs lists the jobs' returns.

use super::CacheService;
use crate::error::Error;
use crate::status::tally::now_ms;
use crate::store::torch_jobs;
use kiln_proto::pb::{TorchJobReport, TorchJobReturn, TorchJobsReply, TorchJobsRequest, TorchProcessCosts};
use kiln_proto::torch_ledger;

impl CacheService {
    pub(super) async fn report_torch_job(&self, report: TorchJobReport) -> Result<TorchJobReturn, Error> {
        let named = |e: torch_ledger::Invalid| Error::BadField { field: e.field, reason: e.reason };
        torch_ledger::check_job("job", &report.job, 1).map_err(named)?;
        let process = report.process.ok_or(Error::Missing { field: "process" })?;
        torch_ledger::check_process("process", &process).map_err(named)?;
        let now = now_ms();
        // The receiver's clock decides what is recent, as for host reports.
        let process = TorchProcessCosts { updated_unix_ms: now, ..process };
        let ret = self.store.report_torch_job(&report.job, process, now).await?;
        self.metrics.export_torch_job(&ret);
        Ok(ret)
    }

    pub(super) async fn list_torch_jobs(&self, req: TorchJobsRequest) -> Result<TorchJobsReply, Error> {
        torch_ledger::check_job("job", &req.job, 0)
            .map_err(|e| Error::BadField { field: e.field, reason: e.reason })?;
        let max = torch_jobs::MAX_JOBS as u64;
        if u64::from(req.limit) > max {
            return Err(Error::OutOfRange { field: "limit", value: req.limit.into(), min: 0, max });
        }
        let limit = if req.limit == 0 { torch_jobs::MAX_JOBS } else { req.limit as usize };
        let jobs = torch_jobs::list(self.store.redis(), &req.job, limit).await?;
        Ok(TorchJobsReply { jobs, source: "fleet".into(), source_detail: String::new() })
    }
}
