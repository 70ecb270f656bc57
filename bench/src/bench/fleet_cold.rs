//! Figure (f): fleet cold start. N kilnd "hosts" (own empty cache
//! directories, one kiln-cache) start together on the same 32-kernel graph, with fleet leases
//! and, as the baseline, with `fleet_leases = false`. Counted: compiles across the fleet, from
//! every daemon's `/metrics` and from a witness NVRTC outside kiln (tests/witness, one line per
//! real compile); timed: the wall time until every daemon has the whole graph.

use super::fleet::{Fleet, leases_on_and_off, most, panic_text};
use super::report::{Row, Section, Target, Value};
use super::{Bench, TARGET, check_job};
use anyhow::{Result, anyhow};
use kiln_proto::pb;
use kiln_tests::kernels;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

const TITLE: &str = "(f) Fleet cold start: 8 daemons, one 32-kernel graph";
const DAEMONS: usize = 8;
const KERNELS: usize = 32;

/// One run of the fleet.
#[derive(Debug)]
struct Run {
    wall: Duration,
    /// Sum over the daemons of `kiln_compiles_total` (every toolchain and outcome).
    metrics: f64,
    /// Lines the witness NVRTC wrote during the run.
    witnessed: usize,
    tiers: BTreeMap<String, usize>,
}

/// The graph for one run: a tag in a comment makes every kernel new to every cache.
fn request(tag: &str) -> pb::CompileRequest {
    let ks = (0..KERNELS)
        .map(|i| kernels::kernel(&format!("add_{i}"), kernels::cuda(&format!("// {tag}\n{}", kernels::vector_add(i)))))
        .collect();
    kernels::request(TARGET, ks)
}

async fn run_once(
    bench: &Bench,
    fleet: &Fleet,
    witness: &(PathBuf, Vec<(String, String)>, PathBuf),
    leases: bool,
    round: usize,
) -> Result<Run> {
    let (root, env, file) = witness;
    // The audit is off: its recompiles are background work a fetched artifact may cause, not the
    // cold compiles this figure counts (the witness would count them); (o) measures it.
    let config = if leases { "audit = false\n" } else { "audit = false\nfleet_leases = false\n" };
    let mut daemons = Vec::with_capacity(DAEMONS);
    for d in 0..DAEMONS {
        let mut o = fleet.kilnd_options(bench.cores, config);
        o.metrics = true;
        o.cuda_root = Some(root.clone());
        o.env.extend(env.iter().cloned());
        // The witness CUDA root has no bin/ptxas, which each daemon would warn about.
        o.env.push(("KILN_LOG".into(), "error".into()));
        let dir = bench.dir(&format!("fleet-cold-{d}"))?;
        daemons.push(bench.start_kilnd(&dir, &o).await?);
    }
    let mut clients = Vec::with_capacity(DAEMONS);
    for d in &daemons {
        clients.push(d.connect().await?);
    }
    let before = kiln_tests::toolkits::witnessed_compiles(file);
    let req = request(&format!("kiln-bench fleet cold, leases {leases}, round {round}"));
    let barrier = Arc::new(tokio::sync::Barrier::new(DAEMONS + 1));
    let mut tasks = tokio::task::JoinSet::new();
    for client in clients {
        let (barrier, req) = (barrier.clone(), req.clone());
        tasks.spawn(async move {
            barrier.wait().await;
            anyhow::Ok(client.compile(req).await?.collect().await?)
        });
    }
    barrier.wait().await;
    let start = Instant::now();
    let mut tiers = BTreeMap::new();
    while let Some(job) = tasks.join_next().await {
        let job = job??;
        check_job(&job, KERNELS, None)?;
        for k in &job.kernels {
            *tiers.entry(format!("{:?}", k.tier()).to_lowercase()).or_insert(0) += 1;
        }
    }
    let wall = start.elapsed();
    let mut metrics = 0.0;
    for d in &daemons {
        metrics += d.metric_sum("kiln_compiles_total{")?;
    }
    let witnessed = kiln_tests::toolkits::witnessed_compiles(file) - before;
    for d in daemons {
        d.stop().await?;
    }
    Ok(Run { wall, metrics, witnessed, tiers })
}

