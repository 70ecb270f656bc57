//! Figure (h): Triton compiles through kilnd against `triton.compile`
//! called directly in one long-lived Python process, on the same 12 kernels.
//!
//! kilnd runs with `triton_workers = 1` and `--concurrency 1`, so one worker compiles the graph's
//! kernels in order, as the direct process does; both sides compile a warm-up round first (the
//! pool is started, Triton is imported and has compiled once on each side). Each timed round
//! uses a new source (a comment changes), so neither kiln's cache nor Triton's can answer.

use super::kilnd::KilndOptions;
use super::report::{Row, Section, Target, Value};
use super::triton_kernels::{self, Direct, TritonKernel};
use super::{Bench, TARGET};
use anyhow::{Context, Result, ensure};
use std::time::{Duration, Instant};

const TITLE: &str = "(h) Triton compile: kilnd against triton.compile called directly";
/// The target: kilnd's compile at most this many times `triton.compile`'s.
const TARGET_RATIO: f64 = 1.10;

/// Options for a kilnd that compiles Triton with `workers` workers.
pub fn triton_options(bench: &Bench, concurrency: usize, workers: usize) -> KilndOptions {
    KilndOptions {
        config: format!("triton_workers = {workers}\n"),
        env: vec![("KILN_PYTHON".into(), triton_kernels::python(bench).display().to_string())],
        ..KilndOptions::new(concurrency)
    }
}

/// One `Compile` of `kernels` from `source`: wall time from the call to the last result.
pub async fn kiln_round(
    client: &kiln_client::Client,
    source: &str,
    kernels: &[TritonKernel],
) -> Result<(Duration, Vec<Vec<u8>>)> {
    let start = Instant::now();
    let job = client.compile(triton_kernels::request(source, kernels)).await?.collect().await?;
    let elapsed = start.elapsed();
    Ok((elapsed, triton_kernels::cubins(&job, kernels)?))
}

