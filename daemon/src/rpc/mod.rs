//! The RPC surface: what clients and operators call. Each handler validates its request, asks
//! the core, and answers; none holds a tier or a worker of its own.
//!
//! - [`state`]: the daemon's state, which every handler, `Stats`, `Explain` and the status page
//!   take: the engine and cache of the core, the jobs, the toolchains and the GPUs.
//! - [`compiler`]: the `kiln.v1.Compiler` handlers over the `State`.
//! - [`validate`]: request validation, which turns a wire request into a [`crate::domain::Job`];
//!   every bad field is INVALID_ARGUMENT naming it.
//! - [`jobs`]: background jobs and their replayable event streams.
//! - [`blob`]: `kiln.v1.Blobs`, named blobs that integrations key themselves (Triton, Inductor).
//! - [`graph`]: `kiln.v1.TorchGraphs`, torch.compile graphs: claims, compiles in kilnd's torch
//!   workers, the ledger's reports.
//! - [`snapshot`]: `kiln.v1.Snapshots`, a job's cache directories saved and restored.
//! - [`warm`]: `Warm`, which pulls graphs from the fleet cache into the local tiers.
//! - [`stats`] builds the `Stats` answer; [`explain`] answers `Explain`.
//! - [`status`]: the host page (`/` on the metrics port) and the report to kiln-cache's fleet page.

pub mod blob;
pub(crate) mod compiler;
pub(crate) mod explain;
pub(crate) mod graph;
pub(crate) mod jobs;
pub mod snapshot;
pub(crate) mod state;
pub(crate) mod stats;
pub(crate) mod status;
pub mod validate;
pub(crate) mod warm;
