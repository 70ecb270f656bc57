//! The entries under keys: Get, BatchGet and Contains read them, Put writes an artifact or a
//! failed compile's negative entry, and GetManifest and PutManifest keep a graph's list of kernel
//! keys. A put artifact is verified against its key and judged against the bytes the key holds
//! (see `crate::conflict`); an entry read for Get, BatchGet or a watch is answered and counted by
//! [`respond`].

use super::{BatchGetStream, CacheService, observe};
use crate::conflict::{self, Judgement};
use crate::error::Error;
use crate::layout::LayoutError;
use crate::metrics::{ConflictLabels, Metrics};
use crate::status::tally::now_ms;
use crate::store::{Entry, Lookup, Refused, Store, Stored};
use crate::trust::Trust;
use crate::validate;
use futures_util::StreamExt;
use kiln_proto::CacheKey;
use kiln_proto::auth::Caller;
use kiln_proto::envelope::{self, Artifact};
use kiln_proto::pb::{
    CacheBatchGetRequest, CacheContainsRequest, CacheContainsResponse, CacheGetRequest, CacheGetResponse,
    CachePutRequest, CachePutResponse, ConflictRecord, ManifestGetRequest, ManifestGetResponse, ManifestPutRequest,
    Provenance, cache_get_response, cache_put_request,
};
use std::sync::Arc;
use tonic::Status;

/// Keys of one BatchGet read from Redis in one pipelined round trip ([`Store::get_many`]).
const BATCH_CHUNK: usize = 8;

/// Keys read at once: a BatchGet's two chunks in flight (the next chunk's round trip overlaps
/// this one's answers), and Contains' keys in flight. The bound (16 envelopes) keeps one huge
/// batch from holding many large envelopes in memory at once.
const BATCH_READ_AHEAD: usize = 2 * BATCH_CHUNK;

/// Envelopes above this are verified on a blocking thread: decompressing one takes long enough
/// to stall other requests on the same runtime thread.
const VERIFY_INLINE_BYTES: usize = 1 << 20;

impl CacheService {
    pub(super) async fn get(&self, req: CacheGetRequest) -> Result<CacheGetResponse, Error> {
        let key = validate::key("key", &req.key)?;
        lookup(self.store.clone(), Arc::clone(&self.metrics), &self.trust, key, "get").await
    }

    pub(super) async fn batch_get(&self, req: CacheBatchGetRequest) -> Result<BatchGetStream, Error> {
        let keys = validate::keys("keys", &req.keys, self.limits.max_batch_keys)?;
        let (store, metrics, trust) = (self.store.clone(), Arc::clone(&self.metrics), Arc::clone(&self.trust));
        let chunks: Vec<Vec<CacheKey>> = keys.chunks(BATCH_CHUNK).map(<[CacheKey]>::to_vec).collect();
        let answers = futures_util::stream::iter(chunks)
            .map(move |chunk| {
                let (store, metrics, trust) = (store.clone(), Arc::clone(&metrics), Arc::clone(&trust));
                async move {
                    let found = store.get_many(&chunk).await;
                    let answers = chunk.into_iter().zip(found).map(|(key, found)| {
                        let answer = respond(&metrics, &trust, key, found, "batch_get");
                        match &answer {
                            Ok(_) => {
                                metrics.redis_up.set(1);
                            }
                            Err(e) => observe(&metrics, e),
                        }
                        answer.map_err(Status::from)
                    });
                    futures_util::stream::iter(answers.collect::<Vec<_>>())
                }
            })
            .buffered(BATCH_READ_AHEAD / BATCH_CHUNK)
            .flatten();
        Ok(Box::pin(answers) as BatchGetStream)
    }

    pub(super) async fn contains(&self, req: CacheContainsRequest) -> Result<CacheContainsResponse, Error> {
        let keys = validate::keys("keys", &req.keys, self.limits.max_batch_keys)?;
        // One command per key, a few in flight: a cluster's keys live in different slots.
        let store = &self.store;
        let present = futures_util::stream::iter(keys)
            .map(|key| async move { store.contains(&key).await })
            .buffered(BATCH_READ_AHEAD)
            .collect::<Vec<_>>()
            .await
            .into_iter()
            .collect::<Result<Vec<bool>, Error>>()?;
        Ok(CacheContainsResponse { present })
    }

