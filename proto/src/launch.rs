//! What "the same artifact" means for a kernel: every field a launch depends on, and nothing that
//! legitimately differs between two honest compiles of one key (the compile's duration, its log,
//! the load check's note, which depends on the host's GPU).
//!
//! kiln's toolchains are deterministic, so two artifacts of one key that differ here were not
//! both compiled from the key's inputs. Both sides of the fleet judge by this one rule: kilnd's
//! audit (the fleet's bytes against its own compile) and kiln-cache's refusal of a `Put` that
//! would replace a kernel with different bytes.

use crate::envelope::Artifact;
use crate::pb::LoweredName;

/// The parts of a kernel artifact a launch depends on.
#[derive(Debug, Clone, Copy)]
pub struct Launch<'a> {
    pub cubin: &'a [u8],
    pub lowered_names: &'a [LoweredName],
    /// Launch metadata as JSON (Triton's).
    pub metadata_json: &'a str,
    pub ptx: &'a str,
}

impl<'a> Launch<'a> {
    pub fn of(artifact: &'a Artifact) -> Self {
        Launch {
            cubin: &artifact.bytes,
            lowered_names: &artifact.meta.lowered_names,
            metadata_json: &artifact.meta.metadata_json,
            ptx: &artifact.meta.ptx,
        }
    }
}

/// Where `a` differs from `b`, or `None` when they are the same artifact. `names` says what each
/// side is, for the message: ("served", "compiled here") reads "cubin: 4096 bytes served, 4100
/// compiled here; first difference at byte 812".
pub fn difference(a: Launch<'_>, b: Launch<'_>, names: (&str, &str)) -> Option<String> {
    if a.cubin != b.cubin {
        return Some(bytes_differ("cubin", a.cubin, b.cubin, names));
    }
    if a.lowered_names != b.lowered_names {
        return Some("lowered names differ".into());
    }
    if a.metadata_json != b.metadata_json {
        return Some(bytes_differ("launch metadata", a.metadata_json.as_bytes(), b.metadata_json.as_bytes(), names));
    }
    if a.ptx != b.ptx {
        return Some(bytes_differ("PTX", a.ptx.as_bytes(), b.ptx.as_bytes(), names));
    }
    None
}

fn bytes_differ(what: &str, a: &[u8], b: &[u8], (a_name, b_name): (&str, &str)) -> String {
    let at = a.iter().zip(b).position(|(x, y)| x != y).unwrap_or(a.len().min(b.len()));
    format!("{what}: {} bytes {a_name}, {} {b_name}; first difference at byte {at}", a.len(), b.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pb::ArtifactMeta;

    fn artifact(cubin: &[u8], metadata_json: &str, compile_micros: u64, log: &str) -> Artifact {
        let meta = ArtifactMeta {
            metadata_json: metadata_json.into(),
            compile_micros,
            log: log.into(),
            validation: format!("checked after {compile_micros}"),
            ..Default::default()
        };
        Artifact { meta, bytes: cubin.to_vec().into() }
    }

    #[test]
    fn times_logs_and_notes_do_not_count_bytes_and_metadata_do() {
        let names = ("held", "offered");
        let a = artifact(b"abcd", "{}", 5, "one log");
        assert_eq!(difference(Launch::of(&a), Launch::of(&artifact(b"abcd", "{}", 9, "another")), names), None);
        let d = difference(Launch::of(&a), Launch::of(&artifact(b"abXd", "{}", 5, "")), names);
        assert_eq!(d.as_deref(), Some("cubin: 4 bytes held, 4 offered; first difference at byte 2"));
        let d = difference(Launch::of(&a), Launch::of(&artifact(b"abcde", "{}", 5, "")), names);
        assert!(d.is_some_and(|d| d.contains("5 offered; first difference at byte 4")));
        let d = difference(Launch::of(&a), Launch::of(&artifact(b"abcd", r#"{"shared":9}"#, 5, "")), names);
        assert!(d.is_some_and(|d| d.starts_with("launch metadata")));
        let mut renamed = artifact(b"abcd", "{}", 5, "");
        renamed.meta.lowered_names.push(LoweredName { name_expression: "f".into(), lowered_name: "_Z1fv".into() });
        assert_eq!(difference(Launch::of(&a), Launch::of(&renamed), names).as_deref(), Some("lowered names differ"));
        let mut other_ptx = artifact(b"abcd", "{}", 5, "");
        other_ptx.meta.ptx = ".version 8.0".into();
        assert!(difference(Launch::of(&a), Launch::of(&other_ptx), names).is_some_and(|d| d.starts_with("PTX")));
    }
}
