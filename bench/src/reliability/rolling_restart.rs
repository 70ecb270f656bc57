//! Scenario 10: the two kiln-cache replicas restarted one after the other, as a rolling update
//! does, while clients on every kilnd host keep compiling. kilnd's `--remote` takes one URI, so
//! half the hosts use one replica and half the other (by the replicas' own names): while a
//! replica is out, its hosts answer from their local tiers or compile, and the other half keep
//! the fleet. No call may fail, no byte may be wrong, and every host must find its replica again.

use super::containers::{ContainerFleet, Images, Layout};
use super::graphs::{self, Artifacts};
use super::load;
use super::report::Outcome;
use super::{Run, blocking};
use anyhow::{Result, anyhow};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub const TITLE: &str = "containers: a rolling restart of the kiln-cache replicas under a herd";
const TAG: &str = "kiln-reliability scenario 10";
const HOSTS: usize = 4;
const CLIENTS_PER_HOST: usize = 4;
/// Kernel numbers per client: client `c`'s `k`-th kernel is `c * PER_CLIENT + k`.
const PER_CLIENT: usize = 100_000;
/// How many of the kernels seen are also compared with a reference compile (all of them are
/// compared with each other).
const REFERENCE_SAMPLE: usize = 48;
/// Load before, between and after the restarts.
const SETTLE: Duration = Duration::from_secs(3);
/// What a replica gets to drain before it is killed (`docker restart -t`).
const GRACE: Duration = Duration::from_secs(10);
/// How long a host may take to find its replica again (kilnd's probe backs off to 5 s).
const RECONNECT: Duration = Duration::from_secs(20);
const PUTS: &str = "kiln_server_requests_total{op=\"Put\",code=\"ok\"}";

/// What the clients' answers held, shared by every client.
#[derive(Debug, Default)]
struct Seen {
    /// The first bytes answered for each kernel id.
    bytes: Artifacts,
    /// Answers whose bytes differ from the first answer for the same kernel.
    differ: usize,
    tiers: BTreeMap<String, usize>,
}

