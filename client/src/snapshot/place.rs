//! Moves a filled staging directory into its target without ever overwriting a file. A target
//! that does not exist or is empty gets the whole directory in one `rename`: a reader sees all
//! of the root or none of it. Otherwise each file is hard-linked in, which fails rather than
//! replace anything already there; a file some other process wrote meanwhile wins.

use super::stage::Staging;
use super::{SnapshotError, fsx};
use std::collections::{BTreeSet, HashMap};
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

/// How a root's files reached the target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// Nothing was needed, or nothing arrived.
    Nothing,
    /// The staging directory became the target.
    Renamed,
    /// Files were linked into an existing target one by one.
    Linked,
}

/// What placing did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placed {
    pub placement: Placement,
    pub files: u64,
    pub bytes: u64,
    /// Files not placed because their path was taken meanwhile (or sits under a file or a
    /// symlink, which a restore never writes through).
    pub taken: u64,
}

/// Places `staging` into `target`; the staging directory is gone afterwards.
pub fn place(mut staging: Staging, target: &Path) -> Result<Placed, SnapshotError> {
    let mut placed = Placed { placement: Placement::Nothing, files: 0, bytes: 0, taken: 0 };
    if staging.staged.is_empty() {
        return Ok(placed);
    }
    if try_rename(&mut staging, target)? {
        placed.placement = Placement::Renamed;
        placed.files = staging.staged.len() as u64;
        placed.bytes = staging.staged.iter().map(|(_, size)| size).sum();
        return Ok(placed);
    }
    std::fs::create_dir_all(target).map_err(SnapshotError::io("creating", target))?;
    placed.placement = Placement::Linked;
    let mut dirs = TargetDirs::new(target);
    let mut staged = std::mem::take(&mut staging.staged);
    staged.sort_unstable();
    for (rel, size) in &staged {
        let destination = target.join(rel);
        let linked = dirs.make_parents(rel)? && link(&staging.dir.join(rel), &destination)?;
        if linked {
            placed.files += 1;
            placed.bytes += size;
            dirs.touched.insert(destination.parent().unwrap_or(target).to_path_buf());
        } else {
            placed.taken += 1;
        }
    }
    for dir in &dirs.touched {
        fsx::sync_dir(dir)?;
    }
    Ok(placed)
}

/// Renames the staging directory onto a missing or empty target, taking the empty target's
/// permissions. `false` when the target has content, or the rename failed for any reason (a
/// mount point, a writer that got there first): the files are then linked in instead.
fn try_rename(staging: &mut Staging, target: &Path) -> Result<bool, SnapshotError> {
    match target.symlink_metadata() {
        Err(e) if e.kind() == ErrorKind::NotFound => {}
        Err(e) => return Err(SnapshotError::Io { action: "reading", path: target.to_path_buf(), source: e }),
        Ok(m) if m.is_dir() => {
            let empty = std::fs::read_dir(target).map_err(SnapshotError::io("reading", target))?.next().is_none();
            if !empty {
                return Ok(false);
            }
            std::fs::set_permissions(&staging.dir, m.permissions())
                .map_err(SnapshotError::io("setting permissions of", &staging.dir))?;
        }
        // A symlink (even to a directory) or a file: never replaced.
        Ok(_) => return Ok(false),
    }
    if std::fs::rename(&staging.dir, target).is_err() {
        return Ok(false);
    }
    staging.keep();
    fsx::sync_dir(target.parent().unwrap_or(Path::new("/")))?;
    Ok(true)
}

/// Links `staged` at `destination`; `false` if the name is taken. Across file systems (a target
/// that is a mount point) the file is copied beside the destination first, so the final name
/// still appears whole and by a call that never overwrites.
fn link(staged: &Path, destination: &Path) -> Result<bool, SnapshotError> {
    match std::fs::hard_link(staged, destination) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == ErrorKind::AlreadyExists => Ok(false),
        Err(e) if e.kind() == ErrorKind::CrossesDevices => copy_in(staged, destination),
        Err(e) => Err(SnapshotError::Io { action: "linking", path: destination.to_path_buf(), source: e }),
    }
}

fn copy_in(staged: &Path, destination: &Path) -> Result<bool, SnapshotError> {
    let temporary = destination.with_file_name(format!(".kiln-place-{}", std::process::id()));
    let _ = std::fs::remove_file(&temporary);
    let copy = || -> std::io::Result<()> {
        std::fs::copy(staged, &temporary)?;
        std::fs::File::open(&temporary)?.sync_all()
    };
    copy().map_err(SnapshotError::io("copying to", &temporary))?;
    let linked = link(&temporary, destination);
    let _ = std::fs::remove_file(&temporary);
    linked
}

