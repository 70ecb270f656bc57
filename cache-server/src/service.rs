//! The `kiln.v1.ArtifactCache` handlers.
//!
//! Every handler runs through [`CacheService::serve`], which counts the request by operation and
//! code, tracks Redis health and maps the error to a `Status`, so none of that can be forgotten
//! by one handler. The token is checked before, by kiln-serve's token layer with [`needs`].
//!
//! This module keeps the state the handlers share and routes each call to its handler; the
//! handlers are grouped by what they serve: `entries` (Get, BatchGet, Put, Contains and the
//! graph manifests), `leases`, `watch` (WatchPublish), `quarantine` (and the conflicts listed
//! beside it) and `ledger` (the torch jobs). `ops` names the calls and what each needs.

mod entries;
mod leases;
mod ledger;
mod ops;
mod quarantine;
mod vouch;
mod watch;

pub use ops::{needs, refused};

use crate::announce::{Announcements, PublishStream};
use crate::config::Limits;
use crate::error::Error;
use crate::metrics::Metrics;
use crate::status::{FleetPage, hosts};
use crate::store::Store;
use crate::trust::Trust;
use futures_util::Stream;
use kiln_proto::auth::Caller;
use kiln_proto::pb::artifact_cache_server::ArtifactCache;
use kiln_proto::pb::{
    CacheBatchGetRequest, CacheContainsRequest, CacheContainsResponse, CacheGetRequest, CacheGetResponse,
    CachePutRequest, CachePutResponse, CacheStatsRequest, CacheStatsResponse, HostReport, HostReportResponse,
    LeaseRequest, LeaseResponse, ManifestGetRequest, ManifestGetResponse, ManifestPutRequest, QuarantineListRequest,
    QuarantineListResponse, QuarantineRequest, QuarantineResponse, TorchJobReport, TorchJobReturn, TorchJobsReply,
    TorchJobsRequest, VouchRequest, VouchResponse, WatchPublishRequest,
};
use ops::Op;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;
use tonic::{Code, Request, Response, Status};

/// BatchGet's answers, one per key in request order.
pub type BatchGetStream = Pin<Box<dyn Stream<Item = Result<CacheGetResponse, Status>> + Send>>;

/// The state every handler shares.
#[derive(Debug)]
pub struct CacheService {
    pub store: Store,
    pub announcements: Arc<Announcements>,
    pub metrics: Arc<Metrics>,
    pub limits: Limits,
    /// Fired at shutdown: ends open watch streams, which would otherwise hold the drain open.
    pub stop: CancellationToken,
    /// The fleet status page, which stores host reports.
    pub status: Arc<FleetPage>,
    /// The fleet's vetting of publishers, and the `vet` policy on Puts.
    pub trust: Arc<Trust>,
}

impl CacheService {
    /// Runs `handler` and accounts for the outcome. The token was checked before routing
    /// (kiln-serve's token layer, with [`needs`]).
    async fn serve<T, R, Fut>(
        &self,
        op: Op,
        request: Request<T>,
        handler: impl FnOnce(T) -> Fut,
    ) -> Result<Response<R>, Status>
    where
        Fut: Future<Output = Result<R, Error>>,
    {
        let outcome = handler(request.into_inner()).await;
        match &outcome {
            Err(e) => observe(&self.metrics, e),
            // These went to Redis and came back. (BatchGet reaches Redis only in its stream,
            // which accounts for itself.)
            Ok(_) if !matches!(op, Op::CacheStats | Op::WatchPublish | Op::BatchGet) => {
                self.metrics.redis_up.set(1);
            }
            Ok(_) => {}
        }
        let code = outcome.as_ref().map_or_else(Error::code, |_| Code::Ok);
        self.metrics.request(op.name(), code);
        outcome.map(Response::new).map_err(Status::from)
    }
}

/// Who sent `request`, as the token layer found (anonymous on a server without tokens).
fn caller<T>(request: &Request<T>) -> Caller {
    request.extensions().get::<Caller>().cloned().unwrap_or_else(Caller::anonymous)
}

/// Accounts for a failed request in the Redis metrics.
fn observe(metrics: &Metrics, e: &Error) {
    if e.is_redis() {
        metrics.redis_errors.inc();
    }
    if e.is_connection() {
        metrics.redis_up.set(0);
    }
}

