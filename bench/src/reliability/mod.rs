//! The reliability harness behind `scripts/reliability` (`kiln-reliability`): load and chaos
//! scenarios against the real binaries, each reported as figures with its pass/fail condition
//! beside them, written as the `## Reliability` section of BENCHMARKS.md.
//!
//! Like the benchmarks, these are not tests of the suite: they take minutes and load the whole
//! machine. Unlike the benchmarks, every scenario states a condition and asserts it, and a run
//! with a failed condition exits non-zero after writing its figures.
//!
//! One module per scenario, in the order of the report:
//! 1. [`kilnd_clients`]: 1,000 concurrent clients on one kilnd, warm and with compiles.
//! 2. [`cache_clients`]: 1,000 concurrent clients on one kiln-cache over Redis.
//! 3. [`soak`]: minutes of mixed load on a kilnd with the fleet on; memory must stay flat.
//! 4. [`kill_disk`]: kilnd killed mid-write many times; no corrupt entry may ever be served.
//! 5. [`cache_kill`]: kiln-cache killed and restarted under a fleet herd.
//! 6. [`cluster_failover`]: a Redis Cluster master killed under a fleet herd; replicas fail over.
//! 7. [`redis_flush`]: Redis restarted empty; the fleet recompiles each kernel once.
//!
//! Then the fleet as containers, each host with its own address on private Docker networks
//! ([`containers`]), from the images `scripts/images` builds:
//! 8. [`cross_host`]: host A compiles, host B gets every kernel from the fleet.
//! 9. [`holder_partition`]: a lease holder cut off from kiln-cache mid-compile.
//! 10. [`rolling_restart`]: the kiln-cache replicas restarted one at a time under a herd.
//! 11. [`redis_partition`]: kiln-cache cut off from Redis, then healed.
//! 12. [`publisher_lost`]: a kilnd host lost from the network mid-publish.
//! 13. [`cluster_partition`]: a Redis Cluster (each node a container) loses a master to a
//!     partition, not a kill, under a herd; a replica takes over, the old master rejoins.
//! 14. [`writer_gone_bad`]: writers publish wrong cubins under right keys, naming their own host,
//!     none, or an honest host's; refused over honest bytes, caught by the audit where first.
//! 15. [`publish_first`]: writers that publish first (anonymous, a fresh token, a vetted token
//!     turned bad) against fresh hosts fetching at once, under `first-use` and `confirmed`;
//!     wrong cubins served, counted.
//!
//! Shared pieces: [`graphs`] (the kernels and their reference bytes), [`herd`] (fleet hosts and
//! a herd on one graph), [`redis_cluster`] (a Redis Cluster as containers), [`load`] (many
//! clients, latencies and errors), [`rss`] (memory from /proc), [`report`] (the section and its
//! place in BENCHMARKS.md). Processes are started with the benchmark harness's helpers
//! ([`crate::bench`], [`kiln_tests::redis`]).

pub mod cache_clients;
pub mod cache_kill;
pub mod cluster_failover;
pub mod cluster_partition;
pub mod containers;
pub mod cross_host;
pub mod docker;
pub mod graphs;
pub mod herd;
pub mod holder_partition;
pub mod kill_disk;
pub mod kilnd_clients;
pub mod load;
pub mod publish_first;
pub mod publisher_lost;
pub mod redis_cluster;
pub mod redis_flush;
pub mod redis_partition;
pub mod report;
pub mod rolling_restart;
pub mod rss;
pub mod soak;
pub mod writer_gone_bad;

use crate::bench::Bench;
use anyhow::{Result, anyhow};
use report::Outcome;
use std::path::Path;
use std::time::Duration;

/// How much load and chaos. The defaults keep a whole run under 20 minutes on two cores.
#[derive(Debug, Clone)]
pub struct Options {
    /// A development run: fewer clients, kills and a short soak; not figures to publish.
    pub quick: bool,
    /// Concurrent clients of scenarios 1 and 2.
    pub clients: usize,
    /// Calls each of those clients makes.
    pub calls_per_client: usize,
    /// How long the soak runs.
    pub soak: Duration,
    /// How often the soak samples kilnd's memory.
    pub soak_sample: Duration,
    /// kill -9 rounds of scenario 4.
    pub kills: usize,
}

impl Options {
    pub fn new(quick: bool) -> Options {
        match quick {
            false => Options {
                quick,
                clients: 1000,
                calls_per_client: 20,
                soak: Duration::from_secs(600),
                soak_sample: Duration::from_secs(10),
                kills: 100,
            },
            true => Options {
                quick,
                clients: 200,
                calls_per_client: 5,
                soak: Duration::from_secs(60),
                soak_sample: Duration::from_secs(10),
                kills: 10,
            },
        }
    }
}

/// Where things are (the benchmark harness's [`Bench`]: binaries, CUDA root, scratch space)
/// and how much to do.
#[derive(Debug)]
pub struct Run {
    pub bench: Bench,
    pub options: Options,
}

