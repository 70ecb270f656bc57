//! What "the same artifact" means for an audit: the fleet's artifact against this host's compile
//! of the key's inputs, by [`kiln_proto::launch`]'s rule (every field a launch depends on, and
//! nothing that legitimately differs between two honest compiles), which kiln-cache also applies
//! to conflicting writes.

use crate::runtime::toolchain::Output;
use kiln_proto::envelope::Artifact;
use kiln_proto::launch::{self, Launch};

/// Where the fleet's artifact differs from this host's compile, or `None` when it does not.
pub fn difference(served: &Artifact, compiled: &Output) -> Option<String> {
    let here = Launch {
        cubin: &compiled.cubin,
        lowered_names: &compiled.lowered_names,
        metadata_json: &compiled.metadata_json,
        ptx: &compiled.ptx,
    };
    launch::difference(Launch::of(served), here, ("served", "compiled here"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_proto::pb::ArtifactMeta;

    fn served(cubin: &[u8], metadata_json: &str) -> Artifact {
        let meta = ArtifactMeta {
            metadata_json: metadata_json.into(),
            compile_micros: 5,
            log: "served log".into(),
            validation: "loaded on sm_90".into(),
            ..Default::default()
        };
        Artifact { meta, bytes: cubin.to_vec().into() }
    }

    fn output(cubin: &[u8], metadata_json: &str) -> Output {
        Output {
            cubin: cubin.to_vec(),
            metadata_json: metadata_json.into(),
            compile_micros: 9,
            log: "mine".into(),
            ..Default::default()
        }
    }

    #[test]
    fn times_logs_and_notes_do_not_count_bytes_and_metadata_do() {
        assert_eq!(difference(&served(b"abcd", "{}"), &output(b"abcd", "{}")), None);
        let d = difference(&served(b"abcd", "{}"), &output(b"abXd", "{}")).unwrap_or_default();
        assert_eq!(d, "cubin: 4 bytes served, 4 compiled here; first difference at byte 2");
        let d = difference(&served(b"abcd", "{}"), &output(b"abcde", "{}")).unwrap_or_default();
        assert!(d.contains("5 compiled here; first difference at byte 4"), "{d}");
        let d = difference(&served(b"abcd", r#"{"shared":0}"#), &output(b"abcd", r#"{"shared":9}"#));
        assert!(d.is_some_and(|d| d.starts_with("launch metadata")));
    }
}
