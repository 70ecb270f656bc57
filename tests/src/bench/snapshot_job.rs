//! Figures (l) and (m), issue 10: job snapshots on the CPU.
//!
//! (l) A Triton job (the 20 distinct kernels of `client/python/bench/herd_kernels.py`, four
//! processes at once, each through plain `triton.compile` on one `TRITON_CACHE_DIR`) on a fresh
//! host restored from host A's snapshot, against the same job on host A with its cache directory
//! warm. (m) Restore time alone for 1, 10 and 100 MB snapshots on a fresh host, against raw
//! pipelined Redis GETs of the same stored values.
//!
//! Both use the `kiln` CLI as a user would (`kiln snapshot save|restore`), a fresh kilnd with an
//! empty cache directory for every fresh-host sample, and the same absolute cache path on both
//! "hosts", as a real fresh host has.

use super::Bench;
use super::fleet::{Fleet, artifact_key};
use super::kilnd::Kilnd;
use super::report::{Measured, Row, Section, Target, Value};
use super::samples::Samples;
use super::triton_kernels;
use anyhow::{Context, Result, bail, ensure};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const TITLE_JOB: &str = "(l) Job snapshots: a Triton job on a fresh host, restored, against a warm host";
const TITLE_RESTORE: &str = "(m) Job snapshots: restore time on a fresh host against raw Redis GETs";
const PROCESSES: usize = 4;
const JOB: &str = "bench-triton-job";
/// Issue 10: a restored fresh host within 10% of a warm one on the CPU job.
const TARGET_RATIO: f64 = 1.10;
/// Snapshot sizes of figure (m), in MB, each spread over files of [`FILE_BYTES`].
const SIZES_MB: [usize; 3] = [1, 10, 100];
const FILE_BYTES: usize = 256 * 1024;

/// What one run of the job did.
struct JobRun {
    wall: Duration,
    compiles: u64,
}

fn p50(s: &Samples) -> Measured {
    s.p50_ms().map(Value::Millis).ok_or_else(|| "no samples".to_string())
}

/// Runs the job: [`PROCESSES`] workers started together, each compiling every kernel through
/// Triton's own file cache at `cache_dir`; timed from the first spawn to the last exit.
fn run_job(bench: &Bench, cache_dir: &Path, work: &Path) -> Result<JobRun> {
    let barrier = work.join("barrier");
    let _ = std::fs::remove_dir_all(&barrier);
    std::fs::create_dir_all(&barrier)?;
    // The workers wait for `go`; it exists from the start, so they run as soon as they import.
    std::fs::write(barrier.join("go"), b"")?;
    let worker = bench.repo.join("client/python/bench/herd_worker.py");
    let started = Instant::now();
    let mut children = Vec::new();
    for i in 0..PROCESSES {
        let child = Command::new(triton_kernels::python(bench))
            .arg(&worker)
            .arg(work.join(format!("worker-{i}.json")))
            .arg(&barrier)
            .env("TRITON_CACHE_DIR", cache_dir)
            .env_remove("TRITON_CACHE_MANAGER")
            .env_remove("TRITON_REMOTE_CACHE_BACKEND")
            .env_remove("KILN_TORCH")
            .spawn()
            .context("starting herd_worker.py")?;
        children.push(child);
    }
    for mut child in children {
        let status = child.wait()?;
        ensure!(status.success(), "a job process failed ({status})");
    }
    let wall = started.elapsed();
    let mut compiles = 0;
    for i in 0..PROCESSES {
        let path = work.join(format!("worker-{i}.json"));
        let report: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path)?)?;
        compiles += report["compiles"].as_u64().context("no compiles in a worker's report")?;
    }
    Ok(JobRun { wall, compiles })
}

