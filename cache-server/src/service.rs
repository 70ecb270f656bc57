//! The `kiln.v1.ArtifactCache` handlers.
//!
//! Every handler runs through [`CacheService::serve`], which checks the token, counts the request
//! by operation and code, tracks Redis health and maps the error to a `Status`, so none of that
//! can be forgotten by one handler.

mod quarantine;
mod watch;

use crate::announce::{Announcements, PublishStream};
use crate::auth::Access;
use crate::config::Limits;
use crate::conflict::{self, Judgement};
use crate::error::Error;
use crate::layout::LayoutError;
use crate::metrics::ConflictLabels;
use crate::metrics::Metrics;
use crate::status::tally::{LeaseEvent, now_ms};
use crate::status::{FleetPage, hosts};
use crate::store::{Acquired, Entry, Lookup, Refused, Store, Stored, torch_jobs};
use crate::validate;
use futures_util::{Stream, StreamExt};
use kiln_proto::CacheKey;
use kiln_proto::auth::Caller;
use kiln_proto::envelope::{self, Artifact};
use kiln_proto::pb::artifact_cache_server::ArtifactCache;
use kiln_proto::pb::{
    CacheBatchGetRequest, CacheContainsRequest, CacheContainsResponse, CacheGetRequest, CacheGetResponse,
    CachePutRequest, CachePutResponse, CacheStatsRequest, CacheStatsResponse, ConflictRecord, HostReport,
    HostReportResponse, LeaseRequest, LeaseResponse, ManifestGetRequest, ManifestGetResponse, ManifestPutRequest,
    Provenance, QuarantineListRequest, QuarantineListResponse, QuarantineRequest, QuarantineResponse, TorchJobReport,
    TorchJobReturn, TorchJobsReply, TorchJobsRequest, TorchProcessCosts, WatchPublishRequest, cache_get_response,
    cache_put_request,
};
use kiln_proto::torch_ledger;
use std::collections::HashSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tonic::{Code, Request, Response, Status};

/// Keys of one BatchGet read from Redis in one pipelined round trip ([`Store::get_many`]).
const BATCH_CHUNK: usize = 8;

/// Keys read at once: a BatchGet's two chunks in flight (the next chunk's round trip overlaps
/// this one's answers), and Contains' keys in flight. The bound (16 envelopes) keeps one huge
/// batch from holding many large envelopes in memory at once.
const BATCH_READ_AHEAD: usize = 2 * BATCH_CHUNK;

/// How long a new watch waits for the subscription to come back before answering UNAVAILABLE.
const WATCH_WAIT: Duration = Duration::from_secs(2);

/// Envelopes above this are verified on a blocking thread: decompressing one takes long enough
/// to stall other requests on the same runtime thread.
const VERIFY_INLINE_BYTES: usize = 1 << 20;

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
}

#[derive(Debug, Clone, Copy)]
enum Op {
    Get,
    BatchGet,
    Put,
    Contains,
    GetManifest,
    PutManifest,
    AcquireLease,
    RenewLease,
    ReleaseLease,
    WatchPublish,
    CacheStats,
    ReportHost,
    Quarantine,
    ListQuarantine,
    ReportTorchJob,
    ListTorchJobs,
}

/// Every `kiln.v1.ArtifactCache` call, for mapping a gRPC path back to its [`Op`].
const OPS: [Op; 16] = [
    Op::Get,
    Op::BatchGet,
    Op::Put,
    Op::Contains,
    Op::GetManifest,
    Op::PutManifest,
    Op::AcquireLease,
    Op::RenewLease,
    Op::ReleaseLease,
    Op::WatchPublish,
    Op::CacheStats,
    Op::ReportHost,
    Op::Quarantine,
    Op::ListQuarantine,
    Op::ReportTorchJob,
    Op::ListTorchJobs,
];

/// The service's gRPC path prefix.
const SERVICE_PATH: &str = "/kiln.v1.ArtifactCache/";

