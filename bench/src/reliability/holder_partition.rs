//! Scenario 9: the host holding a kernel's fleet lease is cut off from kiln-cache mid-compile
//! (`docker network disconnect`: not killed; it keeps compiling and answers its own client
//! through its socket). Its lease can no longer be renewed and expires; exactly one waiter must
//! take it over within the hedge bound and publish, the other waiter must get that publish, no
//! host may wait forever, and every host's bytes must be the same. The holder must answer its
//! own client at once from what it compiled, not after its publish to the fleet times out.

use super::containers::{ContainerFleet, Images, Layout};
use super::graphs;
use super::herd;
use super::report::Outcome;
use super::{Run, blocking};
use anyhow::{Context, Result, bail};
use kiln_cache_client::{Lookup, RemoteCache};
use kiln_proto::{CacheKey, envelope, pb};
use kiln_tests::kernels;
use std::time::{Duration, Instant};

pub const TITLE: &str = "containers: a lease holder cut off from kiln-cache mid-compile";
const TAG: &str = "kiln-reliability scenario 9";
const HOSTS: usize = 3;
/// Statements of the slow kernel: a few seconds of NVRTC, so the cut lands mid-compile.
const STATEMENTS: usize = 6000;
const LEASE_TTL: Duration = Duration::from_secs(2);
const HEDGE: Duration = Duration::from_secs(60);
/// How long the harness looks for the holder, and then for the end of its compile, before
/// giving up.
const FIND_HOLDER: Duration = Duration::from_secs(30);
/// How long after its compile ends the cut-off holder may take to answer its client: kilnd waits
/// at most half a second for a fleet publish; the rest is room for a loaded machine.
const HOLDER_ANSWER: Duration = Duration::from_secs(3);

pub async fn run(run: &Run, out: &mut Outcome) -> Result<()> {
    let images = Images::from_env();
    out.method = vec![
        format!(
            "Containers: Redis and one kiln-cache on one private network; kiln-cache and {HOSTS} kilnd hosts \
             (`--concurrency 1`, `lease_ttl_ms = {}`, `hedge_secs = {}`) on another. A barrier releases one \
             client per host (through its socket), all asking for the same cold kernel that takes NVRTC a few \
             seconds. The harness finds the host compiling it (the lease holder: `Stats.inflight_compiles`) and \
             disconnects that host from the fleet network; it is joined again once every client has its answer.",
            LEASE_TTL.as_millis(),
            HEDGE.as_secs()
        ),
        "Every answer is compared byte for byte with a compile of the same kernel by a separate kilnd with no \
         fleet, outside the containers. What kiln-cache stores for the key is read back with a `Get` and opened."
            .into(),
    ];
    let work = run.bench.dir("holder-partition")?;
    let layout = Layout {
        kilnd_config: format!("lease_ttl_ms = {}\nhedge_secs = {}\n", LEASE_TTL.as_millis(), HEDGE.as_secs()),
        ..Layout::new(1, HOSTS)
    };
    let fleet = blocking(move || ContainerFleet::start("holder-partition", &work, &images, &layout)).await??;
    let source = format!("// {TAG}\n{}", kernels::slow_kernel(STATEMENTS));
    let req = kernels::request(super::super::bench::TARGET, vec![kernels::kernel("slow", kernels::cuda(&source))]);
    let reference = graphs::reference(run, "holder-partition", &req).await?;

    let (struck, chaos) = herd::under_chaos_after(&fleet.hosts, &req, Duration::ZERO, cut_the_holder(&fleet)).await;
    let cut = chaos?;
    let holder = cut.holder;
    fleet.connect(&fleet.fleet_net, &fleet.hosts[holder].container, None)?;
    let h = &struck.herd;
    let ms = |d: Duration| format!("{:.0} ms", d.as_secs_f64() * 1e3);
    out.figure(
        "holder cut off from the fleet network",
        format!("host {} at {} after the release, compiling", letter(holder), ms(cut.at)),
    );
    out.figure("the holder's compile ended", format!("{} after the release", ms(cut.compiled)));
    let holder_after_compile = h.took[holder].saturating_sub(cut.compiled);
    for (i, took) in h.took.iter().enumerate() {
        let role = if i == holder { "holder" } else { "waiter" };
        out.figure(format!("host {} ({role}): answer after", letter(i)), ms(*took));
    }
    let sum = |series: &str| -> Result<f64> { fleet.hosts_metric(series) };
    let takeovers = sum("kiln_lease_total{result=\"takeover\"}")?;
    let hedged = sum("kiln_lease_total{result=\"timeout\"}")?;
    let compiles = sum("kiln_compiles_total{")?;
    out.figure("lease takeovers / waits past the hedge bound", format!("{takeovers} / {hedged}"));
    out.figure("compiles across the fleet (`/metrics`)", compiles);
    let puts = fleet.cache_metric(0, "kiln_server_requests_total{op=\"Put\",code=\"ok\"}")?;
    out.figure("`Put` calls kiln-cache accepted (artifacts and recipes, every host)", puts);
    let wrong = herd::figures(out, "herd", h, compiles, &reference);
    let stored = stored_matches(&fleet, &req, &reference).await;

    let waiters_took = h.took.iter().enumerate().filter(|(i, _)| *i != holder).map(|(_, t)| *t).max();
    out.check(
        "every host gets the kernel, no call fails",
        format!("{} failed calls, {} hosts without it", h.errors.len(), h.failed_hosts()),
        h.errors.is_empty() && h.failed_hosts() == 0,
    );
    out.check(
        format!(
            "the holder answers its own client within {} s of its compile's end (not after the fleet call's timeout)",
            HOLDER_ANSWER.as_secs()
        ),
        format!("{} after its compile ended", ms(holder_after_compile)),
        h.took[holder] > Duration::ZERO && holder_after_compile < HOLDER_ANSWER,
    );
    out.check(
        "exactly one waiter takes the lease over; none waits out the hedge bound",
        format!("{takeovers} takeovers, {hedged} past the bound"),
        takeovers == 1.0 && hedged == 0.0,
    );
    out.check(
        format!("the waiters have their answers within the hedge bound ({} s)", HEDGE.as_secs()),
        waiters_took.map_or("no waiter".into(), ms),
        waiters_took.is_some_and(|t| t < HEDGE),
    );
    out.check(
        "one publish wins: kiln-cache stores the reference's bytes for the key",
        match &stored {
            Ok(()) => "stored, and equal".into(),
            Err(e) => format!("{e:#}"),
        },
        stored.is_ok(),
    );
    out.check("wrong bytes = 0", wrong, wrong == 0);
    out.check(
        "the cut landed mid-compile",
        format!("the holder was still compiling after the cut: {}", cut.still_compiling),
        cut.still_compiling,
    );
    struck.check_landed(out);
    let backgrounded = fleet.host_metric(holder, "kiln_fleet_writes_backgrounded_total")?;
    out.figure("fleet writes the holder's answers stopped waiting for (`/metrics`, after the heal)", backgrounded);
    drop(fleet);
    Ok(())
}

