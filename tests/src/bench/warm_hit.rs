//! Figure (a): a warm hit of the 64-kernel graph through kilnd over the Unix socket, from the
//! memory tier and from the disk tier, against the same cubins read as raw files and fetched
//! with pipelined Redis GETs.
//!
//! The memory tier backfills on the first disk hit, so a second compile on the same daemon is a
//! memory hit. Disk-tier figures therefore come two ways: a daemon whose memory tier is off
//! (`memory_cache_mb = 0`), which measures the disk tier's steady state over many samples; and a
//! freshly started daemon per sample, timed on its first compile, which is what a restarted
//! host sees. Every sample's 64 results must all come from the tier being measured.

use super::kilnd::{Kilnd, KilndOptions};
use super::redis::RedisServer;
use super::report::{Measured, Row, Section, Target, Value};
use super::samples::Samples;
use super::{Bench, GRAPH_KERNELS, Shared, check_job, graph_request};
use anyhow::{Context, Result, bail};
use kiln_proto::pb;
use std::path::{Path, PathBuf};
use std::time::Instant;

const TITLE: &str = "(a) Warm hit of a 64-kernel graph";
/// The target for the whole graph.
const TARGET_MS: f64 = 2.0;

/// Times `samples` warm compiles of the graph on one connection, each required to be served
/// entirely by `tier`.
async fn compile_samples(client: &kiln_client::Client, samples: usize, tier: pb::Tier) -> Result<Samples> {
    timed_samples(client, &graph_request(), samples, tier).await
}

async fn timed_samples(
    client: &kiln_client::Client,
    request: &pb::CompileRequest,
    samples: usize,
    tier: pb::Tier,
) -> Result<Samples> {
    let mut times = Vec::with_capacity(samples);
    for _ in 0..samples {
        let start = Instant::now();
        let job = client.compile(request.clone()).await?.collect().await?;
        times.push(start.elapsed());
        check_job(&job, GRAPH_KERNELS, Some(tier))?;
    }
    Ok(Samples::new(times))
}

/// Reads every file, as a process with no cache service would load its cubins.
fn file_samples(files: &[PathBuf], samples: usize) -> Result<Samples> {
    let mut times = Vec::with_capacity(samples);
    for _ in 0..samples {
        let start = Instant::now();
        let mut bytes = 0;
        for f in files {
            bytes += std::fs::read(f).with_context(|| format!("reading {}", f.display()))?.len();
        }
        times.push(start.elapsed());
        std::hint::black_box(bytes);
    }
    Ok(Samples::new(times))
}

/// Fetches every key in one pipelined round trip.
fn redis_samples(redis: &RedisServer, keys: &[Vec<u8>], samples: usize) -> Result<Samples> {
    let mut conn = redis.connect()?;
    let mut times = Vec::with_capacity(samples);
    for _ in 0..samples {
        let start = Instant::now();
        let values = conn.get_all(keys)?;
        times.push(start.elapsed());
        std::hint::black_box(values);
    }
    Ok(Samples::new(times))
}

/// Starts a fresh daemon on `dir` per sample and times its first compile of the graph.
async fn restart_samples(bench: &Bench, dir: &Path, samples: usize) -> Result<Samples> {
    let options = KilndOptions { concurrency: bench.cores, memory_cache_mb: None };
    let mut times = Vec::with_capacity(samples);
    for _ in 0..samples {
        let daemon = Kilnd::start(&bench.kilnd(), &bench.cuda_root, dir, &options).await?;
        let client = daemon.connect().await?;
        let start = Instant::now();
        let job = client.compile(graph_request()).await?.collect().await?;
        times.push(start.elapsed());
        check_job(&job, GRAPH_KERNELS, Some(pb::Tier::Disk))?;
        drop(client);
        daemon.stop().await?;
    }
    Ok(Samples::new(times))
}

fn p(s: &Samples, pct: f64) -> Measured {
    s.percentile_ms(pct).map(Value::Millis).ok_or_else(|| "no samples".to_string())
}

fn failed<T>(r: Result<T>, notes: &mut Vec<String>, what: &str) -> Option<T> {
    r.map_err(|e| notes.push(format!("**{what} failed:** {e:#}"))).ok()
}

