//! Figure (q): a torch.compile job starting cold on a fleet, simulated on the CPU. 32 real kilnd
//! "hosts" (each its own empty cache directory, all on one kiln-cache over one Redis) and 8
//! simulated ranks on each, released together, each asking its host's kilnd for the job's 18
//! graphs with `ClaimTorchGraph`, as kiln.torch does when a job splits its cold compile (by
//! default on several hosts): each graph falls to one host and rank, and every other rank leaves
//! it to that one (`wait_for_claim_ms`). A rank granted `compile_here` "compiles" (sleeps) and
//! publishes a fixed artifact; every other rank takes the artifact from its stream, checked byte
//! for byte. The baseline, side by side: the same fleet with `fleet_leases = false` and no split,
//! where each host compiles each graph for its own ranks.
//!
//! Beside the compiles and the wall time it measures what the fleet cache served (kiln-cache's
//! calls by op, Redis's commands, bytes, both servers' CPU seconds): README's model of the fleet
//! cache's load when 64 hosts × 8 ranks start a job cold was on paper, and the model that closes
//! the section scales these measured figures instead.

use super::Bench;
use super::fleet::{Fleet, leases_on_and_off, most};
use super::kilnd::Kilnd;
use super::report::{Row, Section, Target, Value};
use super::restart_model::servers_cpu;
use super::samples::Samples;
use crate::reliability::containers::sum_series;
use anyhow::{Context, Result, anyhow, ensure};
use kiln_proto::pb;
use kiln_proto::pb::torch_graphs_client::TorchGraphsClient;
use rand::{RngCore, SeedableRng};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::{Barrier, Mutex};
use tokio::task::JoinSet;

const TITLE: &str = "(q) Fleet cold start of a torch job: 32 simulated hosts";
const HOSTS: usize = 32;
const RANKS: usize = 8;
/// The job's distinct graphs: the 18 DDP pieces of README's multi-node job (runs 75–76).
const GRAPHS: usize = 18;
/// A simulated compile of one graph: a sleep, so that the compiles themselves take none of the
/// two cores the 32 kilnds, kiln-cache, Redis and the ranks share. The rest of the wall time is
/// the claims, the waits, the publishes and the bytes.
const COMPILE: Duration = Duration::from_millis(300);
/// One graph's artifacts: 18 of them make the 22 MB a rank of README's job loaded (run 76).
const ARTIFACT_BYTES: usize = 1_200_000;
/// The environment every rank declares (a CPU build of torch: no CUDA). With it kilnd keys each
/// graph by the rank's own environment and starts no torch worker for it.
const TORCH: &str = "2.11.0+cpu";
const TRITON: &str = "3.6.0";
const PYTHON: &str = "3.12.3";
const JOB: &str = "bench-torch-fleet";
/// kiln-cache's calls every kilnd makes on its own clock, for no graph: the health probe
/// (`CacheStats`, every 5 s), the quarantine poll (`ListQuarantine`, every second) and the host
/// report (every 10 s). Not counted as the job's; the model adds them per host per second.
const BACKGROUND_OPS: [&str; 3] = ["CacheStats", "ListQuarantine", "ReportHost"];
/// The fleet lease's outcomes kilnd counts in `kiln_lease_total{result}`.
const LEASE_RESULTS: [&str; 6] = ["acquired", "waited", "takeover", "present", "timeout", "error"];
/// kiln-cache's envelope bytes served, by Get, BatchGet or watch.
const SERVED: &str = "kiln_server_artifact_bytes_total{direction=\"out\"}";
/// How often kiln-cache's counters are read during a run, for the peak rate.
const SAMPLE: Duration = Duration::from_millis(100);
/// A run past this is stuck (a rank waiting on a publish that never came), and fails.
const RUN_BOUND: Duration = Duration::from_secs(300);
/// The model's fleet and cold start: README's 64 hosts (of 8 ranks) over about 20 s.
const MODEL_HOSTS: f64 = 64.0;
const MODEL_COLD_START_S: f64 = 20.0;
/// README's figure on paper: kiln-cache calls per host per distinct graph.
const README_CALLS_PER_HOST_GRAPH: f64 = 3.0;
/// How long a rank leaves a graph that falls to another rank of its host, and to another host:
/// kiln.torch's `SPLIT_WAIT_SECS` and `HOST_SPLIT_WAIT_SECS`.
const LEAVE_TO_RANK_MS: u32 = 2_000;
const LEAVE_TO_HOST_MS: u32 = 8_000;

