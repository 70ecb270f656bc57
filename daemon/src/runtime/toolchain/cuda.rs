//! Finds the CUDA installation NVRTC comes from.
//!
//! Order: `--cuda-root` / `KILN_CUDA_ROOT`, then `$CUDA_HOME`, then `/usr/local/cuda`. A root is a
//! toolkit (`lib64/`, `include/`) or a wheel's `nvidia/cu13` directory (`lib/`, `include/`,
//! `include/cccl`). A root that was named explicitly and is unusable is an error, not a reason to
//! fall through to another, so a fleet never silently runs a toolkit nobody chose.

use super::ToolchainError;
use std::path::{Path, PathBuf};

/// The files of one CUDA installation that NVRTC compiles need.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CudaInstall {
    pub root: PathBuf,
    /// `libnvrtc.so.13`, loaded by absolute path.
    pub nvrtc: PathBuf,
    /// `libnvrtc-builtins.so.13.0`: NVRTC dlopens it by name, so the worker loads it first, by
    /// absolute path and RTLD_GLOBAL, and NVRTC's lookup finds the loaded copy.
    pub builtins: PathBuf,
    /// Default include path, as nvcc has it: the toolkit's `include/` and, where present, the
    /// CCCL headers (`include/cccl`), which `<cooperative_groups.h>` and `<cuda/std/...>` need.
    pub include_dirs: Vec<PathBuf>,
    /// `bin/ptxas`, when the installation has one (a toolkit, or the nvidia-cuda-nvcc wheel).
    pub ptxas: Option<PathBuf>,
}

/// Finds the installation. `explicit` is `--cuda-root`; `cuda_home` is `$CUDA_HOME`.
pub fn discover(explicit: Option<&Path>, cuda_home: Option<&Path>) -> Result<CudaInstall, ToolchainError> {
    if let Some(root) = explicit {
        return inspect(root).map_err(|why| ToolchainError::NotFound(format!("--cuda-root {}: {why}", root.display())));
    }
    let mut tried = Vec::new();
    for root in cuda_home.into_iter().chain([Path::new("/usr/local/cuda")]) {
        match inspect(root) {
            Ok(install) => return Ok(install),
            Err(why) => tried.push(format!("{}: {why}", root.display())),
        }
    }
    Err(ToolchainError::NotFound(format!(
        "tried {}; pass --cuda-root DIR (a CUDA toolkit, or a wheel's nvidia/cu13 directory)",
        tried.join("; ")
    )))
}

/// Checks one candidate root.
fn inspect(root: &Path) -> Result<CudaInstall, String> {
    if !root.is_dir() {
        return Err("not a directory".into());
    }
    let lib_dirs = ["lib64", "lib", "targets/x86_64-linux/lib", "targets/sbsa-linux/lib"];
    let lib_dir = lib_dirs
        .iter()
        .map(|d| root.join(d))
        .find(|d| d.join("libnvrtc.so.13").is_file() || d.join("libnvrtc.so").is_file())
        .ok_or_else(|| format!("no libnvrtc.so.13 under {}", lib_dirs.join(", ")))?;
    let nvrtc = ["libnvrtc.so.13", "libnvrtc.so"].iter().map(|n| lib_dir.join(n)).find(|p| p.is_file());
    let nvrtc = nvrtc.ok_or("libnvrtc missing")?;
    let builtins =
        find_builtins(&lib_dir).ok_or_else(|| format!("no libnvrtc-builtins.so.* in {}", lib_dir.display()))?;
    let include = [root.join("include"), root.join("targets/x86_64-linux/include")]
        .into_iter()
        .find(|d| d.join("cuda_fp16.h").is_file())
        .ok_or("no include/cuda_fp16.h: the CUDA runtime headers are missing (wheel nvidia-cuda-runtime)")?;
    let mut include_dirs = vec![include.clone()];
    let cccl = include.join("cccl");
    if cccl.is_dir() {
        include_dirs.push(cccl);
    }
    let has_cuda_std = include_dirs.iter().any(|d| d.join("cuda/std").is_dir());
    if !has_cuda_std {
        return Err("no CCCL headers (cuda/std): <cooperative_groups.h> needs them (wheel nvidia-cuda-cccl)".into());
    }
    let ptxas = Some(root.join("bin/ptxas")).filter(|p| p.is_file());
    Ok(CudaInstall { root: root.to_path_buf(), nvrtc, builtins, include_dirs, ptxas })
}

/// `libnvrtc-builtins.so.13.0`, not the `.alt` variant some wheels also ship.
fn find_builtins(lib_dir: &Path) -> Option<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(lib_dir)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("libnvrtc-builtins.so") && !n.contains(".alt."))
        })
        .collect();
    found.sort();
    found.pop()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn fake_root(with_cccl: bool) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let lib = dir.path().join("lib");
        std::fs::create_dir_all(&lib).unwrap();
        std::fs::write(lib.join("libnvrtc.so.13"), b"x").unwrap();
        std::fs::write(lib.join("libnvrtc-builtins.so.13.0"), b"x").unwrap();
        std::fs::write(lib.join("libnvrtc-builtins.alt.so.13.0"), b"x").unwrap();
        let include = dir.path().join("include");
        std::fs::create_dir_all(&include).unwrap();
        std::fs::write(include.join("cuda_fp16.h"), b"").unwrap();
        if with_cccl {
            std::fs::create_dir_all(include.join("cccl/cuda/std")).unwrap();
        }
        dir
    }

    #[test]
    fn finds_a_wheel_layout() {
        let root = fake_root(true);
        let found = discover(Some(root.path()), None).unwrap();
        assert!(found.builtins.ends_with("libnvrtc-builtins.so.13.0"));
        assert_eq!(found.include_dirs.len(), 2);
    }

    #[test]
    fn explicit_root_errors_are_not_skipped() {
        let root = fake_root(false);
        let err = discover(Some(root.path()), None).unwrap_err().to_string();
        assert!(err.contains("CCCL"), "{err}");
        let err = discover(Some(Path::new("/nonexistent/cuda")), None).unwrap_err().to_string();
        assert!(err.contains("--cuda-root /nonexistent/cuda"), "{err}");
    }

    #[test]
    fn cuda_home_comes_before_usr_local() {
        let root = fake_root(true);
        assert_eq!(discover(None, Some(root.path())).unwrap().root, root.path());
    }
}
