//! Scenario 11: kiln-cache cut off from Redis (`docker network disconnect`: Redis keeps running
//! and keeps its data), then joined again. kiln-cache must say Redis is down and then up again;
//! the kilnd hosts must keep answering throughout, from their own tiers or by compiling, never
//! with a wrong byte; and once healed, the fleet must serve again what was published before.

use super::containers::{ContainerFleet, Images, Layout};
use super::graphs::{self, Artifacts};
use super::report::Outcome;
use super::{Run, blocking};
use anyhow::{Result, bail};
use kiln_proto::pb;
use std::time::{Duration, Instant};

pub const TITLE: &str = "containers: kiln-cache cut off from Redis, then healed";
const TAG: &str = "kiln-reliability scenario 11";
const KERNELS: usize = 6;
/// How long kiln-cache (and then each host) gets to notice the cut or the heal.
const NOTICE: Duration = Duration::from_secs(30);

/// One call's result, for the figures.
struct Call {
    took: Duration,
    tiers: String,
    artifacts: Result<Artifacts>,
}

async fn call(host: &super::containers::Host, req: &pb::CompileRequest) -> Call {
    let started = Instant::now();
    let job =
        async { Ok::<_, anyhow::Error>(host.connect().await?.compile(req.clone()).await?.collect().await?) }.await;
    let took = started.elapsed();
    match job {
        Ok(job) => Call { took, tiers: graphs::tiers(&job), artifacts: graphs::artifacts(req, &job) },
        Err(e) => Call { took, tiers: String::new(), artifacts: Err(e) },
    }
}

