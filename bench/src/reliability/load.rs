//! Many concurrent clients, released together, each making its calls one after another: every
//! call timed, every error counted (and the first few kept, so a report says what failed).

use super::report::Outcome;
use crate::bench::samples::Samples;
use anyhow::Result;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Errors kept word for word; the rest are only counted.
const KEPT_ERRORS: usize = 5;

/// What the clients saw.
#[derive(Debug, Default)]
pub struct Tally {
    pub calls: usize,
    pub errors: usize,
    pub first_errors: Vec<String>,
    pub latencies: Samples,
    /// From the release of the clients until the last call returned.
    pub wall: Duration,
}

impl Tally {
    /// Calls per second over the wall time.
    pub fn rate(&self) -> f64 {
        self.calls as f64 / self.wall.as_secs_f64().max(1e-9)
    }

    /// Calls, errors, latency percentiles and rate as figures, each named after `prefix`.
    pub fn figures(&self, out: &mut Outcome, prefix: &str) {
        let name = |m: &str| if prefix.is_empty() { m.to_string() } else { format!("{prefix}: {m}") };
        let ms = |v: Option<f64>| v.map_or_else(|| "—".into(), |ms| format!("{ms:.1} ms"));
        out.figure(name("calls"), self.calls);
        out.figure(name("errors"), self.errors_text());
        out.figure(name("latency p50"), ms(self.latencies.p50_ms()));
        out.figure(name("latency p99"), ms(self.latencies.p99_ms()));
        out.figure(name("latency max"), ms(self.latencies.max_ms()));
        out.figure(
            name("wall time, calls per second"),
            format!("{:.1} s, {:.0} /s", self.wall.as_secs_f64(), self.rate()),
        );
    }

    /// "0", or the count and the first errors word for word.
    pub fn errors_text(&self) -> String {
        match self.errors {
            0 => "0".into(),
            n => format!("{n} (first: {})", self.first_errors.join("; ")),
        }
    }
}

/// Runs `clients` clients at once; client `c` makes `calls` calls, `call(c, k)` for k in
/// 0..calls, one after another. A failed call is counted and the client goes on.
pub async fn many<F, Fut>(clients: usize, calls: usize, call: F) -> Tally
where
    F: Fn(usize, usize) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<()>> + Send + 'static,
{
    let call = Arc::new(call);
    let barrier = Arc::new(tokio::sync::Barrier::new(clients + 1));
    let mut tasks = tokio::task::JoinSet::new();
    for c in 0..clients {
        let (call, barrier) = (Arc::clone(&call), Arc::clone(&barrier));
        tasks.spawn(async move {
            barrier.wait().await;
            let mut seen = Vec::with_capacity(calls);
            for k in 0..calls {
                let started = Instant::now();
                let result = call(c, k).await;
                seen.push((started.elapsed(), result.err().map(|e| format!("client {c} call {k}: {e:#}"))));
            }
            seen
        });
    }
    barrier.wait().await;
    collect(tasks, Instant::now()).await
}

/// Runs `clients` clients at once, each making calls one after another, `call(c, k)` for its
/// k-th call, until `stop` is set: load that lasts as long as the chaos beside it. A failed call
/// is counted and the client goes on.
pub async fn until<F, Fut>(clients: usize, stop: Arc<std::sync::atomic::AtomicBool>, call: F) -> Tally
where
    F: Fn(usize, usize) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<()>> + Send + 'static,
{
    let call = Arc::new(call);
    let mut tasks = tokio::task::JoinSet::new();
    let started = Instant::now();
    for c in 0..clients {
        let (call, stop) = (Arc::clone(&call), Arc::clone(&stop));
        tasks.spawn(async move {
            let mut seen = Vec::new();
            let mut k = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let t = Instant::now();
                let result = call(c, k).await;
                seen.push((t.elapsed(), result.err().map(|e| format!("client {c} call {k}: {e:#}"))));
                k += 1;
            }
            seen
        });
    }
    collect(tasks, started).await
}

/// Every call's latency and error from the clients' tasks, as one tally.
async fn collect(mut tasks: tokio::task::JoinSet<Vec<(Duration, Option<String>)>>, started: Instant) -> Tally {
    let mut tally = Tally::default();
    let mut latencies = Vec::new();
    while let Some(joined) = tasks.join_next().await {
        let seen = joined.unwrap_or_else(|e| vec![(Duration::ZERO, Some(format!("a client task died: {e}")))]);
        for (latency, error) in seen {
            tally.calls += 1;
            latencies.push(latency);
            if let Some(e) = error {
                tally.errors += 1;
                if tally.first_errors.len() < KEPT_ERRORS {
                    tally.first_errors.push(e);
                }
            }
        }
    }
    tally.wall = started.elapsed();
    tally.latencies = Samples::new(latencies);
    tally
}
