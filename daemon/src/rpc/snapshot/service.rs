//! The `kiln.v1.Snapshots` handlers: validation, the host's key parts, union saves under one
//! lock, and restores streamed from the tiers.

use super::manifest;
use super::store::SnapshotStore;
use super::validate::{self, Id};
use crate::error::{Error, invalid};
use crate::metrics::{DirectionLabels, Metrics};
use futures_util::StreamExt;
use kiln_proto::CacheKey;
use kiln_proto::key::snapshot_key;
use kiln_proto::pb::{self, FileData};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

/// Files read from the tiers at once while a restore streams, one fleet BatchGet each. Small
/// chunks with a few in flight keep the fleet, kilnd's checks and the client's writes all busy
/// at once, and keep kilnd's memory small: a restore of a fresh host's kilnd is mostly first
/// touches of fresh memory, so every buffer not needed is a page fault per 4 KiB.
const RESTORE_CHUNK: usize = 32;
/// Chunks being read from the tiers while earlier ones stream to the client.
const CHUNKS_IN_FLIGHT: usize = 3;
/// Bytes of files per GetFiles message; a larger file goes alone.
const MESSAGE_BUDGET: usize = 4 << 20;
/// Local lookups in flight for MissingFiles and saves.
const LOOKUPS_IN_FLIGHT: usize = 8;

#[derive(Debug, Clone)]
pub struct SnapshotService(pub Arc<SnapshotState>);

#[derive(Debug)]
pub struct SnapshotState {
    pub store: SnapshotStore,
    pub metrics: Arc<Metrics>,
    /// The host's key parts (see [`super::host`]).
    pub host: BTreeMap<String, String>,
    pub max_file_bytes: u64,
    pub max_snapshot_bytes: u64,
    /// This host's name, recorded in the manifests it saves.
    pub host_name: String,
    /// Saves on this host one at a time, so two local savers of one job (two models of one
    /// script, say) never merge against the same stored manifest and lose each other's files.
    pub saving: tokio::sync::Mutex<()>,
    /// The daemon's tracked work, for the republish a `MissingFiles` starts after its answer.
    pub work: crate::core::work::Work,
}

