//! Fleet single-flight: in a whole cluster, one host pays a given cold compile.
//!
//! On a miss in every tier, a daemon takes the key's lease in kiln-cache (a random holder token,
//! new for each acquisition) and compiles, renewing the lease every third of its TTL. A daemon
//! that finds the lease held subscribes to publish notifications, **then** checks for the
//! artifact (and checks again after every resubscribe), so a publish that lands in between is
//! never missed; then it waits. It retries the lease when a release is announced (a holder that
//! gave up) and once per TTL, so when a holder dies its lease expires and exactly one waiter
//! takes over. A holder whose compile fails publishes a
//! negative entry, which releases every waiter at once with the log. A waiter past the hedge
//! bound compiles by itself. Whatever goes wrong with the fleet cache, the answer is "compile
//! here": the fleet can save work, never cost a compile.

use crate::metrics::{Metrics, TierLabels};
use crate::store::remote::RemoteTier;
use kiln_cache_server::client::{Lookup, PublishEvent, new_holder};
use kiln_proto::CacheKey;
use kiln_proto::envelope::{self, Artifact};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Debug)]
pub struct Fleet {
    pub tier: Arc<RemoteTier>,
    pub lease_ttl: Duration,
    pub hedge: Duration,
    /// Off only to measure what single-flight saves.
    pub leases: bool,
    pub negative_ttl: Duration,
    pub metrics: Arc<Metrics>,
    pub max_artifact_bytes: u64,
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

/// A lease this daemon holds; renewed in the background until released or dropped.
#[derive(Debug)]
pub struct HeldLease {
    key: CacheKey,
    holder: String,
    tier: Arc<RemoteTier>,
    renew: tokio::task::JoinHandle<()>,
}

impl HeldLease {
    fn start(key: CacheKey, holder: String, tier: Arc<RemoteTier>, ttl: Duration) -> Self {
        let (k, h, t) = (key, holder.clone(), Arc::clone(&tier));
        let renew = tokio::spawn(async move {
            loop {
                tokio::time::sleep(ttl / 3).await;
                match t.client.renew_lease(&k, &h, ttl).await {
                    Ok(true) => {}
                    Ok(false) => {
                        tracing::warn!(key = %k, "lost the fleet lease while compiling; another host may compile too");
                        return;
                    }
                    Err(e) => tracing::warn!(key = %k, error = %e, "renewing the fleet lease failed; retrying"),
                }
            }
        });
        HeldLease { key, holder, tier, renew }
    }

    /// Stops renewing and releases the lease (compare-and-delete on the holder token).
    pub async fn release(self) {
        self.renew.abort();
        if let Err(e) = self.tier.client.release_lease(&self.key, &self.holder).await {
            tracing::warn!(key = %self.key, error = %e, "releasing the fleet lease failed; it will expire");
        }
    }
}

impl Drop for HeldLease {
    fn drop(&mut self) {
        // A lease dropped without release (a cancelled task) stops renewing and expires.
        self.renew.abort();
    }
}

impl Fleet {
    /// Decides who compiles `key`: this host (with the lease, or without one when the fleet
    /// cache is down or the hedge bound passed) or another host, whose result comes back.
    pub async fn claim(&self, key: &CacheKey) -> Claim {
        if !self.leases {
            return Claim::Compile(None);
        }
        let started = Instant::now();
        let mut waited = false;
        loop {
            if !self.tier.usable() {
                return Claim::Compile(None);
            }
            let holder = new_holder();
            let acquired = self.tier.client.acquire_lease(key, &holder, self.lease_ttl).await;
            self.tier.observe(&acquired);
            match acquired {
                Ok(true) => {
                    self.metrics.lease(if waited { "takeover" } else { "acquired" });
                    let lease = HeldLease::start(*key, holder, Arc::clone(&self.tier), self.lease_ttl);
                    // The previous holder may have published just before its lease ended.
                    if let Some(found) = self.fetch(key).await {
                        lease.release().await;
                        return Claim::Found(found);
                    }
                    return Claim::Compile(Some(lease));
                }
                Ok(false) => {}
                Err(e) => {
                    tracing::warn!(%key, error = %e, "fleet lease unavailable; compiling here");
                    self.metrics.lease("error");
                    return Claim::Compile(None);
                }
            }
            if !waited {
                self.metrics.lease("waited");
                waited = true;
            }
            match self.wait_for_publish(key, started).await {
                Wait::Found(found) => return Claim::Found(*found),
                Wait::RetryLease => continue,
                Wait::Hedge => {
                    self.metrics.lease("timeout");
                    tracing::warn!(%key, bound = ?self.hedge, "waited past the hedge bound; compiling here too");
                    return Claim::Compile(None);
                }
                Wait::Unavailable => return Claim::Compile(None),
            }
        }
    }

    /// Waits up to one lease TTL for the holder's publish.
    async fn wait_for_publish(&self, key: &CacheKey, started: Instant) -> Wait {
        let stream = self.tier.client.watch_publish(std::slice::from_ref(key)).await;
        self.tier.observe(&stream);
        let Ok(mut stream) = stream else { return Wait::Unavailable };
        let retry_at = Instant::now() + self.lease_ttl;
        loop {
            let hedge_left = self.hedge.saturating_sub(started.elapsed());
            if hedge_left.is_zero() {
                return Wait::Hedge;
            }
            let wait = retry_at.saturating_duration_since(Instant::now()).min(hedge_left);
            match tokio::time::timeout(wait, stream.next_event()).await {
                // Subscribed (first, or again after the server resubscribed): check now, since a
                // publish may have landed before the subscription was live.
                Ok(Ok(Some(PublishEvent::Subscribed))) => {
                    if let Some(found) = self.fetch(key).await {
                        return Wait::Found(Box::new(found));
                    }
                }
                // A publish, or a release (announced the same way): with nothing to fetch, the
                // holder let go without a result, so try for the lease now.
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
            let stream = self.tier.client.watch_publish(std::slice::from_ref(key)).await;
            self.tier.observe(&stream);
            if let Ok(mut stream) = stream {
                while let Ok(Some(_)) = stream.next_event().await {
                    if let Some(found @ Found::Artifact(..)) = self.fetch(key).await {
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
        let result = self.tier.client.get(key).await;
        self.tier.observe(&result);
        match result {
            Ok(lookup) => self.verify(key, lookup),
            Err(_) => {
                self.metrics.lookup("remote", "error");
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
            Lookup::Hit(bytes) => match envelope::open(&bytes, key, self.max_artifact_bytes) {
                Ok(artifact) => {
                    self.metrics.lookup("remote", "hit");
                    self.metrics.bytes("remote", "read", bytes.len());
                    Some(Found::Artifact(Box::new(artifact), bytes))
                }
                Err(e) => {
                    tracing::warn!(%key, error = %e, "corrupt fleet cache entry; it will be recompiled and replaced");
                    self.metrics.integrity_failures.get_or_create(&TierLabels { tier: "remote" }).inc();
                    self.metrics.lookup("remote", "miss");
                    None
                }
            },
            Lookup::Negative(n) => {
                self.metrics.lookup("remote", "hit");
                Some(Found::Failed { log: n.log, compile_micros: n.compile_micros })
            }
            Lookup::Miss => {
                self.metrics.lookup("remote", "miss");
                None
            }
        }
    }

    /// Tells the fleet a compile failed, releasing its waiters with the log.
    pub async fn publish_failure(&self, key: &CacheKey, log: &str, compile_micros: u64) {
        let result = self.tier.client.put_negative(key, log, compile_micros, self.negative_ttl).await;
        self.tier.observe(&result);
        if let Err(e) = result {
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
