//! `kiln snapshot` results for humans and as NDJSON: pure functions of the library's reports and
//! the wire's manifests, so the formats are tested without a daemon. Every JSON result line has
//! an `event` naming its kind; digests print as hex.

use super::{format_bytes, plural};
use kiln_client::snapshot::{Placement, RestoreReport, RootReport, SaveReport, SnapshotId};
use kiln_proto::pb;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::fmt::Write as _;

pub fn save_json(r: &SaveReport) -> Value {
    json!({
        "event": "saved",
        "job": r.job,
        "key": r.key,
        "roots": r.roots.iter().map(|root| json!({"name": root.name, "path": root.path})).collect::<Vec<_>>(),
        "files": r.files,
        "bytes": r.bytes,
        "files_uploaded": r.files_uploaded,
        "bytes_uploaded": r.bytes_uploaded,
        "files_added": r.files_added,
        "changed": r.changed,
        "skipped": r.skipped,
        "symlinks": r.symlinks,
        "manifest_files": r.manifest_files,
        "manifest_bytes": r.manifest_bytes,
        "seconds": r.seconds,
    })
}

/// `3 files (1.2 KiB)`: a count of files and their size.
fn files(n: u64, bytes: u64) -> String {
    format!("{n} file{} ({})", plural(n as usize), format_bytes(bytes))
}

pub fn save_text(r: &SaveReport) -> String {
    let mut text = format!(
        "saved job `{}`: {} from {} root{}; sent {}",
        r.job,
        files(r.files, r.bytes),
        r.roots.len(),
        plural(r.roots.len()),
        files(r.files_uploaded, r.bytes_uploaded),
    );
    if r.skipped > 0 {
        let _ = write!(text, "; skipped {} that vanished or could not be read", r.skipped);
    }
    if r.symlinks > 0 {
        let _ = write!(
            text,
            "; left out {} symbolic link{} (snapshots hold regular files only)",
            r.symlinks,
            plural(r.symlinks as usize)
        );
    }
    let _ = write!(
        text,
        "\nsnapshot {}: {} files ({}), {}",
        r.key,
        r.manifest_files,
        format_bytes(r.manifest_bytes),
        if r.changed { format!("{} added or changed", r.files_added) } else { "unchanged".to_owned() }
    );
    text
}

fn placement_label(p: Placement) -> &'static str {
    match p {
        Placement::Nothing => "none",
        Placement::Renamed => "renamed",
        Placement::Linked => "linked",
    }
}

pub fn root_json(r: &RootReport) -> Value {
    json!({
        "event": "root",
        "name": r.name,
        "path": r.target,
        "recorded_path": r.recorded,
        "relocated": r.relocated,
        "files": r.files,
        "restored_files": r.restored_files,
        "restored_bytes": r.restored_bytes,
        "present": r.present,
        "missing": r.missing,
        "placement": placement_label(r.placement),
    })
}

pub fn restore_json(r: &RestoreReport) -> Value {
    json!({
        "event": "restored",
        "job": r.job,
        "key": r.key,
        "restored_files": r.restored_files(),
        "restored_bytes": r.restored_bytes(),
        "present": r.present(),
        "missing": r.missing(),
        "relocated": r.relocated().map(|root| root.name.as_str()).collect::<Vec<_>>(),
        "unknown_roots": r.unknown_roots,
        "environment": r.environment,
        "saved_by": r.saved_by,
        "updated_unix_ms": r.updated_unix_ms,
        "seconds": r.seconds,
    })
}

pub fn restore_text(r: &RestoreReport) -> String {
    let mut text = String::new();
    for root in &r.roots {
        let _ = writeln!(
            text,
            "{} -> {}: {} restored ({}), {} present, {} missing",
            root.name,
            root.target.display(),
            root.restored_files,
            format_bytes(root.restored_bytes),
            root.present,
            root.missing
        );
    }
    let _ = write!(
        text,
        "restored job `{}`: {} in {:.3} s; {} present, {} missing; snapshot {} saved by {}",
        r.job,
        files(r.restored_files(), r.restored_bytes()),
        r.seconds,
        r.present(),
        r.missing(),
        r.key,
        or_unknown(&r.saved_by),
    );
    text
}

