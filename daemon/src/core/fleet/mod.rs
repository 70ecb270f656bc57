//! The fleet: the cache every host shares (kiln-cache) and single-flight over it, so that in a
//! whole cluster one host pays a given cold compile.
//!
//! - [`tier`]: the fleet cache behind a breaker; every call goes through it and is observed. The
//!   calls themselves are kiln-cache-client's `CacheClient`, which `RemoteCache` runs (and its
//!   `FakeCache`, in the unit tests).
//! - [`lease`]: a lease held while compiling, renewed in the background.
//! - `calls`: the named questions the rest of the daemon asks the fleet (its state, the audit's
//!   view, Contains, manifests, quarantines), so no caller reaches into a `Fleet`'s parts.
//! - here: who compiles a key ([`Fleet::claim`]), waiting for another host's result, and turning
//!   fleet answers (artifacts, negative entries, misses) into verified [`Found`]s.
//!
//! Each key is read from kiln-cache at most once per request on the paths that matter: a graph's
//! misses are one BatchGet; acquiring a lease reports an entry that is already there (one atomic
//! step, so a holder never reads the key again), and a waiter's watch stream carries the entry
//! when it lands, so waiting costs no Get either.
//!
//! On a miss in every tier, a daemon takes the key's lease in kiln-cache (a random holder token,
//! new for each acquisition) and compiles, renewing the lease every third of its TTL. A daemon
//! that finds the lease held watches the key; the server checks for the entry once its
//! subscription is live (and after every resubscribe), so a publish that lands in between is
//! never missed; then it waits. It retries the lease when a release is announced (a holder that
//! gave up) and once per TTL, so when a holder dies its lease expires and exactly one waiter
//! takes over. A holder whose compile fails publishes a
//! negative entry, which releases every waiter at once with the log. A waiter past the hedge
//! bound compiles by itself. Whatever goes wrong with the fleet cache, the answer is "compile
//! here": the fleet can save work, never cost a compile.

mod calls;
pub mod lease;
mod settle;
#[cfg(test)]
mod tests;
pub mod tier;

use crate::core::audit::Auditor;
use crate::domain::TierName;
use crate::metrics::{LeaseResult, Metrics};
use kiln_cache_client::{Acquired, Lookup, PublishEvent, new_holder};
use kiln_proto::CacheKey;
use kiln_proto::envelope::Artifact;
use kiln_proto::pb::NegativeEntry;
use lease::HeldLease;
use std::sync::Arc;
use std::time::Duration;
use tier::RemoteTier;
// tokio's clock, so that tests with paused time pass the hedge bound and lease TTLs.
use tokio::time::Instant;
use tokio_stream::StreamExt;

/// How this host takes part in the fleet: `[remote]`'s lease settings and the daemon's limits.
#[derive(Debug, Clone)]
pub struct Settings {
    pub lease_ttl: Duration,
    pub hedge: Duration,
    /// Off only to measure what single-flight saves.
    pub leases: bool,
    pub negative_ttl: Duration,
    pub max_artifact_bytes: u64,
}

/// Cheap to clone (shared handles and settings): a publish that outlives its request takes one.
///
/// Its fields are private: the rest of the daemon asks the fleet named questions rather than
/// reaching into its tier or its auditor, so what a fleet call checks, counts and logs stays in
/// this module, and the modules that ask depend on the fleet, not on its parts.
#[derive(Debug, Clone)]
pub struct Fleet {
    tier: Arc<RemoteTier>,
    lease_ttl: Duration,
    hedge: Duration,
    leases: bool,
    negative_ttl: Duration,
    metrics: Arc<Metrics>,
    max_artifact_bytes: u64,
    /// Who published what this host fetched, what to audit, and what the fleet quarantined.
    audit: Arc<Auditor>,
}

/// What another host left for a key.
#[derive(Debug)]
pub enum Found {
    /// A verified artifact and its envelope bytes (for the local tiers).
    Artifact(Box<Artifact>, Vec<u8>),
    /// A failed compile, with its log.
    Failed { log: String, compile_micros: u64 },
}

/// The outcome of [`Fleet::claim`].
#[derive(Debug)]
pub enum Claim {
    /// Compile here, holding the lease when there is one.
    Compile(Option<HeldLease>),
    /// Another host's result.
    Found(Found),
}

impl Fleet {
    /// The fleet over `tier`, whose answers `audit` samples and remembers the publishers of;
    /// `metrics` are the daemon's, so fleet lookups count beside the local tiers'.
    pub fn new(settings: Settings, tier: Arc<RemoteTier>, audit: Arc<Auditor>, metrics: Arc<Metrics>) -> Self {
        let Settings { lease_ttl, hedge, leases, negative_ttl, max_artifact_bytes } = settings;
        Fleet { tier, lease_ttl, hedge, leases, negative_ttl, metrics, max_artifact_bytes, audit }
    }

