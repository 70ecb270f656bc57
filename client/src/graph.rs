//! Builds the `CompileGraph` a client sends: from `.cu` files, one kernel per file, or from a
//! graph written by hand in the proto3 JSON mapping.
//!
//! What the daemon would reject anyway (a bad target, duplicate kernel ids) is checked here too,
//! so the user gets the error before anything is sent, naming their file rather than a field.

use crate::includes::{self, IncludeError};
use kiln_proto::{Target, pb};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The file extension of CUDA C++ sources, the only kind of file [`build_graph`] takes so far.
pub const CUDA_EXTENSION: &str = "cu";
/// Files with this extension are PTX kernels, assembled by ptxas.
pub const PTX_EXTENSION: &str = "ptx";

/// How to turn files into a graph. Everything but the files themselves.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GraphOptions {
    /// The graph's name, for logs and as part of each kernel's identity (what `kiln explain`
    /// compares). None by default, so a file's kernel is known by its stem alone, whichever other
    /// files share the command.
    pub name: Option<String>,
    /// `sm_XX`; `None` leaves the choice to the daemon (its `--target`, else its GPU).
    pub target: Option<String>,
    /// Name expressions (`saxpy<float>`) applied to every kernel.
    pub name_expressions: Vec<String>,
    /// `-I` directories, searched in order for included headers.
    pub include_dirs: Vec<PathBuf>,
    /// NVRTC options given to every CUDA kernel, in order.
    pub options: Vec<String>,
    /// ptxas options given to every PTX kernel, in order.
    pub ptxas_options: Vec<String>,
}

/// Why a graph could not be built. Each message carries its cause's text, so causes are not
/// also exposed as `source()` (which would print them twice in an error chain).
#[derive(Debug, thiserror::Error)]
pub enum GraphError {
    #[error("{}: unsupported file type (.{CUDA_EXTENSION} or .{PTX_EXTENSION}; Triton kernels go in a --graph file)", path.display())]
    UnsupportedFile { path: PathBuf },

    #[error("{}: is a directory; name the kernel files in it (for example {}/*.{CUDA_EXTENSION})", path.display(), path.display())]
    Directory { path: PathBuf },

    #[error("{}: empty file, nothing to compile", path.display())]
    EmptyFile { path: PathBuf },

    #[error("{}: cannot name a kernel after this file", path.display())]
    NoStem { path: PathBuf },

    #[error(
        "duplicate kernel id `{id}`: {} and {} (a file's stem is its kernel id; rename one)",
        first.display(), second.display()
    )]
    DuplicateId { id: String, first: PathBuf, second: PathBuf },

    #[error("no files to compile")]
    Empty,

    #[error(transparent)]
    Target(#[from] kiln_proto::target::TargetError),

    #[error("reading {}: {error}", path.display())]
    Read { path: PathBuf, error: std::io::Error },

    #[error("{} is not UTF-8 text", path.display())]
    NotUtf8 { path: PathBuf },

    #[error("{}: {error}", path.display())]
    Includes { path: PathBuf, error: Box<IncludeError> },

    #[error("not a kiln.v1.CompileGraph in proto3 JSON: {error}")]
    Json { error: serde_json::Error },
}

/// The kernel id of a source file: its stem, after checking it is a `.cu` file.
pub fn kernel_id(path: &Path) -> Result<String, GraphError> {
    if path.is_dir() {
        return Err(GraphError::Directory { path: path.to_path_buf() });
    }
    let extension = path.extension().and_then(|e| e.to_str());
    if extension != Some(CUDA_EXTENSION) && extension != Some(PTX_EXTENSION) {
        return Err(GraphError::UnsupportedFile { path: path.to_path_buf() });
    }
    path.file_stem()
        .and_then(|s| s.to_str())
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .ok_or_else(|| GraphError::NoStem { path: path.to_path_buf() })
}

/// Checks a target string the way the daemon will, and returns it in canonical spelling.
pub fn check_target(target: &str) -> Result<String, GraphError> {
    Ok(target.parse::<Target>()?.to_string())
}

/// The names the daemon and its compilers see for the user's files, per kernel, so that errors
/// and compile logs can name the files the user gave instead.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SourceNames {
    /// The file of each kernel, in the graph's order.
    pub files: Vec<PathBuf>,
    /// Per kernel id: each name as the compiler sees it and the user's path it stands for.
    pub by_kernel: HashMap<String, Vec<(String, PathBuf)>>,
}