/// What the user should know about a restore that succeeded: roots away from their recorded
/// path, roots asked for that the snapshot lacks, files no tier held.
pub fn restore_warnings(r: &RestoreReport) -> Vec<String> {
    let mut warnings: Vec<String> = r
        .relocated()
        .map(|root| {
            format!(
                "root `{}` was restored to {}, not where it was saved ({}): JIT caches such as Inductor's \
                 are only fast at the path they were written at",
                root.name,
                root.target.display(),
                root.recorded
            )
        })
        .collect();
    for name in &r.unknown_roots {
        warnings.push(format!("the snapshot has no root `{name}`: nothing to restore there"));
    }
    if r.missing() > 0 {
        warnings.push(format!(
            "{} file{} of the snapshot could not be fetched intact from any tier and {} skipped",
            r.missing(),
            plural(r.missing() as usize),
            if r.missing() == 1 { "was" } else { "were" }
        ));
    }
    warnings
}

pub fn not_found_json(id: &SnapshotId, host_environment: &BTreeMap<String, String>) -> Value {
    json!({ "event": "not_found", "job": id.job, "keys": id.keys, "host_environment": host_environment })
}

pub fn not_found_text(id: &SnapshotId, host_environment: &BTreeMap<String, String>) -> String {
    let mut parts = id.keys.clone();
    parts.extend(host_environment.iter().map(|(k, v)| (k.clone(), v.clone())));
    format!("no snapshot of job `{}` for {}", id.job, environment_text(&parts))
}

/// `k=v, k=v` in name order; `no key parts` when empty.
fn environment_text(environment: &BTreeMap<String, String>) -> String {
    if environment.is_empty() {
        return "no key parts".to_owned();
    }
    environment.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(", ")
}

fn sorted(map: &std::collections::HashMap<String, String>) -> BTreeMap<String, String> {
    map.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
}

fn or_unknown(s: &str) -> &str {
    if s.is_empty() { "(unknown)" } else { s }
}

/// A manifest's summary, as `ListSnapshots` gives it, so `show` and `list` print alike.
pub fn summary_json(s: &pb::SnapshotSummary) -> Value {
    json!({
        "job": s.job,
        "key": s.key,
        "environment": sorted(&s.environment),
        "files": s.files,
        "total_bytes": s.total_bytes,
        "updated_unix_ms": s.updated_unix_ms,
        "saved_by": s.saved_by,
        "roots": s.roots.iter().map(|r| json!({"name": r.name, "path": r.path})).collect::<Vec<_>>(),
    })
}

/// A summary for humans: a headline, then the environment and the roots, indented.
pub fn summary_text(s: &pb::SnapshotSummary, now_ms: i64) -> String {
    let mut text = format!(
        "{}  {}  saved {} by {}  key {}",
        s.job,
        files(s.files, s.total_bytes),
        ago(now_ms - s.updated_unix_ms),
        or_unknown(&s.saved_by),
        s.key
    );
    let _ = write!(text, "\n    environment  {}", environment_text(&sorted(&s.environment)));
    for root in &s.roots {
        let _ = write!(text, "\n    root {}  {}", root.name, root.path);
    }
    text
}

/// `12 s ago`, `5 min ago`, `3 h ago`, `2 days ago`.
pub(crate) fn ago(ms: i64) -> String {
    let s = ms.max(0) / 1000;
    match s {
        0..60 => format!("{s} s ago"),
        60..3600 => format!("{} min ago", s / 60),
        3600..86_400 => format!("{} h ago", s / 3600),
        _ => format!("{} days ago", s / 86_400),
    }
}

pub fn file_json(f: &pb::SnapshotFile) -> Value {
    json!({ "root": f.root, "path": f.path, "mode": f.mode, "digest": hex::encode(&f.digest), "size": f.size })
}

