//! Validation of `kiln.v1.Snapshots` requests. Job names, key parts, root names and paths are
//! bounded and checked here; none of them ever becomes a daemon path or a Redis key (only the
//! blake3 of them does), and paths are checked so that no client can hand another a manifest
//! that writes outside its directory.

use crate::error::{Error, invalid};
use kiln_proto::pb::{FileData, SnapshotFile, SnapshotId, SnapshotRoot};
use std::collections::{BTreeMap, HashSet};

pub(crate) const MAX_JOB: usize = 256;
pub(crate) const MAX_KEYS: usize = 32;
pub(crate) const MAX_PART_NAME: usize = 64;
pub(crate) const MAX_PART_VALUE: usize = 256;
/// The prefix of the key parts kilnd adds itself.
pub(crate) const HOST_PREFIX: &str = "host.";
pub(crate) const MAX_DIGESTS: usize = 100_000;
pub(crate) const MAX_PUT_FILES: usize = 4096;
pub(crate) const MAX_ROOTS: usize = 64;
pub(crate) const MAX_ROOT_NAME: usize = 64;
pub(crate) const MAX_PATH: usize = 4096;
/// Files in one snapshot: bounds the manifest, which is one artifact in the tiers.
pub(crate) const MAX_FILES: usize = 200_000;

fn printable(s: &str) -> bool {
    s.bytes().all(|b| (0x20..0x7f).contains(&b))
}

/// A checked snapshot name: the job and the caller's key parts, sorted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Id {
    pub job: String,
    pub keys: BTreeMap<String, String>,
}

pub fn id(field: &str, id: Option<&SnapshotId>) -> Result<Id, Error> {
    let id = id.ok_or_else(|| invalid(field, "missing"))?;
    job(&format!("{field}.job"), &id.job)?;
    if id.keys.len() > MAX_KEYS {
        return Err(invalid(format!("{field}.keys"), format!("at most {MAX_KEYS} key parts, got {}", id.keys.len())));
    }
    for (name, value) in &id.keys {
        let f = format!("{field}.keys[{name:?}]");
        let name_ok = !name.is_empty()
            && name.len() <= MAX_PART_NAME
            && name.bytes().all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'_' | b'.' | b'-'));
        if !name_ok {
            return Err(invalid(&f, format!("names are 1 to {MAX_PART_NAME} characters of [a-z0-9_.-]")));
        }
        if name.starts_with(HOST_PREFIX) {
            return Err(invalid(&f, format!("names starting with {HOST_PREFIX:?} are kilnd's own (the host's facts)")));
        }
        if value.len() > MAX_PART_VALUE || !printable(value) {
            return Err(invalid(&f, format!("values are 0 to {MAX_PART_VALUE} bytes of printable ASCII")));
        }
    }
    Ok(Id { job: id.job.clone(), keys: id.keys.iter().map(|(k, v)| (k.clone(), v.clone())).collect() })
}

pub(crate) fn job(field: &str, job: &str) -> Result<(), Error> {
    if job.is_empty() || job.len() > MAX_JOB || !printable(job) {
        return Err(invalid(field, format!("must be 1 to {MAX_JOB} bytes of printable ASCII")));
    }
    Ok(())
}

/// Digests of 32 bytes, `min` to [`MAX_DIGESTS`] of them.
pub(crate) fn digests(field: &str, digests: &[Vec<u8>], min: usize) -> Result<Vec<[u8; 32]>, Error> {
    if digests.len() < min || digests.len() > MAX_DIGESTS {
        return Err(invalid(field, format!("{min} to {MAX_DIGESTS} digests, got {}", digests.len())));
    }
    digests.iter().enumerate().map(|(i, d)| digest(&format!("{field}[{i}]"), d)).collect()
}

pub(crate) fn digest(field: &str, d: &[u8]) -> Result<[u8; 32], Error> {
    d.try_into().map_err(|_| invalid(field, format!("a blake3 digest is 32 bytes, got {}", d.len())))
}

/// Files to store: each digest must be blake3 of its bytes, each file within `max_bytes`.
pub(crate) fn put_files(files: &[FileData], max_bytes: u64) -> Result<Vec<[u8; 32]>, Error> {
    if files.is_empty() || files.len() > MAX_PUT_FILES {
        return Err(invalid("files", format!("1 to {MAX_PUT_FILES} files, got {}", files.len())));
    }
    files
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let d = digest(&format!("files[{i}].digest"), &f.digest)?;
            if f.data.len() as u64 > max_bytes {
                return Err(invalid(
                    format!("files[{i}].data"),
                    format!("{} bytes, over the limit of {max_bytes} for one file (max_artifact_mb)", f.data.len()),
                ));
            }
            if blake3::hash(&f.data).as_bytes() != &d {
                return Err(invalid(format!("files[{i}].digest"), "is not blake3 of the file's bytes"));
            }
            Ok(d)
        })
        .collect()
}