/// Where graph `g` falls in a split job, as kiln.torch's `_falls_to` places DDP's piece `g + 1`
/// on the CPU: to the hosts in turn, then to a host's ranks in turn.
fn falls_to(g: usize) -> (usize, usize) {
    (g % HOSTS, (g / HOSTS) % RANKS)
}

/// How long the rank at `place` (host, rank) leaves graph `g` to the one it falls to; 0 for its
/// own graphs, and for every graph where the job does not split (`place` None).
fn leave_ms(place: Option<(usize, usize)>, g: usize) -> u32 {
    let Some((host, rank)) = place else { return 0 };
    match falls_to(g) {
        (h, r) if (h, r) == (host, rank) => 0,
        (h, _) if h == host => LEAVE_TO_RANK_MS,
        _ => LEAVE_TO_HOST_MS,
    }
}

/// One run's job: the graphs' payloads (new every run, so every graph is cold everywhere; the
/// same on every rank and host) and the artifact each graph's compile makes, with its digest.
struct Job {
    payloads: Vec<Vec<u8>>,
    artifacts: Vec<Vec<u8>>,
    digests: Vec<blake3::Hash>,
}

impl Job {
    fn new(tag: &str, seed: u64) -> Job {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let payloads = (0..GRAPHS).map(|g| format!("kiln-bench torch fleet, {tag}, graph {g}").into_bytes()).collect();
        let artifacts: Vec<Vec<u8>> = (0..GRAPHS)
            .map(|_| {
                // Random, so the envelope's zstd cannot shrink them: the bytes move as they are.
                let mut artifact = vec![0u8; ARTIFACT_BYTES];
                rng.fill_bytes(&mut artifact);
                artifact
            })
            .collect();
        let digests = artifacts.iter().map(|a| blake3::hash(a)).collect();
        Job { payloads, artifacts, digests }
    }

    /// Graph `g` as kiln.torch asks for it in a split job on the CPU: a claim (this process can
    /// share its compile), neither `no_worker` nor `prefer_workers`, left to another rank for
    /// `leave_ms` where it falls to that one.
    fn request(&self, g: usize, leave_ms: u32) -> pb::TorchGraphRequest {
        pb::TorchGraphRequest {
            torch_version: TORCH.into(),
            payload: self.payloads[g].clone(),
            job: JOB.into(),
            name: format!("forward:0/0 bucket {}", g + 1),
            triton_version: TRITON.into(),
            python_version: PYTHON.into(),
            wait_for_claim_ms: leave_ms,
            ..Default::default()
        }
    }
}

/// How a rank came by one graph, and when.
enum Got {
    /// Granted `compile_here`: compiled it, and its publish landed then.
    Compiled(Instant),
    /// Answered on its stream, from this tier, then.
    Loaded(pb::Tier, Instant),
}

/// What one rank saw.
#[derive(Debug, Default)]
struct RankSeen {
    compiled: usize,
    tiers: BTreeMap<String, usize>,
    /// When each graph this rank compiled was published, by graph.
    published: Vec<(usize, Instant)>,
    /// When each graph this rank loaded was answered, by graph.
    answered: Vec<(usize, Instant)>,
    /// When the last of its claims' streams opened.
    last_asked: Option<Instant>,
}