/// One manifest entry for humans: mode in octal, size, the digest's first 16 hex digits, path.
pub fn file_text(f: &pb::SnapshotFile) -> String {
    let digest = hex::encode(&f.digest);
    format!("{:04o}  {:>10}  {}  {}/{}", f.mode, format_bytes(f.size), &digest[..digest.len().min(16)], f.root, f.path)
}

/// Milliseconds since the epoch, now.
pub fn now_ms() -> i64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn root(name: &str, relocated: bool) -> RootReport {
        RootReport {
            name: name.into(),
            target: PathBuf::from(format!("/b/{name}")),
            recorded: format!("/a/{name}"),
            relocated,
            files: 4,
            restored_files: 2,
            restored_bytes: 2048,
            present: 1,
            missing: 1,
            placement: Placement::Linked,
        }
    }

    fn report() -> RestoreReport {
        RestoreReport {
            job: "j".into(),
            key: "ab".repeat(32),
            environment: [("host.target".to_string(), "sm_90".to_string())].into(),
            saved_by: "host-a".into(),
            updated_unix_ms: 0,
            roots: vec![root("triton", true), root("inductor", false)],
            unknown_roots: vec!["vllm".into()],
            seconds: 0.25,
        }
    }

    #[test]
    fn restore_lines_count_per_root_and_in_all() {
        let r = report();
        let line = restore_json(&r);
        assert_eq!(line["event"], "restored");
        assert_eq!(
            (line["restored_files"].as_u64(), line["present"].as_u64(), line["missing"].as_u64()),
            (Some(4), Some(2), Some(2))
        );
        assert_eq!(line["relocated"], json!(["triton"]));
        assert_eq!(line["environment"]["host.target"], "sm_90");
        let root = root_json(&r.roots[0]);
        assert_eq!(root["placement"], "linked");
        assert_eq!(root["path"], "/b/triton");
        assert_eq!(root["recorded_path"], "/a/triton");
        let text = restore_text(&r);
        assert!(text.starts_with("triton -> /b/triton: 2 restored (2.0 KiB), 1 present, 1 missing\n"), "{text}");
        assert!(text.contains("restored job `j`: 4 files (4.0 KiB) in 0.250 s; 2 present, 2 missing"), "{text}");
        let warnings = restore_warnings(&r);
        assert_eq!(warnings.len(), 3, "{warnings:?}");
        assert!(warnings[0].contains("not where it was saved (/a/triton)"), "{}", warnings[0]);
        assert!(warnings[1].contains("no root `vllm`"));
        assert!(warnings[2].starts_with("2 files of the snapshot"), "{}", warnings[2]);
    }

    #[test]
    fn a_miss_says_what_was_looked_for() {
        let id = SnapshotId::new("j", [("torch".to_string(), "2.11".to_string())]).unwrap();
        let host: BTreeMap<String, String> = [("host.target".to_string(), "sm_90".to_string())].into();
        assert_eq!(not_found_text(&id, &host), "no snapshot of job `j` for host.target=sm_90, torch=2.11");
        assert_eq!(not_found_json(&id, &host)["host_environment"]["host.target"], "sm_90");
    }

    #[test]
    fn manifests_print_as_summaries_and_files() {
        let file =
            pb::SnapshotFile { root: "t".into(), path: "a/b".into(), mode: 0o644, digest: vec![0xab; 32], size: 5 };
        let m = pb::SnapshotManifest {
            job: "j".into(),
            key: "cd".repeat(32),
            files: vec![file.clone()],
            total_bytes: 5,
            updated_unix_ms: 1_000,
            roots: vec![pb::SnapshotRoot { name: "t".into(), path: "/x/t".into() }],
            ..Default::default()
        };
        let summary = pb::SnapshotSummary::from(&m);
        assert_eq!(summary_json(&summary)["files"], 1);
        let text = summary_text(&summary, 3_601_000);
        assert!(text.starts_with("j  1 file (5 B)  saved 1 h ago by (unknown)"), "{text}");
        assert!(text.contains("\n    root t  /x/t"), "{text}");
        assert_eq!(file_json(&file)["digest"], "ab".repeat(32));
        assert_eq!(file_text(&file), format!("0644         5 B  {}  t/a/b", "ab".repeat(8)));
    }
}
