//! The host-level restore lock: `flock` on `P/.kiln-snapshot-<name>.lock` beside the target.
//! Several ranks of one job on one host restore once: the first fetches, the others wait here,
//! then find every file present and fetch nothing. `flock` dies with its holder, so a killed
//! restore never leaves the lock held.

use super::SnapshotError;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// Held until dropped (closing the file releases the lock).
#[derive(Debug)]
pub struct HostLock {
    _file: File,
}

/// The lock file of target `base` in `parent`.
pub fn lock_path(parent: &Path, base: &str) -> PathBuf {
    parent.join(format!(".kiln-snapshot-{base}.lock"))
}

impl HostLock {
    /// Blocks until the lock is held. The file is created `0o644` (less under a stricter umask)
    /// and never widened: it may be left in a shared directory, where a world-writable file is
    /// one that anybody may fill. Ranks of other users still take the lock: they open the file
    /// read-only, and `flock` needs no write access.
    pub fn acquire(parent: &Path, base: &str) -> Result<HostLock, SnapshotError> {
        let path = lock_path(parent, base);
        let file = open(&path).map_err(SnapshotError::io("opening the lock", &path))?;
        loop {
            // SAFETY: flock on a descriptor this function owns; no memory is passed.
            let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) };
            if rc == 0 {
                return Ok(HostLock { _file: file });
            }
            let err = io::Error::last_os_error();
            if err.kind() != io::ErrorKind::Interrupted {
                return Err(SnapshotError::Io { action: "locking", path, source: err });
            }
        }
    }
}

/// Opens the lock file, creating it when missing. `O_NOFOLLOW`: in a shared directory another
/// user could put a symlink at the lock's path, and the lock must not open whatever it names.
fn open(path: &Path) -> io::Result<File> {
    let created =
        File::options().read(true).write(true).create_new(true).mode(0o644).custom_flags(libc::O_NOFOLLOW).open(path);
    match created {
        Ok(file) => Ok(file),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            // flock needs no write access, so a lock file of another user's still serves.
            let existing =
                |write: bool| File::options().read(true).write(write).custom_flags(libc::O_NOFOLLOW).open(path);
            existing(true).or_else(|_| existing(false))
        }
        Err(e) => Err(e),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;
    use std::sync::mpsc;
    use std::time::Duration;

    /// This process's umask, read without changing it for long.
    fn umask() -> u32 {
        // SAFETY: umask only sets and returns the process's mask; it is set back at once.
        unsafe {
            let old = libc::umask(0o022);
            libc::umask(old);
            old as u32
        }
    }

    #[test]
    fn a_symlink_at_the_lock_path_is_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("victim");
        std::fs::write(&target, "keep").unwrap();
        std::os::unix::fs::symlink(&target, lock_path(dir.path(), "t")).unwrap();
        assert!(HostLock::acquire(dir.path(), "t").is_err(), "a planted symlink was followed");
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep");
    }

    #[test]
    fn a_second_holder_waits_until_the_first_lets_go() {
        let dir = tempfile::tempdir().unwrap();
        let first = HostLock::acquire(dir.path(), "triton").unwrap();
        let path = dir.path().join(".kiln-snapshot-triton.lock");
        assert_eq!(lock_path(dir.path(), "triton"), path);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode & 0o022, 0, "the lock file is writable by others: {mode:o}");
        assert_eq!(mode & 0o044, 0o044 & !umask(), "others cannot open the lock: {mode:o}");
        let (tx, rx) = mpsc::channel();
        let parent = dir.path().to_path_buf();
        let waiter = std::thread::spawn(move || {
            let lock = HostLock::acquire(&parent, "triton").unwrap();
            tx.send(()).unwrap();
            drop(lock);
        });
        // The waiter cannot get it while `first` is held: nothing arrives in this window.
        assert!(rx.recv_timeout(Duration::from_millis(200)).is_err(), "two holders at once");
        drop(first);
        rx.recv_timeout(Duration::from_secs(10)).expect("the waiter never got the lock");
        waiter.join().unwrap();
    }
}