/// Roots of a save: unique names, absolute paths.
pub fn roots(roots: &[SnapshotRoot]) -> Result<(), Error> {
    if roots.is_empty() || roots.len() > MAX_ROOTS {
        return Err(invalid("roots", format!("1 to {MAX_ROOTS} roots, got {}", roots.len())));
    }
    let mut names = HashSet::new();
    for (i, r) in roots.iter().enumerate() {
        root_name(&format!("roots[{i}].name"), &r.name)?;
        if !names.insert(r.name.as_str()) {
            return Err(invalid(format!("roots[{i}].name"), format!("{:?} is given twice", r.name)));
        }
        if !r.path.starts_with('/') || r.path.len() > MAX_PATH || r.path.contains('\0') {
            return Err(invalid(format!("roots[{i}].path"), format!("an absolute path of at most {MAX_PATH} bytes")));
        }
    }
    Ok(())
}

fn root_name(field: &str, name: &str) -> Result<(), Error> {
    let ok = !name.is_empty()
        && name.len() <= MAX_ROOT_NAME
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
    if ok { Ok(()) } else { Err(invalid(field, format!("1 to {MAX_ROOT_NAME} characters of [A-Za-z0-9_.-]"))) }
}

/// Whether `path` is a plain relative path: '/'-separated parts, none empty, `.` or `..`.
pub fn relative_path_ok(path: &str) -> bool {
    !path.is_empty()
        && path.len() <= MAX_PATH
        && !path.contains('\0')
        && path.split('/').all(|part| !part.is_empty() && part != "." && part != "..")
}

/// The files of a save: each under one of `roots`, a plain relative path, once.
pub fn files(files: &[SnapshotFile], roots: &[SnapshotRoot], max_file_bytes: u64) -> Result<(), Error> {
    if files.len() > MAX_FILES {
        return Err(invalid("files", format!("at most {MAX_FILES} files in a snapshot, got {}", files.len())));
    }
    let root_names: HashSet<&str> = roots.iter().map(|r| r.name.as_str()).collect();
    let mut seen = HashSet::new();
    for (i, f) in files.iter().enumerate() {
        let field = |name: &str| format!("files[{i}].{name}");
        if !root_names.contains(f.root.as_str()) {
            return Err(invalid(field("root"), format!("{:?} is not one of the request's roots", f.root)));
        }
        if !relative_path_ok(&f.path) {
            return Err(invalid(field("path"), "a relative '/'-separated path with no empty, '.' or '..' parts"));
        }
        if f.mode > 0o777 {
            return Err(invalid(field("mode"), format!("permission bits only (at most 0o777), got {:#o}", f.mode)));
        }
        digest(&field("digest"), &f.digest)?;
        if f.size > max_file_bytes {
            return Err(invalid(field("size"), format!("over the limit of {max_file_bytes} bytes for one file")));
        }
        if !seen.insert((f.root.as_str(), f.path.as_str())) {
            return Err(invalid(field("path"), format!("{}/{} is listed twice", f.root, f.path)));
        }
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn paths_that_could_leave_a_root_are_refused() {
        for bad in ["", "/etc/passwd", "a/../../b", "..", "a//b", "./a", "a/", "a\0b"] {
            assert!(!relative_path_ok(bad), "{bad:?} accepted");
        }
        for good in ["a", "a/b.py", "triton/0/ABC/k.cubin", "..a", "a..b/.hidden"] {
            assert!(relative_path_ok(good), "{good:?} refused");
        }
    }

    #[test]
    fn host_parts_belong_to_kilnd() {
        let id = SnapshotId { job: "j".into(), keys: [("host.gpu".to_string(), "x".to_string())].into() };
        let e = super::id("id", Some(&id)).unwrap_err();
        assert!(e.to_string().contains("id.keys[\"host.gpu\"]"), "{e}");
    }

    #[test]
    fn a_digest_must_match_the_bytes() {
        let data = b"hello".to_vec();
        let good = FileData { digest: blake3::hash(&data).as_bytes().to_vec(), data: data.clone() };
        assert!(put_files(&[good], 1 << 20).is_ok());
        let bad = FileData { digest: vec![0; 32], data };
        assert!(put_files(&[bad], 1 << 20).unwrap_err().to_string().starts_with("files[0].digest"));
    }
}
