//! `kilnd check`: finds the toolchain, proves it loads in a worker, probes GPUs, and prints what
//! it found. `kiln doctor` runs it when no daemon answers.

use crate::config::Config;
use crate::toolchain::{Toolchain, cuda, nvrtc::Nvrtc};

/// Prints the report; returns the exit code (non-zero when no toolchain is usable).
pub async fn run(config: &Config, json: bool) -> i32 {
    let cuda_home = std::env::var_os("CUDA_HOME").map(std::path::PathBuf::from);
    let gpus = crate::gpu::probe();
    let toolchain = match cuda::discover(config.cuda_root.as_deref(), cuda_home.as_deref()) {
        Ok(install) => match std::env::current_exe() {
            Ok(exe) => Nvrtc::start(install, &exe, config.limits.worker_memory_mb, 1).await.map_err(|e| e.to_string()),
            Err(e) => Err(format!("finding kilnd's own executable: {e}")),
        },
        Err(e) => Err(e.to_string()),
    };
    let gpu_list: Vec<_> =
        gpus.gpus.iter().map(|g| serde_json::json!({"index": g.index, "name": g.name, "target": g.target})).collect();
    let (ok, toolchain_json) = match &toolchain {
        Ok(n) => {
            let i = n.info();
            (
                true,
                serde_json::json!({"name": i.name, "version": i.version, "fingerprint": i.fingerprint, "location": i.location, "include_dirs": i.include_dirs, "supported_targets": i.supported_targets}),
            )
        }
        Err(e) => (false, serde_json::json!({"name": Toolchain::Nvrtc.as_str(), "error": e})),
    };
    if json {
        let doc = serde_json::json!({"toolchains": [toolchain_json], "gpus": gpu_list, "gpu_note": gpus.note, "cache_dir": config.cache_dir, "socket": config.socket});
        println!("{doc}");
    } else {
        match &toolchain {
            Ok(n) => {
                let i = n.info();
                println!("nvrtc      {} at {}", i.version, i.location);
                println!("fingerprint {}", i.fingerprint);
                println!("headers    {}", i.include_dirs.join(", "));
                println!("targets    {}", i.supported_targets.join(" "));
            }
            Err(e) => println!("nvrtc      NOT USABLE: {e}"),
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
    if ok { 0 } else { 1 }
}
