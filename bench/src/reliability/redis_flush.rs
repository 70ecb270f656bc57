//! Scenario 7: Redis restarted empty under a running fleet (killed with SIGKILL and started
//! again with no persistence, so every artifact, lease and manifest is gone), while kiln-cache
//! and the hosts keep running. New hosts joining then herd on the graph the fleet had compiled:
//! the fleet must compile each kernel exactly once more, not once per host.

use super::graphs;
use super::herd;
use super::report::Outcome;
use super::{Run, blocking};
use anyhow::{Result, bail};
use kiln_cache_client::Lookup;
use kiln_proto::CacheKey;
use kiln_tests::redis::{CacheOptions, CacheServer, RedisServer, WRITE_TOKEN};
use std::time::{Duration, Instant};

pub const TITLE: &str = "Redis restarted empty under a fleet";
const TAG: &str = "kiln-reliability scenario 7";
/// Hosts before the restart, and as many new ones after it.
const HOSTS: usize = 4;
const KERNELS: usize = 32;
/// How long kiln-cache may take to answer again once Redis is back.
const RECONNECT_BOUND: Duration = Duration::from_secs(30);

/// Waits until kiln-cache answers a `Get` of a key nobody stores with a miss, for at most
/// `bound`; returns how long that took, or the last answer when it never came.
pub async fn wait_answering(cache: &CacheServer, bound: Duration) -> Result<Duration> {
    let client = cache.client(WRITE_TOKEN);
    let probe = CacheKey::from_bytes([7; 32]);
    let started = Instant::now();
    loop {
        let answer = client.get(&probe).await;
        if let Ok(Lookup::Miss) = answer {
            return Ok(started.elapsed());
        }
        if started.elapsed() > bound {
            bail!("kiln-cache did not answer a Get within {} s; last answer: {answer:?}", bound.as_secs());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub async fn run(run: &Run, out: &mut Outcome) -> Result<()> {
    out.method = vec![
        format!(
            "A private redis-server (Unix socket, no persistence), a kiln-cache over it, and {HOSTS} kilnd hosts \
             (each `--concurrency {}`, own empty cache) herding on one cold {KERNELS}-kernel graph. Then Redis is \
             killed with SIGKILL and started again, empty, on the same socket; kiln-cache and the hosts keep \
             running. Once kiln-cache answers again, {HOSTS} new hosts join (empty caches) and all {} hosts herd on \
             the same graph.",
            run.bench.cores,
            2 * HOSTS
        ),
        "Compiles are the sum of `kiln_compiles_total` over every host. The old hosts answer from their own \
         tiers; the new ones find nothing in the fleet, so the fleet must compile each kernel once, under fleet \
         leases, and the new hosts share the results. Every answer is compared byte for byte with a compile by a \
         separate kilnd with no fleet."
            .into(),
    ];
    let redis = blocking(RedisServer::start).await?;
    let options = CacheOptions::new(vec![redis.url()]);
    let cache = blocking(move || CacheServer::start(options)).await?;
    let uri = cache.uri();
    let mut daemons = herd::hosts(run, "flush-before", HOSTS, &uri).await?;
    let req = graphs::graph(TAG, 0..KERNELS);
    let reference = graphs::reference(run, "flush", &req).await?;
    let first = herd::herd(&daemons, &req, 0).await;
    let compiles_first = herd::compiles(&daemons)?;
    let wrong_first = herd::figures(out, "before the restart", &first, compiles_first, &reference);

    let redis = blocking(move || {
        let mut redis = redis;
        redis.stop();
        redis.restart();
        redis
    })
    .await?;
    let reconnect = wait_answering(&cache, RECONNECT_BOUND).await?;
    out.figure("kiln-cache answering again after Redis's restart", format!("{:.0} ms", reconnect.as_secs_f64() * 1e3));
    daemons.extend(herd::hosts(run, "flush-after", HOSTS, &uri).await?);
    let before = herd::compiles(&daemons)?;
    let second = herd::herd(&daemons, &req, 0).await;
    let compiles_second = herd::compiles(&daemons)? - before;
    let wrong_second = herd::figures(out, "after the restart", &second, compiles_second, &reference);

    let errors = first.errors.len() + second.errors.len() + first.failed_hosts() + second.failed_hosts();
    out.check("every host gets every kernel, no call fails", errors, errors == 0);
    out.check("wrong bytes = 0", wrong_first + wrong_second, wrong_first + wrong_second == 0);
    out.check(
        "before the restart: compiles = kernels",
        format!("{compiles_first} for {KERNELS}"),
        compiles_first == KERNELS as f64,
    );
    out.check(
        "after the restart: compiles = kernels (each recompiled once by the fleet)",
        format!("{compiles_second} for {KERNELS}"),
        compiles_second == KERNELS as f64,
    );
    drop((daemons, cache, redis));
    Ok(())
}