/// What a call needs, by its gRPC path: the policy kiln-serve's token layer checks before tonic
/// routes a request. gRPC health needs no token (an orchestrator's probe carries none, and it
/// reads nothing of the cache); an unknown call needs write.
pub fn needs(path: &str) -> Option<Access> {
    if path.starts_with("/grpc.health.v1.Health/") {
        return None;
    }
    Some(Op::from_path(path).map_or(Access::Write, Op::needs))
}

/// Counts a request the token layer refused, as [`CacheService`] counts the rest.
pub fn refused(metrics: &Metrics, path: &str, code: Code) {
    metrics.request(Op::from_path(path).map_or("unknown", Op::name), code);
}

impl Op {
    fn from_path(path: &str) -> Option<Op> {
        let method = path.strip_prefix(SERVICE_PATH)?;
        OPS.into_iter().find(|op| op.name() == method)
    }

    fn name(self) -> &'static str {
        match self {
            Op::Get => "Get",
            Op::BatchGet => "BatchGet",
            Op::Put => "Put",
            Op::Contains => "Contains",
            Op::GetManifest => "GetManifest",
            Op::PutManifest => "PutManifest",
            Op::AcquireLease => "AcquireLease",
            Op::RenewLease => "RenewLease",
            Op::ReleaseLease => "ReleaseLease",
            Op::WatchPublish => "WatchPublish",
            Op::CacheStats => "CacheStats",
            Op::ReportHost => "ReportHost",
            Op::Quarantine => "Quarantine",
            Op::ListQuarantine => "ListQuarantine",
            Op::ReportTorchJob => "ReportTorchJob",
            Op::ListTorchJobs => "ListTorchJobs",
        }
    }

    /// Leases are writes: a read-only client holding one would stall every other host. A host
    /// report and a torch job's account write to Redis too, and a quarantine takes an entry out
    /// of service.
    fn needs(self) -> Access {
        match self {
            Op::Put
            | Op::PutManifest
            | Op::AcquireLease
            | Op::RenewLease
            | Op::ReleaseLease
            | Op::ReportHost
            | Op::ReportTorchJob
            | Op::Quarantine => Access::Write,
            _ => Access::Read,
        }
    }
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

    async fn put(&self, req: CachePutRequest, caller: Caller) -> Result<CachePutResponse, Error> {
        let key = validate::key("key", &req.key)?;
        if !req.publisher_host.is_empty() {
            validate::host("publisher_host", &req.publisher_host)?;
        }
        match req.entry {
            Some(cache_put_request::Entry::Envelope(bytes)) => {
                let limit = self.limits.max_artifact_bytes;
                if bytes.len() as u64 > limit {
                    return Err(Error::TooLarge { field: "envelope", size: bytes.len() as u64, limit });
                }
                let (bytes, offered) = verify(bytes, key, limit).await?;
                let provenance =
                    Provenance { host: req.publisher_host, token: caller.token_id, unix_ms: now_ms(), disputed: false };
                let judge = |held: &[u8]| match envelope::open(held, &key, limit) {
                    Ok(held) => conflict::judge(&held, &offered),
                    // Verified when it was stored: damaged since, it is no evidence of anything.
                    Err(_) => Judgement::Same,
                };
                match self.store.put_envelope(&key, &bytes, &provenance, judge).await? {
                    Ok(stored) => {
                        if let Stored::Replaced(record) = &stored {
                            self.conflicting(record);
                        }
                        if stored != Stored::Refreshed {
                            self.metrics.bytes("in", bytes.len());
                            self.metrics.tally.published(&bytes);
                        }
                    }
                    Err(Refused::Quarantined(record)) => {
                        self.metrics.quarantined_puts.inc();
                        tracing::warn!(%key, publisher = %provenance.host, token = %provenance.token, "refused a put of quarantined bytes");
                        let publisher =
                            record.publisher.map(|p| format!("{} ({})", p.host, p.token)).unwrap_or_default();
                        return Err(Error::Quarantined { publisher, reporter: record.reporter_host });
                    }
                    Err(Refused::Conflict(record)) => {
                        self.conflicting(&record);
                        let held_by = record.held.as_ref().map_or_else(|| "an unrecorded writer".into(), writer);
                        return Err(Error::Conflict { key: key.to_hex(), held_by, detail: record.detail });
                    }
                }
            }
            Some(cache_put_request::Entry::Negative(entry)) => {
                if entry.log.len() > validate::MAX_NEGATIVE_LOG {
                    return Err(Error::TooLarge {
                        field: "negative.log",
                        size: entry.log.len() as u64,
                        limit: validate::MAX_NEGATIVE_LOG as u64,
                    });
                }
                let ttl = validate::negative_ttl(req.negative_ttl_ms, &self.limits)?;
                self.store.put_negative(&key, &entry, ttl).await?;
            }
            None => return Err(Error::Missing { field: "entry" }),
        }
        Ok(CachePutResponse {})
    }

    /// Counts and logs a conflicting write (see `crate::conflict`).
    fn conflicting(&self, record: &ConflictRecord) {
        let offered = record.offered.clone().unwrap_or_default();
        let outcome = if record.refused { "refused" } else { "replaced" };
        self.metrics
            .conflicting_puts
            .get_or_create(&ConflictLabels { publisher: offered.token.clone(), outcome })
            .inc();
        tracing::warn!(
            key = %record.key,
            held_by = %record.held.as_ref().map_or_else(|| "an unrecorded writer".into(), writer),
            offered_by = %writer(&offered),
            detail = %record.detail,
            refused = record.refused,
            "a put offered other bytes than the key held"
        );
    }

    async fn get_manifest(&self, req: ManifestGetRequest) -> Result<ManifestGetResponse, Error> {
        let graph_key = validate::key("graph_key", &req.graph_key)?;
        let keys = match self.store.get_manifest(&graph_key).await? {
            Lookup::Hit(keys) => Some(keys),
            Lookup::Miss => None,
            Lookup::Corrupt(why) => {
                corrupt(&self.metrics, &graph_key, &why);
                None
            }
        };
        Ok(ManifestGetResponse {
            found: keys.is_some(),
            kernel_keys: keys.unwrap_or_default().iter().map(CacheKey::to_hex).collect(),
        })
    }

    async fn put_manifest(&self, req: ManifestPutRequest) -> Result<CachePutResponse, Error> {
        let graph_key = validate::key("graph_key", &req.graph_key)?;
        let kernel_keys = validate::keys("kernel_keys", &req.kernel_keys, self.limits.max_manifest_keys)?;
        self.store.put_manifest(&graph_key, &kernel_keys).await?;
        Ok(CachePutResponse {})
    }

    async fn lease(&self, op: Op, req: LeaseRequest) -> Result<LeaseResponse, Error> {
        let key = validate::key("key", &req.key)?;
        validate::holder(&req.holder)?;
        // The status page counts leases held from these events (see `status::tally`).
        let held_until = |ttl: Duration| LeaseEvent::HeldUntil(now_ms() + ttl.as_millis() as u64);
        let (ok, present, event) = match op {
            Op::ReleaseLease => (self.store.release_lease(&key, &req.holder).await?, false, LeaseEvent::Released),
            Op::RenewLease => {
                let ttl = validate::lease_ttl(req.ttl_ms, &self.limits)?;
                (self.store.renew_lease(&key, &req.holder, ttl).await?, false, held_until(ttl))
            }
            _ => {
                let ttl = validate::lease_ttl(req.ttl_ms, &self.limits)?;
                let acquired = self.store.acquire_lease(&key, &req.holder, ttl).await?;
                (acquired == Acquired::Taken, acquired == Acquired::Present, held_until(ttl))
            }
        };
        if ok {
            self.metrics.tally.lease(key.to_hex(), event);
        }
        Ok(LeaseResponse { ok, present })
    }
}

