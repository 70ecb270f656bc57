//! What this host writes to the fleet cache beside its answers: a compile's result (then its
//! lease's release), recipe books, and graph manifests. These writes go on as tracked work that
//! an answer waits for at most [`PUBLISH_WAIT`].

use super::Cache;
use crate::core::fleet::lease::HeldLease;
use bytes::Bytes;
use kiln_proto::CacheKey;
use std::sync::Arc;
use std::time::Duration;

/// How long a published manifest is not published again by a job the caches answered wholly.
/// kiln-cache slides a manifest's TTL on every read, so a graph in use stays published.
const MANIFEST_MEMORY: Duration = Duration::from_secs(600);

/// How long a compile's answer waits for its writes to the fleet cache before it goes out
/// without them. A reachable kiln-cache takes milliseconds, so the answer normally leaves after
/// the publish, and a caller that next asks another host finds the kernel there (`kiln lookup`
/// included, which never waits on a lease). A kiln-cache that does not answer (a partition: every
/// call hangs until the client's 30 s request timeout) costs the answer this much, no more; the
/// write goes on as tracked work, bounded by that timeout, and shutdown waits for it. Other hosts
/// lose nothing by the early answer: the lease is released only after the publish, so until then
/// they see it held and wait for the entry rather than compile.
pub const PUBLISH_WAIT: Duration = Duration::from_millis(500);

/// What a compile leaves for the fleet cache, published after the answer's local stores.
#[derive(Debug)]
pub enum ForFleet {
    /// The sealed envelope of a fresh artifact.
    Artifact(Bytes),
    /// A failed compile, published as a short-lived negative entry that releases every waiter.
    Failure { log: String, compile_micros: u64 },
}

/// The memory of manifests published lately. A graph answered wholly from the caches does not
/// publish its manifest again while it is here: a warm host would otherwise write to kiln-cache
/// on every hit (thousands of writes a second under load).
pub(super) fn manifest_memory() -> moka::sync::Cache<CacheKey, ()> {
    moka::sync::Cache::builder().max_capacity(100_000).time_to_live(MANIFEST_MEMORY).build()
}

impl Cache {
    /// Publishes a compile's result to the fleet cache and then releases its lease, in that order
    /// (another host either finds the entry or still sees the lease and waits for it), as tracked
    /// work that the answer waits for at most [`PUBLISH_WAIT`]: a leader cut off from kiln-cache
    /// answers its own client from what it just compiled instead of waiting out the fleet call.
    pub async fn hand_to_fleet(&self, key: CacheKey, result: ForFleet, lease: Option<HeldLease>) {
        let Some(fleet) = self.fleet.clone() else { return };
        self.write_to_fleet("fleet-publish", async move {
            match result {
                // A fleet believed down is skipped, not asked (and counted as an error) again.
                ForFleet::Artifact(envelope) if fleet.usable() => fleet.publish(&key, &envelope).await,
                ForFleet::Artifact(_) => {}
                ForFleet::Failure { log, compile_micros } => fleet.publish_failure(&key, &log, compile_micros).await,
            }
            if let Some(lease) = lease {
                lease.release().await;
            }
        })
        .await;
    }

    /// Runs `write` (calls to the fleet cache) as tracked work of `kind` and waits for it at most
    /// [`PUBLISH_WAIT`]; past that it goes on by itself, and shutdown waits for it.
    pub async fn write_to_fleet(&self, kind: &'static str, write: impl Future<Output = ()> + Send + 'static) {
        let started = std::time::Instant::now();
        if tokio::time::timeout(PUBLISH_WAIT, self.work.spawn(kind, write)).await.is_err() {
            self.metrics.fleet_writes_backgrounded.inc();
            tracing::debug!(kind, waited = ?started.elapsed(), "the fleet cache is slow to answer; answering without it");
        }
    }

    /// Whether a finished job should publish its graph's manifest, remembering that it will. Asked
    /// on the job's path, so a warm hit that needs no write spawns nothing. `again`: the job
    /// compiled or waited for something, so the fleet may have lost the manifest (Redis restarted
    /// empty) and it is written whatever this daemon published before; otherwise a manifest
    /// published in the last [`MANIFEST_MEMORY`] is not written again. Remembered before the
    /// write, so a burst of hits on one graph sends one.
    pub fn manifest_due(&self, graph_key: &CacheKey, again: bool) -> bool {
        if self.fleet_up().is_none() || (!again && self.manifests.contains_key(graph_key)) {
            return false;
        }
        self.manifests.insert(*graph_key, ());
        true
    }

    /// Publishes a graph manifest (graph key → kernel keys) so another host can warm the whole
    /// graph by its key; after [`Cache::manifest_due`], in the background: the manifest is for
    /// the next host's warm start, and its round trip was a fifth of a fresh host's warm start.
    pub fn publish_manifest(self: &Arc<Self>, graph_key: CacheKey, kernel_keys: Vec<CacheKey>) {
        let this = Arc::clone(self);
        self.work.spawn("publish-manifest", async move {
            let Some(fleet) = this.fleet_up() else { return };
            if let Err(e) = fleet.put_manifest(&graph_key, &kernel_keys).await {
                this.manifests.invalidate(&graph_key);
                tracing::warn!(%graph_key, error = %e, "could not publish the graph manifest");
            }
        });
    }
}
