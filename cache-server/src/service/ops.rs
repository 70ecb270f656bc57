//! The calls by name, and what each needs: the policy kiln-serve's token layer checks before
//! tonic routes a request, and the name every request is counted under. Apart from the handlers
//! so that the policy reads as one table.

use crate::auth::Access;
use crate::metrics::Metrics;
use tonic::Code;

#[derive(Debug, Clone, Copy)]
pub(super) enum Op {
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
    Vouch,
    ReportTorchJob,
    ListTorchJobs,
}

/// Every `kiln.v1.ArtifactCache` call, for mapping a gRPC path back to its [`Op`].
pub(super) const OPS: [Op; 17] = [
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
    Op::Vouch,
    Op::ReportTorchJob,
    Op::ListTorchJobs,
];

/// The service's gRPC path prefix.
pub(super) const SERVICE_PATH: &str = "/kiln.v1.ArtifactCache/";

/// What a call needs, by its gRPC path: the policy kiln-serve's token layer checks before tonic
/// routes a request. gRPC health needs no token (an orchestrator's probe carries none, and it
/// reads nothing of the cache); an unknown call needs write.
pub fn needs(path: &str) -> Option<Access> {
    if path.starts_with("/grpc.health.v1.Health/") {
        return None;
    }
    Some(Op::from_path(path).map_or(Access::Write, Op::needs))
}

/// Counts a request the token layer refused, as [`CacheService`](super::CacheService) counts the
/// rest.
pub fn refused(metrics: &Metrics, path: &str, code: Code) {
    metrics.request(Op::from_path(path).map_or("unknown", Op::name), code);
}

impl Op {
    pub(super) fn from_path(path: &str) -> Option<Op> {
        let method = path.strip_prefix(SERVICE_PATH)?;
        OPS.into_iter().find(|op| op.name() == method)
    }

    pub(super) fn name(self) -> &'static str {
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
            Op::Vouch => "Vouch",
            Op::ReportTorchJob => "ReportTorchJob",
            Op::ListTorchJobs => "ListTorchJobs",
        }
    }

    /// Leases are writes: a read-only client holding one would stall every other host. A host
    /// report and a torch job's account write to Redis too, and a quarantine takes an entry out
    /// of service, and a vouch vets a publisher for the fleet.
    pub(super) fn needs(self) -> Access {
        match self {
            Op::Put
            | Op::PutManifest
            | Op::AcquireLease
            | Op::RenewLease
            | Op::ReleaseLease
            | Op::ReportHost
            | Op::ReportTorchJob
            | Op::Quarantine
            | Op::Vouch => Access::Write,
            _ => Access::Read,
        }
    }
}
