//! Conflicting writes: a `Put` that offers other bytes under a key than those it holds.
//!
//! kiln's toolchains are deterministic: a kernel's key has one right answer, so a second,
//! different kernel under a key means one of the two writers did not compile the key's inputs
//! (bad memory, a patched toolchain, a stolen token). Replacing the held bytes would let the
//! later writer win silently; instead the `Put` is refused, the held artifact is marked disputed
//! (kilnd audits it on its next fetch), and the conflict is recorded with both writers.
//!
//! "Different" is [`kiln_proto::launch`]'s rule, the audit's own: envelope fields that honest
//! hosts fill differently (compile time, log, load check) do not count. Blobs and snapshot files
//! (`blob/…`) are the uploader's bytes, which may legitimately differ between uploaders: a
//! different one still replaces the held one, and is only recorded.
//!
//! kiln's own records that kilnd rewrites under one key as they change (see
//! [`is_mutable_record`]: recipe books, snapshot manifests and listings) are no conflict at all:
//! a newer one is an update, replacing the held one unrecorded. Only where both sides are the
//! same such record: a writer that labels its offer as one cannot replace a kernel (a kernel on
//! either side is judged as a kernel) nor, unrecorded, a blob or a snapshot file (the toolchains
//! differ).

use kiln_proto::envelope::{
    Artifact, INTERNAL_TOOLCHAIN_PREFIX, SNAPSHOT_INDEX_NAMESPACE, SNAPSHOT_MANIFEST_NAMESPACE,
};
use kiln_proto::launch::{self, Launch};
use kiln_proto::vet::BLOB_TOOLCHAIN_PREFIX;
pub use kiln_proto::vet::is_kernel;

/// How an offered artifact compares with the one its key holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Judgement {
    /// The same artifact (a re-publish): nothing to record.
    Same,
    /// A newer version of one of kiln's own changing records (see [`is_mutable_record`]): it
    /// replaces the held one, and there is nothing to record.
    Update,
    /// Different; `detail` says where. `kernel`: refuse the offer (see the module doc).
    Conflict { detail: String, kernel: bool },
}

/// Whether an artifact of `toolchain` is one of kiln's own records that kilnd rewrites under one
/// key as it changes: its internal records (`kiln/…`, recipe books) and the snapshot manifests
/// and listings (`blob/snapshot`, `blob/snapshot-index`), rewritten by every save. Not snapshot
/// files (`blob/snapshot-file`: their key is their content) nor any other blob.
pub fn is_mutable_record(toolchain: &str) -> bool {
    toolchain.starts_with(INTERNAL_TOOLCHAIN_PREFIX)
        || toolchain
            .strip_prefix(BLOB_TOOLCHAIN_PREFIX)
            .is_some_and(|ns| ns == SNAPSHOT_MANIFEST_NAMESPACE || ns == SNAPSHOT_INDEX_NAMESPACE)
}