    /// Decides who compiles `key`: this host (with the lease, or without one when the fleet
    /// cache is down or the hedge bound passed) or another host, whose result comes back.
    pub async fn claim(&self, key: &CacheKey) -> Claim {
        // A patient claim always decides: past the hedge bound it compiles here.
        self.claim_within(key, true).await.unwrap_or(Claim::Compile(None))
    }

    /// [`Fleet::claim`] for a caller that waits for nobody: None where another host holds the
    /// lease now (the caller compiles for itself and shares nothing).
    pub async fn try_claim(&self, key: &CacheKey) -> Option<Claim> {
        self.claim_within(key, false).await
    }

    async fn claim_within(&self, key: &CacheKey, patient: bool) -> Option<Claim> {
        if !self.leases {
            return Some(Claim::Compile(None));
        }
        let started = Instant::now();
        let mut waited = false;
        let mut present_but_unreadable = false;
        loop {
            if !self.tier.usable() {
                return Some(Claim::Compile(None));
            }
            let holder = new_holder();
            match self.tier.acquire_lease(key, &holder, self.lease_ttl).await {
                Ok(Acquired::Taken) => {
                    self.metrics.lease(if waited { LeaseResult::Takeover } else { LeaseResult::Acquired });
                    // The server checked in the same step that nothing is stored under the key.
                    let lease = HeldLease::start(*key, holder, Arc::clone(&self.tier), self.lease_ttl);
                    return Some(Claim::Compile(Some(lease)));
                }
                // Another host published since this request's first look: read it, once. An
                // entry that reads as a miss (damaged, so deleted; or a negative entry that just
                // expired) gets one more try for the lease, then this host compiles.
                Ok(Acquired::Present) => {
                    self.metrics.lease(LeaseResult::Present);
                    if let Some(found) = self.fetch(key).await {
                        return Some(Claim::Found(found));
                    }
                    // An unvetted publisher's kernel: this host compiles it now, and compares.
                    if present_but_unreadable || self.audit.holds(key) {
                        return Some(Claim::Compile(None));
                    }
                    present_but_unreadable = true;
                    continue;
                }
                Ok(Acquired::Held) if !patient => return None,
                Ok(Acquired::Held) => {}
                Err(e) => {
                    tracing::warn!(%key, error = %e, "fleet lease unavailable; compiling here");
                    self.metrics.lease(LeaseResult::Error);
                    return Some(Claim::Compile(None));
                }
            }
            if !waited {
                self.metrics.lease(LeaseResult::Waited);
                waited = true;
            }
            match self.wait_for_publish(key, started).await {
                Wait::Found(found) => return Some(Claim::Found(*found)),
                Wait::RetryLease => continue,
                Wait::Hedge => {
                    self.metrics.lease(LeaseResult::Timeout);
                    tracing::warn!(%key, bound = ?self.hedge, "waited past the hedge bound; compiling here too");
                    return Some(Claim::Compile(None));
                }
                Wait::Unavailable => return Some(Claim::Compile(None)),
            }
        }
    }

    /// Waits up to one lease TTL for the holder's publish.
    async fn wait_for_publish(&self, key: &CacheKey, started: Instant) -> Wait {
        let Ok(mut stream) = self.tier.watch(key).await else { return Wait::Unavailable };
        let retry_at = Instant::now() + self.lease_ttl;
        loop {
            let hedge_left = self.hedge.saturating_sub(started.elapsed());
            if hedge_left.is_zero() {
                return Wait::Hedge;
            }
            let wait = retry_at.saturating_duration_since(Instant::now()).min(hedge_left);
            match tokio::time::timeout(wait, stream.next()).await.map(Option::transpose) {
                // Subscribed (first, or again after the server resubscribed): the server has
                // looked for the entry and sends it next if there is one.
                Ok(Ok(Some(PublishEvent::Subscribed))) => {}
                // The entry, published or found at subscription.
                Ok(Ok(Some(PublishEvent::Value(_, lookup)))) => match self.verify(key, lookup) {
                    Some(found) => return Wait::Found(Box::new(found)),
                    None => return Wait::RetryLease,
                },
                // A bare publish: a release without a result (or a server that could not read
                // the entry): look once, and with nothing there, try for the lease now.
                Ok(Ok(Some(PublishEvent::Published(_)))) => match self.fetch(key).await {
                    Some(found) => return Wait::Found(Box::new(found)),
                    None => return Wait::RetryLease,
                },
                Ok(Ok(None)) | Ok(Err(_)) => {
                    // The stream ended: wait out a moment rather than spin, then retry.
                    tokio::time::sleep(Duration::from_millis(50).min(wait)).await;
                    return Wait::RetryLease;
                }
                Err(_) if started.elapsed() >= self.hedge => return Wait::Hedge,
                Err(_) => return Wait::RetryLease,
            }
        }
    }

