//! Which calls a read-only token may make on kilnd's TCP listener: the policy kiln-serve's
//! [`kiln_serve::auth::TokenLayer`] checks every request against before tonic routes it.
//!
//! A read-only token may ask the caches (Lookup, GetBlobs), read the counters (Stats), the
//! fleet's quarantine records (ListQuarantine) and torch.compile jobs' returns (TorchJobs), and use
//! gRPC health and reflection; everything else needs a read-write token, because it compiles
//! (a Triton kernel is code that runs in kilnd's workers) or writes the caches. A call this list
//! does not name, a new RPC included, needs write until it is added here. Every call needs a
//! token: the listener is the network's way in. The Unix socket has no such layer: its file mode
//! is its guard.

use kiln_proto::auth::Access;

/// gRPC paths a read-only token may call.
const READ_ONLY_CALLS: &[&str] = &[
    "/kiln.v1.Compiler/Lookup",
    "/kiln.v1.Compiler/Stats",
    "/kiln.v1.Compiler/ListQuarantine",
    "/kiln.v1.Blobs/GetBlobs",
    "/kiln.v1.TorchGraphs/TorchJobs",
];

/// Services a read-only token may call in full: they read nothing of the caches.
const READ_ONLY_SERVICES: &[&str] =
    &["/grpc.health.v1.Health/", "/grpc.reflection.v1.ServerReflection/", "/grpc.reflection.v1alpha.ServerReflection/"];

/// What a call needs, by its gRPC path.
pub fn needs(path: &str) -> Option<Access> {
    if READ_ONLY_CALLS.contains(&path) || READ_ONLY_SERVICES.iter().any(|s| path.starts_with(s)) {
        Some(Access::Read)
    } else {
        Some(Access::Write)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn only_the_named_calls_are_read_only() {
        for path in [
            "/kiln.v1.Compiler/Lookup",
            "/kiln.v1.Compiler/Stats",
            "/kiln.v1.Blobs/GetBlobs",
            "/kiln.v1.TorchGraphs/TorchJobs",
            "/grpc.health.v1.Health/Check",
            "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
        ] {
            assert_eq!(needs(path), Some(Access::Read), "{path}");
        }
        for path in [
            "/kiln.v1.Compiler/Compile",
            "/kiln.v1.Compiler/Submit",
            "/kiln.v1.Compiler/Warm",
            "/kiln.v1.Blobs/PutBlob",
            "/kiln.v1.Snapshots/SaveSnapshot",
            "/kiln.v1.TorchGraphs/ReportTorchGraphs",
            "/kiln.v1.Compiler/LookupX",
            "/kiln.v1.Compiler/Lookup/",
            "/unknown",
        ] {
            assert_eq!(needs(path), Some(Access::Write), "{path}");
        }
    }
}
