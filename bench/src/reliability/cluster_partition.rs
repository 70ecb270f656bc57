//! Scenario 13: a Redis Cluster master cut off from the store network (`docker network
//! disconnect`: it keeps running and keeps its data, as in a network partition), not killed, while
//! a herd of kilnd hosts compiles through two kiln-cache replicas in cluster mode. A dead master
//! refuses connections at once (scenario 6); a partitioned one answers nothing, so every command
//! for its slots waits out kiln-cache's Redis timeout until the cluster has promoted its replica.
//! The hosts must keep answering (compiling locally when the fleet cannot answer), never with a
//! wrong byte; the cluster must fail over; once healed, the old master must rejoin as a replica
//! and the fleet must serve hits again.

use super::containers::{Container, ContainerFleet, Host, Images, Layout, Store};
use super::graphs;
use super::herd;
use super::redis_cluster::{self, ClusterSpec, Node, NodeCli};
use super::report::Outcome;
use super::{Run, blocking};
use anyhow::{Context, Result, bail};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

pub const TITLE: &str = "containers: a Redis Cluster master partitioned (not killed) under a herd";
const TAG: &str = "kiln-reliability scenario 13";
const MASTERS: usize = 3;
const HOSTS: usize = 4;
const KERNELS: usize = 24;
/// `cluster-node-timeout`: how long a node may be unreachable before it is suspected failed.
const NODE_TIMEOUT: Duration = Duration::from_secs(3);
/// The failover's bound. No failover can come within the node timeout itself: a node is only
/// suspected once it has not answered that long. Then the suspicion must reach most masters by
/// gossip (up to about another node timeout) before it is `fail`, the replica waits 0.5 to 1 s
/// and asks for votes: twice the node timeout and 2 s more.
const FAILOVER_BOUND: Duration = Duration::from_secs(2 * NODE_TIMEOUT.as_secs() + 2);
/// How long the harness watches for the failover before it gives up and heals.
const WATCH: Duration = Duration::from_secs(60);
/// The longest any host's client may wait for the whole graph. A host whose fleet call meets the
/// cut-off master waits out kiln-cache's Redis response timeout (10 s by default); a holder whose
/// publish failed so cannot release its lease (its breaker is open), and the hosts waiting for
/// that kernel retry the lease once per lease TTL (10 s by default), so they take it over only
/// after it expires: up to three TTLs in all, and the compiles they then do.
const WAIT_BOUND: Duration = Duration::from_secs(45);
/// How long the healed node gets to rejoin as a replica, and the fleet to read up again.
const REJOIN_BOUND: Duration = Duration::from_secs(30);
const FLEET_BACK: Duration = Duration::from_secs(30);
/// How often the harness samples the cluster's and the fleet's state.
const SAMPLE: Duration = Duration::from_millis(100);

fn spec() -> ClusterSpec {
    ClusterSpec { masters: MASTERS, replicas: 1, node_timeout: NODE_TIMEOUT }
}

/// The master to cut off and the nodes that watch it.
#[derive(Debug, Clone)]
struct Target {
    victim: Container,
    /// Its alias on the store network (`redis-<i>`), given back at the heal.
    alias: String,
    id: String,
    /// Its replica, the node expected to take over.
    replica_id: String,
    victim_cli: NodeCli,
    /// Another master's redis-cli: its view of the cluster is read throughout.
    witness: NodeCli,
    /// How many of the herd's kernels live in the victim's slots.
    keys_served: usize,
}

impl Target {
    /// The master that serves the most of `keys` (cache keys in hex), its replica and a witness.
    fn choose(fleet: &ContainerFleet, keys: &[String]) -> Result<Target> {
        let first = fleet.redis.first().context("no Redis node")?;
        let nodes = NodeCli::new(first)?.nodes()?;
        let served = |n: &Node| keys.iter().filter(|k| n.serves(redis_cluster::slot(k))).count();
        let master =
            nodes.iter().filter(|n| n.is_master()).max_by_key(|n| served(n)).context("the cluster has no master")?;
        let replica = nodes
            .iter()
            .find(|n| n.master_of.as_deref() == Some(master.id.as_str()))
            .context("the master to cut off has no replica")?;
        let container_at = |node: &Node| -> Result<(usize, Container)> {
            for (i, c) in fleet.redis.iter().enumerate() {
                if Some(c.ip(&fleet.store_net)?) == node.ip {
                    return Ok((i, c.clone()));
                }
            }
            bail!("no container has node {}'s address {:?}", node.id, node.ip)
        };
        let (i, victim) = container_at(master)?;
        let other = nodes.iter().find(|n| n.is_master() && n.id != master.id).context("a one-master cluster")?;
        Ok(Target {
            victim_cli: NodeCli::new(&victim)?,
            victim,
            alias: format!("redis-{i}"),
            id: master.id.clone(),
            replica_id: replica.id.clone(),
            witness: NodeCli::new(&container_at(other)?.1)?,
            keys_served: served(master),
        })
    }
}

