//! Lists the files a root holds: regular files only, at '/'-separated paths relative to the
//! root, sorted. A JIT cache is written to while it is saved, so a file or directory that
//! vanishes or cannot be read is skipped and counted, never an error; only the root itself must
//! be there.

use super::SnapshotError;
use std::path::{Path, PathBuf};

/// Names that are kiln's own (staging directories, lock files) start with this; never saved.
pub const KILN_PREFIX: &str = ".kiln-";
/// Lock files of the tools whose caches are saved: meaningless on another host.
const LOCK_SUFFIX: &str = ".lock";
/// The longest relative path the protocol carries.
const MAX_PATH_BYTES: usize = 4096;

/// A regular file found under a root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    /// Relative to the root, '/'-separated.
    pub rel: String,
    pub abs: PathBuf,
}

/// A root's files, sorted by `rel`, and how many entries were skipped because they vanished or
/// could not be read (or named with bytes that are not UTF-8, which the wire cannot carry).
#[derive(Debug, Default)]
pub struct Listing {
    pub files: Vec<Found>,
    pub skipped: u64,
    /// Symbolic links, which a snapshot does not hold (a restore writes regular files only, and
    /// a link's target may not exist on another host): counted so the save can say so.
    pub symlinks: u64,
}

/// Walks `root`, which must be a directory (a symlink to one counts).
pub fn walk(root: &Path) -> Result<Listing, SnapshotError> {
    match root.metadata() {
        Ok(m) if m.is_dir() => {}
        Ok(_) => return Err(SnapshotError::Usage(format!("{}: not a directory", root.display()))),
        Err(e) => return Err(SnapshotError::Usage(format!("{}: {e}", root.display()))),
    }
    let mut listing = Listing::default();
    let mut dirs = vec![(root.to_path_buf(), String::new())];
    while let Some((dir, rel)) = dirs.pop() {
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if rel.is_empty() => return Err(SnapshotError::Io { action: "reading", path: dir, source: e }),
            Err(_) => {
                listing.skipped += 1;
                continue;
            }
        };
        for entry in entries {
            let Ok(entry) = entry else {
                listing.skipped += 1;
                continue;
            };
            let name = entry.file_name();
            let Some(name) = name.to_str() else {
                listing.skipped += 1;
                continue;
            };
            if name.starts_with(KILN_PREFIX) {
                continue;
            }
            let child = if rel.is_empty() { name.to_owned() } else { format!("{rel}/{name}") };
            match entry.file_type() {
                Ok(t) if t.is_dir() => dirs.push((entry.path(), child)),
                Ok(t) if t.is_file() && !name.ends_with(LOCK_SUFFIX) => {
                    if child.len() > MAX_PATH_BYTES {
                        listing.skipped += 1;
                    } else {
                        listing.files.push(Found { rel: child, abs: entry.path() });
                    }
                }
                Ok(t) if t.is_symlink() => listing.symlinks += 1,
                Ok(_) => {}
                Err(_) => listing.skipped += 1,
            }
        }
    }
    listing.files.sort_unstable_by(|a, b| a.rel.cmp(&b.rel));
    Ok(listing)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::fs;

    #[test]
    fn takes_regular_files_sorted_and_skips_kiln_names_locks_and_links() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        fs::create_dir_all(root.join("b/c")).unwrap();
        fs::create_dir_all(root.join(".kiln-restore-x-1")).unwrap();
        for f in ["z", "b/y", "b/c/x", "a.lock", ".kiln-snapshot-x.lock", ".kiln-restore-x-1/f", "b/.hidden"] {
            fs::write(root.join(f), f).unwrap();
        }
        std::os::unix::fs::symlink(root.join("z"), root.join("link")).unwrap();
        let listing = walk(root).unwrap();
        let rels: Vec<&str> = listing.files.iter().map(|f| f.rel.as_str()).collect();
        assert_eq!(rels, ["b/.hidden", "b/c/x", "b/y", "z"]);
        assert_eq!(listing.files[1].abs, root.join("b/c/x"));
        assert_eq!(listing.skipped, 0);
        assert_eq!(listing.symlinks, 1, "the link was not counted");
    }

    #[test]
    fn a_root_must_be_a_directory() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("f"), "").unwrap();
        for bad in [dir.path().join("f"), dir.path().join("absent")] {
            let err = walk(&bad).unwrap_err();
            assert!(matches!(err, SnapshotError::Usage(_)), "{err:?}");
            assert!(err.to_string().contains(&bad.display().to_string()), "{err}");
        }
    }
}
