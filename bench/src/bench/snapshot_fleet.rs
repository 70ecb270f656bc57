//! Figure (n): a job snapshot restored at fleet scale. One 20 MB snapshot of 400 files, the
//! shape of a compiled job's caches (300 source files of 2-20 KB, 100 binaries of 50-300 KB), is
//! restored by 1 and then 16 fresh kilnds at once through one kiln-cache on one Redis, as a
//! preempted job's hosts all restore it in the same seconds. The baseline, side by side: as many
//! plain Redis clients, each GETting every stored value of the snapshot in one pipelined round
//! trip at the same moment: the bytes alone, with no gRPC hop, no check and no write.

use super::Bench;
use super::fleet::{Fleet, artifact_key};
use super::kilnd::Kilnd;
use super::report::{Row, Section, Target};
use super::restart_model::{self, Inputs};
use super::samples::Samples;
use anyhow::{Context, Result, ensure};
use kiln_proto::key::CacheKey;
use rand::{Rng, RngCore, SeedableRng};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const TITLE: &str = "(n) Job snapshots at fleet scale: fresh hosts restoring one snapshot at once";
const JOB: &str = "bench-fleet-restore";
/// Hosts restoring at once, per row.
const HERDS: [usize; 2] = [1, 16];
/// The targets: one host within 2× one Redis client, 16 within 1.5× 16 clients.
const TARGETS: [f64; 2] = [2.0, 1.5];
const SOURCE_FILES: usize = 300;
const BINARY_FILES: usize = 100;

/// The snapshot's tree: text-like sources (which compress) and random binaries (which do not),
/// about 20 MB in all, the same bytes in every run. Returns the files' cache keys and the total
/// size.
fn job_tree(dir: &Path) -> Result<(Vec<CacheKey>, u64)> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(20);
    let (mut keys, mut total) = (Vec::new(), 0u64);
    let mut put = |rel: String, data: Vec<u8>| -> Result<()> {
        let path = dir.join(rel);
        std::fs::create_dir_all(path.parent().context("no parent")?)?;
        std::fs::write(&path, &data).with_context(|| format!("writing {}", path.display()))?;
        keys.push(kiln_proto::key::snapshot_file_key(blake3::hash(&data).as_bytes()));
        total += data.len() as u64;
        Ok(())
    };
    for i in 0..SOURCE_FILES {
        let size = rng.random_range(2_000..20_000);
        let mut text = String::with_capacity(size + 80);
        let mut line = 0;
        while text.len() < size {
            text.push_str(&format!(
                "    x{line} = tl.load(ptr + offs * {} + {i}, mask=mask)  # {}\n",
                line % 7,
                rng.random::<u32>()
            ));
            line += 1;
        }
        text.truncate(size);
        put(format!("src/{:02}/k{i}.py", i % 32), text.into_bytes())?;
    }
    for i in 0..BINARY_FILES {
        let mut data = vec![0u8; rng.random_range(50_000..300_000)];
        rng.fill_bytes(&mut data);
        put(format!("bin/{:02}/k{i}.cubin", i % 16), data)?;
    }
    Ok((keys, total))
}

/// `n` fresh kilnds on the fleet, each with an empty cache directory, started at once.
async fn fresh_hosts(bench: &Bench, fleet: &Fleet, round: usize, n: usize) -> Result<Vec<Kilnd>> {
    let mut starts = Vec::new();
    for i in 0..n {
        let dir = bench.dir(&format!("fleet-restore-{round}-{n}-{i}"))?;
        // One compile slot each: sixteen daemons share two cores, and a restore compiles nothing.
        let options = fleet.kilnd_options(1, "");
        let (exe, cuda) = (bench.kilnd(), bench.cuda_root.clone());
        starts.push(tokio::spawn(async move { Kilnd::start(&exe, &cuda, &dir, &options).await }));
    }
    let mut hosts = Vec::new();
    for start in starts {
        hosts.push(start.await.context("a kilnd start panicked")??);
    }
    Ok(hosts)
}

/// Every host restores the job into its own directory at the same instant; the wall time from
/// the first `kiln snapshot restore` started to the last one done. Each must restore every file.
fn restore_all(bench: &Bench, hosts: &[Kilnd], targets: &[PathBuf], files: usize) -> Result<Duration> {
    let started = Instant::now();
    let mut children = Vec::new();
    for (host, target) in hosts.iter().zip(targets) {
        let child = Command::new(bench.kiln())
            .arg("--daemon")
            .arg(host.uri())
            .args(["snapshot", "restore", "--json", "--job", JOB])
            .arg(target)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .context("starting kiln snapshot restore")?;
        children.push(child);
    }
    let mut outputs = Vec::new();
    for child in children {
        outputs.push(child.wait_with_output()?);
    }
    let wall = started.elapsed();
    for out in outputs {
        let stdout = String::from_utf8_lossy(&out.stdout);
        ensure!(out.status.success(), "kiln snapshot restore failed: {}", String::from_utf8_lossy(&out.stderr));
        let last: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap_or("{}"))?;
        ensure!(last["restored_files"].as_u64() == Some(files as u64), "a restore did not restore every file: {last}");
    }
    Ok(wall)
}

