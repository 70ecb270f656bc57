//! kilnd's request errors and their one mapping to `tonic::Status`.
//!
//! Handlers and validators return [`Error`]; [`From<Error> for Status`] is the only place a gRPC
//! code is chosen, so the same failure always reads the same way to clients. A bad field is
//! [`Error::Invalid`], whose message starts with the field's path (`graph.kernels[2].cuda.options[0]:
//! ...`), which clients and tests rely on. A kernel that fails to compile is never an `Error`: it
//! is that kernel's answer.
//!
//! Reasons that are notes for a person rather than a failed request stay `String`s (why this host
//! has no ptxas or Triton, why a cubin was not loaded on a GPU, why a stored recipe book was
//! refused): they are shown in logs, `Stats` and artifacts, and never matched on or mapped to a
//! gRPC code.

use crate::domain::Toolchain;
use kiln_proto::CacheKey;
use tonic::{Code, Status};

/// Everything a kilnd RPC can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A request field that fails its check.
    #[error("{field}: {reason}")]
    Invalid { field: String, reason: String },
    /// A field asks for a toolchain this daemon cannot offer.
    #[error("{field}: the {toolchain} toolchain is not available on this daemon: {reason}")]
    ToolchainUnavailable { field: String, toolchain: Toolchain, reason: String },
    #[error("the compile queue is full ({queued} compiles waiting, limit {limit}); retry later")]
    QueueFull { queued: usize, limit: usize },
    #[error("job_id: no job {id} (finished jobs are kept 10 minutes)")]
    NoJob { id: String },
    #[error("this kilnd has no fleet cache to {what} (start it with --remote)")]
    NoFleet { what: &'static str },
    /// The fleet cache did not answer for a graph's manifest.
    #[error("reading the manifest of {graph}: {reason}")]
    ManifestUnreadable { graph: CacheKey, reason: String },
    /// A snapshot lists a file whose content no tier holds.
    #[error(
        "{field}: {file} (content {digest}) is stored neither on this host nor in the fleet cache; send it with \
         PutFiles first"
    )]
    FileNotStored { field: String, file: String, digest: String },
    /// The client's torch is not the torch workers': a graph compiled by one would not load in the
    /// other.
    #[error("{field}: the client runs {client}, kilnd's torch workers run {workers}")]
    TorchMismatch { field: &'static str, client: String, workers: String },
    /// No torch worker could be started on this host.
    #[error("no torch worker on this daemon: {reason}")]
    TorchUnavailable { reason: String },
    /// A publish for a key no open claim on this kilnd holds.
    #[error("key: no open claim on this kilnd holds {key} (it was published, or its claim ended)")]
    NoClaim { key: CacheKey },
    #[error(
        "snapshot of job {job:?} would hold {bytes} bytes in {files} files, over the limit of {limit} bytes \
         (max_snapshot_mb); nothing was saved"
    )]
    SnapshotTooLarge { job: String, bytes: u64, files: usize, limit: u64 },
    /// A call kilnd passed on to kiln-cache failed; the answer keeps kiln-cache's code.
    #[error("the fleet cache: {reason}")]
    Fleet { code: Code, reason: String },
    /// A request's own task ended without an answer (it panicked or was cancelled).
    #[error("the {what}'s task failed: {reason}")]
    TaskFailed { what: &'static str, reason: String },
}

/// A bad `field`, and why: the one way a validator reports one.
pub(crate) fn invalid(field: impl std::fmt::Display, reason: impl std::fmt::Display) -> Error {
    Error::Invalid { field: field.to_string(), reason: reason.to_string() }
}

impl Error {
    /// The gRPC code this error answers with.
    pub fn code(&self) -> Code {
        match self {
            Error::Invalid { .. } => Code::InvalidArgument,
            Error::ToolchainUnavailable { .. }
            | Error::NoFleet { .. }
            | Error::FileNotStored { .. }
            | Error::TorchMismatch { .. }
            | Error::TorchUnavailable { .. }
            | Error::NoClaim { .. } => Code::FailedPrecondition,
            Error::QueueFull { .. } | Error::SnapshotTooLarge { .. } => Code::ResourceExhausted,
            Error::NoJob { .. } => Code::NotFound,
            Error::ManifestUnreadable { .. } => Code::Unavailable,
            Error::Fleet { code, .. } => *code,
            Error::TaskFailed { .. } => Code::Internal,
        }
    }
}

impl From<Error> for Status {
    fn from(e: Error) -> Status {
        Status::new(e.code(), e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_field_is_invalid_argument_and_named_first() {
        let s = Status::from(invalid("graph.kernels[1].id", "duplicate id `a`"));
        assert_eq!(s.code(), Code::InvalidArgument);
        assert_eq!(s.message(), "graph.kernels[1].id: duplicate id `a`");
    }

    #[test]
    fn codes_follow_the_proto() {
        let unavailable =
            Error::ToolchainUnavailable { field: "f".into(), toolchain: Toolchain::Triton, reason: "r".into() };
        assert_eq!(unavailable.code(), Code::FailedPrecondition);
        assert_eq!(unavailable.to_string(), "f: the triton toolchain is not available on this daemon: r");
        assert_eq!(Error::QueueFull { queued: 3, limit: 3 }.code(), Code::ResourceExhausted);
        assert_eq!(Error::NoJob { id: "x".into() }.code(), Code::NotFound);
    }
}