    pub(super) async fn put(&self, req: CachePutRequest, caller: Caller) -> Result<CachePutResponse, Error> {
        let key = validate::key("key", &req.key)?;
        if !req.publisher_host.is_empty() {
            validate::host("publisher_host", &req.publisher_host)?;
        }
        match req.entry {
            Some(cache_put_request::Entry::Envelope(bytes)) => {
                let limit = self.limits.max_artifact_bytes;
                if bytes.len() as u64 > limit {
                    return Err(Error::TooLarge { field: "envelope", size: bytes.len() as u64, limit });
                }
                let (bytes, offered) = verify(bytes, key, limit).await?;
                if conflict::is_kernel(&offered.meta.toolchain) {
                    self.trust.admits_kernel_from(&caller)?;
                }
                let provenance = Provenance {
                    host: req.publisher_host,
                    token: caller.token_id,
                    unix_ms: now_ms(),
                    ..Default::default()
                };
                let judge = |held: &[u8]| match envelope::open(held, &key, limit) {
                    Ok(held) => conflict::judge(&held, &offered),
                    // Verified when it was stored: damaged since, it is no evidence of anything.
                    Err(_) => Judgement::Same,
                };
                match self.store.put_envelope(&key, &bytes, &provenance, judge).await? {
                    Ok(stored) => {
                        if let Stored::Replaced(record) = &stored {
                            self.conflicting(record);
                        }
                        if stored != Stored::Refreshed {
                            self.metrics.bytes("in", bytes.len());
                            self.metrics.tally.published(&bytes);
                        }
                    }
                    Err(Refused::Quarantined(record)) => {
                        self.metrics.quarantined_puts.inc();
                        tracing::warn!(%key, publisher = %provenance.host, token = %provenance.token, "refused a put of quarantined bytes");
                        let publisher =
                            record.publisher.map(|p| format!("{} ({})", p.host, p.token)).unwrap_or_default();
                        return Err(Error::Quarantined { publisher, reporter: record.reporter_host });
                    }
                    Err(Refused::Conflict(record)) => {
                        self.conflicting(&record);
                        let held_by = record.held.as_ref().map_or_else(|| "an unrecorded writer".into(), writer);
                        return Err(Error::Conflict { key: key.to_hex(), held_by, detail: record.detail });
                    }
                }
            }
            Some(cache_put_request::Entry::Negative(entry)) => {
                if entry.log.len() > validate::MAX_NEGATIVE_LOG {
                    return Err(Error::TooLarge {
                        field: "negative.log",
                        size: entry.log.len() as u64,
                        limit: validate::MAX_NEGATIVE_LOG as u64,
                    });
                }
                let ttl = validate::negative_ttl(req.negative_ttl_ms, &self.limits)?;
                self.store.put_negative(&key, &entry, ttl).await?;
            }
            None => return Err(Error::Missing { field: "entry" }),
        }
        Ok(CachePutResponse {})
    }

    /// Counts and logs a conflicting write (see `crate::conflict`).
    fn conflicting(&self, record: &ConflictRecord) {
        let offered = record.offered.clone().unwrap_or_default();
        let outcome = if record.refused { "refused" } else { "replaced" };
        self.metrics
            .conflicting_puts
            .get_or_create(&ConflictLabels { publisher: offered.token.clone(), outcome })
            .inc();
        tracing::warn!(
            key = %record.key,
            held_by = %record.held.as_ref().map_or_else(|| "an unrecorded writer".into(), writer),
            offered_by = %writer(&offered),
            detail = %record.detail,
            refused = record.refused,
            "a put offered other bytes than the key held"
        );
    }

