//! A fleet lease this daemon holds while it compiles a key, renewed in the background.

use super::tier::RemoteTier;
use kiln_proto::CacheKey;
use std::sync::Arc;
use std::time::Duration;

/// A lease this daemon holds; renewed every third of its TTL until released or dropped.
#[derive(Debug)]
pub struct HeldLease {
    key: CacheKey,
    holder: String,
    tier: Arc<RemoteTier>,
    renew: tokio::task::JoinHandle<()>,
}

impl HeldLease {
    pub(super) fn start(key: CacheKey, holder: String, tier: Arc<RemoteTier>, ttl: Duration) -> Self {
        let (k, h, t) = (key, holder.clone(), Arc::clone(&tier));
        let renew = tokio::spawn(async move {
            loop {
                tokio::time::sleep(ttl / 3).await;
                match t.renew_lease(&k, &h, ttl).await {
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
        if let Err(e) = self.tier.release_lease(&self.key, &self.holder).await {
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
