//! A fleet's hosts and a herd: several kilnds sharing one kiln-cache, each asked for the same
//! cold graph at the same moment (scenarios 5 to 7, which break something under it).

use super::Run;
use super::graphs::{self, Artifacts};
use super::report::Outcome;
use crate::bench::fleet::host_options;
use crate::bench::kilnd::Kilnd;
use anyhow::Result;
use kiln_proto::pb;
use rand::Rng;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Starts `n` kilnd hosts (own empty caches under `name`, `/metrics` on) whose fleet tier is the
/// kiln-cache at `cache_uri`.
pub async fn hosts(run: &Run, name: &str, n: usize, cache_uri: &str) -> Result<Vec<Kilnd>> {
    hosts_with(run, name, n, cache_uri, "").await
}

/// [`hosts`] with `config` lines in each host's configuration file.
pub async fn hosts_with(run: &Run, name: &str, n: usize, cache_uri: &str, config: &str) -> Result<Vec<Kilnd>> {
    let bench = &run.bench;
    let mut daemons = Vec::with_capacity(n);
    for d in 0..n {
        let mut options = host_options(cache_uri, bench.cores, config);
        options.metrics = true;
        let dir = bench.dir(&format!("{name}-{d}"))?;
        daemons.push(bench.start_kilnd(&dir, &options).await?);
    }
    Ok(daemons)
}

/// A kilnd a herd's client calls: a process on this machine or a host in a container.
pub trait Endpoint {
    fn uri(&self) -> String;
}

impl Endpoint for Kilnd {
    fn uri(&self) -> String {
        Kilnd::uri(self)
    }
}

impl Endpoint for super::containers::Host {
    fn uri(&self) -> String {
        super::containers::Host::uri(self)
    }
}

/// Compiles across `daemons`, from their `/metrics` (every toolchain and outcome).
pub fn compiles(daemons: &[Kilnd]) -> Result<f64> {
    daemons.iter().map(|d| d.metric_sum("kiln_compiles_total{")).sum()
}

/// What each host's client got.
#[derive(Debug, Default)]
pub struct Herd {
    /// Per host, the artifacts of its last attempt (empty when every attempt failed).
    pub results: Vec<Artifacts>,
    /// Per host, the attempts that failed before one succeeded (or all of them).
    pub retries: Vec<usize>,
    /// Every failed attempt, word for word.
    pub errors: Vec<String>,
    /// Results by tier, over every host.
    pub tiers: BTreeMap<String, usize>,
    /// From the release until the last host had its answer.
    pub wall: Duration,
    /// Per host, from the release until its last attempt ended.
    pub took: Vec<Duration>,
}

impl Herd {
    /// Hosts that never got the whole graph.
    pub fn failed_hosts(&self) -> usize {
        self.results.iter().filter(|r| r.is_empty()).count()
    }

    /// Artifacts, over every host, that differ from `reference`.
    pub fn wrong(&self, reference: &Artifacts) -> usize {
        self.results.iter().map(|r| graphs::wrong(r, reference)).sum()
    }

    /// The most retries any host needed.
    pub fn most_retries(&self) -> usize {
        self.retries.iter().copied().max().unwrap_or(0)
    }

    /// "compiled 32, remote 96", for the notes.
    pub fn tiers_text(&self) -> String {
        self.tiers.iter().map(|(t, n)| format!("{t} {n}")).collect::<Vec<_>>().join(", ")
    }
}

async fn attempt(uri: &str, req: &pb::CompileRequest) -> Result<(Artifacts, Vec<pb::Tier>)> {
    let job = kiln_client::connect(uri).await?.compile(req.clone()).await?.collect().await?;
    let tiers = job.kernels.iter().map(|k| k.tier()).collect();
    Ok((graphs::artifacts(req, &job)?, tiers))
}