impl SnapshotState {
    /// The stored key of `id` on this host: the caller's parts and the host's.
    fn key(&self, id: &Id) -> (CacheKey, BTreeMap<String, String>) {
        let mut parts = id.keys.clone();
        parts.extend(self.host.iter().map(|(k, v)| (k.clone(), v.clone())));
        let key = snapshot_key(&id.job, parts.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        (key, parts)
    }

    /// Which of `digests` this host's tiers lack, with the size of those they hold.
    async fn local_sizes(&self, digests: &[[u8; 32]]) -> Vec<([u8; 32], Option<u64>)> {
        let lookups = digests.iter().copied().map(|d| async move { (d, self.store.local_size(&d).await) });
        futures_util::stream::iter(lookups).buffered(LOOKUPS_IN_FLIGHT).collect().await
    }

    async fn save(&self, req: pb::SaveSnapshotRequest) -> Result<pb::SaveSnapshotResponse, Error> {
        let id = validate::id("id", req.id.as_ref())?;
        validate::roots(&req.roots)?;
        validate::files(&req.files, &req.roots, self.max_file_bytes)?;
        let (key, environment) = self.key(&id);
        let _one_at_a_time = self.saving.lock().await;
        let stored = self.store.manifest(&key).await;

        // Files the stored manifest already lists with the same content were checked when it was
        // saved; check the others are stored here, with the size the client says.
        let known: HashSet<&[u8]> = stored.iter().flat_map(|m| m.files.iter().map(|f| f.digest.as_slice())).collect();
        let mut new: Vec<[u8; 32]> = Vec::new();
        let mut first_use: HashMap<[u8; 32], usize> = HashMap::new();
        for (i, f) in req.files.iter().enumerate() {
            let d = validate::digest("files[].digest", &f.digest)?;
            if !known.contains(f.digest.as_slice()) && !first_use.contains_key(&d) {
                first_use.insert(d, i);
                new.push(d);
            }
        }
        let here = self.local_sizes(&new).await;
        let elsewhere: Vec<[u8; 32]> = here.iter().filter(|(_, size)| size.is_none()).map(|(d, _)| *d).collect();
        let in_fleet: HashSet<[u8; 32]> = match elsewhere.is_empty() {
            true => HashSet::new(),
            false => {
                let held = self.store.fleet_holds(&elsewhere).await.unwrap_or_default();
                elsewhere.iter().zip(held).filter(|(_, held)| *held).map(|(d, _)| *d).collect()
            }
        };
        for (digest, size) in here {
            let i = first_use[&digest];
            let file = &req.files[i];
            match size {
                // In the fleet cache only (another host stored it): a restore checks its digest
                // and size when it fetches it.
                None if in_fleet.contains(&digest) => {}
                None => {
                    Metrics::count(&self.metrics.snapshot_saves, "refused", 1);
                    return Err(Error::FileNotStored {
                        field: format!("files[{i}]"),
                        file: format!("{}/{}", file.root, file.path),
                        digest: hex::encode(digest),
                    });
                }
                Some(n) if n != file.size => {
                    return Err(invalid(
                        format!("files[{i}].size"),
                        format!("{} bytes, but the stored content has {n}", file.size),
                    ));
                }
                Some(_) => {}
            }
        }

        let merged = manifest::merge(stored, &id.job, &environment, req.roots, req.files);
        let mut manifest = merged.manifest;
        if manifest.total_bytes > self.max_snapshot_bytes {
            Metrics::count(&self.metrics.snapshot_saves, "refused", 1);
            return Err(Error::SnapshotTooLarge {
                job: id.job,
                bytes: manifest.total_bytes,
                files: manifest.files.len(),
                limit: self.max_snapshot_bytes,
            });
        }
        if merged.changed {
            manifest.environment = environment.into_iter().collect();
            manifest.updated_unix_ms = now_ms();
            manifest.saved_by = self.host_name.clone();
            manifest.key = key.to_hex();
            self.store.put_manifest(&key, &manifest).await;
            self.store.list_saved(&manifest).await;
            tracing::info!(job = %id.job, key = %key, files = manifest.files.len(), bytes = manifest.total_bytes,
                added = merged.files_added, "snapshot saved");
        } else if self.store.fleet_lacks(&key).await {
            // Nothing changed here, but the fleet lacks the manifest (saved while kilnd had no
            // fleet, or evicted there): publish it, so other hosts' restores find it. Its files
            // went back to the fleet when the client asked which were missing (`republish`).
            self.store.put_manifest(&key, &manifest).await;
            self.store.list_saved(&manifest).await;
            tracing::info!(job = %id.job, key = %key, "snapshot unchanged here; published to the fleet cache, which lacked it");
        }
        Metrics::count(&self.metrics.snapshot_saves, if merged.changed { "changed" } else { "unchanged" }, 1);
        Ok(pb::SaveSnapshotResponse {
            manifest: Some(manifest),
            changed: merged.changed,
            files_added: merged.files_added,
        })
    }

    /// Streams the files of `digests` (deduplicated) in chunks, then the missing ones.
    async fn send_files(
        self: Arc<Self>,
        digests: Vec<[u8; 32]>,
        present: u32,
        tx: mpsc::Sender<Result<pb::GetFilesResponse, Status>>,
    ) {
        let started = Instant::now();
        let mut seen = HashSet::new();
        let digests: Vec<[u8; 32]> = digests.into_iter().filter(|d| seen.insert(*d)).collect();
        let mut missing = Vec::new();
        let (mut fetched, mut bytes) = (0u64, 0u64);
        let owned: Vec<Vec<[u8; 32]>> = digests.chunks(RESTORE_CHUNK).map(<[_]>::to_vec).collect();
        let reads = owned.into_iter().map(|chunk| {
            let this = Arc::clone(&self);
            async move {
                let found = this.store.get_files(&chunk).await;
                (chunk, found)
            }
        });
        let mut chunks = futures_util::stream::iter(reads).buffered(CHUNKS_IN_FLIGHT);
        while let Some((chunk, mut found)) = chunks.next().await {
            let mut message = pb::GetFilesResponse::default();
            let mut size = 0usize;
            for digest in &chunk {
                let Some(hit) = found.remove(digest) else {
                    missing.push(digest.to_vec());
                    continue;
                };
                if size > 0 && size + hit.data.len() > MESSAGE_BUDGET {
                    if tx.send(Ok(std::mem::take(&mut message))).await.is_err() {
                        return;
                    }
                    size = 0;
                }
                size += hit.data.len();
                fetched += 1;
                bytes += hit.data.len() as u64;
                // The slowest tier of the message: what a reader of one number wants to know.
                message.tier = message.tier.max(hit.tier as i32);
                message.files.push(FileData { digest: digest.to_vec(), data: hit.data });
            }
            if !message.files.is_empty() && tx.send(Ok(message)).await.is_err() {
                return;
            }
        }
        let m = &self.metrics;
        Metrics::count(&m.snapshot_restore_files, "fetched", fetched);
        Metrics::count(&m.snapshot_restore_files, "present", present.into());
        Metrics::count(&m.snapshot_restore_files, "missing", missing.len() as u64);
        m.snapshot_bytes.get_or_create(&DirectionLabels { direction: "out" }).inc_by(bytes);
        m.snapshot_restore_seconds.observe(started.elapsed().as_secs_f64());
        if !missing.is_empty() {
            tracing::warn!(missing = missing.len(), "snapshot restore: files in no tier");
        }
        let _ = tx.send(Ok(pb::GetFilesResponse { missing, ..Default::default() })).await;
    }
}

fn now_ms() -> i64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    since.as_millis() as i64
}

