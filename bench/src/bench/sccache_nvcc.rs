//! Figure (d): the same 64 kernels built the way a build system builds them, one compiler
//! process per `.cu` file, through sccache + nvcc (local disk cache, then Redis) and through the
//! `kiln compile` CLI, cold and warm; with kiln's whole-graph figures from (a) and (b) alongside.
//!
//! nvcc comes from the pinned wheels (`nvidia/cu13/bin/nvcc`). The wheel ships an `nvcc.profile`
//! that points at its own `nvvm/bin/cicc`, `nvvm/libdevice` and include directories relative to
//! itself, so it needs no `CUDA_HOME`, `NVVMIR_LIBRARY_DIR` or `PATH` changes; it does need a
//! host compiler (`gcc`/`g++`) on `PATH` for preprocessing.

use super::kilnd::KilndOptions;
use super::redis::RedisServer;
use super::report::{Measured, Row, Section, Value};
use super::sccache::{Backend, Sccache};
use super::source_tree::{SourceTree, median_pass, no_check};
use super::{Bench, GRAPH_KERNELS, Shared, TARGET};
use anyhow::{Context, Result, bail, ensure};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

const TITLE: &str = "(d) A build of the 64 kernels: kiln against sccache + nvcc";

fn secs(d: Duration) -> Value {
    Value::Seconds(d.as_secs_f64())
}

fn list(times: &[Duration]) -> String {
    times.iter().map(|d| format!("{:.2} s", d.as_secs_f64())).collect::<Vec<_>>().join(", ")
}

/// Cold and warm figures of one way of building.
#[derive(Debug)]
struct Figures {
    cold: Measured,
    warm: Measured,
    /// kiln only: the first pass after a daemon restart, served by the disk tier.
    restart: Measured,
}

impl Figures {
    /// Every figure failed with the same error.
    fn failed(e: &anyhow::Error) -> Figures {
        let m: Measured = Err(format!("{e:#}"));
        Figures { cold: m.clone(), warm: m.clone(), restart: m }
    }
}

fn sccache_figures(
    bench: &Bench,
    tree: &SourceTree,
    nvcc: &Path,
    backend: &Backend,
    label: &str,
    notes: &mut Vec<String>,
) -> Result<Figures> {
    let exe = bench.repo.join(".tools/bin/sccache");
    ensure!(exe.is_file(), "{} is missing: scripts/bench installs it", exe.display());
    let scratch = bench.dir(&format!("sccache-{label}"))?;
    let server = Sccache::start(&exe, backend, &scratch)?;
    let make = |i: usize| {
        let mut c = server.wrap(nvcc);
        c.args(["-cubin", &format!("-arch={TARGET}"), "-o"]).arg(tree.cubin(i)).arg(&tree.sources[i]);
        c
    };
    let cold = tree.pass(bench.cores, &make, &no_check)?;
    let cold_counters = server.counters()?;
    server.zero_stats()?;
    let (warm, all) = median_pass(bench.options.warm_passes, || tree.pass(bench.cores, &make, &no_check))?;
    let warm_counters = server.counters()?;
    notes.push(format!("sccache ({label}) cold pass: {cold_counters}."));
    notes.push(format!("sccache ({label}) warm passes {}: {warm_counters}.", list(&all)));
    Ok(Figures { cold: Ok(secs(cold)), warm: Ok(secs(warm)), restart: Err("not applicable".into()) })
}

/// Checks `kiln compile --json` output: every kernel line has outcome ok and the expected tier.
fn kiln_check(tier: &'static str) -> impl Fn(usize, &str) -> Result<()> + Sync {
    move |i, stdout| {
        let Some(line) = stdout.lines().find(|l| l.contains("\"outcome\"")) else {
            bail!("add_{i}: no kernel line in kiln's output: {stdout}")
        };
        let v: serde_json::Value = serde_json::from_str(line).with_context(|| format!("add_{i}: bad JSON {line}"))?;
        ensure!(v["outcome"] == "ok", "add_{i}: outcome {}", v["outcome"]);
        ensure!(v["tier"] == tier, "add_{i}: served by {}, expected {tier}", v["tier"]);
        Ok(())
    }
}

