//! What to do about a toolchain that is not usable, in one sentence that names the setting to
//! change or the command to run. `kilnd check` prints these under each failure, and kilnd's own
//! refusals (a PTX kernel without ptxas, a Triton kernel without Triton) carry them, so `kiln
//! doctor` shows them too. The versions come from the pins every install uses.

use std::path::{Path, PathBuf};

/// The pinned toolchain: deploy/toolchain-requirements.txt, `NAME==VERSION` per line.
const PINS: &str = include_str!("../../../../deploy/toolchain-requirements.txt");

/// `name==version` as pinned, or `name` alone for a package that is not.
fn pin(name: &str) -> String {
    PINS.lines()
        .map(|l| l.split('#').next().unwrap_or_default().trim())
        .find(|l| l.split("==").next() == Some(name))
        .map_or_else(|| name.to_string(), str::to_string)
}

fn pins(names: &[&str]) -> String {
    names.iter().map(|n| pin(n)).collect::<Vec<_>>().join(" ")
}

/// The wheels NVRTC needs: the library, the runtime headers and CCCL.
fn nvrtc_wheels() -> String {
    pins(&["nvidia-cuda-nvrtc", "nvidia-cuda-runtime", "nvidia-cuda-cccl"])
}

/// ptxas's wheel and the nvvm and crt of its release.
fn ptxas_wheels() -> String {
    pins(&["nvidia-cuda-nvcc", "nvidia-nvvm", "nvidia-cuda-crt"])
}

/// The interpreter whose site-packages hold a wheel's `nvidia/cu13` tree at `root`, when there
/// is one: `<venv>/lib/pythonX.Y/site-packages/nvidia/cu13` belongs to `<venv>/bin/python`.
fn wheel_python(root: &Path) -> Option<PathBuf> {
    let site = root.parent()?.parent()?;
    if site.file_name()? != "site-packages" {
        return None;
    }
    let python = site.parent()?.parent()?.parent()?.join("bin/python");
    python.is_file().then_some(python)
}

/// `PYTHON -m pip install PACKAGES`, with the interpreter named where it is known.
fn pip_install(python: Option<&Path>, packages: &str) -> String {
    let python = python.map_or_else(|| "python3".to_string(), |p| p.display().to_string());
    format!("`{python} -m pip install {packages}`")
}

/// No usable CUDA installation for NVRTC.
pub fn cuda_root() -> String {
    format!(
        "set cuda_root in kilnd's config (or --cuda-root, KILN_CUDA_ROOT) to a CUDA 13 toolkit, or to the \
         nvidia/cu13 directory of a Python environment after {}",
        pip_install(None, &nvrtc_wheels())
    )
}

/// A CUDA installation at `root` that has no `bin/ptxas`.
pub fn ptxas(root: &Path) -> String {
    match wheel_python(root) {
        Some(python) => format!(
            "{} (the environment whose nvidia/cu13 is cuda_root), or set cuda_root to a CUDA toolkit with bin/ptxas",
            pip_install(Some(&python), &ptxas_wheels())
        ),
        None => format!(
            "set cuda_root to a CUDA toolkit with bin/ptxas, or to the nvidia/cu13 directory of a Python \
             environment after {}",
            pip_install(None, &format!("{} {}", nvrtc_wheels(), ptxas_wheels()))
        ),
    }
}

/// The Triton workers could not start on `python`, for the reason `cause`.
pub fn triton(python: &Path, cause: &str) -> String {
    let triton = pin("triton");
    let setting = format!("set python in kilnd's config (or --python, KILN_PYTHON) to an interpreter with {triton}");
    match find_program(python) {
        None => format!("{setting}: {} was not found", python.display()),
        Some(found) if cause.contains("Permission denied") || cause.contains("permission denied") => format!(
            "the Triton workers run as `nobody` under a root kilnd and cannot run {}: make it and its \
             environment readable by all (not under /root), or {setting}",
            found.display()
        ),
        Some(found) => format!("{}, or {setting}", pip_install(Some(&found), &triton)),
    }
}

/// `program` as the workers would run it: a path as it is, a bare name looked up on `PATH`.
fn find_program(program: &Path) -> Option<PathBuf> {
    if program.components().count() > 1 {
        return program.is_file().then(|| program.to_path_buf());
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join(program)).find(|p| p.is_file())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn fixes_name_the_pinned_versions() {
        assert!(pin("triton").starts_with("triton=="), "{}", pin("triton"));
        assert_eq!(pin("not-pinned"), "not-pinned");
        assert!(cuda_root().contains(&pin("nvidia-cuda-nvrtc")), "{}", cuda_root());
        assert!(ptxas(Path::new("/usr/local/cuda")).contains(&pin("nvidia-nvvm")));
    }

    #[test]
    fn a_wheel_root_names_its_interpreter() {
        let venv = tempfile::tempdir().unwrap();
        let root = venv.path().join("lib/python3.11/site-packages/nvidia/cu13");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::create_dir_all(venv.path().join("bin")).unwrap();
        std::fs::write(venv.path().join("bin/python"), "").unwrap();
        let python = venv.path().join("bin/python");
        assert_eq!(wheel_python(&root), Some(python.clone()));
        assert!(ptxas(&root).starts_with(&format!("`{} -m pip install nvidia-cuda-nvcc==", python.display())));
        assert_eq!(wheel_python(Path::new("/usr/local/cuda")), None);
    }

    #[test]
    fn a_python_without_triton_gets_the_pip_command_and_a_missing_one_the_setting() {
        let python = tempfile::NamedTempFile::new().unwrap();
        let fix = triton(python.path(), "No module named 'triton'");
        assert!(fix.starts_with(&format!("`{} -m pip install triton==", python.path().display())), "{fix}");
        let fix = triton(Path::new("/nonexistent/python"), "No such file or directory");
        assert!(fix.starts_with("set python in kilnd's config") && fix.ends_with("was not found"), "{fix}");
    }
}
