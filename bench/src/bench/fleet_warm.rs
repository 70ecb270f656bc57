//! Figure (e): warm start of the 64-kernel graph on a fresh host from the
//! remote tier, against raw pipelined Redis GETs of the same stored bytes.
//!
//! One kilnd fills the fleet cache (a cold compile publishes every kernel and the graph's
//! manifest). Then, per sample, a fresh kilnd starts on an empty cache directory pointed at the
//! same kiln-cache, a client connects, and one `Compile` of the graph is timed; all 64 results
//! must come from the remote tier. After each sample, a plain Redis client fetches the same 64
//! stored values (`kiln:v1:{<key>}:a`, the envelopes kiln-cache reads) in one pipelined round
//! trip, so the baseline is sampled in the same stretch of time as kiln.
//!
//! The fresh hosts hold another token than the filler's, as each host of a fleet does, and one
//! untimed host vets the filler before the clock starts (its compile of every key vouches for
//! the publisher and confirms each artifact): what is timed is a vetted publisher's hit path,
//! under each vetting policy and with the audit off.

use super::fleet::{Fleet, artifact_key};
use super::report::{Row, Section, Target};
use super::samples::Samples;
use super::{Bench, GRAPH_KERNELS, check_job, graph_request};
use anyhow::{Context, Result};
use kiln_cache_client::Lookup;
use kiln_proto::CacheKey;
use kiln_proto::pb;
use std::path::Path;
use std::time::{Duration, Instant};

const TITLE: &str = "(e) Fleet: warm start of a 64-kernel graph from the remote tier";
/// The target: at most this many times pipelined Redis GETs of the same stored values.
const OVER_REDIS: f64 = 4.0;
/// Config lines of a host that runs only artifacts a second token confirmed.
const CONFIRMED: &str = "vet = \"confirmed\"\n";
/// How long the vetting host's vouches may take to land in kiln-cache.
const VOUCHED_WITHIN: Duration = Duration::from_secs(30);

