//! Vetting before use (`vet = "first-use"` and `"confirmed"`), end to end: real kilnd hosts over
//! a real kiln-cache and redis-server. A writer that publishes a wrong cubin first under a right
//! key is never served to the host that fetches it first: that host compiles the kernel itself,
//! finds the difference and quarantines it. An honest publisher's kernel is vetted by the first
//! host that compiles and compares it, and served from the fleet to the hosts after. Under
//! `confirmed`, the same holds for a publisher vetted clean that turns bad.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use kiln_cache_client::Lookup;
use kiln_proto::CacheKey;
use kiln_proto::envelope;
use kiln_proto::pb::{KernelResult, Outcome, Provenance, Tier};
use kiln_tests::daemon::{Daemon, compile_job};
use kiln_tests::http::sample;
use kiln_tests::kernels::*;
use kiln_tests::redis::{CacheOptions, CacheServer, RedisServer, WRITE_TOKEN};
use std::time::{Duration, Instant};

/// A second read-write token: the fetching hosts', so that they can vouch for the publisher
/// (a writer cannot vouch for its own token).
const AUDITOR_TOKEN: &str = "test-auditor-token-0123456789";

/// Hosts that vet before use, and read the quarantine list often.
const FIRST_USE: &str = "vet = \"first-use\"\nquarantine_poll_ms = 200\n";
/// Hosts that run only artifacts a second token agreed on.
const CONFIRMED: &str = "vet = \"confirmed\"\nquarantine_poll_ms = 200\n";

fn metric(d: &Daemon, series: &str) -> f64 {
    sample(&d.metrics_text(), series).unwrap_or(0.0)
}

/// A fleet whose kiln-cache takes [`WRITE_TOKEN`] and [`AUDITOR_TOKEN`].
fn fleet() -> (RedisServer, CacheServer) {
    let redis = RedisServer::start();
    let mut options = CacheOptions::new(vec![redis.url()]);
    options.tokens.push(format!("write:{AUDITOR_TOKEN}"));
    let cache = CacheServer::start(options);
    (redis, cache)
}

/// A fresh host that fetches with [`AUDITOR_TOKEN`], under `vet` (a config's lines).
fn fresh_host(cache: &CacheServer, vet: &str) -> Daemon {
    Daemon::start(Daemon::fleet_options(&cache.uri(), AUDITOR_TOKEN, vet))
}

/// An honest host (the writers' token) compiles the two-kernel graph and publishes it: the host,
/// and each kernel's result with its key.
async fn honest_publish(cache: &CacheServer) -> (Daemon, [(KernelResult, CacheKey); 2]) {
    let honest = cache.host("");
    let job = compile_job(&honest.client().await, vector_graph("sm_90", 2)).await;
    let kernels = [0, 1].map(|i| {
        let k = job.kernels[i].clone();
        assert_eq!(k.outcome(), Outcome::Ok, "{}", k.log);
        let key = k.key.parse().unwrap();
        (k, key)
    });
    (honest, kernels)
}

