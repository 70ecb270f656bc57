//! A writer gone bad: a writer with write access publishes wrong cubins under right keys (valid
//! envelopes, digests and all), three ways: naming a host of its own, naming no host, and naming
//! an honest host's name behind a token of its own; each against a kiln-cache with tokens and
//! one without. Over an honest artifact the write is refused, and no host is served it at all.
//! Where the honest artifact is gone (evicted), the wrong bytes are the key's first publish: the
//! hosts, auditing only what the choice of publisher takes (`audit_rate = 0`), catch them and
//! quarantine them fleet-wide, and from the first fetch plus 10 s no host serves them.

use super::graphs::{self, Artifacts};
use super::herd::{self, Herd};
use super::report::Outcome;
use super::{Run, blocking};
use crate::bench::kilnd::Kilnd;
use anyhow::{Context, Result, bail};
use kiln_cache_client::{Lookup, RemoteCache};
use kiln_proto::CacheKey;
use kiln_proto::envelope;
use kiln_proto::pb::{self, Provenance};
use kiln_tests::redis::{CacheOptions, CacheServer, RedisServer, WRITE_TOKEN};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

pub const TITLE: &str = "A writer gone bad: declared, anonymous and spoofed, with tokens and without";
const TAG: &str = "kiln-reliability writer gone bad";
const HOSTS: usize = 3;
/// Kernels the writer tries to put over honest artifacts, and as many it publishes first.
const KERNELS: usize = 4;
/// How often the hosts read the quarantine list.
const POLL: Duration = Duration::from_millis(500);
/// From the first fetch of the wrong bytes by any host, how long until no host may serve them.
const CAUGHT_WITHIN: Duration = Duration::from_secs(10);
/// How long the hosts' audits of what they took may take, at most, before the run goes on.
const AUDIT_BOUND: Duration = Duration::from_secs(60);
/// The name the declared writer gives as its host.
const WRITER: &str = "gone-bad";
/// The writer's own read-write token, on the kiln-cache with tokens.
const ROGUE_TOKEN: &str = "kiln-reliability-rogue-write-token-0123456789";

#[derive(Debug, Clone, Copy)]
enum Writer {
    /// Names a host of its own (`gone-bad`), with the honest hosts' token (stolen).
    Declared,
    /// Names no host, with a token of its own.
    Anonymous,
    /// Names the honest host, with a token of its own.
    Spoofed,
}

impl Writer {
    fn label(self) -> &'static str {
        match self {
            Writer::Declared => "declared",
            Writer::Anonymous => "anonymous",
            Writer::Spoofed => "spoofed",
        }
    }

    fn token(self) -> &'static str {
        match self {
            Writer::Declared => WRITE_TOKEN,
            Writer::Anonymous | Writer::Spoofed => ROGUE_TOKEN,
        }
    }

    fn host(self, honest: &str) -> String {
        match self {
            Writer::Declared => WRITER.into(),
            Writer::Anonymous => String::new(),
            Writer::Spoofed => honest.into(),
        }
    }
}

/// Counts over every case, for the conditions.
#[derive(Debug, Default)]
struct Tally {
    cases: usize,
    refused_over_honest: usize,
    wrong_over_honest: usize,
    honest_audits_clean: usize,
    wrong_first: usize,
    wrong_late: usize,
    keys_caught: usize,
    records_naming_writer: usize,
    honest_keys_quarantined: usize,
    again_refused: usize,
    errors: usize,
    slowest_catch: Duration,
}

