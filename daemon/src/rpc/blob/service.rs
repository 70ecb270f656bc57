//! The `kiln.v1.Blobs` handlers: validation, the tiers through the cache, and leases that live
//! exactly as long as the client's stream.

use super::validate;
use crate::core::blob::Scope;
use crate::core::blob::entry;
use crate::core::cache::{Decision, Producer};
use crate::core::store::Stored;
use crate::domain::Answer;
use crate::metrics::Metrics;
use bytes::Bytes;
use kiln_proto::CacheKey;
use kiln_proto::pb::{self, BlobEntry, lease_blob_event::Kind};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

/// A GRANTED lease with no `hold_ms` ends after this long with no put.
pub const DEFAULT_HOLD: Duration = Duration::from_secs(600);
/// Room left in a GetBlobs answer for framing, under the gRPC message limit.
const ANSWER_HEADROOM: u64 = 1 << 20;

/// The handlers; cloning shares the state, so a lease's task can own it.
#[derive(Debug, Clone)]
pub struct BlobService(pub Arc<BlobState>);

#[derive(Debug)]
pub struct BlobState {
    pub producer: Arc<Producer>,
    pub metrics: Arc<Metrics>,
    pub max_artifact_bytes: u64,
    pub max_message_bytes: u64,
}

fn event(kind: Kind, entry: Option<BlobEntry>, reason: String) -> Result<pb::LeaseBlobEvent, Status> {
    Ok(pb::LeaseBlobEvent { kind: kind as i32, entry, reason })
}

impl BlobState {
    /// Runs one LeaseBlob: decide, answer, and for a grant hold the lease until the put lands,
    /// the hold bound passes, or the client goes away; then release it at once.
    async fn run_lease(
        self: Arc<Self>,
        scope: Scope,
        key: CacheKey,
        wait: Duration,
        hold: Duration,
        tx: mpsc::Sender<Result<pb::LeaseBlobEvent, Status>>,
    ) {
        let open = |answer: &Answer| entry::open(answer.artifact()?, &scope.namespace, answer.tier());
        let decision = tokio::select! {
            d = self.producer.decide(&key, wait, open) => d,
            _ = tx.closed() => return,
        };
        let mut grant = match decision {
            Decision::Found(found) => {
                self.metrics.blob_lease(&scope.namespace, "found");
                let _ = tx.send(event(Kind::Found, Some(found), String::new())).await;
                return;
            }
            Decision::Proceed(reason) => {
                self.metrics.blob_lease(&scope.namespace, "proceed");
                let _ = tx.send(event(Kind::Proceed, None, reason)).await;
                return;
            }
            Decision::Granted(grant) => grant,
        };
        self.metrics.blob_lease(&scope.namespace, "granted");
        let cache = self.producer.cache();
        let reason = if grant.fleet_leased() || !cache.has_fleet() {
            String::new()
        } else {
            "the fleet cache is not answering; single-flight covers this host only".to_string()
        };
        if tx.send(event(Kind::Granted, None, reason)).await.is_ok() {
            // A put through another host's kilnd ends this lease too: it arrives as a fleet
            // publish, which is adopted here like any other host's result.
            let ending = tokio::select! {
                _ = grant.published() => Some(event(Kind::Published, None, String::new())),
                _ = cache.published_elsewhere(&key) => {
                    Some(event(Kind::Published, None, "stored through another host".into()))
                }
                _ = tokio::time::sleep(hold) => {
                    self.metrics.blob_lease(&scope.namespace, "expired");
                    tracing::warn!(%key, namespace = %scope.namespace, ?hold, "blob lease held past its bound with no put; released");
                    Some(event(Kind::Expired, None, format!("held {hold:?} with no put")))
                }
                _ = tx.closed() => None,
            };
            if let Some(ending) = ending {
                let _ = tx.send(ending).await;
            }
        }
        grant.release().await;
    }
}

#[tonic::async_trait]
impl pb::blobs_server::Blobs for BlobService {
    type LeaseBlobStream = ReceiverStream<Result<pb::LeaseBlobEvent, Status>>;

    async fn get_blobs(&self, request: Request<pb::GetBlobsRequest>) -> Result<Response<pb::GetBlobsResponse>, Status> {
        let this = &self.0;
        let req = request.into_inner();
        let scope = validate::scope(req.scope.as_ref())?;
        validate::keys(&req.keys)?;
        let stored: Vec<CacheKey> = req.keys.iter().map(|k| scope.key(k)).collect();
        let found = this.producer.cache().prefetch(&stored).await.found;
        let budget = this.max_message_bytes.saturating_sub(ANSWER_HEADROOM);
        let mut size = 0u64;
        let mut entries = Vec::with_capacity(stored.len());
        for key in &stored {
            let hit =
                found.get(key).and_then(|a| a.artifact().and_then(|art| entry::open(art, &scope.namespace, a.tier())));
            let hit = hit.filter(|e| {
                size += e.files.iter().map(|f| f.data.len() as u64).sum::<u64>();
                // Past the message limit the rest read as misses: the caller produces them, and
                // nothing wrong is ever served.
                size <= budget
            });
            let tier = hit.as_ref().map(|e| e.tier);
            this.metrics.blob_lookup(&scope.namespace, tier);
            entries.push(hit.unwrap_or_else(entry::missing));
        }
        Ok(Response::new(pb::GetBlobsResponse { entries }))
    }

    async fn put_blob(&self, request: Request<pb::PutBlobRequest>) -> Result<Response<pb::PutBlobResponse>, Status> {
        let this = &self.0;
        let req = request.into_inner();
        let scope = validate::scope(req.scope.as_ref())?;
        validate::caller_key("key", &req.key)?;
        validate::files(&req.files, this.max_artifact_bytes)?;
        let key = scope.key(&req.key);
        let (sealed, artifact) = entry::seal(&key, &scope.namespace, req.files);
        this.metrics.blob_put(&scope.namespace, artifact.bytes.len());
        let stored = Stored { envelope: Bytes::from(sealed), unpacked: Some(Arc::new(artifact)) };
        this.producer.cache().store_everywhere(&key, stored).await;
        this.producer.published(&key);
        Ok(Response::new(pb::PutBlobResponse { stored_key: key.to_hex() }))
    }

    async fn lease_blob(
        &self,
        request: Request<pb::LeaseBlobRequest>,
    ) -> Result<Response<Self::LeaseBlobStream>, Status> {
        let req = request.into_inner();
        let scope = validate::scope(req.scope.as_ref())?;
        validate::caller_key("key", &req.key)?;
        let wait = validate::duration("wait_ms", req.wait_ms, self.0.producer.default_wait())?;
        let hold = validate::duration("hold_ms", req.hold_ms, DEFAULT_HOLD)?;
        let key = scope.key(&req.key);
        let (tx, rx) = mpsc::channel(4);
        tokio::spawn(Arc::clone(&self.0).run_lease(scope, key, wait, hold, tx));
        Ok(Response::new(ReceiverStream::new(rx)))
    }
}
