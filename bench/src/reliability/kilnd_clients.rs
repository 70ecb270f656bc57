//! Scenario 1: many concurrent clients on one kilnd, each on its own Unix-socket connection.
//!
//! Run A: every client compiles the same warm graph again and again (memory-tier hits). Run B:
//! every client's graph is the warm kernels plus two kernels only it sends and one it shares
//! with nine other clients, all cold, so compiles, in-process single flight (`joined`) and hits
//! happen at once; each client's later calls are hits of what its first call compiled.
//! Every answer is checked: the warm kernels against what the warm-up compiled, the new ones
//! against the first answer any client got for them.

use super::graphs::{self, Artifacts};
use super::load;
use super::report::Outcome;
use super::{Run, rss};
use crate::bench::kilnd::KilndOptions;
use anyhow::{Context, Result, ensure};
use kiln_proto::pb;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

pub const TITLE: &str = "1,000 concurrent clients on kilnd";
const TAG: &str = "kiln-reliability scenario 1";
/// Kernels of the warm graph.
const WARM: usize = 8;
/// Cold kernels that only one client sends, per client.
const OWN: usize = 2;
/// Clients that share one cold kernel.
const GROUP: usize = 10;

/// Client `c`'s graph in run B: the warm kernels, its own, and its group's.
fn mixed_graph(c: usize) -> pb::CompileRequest {
    let own = (0..OWN).map(|j| 1_000 + OWN * c + j);
    graphs::graph(TAG, (0..WARM).chain(own).chain([1_000_000 + c / GROUP]))
}

/// What run B's clients got, shared among them: the first answer for each new kernel, which
/// every later answer must equal, and results by tier.
#[derive(Debug, Default)]
struct Seen {
    first: Mutex<HashMap<String, blake3::Hash>>,
    compiled: AtomicUsize,
    joined: AtomicUsize,
}

impl Seen {
    fn check(&self, got: &Artifacts, warm: &Artifacts) -> Result<()> {
        let mut first = self.first.lock().map_err(|_| anyhow::anyhow!("a client panicked"))?;
        for (id, bytes) in got {
            match warm.get(id) {
                Some(expected) => ensure!(bytes == expected, "{id}: bytes differ from the warm-up's"),
                None => {
                    let digest = blake3::hash(bytes);
                    let earlier = *first.entry(id.clone()).or_insert(digest);
                    ensure!(earlier == digest, "{id}: bytes differ from an earlier answer");
                }
            }
        }
        Ok(())
    }

    fn count(&self, job: &kiln_client::CompletedJob) {
        for k in &job.kernels {
            match k.tier() {
                pb::Tier::Compiled => self.compiled.fetch_add(1, Ordering::Relaxed),
                pb::Tier::Joined => self.joined.fetch_add(1, Ordering::Relaxed),
                _ => 0,
            };
        }
    }
}

pub async fn run(run: &Run, out: &mut Outcome) -> Result<()> {
    let (bench, n, calls) = (&run.bench, run.options.clients, run.options.calls_per_client);
    out.method = vec![
        format!(
            "One kilnd (`--concurrency {}`, memory and disk tiers, no fleet). {n} clients, each its own connection \
             to the Unix socket, released together; each makes {calls} `Compile` calls one after another and reads \
             every answer to the end.",
            bench.cores
        ),
        format!(
            "Run A: every call is the same warm {WARM}-kernel graph (compiled once before). Run B: each client's \
             graph is the {WARM} warm kernels, {OWN} cold kernels only it sends and one cold kernel shared by a group \
             of {GROUP} clients, so compiles, single flight and hits mix; its later calls hit what its first compiled."
        ),
        "An error is a failed call, a kernel not OK, or bytes that differ from the warm-up's (warm kernels) or \
         from the first answer for that kernel (new ones). Latency is per call, from the request until the last \
         result. kilnd's peak memory is VmHWM from /proc/PID/status."
            .into(),
    ];
    let mut options = KilndOptions::new(bench.cores);
    options.metrics = true;
    let daemon = bench.start_kilnd(&bench.dir("kilnd-clients")?, &options).await?;
    let pid = daemon.pid().context("kilnd has no pid")?;
    let warm_req = graphs::graph(TAG, 0..WARM);
    let warm_job = daemon.connect().await?.compile(warm_req.clone()).await?.collect().await?;
    let warm = Arc::new(graphs::artifacts(&warm_req, &warm_job).context("the warm-up compile")?);
    let start = rss::read(pid)?;
    let mut clients = Vec::with_capacity(n);
    for _ in 0..n {
        clients.push(daemon.connect().await?);
    }
    let clients = Arc::new(clients);
    let connected = rss::read(pid)?;
    out.figure("clients (own connection each) × calls", format!("{n} × {calls}"));

    let a = {
        let (clients, warm, req) = (Arc::clone(&clients), Arc::clone(&warm), warm_req.clone());
        load::many(n, calls, move |c, _| {
            let (client, warm, req) = (clients[c].clone(), Arc::clone(&warm), req.clone());
            async move {
                let job = client.compile(req.clone()).await?.collect().await?;
                ensure!(graphs::artifacts(&req, &job)? == *warm, "bytes differ from the warm-up's");
                Ok(())
            }
        })
        .await
    };
    a.figures(out, "A, warm");
    let after_a = rss::read(pid)?;

    let compiles_before = daemon.metric_sum("kiln_compiles_total{")?;
    let seen = Arc::new(Seen::default());
    let b = {
        let (clients, warm, seen) = (Arc::clone(&clients), Arc::clone(&warm), Arc::clone(&seen));
        load::many(n, calls, move |c, _| {
            let (client, warm, seen) = (clients[c].clone(), Arc::clone(&warm), Arc::clone(&seen));
            async move {
                let req = mixed_graph(c);
                let job = client.compile(req.clone()).await?.collect().await?;
                seen.count(&job);
                seen.check(&graphs::artifacts(&req, &job)?, &warm)
            }
        })
        .await
    };
    b.figures(out, "B, with compiles");
    let compiles = daemon.metric_sum("kiln_compiles_total{")? - compiles_before;
    let distinct = n * OWN + n.div_ceil(GROUP);
    out.figure("B: compiles (kilnd's `/metrics`)", format!("{compiles} for {distinct} distinct new kernels"));
    out.figure(
        "B: results `compiled` / `joined` (single flight)",
        format!("{} / {}", seen.compiled.load(Ordering::Relaxed), seen.joined.load(Ordering::Relaxed)),
    );
    let after_b = rss::read(pid)?;
    out.figure("kilnd RSS after the warm-up", rss::mib(start.rss_kib));
    out.figure(format!("kilnd RSS with {n} connections open"), rss::mib(connected.rss_kib));
    out.figure("kilnd peak RSS (VmHWM) after run A", rss::mib(after_a.peak_kib));
    out.figure("kilnd peak RSS (VmHWM) after run B", rss::mib(after_b.peak_kib));

    out.check("run A: errors = 0", a.errors, a.errors == 0);
    out.check("run B: errors = 0", b.errors, b.errors == 0);
    out.check(
        "run B: compiles = distinct new kernels (each compiled once, however many clients ask)",
        format!("{compiles} for {distinct}"),
        compiles == distinct as f64,
    );
    drop(clients);
    daemon.stop().await
}