/// Judges `offered` against `held`, both verified envelopes of one key. A kernel on either side
/// makes it a kernel's conflict: a writer cannot turn a kernel's key into a blob's to replace it.
/// Other bytes of the same changing record of kiln's own, with the same toolchain and target on
/// both sides, are an update.
pub fn judge(held: &Artifact, offered: &Artifact) -> Judgement {
    let kernel = is_kernel(&held.meta.toolchain) || is_kernel(&offered.meta.toolchain);
    let detail = if held.meta.toolchain != offered.meta.toolchain {
        Some(format!("toolchain: {:?} held, {:?} offered", held.meta.toolchain, offered.meta.toolchain))
    } else if held.meta.target != offered.meta.target {
        Some(format!("target: {:?} held, {:?} offered", held.meta.target, offered.meta.target))
    } else if kernel {
        launch::difference(Launch::of(held), Launch::of(offered), ("held", "offered"))
    } else if held.bytes == offered.bytes {
        None
    } else if is_mutable_record(&held.meta.toolchain) {
        return Judgement::Update;
    } else {
        Some(format!("{} bytes held, {} offered", held.bytes.len(), offered.bytes.len()))
    };
    match detail {
        Some(detail) => Judgement::Conflict { detail, kernel },
        None => Judgement::Same,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_proto::pb::ArtifactMeta;

    fn artifact(toolchain: &str, bytes: &[u8], compile_micros: u64) -> Artifact {
        let meta = ArtifactMeta {
            toolchain: toolchain.into(),
            target: "sm_90".into(),
            compile_micros,
            log: format!("took {compile_micros}"),
            ..Default::default()
        };
        Artifact { meta, bytes: bytes.to_vec().into() }
    }

    #[test]
    fn kernels_conflict_by_what_a_launch_uses_and_blobs_by_their_bytes() {
        let held = artifact("nvrtc", b"cubin", 5);
        assert_eq!(judge(&held, &artifact("nvrtc", b"cubin", 900)), Judgement::Same, "an honest recompile");
        let Judgement::Conflict { detail, kernel: true } = judge(&held, &artifact("nvrtc", b"cubiN", 5)) else {
            panic!("a kernel's other bytes")
        };
        assert!(detail.starts_with("cubin: 5 bytes held, 5 offered"), "{detail}");
        assert!(matches!(judge(&held, &artifact("blob/x", b"cubin", 5)), Judgement::Conflict { kernel: true, .. }));
        assert!(matches!(judge(&artifact("blob/x", b"a", 0), &held), Judgement::Conflict { kernel: true, .. }));
        let blob = artifact("blob/torch-graph", b"files", 0);
        assert_eq!(judge(&blob, &blob.clone()), Judgement::Same);
        let other = judge(&blob, &artifact("blob/torch-graph", b"other files", 0));
        assert_eq!(other, Judgement::Conflict { detail: "5 bytes held, 11 offered".into(), kernel: false });
        let snapshot_file = artifact("blob/snapshot-file", b"a", 0);
        assert!(matches!(
            judge(&snapshot_file, &artifact("blob/snapshot-file", b"b", 0)),
            Judgement::Conflict { kernel: false, .. }
        ));
        let mut retargeted = held.clone();
        retargeted.meta.target = "sm_80".into();
        assert!(matches!(judge(&held, &retargeted), Judgement::Conflict { kernel: true, .. }));
    }

    /// kiln's own changing records: a newer one is an update, never a conflict; the same one a
    /// re-publish. Labelling an offer as one borrows nothing: over a kernel it is a kernel's
    /// conflict, over a blob or a snapshot file (or another kind of record) a recorded one.
    #[test]
    fn kilns_own_records_update_and_a_label_borrows_nothing() {
        for toolchain in ["kiln/recipe-book", "blob/snapshot", "blob/snapshot-index"] {
            let held = artifact(toolchain, b"an older book", 0);
            assert_eq!(judge(&held, &artifact(toolchain, b"a newer book", 7)), Judgement::Update, "{toolchain}");
            assert_eq!(judge(&held, &artifact(toolchain, b"an older book", 7)), Judgement::Same, "{toolchain}");
            let kernel = artifact("nvrtc", b"an older book", 0);
            for (h, o) in [(&kernel, &held), (&held, &kernel)] {
                assert!(matches!(judge(h, o), Judgement::Conflict { kernel: true, .. }), "{toolchain}");
            }
            for other in ["blob/inductor", "blob/snapshot-file", "kiln/other-record"] {
                let blob = artifact(other, b"files", 0);
                for (h, o) in [(&blob, &held), (&held, &blob)] {
                    assert!(matches!(judge(h, o), Judgement::Conflict { kernel: false, .. }), "{toolchain} {other}");
                }
            }
            let mut retargeted = artifact(toolchain, b"a newer book", 0);
            retargeted.meta.target = "sm_80".into();
            assert!(matches!(judge(&held, &retargeted), Judgement::Conflict { kernel: false, .. }));
        }
        assert!(is_mutable_record("kiln/recipe-book"));
        for toolchain in ["blob/snapshot-file", "blob/snapshots", "blob/torch-graph", "nvrtc", "snapshot", "kiln"] {
            assert!(!is_mutable_record(toolchain), "{toolchain}");
        }
    }
}