/// The name NVRTC gives a CUDA kernel's source in its log (daemon/src/runtime/worker/nvrtc_ffi.rs).
pub const NVRTC_SOURCE_NAME: &str = "kernel.cu";
/// The name of the file ptxas reads a PTX kernel from (daemon/src/runtime/toolchain/ptxas.rs).
pub const PTXAS_SOURCE_NAME: &str = "kernel.ptx";

impl SourceNames {
    /// `log`, with the compiler's names of kernel `id`'s files replaced by the user's paths.
    pub fn log_for(&self, id: &str, log: &str) -> String {
        let Some(names) = self.by_kernel.get(id) else {
            return log.to_owned();
        };
        let mut log = log.to_owned();
        // Longest names first, so `kiln-up/…/a.cuh` is replaced before a shorter name inside it.
        let mut names: Vec<&(String, PathBuf)> = names.iter().collect();
        names.sort_by_key(|(name, _)| std::cmp::Reverse(name.len()));
        for (name, path) in names {
            log = replace_name(&log, name, &path.display().to_string());
        }
        log
    }

    /// `message` (an error from the daemon) with each `graph.kernels[N]` it names followed by
    /// the user's file, when the graph was built from files.
    pub fn error_for(&self, message: &str) -> String {
        let mut out = message.to_owned();
        let mut named = Vec::new();
        for (i, file) in self.files.iter().enumerate() {
            let field = format!("graph.kernels[{i}]");
            if message.contains(&format!("{field}.")) || message.contains(&format!("{field}:")) {
                named.push(format!("{field} is {}", file.display()));
            }
        }
        if !named.is_empty() {
            out.push_str(&format!(" ({})", named.join("; ")));
        }
        out
    }
}

/// Replaces each whole occurrence of the file name `name` in `log` with `path`: one not inside a
/// longer name (`kernel.cu` is not in `kernel.cuh`), together with a directory before it (ptxas
/// names its input by the daemon's temporary path).
fn replace_name(log: &str, name: &str, path: &str) -> String {
    let part = |c: char| c.is_alphanumeric() || matches!(c, '_' | '.' | '-' | '/');
    let mut out = String::with_capacity(log.len());
    let mut rest = log;
    while let Some(at) = rest.find(name) {
        let (before, after) = (&rest[..at], &rest[at + name.len()..]);
        let mut start = before.len();
        if before.ends_with('/') {
            start = before.rfind(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | '(')).map_or(0, |i| i + 1);
        }
        let clean_before = before[..start].chars().next_back().is_none_or(|c| !part(c));
        let clean_after = after.chars().next().is_none_or(|c| !(c.is_alphanumeric() || c == '_'))
            && !(after.starts_with('.') && after[1..].starts_with(|c: char| c.is_alphanumeric()));
        if clean_before && clean_after {
            out.push_str(&before[..start]);
            out.push_str(path);
        } else {
            out.push_str(before);
            out.push_str(name);
        }
        rest = after;
    }
    out.push_str(rest);
    out
}

/// Reads each `.cu` file and the headers it includes, and builds one graph with one kernel per
/// file, in the order given.
pub fn build_graph(files: &[PathBuf], opts: &GraphOptions) -> Result<pb::CompileGraph, GraphError> {
    Ok(build_graph_named(files, opts)?.0)
}

/// [`build_graph`], with the names of the user's files as the compilers will see them.
pub fn build_graph_named(
    files: &[PathBuf],
    opts: &GraphOptions,
) -> Result<(pb::CompileGraph, SourceNames), GraphError> {
    let ids = kernel_ids(files)?;
    let target = opts.target.as_deref().map(check_target).transpose()?.unwrap_or_default();
    let mut kernels = Vec::with_capacity(files.len());
    let mut names = SourceNames { files: files.to_vec(), by_kernel: HashMap::new() };
    for (path, id) in files.iter().zip(&ids) {
        let source = read_source(path)?;
        if source.is_empty() {
            return Err(GraphError::EmptyFile { path: path.clone() });
        }
        if path.extension().and_then(|e| e.to_str()) == Some(PTX_EXTENSION) {
            names.by_kernel.insert(id.clone(), vec![(PTXAS_SOURCE_NAME.to_owned(), path.clone())]);
            kernels.push(pb::Kernel {
                id: id.clone(),
                source: Some(pb::kernel::Source::Ptx(pb::PtxSource {
                    ptx: source,
                    options: opts.ptxas_options.clone(),
                })),
            });
            continue;
        }
        let resolved = includes::resolve(path, &source, &opts.include_dirs)
            .map_err(|error| GraphError::Includes { path: path.clone(), error: Box::new(error) })?;
        let mut seen = vec![(NVRTC_SOURCE_NAME.to_owned(), path.clone())];
        seen.extend(resolved.paths);
        names.by_kernel.insert(id.clone(), seen);
        kernels.push(cuda_kernel(id.clone(), resolved.source, resolved.headers, opts));
    }
    let name = opts.name.clone().unwrap_or_default();
    Ok((pb::CompileGraph { name, target, kernels }, names))
}