/// What the harness saw of the failover, each time after the cut.
#[derive(Debug, Default)]
struct Failover {
    /// The witness flags the cut-off master `fail` (most masters agree).
    judged_failed: Option<Duration>,
    /// The witness sees the replica as master of slots, and `cluster_state:ok`.
    promoted: Option<Duration>,
    /// The cut-off master itself reports `cluster_state:fail` (it lost the majority).
    victim_sees_fail: Option<Duration>,
}

/// Cuts the victim off and watches, from the witness and from the victim itself (reached in its
/// own network namespace), until the replica is promoted or [`WATCH`] passes; returns when the
/// cut was made (`docker network disconnect` returned) and what was seen. Blocking.
fn partition(fleet: &ContainerFleet, target: &Target) -> Result<(Instant, Failover)> {
    fleet.disconnect(&fleet.store_net, &target.victim)?;
    let cut = Instant::now();
    let mut seen = Failover::default();
    while cut.elapsed() < WATCH {
        let nodes = target.witness.nodes().unwrap_or_default();
        let node = |id: &str| nodes.iter().find(|n| n.id == id).cloned();
        if seen.judged_failed.is_none() && node(&target.id).is_some_and(|n| n.failed()) {
            seen.judged_failed = Some(cut.elapsed());
        }
        if seen.promoted.is_none()
            && node(&target.replica_id).is_some_and(|n| n.is_master() && !n.slots.is_empty())
            && target.witness.reports(&["CLUSTER", "INFO"], "cluster_state:ok")
        {
            seen.promoted = Some(cut.elapsed());
        }
        if seen.victim_sees_fail.is_none() && target.victim_cli.reports(&["CLUSTER", "INFO"], "cluster_state:fail") {
            seen.victim_sees_fail = Some(cut.elapsed());
        }
        if seen.promoted.is_some() && seen.victim_sees_fail.is_some() {
            break;
        }
        std::thread::sleep(SAMPLE);
    }
    Ok((cut, seen))
}

/// Joins the victim to the store network again and waits until the witness sees it as a
/// connected, healthy replica of the node that took over, and the victim reports its link to that
/// master up; returns how long that took. Blocking.
fn heal(fleet: &ContainerFleet, target: &Target) -> Result<Duration> {
    fleet.connect(&fleet.store_net, &target.victim, Some(&target.alias))?;
    let healed = Instant::now();
    loop {
        let nodes = target.witness.nodes().unwrap_or_default();
        let rejoined = nodes.iter().find(|n| n.id == target.id).is_some_and(|n| {
            n.is_replica() && !n.failed() && n.connected && n.master_of.as_deref() == Some(target.replica_id.as_str())
        });
        let synced = target.victim_cli.reports(&["INFO", "replication"], "role:slave")
            && target.victim_cli.reports(&["INFO", "replication"], "master_link_status:up");
        if rejoined && synced {
            return Ok(healed.elapsed());
        }
        if healed.elapsed() > REJOIN_BOUND {
            bail!("not within {} s (the witness sees: {:?})", REJOIN_BOUND.as_secs(), nodes);
        }
        std::thread::sleep(SAMPLE);
    }
}

/// When a state read down, sampled every [`SAMPLE`] from the herd's start until stopped.
#[derive(Debug, Default, Clone, Copy)]
struct Window {
    first_down: Option<Instant>,
    last_down: Option<Instant>,
}

impl Window {
    /// "down from 3.1 s to 9.8 s after the cut", or "never down".
    fn text(&self, cut: Instant) -> String {
        let after = |t: Instant| t.saturating_duration_since(cut).as_secs_f64();
        match (self.first_down, self.last_down) {
            (Some(first), Some(last)) => {
                format!("down from {:.1} s to {:.1} s after the cut", after(first), after(last))
            }
            _ => "never read down".into(),
        }
    }
}

