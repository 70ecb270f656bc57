//! `kilnd check`: proves each toolchain by compiling with it ([`probe`]: NVRTC compiles a tiny
//! kernel, ptxas assembles a tiny PTX, Triton imports and compiles a tiny kernel in its box, and
//! where kilnd's interpreter has torch, a torch worker compiles a tiny graph),
//! probes GPUs, and prints what it found, with the time each took and, for each that failed,
//! the cause and the fix. `kiln doctor` runs it when no daemon answers; `scripts/install` runs
//! it on what it installed, and a container image is checked with it.

pub mod probe;

use crate::config::Config;
use crate::runtime::gpu::GpuProbe;
use crate::runtime::toolchain::Toolchain;
use kiln_proto::Target;
use probe::{Failure, Outcome, Passed, TorchPassed};
use std::path::Path;
use std::time::Duration;

/// Prints the report; returns the exit code: non-zero when any toolchain failed its probe, since
/// its kernels would then be refused (PTX, Triton) or kilnd would not start at all (NVRTC), or
/// when the interpreter has torch and its graphs would not compile.
pub async fn run(config: &Config, config_file: Option<&Path>, json: bool) -> i32 {
    let gpus = crate::runtime::gpu::probe();
    let target = probe_target(config, &gpus);
    let outcomes = probe::all(config, &target).await;
    let torch = probe::torch(config).await;
    let report =
        Report { config, config_file, gpus: &gpus, target: &target, outcomes: &outcomes, torch: torch.as_ref() };
    if json {
        print_json(&report);
    } else {
        print_text(&report);
    }
    let torch_ok = !matches!(torch, Some(Err(_)));
    if outcomes.iter().all(|o| o.result.is_ok()) && torch_ok { 0 } else { 1 }
}

/// A probe that failed: its cause (a worker's traceback is many lines: kept, indented under its
/// name) and its fix.
fn print_failure(name: &str, Failure { cause, fix }: &Failure) {
    let cause = cause.trim_end().replace('\n', &format!("\n{:<11}", ""));
    println!("{name:<10} FAILED: {cause}");
    println!("{:<10} fix: {fix}", "");
}

/// The torch line, after the toolchains' report.
fn print_torch(config: &Config, torch: Option<&Result<TorchPassed, Failure>>) {
    match torch {
        None => println!(
            "{:<10} none: {} has no torch, so kiln.torch's graphs compile in their processes",
            "torch",
            config.python.display()
        ),
        Some(Ok(t)) => println!(
            "{:<10} ok: {}; {} in {} (worker imported torch in {})",
            "torch",
            t.torch,
            t.note,
            took(t.compile),
            took(t.start)
        ),
        Some(Err(failure)) => print_failure("torch", failure),
    }
}

/// What the probes compile for: the configured target, else the first GPU's, else one every
/// pinned toolchain supports (no GPU is needed to compile).
fn probe_target(config: &Config, gpus: &GpuProbe) -> Target {
    let configured = config.target.as_deref().and_then(|t| t.parse().ok());
    configured.or_else(|| gpus.default_target()).unwrap_or_else(kiln_proto::probe::fallback_target)
}

/// `38 ms`, `2.1 s`.
fn took(d: Duration) -> String {
    if d < Duration::from_secs(1) { format!("{} ms", d.as_millis()) } else { format!("{:.1} s", d.as_secs_f64()) }
}

/// What the probe was, for the report's line.
fn probed(toolchain: Toolchain) -> &'static str {
    match toolchain {
        Toolchain::Ptxas => "assembled a tiny PTX",
        Toolchain::Nvrtc | Toolchain::Triton => "compiled a tiny kernel",
    }
}

/// What starting a toolchain means, for the report's line.
fn started(toolchain: Toolchain) -> &'static str {
    match toolchain {
        Toolchain::Nvrtc => "worker started",
        Toolchain::Ptxas => "ran --version",
        Toolchain::Triton => "worker imported Triton",
    }
}

fn config_line(config_file: Option<&Path>) -> String {
    config_file.map_or_else(|| "none (defaults, flags and KILN_* variables)".to_string(), |p| p.display().to_string())
}

/// What `kilnd check` found, for one of its two printers.
struct Report<'a> {
    config: &'a Config,
    config_file: Option<&'a Path>,
    gpus: &'a GpuProbe,
    target: &'a Target,
    outcomes: &'a [Outcome],
    torch: Option<&'a Result<TorchPassed, Failure>>,
}

