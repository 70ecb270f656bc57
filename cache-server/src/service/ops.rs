//! The calls by name, and what each needs: the policy kiln-serve's token layer checks before
//! tonic routes a request, and the name every request is counted under. Apart from the handlers
//! so that the policy reads as one table.

use crate::auth::Access;
use crate::metrics::Metrics;
use tonic::Code;

/// Defines [`Op`], one variant per rpc of `kiln.v1.ArtifactCache`, with [`OPS`] and
/// [`Op::name`] from the same list.
macro_rules! ops {
    ($($call:ident),* $(,)?) => {
        /// A `kiln.v1.ArtifactCache` call.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub(super) enum Op {
            $($call),*
        }

        /// Every `kiln.v1.ArtifactCache` call, for mapping a gRPC path back to its [`Op`].
        pub(super) const OPS: &[Op] = &[$(Op::$call),*];

        impl Op {
            /// The call's name, as its gRPC path and the request metrics spell it.
            pub(super) fn name(self) -> &'static str {
                match self {
                    $(Op::$call => stringify!($call)),*
                }
            }
        }
    };
}

// The calls are cache.proto's, listed by kiln-proto's build: a call added there is an `Op` here,
// routed and counted by its name, and `Op::needs` does not compile until it says what the call
// needs.
kiln_proto::artifact_cache_calls!(ops);

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
        OPS.iter().copied().find(|op| op.name() == method)
    }

    /// Leases are writes: a read-only client holding one would stall every other host. A host
    /// report and a torch job's account write to Redis too, and a quarantine takes an entry out
    /// of service, and a vouch vets a publisher for the fleet. No wildcard: a new call is
    /// decided here.
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
            Op::Get
            | Op::BatchGet
            | Op::Contains
            | Op::GetManifest
            | Op::WatchPublish
            | Op::CacheStats
            | Op::ListQuarantine
            | Op::ListTorchJobs => Access::Read,
        }
    }
}
