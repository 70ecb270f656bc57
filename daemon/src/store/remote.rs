//! The remote tier: the fleet cache, kiln-cache, through its client.
//!
//! A remote failure is a miss plus a metric, never a failed compile. While the server does not
//! answer, a breaker skips it (each skip counts as an error) instead of paying a connect timeout
//! per lookup; a background probe with exponential backoff closes the breaker when the server is
//! back and keeps `kiln_remote_up` true to what it sees. tonic's channel reconnects by itself.

use super::{Store, StoreError, StoreFuture, Stored, TierName, Usage};
use crate::metrics::Metrics;
use bytes::Bytes;
use kiln_cache_server::client::{ClientError, Lookup, RemoteCache};
use kiln_proto::CacheKey;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

#[derive(Debug)]
pub struct RemoteTier {
    pub client: RemoteCache,
    /// Open (true) while the server is believed down: lookups skip it.
    down: AtomicBool,
    metrics: Arc<Metrics>,
    /// Wakes the probe when a call fails, so the breaker opens and closes promptly.
    wake: tokio::sync::Notify,
}

impl RemoteTier {
    pub fn new(client: RemoteCache, metrics: Arc<Metrics>) -> Arc<Self> {
        metrics.remote_up.set(0);
        Arc::new(RemoteTier { client, down: AtomicBool::new(false), metrics, wake: tokio::sync::Notify::new() })
    }

    /// Whether the breaker lets calls through.
    pub fn usable(&self) -> bool {
        !self.down.load(Ordering::Relaxed)
    }

    /// Records the result of a call: transport failures open the breaker.
    pub fn observe<T>(&self, result: &Result<T, ClientError>) {
        match result {
            Ok(_) => {
                self.down.store(false, Ordering::Relaxed);
                self.metrics.remote_up.set(1);
            }
            Err(e) if is_outage(e) => {
                if !self.down.swap(true, Ordering::Relaxed) {
                    tracing::warn!(error = %e, "fleet cache unreachable; serving from local tiers until it returns");
                }
                self.metrics.remote_up.set(0);
                self.wake.notify_one();
            }
            Err(_) => {}
        }
    }

    /// Probes the server until `stop`: every 5 s while up, with backoff from 100 ms to 5 s while
    /// down.
    pub async fn probe(self: Arc<Self>, stop: tokio_util::sync::CancellationToken) {
        let mut backoff = Duration::from_millis(100);
        loop {
            // kiln-cache answers Stats while Redis is down, so health is its `redis_up`.
            let healthy = match self.client.stats().await {
                Ok(stats) if stats.redis_up => {
                    self.observe(&Ok::<(), ClientError>(()));
                    true
                }
                Ok(_) => {
                    self.mark_down("kiln-cache reports Redis down");
                    false
                }
                Err(e) => {
                    self.observe(&Err::<(), _>(e));
                    false
                }
            };
            let wait = if healthy {
                backoff = Duration::from_millis(100);
                Duration::from_secs(5)
            } else {
                backoff = (backoff * 2).min(Duration::from_secs(5));
                backoff
            };
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(wait) => {}
                _ = self.wake.notified(), if healthy => {}
            }
        }
    }

    fn mark_down(&self, why: &str) {
        if !self.down.swap(true, Ordering::Relaxed) {
            tracing::warn!(why, "fleet cache unusable; serving from local tiers until it returns");
        }
        self.metrics.remote_up.set(0);
    }
}

/// Errors that mean "the server is not there", as opposed to a refused request.
pub fn is_outage(e: &ClientError) -> bool {
    matches!(
        e.code(),
        Some(tonic::Code::Unavailable | tonic::Code::DeadlineExceeded | tonic::Code::Unknown | tonic::Code::Cancelled)
    )
}

fn skipped() -> StoreError {
    StoreError::remote("the fleet cache is unreachable (breaker open)")
}

impl Store for RemoteTier {
    fn name(&self) -> TierName {
        TierName::Remote
    }

    fn get<'a>(&'a self, key: &'a CacheKey) -> StoreFuture<'a, Result<Option<Stored>, StoreError>> {
        Box::pin(async move {
            if !self.usable() {
                return Err(skipped());
            }
            let result = self.client.get(key).await;
            self.observe(&result);
            match result.map_err(StoreError::remote)? {
                Lookup::Hit(bytes) => Ok(Some(Stored::packed(Bytes::from(bytes)))),
                // Negative entries are the engine's business (see fleet.rs), not a tier's.
                Lookup::Negative(_) | Lookup::Miss => Ok(None),
            }
        })
    }

    fn put<'a>(&'a self, key: &'a CacheKey, stored: Stored) -> StoreFuture<'a, Result<(), StoreError>> {
        let envelope = stored.envelope;
        Box::pin(async move {
            if !self.usable() {
                return Err(skipped());
            }
            let result = self.client.put(key, envelope.to_vec()).await;
            self.observe(&result);
            result.map_err(StoreError::remote)
        })
    }

    /// A corrupt remote entry is repaired by the next put of the same key (the recompile that
    /// follows), so there is nothing to delete here; kiln-cache also deletes values that fail
    /// its own check.
    fn remove<'a>(&'a self, _key: &'a CacheKey) -> StoreFuture<'a, Result<(), StoreError>> {
        Box::pin(async { Ok(()) })
    }

    fn usage(&self) -> Usage {
        Usage::default()
    }
}