pub async fn run(bench: &Bench) -> Result<Section> {
    let rounds = bench.options.triton_rounds.max(1);
    let kernels = triton_kernels::twelve();
    let mut s = Section::new(TITLE);
    s.method = vec![
        format!(
            "The same {} kernels of examples/triton/kernels.py ({}), for {TARGET}: one `Compile` of them as a graph \
             over the Unix socket, from the call until the last result, against one Python process (the pinned \
             triton in .venv/, imported once) that loads the module and calls `triton.compile` on each kernel in \
             turn, timed inside Python with `time.perf_counter` (so it pays no IPC at all).",
            kernels.len(),
            kernels.iter().map(|k| k.id.as_str()).collect::<Vec<_>>().join(", ")
        ),
        "kilnd: `triton_workers = 1`, `--concurrency 1`, its pool started by a warm-up round. Python: \
         `TRITON_ALWAYS_COMPILE=1` and a private `TRITON_CACHE_DIR`, as kilnd gives its workers, and the module \
         loaded under the same content-derived name kiln's worker uses, so the cubins can be compared."
            .into(),
        format!(
            "Both sides compile a warm-up round, then {rounds} timed rounds; each round's module starts with a new \
             comment, so every key and module is new and every kernel must come back `compiled`. Rounds alternate \
             which side goes first; the best round of each side is compared. Ratio = kiln ÷ direct."
        ),
    ];
    let daemon = bench.start_kilnd(&bench.dir("triton-compile")?, &triton_options(bench, 1, 1)).await?;
    let client = daemon.connect().await?;
    let mut direct = Direct::start(bench)?;
    let warm = triton_kernels::source(bench, "triton warm-up")?;
    kiln_round(&client, &warm, &kernels).await.context("kilnd warm-up")?;
    let d = tokio::task::block_in_place(|| direct.compile(&warm, &kernels)).context("direct warm-up")?;
    s.notes
        .push(format!("Warm-up round (Triton's first compile in each process), direct: {:.2} s.", d.0.as_secs_f64()));

    let (mut kiln_times, mut direct_times, mut identical) = (Vec::new(), Vec::new(), true);
    for round in 0..rounds {
        let src = triton_kernels::source(bench, &format!("triton round {round}"))?;
        let run_direct = |direct: &mut Direct| tokio::task::block_in_place(|| direct.compile(&src, &kernels));
        let (k, d) = if round % 2 == 0 {
            let k = kiln_round(&client, &src, &kernels).await.context("kilnd round")?;
            (k, run_direct(&mut direct).context("direct round")?)
        } else {
            let d = run_direct(&mut direct).context("direct round")?;
            (kiln_round(&client, &src, &kernels).await.context("kilnd round")?, d)
        };
        identical &= k.1 == d.1;
        kiln_times.push(k.0);
        direct_times.push(d.0);
    }
    drop(client);
    daemon.stop().await?;
    ensure!(!kiln_times.is_empty(), "no rounds");
    let best = |t: &[Duration]| t.iter().min().map_or(0.0, Duration::as_secs_f64);
    let mut per_round: Vec<f64> =
        kiln_times.iter().zip(&direct_times).map(|(k, d)| k.as_secs_f64() / d.as_secs_f64()).collect();
    per_round.sort_by(f64::total_cmp);
    s.rows.push(
        Row::new(
            format!("{} Triton kernels cold, 1 worker, best round", kernels.len()),
            Ok(Value::Seconds(best(&kiln_times))),
            "`triton.compile` in one Python process, best round",
            Ok(Value::Seconds(best(&direct_times))),
        )
        .with_target(Target::RatioAtMost(TARGET_RATIO)),
    );
    s.notes.push(format!(
        "kilnd rounds {}; direct rounds {}; median of the per-round ratios (each round's two sides ran back to \
         back): {:.3}×; best of each compared: {:+.1} ms per kernel. The cubins kilnd returned were {} to \
         `triton.compile`'s own.",
        triton_kernels::secs(&kiln_times),
        triton_kernels::secs(&direct_times),
        per_round[per_round.len() / 2],
        (best(&kiln_times) - best(&direct_times)) * 1e3 / kernels.len() as f64,
        if identical { "byte-for-byte identical" } else { "**not identical**" }
    ));
    s.notes.push(WHERE_THE_TIME_GOES.to_string());
    Ok(s)
}

/// Measured by hand, kept beside the figure it explains.
const WHERE_THE_TIME_GOES: &str = "Where the time goes (2026-11-22 and 23, a release kilnd, `--concurrency 1`, \
     timestamps in the worker and its children, medians per kernel): beside the compile itself (56-90 ms, with \
     the machine's load), kilnd's side pays, on 2026-11-23 before the changes below / after: the child executes \
     the kernel's module again, 3.7 / 1.9-2.1 ms (the direct side executes it once per round of 12); the child \
     reads its request 1.5-2.0 / 0.27 ms after the zygote writes it; the zygote scans /proc for the compile's \
     processes, 1.8-2.3 / 0.27 ms; the answer's way through the zygote to kilnd, 1.3-1.7 ms, and the killed \
     child's reap and its directory's removal, 0.4-0.9 ms, unchanged. The changes: the worker hands a compile \
     the function extents an earlier compile of the same source found, so inspect need not tokenize each \
     @triton.jit function again in pure Python; the scan reads only the process ids handed out since the \
     compile's child was forked; the next spare is forked 4 ms into a compile rather than at once. Earlier, \
     reaping the killed child on the critical path cost 6-10 ms more (1.29× best-of before, 1.04-1.28× over \
     thirteen runs after). Without the spare's prefault it measured worse (1.17-1.34×), and without its copy of \
     the zygote's writable pages too (1.19-1.21× against 1.08-1.15×, alternating). On this shared 2-core VM the \
     direct side alone ranged from 0.77 s to 2.24 s a round within one hour, so a difference of a few percent \
     needs many runs to show; the component times above are steadier.";