#[tonic::async_trait]
impl ArtifactCache for CacheService {
    async fn get(&self, request: Request<CacheGetRequest>) -> Result<Response<CacheGetResponse>, Status> {
        self.serve(Op::Get, request, |req| self.get(req)).await
    }

    type BatchGetStream = BatchGetStream;

    async fn batch_get(&self, request: Request<CacheBatchGetRequest>) -> Result<Response<BatchGetStream>, Status> {
        self.serve(Op::BatchGet, request, |req| self.batch_get(req)).await
    }

    async fn put(&self, request: Request<CachePutRequest>) -> Result<Response<CachePutResponse>, Status> {
        let caller = caller(&request);
        self.serve(Op::Put, request, |req| self.put(req, caller)).await
    }

    async fn quarantine(&self, request: Request<QuarantineRequest>) -> Result<Response<QuarantineResponse>, Status> {
        let caller = caller(&request);
        self.serve(Op::Quarantine, request, |req| self.quarantine(req, caller)).await
    }

    async fn list_quarantine(
        &self,
        request: Request<QuarantineListRequest>,
    ) -> Result<Response<QuarantineListResponse>, Status> {
        self.serve(Op::ListQuarantine, request, |req| self.list_quarantine(req)).await
    }

    async fn vouch(&self, request: Request<VouchRequest>) -> Result<Response<VouchResponse>, Status> {
        let caller = caller(&request);
        self.serve(Op::Vouch, request, |req| self.vouch(req, caller)).await
    }

    async fn contains(
        &self,
        request: Request<CacheContainsRequest>,
    ) -> Result<Response<CacheContainsResponse>, Status> {
        self.serve(Op::Contains, request, |req| self.contains(req)).await
    }

    async fn get_manifest(
        &self,
        request: Request<ManifestGetRequest>,
    ) -> Result<Response<ManifestGetResponse>, Status> {
        self.serve(Op::GetManifest, request, |req| self.get_manifest(req)).await
    }

    async fn put_manifest(&self, request: Request<ManifestPutRequest>) -> Result<Response<CachePutResponse>, Status> {
        self.serve(Op::PutManifest, request, |req| self.put_manifest(req)).await
    }

    async fn acquire_lease(&self, request: Request<LeaseRequest>) -> Result<Response<LeaseResponse>, Status> {
        self.serve(Op::AcquireLease, request, |req| self.lease(Op::AcquireLease, req)).await
    }

    async fn renew_lease(&self, request: Request<LeaseRequest>) -> Result<Response<LeaseResponse>, Status> {
        self.serve(Op::RenewLease, request, |req| self.lease(Op::RenewLease, req)).await
    }

    async fn release_lease(&self, request: Request<LeaseRequest>) -> Result<Response<LeaseResponse>, Status> {
        self.serve(Op::ReleaseLease, request, |req| self.lease(Op::ReleaseLease, req)).await
    }

    type WatchPublishStream = PublishStream;

    async fn watch_publish(&self, request: Request<WatchPublishRequest>) -> Result<Response<PublishStream>, Status> {
        self.serve(Op::WatchPublish, request, |req| self.watch_publish(req)).await
    }

    async fn report_host(&self, request: Request<HostReport>) -> Result<Response<HostReportResponse>, Status> {
        self.serve(Op::ReportHost, request, |report| async move {
            hosts::validate(&report)?;
            self.status.report(&report).await?;
            Ok(HostReportResponse { expires_in_ms: hosts::HOST_TTL.as_millis() as u64 })
        })
        .await
    }

    async fn report_torch_job(&self, request: Request<TorchJobReport>) -> Result<Response<TorchJobReturn>, Status> {
        self.serve(Op::ReportTorchJob, request, |report| self.report_torch_job(report)).await
    }

    async fn list_torch_jobs(&self, request: Request<TorchJobsRequest>) -> Result<Response<TorchJobsReply>, Status> {
        self.serve(Op::ListTorchJobs, request, |req| self.list_torch_jobs(req)).await
    }

