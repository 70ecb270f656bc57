//! Figure (b): a cold compile of the 64-kernel graph through kilnd against NVRTC called
//! directly in this process, with equal parallelism.
//!
//! Both sides are long-lived and warmed up, as a daemon is in service: one kilnd per
//! concurrency level, whose workers have compiled before, and this process, whose NVRTC has
//! compiled before. Each round compiles sources no one has compiled (a round tag in a comment
//! changes every cache key), and every kernel of a kiln round must come back as `compiled`, so
//! kiln pays the whole cold path: keying, scheduling, the worker round trip, the envelope,
//! the fsynced disk write and the reply. Rounds alternate which side goes first.

use super::kilnd::KilndOptions;
use super::nvrtc::Nvrtc;
use super::report::{Row, Section, Target, Value};
use super::{Bench, GRAPH_KERNELS, Shared, TARGET, check_job, work_queue};
use anyhow::{Context, Result, ensure};
use kiln_proto::pb;
use kiln_tests::kernels;
use std::sync::Arc;
use std::time::{Duration, Instant};

const TITLE: &str = "(b) Cold compile: kilnd against NVRTC called directly";

/// The graph's sources for one round, tagged so that no cache holds them.
fn sources(round: &str) -> Vec<String> {
    (0..GRAPH_KERNELS).map(|i| format!("// kiln-bench cold round {round}\n{}", super::source(i))).collect()
}

fn request(sources: &[String]) -> pb::CompileRequest {
    let kernels =
        sources.iter().enumerate().map(|(i, s)| kernels::kernel(&format!("add_{i}"), kernels::cuda(s))).collect();
    kernels::request(TARGET, kernels)
}

async fn kiln_round(client: &kiln_client::Client, sources: &[String]) -> Result<(Duration, Vec<Vec<u8>>)> {
    let start = Instant::now();
    let job = client.compile(request(sources)).await?.collect().await?;
    let elapsed = start.elapsed();
    let cubins = check_job(&job, sources.len(), Some(pb::Tier::Compiled))?;
    Ok((elapsed, cubins))
}

/// Compiles every source with `threads` threads pulling from one queue, as kilnd's scheduler
/// hands kernels to its workers.
fn direct_round(nvrtc: &Nvrtc, sources: &[String], threads: usize) -> Result<(Duration, Vec<Vec<u8>>)> {
    let start = Instant::now();
    let cubins = work_queue::run(sources.len(), threads, |i| nvrtc.compile(&sources[i], TARGET));
    let elapsed = start.elapsed();
    Ok((elapsed, cubins.into_iter().collect::<Result<_>>()?))
}

async fn direct(nvrtc: &Arc<Nvrtc>, sources: Vec<String>, threads: usize) -> Result<(Duration, Vec<Vec<u8>>)> {
    let nvrtc = Arc::clone(nvrtc);
    tokio::task::spawn_blocking(move || direct_round(&nvrtc, &sources, threads)).await?
}

/// The median over rounds of (kiln ÷ NVRTC − 1) in percent: each round's two sides ran back to
/// back, so this is less swayed by load that comes and goes than the ratio of the two bests.
fn median_overhead_percent(kiln: &[Duration], direct: &[Duration]) -> f64 {
    let mut overheads: Vec<f64> =
        kiln.iter().zip(direct).map(|(k, d)| (k.as_secs_f64() / d.as_secs_f64() - 1.0) * 100.0).collect();
    overheads.sort_by(f64::total_cmp);
    overheads.get(overheads.len() / 2).copied().unwrap_or(f64::NAN)
}

fn secs(d: &[Duration]) -> String {
    d.iter().map(|d| format!("{:.2} s", d.as_secs_f64())).collect::<Vec<_>>().join(", ")
}