async fn kiln_cli_figures(bench: &Bench, tree: &SourceTree, notes: &mut Vec<String>) -> Result<Figures> {
    let dir = bench.dir("cli-kilnd")?;
    let options = KilndOptions::new(bench.cores);
    let kiln = bench.kiln();
    let make_for = |uri: String| {
        let kiln = kiln.clone();
        move |i: usize| {
            let mut c = Command::new(&kiln);
            c.args(["--daemon", &uri, "compile", "--json", "--target", TARGET, "--out"])
                .arg(&tree.out)
                .arg(&tree.sources[i]);
            c
        }
    };
    let daemon = bench.start_kilnd(&dir, &options).await?;
    let make = make_for(daemon.uri());
    let (cold, warm, all) = tokio::task::block_in_place(|| -> Result<_> {
        let cold = tree.pass(bench.cores, &make, &kiln_check("compiled"))?;
        let (warm, all) =
            median_pass(bench.options.warm_passes, || tree.pass(bench.cores, &make, &kiln_check("memory")))?;
        Ok((cold, warm, all))
    })?;
    daemon.stop().await?;
    let daemon = bench.start_kilnd(&dir, &options).await?;
    let make = make_for(daemon.uri());
    let restart = tokio::task::block_in_place(|| tree.pass(bench.cores, &make, &kiln_check("disk")))?;
    daemon.stop().await?;
    notes.push(format!("kiln CLI warm passes (memory tier): {}.", list(&all)));
    Ok(Figures { cold: Ok(secs(cold)), warm: Ok(secs(warm)), restart: Ok(secs(restart)) })
}

