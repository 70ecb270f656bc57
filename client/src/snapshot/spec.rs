//! What a snapshot is called and which directories it covers, as callers name them: the job
//! with its key parts, and roots given as `DIR` or `NAME=DIR`. Pure functions of their
//! arguments (and the working directory), so the naming rules, which the Python client shares,
//! are unit-tested here.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use kiln_proto::pb;

/// The longest root name; longer default names are cut here.
const MAX_ROOT_NAME: usize = 64;

/// Names a snapshot: the job and the caller's key parts. kilnd adds the host's facts
/// (`host.gpu`, `host.target`, ...) itself and checks every field, so a bad name is refused in
/// one place, with the same message for every client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotId {
    pub job: String,
    /// Sorted, so what is printed is stable; the wire map has no order anyway.
    pub keys: BTreeMap<String, String>,
}

impl SnapshotId {
    /// A name part given twice is refused: which of the two values was meant cannot be known.
    pub fn new(job: &str, keys: impl IntoIterator<Item = (String, String)>) -> Result<SnapshotId, String> {
        let mut map = BTreeMap::new();
        for (name, value) in keys {
            if map.insert(name.clone(), value).is_some() {
                return Err(format!("key part `{name}` is given twice"));
            }
        }
        Ok(SnapshotId { job: job.to_owned(), keys: map })
    }

    pub fn to_pb(&self) -> pb::SnapshotId {
        pb::SnapshotId { job: self.job.clone(), keys: self.keys.iter().map(|(k, v)| (k.clone(), v.clone())).collect() }
    }
}

/// Parses one `K=V` key part. The name's characters are kilnd's to check.
pub fn parse_key_part(arg: &str) -> Result<(String, String), String> {
    match arg.split_once('=') {
        Some((name, value)) if !name.is_empty() => Ok((name.to_owned(), value.to_owned())),
        _ => Err(format!("`{arg}` is not K=V")),
    }
}

/// A directory a snapshot covers, by name, at an absolute path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Root {
    pub name: String,
    /// Absolute and lexically normalized (no `.`, `..` or repeated `/`), symlinks not resolved:
    /// the path a JIT cache was configured with is the one it is valid at, whatever it points to.
    pub path: PathBuf,
    /// Whether the caller gave the name (`NAME=DIR`) rather than a bare `DIR`: a restore puts a
    /// bare directory under a single-root snapshot's root whatever its last component is.
    pub named: bool,
}

impl Root {
    /// `DIR` or `NAME=DIR`. The text before the first `=` is a name only if it is a valid root
    /// name, so `/data/a=b` is a directory; a relative directory whose name holds `=` can be
    /// given as `./a=b`. The default name is the directory's last component, sanitized.
    pub fn parse(arg: &str) -> Result<Root, String> {
        let (name, dir) = match arg.split_once('=') {
            Some((name, dir)) if is_root_name(name) => (Some(name), dir),
            _ => (None, arg),
        };
        if dir.is_empty() {
            return Err(format!("`{arg}` names no directory"));
        }
        let path = absolute(Path::new(dir)).map_err(|e| format!("{dir}: {e}"))?;
        let named = name.is_some();
        let name = match name {
            Some(name) => name.to_owned(),
            None => default_name(&path).ok_or_else(|| format!("{dir}: give the root a name, as NAME={dir}"))?,
        };
        Ok(Root { name, path, named })
    }

    /// The recorded path, which the wire carries as a string.
    pub fn path_str(&self) -> Result<&str, String> {
        self.path.to_str().ok_or_else(|| format!("{}: the path is not UTF-8", self.path.display()))
    }
}

/// Whether `name` is 1 to 64 characters of `[A-Za-z0-9_.-]`.
pub fn is_root_name(name: &str) -> bool {
    (1..=MAX_ROOT_NAME).contains(&name.len()) && name.bytes().all(is_name_byte)
}

fn is_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-')
}

/// The last component with every other character replaced by `_`, cut at 64; `None` for `/`.
pub fn default_name(path: &Path) -> Option<String> {
    let last = path.file_name()?.to_string_lossy();
    let name: String =
        last.chars().map(|c| if c.is_ascii() && is_name_byte(c as u8) { c } else { '_' }).take(MAX_ROOT_NAME).collect();
    Some(name)
}

/// `path` made absolute against the working directory, then normalized lexically as Python's
/// `os.path.abspath` does: `.` dropped, `..` removing the component before it.
pub fn absolute(path: &Path) -> std::io::Result<PathBuf> {
    let joined = if path.is_absolute() { path.to_path_buf() } else { std::env::current_dir()?.join(path) };
    let mut out = PathBuf::from("/");
    for component in joined.components() {
        match component {
            Component::Normal(part) => out.push(part),
            Component::ParentDir => {
                out.pop();
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    Ok(out)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn roots_are_named_by_their_last_component_or_explicitly() {
        let root = Root::parse("/data/cache/triton/").unwrap();
        assert_eq!(root, Root { name: "triton".into(), path: "/data/cache/triton".into(), named: false });
        let root = Root::parse("inductor=/tmp/torchinductor_root").unwrap();
        assert_eq!(root, Root { name: "inductor".into(), path: "/tmp/torchinductor_root".into(), named: true });
        assert_eq!(Root::parse("/srv/a=b").unwrap().name, "a_b", "a path before = is no name");
        assert_eq!(Root::parse("/x/caché dir").unwrap().name, "cach__dir");
        assert_eq!(Root::parse(&format!("/x/{}", "a".repeat(80))).unwrap().name.len(), 64);
        assert!(Root::parse("/").is_err());
        assert!(Root::parse("name=").is_err());
        assert!(Root::parse("").is_err());
    }

    #[test]
    fn paths_are_absolute_and_normalized_without_resolving_links() {
        assert_eq!(absolute(Path::new("/a/./b//c/../d")).unwrap(), PathBuf::from("/a/b/d"));
        assert_eq!(absolute(Path::new("/../a")).unwrap(), PathBuf::from("/a"));
        let cwd = std::env::current_dir().unwrap();
        assert_eq!(absolute(Path::new("x/y")).unwrap(), cwd.join("x/y"));
        assert_eq!(Root::parse(".").unwrap().path, absolute(&cwd).unwrap());
    }

    #[test]
    fn key_parts_are_k_equals_v_and_unique() {
        assert_eq!(parse_key_part("torch=2.11.0").unwrap(), ("torch".into(), "2.11.0".into()));
        assert_eq!(parse_key_part("flags=a=b").unwrap(), ("flags".into(), "a=b".into()));
        assert_eq!(parse_key_part("empty=").unwrap(), ("empty".into(), String::new()));
        assert!(parse_key_part("novalue").is_err());
        assert!(parse_key_part("=v").is_err());
        let pairs = [("a".to_string(), "1".to_string()), ("a".to_string(), "2".to_string())];
        assert!(SnapshotId::new("job", pairs).is_err());
        let id = SnapshotId::new("job", [("b".into(), "2".into()), ("a".into(), "1".into())]).unwrap();
        assert_eq!(id.to_pb().keys.len(), 2);
    }
}
