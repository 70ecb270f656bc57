//! Job snapshots: the files of JIT cache directories (Inductor's, Triton's, vLLM's, any), saved
//! by one host of a job through kilnd and restored on the next, so a fresh host starts as warm as
//! the one that compiled. The wire protocol is `kiln.v1.Snapshots`
//! (`proto/kiln/v1/snapshot.proto`); kilnd never touches a client's paths, so everything that
//! reads or writes the directories lives here, on the client, and the Python client implements
//! the same contract.
//!
//! - [`save`]: walk the roots, hash every regular file, upload only what no tier holds, record
//!   the manifest (kilnd unions it with the stored one).
//! - [`restore`]: fetch the manifest, and per root, under a host-level lock, fetch the files that
//!   are not there yet into a staging directory beside the target, then move them in without
//!   ever overwriting a file: a whole directory by one `rename`, or file by file with
//!   `link`. A process killed at any point leaves only whole files in the target.
//! - [`show`] and [`list`]: the stored manifests.
//!
//! The modules each do one step: [`spec`] names things (roots, key parts), `walk` and `digest`
//! read the roots, `upload` sends files, `manifest` checks what kilnd sent back before any of it
//! touches a disk, `lock`, `stage`, `fetch` and `place` are the restore's steps, and `fsx` holds
//! the few file-system calls they share.

mod digest;
mod error;
mod fetch;
mod fsx;
mod lock;
mod manifest;
mod place;
mod restore;
mod save;
pub mod spec;
mod stage;
mod upload;
mod walk;

pub use error::SnapshotError;
pub use restore::{Placement, RestoreOutcome, RestoreReport, RootReport, restore};
pub use save::{SaveReport, save};
pub use spec::{Root, SnapshotId};

use crate::client::Client;
use crate::error::ClientError;
use kiln_proto::pb;

/// What a save or restore is doing, for progress bars.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Reading and hashing the roots' files (save).
    Hash,
    /// Sending the files no tier holds (save).
    Upload,
    /// Receiving and staging the files a root lacks (restore, once per root).
    Fetch,
}

/// Follows a save or restore. Called from the threads that read and write files, hence `Sync`;
/// every method defaults to doing nothing, and `()` is the observer that wants nothing.
pub trait Observer: Send + Sync {
    /// A phase starts with this much to do.
    fn phase(&self, _phase: Phase, _files: u64, _bytes: u64) {}
    /// This much more of the current phase is done.
    fn advance(&self, _files: u64, _bytes: u64) {}
}

impl Observer for () {}

/// The manifest of a job's snapshot for the daemon's host, as stored (`found = false` if none).
pub async fn show(client: &Client, id: &SnapshotId) -> Result<pb::GetSnapshotResponse, ClientError> {
    let request = pb::GetSnapshotRequest { id: Some(id.to_pb()) };
    Ok(client.snapshots().get_snapshot(request).await?.into_inner())
}

/// The snapshots saved through the fleet: every job's (`job` empty), or one job's, one per
/// environment.
pub async fn list(client: &Client, job: &str) -> Result<Vec<pb::SnapshotSummary>, ClientError> {
    let request = pb::ListSnapshotsRequest { job: job.to_owned() };
    Ok(client.snapshots().list_snapshots(request).await?.into_inner().snapshots)
}
