//! The NVRTC toolchain as the daemon sees it: what it is (version, fingerprint, targets) and a
//! pool of workers that do the compiling.

use super::{Compiled, Output, Toolchain, ToolchainError, cuda::CudaInstall, fingerprint};
use crate::runtime::worker::frame;
use crate::runtime::worker::pool::{Protocol, WorkerPool, WorkerSpec};
use kiln_proto::pb::{CudaSource, ToolchainInfo, WorkerHello, WorkerRequest, WorkerResponse};
use kiln_proto::{Fingerprint, Target};
use std::path::Path;
use std::time::Duration;

#[derive(Debug)]
pub struct Nvrtc {
    pub install: CudaInstall,
    pub version: String,
    pub fingerprint: Fingerprint,
    /// `sm_NN` names NVRTC reported; `a`/`f` variants are accepted when their base is listed.
    pub supported: Vec<String>,
    pool: WorkerPool<NvrtcProtocol>,
}

/// `kilnd worker` speaks protobuf frames.
#[derive(Debug)]
pub struct NvrtcProtocol;

impl Protocol for NvrtcProtocol {
    type Hello = WorkerHello;
    type Request = WorkerRequest;
    type Response = WorkerResponse;

    fn encode_request(request: &WorkerRequest) -> std::io::Result<Vec<u8>> {
        Ok(prost::Message::encode_to_vec(request))
    }

    fn decode_response(bytes: &[u8]) -> std::io::Result<WorkerResponse> {
        frame::decode(bytes)
    }
}

impl Nvrtc {
    /// Starts the first worker (which proves the library loads and reports its version), then
    /// fingerprints the files. `worker_exe` is kilnd itself, re-executed in worker mode.
    pub async fn start(
        install: CudaInstall,
        worker_exe: &Path,
        memory_mb: u64,
        max_workers: usize,
    ) -> Result<Self, ToolchainError> {
        let spec = WorkerSpec {
            exe: worker_exe.to_path_buf(),
            args: vec![
                "worker".into(),
                "--nvrtc".into(),
                install.nvrtc.clone().into(),
                "--builtins".into(),
                install.builtins.clone().into(),
                "--memory-mb".into(),
                memory_mb.to_string().into(),
            ],
            env: None,
            user: None,
            confine: None,
            start_timeout: Duration::from_secs(60),
        };
        let (pool, hello) =
            WorkerPool::<NvrtcProtocol>::start(spec, max_workers).await.map_err(|e| ToolchainError::Broken {
                toolchain: Toolchain::Nvrtc,
                path: install.nvrtc.display().to_string(),
                reason: e.to_string(),
            })?;
        let libraries = [install.nvrtc.clone(), install.builtins.clone()];
        let include_dirs = install.include_dirs.clone();
        let version = hello.version.clone();
        let fp = tokio::task::spawn_blocking(move || {
            fingerprint::of_files(Toolchain::Nvrtc.as_str(), &version, &libraries, &include_dirs)
        })
        .await
        .map_err(|e| ToolchainError::Io(std::io::Error::other(e)))??;
        Ok(Nvrtc { install, version: hello.version, fingerprint: fp, supported: hello.supported_targets, pool })
    }

    pub fn info(&self) -> ToolchainInfo {
        ToolchainInfo {
            name: Toolchain::Nvrtc.as_str().into(),
            version: self.version.clone(),
            fingerprint: self.fingerprint.to_hex(),
            location: self.install.nvrtc.display().to_string(),
            include_dirs: self.install.include_dirs.iter().map(|d| d.display().to_string()).collect(),
            supported_targets: self.supported.clone(),
        }
    }

    /// Compiles in a worker. A worker timeout or crash is this kernel's failed outcome.
    pub async fn compile(&self, source: &CudaSource, target: &Target, timeout: Duration) -> Compiled {
        let request = WorkerRequest {
            cuda: Some(source.clone()),
            target: target.to_string(),
            system_include_dirs: self.install.include_dirs.iter().map(|d| d.display().to_string()).collect(),
            cpu_seconds: timeout.as_secs().max(1),
        };
        let started = std::time::Instant::now();
        match self.pool.run(&request, timeout).await {
            Ok(r) => Compiled::from_answer(
                r.ok,
                Output {
                    cubin: r.cubin,
                    log: r.log,
                    lowered_names: r.lowered_names,
                    compile_micros: r.compile_micros,
                    ..Default::default()
                },
            ),
            Err(failure) => Compiled::failed(failure.to_string(), started),
        }
    }
}
