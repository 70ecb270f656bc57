//! Figure (a): a warm hit of the 64-kernel graph through kilnd over the Unix socket, from the
//! memory tier and from the disk tier, against the same cubins read as raw files and fetched
//! with pipelined Redis GETs.
//!
//! The memory tier backfills on the first disk hit, so a second compile on the same daemon is a
//! memory hit. Disk-tier figures therefore come two ways: a daemon whose memory tier is off
//! (`memory_cache_mb = 0`), which measures the disk tier's steady state over many samples; and a
//! freshly started daemon per sample, timed on its first compile, which is what a restarted
//! host sees. Every sample's 64 results must all come from the tier being measured.

use super::kilnd::KilndOptions;
use super::redis::{RedisServer, Resp};
use super::report::{Row, Section, Target, Value};
use super::samples::Samples;
use super::{Bench, GRAPH_KERNELS, Shared, check_job, graph_request};
use anyhow::{Context, Result, bail};
use kiln_proto::pb;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const TITLE: &str = "(a) Warm hit of a 64-kernel graph";
/// The targets, each a ratio against a baseline of the same run: the memory tier against the
/// gRPC floor (a bare tonic server answering the same bytes: what is left is kiln's own work;
/// a Redis-relative target measured gRPC, whose floor alone is about 2.8× pipelined Redis here),
/// the disk tier against raw reads of the same files, and the first compile after a restart
/// against the steady disk tier.
const MEMORY_OVER_FLOOR: f64 = 1.25;
const DISK_OVER_FILES: f64 = 3.0;
const RESTART_OVER_DISK: f64 = 1.5;

/// Where the time of a warm hit goes: a profile, not a figure of this run. Taken with `perf record`
/// on `cargo build --profile profiling` (release code with symbols), memory-tier samples of this
/// figure, on the 2-core machine of the run that added it (2026-11-22).
const PROFILE: &str = "Where the time goes (perf on `--profile profiling`, memory-tier samples, 2026-11-22). \
     Before the hit path was reworked, kilnd's own CPU on a warm hit went to copying each cubin into its answer (memmove, 20%), \
     scanning every source for include directives on every request (7–13%), a second blake3 of every envelope the \
     memory tier had verified on entry, hex-encoding keys char by char, and one message, task wake-up and HTTP/2 \
     frame per kernel. Now cubins are shared `Bytes` from tier to wire, include verdicts are kept by the text's \
     blake3, a memory hit checks its key only, a graph's hits go out in one message, and a graph's disk lookups are \
     one blocking call. What is left, measured: with `omit_artifacts` (no cubin on the wire) a hit still costs \
     about 0.6 ms, all per-kernel work: validating the 64 sources and deriving their keys (blake3 over sources and \
     headers), two cache lookups per key (negative cache and memory tier, moka, with its housekeeping), building \
     64 results (ids, hex keys, logs and metadata cloned) and a copy of them in the job record for late watchers, \
     protobuf encoding and decoding of the 64-source request and of the answer, and the client's own share of the \
     CPU on a 2-core machine. The cubins add about 0.25 ms (246 KB through HTTP/2 and the socket). The disk tier \
     adds opening every envelope (blake3 and zstd over 246 KB), which the raw-file baseline does not do.";

/// The baselines over the same cubins: raw files, and keys in the run's Redis. They are sampled
/// in step with kiln, one baseline sample after each kiln sample, so that whatever else the
/// machine is doing weighs on both sides alike.
struct Baselines {
    files: Vec<PathBuf>,
    keys: Vec<Vec<u8>>,
    redis: Resp,
}

impl Baselines {
    fn prepare(bench: &Bench, redis: &RedisServer, cubins: &[Vec<u8>]) -> Result<Baselines> {
        let raw = bench.dir("warm-raw")?;
        let mut conn = redis.connect()?;
        conn.flushall()?;
        let (mut files, mut keys) = (Vec::new(), Vec::new());
        for (i, cubin) in cubins.iter().enumerate() {
            let f = raw.join(format!("add_{i}.cubin"));
            std::fs::write(&f, cubin).with_context(|| format!("writing {}", f.display()))?;
            files.push(f);
            let key = format!("bench:cubin:add_{i}").into_bytes();
            conn.set(&key, cubin)?;
            keys.push(key);
        }
        Ok(Baselines { files, keys, redis: conn })
    }

