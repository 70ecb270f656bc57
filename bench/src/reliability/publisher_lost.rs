//! Scenario 12: a kilnd host lost from the network while it publishes a kernel. Its link to the
//! fleet is throttled (`tc`, in its network namespace) so the publish takes seconds; the host
//! compiles, answers its own client, and is disconnected from the fleet network while the
//! envelope is still on its way. kiln-cache stores an artifact only once its whole `Put` arrived
//! (one gRPC message, then one MULTI/EXEC), so no other host may ever be served part of it: the
//! harness reads the key from kiln-cache throughout, and the other hosts must get the whole,
//! right bytes (the lease the lost host held expires and one of them compiles).

use super::containers::{ContainerFleet, Host, Images, Layout, TOKEN};
use super::graphs;
use super::report::Outcome;
use super::{Run, blocking};
use anyhow::{Context, Result, bail};
use kiln_cache_client::{Lookup, RemoteCache};
use kiln_proto::{CacheKey, envelope};
use kiln_tests::kernels;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

pub const TITLE: &str = "containers: a kilnd host lost from the network mid-publish";
const TAG: &str = "kiln-reliability scenario 12";
const STATEMENTS: usize = 3000;
/// The lost host's link to the fleet: slow enough that the publish takes seconds.
const RATE: &str = "32kbit";
const LEASE_TTL: Duration = Duration::from_secs(2);
const HEDGE: Duration = Duration::from_secs(60);
const BOUND: Duration = Duration::from_secs(60);

/// What the harness's own reads of the key from kiln-cache found.
#[derive(Debug, Default)]
struct Reads {
    misses: usize,
    whole: usize,
    /// Reads that gave bytes which do not open as the key's envelope, or a cubin that is not the
    /// reference's: what this scenario must never see.
    bad: Vec<String>,
    errors: usize,
}

pub async fn run(run: &Run, out: &mut Outcome) -> Result<()> {
    let images = Images::from_env();
    out.method = vec![
        format!(
            "Containers: Redis and one kiln-cache on one private network; kiln-cache and three kilnd hosts (A, B, \
             C; `lease_ttl_ms = {}`) on another. Host A's interfaces are throttled to {RATE} (`tc tbf` in its \
             network namespace). A's client asks for a cold kernel whose cubin is about 200 KB; as soon as A \
             has answered (its compile is over and its publish under way), A is disconnected from the fleet \
             network. Then B and C ask for the same kernel at once. A is joined again once they have their answers, \
             and the reads go on 3 s more (A's connection may deliver what it had queued).",
            LEASE_TTL.as_millis()
        ),
        "Throughout, the harness reads the key from kiln-cache every 20 ms and opens whatever it gets; every \
         answer is compared byte for byte with a compile of the same kernel by a separate kilnd with no fleet."
            .into(),
    ];
    let work = run.bench.dir("publisher-lost")?;
    let layout = Layout {
        kilnd_config: format!("lease_ttl_ms = {}\nhedge_secs = {}\n", LEASE_TTL.as_millis(), HEDGE.as_secs()),
        ..Layout::new(1, 3)
    };
    let fleet = blocking(move || ContainerFleet::start("publisher-lost", &work, &images, &layout)).await??;
    let source = format!("// {TAG}\n{}", kernels::slow_kernel(STATEMENTS));
    let req = kernels::request(super::super::bench::TARGET, vec![kernels::kernel("big", kernels::cuda(&source))]);
    let reference = graphs::reference(run, "publisher-lost", &req).await?;
    let expected = reference.values().next().cloned().context("no reference")?;
    out.figure("the kernel's cubin", format!("{} KB", expected.len() / 1024));

    let (a, b, c) = (&fleet.hosts[0], &fleet.hosts[1], &fleet.hosts[2]);
    throttle(a, RATE)?;
    let ip = fleet.caches[0].ip(&fleet.fleet_net)?;
    let cache = RemoteCache::connect(&format!("http://{ip}:7171"), TOKEN)?;

    let started = Instant::now();
    let job_a = a.connect().await?.compile(req.clone()).await?.collect().await?;
    let answered_a = started.elapsed();
    let from_a = graphs::artifacts(&req, &job_a)?;
    let key: CacheKey =
        job_a.kernels.first().context("no result")?.key.parse().map_err(|e| anyhow::anyhow!("key: {e:?}"))?;
    // The cut, at once: what kiln-cache holds then, and what A still had to send.
    let queued = queued_to(a, 7171).unwrap_or(0);
    fleet.disconnect(&fleet.fleet_net, &a.container)?;
    let cut = started.elapsed();
    let at_cut = cache.get(&key).await;
    let ms = |d: Duration| format!("{:.0} ms", d.as_secs_f64() * 1e3);
    out.figure("host A: answered its client after", format!("{} ({:?})", ms(answered_a), job_a.kernels[0].tier()));
    out.figure(
        "host A cut off at",
        format!("{}; {} KB still queued on its connection to kiln-cache", ms(cut), queued / 1024),
    );
    let stored_at_cut = matches!(at_cut, Ok(Lookup::Hit(_, _)));
    out.figure("kiln-cache held the kernel at the cut", stored_at_cut);

    let stop = Arc::new(AtomicBool::new(false));
    let reader = tokio::spawn(read_all_along(cache.clone(), key, expected.clone(), Arc::clone(&stop)));
    let t = Instant::now();
    let (job_b, job_c) = tokio::join!(ask(b, &req), ask(c, &req));
    let others_took = t.elapsed();
    fleet.connect(&fleet.fleet_net, &a.container, None)?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop.store(true, Ordering::Relaxed);
    let reads = reader.await.context("the reader died")?;
    let backgrounded = fleet.host_metric(0, "kiln_fleet_writes_backgrounded_total")?;
    out.figure("fleet writes A's answer stopped waiting for (`/metrics`, after A rejoined)", backgrounded);

    let mut failed = Vec::new();
    let mut wrong = graphs::wrong(&from_a, &reference);
    for (name, job) in [("B", &job_b), ("C", &job_c)] {
        match job {
            Ok((got, tier)) => {
                out.figure(format!("host {name}: tier"), tier);
                wrong += graphs::wrong(got, &reference);
            }
            Err(e) => failed.push(format!("{name}: {e:#}")),
        }
    }
    out.figure("B and C both answered after", ms(others_took));
    out.figure(
        "the harness's reads of the key from kiln-cache: misses / whole entries / errors",
        format!("{} / {} / {}", reads.misses, reads.whole, reads.errors),
    );
    let integrity = fleet.cache_metric(0, "kiln_server_integrity_failures_total")?;
    out.figure("kiln-cache integrity failures (`/metrics`)", integrity);
    let compiles_bc = fleet.host_metric(1, "kiln_compiles_total{")? + fleet.host_metric(2, "kiln_compiles_total{")?;
    let takeovers = fleet.host_metric(1, "kiln_lease_total{result=\"takeover\"}")?
        + fleet.host_metric(2, "kiln_lease_total{result=\"takeover\"}")?;
    out.figure("compiles on B and C / lease takeovers", format!("{compiles_bc} / {takeovers}"));
    let final_read = cache.get(&key).await;
    let final_ok = match &final_read {
        Ok(Lookup::Hit(bytes, _)) => envelope::open(bytes, &key, u64::MAX).is_ok_and(|a| a.bytes.as_ref() == expected),
        _ => false,
    };

    out.check(
        "the cut landed mid-publish: A had answered, kiln-cache did not hold the kernel yet",
        format!("held at the cut: {stored_at_cut}; {} KB queued", queued / 1024),
        !stored_at_cut && at_cut.is_ok(),
    );
    out.check(
        "nothing half-published is ever read: every read of the key is a miss or the whole, right envelope",
        if reads.bad.is_empty() {
            format!("{} reads, none bad", reads.misses + reads.whole)
        } else {
            reads.bad.join("; ")
        },
        reads.bad.is_empty() && integrity == 0.0,
    );
    out.check_none_failed("B and C get the kernel, no call fails", &failed);
    out.check("wrong bytes = 0", wrong, wrong == 0);
    out.check(
        "kiln-cache holds the whole, right kernel at the end (one of B and C published it)",
        match &final_read {
            Ok(Lookup::Hit(_, _)) => format!("stored; equal to the reference: {final_ok}"),
            other => format!("{other:?}"),
        },
        final_ok,
    );
    drop(fleet);
    Ok(())
}

