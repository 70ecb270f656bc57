//! The framing of a graph's answer, checked before a process's publish is stored: `KILNGB1\n`, a
//! u32 length, a JSON index `{"artifacts": n, "files": [[path, size]]}`, the artifacts, then each
//! file's bytes (what the torch worker's `bundle` writes and kiln.torch reads). kilnd cannot
//! check torch's artifacts themselves; it refuses a publish whose parts do not add up, so one
//! broken client cannot leave every later process a graph that fails to read.

use serde::Deserialize;

const MAGIC: &[u8] = b"KILNGB1\n";

#[derive(Deserialize)]
struct Index {
    artifacts: u64,
    files: Vec<(String, u64)>,
}

/// Why `data` is not a bundle a client reads; Ok for a bundle, or torch's artifacts alone.
pub fn check(data: &[u8]) -> Result<(), String> {
    let Some(rest) = data.strip_prefix(MAGIC) else { return Ok(()) };
    let (length, rest) = rest.split_first_chunk::<4>().ok_or("shorter than its index length")?;
    let length = u32::from_le_bytes(*length) as usize;
    let index = rest.get(..length).ok_or("shorter than its index")?;
    let index: Index = serde_json::from_slice(index).map_err(|e| format!("its index does not read: {e}"))?;
    let mut size = index.artifacts;
    for (path, bytes) in &index.files {
        if !place_in_cache(path) {
            return Err(format!("a file at {path:?}, which is not a place in Inductor's cache"));
        }
        size = size.checked_add(*bytes).ok_or("its sizes overflow")?;
    }
    if size != (rest.len() - length) as u64 {
        return Err("its parts do not add up to its length".into());
    }
    Ok(())
}

/// A short directory and a `.so` or `.gch` file name, nothing that climbs: where Inductor keeps
/// the C++ it built.
fn place_in_cache(path: &str) -> bool {
    let word = |s: &str, max: usize| !s.is_empty() && s.len() <= max;
    let Some((dir, file)) = path.split_once('/') else { return false };
    let ext_ok = file.ends_with(".so") || file.ends_with(".gch");
    word(dir, 64)
        && dir.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        && word(file, 203)
        && ext_ok
        && file.bytes().all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b))
        && !file.starts_with(['.', '-'])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bundle(index: &str, body: &[u8]) -> Vec<u8> {
        let mut out = MAGIC.to_vec();
        out.extend_from_slice(&(index.len() as u32).to_le_bytes());
        out.extend_from_slice(index.as_bytes());
        out.extend_from_slice(body);
        out
    }

    #[test]
    fn a_bundle_whose_parts_add_up_reads() {
        assert_eq!(check(&bundle(r#"{"artifacts": 3, "files": [["ab/c.so", 2]]}"#, b"xyzab")), Ok(()));
        assert_eq!(check(b"torch's artifacts alone"), Ok(()));
    }

    #[test]
    fn a_broken_bundle_is_refused() {
        assert!(check(&bundle(r#"{"artifacts": 3, "files": []}"#, b"xy")).is_err());
        assert!(check(&bundle(r#"{"artifacts": 0, "files": [["../x.so", 0]]}"#, b"")).is_err());
        assert!(check(&bundle(r#"{"artifacts": 0, "files": [["ab/x.py", 0]]}"#, b"")).is_err());
        assert!(check(&bundle("not json", b"")).is_err());
        assert!(check(MAGIC).is_err());
        assert!(check(&bundle(r#"{"artifacts": 18446744073709551615, "files": [["a/b.so", 2]]}"#, b"")).is_err());
    }
}