/// Measures one concurrency level; returns its row and the best kiln time.
async fn level(bench: &Bench, nvrtc: &Arc<Nvrtc>, concurrency: usize, section: &mut Section) -> Result<(Row, f64)> {
    let dir = bench.dir(&format!("cold-c{concurrency}"))?;
    let options = KilndOptions::new(concurrency);
    let daemon = bench.start_kilnd(&dir, &options).await?;
    let client = daemon.connect().await?;
    // Warm-up: every worker and this process's NVRTC compile once before anything is timed.
    let warm = sources(&format!("warm-up c{concurrency}"));
    kiln_round(&client, &warm).await.context("kilnd warm-up")?;
    direct(nvrtc, warm, concurrency).await.context("NVRTC warm-up")?;

    let (mut kiln_times, mut direct_times) = (Vec::new(), Vec::new());
    let mut identical = true;
    for round in 0..bench.options.cold_rounds {
        let src = sources(&format!("c{concurrency} r{round}"));
        let kiln_first = round % 2 == 0;
        let (k, d) = if kiln_first {
            let k = kiln_round(&client, &src).await.context("kilnd round")?;
            (k, direct(nvrtc, src, concurrency).await.context("NVRTC round")?)
        } else {
            let d = direct(nvrtc, src.clone(), concurrency).await.context("NVRTC round")?;
            (kiln_round(&client, &src).await.context("kilnd round")?, d)
        };
        identical &= k.1 == d.1;
        kiln_times.push(k.0);
        direct_times.push(d.0);
    }
    daemon.stop().await?;
    ensure!(!kiln_times.is_empty(), "no rounds were run (--cold-rounds 0)");
    let best = |t: &[Duration]| t.iter().min().map_or(0.0, Duration::as_secs_f64);
    let (kiln_best, direct_best) = (best(&kiln_times), best(&direct_times));
    section.notes.push(format!(
        "concurrency {concurrency}: kilnd rounds {}; NVRTC rounds {}; best of each compared: {:+.2} ms per kernel. \
         Median of the per-round overheads (each round's two sides ran back to back): {:+.1}%. The cubins kilnd \
         returned were {} to NVRTC's own.",
        secs(&kiln_times),
        secs(&direct_times),
        (kiln_best - direct_best) * 1e3 / GRAPH_KERNELS as f64,
        median_overhead_percent(&kiln_times, &direct_times),
        if identical { "byte-for-byte identical" } else { "**not identical**" }
    ));
    let threads = if concurrency == 1 { "1 thread".to_string() } else { format!("{concurrency} threads") };
    let row = Row::new(
        format!("{GRAPH_KERNELS} kernels cold, concurrency {concurrency}"),
        Ok(Value::Seconds(kiln_best)),
        format!("NVRTC in-process, {threads}"),
        Ok(Value::Seconds(direct_best)),
    )
    .with_target(Target::OverheadAtMostPercent(5.0));
    Ok((row, kiln_best))
}

pub async fn run(bench: &Bench, shared: &mut Shared) -> Result<Section> {
    let mut section = Section::new(TITLE);
    let nvrtc = Arc::new(Nvrtc::load(&bench.cuda_root)?);
    let mut levels = vec![1];
    if bench.cores > 1 {
        levels.push(bench.cores);
    }
    section.method = vec![
        format!(
            "Wall time for one `Compile` of a {GRAPH_KERNELS}-kernel graph (distinct vector-add kernels, {TARGET}) over \
             the Unix socket, from the call until the last result, against the same {GRAPH_KERNELS} sources compiled \
             with NVRTC called in this process (cudarc's sys API, libraries loaded by absolute path as kilnd's workers \
             load them, the same options: `--gpu-architecture={TARGET}` and the toolkit's include directories)."
        ),
        format!(
            "Equal parallelism: kilnd `--concurrency N` against N threads sharing one queue, for N in {levels:?}. One \
             long-lived kilnd per level; both sides compile a warm-up graph first, then {} timed rounds of fresh \
             sources (a round tag in a comment changes every cache key; every kernel must come back `compiled`). \
             Rounds alternate which side goes first; the best round of each side is compared.",
            bench.options.cold_rounds
        ),
        "Overhead = kiln ÷ NVRTC − 1. kiln's side includes the fsynced disk-tier write of every artifact.".into(),
    ];
    for concurrency in levels {
        match level(bench, &nvrtc, concurrency, &mut section).await {
            Ok((row, kiln_best)) => {
                if concurrency == bench.cores {
                    shared.kiln_cold_graph_secs = Some(kiln_best);
                }
                section.rows.push(row);
            }
            Err(e) => section.notes.push(format!("**concurrency {concurrency} failed:** {e:#}")),
        }
    }
    let scaling = match section.rows.as_slice() {
        [one, many] => match (&one.kiln, &one.baseline, &many.kiln, &many.baseline) {
            (Ok(k1), Ok(d1), Ok(kn), Ok(dn)) => Some((*k1, *d1, *kn, *dn)),
            _ => None,
        },
        _ => None,
    };
    if let Some((k1, d1, kn, dn)) = scaling {
        section.notes.push(format!(
            "Scaling from 1 to {}: kilnd (separate worker processes) {:.2}× as fast; NVRTC threads in one process \
             {:.2}× as fast.",
            bench.cores,
            k1.seconds() / kn.seconds(),
            d1.seconds() / dn.seconds()
        ));
    }
    Ok(section)
}
