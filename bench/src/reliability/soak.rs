//! Scenario 3: a soak. One kilnd with the fleet on takes mixed load for minutes (clients
//! hitting a warm graph as fast as they can, and one client bringing a new kernel twice a
//! second, which misses everywhere, takes a fleet lease, compiles and publishes), while its
//! memory is sampled. Memory must stay flat.
//!
//! "Flat" is judged on what the memory tier cannot explain: kilnd rightly grows by the new
//! kernels it keeps in memory, so the tier's own byte count (from `Stats`) is subtracted from
//! the resident set before the slope is taken. The slope is fitted over the samples after the
//! first window, when start-up allocations (thread stacks, connection buffers, pools) are done.

use super::graphs::{self, Artifacts};
use super::report::Outcome;
use super::{Run, rss};
use crate::bench::fleet::Fleet;
use anyhow::{Context, Result, ensure};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

pub const TITLE: &str = "Soak: mixed load on kilnd, fleet on";
const TAG: &str = "kiln-reliability scenario 3";
/// Clients hitting the warm graph.
const HIT_CLIENTS: usize = 8;
/// Kernels of the warm graph.
const WARM: usize = 16;
/// How often the new-kernel client sends a kernel no cache has.
const NEW_EVERY: Duration = Duration::from_millis(500);
/// The most the memory the tier does not explain may grow, per minute, after the first window.
/// Why this much: allocator caches and pools settle by a few MiB in steps, while a leak of even
/// a few hundred bytes per request grows by tens of MiB a minute at this load (the per-request
/// equivalent of the measured slope is reported beside it).
const MAX_MIB_PER_MINUTE: f64 = 2.0;

/// One sample: seconds since the load started, RSS in KiB, memory-tier bytes, requests so far.
#[derive(Debug, Clone, Copy)]
struct Sample {
    at: f64,
    rss_kib: u64,
    tier_bytes: u64,
    requests: usize,
}

impl Sample {
    /// Resident memory the memory tier does not account for, in MiB.
    fn unexplained_mib(&self) -> f64 {
        (self.rss_kib as f64 * 1024.0 - self.tier_bytes as f64) / (1024.0 * 1024.0)
    }
}

/// The least-squares slope of `y` over `x`; `None` with fewer than two distinct x.
fn slope(points: &[(f64, f64)]) -> Option<f64> {
    let n = points.len() as f64;
    let (mx, my) = points.iter().fold((0.0, 0.0), |(a, b), (x, y)| (a + x / n, b + y / n));
    let sxx: f64 = points.iter().map(|(x, _)| (x - mx).powi(2)).sum();
    let sxy: f64 = points.iter().map(|(x, y)| (x - mx) * (y - my)).sum();
    (points.len() >= 2 && sxx > 0.0).then(|| sxy / sxx)
}

fn mean_rss_mib(samples: &[&Sample]) -> f64 {
    samples.iter().map(|s| s.rss_kib as f64 / 1024.0).sum::<f64>() / samples.len().max(1) as f64
}

async fn memory_tier_bytes(client: &kiln_client::Client) -> Result<u64> {
    let stats = client.stats().await?;
    stats.tiers.iter().find(|t| t.tier == "memory").map(|t| t.bytes).context("Stats has no memory tier")
}

/// Counters the load tasks share.
#[derive(Debug, Default)]
struct Counts {
    requests: AtomicUsize,
    errors: AtomicUsize,
    new_kernels: AtomicUsize,
    first_error: std::sync::Mutex<Option<String>>,
}

impl Counts {
    fn record(&self, result: Result<()>) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        if let Err(e) = result {
            self.errors.fetch_add(1, Ordering::Relaxed);
            if let Ok(mut first) = self.first_error.lock() {
                first.get_or_insert_with(|| format!("{e:#}"));
            }
        }
    }
}

