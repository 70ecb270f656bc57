//! The disk tier: content-addressed files under `<cache-dir>/v1/ab/cd/<key>`.
//!
//! Writes go to a temp file in `<cache-dir>/v1/tmp`, are fsynced, then renamed into place, so a
//! reader (in this process, another process, or a second daemon sharing the directory) sees a
//! whole file or none. Reads bump the file's mtime, which is the LRU clock: eviction scans the
//! tree and deletes the least recently used files until the total is under 90% of the cap. The
//! scan reads the real directory, so two daemons sharing it converge without coordination; a
//! file deleted while another process reads it stays readable through the open handle.

use super::{Store, StoreError, StoreFuture, Stored, Usage};
use crate::domain::TierName;
use bytes::Bytes;
use kiln_proto::CacheKey;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

/// How stale a file's mtime may get before a read moves it forward.
const TOUCH_EVERY: std::time::Duration = std::time::Duration::from_secs(60);

#[derive(Debug)]
pub struct DiskTier {
    inner: Arc<Inner>,
    /// Serialises writes (see `put`).
    writes: tokio::sync::Semaphore,
}

#[derive(Debug)]
struct Inner {
    /// `<cache-dir>/v1`: the layout version is in the path, so a future layout never misreads this one.
    root: PathBuf,
    capacity: u64,
    /// Bytes and files this process believes are stored; re-measured by every eviction scan.
    bytes: AtomicU64,
    entries: AtomicU64,
    /// Serialises eviction scans in this process (a std Mutex: held only inside spawn_blocking).
    evicting: std::sync::Mutex<()>,
}

fn io_err(source: std::io::Error) -> StoreError {
    StoreError { tier: TierName::Disk, source }
}

impl DiskTier {
    /// Opens (creating) the tier and measures what is already there.
    pub fn open(cache_dir: &Path, capacity_bytes: u64) -> std::io::Result<Self> {
        let root = cache_dir.join("v1");
        std::fs::create_dir_all(root.join("tmp"))?;
        // Owner only: compile workers that run client code (Triton's, as `nobody`) must not read
        // or plant cache entries, and artifacts are code that will run on GPUs.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o700))?;
        let inner = Inner {
            root,
            capacity: capacity_bytes,
            bytes: AtomicU64::new(0),
            entries: AtomicU64::new(0),
            evicting: std::sync::Mutex::new(()),
        };
        inner.remove_stale_temp_files();
        let (bytes, entries) = inner.measure().map(|files| (files.iter().map(|f| f.1).sum(), files.len() as u64))?;
        inner.bytes.store(bytes, Ordering::Relaxed);
        inner.entries.store(entries, Ordering::Relaxed);
        Ok(DiskTier { inner: Arc::new(inner), writes: tokio::sync::Semaphore::new(1) })
    }
}

impl Inner {
    fn path_of(&self, key: &CacheKey) -> PathBuf {
        let hex = key.to_hex();
        self.root.join(&hex[0..2]).join(&hex[2..4]).join(hex)
    }