fn print_text(report: &Report) {
    let Report { config, config_file, gpus, target, outcomes, torch } = *report;
    println!("config     {}", config_line(config_file));
    for o in outcomes {
        let name = o.toolchain.as_str();
        match &o.result {
            Ok(Passed { info, start, compile, cubin_bytes }) => {
                println!(
                    "{name:<10} ok: {} at {}; {} for {target} in {} ({} B; {} in {})",
                    info.version,
                    info.location,
                    probed(o.toolchain),
                    took(*compile),
                    cubin_bytes,
                    started(o.toolchain),
                    took(*start)
                );
            }
            Err(failure) => print_failure(name, failure),
        }
    }
    println!("{:<10} {}", "triton box", crate::runtime::toolchain::triton_box::protections().summary());
    print_torch(config, torch);
    if let Some(Ok(nvrtc)) = outcomes.iter().find(|o| o.toolchain == Toolchain::Nvrtc).map(|o| &o.result) {
        println!("fingerprint {}", nvrtc.info.fingerprint);
        println!("headers    {}", nvrtc.info.include_dirs.join(", "));
        println!("targets    {}", nvrtc.info.supported_targets.join(" "));
    }
    if gpus.gpus.is_empty() {
        println!("gpus       none ({})", gpus.note);
    }
    for g in &gpus.gpus {
        println!("gpu {}      {} ({})", g.index, g.name, g.target);
    }
    println!("cache dir  {}", config.cache_dir.display());
    println!("socket     {}", config.socket.display());
    let mut failed: Vec<&str> = outcomes.iter().filter(|o| o.result.is_err()).map(|o| o.toolchain.as_str()).collect();
    if matches!(torch, Some(Err(_))) {
        failed.push("torch");
    }
    if failed.is_empty() {
        println!("ok: every toolchain compiled");
    } else {
        println!("problem: {} cannot compile; each fix is above", failed.join(", "));
    }
}

fn print_json(report: &Report) {
    let Report { config, config_file, gpus, target, outcomes, torch } = *report;
    let toolchains: Vec<_> = outcomes.iter().map(toolchain_json).collect();
    let gpu_list: Vec<_> =
        gpus.gpus.iter().map(|g| serde_json::json!({"index": g.index, "name": g.name, "target": g.target})).collect();
    let doc = serde_json::json!({
        "config": config_file,
        "target": target.to_string(),
        "toolchains": toolchains,
        "triton_box": crate::runtime::toolchain::triton_box::protections().summary(),
        "gpus": gpu_list,
        "gpu_note": gpus.note,
        "cache_dir": config.cache_dir,
        "socket": config.socket,
        "torch": torch_json(torch),
        "ok": outcomes.iter().all(|o| o.result.is_ok()) && !matches!(torch, Some(Err(_))),
    });
    println!("{doc}");
}

/// One toolchain in `--json`: what `Stats` reports of it and its probe's times, or its name, the
/// cause and the fix.
fn toolchain_json(o: &Outcome) -> serde_json::Value {
    match &o.result {
        Ok(Passed { info: i, start, compile, cubin_bytes }) => serde_json::json!({
            "name": i.name, "ok": true, "version": i.version, "fingerprint": i.fingerprint, "location": i.location,
            "include_dirs": i.include_dirs, "supported_targets": i.supported_targets,
            "start_ms": start.as_millis() as u64, "compile_ms": compile.as_millis() as u64, "cubin_bytes": cubin_bytes,
        }),
        Err(Failure { cause, fix }) => {
            serde_json::json!({"name": o.toolchain.as_str(), "ok": false, "error": cause, "fix": fix})
        }
    }
}

/// The torch probe in `--json`: null where the interpreter has no torch.
fn torch_json(torch: Option<&Result<TorchPassed, Failure>>) -> serde_json::Value {
    match torch {
        None => serde_json::Value::Null,
        Some(Ok(t)) => serde_json::json!({
            "ok": true, "version": t.torch, "note": t.note,
            "start_ms": t.start.as_millis() as u64, "compile_ms": t.compile.as_millis() as u64,
        }),
        Some(Err(Failure { cause, fix })) => serde_json::json!({"ok": false, "error": cause, "fix": fix}),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_read_as_a_person_reads_them() {
        assert_eq!(took(Duration::from_millis(38)), "38 ms");
        assert_eq!(took(Duration::from_millis(2140)), "2.1 s");
    }
}