/// One rank: waits at the barrier, then asks for every graph, in order, each from a task of its
/// own: a rank does not wait for one graph's answer (nor for its call to be taken) before asking
/// for the next, as kiln.torch asks for DDP's pieces from a background thread as they are traced.
/// Then it waits for all the answers. `place` (host, rank): where it is in a split job.
async fn rank(
    client: kiln_client::Client,
    job: Arc<Job>,
    barrier: Arc<Barrier>,
    place: Option<(usize, usize)>,
) -> Result<RankSeen> {
    let grpc = client.torch_graphs();
    // One compile at a time, as one process's torch.compile; a publish goes on beside the next
    // compile, as kiln.torch publishes from a background thread.
    let compiler = Arc::new(Mutex::new(()));
    barrier.wait().await;
    let mut graphs = JoinSet::new();
    for g in 0..GRAPHS {
        let (grpc, job, compiler) = (grpc.clone(), Arc::clone(&job), Arc::clone(&compiler));
        graphs.spawn(async move { (g, graph(grpc, job, compiler, g, leave_ms(place, g)).await) });
    }
    let mut seen = RankSeen::default();
    while let Some(done) = graphs.join_next().await {
        let (g, outcome) = done?;
        let (asked, got) = outcome?;
        seen.last_asked = Some(seen.last_asked.map_or(asked, |last| last.max(asked)));
        match got {
            Got::Compiled(at) => {
                seen.compiled += 1;
                seen.published.push((g, at));
            }
            Got::Loaded(tier, at) => {
                *seen.tiers.entry(format!("{tier:?}").to_lowercase()).or_default() += 1;
                seen.answered.push((g, at));
            }
        }
    }
    Ok(seen)
}

/// Graph `g` claimed, and its answer on the claim's stream: compiled and published here when
/// granted, else the artifact, which must be the one published. With when the stream opened
/// (kilnd took the call).
async fn graph(
    mut grpc: TorchGraphsClient<kiln_client::Transport>,
    job: Arc<Job>,
    compiler: Arc<Mutex<()>>,
    g: usize,
    leave_ms: u32,
) -> Result<(Instant, Got)> {
    let mut stream = grpc
        .claim_torch_graph(job.request(g, leave_ms))
        .await
        .with_context(|| format!("ClaimTorchGraph of graph {g}"))?
        .into_inner();
    let asked = Instant::now();
    let reply = stream
        .message()
        .await
        .with_context(|| format!("graph {g}: the claim's stream"))?
        .with_context(|| format!("graph {g}: the claim's stream ended without an answer"))?;
    ensure!(reply.ok, "graph {g}: kilnd answered not ok: {}", reply.log);
    if reply.compile_here {
        // A grant without a key is `no_worker`'s "compile it for yourself alone", which these
        // ranks never ask for: kilnd would have had nothing to share.
        ensure!(!reply.key.is_empty(), "graph {g}: compile_here without a key: {}", reply.log);
        let compiling = compiler.lock().await;
        tokio::time::sleep(COMPILE).await;
        drop(compiling);
        let publish = pb::PublishTorchGraphRequest {
            key: reply.key,
            artifacts: job.artifacts[g].clone(),
            compile_micros: COMPILE.as_micros().try_into()?,
        };
        grpc.publish_torch_graph(publish).await.with_context(|| format!("PublishTorchGraph of graph {g}"))?;
        let published = Instant::now();
        // The claim lasts as long as its stream: it ends here, after the publish landed.
        drop(stream);
        return Ok((asked, Got::Compiled(published)));
    }
    let answered = Instant::now();
    let got = blake3::hash(&reply.artifacts);
    ensure!(
        reply.artifacts.len() == ARTIFACT_BYTES && got == job.digests[g],
        "graph {g}: kilnd answered {} bytes (blake3 {got}) from tier {:?}, not the {ARTIFACT_BYTES} bytes published \
         (blake3 {})",
        reply.artifacts.len(),
        reply.tier(),
        job.digests[g]
    );
    Ok((asked, Got::Loaded(reply.tier(), answered)))
}

