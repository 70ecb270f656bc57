//! Streams `GetFiles` into a staging directory. Receiving and writing overlap: the staging's
//! writer threads take files one at a time from the messages already received while the next
//! ones arrive, through a short queue that bounds the memory held to a few messages; one sync at
//! the end makes them durable.

use super::error::joined;
use super::stage::Staging;
use super::upload::DIGESTS_PER_CALL;
use super::{Observer, SnapshotError};
use crate::Transport;
use kiln_proto::pb;
use kiln_proto::pb::snapshots_client::SnapshotsClient;
use std::sync::Arc;
use tokio::sync::mpsc;

/// Messages received but not yet written.
const QUEUE: usize = 2;

/// Fetches every content `staging` wants, writes what arrives intact, and syncs the staging
/// directory. What never arrived intact is left for [`Staging::missing_files`] to count.
/// `present` (files the target already had) rides along for kilnd's restore metrics.
pub async fn fetch(
    grpc: &mut SnapshotsClient<Transport>,
    staging: Staging,
    present: u32,
    observer: Arc<dyn Observer>,
) -> Result<Staging, SnapshotError> {
    let digests = staging.digests();
    let (tx, mut rx) = mpsc::channel::<Vec<pb::FileData>>(QUEUE);
    let writer = tokio::task::spawn_blocking(move || {
        let mut staging = staging;
        let files = std::iter::from_fn(move || rx.blocking_recv()).flatten();
        staging.write_from(files, observer.as_ref())?;
        staging.sync()?;
        Ok::<_, SnapshotError>(staging)
    });
    let received = receive(grpc, &digests, present, &tx).await;
    drop(tx);
    // A failed writer closes the queue, so `receive` stops early; its error is the cause.
    let staging = joined(writer.await)?;
    received?;
    Ok(staging)
}

/// Tells kilnd a root needed nothing: the protocol's one `GetFiles` with no digests, which
/// carries `present` for its metrics and answers with no files.
pub async fn report_present(grpc: &mut SnapshotsClient<Transport>, present: u32) -> Result<(), SnapshotError> {
    let (tx, _rx) = mpsc::channel(1);
    receive(grpc, &[], present, &tx).await
}

/// Calls `GetFiles` per chunk of digests (once when there are none) and queues every message
/// that holds files; `present` goes with the first call only.
async fn receive(
    grpc: &mut SnapshotsClient<Transport>,
    digests: &[[u8; 32]],
    present: u32,
    tx: &mpsc::Sender<Vec<pb::FileData>>,
) -> Result<(), SnapshotError> {
    let mut chunks: Vec<&[[u8; 32]]> = digests.chunks(DIGESTS_PER_CALL).collect();
    if chunks.is_empty() {
        chunks.push(&[]);
    }
    for (i, chunk) in chunks.into_iter().enumerate() {
        let request = pb::GetFilesRequest {
            digests: chunk.iter().map(|d| d.to_vec()).collect(),
            present: if i == 0 { present } else { 0 },
        };
        let mut stream = grpc.get_files(request).await?.into_inner();
        while let Some(message) = stream.message().await? {
            if !message.files.is_empty() && tx.send(message.files).await.is_err() {
                return Ok(());
            }
        }
    }
    Ok(())
}
