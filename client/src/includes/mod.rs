//! Resolves a `.cu` file's includes on the client's side.
//!
//! kilnd never reads a path a client names (compiler input is untrusted, and the daemon may be on
//! another host), so the headers a kernel needs travel with it, each by the name its `#include`
//! spells and by content. NVRTC then finds them by that name. This module walks the include
//! graph the way a compiler would and collects those headers:
//!
//! - `#include "name"`: next to the including file first, then through the `-I` dirs in order;
//! - `#include <name>`: through the `-I` dirs only. Angle includes found nowhere (the CUDA
//!   toolkit's own headers, usually) are left to the daemon, which has the toolkit;
//! - quoted includes found nowhere are left too: the daemon's compile reports them in the log;
//! - absolute names are skipped: the daemon refuses them, and they would leak host paths.
//!
//! Headers are read afresh on every call, so an edited header changes the kernel's key.

mod scan;

pub use scan::{Delimiter, Directive, directives};

use kiln_proto::pb;
use std::collections::{BTreeMap, HashSet};
use std::io;
use std::path::{Path, PathBuf};

/// Why a kernel's headers could not be collected.
#[derive(Debug, thiserror::Error)]
pub enum IncludeError {
    /// The cause is in the message rather than in `source()`, so chains print it once.
    #[error("reading {}: {error}", path.display())]
    Read { path: PathBuf, error: io::Error },

    /// Sources and headers travel as protobuf `string`s, which must be UTF-8.
    #[error("{} is not UTF-8 text", path.display())]
    NotUtf8 { path: PathBuf },

    /// NVRTC sees each header by its name only, so one name must mean one content in a kernel.
    #[error(
        "header \"{name}\" means two different files in one kernel: {} (included from {}) and {} \
         (included from {}); NVRTC knows headers by name only, so rename one of them",
        first.display(), first_from.display(), second.display(), second_from.display()
    )]
    Conflict { name: String, first: PathBuf, first_from: PathBuf, second: PathBuf, second_from: PathBuf },
}

/// A header found on disk, and where, for error messages.
#[derive(Debug)]
struct Found {
    content: String,
    path: PathBuf,
    included_from: PathBuf,
}

/// Collects the headers that `source` (the text of the file at `source_path`) includes, directly
/// or through other headers, sorted by name.
///
/// `source` is passed in rather than read here so the caller hashes and sends exactly the text
/// that was scanned.
pub fn resolve_headers(
    source_path: &Path,
    source: &str,
    include_dirs: &[PathBuf],
) -> Result<Vec<pb::Header>, IncludeError> {
    let mut found: BTreeMap<String, Found> = BTreeMap::new();
    // Files already scanned, by canonical path, so include cycles and diamonds end.
    let mut scanned: HashSet<PathBuf> = HashSet::new();
    scanned.insert(canonical(source_path));
    let mut pending: Vec<(PathBuf, String)> = vec![(source_path.to_path_buf(), source.to_owned())];

    while let Some((file, text)) = pending.pop() {
        let dir = file.parent().unwrap_or(Path::new("."));
        for directive in directives(&text) {
            if Path::new(&directive.name).is_absolute() {
                continue;
            }
            let Some(path) = locate(&directive, dir, include_dirs) else {
                continue;
            };
            let content = read_text(&path)?;
            if let Some(previous) = found.get(&directive.name) {
                if previous.content != content {
                    return Err(IncludeError::Conflict {
                        name: directive.name,
                        first: previous.path.clone(),
                        first_from: previous.included_from.clone(),
                        second: path,
                        second_from: file.clone(),
                    });
                }
            } else {
                let entry = Found { content: content.clone(), path: path.clone(), included_from: file.clone() };
                found.insert(directive.name.clone(), entry);
            }
            if scanned.insert(canonical(&path)) {
                pending.push((path, content));
            }
        }
    }
    Ok(found.into_iter().map(|(name, f)| pb::Header { name, content: f.content }).collect())
}

/// The file a directive names, or `None` when it is not found (left to the daemon).
fn locate(directive: &Directive, including_dir: &Path, include_dirs: &[PathBuf]) -> Option<PathBuf> {
    let beside = match directive.delimiter {
        Delimiter::Quoted => Some(including_dir),
        Delimiter::Angle => None,
    };
    beside
        .into_iter()
        .chain(include_dirs.iter().map(PathBuf::as_path))
        .map(|dir| dir.join(&directive.name))
        .find(|candidate| candidate.is_file())
}

fn read_text(path: &Path) -> Result<String, IncludeError> {
    let bytes = std::fs::read(path).map_err(|error| IncludeError::Read { path: path.to_path_buf(), error })?;
    String::from_utf8(bytes).map_err(|_| IncludeError::NotUtf8 { path: path.to_path_buf() })
}

/// The canonical path when it can be had; otherwise the path as given, which only risks scanning
/// a file twice.
fn canonical(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
