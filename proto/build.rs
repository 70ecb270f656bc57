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
