//! Runs `kilnd check` on this host, for `kiln doctor` when the daemon cannot be reached: the
//! daemon's own toolchain discovery report says whether kilnd *could* run here, which is the next
//! thing a user needs to know.

use std::ffi::OsStr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The daemon's binary name.
const KILND: &str = "kilnd";

/// Toolchain discovery loads libraries and may probe GPUs, and where kilnd's interpreter has
/// torch a worker imports it and compiles a tiny graph (tens of seconds on a loaded host); it
/// never takes this long when healthy.
const CHECK_TIMEOUT: Duration = Duration::from_secs(180);

/// What running `kilnd check` gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LocalCheck {
    /// No `kilnd` next to `kiln` or on `PATH`.
    NotFound,
    /// It could not be started, or did not finish in time.
    Error { program: PathBuf, message: String },
    /// It ran: its exit code (`None` if killed by a signal) and its stdout then stderr.
    Ran { program: PathBuf, exit_code: Option<i32>, output: String },
}

/// Finds `kilnd` and runs `kilnd check`.
pub async fn run_kilnd_check() -> LocalCheck {
    let exe_dir = std::env::current_exe().ok().and_then(|exe| exe.parent().map(Path::to_path_buf));
    let path_var = std::env::var_os("PATH");
    let Some(program) = find_program(KILND, exe_dir.as_deref(), path_var.as_deref()) else {
        return LocalCheck::NotFound;
    };
    let child = tokio::process::Command::new(&program)
        .arg("check")
        .stdin(std::process::Stdio::null())
        // Dropped on timeout, so a hung check does not outlive kiln.
        .kill_on_drop(true)
        .output();
    match tokio::time::timeout(CHECK_TIMEOUT, child).await {
        Err(_) => LocalCheck::Error { program, message: format!("did not finish in {} s", CHECK_TIMEOUT.as_secs()) },
        Ok(Err(err)) => LocalCheck::Error { program, message: err.to_string() },
        Ok(Ok(output)) => {
            let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
            text.push_str(&String::from_utf8_lossy(&output.stderr));
            LocalCheck::Ran { program, exit_code: output.status.code(), output: text }
        }
    }
}

/// `name` next to the running executable first (an unpacked release keeps both binaries
/// together, and that pair is the one that belongs together), then on `path_var`.
pub fn find_program(name: &str, exe_dir: Option<&Path>, path_var: Option<&OsStr>) -> Option<PathBuf> {
    let beside = exe_dir.map(|dir| dir.join(name));
    let on_path = path_var.into_iter().flat_map(std::env::split_paths).map(|dir| dir.join(name));
    beside.into_iter().chain(on_path).find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::fs;

    fn executable(path: &Path) {
        fs::write(path, "#!/bin/sh\n").unwrap();
        fs::set_permissions(path, fs::Permissions::from_mode(0o755)).unwrap();
    }

    #[test]
    fn prefers_the_binary_next_to_kiln_then_path_in_order() {
        let root = tempfile::tempdir().unwrap();
        let (exe_dir, first, second) = (root.path().join("bin"), root.path().join("p1"), root.path().join("p2"));
        for dir in [&exe_dir, &first, &second] {
            fs::create_dir(dir).unwrap();
        }
        executable(&second.join("kilnd"));
        fs::write(first.join("kilnd"), "not executable").unwrap();
        let path_var = std::env::join_paths([&first, &second]).unwrap();

        assert_eq!(find_program("kilnd", Some(&exe_dir), Some(&path_var)), Some(second.join("kilnd")));
        executable(&exe_dir.join("kilnd"));
        assert_eq!(find_program("kilnd", Some(&exe_dir), Some(&path_var)), Some(exe_dir.join("kilnd")));
        assert_eq!(find_program("kilnd", None, None), None);
    }
}
