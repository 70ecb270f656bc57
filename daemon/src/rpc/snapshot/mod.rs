//! Job snapshots: the files of a job's JIT cache directories (Inductor's, Triton's, vLLM's, any),
//! saved by one host and restored by the next, so a fresh host starts as warm as the one that
//! compiled.
//!
//! - [`validate`]: every request field checked, INVALID_ARGUMENT naming it.
//! - [`host`]: the facts about this host that every snapshot key includes (GPUs, driver, CUDA),
//!   so a snapshot taken on another GPU is never found.
//! - [`manifest`]: merging a save into the stored manifest (a union: a save never shrinks it).
//! - [`store`]: files and manifests in the tiers, and the listing of saved snapshots.
//! - [`service`]: the `kiln.v1.Snapshots` handlers.
//!
//! Files are content-addressed: one copy per distinct content, whatever job or version holds it,
//! checked against its address when stored and on every read. kilnd never reads or writes a
//! client's paths: clients walk, hash and send their files, and write what a restore brings.

pub(crate) mod host;
pub(crate) mod manifest;
pub(crate) mod service;
pub(crate) mod store;
pub mod validate;
