//! PTX to cubin with `ptxas`, from the CUDA toolkit on GPU hosts or the pinned
//! nvidia-cuda-nvcc wheel elsewhere. ptxas is its own process, so each compile is one
//! subprocess: with resource limits, a timeout, its own environment, and a temporary directory
//! that is removed on every path out.

use super::{Compiled, Output, Toolchain, ToolchainError, fingerprint};
use kiln_proto::pb::ToolchainInfo;
use kiln_proto::{Fingerprint, Target};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::process::Command;

#[derive(Debug)]
pub struct Ptxas {
    pub path: PathBuf,
    /// The last line of `ptxas --version`, e.g. "Build cuda_13.0.r13.0/compiler.36424714_0".
    pub version: String,
    /// `ptxas --version` plus a blake3 of the binary.
    pub fingerprint: Fingerprint,
    memory_mb: u64,
}

impl Ptxas {
    /// Runs `ptxas --version` and hashes the binary.
    pub async fn probe(path: &Path, memory_mb: u64) -> Result<Self, ToolchainError> {
        let broken = |reason: String| ToolchainError::Broken {
            toolchain: Toolchain::Ptxas,
            path: path.display().to_string(),
            reason,
        };
        let out = tokio::time::timeout(
            Duration::from_secs(30),
            Command::new(path).arg("--version").kill_on_drop(true).output(),
        )
        .await
        .map_err(|_| broken("`ptxas --version` did not finish in 30 s".into()))?
        .map_err(|e| broken(e.to_string()))?;
        if !out.status.success() {
            return Err(broken(format!("`ptxas --version` exited with {}", out.status)));
        }
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let version = text.lines().rfind(|l| !l.trim().is_empty()).unwrap_or_default().trim().to_string();
        let (p, t) = (path.to_path_buf(), text.clone());
        let fingerprint =
            tokio::task::spawn_blocking(move || fingerprint::of_files(Toolchain::Ptxas.as_str(), &t, &[p], &[]))
                .await
                .map_err(|e| ToolchainError::Io(std::io::Error::other(e)))??;
        Ok(Ptxas { path: path.to_path_buf(), version, fingerprint, memory_mb })
    }

    pub fn info(&self) -> ToolchainInfo {
        ToolchainInfo {
            name: Toolchain::Ptxas.as_str().into(),
            version: self.version.clone(),
            fingerprint: self.fingerprint.to_hex(),
            location: self.path.display().to_string(),
            ..Default::default()
        }
    }

    /// Assembles `ptx` for `target`.
    pub async fn compile(&self, ptx: &str, options: &[String], target: &Target, timeout: Duration) -> Compiled {
        let started = Instant::now();
        match self.run(ptx, options, target, timeout).await {
            Ok(compiled) => compiled,
            Err(log) => Compiled::failed(log, started),
        }
    }

    async fn run(&self, ptx: &str, options: &[String], target: &Target, timeout: Duration) -> Result<Compiled, String> {
        // Dropped on every path out, which removes the directory and both files.
        let dir = tempfile::Builder::new()
            .prefix("kiln-ptxas-")
            .tempdir()
            .map_err(|e| format!("creating a temp dir: {e}"))?;
        let input = dir.path().join("kernel.ptx");
        let output = dir.path().join("kernel.cubin");
        std::fs::write(&input, ptx).map_err(|e| format!("writing the PTX: {e}"))?;
        let mut cmd = Command::new(&self.path);
        cmd.arg(format!("--gpu-name={target}"))
            .args(options)
            .arg(&input)
            .arg("-o")
            .arg(&output)
            .current_dir(dir.path())
            .env_clear()
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        limit_child(&mut cmd, self.memory_mb, timeout);
        let started = Instant::now();
        let out = match tokio::time::timeout(timeout, cmd.output()).await {
            Ok(out) => out.map_err(|e| format!("running {}: {e}", self.path.display()))?,
            Err(_) => return Err(format!("ptxas exceeded its {timeout:?} timeout and was killed")),
        };
        let compile_micros = started.elapsed().as_micros() as u64;
        let mut log = String::from_utf8_lossy(&out.stdout).into_owned();
        log.push_str(&String::from_utf8_lossy(&out.stderr));
        if !out.status.success() {
            log.push_str(&format!("\nptxas exited with {}\n", out.status));
            return Ok(Compiled::Failed { log, compile_micros });
        }
        let cubin = std::fs::read(&output).map_err(|e| format!("reading ptxas's output: {e}"))?;
        Ok(Compiled::Ok(Output { cubin, log, compile_micros, ..Default::default() }))
    }
}

/// Address-space and CPU-time limits on a compiler subprocess, set between fork and exec.
fn limit_child(cmd: &mut Command, memory_mb: u64, timeout: Duration) {
    let memory = memory_mb.saturating_mul(1024 * 1024) as libc::rlim_t;
    let cpu = timeout.as_secs().max(1) as libc::rlim_t;
    // SAFETY: the closure runs in the child between fork and exec and calls only setrlimit,
    // which is async-signal-safe; it touches no memory shared with the parent.
    unsafe {
        cmd.pre_exec(move || {
            let set = |resource, value| {
                let limit = libc::rlimit { rlim_cur: value, rlim_max: value };
                if libc::setrlimit(resource, &limit) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            };
            set(libc::RLIMIT_AS, memory)?;
            set(libc::RLIMIT_CPU, cpu)
        });
    }
}
