//! The file-system calls several snapshot steps share: durability (`fsync` of a directory, so a
//! new name survives a crash as surely as the bytes it names) and "does anything exist here".

use super::SnapshotError;
use std::fs::File;
use std::path::Path;

/// Flushes a directory's entries to disk: a created, linked or renamed name is durable only
/// once its directory is synced.
pub fn sync_dir(dir: &Path) -> Result<(), SnapshotError> {
    File::open(dir).and_then(|d| d.sync_all()).map_err(SnapshotError::io("syncing directory", dir))
}

/// Flushes every dirty page and entry of the file system that holds `path` (`syncfs`): one call
/// instead of an fsync per file when a step has written many.
pub fn sync_filesystem(path: &Path) -> Result<(), SnapshotError> {
    use std::os::fd::AsRawFd;
    let dir = File::open(path).map_err(SnapshotError::io("opening", path))?;
    // SAFETY: `dir` is an open descriptor for the duration of the call.
    if unsafe { libc::syncfs(dir.as_raw_fd()) } != 0 {
        return Err(SnapshotError::io("syncing the file system of", path)(std::io::Error::last_os_error()));
    }
    Ok(())
}

/// Whether anything, a dangling symlink included, has this name (Python's `os.path.lexists`).
/// A path under a non-directory does not exist.
pub fn lexists(path: &Path) -> bool {
    path.symlink_metadata().is_ok()
}
