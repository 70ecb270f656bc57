//! Merging a save into the stored manifest. A save is a union: files the stored manifest has and
//! the save lacks stay (a process that compiled one model must not drop another's files), and a
//! path saved again with other content takes the new content.

use kiln_proto::pb::{SnapshotFile, SnapshotManifest, SnapshotRoot};
use std::collections::BTreeMap;

/// What a merge made.
#[derive(Debug)]
pub struct Merged {
    pub manifest: SnapshotManifest,
    /// Entries the save added or changed; roots whose recorded path changed count as a change too.
    pub files_added: u32,
    pub changed: bool,
}

/// Merges `roots` and `files` into `stored` (or a new manifest for `job` and `environment`).
/// Files come out sorted by (root, path), roots by name; `total_bytes` is recomputed.
pub fn merge(
    stored: Option<SnapshotManifest>,
    job: &str,
    environment: &BTreeMap<String, String>,
    roots: Vec<SnapshotRoot>,
    files: Vec<SnapshotFile>,
) -> Merged {
    let mut manifest = stored.unwrap_or_else(|| SnapshotManifest {
        job: job.to_string(),
        environment: environment.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        ..Default::default()
    });
    let mut changed = false;
    let mut by_name: BTreeMap<String, SnapshotRoot> =
        std::mem::take(&mut manifest.roots).into_iter().map(|r| (r.name.clone(), r)).collect();
    for root in roots {
        if by_name.get(&root.name) != Some(&root) {
            changed = true;
            by_name.insert(root.name.clone(), root);
        }
    }
    manifest.roots = by_name.into_values().collect();

    let mut by_path: BTreeMap<(String, String), SnapshotFile> =
        std::mem::take(&mut manifest.files).into_iter().map(|f| ((f.root.clone(), f.path.clone()), f)).collect();
    let mut files_added = 0u32;
    for file in files {
        let slot = (file.root.clone(), file.path.clone());
        if by_path.get(&slot) != Some(&file) {
            files_added += 1;
            by_path.insert(slot, file);
        }
    }
    manifest.files = by_path.into_values().collect();
    manifest.total_bytes = manifest.files.iter().map(|f| f.size).sum();
    Merged { manifest, files_added, changed: changed || files_added > 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(root: &str, path: &str, byte: u8, size: u64) -> SnapshotFile {
        SnapshotFile { root: root.into(), path: path.into(), mode: 0o644, digest: vec![byte; 32], size }
    }

    fn root(name: &str, path: &str) -> SnapshotRoot {
        SnapshotRoot { name: name.into(), path: path.into() }
    }

    #[test]
    fn a_save_never_drops_what_another_saved() {
        let env = BTreeMap::new();
        let first = merge(None, "j", &env, vec![root("inductor", "/a")], vec![file("inductor", "x", 1, 10)]);
        assert!(first.changed);
        let second = merge(
            Some(first.manifest),
            "j",
            &env,
            vec![root("inductor", "/a")],
            vec![file("inductor", "y", 2, 5), file("inductor", "x", 1, 10)],
        );
        assert_eq!(second.files_added, 1, "only y is new");
        let paths: Vec<_> = second.manifest.files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(paths, ["x", "y"]);
        assert_eq!(second.manifest.total_bytes, 15);
        let again =
            merge(Some(second.manifest), "j", &env, vec![root("inductor", "/a")], vec![file("inductor", "y", 2, 5)]);
        assert!(!again.changed, "nothing new: the stored manifest stays as it is");
    }

    #[test]
    fn new_content_for_a_path_replaces_the_old() {
        let env = BTreeMap::new();
        let first = merge(None, "j", &env, vec![root("r", "/a")], vec![file("r", "x", 1, 10)]);
        let second = merge(Some(first.manifest), "j", &env, vec![root("r", "/b")], vec![file("r", "x", 9, 3)]);
        assert!(second.changed);
        assert_eq!(second.manifest.files.len(), 1);
        assert_eq!(second.manifest.files[0].digest, vec![9; 32]);
        assert_eq!(second.manifest.roots, vec![root("r", "/b")], "the latest recorded path wins");
    }
}
