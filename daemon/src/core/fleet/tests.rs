//! The fleet's claims and its tier's breaker over an in-memory kiln-cache ([`FakeCache`]): several
//! hosts share one fake, as they share one kiln-cache. Time is tokio's, paused where a test waits
//! out a hedge bound, a lease TTL or the probe's backoff, so nothing here sleeps for real.

use super::tier::{FleetState, RemoteTier};
use super::{Claim, Fleet, Found, Settings};
use crate::core::audit::{Auditor, Policy};
use crate::metrics::{LeaseResult, Metrics};
use kiln_cache_client::FakeCache;
use kiln_proto::CacheKey;
use kiln_proto::envelope;
use kiln_proto::pb::ArtifactMeta;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

const KEY: CacheKey = CacheKey::from_bytes([7; 32]);
const TTL: Duration = Duration::from_secs(30);
const HEDGE: Duration = Duration::from_secs(120);

/// One host's side of the fleet over `cache`, with its own metrics.
fn host(cache: &FakeCache, lease_ttl: Duration, hedge: Duration) -> Fleet {
    let metrics = Arc::new(Metrics::new());
    let settings =
        Settings { lease_ttl, hedge, leases: true, negative_ttl: Duration::from_secs(60), max_artifact_bytes: 1 << 20 };
    let tier = RemoteTier::new(cache.clone(), "http://fake:7171", Arc::clone(&metrics));
    let auditor = Arc::new(Auditor::new(Policy::default(), Arc::clone(&metrics)));
    Fleet::new(settings, tier, auditor, metrics)
}

fn sealed(cubin: &[u8]) -> bytes::Bytes {
    envelope::seal(&KEY, ArtifactMeta { toolchain: "nvrtc".into(), ..Default::default() }, cubin).into()
}

fn leases(fleet: &Fleet, result: LeaseResult) -> u64 {
    fleet.metrics.leases_of(result)
}

#[tokio::test]
async fn one_host_compiles_a_key_and_the_others_get_its_publish() {
    let cache = FakeCache::default();
    let (a, b, c) = (host(&cache, TTL, HEDGE), host(&cache, TTL, HEDGE), host(&cache, TTL, HEDGE));
    let Claim::Compile(Some(lease)) = a.claim(&KEY).await else { panic!("the first host must take the lease") };
    let waiters: Vec<_> = [b, c]
        .into_iter()
        .map(|fleet| {
            tokio::spawn(async move {
                let claim = fleet.claim(&KEY).await;
                (fleet, claim)
            })
        })
        .collect();
    // Both waiters are watching the key before the holder publishes.
    cache.watches_reach(2).await;
    a.publish(&KEY, &sealed(b"cubin")).await;
    lease.release().await;
    for waiter in waiters {
        let (fleet, claim) = waiter.await.expect("waiter task");
        let Claim::Found(Found::Artifact(artifact, _)) = claim else { panic!("a waiter compiled: {claim:?}") };
        assert_eq!(&artifact.bytes[..], b"cubin");
        assert_eq!((leases(&fleet, LeaseResult::Waited), leases(&fleet, LeaseResult::Acquired)), (1, 0));
    }
    assert_eq!(leases(&a, LeaseResult::Acquired), 1);
    assert!(!cache.lease_held(&KEY), "the holder released its lease after its publish");
}

#[tokio::test]
async fn a_failed_compile_releases_its_waiters_with_the_log() {
    let cache = FakeCache::default();
    let (a, b) = (host(&cache, TTL, HEDGE), host(&cache, TTL, HEDGE));
    let Claim::Compile(Some(lease)) = a.claim(&KEY).await else { panic!("the first host must take the lease") };
    let waiter = tokio::spawn(async move { b.claim(&KEY).await });
    cache.watches_reach(1).await;
    a.publish_failure(&KEY, "error: expected ';'", 1500).await;
    lease.release().await;
    let claim = waiter.await.expect("waiter task");
    let Claim::Found(Found::Failed { log, compile_micros }) = claim else { panic!("not the failure: {claim:?}") };
    assert_eq!((log.as_str(), compile_micros), ("error: expected ';'", 1500));
}

#[tokio::test(start_paused = true)]
async fn a_waiter_past_the_hedge_bound_compiles_itself_while_the_holder_is_slow() {
    let cache = FakeCache::default();
    let hedge = Duration::from_secs(5);
    let (a, b) = (host(&cache, TTL, hedge), host(&cache, TTL, hedge));
    // The holder keeps its lease (renewed in the background) and never publishes.
    let Claim::Compile(Some(_lease)) = a.claim(&KEY).await else { panic!("the first host must take the lease") };
    let started = Instant::now();
    let claim = b.claim(&KEY).await;
    assert!(matches!(claim, Claim::Compile(None)), "{claim:?}");
    assert!(started.elapsed() >= hedge && started.elapsed() < TTL, "hedged after {:?}", started.elapsed());
    assert_eq!((leases(&b, LeaseResult::Waited), leases(&b, LeaseResult::Timeout)), (1, 1));
    assert!(cache.lease_held(&KEY), "the slow holder still holds its lease");
}

