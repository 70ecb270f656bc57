//! The staging directory of a restore, `P/.kiln-restore-<name>-<pid>` beside the target: every
//! fetched file is checked against its digest and size, written there whole and fsynced, before
//! `place` moves it into the target. A restore killed at any point leaves its half-written files
//! here, never in the target; the next restore of the target removes them under the lock.

use super::manifest::FileEntry;
use super::{Observer, SnapshotError, digest, fsx};
use kiln_proto::pb;
use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

/// `.kiln-restore-<name>-`; a pid follows.
fn prefix(base: &str) -> String {
    format!(".kiln-restore-{base}-")
}

/// Removes staging directories of `base` left by killed restores. Call only under the host
/// lock: then no live restore of this target is staging. Only `<prefix><digits>` matches, so
/// the staging of a target named `a-1` is not taken for one of `a`.
pub fn remove_stale(parent: &Path, base: &str) -> Result<u64, SnapshotError> {
    let prefix = prefix(base);
    let entries = std::fs::read_dir(parent).map_err(SnapshotError::io("reading", parent))?;
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let stale = name
            .to_str()
            .and_then(|n| n.strip_prefix(&prefix))
            .is_some_and(|pid| !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()));
        if stale {
            let path = entry.path();
            match std::fs::remove_dir_all(&path) {
                Ok(()) => removed += 1,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(SnapshotError::Io { action: "removing stale staging", path, source: e }),
            }
        }
    }
    Ok(removed)
}

/// Files written and fsynced at once. An fsync waits for a journal commit, and concurrent ones
/// share a commit: on ext4, 1000 small files take about 2 s one after another and under 0.1 s
/// from 16 threads.
const WRITERS: usize = 16;

/// One content wanted: its size and every path (with mode) that holds it.
#[derive(Debug)]
struct Want {
    size: u64,
    paths: Vec<(String, u32)>,
}

/// A staging directory being filled. Dropped before it is placed, it removes itself.
#[derive(Debug)]
pub struct Staging {
    pub dir: PathBuf,
    wants: HashMap<[u8; 32], Want>,
    written: HashSet<[u8; 32]>,
    /// Directories created under `dir`, relative, so each is made and synced once; shared by
    /// the writer threads.
    dirs: Mutex<HashSet<String>>,
    /// Files written, relative, with their sizes.
    pub staged: Vec<(String, u64)>,
    /// Contents received that failed their digest or size check, hence not written.
    pub rejected: u64,
    keep: bool,
}

/// What writing one received content came to.
enum Outcome {
    /// Not wanted, or already written.
    Ignored,
    /// Failed its digest or size check: not written.
    Rejected,
    Stored([u8; 32]),
}

impl Staging {
    /// Creates `P/.kiln-restore-<base>-<pid>` for `files`.
    pub fn create(parent: &Path, base: &str, files: &[FileEntry]) -> Result<Staging, SnapshotError> {
        let dir = parent.join(format!("{}{}", prefix(base), std::process::id()));
        std::fs::create_dir(&dir).map_err(SnapshotError::io("creating the staging directory", &dir))?;
        let mut wants: HashMap<[u8; 32], Want> = HashMap::new();
        for f in files {
            let want = wants.entry(f.digest).or_insert_with(|| Want { size: f.size, paths: Vec::new() });
            want.paths.push((f.rel.clone(), f.mode));
        }
        let staging = Staging {
            dir,
            wants,
            written: HashSet::new(),
            dirs: Mutex::new(HashSet::new()),
            staged: Vec::new(),
            rejected: 0,
            keep: false,
        };
        Ok(staging)
    }

    /// The distinct digests to fetch.
    pub fn digests(&self) -> Vec<[u8; 32]> {
        self.wants.keys().copied().collect()
    }

    /// The files whose content never arrived intact: no tier held it, or it failed its check.
    pub fn missing_files(&self) -> u64 {
        let missing = self.wants.iter().filter(|(d, _)| !self.written.contains(*d));
        missing.map(|(_, w)| w.paths.len() as u64).sum()
    }