/// The target's directories as placing finds or makes them.
#[derive(Debug)]
struct TargetDirs<'a> {
    target: &'a Path,
    /// Relative directory -> whether files may go in it (a real directory, not a symlink).
    usable: HashMap<String, bool>,
    /// Directories whose entries changed, to sync at the end.
    touched: BTreeSet<PathBuf>,
}

impl<'a> TargetDirs<'a> {
    fn new(target: &'a Path) -> Self {
        TargetDirs { target, usable: HashMap::new(), touched: BTreeSet::new() }
    }

    /// Makes `rel`'s parent directories; `false` when one of them is a file or a symlink.
    fn make_parents(&mut self, rel: &str) -> Result<bool, SnapshotError> {
        let mut end = 0;
        while let Some(slash) = rel[end..].find('/') {
            end += slash;
            let dir = &rel[..end];
            let usable = match self.usable.get(dir) {
                Some(&usable) => usable,
                None => {
                    let usable = self.make_dir(dir)?;
                    self.usable.insert(dir.to_owned(), usable);
                    usable
                }
            };
            if !usable {
                return Ok(false);
            }
            end += 1;
        }
        Ok(true)
    }

    fn make_dir(&mut self, dir: &str) -> Result<bool, SnapshotError> {
        let path = self.target.join(dir);
        match std::fs::create_dir(&path) {
            Ok(()) => {
                self.touched.insert(path.parent().unwrap_or(self.target).to_path_buf());
                Ok(true)
            }
            Err(e) if e.kind() == ErrorKind::AlreadyExists => Ok(path.symlink_metadata().is_ok_and(|m| m.is_dir())),
            Err(e) => Err(SnapshotError::Io { action: "creating", path, source: e }),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::super::manifest::FileEntry;
    use super::*;
    use kiln_proto::pb;

    /// A staging directory beside `target` holding `files` (path, contents).
    fn staged(target: &Path, files: &[(&str, &[u8])]) -> Staging {
        let entries: Vec<FileEntry> = files
            .iter()
            .map(|(rel, data)| FileEntry {
                rel: (*rel).into(),
                mode: 0o644,
                digest: *blake3::hash(data).as_bytes(),
                size: data.len() as u64,
            })
            .collect();
        let mut staging = Staging::create(target.parent().unwrap(), "t", &entries).unwrap();
        let received: Vec<pb::FileData> = files
            .iter()
            .map(|(_, data)| pb::FileData { digest: blake3::hash(data).as_bytes().to_vec(), data: data.to_vec() })
            .collect();
        staging.write_from(received.into_iter(), &()).unwrap();
        staging
    }

    #[test]
    fn a_missing_or_empty_target_gets_the_whole_directory() {
        let parent = tempfile::tempdir().unwrap();
        let target = parent.path().join("t");
        let placed = place(staged(&target, &[("a/b", b"1"), ("c", b"2")]), &target).unwrap();
        assert_eq!(placed, Placed { placement: Placement::Renamed, files: 2, bytes: 2, taken: 0 });
        assert_eq!(std::fs::read(target.join("a/b")).unwrap(), b"1");

        std::fs::remove_dir_all(&target).unwrap();
        std::fs::create_dir(&target).unwrap();
        std::fs::set_permissions(&target, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
        let placed = place(staged(&target, &[("c", b"2")]), &target).unwrap();
        assert_eq!(placed.placement, Placement::Renamed);
        let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&target).unwrap().permissions());
        assert_eq!(mode & 0o777, 0o700, "the empty target's permissions are kept");
        let left: Vec<_> = std::fs::read_dir(parent.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(left, ["t"], "no staging directory is left");
    }

    #[test]
    fn an_existing_target_gains_files_and_never_loses_one() {
        let parent = tempfile::tempdir().unwrap();
        let target = parent.path().join("t");
        std::fs::create_dir_all(target.join("d")).unwrap();
        std::fs::write(target.join("d/taken"), b"mine").unwrap();
        std::fs::write(target.join("file"), b"a file").unwrap();
        std::os::unix::fs::symlink(parent.path(), target.join("link")).unwrap();
        let files: [(&str, &[u8]); 5] =
            [("d/taken", b"theirs"), ("d/new", b"n"), ("file/under", b"u"), ("link/escape", b"e"), ("x/y/z", b"z")];
        let placed = place(staged(&target, &files), &target).unwrap();
        assert_eq!(placed, Placed { placement: Placement::Linked, files: 2, bytes: 2, taken: 3 });
        assert_eq!(std::fs::read(target.join("d/taken")).unwrap(), b"mine");
        assert_eq!(std::fs::read(target.join("d/new")).unwrap(), b"n");
        assert_eq!(std::fs::read(target.join("x/y/z")).unwrap(), b"z");
        assert!(!parent.path().join("escape").exists(), "wrote through a symlink");
        let names: Vec<_> = std::fs::read_dir(parent.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, ["t"], "the staging directory is removed");
    }
}
