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
//! (`blob/…`) and kiln's own records (`kiln/…`) are the uploader's bytes, which may legitimately
//! differ between uploaders: a different one still replaces the held one, and is only recorded.

use kiln_proto::envelope::{Artifact, INTERNAL_TOOLCHAIN_PREFIX};
use kiln_proto::launch::{self, Launch};

/// The toolchain prefix of a blob's envelope (`blob/<namespace>`).
const BLOB_TOOLCHAIN_PREFIX: &str = "blob/";

/// How an offered artifact compares with the one its key holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Judgement {
    /// The same artifact (a re-publish): nothing to record.
    Same,
    /// Different; `detail` says where. `kernel`: refuse the offer (see the module doc).
    Conflict { detail: String, kernel: bool },
}

/// Whether an artifact of `toolchain` is a kernel, whose key has one right answer.
pub fn is_kernel(toolchain: &str) -> bool {
    !toolchain.starts_with(BLOB_TOOLCHAIN_PREFIX) && !toolchain.starts_with(INTERNAL_TOOLCHAIN_PREFIX)
}

/// Judges `offered` against `held`, both verified envelopes of one key. A kernel on either side
/// makes it a kernel's conflict: a writer cannot turn a kernel's key into a blob's to replace it.
pub fn judge(held: &Artifact, offered: &Artifact) -> Judgement {
    let kernel = is_kernel(&held.meta.toolchain) || is_kernel(&offered.meta.toolchain);
    let detail = if held.meta.toolchain != offered.meta.toolchain {
        Some(format!("toolchain: {:?} held, {:?} offered", held.meta.toolchain, offered.meta.toolchain))
    } else if held.meta.target != offered.meta.target {
        Some(format!("target: {:?} held, {:?} offered", held.meta.target, offered.meta.target))
    } else if kernel {
        launch::difference(Launch::of(held), Launch::of(offered), ("held", "offered"))
    } else {
        (held.bytes != offered.bytes)
            .then(|| format!("{} bytes held, {} offered", held.bytes.len(), offered.bytes.len()))
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
        let book = artifact("kiln/recipe-book", b"a", 0);
        assert!(matches!(
            judge(&book, &artifact("kiln/recipe-book", b"b", 0)),
            Judgement::Conflict { kernel: false, .. }
        ));
        let mut retargeted = held.clone();
        retargeted.meta.target = "sm_80".into();
        assert!(matches!(judge(&held, &retargeted), Judgement::Conflict { kernel: true, .. }));
    }
}
