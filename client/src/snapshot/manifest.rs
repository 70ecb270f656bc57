//! Checks a manifest kilnd returned before any of it touches a disk. kilnd validates what it
//! stores, but the manifest came over the fleet from another host, and a restore writes where
//! it says: a path with `..` or a root it does not list must stop the restore before the first
//! byte is written, not halfway.

use super::SnapshotError;
use super::spec::is_root_name;
use kiln_proto::pb;
use std::collections::{HashMap, HashSet};

/// The longest relative path the protocol carries.
const MAX_PATH_BYTES: usize = 4096;

/// One file of a checked manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileEntry {
    /// Relative to its root; checked to be '/'-separated with no empty, `.` or `..` parts.
    pub rel: String,
    pub mode: u32,
    pub digest: [u8; 32],
    pub size: u64,
}

/// A root of a checked manifest, with its files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckedRoot {
    pub name: String,
    /// Where the saving host had it: absolute.
    pub recorded: String,
    pub files: Vec<FileEntry>,
}

/// Checks every root and file; returns the roots in manifest order with their files.
pub fn check(manifest: &pb::SnapshotManifest) -> Result<Vec<CheckedRoot>, SnapshotError> {
    let bad = |what: String| SnapshotError::BadManifest(what);
    let mut roots: Vec<CheckedRoot> = Vec::with_capacity(manifest.roots.len());
    let mut by_name: HashMap<&str, usize> = HashMap::new();
    for root in &manifest.roots {
        if !is_root_name(&root.name) || by_name.contains_key(root.name.as_str()) {
            return Err(bad(format!("root name `{}` is invalid or repeated", root.name)));
        }
        if !root.path.starts_with('/') || root.path.contains('\0') {
            return Err(bad(format!("root `{}` has a path that is not absolute: {:?}", root.name, root.path)));
        }
        by_name.insert(&root.name, roots.len());
        roots.push(CheckedRoot { name: root.name.clone(), recorded: root.path.clone(), files: Vec::new() });
    }
    let mut sizes: HashMap<[u8; 32], u64> = HashMap::new();
    for file in &manifest.files {
        let at = format!("file `{}` of root `{}`", file.path, file.root);
        let index = *by_name.get(file.root.as_str()).ok_or_else(|| bad(format!("{at}: no such root")))?;
        check_path(&file.path).map_err(|why| bad(format!("{at}: {why}")))?;
        if file.mode > 0o777 {
            return Err(bad(format!("{at}: mode {:o} is more than permission bits", file.mode)));
        }
        let digest: [u8; 32] =
            file.digest.as_slice().try_into().map_err(|_| bad(format!("{at}: the digest is not 32 bytes")))?;
        if *sizes.entry(digest).or_insert(file.size) != file.size {
            return Err(bad(format!("{at}: one digest with two sizes")));
        }
        roots[index].files.push(FileEntry { rel: file.path.clone(), mode: file.mode, digest, size: file.size });
    }
    for root in &roots {
        check_tree(root).map_err(|why| bad(format!("root `{}`: {why}", root.name)))?;
    }
    Ok(roots)
}

/// Relative, '/'-separated, no empty, `.` or `..` part, no NUL, at most 4096 bytes.
fn check_path(path: &str) -> Result<(), &'static str> {
    if path.is_empty() || path.len() > MAX_PATH_BYTES {
        return Err("the path is empty or longer than 4096 bytes");
    }
    if path.contains('\0') {
        return Err("the path holds a NUL");
    }
    if path.split('/').any(|part| part.is_empty() || part == "." || part == "..") {
        return Err("the path is absolute or has an empty, `.` or `..` part");
    }
    Ok(())
}

/// No path twice, and no path that is both a file and another file's directory: either would
/// make the restore fail halfway.
fn check_tree(root: &CheckedRoot) -> Result<(), String> {
    let files: HashSet<&str> = root.files.iter().map(|f| f.rel.as_str()).collect();
    if files.len() != root.files.len() {
        return Err("a path is listed twice".into());
    }
    for f in &root.files {
        let mut dir = f.rel.as_str();
        while let Some((parent, _)) = dir.rsplit_once('/') {
            if files.contains(parent) {
                return Err(format!("`{parent}` is a file and the directory of `{}`", f.rel));
            }
            dir = parent;
        }
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn file(root: &str, path: &str, digest: u8, size: u64) -> pb::SnapshotFile {
        pb::SnapshotFile { root: root.into(), path: path.into(), mode: 0o644, digest: vec![digest; 32], size }
    }

    fn manifest(files: Vec<pb::SnapshotFile>) -> pb::SnapshotManifest {
        let roots = vec![
            pb::SnapshotRoot { name: "triton".into(), path: "/cache/triton".into() },
            pb::SnapshotRoot { name: "inductor".into(), path: "/cache/inductor".into() },
        ];
        pb::SnapshotManifest { roots, files, ..Default::default() }
    }

    #[test]
    fn a_good_manifest_groups_files_by_root() {
        let roots = check(&manifest(vec![
            file("triton", "a/b.cubin", 1, 3),
            file("inductor", "x", 2, 4),
            file("triton", "c", 1, 3),
        ]))
        .unwrap();
        assert_eq!(roots.len(), 2);
        assert_eq!(roots[0].recorded, "/cache/triton");
        assert_eq!(roots[0].files.iter().map(|f| f.rel.as_str()).collect::<Vec<_>>(), ["a/b.cubin", "c"]);
        assert_eq!(roots[1].files[0].digest, [2; 32]);
    }

    #[test]
    fn anything_that_could_write_outside_a_root_or_fail_halfway_is_refused() {
        for (bad, why) in [
            (file("triton", "../etc/passwd", 1, 1), "empty, `.` or `..` part"),
            (file("triton", "/etc/passwd", 1, 1), "absolute"),
            (file("triton", "a//b", 1, 1), "empty, `.` or `..` part"),
            (file("triton", "a/./b", 1, 1), "empty, `.` or `..` part"),
            (file("triton", "a\0b", 1, 1), "NUL"),
            (file("other", "a", 1, 1), "no such root"),
            (pb::SnapshotFile { mode: 0o4755, ..file("triton", "a", 1, 1) }, "permission bits"),
            (pb::SnapshotFile { digest: vec![1; 31], ..file("triton", "a", 1, 1) }, "32 bytes"),
            (file("triton", "ok", 9, 2), "two sizes"),
            (file("triton", "ok", 7, 1), "twice"),
            (file("triton", "ok/inner", 7, 1), "is a file and the directory"),
        ] {
            let err = check(&manifest(vec![file("triton", "ok", 9, 1), bad])).unwrap_err();
            assert!(err.to_string().contains(why), "{why}: {err}");
        }
        let mut relative = manifest(vec![]);
        relative.roots[0].path = "cache/triton".into();
        assert!(check(&relative).is_err());
        let mut repeated = manifest(vec![]);
        repeated.roots[1].name = "triton".into();
        assert!(check(&repeated).is_err());
    }
}