    /// One sample of each: every file read, as a process with no cache service would load its
    /// cubins; and every key fetched in one pipelined round trip.
    fn sample(&mut self, phase: &mut Phase) -> Result<()> {
        let start = Instant::now();
        let mut bytes = 0;
        for f in &self.files {
            bytes += std::fs::read(f).with_context(|| format!("reading {}", f.display()))?.len();
        }
        phase.files.push(start.elapsed());
        std::hint::black_box(bytes);
        let start = Instant::now();
        let values = self.redis.get_all(&self.keys)?;
        phase.redis.push(start.elapsed());
        std::hint::black_box(values);
        Ok(())
    }
}

/// One phase's samples: kiln's and the baselines' taken beside them.
#[derive(Debug, Default)]
struct Phase {
    kiln: Vec<Duration>,
    files: Vec<Duration>,
    redis: Vec<Duration>,
    /// The gRPC floor's samples, where the phase takes them (the memory tier).
    floor: Vec<Duration>,
}

/// Times one compile of `request`, which must be served entirely by `tier`.
async fn timed(client: &kiln_client::Client, request: &pb::CompileRequest, tier: pb::Tier) -> Result<Duration> {
    let start = Instant::now();
    let job = client.compile(request.clone()).await?.collect().await?;
    let elapsed = start.elapsed();
    check_job(&job, GRAPH_KERNELS, Some(tier))?;
    Ok(elapsed)
}

/// `samples` warm compiles of the graph on one connection, each followed by a baseline sample
/// and, given a `floor` client, a sample of the gRPC floor.
async fn interleaved(
    client: &kiln_client::Client,
    samples: usize,
    tier: pb::Tier,
    base: &mut Baselines,
    floor: Option<&kiln_client::Client>,
) -> Result<Phase> {
    let request = graph_request();
    let mut phase = Phase::default();
    for _ in 0..samples {
        phase.kiln.push(timed(client, &request, tier).await?);
        base.sample(&mut phase)?;
        if let Some(floor) = floor {
            phase.floor.push(timed(floor, &request, tier).await?);
        }
    }
    Ok(phase)
}

/// The gRPC floor (see [`super::floor`]) of the warm graph: a server that answers with the
/// messages kilnd answered for it and does nothing else, and a client connected to it.
async fn floor_server(client: &kiln_client::Client, dir: &Path) -> Result<(super::floor::Floor, kiln_client::Client)> {
    let job = client.compile(graph_request()).await?.collect().await?;
    check_job(&job, GRAPH_KERNELS, Some(pb::Tier::Memory))?;
    let (floor, uri) = super::floor::compiler(&dir.join("floor.sock"), job)?;
    let connected = kiln_client::connect(&uri).await?;
    Ok((floor, connected))
}

/// Starts a fresh daemon on `dir` per sample and times its first compile of the graph.
async fn restarts(bench: &Bench, dir: &Path, base: &mut Baselines) -> Result<Phase> {
    let options = KilndOptions::new(bench.cores);
    let mut phase = Phase::default();
    for _ in 0..bench.options.restart_samples {
        let daemon = bench.start_kilnd(dir, &options).await?;
        let client = daemon.connect().await?;
        phase.kiln.push(timed(&client, &graph_request(), pb::Tier::Disk).await?);
        drop(client);
        daemon.stop().await?;
        base.sample(&mut phase)?;
    }
    Ok(phase)
}

