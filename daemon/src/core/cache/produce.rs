//! One way to produce an artifact that many may ask for at once: look it up, claim it (this
//! host's processes first, then the fleet lease), and either take what another producer stored
//! or be granted the right to produce it. The producer then stores through the [`Cache`] and
//! lets its grant go, which wakes whoever waited.
//!
//! Kernels decide in the engine, whose in-process single flight already makes one leader per
//! key, so they take only the fleet step ([`Cache::claim_or_hit`]). Blobs and torch graphs are
//! produced by client processes or workers that come and go, so they take the whole
//! [`Producer::decide`], whose holding lives as long as the producer's stream.

use super::Cache;
use super::holders::{self, Holders, Holding, Try, Waited};
use crate::core::fleet::Claim;
use crate::core::fleet::lease::HeldLease;
use crate::domain::Answer;
use kiln_proto::CacheKey;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What [`Cache::claim_or_hit`] gives a caller that missed on this host.
#[derive(Debug)]
pub enum Claimed {
    /// Another host's result, adopted into this host's tiers (or negative cache).
    Hit(Answer),
    /// Produce it here, holding the fleet lease when there is one.
    Lease(Option<HeldLease>),
}

impl Cache {
    /// After this host missed `key`: the fleet's lease on it, or what another host published
    /// while this one waited, adopted here. Without a fleet there is nothing to claim.
    pub async fn claim_or_hit(&self, key: &CacheKey) -> Claimed {
        let Some(fleet) = self.fleet() else { return Claimed::Lease(None) };
        let claim = fleet.claim(key).await;
        self.claimed(key, claim).await
    }

    /// [`Cache::claim_or_hit`] for a caller that waits for nobody: None where another host
    /// holds the fleet's lease on `key` now.
    pub async fn try_claim_or_hit(&self, key: &CacheKey) -> Option<Claimed> {
        let Some(fleet) = self.fleet() else { return Some(Claimed::Lease(None)) };
        let claim = fleet.try_claim(key).await?;
        Some(self.claimed(key, claim).await)
    }

    async fn claimed(&self, key: &CacheKey, claim: Claim) -> Claimed {
        match claim {
            Claim::Compile(lease) => Claimed::Lease(lease),
            Claim::Found(found) => Claimed::Hit(self.adopt(key, found).await),
        }
    }
}

/// Who produces an entry, as decided for one request.
#[derive(Debug)]
pub enum Decision<T> {
    /// Stored already, or by whoever held it while this request waited.
    Found(T),
    /// Waited past the bound for another producer: produce it without holding it.
    Proceed(String),
    /// This request produces it.
    Granted(Grant),
}

/// The right to produce a key: this host's holding and, with a fleet, its lease. Both are let go
/// by [`Grant::release`]; a grant dropped instead releases this host's waiters at once and
/// leaves the lease to expire.
#[derive(Debug)]
pub struct Grant {
    holding: Holding,
    lease: Option<HeldLease>,
}

impl Grant {
    /// Whether other hosts wait on this grant too (the fleet lease is held).
    pub fn fleet_leased(&self) -> bool {
        self.lease.is_some()
    }

    /// Resolves once the key is stored through this host.
    pub async fn published(&mut self) {
        self.holding.published().await;
    }

    /// Lets go of the key here and in the fleet.
    pub async fn release(self) {
        drop(self.holding);
        if let Some(lease) = self.lease {
            lease.release().await;
        }
    }
}

/// Single flight for entries that client processes or workers produce: the [`Cache`], and which
/// of this host's requests holds which key.
#[derive(Debug)]
pub struct Producer {
    cache: Arc<Cache>,
    holders: Arc<Holders>,
    default_wait: Duration,
}

impl Producer {
    /// `default_wait`: how long a request that names no bound waits for another producer.
    pub fn new(cache: Arc<Cache>, default_wait: Duration) -> Self {
        Producer { cache, holders: Arc::default(), default_wait }
    }

    pub fn cache(&self) -> &Arc<Cache> {
        &self.cache
    }