    fn read(&self, key: &CacheKey) -> std::io::Result<Option<Bytes>> {
        let path = self.path_of(key);
        match std::fs::read(&path) {
            Ok(bytes) => {
                self.touch(&path);
                Ok(Some(Bytes::from(bytes)))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Moves the file's mtime (the LRU clock) to now, at most once per [`TOUCH_EVERY`]: eviction
    /// needs only a coarse order, and a metadata write on every hit costs more than the read.
    /// Best effort: a failed touch only makes the entry look older to eviction.
    fn touch(&self, path: &Path) {
        let stale = std::fs::metadata(path)
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_none_or(|age| age > TOUCH_EVERY);
        if stale && let Ok(f) = std::fs::File::options().write(true).open(path) {
            let _ = f.set_modified(SystemTime::now());
        }
    }

    fn write(&self, key: &CacheKey, envelope: &[u8]) -> std::io::Result<()> {
        let path = self.path_of(key);
        let dir = path.parent().ok_or_else(|| std::io::Error::other("key path has no parent"))?;
        std::fs::create_dir_all(dir)?;
        let mut tmp =
            tempfile::Builder::new().prefix(&key.to_hex()).suffix(".tmp").tempfile_in(self.root.join("tmp"))?;
        tmp.write_all(envelope)?;
        tmp.as_file().sync_all()?;
        let existed = path.exists();
        tmp.persist(&path).map_err(|e| e.error)?;
        if !existed {
            self.entries.fetch_add(1, Ordering::Relaxed);
            let total = self.bytes.fetch_add(envelope.len() as u64, Ordering::Relaxed) + envelope.len() as u64;
            if total > self.capacity {
                self.evict()?;
            }
        }
        Ok(())
    }

    fn remove(&self, key: &CacheKey) -> std::io::Result<()> {
        match std::fs::remove_file(self.path_of(key)) {
            Ok(()) => {
                self.entries.fetch_sub(1, Ordering::Relaxed);
                Ok(())
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Every stored file with its size and mtime.
    fn measure(&self) -> std::io::Result<Vec<(PathBuf, u64, SystemTime)>> {
        let mut files = Vec::new();
        for a in read_dirs(&self.root)? {
            if a.file_name().is_some_and(|n| n == "tmp") {
                continue;
            }
            for b in read_dirs(&a)? {
                for entry in std::fs::read_dir(&b)? {
                    let entry = entry?;
                    let Ok(meta) = entry.metadata() else { continue };
                    if meta.is_file() {
                        files.push((entry.path(), meta.len(), meta.modified().unwrap_or(SystemTime::UNIX_EPOCH)));
                    }
                }
            }
        }
        Ok(files)
    }

    /// Deletes least-recently-used files until the total is under 90% of the cap.
    fn evict(&self) -> std::io::Result<()> {
        let Ok(_guard) = self.evicting.try_lock() else {
            return Ok(());
        };
        let mut files = self.measure()?;
        files.sort_by_key(|f| f.2);
        let mut total: u64 = files.iter().map(|f| f.1).sum();
        let mut count = files.len() as u64;
        let goal = self.capacity / 10 * 9;
        for (path, len, _) in files {
            if total <= goal {
                break;
            }
            if std::fs::remove_file(&path).is_ok() {
                total -= len;
                count -= 1;
            }
        }
        self.bytes.store(total, Ordering::Relaxed);
        self.entries.store(count, Ordering::Relaxed);
        Ok(())
    }

    /// Temp files older than an hour belong to writers that died mid-write.
    fn remove_stale_temp_files(&self) {
        let Ok(entries) = std::fs::read_dir(self.root.join("tmp")) else {
            return;
        };
        for entry in entries.flatten() {
            let old = entry
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|age| age.as_secs() > 3600);
            if old {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
}

fn read_dirs(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            out.push(entry.path());
        }
    }
    Ok(out)
}

/// Runs blocking file work off the async threads.
async fn blocking<T: Send + 'static>(
    inner: &Arc<Inner>,
    f: impl FnOnce(&Inner) -> std::io::Result<T> + Send + 'static,
) -> Result<T, StoreError> {
    let inner = Arc::clone(inner);
    tokio::task::spawn_blocking(move || f(&inner)).await.map_err(|e| io_err(std::io::Error::other(e)))?.map_err(io_err)
}

impl Store for DiskTier {
    fn name(&self) -> TierName {
        TierName::Disk
    }

    fn get<'a>(&'a self, key: &'a CacheKey) -> StoreFuture<'a, Result<Option<Stored>, StoreError>> {
        let key = *key;
        Box::pin(async move { Ok(blocking(&self.inner, move |i| i.read(&key)).await?.map(Stored::packed)) })
    }

    /// All the reads in one blocking call: on a fresh host a graph's 64 misses cost one trip to
    /// a blocking thread instead of 64 (measured: about a millisecond of a warm start).
    fn get_many<'a>(&'a self, keys: &'a [CacheKey]) -> StoreFuture<'a, Vec<Result<Option<Stored>, StoreError>>> {
        let owned = keys.to_vec();
        Box::pin(async move {
            let read = blocking(&self.inner, move |i| Ok(owned.iter().map(|k| i.read(k)).collect::<Vec<_>>())).await;
            match read {
                Ok(answers) => answers.into_iter().map(|a| a.map(|b| b.map(Stored::packed)).map_err(io_err)).collect(),
                Err(e) => keys.iter().map(|_| Err(io_err(std::io::Error::other(e.to_string())))).collect(),
            }
        })
    }

    /// One write at a time: a warm start that fetches a whole graph would otherwise start a
    /// blocking thread and an fsync per kernel at once, and starve the answers on a small host.
    fn put<'a>(&'a self, key: &'a CacheKey, stored: Stored) -> StoreFuture<'a, Result<(), StoreError>> {
        let envelope = stored.envelope;
        let key = *key;
        Box::pin(async move {
            let _turn = self.writes.acquire().await.map_err(|e| io_err(std::io::Error::other(e)))?;
            blocking(&self.inner, move |i| i.write(&key, &envelope)).await
        })
    }

    fn remove<'a>(&'a self, key: &'a CacheKey) -> StoreFuture<'a, Result<(), StoreError>> {
        let key = *key;
        Box::pin(blocking(&self.inner, move |i| i.remove(&key)))
    }

    fn usage(&self) -> Usage {
        Usage {
            entries: self.inner.entries.load(Ordering::Relaxed),
            bytes: self.inner.bytes.load(Ordering::Relaxed),
            capacity_bytes: self.inner.capacity,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn key(b: u8) -> CacheKey {
        CacheKey::from_bytes([b; 32])
    }

    #[tokio::test]
    async fn writes_are_visible_whole_and_survive_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let tier = DiskTier::open(dir.path(), 1 << 20).unwrap();
        assert!(tier.get(&key(1)).await.unwrap().is_none());
        tier.put(&key(1), Stored::packed(Bytes::from_static(b"envelope"))).await.unwrap();
        assert_eq!(tier.get(&key(1)).await.unwrap().unwrap().envelope, Bytes::from_static(b"envelope"));
        let hex = key(1).to_hex();
        assert!(tier.inner.path_of(&key(1)).ends_with(format!("v1/{}/{}/{hex}", &hex[..2], &hex[2..4])));
        let reopened = DiskTier::open(dir.path(), 1 << 20).unwrap();
        assert_eq!(reopened.usage().entries, 1);
        assert_eq!(reopened.usage().bytes, 8);
        assert_eq!(std::fs::read_dir(dir.path().join("v1/tmp")).unwrap().count(), 0, "temp files left behind");
    }

    #[tokio::test]
    async fn eviction_drops_the_least_recently_used() {
        let dir = tempfile::tempdir().unwrap();
        let tier = DiskTier::open(dir.path(), 3000).unwrap();
        for b in 0..3u8 {
            tier.put(&key(b), Stored::packed(Bytes::from(vec![b; 1000]))).await.unwrap();
            let old = SystemTime::now() - std::time::Duration::from_secs(100 - u64::from(b));
            std::fs::File::options().write(true).open(tier.inner.path_of(&key(b))).unwrap().set_modified(old).unwrap();
        }
        tier.get(&key(0)).await.unwrap(); // key 0 is now the most recently used
        tier.put(&key(9), Stored::packed(Bytes::from(vec![9; 1000]))).await.unwrap();
        assert!(tier.get(&key(0)).await.unwrap().is_some());
        assert!(tier.get(&key(1)).await.unwrap().is_none(), "the LRU entry survived");
        assert!(tier.get(&key(9)).await.unwrap().is_some());
        assert!(tier.usage().bytes <= 2700);
    }

    #[tokio::test]
    async fn two_handles_on_one_directory_share_entries() {
        let dir = tempfile::tempdir().unwrap();
        let a = DiskTier::open(dir.path(), 1 << 20).unwrap();
        let b = DiskTier::open(dir.path(), 1 << 20).unwrap();
        let writes = (0..20u8).map(|i| {
            let (a, b) = (&a, &b);
            async move {
                let t = if i % 2 == 0 { a } else { b };
                t.put(&key(5), Stored::packed(Bytes::from(vec![i % 2; 4096]))).await.unwrap();
            }
        });
        for w in writes {
            w.await;
        }
        let got = b.get(&key(5)).await.unwrap().unwrap().envelope;
        assert!(got.iter().all(|x| *x == got[0]) && got.len() == 4096, "mixed or partial content");
    }
}
