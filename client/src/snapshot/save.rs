//! Saves roots as a job's snapshot: walk and hash, `MissingFiles`, `PutFiles` for what no tier
//! holds, then `SaveSnapshot`, which kilnd unions with the stored manifest, so a save never
//! shrinks a snapshot and an unchanged file is never sent twice.

use super::error::blocking;
use super::upload::{self, Candidate};
use super::walk::walk;
use super::{Observer, Phase, Root, SnapshotError, SnapshotId, digest};
use crate::client::Client;
use kiln_proto::pb;
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

/// What a save did.
#[derive(Debug, Clone, PartialEq)]
pub struct SaveReport {
    pub job: String,
    /// The stored manifest's key (64 hex characters).
    pub key: String,
    pub roots: Vec<Root>,
    /// The files this save covered, and their bytes.
    pub files: u64,
    pub bytes: u64,
    /// What had to be sent: contents no tier held.
    pub files_uploaded: u64,
    pub bytes_uploaded: u64,
    /// Manifest entries this save added or changed, and whether the manifest changed at all.
    pub files_added: u32,
    pub changed: bool,
    /// Entries that vanished or could not be read while saving.
    pub skipped: u64,
    /// Symbolic links under the roots, which a snapshot does not hold.
    pub symlinks: u64,
    /// The stored snapshot after the union.
    pub manifest_files: u64,
    pub manifest_bytes: u64,
    pub seconds: f64,
}

/// One file this save covers.
#[derive(Debug)]
struct Entry {
    root: String,
    rel: String,
    abs: PathBuf,
    hashed: digest::Hashed,
}

/// Saves `roots` under `id`. Each root must be an existing directory, and no two may share a
/// name.
pub async fn save(
    client: &Client,
    id: &SnapshotId,
    roots: &[Root],
    observer: Arc<dyn Observer>,
) -> Result<SaveReport, SnapshotError> {
    let started = Instant::now();
    let wire_roots = wire_roots(roots)?;
    let scan_roots = roots.to_vec();
    let scan_observer = observer.clone();
    let (mut entries, mut skipped, symlinks) = blocking(move || scan(&scan_roots, scan_observer.as_ref())).await?;

    let mut grpc = client.snapshots();
    let candidates = candidates(&entries);
    let digests: Vec<[u8; 32]> = candidates.iter().map(|c| c.digest).collect();
    let missing = upload::missing(&mut grpc, &digests).await?;
    let to_send = candidates.into_iter().filter(|c| missing.contains(&c.digest)).collect();
    let uploaded = upload::upload(&mut grpc, to_send, &observer).await?;
    let before = entries.len();
    entries.retain(|e| !uploaded.vanished.contains(&e.hashed.digest));
    skipped += (before - entries.len()) as u64;

    let request = pb::SaveSnapshotRequest {
        id: Some(id.to_pb()),
        roots: wire_roots,
        files: entries
            .iter()
            .map(|e| pb::SnapshotFile {
                root: e.root.clone(),
                path: e.rel.clone(),
                mode: e.hashed.mode,
                digest: e.hashed.digest.to_vec(),
                size: e.hashed.size,
            })
            .collect(),
    };
    let response = grpc.save_snapshot(request).await?.into_inner();
    let manifest = response.manifest.unwrap_or_default();
    Ok(SaveReport {
        job: id.job.clone(),
        key: manifest.key,
        roots: roots.to_vec(),
        files: entries.len() as u64,
        bytes: entries.iter().map(|e| e.hashed.size).sum(),
        files_uploaded: uploaded.files,
        bytes_uploaded: uploaded.bytes,
        files_added: response.files_added,
        changed: response.changed,
        skipped,
        symlinks,
        manifest_files: manifest.files.len() as u64,
        manifest_bytes: manifest.total_bytes,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// The roots as the wire names them; refuses an empty list and a name given twice.
fn wire_roots(roots: &[Root]) -> Result<Vec<pb::SnapshotRoot>, SnapshotError> {
    if roots.is_empty() {
        return Err(SnapshotError::Usage("a save needs at least one directory".into()));
    }
    let mut names = HashSet::new();
    roots
        .iter()
        .map(|root| {
            if !names.insert(root.name.as_str()) {
                return Err(SnapshotError::Usage(format!(
                    "two roots are named `{}`: name them apart with NAME=DIR",
                    root.name
                )));
            }
            let path = root.path_str().map_err(SnapshotError::Usage)?;
            Ok(pb::SnapshotRoot { name: root.name.clone(), path: path.to_owned() })
        })
        .collect()
}

/// Walks and hashes every root; returns the entries in (root, path) order, how many were
/// skipped, and how many symbolic links were left out.
fn scan(roots: &[Root], observer: &dyn Observer) -> Result<(Vec<Entry>, u64, u64), SnapshotError> {
    let listings = roots.iter().map(|r| walk(&r.path)).collect::<Result<Vec<_>, _>>()?;
    let files: usize = listings.iter().map(|l| l.files.len()).sum();
    observer.phase(Phase::Hash, files as u64, 0);
    let mut skipped: u64 = listings.iter().map(|l| l.skipped).sum();
    let symlinks: u64 = listings.iter().map(|l| l.symlinks).sum();
    let mut entries = Vec::with_capacity(files);
    for (root, listing) in roots.iter().zip(listings) {
        for found in listing.files {
            match digest::hash_file(&found.abs) {
                Ok(hashed) => {
                    observer.advance(1, hashed.size);
                    entries.push(Entry { root: root.name.clone(), rel: found.rel, abs: found.abs, hashed });
                }
                Err(_) => {
                    observer.advance(1, 0);
                    skipped += 1;
                }
            }
        }
    }
    Ok((entries, skipped, symlinks))
}

/// One candidate per distinct content, in first-seen order, with every path that holds it.
fn candidates(entries: &[Entry]) -> Vec<Candidate> {
    let mut index: HashMap<[u8; 32], usize> = HashMap::new();
    let mut out: Vec<Candidate> = Vec::new();
    for e in entries {
        let i = *index.entry(e.hashed.digest).or_insert_with(|| {
            out.push(Candidate { digest: e.hashed.digest, size: e.hashed.size, paths: Vec::new() });
            out.len() - 1
        });
        out[i].paths.push(e.abs.clone());
    }
    out
}