pub async fn run(bench: &Bench, fleet: &Fleet) -> Result<Section> {
    let samples = bench.options.fleet_warm_samples;
    let mut s = Section::new(TITLE);
    s.method = vec![
        format!(
            "A filler kilnd (remote tier: the run's kiln-cache over a private redis-server on a Unix socket) \
             compiles the {GRAPH_KERNELS}-kernel graph of (a) cold, which publishes every kernel and the graph's \
             manifest, and is stopped."
        ),
        format!(
            "Then {samples} times: a fresh kilnd (`--concurrency {}`) on an empty cache directory, pointed at the \
             same kiln-cache with a read-write token, started and connected to before the clock starts; timed is \
             one `Compile` of the graph over the Unix socket, from the call until the last result (cubins \
             included). Every sample must have all {GRAPH_KERNELS} results from tier `remote`. The daemon's \
             first use of its kiln-cache connection is inside the timed call, as it is on a fresh host.",
            bench.cores
        ),
        format!(
            "Baseline, side by side: right after each kiln sample, one plain Redis client (raw RESP on the same \
             Unix socket) GETs the {GRAPH_KERNELS} stored values `kiln:v1:{{<key>}}:a` in one pipelined round \
             trip: the same bytes kiln-cache reads, with no gRPC hop, no digest check and no decompression."
        ),
    ];

    let filler = fleet.start_host(bench, "fleet-warm-fill", "").await?;
    let job = filler.connect().await?.compile(graph_request()).await?.collect().await.context("cold fill")?;
    check_job(&job, GRAPH_KERNELS, None)?;
    filler.stop().await?;
    vet_the_filler(bench, fleet, &job).await?;
    let keys: Vec<Vec<u8>> = job.kernels.iter().map(|k| artifact_key(&k.key)).collect();
    let mut redis = fleet.redis.connect()?;
    let stored = redis.get_all(&keys).context("the filler's kernels are not in Redis")?;
    s.notes.push(format!(
        "The {GRAPH_KERNELS} stored envelopes total {} bytes in Redis (the cubins, uncompressed, {} bytes).",
        stored.iter().map(Vec::len).sum::<usize>(),
        job.kernels.iter().map(|k| k.artifact.len()).sum::<usize>()
    ));

    let shm = std::path::Path::new("/dev/shm");
    let tmpfs = shm.is_dir().then(|| shm.join(format!("kiln-bench-fleet-warm-{}", std::process::id())));
    let (mut kiln, mut base, mut starts, mut on_tmpfs) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut seconds, mut primed, mut unaudited, mut confirmed) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for i in 0..samples {
        let one = sample(bench, fleet, &bench.dir(&format!("fleet-warm-{i}"))?, i, false, "").await?;
        kiln.push(one.first);
        seconds.push(one.second);
        starts.push(one.start_up);
        let start = Instant::now();
        std::hint::black_box(redis.get_all(&keys)?);
        base.push(start.elapsed());
        if let Some(root) = &tmpfs {
            let dir = root.join(i.to_string());
            let sampled = sample(bench, fleet, &dir, i, false, "").await;
            std::fs::remove_dir_all(root).ok();
            on_tmpfs.push(sampled.context("on tmpfs")?.first);
        }
        primed.push(sample(bench, fleet, &bench.dir(&format!("fleet-warm-primed-{i}"))?, i, true, "").await?.first);
        let dir = bench.dir(&format!("fleet-warm-unaudited-{i}"))?;
        unaudited.push(sample(bench, fleet, &dir, i, false, "audit = false\n").await?.first);
        let dir = bench.dir(&format!("fleet-warm-confirmed-{i}"))?;
        confirmed.push(sample(bench, fleet, &dir, i, false, CONFIRMED).await?.first);
    }
    let (kiln, base) = (Samples::new(kiln), Samples::new(base));
    for (pct, name) in [(50.0, "p50"), (99.0, "p99")] {
        let mut row = Row::new(
            format!("fresh daemon, first `Compile`, {name}"),
            kiln.figure(pct),
            format!("Redis GETs of the stored values, pipelined, {name}"),
            base.figure(pct),
        );
        if pct == 50.0 {
            row = row.with_target(Target::RatioAtMost(OVER_REDIS));
        }
        s.rows.push(row);
    }
    s.notes.push(format!("kiln: {}; beside it, Redis GETs {}", kiln.summary(), base.summary()));
    // The rows that say where the time goes, each beside the same Redis baseline.
    let beside_redis = |label: &str, samples: &Samples| {
        Row::new(label, samples.figure(50.0), "Redis GETs, pipelined, p50", base.figure(50.0))
    };
    if !on_tmpfs.is_empty() {
        let t = Samples::new(on_tmpfs);
        s.rows.push(beside_redis("the same, cache directory on tmpfs (no fsync cost), p50", &t));
        s.method.push(
            "For where the time goes, not for the target: after each sample, one more fresh daemon whose cache \
             directory is on tmpfs (/dev/shm), where the disk tier's fsynced backfill of each fetched kernel costs \
             nothing."
                .into(),
        );
        s.notes.push(format!("cache directory on tmpfs: {}", t.summary()));
    }
    let (seconds, primed) = (Samples::new(seconds), Samples::new(primed));
    s.rows.push(beside_redis("the same daemon's second `Compile` (memory tier), p50", &seconds));
    s.rows.push(beside_redis("a fresh daemon after one `Lookup` of another graph, first `Compile`, p50", &primed));
    s.method.push(
        "For where the time goes, not for the target: each sampled daemon's second `Compile` of the graph (now a \
         memory-tier hit in the same young process), and one more fresh daemon per sample that first looks up a \
         graph of the same shape whose every key differs (all misses, untimed), so its one-time costs (first \
         requests on new connections, first use of each cache and thread pool, fresh memory) are paid before the \
         timed `Compile`: first minus primed is the young process's share, primed minus second is the fleet \
         round trip with its checks and backfill."
            .into(),
    );
    s.notes.push(format!("second `Compile`: {}; primed first `Compile`: {}", seconds.summary(), primed.summary()));
    let unaudited = Samples::new(unaudited);
    let confirmed = Samples::new(confirmed);
    s.rows.push(Row::new(
        "fresh daemon, first `Compile`, fleet audit and vetting at their defaults (`vet = \"first-use\"`), p50",
        kiln.figure(50.0),
        "the same with the audit off (`audit = false`), p50",
        unaudited.figure(50.0),
    ));
    s.rows.push(Row::new(
        "the same under `vet = \"confirmed\"` (every artifact confirmed), p50",
        confirmed.figure(50.0),
        "the same with the audit off (`audit = false`), p50",
        unaudited.figure(50.0),
    ));
    s.method.push(
        "The fresh hosts hold another read-write token than the filler's, as each host of a fleet does. Before \
         the clock starts, one more fresh host under `vet = \"confirmed\"` compiles the graph (every kernel is \
         held back and compiled there) and vouches for each: the filler's publisher is vetted and every artifact \
         confirmed. The timed samples are a vetted publisher's hit path."
            .into(),
    );
    s.method.push(
        "The fleet audit's and vetting's cost on this path, side by side: every kiln sample above runs kilnd's \
         default audit and vetting (each fetched kernel is offered to the audit: 2% of them, and the \
         publisher's first, are recompiled at background priority within 5% of a CPU; each is served only if \
         kiln-cache says its publisher is vetted); after each, one more fresh daemon with `audit = false`, and \
         one under `vet = \"confirmed\"` (served only if kiln-cache says the artifact is confirmed)."
            .into(),
    );
    s.notes.push(format!("audit off: {}", unaudited.summary()));
    s.notes.push(format!("`vet = \"confirmed\"`: {}", confirmed.summary()));
    let starts = Samples::new(starts);
    s.notes.push(format!(
        "Not timed, for context: starting each fresh kilnd until it answered took {}.",
        starts.summary()
    ));
    Ok(s)
}

