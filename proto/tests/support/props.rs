//! Shared by the property tests of every crate (each includes this file with `#[path]`): the
//! configuration, so that scripts/fuzz scales them all alike and their failures persist in the
//! repository, and the byte edits that damage a valid encoding.
#![allow(dead_code)]

use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;

/// `cases` (what `cargo test` runs), times `KILN_PROPTEST_SCALE` (scripts/fuzz). Failures are
/// saved to `corpus`, a file under the crate's `proptest-regressions/` that is kept in the
/// repository and replayed first by every run.
pub fn config(cases: u32, corpus: &'static str) -> ProptestConfig {
    let scale: u32 = std::env::var("KILN_PROPTEST_SCALE").ok().and_then(|s| s.parse().ok()).unwrap_or(1);
    ProptestConfig {
        cases: cases.saturating_mul(scale),
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(corpus))),
        ..Default::default()
    }
}

/// One edit of an encoding: where, a byte, and whether to cut, insert or overwrite there.
pub type Edit = (prop::sample::Index, u8, u8);

/// One to five edits.
pub fn edits() -> impl Strategy<Value = Vec<Edit>> {
    prop::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0u8..3), 1..6)
}

/// Applies `edits` to `bytes`: each cuts, inserts or overwrites one byte.
pub fn edit(mut bytes: Vec<u8>, edits: &[Edit]) -> Vec<u8> {
    for (at, b, op) in edits {
        let i = at.index(bytes.len() + 1);
        match op {
            0 if i < bytes.len() => {
                bytes.remove(i);
            }
            1 => bytes.insert(i, *b),
            _ if i < bytes.len() => bytes[i] = *b,
            _ => bytes.push(*b),
        }
    }
    bytes
}

/// Triton options from their six fields, in proto order.
pub fn triton_options(o: (u32, u32, u32, u32, bool, bool)) -> kiln_proto::pb::TritonOptions {
    kiln_proto::pb::TritonOptions {
        num_warps: o.0,
        num_stages: o.1,
        num_ctas: o.2,
        maxnreg: o.3,
        enable_fp_fusion: o.4,
        enable_fp_fusion_set: o.5,
    }
}

/// A Triton source's parts, in proto order.
pub type TritonParts = (
    String,
    String,
    Vec<kiln_proto::pb::TritonArg>,
    Vec<kiln_proto::pb::TritonConstexpr>,
    Vec<kiln_proto::pb::TritonAttribute>,
    Option<kiln_proto::pb::TritonOptions>,
    bool,
);

/// A kernel's Triton source from its parts.
pub fn triton_source(t: TritonParts) -> kiln_proto::pb::kernel::Source {
    let (source, kernel_name, signature, constexprs, attributes, options, want_ptx) = t;
    kiln_proto::pb::kernel::Source::Triton(kiln_proto::pb::TritonSource {
        source,
        kernel_name,
        signature,
        constexprs,
        attributes,
        options,
        want_ptx,
    })
}