/// The samples of the counter `series` in `/metrics` text, each as its two labels' values (named
/// `a` and `b`, in any order) and its count.
fn labelled<'t>(metrics: &'t str, series: &str, a: &str, b: &str) -> Vec<(&'t str, &'t str, f64)> {
    let prefix = format!("{series}{{");
    metrics
        .lines()
        .filter_map(|line| {
            let (labels, count) = line.strip_prefix(&prefix)?.rsplit_once("} ")?;
            let label = |name: &str| {
                labels.split(',').find_map(|pair| pair.strip_prefix(name)?.strip_prefix("=\"")?.strip_suffix('"'))
            };
            Some((label(a)?, label(b)?, count.parse().ok()?))
        })
        .collect()
}

/// kiln-cache's requests so far by op, from `kiln_server_requests_total{op,code}`; those that did
/// not answer ok are kept apart, as `Op (code)`.
fn calls_by_op(metrics: &str) -> BTreeMap<String, f64> {
    let mut calls = BTreeMap::new();
    for (op, code, count) in labelled(metrics, "kiln_server_requests_total", "op", "code") {
        let name = if code == "ok" { op.to_string() } else { format!("{op} ({code})") };
        *calls.entry(name).or_insert(0.0) += count;
    }
    calls
}

/// kiln-cache's keys read so far, by the call that read them and the result
/// (`kiln_server_lookups_total{via,result}`), as `via result`.
fn lookups(metrics: &str) -> BTreeMap<String, f64> {
    labelled(metrics, "kiln_server_lookups_total", "via", "result")
        .into_iter()
        .map(|(via, result, count)| (format!("{via} {result}"), count))
        .collect()
}

/// Whether the call named `name` (`Op` or `Op (code)`) is one of the hosts' own
/// [`BACKGROUND_OPS`].
fn background(name: &str) -> bool {
    BACKGROUND_OPS.iter().any(|op| name.split(' ').next() == Some(op))
}

/// The calls made for the job's graphs: every op but the hosts' own [`BACKGROUND_OPS`].
fn graph_calls(calls: &BTreeMap<String, f64>) -> f64 {
    calls.iter().filter(|(name, _)| !background(name)).map(|(_, n)| n).sum()
}

/// What grew from `before` to `after`, by name.
fn grown(before: &BTreeMap<String, f64>, after: &BTreeMap<String, f64>) -> BTreeMap<String, f64> {
    after
        .iter()
        .map(|(name, n)| (name.clone(), n - before.get(name).copied().unwrap_or(0.0)))
        .filter(|(_, n)| *n > 0.0)
        .collect()
}

/// Redis's commands so far by name, from `INFO commandstats` (the INFO itself left out).
fn redis_commands(fleet: &Fleet) -> Result<BTreeMap<String, f64>> {
    let replies = fleet.redis.connect()?.pipeline(&[vec![b"INFO".as_slice(), b"commandstats".as_slice()]])?;
    let text = replies.into_iter().next().flatten().context("INFO commandstats answered nothing")?;
    Ok(String::from_utf8_lossy(&text)
        .lines()
        .filter_map(|line| {
            let (name, stats) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = stats.split(',').find_map(|s| s.strip_prefix("calls="))?.parse().ok()?;
            (name != "info").then(|| (name.to_string(), calls))
        })
        .collect())
}

/// kiln-cache's `/metrics` text.
fn cache_metrics(fleet: &Fleet) -> Result<String> {
    kiln_tests::http::get(fleet.cache.metrics, "/metrics").context("GET kiln-cache's /metrics")
}

/// kiln-cache's calls for the graphs, read every [`SAMPLE`] on a thread of its own until
/// stopped: the peak rate between two reads.
struct Sampler {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Vec<(Instant, f64)>>,
}