/// The kernel ids of `files`, checking there is at least one and that no two share a stem.
pub fn kernel_ids(files: &[PathBuf]) -> Result<Vec<String>, GraphError> {
    if files.is_empty() {
        return Err(GraphError::Empty);
    }
    let mut seen: HashMap<String, &PathBuf> = HashMap::new();
    let mut ids = Vec::with_capacity(files.len());
    for path in files {
        let id = kernel_id(path)?;
        if let Some(first) = seen.insert(id.clone(), path) {
            return Err(GraphError::DuplicateId { id, first: first.clone(), second: path.clone() });
        }
        ids.push(id);
    }
    Ok(ids)
}

/// One CUDA kernel; the options that apply to every file come from `opts`.
pub fn cuda_kernel(id: String, source: String, headers: Vec<pb::Header>, opts: &GraphOptions) -> pb::Kernel {
    pb::Kernel {
        id,
        source: Some(pb::kernel::Source::Cuda(pb::CudaSource {
            source,
            name_expressions: opts.name_expressions.clone(),
            headers,
            options: opts.options.clone(),
        })),
    }
}

/// Parses a graph written in the proto3 JSON mapping (camelCase or original field names).
/// `target`, when given, replaces the file's target.
pub fn parse_graph_json(text: &str, target: Option<&str>) -> Result<pb::CompileGraph, GraphError> {
    let mut graph: pb::CompileGraph = serde_json::from_str(text).map_err(|error| GraphError::Json { error })?;
    if let Some(target) = target {
        graph.target = check_target(target)?;
    }
    Ok(graph)
}