#[tokio::test(start_paused = true)]
async fn a_dead_holders_lease_expires_and_exactly_one_waiter_takes_over() {
    let cache = FakeCache::default();
    let ttl = Duration::from_secs(3);
    let (a, b, c) = (host(&cache, ttl, HEDGE), host(&cache, ttl, HEDGE), host(&cache, ttl, HEDGE));
    let Claim::Compile(Some(lease)) = a.claim(&KEY).await else { panic!("the first host must take the lease") };
    // The holder dies: its lease stops renewing and is never released.
    drop(lease);
    let started = Instant::now();
    let mut waiters = tokio::task::JoinSet::new();
    for fleet in [b, c] {
        waiters.spawn(async move {
            let claim = fleet.claim(&KEY).await;
            (fleet, claim)
        });
    }
    let (taker, claim) = waiters.join_next().await.expect("a waiter").expect("waiter task");
    let Claim::Compile(Some(lease)) = claim else { panic!("the first to finish must take over: {claim:?}") };
    assert!(started.elapsed() >= ttl, "taken over after {:?}, before the lease expired", started.elapsed());
    assert_eq!(leases(&taker, LeaseResult::Takeover), 1);
    // The other waiter gets the new holder's result instead of compiling too.
    taker.publish(&KEY, &sealed(b"cubin")).await;
    lease.release().await;
    let (other, claim) = waiters.join_next().await.expect("a waiter").expect("waiter task");
    assert!(matches!(claim, Claim::Found(Found::Artifact(..))), "{claim:?}");
    assert_eq!(leases(&other, LeaseResult::Takeover), 0);
}

#[tokio::test]
async fn a_key_published_since_the_first_look_is_read_not_compiled() {
    let cache = FakeCache::default();
    let (a, b) = (host(&cache, TTL, HEDGE), host(&cache, TTL, HEDGE));
    a.publish(&KEY, &sealed(b"cubin")).await;
    let claim = b.claim(&KEY).await;
    assert!(matches!(claim, Claim::Found(Found::Artifact(..))), "{claim:?}");
    assert_eq!(leases(&b, LeaseResult::Present), 1);
}

/// Waits (on tokio's clock) until `done` holds.
async fn until(done: impl Fn() -> bool) {
    while !done() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(start_paused = true)]
async fn the_breaker_opens_on_an_outage_lets_only_the_probe_try_and_closes_when_it_answers() {
    let cache = FakeCache::default();
    let metrics = Arc::new(Metrics::new());
    let tier = RemoteTier::new(cache.clone(), "http://fake:7171", Arc::clone(&metrics));
    assert_eq!(tier.state(), FleetState::Starting);
    tier.get(&KEY).await.expect("the fleet answers");
    assert_eq!((tier.state(), tier.usable(), metrics.remote_up.get()), (FleetState::Up, true, 1));

    // Open: the first failure opens the breaker, and later calls do not reach the server.
    cache.set_down(true);
    assert!(tier.get(&KEY).await.is_err());
    assert!(matches!(tier.state(), FleetState::Down(_)), "{:?}", tier.state());
    assert_eq!((tier.usable(), metrics.remote_up.get()), (false, 0));
    let reached = cache.calls();
    for _ in 0..10 {
        let skipped = tier.get(&KEY).await.expect_err("skipped while open");
        assert_eq!(skipped.code(), Some(tonic::Code::Unavailable));
    }
    assert_eq!(cache.calls(), reached, "calls reached the server while the breaker was open");

    // Half-open: only the probe tries the server, with backoff, while it stays down.
    let stop = tokio_util::sync::CancellationToken::new();
    let probe = tokio::spawn(Arc::clone(&tier).probe(stop.clone()));
    until(|| cache.probes() >= 3).await;
    assert!(!tier.usable(), "a failed probe closed the breaker");
    assert_eq!(cache.calls(), reached + cache.probes(), "only the probe reached the server");

    // Closed: the server answers the next probe, and calls go through again.
    cache.set_down(false);
    until(|| tier.usable()).await;
    assert_eq!((tier.state(), metrics.remote_up.get()), (FleetState::Up, 1));
    tier.get(&KEY).await.expect("calls go through once the breaker closed");
    stop.cancel();
    probe.await.expect("probe task");
}
