//! The staging directory of a restore, `P/.kiln-restore-<name>-<pid>` beside the target: every
//! fetched file is checked against its digest and size and written there whole; then one
//! `syncfs` makes all of it durable before `place` moves it into the target. A restore killed at
//! any point leaves its half-written files here, never in the target; the next restore of the
//! target removes them under the lock.

use super::manifest::FileEntry;
use super::{Observer, SnapshotError, digest, fsx};
use kiln_proto::pb;
use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

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

/// Files checked and written at once, by threads that live for the whole fetch. Creating a file
/// is the slow step on a file system with many recent deletions (ext4 scans past them for a free
/// inode), and a digest check is CPU: both overlap across threads.
const WRITERS: usize = 8;

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
    /// Directories created under `dir`, relative, so each is made once; shared by the writer
    /// threads.
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

    /// Writes every content `files` yields, as it comes, each at every path that holds it, if it
    /// is what the manifest says; anything unasked for, repeated or damaged is dropped. Contents
    /// are checked and written by [`WRITERS`] threads taking them one at a time; the first error
    /// stops them all. Nothing is synced here: [`Staging::sync`] makes it all durable at once.
    pub fn write_from(
        &mut self,
        files: impl Iterator<Item = pb::FileData> + Send,
        observer: &dyn Observer,
    ) -> Result<(), SnapshotError> {
        let source = Mutex::new(files);
        let failed = AtomicBool::new(false);
        let this = &*self;
        let work = || -> Result<Vec<Outcome>, SnapshotError> {
            let mut done = Vec::new();
            while !failed.load(Ordering::Relaxed) {
                let next = source.lock().unwrap_or_else(|p| p.into_inner()).next();
                let Some(file) = next else { break };
                match this.write_one(&file, observer) {
                    Ok(outcome) => done.push(outcome),
                    Err(e) => {
                        failed.store(true, Ordering::Relaxed);
                        return Err(e);
                    }
                }
            }
            Ok(done)
        };
        let results: Vec<Result<Vec<Outcome>, SnapshotError>> = std::thread::scope(|scope| {
            let handles: Vec<_> = (1..WRITERS).map(|_| scope.spawn(work)).collect();
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

    /// Checks one content and writes it at its paths. A content sent twice is written by
    /// whichever thread gets it first: the other finds its files there and ignores it.
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
            match write_new(&self.dir.join(rel), &file.data, *mode) {
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

    /// Makes every staged file and directory durable before they move, with one `syncfs` of the
    /// staging directory's file system: a restore writes hundreds of files, and an fsync each
    /// waited for a journal commit each (452 fsyncs, 0.39 s of the restore's threads for the
    /// 400-file snapshot of kiln-bench (n)). The price: it also flushes whatever else is dirty
    /// on that file system.
    pub fn sync(&self) -> Result<(), SnapshotError> {
        fsx::sync_filesystem(&self.dir)
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

/// Creates `path` (it must not exist), writes `data` and sets `mode` exactly (no umask).
fn write_new(path: &Path, data: &[u8], mode: u32) -> Result<(), SnapshotError> {
    let write = || -> std::io::Result<()> {
        let mut file = std::fs::File::options().write(true).create_new(true).mode(0o600).open(path)?;
        file.write_all(data)?;
        file.set_permissions(std::fs::Permissions::from_mode(mode))
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
        staging.write_from([data(b"1"), data(b"1"), damaged, data(b"unasked")].into_iter(), &()).unwrap();
        staging.write_from([data(b"1")].into_iter(), &()).unwrap();
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
