//! `Warm`: pulls graphs and kernels from the fleet cache into the local tiers before a job needs
//! them, in batches of one BatchGet each, streaming progress.

use crate::core::cache::Cache;
use crate::core::work::Work;
use crate::error::{Error, invalid};
use kiln_proto::CacheKey;
use kiln_proto::pb::{WarmProgress, WarmRequest};
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Status;

/// Kernels per BatchGet: large enough to save round trips, small enough for steady progress.
const BATCH: usize = 64;

fn parse(field: &str, values: &[String]) -> Result<Vec<CacheKey>, Error> {
    values
        .iter()
        .enumerate()
        .map(|(i, v)| v.parse().map_err(|_| invalid(format!("{field}[{i}]"), "expected 64 lowercase hex characters")))
        .collect()
}

/// Validates the request and starts the warm-up; the stream ends with `finished`.
pub fn start(
    cache: Arc<Cache>,
    work: &Work,
    request: &WarmRequest,
) -> Result<ReceiverStream<Result<WarmProgress, Status>>, Error> {
    let graphs = parse("graph_keys", &request.graph_keys)?;
    let mut kernels = parse("kernel_keys", &request.kernel_keys)?;
    if graphs.is_empty() && kernels.is_empty() {
        return Err(invalid("graph_keys", "give graph keys or kernel keys to warm"));
    }
    if !cache.has_fleet() {
        return Err(Error::NoFleet { what: "warm from" });
    }
    let (tx, rx) = mpsc::channel(16);
    work.spawn("warm", async move {
        let mut progress = WarmProgress::default();
        for graph in graphs {
            // kilnd's fleet is set at start, so it is still there (checked above).
            let Some(manifest) = cache.manifest(&graph).await else { return };
            match manifest {
                Ok(Some(keys)) => kernels.extend(keys),
                Ok(None) => progress.unknown_graphs.push(graph.to_hex()),
                Err(e) => {
                    let error = Error::ManifestUnreadable { graph, reason: e.to_string() };
                    let _ = tx.send(Err(error.into())).await;
                    return;
                }
            }
        }
        kernels.sort();
        kernels.dedup();
        progress.total = kernels.len() as u32;
        for batch in kernels.chunks(BATCH) {
            let found = cache.prefetch(batch).await.found;
            for key in batch {
                match found.get(key) {
                    Some(o) if o.is_ok() && o.tier() == kiln_proto::pb::Tier::Remote => progress.fetched += 1,
                    Some(o) if o.is_ok() => progress.already_local += 1,
                    _ => progress.missing += 1,
                }
            }
            progress.done += batch.len() as u32;
            if tx.send(Ok(progress.clone())).await.is_err() {
                return; // the client left; what was fetched stays fetched
            }
        }
        progress.finished = true;
        let _ = tx.send(Ok(progress)).await;
    });
    Ok(ReceiverStream::new(rx))
}