pub async fn run(run: &Run, out: &mut Outcome) -> Result<()> {
    let images = Images::from_env();
    out.method = vec![
        format!(
            "Containers: Redis and two kiln-cache replicas on one private network; the replicas and {HOSTS} kilnd \
             hosts on another. kilnd's `--remote` takes one URI: hosts A and C use replica 0, B and D replica 1, \
             each by the replica's own name. {CLIENTS_PER_HOST} clients per host call `Compile` one after another \
             through the host's socket, each call two kernels: a new one of the client's own (cold everywhere: a \
             lease, a compile and a publish) and the one a client of the next host asked for just before (from \
             the fleet, or waited for under its lease), so the fleet is written and read all along. After {} s, \
             replica 0 is restarted (`docker restart -t {}`: SIGTERM, then the same container again) and waited \
             for until it reports Redis up; {} s later replica 1 the same way; the clients stop {} s after that.",
            SETTLE.as_secs(),
            GRACE.as_secs(),
            SETTLE.as_secs(),
            SETTLE.as_secs()
        ),
        format!(
            "Every answer for a kernel must be byte for byte every other answer for it, and the first \
             {REFERENCE_SAMPLE} kernels are compared with a compile by a separate kilnd with no fleet, outside the \
             containers. A call that fails is counted and never retried."
        ),
    ];
    let work = run.bench.dir("rolling-restart")?;
    let layout = Layout { spread: true, ..Layout::new(2, HOSTS) };
    let fleet = Arc::new(blocking(move || ContainerFleet::start("rolling-restart", &work, &images, &layout)).await??);

    let stop = Arc::new(AtomicBool::new(false));
    let seen: Arc<Mutex<Seen>> = Arc::default();
    let uris: Arc<Vec<String>> = Arc::new(fleet.hosts.iter().map(|h| h.uri()).collect());
    let clients = HOSTS * CLIENTS_PER_HOST;
    let load = load::until(clients, Arc::clone(&stop), {
        let seen = Arc::clone(&seen);
        move |c, k| {
            let (uri, seen) = (uris[c % HOSTS].clone(), Arc::clone(&seen));
            async move {
                // Clients c and c + 1 are on different hosts (host c mod HOSTS).
                let theirs = (c + 1) % clients * PER_CLIENT + k.saturating_sub(1);
                let req = graphs::graph(TAG, [c * PER_CLIENT + k, theirs]);
                let job = kiln_client::connect(&uri).await?.compile(req.clone()).await?.collect().await?;
                let got = graphs::artifacts(&req, &job)?;
                let mut seen = seen.lock().map_err(|_| anyhow!("a client panicked"))?;
                for (id, bytes) in got {
                    if *seen.bytes.entry(id).or_insert_with(|| bytes.clone()) != bytes {
                        seen.differ += 1;
                    }
                }
                for kernel in &job.kernels {
                    *seen.tiers.entry(format!("{:?}", kernel.tier()).to_lowercase()).or_insert(0) += 1;
                }
                Ok(())
            }
        }
    });
    let chaos = {
        let (fleet, stop) = (Arc::clone(&fleet), Arc::clone(&stop));
        async move {
            let started = Instant::now();
            let result = async {
                let mut restarts = Vec::new();
                for i in 0..2 {
                    tokio::time::sleep(SETTLE).await;
                    let at = started.elapsed();
                    let f = Arc::clone(&fleet);
                    let out = blocking(move || f.restart_cache(i, GRACE)).await??;
                    restarts.push((at, out));
                }
                tokio::time::sleep(SETTLE).await;
                Ok::<_, anyhow::Error>(restarts)
            }
            .await;
            stop.store(true, Ordering::Relaxed);
            result
        }
    };
    let (tally, restarts) = tokio::join!(load, chaos);
    let restarts = restarts?;
    let ms = |d: Duration| format!("{:.0} ms", d.as_secs_f64() * 1e3);
    for (i, (at, took)) in restarts.iter().enumerate() {
        out.figure(
            format!("replica {i}: restarted at / out for (until it reported Redis up)"),
            format!("{} / {}", ms(*at), ms(*took)),
        );
    }
    tally.figures(out, "clients");
    let (sample, differ, kernels) = {
        let seen = seen.lock().map_err(|_| anyhow!("a client panicked"))?;
        out.figure(
            "results by tier",
            seen.tiers.iter().map(|(t, n)| format!("{t} {n}")).collect::<Vec<_>>().join(", "),
        );
        let sample: Artifacts = seen.bytes.iter().take(REFERENCE_SAMPLE).map(|(i, b)| (i.clone(), b.clone())).collect();
        (sample, seen.differ, seen.bytes.len())
    };
    let f = Arc::clone(&fleet);
    let (reconnected, remote_up) = blocking(move || hosts_reconnect(&f)).await??;
    out.figure("every host's fleet tier up again (`kiln_remote_up`) after the last restart", ms(reconnected));
    let compiles = fleet.hosts_metric("kiln_compiles_total{")?;
    out.figure("compiles across the fleet (`/metrics`)", format!("{compiles} for {kernels} kernels"));
    let lease = |result: &str| fleet.hosts_metric(&format!("kiln_lease_total{{result=\"{result}\"}}"));
    let takeovers = lease("takeover")?;
    out.figure(
        "leases taken over (a holder that lost its replica could neither publish nor release) / errors",
        format!("{takeovers} / {}", lease("error")?),
    );
    let puts = fleet.cache_metric(0, PUTS)? + fleet.cache_metric(1, PUTS)?;
    out.figure("`Put` calls the replicas accepted since their restarts (artifacts and recipes)", puts);
    let numbers = sample.keys().filter_map(|id| id.strip_prefix("add_")?.parse::<usize>().ok());
    let reference = graphs::reference(run, "rolling-restart", &graphs::graph(TAG, numbers)).await?;
    let wrong = differ + graphs::wrong(&sample, &reference);
    out.figure(
        "answers that differ from another answer / from the reference sample",
        format!("{differ} / {}", wrong - differ),
    );

    if let Some(max) = tally.latencies.max_ms().filter(|ms| *ms > 5000.0 && takeovers > 0.0) {
        out.notes.push(format!(
            "The slowest calls ({max:.0} ms) most likely waited out a lease ({takeovers} taken over): a host whose replica is out can neither publish \
             nor release the leases it holds (its `--remote` names that replica only), so a host on the other \
             replica waiting for one of those kernels takes the lease over once it expires (`lease_ttl_ms`, 10 s \
             by default). A host given the shared name (as a Kubernetes Service gives) would reconnect to the other \
             replica instead; this scenario does not measure that."
        ));
    }
    out.check("failed calls = 0", tally.errors_text(), tally.errors == 0 && tally.calls > 0);
    out.check("wrong bytes = 0", wrong, wrong == 0);
    out.check(
        "both replicas were restarted while the clients ran",
        format!("{} restarts; {} calls", restarts.len(), tally.calls),
        restarts.len() == 2,
    );
    out.check(
        format!("every host's fleet tier is up again within {} s", RECONNECT.as_secs()),
        remote_up,
        reconnected < RECONNECT,
    );
    drop(fleet);
    Ok(())
}

/// Waits until every host reports `kiln_remote_up 1`; returns how long that took and what the
/// hosts reported last. Blocking.
fn hosts_reconnect(fleet: &ContainerFleet) -> Result<(Duration, String)> {
    let started = Instant::now();
    loop {
        let up: Vec<f64> =
            (0..fleet.hosts.len()).map(|i| fleet.host_metric(i, "kiln_remote_up").unwrap_or(0.0)).collect();
        let text = format!("{up:?}");
        if up.iter().all(|u| *u >= 1.0) {
            return Ok((started.elapsed(), text));
        }
        if started.elapsed() > RECONNECT {
            return Ok((started.elapsed(), format!("still {text} after {} s", RECONNECT.as_secs())));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}
