//! Generates the kiln.v1 code with protox (a pure-Rust protobuf compiler, so no system `protoc`
//! is needed on a fresh machine), tonic for the services, and pbjson for the standard proto3 JSON
//! mapping that `kiln compile --graph FILE.json` reads.

use prost::Message;
use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    let fds = protox::compile(
        [
            "kiln/v1/kiln.proto",
            "kiln/v1/cache.proto",
            "kiln/v1/blob.proto",
            "kiln/v1/snapshot.proto",
            "kiln/v1/graph.proto",
        ],
        ["."],
    )?;
    std::fs::write(out.join("calls.rs"), calls_macros(&fds)?)?;
    let descriptor_path = out.join("kiln_v1_descriptor.bin");
    std::fs::write(&descriptor_path, fds.encode_to_vec())?;

    // A hit hands every client the same artifact bytes: `Bytes` shares them instead of copying.
    tonic_prost_build::configure()
        .bytes(".kiln.v1.KernelResult.artifact")
        .bytes(".kiln.v1.TorchGraphReply.artifacts")
        .build_client(true)
        .build_server(true)
        .compile_fds(fds)?;

    pbjson_build::Builder::new().register_descriptors(&std::fs::read(&descriptor_path)?)?.build(&[".kiln.v1"])?;

    println!("cargo:rerun-if-changed=kiln/v1/kiln.proto");
    println!("cargo:rerun-if-changed=kiln/v1/cache.proto");
    println!("cargo:rerun-if-changed=kiln/v1/blob.proto");
    println!("cargo:rerun-if-changed=kiln/v1/snapshot.proto");
    println!("cargo:rerun-if-changed=kiln/v1/graph.proto");
    Ok(())
}

/// For each service the servers keep a table of calls for, a macro that hands every rpc of the
/// proto, in its order, to a macro of the caller's: `kiln_proto::artifact_cache_calls!(m)` is
/// `m! { Get, BatchGet, ... }`. A table built from it has one entry per rpc by construction,
/// and a `match` over it without a wildcard makes the compiler ask about each new one.
fn calls_macros(fds: &prost_types::FileDescriptorSet) -> Result<String, Box<dyn std::error::Error>> {
    const TABLES: [(&str, &str); 1] = [("ArtifactCache", "artifact_cache_calls")];
    let mut text = String::new();
    for (service, macro_name) in TABLES {
        let found = fds.file.iter().flat_map(|f| &f.service).find(|s| s.name() == service);
        let Some(found) = found else { return Err(format!("no service {service} in kiln.v1").into()) };
        let calls: Vec<&str> = found.method.iter().map(|m| m.name()).collect();
        text += &format!(
            "/// Hands every rpc of `kiln.v1.{service}`, in the proto's order, to `$callback!`.\n\
             #[macro_export]\nmacro_rules! {macro_name} {{\n    ($callback:ident) => {{\n        \
             $callback! {{ {} }}\n    }};\n}}\n",
            calls.join(", ")
        );
    }
    Ok(text)
}
