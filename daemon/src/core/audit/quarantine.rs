//! What the fleet quarantined, as this host knows it: polled from kiln-cache's list every
//! `quarantine_poll_ms`, each new record's key dropped from this host's tiers, and the bytes it
//! names refused if any replica still serves them (a replica's hot values outlive a quarantine
//! by up to their lifetime).

use super::lock;
use crate::core::fleet::tier::RemoteTier;
use crate::metrics::Metrics;
use kiln_proto::CacheKey;
use kiln_proto::pb::{QuarantineListRequest, QuarantineRecord};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How far back each poll asks again: a record is stamped when its quarantine starts and listed
/// when it ends, and replicas' clocks differ, so a record can land behind one already seen.
/// Records asked again are known, and skipped.
const OVERLAP_MS: u64 = 60_000;

/// Records kept at most: the oldest go first. A fleet with more than this many quarantines in a
/// week has a bigger problem than memory, and kiln-cache refuses the bytes anyway.
const KEPT: usize = 100_000;

/// The quarantined keys this host knows of, with the digest of the envelope each names.
#[derive(Debug)]
pub struct Quarantine {
    known: Mutex<Known>,
    metrics: Arc<Metrics>,
}

#[derive(Debug, Default)]
struct Known {
    digests: HashMap<CacheKey, blake3::Hash>,
    /// Keys in the order learned, for the bound.
    order: std::collections::VecDeque<CacheKey>,
    /// The newest record's time: the next poll asks from here.
    since_ms: u64,
}

impl Quarantine {
    pub fn new(metrics: Arc<Metrics>) -> Self {
        Quarantine { known: Mutex::default(), metrics }
    }

    pub fn len(&self) -> usize {
        lock(&self.known).digests.len()
    }

    /// Whether `envelope` is the quarantined one of `key`. Hashes only for a quarantined key,
    /// so the fleet's hit path pays a map lookup.
    pub fn refuses(&self, key: &CacheKey, envelope: &[u8]) -> bool {
        let Some(digest) = lock(&self.known).digests.get(key).copied() else { return false };
        blake3::hash(envelope) == digest
    }

    /// Takes in `records`; the keys new to this host, to be dropped from its tiers.
    pub fn learn(&self, records: &[QuarantineRecord]) -> Vec<CacheKey> {
        let mut known = lock(&self.known);
        let mut new = Vec::new();
        for record in records {
            known.since_ms = known.since_ms.max(record.unix_ms);
            let (Ok(key), Ok(digest)) = (record.key.parse::<CacheKey>(), blake3::Hash::from_hex(&record.served_digest))
            else {
                continue;
            };
            if known.digests.insert(key, digest) != Some(digest) {
                known.order.push_back(key);
                new.push(key);
            }
        }
        while known.order.len() > KEPT {
            if let Some(old) = known.order.pop_front() {
                known.digests.remove(&old);
            }
        }
        self.metrics.quarantined_keys.set(known.digests.len() as i64);
        new
    }

    /// Where the next poll asks from: the newest record's time, less the overlap.
    fn since_ms(&self) -> u64 {
        lock(&self.known).since_ms.saturating_sub(OVERLAP_MS)
    }
}

/// Polls the fleet's quarantine list until `stop`, calling `drop_key` for each key new to this
/// host. Each poll asks again from a minute before the newest record it knows (see
/// [`OVERLAP_MS`]), and known records are skipped, so none is missed.
pub async fn poll<F, Fut>(
    tier: Arc<RemoteTier>,
    auditor: Arc<super::Auditor>,
    every: Duration,
    stop: tokio_util::sync::CancellationToken,
    drop_key: F,
) where
    F: Fn(CacheKey) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    loop {
        if tier.usable() {
            loop {
                let request = QuarantineListRequest { since_ms: auditor.quarantine.since_ms(), ..Default::default() };
                let Ok(answer) = tier.list_quarantine(request).await else { break };
                for key in auditor.quarantine.learn(&answer.records) {
                    tracing::warn!(%key, "the fleet quarantined this key: dropping this host's copy");
                    drop_key(key).await;
                }
                // Found wrong anywhere, distrusted here: what this host took of the publisher is
                // dropped too, and vetted again before it is run.
                for record in &answer.records {
                    for key in auditor.distrust(record.publisher.as_ref()) {
                        drop_key(key).await;
                    }
                }
                if !answer.more {
                    break;
                }
            }
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(every) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(n: u8, ms: u64, bytes: &[u8]) -> QuarantineRecord {
        QuarantineRecord {
            key: CacheKey::from_bytes([n; 32]).to_hex(),
            served_digest: blake3::hash(bytes).to_hex().to_string(),
            unix_ms: ms,
            ..Default::default()
        }
    }

    #[test]
    fn learns_each_record_once_and_refuses_only_the_named_bytes() {
        let q = Quarantine::new(Arc::default());
        assert_eq!(q.learn(&[record(1, 10, b"bad"), record(2, 12, b"worse")]).len(), 2);
        assert_eq!(q.since_ms(), 0, "a minute back from 12 ms");
        assert!(q.learn(&[record(2, 12, b"worse")]).is_empty(), "asked again, known");
        assert_eq!(q.learn(&[record(3, 11, b"late")]).len(), 1, "a record that landed behind a newer one");
        let k = CacheKey::from_bytes([1; 32]);
        assert!(q.refuses(&k, b"bad"));
        assert!(!q.refuses(&k, b"good"), "a fresh publish under the key is served");
        assert!(!q.refuses(&CacheKey::from_bytes([3; 32]), b"bad"));
        let junk = QuarantineRecord { key: "not a key".into(), unix_ms: OVERLAP_MS + 20, ..Default::default() };
        assert!(q.learn(&[junk]).is_empty());
        assert_eq!((q.len(), q.since_ms()), (3, 20));
    }
}
