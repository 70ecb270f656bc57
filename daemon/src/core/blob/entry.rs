//! A blob entry framed as an artifact: the files travel as an encoded `BlobEntry` payload, so the
//! envelope's digest covers every name and byte of a group at once.

use kiln_proto::CacheKey;
use kiln_proto::envelope::{self, Artifact};
use kiln_proto::pb::{self, ArtifactMeta, BlobEntry, BlobFile};
use prost::Message;

/// The `toolchain` recorded in a blob's metadata: `blob/<namespace>`.
pub fn toolchain_label(namespace: &str) -> String {
    format!("blob/{namespace}")
}

/// Seals `files` under `key`.
pub fn seal(key: &CacheKey, namespace: &str, files: Vec<BlobFile>) -> (Vec<u8>, Artifact) {
    let payload = BlobEntry { found: true, files, tier: pb::Tier::Unspecified as i32 }.encode_to_vec();
    let meta = ArtifactMeta { toolchain: toolchain_label(namespace), ..Default::default() };
    let sealed = envelope::seal(key, meta.clone(), &payload);
    let meta = ArtifactMeta { raw_bytes: payload.len() as u64, ..meta };
    (sealed, Artifact { meta, bytes: payload.into() })
}

/// The files of a verified artifact, answered from `tier`; `None` when the artifact is not a blob
/// of `namespace` (a cubin or another integration's entry can never be served as this one).
pub fn open(artifact: &Artifact, namespace: &str, tier: pb::Tier) -> Option<BlobEntry> {
    if artifact.meta.toolchain != toolchain_label(namespace) {
        return None;
    }
    let mut entry = BlobEntry::decode(&artifact.bytes[..]).ok()?;
    entry.found = true;
    entry.tier = tier as i32;
    Some(entry)
}

/// The answer for a key that is in no tier.
pub(crate) fn missing() -> BlobEntry {
    BlobEntry { found: false, files: Vec::new(), tier: pb::Tier::Unspecified as i32 }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_group_round_trips_through_an_envelope() {
        let key = CacheKey::from_bytes([7; 32]);
        let files = vec![
            BlobFile { name: "a.cubin".into(), data: vec![1, 2, 3] },
            BlobFile { name: "__grp__a.json".into(), data: b"{}".to_vec() },
        ];
        let (sealed, _) = seal(&key, "triton", files.clone());
        let artifact = envelope::open(&sealed, &key, 1 << 20).unwrap();
        let entry = open(&artifact, "triton", pb::Tier::Disk).unwrap();
        assert_eq!(entry.files, files);
        assert_eq!(entry.tier, pb::Tier::Disk as i32);
        assert!(open(&artifact, "inductor", pb::Tier::Disk).is_none(), "served under another namespace");
    }
}
