//! `kilnd check`: finds the toolchains, proves each one works (NVRTC loads in a worker, ptxas
//! answers `--version`, a Triton worker imports Triton), probes GPUs, and prints what it found.
//! `kiln doctor` runs it when no daemon answers, and a container image is checked with it.

use crate::config::Config;
use crate::toolchain::ptxas::Ptxas;
use crate::toolchain::triton::{self, Triton};
use crate::toolchain::{Toolchain, cuda, nvrtc::Nvrtc};
use kiln_proto::pb::ToolchainInfo;

/// Prints the report; returns the exit code: non-zero when NVRTC is not usable, since kilnd
/// refuses to start without it. ptxas and Triton are optional (PTX and Triton kernels are then
/// refused), so their absence is reported, not failed.
pub async fn run(config: &Config, json: bool) -> i32 {
    let cuda_home = std::env::var_os("CUDA_HOME").map(std::path::PathBuf::from);
    let gpus = crate::gpu::probe();
    let install = cuda::discover(config.cuda_root.as_deref(), cuda_home.as_deref()).map_err(|e| e.to_string());
    let ptxas_path = install.as_ref().ok().and_then(|i| i.ptxas.clone());
    let nvrtc = match install {
        Ok(install) => match std::env::current_exe() {
            Ok(exe) => Nvrtc::start(install, &exe, config.limits.worker_memory_mb, 1).await.map_err(|e| e.to_string()),
            Err(e) => Err(format!("finding kilnd's own executable: {e}")),
        },
        Err(e) => Err(e),
    };
    let ptxas = match (&nvrtc, ptxas_path) {
        (Err(_), _) => Err("no CUDA installation (see nvrtc)".to_string()),
        (Ok(_), None) => Err("no bin/ptxas in the CUDA installation (install nvidia-cuda-nvcc)".to_string()),
        (Ok(_), Some(path)) => Ptxas::probe(&path, config.limits.worker_memory_mb).await.map_err(|e| e.to_string()),
    };
    // One worker is enough to prove Triton imports; it is stopped when `triton` is dropped.
    let settings =
        triton::Settings { python: config.python.clone(), max_workers: 1, memory_mb: config.limits.worker_memory_mb };
    let triton = Triton::start(&settings).await.map_err(|e| format!("{e} (KILN_PYTHON: {})", config.python.display()));
    let toolchains = [
        (Toolchain::Nvrtc, nvrtc.as_ref().map(Nvrtc::info)),
        (Toolchain::Ptxas, ptxas.as_ref().map(Ptxas::info)),
        (Toolchain::Triton, triton.as_ref().map(Triton::info)),
    ];
    let gpu_list: Vec<_> =
        gpus.gpus.iter().map(|g| serde_json::json!({"index": g.index, "name": g.name, "target": g.target})).collect();
    if json {
        let toolchains: Vec<_> = toolchains.iter().map(|(name, t)| toolchain_json(*name, t)).collect();
        let doc = serde_json::json!({"toolchains": toolchains, "gpus": gpu_list, "gpu_note": gpus.note, "cache_dir": config.cache_dir, "socket": config.socket});
        println!("{doc}");
    } else {
        for (name, t) in &toolchains {
            match t {
                Ok(i) => println!("{:<10} {} at {}", name.as_str(), i.version, i.location),
                Err(e) => println!("{:<10} NOT USABLE: {e}", name.as_str()),
            }
        }
        if let Ok(n) = &nvrtc {
            let i = n.info();
            println!("fingerprint {}", i.fingerprint);
            println!("headers    {}", i.include_dirs.join(", "));
            println!("targets    {}", i.supported_targets.join(" "));
        }
        if gpus.gpus.is_empty() {
            println!("gpus       none ({})", gpus.note);
        }
        for g in &gpus.gpus {
            println!("gpu {}      {} ({})", g.index, g.name, g.target);
        }
        println!("cache dir  {}", config.cache_dir.display());
        println!("socket     {}", config.socket.display());
    }
    if nvrtc.is_ok() { 0 } else { 1 }
}

/// One toolchain in `--json`: what `Stats` reports of it, or its name and why it is unusable.
fn toolchain_json(name: Toolchain, t: &Result<ToolchainInfo, &String>) -> serde_json::Value {
    match t {
        Ok(i) => {
            serde_json::json!({"name": i.name, "version": i.version, "fingerprint": i.fingerprint, "location": i.location, "include_dirs": i.include_dirs, "supported_targets": i.supported_targets})
        }
        Err(e) => serde_json::json!({"name": name.as_str(), "error": e}),
    }
}
