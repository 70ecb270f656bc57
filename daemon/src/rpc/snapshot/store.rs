//! Snapshot files, manifests and the listing of snapshots in kilnd's tiers, framed like named
//! blobs (one file per envelope) under their own key schemas and namespaces, so no snapshot entry
//! can ever be served as a cubin or another integration's blob, or the other way round.
//!
//! Manifests and listings change with every save, so they are read from the fleet cache first:
//! a host's own tiers may hold an older copy than another host saved since. Files never change
//! (their key is their content), so they are read fastest tier first.

use crate::core::blob::entry;
use crate::core::cache::{Adopt, Cache};
use crate::core::store::Stored;
use bytes::Bytes;
use kiln_proto::CacheKey;
use kiln_proto::envelope::{self, Artifact};
use kiln_proto::key::{snapshot_file_key, snapshot_index_key};
use kiln_proto::pb::{self, BlobFile, ListSnapshotsResponse, SnapshotManifest, SnapshotSummary};
use prost::Message;
use std::collections::HashMap;
use std::sync::Arc;

const FILE_NAMESPACE: &str = "snapshot-file";
/// kiln-cache knows these two as records kilnd rewrites, so a newer save replacing an older one
/// is no conflict there (see kiln-cache's `conflict` module).
const MANIFEST_NAMESPACE: &str = envelope::SNAPSHOT_MANIFEST_NAMESPACE;
const INDEX_NAMESPACE: &str = envelope::SNAPSHOT_INDEX_NAMESPACE;
/// Environments listed per job; past it the least recently saved drop out of the listing (their
/// snapshots stay restorable).
const MAX_LISTED_ENVIRONMENTS: usize = 256;
/// Jobs listed; past it the least recently saved drop out of the listing.
const MAX_LISTED_JOBS: usize = 10_000;
/// Keys per fleet `Contains`: kiln-cache's default bound on a batch.
const CONTAINS_CHUNK: usize = 4096;

/// A file's bytes as a restore receives them, and the tier that had them.
#[derive(Debug)]
pub struct FileHit {
    pub data: Vec<u8>,
    pub tier: pb::Tier,
}

#[derive(Debug)]
pub struct SnapshotStore {
    pub cache: Arc<Cache>,
}

/// The one file of an entry of `namespace`.
fn single(artifact: &Artifact, namespace: &str, tier: pb::Tier) -> Option<Vec<u8>> {
    entry::open(artifact, namespace, tier)?.files.into_iter().next().map(|f| f.data)
}

fn seal(key: &CacheKey, namespace: &str, data: Vec<u8>) -> Stored {
    let (sealed, artifact) = entry::seal(key, namespace, vec![BlobFile { name: String::new(), data }]);
    Stored { envelope: Bytes::from(sealed), unpacked: Some(Arc::new(artifact)) }
}

impl SnapshotStore {
    /// The size of the file with `digest` if this host's tiers hold it (the fleet cache is not
    /// asked: a save then sends what this host lacks, at worst once more than needed).
    pub async fn local_size(&self, digest: &[u8; 32]) -> Option<u64> {
        let key = snapshot_file_key(digest);
        let hit = self.cache.local(&key).await?;
        let data = single(&hit.artifact, FILE_NAMESPACE, pb::Tier::Unspecified)?;
        (blake3::hash(&data).as_bytes() == digest).then_some(data.len() as u64)
    }

    /// Which of `digests` the fleet cache holds, asked without downloading anything; `None`
    /// when there is no fleet cache or it does not answer.
    pub async fn fleet_holds(&self, digests: &[[u8; 32]]) -> Option<Vec<bool>> {
        let mut held = Vec::with_capacity(digests.len());
        for chunk in digests.chunks(CONTAINS_CHUNK) {
            let keys: Vec<CacheKey> = chunk.iter().map(snapshot_file_key).collect();
            held.extend(self.cache.fleet_contains(&keys).await?);
        }
        Some(held)
    }

    /// Whether the fleet cache answers and lacks `key`: a manifest saved while kilnd had no
    /// fleet (or the fleet lost it) is then this host's to publish.
    pub async fn fleet_lacks(&self, key: &CacheKey) -> bool {
        self.cache.fleet_holds(key).await == Some(false)
    }

    /// Stores again in the fleet cache files this host holds and the fleet lost (Redis evicted
    /// them, or kiln-cache deleted a damaged copy), so fresh hosts can restore them.
    pub async fn republish(&self, digests: &[[u8; 32]]) {
        for digest in digests {
            let key = snapshot_file_key(digest);
            let Some(hit) = self.cache.local(&key).await else { continue };
            let Some(data) = single(&hit.artifact, FILE_NAMESPACE, pb::Tier::Unspecified) else { continue };
            tracing::info!(%key, "snapshot file lost from the fleet cache; stored again");
            self.cache.republish(&key, &seal(&key, FILE_NAMESPACE, data).envelope).await;
        }
    }

