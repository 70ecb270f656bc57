//! kiln-proto: the parts of kiln that every component and every client must agree on.
//!
//! - [`pb`]: the generated `kiln.v1` messages and tonic services (with proto3 JSON via pbjson).
//! - [`key`]: the canonical cache-key derivation, schema `kiln-key-v1`. The key schema is part of
//!   the protocol, so it lives here and clients may compute keys too.
//! - [`target`]: parsing and printing GPU targets such as `sm_90a`.
//! - [`envelope`]: the self-verifying frame every cached artifact is stored in, in every tier.
//! - [`launch`]: what makes two kernel artifacts of one key the same, for kilnd's audit and
//!   kiln-cache's refusal of conflicting writes alike.
//! - [`auth`]: bearer tokens, read-only or read-write: the servers' check and the clients'
//!   interceptor.
//! - [`code`]: gRPC status codes by name, for metric labels and error messages.
//! - [`paths`]: the default socket and cache locations, shared by kilnd and its clients.
//! - [`probe`]: the tiny kernels `kilnd check` and `kiln doctor` compile to prove a toolchain.
//! - [`units`]: sizes as kiln writes them for people, in the CLI and on the status pages.
//! - `fixtures` (with the `fixtures` feature, for tests): sample messages for the tests of the
//!   crates that render them.
//!
//! Every client links this crate, so what only a server needs (the status pages' HTML, the Unix
//! socket filter) lives in kiln-serve.

/// The largest gRPC message kiln sends or accepts by default, on every channel (kilnd, its
/// clients, kiln-cache and its client): 256 MiB. tonic's default of 4 MiB is smaller than some
/// real cubins; results and envelopes travel in messages of their own, so this bounds one
/// artifact, not a graph. The daemons' `max_message_mb` settings default to it.
pub const MAX_MESSAGE_BYTES: usize = 256 << 20;

/// Longest compiler log a fleet negative entry may carry: kiln-cache refuses longer ones and its
/// client cuts them to this, so a failed compile is always announced.
pub const MAX_NEGATIVE_LOG_BYTES: usize = 1 << 20;

pub mod auth;
pub mod code;
pub mod envelope;
#[cfg(any(test, feature = "fixtures"))]
pub mod fixtures;
pub mod key;
pub mod launch;
pub mod paths;
pub mod probe;
pub mod target;
pub mod torch_ledger;
pub mod units;
pub mod vet;

// The services' call lists as macros (`artifact_cache_calls!`), generated from the protos by
// build.rs, for tables that must name every rpc.
include!(concat!(env!("OUT_DIR"), "/calls.rs"));

/// Generated `kiln.v1` code. Re-exported as `pb`, as tonic-health does, so that domain types stay
/// apart from wire types.
#[allow(clippy::all, missing_debug_implementations)]
pub mod pb {
    tonic::include_proto!("kiln.v1");
    include!(concat!(env!("OUT_DIR"), "/kiln.v1.serde.rs"));

    /// A manifest's line in a snapshot listing: what `kiln snapshot list` and kilnd's listings
    /// show of it.
    impl From<&SnapshotManifest> for SnapshotSummary {
        fn from(m: &SnapshotManifest) -> Self {
            SnapshotSummary {
                job: m.job.clone(),
                environment: m.environment.clone(),
                key: m.key.clone(),
                files: m.files.len() as u64,
                total_bytes: m.total_bytes,
                updated_unix_ms: m.updated_unix_ms,
                saved_by: m.saved_by.clone(),
                roots: m.roots.clone(),
            }
        }
    }

    /// The encoded `FileDescriptorSet`, for gRPC reflection.
    pub const FILE_DESCRIPTOR_SET: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/kiln_v1_descriptor.bin"));
}

pub use key::{CacheKey, Fingerprint, KeyInputs};
pub use target::Target;
