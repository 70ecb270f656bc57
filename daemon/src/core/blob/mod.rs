//! Named blobs as the tiers hold them, whoever stores them (the `kiln.v1.Blobs` handlers, job
//! snapshots, torch graphs): the scope that keys a caller's key, and the entry that frames a
//! group of files as one artifact, so a reader sees all of one writer's files or none.

pub mod entry;

use kiln_proto::CacheKey;
use kiln_proto::key::blob_key;

/// A checked namespace and tool version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scope {
    pub namespace: String,
    pub tool_version: String,
}

impl Scope {
    /// The stored key of one of this scope's caller keys.
    pub(crate) fn key(&self, caller_key: &[u8]) -> CacheKey {
        blob_key(&self.namespace, &self.tool_version, caller_key)
    }
}
