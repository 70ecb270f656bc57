//! Writers that publish first, against fresh hosts that fetch at once: an anonymous writer (a
//! kiln-cache without tokens), a writer with a fresh token, and a writer whose token the fleet
//! vetted clean before it turned bad, each under `vet = "first-use"`; then the two token-holding
//! writers under `vet = "confirmed"`. Counted: wrong cubins served to any host in the herd that
//! fetches the writer's bytes first.

use super::Run;
use super::graphs;
use super::herd;
use super::report::Outcome;
use super::writer_gone_bad::{Honest, errors, held, private_cache, wrong_envelope};
use anyhow::{Context, Result};
use kiln_tests::redis::WRITE_TOKEN;
use std::time::{Duration, Instant};

pub const TITLE: &str = "Writers that publish first: anonymous, a fresh token, a vetted token turned bad";
/// The cases run: each writer kind under the default policy, and the token holders under the
/// per-artifact one.
const CASES: [(Writer, &str); 5] = [
    (Writer::Anonymous, "first-use"),
    (Writer::FreshToken, "first-use"),
    (Writer::Turncoat, "first-use"),
    (Writer::FreshToken, "confirmed"),
    (Writer::Turncoat, "confirmed"),
];
const TAG: &str = "kiln-reliability publish first";
const HOSTS: usize = 3;
/// Keys the writer publishes first (and, for the turncoat, as many it publishes honestly before).
const KERNELS: usize = 4;
/// The writer's own read-write token.
const ROGUE_TOKEN: &str = "kiln-reliability-publish-first-token-0123456789";

#[derive(Debug, Clone, Copy, PartialEq)]
enum Writer {
    /// No tokens in the fleet: nothing names the writer.
    Anonymous,
    /// A token nobody has vetted.
    FreshToken,
    /// A token the fleet vetted on honest publishes, that then publishes wrong bytes.
    Turncoat,
}

impl Writer {
    fn label(self) -> &'static str {
        match self {
            Writer::Anonymous => "anonymous (no tokens)",
            Writer::FreshToken => "a fresh token",
            Writer::Turncoat => "a vetted token turned bad",
        }
    }
}

pub async fn run(run: &Run, out: &mut Outcome) -> Result<()> {
    out.method = vec![format!(
        "Five cases, each on a private redis-server and kiln-cache. One honest kilnd compiles a cold {}-kernel \
         graph; the artifacts of {KERNELS} keys are deleted in Redis (as an eviction would) and the writer publishes \
         the honest envelope with the cubin's last byte flipped under each, first. The turncoat first republishes \
         the other {KERNELS} keys' honest bytes under its own token, and a herd of {HOSTS} fresh hosts vets it on \
         them before it turns. Then {HOSTS} fresh kilnd hosts (`audit_rate = 0`) herd on the writer's keys at once; \
         every answer is compared with a separate kilnd's compile. Every host of a case runs its `vet`: the three \
         writers under `first-use`, then the two token holders under `confirmed`.",
        2 * KERNELS
    )];
    let reference = graphs::reference(run, "publish-first", &graphs::graph(TAG, 0..2 * KERNELS)).await?;
    let (mut fresh_wrong, mut confirmed_wrong, mut errs) = (0, 0, 0);
    for (writer, vet) in CASES {
        let (wrong, e, took) =
            case(run, writer, vet, &reference).await.with_context(|| format!("case {} under {vet}", writer.label()))?;
        out.figure(
            format!("{}, `vet = \"{vet}\"`: wrong cubins served in the herd that fetched first", writer.label()),
            format!("{wrong} of {} (the herd took {:.2} s)", HOSTS * KERNELS, took.as_secs_f64()),
        );
        match (writer, vet) {
            (Writer::FreshToken, "first-use") => fresh_wrong += wrong,
            (_, "confirmed") => confirmed_wrong += wrong,
            _ => {}
        }
        errs += e;
    }
    out.check("every host gets every kernel, no call fails", errs, errs == 0);
    out.check("a fresh token's first publish under first-use: wrong cubins served", fresh_wrong, fresh_wrong == 0);
    out.check("every token-holding writer under confirmed: wrong cubins served", confirmed_wrong, confirmed_wrong == 0);
    Ok(())
}

/// One writer: the wrong cubins served in the first herd on its keys, the herds' errors, and how
/// long that herd took.
async fn case(run: &Run, writer: Writer, vet: &str, reference: &graphs::Artifacts) -> Result<(usize, usize, Duration)> {
    let name = format!("publish-first-{writer:?}-{vet}").to_lowercase();
    let (redis, cache) = private_cache((writer != Writer::Anonymous).then_some(ROGUE_TOKEN)).await?;
    let uri = cache.uri();
    let (vetting, bad_keys) = (graphs::graph(TAG, 0..KERNELS), graphs::graph(TAG, KERNELS..2 * KERNELS));
    let honest = Honest::compile(run, &name, &uri, graphs::graph(TAG, 0..2 * KERNELS)).await?;
    let reader = cache.client(WRITE_TOKEN);
    let bad = cache.client(if writer == Writer::Anonymous { WRITE_TOKEN } else { ROGUE_TOKEN }).with_host("writer");
    let config = format!("vet = \"{vet}\"\naudit_rate = 0.0\naudit_cpu_share = 1.0\nquarantine_poll_ms = 500\n");
    let config = config.as_str();
    let mut e = 0;
    if writer == Writer::Turncoat {
        for key in honest.keys_of(&vetting)? {
            let (sealed, _) = held(&reader, &key).await?;
            redis.cli(&["DEL", &format!("kiln:v1:{{{key}}}:a")]);
            bad.put(&key, sealed).await.with_context(|| format!("the turncoat's honest publish of {key}"))?;
        }
        let vetters = herd::hosts_with(run, &format!("{name}-vetters"), HOSTS, &uri, config).await?;
        e += errors(&herd::herd(&vetters, &vetting, 0).await);
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    for key in honest.keys_of(&bad_keys)? {
        let wrong = wrong_envelope(&reader, &key).await?;
        redis.cli(&["DEL", &format!("kiln:v1:{{{key}}}:a")]);
        bad.put(&key, wrong).await.with_context(|| format!("the writer's first publish of {key}"))?;
    }
    let daemons = herd::hosts_with(run, &format!("{name}-herd"), HOSTS, &uri, config).await?;
    let started = Instant::now();
    let first = herd::herd(&daemons, &bad_keys, 0).await;
    let took = started.elapsed();
    let wrong = first.wrong(reference);
    e += errors(&first);
    drop((daemons, honest, cache, redis));
    Ok((wrong, e, took))
}