fn read_source(path: &Path) -> Result<String, GraphError> {
    let bytes = std::fs::read(path).map_err(|error| GraphError::Read { path: path.to_path_buf(), error })?;
    String::from_utf8(bytes).map_err(|_| GraphError::NotUtf8 { path: path.to_path_buf() })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::fs;

    fn cuda(kernel: &pb::Kernel) -> &pb::CudaSource {
        match &kernel.source {
            Some(pb::kernel::Source::Cuda(cuda)) => cuda,
            _ => panic!("kernel {} has no CUDA source", kernel.id),
        }
    }

    #[test]
    fn kernel_id_is_the_stem_of_a_cu_file() {
        assert_eq!(kernel_id(Path::new("dir/saxpy.cu")).unwrap(), "saxpy");
        assert_eq!(kernel_id(Path::new("a.b.cu")).unwrap(), "a.b");
        assert_eq!(kernel_id(Path::new("k.ptx")).unwrap(), "k");
        for bad in ["k.cuh", "k", "k.py"] {
            let err = kernel_id(Path::new(bad)).unwrap_err();
            assert!(err.to_string().contains("unsupported file type"), "{bad}: {err}");
        }
        assert!(kernel_id(Path::new("dir/.cu")).is_err());
    }

    #[test]
    fn duplicate_stems_are_refused() {
        let files = vec![PathBuf::from("a/k.cu"), PathBuf::from("b/k.cu")];
        let err = kernel_ids(&files).unwrap_err();
        assert!(matches!(&err, GraphError::DuplicateId { id, .. } if id == "k"), "{err:?}");
        assert!(matches!(kernel_ids(&[]), Err(GraphError::Empty)));
    }

    #[test]
    fn builds_one_kernel_per_file_with_shared_options() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("a.cu"), "#include \"h.h\"\nextern \"C\" __global__ void a() {}\n").unwrap();
        fs::write(dir.path().join("b.cu"), "template <class T> __global__ void b(T) {}\n").unwrap();
        fs::write(dir.path().join("h.h"), "// h\n").unwrap();
        let files = vec![dir.path().join("a.cu"), dir.path().join("b.cu")];
        let opts = GraphOptions {
            target: Some("sm_90a".into()),
            name_expressions: vec!["b<float>".into()],
            options: vec!["-lineinfo".into(), "--use_fast_math".into()],
            ..GraphOptions::default()
        };
        let graph = build_graph(&files, &opts).unwrap();
        assert_eq!(graph.name, "", "unnamed unless --name is given");
        assert_eq!(graph.target, "sm_90a");
        let ids: Vec<&str> = graph.kernels.iter().map(|k| k.id.as_str()).collect();
        assert_eq!(ids, ["a", "b"]);
        let a = cuda(&graph.kernels[0]);
        assert_eq!(a.headers, vec![pb::Header { name: "h.h".into(), content: "// h\n".into() }]);
        assert_eq!(a.options, ["-lineinfo", "--use_fast_math"]);
        assert_eq!(a.name_expressions, ["b<float>"]);
        assert!(cuda(&graph.kernels[1]).headers.is_empty());
    }

    #[test]
    fn no_target_leaves_it_to_the_daemon_and_a_bad_one_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("k.cu"), "x").unwrap();
        let files = vec![dir.path().join("k.cu")];
        let named = GraphOptions { name: Some("mine".into()), ..GraphOptions::default() };
        let graph = build_graph(&files, &named).unwrap();
        assert_eq!((graph.name.as_str(), graph.target.as_str()), ("mine", ""));
        let bad = GraphOptions { target: Some("compute_90".into()), ..GraphOptions::default() };
        assert!(matches!(build_graph(&files, &bad), Err(GraphError::Target(_))));
    }

    #[test]
    fn a_directory_or_an_empty_file_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let err = build_graph(&[dir.path().to_path_buf()], &GraphOptions::default()).unwrap_err();
        assert!(matches!(err, GraphError::Directory { .. }), "{err}");
        assert!(err.to_string().contains("is a directory") && err.to_string().contains("*.cu"), "{err}");
        fs::write(dir.path().join("k.cu"), "").unwrap();
        let err = build_graph(&[dir.path().join("k.cu")], &GraphOptions::default()).unwrap_err();
        assert_eq!(err.to_string(), format!("{}: empty file, nothing to compile", dir.path().join("k.cu").display()));
    }

    #[test]
    fn logs_and_errors_name_the_users_files() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join("src")).unwrap();
        fs::create_dir_all(dir.path().join("include")).unwrap();
        fs::write(dir.path().join("src/scale.cu"), "#include \"../include/s.cuh\"\nx\n").unwrap();
        fs::write(dir.path().join("include/s.cuh"), "y\n").unwrap();
        fs::write(dir.path().join("src/v.ptx"), "z\n").unwrap();
        let files = vec![dir.path().join("src/scale.cu"), dir.path().join("src/v.ptx")];
        let (graph, names) = build_graph_named(&files, &GraphOptions::default()).unwrap();
        let header = cuda(&graph.kernels[0]).headers[0].name.clone();
        let log =
            format!("kernel.cu(2): error: x\n{header}(1): error: y\nat line 2 of kernel.cu\nkernel.cuh(1): other\n");
        let shown = names.log_for("scale", &log);
        let cu = files[0].display().to_string();
        let cuh = dir.path().join("src/../include/s.cuh").display().to_string();
        assert_eq!(shown, format!("{cu}(2): error: x\n{cuh}(1): error: y\nat line 2 of {cu}\nkernel.cuh(1): other\n"));
        let ptx = names.log_for("v", "ptxas /tmp/.tmpAb12/kernel.ptx, line 1; error   : bad\n");
        assert_eq!(ptx, format!("ptxas {}, line 1; error   : bad\n", files[1].display()));
        let err = names.error_for("invalid argument: graph.kernels[1].ptx.options[0]: no");
        assert!(err.ends_with(&format!("(graph.kernels[1] is {})", files[1].display())), "{err}");
        assert_eq!(names.error_for("unavailable: gone"), "unavailable: gone");
    }

    #[test]
    fn a_missing_file_names_its_path() {
        let err = build_graph(&[PathBuf::from("/nonexistent/k.cu")], &GraphOptions::default()).unwrap_err();
        assert!(err.to_string().contains("/nonexistent/k.cu"), "{err}");
    }

    #[test]
    fn reads_proto3_json_and_overrides_the_target() {
        let text = r#"{"name": "g", "target": "sm_80", "kernels": [
            {"id": "k", "cuda": {"source": "x", "nameExpressions": ["k<int>"],
             "headers": [{"name": "h.h", "content": "y"}], "options": ["-G"]}}]}"#;
        let graph = parse_graph_json(text, None).unwrap();
        assert_eq!(graph.target, "sm_80");
        let k = cuda(&graph.kernels[0]);
        assert_eq!(k.name_expressions, ["k<int>"]);
        assert_eq!(k.headers[0].name, "h.h");
        assert_eq!(parse_graph_json(text, Some("sm_90")).unwrap().target, "sm_90");
        assert!(matches!(parse_graph_json("{\"kernels\": 3}", None), Err(GraphError::Json { .. })));
    }
}
