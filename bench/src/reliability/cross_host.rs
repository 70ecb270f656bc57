//! Scenario 8: a compile crosses hosts. A fleet of containers (Redis, one kiln-cache, two kilnd
//! hosts, each with its own address): host A compiles a cold graph, then host B asks for the
//! same graph and must get every kernel from the fleet (tier `remote`), byte for byte A's.
//! The smallest proof that the images work together; `scripts/test` runs it where Docker is.

use super::containers::{ContainerFleet, Images, Layout};
use super::graphs;
use super::report::Outcome;
use super::{Run, blocking};
use anyhow::Result;
use kiln_proto::pb;
use std::time::Instant;

pub const TITLE: &str = "containers: a compile crosses hosts";
const TAG: &str = "kiln-reliability scenario 8";
const KERNELS: usize = 4;

pub async fn run(run: &Run, out: &mut Outcome) -> Result<()> {
    let images = Images::from_env();
    out.method = vec![format!(
        "Containers from `{}`, `{}` and `{}` on two private Docker networks: Redis and one kiln-cache on one, \
         kiln-cache and two kilnd hosts on the other, each with its own address. Host A compiles a cold \
         {KERNELS}-kernel graph through its Unix socket; then host B asks for the same graph.",
        images.redis, images.cache, images.kilnd
    )];
    let work = run.bench.dir("cross-host")?;
    let layout = Layout { concurrency: 2, ..Layout::new(1, 2) };
    let started = Instant::now();
    let fleet = blocking(move || ContainerFleet::start("cross-host", &work, &images, &layout)).await??;
    out.figure("fleet started (Redis, kiln-cache, 2 kilnd)", format!("{:.1} s", started.elapsed().as_secs_f64()));
    let req = graphs::graph(TAG, 0..KERNELS);
    let (a, b) = (&fleet.hosts[0], &fleet.hosts[1]);
    let t = Instant::now();
    let job_a = a.connect().await?.compile(req.clone()).await?.collect().await?;
    out.figure("host A: cold compile of the graph", format!("{:.2} s", t.elapsed().as_secs_f64()));
    let t = Instant::now();
    let job_b = b.connect().await?.compile(req.clone()).await?.collect().await?;
    out.figure("host B: the same graph", format!("{:.0} ms", t.elapsed().as_secs_f64() * 1e3));
    let from_a = graphs::artifacts(&req, &job_a)?;
    let from_b = graphs::artifacts(&req, &job_b)?;
    out.figure("host A: tiers", graphs::tiers(&job_a));
    out.figure("host B: tiers", graphs::tiers(&job_b));
    let remote = job_b.kernels.iter().filter(|k| k.tier() == pb::Tier::Remote).count();
    // /metrics and docker are blocking calls of a moment; the harness does as much with processes.
    let (compiles_a, compiles_b) =
        (fleet.host_metric(0, "kiln_compiles_total{")?, fleet.host_metric(1, "kiln_compiles_total{")?);
    out.figure("compiles on A / on B (`/metrics`)", format!("{compiles_a} / {compiles_b}"));

    out.check(
        "host B gets every kernel from the fleet (tier remote)",
        format!("{remote} of {KERNELS}"),
        remote == KERNELS,
    );
    out.check("B's bytes are A's", format!("{} differ", graphs::wrong(&from_b, &from_a)), from_a == from_b);
    out.check(
        "one compile per kernel in the fleet",
        format!("{compiles_a} on A, {compiles_b} on B"),
        compiles_a == KERNELS as f64 && compiles_b == 0.0,
    );
    drop(fleet);
    Ok(())
}
