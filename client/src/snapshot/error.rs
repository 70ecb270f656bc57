//! The errors of a save or restore. A gRPC failure stays a [`ClientError`] and prints as every
//! other kiln error does (`resource exhausted: files: ...`); the rest name the path or the
//! manifest entry at fault.

use crate::error::ClientError;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// kilnd refused a call, or could not be reached.
    #[error(transparent)]
    Client(#[from] ClientError),

    /// A file-system call failed: what was being done, and where.
    #[error("{action} {}: {source}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// The caller asked for something that cannot be done (a root that is not a directory, two
    /// roots of one name); nothing was sent or written.
    #[error("{0}")]
    Usage(String),

    /// The manifest kilnd returned breaks the contract (a path with `..`, a root it does not
    /// list); nothing was written.
    #[error("the stored snapshot is invalid: {0}")]
    BadManifest(String),

    /// The runtime shut down while file work was running on its blocking pool.
    #[error("the runtime shut down before the file work finished")]
    Cancelled,
}

impl SnapshotError {
    /// An `Io` error builder for `map_err`.
    pub(crate) fn io(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> SnapshotError {
        let path = path.to_path_buf();
        move |source| SnapshotError::Io { action, path, source }
    }
}

impl From<tonic::Status> for SnapshotError {
    fn from(status: tonic::Status) -> Self {
        SnapshotError::Client(status.into())
    }
}

/// Runs blocking file work on tokio's blocking pool, so a caller on a multi-threaded runtime
/// never stalls its other tasks.
pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, SnapshotError> + Send + 'static,
) -> Result<T, SnapshotError> {
    joined(tokio::task::spawn_blocking(f).await)
}

/// The result of a finished blocking task; a panic in it is resumed here.
pub(crate) fn joined<T>(result: Result<Result<T, SnapshotError>, tokio::task::JoinError>) -> Result<T, SnapshotError> {
    match result {
        Ok(result) => result,
        Err(err) if err.is_panic() => std::panic::resume_unwind(err.into_panic()),
        Err(_) => Err(SnapshotError::Cancelled),
    }
}