/// A daemon on the filled directory with its memory tier off, so every hit is a disk hit.
async fn disk_steady(bench: &Bench, dir: &Path, base: &mut Baselines) -> Result<Phase> {
    let options = KilndOptions { memory_cache_mb: Some(0), ..KilndOptions::new(bench.cores) };
    let daemon = bench.start_kilnd(dir, &options).await?;
    let client = daemon.connect().await?;
    if let Err(e) = interleaved(&client, 20, pb::Tier::Disk, base, None).await {
        bail!("with memory_cache_mb = 0, a warm compile was not served by the disk tier: {e:#}");
    }
    let phase = interleaved(&client, bench.options.disk_samples, pb::Tier::Disk, base, None).await?;
    drop(client);
    daemon.stop().await?;
    Ok(phase)
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
             {}, one request, the hits answered in one batched message, cubins included), from the call until the \
             last result, \
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
            "Baselines, side by side: the same {GRAPH_KERNELS} cubins read as raw files (`std::fs::read`, one \
             process, page cache warm), and fetched from a private redis-server on a Unix socket with \
             {GRAPH_KERNELS} GETs in one pipelined round trip. One sample of each is taken right after every kiln \
             sample, so each row's baseline comes from the same stretch of time as its kiln figure. Neither \
             verifies a digest nor decompresses, so the ratio is kiln's whole overhead."
        ),
    ];

    section.notes.push(PROFILE.to_string());
    let dir = bench.dir("warm")?;
    let options = KilndOptions::new(bench.cores);
    let daemon = bench.start_kilnd(&dir, &options).await?;
    let client = daemon.connect().await?;
    let job = client.compile(graph_request()).await?.collect().await.context("cold fill")?;
    let cubins = check_job(&job, GRAPH_KERNELS, None)?;
    let bytes: usize = cubins.iter().map(Vec::len).sum();
    section.notes.push(format!("The graph's {GRAPH_KERNELS} cubins total {bytes} bytes."));
    let mut base = Baselines::prepare(bench, redis, &cubins)?;
    let (_floor, floor) = floor_server(&client, &dir).await.context("the gRPC floor")?;
    interleaved(&client, 20, pb::Tier::Memory, &mut base, Some(&floor)).await.context("memory warm-up")?;
    let memory = interleaved(&client, o.memory_samples, pb::Tier::Memory, &mut base, Some(&floor))
        .await
        .context("memory tier")?;
    // Where the time goes: the same hits without the cubins on the wire.
    let bare = pb::CompileRequest { omit_artifacts: true, ..graph_request() };
    let mut omitted = Vec::new();
    for _ in 0..o.memory_samples / 2 {
        omitted.push(timed(&client, &bare, pb::Tier::Memory).await?);
    }
    section.notes.push(format!(
        "memory tier with `omit_artifacts` (no cubins on the wire), for where the time goes: {}",
        Samples::new(omitted).summary()
    ));
    drop((client, floor));
    daemon.stop().await?;

    let disk = failed(disk_steady(bench, &dir, &mut base).await, &mut section.notes, "the disk tier with memory off");
    let restart = failed(restarts(bench, &dir, &mut base).await, &mut section.notes, "the restart samples");

    shared.kiln_memory_p50_ms = Samples::new(memory.kiln.clone()).p50_ms();
    shared.kiln_restart_p50_ms = restart.as_ref().and_then(|r| Samples::new(r.kiln.clone()).p50_ms());
    let steady_disk_p50 = disk.as_ref().and_then(|d| Samples::new(d.kiln.clone()).p50_ms());
    let mut add = |label: &str, phase: Phase, target: Option<(&str, Target)>| {
        let kiln = Samples::new(phase.kiln);
        let files = Samples::new(phase.files);
        let redis = Samples::new(phase.redis);
        for (pct, name) in [(50.0, "p50"), (99.0, "p99")] {
            for (base, base_s) in [("raw file reads", &files), ("Redis GETs, pipelined", &redis)] {
                let mut row = Row::new(
                    format!("{label}, {name}"),
                    kiln.figure(pct),
                    format!("{base}, {name}"),
                    base_s.figure(pct),
                );
                if let Some((on, t)) = target
                    && pct == 50.0
                    && base == on
                {
                    row = row.with_target(t);
                }
                section.rows.push(row);
            }
        }
        section.notes.push(format!(
            "{label}: kiln {}; beside it, raw file reads {}; Redis GETs {}",
            kiln.summary(),
            files.summary(),
            redis.summary()
        ));
    };
    let (memory_kiln, memory_redis) = (Samples::new(memory.kiln.clone()), Samples::new(memory.redis.clone()));
    let floor = Samples::new(memory.floor.clone());
    add("memory tier", memory, None);
    if let Some(d) = disk {
        add("disk tier (memory off)", d, Some(("raw file reads", Target::RatioAtMost(DISK_OVER_FILES))));
    }
    if let Some(r) = restart {
        let first = Samples::new(r.kiln.clone());
        add("disk tier, first compile after restart", r, None);
        section.rows.push(
            Row::new(
                "disk tier, first compile after restart, p50",
                first.figure(50.0),
                "the steady disk tier above, p50",
                steady_disk_p50.map(Value::Millis).ok_or_else(|| "not measured".to_string()),
            )
            .with_target(Target::RatioAtMost(RESTART_OVER_DISK)),
        );
    }
    section.rows.push(Row::new(
        "gRPC floor, p50",
        floor.figure(50.0),
        "Redis GETs, pipelined, p50",
        memory_redis.figure(50.0),
    ));
    section.rows.push(
        Row::new("memory tier, p50", memory_kiln.figure(50.0), "gRPC floor, p50", floor.figure(50.0))
            .with_target(Target::RatioAtMost(MEMORY_OVER_FLOOR)),
    );
    section.notes.push(format!(
        "gRPC floor: a bare tonic server on its own runtime and Unix socket that answers every `Compile` with the \
         messages kilnd answers for a memory-tier hit of the graph (`queued`, `started`, one `kernels` batch with \
         the {GRAPH_KERNELS} cubins, then `done`) and does nothing else, timed with the same client and request, one sample after each \
         memory-tier sample: {}",
        floor.summary()
    ));
    Ok(section)
}