#[tonic::async_trait]
impl pb::snapshots_server::Snapshots for SnapshotService {
    type GetFilesStream = ReceiverStream<Result<pb::GetFilesResponse, Status>>;

    async fn missing_files(
        &self,
        request: Request<pb::MissingFilesRequest>,
    ) -> Result<Response<pb::MissingFilesResponse>, Status> {
        let digests = validate::digests("digests", &request.into_inner().digests, 1)?;
        let here = self.0.local_sizes(&digests).await;
        // A file is missing when neither this host nor the fleet holds it. A restore does not
        // keep its files in this host's tiers, so a save after it finds them in the fleet.
        let in_fleet = self.0.store.fleet_holds(&digests).await;
        let (mut missing, mut lost) = (Vec::new(), Vec::new());
        for (i, (digest, size)) in here.into_iter().enumerate() {
            match (size.is_some(), in_fleet.as_ref().map(|held| held[i])) {
                (false, Some(true)) | (true, None) | (true, Some(true)) => {}
                (false, _) => missing.push(digest.to_vec()),
                (true, Some(false)) => lost.push(digest),
            }
        }
        // What this host holds and the fleet lost is kilnd's to mend, after the answer.
        if !lost.is_empty() {
            let this = Arc::clone(&self.0);
            self.0.work.spawn("republish", async move { this.store.republish(&lost).await });
        }
        Ok(Response::new(pb::MissingFilesResponse { missing }))
    }

    async fn put_files(&self, request: Request<pb::PutFilesRequest>) -> Result<Response<pb::PutFilesResponse>, Status> {
        let this = &self.0;
        let files = request.into_inner().files;
        let digests = validate::put_files(&files, this.max_file_bytes)?;
        let present = this.local_sizes(&digests).await;
        let mut stored = 0u32;
        for ((digest, size), file) in present.into_iter().zip(files) {
            if size.is_none() {
                this.metrics
                    .snapshot_bytes
                    .get_or_create(&DirectionLabels { direction: "in" })
                    .inc_by(file.data.len() as u64);
                this.store.put_file(&digest, file.data).await;
            }
            stored += 1;
        }
        Ok(Response::new(pb::PutFilesResponse { stored }))
    }

    async fn get_files(&self, request: Request<pb::GetFilesRequest>) -> Result<Response<Self::GetFilesStream>, Status> {
        let req = request.into_inner();
        let digests = validate::digests("digests", &req.digests, 0)?;
        let (tx, rx) = mpsc::channel(4);
        tokio::spawn(Arc::clone(&self.0).send_files(digests, req.present, tx));
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn save_snapshot(
        &self,
        request: Request<pb::SaveSnapshotRequest>,
    ) -> Result<Response<pb::SaveSnapshotResponse>, Status> {
        Ok(Response::new(self.0.save(request.into_inner()).await?))
    }

    async fn get_snapshot(
        &self,
        request: Request<pb::GetSnapshotRequest>,
    ) -> Result<Response<pb::GetSnapshotResponse>, Status> {
        let this = &self.0;
        let id = validate::id("id", request.into_inner().id.as_ref())?;
        let (key, _) = this.key(&id);
        let manifest = this.store.manifest(&key).await;
        Metrics::count(&this.metrics.snapshot_restores, if manifest.is_some() { "found" } else { "missing" }, 1);
        Ok(Response::new(pb::GetSnapshotResponse {
            found: manifest.is_some(),
            manifest,
            host_environment: this.host.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        }))
    }

    async fn list_snapshots(
        &self,
        request: Request<pb::ListSnapshotsRequest>,
    ) -> Result<Response<pb::ListSnapshotsResponse>, Status> {
        let job = request.into_inner().job;
        if !job.is_empty() {
            validate::job("job", &job)?;
        }
        let snapshots = self.0.store.list((!job.is_empty()).then_some(job.as_str())).await;
        Ok(Response::new(pb::ListSnapshotsResponse { snapshots }))
    }
}