/// Asks `host` for `req` within [`BOUND`]: its artifacts and tier.
async fn ask(host: &Host, req: &kiln_proto::pb::CompileRequest) -> Result<(graphs::Artifacts, String)> {
    let job = tokio::time::timeout(BOUND, async {
        Ok::<_, anyhow::Error>(host.connect().await?.compile(req.clone()).await?.collect().await?)
    })
    .await
    .map_err(|_| anyhow::anyhow!("no answer within {} s", BOUND.as_secs()))??;
    Ok((graphs::artifacts(req, &job)?, graphs::tiers(&job)))
}

/// Reads `key` from kiln-cache every 20 ms until `stop`, opening every entry it gets.
async fn read_all_along(cache: RemoteCache, key: CacheKey, expected: Vec<u8>, stop: Arc<AtomicBool>) -> Reads {
    let mut reads = Reads::default();
    while !stop.load(Ordering::Relaxed) {
        match cache.get(&key).await {
            Ok(Lookup::Miss) => reads.misses += 1,
            Ok(Lookup::Hit(bytes, _)) => match envelope::open(&bytes, &key, u64::MAX) {
                Ok(a) if a.bytes.as_ref() == expected.as_slice() => reads.whole += 1,
                Ok(_) => reads.bad.push("an envelope whose cubin is not the reference's".into()),
                Err(e) => reads.bad.push(format!("{} bytes that do not open: {e}", bytes.len())),
            },
            Ok(Lookup::Negative(n)) => reads.bad.push(format!("a negative entry: {}", n.log)),
            Err(_) => reads.errors += 1,
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    reads
}

/// Throttles every interface of `host` but loopback to `rate` (`tc tbf`, from this machine's
/// tools in the host's network namespace).
fn throttle(host: &Host, rate: &str) -> Result<()> {
    let links = host.container.in_netns(&["ip", "-o", "link", "show"])?;
    let mut done = 0;
    for line in links.lines() {
        let Some(name) = line.split(": ").nth(1).map(|n| n.split('@').next().unwrap_or(n)) else { continue };
        if name == "lo" {
            continue;
        }
        host.container.in_netns(&[
            "tc", "qdisc", "add", "dev", name, "root", "tbf", "rate", rate, "burst", "4kb", "latency", "2s",
        ])?;
        done += 1;
    }
    if done == 0 {
        bail!("{} has no interface to throttle: {links}", host.container.name);
    }
    Ok(())
}

/// Bytes queued to be sent on `host`'s TCP connections to `port` (`ss`'s Send-Q).
fn queued_to(host: &Host, port: u16) -> Result<usize> {
    let text = host.container.in_netns(&["ss", "-tnH", "state", "established"])?;
    let peer = format!(":{port}");
    Ok(text
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            // Recv-Q Send-Q Local Peer
            (f.len() >= 4 && f[3].ends_with(&peer)).then(|| f[1].parse::<usize>().ok()).flatten()
        })
        .sum())
}