/// Builds the witness NVRTC (a C shim; the harness panics when `cc` fails).
async fn witness(dir: PathBuf) -> Result<(PathBuf, Vec<(String, String)>, PathBuf)> {
    tokio::task::spawn_blocking(move || {
        let file = dir.join("compiles.log");
        let (root, env) = kiln_tests::toolkits::witness_root(&dir, &file);
        (root, env, file)
    })
    .await
    .map_err(|e| anyhow!("building the witness NVRTC failed: {}", panic_text(e)))
}

fn describe(runs: &[Run]) -> String {
    runs.iter()
        .map(|r| {
            let tiers: Vec<String> = r.tiers.iter().map(|(t, n)| format!("{t} {n}")).collect();
            format!(
                "{:.2} s, {} compiles by /metrics, {} by the witness, results by tier: {}",
                r.wall.as_secs_f64(),
                r.metrics,
                r.witnessed,
                tiers.join(", ")
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort_unstable();
    v[v.len() / 2]
}

pub async fn run(bench: &Bench, fleet: &Fleet) -> Result<Section> {
    let rounds = bench.options.fleet_rounds.max(1);
    let mut s = Section::new(TITLE);
    s.method = vec![
        format!(
            "{DAEMONS} kilnd processes, each its own empty cache directory and `--concurrency {}`, all with the run's \
             kiln-cache as their remote tier, started fresh for every run (start-up not timed). Each gets one \
             client; a barrier releases all {DAEMONS} `Compile` calls of the same {KERNELS}-kernel graph (distinct \
             vector-add kernels, {TARGET}) at once. Wall time runs from the barrier until the last daemon has \
             returned all {KERNELS} results (each checked ok). All {DAEMONS} daemons share this machine's {} cores, \
             as no real fleet would: the baseline pays for its duplicate compiles on the same cores.",
            bench.cores, bench.cores
        ),
        "kiln: fleet leases on (the default). Baseline: the same with `fleet_leases = false` in every daemon's \
         config, so each daemon that misses compiles for itself, as Triton's or sccache's Redis caches do. \
         Both with `audit = false`: the fleet audit's recompiles (a publisher's first artifact on each host, \
         and 2% of the rest) are background work, not cold compiles; figure (o) measures them."
            .into(),
        format!(
            "Every run's sources carry a new comment, so every kernel is cold everywhere. {rounds} runs of each \
             kind, alternating which goes first; the table gives the largest compile count and the median wall time."
        ),
        "Compiles are counted twice: the sum of `kiln_compiles_total` over the daemons' `/metrics`, and the \
         lines a witness NVRTC (tests/witness, a shim in front of the real libnvrtc that logs each compile) \
         wrote, outside kiln's code. Target: compiles = distinct kernels."
            .into(),
    ];
    let witness = witness(bench.dir("fleet-witness")?).await?;
    let (on, off) = leases_on_and_off(rounds, |leases, round| run_once(bench, fleet, &witness, leases, round)).await?;
    s.rows.push(
        Row::new(
            "compiles across the fleet (`/metrics`)",
            Ok(Value::Count(most(&on, |r| r.metrics))),
            "leases off",
            Ok(Value::Count(most(&off, |r| r.metrics))),
        )
        .with_target(Target::CountEquals(KERNELS as u64)),
    );
    s.rows.push(
        Row::new(
            "compiles across the fleet (witness NVRTC)",
            Ok(Value::Count(most(&on, |r| r.witnessed as f64))),
            "leases off",
            Ok(Value::Count(most(&off, |r| r.witnessed as f64))),
        )
        .with_target(Target::CountEquals(KERNELS as u64)),
    );
    s.rows.push(Row::new(
        "wall time until all 8 daemons have the graph, median",
        Ok(Value::Seconds(median(on.iter().map(|r| r.wall).collect()).as_secs_f64())),
        "leases off, median",
        Ok(Value::Seconds(median(off.iter().map(|r| r.wall).collect()).as_secs_f64())),
    ));
    s.notes.push(format!("leases on: {}", describe(&on)));
    s.notes.push(format!("leases off: {}", describe(&off)));
    Ok(s)
}
