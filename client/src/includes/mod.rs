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
//! - absolute names are skipped: the daemon refuses them, and they would leak host paths;
//! - quoted names with `..` (`#include "../include/scale.cuh"`, everyday nvcc code) are
//!   resolved here and sent under a name the daemon accepts, `kiln-up/<digest>/<file name>`,
//!   where the digest is blake3 of the header as sent: the directive is rewritten to that name
//!   in the text that is sent. The name is a function of content only, so two checkouts at
//!   different paths send the same bytes and share cache keys. One that is found nowhere is an
//!   error here, naming the file and the directive, rather than a refusal from the daemon.
//!
//! Headers are read afresh on every call, so an edited header changes the kernel's key.

mod scan;

pub use scan::{Delimiter, Directive, directives};

use kiln_proto::pb;
use std::collections::{BTreeMap, HashMap, HashSet};
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

    /// A `..` name must be resolved here: the daemon refuses it and has no file system to search.
    #[error(
        "{}: #include \"{name}\" was found neither beside it nor in an -I directory (names with `..` are resolved \
         on this side and sent by content)",
        from.display()
    )]
    NotFound { name: String, from: PathBuf },

    /// A header's name as sent is the digest of its content as sent, which a cycle through `..`
    /// names would make depend on itself.
    #[error(
        "{}: #include \"{name}\" closes an include cycle through `..` names, which kiln cannot name by content; \
         include it through an -I directory instead",
        from.display()
    )]
    UpCycle { name: String, from: PathBuf },

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

/// What a kernel's source becomes once its includes are resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// The source as sent: the text given, with `..` include names rewritten.
    pub source: String,
    /// The headers as sent, sorted by name.
    pub headers: Vec<pb::Header>,
    /// Each header's name as sent and the file it came from, for naming the user's files in
    /// compile logs and errors.
    pub paths: Vec<(String, PathBuf)>,
}

/// The prefix of the names under which `..` includes are sent.
pub const UP_PREFIX: &str = "kiln-up/";

/// Collects the headers that `source` (the text of the file at `source_path`) includes, directly
/// or through other headers, sorted by name.
///
/// `source` is passed in rather than read here so the caller hashes and sends exactly the text
/// that was scanned. A source with `..` includes is sent rewritten: use [`resolve`] for it.
pub fn resolve_headers(
    source_path: &Path,
    source: &str,
    include_dirs: &[PathBuf],
) -> Result<Vec<pb::Header>, IncludeError> {
    Ok(resolve(source_path, source, include_dirs)?.headers)
}

/// Resolves `source`'s includes: the headers to send, and the source and headers rewritten
/// where they include a `..` name.
pub fn resolve(source_path: &Path, source: &str, include_dirs: &[PathBuf]) -> Result<Resolved, IncludeError> {
    let mut walk = Walk { include_dirs, found: BTreeMap::new(), done: HashMap::new(), active: HashSet::new() };
    let source = walk.visit(source_path, source)?;
    let mut headers = Vec::with_capacity(walk.found.len());
    let mut paths = Vec::with_capacity(walk.found.len());
    for (name, f) in walk.found {
        let content = walk.done.get(&canonical(&f.path)).cloned().unwrap_or(f.content);
        paths.push((name.clone(), f.path));
        headers.push(pb::Header { name, content });
    }
    Ok(Resolved { source, headers, paths })
}

/// One walk of a kernel's include graph, depth first, so that a header's `..` includes are
/// named (by the digest of what is sent) before the header itself is.
struct Walk<'a> {
    include_dirs: &'a [PathBuf],
    /// Headers by the name they are sent under.
    found: BTreeMap<String, Found>,
    /// Each file visited, by canonical path, as it is sent (rewritten where it includes `..`).
    done: HashMap<PathBuf, String>,
    /// Files on the current path of the walk: a header reached again from inside itself is a
    /// cycle, which include guards end for the compiler and this set ends here.
    active: HashSet<PathBuf>,
}

impl Walk<'_> {
    /// Visits `file`, whose text is `text`, and returns the text as sent.
    fn visit(&mut self, file: &Path, text: &str) -> Result<String, IncludeError> {
        let key = canonical(file);
        if let Some(done) = self.done.get(&key) {
            return Ok(done.clone());
        }
        self.active.insert(key.clone());
        let dir = file.parent().unwrap_or(Path::new("."));
        let mut renames: Vec<(String, String)> = Vec::new();
        for directive in directives(text) {
            if Path::new(&directive.name).is_absolute() {
                continue;
            }
            let up = directive.delimiter == Delimiter::Quoted && directive.name.split('/').any(|p| p == "..");
            let Some(path) = locate(&directive, dir, self.include_dirs) else {
                if up {
                    return Err(IncludeError::NotFound { name: directive.name, from: file.to_path_buf() });
                }
                continue;
            };
            let content = read_text(&path)?;
            let header_key = canonical(&path);
            let name = if self.active.contains(&header_key) {
                if up {
                    return Err(IncludeError::UpCycle { name: directive.name, from: file.to_path_buf() });
                }
                directive.name.clone()
            } else {
                let sent = self.visit(&path, &content)?;
                if up { up_name(&sent, &path) } else { directive.name.clone() }
            };
            if up {
                renames.push((directive.name.clone(), name.clone()));
            }
            if let Some(previous) = self.found.get(&name) {
                if previous.content != content {
                    return Err(IncludeError::Conflict {
                        name: directive.name,
                        first: previous.path.clone(),
                        first_from: previous.included_from.clone(),
                        second: path,
                        second_from: file.to_path_buf(),
                    });
                }
            } else {
                let entry = Found { content, path, included_from: file.to_path_buf() };
                self.found.insert(name, entry);
            }
        }
        let sent = rewrite(text, &renames);
        self.active.remove(&key);
        self.done.insert(key, sent.clone());
        Ok(sent)
    }
}

/// The name a `..` include is sent under: [`UP_PREFIX`], 16 hex digits of blake3 of the header
/// as sent, and its file name, which keeps compile logs readable.
fn up_name(sent: &str, path: &Path) -> String {
    let digest = blake3::hash(sent.as_bytes()).to_hex();
    let file = path.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
    format!("{UP_PREFIX}{}/{file}", &digest[..16])
}

/// `text` with the quoted name of each `#include` directive in `renames` replaced. Only lines
/// that begin with `#` are touched; a directive split over lines with a backslash keeps its
/// name, and the daemon then refuses it with the line.
fn rewrite(text: &str, renames: &[(String, String)]) -> String {
    if renames.is_empty() {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len());
    for line in text.split_inclusive('\n') {
        let directive =
            line.trim_start().strip_prefix('#').is_some_and(|rest| rest.trim_start().starts_with("include"));
        if !directive {
            out.push_str(line);
            continue;
        }
        let mut line = line.to_owned();
        for (from, to) in renames {
            line = line.replacen(&format!("\"{from}\""), &format!("\"{to}\""), 1);
        }
        out.push_str(&line);
    }
    out
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