pub async fn run(bench: &Bench, redis: &RedisServer, shared: &mut Shared) -> Result<Section> {
    let o = &bench.options;
    let mut section = Section::new(TITLE);
    section.method = vec![
        format!(
            "Latency of one `Compile` of the whole {GRAPH_KERNELS}-kernel graph (distinct vector-add kernels for \
             {}, one request, results streamed per kernel, cubins included), from the call until the last result, \
             sequentially on one connection over the Unix socket. Each sample must have all {GRAPH_KERNELS} results \
             from the tier named.",
            super::TARGET
        ),
        format!("Memory tier: one daemon, after a cold fill and 20 unmeasured warm-ups, {} samples.", o.memory_samples),
        format!(
            "Disk tier, steady state: a daemon on the filled cache directory with `memory_cache_mb = 0`, so no \
             result can come from memory; 20 warm-ups, then {} samples. The files are in the page cache, as they \
             are on a host that serves them often.",
            o.disk_samples
        ),
        format!(
            "Disk tier, after a restart: {} times, a fresh kilnd on the filled directory, timed on its first \
             compile of the graph (the connection is made before the clock starts).",
            o.restart_samples
        ),
        format!(
            "Baselines, same run: the same {GRAPH_KERNELS} cubins read as raw files (`std::fs::read`, one process, \
             page cache warm), and fetched from a private redis-server on a Unix socket with {GRAPH_KERNELS} GETs in \
             one pipelined round trip; {} samples each. Neither verifies a digest nor decompresses, so the ratio is \
             kiln's whole overhead.",
            o.memory_samples
        ),
    ];

    let dir = bench.dir("warm")?;
    let daemon = Kilnd::start(
        &bench.kilnd(),
        &bench.cuda_root,
        &dir,
        &KilndOptions { concurrency: bench.cores, memory_cache_mb: None },
    )
    .await?;
    let client = daemon.connect().await?;
    let job = client.compile(graph_request()).await?.collect().await.context("cold fill")?;
    let cubins = check_job(&job, GRAPH_KERNELS, None)?;
    compile_samples(&client, 20, pb::Tier::Memory).await.context("memory warm-up")?;
    let memory = compile_samples(&client, o.memory_samples, pb::Tier::Memory).await.context("memory tier")?;
    // Where the time goes: the same hits without the cubins on the wire.
    let bare = pb::CompileRequest { omit_artifacts: true, ..graph_request() };
    let omitted = timed_samples(&client, &bare, o.memory_samples / 2, pb::Tier::Memory).await?;
    section.notes.push(format!("memory tier with `omit_artifacts` (no cubins on the wire): {}", omitted.summary()));
    drop(client);
    daemon.stop().await?;

    // Baselines over the same bytes.
    let raw = bench.dir("warm-raw")?;
    let mut files = Vec::new();
    let mut keys = Vec::new();
    let mut conn = redis.connect()?;
    conn.flushall()?;
    for (i, cubin) in cubins.iter().enumerate() {
        let f = raw.join(format!("add_{i}.cubin"));
        std::fs::write(&f, cubin)?;
        files.push(f);
        let key = format!("bench:cubin:add_{i}").into_bytes();
        conn.set(&key, cubin)?;
        keys.push(key);
    }
    file_samples(&files, 20)?;
    let files_s = file_samples(&files, o.memory_samples)?;
    let redis_s = redis_samples(redis, &keys, o.memory_samples)?;
    let bytes: usize = cubins.iter().map(Vec::len).sum();
    section.notes.push(format!("The graph's {GRAPH_KERNELS} cubins total {bytes} bytes."));

    let disk = failed(disk_steady(bench, &dir).await, &mut section.notes, "the disk tier with memory off");
    let restart =
        failed(restart_samples(bench, &dir, o.restart_samples).await, &mut section.notes, "the restart samples");

    shared.kiln_memory_p50_ms = memory.p50_ms();
    shared.kiln_restart_p50_ms = restart.as_ref().and_then(Samples::p50_ms);
    let target = Target::AtMostMillis(TARGET_MS);
    let mut add = |label: &str, kiln: &Samples| {
        for (pct, name) in [(50.0, "p50"), (99.0, "p99")] {
            for (base, base_s) in [("raw file reads", &files_s), ("Redis GETs, pipelined", &redis_s)] {
                let mut row =
                    Row::new(format!("{label}, {name}"), p(kiln, pct), format!("{base}, {name}"), p(base_s, pct));
                if pct == 50.0 {
                    row = row.with_target(target);
                }
                section.rows.push(row);
            }
        }
        section.notes.push(format!("{label}: {}", kiln.summary()));
    };
    add("memory tier", &memory);
    if let Some(d) = &disk {
        add("disk tier (memory off)", d);
    }
    if let Some(r) = &restart {
        add("disk tier, first compile after restart", r);
    }
    section.notes.push(format!("raw file reads: {}", files_s.summary()));
    section.notes.push(format!("Redis GETs, pipelined: {}", redis_s.summary()));
    Ok(section)
}

async fn disk_steady(bench: &Bench, dir: &Path) -> Result<Samples> {
    let options = KilndOptions { concurrency: bench.cores, memory_cache_mb: Some(0) };
    let daemon = Kilnd::start(&bench.kilnd(), &bench.cuda_root, dir, &options).await?;
    let client = daemon.connect().await?;
    let warm = compile_samples(&client, 20, pb::Tier::Disk).await;
    if let Err(e) = warm {
        bail!("with memory_cache_mb = 0, a warm compile was not served by the disk tier: {e:#}");
    }
    let samples = compile_samples(&client, bench.options.disk_samples, pb::Tier::Disk).await?;
    drop(client);
    daemon.stop().await?;
    Ok(samples)
}