/// Samples each of `ups` (true while up) until `stop`; one window each. Blocking.
fn watch_down(stop: &AtomicBool, ups: &[&dyn Fn() -> bool]) -> Vec<Window> {
    let mut windows = vec![Window::default(); ups.len()];
    while !stop.load(Ordering::Relaxed) {
        for (w, up) in windows.iter_mut().zip(ups) {
            if !up() {
                let now = Instant::now();
                w.first_down.get_or_insert(now);
                w.last_down = Some(now);
            }
        }
        std::thread::sleep(SAMPLE);
    }
    windows
}

/// kiln-cache's answers other than `ok`, by gRPC code, summed over the replicas.
fn refused_by_code(fleet: &ContainerFleet) -> Result<BTreeMap<String, f64>> {
    let mut codes = BTreeMap::new();
    for i in 0..fleet.caches.len() {
        let text = kiln_tests::http::get(fleet.cache_metrics(i)?, "/metrics")?;
        for line in text.lines().filter(|l| l.starts_with("kiln_server_requests_total{")) {
            let code = line.split("code=\"").nth(1).and_then(|rest| rest.split('"').next()).unwrap_or("?");
            let n: f64 = line.rsplit_once(' ').and_then(|(_, v)| v.parse().ok()).unwrap_or(0.0);
            if code != "ok" && n > 0.0 {
                *codes.entry(code.to_string()).or_insert(0.0) += n;
            }
        }
    }
    Ok(codes)
}

/// A fresh host's answer for `req`: its artifacts and tiers, or why it failed.
async fn fresh_ask(host: &Host, req: &kiln_proto::pb::CompileRequest) -> Result<(graphs::Artifacts, String)> {
    let job = host.connect().await?.compile(req.clone()).await?.collect().await?;
    Ok((graphs::artifacts(req, &job)?, graphs::tiers(&job)))
}

