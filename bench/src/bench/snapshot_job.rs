//! Figures (l) and (m): job snapshots on the CPU.
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
use super::report::{Row, Section, Target};
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
/// The target: a restored fresh host within 10% of a warm one on the CPU job.
const TARGET_RATIO: f64 = 1.10;
/// Snapshot sizes of figure (m), in MB, each spread over files of [`FILE_BYTES`].
const SIZES_MB: [usize; 3] = [1, 10, 100];
const FILE_BYTES: usize = 256 * 1024;

/// What one run of the job did.
struct JobRun {
    wall: Duration,
    compiles: u64,
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

/// The baseline: the job on host A's warm directory, which must compile nothing.
fn warm_job(bench: &Bench, cache_dir: &Path, work: &Path, round: usize) -> Result<Duration> {
    let b = run_job(bench, cache_dir, work)?;
    ensure!(b.compiles == 0, "round {round}: the warm job compiled {} kernels", b.compiles);
    Ok(b.wall)
}

/// Runs `kiln ARGS` against `daemon`; returns the wall time and stdout, or fails with its stderr.
fn kiln(bench: &Bench, daemon: &Kilnd, args: &[&str]) -> Result<(Duration, String)> {
    let started = Instant::now();
    let out =
        Command::new(bench.kiln()).arg("--daemon").arg(daemon.uri()).args(args).output().context("running kiln")?;
    let took = started.elapsed();
    if !out.status.success() {
        bail!("kiln {} failed ({}): {}", args.join(" "), out.status, String::from_utf8_lossy(&out.stderr));
    }
    Ok((took, String::from_utf8_lossy(&out.stdout).into_owned()))
}

/// What one `kiln snapshot restore --json` did.
struct Restore {
    /// The CLI process, spawn to exit: what a job's start-up waits for.
    wall: Duration,
    /// The restore itself as the CLI timed it (`seconds` of its result line: GetSnapshot, the
    /// fetch, checks, writes, fsyncs and placement), without process start and connecting.
    inside: Duration,
    files: u64,
    bytes: u64,
}

/// `kiln snapshot restore --json --job JOB DIR` through `daemon`; fails unless it restored.
fn restore(bench: &Bench, daemon: &Kilnd, job: &str, dir: &str) -> Result<Restore> {
    let (wall, stdout) = kiln(bench, daemon, &["snapshot", "restore", "--json", "--job", job, dir])?;
    let last = stdout.lines().last().context("kiln snapshot restore printed nothing")?;
    let line: serde_json::Value = serde_json::from_str(last).with_context(|| format!("not JSON: {last}"))?;
    ensure!(line["event"] == "restored", "kiln snapshot restore did not restore: {line}");
    let count = |field: &str| line[field].as_u64().with_context(|| format!("no `{field}` in {line}"));
    ensure!(count("missing")? == 0, "the restore could not fetch some files: {line}");
    let seconds = line["seconds"].as_f64().with_context(|| format!("no `seconds` in {line}"))?;
    Ok(Restore {
        wall,
        inside: Duration::from_secs_f64(seconds),
        files: count("restored_files")?,
        bytes: count("restored_bytes")?,
    })
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
            "Then {rounds} rounds of: (b) the job again on host A, in its own warm directory (the baseline); (d) a \
             fresh host: a new kilnd on an empty cache directory on the same fleet, host A's directory moved aside \
             (and put back after), then `kiln snapshot restore --job J DIR` through it and the job, timed together \
             (kilnd's start is not: a host's daemon runs before its jobs). (b) runs first in even rounds, (d) in odd \
             ones. Medians; every (b) and (d) run must compile nothing."
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
    let (save, _) = kiln(bench, &host_a, &["snapshot", "save", "--job", JOB, &dir])?;
    s.notes.push(format!(
        "Cold job: {:.2} s, {} Triton compiles; `kiln snapshot save`: {:.0} ms.",
        cold.wall.as_secs_f64(),
        cold.compiles,
        save.as_secs_f64() * 1e3
    ));

    // Host A's own warm directory waits here while a fresh host uses the path.
    let stash = work.join("host-a-triton-cache");
    let (mut warm, mut fresh, mut restores, mut insides) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        // Which side runs first alternates, so neither always follows the other.
        let warm_first = round % 2 == 0;
        if warm_first {
            warm.push(warm_job(bench, &cache_dir, &work, round)?);
        }
        std::fs::rename(&cache_dir, &stash).context("moving host A's cache directory aside")?;
        let host_b = fresh_host(bench, &fleet, &format!("snapshot-host-b{round}")).await?;
        let restored = restore(bench, &host_b, JOB, &dir)?;
        ensure!(restored.files > 0, "round {round}: the restore wrote no files");
        let d = run_job(bench, &cache_dir, &work)?;
        ensure!(d.compiles == 0, "round {round}: the restored job compiled {} kernels", d.compiles);
        fresh.push(restored.wall + d.wall);
        restores.push(restored.wall);
        insides.push(restored.inside);
        host_b.stop().await?;
        empty(&cache_dir)?;
        std::fs::rename(&stash, &cache_dir).context("putting host A's cache directory back")?;
        if !warm_first {
            warm.push(warm_job(bench, &cache_dir, &work, round)?);
        }
    }
    host_a.stop().await?;
    let ms = |d: &Duration| format!("{:.0}", d.as_secs_f64() * 1e3);
    let per_round: Vec<String> = warm.iter().zip(&fresh).map(|(b, d)| format!("{} / {}", ms(b), ms(d))).collect();
    let mut paired: Vec<f64> = warm.iter().zip(&fresh).map(|(b, d)| d.as_secs_f64() / b.as_secs_f64()).collect();
    paired.sort_by(f64::total_cmp);
    s.notes.push(format!(
        "Each round's (b) / (d), ms: {}; the median of the rounds' own (d) ÷ (b), which a change of the machine's \
         load between rounds moves less: {:.2}×.",
        per_round.join("; "),
        paired.get(paired.len() / 2).copied().unwrap_or(f64::NAN)
    ));
    let (warm, fresh) = (Samples::new(warm), Samples::new(fresh));
    let (restores, insides) = (Samples::new(restores), Samples::new(insides));
    s.rows.push(
        Row::new(
            "job wall time, fresh host: restore + job (median)",
            fresh.figure(50.0),
            "same host, warm dir (median)",
            warm.figure(50.0),
        )
        .with_target(Target::RatioAtMost(TARGET_RATIO)),
    );
    s.notes.push(format!(
        "(b) warm runs: {}; (d) restore + job: {}; restore alone (the `kiln` process): {}; of which the restore \
         itself (its `--json` `seconds`): {}.",
        warm.summary(),
        fresh.summary(),
        restores.summary(),
        insides.summary()
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
        let (mut kiln_times, mut insides, mut redis_times) = (Vec::new(), Vec::new(), Vec::new());
        let mut resp = fleet.redis.connect()?;
        for round in 0..rounds {
            let host_b = fresh_host(bench, &fleet, &format!("snapshot-restore-{mb}-b{round}")).await?;
            empty(&dir)?;
            let restored = restore(bench, &host_b, &job, &dir_text)?;
            let want = (keys.len() as u64, (keys.len() * FILE_BYTES) as u64);
            ensure!(
                (restored.files, restored.bytes) == want,
                "restored {} files ({} bytes), not {want:?}",
                restored.files,
                restored.bytes
            );
            kiln_times.push(restored.wall);
            insides.push(restored.inside);
            host_b.stop().await?;
            let started = Instant::now();
            let values = resp.get_all(&keys)?;
            redis_times.push(started.elapsed());
            ensure!(values.len() == keys.len(), "Redis lacks some of the snapshot's files");
        }
        let (k, inside, r) = (Samples::new(kiln_times), Samples::new(insides), Samples::new(redis_times));
        s.notes.push(format!(
            "{mb} MB: the `kiln` process {}; the restore itself (its `--json` `seconds`) {}; Redis GETs {}.",
            k.summary(),
            inside.summary(),
            r.summary()
        ));
        s.rows.push(Row::new(
            format!("restore of {mb} MB ({} files), p50", keys.len()),
            k.figure(50.0),
            "pipelined Redis GETs, p50",
            r.figure(50.0),
        ));
    }
    host_a.stop().await?;
    Ok(s)
}