pub async fn run(bench: &Bench, redis: &RedisServer, shared: &Shared) -> Result<Section> {
    let mut s = Section::new(TITLE);
    let jobs = bench.cores;
    let passes = bench.options.warm_passes;
    s.method = vec![
        format!(
            "{GRAPH_KERNELS} `.cu` files (the kernels of (a) and (b)), one process per file, {jobs} at a time as \
             `make -j{jobs}` would run them. nvcc: `nvcc -cubin -arch={TARGET} -o add_N.cubin add_N.cu` from the \
             pinned wheel; its own `nvcc.profile` finds `cicc`, libdevice and the headers, with `gcc` as host compiler."
        ),
        format!(
            "sccache (0.19, redis feature only, from `.tools/`): `sccache nvcc …`, a private server per backend, \
             first with its local disk cache (`SCCACHE_DIR`), then with Redis (`SCCACHE_REDIS_ENDPOINT`, the run's \
             private redis-server, flushed first). Cold = first pass on an empty cache; warm = median of {passes} \
             further passes. sccache splits an nvcc call into its cicc (PTX) and ptxas (CUBIN) steps and caches \
             those; the outer nvcc run, its host preprocessing and cudafe++ still run on a hit."
        ),
        format!(
            "kiln CLI: `kiln compile --json --target {TARGET} --out DIR add_N.cu` per file against a kilnd with \
             `--concurrency {jobs}` on an empty cache. Cold = first pass (every kernel `compiled`); warm (memory) = \
             median of {passes} further passes (every kernel `memory`); warm (disk) = one pass after restarting \
             kilnd (every kernel `disk`)."
        ),
        "kiln graph: one `Compile` of all 64 kernels, from (b) (best cold round at the machine's concurrency) and (a) \
         (p50 of memory-tier hits; p50 of the first compile after a restart)."
            .into(),
        "Ratio = kiln ÷ baseline; below 1 means kiln finished sooner.".into(),
    ];

    let tree = SourceTree::write(bench)?;
    let nvcc = bench.cuda_root.join("bin/nvcc");
    let plain = tokio::task::block_in_place(|| {
        let make = |i: usize| {
            let mut c = Command::new(&nvcc);
            c.args(["-cubin", &format!("-arch={TARGET}"), "-o"]).arg(tree.cubin(i)).arg(&tree.sources[i]);
            c
        };
        tree.pass(jobs, &make, &no_check)
    });
    let plain = plain.map(secs).map_err(|e| format!("{e:#}"));

    let disk = tokio::task::block_in_place(|| {
        sccache_figures(
            bench,
            &tree,
            &nvcc,
            &Backend::Disk(bench.work.join("sccache-disk-cache")),
            "disk",
            &mut s.notes,
        )
    })
    .unwrap_or_else(|e| Figures::failed(&e));

    let redis_figures = tokio::task::block_in_place(|| -> Result<Figures> {
        redis.connect()?.flushall()?;
        let unix = format!("unix://{}", redis.socket.display());
        match sccache_figures(bench, &tree, &nvcc, &Backend::Redis(unix.clone()), "Redis, Unix socket", &mut s.notes) {
            Ok(f) => return Ok(f),
            Err(e) => s.notes.push(format!(
                "sccache refused the Redis endpoint `{unix}` ({e:#}); measured over loopback TCP instead."
            )),
        }
        redis.connect()?.flushall()?;
        sccache_figures(bench, &tree, &nvcc, &Backend::Redis(redis.tcp_url()), "Redis", &mut s.notes)
    })
    .unwrap_or_else(|e| Figures::failed(&e));

    let cli = kiln_cli_figures(bench, &tree, &mut s.notes).await.unwrap_or_else(|e| Figures::failed(&e));
    if let (Ok(p), Ok(d)) = (&plain, &disk.cold) {
        s.notes.push(format!(
            "Plain nvcc with no cache took {p}; sccache's cold pass (disk) took {d}, {:.2}× that.",
            d.seconds() / p.seconds()
        ));
    }

    let get = |m: &Measured| m.clone();
    let graph_cold = shared.kiln_cold_graph_secs.map(Value::Seconds).ok_or_else(|| "see (b)".to_string());
    let graph_memory = shared.kiln_memory_p50_ms.map(Value::Millis).ok_or_else(|| "see (a)".to_string());
    let graph_restart = shared.kiln_restart_p50_ms.map(Value::Millis).ok_or_else(|| "see (a)".to_string());
    let rows = [
        ("cold: kiln CLI per file", get(&cli.cold), "nvcc, no cache", plain),
        ("cold: kiln CLI per file", get(&cli.cold), "sccache + nvcc, disk, cold", get(&disk.cold)),
        ("cold: kiln CLI per file", get(&cli.cold), "sccache + nvcc, Redis, cold", get(&redis_figures.cold)),
        ("cold: kiln graph, one request", graph_cold.clone(), "sccache + nvcc, disk, cold", get(&disk.cold)),
        ("warm: kiln CLI per file, memory tier", get(&cli.warm), "sccache + nvcc, disk, warm", get(&disk.warm)),
        (
            "warm: kiln CLI per file, memory tier",
            get(&cli.warm),
            "sccache + nvcc, Redis, warm",
            get(&redis_figures.warm),
        ),
        (
            "warm: kiln CLI per file, disk tier (after restart)",
            get(&cli.restart),
            "sccache + nvcc, disk, warm",
            get(&disk.warm),
        ),
        ("warm: kiln graph, memory tier (p50)", graph_memory, "sccache + nvcc, disk, warm", get(&disk.warm)),
        (
            "warm: kiln graph, disk tier after restart (p50)",
            graph_restart,
            "sccache + nvcc, disk, warm",
            get(&disk.warm),
        ),
    ];
    s.rows = rows.into_iter().map(|(m, k, b, bv)| Row::new(m, k, b, bv)).collect();
    Ok(s)
}
