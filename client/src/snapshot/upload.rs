//! The save's transfer: ask which digests no tier holds, then send only those, in `PutFiles`
//! batches small enough to stream steadily and to stay far below the message limit.

use super::error::blocking;
use super::{Observer, Phase, SnapshotError, digest};
use crate::Transport;
use kiln_proto::pb;
use kiln_proto::pb::snapshots_client::SnapshotsClient;
use std::collections::HashSet;
use std::ops::Range;
use std::path::PathBuf;
use std::sync::Arc;

/// Data in one `PutFiles`; a larger file goes alone.
const BATCH_BYTES: u64 = 32 << 20;
/// Files in one `PutFiles`, the protocol's bound.
const BATCH_FILES: usize = 4096;
/// Digests in one `MissingFiles` or `GetFiles`, the protocol's bound.
pub const DIGESTS_PER_CALL: usize = 100_000;

/// A file content to upload, with every path that held it when hashed: any of them that still
/// does will do.
#[derive(Debug, Clone)]
pub struct Candidate {
    pub digest: [u8; 32],
    pub size: u64,
    pub paths: Vec<PathBuf>,
}

/// What was sent, and the digests that no path held any more at upload time: their entries
/// must leave the manifest, since kilnd refuses a manifest naming a file it does not hold.
#[derive(Debug, Default)]
pub struct Uploaded {
    pub files: u64,
    pub bytes: u64,
    pub vanished: HashSet<[u8; 32]>,
}

/// Which of `digests` no tier holds.
pub async fn missing(
    grpc: &mut SnapshotsClient<Transport>,
    digests: &[[u8; 32]],
) -> Result<HashSet<[u8; 32]>, SnapshotError> {
    let mut missing = HashSet::new();
    for chunk in digests.chunks(DIGESTS_PER_CALL) {
        let request = pb::MissingFilesRequest { digests: chunk.iter().map(|d| d.to_vec()).collect() };
        let response = grpc.missing_files(request).await?.into_inner();
        missing.extend(response.missing.iter().filter_map(|d| <[u8; 32]>::try_from(d.as_slice()).ok()));
    }
    Ok(missing)
}

/// Sends `candidates` in batches, re-reading each file and checking it still has its digest.
pub async fn upload(
    grpc: &mut SnapshotsClient<Transport>,
    candidates: Vec<Candidate>,
    observer: &Arc<dyn Observer>,
) -> Result<Uploaded, SnapshotError> {
    let total: u64 = candidates.iter().map(|c| c.size).sum();
    observer.phase(Phase::Upload, candidates.len() as u64, total);
    let sizes: Vec<u64> = candidates.iter().map(|c| c.size).collect();
    let candidates = Arc::new(candidates);
    let mut uploaded = Uploaded::default();
    for range in batches(&sizes) {
        let (batch, candidates, observer) = (range.clone(), candidates.clone(), observer.clone());
        let (files, vanished) = blocking(move || Ok(read_batch(&candidates[batch], observer.as_ref()))).await?;
        uploaded.vanished.extend(vanished);
        if files.is_empty() {
            continue;
        }
        uploaded.files += files.len() as u64;
        uploaded.bytes += files.iter().map(|f| f.data.len() as u64).sum::<u64>();
        grpc.put_files(pb::PutFilesRequest { files }).await?;
    }
    Ok(uploaded)
}

fn read_batch(candidates: &[Candidate], observer: &dyn Observer) -> (Vec<pb::FileData>, Vec<[u8; 32]>) {
    let mut files = Vec::with_capacity(candidates.len());
    let mut vanished = Vec::new();
    for c in candidates {
        match digest::read_matching(c.paths.iter().map(PathBuf::as_path), &c.digest, c.size) {
            Some(data) => files.push(pb::FileData { digest: c.digest.to_vec(), data }),
            None => vanished.push(c.digest),
        }
        observer.advance(1, c.size);
    }
    (files, vanished)
}

/// Consecutive ranges of `sizes`, each at most `BATCH_FILES` files and `BATCH_BYTES` bytes,
/// except that a file larger than `BATCH_BYTES` forms a batch of its own.
pub fn batches(sizes: &[u64]) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let (mut start, mut bytes) = (0, 0u64);
    for (i, &size) in sizes.iter().enumerate() {
        let full = i - start == BATCH_FILES || bytes + size > BATCH_BYTES;
        if i > start && full {
            out.push(start..i);
            (start, bytes) = (i, 0);
        }
        bytes += size;
    }
    if start < sizes.len() {
        out.push(start..sizes.len());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_respect_bytes_and_files_and_big_files_go_alone() {
        const MIB: u64 = 1 << 20;
        assert!(batches(&[]).is_empty());
        assert_eq!(batches(&[10 * MIB, 10 * MIB, 10 * MIB, 10 * MIB]), [0..3, 3..4]);
        assert_eq!(batches(&[MIB, 40 * MIB, MIB]), [0..1, 1..2, 2..3]);
        assert_eq!(batches(&[32 * MIB, 0]).len(), 1, "an empty file still fits");
        let many = vec![1; 10_000];
        assert_eq!(batches(&many), [0..4096, 4096..8192, 8192..10_000]);
    }
}
