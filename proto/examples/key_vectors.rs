//! Regenerates proto/testdata/key-vectors.json:
//! `cargo run -p kiln-proto --example key_vectors > proto/testdata/key-vectors.json`.
//! Only run it when the schema changes on purpose; the tests check the file against the code.
#![allow(clippy::unwrap_used)] // a developer tool run by hand: a panic is the right report

use kiln_proto::key::{blob_key, graph_key};
use kiln_proto::{CacheKey, Fingerprint, KeyInputs, Target};
use serde_json::json;

fn main() {
    let cases = [
        ("nvrtc", 1u8, "sm_90", "extern \"C\" __global__ void k() {}", vec![], vec![], vec!["k"]),
        ("nvrtc", 1, "sm_90a", "extern \"C\" __global__ void k() {}", vec![], vec![], vec!["k"]),
        (
            "nvrtc",
            2,
            "sm_80",
            "#include \"a.h\"\ntemplate <class T> __global__ void s(T* x) {}",
            vec!["--use_fast_math", "-DN=4"],
            vec![("b.h", "// b"), ("a.h", "#include \"b.h\"")],
            vec!["s<float>", "s<double>"],
        ),
        ("ptxas", 3, "sm_100", ".version 8.0", vec!["-O3"], vec![], vec![]),
    ];
    let mut kernel_keys = Vec::new();
    let mut keys: Vec<CacheKey> = Vec::new();
    for (toolchain, fp, target, source, options, headers, entries) in cases {
        let fingerprint = Fingerprint::from_bytes([fp; 32]);
        let target: Target = target.parse().unwrap();
        let options: Vec<String> = options.into_iter().map(String::from).collect();
        let entries: Vec<String> = entries.into_iter().map(String::from).collect();
        let header_bytes: Vec<(&str, &[u8])> = headers.iter().map(|(n, c)| (*n, c.as_bytes())).collect();
        let key = KeyInputs {
            toolchain,
            fingerprint: &fingerprint,
            target: &target,
            source: source.as_bytes(),
            options: &options,
            headers: &header_bytes,
            entries: &entries,
        }
        .derive();
        keys.push(key);
        kernel_keys.push(json!({
            "toolchain": toolchain, "fingerprint": fingerprint.to_hex(), "target": target.to_string(),
            "source": source, "options": options, "headers": headers, "entries": entries,
            "key": key.to_hex(),
        }));
    }
    let target: Target = "sm_90".parse().unwrap();
    let ids = ["add", "scale"];
    let graph = graph_key(&target, ids.iter().copied().zip(keys.iter()));
    let doc = json!({
        "schema": "kiln-key-v1",
        "encoding": "blake3 over fields: tag u8, length u64 little-endian, bytes; see proto/src/key.rs",
        "kernel_keys": kernel_keys,
        "graph_keys": [{
            "target": "sm_90",
            "kernels": ids.iter().zip(keys.iter()).map(|(i, k)| json!([i, k.to_hex()])).collect::<Vec<_>>(),
            "key": graph.to_hex(),
        }],
        "blob_keys": [
            {"namespace": "triton", "tool_version": "3.6.0", "caller_key": "abc", "key": blob_key("triton", "3.6.0", b"abc").to_hex()},
            {"namespace": "inductor", "tool_version": "2.11", "caller_key": "abc", "key": blob_key("inductor", "2.11", b"abc").to_hex()},
        ],
    });
    println!("{}", serde_json::to_string_pretty(&doc).unwrap());
}