pub async fn run(run: &Run, out: &mut Outcome) -> Result<()> {
    out.method = vec![
        format!(
            "Six cases: three writers, each against a private redis-server and kiln-cache with tokens and against one \
             without (`insecure_no_auth`, where every writer is anonymous). The writers: `declared` names a host of \
             its own (`{WRITER}`) and writes with the honest hosts' token (stolen); `anonymous` names no host; \
             `spoofed` names the honest host; the last two write with a read-write token of their own. Each writes \
             with the ordinary `Put`: the honest envelope's metadata, the cubin's last byte flipped, sealed under \
             the right key (its digest is valid)."
        ),
        format!(
            "In each case one honest kilnd compiles a cold {}-kernel graph and publishes it. Over honest artifacts: \
             the writer puts its bytes under {KERNELS} of the keys; then {HOSTS} fresh kilnd hosts (`audit_rate = \
             0`, so only what the choice of publisher takes is audited; `audit_cpu_share = 1`; quarantine list read \
             every {} ms) herd on those {KERNELS} kernels, and their audits of what they took are awaited. Honest \
             artifact lost: the other {KERNELS} keys' artifacts are deleted in Redis (as an eviction would) and the \
             writer publishes its bytes under them first; the same hosts herd on those kernels, and {} s after that \
             herd's start, the same hosts and a fresh one herd on them again.",
            2 * KERNELS,
            POLL.as_millis(),
            CAUGHT_WITHIN.as_secs()
        ),
        "Counted: Puts refused over honest artifacts, wrong artifacts served (against a separate kilnd's compile) in \
         each herd, the time from the first herd's start until kiln-cache held a quarantine record for every wrong \
         key, the records naming the writer as kiln-cache stamped it (token id and declared host), honest keys \
         quarantined (false alarms), and whether the writer can publish the same bytes again."
            .into(),
    ];
    let both = graphs::graph(TAG, 0..2 * KERNELS);
    let reference = graphs::reference(run, "writer-gone-bad", &both).await?;
    let mut tally = Tally::default();
    for tokens in [true, false] {
        for writer in [Writer::Declared, Writer::Anonymous, Writer::Spoofed] {
            let label = format!("{}, {}", writer.label(), if tokens { "tokens" } else { "no tokens" });
            case(run, writer, tokens, &label, &reference, out, &mut tally)
                .await
                .with_context(|| format!("case {label}"))?;
        }
    }
    let total = tally.cases * KERNELS;
    let per_case = |n: usize| format!("{n} of {total}");
    out.check("every host gets every kernel, no call fails", tally.errors, tally.errors == 0);
    out.check(
        "over an honest artifact: the writer's Put refused",
        per_case(tally.refused_over_honest),
        tally.refused_over_honest == total,
    );
    out.check("over an honest artifact: wrong artifacts served", tally.wrong_over_honest, tally.wrong_over_honest == 0);
    out.check(
        "honest artifact lost: every wrong key quarantined, the record naming the writer",
        per_case(tally.records_naming_writer),
        tally.records_naming_writer == total && tally.keys_caught == total,
    );
    out.check(
        format!("honest artifact lost: wrong artifacts served from the first fetch + {} s", CAUGHT_WITHIN.as_secs()),
        tally.wrong_late,
        tally.wrong_late == 0,
    );
    out.check(
        "false alarms: honest keys quarantined",
        tally.honest_keys_quarantined,
        tally.honest_keys_quarantined == 0,
    );
    out.check(
        "the writer's second publish of the same bytes refused",
        per_case(tally.again_refused),
        tally.again_refused == total,
    );
    out.figure(
        "over all cases: wrong artifacts served in the first herd after the writer published first",
        format!("{} of {}", tally.wrong_first, tally.cases * HOSTS * KERNELS),
    );
    out.figure(
        "over all cases: audits of disputed honest artifacts, clean",
        format!("{} of {}", tally.honest_audits_clean, tally.cases * HOSTS * KERNELS),
    );
    out.figure(
        "over all cases: the slowest catch (every wrong key quarantined, from the first herd's start)",
        format!("{:.2} s", tally.slowest_catch.as_secs_f64()),
    );
    Ok(())
}

