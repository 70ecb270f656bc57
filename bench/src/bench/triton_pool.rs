//! Figure (i): a cold 32-kernel Triton graph through kilnd with the worker
//! pool at 1 worker against 2 workers, both daemons at `--concurrency 2`, on this machine.

use super::report::{Row, Section, Value};
use super::triton_compile::{kiln_round, triton_options};
use super::triton_kernels;
use super::{Bench, TARGET};
use anyhow::{Context, Result, ensure};
use std::time::Duration;

const TITLE: &str = "(i) Triton worker pool: 2 workers against 1";

pub async fn run(bench: &Bench) -> Result<Section> {
    let rounds = bench.options.triton_rounds.max(1);
    let kernels = triton_kernels::thirty_two();
    let mut s = Section::new(TITLE);
    s.method = vec![
        format!(
            "One `Compile` of a {}-kernel Triton graph (24 vector adds over 6 BLOCK × 4 num_warps, 3 softmax, 3 \
             layer norm, 2 `tl.dot` matmuls from examples/triton/kernels.py, {TARGET}), from the call until the \
             last result, on two daemons that differ only in `triton_workers` (1 and 2); both at \
             `--concurrency 2`, on this {}-core machine.",
            kernels.len(),
            bench.cores
        ),
        format!(
            "Each daemon compiles a warm-up graph first (which starts its whole pool), then {rounds} timed rounds \
             with a new comment in the module each round, so every kernel must come back `compiled`. Rounds \
             alternate which daemon goes first; best round of each compared. Ratio = 2 workers ÷ 1 worker; below \
             1 means the second worker helped."
        ),
    ];
    let one = bench.start_kilnd(&bench.dir("triton-pool-1")?, &triton_options(bench, 2, 1)).await?;
    let two = bench.start_kilnd(&bench.dir("triton-pool-2")?, &triton_options(bench, 2, 2)).await?;
    let (c1, c2) = (one.connect().await?, two.connect().await?);
    for (c, name) in [(&c1, "1 worker"), (&c2, "2 workers")] {
        let warm = triton_kernels::source(bench, &format!("pool warm-up {name}"))?;
        kiln_round(c, &warm, &kernels).await.with_context(|| format!("warm-up, {name}"))?;
    }
    let (mut t1, mut t2) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let order = if round % 2 == 0 { [(&c1, 1), (&c2, 2)] } else { [(&c2, 2), (&c1, 1)] };
        for (c, workers) in order {
            let src = triton_kernels::source(bench, &format!("pool round {round}, {workers} workers"))?;
            let (t, _) = kiln_round(c, &src, &kernels).await.with_context(|| format!("round {round}, {workers}"))?;
            if workers == 1 { t1.push(t) } else { t2.push(t) }
        }
    }
    drop((c1, c2));
    one.stop().await?;
    two.stop().await?;
    ensure!(!t1.is_empty() && !t2.is_empty(), "no rounds");
    let best = |t: &[Duration]| t.iter().min().map_or(0.0, Duration::as_secs_f64);
    s.rows.push(Row::new(
        format!("{} Triton kernels cold, pool of 2 workers", kernels.len()),
        Ok(Value::Seconds(best(&t2))),
        "pool of 1 worker",
        Ok(Value::Seconds(best(&t1))),
    ));
    s.notes.push(format!(
        "1 worker: rounds {}; 2 workers: rounds {}. Speed-up of the best rounds: {:.2}×.",
        triton_kernels::secs(&t1),
        triton_kernels::secs(&t2),
        best(&t1) / best(&t2)
    ));
    Ok(s)
}