    pub(super) async fn get_manifest(&self, req: ManifestGetRequest) -> Result<ManifestGetResponse, Error> {
        let graph_key = validate::key("graph_key", &req.graph_key)?;
        let keys = match self.store.get_manifest(&graph_key).await? {
            Lookup::Hit(keys) => Some(keys),
            Lookup::Miss => None,
            Lookup::Corrupt(why) => {
                corrupt(&self.metrics, &graph_key, &why);
                None
            }
        };
        Ok(ManifestGetResponse {
            found: keys.is_some(),
            kernel_keys: keys.unwrap_or_default().iter().map(CacheKey::to_hex).collect(),
        })
    }

    pub(super) async fn put_manifest(&self, req: ManifestPutRequest) -> Result<CachePutResponse, Error> {
        let graph_key = validate::key("graph_key", &req.graph_key)?;
        let kernel_keys = validate::keys("kernel_keys", &req.kernel_keys, self.limits.max_manifest_keys)?;
        self.store.put_manifest(&graph_key, &kernel_keys).await?;
        Ok(CachePutResponse {})
    }
}

/// Verifies an envelope against the key it is put under, off the runtime when it is large; the
/// envelope and what it holds.
async fn verify(bytes: Vec<u8>, key: CacheKey, limit: u64) -> Result<(Vec<u8>, Artifact), Error> {
    if bytes.len() <= VERIFY_INLINE_BYTES {
        let artifact = envelope::open(&bytes, &key, limit)?;
        return Ok((bytes, artifact));
    }
    let checked = tokio::task::spawn_blocking(move || envelope::open(&bytes, &key, limit).map(|a| (bytes, a)));
    match checked.await {
        Ok(result) => Ok(result?),
        // `open` does not panic on any input; if it ever does, that is a bug to surface as one.
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    }
}

/// A writer as a person reads it: `gpu-7 (tok-0123456789ab)`, or the token id alone.
fn writer(p: &Provenance) -> String {
    if p.host.is_empty() { p.token.clone() } else { format!("{} ({})", p.host, p.token) }
}

/// Accounts for a value the store refused and deleted. A missing piece is what LRU eviction of
/// one piece looks like, not damage, so it is not counted as an integrity failure.
fn corrupt(metrics: &Metrics, key: &CacheKey, why: &LayoutError) {
    if matches!(why, LayoutError::MissingPiece(_)) {
        tracing::debug!(%key, %why, "dropped a partly evicted artifact; answering a miss");
        return;
    }
    metrics.integrity_failures.inc();
    tracing::warn!(%key, %why, "deleted a damaged value; answering a miss");
}

/// Reads one key for `via` (the metric label of the RPC that asked): Get's answer.
pub(super) async fn lookup(
    store: Store,
    metrics: Arc<Metrics>,
    trust: &Trust,
    key: CacheKey,
    via: &'static str,
) -> Result<CacheGetResponse, Error> {
    let found = store.get(&key).await;
    respond(&metrics, trust, key, found, via)
}

/// One key's answer from what the store `found`, counted for `via`; its provenance says whether
/// the publisher is vetted, as this replica knows now (never as stored or cached).
fn respond(
    metrics: &Metrics,
    trust: &Trust,
    key: CacheKey,
    found: Result<Lookup<Entry>, Error>,
    via: &'static str,
) -> Result<CacheGetResponse, Error> {
    let mut provenance = None;
    let (entry, result) = match found? {
        Lookup::Hit(Entry::Envelope(published)) => {
            metrics.bytes("out", published.envelope.len());
            metrics.tally.lookup("hit", Some(&published.envelope));
            provenance = published.provenance;
            (Some(cache_get_response::Entry::Envelope(published.envelope)), "hit")
        }
        Lookup::Hit(Entry::Negative(n)) => (Some(cache_get_response::Entry::Negative(n)), "negative"),
        Lookup::Miss => (None, "miss"),
        Lookup::Corrupt(why) => {
            corrupt(metrics, &key, &why);
            (None, "corrupt")
        }
    };
    metrics.lookup(via, result);
    if result != "hit" {
        metrics.tally.lookup(result, None);
    }
    trust.stamp(&mut provenance);
    Ok(CacheGetResponse { key: key.to_hex(), entry, provenance })
}