    /// Stores a file whose digest the caller has checked, in every tier.
    pub async fn put_file(&self, digest: &[u8; 32], data: Vec<u8>) {
        let key = snapshot_file_key(digest);
        self.cache.store_everywhere(&key, seal(&key, FILE_NAMESPACE, data)).await;
    }

    /// Reads files by digest: the local tiers, then the fleet cache for all their misses in one
    /// batch. A file whose bytes do not hash to its digest is never answered (nor adopted into a
    /// local tier); it is counted as an integrity failure and reads as missing.
    pub async fn get_files(&self, digests: &[[u8; 32]]) -> HashMap<[u8; 32], FileHit> {
        let by_key: HashMap<CacheKey, [u8; 32]> = digests.iter().map(|d| (snapshot_file_key(d), *d)).collect();
        let keys: Vec<CacheKey> = by_key.keys().copied().collect();
        let content_matches = |key: &CacheKey, artifact: &Artifact| {
            let data = single(artifact, FILE_NAMESPACE, pb::Tier::Unspecified);
            data.is_some_and(|d| by_key.get(key).is_some_and(|want| blake3::hash(&d).as_bytes() == want))
        };
        let found = self.cache.prefetch_where(&keys, content_matches, Adopt::No).await.found;
        found
            .into_iter()
            .filter_map(|(key, answer)| {
                let data = single(answer.artifact()?, FILE_NAMESPACE, answer.tier())?;
                Some((by_key[&key], FileHit { data, tier: answer.tier() }))
            })
            .collect()
    }

    /// The newest copy of a changing entry: the fleet cache's, else this host's.
    async fn read_fresh(&self, key: &CacheKey, namespace: &str) -> Option<Vec<u8>> {
        if let Some(answer) = self.cache.fresh_from_fleet(key).await {
            return single(answer.artifact()?, namespace, pb::Tier::Remote);
        }
        let hit = self.cache.local(key).await?;
        single(&hit.artifact, namespace, pb::Tier::Unspecified)
    }

    pub async fn manifest(&self, key: &CacheKey) -> Option<SnapshotManifest> {
        let bytes = self.read_fresh(key, MANIFEST_NAMESPACE).await?;
        let manifest = SnapshotManifest::decode(bytes.as_slice()).ok();
        if manifest.is_none() {
            tracing::warn!(%key, "a stored snapshot manifest does not decode; treated as none");
        }
        manifest
    }

    pub async fn put_manifest(&self, key: &CacheKey, manifest: &SnapshotManifest) {
        self.cache.store_everywhere(key, seal(key, MANIFEST_NAMESPACE, manifest.encode_to_vec())).await;
    }

    /// The listing of `job`'s snapshots, or with `None` of every job (one summary each, with
    /// only the job's name).
    async fn listing(&self, job: Option<&str>) -> Vec<SnapshotSummary> {
        let bytes = self.read_fresh(&snapshot_index_key(job), INDEX_NAMESPACE).await;
        bytes.and_then(|b| ListSnapshotsResponse::decode(b.as_slice()).ok()).map(|l| l.snapshots).unwrap_or_default()
    }

    async fn put_listing(&self, job: Option<&str>, mut snapshots: Vec<SnapshotSummary>, bound: usize) {
        snapshots.sort_by_key(|s| std::cmp::Reverse(s.updated_unix_ms));
        snapshots.truncate(bound);
        let key = snapshot_index_key(job);
        let bytes = ListSnapshotsResponse { snapshots }.encode_to_vec();
        self.cache.store_everywhere(&key, seal(&key, INDEX_NAMESPACE, bytes)).await;
    }

    /// Records a saved manifest in the listings. Two hosts saving at the same moment may drop
    /// each other's line from a listing (never a snapshot); the next save puts it back.
    pub async fn list_saved(&self, manifest: &SnapshotManifest) {
        let summary = SnapshotSummary::from(manifest);
        let mut jobs = self.listing(None).await;
        let job_line = SnapshotSummary {
            job: manifest.job.clone(),
            updated_unix_ms: manifest.updated_unix_ms,
            ..Default::default()
        };
        jobs.retain(|s| s.job != manifest.job);
        jobs.push(job_line);
        self.put_listing(None, jobs, MAX_LISTED_JOBS).await;
        let mut envs = self.listing(Some(&manifest.job)).await;
        envs.retain(|s| s.key != manifest.key);
        envs.push(summary);
        self.put_listing(Some(&manifest.job), envs, MAX_LISTED_ENVIRONMENTS).await;
    }

    /// Every environment of `job`, or of every job, newest first.
    pub async fn list(&self, job: Option<&str>) -> Vec<SnapshotSummary> {
        let jobs = match job {
            Some(job) => vec![job.to_string()],
            None => self.listing(None).await.into_iter().map(|s| s.job).collect(),
        };
        let mut out = Vec::new();
        for job in jobs {
            out.extend(self.listing(Some(&job)).await);
        }
        out
    }
}