impl Sampler {
    fn start(metrics: SocketAddr) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            let mut samples = Vec::new();
            while !stopped.load(Ordering::Relaxed) {
                // A read that fails is a gap in the samples: the run's totals come from the reads
                // before and after it.
                if let Ok(text) = kiln_tests::http::get(metrics, "/metrics") {
                    samples.push((Instant::now(), graph_calls(&calls_by_op(&text))));
                }
                std::thread::sleep(SAMPLE);
            }
            samples
        });
        Sampler { stop, thread }
    }

    /// The most calls per second between two consecutive reads.
    fn peak(self) -> Result<f64> {
        self.stop.store(true, Ordering::Relaxed);
        let samples = self.thread.join().map_err(|_| anyhow!("the metrics sampler panicked"))?;
        Ok(samples
            .windows(2)
            .map(|w| (w[1].1 - w[0].1) / w[1].0.duration_since(w[0].0).as_secs_f64().max(1e-3))
            .fold(0.0, f64::max))
    }
}

/// One run of the fleet.
#[derive(Debug)]
struct Run {
    /// From the barrier until every rank had every graph.
    wall: Duration,
    /// `compile_here` grants across all ranks.
    grants: usize,
    /// The most graphs one rank compiled.
    most_by_one_rank: usize,
    /// Sum over the kilnds of `kiln_torch_graphs_total{result="compiled"}` (a claim's publish).
    compiled_metrics: f64,
    /// The answers the ranks loaded, by tier.
    tiers: BTreeMap<String, usize>,
    /// When the publishes landed, the first and the last, after the barrier.
    publishes: (Duration, Duration),
    /// When the ranks' loaded answers came, after the barrier.
    answers: Samples,
    /// The longest from a graph's first publish to a rank's answer of it.
    after_publish: Duration,
    /// When the last claim's stream opened, after the barrier.
    last_asked: Duration,
    /// kiln-cache's calls by op during the run (to the hosts' stop).
    calls: BTreeMap<String, f64>,
    /// The ranks' claims that left their graph to another host (each one watched the fleet for
    /// that host's publish through its kilnd).
    left_to_hosts: usize,
    /// From the read of kiln-cache's counters before the barrier to the read after the stop.
    span: Duration,
    /// The fleet lease's outcomes, summed over the kilnds.
    leases: BTreeMap<&'static str, f64>,
    /// Redis's commands by name during the run.
    redis: BTreeMap<String, f64>,
    /// The most kiln-cache calls for the graphs per second, between two reads [`SAMPLE`] apart.
    peak_rate: f64,
    /// Bytes each kilnd read from the fleet (`kiln_artifact_bytes_total`, remote, read).
    fetched: Vec<f64>,
    /// kiln-cache's `kiln_server_artifact_bytes_total{direction="out"}` during the run.
    served: f64,
    /// kiln-cache's keys read during the run, by call and result.
    lookups: BTreeMap<String, f64>,
    cache_cpu: f64,
    redis_cpu: f64,
    /// The 32 kilnds' CPU seconds together, and this process's (the ranks), to the last answer.
    kilnds_cpu: f64,
    ranks_cpu: f64,
}

impl Run {
    fn graph_calls(&self) -> f64 {
        graph_calls(&self.calls)
    }

    /// The calls each host made on its own clock, per second.
    fn background_per_host_second(&self) -> f64 {
        let calls: f64 = self.calls.iter().filter(|(name, _)| background(name)).map(|(_, n)| n).sum();
        calls / HOSTS as f64 / self.span.as_secs_f64()
    }

    /// kiln-cache's `WatchPublish` streams opened during the run.
    fn watches(&self) -> f64 {
        self.calls.iter().filter(|(name, _)| name.split(' ').next() == Some("WatchPublish")).map(|(_, n)| n).sum()
    }

    fn redis_commands(&self) -> f64 {
        self.redis.values().sum()
    }

    fn mean_fetched_mb(&self) -> f64 {
        self.fetched.iter().sum::<f64>() / self.fetched.len().max(1) as f64 / 1e6
    }

    fn mean_rate(&self) -> f64 {
        self.graph_calls() / self.wall.as_secs_f64()
    }
}

/// The CPU seconds of the kilnds and of this process.
fn clients_cpu(hosts: &[Kilnd]) -> Result<(f64, f64)> {
    let mut kilnds = 0.0;
    for host in hosts {
        kilnds += super::cpu::seconds(host.pid().context("a kilnd is not running")?)?;
    }
    Ok((kilnds, super::cpu::seconds(std::process::id())?))
}

