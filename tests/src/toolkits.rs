//! Variants of the CUDA wheel tree for tests: a witness NVRTC that records every compile, and a
//! copy of NVRTC with one byte appended. Both are real CUDA roots kilnd accepts as `--cuda-root`.

use crate::env;
use std::path::{Path, PathBuf};

fn link_tree(real: &Path, into: &Path) {
    std::fs::create_dir_all(into.join("lib")).expect("mkdir lib");
    std::os::unix::fs::symlink(real.join("include"), into.join("include")).expect("link include");
    std::os::unix::fs::symlink(real.join("lib/libnvrtc-builtins.so.13.0"), into.join("lib/libnvrtc-builtins.so.13.0"))
        .expect("link builtins");
}

/// A CUDA root whose libnvrtc.so.13 is the witness shim from tests/witness. Returns the root and
/// the environment kilnd needs for the shim to find the real library and its witness file.
pub fn witness_root(dir: &Path, witness_file: &Path) -> (PathBuf, Vec<(String, String)>) {
    let real = env::cuda_root();
    let root = dir.join("witness-cu13");
    link_tree(&real, &root);
    let source = env::repo_root().join("tests/witness/nvrtc_witness.c");
    let out = root.join("lib/libnvrtc.so.13");
    let status = std::process::Command::new("cc")
        .args(["-shared", "-fPIC", "-O1", "-Wl,-soname,libnvrtc.so.13", "-o"])
        .arg(&out)
        .arg(&source)
        .arg("-ldl")
        .status()
        .expect("run cc: a C compiler is needed to build the witness (scripts/test installs gcc)");
    assert!(status.success(), "building the NVRTC witness failed");
    let env = vec![
        ("KILN_WITNESS_REAL_NVRTC".to_string(), real.join("lib/libnvrtc.so.13").display().to_string()),
        ("KILN_WITNESS_FILE".to_string(), witness_file.display().to_string()),
    ];
    (root, env)
}

/// A CUDA root whose libnvrtc.so.13 is a copy of the real one with one byte appended: the same
/// compiler, a different file, so the fingerprint (and every key) must change.
pub fn appended_byte_root(dir: &Path) -> PathBuf {
    let real = env::cuda_root();
    let root = dir.join("appended-cu13");
    link_tree(&real, &root);
    let mut bytes = std::fs::read(real.join("lib/libnvrtc.so.13")).expect("read libnvrtc");
    bytes.push(0);
    std::fs::write(root.join("lib/libnvrtc.so.13"), bytes).expect("write libnvrtc copy");
    root
}

/// Lines in the witness file: one per real NVRTC compile.
pub fn witnessed_compiles(file: &Path) -> usize {
    std::fs::read_to_string(file).map(|t| t.lines().count()).unwrap_or(0)
}

/// A CUDA root whose bin/ptxas is a copy of the real one with one byte appended.
pub fn appended_ptxas_root(dir: &Path) -> PathBuf {
    let real = env::cuda_root();
    let root = dir.join("ptxas-cu13");
    link_tree(&real, &root);
    std::os::unix::fs::symlink(real.join("lib/libnvrtc.so.13"), root.join("lib/libnvrtc.so.13")).expect("link nvrtc");
    std::fs::create_dir_all(root.join("bin")).expect("mkdir bin");
    let mut bytes = std::fs::read(real.join("bin/ptxas")).expect("read ptxas");
    bytes.push(0);
    let copy = root.join("bin/ptxas");
    std::fs::write(&copy, bytes).expect("write ptxas copy");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o755)).expect("chmod ptxas");
    root
}

/// A CUDA root with NVRTC and its headers but no bin/ptxas: NVRTC works, PTX kernels cannot.
pub fn without_ptxas_root(dir: &Path) -> PathBuf {
    let real = env::cuda_root();
    let root = dir.join("no-ptxas-cu13");
    link_tree(&real, &root);
    std::os::unix::fs::symlink(real.join("lib/libnvrtc.so.13"), root.join("lib/libnvrtc.so.13")).expect("link nvrtc");
    root
}

/// An interpreter that cannot import triton: the pinned one with its site-packages off (`-S`).
/// Written where `nobody` can run it, as Triton workers do under a root kilnd.
pub fn python_without_triton(dir: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let bin = dir.join("no-triton-bin");
    std::fs::create_dir_all(&bin).expect("mkdir no-triton-bin");
    let python = bin.join("python");
    std::fs::write(&python, format!("#!/bin/sh\nexec {} -S \"$@\"\n", env::python().display())).expect("write python");
    std::fs::set_permissions(&python, std::fs::Permissions::from_mode(0o755)).expect("chmod python");
    for d in [dir, bin.as_path()] {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).expect("chmod dir");
    }
    python
}