/// Runs `kiln ARGS` against `daemon`; returns the wall time, or fails with its stderr.
fn kiln(bench: &Bench, daemon: &Kilnd, args: &[&str]) -> Result<Duration> {
    let started = Instant::now();
    let out = Command::new(bench.bin_dir.join("kiln"))
        .arg("--daemon")
        .arg(daemon.uri())
        .args(args)
        .output()
        .context("running kiln")?;
    let took = started.elapsed();
    if !out.status.success() {
        bail!("kiln {} failed ({}): {}", args.join(" "), out.status, String::from_utf8_lossy(&out.stderr));
    }
    Ok(took)
}

fn fresh_host(bench: &Bench, fleet: &Fleet, name: &str) -> impl Future<Output = Result<Kilnd>> {
    let dir = bench.dir(name);
    let options = fleet.kilnd_options(bench.cores, "");
    let (exe, cuda) = (bench.kilnd(), bench.cuda_root.clone());
    async move { Kilnd::start(&exe, &cuda, &dir?, &options).await }
}

fn empty(dir: &Path) -> Result<()> {
    match std::fs::remove_dir_all(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).with_context(|| format!("removing {}", dir.display())),
    }
}

/// Figure (l).
pub async fn run_job_figure(bench: &Bench) -> Result<Section> {
    let rounds = bench.options.snapshot_rounds;
    let mut s = Section::new(TITLE_JOB);
    s.method = vec![
        format!(
            "The job: {PROCESSES} Python processes started together, each importing Triton 3.6.0 and compiling the 20 \
             distinct kernels of `client/python/bench/herd_kernels.py` for sm_90 with plain `triton.compile` (Triton's \
             own file cache, no kiln backend) on one `TRITON_CACHE_DIR`, the same absolute path on every host. Timed \
             from the first spawn to the last exit; Triton's compiles are counted in every process by a hook on \
             `ASTSource.make_ir`."
        ),
        "Host A (a kilnd on the run's fleet: kiln-cache over a private redis-server) runs the job cold, then `kiln \
         snapshot save --job J DIR`."
            .into(),
        format!(
            "Then {rounds} rounds of: (b) the job again on host A, its directory warm (the baseline); (d) a fresh host: \
             a new kilnd on an empty cache directory on the same fleet, the job's directory removed, then `kiln \
             snapshot restore --job J DIR` through it and the job, timed together. Medians; every (b) and (d) run \
             must compile nothing."
        ),
    ];
    let fleet = Fleet::start(bench).await?;
    let host_a = fresh_host(bench, &fleet, "snapshot-host-a").await?;
    let work = bench.dir("snapshot-job")?;
    let cache_dir: PathBuf = work.join("triton-cache");
    let dir = cache_dir.to_str().context("work path is not UTF-8")?.to_string();
    empty(&cache_dir)?;
    let cold = run_job(bench, &cache_dir, &work)?;
    ensure!(cold.compiles > 0, "the cold job compiled nothing: the cache directory was not empty");
    let save = kiln(bench, &host_a, &["snapshot", "save", "--job", JOB, &dir])?;
    s.notes.push(format!(
        "Cold job: {:.2} s, {} Triton compiles; `kiln snapshot save`: {:.0} ms.",
        cold.wall.as_secs_f64(),
        cold.compiles,
        save.as_secs_f64() * 1e3
    ));

    let (mut warm, mut fresh, mut restores) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        let b = run_job(bench, &cache_dir, &work)?;
        ensure!(b.compiles == 0, "round {round}: the warm job compiled {} kernels", b.compiles);
        warm.push(b.wall);
        let host_b = fresh_host(bench, &fleet, &format!("snapshot-host-b{round}")).await?;
        empty(&cache_dir)?;
        let restore = kiln(bench, &host_b, &["snapshot", "restore", "--job", JOB, &dir])?;
        let d = run_job(bench, &cache_dir, &work)?;
        ensure!(d.compiles == 0, "round {round}: the restored job compiled {} kernels", d.compiles);
        fresh.push(restore + d.wall);
        restores.push(restore);
        host_b.stop().await?;
    }
    host_a.stop().await?;
    let (warm, fresh, restores) = (Samples::new(warm), Samples::new(fresh), Samples::new(restores));
    s.rows.push(
        Row::new(
            "job wall time, fresh host: restore + job (median)",
            p50(&fresh),
            "same host, warm dir (median)",
            p50(&warm),
        )
        .with_target(Target::RatioAtMost(TARGET_RATIO)),
    );
    s.notes.push(format!(
        "(b) warm runs: {}; (d) restore + job: {}; restore alone: {}.",
        warm.summary(),
        fresh.summary(),
        restores.summary()
    ));
    Ok(s)
}