/// One fresh daemon's timings, for where the time goes.
struct Sample {
    /// Its first `Compile` of the graph, all from the remote tier.
    first: Duration,
    /// Its second, all from memory, in the same young process.
    second: Duration,
    /// Not timed against anything: how long it took to start and connect.
    start_up: Duration,
}

/// A graph of the same shape whose every key differs (each source gains a comment): looked up
/// first, it misses everywhere and warms a fresh process's one-time costs without fetching the
/// timed graph.
fn primer() -> pb::CompileRequest {
    let mut request = graph_request();
    for kernel in request.graph.iter_mut().flat_map(|g| g.kernels.iter_mut()) {
        if let Some(pb::kernel::Source::Cuda(cuda)) = &mut kernel.source {
            cuda.source.push_str("\n// primer\n");
        }
    }
    request
}

/// One fresh daemon on the empty `dir`: its first `Compile` of the graph (all from the remote
/// tier), then its second; with `primed`, a `Lookup` of [`primer`] goes first, untimed.
/// `config`: lines for its configuration file.
async fn sample(bench: &Bench, fleet: &Fleet, dir: &Path, i: usize, primed: bool, config: &str) -> Result<Sample> {
    let started = Instant::now();
    let daemon = bench.start_kilnd(dir, &fleet.fresh_host_options(bench.cores, config)).await?;
    let client = daemon.connect().await?;
    let start_up = started.elapsed();
    if primed {
        client.lookup(primer()).await?.collect().await.context("the primer lookup")?;
    }
    let start = Instant::now();
    let warm = client.compile(graph_request()).await?.collect().await?;
    let first = start.elapsed();
    check_job(&warm, GRAPH_KERNELS, Some(pb::Tier::Remote)).with_context(|| format!("fresh daemon {i}"))?;
    let start = Instant::now();
    let again = client.compile(graph_request()).await?.collect().await?;
    let second = start.elapsed();
    check_job(&again, GRAPH_KERNELS, Some(pb::Tier::Memory)).with_context(|| format!("fresh daemon {i}, again"))?;
    drop(client);
    daemon.stop().await?;
    std::fs::remove_dir_all(dir).ok();
    Ok(Sample { first, second, start_up })
}

/// Vets the filler's publish before the clock starts: a fresh host (another token) under
/// `vet = "confirmed"` compiles every kernel of `filled` itself and vouches for each; this waits
/// until kiln-cache answers every key confirmed, by a vetted publisher.
async fn vet_the_filler(bench: &Bench, fleet: &Fleet, filled: &kiln_client::CompletedJob) -> Result<()> {
    let dir = bench.dir("fleet-warm-vetter")?;
    let vetter = bench.start_kilnd(&dir, &fleet.fresh_host_options(bench.cores, CONFIRMED)).await?;
    let job = vetter.connect().await?.compile(graph_request()).await?.collect().await.context("the vetting host")?;
    check_job(&job, GRAPH_KERNELS, Some(pb::Tier::Compiled)).context("the vetting host compiles every kernel")?;
    vetter.stop().await?;
    let reader = fleet.client()?;
    let deadline = Instant::now() + VOUCHED_WITHIN;
    for kernel in &filled.kernels {
        let key: CacheKey = kernel.key.parse().context("a kernel key")?;
        loop {
            if let Lookup::Hit(_, Some(p)) = reader.get(&key).await?
                && p.confirmed
                && p.vetted
            {
                break;
            }
            anyhow::ensure!(Instant::now() < deadline, "kiln-cache never said {key} was confirmed and vetted");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    std::fs::remove_dir_all(dir).ok();
    Ok(())
}