/// Threads each baseline client writes its files with, as a restore does.
const WRITERS: usize = 8;

/// Writes `values` as new files under `dir` from [`WRITERS`] threads, then makes them durable
/// with one `syncfs`, as a restore does.
fn write_synced(dir: &Path, values: &[Vec<u8>]) -> Result<()> {
    use std::os::fd::AsRawFd;
    std::fs::create_dir_all(dir)?;
    let next = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..WRITERS)
            .map(|_| {
                scope.spawn(|| {
                    while let Some(v) = values.get(next.fetch_add(1, std::sync::atomic::Ordering::Relaxed)) {
                        std::fs::write(dir.join(format!("f{}", blake3::hash(v).to_hex())), v)?;
                    }
                    Ok::<_, std::io::Error>(())
                })
            })
            .collect();
        for w in workers {
            w.join().map_err(|_| anyhow::anyhow!("a writer panicked"))??;
        }
        Ok::<_, anyhow::Error>(())
    })?;
    let d = std::fs::File::open(dir)?;
    // SAFETY: `d` is an open descriptor for the duration of the call.
    ensure!(unsafe { libc::syncfs(d.as_raw_fd()) } == 0, "syncfs: {}", std::io::Error::last_os_error());
    Ok(())
}

/// `n` Redis clients, each its own connection, GET every value in one pipelined round trip at
/// the same instant, and with `write_to` each writes them as files, synced, into its own
/// directory there; the wall time until the last is done.
fn redis_herd(fleet: &Fleet, keys: &[Vec<u8>], n: usize, write_to: Option<&Path>) -> Result<Duration> {
    let mut connections = (0..n).map(|_| fleet.redis.connect()).collect::<Result<Vec<_>>>()?;
    let barrier = std::sync::Barrier::new(n + 1);
    std::thread::scope(|scope| {
        let handles: Vec<_> = connections
            .iter_mut()
            .enumerate()
            .map(|(i, resp)| {
                let barrier = &barrier;
                scope.spawn(move || {
                    barrier.wait();
                    let values = resp.get_all(keys)?;
                    ensure!(values.len() == keys.len(), "Redis lacks some of the snapshot's files");
                    if let Some(dir) = write_to {
                        write_synced(&dir.join(format!("client-{i}")), &values)?;
                    }
                    Ok::<_, anyhow::Error>(())
                })
            })
            .collect();
        barrier.wait();
        let started = Instant::now();
        for h in handles {
            h.join().map_err(|_| anyhow::anyhow!("a Redis client panicked"))??;
        }
        Ok(started.elapsed())
    })
}

