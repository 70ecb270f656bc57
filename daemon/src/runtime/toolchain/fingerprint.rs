//! Toolchain fingerprints: the version the library reports plus a blake3 of the files actually
//! loaded (NVRTC and its builtins) and of every header on the default include path. Two hosts
//! share artifacts only when these match, so any byte of difference in the toolchain splits the
//! cache instead of serving an artifact another compiler produced.

use kiln_proto::Fingerprint;
use std::io::Read;
use std::path::{Path, PathBuf};

/// Hashes the toolchain's files once, at start-up (about 25 MB for a CUDA 13 wheel tree).
pub fn of_files(
    toolchain: &str,
    version: &str,
    libraries: &[PathBuf],
    include_dirs: &[PathBuf],
) -> std::io::Result<Fingerprint> {
    let mut h = blake3::Hasher::new();
    let mut field = |bytes: &[u8]| {
        h.update(&(bytes.len() as u64).to_le_bytes());
        h.update(bytes);
    };
    field(toolchain.as_bytes());
    field(version.as_bytes());
    for lib in libraries {
        field(blake3_file(lib)?.as_bytes());
    }
    for dir in distinct_roots(include_dirs) {
        let mut files = Vec::new();
        walk(dir, &mut files)?;
        files.sort();
        for file in files {
            // Names relative to the include root: where the toolkit lives must not matter.
            let rel = file.strip_prefix(dir).unwrap_or(&file);
            field(rel.as_os_str().as_encoded_bytes());
            field(blake3_file(&file)?.as_bytes());
        }
    }
    Ok(Fingerprint::from_bytes(*h.finalize().as_bytes()))
}

/// Include dirs that are not inside another one (include/cccl is inside include/).
fn distinct_roots(dirs: &[PathBuf]) -> Vec<&Path> {
    dirs.iter()
        .filter(|d| !dirs.iter().any(|other| other != *d && d.starts_with(other)))
        .map(PathBuf::as_path)
        .collect()
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let path = entry.path();
        let kind = std::fs::metadata(&path)?;
        if kind.is_dir() {
            walk(&path, out)?;
        } else if kind.is_file() {
            out.push(path);
        }
    }
    Ok(())
}

fn blake3_file(path: &Path) -> std::io::Result<blake3::Hash> {
    let mut h = blake3::Hasher::new();
    let mut f = std::fs::File::open(path)?;
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            return Ok(h.finalize());
        }
        h.update(&buf[..n]);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn every_file_and_the_version_count() {
        let dir = tempfile::tempdir().unwrap();
        let lib = dir.path().join("libnvrtc.so.13");
        let inc = dir.path().join("include");
        std::fs::create_dir_all(inc.join("cccl")).unwrap();
        std::fs::write(&lib, b"lib").unwrap();
        std::fs::write(inc.join("a.h"), b"a").unwrap();
        std::fs::write(inc.join("cccl/b.h"), b"b").unwrap();
        let dirs = [inc.clone(), inc.join("cccl")];
        let fp = || of_files("nvrtc", "13.0", std::slice::from_ref(&lib), &dirs).unwrap();
        let base = fp();
        assert_eq!(base, fp());
        assert_ne!(of_files("nvrtc", "13.1", std::slice::from_ref(&lib), &dirs).unwrap(), base);
        std::fs::write(inc.join("cccl/b.h"), b"b2").unwrap();
        let after_header = fp();
        assert_ne!(after_header, base);
        std::fs::write(&lib, b"lib\0").unwrap();
        assert_ne!(fp(), after_header);
    }
}