/// Verifies an envelope against the key it is put under, off the runtime when it is large; the
/// envelope and what it holds.
async fn verify(bytes: Vec<u8>, key: CacheKey, limit: u64) -> Result<(Vec<u8>, Artifact), Error> {
    if bytes.len() <= VERIFY_INLINE_BYTES {
        let artifact = envelope::open(&bytes, &key, limit)?;
        return Ok((bytes, artifact));
    }
    let checked = tokio::task::spawn_blocking(move || envelope::open(&bytes, &key, limit).map(|a| (bytes, a)));
    match checked.await {
        Ok(result) => Ok(result?),
        // `open` does not panic on any input; if it ever does, that is a bug to surface as one.
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    }
}

/// A writer as a person reads it: `gpu-7 (tok-0123456789ab)`, or the token id alone.
fn writer(p: &Provenance) -> String {
    if p.host.is_empty() { p.token.clone() } else { format!("{} ({})", p.host, p.token) }
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

/// Accounts for a value the store refused and deleted. A missing piece is what LRU eviction of
/// one piece looks like, not damage, so it is not counted as an integrity failure.
fn corrupt(metrics: &Metrics, key: &CacheKey, why: &LayoutError) {
    if matches!(why, LayoutError::MissingPiece(_)) {
        tracing::debug!(%key, %why, "dropped a partly evicted artifact; answering a miss");
        return;
    }
    metrics.integrity_failures.inc();
    tracing::warn!(%key, %why, "deleted a damaged value; answering a miss");
}

/// Reads one key for `via` (the metric label of the RPC that asked): Get's answer.
async fn lookup(
    store: Store,
    metrics: Arc<Metrics>,
    key: CacheKey,
    via: &'static str,
) -> Result<CacheGetResponse, Error> {
    let found = store.get(&key).await;
    respond(&metrics, key, found, via)
}

/// One key's answer from what the store `found`, counted for `via`.
fn respond(
    metrics: &Metrics,
    key: CacheKey,
    found: Result<Lookup<Entry>, Error>,
    via: &'static str,
) -> Result<CacheGetResponse, Error> {
    let mut provenance = None;
    let (entry, result) = match found? {
        Lookup::Hit(Entry::Envelope(published)) => {
            metrics.bytes("out", published.envelope.len());
            metrics.tally.lookup("hit", Some(&published.envelope));
            provenance = published.provenance;
            (Some(cache_get_response::Entry::Envelope(published.envelope)), "hit")
        }
        Lookup::Hit(Entry::Negative(n)) => (Some(cache_get_response::Entry::Negative(n)), "negative"),
        Lookup::Miss => (None, "miss"),
        Lookup::Corrupt(why) => {
            corrupt(metrics, &key, &why);
            (None, "corrupt")
        }
    };
    metrics.lookup(via, result);
    if result != "hit" {
        metrics.tally.lookup(result, None);
    }
    Ok(CacheGetResponse { key: key.to_hex(), entry, provenance })
}

#[tonic::async_trait]
impl ArtifactCache for CacheService {
    async fn get(&self, request: Request<CacheGetRequest>) -> Result<Response<CacheGetResponse>, Status> {
        self.serve(Op::Get, request, |req| async move {
            let key = validate::key("key", &req.key)?;
            lookup(self.store.clone(), Arc::clone(&self.metrics), key, "get").await
        })
        .await
    }

    type BatchGetStream = BatchGetStream;

    async fn batch_get(&self, request: Request<CacheBatchGetRequest>) -> Result<Response<BatchGetStream>, Status> {
        self.serve(Op::BatchGet, request, |req| async move {
            let keys = validate::keys("keys", &req.keys, self.limits.max_batch_keys)?;
            let (store, metrics) = (self.store.clone(), Arc::clone(&self.metrics));
            let chunks: Vec<Vec<CacheKey>> = keys.chunks(BATCH_CHUNK).map(<[CacheKey]>::to_vec).collect();
            let answers = futures_util::stream::iter(chunks)
                .map(move |chunk| {
                    let (store, metrics) = (store.clone(), Arc::clone(&metrics));
                    async move {
                        let found = store.get_many(&chunk).await;
                        let answers = chunk.into_iter().zip(found).map(|(key, found)| {
                            let answer = respond(&metrics, key, found, "batch_get");
                            match &answer {
                                Ok(_) => {
                                    metrics.redis_up.set(1);
                                }
                                Err(e) => observe(&metrics, e),
                            }
                            answer.map_err(Status::from)
                        });
                        futures_util::stream::iter(answers.collect::<Vec<_>>())
                    }
                })
                .buffered(BATCH_READ_AHEAD / BATCH_CHUNK)
                .flatten();
            Ok(Box::pin(answers) as BatchGetStream)
        })
        .await
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

    async fn contains(
        &self,
        request: Request<CacheContainsRequest>,
    ) -> Result<Response<CacheContainsResponse>, Status> {
        self.serve(Op::Contains, request, |req| async move {
            let keys = validate::keys("keys", &req.keys, self.limits.max_batch_keys)?;
            // One command per key, a few in flight: a cluster's keys live in different slots.
            let store = &self.store;
            let present = futures_util::stream::iter(keys)
                .map(|key| async move { store.contains(&key).await })
                .buffered(BATCH_READ_AHEAD)
                .collect::<Vec<_>>()
                .await
                .into_iter()
                .collect::<Result<Vec<bool>, Error>>()?;
            Ok(CacheContainsResponse { present })
        })
        .await
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
        self.serve(Op::WatchPublish, request, |req| async move {
            if req.keys.is_empty() {
                return Err(Error::Missing { field: "keys" });
            }
            let keys = validate::keys("keys", &req.keys, self.limits.max_batch_keys)?;
            let keys: HashSet<CacheKey> = keys.into_iter().collect();
            let watched: Vec<CacheKey> = keys.iter().copied().collect();
            let stream =
                self.announcements.watch(keys, WATCH_WAIT, self.stop.clone(), Arc::clone(&self.metrics)).await?;
            if !req.values {
                return Ok(stream);
            }
            Ok(watch::with_values(stream, watched, self.store.clone(), Arc::clone(&self.metrics)))
        })
        .await
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
        self.serve(Op::ReportTorchJob, request, |report| async move {
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
        })
        .await
    }

    async fn list_torch_jobs(&self, request: Request<TorchJobsRequest>) -> Result<Response<TorchJobsReply>, Status> {
        self.serve(Op::ListTorchJobs, request, |req| async move {
            torch_ledger::check_job("job", &req.job, 0)
                .map_err(|e| Error::BadField { field: e.field, reason: e.reason })?;
            let max = torch_jobs::MAX_JOBS as u64;
            if u64::from(req.limit) > max {
                return Err(Error::OutOfRange { field: "limit", value: req.limit.into(), min: 0, max });
            }
            let limit = if req.limit == 0 { torch_jobs::MAX_JOBS } else { req.limit as usize };
            let jobs = torch_jobs::list(self.store.redis(), &req.job, limit).await?;
            Ok(TorchJobsReply { jobs, source: "fleet".into(), source_detail: String::new() })
        })
        .await
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
    use super::*;
    use crate::backend::{Redis, Timeouts};
    use crate::config::{Config, FileConfig, Flags};

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
        for op in OPS {
            assert_eq!(Op::from_path(&format!("{SERVICE_PATH}{}", op.name())).map(Op::name), Some(op.name()));
            assert_eq!(needs(&format!("{SERVICE_PATH}{}", op.name())), Some(op.needs()));
        }
        for write in
            ["Put", "PutManifest", "AcquireLease", "RenewLease", "ReleaseLease", "ReportHost", "ReportTorchJob"]
        {
            assert_eq!(needs(&format!("{SERVICE_PATH}{write}")), Some(Access::Write), "{write}");
        }
        for read in ["Get", "BatchGet", "Contains", "GetManifest", "WatchPublish", "CacheStats", "ListTorchJobs"] {
            assert_eq!(needs(&format!("{SERVICE_PATH}{read}")), Some(Access::Read), "{read}");
        }
        assert_eq!(needs("/grpc.health.v1.Health/Check"), None);
        assert_eq!(needs("/kiln.v1.ArtifactCache/Unknown"), Some(Access::Write));
        assert_eq!(needs("/other.Service/Get"), Some(Access::Write));
    }
}
