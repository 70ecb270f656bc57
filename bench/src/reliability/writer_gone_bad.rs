//! A writer gone bad: a host with a read-write token publishes wrong cubins under right keys
//! (valid envelopes, digests and all) while a herd of hosts runs with the audit at 100%. The
//! hosts take the wrong bytes once, audit them, quarantine them fleet-wide and name the writer;
//! after the quarantine no host serves them, and the writer cannot publish them again.

use super::graphs;
use super::herd;
use super::report::Outcome;
use super::{Run, blocking};
use anyhow::{Context, Result, bail};
use kiln_cache_client::Lookup;
use kiln_proto::CacheKey;
use kiln_proto::envelope;
use kiln_tests::redis::{CacheOptions, CacheServer, RedisServer, WRITE_TOKEN};
use std::time::{Duration, Instant};

pub const TITLE: &str = "A writer gone bad under a herd, audit at 100%";
const TAG: &str = "kiln-reliability writer gone bad";
const HOSTS: usize = 4;
const KERNELS: usize = 16;
/// How often the hosts read the quarantine list.
const POLL: Duration = Duration::from_millis(500);
/// How long the whole fleet may take to quarantine every wrong artifact.
const QUARANTINE_BOUND: Duration = Duration::from_secs(120);
/// The name the bad writer gives as its host.
const WRITER: &str = "gone-bad";

pub async fn run(run: &Run, out: &mut Outcome) -> Result<()> {
    out.method = vec![
        format!(
            "A private redis-server and kiln-cache. One honest kilnd compiles a cold {KERNELS}-kernel graph and \
             publishes it. Then a writer with a read-write token (host name `{WRITER}`) replaces every artifact: the \
             same metadata, the cubin's last byte flipped, sealed under the right key (its digest is valid). {HOSTS} \
             fresh kilnd hosts (`audit_rate = 1`, `audit_cpu_share = 1`, quarantine list read every {} ms) herd on \
             the graph, each taking the whole graph from the fleet.",
            POLL.as_millis()
        ),
        "Each host audits what it took (recompiles it at background priority and compares) and quarantines what \
         differs. Counted: wrong artifacts served, against a separate kilnd's compile, in the first herd (before \
         any quarantine) and in a second herd of the same hosts plus a fresh one once every key is quarantined and \
         one poll interval has passed; the time from the first herd's start until kiln-cache held a quarantine \
         record for every key; and whether the writer can publish the same bytes again."
            .into(),
    ];
    let redis = blocking(RedisServer::start).await?;
    let options = CacheOptions::new(vec![redis.url()]);
    let cache = blocking(move || CacheServer::start(options)).await?;
    let uri = cache.uri();
    let req = graphs::graph(TAG, 0..KERNELS);
    let reference = graphs::reference(run, "writer-gone-bad", &req).await?;
    let honest = herd::hosts(run, "gone-bad-honest", 1, &uri).await?;
    let job = honest[0].connect().await?.compile(req.clone()).await?.collect().await?;
    let keys: Vec<CacheKey> =
        job.kernels.iter().map(|k| k.key.parse().context("a kernel key")).collect::<Result<_>>()?;

    let writer = cache.client(WRITE_TOKEN).with_host(WRITER);
    let mut wrong_envelopes = Vec::new();
    for key in &keys {
        let Lookup::Hit(sealed, _) = writer.get(key).await? else { bail!("the honest host did not publish {key}") };
        let honest_artifact = envelope::open(&sealed, key, u64::MAX)?;
        let mut bytes = honest_artifact.bytes.to_vec();
        let last = bytes.len() - 1;
        bytes[last] ^= 0xff;
        let wrong = envelope::seal(key, honest_artifact.meta.clone(), &bytes);
        writer.put(key, wrong.clone()).await?;
        wrong_envelopes.push(wrong);
    }

    let config = format!("audit_rate = 1.0\naudit_cpu_share = 1.0\nquarantine_poll_ms = {}\n", POLL.as_millis());
    let mut daemons = herd::hosts_with(run, "gone-bad-herd", HOSTS, &uri, &config).await?;
    let started = Instant::now();
    let first = herd::herd(&daemons, &req, 0).await;
    let wrong_first = first.wrong(&reference);
    out.figure(
        "wrong artifacts served in the first herd (before the quarantine)",
        format!("{wrong_first} of {}", HOSTS * KERNELS),
    );

    let quarantined = loop {
        let records = writer.list_quarantine(0, 0).await?.records;
        if records.len() >= KERNELS {
            break Some((started.elapsed(), records));
        }
        if started.elapsed() > QUARANTINE_BOUND {
            out.figure("keys quarantined when the bound passed", format!("{} of {KERNELS}", records.len()));
            break None;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let Some((took, records)) = quarantined else {
        out.check("every wrong artifact quarantined", "no", false);
        return Ok(());
    };
    out.figure("every key quarantined, from the first herd's start", format!("{:.2} s", took.as_secs_f64()));
    let named = records.iter().filter(|r| r.publisher.as_ref().is_some_and(|p| p.host == WRITER)).count();
    let reporters: std::collections::BTreeSet<&str> = records.iter().map(|r| r.reporter_host.as_str()).collect();
    out.figure("records naming the writer", format!("{named} of {}", records.len()));
    out.figure("reporting hosts (by name)", reporters.into_iter().collect::<Vec<_>>().join(", "));

    tokio::time::sleep(2 * POLL).await;
    let known: Vec<f64> = daemons.iter().map(|d| d.metric_sum("kiln_quarantined_keys")).collect::<Result<_>>()?;
    let known_text = known.iter().map(f64::to_string).collect::<Vec<_>>().join(", ");
    out.figure("quarantined keys each host knew of before the second herd", &known_text);
    let all_known = known.iter().all(|&n| n == KERNELS as f64);
    daemons.extend(herd::hosts_with(run, "gone-bad-fresh", 1, &uri, &config).await?);
    let second = herd::herd(&daemons, &req, 0).await;
    let wrong_second = second.wrong(&reference);
    out.figure(
        "wrong artifacts served after the quarantine (same hosts and a fresh one)",
        format!("{wrong_second} of {}", (HOSTS + 1) * KERNELS),
    );
    out.figure("second herd, results by tier", second.tiers_text());
    let mut refused = 0;
    for (key, wrong) in keys.iter().zip(wrong_envelopes) {
        if writer.put(key, wrong).await.is_err_and(|e| e.code() == Some(tonic::Code::FailedPrecondition)) {
            refused += 1;
        }
    }
    let errors = first.errors.len() + second.errors.len() + first.failed_hosts() + second.failed_hosts();
    out.check("every host gets every kernel, no call fails", errors, errors == 0);
    out.check(
        "every key quarantined, each record naming the writer",
        format!("{named} of {KERNELS}"),
        named == KERNELS,
    );
    out.check("every host learned every quarantine within a poll interval", known_text, all_known);
    out.check("no host serves the wrong bytes after the quarantine", wrong_second, wrong_second == 0);
    out.check(
        "the writer's second publish of the same bytes refused",
        format!("{refused} of {KERNELS}"),
        refused == KERNELS,
    );
    drop((daemons, honest, cache, redis));
    Ok(())
}
