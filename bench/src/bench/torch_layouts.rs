//! (p) torch.compile on the CPU, by training layout: plain torch.compile against kiln, side by
//! side. The GPU run's harness (`tests/gpu/torch_layouts.py`) with `--device cpu`: gloo between
//! the ranks and Inductor's C++ backend, a small MLP job (`client/python/tests/layout_job.py`),
//! every variant in fresh processes with its caches emptied and a new kilnd: one process
//! (`single`), DDP with 2 ranks and FSDP2 with 2 ranks.

use super::report::{Row, Section, Target, Value};
use super::triton_kernels::python;
use super::{Bench, TARGET};
use anyhow::{Context, Result, ensure};
use serde_json::Value as Json;
use std::process::Command;

const TITLE: &str = "(p) torch.compile on the CPU by layout: kiln against plain torch.compile";
const LAYOUTS: &str = "single,ddp,fsdp2";

/// A variant's first step in seconds, or why there is none.
fn first_step(layouts: &Json, layout: &str, variant: &str) -> Result<Value, String> {
    let v = &layouts[layout][variant];
    if let Some(e) = v.get("error").and_then(Json::as_str) {
        return Err(e.lines().next().unwrap_or(e).to_string());
    }
    v.get("first_s").and_then(Json::as_f64).map(Value::Seconds).ok_or_else(|| format!("{layout} {variant}: not run"))
}

pub fn run(bench: &Bench) -> Result<Section> {
    let work = bench.dir("torch-layouts")?;
    let out = work.join("out");
    let py = python(bench);
    let status = Command::new(&py)
        .arg(bench.repo.join("tests/gpu/torch_layouts.py"))
        .arg("--kilnd")
        .arg(bench.bin_dir.join("kilnd"))
        .arg("--cuda-root")
        .arg(&bench.cuda_root)
        .arg("--kilnd-python")
        .arg(&py)
        .arg("--python")
        .arg(&py)
        .arg("--work")
        .arg(work.join("run"))
        .arg("--out")
        .arg(&out)
        .args(["--device", "cpu", "--model", "mlp", "--width", "512", "--blocks", "1", "--steps", "3"])
        .args(["--target", TARGET, "--gpus", "2", "--layouts", LAYOUTS, "--deadline-s", "2400"])
        .status()
        .context("running tests/gpu/torch_layouts.py")?;
    ensure!(status.success(), "tests/gpu/torch_layouts.py exited with {status}");
    let text = std::fs::read_to_string(out.join("layouts.json")).context("reading layouts.json")?;
    let layouts: Json = serde_json::from_str(&text).context("parsing layouts.json")?;

    let mut s = Section::new(TITLE);
    s.method = vec![
        "`tests/gpu/torch_layouts.py --device cpu`: `client/python/tests/layout_job.py` (one block of two 512-wide \
         linear layers, SGD, 3 steps), torch 2.11 on the CPU (Inductor's C++ backend; gloo between 2 ranks for DDP, \
         whose optimizer splits the graph into pieces, and for FSDP2, each block `fully_shard`ed and compiled). Every variant in fresh processes with emptied caches; each \
         kiln variant on a new kilnd, its torch workers up before the job starts. A first step is the slowest \
         rank's, from the job's start (after its imports) to the end of its first step."
            .into(),
        "Variants: plain torch.compile cold; the warm host (plain again on plain's caches); `KILN_TORCH=1` alone \
         (the default: graphs stay in the process); kiln cold (`KILN_TORCH_GRAPHS=1`, every graph through kilnd); \
         a fresh host on the kilnd the cold run filled; async (`KILN_TORCH_ASYNC=1`) against eager. One run each: \
         the CPU run is the layouts' smoke figure; the GPU's are in the GPU section below."
            .into(),
    ];
    for layout in LAYOUTS.split(',') {
        let f = |variant: &str| first_step(&layouts, layout, variant);
        // (measurement, kiln's variant, baseline, baseline's variant, target ratio)
        let pairs = [
            ("kiln cold", "cold", "plain torch.compile, cold", "plain", 1.0),
            ("`KILN_TORCH=1` alone", "default", "plain, cold", "plain", 1.0),
            ("kiln fresh host", "fresh", "warm host", "warm", 0.85),
            ("async", "async", "eager, first step", "eager", 1.5),
        ];
        for (what, variant, baseline, base_variant, ratio) in pairs {
            s.rows.push(
                Row::new(format!("{layout}: {what}, first step"), f(variant), baseline, f(base_variant))
                    .with_target(Target::RatioAtMost(ratio)),
            );
        }
        for variant in ["default", "cold", "fresh", "async"] {
            let v = &layouts[layout][variant];
            s.notes.push(format!(
                "{layout} {variant}: fallbacks {}, graphs by how {}, kilnd's compiles so far {}.",
                v.get("fallbacks").map_or("n/a".into(), Json::to_string),
                v.get("how").map_or("n/a".into(), Json::to_string),
                v.get("kilnd_compiled").map_or("n/a".into(), Json::to_string),
            ));
        }
    }
    Ok(s)
}
