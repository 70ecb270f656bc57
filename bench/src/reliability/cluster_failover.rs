//! Scenario 6: a Redis Cluster of three masters with a replica each loses a master (SIGKILL)
//! while a fleet herds on one cold graph through kiln-cache; a replica takes over. Clients may
//! see at most one failed call (retried), never wrong bytes.

use super::graphs;
use super::herd;
use super::report::Outcome;
use super::{Run, blocking};
use anyhow::{Context, Result, bail};
use kiln_tests::redis::{CacheOptions, CacheServer, RedisCluster};
use std::time::{Duration, Instant};

pub const TITLE: &str = "Redis Cluster master lost under a herd";
const TAG: &str = "kiln-reliability scenario 6";
const MASTERS: usize = 3;
const HOSTS: usize = 4;
const KERNELS: usize = 48;
/// How long the surviving nodes get to promote a replica (the node timeout is 2 s).
const FAILOVER_BOUND: Duration = Duration::from_secs(30);
/// How long kiln-cache gets, after the herd, to answer through the new master.
const ANSWER_BOUND: Duration = Duration::from_secs(15);

/// Kills a master and waits until a surviving node sees three masters and state ok again;
/// returns the cluster, the killed port and how long the failover took.
fn fail_over(mut cluster: RedisCluster) -> Result<(RedisCluster, u16, Duration)> {
    let masters = cluster.masters_seen_by(cluster.ports[0]);
    let victim = *masters.first().context("the cluster has no master")?;
    let witness = *cluster.ports.iter().find(|p| **p != victim).context("a one-node cluster")?;
    cluster.kill9(victim);
    let killed = Instant::now();
    loop {
        let masters = cluster.masters_seen_by(witness);
        if masters.len() == MASTERS && !masters.contains(&victim) && cluster.state_ok_on(witness) {
            return Ok((cluster, victim, killed.elapsed()));
        }
        if killed.elapsed() > FAILOVER_BOUND {
            bail!("no replica took over within {} s of the kill (masters seen: {masters:?})", FAILOVER_BOUND.as_secs());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

pub async fn run(run: &Run, out: &mut Outcome) -> Result<()> {
    out.method = vec![
        format!(
            "A Redis Cluster of {MASTERS} masters and {MASTERS} replicas on loopback (`cluster-node-timeout` 2 s, no \
             persistence), a kiln-cache with `--redis-cluster` over it, and {HOSTS} kilnd hosts (each \
             `--concurrency {}`, own empty cache). A barrier releases one client per host, all asking for the same \
             cold {KERNELS}-kernel graph; 50–300 ms in, one master is killed with SIGKILL. A failed call is retried \
             once on a new connection.",
            run.bench.cores
        ),
        "Every answer is compared byte for byte with a compile of the same graph by a separate kilnd with no \
         fleet. Failover time runs from the kill until a surviving node sees three masters and `cluster_state:ok`. \
         After the failover a fresh host asks for the graph once more."
            .into(),
    ];
    let cluster = blocking(|| RedisCluster::start_with_replicas(MASTERS, 1)).await?;
    let options = CacheOptions { cluster: true, ..CacheOptions::new(cluster.urls()) };
    let cache = blocking(move || CacheServer::start(options)).await?;
    let uri = cache.uri();
    let daemons = herd::hosts(run, "failover", HOSTS, &uri).await?;
    let req = graphs::graph(TAG, 0..KERNELS);
    let reference = graphs::reference(run, "failover", &req).await?;
    let before = herd::compiles(&daemons)?;
    let (struck, chaos) = herd::under_chaos(&daemons, &req, blocking(move || fail_over(cluster))).await;
    let (cluster, victim, failover) = chaos??;
    let h = &struck.herd;
    let compiles = herd::compiles(&daemons)? - before;
    let answering = super::redis_flush::wait_answering(&cache, ANSWER_BOUND).await;
    out.figure(
        "master killed",
        format!("port {victim}, {:.0} ms after the release", struck.struck.as_secs_f64() * 1e3),
    );
    out.figure("failover (a replica promoted, state ok)", format!("{:.1} s", failover.as_secs_f64()));
    let wrong = herd::figures(out, "herd", h, compiles, &reference);
    let fresh = herd::hosts(run, "failover-after", 1, &uri).await?;
    let after = herd::herd(&fresh, &req, 0).await;
    out.figure("after the failover, a fresh host: results by tier", after.tiers_text());
    out.figure("after the failover, a fresh host: errors", after.errors.len());
    let answered = match &answering {
        Ok(took) => format!("a miss, {:.0} ms after the herd", took.as_secs_f64() * 1e3),
        Err(e) => format!("{e:#}"),
    };

    out.check(
        "every host gets every kernel with at most one retry",
        format!("most retries {}, {} hosts without the graph", h.most_retries(), h.failed_hosts()),
        h.most_retries() <= 1 && h.failed_hosts() == 0,
    );
    out.check("wrong bytes = 0", wrong, wrong == 0);
    out.check(
        "after the failover, kiln-cache answers (a `Get` of an absent key is a miss)",
        answered,
        answering.is_ok(),
    );
    struck.check_landed(out);
    drop((fresh, daemons, cache, cluster));
    Ok(())
}