    /// Writes received contents, each at every path that holds it, if it is what the manifest
    /// says; anything unasked for, repeated or damaged is dropped. Contents are checked and
    /// written by up to `WRITERS` threads.
    pub fn write(&mut self, files: &[pb::FileData], observer: &dyn Observer) -> Result<(), SnapshotError> {
        let next = AtomicUsize::new(0);
        let this = &*self;
        let work = || -> Result<Vec<Outcome>, SnapshotError> {
            let mut done = Vec::new();
            while let Some(file) = files.get(next.fetch_add(1, Ordering::Relaxed)) {
                done.push(this.write_one(file, observer)?);
            }
            Ok(done)
        };
        let threads = files.len().clamp(1, WRITERS);
        let results: Vec<Result<Vec<Outcome>, SnapshotError>> = std::thread::scope(|scope| {
            let handles: Vec<_> = (1..threads).map(|_| scope.spawn(work)).collect();
            let mut results = vec![work()];
            results.extend(handles.into_iter().map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p))));
            results
        });
        for written in results {
            for w in written? {
                match w {
                    Outcome::Ignored => {}
                    Outcome::Rejected => self.rejected += 1,
                    Outcome::Stored(digest) => {
                        let want = &self.wants[&digest];
                        self.staged.extend(want.paths.iter().map(|(rel, _)| (rel.clone(), want.size)));
                        self.written.insert(digest);
                    }
                }
            }
        }
        Ok(())
    }

    /// Checks one content and writes it at its paths. A content repeated in one batch is
    /// written by whichever thread gets it first: the other finds its files there and ignores it.
    fn write_one(&self, file: &pb::FileData, observer: &dyn Observer) -> Result<Outcome, SnapshotError> {
        let Ok(digest) = <[u8; 32]>::try_from(file.digest.as_slice()) else { return Ok(Outcome::Ignored) };
        let Some(want) = self.wants.get(&digest) else { return Ok(Outcome::Ignored) };
        if self.written.contains(&digest) {
            return Ok(Outcome::Ignored);
        }
        if !digest::matches(&file.data, &digest, want.size) {
            return Ok(Outcome::Rejected);
        }
        for (rel, mode) in &want.paths {
            self.make_parents(rel)?;
            match write_synced(&self.dir.join(rel), &file.data, *mode) {
                Err(SnapshotError::Io { source, .. }) if source.kind() == std::io::ErrorKind::AlreadyExists => {
                    return Ok(Outcome::Ignored);
                }
                result => result?,
            }
            observer.advance(1, want.size);
        }
        Ok(Outcome::Stored(digest))
    }

    fn make_parents(&self, rel: &str) -> Result<(), SnapshotError> {
        let mut end = 0;
        while let Some(slash) = rel[end..].find('/') {
            end += slash;
            let dir = &rel[..end];
            let mut dirs = self.dirs.lock().unwrap_or_else(|p| p.into_inner());
            if !dirs.contains(dir) {
                let path = self.dir.join(dir);
                std::fs::create_dir(&path).map_err(SnapshotError::io("creating", &path))?;
                dirs.insert(dir.to_owned());
            }
            end += 1;
        }
        Ok(())
    }

    /// Syncs every staged directory, so the names are as durable as the bytes before they move.
    pub fn sync(&self) -> Result<(), SnapshotError> {
        let dirs = self.dirs.lock().unwrap_or_else(|p| p.into_inner());
        for dir in dirs.iter() {
            fsx::sync_dir(&self.dir.join(dir))?;
        }
        fsx::sync_dir(&self.dir)
    }

    /// Keeps the directory on drop: it was renamed into place.
    pub fn keep(&mut self) {
        self.keep = true;
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        if !self.keep {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Creates `path` (it must not exist), writes `data`, sets `mode` exactly (no umask), fsyncs.
fn write_synced(path: &Path, data: &[u8], mode: u32) -> Result<(), SnapshotError> {
    let write = || -> std::io::Result<()> {
        let mut file = std::fs::File::options().write(true).create_new(true).mode(0o600).open(path)?;
        file.write_all(data)?;
        file.set_permissions(std::fs::Permissions::from_mode(mode))?;
        file.sync_all()
    };
    write().map_err(SnapshotError::io("writing", path))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    fn entry(rel: &str, data: &[u8], mode: u32) -> FileEntry {
        FileEntry { rel: rel.into(), mode, digest: *blake3::hash(data).as_bytes(), size: data.len() as u64 }
    }

    fn data(bytes: &[u8]) -> pb::FileData {
        pb::FileData { digest: blake3::hash(bytes).as_bytes().to_vec(), data: bytes.to_vec() }
    }

    #[test]
    fn writes_verified_files_at_every_path_and_drops_damaged_ones() {
        let parent = tempfile::tempdir().unwrap();
        let files = [entry("a/b/one", b"1", 0o640), entry("c/same", b"1", 0o755), entry("two", b"22", 0o600)];
        let mut staging = Staging::create(parent.path(), "triton", &files).unwrap();
        assert_eq!(staging.digests().len(), 2);
        let mut damaged = data(b"22");
        damaged.data = b"2X".to_vec();
        staging.write(&[data(b"1"), data(b"1"), damaged, data(b"unasked")], &()).unwrap();
        staging.write(&[data(b"1")], &()).unwrap();
        staging.sync().unwrap();
        assert_eq!(staging.rejected, 1);
        assert_eq!(staging.missing_files(), 1);
        assert_eq!(staging.staged.len(), 2);
        let one = staging.dir.join("a/b/one");
        assert_eq!(std::fs::read(&one).unwrap(), b"1");
        assert_eq!(std::fs::metadata(&one).unwrap().mode() & 0o777, 0o640);
        assert_eq!(std::fs::metadata(staging.dir.join("c/same")).unwrap().mode() & 0o777, 0o755);
        assert!(!staging.dir.join("two").exists(), "a damaged file was written");
        let dir = staging.dir.clone();
        assert_eq!(dir.file_name().unwrap().to_str().unwrap(), format!(".kiln-restore-triton-{}", std::process::id()));
        drop(staging);
        assert!(!dir.exists(), "an unplaced staging directory removes itself");
    }

    #[test]
    fn stale_staging_of_this_target_only_is_removed() {
        let parent = tempfile::tempdir().unwrap();
        for name in [".kiln-restore-a-12", ".kiln-restore-a-1-7", ".kiln-restore-a-", "a"] {
            std::fs::create_dir(parent.path().join(name)).unwrap();
        }
        assert_eq!(remove_stale(parent.path(), "a").unwrap(), 1);
        assert!(!parent.path().join(".kiln-restore-a-12").exists());
        for kept in [".kiln-restore-a-1-7", ".kiln-restore-a-", "a"] {
            assert!(parent.path().join(kept).exists(), "{kept}");
        }
    }
}