/// Waits until kiln-cache answers `key` with a provenance that `holds`, `what` naming it.
async fn wait_until(cache: &CacheServer, key: &CacheKey, what: &str, holds: impl Fn(&Provenance) -> bool) {
    let reader = cache.client(WRITE_TOKEN);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Lookup::Hit(_, Some(p)) = reader.get(key).await.unwrap()
            && holds(&p)
        {
            return;
        }
        assert!(Instant::now() < deadline, "kiln-cache never answered {key} {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The envelope `key` holds in the fleet with its cubin's last byte flipped: a valid envelope of
/// wrong bytes, as a writer gone bad seals it.
async fn wrong_envelope(writer: &kiln_cache_client::RemoteCache, key: &CacheKey) -> Vec<u8> {
    let Lookup::Hit(sealed, _) = writer.get(key).await.unwrap() else { panic!("{key} is not published") };
    let artifact = envelope::open(&sealed, key, u64::MAX).unwrap();
    let mut wrong = artifact.bytes.to_vec();
    let last = wrong.len() - 1;
    wrong[last] ^= 0xff;
    envelope::seal(key, artifact.meta.clone(), &wrong)
}

/// Replaces what the fleet holds under `key` with `envelope`, published first by `writer` (the
/// fleet lost the key's bytes, as an eviction would).
async fn publish_first(
    redis: &RedisServer,
    writer: &kiln_cache_client::RemoteCache,
    key: &CacheKey,
    envelope: Vec<u8>,
) {
    redis.cli(&["DEL", &format!("kiln:v1:{{{key}}}:a")]);
    writer.put(key, envelope).await.unwrap();
}

/// A writer publishes a wrong cubin (a valid envelope) first under a key. The first host to
/// fetch it does not serve it: it compiles the key itself, serves its own bytes, quarantines the
/// writer's and publishes the right ones. The honest publisher of the graph's other kernel is
/// vouched for by the same host's compile, so the next fresh host takes that kernel from the
/// fleet; the writer's publisher is distrusted by kiln-cache and never vetted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_fetcher_of_an_unvetted_publishers_wrong_cubin_does_not_serve_it() {
    let (redis, cache) = fleet();
    let (_honest, [(right, key), (other, other_key)]) = honest_publish(&cache).await;
    // The writer: the honest envelope's metadata, other cubin bytes, published first (the fleet
    // lost the honest bytes).
    let writer = cache.client(WRITE_TOKEN).with_host("gone-bad");
    let Lookup::Hit(_, Some(p)) = writer.get(&key).await.unwrap() else { panic!("not published") };
    assert!(!p.vetted, "nobody vouched for the honest host yet");
    let wrong = wrong_envelope(&writer, &key).await;
    publish_first(&redis, &writer, &key, wrong).await;

    // The first fetcher: compiles both kernels itself, serves the right bytes.
    let first = fresh_host(&cache, FIRST_USE);
    let taken = compile_job(&first.client().await, vector_graph("sm_90", 2)).await;
    for (want, got) in [(&right, taken.kernel(&right.id).unwrap()), (&other, taken.kernel(&other.id).unwrap())] {
        assert_eq!(got.artifact, want.artifact, "{}: the writer's bytes were served", want.id);
        assert_eq!(tier(got), Tier::Compiled, "{}: an unvetted publisher's kernel is compiled here", want.id);
    }
    assert_eq!(metric(&first, "kiln_vetting_total{result=\"held\"}"), 2.0);
    assert_eq!(metric(&first, "kiln_vetting_total{result=\"mismatch\"}"), 1.0);
    assert_eq!(metric(&first, "kiln_vetting_total{result=\"vouched\"}"), 1.0);
    assert_eq!(metric(&first, "kiln_audit_mismatches_total{publisher=\"gone-bad\"}"), 1.0);

    // kiln-cache: the writer's bytes are quarantined with the writer named, and the key holds
    // the first fetcher's right bytes; the honest publisher is vetted, the writer is not.
    let records = writer.list_quarantine(0, 0).await.unwrap().records;
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0].publisher.as_ref().map(|p| p.host.as_str()), Some("gone-bad"));
    wait_until(&cache, &other_key, "with a vetted publisher", |p| p.vetted).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    let republished = loop {
        match writer.get(&key).await.unwrap() {
            Lookup::Hit(sealed, p) => break (envelope::open(&sealed, &key, u64::MAX).unwrap(), p.unwrap()),
            _ if Instant::now() < deadline => tokio::time::sleep(Duration::from_millis(50)).await,
            other => panic!("the first fetcher did not republish the key: {other:?}"),
        }
    };
    assert_eq!(&republished.0.bytes[..], &right.artifact[..]);
    assert_ne!(republished.1.host, "gone-bad");

    // The next fresh host: the vetted publisher's kernel comes from the fleet; the republished
    // one (its publisher shares the fetchers' token, so nobody could vouch for it) is compiled.
    let next = fresh_host(&cache, FIRST_USE);
    let again = compile_job(&next.client().await, vector_graph("sm_90", 2)).await;
    let served = again.kernel(&other.id).unwrap();
    assert_eq!((tier(served), &served.artifact), (Tier::Remote, &other.artifact), "a vetted publisher is served");
    assert_eq!(again.kernel(&right.id).unwrap().artifact, right.artifact);
    assert_eq!(metric(&next, "kiln_vetting_total{result=\"held\"}"), 1.0);
    let stats = next.client().await.stats().await.unwrap().audit.unwrap();
    assert_eq!((stats.vet.as_str(), stats.vet_warning.as_str()), ("first-use", ""));
}

/// A writer vetted clean on one key turns bad on another. kiln-cache still says its publisher is
/// vetted (a `first-use` host would run its bytes), but the artifact is not confirmed: a fresh
/// host under `confirmed` compiles that key itself, serves the right bytes and quarantines the
/// writer's, while the confirmed key comes from the fleet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_confirmed_a_vetted_writer_gone_bad_is_not_run_by_its_first_fetcher() {
    let (redis, cache) = fleet();
    let (_honest, [(clean, clean_key), (turned, turned_key)]) = honest_publish(&cache).await;

    // The writer publishes one key's right bytes first, and a host vets it on them (and confirms
    // both keys, compiling each and finding the same bytes).
    let writer = cache.client(WRITE_TOKEN).with_host("turns-bad");
    let Lookup::Hit(right, _) = writer.get(&clean_key).await.unwrap() else { panic!("not published") };
    publish_first(&redis, &writer, &clean_key, right).await;
    let vetter = fresh_host(&cache, CONFIRMED);
    let vetted = compile_job(&vetter.client().await, vector_graph("sm_90", 2)).await;
    assert!(vetted.kernels.iter().all(|k| tier(k) == Tier::Compiled), "nothing was confirmed yet");
    for key in [&clean_key, &turned_key] {
        wait_until(&cache, key, "confirmed, by a vetted publisher", |p| p.confirmed && p.vetted).await;
    }

    // Then it turns bad on the other key: vetted, but these bytes are nobody else's.
    let wrong = wrong_envelope(&writer, &turned_key).await;
    publish_first(&redis, &writer, &turned_key, wrong).await;
    let Lookup::Hit(_, Some(p)) = writer.get(&turned_key).await.unwrap() else { panic!("not published") };
    assert_eq!((p.host.as_str(), p.vetted, p.confirmed), ("turns-bad", true, false));

    let first = fresh_host(&cache, CONFIRMED);
    let taken = compile_job(&first.client().await, vector_graph("sm_90", 2)).await;
    let served = taken.kernel(&clean.id).unwrap();
    assert_eq!((tier(served), &served.artifact), (Tier::Remote, &clean.artifact), "a confirmed artifact is served");
    let compiled = taken.kernel(&turned.id).unwrap();
    assert_eq!(compiled.artifact, turned.artifact, "the writer's bytes were served");
    assert_eq!(tier(compiled), Tier::Compiled);
    assert_eq!(metric(&first, "kiln_vetting_total{result=\"held\"}"), 1.0);
    assert_eq!(metric(&first, "kiln_vetting_total{result=\"mismatch\"}"), 1.0);
    let records = writer.list_quarantine(0, 0).await.unwrap().records;
    assert_eq!(records.iter().map(|r| r.key.as_str()).collect::<Vec<_>>(), [turned.key.as_str()]);
    let stats = first.client().await.stats().await.unwrap().audit.unwrap();
    assert_eq!(stats.vet, "confirmed");
}
