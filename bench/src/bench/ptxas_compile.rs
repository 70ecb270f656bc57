//! Figure (j): PTX assembled through kilnd's `ptx` toolchain against
//! `ptxas` run by hand on the same PTX files, one after another.
//!
//! The PTX is the 64-kernel graph's first 32 vector adds, made once by NVRTC for `compute_90`.
//! Each round puts a new comment line on top of every file, so every key is new to kiln; ptxas
//! ignores the comment, so the cubins of both sides can be compared byte for byte.

use super::kilnd::KilndOptions;
use super::nvrtc::Nvrtc;
use super::report::{Row, Section, Value};
use super::{Bench, TARGET, check_job};
use anyhow::{Context, Result, ensure};
use kiln_proto::pb;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const TITLE: &str = "(j) ptxas: kilnd against ptxas run by hand";
const KERNELS: usize = 32;

fn request(ptx: &[String]) -> pb::CompileRequest {
    let ks = ptx
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let src = pb::PtxSource { ptx: p.clone(), options: vec![] };
            kiln_tests::kernels::any_kernel(&format!("add_{i}"), pb::kernel::Source::Ptx(src))
        })
        .collect();
    kiln_tests::kernels::request(TARGET, ks)
}

/// `ptxas --gpu-name=sm_90 add_N.ptx -o add_N.cubin` for each file in turn; the cubins.
fn by_hand(ptxas: &Path, dir: &Path, files: &[PathBuf]) -> Result<(Duration, Vec<Vec<u8>>)> {
    let start = Instant::now();
    let mut outs = Vec::with_capacity(files.len());
    for f in files {
        let out = dir.join(f.file_stem().unwrap_or_default()).with_extension("cubin");
        let status = Command::new(ptxas).arg(format!("--gpu-name={TARGET}")).arg(f).arg("-o").arg(&out).status()?;
        ensure!(status.success(), "ptxas {} failed with {status}", f.display());
        outs.push(out);
    }
    let elapsed = start.elapsed();
    let cubins = outs.iter().map(std::fs::read).collect::<std::io::Result<Vec<_>>>()?;
    Ok((elapsed, cubins))
}

fn secs(d: &[Duration]) -> String {
    d.iter().map(|d| format!("{:.3} s", d.as_secs_f64())).collect::<Vec<_>>().join(", ")
}

pub async fn run(bench: &Bench) -> Result<Section> {
    let rounds = bench.options.cold_rounds.max(1);
    let ptxas = bench.cuda_root.join("bin/ptxas");
    let mut s = Section::new(TITLE);
    s.method = vec![
        format!(
            "{KERNELS} PTX files (vector adds, made once by NVRTC for `compute_90`), assembled for {TARGET}: one \
             `Compile` of them as a graph of `ptx` kernels (no options) over the Unix socket, kilnd at \
             `--concurrency 1`, from the call until the last result; against `{} --gpu-name={TARGET} add_N.ptx -o \
             add_N.cubin` run by hand on the same files, one after another (the pinned wheel's ptxas, the one \
             kilnd runs).",
            ptxas.display()
        ),
        format!(
            "Both sides assemble a warm-up round, then {rounds} timed rounds; each round puts a new comment line on \
             top of every PTX file, so every kernel must come back `compiled`. The by-hand side's files are \
             written before its clock starts. Rounds alternate which side goes first; the best round of each \
             side is compared. Ratio = kiln ÷ by hand."
        ),
    ];
    let nvrtc = Nvrtc::load(&bench.cuda_root)?;
    let base: Vec<String> =
        (0..KERNELS).map(|i| nvrtc.ptx(&super::source(i), "compute_90")).collect::<Result<_>>().context("NVRTC PTX")?;
    let dir = bench.dir("ptxas-hand")?;
    let daemon = bench.start_kilnd(&bench.dir("ptxas-kilnd")?, &KilndOptions::new(1)).await?;
    let client = daemon.connect().await?;
    let round_ptx = |tag: &str| -> Result<(Vec<String>, Vec<PathBuf>)> {
        let ptx: Vec<String> = base.iter().map(|p| format!("// kiln-bench {tag}\n{p}")).collect();
        let files = ptx
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let f = dir.join(format!("add_{i}.ptx"));
                std::fs::write(&f, p).map(|_| f)
            })
            .collect::<std::io::Result<Vec<_>>>()?;
        Ok((ptx, files))
    };
    let kiln_round = async |ptx: &[String]| -> Result<(Duration, Vec<Vec<u8>>)> {
        let start = Instant::now();
        let job = client.compile(request(ptx)).await?.collect().await?;
        let elapsed = start.elapsed();
        Ok((elapsed, check_job(&job, KERNELS, Some(pb::Tier::Compiled))?))
    };
    let (ptx, files) = round_ptx("ptxas warm-up")?;
    kiln_round(&ptx).await.context("kilnd warm-up")?;
    by_hand(&ptxas, &dir, &files).context("by-hand warm-up")?;
    let (mut kiln_times, mut hand_times, mut identical) = (Vec::new(), Vec::new(), true);
    for round in 0..rounds {
        let (ptx, files) = round_ptx(&format!("ptxas round {round}"))?;
        let (k, h) = if round % 2 == 0 {
            let k = kiln_round(&ptx).await.context("kilnd round")?;
            (k, by_hand(&ptxas, &dir, &files).context("by-hand round")?)
        } else {
            let h = by_hand(&ptxas, &dir, &files).context("by-hand round")?;
            (kiln_round(&ptx).await.context("kilnd round")?, h)
        };
        identical &= k.1 == h.1;
        kiln_times.push(k.0);
        hand_times.push(h.0);
    }
    drop(client);
    daemon.stop().await?;
    let best = |t: &[Duration]| t.iter().min().map_or(0.0, Duration::as_secs_f64);
    s.rows.push(Row::new(
        format!("{KERNELS} PTX kernels cold, concurrency 1, best round"),
        Ok(Value::Seconds(best(&kiln_times))),
        "ptxas by hand, one file after another, best round",
        Ok(Value::Seconds(best(&hand_times))),
    ));
    s.notes.push(format!(
        "kilnd rounds {}; by hand {}; best of each compared: {:+.2} ms per kernel. The cubins kilnd returned were \
         {} to ptxas's own.",
        secs(&kiln_times),
        secs(&hand_times),
        (best(&kiln_times) - best(&hand_times)) * 1e3 / KERNELS as f64,
        if identical { "byte-for-byte identical" } else { "**not identical**" }
    ));
    Ok(s)
}
