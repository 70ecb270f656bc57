//! Scenario 4: kilnd killed with SIGKILL while it writes the disk tier, again and again, on the
//! same directories; then every entry it serves from disk must be right.
//!
//! The disk tier writes a temp file, fsyncs it and renames it into place (daemon/src/core/store/
//! disk.rs), and every read is verified against the envelope's digest and key
//! (daemon/src/core/store/tiered.rs), so a torn write should at worst be dropped, never served. This
//! scenario checks that from outside: each round starts kilnd on the same cache directory, sends
//! a graph of small cold kernels and kills kilnd at a random moment of the compiles and the disk
//! writes that follow the answer. A last kilnd, with its memory tier off so every hit is read
//! from disk, is asked (`Lookup`, caches only) for every kernel ever sent; each one it serves is
//! compared byte for byte with a fresh compile of the same kernel by a kilnd of its own.

use super::graphs;
use super::report::Outcome;
use super::{Run, rss};
use crate::bench::kilnd::KilndOptions;
use anyhow::{Context, Result};
use kiln_proto::pb;
use rand::Rng;
use std::path::Path;
use std::time::{Duration, Instant};

pub const TITLE: &str = "kill -9 of kilnd during disk writes";
const TAG: &str = "kiln-reliability scenario 4";
/// Cold kernels per round.
const KERNELS: usize = 4;

fn round_graph(round: usize) -> pb::CompileRequest {
    graphs::graph(TAG, round * KERNELS..(round + 1) * KERNELS)
}

/// Entry files and temp files under `<cache>/v1`.
fn disk_files(cache: &Path) -> (usize, usize) {
    let root = cache.join("v1");
    let count = |dir: &Path| std::fs::read_dir(dir).map_or(0, |d| d.flatten().filter(|e| e.path().is_file()).count());
    let subdirs = |dir: &Path| -> Vec<std::path::PathBuf> {
        std::fs::read_dir(dir)
            .map_or_else(|_| Vec::new(), |d| d.flatten().map(|e| e.path()).filter(|p| p.is_dir()).collect())
    };
    let entries = subdirs(&root)
        .into_iter()
        .filter(|a| a.file_name().is_some_and(|n| n != "tmp"))
        .flat_map(|a| subdirs(&a))
        .map(|b| count(&b))
        .sum();
    (entries, count(&root.join("tmp")))
}

/// Whether `pid` is a live process (not gone, not a zombie).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|s| s.rsplit(')').next().and_then(|r| r.split_whitespace().next()).is_some_and(|state| state != "Z"))
}

/// Where in its round each kill landed, judged by the entries the round left on disk.
#[derive(Debug, Default)]
struct Landings {
    before_any_write: usize,
    between_writes: usize,
    after_all_writes: usize,
    /// Rounds that left a temp file (a write cut between create and rename).
    with_temp_file: usize,
    /// kilnd's worker processes still running 5 s after their daemon was killed.
    orphans: usize,
}