/// Writes `mb` MB of random files under `dir`, returning the stored values' Redis keys.
fn random_tree(dir: &Path, mb: usize) -> Result<Vec<Vec<u8>>> {
    use rand::RngCore;
    std::fs::create_dir_all(dir)?;
    let mut keys = Vec::new();
    let mut rng = rand::rng();
    for i in 0..(mb * 1_000_000).div_ceil(FILE_BYTES) {
        let mut data = vec![0u8; FILE_BYTES];
        rng.fill_bytes(&mut data);
        let sub = dir.join(format!("d{}", i % 16));
        std::fs::create_dir_all(&sub)?;
        std::fs::write(sub.join(format!("f{i}.bin")), &data)?;
        let key = kiln_proto::key::snapshot_file_key(blake3::hash(&data).as_bytes());
        keys.push(artifact_key(&key.to_hex()));
    }
    Ok(keys)
}

/// Figure (m).
pub async fn run_restore_figure(bench: &Bench) -> Result<Section> {
    let rounds = bench.options.snapshot_rounds;
    let mut s = Section::new(TITLE_RESTORE);
    s.method = vec![
        format!(
            "Per size, random (incompressible) files of {} KiB under one directory, saved through host A with `kiln \
             snapshot save`. Then {rounds} times: a fresh kilnd on an empty cache directory on the same fleet, the \
             target directory removed, and `kiln snapshot restore` timed as a user runs it (the CLI process, \
             GetSnapshot, GetFiles from the fleet in batches, digest checks, writes, fsyncs and the rename).",
            FILE_BYTES / 1024
        ),
        "Baseline, side by side after each sample: one plain Redis client (raw RESP on the same Unix socket) GETs \
         every stored value of the snapshot's files in one pipelined round trip: the bytes alone, with no \
         gRPC hop, no check, no write."
            .into(),
    ];
    let fleet = Fleet::start(bench).await?;
    let host_a = fresh_host(bench, &fleet, "snapshot-restore-a").await?;
    for mb in SIZES_MB {
        let work = bench.dir(&format!("snapshot-restore-{mb}"))?;
        let dir = work.join("tree");
        let keys = random_tree(&dir, mb)?;
        let dir_text = dir.to_str().context("work path is not UTF-8")?.to_string();
        let job = format!("bench-restore-{mb}");
        kiln(bench, &host_a, &["snapshot", "save", "--job", &job, &dir_text])?;
        let (mut kiln_times, mut redis_times) = (Vec::new(), Vec::new());
        let mut resp = fleet.redis.connect()?;
        for round in 0..rounds {
            let host_b = fresh_host(bench, &fleet, &format!("snapshot-restore-{mb}-b{round}")).await?;
            empty(&dir)?;
            kiln_times.push(kiln(bench, &host_b, &["snapshot", "restore", "--job", &job, &dir_text])?);
            host_b.stop().await?;
            let started = Instant::now();
            let values = resp.get_all(&keys)?;
            redis_times.push(started.elapsed());
            ensure!(values.len() == keys.len(), "Redis lacks some of the snapshot's files");
        }
        let (k, r) = (Samples::new(kiln_times), Samples::new(redis_times));
        s.rows.push(Row::new(
            format!("restore of {mb} MB ({} files), p50", keys.len()),
            p50(&k),
            "pipelined Redis GETs, p50",
            p50(&r),
        ));
    }
    host_a.stop().await?;
    Ok(s)
}
