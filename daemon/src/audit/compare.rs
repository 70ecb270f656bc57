//! What "the same artifact" means for an audit: every field a launch depends on, and nothing
//! that legitimately differs between two honest compiles (the compile's duration, its log, the
//! load check's note, which depends on the host's GPU).

use crate::toolchain::Output;
use kiln_proto::envelope::Artifact;

/// Where the fleet's artifact differs from this host's compile, or `None` when it does not.
pub fn difference(served: &Artifact, compiled: &Output) -> Option<String> {
    if served.bytes.as_ref() != compiled.cubin.as_slice() {
        return Some(bytes_differ("cubin", &served.bytes, &compiled.cubin));
    }
    let meta = &served.meta;
    if meta.lowered_names != compiled.lowered_names {
        return Some("lowered names differ".into());
    }
    if meta.metadata_json != compiled.metadata_json {
        return Some(bytes_differ("launch metadata", meta.metadata_json.as_bytes(), compiled.metadata_json.as_bytes()));
    }
    if meta.ptx != compiled.ptx {
        return Some(bytes_differ("PTX", meta.ptx.as_bytes(), compiled.ptx.as_bytes()));
    }
    None
}

/// "cubin: 4096 bytes served, 4100 compiled here; first difference at byte 812".
fn bytes_differ(what: &str, served: &[u8], here: &[u8]) -> String {
    let at = served.iter().zip(here).position(|(a, b)| a != b).unwrap_or(served.len().min(here.len()));
    format!("{what}: {} bytes served, {} compiled here; first difference at byte {at}", served.len(), here.len())
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
