//! The replies a torch graph request gets, and the files a stored graph is kept as.

use super::engine::NAMESPACE;
use crate::core::blob::entry;
use crate::core::store::Stored;
use bytes::Bytes;
use kiln_proto::CacheKey;
use kiln_proto::pb::{self, BlobFile, Tier};
use std::sync::Arc;

/// The files of a stored graph.
const ARTIFACTS_FILE: &str = "artifacts";
const MICROS_FILE: &str = "compile_micros";

/// Why a graph asked with `no_worker` is compiled by its own process, for the job's events and
/// the process's own fallback.
pub(super) const UNSHARED: &str =
    "no tier had it, and its process cannot share its compile (its code names its GPU): compiled there, as torch would";
pub(super) const BUSY: &str = "no tier had it, and another process or host was compiling it: compiled here too, as torch would, rather than waiting";

/// The answer to a `no_worker` request nobody has stored: compile it yourself, share nothing.
pub(super) fn unshared_reply(why: &str) -> pb::TorchGraphReply {
    pb::TorchGraphReply {
        ok: true,
        compile_here: true,
        tier: Tier::Compiled as i32,
        log: why.into(),
        ..Default::default()
    }
}

pub(super) fn failed_reply(log: String, compile_micros: u64, key: &CacheKey, tier: Tier) -> pb::TorchGraphReply {
    pb::TorchGraphReply {
        ok: false,
        artifacts: Bytes::new(),
        tier: tier as i32,
        compile_micros,
        log,
        key: key.to_hex(),
        compile_here: false,
    }
}

pub(super) fn reply_of_entry(found: &pb::BlobEntry, key: &CacheKey) -> pb::TorchGraphReply {
    let file = |name: &str| found.files.iter().find(|f| f.name == name).map(|f| f.data.as_slice());
    let micros = file(MICROS_FILE).and_then(|b| b.try_into().ok()).map(u64::from_le_bytes).unwrap_or(0);
    pb::TorchGraphReply {
        ok: true,
        artifacts: Bytes::copy_from_slice(file(ARTIFACTS_FILE).unwrap_or_default()),
        tier: found.tier,
        compile_micros: micros,
        log: String::new(),
        key: key.to_hex(),
        compile_here: false,
    }
}

/// A graph's answer as the tiers keep it: torch's artifacts and what the compile cost, sealed
/// under `key` as one blob entry.
pub(super) fn stored(key: &CacheKey, artifacts: Vec<u8>, compile_micros: u64) -> Stored {
    let files = vec![
        BlobFile { name: ARTIFACTS_FILE.into(), data: artifacts },
        BlobFile { name: MICROS_FILE.into(), data: compile_micros.to_le_bytes().to_vec() },
    ];
    let (sealed, artifact) = entry::seal(key, NAMESPACE, files);
    Stored { envelope: Bytes::from(sealed), unpacked: Some(Arc::new(artifact)) }
}
