//! Validation of `kiln.v1.Blobs` requests. Caller strings are bounded and checked here; none of
//! them ever becomes a path or a Redis key (only the blake3 of them does).

use crate::core::blob::Scope;
use crate::error::{Error, invalid};
use kiln_proto::pb::{BlobFile, BlobScope};
use std::collections::HashSet;
use std::time::Duration;

pub(crate) const MAX_NAMESPACE: usize = 32;
pub(crate) const MAX_TOOL_VERSION: usize = 256;
pub(crate) const MAX_KEYS: usize = 1024;
pub(crate) const MAX_KEY_BYTES: usize = 1024;
pub(crate) const MAX_FILES: usize = 256;
pub(crate) const MAX_FILE_NAME: usize = 255;
/// The longest wait or hold a client may ask for.
pub const MAX_WAIT: Duration = Duration::from_secs(3600);

pub fn scope(scope: Option<&BlobScope>) -> Result<Scope, Error> {
    let scope = scope.ok_or_else(|| invalid("scope", "missing"))?;
    let ns = &scope.namespace;
    if ns.is_empty() || ns.len() > MAX_NAMESPACE {
        return Err(invalid("scope.namespace", format!("must be 1 to {MAX_NAMESPACE} characters")));
    }
    if !ns.bytes().all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'_' | b'-')) {
        return Err(invalid("scope.namespace", format!("{ns:?} has characters outside [a-z0-9_-]")));
    }
    let version = &scope.tool_version;
    if version.is_empty() || version.len() > MAX_TOOL_VERSION {
        return Err(invalid("scope.tool_version", format!("must be 1 to {MAX_TOOL_VERSION} bytes")));
    }
    Ok(Scope { namespace: ns.clone(), tool_version: version.clone() })
}

pub(crate) fn caller_key(field: &str, key: &[u8]) -> Result<(), Error> {
    if key.is_empty() || key.len() > MAX_KEY_BYTES {
        return Err(invalid(field, format!("must be 1 to {MAX_KEY_BYTES} bytes, got {}", key.len())));
    }
    Ok(())
}

pub fn keys(keys: &[Vec<u8>]) -> Result<(), Error> {
    if keys.is_empty() || keys.len() > MAX_KEYS {
        return Err(invalid("keys", format!("must hold 1 to {MAX_KEYS} keys, got {}", keys.len())));
    }
    for (i, key) in keys.iter().enumerate() {
        caller_key(&format!("keys[{i}]"), key)?;
    }
    Ok(())
}

/// Files of a put: 1 to 256, names unique and 1 to 255 bytes (a single file may have an empty
/// name), at most `max_bytes` together.
pub fn files(files: &[BlobFile], max_bytes: u64) -> Result<(), Error> {
    if files.is_empty() || files.len() > MAX_FILES {
        return Err(invalid("files", format!("must hold 1 to {MAX_FILES} files, got {}", files.len())));
    }
    let mut names = HashSet::new();
    let mut total = 0u64;
    for (i, file) in files.iter().enumerate() {
        let name = &file.name;
        if name.len() > MAX_FILE_NAME || (name.is_empty() && files.len() > 1) {
            return Err(invalid(
                format!("files[{i}].name"),
                format!("must be 1 to {MAX_FILE_NAME} bytes (empty only for a single file)"),
            ));
        }
        if !names.insert(name.as_str()) {
            return Err(invalid(format!("files[{i}].name"), format!("{name:?} appears twice")));
        }
        total += file.data.len() as u64;
    }
    if total > max_bytes {
        return Err(invalid(
            "files",
            format!("{total} bytes together exceed the limit of {max_bytes} (max_artifact_mb)"),
        ));
    }
    Ok(())
}

/// A wait or hold in milliseconds: zero means `default`, and at most an hour.
pub fn duration(field: &str, ms: u32, default: Duration) -> Result<Duration, Error> {
    let asked = Duration::from_millis(ms.into());
    if asked > MAX_WAIT {
        return Err(invalid(field, format!("{ms} ms is over the limit of {} s", MAX_WAIT.as_secs())));
    }
    Ok(if ms == 0 { default } else { asked })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn s(ns: &str, v: &str) -> Option<BlobScope> {
        Some(BlobScope { namespace: ns.into(), tool_version: v.into() })
    }

    fn message(r: Result<impl std::fmt::Debug, Error>) -> String {
        let e = tonic::Status::from(r.unwrap_err());
        assert_eq!(e.code(), tonic::Code::InvalidArgument);
        e.message().to_string()
    }

    #[test]
    fn scopes_are_bounded_and_plain() {
        assert!(scope(s("triton", "3.6.0").as_ref()).is_ok());
        assert!(message(scope(None)).starts_with("scope:"));
        assert!(message(scope(s("", "1").as_ref())).starts_with("scope.namespace:"));
        assert!(message(scope(s("Triton", "1").as_ref())).starts_with("scope.namespace:"));
        assert!(message(scope(s("../x", "1").as_ref())).starts_with("scope.namespace:"));
        assert!(message(scope(s(&"a".repeat(33), "1").as_ref())).starts_with("scope.namespace:"));
        assert!(message(scope(s("triton", "").as_ref())).starts_with("scope.tool_version:"));
    }

    #[test]
    fn keys_and_files_are_bounded() {
        assert!(message(keys(&[])).starts_with("keys:"));
        assert!(message(keys(&[b"a".to_vec(), Vec::new()])).starts_with("keys[1]:"));
        assert!(message(keys(&[vec![0; 1025]])).starts_with("keys[0]:"));
        let f = |name: &str, n: usize| BlobFile { name: name.into(), data: vec![0; n] };
        assert!(files(&[f("", 1)], 10).is_ok());
        assert!(message(files(&[f("", 1), f("b", 1)], 10)).starts_with("files[0].name:"));
        assert!(message(files(&[f("a", 1), f("a", 1)], 10)).starts_with("files[1].name:"));
        assert!(message(files(&[f("a", 6), f("b", 5)], 10)).starts_with("files:"));
        assert!(message(files(&[], 10)).starts_with("files:"));
    }

    #[test]
    fn durations_default_and_cap() {
        let d = Duration::from_secs(5);
        assert_eq!(duration("wait_ms", 0, d).unwrap(), d);
        assert_eq!(duration("wait_ms", 250, d).unwrap(), Duration::from_millis(250));
        assert!(message(duration("hold_ms", 3_600_001, d)).starts_with("hold_ms:"));
    }
}
