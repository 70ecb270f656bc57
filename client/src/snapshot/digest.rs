//! File contents and their blake3 digests, on both sides of a snapshot: hashing what a save
//! found, re-reading it for upload (a JIT cache may have rewritten it since), and checking what
//! a restore received before a byte of it is written.

use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

/// Read buffer: large enough for blake3's SIMD paths and few syscalls.
const BUFFER: usize = 1 << 20;

/// A file's identity in a manifest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hashed {
    pub digest: [u8; 32],
    pub size: u64,
    /// Permission bits only.
    pub mode: u32,
}

/// Opens a file the walk found as a regular file, refusing anything it may have been replaced
/// with since: a symlink (`O_NOFOLLOW`), or a FIFO, whose open would block without
/// `O_NONBLOCK` (which regular files ignore).
fn open_regular(path: &Path) -> io::Result<File> {
    let file = File::options().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK).open(path)?;
    if !file.metadata()?.is_file() {
        return Err(io::Error::other("no longer a regular file"));
    }
    Ok(file)
}

/// Hashes a file as it is now; the size is what was read, so a file growing meanwhile is
/// described consistently with its digest.
pub fn hash_file(path: &Path) -> io::Result<Hashed> {
    let mut file = open_regular(path)?;
    let mode = file.metadata()?.mode() & 0o777;
    let mut hasher = blake3::Hasher::new();
    let mut buffer = vec![0u8; BUFFER];
    let mut size = 0u64;
    loop {
        let n = match file.read(&mut buffer) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        hasher.update(&buffer[..n]);
        size += n as u64;
    }
    Ok(Hashed { digest: *hasher.finalize().as_bytes(), size, mode })
}

/// The bytes of the first of `paths` that still holds `digest`, or `None` when every one has
/// changed or vanished since it was hashed.
pub fn read_matching<'a>(paths: impl IntoIterator<Item = &'a Path>, digest: &[u8; 32], size: u64) -> Option<Vec<u8>> {
    paths.into_iter().find_map(|path| {
        let mut data = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
        open_regular(path).and_then(|mut f| f.read_to_end(&mut data)).ok()?;
        matches(&data, digest, size).then_some(data)
    })
}

/// Whether `data` is the file a manifest entry describes.
pub fn matches(data: &[u8], digest: &[u8], size: u64) -> bool {
    data.len() as u64 == size && blake3::hash(data).as_bytes()[..] == *digest
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn hashes_contents_size_and_mode_and_rereads_only_unchanged_files() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        let data = vec![7u8; 3 * BUFFER + 5];
        std::fs::write(&a, &data).unwrap();
        std::fs::set_permissions(&a, std::fs::Permissions::from_mode(0o751)).unwrap();
        let hashed = hash_file(&a).unwrap();
        assert_eq!(hashed, Hashed { digest: *blake3::hash(&data).as_bytes(), size: data.len() as u64, mode: 0o751 });
        assert!(matches(&data, &hashed.digest, hashed.size));
        assert!(!matches(&data[1..], &hashed.digest, hashed.size));

        std::fs::write(&b, b"changed").unwrap();
        let found = read_matching([b.as_path(), a.as_path()], &hashed.digest, hashed.size);
        assert_eq!(found.as_deref(), Some(&data[..]), "the first path that still matches");
        assert_eq!(read_matching([b.as_path()], &hashed.digest, hashed.size), None);
        std::os::unix::fs::symlink(&a, dir.path().join("link")).unwrap();
        assert!(hash_file(&dir.path().join("link")).is_err(), "a symlink is not followed");
    }
}