pub async fn run(run: &Run, out: &mut Outcome) -> Result<()> {
    let (bench, kills) = (&run.bench, run.options.kills);
    out.method = vec![
        format!(
            "kilnd (`--concurrency {}`, memory and disk tiers, no fleet) on one cache directory. Round 0 compiles \
             {KERNELS} cold kernels to the end and times it (T). Then {kills} rounds: start kilnd on the same \
             directories, send a graph of {KERNELS} new cold kernels, SIGKILL kilnd after a uniformly random delay \
             in [0, 1.2 T] (the compiles, then the disk writes that follow the answer), and see what the round left \
             on disk.",
            bench.cores
        ),
        "Verification: kilnd started once more on the same directories with `memory_cache_mb = 0`, so every hit \
         is read from disk and verified by kilnd; a `Lookup` (caches only) of every kernel ever sent. Each kernel \
         it serves from disk is compared byte for byte with the same kernel compiled by a separate kilnd with an \
         empty cache. Entries kilnd drops as corrupt are `kiln_integrity_failures_total{tier=\"disk\"}`. Last, a \
         `Compile` of every kernel must return the fresh compile's bytes (kilnd recovers what was lost)."
            .into(),
    ];
    let dir = bench.dir("kill-disk")?;
    let options = KilndOptions::new(bench.cores);
    let cache = dir.join("cache");
    let mut landings = Landings::default();
    let mut round_time = Duration::ZERO;
    let mut start_times = Vec::new();
    for round in 0..=kills {
        let begun = Instant::now();
        let daemon = bench.start_kilnd(&dir, &options).await?;
        start_times.push(begun.elapsed());
        let pid = daemon.pid().context("kilnd has no pid")?;
        let (before, _) = disk_files(&cache);
        let client = daemon.connect().await?;
        let req = round_graph(round);
        let sent = Instant::now();
        let task = tokio::spawn(async move { anyhow::Ok(client.compile(req).await?.collect().await?) });
        if round == 0 {
            let job = task.await??;
            graphs::artifacts(&round_graph(0), &job).context("round 0")?;
            round_time = sent.elapsed();
        } else {
            let most = (round_time.as_secs_f64() * 1.2).max(0.02);
            let delay = Duration::from_secs_f64(rand::rng().random_range(0.0..most));
            tokio::time::sleep(delay).await;
            task.abort();
        }
        let workers: Vec<u32> = kiln_tests::procs::children(pid).into_iter().map(|(p, _)| p).collect();
        daemon.kill9();
        let (after, temps) = disk_files(&cache);
        if round > 0 {
            match after.saturating_sub(before) {
                0 => landings.before_any_write += 1,
                n if n < KERNELS => landings.between_writes += 1,
                _ => landings.after_all_writes += 1,
            }
            landings.with_temp_file += usize::from(temps > 0);
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while workers.iter().any(|p| alive(*p)) && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        landings.orphans += workers.iter().filter(|p| alive(**p)).count();
    }
    let mean_start = start_times.iter().sum::<Duration>().as_secs_f64() / start_times.len().max(1) as f64;
    out.figure("kills", kills);
    out.figure("round 0 (compile to the end), T", format!("{:.0} ms", round_time.as_secs_f64() * 1e3));
    out.figure("kilnd start-up on the same directories, mean", format!("{:.0} ms", mean_start * 1e3));
    out.figure(
        "kills landed: before the round's first disk write / between its writes / after its last",
        format!("{} / {} / {}", landings.before_any_write, landings.between_writes, landings.after_all_writes),
    );
    out.figure("rounds that left a temp file in `v1/tmp`", landings.with_temp_file);
    out.figure("kilnd worker processes still running 5 s after their daemon's kill", landings.orphans);

    let (on_disk, temps) = disk_files(&cache);
    let mut verify = KilndOptions::new(bench.cores);
    verify.memory_cache_mb = Some(0);
    verify.metrics = true;
    let daemon = bench.start_kilnd(&dir, &verify).await?;
    let all = graphs::graph(TAG, 0..(kills + 1) * KERNELS);
    let reference = graphs::reference(run, "kill-disk", &all).await?;
    let client = daemon.connect().await?;
    let looked = client.lookup(all.clone()).await?.collect().await?;
    let (mut checked, mut wrong, mut missing) = (0, 0, 0);
    for k in &looked.kernels {
        match (k.outcome(), k.tier()) {
            (pb::Outcome::Ok, pb::Tier::Disk) => {
                checked += 1;
                wrong += usize::from(reference.get(&k.id).map(Vec::as_slice) != Some(&k.artifact[..]));
            }
            (pb::Outcome::Miss, _) => missing += 1,
            (outcome, tier) => anyhow::bail!("{}: unexpected lookup answer {outcome:?} from {tier:?}", k.id),
        }
    }
    let dropped = daemon.metric_sum("kiln_integrity_failures_total{tier=\"disk\"}")?;
    let recompiled = graphs::artifacts(&all, &client.compile(all.clone()).await?.collect().await?)?;
    let wrong_after = graphs::wrong(&recompiled, &reference);
    let memory = rss::read(daemon.pid().context("kilnd has no pid")?)?;
    daemon.stop().await?;

    out.figure("entry files on disk after the last kill", on_disk);
    out.figure("temp files left in `v1/tmp` (removed by kilnd once an hour old)", temps);
    out.figure("kernels sent in all rounds", all.graph.as_ref().map_or(0, |g| g.kernels.len()));
    out.figure("entries served from disk and checked against a fresh compile", checked);
    out.figure("entries dropped as corrupt by kilnd", dropped);
    out.figure("kernels not on disk (lost with a kill, or never written)", missing);
    out.figure("corrupt entries served", wrong);
    out.figure("wrong bytes from a `Compile` of every kernel afterwards", wrong_after);
    out.figure("verifying kilnd's peak RSS", rss::mib(memory.peak_kib));
    out.check("corrupt entries served = 0", wrong, wrong == 0);
    out.check(
        "every entry file on disk is served and checked, or dropped as corrupt",
        format!("{on_disk} files; {checked} checked + {dropped} dropped"),
        on_disk == checked + dropped as usize,
    );
    out.check(
        "a `Compile` of every kernel afterwards returns the fresh compile's bytes",
        wrong_after,
        wrong_after == 0,
    );
    Ok(())
}
