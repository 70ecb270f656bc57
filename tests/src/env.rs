//! Locations the tests need. Each lookup fails with a message that says how to fix it.

use std::path::PathBuf;

/// The repository root.
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().map(PathBuf::from).unwrap_or_default()
}

/// A binary of this workspace, built in the same target directory as the running test.
pub fn binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    // target/<profile>/deps/<test> -> target/<profile>/<name>; a binary sits in target/<profile>.
    let mut dir = exe.parent().expect("target dir").to_path_buf();
    if dir.file_name().is_some_and(|n| n == "deps") {
        dir.pop();
    }
    let path = dir.join(name);
    assert!(
        path.is_file(),
        "{} is missing: build the binaries first (`cargo build --workspace --bins`, which scripts/test does)",
        path.display()
    );
    path
}

/// The pinned CUDA 13.0 wheel tree: `.venv/lib/python3.*/site-packages/nvidia/cu13`, or
/// `KILN_TEST_CUDA_ROOT`.
pub fn cuda_root() -> PathBuf {
    if let Some(root) = std::env::var_os("KILN_TEST_CUDA_ROOT") {
        return PathBuf::from(root);
    }
    let lib = repo_root().join(".venv/lib");
    let found = std::fs::read_dir(&lib).ok().and_then(|entries| {
        entries
            .flatten()
            .map(|e| e.path().join("site-packages/nvidia/cu13"))
            .find(|p| p.join("lib/libnvrtc.so.13").is_file())
    });
    found.unwrap_or_else(|| {
        panic!(
            "NVRTC is missing: no {}/python3.*/site-packages/nvidia/cu13/lib/libnvrtc.so.13. \
             Run scripts/test, which installs the pinned CUDA wheels into .venv/",
            lib.display()
        )
    })
}

/// The interpreter with the pinned triton: `KILN_TEST_PYTHON`, or `.venv/bin/python`.
pub fn python() -> PathBuf {
    let python =
        std::env::var_os("KILN_TEST_PYTHON").map(PathBuf::from).unwrap_or_else(|| repo_root().join(".venv/bin/python"));
    let ok = std::process::Command::new(&python).args(["-c", "import triton"]).status().is_ok_and(|s| s.success());
    assert!(
        ok,
        "{} cannot import triton: run scripts/test, which installs triton==3.6.0 into .venv/",
        python.display()
    );
    python
}