/// Every daemon's client asks for `req` at the same moment (a barrier); a failed call is retried
/// on a fresh connection, at most `retries` times, as a job's client would.
pub async fn herd(daemons: &[impl Endpoint], req: &pb::CompileRequest, retries: usize) -> Herd {
    let barrier = Arc::new(tokio::sync::Barrier::new(daemons.len() + 1));
    let mut tasks = tokio::task::JoinSet::new();
    for (i, d) in daemons.iter().enumerate() {
        let (uri, req, barrier) = (d.uri(), req.clone(), Arc::clone(&barrier));
        tasks.spawn(async move {
            barrier.wait().await;
            let released = Instant::now();
            let mut errors = Vec::new();
            for _ in 0..=retries {
                match attempt(&uri, &req).await {
                    Ok(got) => return (i, Some(got), errors, released.elapsed()),
                    Err(e) => errors.push(format!("host {i}: {e:#}")),
                }
            }
            (i, None, errors, released.elapsed())
        });
    }
    barrier.wait().await;
    let started = Instant::now();
    let mut herd = Herd {
        results: vec![Artifacts::new(); daemons.len()],
        retries: vec![0; daemons.len()],
        took: vec![Duration::ZERO; daemons.len()],
        ..Herd::default()
    };
    while let Some(joined) = tasks.join_next().await {
        let (i, got, errors, took) = match joined {
            Ok(done) => done,
            Err(e) => {
                herd.errors.push(format!("a client task died: {e}"));
                continue;
            }
        };
        herd.retries[i] = errors.len();
        herd.took[i] = took;
        herd.errors.extend(errors);
        if let Some((artifacts, tiers)) = got {
            herd.results[i] = artifacts;
            for t in tiers {
                *herd.tiers.entry(format!("{t:?}").to_lowercase()).or_insert(0) += 1;
            }
        }
    }
    herd.wall = started.elapsed();
    herd
}

/// Reports a herd the same way in every scenario: compiles, tiers, wall time, retries and wrong
/// bytes (returned, for the scenario's condition); the first errors go to the notes.
pub fn figures(out: &mut Outcome, label: &str, h: &Herd, compiles: f64, reference: &Artifacts) -> usize {
    let wrong = h.wrong(reference);
    out.figure(
        format!("{label}: compiles across the fleet (`/metrics`)"),
        format!("{compiles} for {} kernels", reference.len()),
    );
    out.figure(format!("{label}: results by tier"), h.tiers_text());
    out.figure(format!("{label}: wall time"), format!("{:.2} s", h.wall.as_secs_f64()));
    out.figure(
        format!("{label}: hosts that needed a retry / the most retries"),
        format!("{} / {}", h.retries.iter().filter(|r| **r > 0).count(), h.most_retries()),
    );
    out.figure(format!("{label}: wrong bytes"), wrong);
    for e in h.errors.iter().take(5) {
        out.notes.push(format!("{label}: {e}"));
    }
    wrong
}

/// A herd with something broken under it (see [`under_chaos`]).
#[derive(Debug)]
pub struct Struck {
    pub herd: Herd,
    /// When the herd was released.
    pub started: Instant,
    /// When the chaos struck, and when the last host had its answer, after the release.
    pub struck: Duration,
    pub done: Duration,
}

impl Struck {
    /// Records, as a condition, whether the chaos struck while the herd still ran: one that
    /// struck after the last answer tested nothing.
    pub fn check_landed(&self, out: &mut Outcome) {
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        out.check(
            "the chaos struck while the herd ran",
            format!("at {:.0} ms; the herd was done at {:.0} ms", ms(self.struck), ms(self.done)),
            self.struck < self.done,
        );
    }
}

/// Runs [`herd`] (one retry allowed) and, beside it, `chaos` at a random moment 50–300 ms after
/// the release: early enough that the herd is still compiling, late enough that it has begun.
/// Returns the herd and what the chaos handed back (the process it restarted, …).
pub async fn under_chaos<T, Fut>(daemons: &[impl Endpoint], req: &pb::CompileRequest, chaos: Fut) -> (Struck, Result<T>)
where
    Fut: Future<Output = Result<T>>,
{
    let after = Duration::from_secs_f64(rand::rng().random_range(0.05..0.3));
    under_chaos_after(daemons, req, after, chaos).await
}

/// [`under_chaos`] with the chaos started `after` the release, for chaos that picks its own
/// moment (it watches the hosts for the state it needs).
pub async fn under_chaos_after<T, Fut>(
    daemons: &[impl Endpoint],
    req: &pb::CompileRequest,
    after: Duration,
    chaos: Fut,
) -> (Struck, Result<T>)
where
    Fut: Future<Output = Result<T>>,
{
    let started = Instant::now();
    let herd_run = async {
        let h = herd(daemons, req, 1).await;
        (h, started.elapsed())
    };
    let chaos_run = async {
        tokio::time::sleep(after).await;
        (started.elapsed(), chaos.await)
    };
    let ((herd, done), (struck, chaos)) = tokio::join!(herd_run, chaos_run);
    (Struck { herd, started, struck, done }, chaos)
}
