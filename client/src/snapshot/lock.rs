//! The host-level restore lock: `flock` on `P/.kiln-snapshot-<name>.lock` beside the target.
//! Several ranks of one job on one host restore once: the first fetches, the others wait here,
//! then find every file present and fetch nothing. `flock` dies with its holder, so a killed
//! restore never leaves the lock held.

use super::SnapshotError;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
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
    /// Blocks until the lock is held. The file is created `0o666` (whatever the umask), so ranks
    /// running as other users can take it too.
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

fn open(path: &Path) -> io::Result<File> {
    match File::options().read(true).write(true).create_new(true).mode(0o666).open(path) {
        Ok(file) => {
            // Only the creator widens the mode, against its umask; failure leaves a lock that
            // still works for this user.
            let _ = file.set_permissions(std::fs::Permissions::from_mode(0o666));
            Ok(file)
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            // flock needs no write access, so a lock file of another user's still serves.
            File::options().read(true).write(true).open(path).or_else(|_| File::open(path))
        }
        Err(e) => Err(e),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    #[test]
    fn a_second_holder_waits_until_the_first_lets_go() {
        let dir = tempfile::tempdir().unwrap();
        let first = HostLock::acquire(dir.path(), "triton").unwrap();
        let path = dir.path().join(".kiln-snapshot-triton.lock");
        assert_eq!(lock_path(dir.path(), "triton"), path);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o666);
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
