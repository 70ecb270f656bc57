//! Property tests of kilnd's checks of untrusted input: the include scanner that keeps host paths
//! out of NVRTC, request validation, and the blob and snapshot validators. `cargo test` runs a
//! bounded number of cases; `scripts/fuzz` runs many more, and a failure is kept in
//! `daemon/proptest-regressions/` and replayed first by every later run.
//!
//! One module a check: `scanner`, `requests`, and `blobs_and_snapshots`. Here are what they
//! share: the corpus every property keeps its failures in, and the hostile wire bytes that both
//! requests and blobs are decoded from.
#![allow(clippy::unwrap_used)]

mod blobs_and_snapshots;
mod requests;
mod scanner;

use proptest::prelude::*;

#[path = "../../../proto/tests/support/props.rs"]
mod support;

pub(crate) const CORPUS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/proptest-regressions/untrusted_props.txt");

/// Bytes in the protobuf wire format, fields numbered like a request's and nested a few levels, so
/// that decoding reaches the kernels: what a hostile or broken client can put on the socket.
pub(crate) fn wire() -> impl Strategy<Value = Vec<u8>> {
    fn varint(mut v: u64, out: &mut Vec<u8>) {
        while v >= 0x80 {
            out.push(v as u8 | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }
    let scalar = prop_oneof![
        (1u64..8, prop_oneof![0u64..4, any::<u64>()]).prop_map(|(f, v)| {
            let mut out = Vec::new();
            varint(f << 3, &mut out);
            varint(v, &mut out);
            out
        }),
        (1u64..8, prop_oneof![".{0,12}", "sm_[0-9]{2}a?", "[a-z]{1,4}", "#include \"/etc/passwd\""]).prop_map(
            |(f, s)| {
                let mut out = Vec::new();
                varint(f << 3 | 2, &mut out);
                varint(s.len() as u64, &mut out);
                out.extend_from_slice(s.as_bytes());
                out
            }
        ),
        (1u64..8, 0u64..2, prop::collection::vec(any::<u8>(), 0..8)).prop_map(|(f, w, bytes)| {
            let mut out = Vec::new();
            varint(f << 3 | if w == 0 { 1 } else { 5 }, &mut out);
            out.extend_from_slice(&bytes[..bytes.len().min(if w == 0 { 8 } else { 4 })]);
            out
        }),
    ];
    let message = prop::collection::vec(scalar, 0..6).prop_map(|v| v.concat());
    message.prop_recursive(5, 64, 6, |inner| {
        prop::collection::vec(
            prop_oneof![
                (1u64..8, inner).prop_map(|(f, body)| {
                    let mut out = Vec::new();
                    varint(f << 3 | 2, &mut out);
                    varint(body.len() as u64, &mut out);
                    out.extend_from_slice(&body);
                    out
                }),
                prop::collection::vec(any::<u8>(), 0..4),
            ],
            0..6,
        )
        .prop_map(|v| v.concat())
    })
}