async fn run_once(bench: &Bench, fleet: &Fleet, leases: bool, round: usize) -> Result<Run> {
    let config = if leases { "" } else { "fleet_leases = false\n" };
    // One compile slot each: 32 daemons share the cores, and a claimed graph compiles nothing in
    // kilnd.
    let mut options = fleet.kilnd_options(1, config);
    options.metrics = true;
    let mut hosts = Vec::with_capacity(HOSTS);
    for h in 0..HOSTS {
        hosts.push(bench.start_kilnd(&bench.dir(&format!("torch-fleet-{h}"))?, &options).await?);
    }
    let tag = format!("leases {}, round {round}", if leases { "on" } else { "off" });
    let job = Arc::new(Job::new(&tag, (round * 2 + usize::from(leases)) as u64));
    let barrier = Arc::new(Barrier::new(HOSTS * RANKS + 1));
    let mut ranks = JoinSet::new();
    for (h, host) in hosts.iter().enumerate() {
        for r in 0..RANKS {
            let client = host.connect().await?;
            let (job, barrier) = (Arc::clone(&job), Arc::clone(&barrier));
            // kiln splits the job (its default on several hosts); the baseline does not.
            let place = leases.then_some((h, r));
            ranks.spawn(async move {
                rank(client, job, barrier, place).await.with_context(|| format!("host {h}, rank {r}"))
            });
        }
    }
    let span_started = Instant::now();
    let before = cache_metrics(fleet)?;
    let (calls_before, served_before, lookups_before) =
        (calls_by_op(&before), sum_series(&before, SERVED), lookups(&before));
    let redis_before = redis_commands(fleet)?;
    let (redis_cpu_before, cache_cpu_before) = servers_cpu(fleet)?;
    let (kilnds_cpu_before, ranks_cpu_before) = clients_cpu(&hosts)?;
    let sampler = Sampler::start(fleet.cache.metrics);
    barrier.wait().await;
    let start = Instant::now();
    let mut seen = Vec::with_capacity(HOSTS * RANKS);
    let all = async {
        while let Some(done) = ranks.join_next().await {
            seen.push(done??);
        }
        anyhow::Ok(())
    };
    tokio::time::timeout(RUN_BOUND, all)
        .await
        .map_err(|_| anyhow!("the ranks did not all have every graph within {RUN_BOUND:?}"))??;
    let wall = start.elapsed();
    let peak_rate = sampler.peak()?;
    let (kilnds_cpu, ranks_cpu) = clients_cpu(&hosts)?;
    let mut compiled_metrics = 0.0;
    let mut fetched = Vec::with_capacity(HOSTS);
    let mut lease_results = BTreeMap::new();
    for host in &hosts {
        compiled_metrics += host.metric_sum("kiln_torch_graphs_total{result=\"compiled\"")?;
        fetched.push(host.metric_sum("kiln_artifact_bytes_total{tier=\"remote\",direction=\"read\"")?);
        for result in LEASE_RESULTS {
            *lease_results.entry(result).or_insert(0.0) +=
                host.metric_sum(&format!("kiln_lease_total{{result=\"{result}\""))?;
        }
    }
    // Stopped before the servers are read again, so that what trails the last answer (a lease's
    // release after its publish) counts too.
    for host in hosts {
        host.stop().await?;
    }
    let after = cache_metrics(fleet)?;
    let span = span_started.elapsed();
    let (redis_cpu, cache_cpu) = servers_cpu(fleet)?;
    let mut tiers = BTreeMap::new();
    for (name, n) in seen.iter().flat_map(|s| &s.tiers) {
        *tiers.entry(name.clone()).or_insert(0) += n;
    }
    let mut first_publish: Vec<Option<Instant>> = vec![None; GRAPHS];
    for &(g, at) in seen.iter().flat_map(|s| &s.published) {
        first_publish[g] = Some(first_publish[g].map_or(at, |first| first.min(at)));
    }
    let publishes = seen.iter().flat_map(|s| &s.published).map(|(_, at)| at.saturating_duration_since(start));
    let publishes = (publishes.clone().min().unwrap_or_default(), publishes.max().unwrap_or_default());
    let answered = seen.iter().flat_map(|s| &s.answered);
    let answers = Samples::new(answered.clone().map(|(_, at)| at.saturating_duration_since(start)).collect());
    let after_publish =
        answered.filter_map(|&(g, at)| Some(at.saturating_duration_since(first_publish[g]?))).max().unwrap_or_default();
    Ok(Run {
        wall,
        grants: seen.iter().map(|s| s.compiled).sum(),
        most_by_one_rank: seen.iter().map(|s| s.compiled).max().unwrap_or(0),
        compiled_metrics,
        tiers,
        publishes,
        answers,
        after_publish,
        last_asked: seen
            .iter()
            .filter_map(|s| s.last_asked)
            .max()
            .map_or(Duration::ZERO, |at| at.saturating_duration_since(start)),
        calls: grown(&calls_before, &calls_by_op(&after)),
        left_to_hosts: if leases {
            (0..HOSTS)
                .flat_map(|h| (0..RANKS).map(move |r| (h, r)))
                .map(|place| (0..GRAPHS).filter(|&g| leave_ms(Some(place), g) == LEAVE_TO_HOST_MS).count())
                .sum()
        } else {
            0
        },
        span,
        leases: lease_results,
        redis: grown(&redis_before, &redis_commands(fleet)?),
        peak_rate,
        fetched,
        served: sum_series(&after, SERVED) - served_before,
        lookups: grown(&lookups_before, &lookups(&after)),
        cache_cpu: cache_cpu - cache_cpu_before,
        redis_cpu: redis_cpu - redis_cpu_before,
        kilnds_cpu: kilnds_cpu - kilnds_cpu_before,
        ranks_cpu: ranks_cpu - ranks_cpu_before,
    })
}

