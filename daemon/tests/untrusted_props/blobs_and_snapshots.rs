//! The blob and snapshot validators: a blob's payload read back from the tiers gives an entry
//! or nothing, and the fields of blob and snapshot requests pass exactly when they keep the
//! rules, a refusal naming the field; a snapshot path that passes stays inside its directory.

use crate::support::config;
use crate::{CORPUS, wire};
use kiln_daemon::core::blob::entry;
use kiln_daemon::rpc::{blob, snapshot};
use kiln_proto::CacheKey;
use kiln_proto::pb;
use proptest::prelude::*;

proptest! {
    #![proptest_config(config(256, CORPUS))]

    /// A blob's payload is read back from the tiers (and other hosts): any bytes in an artifact
    /// labelled as a blob give an entry or nothing, never a panic; one of another namespace is
    /// never served.
    #[test]
    fn blob_entries_from_any_bytes(
        bytes in prop_oneof![wire(), prop::collection::vec(any::<u8>(), 0..256)],
        ns in "[a-z]{1,6}", other in "[a-z]{1,6}",
        files in prop::collection::vec((".{0,8}", prop::collection::vec(any::<u8>(), 0..16)), 0..4),
    ) {
        let meta = pb::ArtifactMeta { toolchain: entry::toolchain_label(&ns), raw_bytes: bytes.len() as u64, ..Default::default() };
        let artifact = kiln_proto::envelope::Artifact { meta, bytes: bytes.into() };
        if let Some(entry) = entry::open(&artifact, &ns, pb::Tier::Disk) {
            prop_assert!(entry.found);
        }
        if other != ns {
            prop_assert!(entry::open(&artifact, &other, pb::Tier::Disk).is_none());
        }
        // What seal makes, open gives back, under its namespace only.
        let files: Vec<pb::BlobFile> = files.into_iter().map(|(name, data)| pb::BlobFile { name, data }).collect();
        let (_, sealed) = entry::seal(&CacheKey::from_bytes([7; 32]), &ns, files.clone());
        prop_assert_eq!(entry::open(&sealed, &ns, pb::Tier::Memory).unwrap().files, files);
    }

    /// Blob requests' fields: each passes exactly when it keeps the rules (a scope passes
    /// unchanged, a wait is the one asked or the default), and is otherwise refused naming it.
    #[test]
    fn blob_fields_get_a_verdict(
        ns in prop_oneof!["[a-z0-9_-]{1,32}", ".{0,40}"],
        version in prop_oneof!["[a-z0-9.+]{1,8}", ".{0,8}", Just("v".repeat(257))],
        keys in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..4), 0..4),
        names in prop::collection::vec(prop_oneof!["[a-z]{1,4}", ".{0,4}", Just("x".repeat(256))], 0..4),
        ms in prop_oneof![0u32..=3_600_000, any::<u32>()],
    ) {
        let scope = pb::BlobScope { namespace: ns.clone(), tool_version: version.clone() };
        let ns_ok = (1..=32).contains(&ns.len())
            && ns.bytes().all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'_' | b'-'));
        let version_ok = (1..=256).contains(&version.len());
        if let Some(passed) = judged(blob::validate::scope(Some(&scope)), ns_ok && version_ok, "scope.", &scope)? {
            prop_assert_eq!((passed.namespace, passed.tool_version), (ns, version));
        }
        let keys_ok = !keys.is_empty() && keys.iter().all(|k| !k.is_empty());
        judged(blob::validate::keys(&keys), keys_ok, "keys", &keys)?;
        // One byte each, against a limit of two bytes together.
        let files: Vec<pb::BlobFile> = names.iter().map(|name| pb::BlobFile { name: name.clone(), data: vec![1] }).collect();
        let unique = names.iter().collect::<std::collections::HashSet<_>>().len() == names.len();
        let files_ok = (1..=2).contains(&names.len())
            && unique
            && names.iter().all(|n| n.len() <= 255 && (!n.is_empty() || names.len() == 1));
        judged(blob::validate::files(&files, 2), files_ok, "files", &names)?;
        let default = std::time::Duration::from_secs(1);
        let asked = std::time::Duration::from_millis(ms.into());
        if let Some(d) = judged(blob::validate::duration("wait_ms", ms, default), asked <= blob::validate::MAX_WAIT, "wait_ms", &ms)? {
            prop_assert_eq!(d, if ms == 0 { default } else { asked });
        }
    }

    /// A snapshot path passes exactly when it is plain and relative, and one that passes stays
    /// inside the directory it is restored into.
    #[test]
    fn snapshot_paths_that_pass_stay_inside(
        path in prop::collection::vec(prop_oneof![
            prop::sample::select(vec!["a", ".", "..", "", "b.c", "...", "\0", "/", "\\", "é"]).prop_map(String::from),
            "[a-z.]{1,3}",
        ], 0..6).prop_map(|v| v.join("/"))
    ) {
        if snapshot::validate::relative_path_ok(&path) {
            let root = std::path::Path::new("/restore/root");
            let joined = root.join(&path);
            prop_assert!(joined.starts_with(root) && joined != root);
            let normal = std::path::Path::new(&path).components().all(|c| matches!(c, std::path::Component::Normal(_)));
            prop_assert!(normal, "{:?}", path);
        } else {
            prop_assert!(!plain_relative(&path), "{:?} refused", path);
        }
    }

    /// Snapshot save requests: each field passes exactly when it keeps the rules (an id passes
    /// unchanged), and is otherwise refused naming it.
    #[test]
    fn snapshot_fields_get_a_verdict(
        job in prop_oneof!["[a-z]{1,8}", ".{0,8}"],
        keys in prop::collection::btree_map("[a-z.]{0,6}|.{0,4}|host\\.[a-z]{1,3}", ".{0,6}", 0..4),
        roots in prop::collection::vec((prop_oneof!["[a-z]{1,3}|.{0,3}", Just("r".to_string())], "/[a-z]{0,4}|.{0,4}"), 0..3),
        files in prop::collection::vec((prop_oneof!["[a-z]{1,3}", Just("r".to_string())], "[a-z./]{0,8}", 0u32..0o1000, prop::collection::vec(any::<u8>(), 31..33), 0u64..100), 0..4),
    ) {
        let id = pb::SnapshotId { job: job.clone(), keys: keys.clone().into_iter().collect() };
        let printable = |s: &str| s.bytes().all(|b| (0x20..0x7f).contains(&b));
        let id_ok = (1..=256).contains(&job.len())
            && printable(&job)
            && keys.iter().all(|(name, value)| {
                (1..=64).contains(&name.len())
                    && name.bytes().all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'_' | b'.' | b'-'))
                    && !name.starts_with("host.")
                    && value.len() <= 256
                    && printable(value)
            });
        if let Some(passed) = judged(snapshot::validate::id("id", Some(&id)), id_ok, "id.", &id)? {
            prop_assert_eq!((passed.job, passed.keys), (job, keys));
        }
        let roots: Vec<pb::SnapshotRoot> = roots.into_iter().map(|(name, path)| pb::SnapshotRoot { name, path }).collect();
        let root_names: Vec<&str> = roots.iter().map(|r| r.name.as_str()).collect();
        let roots_ok = !roots.is_empty()
            && root_names.iter().collect::<std::collections::HashSet<_>>().len() == roots.len()
            && roots.iter().all(|r| {
                (1..=64).contains(&r.name.len())
                    && r.name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
                    && r.path.starts_with('/')
                    && !r.path.contains('\0')
            });
        judged(snapshot::validate::roots(&roots), roots_ok, "roots", &roots)?;
        let files: Vec<pb::SnapshotFile> = files
            .into_iter()
            .map(|(root, path, mode, digest, size)| pb::SnapshotFile { root, path, mode, digest, size })
            .collect();
        let places: Vec<(&str, &str)> = files.iter().map(|f| (f.root.as_str(), f.path.as_str())).collect();
        let files_ok = places.iter().collect::<std::collections::HashSet<_>>().len() == files.len()
            && files.iter().all(|f| {
                root_names.contains(&f.root.as_str())
                    && plain_relative(&f.path)
                    && f.mode <= 0o777
                    && f.digest.len() == 32
                    && f.size <= 50
            });
        judged(snapshot::validate::files(&files, &roots, 50), files_ok, "files[", &files)?;
    }
}

/// A validator's verdict on input that keeps its rules or not (`keeps_the_rules`, decided by the
/// test from the rules themselves): a pass exactly when it does, and otherwise an error whose
/// message begins with the field it names. The passed value, for the test to check further.
fn judged<T, E: std::fmt::Display>(
    verdict: Result<T, E>,
    keeps_the_rules: bool,
    field: &str,
    input: &dyn std::fmt::Debug,
) -> Result<Option<T>, TestCaseError> {
    match verdict {
        Ok(passed) => {
            prop_assert!(keeps_the_rules, "{:?} passed", input);
            Ok(Some(passed))
        }
        Err(e) => {
            prop_assert!(!keeps_the_rules, "{:?} refused: {}", input, e);
            prop_assert!(e.to_string().starts_with(field), "{} does not name {}", e, field);
            Ok(None)
        }
    }
}

/// The rule for a snapshot file's path, restated: `/`-separated parts, none empty, `.` or `..`,
/// and no NUL.
fn plain_relative(path: &str) -> bool {
    !path.is_empty() && !path.contains('\0') && path.split('/').all(|p| !p.is_empty() && p != "." && p != "..")
}
