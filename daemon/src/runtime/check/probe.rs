//! Each toolchain proven the way kilnd uses it: started as kilnd starts it (an NVRTC worker, a
//! ptxas subprocess, a Triton worker in its box, as `nobody` under a root kilnd), then made to
//! compile its probe kernel (`kiln_proto::probe`). A failure comes with its cause and its fix.

use crate::config::Config;
use crate::runtime::toolchain::ptxas::Ptxas;
use crate::runtime::toolchain::triton::{self, Triton};
use crate::runtime::toolchain::{Compiled, Toolchain, cuda, fix, nvrtc::Nvrtc};
use kiln_proto::Target;
use kiln_proto::pb::ToolchainInfo;
use kiln_proto::probe as kernels;
use std::time::{Duration, Instant};

/// How long one probe compile may take: a tiny kernel compiles in well under a second; Triton's
/// first compile (its JIT of the backend) takes a few.
const COMPILE_TIMEOUT: Duration = Duration::from_secs(120);

/// What proving one toolchain found.
#[derive(Debug)]
pub struct Outcome {
    pub toolchain: Toolchain,
    pub result: Result<Passed, Failure>,
}

/// A toolchain that started and compiled its probe.
#[derive(Debug)]
pub struct Passed {
    pub info: ToolchainInfo,
    /// Starting it: loading NVRTC in a worker, `ptxas --version`, a Triton worker importing Triton.
    pub start: Duration,
    /// The probe's compile, as the caller waited for it.
    pub compile: Duration,
    pub cubin_bytes: usize,
}

/// Why a toolchain is not usable, and what to do about it.
#[derive(Debug)]
pub struct Failure {
    pub cause: String,
    pub fix: String,
}

fn failed(cause: impl ToString, fix: String) -> Failure {
    Failure { cause: cause.to_string(), fix }
}

/// Proves NVRTC, ptxas and Triton in turn, each compiling for `target`.
pub async fn all(config: &Config, target: &Target) -> Vec<Outcome> {
    let cuda_home = std::env::var_os("CUDA_HOME").map(std::path::PathBuf::from);
    let install = cuda::discover(config.cuda_root.as_deref(), cuda_home.as_deref());
    let nvrtc = match &install {
        Ok(install) => nvrtc(install.clone(), config, target).await,
        Err(e) => Err(failed(e, fix::cuda_root())),
    };
    let ptxas = match &install {
        Err(_) => Err(failed("no CUDA installation (see nvrtc)", fix::cuda_root())),
        Ok(install) => match &install.ptxas {
            None => Err(failed(format!("no bin/ptxas under {}", install.root.display()), fix::ptxas(&install.root))),
            Some(path) => ptxas(path, config, target).await.map_err(|cause| failed(cause, fix::ptxas(&install.root))),
        },
    };
    let triton = triton(config, target).await;
    vec![
        Outcome { toolchain: Toolchain::Nvrtc, result: nvrtc },
        Outcome { toolchain: Toolchain::Ptxas, result: ptxas },
        Outcome { toolchain: Toolchain::Triton, result: triton },
    ]
}

async fn nvrtc(install: cuda::CudaInstall, config: &Config, target: &Target) -> Result<Passed, Failure> {
    let exe = std::env::current_exe()
        .map_err(|e| failed(format!("finding kilnd's own executable: {e}"), fix::cuda_root()))?;
    let started = Instant::now();
    let nvrtc = Nvrtc::start(install, &exe, config.limits.worker_memory_mb, 1)
        .await
        .map_err(|e| failed(e, fix::cuda_root()))?;
    let start = started.elapsed();
    let compiled = nvrtc.compile(&kernels::cuda(), target, COMPILE_TIMEOUT).await;
    passed(nvrtc.info(), start, started, compiled).map_err(|cause| failed(cause, fix::cuda_root()))
}

async fn ptxas(path: &std::path::Path, config: &Config, target: &Target) -> Result<Passed, String> {
    let source = kernels::ptx();
    let started = Instant::now();
    let ptxas = Ptxas::probe(path, config.limits.worker_memory_mb).await.map_err(|e| e.to_string())?;
    let start = started.elapsed();
    let compiled = ptxas.compile(&source.ptx, &source.options, target, COMPILE_TIMEOUT).await;
    passed(ptxas.info(), start, started, compiled)
}

async fn triton(config: &Config, target: &Target) -> Result<Passed, Failure> {
    let python = &config.python;
    // One worker is enough; it is stopped when `triton` is dropped.
    let settings =
        triton::Settings { python: python.clone(), max_workers: 1, memory_mb: config.limits.worker_memory_mb };
    let started = Instant::now();
    let triton = Triton::start(&settings).await.map_err(|e| {
        let cause = e.to_string();
        failed(&cause, fix::triton(python, &cause))
    })?;
    let start = started.elapsed();
    let compiled = triton.compile(&kernels::triton(), target, COMPILE_TIMEOUT).await;
    passed(triton.info(), start, started, compiled).map_err(|cause| failed(&cause, fix::triton(python, &cause)))
}

/// The probe's result: passed with its cubin, or the compiler's log as the cause.
fn passed(info: ToolchainInfo, start: Duration, started: Instant, compiled: Compiled) -> Result<Passed, String> {
    let compile = started.elapsed().saturating_sub(start);
    match compiled {
        Compiled::Ok(out) if !out.cubin.is_empty() => Ok(Passed { info, start, compile, cubin_bytes: out.cubin.len() }),
        Compiled::Ok(_) => Err("the probe kernel compiled to an empty cubin".into()),
        Compiled::Failed { log, .. } => Err(format!("the probe kernel did not compile: {}", log.trim())),
    }
}

/// A torch worker that started and compiled the tiny graph.
#[derive(Debug)]
pub struct TorchPassed {
    pub torch: String,
    /// Starting the worker: importing torch, Dynamo and Inductor (and, on a CPU host, picking the
    /// vector instructions).
    pub start: Duration,
    /// The child's compile and run of the probe.
    pub compile: Duration,
    /// What the child said: the device it ran on.
    pub note: String,
}

/// Proves the torch graph path: None when kilnd's interpreter has no torch (the path is off,
/// which is no failure: most hosts never send a graph), else a worker's child compiling a tiny
/// function.
pub async fn torch(config: &Config) -> Option<Result<TorchPassed, Failure>> {
    let python = &config.python;
    let has_torch = tokio::process::Command::new(python)
        .args(["-c", "import importlib.util, sys; sys.exit(0 if importlib.util.find_spec('torch') else 3)"])
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .is_ok_and(|out| out.status.success());
    if !has_torch {
        return None;
    }
    let fix = || {
        format!(
            "install torch 2.11 into {} (kiln.torch's workers run it), or set python in kilnd's config \
             (--python, KILN_PYTHON) to an interpreter that has it",
            python.display()
        )
    };
    let settings = crate::runtime::toolchain::torch::Settings { python: python.clone(), max_workers: 1 };
    let started = Instant::now();
    let workers = match crate::runtime::toolchain::torch::TorchWorkers::start(&settings).await {
        Ok(w) => w,
        Err(cause) => return Some(Err(failed(cause, fix()))),
    };
    let start = started.elapsed();
    let answer = workers.check(COMPILE_TIMEOUT).await;
    let compile = started.elapsed().saturating_sub(start);
    Some(if answer.ok {
        Ok(TorchPassed { torch: workers.environment.torch.clone(), start, compile, note: answer.log })
    } else {
        Err(failed(format!("the tiny graph did not compile: {}", answer.log.trim()), fix()))
    })
}