mod report;

pub use report::run;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_split_job_leaves_each_graph_to_the_host_and_rank_it_falls_to() {
        // Graph 0 falls to host 0's rank 0, graph 1 to host 1's: the hosts in turn first.
        assert_eq!((falls_to(0), falls_to(1), falls_to(HOSTS)), ((0, 0), (1, 0), (0, 1)));
        assert_eq!(leave_ms(Some((0, 0)), 0), 0, "its own graph: no wait");
        assert_eq!(leave_ms(Some((0, 1)), 0), LEAVE_TO_RANK_MS, "another rank of its host's");
        assert_eq!(leave_ms(Some((1, 0)), 0), LEAVE_TO_HOST_MS, "another host's");
        assert_eq!(leave_ms(None, 0), 0, "no split: nobody waits");
    }

    #[test]
    fn calls_by_op_keeps_failures_apart_and_the_hosts_own_out_of_the_jobs() {
        let metrics = "# TYPE kiln_server_requests counter\n\
                       kiln_server_requests_total{op=\"Get\",code=\"ok\"} 5\n\
                       kiln_server_requests_total{op=\"Get\",code=\"unavailable\"} 2\n\
                       kiln_server_requests_total{op=\"ListQuarantine\",code=\"ok\"} 3\n\
                       kiln_server_redis_up 1\n";
        let calls = calls_by_op(metrics);
        assert_eq!(calls.get("Get"), Some(&5.0));
        assert_eq!(calls.get("Get (unavailable)"), Some(&2.0));
        assert_eq!(graph_calls(&calls), 7.0, "the quarantine poll is the host's own");
        let before = BTreeMap::from([("Get".to_string(), 1.0)]);
        assert_eq!(grown(&before, &calls).get("Get"), Some(&4.0));
        let read = lookups("kiln_server_lookups_total{result=\"hit\",via=\"watch\"} 4\n");
        assert_eq!(read.get("watch hit"), Some(&4.0), "labels in any order");
    }
}