impl Run {
    pub fn new(work: &Path, options: Options) -> Result<Run> {
        Ok(Run { bench: Bench::new(work, crate::bench::Options::default())?, options })
    }
}

/// The scenarios, numbered as in the report.
pub const SCENARIOS: [&str; 15] = [
    kilnd_clients::TITLE,
    cache_clients::TITLE,
    soak::TITLE,
    kill_disk::TITLE,
    cache_kill::TITLE,
    cluster_failover::TITLE,
    redis_flush::TITLE,
    cross_host::TITLE,
    holder_partition::TITLE,
    rolling_restart::TITLE,
    redis_partition::TITLE,
    publisher_lost::TITLE,
    cluster_partition::TITLE,
    writer_gone_bad::TITLE,
    publish_first::TITLE,
];

/// How long scenario `n` (1-based) may run before it is stopped and counted as failed: every
/// scenario is bounded, so a hang is a finding, not a stuck run.
pub fn bound(n: usize, options: &Options) -> Duration {
    let secs = match n {
        1 => 300,
        2 => 180,
        3 => options.soak.as_secs() + 120,
        4 => 60 + 4 * options.kills as u64,
        // Six Redis nodes to start and form a cluster, a failover, a rejoin and two fresh hosts.
        13 => 300,
        // Six cases of a cache, nine kilnds and three herds each.
        14 => 600,
        // Five cases of a cache and up to eight kilnds each.
        15 => 480,
        _ => 180,
    };
    Duration::from_secs(secs)
}

/// Runs scenario `n` (1-based) into `out`.
pub async fn scenario(n: usize, run: &Run, out: &mut Outcome) -> Result<()> {
    match n {
        1 => kilnd_clients::run(run, out).await,
        2 => cache_clients::run(run, out).await,
        3 => soak::run(run, out).await,
        4 => kill_disk::run(run, out).await,
        5 => cache_kill::run(run, out).await,
        6 => cluster_failover::run(run, out).await,
        7 => redis_flush::run(run, out).await,
        8 => cross_host::run(run, out).await,
        9 => holder_partition::run(run, out).await,
        10 => rolling_restart::run(run, out).await,
        11 => redis_partition::run(run, out).await,
        12 => publisher_lost::run(run, out).await,
        13 => cluster_partition::run(run, out).await,
        14 => writer_gone_bad::run(run, out).await,
        15 => publish_first::run(run, out).await,
        _ => Err(anyhow!("there is no scenario {n}")),
    }
}

/// The scenarios `--only` names: numbers separated by commas, with ranges (`4,5,7`, `8-13`). A
/// bare run of digits that is not itself a scenario's number is one scenario per digit (`457`,
/// the older form, from when there were fewer than ten).
pub fn parse_only(spec: &str, count: usize) -> Result<std::collections::BTreeSet<usize>> {
    let number = |text: &str| -> Result<usize> {
        let n: usize = text.trim().parse().map_err(|_| anyhow!("--only {spec}: {text:?} is not a scenario number"))?;
        if n == 0 || n > count {
            return Err(anyhow!("--only {spec}: there is no scenario {n} (1 to {count})"));
        }
        Ok(n)
    };
    let mut wanted = std::collections::BTreeSet::new();
    for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        if let Some((from, to)) = part.split_once('-') {
            wanted.extend(number(from)?..=number(to)?);
        } else if part.len() > 1 && part.chars().all(|c| c.is_ascii_digit()) && number(part).is_err() {
            for digit in part.chars() {
                wanted.insert(number(&digit.to_string())?);
            }
        } else {
            wanted.insert(number(part)?);
        }
    }
    if wanted.is_empty() {
        return Err(anyhow!("--only {spec:?} names no scenario"));
    }
    Ok(wanted)
}

/// Runs blocking harness work (process start-up, `redis-cli`) off the async threads; a panic of
/// the test harness there (which panics with what to install or what did not start) becomes an
/// error of the scenario.
pub async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f).await.map_err(|e| anyhow!("{}", crate::bench::fleet::panic_text(e)))
}

#[cfg(test)]
mod tests {
    use super::parse_only;

    fn only(spec: &str) -> Vec<usize> {
        parse_only(spec, 14).map(|s| s.into_iter().collect()).unwrap_or_default()
    }

    #[test]
    fn only_takes_lists_ranges_and_the_older_run_of_digits() {
        assert_eq!(only("457"), vec![4, 5, 7]);
        assert_eq!(only("10"), vec![10]);
        assert_eq!(only("1,10,12"), vec![1, 10, 12]);
        assert_eq!(only("8-12"), vec![8, 9, 10, 11, 12]);
        assert_eq!(only("9"), vec![9]);
        assert_eq!(only("13"), vec![13]);
        assert_eq!(only("8-13"), vec![8, 9, 10, 11, 12, 13]);
        assert_eq!(only("14"), vec![14]);
        assert!(parse_only("1-15", 14).is_err());
        assert!(parse_only("0", 14).is_err());
        assert!(parse_only("x", 14).is_err());
    }
}