pub async fn run(run: &Run, out: &mut Outcome) -> Result<()> {
    let images = Images::from_env();
    out.method = vec![
        "Containers: Redis and one kiln-cache on one private network, kiln-cache and three kilnd hosts (A, B, C) \
         on another, all with the shipped defaults (kiln-cache's Redis response timeout 10 s, kilnd's fleet call \
         timeout 30 s)."
            .into(),
        format!(
            "Host A compiles graph G ({KERNELS} kernels). Then Redis is disconnected from the store network. \
             While it is cut off: A asks for G again, B asks for G (it holds nothing), C compiles a new graph G2. \
             Redis is connected again; once kiln-cache reports it up and every host's fleet tier is back, C asks \
             for G and B for G2."
        ),
        "Every answer is compared byte for byte with a compile of the same kernels by a separate kilnd with no \
         fleet, outside the containers."
            .into(),
    ];
    let work = run.bench.dir("redis-partition")?;
    let layout = Layout { concurrency: 2, ..Layout::new(1, 3) };
    let fleet = std::sync::Arc::new(
        blocking(move || ContainerFleet::start("redis-partition", &work, &images, &layout)).await??,
    );
    let g = graphs::graph(TAG, 0..KERNELS);
    let g2 = graphs::graph(TAG, KERNELS..2 * KERNELS);
    let reference = graphs::reference(run, "redis-partition", &graphs::graph(TAG, 0..2 * KERNELS)).await?;
    let (a, b, c) = (&fleet.hosts[0], &fleet.hosts[1], &fleet.hosts[2]);
    let ms = |d: Duration| format!("{:.0} ms", d.as_secs_f64() * 1e3);
    let waited = |w: &Result<Duration>| w.as_ref().map_or_else(|e| format!("{e:#}"), |d| ms(*d));
    let mut calls: Vec<(&str, Call)> = Vec::new();

    let first = call(a, &g).await;
    out.figure("before: A compiles G", format!("{} ({})", ms(first.took), first.tiers));
    calls.push(("A: G before the cut", first));

    fleet.disconnect(&fleet.store_net, &fleet.redis[0])?;
    // The hosts are asked at once, before kiln-cache has noticed (what a client meets first),
    // while the harness watches kiln-cache's and the hosts' metrics.
    let (f1, f2) = (std::sync::Arc::clone(&fleet), std::sync::Arc::clone(&fleet));
    let hosts = fleet.hosts.len() as f64;
    let ((a_again, b_g, c_g2), cache_down, hosts_down) = tokio::join!(
        async { tokio::join!(call(a, &g), call(b, &g), call(c, &g2)) },
        blocking(move || wait_for(|| Ok(f1.cache_metric(0, "kiln_server_redis_up")? < 1.0))),
        blocking(move || wait_for(|| Ok(f2.hosts_metric("kiln_remote_up")? < 0.5))),
    );
    let (cache_down, hosts_down) = (cache_down?, hosts_down?);
    out.figure("kiln-cache reports Redis down (`kiln_server_redis_up` 0), after the cut", waited(&cache_down));
    out.figure("every host's fleet tier reads down (`kiln_remote_up` 0), after the cut", waited(&hosts_down));
    let first_wait = b_g.took.max(c_g2.took);
    if first_wait > Duration::from_secs(5) {
        out.notes.push(format!(
            "B's and C's calls during the cut took up to {}: kiln-cache answers a call only once Redis fails it \
             (its response timeout, `redis_timeout_ms`, 10 s by default), and only then does the host's breaker \
             skip the fleet and compile. A host's later calls skip it at once.",
            ms(first_wait)
        ));
    }
    for (label, result) in [("A: G again", a_again), ("B: G", b_g), ("C: G2 (new)", c_g2)] {
        out.figure(format!("cut off: {label}"), format!("{} ({})", ms(result.took), result.tiers));
        calls.push((label, result));
    }

    fleet.connect(&fleet.store_net, &fleet.redis[0], Some("redis"))?;
    let healed = Instant::now();
    let f = std::sync::Arc::clone(&fleet);
    let cache_back = blocking(move || wait_for(|| Ok(f.cache_metric(0, "kiln_server_redis_up")? >= 1.0))).await?;
    out.figure("kiln-cache reports Redis up again, after the heal", waited(&cache_back));
    let f = std::sync::Arc::clone(&fleet);
    let hosts_back = blocking(move || wait_for(|| Ok(f.hosts_metric("kiln_remote_up")? >= hosts))).await?;
    out.figure(
        "every host's fleet tier up again (`kiln_remote_up` 1), after the heal",
        hosts_back.as_ref().map_or_else(|e| format!("{e:#}"), |_| ms(healed.elapsed())),
    );
    let c_g = call(c, &g).await;
    let b_g2 = call(b, &g2).await;
    out.figure("healed: C asks for G", format!("{} ({})", ms(c_g.took), c_g.tiers));
    out.figure("healed: B asks for G2", format!("{} ({})", ms(b_g2.took), b_g2.tiers));
    let c_g_tiers = c_g.tiers.clone();
    let c_g_remote = c_g.artifacts.is_ok() && c_g.tiers.split(", ").all(|t| t == "remote");
    calls.push(("C: G after the heal", c_g));
    calls.push(("B: G2 after the heal", b_g2));

    let mut failed = Vec::new();
    let mut wrong = 0;
    for (label, c) in &calls {
        match &c.artifacts {
            Ok(got) => wrong += graphs::wrong(got, &reference),
            Err(e) => failed.push(format!("{label}: {e:#}")),
        }
    }
    out.check_none_failed("no call fails, cut off or not", &failed);
    out.check("wrong bytes = 0", wrong, wrong == 0);
    out.check(
        "kiln-cache reports Redis down while cut off, and up again once healed",
        format!("down {} after the cut, up {} after the heal", waited(&cache_down), waited(&cache_back)),
        cache_down.is_ok() && cache_back.is_ok(),
    );
    out.check(
        "every host's fleet tier comes back",
        hosts_back.as_ref().map_or_else(|e| format!("{e:#}"), |_| "all up".into()),
        hosts_back.is_ok(),
    );
    out.check(
        "after the heal the fleet serves what was published before the cut (C gets G from it)",
        c_g_tiers,
        c_g_remote,
    );
    drop(fleet);
    Ok(())
}

/// Polls `cond` every 100 ms until it holds; how long that took, or an error past [`NOTICE`].
fn wait_for(mut cond: impl FnMut() -> Result<bool>) -> Result<Duration> {
    let started = Instant::now();
    loop {
        if cond().unwrap_or(false) {
            return Ok(started.elapsed());
        }
        if started.elapsed() > NOTICE {
            bail!("not within {} s", NOTICE.as_secs());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}