fn secs(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

pub async fn run(run: &Run, out: &mut Outcome) -> Result<()> {
    let images = Images::from_env();
    out.method = vec![
        format!(
            "Containers: a Redis Cluster of {MASTERS} masters and {MASTERS} replicas, each node a container with its \
             own address on the store network (`cluster-node-timeout` {} ms, no persistence, made with \
             `redis-cli --cluster create` inside a node), and two kiln-cache replicas with every node as a \
             `--redis-cluster` seed; the replicas and {HOSTS} kilnd hosts (`--concurrency 1`, the shared name \
             `kiln-cache`) on the fleet network. kiln-cache and kilnd run with the shipped defaults (kiln-cache's \
             Redis response timeout 10 s, kilnd's fleet call timeout 30 s).",
            NODE_TIMEOUT.as_millis()
        ),
        format!(
            "The master to cut off is the one whose slots hold the most of the herd's {KERNELS} kernels (their \
             keys from the reference compile, slots by CRC16 of the hash tag). A barrier releases one client per \
             host, all asking for the same cold graph; 50–300 ms in, that master is disconnected from the store \
             network (`docker network disconnect`): it keeps running. A failed call is retried once, and counted."
        ),
        "The harness reads `CLUSTER NODES` and `CLUSTER INFO` from another master every 100 ms (this machine's \
         redis-cli in the node's network namespace, so times are to about 0.2 s), until the cut-off master's \
         replica serves its slots and that master says `cluster_state:ok`; once the herd is done too, the cut-off \
         master is connected again, and the harness waits until it is a connected replica of the promoted node \
         with its replication link up. Meanwhile it samples each kiln-cache's `kiln_server_redis_up` and every \
         host's `kiln_remote_up` (its breaker)."
            .into(),
        "After the heal, once the fleet reads up again, a fresh host asks for the graph (what the fleet kept \
         through the partition; it compiles and publishes the rest), then a second fresh host, which must get \
         every kernel from the fleet. Every answer is compared byte for byte with a compile of the same graph by \
         a separate kilnd with no fleet, outside the containers."
            .into(),
    ];
    let work = run.bench.dir("cluster-partition")?;
    let layout = Layout::new(2, HOSTS);
    let store = Store::Cluster(spec());
    let fleet = Arc::new(
        blocking(move || ContainerFleet::start_on("cluster-partition", &work, &images, &layout, &store)).await??,
    );
    let req = graphs::graph(TAG, 0..KERNELS);
    let (reference, keys) = graphs::reference_keyed(run, "cluster-partition", &req).await?;
    let keys: Vec<String> = keys.into_values().collect();
    let f = Arc::clone(&fleet);
    let target = blocking(move || Target::choose(&f, &keys)).await??;
    out.figure(
        "the master cut off",
        format!(
            "{} (`{}`): its slots hold {} of the {KERNELS} kernels",
            target.alias, target.victim.name, target.keys_served
        ),
    );

    // The fleet's state, sampled from the release until the fleet reads up after the heal; the
    // addresses are read once (a `docker inspect` per sample would load the machine).
    let stop = Arc::new(AtomicBool::new(false));
    let sampler: tokio::task::JoinHandle<Vec<Window>> = {
        let caches = (0..fleet.caches.len()).map(|i| fleet.cache_metrics(i)).collect::<Result<Vec<_>>>()?;
        let hosts = fleet.hosts.iter().map(|h| h.container.ip(&fleet.fleet_net)).collect::<Result<Vec<_>>>()?;
        let stop = Arc::clone(&stop);
        tokio::task::spawn_blocking(move || {
            let read = |addr, series: &str| {
                kiln_tests::http::get(addr, "/metrics").map_or(0.0, |text| super::containers::sum_series(&text, series))
            };
            let cache = |i: usize| {
                let addr = caches[i];
                move || read(addr, "kiln_server_redis_up") >= 1.0
            };
            let every_host = || {
                hosts.iter().map(|ip| read(std::net::SocketAddr::new(*ip, 9464), "kiln_remote_up")).sum::<f64>()
                    >= HOSTS as f64
            };
            let (c0, c1) = (cache(0), cache(1));
            let ups: [&dyn Fn() -> bool; 3] = [&c0, &c1, &every_host];
            watch_down(&stop, &ups)
        })
    };
    let before_compiles = fleet.hosts_metric("kiln_compiles_total{")?;
    let chaos = {
        let (f, t) = (Arc::clone(&fleet), target.clone());
        async move { blocking(move || partition(&f, &t)).await? }
    };
    let (struck, chaos) = herd::under_chaos(&fleet.hosts, &req, chaos).await;
    let (cut, failover) = chaos?;
    let h = &struck.herd;
    let compiles = fleet.hosts_metric("kiln_compiles_total{")? - before_compiles;
    let seen = |d: Option<Duration>| d.map_or_else(|| format!("not within {} s", WATCH.as_secs()), secs);
    out.figure("cut at, after the release", format!("{:.0} ms", struck.struck.as_secs_f64() * 1e3));
    out.figure("the cut-off master judged `fail` by the others, after the cut", seen(failover.judged_failed));
    out.figure("its replica promoted (serves its slots, `cluster_state:ok`), after the cut", seen(failover.promoted));
    out.figure(
        "the cut-off master reports `cluster_state:fail` itself, after the cut",
        seen(failover.victim_sees_fail),
    );
    let wrong = herd::figures(out, "herd", h, compiles, &reference);
    let slowest = h.took.iter().copied().max().unwrap_or_default();
    if slowest > Duration::from_secs(12) {
        out.notes.push(format!(
            "The slowest host waited {}: kernels whose lease holder could not publish (its put went to the cut-off \
             master and waited out kiln-cache's 10 s Redis timeout) nor then release the lease (its breaker had \
             opened) were waited for until the lease expired; a waiter retries a held lease once per lease TTL \
             (`lease_ttl_ms`, 10 s by default).",
            secs(slowest)
        ));
    }
    out.figure(
        "herd: each host's wait for the whole graph",
        h.took.iter().map(|d| secs(*d)).collect::<Vec<_>>().join(", "),
    );

    let f = Arc::clone(&fleet);
    let t = target.clone();
    let rejoined = blocking(move || heal(&f, &t)).await?;
    out.figure(
        "healed: the old master a connected replica of the promoted node, its link up, after the heal",
        rejoined.as_ref().map_or_else(|e| format!("{e:#}"), |d| secs(*d)),
    );
    let f = Arc::clone(&fleet);
    let back = blocking(move || {
        let started = Instant::now();
        while started.elapsed() < FLEET_BACK {
            let caches = (0..f.caches.len()).all(|i| f.cache_metric(i, "kiln_server_redis_up").is_ok_and(|u| u >= 1.0));
            if caches && f.hosts_metric("kiln_remote_up").is_ok_and(|u| u >= HOSTS as f64) {
                return Ok(started.elapsed());
            }
            std::thread::sleep(SAMPLE);
        }
        bail!("not within {} s", FLEET_BACK.as_secs())
    })
    .await?;
    stop.store(true, Ordering::Relaxed);
    let windows = sampler.await.context("the sampler died")?;
    out.figure(
        "the fleet reads up again (both kiln-caches' Redis, every host's fleet tier), after the rejoin",
        back.as_ref().map_or_else(|e| format!("{e:#}"), |d| secs(*d)),
    );
    for (i, w) in windows.iter().take(2).enumerate() {
        out.figure(format!("kiln-cache {i}: `kiln_server_redis_up`"), w.text(cut));
    }
    out.figure("hosts: `kiln_remote_up` (any host's breaker open)", windows[2].text(cut));
    let refused = refused_by_code(&fleet)?;
    out.figure(
        "kiln-cache: answers other than ok, by code (both replicas)",
        if refused.is_empty() {
            "none".into()
        } else {
            refused.iter().map(|(c, n)| format!("{c} {n}")).collect::<Vec<_>>().join(", ")
        },
    );
    let redis_errors = fleet.cache_metric(0, "kiln_server_redis_errors_total")?
        + fleet.cache_metric(1, "kiln_server_redis_errors_total")?;
    out.figure("kiln-cache: Redis commands failed (`kiln_server_redis_errors_total`, both)", redis_errors);
    out.figure(
        "hosts: fleet lookups / writes / leases that failed",
        format!(
            "{} / {} / {}",
            fleet.hosts_metric("kiln_cache_lookups_total{tier=\"remote\",result=\"error\"}")?,
            fleet.hosts_metric("kiln_cache_writes_total{tier=\"remote\",result=\"error\"}")?,
            fleet.hosts_metric("kiln_lease_total{result=\"error\"}")?
        ),
    );

    let (first_fresh, second_fresh) = {
        let f = Arc::clone(&fleet);
        let first = blocking(move || f.fresh_host(HOSTS)).await??;
        let got_first = fresh_ask(&first, &req).await;
        let f = Arc::clone(&fleet);
        let second = blocking(move || f.fresh_host(HOSTS + 1)).await??;
        (got_first, fresh_ask(&second, &req).await)
    };
    let mut failed: Vec<String> = h.errors.clone();
    let mut wrong_fresh = 0;
    for (label, got) in [("the first fresh host", &first_fresh), ("the second fresh host", &second_fresh)] {
        match got {
            Ok((artifacts, tiers)) => {
                let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
                for t in tiers.split(", ") {
                    *counts.entry(t).or_insert(0) += 1;
                }
                let text = counts.iter().map(|(t, n)| format!("{t} {n}")).collect::<Vec<_>>().join(", ");
                out.figure(format!("after the heal, {label}: results by tier"), text);
                wrong_fresh += graphs::wrong(artifacts, &reference);
            }
            Err(e) => failed.push(format!("{label}: {e:#}")),
        }
    }

    out.check(
        "no call fails (herd and fresh hosts; a failed attempt counts even if its retry succeeded)",
        if failed.is_empty() { "0".into() } else { failed.join("; ") },
        failed.is_empty() && h.failed_hosts() == 0,
    );
    out.check(
        format!("no host waits past {} s for the graph", WAIT_BOUND.as_secs()),
        format!("the slowest waited {}", secs(slowest)),
        slowest <= WAIT_BOUND,
    );
    out.check("wrong bytes = 0", wrong + wrong_fresh, wrong + wrong_fresh == 0);
    out.check(
        format!(
            "the cluster fails over: the replica is promoted within {} s of the cut (`cluster-node-timeout` {} s \
             to suspect the master, as long again for the others to agree, then the election)",
            FAILOVER_BOUND.as_secs(),
            NODE_TIMEOUT.as_secs()
        ),
        seen(failover.promoted),
        failover.promoted.is_some_and(|d| d <= FAILOVER_BOUND),
    );
    out.check(
        format!(
            "after the heal the old master rejoins as a replica of the promoted node within {} s",
            REJOIN_BOUND.as_secs()
        ),
        rejoined.as_ref().map_or_else(|e| format!("{e:#}"), |d| secs(*d)),
        rejoined.is_ok(),
    );
    out.check(
        "after the heal the fleet serves hits again: a fresh host gets every kernel from it",
        second_fresh.as_ref().map_or_else(|e| format!("{e:#}"), |(_, tiers)| tiers.clone()),
        second_fresh.as_ref().is_ok_and(|(_, tiers)| tiers.split(", ").all(|t| t == "remote")),
    );
    struck.check_landed(out);
    drop(fleet);
    Ok(())
}