    async fn cache_stats(&self, request: Request<CacheStatsRequest>) -> Result<Response<CacheStatsResponse>, Status> {
        self.serve(Op::CacheStats, request, |_| async move {
            Ok(CacheStatsResponse {
                redis_up: self.metrics.redis_up.get() == 1,
                requests: self.metrics.requests_all.get(),
                redis_errors: self.metrics.redis_errors.get(),
                redis_mode: self.store.mode().to_owned(),
            })
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::ops::{OPS, SERVICE_PATH};
    use super::*;
    use crate::auth::Access;
    use crate::backend::{Redis, Timeouts};
    use crate::config::{Config, FileConfig, Flags};
    use std::time::Duration;

    /// A service whose Redis (port 1) never answers: what is checked before Redis is reached
    /// answers anyway, and the rest is UNAVAILABLE. (Tokens are checked before the service, by
    /// the token layer; the end-to-end tests cover them.)
    fn service() -> CacheService {
        let timeouts = Timeouts { connect: Duration::from_millis(200), response: Duration::from_millis(200) };
        let redis = Redis::connect(&["redis://127.0.0.1:1".to_owned()], false, timeouts).unwrap();
        let status = Arc::new(FleetPage::new(redis.commands.clone()));
        let flags = Flags { insecure_no_auth: true, ..Default::default() };
        let config = Config::merge(&flags, &FileConfig::default(), None).unwrap();
        CacheService {
            store: Store::new(redis.commands, config.ttl, config.limits.max_artifact_bytes),
            announcements: Arc::new(Announcements::new()),
            metrics: Arc::new(Metrics::new()),
            limits: config.limits,
            stop: CancellationToken::new(),
            status,
            trust: Arc::new(Trust::new(config.vet, config.trusted_writers.clone())),
        }
    }

    #[tokio::test]
    async fn validation_answers_before_redis() {
        let s = service();
        let key = "ab".repeat(32);
        let get = |k: &str| Request::new(CacheGetRequest { key: k.to_owned() });
        let code = |r: Result<Response<CacheGetResponse>, Status>| r.unwrap_err().code();
        assert_eq!(code(ArtifactCache::get(&s, get("AB")).await), Code::InvalidArgument);
        assert_eq!(code(ArtifactCache::get(&s, get(&key)).await), Code::Unavailable);
        refused(&s.metrics, "/kiln.v1.ArtifactCache/Get", Code::Unauthenticated);
        refused(&s.metrics, "/kiln.v1.ArtifactCache/Put", Code::PermissionDenied);
        let text = s.metrics.render();
        for line in [
            "kiln_server_requests_total{op=\"Get\",code=\"unauthenticated\"} 1",
            "kiln_server_requests_total{op=\"Get\",code=\"invalid_argument\"} 1",
            "kiln_server_requests_total{op=\"Get\",code=\"unavailable\"} 1",
            "kiln_server_requests_total{op=\"Put\",code=\"permission_denied\"} 1",
            "kiln_server_redis_errors_total 1",
            "kiln_server_redis_up 0",
        ] {
            assert!(text.contains(line), "missing {line} in\n{text}");
        }
    }

    #[test]
    fn writes_and_leases_need_write_and_health_needs_no_token() {
        // Written out apart from `Op::needs`, by the paths a client sends: a call moved from one
        // list to the other, or a name that no longer routes, fails here.
        let writes = [
            "Put",
            "PutManifest",
            "AcquireLease",
            "RenewLease",
            "ReleaseLease",
            "ReportHost",
            "ReportTorchJob",
            "Quarantine",
            "Vouch",
        ];
        let reads = [
            "Get",
            "BatchGet",
            "Contains",
            "GetManifest",
            "WatchPublish",
            "CacheStats",
            "ListQuarantine",
            "ListTorchJobs",
        ];
        for (calls, access) in [(&writes[..], Access::Write), (&reads[..], Access::Read)] {
            for call in calls {
                let path = format!("{SERVICE_PATH}{call}");
                assert_eq!(Op::from_path(&path).map(Op::name), Some(*call), "{call} is not routed");
                assert_eq!(needs(&path), Some(access), "{call}");
            }
        }
        // The lists name every call of cache.proto once: a new call is decided here too.
        let mut listed: Vec<&str> = writes.iter().chain(&reads).copied().collect();
        listed.sort_unstable();
        let mut calls: Vec<&str> = OPS.iter().map(|op| op.name()).collect();
        calls.sort_unstable();
        assert_eq!(listed, calls);
        assert_eq!(needs("/grpc.health.v1.Health/Check"), None);
        assert_eq!(needs("/kiln.v1.ArtifactCache/Unknown"), Some(Access::Write));
        assert_eq!(needs("/other.Service/Get"), Some(Access::Write));
    }
}