    /// How long a request that names no bound waits for another producer: the fleet's hedge
    /// bound (a producer on another host is waited for as long as the fleet waits for one), or
    /// the server's own bound without a fleet.
    pub fn default_wait(&self) -> Duration {
        self.default_wait
    }

    /// Decides who produces `key` within `wait`: an entry already there (what `open` makes of
    /// it), another process on this host, another host (through the fleet lease), or this
    /// caller. An answer `open` refuses (a failure, an entry of another kind) is produced again.
    ///
    /// The fleet is read by the one request of this host that holds `key`: the others wait for
    /// it and find its answer in this host's tiers, so a host's many requests for one key (the
    /// ranks of a job asking for the same graph) cost the fleet cache one read, not one each.
    pub async fn decide<T>(&self, key: &CacheKey, wait: Duration, open: impl Fn(&Answer) -> Option<T>) -> Decision<T> {
        let deadline = Instant::now() + wait;
        loop {
            if let Some(found) = self.cache.cached_here(key).await.as_ref().and_then(&open) {
                return Decision::Found(found);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            let holding = match self.holders.try_hold(key) {
                Try::Held(holding) => holding,
                Try::Busy(rx) => match holders::wait(rx, left).await {
                    Waited::TimedOut => {
                        return Decision::Proceed(format!("waited {wait:?} for another process on this host"));
                    }
                    Waited::Published | Waited::Released => continue,
                },
            };
            // Looked for again under the holding: a holder that published and let go between
            // the look above and this holding left its entry in the tiers, and without this look
            // the waiter it woke would compile the key a second time.
            if let Some(found) = self.cache.cached(key).await.as_ref().and_then(&open) {
                // Stored here now: whoever waits on this host finds it in the tiers.
                self.holders.published(key);
                return Decision::Found(found);
            }
            return match tokio::time::timeout(left, self.cache.claim_or_hit(key)).await {
                Err(_) => Decision::Proceed(format!("waited {wait:?} for another host")),
                Ok(claimed) => self.granted(key, holding, claimed, &open),
            };
        }
    }

    /// [`Producer::decide`] for a caller that waits for nobody: None where another process on
    /// this host or another host produces `key` now (the caller produces it for itself alone).
    /// Never [`Decision::Proceed`].
    pub async fn decide_now<T>(&self, key: &CacheKey, open: impl Fn(&Answer) -> Option<T>) -> Option<Decision<T>> {
        if let Some(found) = self.cache.cached(key).await.as_ref().and_then(&open) {
            return Some(Decision::Found(found));
        }
        let Try::Held(holding) = self.holders.try_hold(key) else { return None };
        // As in `decide`: a holder may have published and let go since the look above.
        if let Some(found) = self.cache.cached_here(key).await.as_ref().and_then(&open) {
            return Some(Decision::Found(found));
        }
        let claimed = self.cache.try_claim_or_hit(key).await?;
        Some(self.granted(key, holding, claimed, &open))
    }

    /// This host's holding of `key` and the fleet's word on it: the grant, or another host's
    /// result (a result `open` refuses is produced again, under this holding).
    fn granted<T>(
        &self,
        key: &CacheKey,
        holding: Holding,
        claimed: Claimed,
        open: impl Fn(&Answer) -> Option<T>,
    ) -> Decision<T> {
        match claimed {
            Claimed::Lease(lease) => Decision::Granted(Grant { holding, lease }),
            Claimed::Hit(answer) => {
                if answer.is_ok() {
                    self.holders.published(key);
                }
                match open(&answer) {
                    Some(found) => Decision::Found(found),
                    None => Decision::Granted(Grant { holding, lease: None }),
                }
            }
        }
    }

    /// Marks `key` stored (or never to be stored by its holder), waking whoever waits on this
    /// host to look again.
    pub fn published(&self, key: &CacheKey) {
        self.holders.published(key);
    }

    /// Whether a request on this host holds `key` now.
    #[cfg(test)]
    pub fn is_held(&self, key: &CacheKey) -> bool {
        self.holders.is_held(key)
    }

    /// Resolves once a request on this host holds `key` (at once if one does).
    pub async fn until_held(&self, key: &CacheKey) {
        self.holders.until_held(key).await;
    }
}