pub async fn run(bench: &Bench) -> Result<Section> {
    let rounds = bench.options.fleet_restore_rounds;
    let mut s = Section::new(TITLE);
    s.method = vec![
        format!(
            "The snapshot: {SOURCE_FILES} text files of 2-20 KB and {BINARY_FILES} random binaries of 50-300 KB \
             (about 20 MB, the same bytes every run) under one directory, saved through host A with `kiln snapshot \
             save`, so the run's kiln-cache (one instance over one private redis-server on a Unix socket) holds it."
        ),
        format!(
            "Then {rounds} rounds of, for each herd size N in {HERDS:?}: N fresh kilnds (empty cache directories, \
             `--concurrency 1`) on the fleet, started and answering before the clock starts; then N `kiln snapshot \
             restore --job J DIR` processes started at the same instant, each into its own empty directory through \
             its own kilnd. Timed from the first start to the last exit; every restore must restore every file \
             (GetSnapshot, GetFiles from the fleet, digest checks, writes, one syncfs and the rename)."
        ),
        "Baseline, side by side after each kiln sample: N plain Redis clients (raw RESP, each its own connection \
         to the same Unix socket) GET every stored value of the snapshot in one pipelined round trip, released \
         together; timed until the last has every value."
            .into(),
        format!(
            "A second baseline, for where the time goes: the same N clients also write every value they got as a new \
             file from {WRITERS} threads each into their own directories, then make them durable with one `syncfs` \
             (as a restore does): the least any restore that lands files on disk does, with no check, protocol or \
             placing."
        ),
        "Restored directories are removed only after the figure: ext4 scans past recently deleted inodes when it \
         creates files, so deleting 6,400 files between rounds made the next round's creates several times slower."
            .into(),
    ];
    let fleet = Fleet::start(bench).await?;
    let host_a = fleet.start_host(bench, "fleet-restore-a", "").await?;
    let work = bench.dir("fleet-restore-tree")?;
    let tree = work.join("job");
    let (file_keys, total) = job_tree(&tree)?;
    let keys: Vec<Vec<u8>> = file_keys.iter().map(|k| artifact_key(&k.to_hex())).collect();
    let tree_text = tree.to_str().context("work path is not UTF-8")?;
    let save = Command::new(bench.kiln())
        .arg("--daemon")
        .arg(host_a.uri())
        .args(["snapshot", "save", "--job", JOB, tree_text])
        .output()?;
    ensure!(save.status.success(), "kiln snapshot save failed: {}", String::from_utf8_lossy(&save.stderr));
    host_a.stop().await?;

    let mut results: Vec<[Vec<Duration>; 3]> = HERDS.iter().map(|_| Default::default()).collect();
    for round in 0..rounds {
        for (h, &n) in HERDS.iter().enumerate() {
            let hosts = fresh_hosts(bench, &fleet, round, n).await?;
            let targets: Vec<PathBuf> = (0..n).map(|i| work.join(format!("restored-{round}-{n}-{i}"))).collect();
            let wall = tokio::task::block_in_place(|| restore_all(bench, &hosts, &targets, keys.len()))?;
            for host in hosts {
                host.stop().await?;
            }
            let redis = tokio::task::block_in_place(|| redis_herd(&fleet, &keys, n, None))?;
            let written = work.join(format!("written-{round}-{n}"));
            let redis_writes = tokio::task::block_in_place(|| redis_herd(&fleet, &keys, n, Some(&written)))?;
            results[h][0].push(wall);
            results[h][1].push(redis);
            results[h][2].push(redis_writes);
        }
    }
    std::fs::remove_dir_all(&work).with_context(|| format!("removing {}", work.display()))?;
    let mb = total as f64 / 1e6;
    let one_host = Samples::new(results[0][0].clone()).p50_ms();
    s.appendix = sizing(&fleet, &keys, &file_keys, total, one_host).await?;
    for ((&n, target), [kiln, redis, redis_writes]) in HERDS.iter().zip(TARGETS).zip(results) {
        let (k, r, w) = (Samples::new(kiln), Samples::new(redis), Samples::new(redis_writes));
        let rate = |s: &Samples| s.p50_ms().map_or(0.0, |ms| mb * n as f64 / (ms / 1e3));
        s.notes.push(format!(
            "{n} at once: kiln {}; Redis clients {}; Redis clients writing the files {}; {:.0} MB/s in all \
             through kiln at the median against {:.0} MB/s from Redis and {:.0} MB/s from Redis onto disk.",
            k.summary(),
            r.summary(),
            w.summary(),
            rate(&k),
            rate(&r),
            rate(&w)
        ));
        let label = if n == 1 { "1 fresh host".to_string() } else { format!("{n} fresh hosts at once") };
        let baseline = if n == 1 { "1 Redis client".to_string() } else { format!("{n} Redis clients at once") };
        s.rows.push(
            Row::new(
                format!("restore of {mb:.1} MB ({} files), {label}, p50", keys.len()),
                k.figure(50.0),
                format!("pipelined GETs, {baseline}, p50"),
                r.figure(50.0),
            )
            .with_target(Target::RatioAtMost(target)),
        );
        s.rows.push(Row::new(
            format!("restore of {mb:.1} MB ({} files), {label}, p50", keys.len()),
            k.figure(50.0),
            format!("the same GETs, then the files written and synced, {baseline}, p50"),
            w.figure(50.0),
        ));
    }
    Ok(s)
}

/// The fleet-restart model ([`restart_model`]) from this figure's snapshot: both loads, then the
/// model in markdown. `one_host_ms` is one fresh host's restore, the p50 above.
async fn sizing(
    fleet: &Fleet,
    redis_keys: &[Vec<u8>],
    keys: &[CacheKey],
    total: u64,
    one_host_ms: Option<f64>,
) -> Result<String> {
    let stored = fleet.redis.connect()?.get_all(redis_keys)?;
    let stored_bytes: u64 = stored.iter().map(|v| v.len() as u64).sum();
    let largest = stored.iter().map(Vec::len).max().unwrap_or(0);
    let redis = tokio::task::block_in_place(|| restart_model::redis_load(fleet, redis_keys))?;
    let cache = restart_model::cache_load(fleet, keys).await?;
    let snapshot_mb = total as f64 / 1e6;
    let inputs = Inputs {
        redis,
        cache,
        wire_ratio: stored_bytes as f64 / total as f64,
        largest_value_mb: largest as f64 / 1e6,
        host_mbps: one_host_ms.map_or(0.0, |ms| snapshot_mb / (ms / 1e3)),
    };
    Ok(restart_model::model(&inputs))
}