fn letter(i: usize) -> char {
    char::from(b'A' + u8::try_from(i % 26).unwrap_or(0))
}

/// What the chaos did: which host held the lease, when it was cut off, whether it was still
/// compiling just after, and when its compile ended (all after the release).
#[derive(Debug)]
struct Cut {
    holder: usize,
    at: Duration,
    still_compiling: bool,
    compiled: Duration,
}

/// Polls every host's `Stats` until one compiles (with leases on, only the holder does), then
/// disconnects it from the fleet network and polls the holder (through its socket, which the cut
/// leaves) until its compile ends.
async fn cut_the_holder(fleet: &ContainerFleet) -> Result<Cut> {
    let released = Instant::now();
    let mut clients = Vec::new();
    for h in &fleet.hosts {
        clients.push(h.connect().await?);
    }
    loop {
        for (i, c) in clients.iter().enumerate() {
            if c.stats().await?.inflight_compiles > 0 {
                let at = released.elapsed();
                fleet.disconnect(&fleet.fleet_net, &fleet.hosts[i].container)?;
                let still_compiling = c.stats().await?.inflight_compiles > 0;
                while c.stats().await?.inflight_compiles > 0 {
                    if released.elapsed() > at + FIND_HOLDER {
                        bail!("the holder's compile did not end within {} s of the cut", FIND_HOLDER.as_secs());
                    }
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                return Ok(Cut { holder: i, at, still_compiling, compiled: released.elapsed() });
            }
        }
        if released.elapsed() > FIND_HOLDER {
            bail!("no host started compiling within {} s", FIND_HOLDER.as_secs());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Reads the kernel's entry from kiln-cache (on the fleet network, with the fleet's token),
/// opens the envelope and compares its cubin with the reference.
async fn stored_matches(fleet: &ContainerFleet, req: &pb::CompileRequest, reference: &graphs::Artifacts) -> Result<()> {
    let ip = fleet.caches[0].ip(&fleet.fleet_net)?;
    let id = graphs::ids(req).first().cloned().context("no kernel")?;
    let expected = reference.get(&id).context("no reference")?;
    let key = fleet_key(fleet, req).await?;
    let cache = RemoteCache::connect(&format!("http://{ip}:7171"), super::containers::TOKEN)?;
    match cache.get(&key).await? {
        Lookup::Hit(bytes, _) => {
            let artifact = envelope::open(&bytes, &key, u64::MAX).context("the stored envelope does not open")?;
            if artifact.bytes.as_ref() != expected.as_slice() {
                bail!("the stored cubin differs from the reference");
            }
            Ok(())
        }
        other => bail!("kiln-cache has no artifact for the key: {other:?}"),
    }
}

/// The kernel's cache key, as a host reports it (a warm lookup through host A's socket).
async fn fleet_key(fleet: &ContainerFleet, req: &pb::CompileRequest) -> Result<CacheKey> {
    let job = fleet.hosts[0].connect().await?.compile(req.clone()).await?.collect().await?;
    let key = &job.kernels.first().context("no result")?.key;
    key.parse().map_err(|e| anyhow::anyhow!("key {key}: {e:?}"))
}