/// One writer against one kiln-cache, with tokens or without: both parts, into `tally`.
async fn case(
    run: &Run,
    writer: Writer,
    tokens: bool,
    label: &str,
    reference: &Artifacts,
    out: &mut Outcome,
    tally: &mut Tally,
) -> Result<()> {
    tally.cases += 1;
    let name = format!("gone-bad-{}-{}", writer.label(), if tokens { "tokens" } else { "open" });
    let (redis, cache) = private_cache(tokens.then_some(ROGUE_TOKEN)).await?;
    let uri = cache.uri();
    let over_honest = graphs::graph(TAG, 0..KERNELS);
    let first_publish = graphs::graph(TAG, KERNELS..2 * KERNELS);
    let honest = Honest::compile(run, &name, &uri, graphs::graph(TAG, 0..2 * KERNELS)).await?;
    let (keys_a, keys_b) = (honest.keys_of(&over_honest)?, honest.keys_of(&first_publish)?);
    let reader = cache.client(WRITE_TOKEN);
    let (_, honest_by) = held(&reader, &keys_a[0]).await?;
    let honest_host = honest_by.map(|p| p.host).unwrap_or_default();
    let bad = cache.client(writer.token()).with_host(&writer.host(&honest_host));

    // Over honest artifacts: refused, and no host is served the wrong bytes.
    let mut refused = 0;
    for key in &keys_a {
        let wrong = wrong_envelope(&reader, key).await?;
        match bad.put(key, wrong).await {
            Err(e) if e.code() == Some(tonic::Code::FailedPrecondition) => refused += 1,
            Err(e) => bail!("the writer's Put over {key} failed otherwise: {e}"),
            Ok(()) => {}
        }
    }
    let config = format!("audit_rate = 0.0\naudit_cpu_share = 1.0\nquarantine_poll_ms = {}\n", POLL.as_millis());
    let mut daemons = herd::hosts_with(run, &format!("{name}-herd"), HOSTS, &uri, &config).await?;
    let fresh = herd::hosts_with(run, &format!("{name}-fresh"), 1, &uri, &config).await?;
    let a = herd::herd(&daemons, &over_honest, 0).await;
    let wrong_a = a.wrong(reference);
    let clean = audits_settled(&daemons, KERNELS).await?;
    out.figure(
        format!("{label}: over honest artifacts: Puts refused / wrong served / audits clean"),
        format!("{refused} of {KERNELS} / {wrong_a} of {} / {clean} of {}", HOSTS * KERNELS, HOSTS * KERNELS),
    );

    // The honest artifacts lost: the writer's bytes are the keys' first publish.
    let mut published = Vec::new();
    for key in &keys_b {
        let wrong = wrong_envelope(&reader, key).await?;
        redis.cli(&["DEL", &format!("kiln:v1:{{{key}}}:a")]);
        bad.put(key, wrong.clone()).await.with_context(|| format!("the writer's first publish of {key}"))?;
        published.push(wrong);
    }
    let (_, stamped) = held(&reader, &keys_b[0]).await?;
    let stamped = stamped.unwrap_or_default();
    let started = Instant::now();
    let b = herd::herd(&daemons, &first_publish, 0).await;
    let wrong_b = b.wrong(reference);
    let caught = loop {
        let records = reader.list_quarantine(0, 0).await?.records;
        let on_b = records.iter().filter(|r| keys_b.iter().any(|k| k.to_hex() == r.key)).count();
        if on_b >= KERNELS || started.elapsed() > AUDIT_BOUND {
            break (on_b, started.elapsed(), records);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let (on_b, took, records) = caught;
    tokio::time::sleep_until((started + CAUGHT_WITHIN).into()).await;
    daemons.extend(fresh);
    let late = herd::herd(&daemons, &first_publish, 0).await;
    let wrong_late = late.wrong(reference);
    let named = records
        .iter()
        .filter(|r| keys_b.iter().any(|k| k.to_hex() == r.key))
        .filter(|r| r.publisher.as_ref().is_some_and(|p| (&p.host, &p.token) == (&stamped.host, &stamped.token)))
        .count();
    let honest_quarantined = records.iter().filter(|r| keys_a.iter().any(|k| k.to_hex() == r.key)).count();
    let mut again = 0;
    for (key, wrong) in keys_b.iter().zip(published) {
        if bad.put(key, wrong).await.is_err_and(|e| e.code() == Some(tonic::Code::FailedPrecondition)) {
            again += 1;
        }
    }
    out.figure(
        format!("{label}: honest artifact lost: the writer as kiln-cache stamped it"),
        format!("`{}`", writer_text(&stamped)),
    );
    out.figure(
        format!(
            "{label}: honest artifact lost: wrong served in the first herd / every key quarantined after / wrong \
             served from + {} s (with a fresh host)",
            CAUGHT_WITHIN.as_secs()
        ),
        format!(
            "{wrong_b} of {} / {} / {wrong_late} of {}",
            HOSTS * KERNELS,
            if on_b >= KERNELS { format!("{:.2} s", took.as_secs_f64()) } else { format!("{on_b} of {KERNELS} keys") },
            (HOSTS + 1) * KERNELS
        ),
    );
    tally.refused_over_honest += refused;
    tally.wrong_over_honest += wrong_a;
    tally.honest_audits_clean += clean;
    tally.wrong_first += wrong_b;
    tally.wrong_late += wrong_late;
    tally.keys_caught += on_b.min(KERNELS);
    tally.records_naming_writer += named;
    tally.honest_keys_quarantined += honest_quarantined;
    tally.again_refused += again;
    tally.errors += errors(&a) + errors(&b) + errors(&late);
    if on_b >= KERNELS {
        tally.slowest_catch = tally.slowest_catch.max(took);
    } else {
        tally.slowest_catch = tally.slowest_catch.max(AUDIT_BOUND);
    }
    drop((daemons, honest, cache, redis));
    Ok(())
}

/// A private Redis and kiln-cache for one case: with `rogue`, the writer's own read-write token,
/// among the tokens; without one, no tokens at all, open to anyone (`insecure_no_auth`).
pub(super) async fn private_cache(rogue: Option<&str>) -> Result<(RedisServer, CacheServer)> {
    let redis = blocking(RedisServer::start).await?;
    let mut options = CacheOptions::new(vec![redis.url()]);
    match rogue {
        Some(token) => options.tokens.push(format!("write:{token}")),
        None => {
            options.tokens.clear();
            options.config = "insecure_no_auth = true\n".into();
        }
    }
    let cache = blocking(move || CacheServer::start(options)).await?;
    Ok((redis, cache))
}

/// One honest kilnd that compiled a graph through the fleet cache, and its kernels' keys. The
/// host is held to the end of the case: its publish of what it compiled may still be on its way.
pub(super) struct Honest {
    _host: Vec<Kilnd>,
    keys: BTreeMap<String, String>,
}

impl Honest {
    /// Starts the host `{name}-honest` on the kiln-cache at `uri` and compiles `req` on it.
    pub(super) async fn compile(run: &Run, name: &str, uri: &str, req: pb::CompileRequest) -> Result<Honest> {
        let host = herd::hosts(run, &format!("{name}-honest"), 1, uri).await?;
        let job = host[0].connect().await?.compile(req).await?.collect().await?;
        Ok(Honest { _host: host, keys: graphs::keys(&job) })
    }

    /// The cache keys of `req`'s kernels, as the honest host's compile named them.
    pub(super) fn keys_of(&self, req: &pb::CompileRequest) -> Result<Vec<CacheKey>> {
        graphs::ids(req)
            .iter()
            .map(|id| self.keys.get(id).context("a kernel key")?.parse().context("a kernel key"))
            .collect()
    }
}

/// What `key` holds, with its provenance; the honest host's publish may still be on its way.
pub(super) async fn held(cache: &RemoteCache, key: &CacheKey) -> Result<(Vec<u8>, Option<Provenance>)> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Lookup::Hit(sealed, provenance) = cache.get(key).await? {
            return Ok((sealed.to_vec(), provenance));
        }
        if Instant::now() > deadline {
            bail!("kiln-cache holds nothing under {key}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The honest envelope under `key` with the cubin's last byte flipped, sealed under the key.
pub(super) async fn wrong_envelope(cache: &RemoteCache, key: &CacheKey) -> Result<Vec<u8>> {
    let (sealed, _) = held(cache, key).await?;
    let honest = envelope::open(&sealed, key, u64::MAX)?;
    Ok(flipped(key, &honest))
}

fn flipped(key: &CacheKey, honest: &envelope::Artifact) -> Vec<u8> {
    let mut bytes = honest.bytes.to_vec();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    envelope::seal(key, honest.meta.clone(), &bytes)
}

/// Waits until each host's audits have settled `n` artifacts (bounded); audits clean, summed.
async fn audits_settled(daemons: &[Kilnd], n: usize) -> Result<usize> {
    let deadline = Instant::now() + AUDIT_BOUND;
    loop {
        let settled: Vec<f64> = daemons
            .iter()
            .map(|d| {
                ["clean", "mismatch", "failed", "absent"]
                    .iter()
                    .map(|r| d.metric_sum(&format!("kiln_audits_total{{result=\"{r}\"}}")))
                    .sum::<Result<f64>>()
            })
            .collect::<Result<_>>()?;
        if settled.iter().all(|&s| s >= n as f64) || Instant::now() > deadline {
            let clean: Vec<f64> =
                daemons.iter().map(|d| d.metric_sum("kiln_audits_total{result=\"clean\"}")).collect::<Result<_>>()?;
            return Ok(clean.iter().sum::<f64>() as usize);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub(super) fn errors(h: &Herd) -> usize {
    h.errors.len() + h.failed_hosts()
}

/// `host (token)`, `(token)` with no host declared.
fn writer_text(p: &Provenance) -> String {
    format!("{} ({})", p.host, p.token).trim_start().to_string()
}