    /// Resolves with the artifact once another host publishes `key` (checking on every
    /// (re)subscription, so a publish in between is not missed); never, if the fleet cache's
    /// notifications are unavailable (the caller bounds the wait).
    pub async fn published_elsewhere(&self, key: &CacheKey) -> Found {
        loop {
            if let Ok(mut stream) = self.tier.watch(key).await {
                while let Some(Ok(event)) = stream.next().await {
                    let found = match event {
                        PublishEvent::Subscribed => continue,
                        PublishEvent::Value(_, lookup) => self.verify(key, lookup),
                        PublishEvent::Published(_) => self.fetch(key).await,
                    };
                    if let Some(found @ Found::Artifact(..)) = found {
                        return found;
                    }
                }
            }
            // The stream ended or could not open: try again after a pause, without spinning.
            tokio::time::sleep(self.lease_ttl / 3).await;
        }
    }

    /// Reads `key` from the fleet cache and verifies it.
    pub async fn fetch(&self, key: &CacheKey) -> Option<Found> {
        match self.tier.get(key).await {
            Ok(lookup) => self.verify(key, lookup),
            Err(_) => {
                self.metrics.lookup(TierName::Remote, "error");
                None
            }
        }
    }

    /// Turns a fleet cache answer into a verified [`Found`]; a corrupt entry is counted and
    /// treated as a miss, so it is recompiled and replaced.
    /// Every answer is counted in `kiln_cache_lookups_total{tier="remote"}` (and the bytes of a
    /// hit in `kiln_artifact_bytes_total`), as the local tiers count theirs.
    pub fn verify(&self, key: &CacheKey, lookup: Lookup) -> Option<Found> {
        match lookup {
            Lookup::Hit(bytes, _) if self.audit.quarantine.refuses(key, &bytes) => {
                tracing::warn!(%key, "the fleet served bytes it quarantined (a replica's recent copy); compiling here");
                self.metrics.quarantine_refusals.inc();
                self.metrics.lookup(TierName::Remote, "miss");
                None
            }
            Lookup::Hit(bytes, provenance) => match self.open(key, &bytes) {
                Ok(artifact) if self.audit.must_vet(&artifact.meta.toolchain, provenance.as_ref()) => {
                    // Not run before it is vetted: a miss, compiled here and compared after.
                    self.audit.hold(key, bytes, provenance);
                    self.metrics.lookup(TierName::Remote, "miss");
                    None
                }
                Ok(artifact) => {
                    self.audit.saw(key, provenance);
                    self.metrics.lookup(TierName::Remote, "hit");
                    self.metrics.bytes(TierName::Remote, "read", bytes.len());
                    Some(Found::Artifact(Box::new(artifact), bytes))
                }
                Err(e) => {
                    tracing::warn!(%key, error = %e, "corrupt fleet cache entry; it will be recompiled and replaced");
                    self.metrics.integrity_failure(TierName::Remote);
                    self.metrics.lookup(TierName::Remote, "miss");
                    None
                }
            },
            Lookup::Negative(n) => {
                self.metrics.lookup(TierName::Remote, "hit");
                Some(Found::Failed { log: n.log, compile_micros: n.compile_micros })
            }
            Lookup::Miss => {
                self.metrics.lookup(TierName::Remote, "miss");
                None
            }
        }
    }

    /// Stores a new artifact in the fleet cache (its publish releases other hosts' waiters),
    /// counted as the local tiers count their writes.
    pub async fn publish(&self, key: &CacheKey, envelope: &bytes::Bytes) {
        match self.tier.put(key, envelope.to_vec()).await {
            Ok(()) => {
                self.metrics.bytes(TierName::Remote, "write", envelope.len());
                self.metrics.write(TierName::Remote, "ok");
            }
            Err(e) => {
                self.metrics.write(TierName::Remote, "error");
                tracing::warn!(%key, error = %e, "fleet cache write failed; this host's tiers still hold the entry");
            }
        }
    }

    /// Reads many keys in one BatchGet and verifies each answer; `None` when the fleet cache did
    /// not answer (every key is then counted as a remote lookup error).
    pub async fn lookup_many(&self, keys: &[CacheKey]) -> Option<Vec<(CacheKey, Option<Found>)>> {
        match self.tier.batch_get(keys).await {
            Ok(answers) => Some(answers.into_iter().map(|(key, lookup)| (key, self.verify(&key, lookup))).collect()),
            Err(_) => {
                for _ in keys {
                    self.metrics.lookup(TierName::Remote, "error");
                }
                None
            }
        }
    }

    /// Tells the fleet a compile failed, releasing its waiters with the log.
    pub async fn publish_failure(&self, key: &CacheKey, log: &str, compile_micros: u64) {
        let failure = NegativeEntry { log: log.to_owned(), compile_micros };
        if let Err(e) = self.tier.put_negative(key, failure, self.negative_ttl).await {
            tracing::warn!(%key, error = %e, "could not publish a compile failure to the fleet");
        }
    }
}

enum Wait {
    Found(Box<Found>),
    RetryLease,
    Hedge,
    Unavailable,
}