pub async fn run(run: &Run, out: &mut Outcome) -> Result<()> {
    let (bench, length, every) = (&run.bench, run.options.soak, run.options.soak_sample);
    let window = Duration::from_secs(60).min(length / 3);
    out.method = vec![
        format!(
            "One kilnd (`--concurrency {}`) with a kiln-cache over a private Redis as its fleet tier, for {} s: {} \
             clients compile a warm {WARM}-kernel graph back to back (each answer checked against the warm-up's), \
             and one client compiles a graph with a kernel no cache has every {} ms (miss everywhere, fleet lease, \
             compile, publish to the fleet, memory and disk).",
            bench.cores,
            length.as_secs(),
            HIT_CLIENTS,
            NEW_EVERY.as_millis()
        ),
        format!(
            "kilnd's VmRSS is read from /proc every {} s, with the memory tier's bytes from `Stats`. First and last \
             windows are the first and last {} s of the load. The slope is a least-squares fit of (RSS − memory-tier \
             bytes) over the samples after the first window.",
            every.as_secs(),
            window.as_secs()
        ),
        format!(
            "Condition: that slope ≤ {MAX_MIB_PER_MINUTE} MiB per minute. The memory tier is subtracted because \
             holding the new kernels is the cache doing its job; what is left is growth nothing accounts for. \
             {MAX_MIB_PER_MINUTE} MiB/min leaves room for allocator caches settling in steps, and is far below what \
             a per-request leak of even a few hundred bytes would show at this request rate."
        ),
    ];
    let fleet = Fleet::start(bench).await?;
    let mut options = fleet.kilnd_options(bench.cores, "");
    options.metrics = true;
    let daemon = bench.start_kilnd(&bench.dir("soak")?, &options).await?;
    let pid = daemon.pid().context("kilnd has no pid")?;
    let probe = daemon.connect().await?;
    let warm_req = graphs::graph(TAG, 0..WARM);
    let warm: Arc<Artifacts> =
        Arc::new(graphs::artifacts(&warm_req, &probe.compile(warm_req.clone()).await?.collect().await?)?);
    let counts = Arc::new(Counts::default());
    let started = Instant::now();
    let deadline = started + length;
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..HIT_CLIENTS {
        let (client, counts, warm, req) =
            (daemon.connect().await?, Arc::clone(&counts), Arc::clone(&warm), warm_req.clone());
        tasks.spawn(async move {
            while Instant::now() < deadline {
                let result = async {
                    let job = client.compile(req.clone()).await?.collect().await?;
                    ensure!(graphs::artifacts(&req, &job)? == *warm, "bytes differ from the warm-up's");
                    Ok(())
                };
                counts.record(result.await);
            }
        });
    }
    {
        let (client, counts) = (daemon.connect().await?, Arc::clone(&counts));
        tasks.spawn(async move {
            let mut tick = tokio::time::interval(NEW_EVERY);
            let mut i = 0;
            while Instant::now() < deadline {
                tick.tick().await;
                let req = graphs::graph(TAG, [0, 100_000 + i]);
                i += 1;
                let result =
                    async { graphs::artifacts(&req, &client.compile(req.clone()).await?.collect().await?).map(|_| ()) };
                counts.record(result.await);
                counts.new_kernels.fetch_add(1, Ordering::Relaxed);
            }
        });
    }
    let mut samples = Vec::new();
    let mut tick = tokio::time::interval(every);
    loop {
        tick.tick().await;
        let at = started.elapsed().as_secs_f64();
        let memory = rss::read(pid)?;
        let tier_bytes = memory_tier_bytes(&probe).await?;
        samples.push(Sample {
            at,
            rss_kib: memory.rss_kib,
            tier_bytes,
            requests: counts.requests.load(Ordering::Relaxed),
        });
        if Instant::now() >= deadline {
            break;
        }
    }
    while tasks.join_next().await.is_some() {}
    let peak = rss::read(pid)?.peak_kib;

    let w = window.as_secs_f64();
    let total = samples.last().map_or(0.0, |s| s.at);
    let first: Vec<&Sample> = samples.iter().filter(|s| s.at <= w + 0.5).collect();
    let last: Vec<&Sample> = samples.iter().filter(|s| s.at >= total - w - 0.5).collect();
    let fitted: Vec<&Sample> = samples.iter().filter(|s| s.at >= w - 0.5).collect();
    let per_minute = |f: fn(&Sample) -> f64| {
        slope(&fitted.iter().map(|s| (s.at / 60.0, f(s))).collect::<Vec<_>>()).context("too few samples for a slope")
    };
    let unexplained = per_minute(Sample::unexplained_mib)?;
    let raw = per_minute(|s| s.rss_kib as f64 / 1024.0)?;
    let requests = counts.requests.load(Ordering::Relaxed);
    let errors = counts.errors.load(Ordering::Relaxed);
    let requests_per_minute = requests as f64 / (total / 60.0).max(1e-9);
    out.figure(
        "load",
        format!(
            "{:.0} s, {requests} `Compile` calls, {} new kernels",
            total,
            counts.new_kernels.load(Ordering::Relaxed)
        ),
    );
    out.figure(
        "errors",
        match errors {
            0 => "0".into(),
            n => format!("{n} (first: {})", counts.first_error.lock().ok().and_then(|e| e.clone()).unwrap_or_default()),
        },
    );
    out.figure(format!("RSS, mean of the first {} s", window.as_secs()), format!("{:.1} MiB", mean_rss_mib(&first)));
    out.figure(format!("RSS, mean of the last {} s", window.as_secs()), format!("{:.1} MiB", mean_rss_mib(&last)));
    out.figure("peak RSS (VmHWM)", rss::mib(peak));
    let tier = |s: Option<&Sample>| s.map_or(0.0, |s| s.tier_bytes as f64 / (1024.0 * 1024.0));
    out.figure(
        "memory tier, first → last sample",
        format!("{:.1} → {:.1} MiB", tier(samples.first()), tier(samples.last())),
    );
    out.figure("RSS slope after the first window", format!("{raw:+.2} MiB/min"));
    out.figure("slope of RSS − memory tier", format!("{unexplained:+.2} MiB/min"));
    out.figure(
        "that slope per request",
        format!("{:+.1} bytes per `Compile`", unexplained * 1024.0 * 1024.0 / requests_per_minute.max(1.0)),
    );
    out.notes.push(format!(
        "samples (s: RSS MiB, memory tier MiB, calls): {}",
        samples
            .iter()
            .map(|s| format!(
                "{:.0}: {:.1}, {:.1}, {}",
                s.at,
                s.rss_kib as f64 / 1024.0,
                s.tier_bytes as f64 / 1048576.0,
                s.requests
            ))
            .collect::<Vec<_>>()
            .join("; ")
    ));
    out.check("errors = 0", errors, errors == 0);
    out.check(
        format!("memory flat: slope of RSS − memory tier ≤ {MAX_MIB_PER_MINUTE} MiB/min"),
        format!("{unexplained:+.2} MiB/min"),
        unexplained <= MAX_MIB_PER_MINUTE,
    );
    daemon.stop().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn least_squares_slope() {
        assert_eq!(slope(&[(0.0, 1.0), (1.0, 3.0), (2.0, 5.0)]), Some(2.0));
        assert_eq!(slope(&[(1.0, 1.0)]), None);
        assert_eq!(slope(&[(1.0, 1.0), (1.0, 2.0)]), None);
    }
}
