//! kilnd: the per-host GPU compile daemon.
//!
//! A client sends a graph of kernels; each kernel gets a key (kiln-key-v1), is looked up in the
//! memory and disk tiers, and on a miss is compiled once (single-flight) in a worker process,
//! published to every tier and answered.
//!
//! - [`config`]: flags, `KILN_*` variables, the TOML file, and the pure merge of the three;
//!   [`config_file`]: which file is read when no `--config` names one.
//! - [`server`]: `build(config)` then `serve(built, listeners, config, shutdown)`, the library
//!   entry point.
//! - [`listen`]: what the TCP listener needs (tokens, TLS) for where it listens; [`auth`]: the
//!   token check on it, and which calls a read-only token may make.
//! - [`state`]: the daemon's state, which every handler, `Stats`, `Explain` and the status pages
//!   take; [`service`]: the `kiln.v1.Compiler` gRPC handlers; [`stats`] builds the Stats answer.
//! - [`domain`]: what kilnd works on: a validated job, its kernels and their sources.
//! - [`error`]: kilnd's request errors, and their one mapping to a gRPC `Status`.
//! - [`validate`]: request validation, which turns a wire request into a [`domain::Job`]; every
//!   bad field is INVALID_ARGUMENT naming it.
//! - [`jobs`]: background jobs and their replayable event streams.
//! - [`blob`]: `kiln.v1.Blobs`, named blobs that integrations key themselves (Triton, Inductor).
//! - [`graph`]: `kiln.v1.TorchGraphs`, torch.compile graphs compiled in kilnd's torch workers.
//! - [`warm`]: `Warm`, which pulls graphs from the fleet cache into the local tiers.
//! - [`explain`]: key recipes, why a kernel missed (`kiln_misses_total`, recent misses), `Explain`.
//! - [`cache`]: the daemon's cache: the negative cache, this host's tiers and the fleet tier.
//! - [`engine`]: one kernel's compile: single flight here and in the fleet, toolchain, publish.
//! - [`fleet`]: fleet-wide single-flight through kiln-cache leases and publish notifications.
//! - [`audit`]: the fleet audit: recompiling some fleet artifacts, quarantining what differs.
//! - [`concurrency`]: the priority gate and single-flight.
//! - [`work`]: background work that shutdown waits for, counted by kind.
//! - [`store`]: the `Store` trait, the memory and disk tiers, and the tiered store.
//! - [`toolchain`]: CUDA discovery, fingerprints, the option allowlist, include checks, NVRTC.
//! - [`worker`]: compile worker processes, both sides of the pipe.
//! - [`gpu`]: the local GPUs, through the CUDA driver, and the load check of fresh cubins on them.
//! - [`metrics`]: Prometheus metrics, served at `/metrics` through kiln-serve.
//! - [`status`]: the host page (`/` on the metrics port) and the report to kiln-cache's fleet page.
//! - [`check`]: `kilnd check`, which compiles a tiny kernel in each toolchain and says how to fix
//!   one that fails; `kiln doctor` falls back on it.
//!
//! Modules and items are `pub(crate)` unless the binary (`main.rs`) or the property tests
//! (`daemon/tests/`) use them, so that rustc reports whatever nothing calls.

pub(crate) mod audit;
pub(crate) mod auth;
pub mod blob;
pub(crate) mod cache;
pub mod check;
pub mod concurrency;
pub mod config;
pub mod config_file;
pub mod domain;
pub(crate) mod engine;
pub mod error;
pub(crate) mod explain;
pub(crate) mod fleet;
pub(crate) mod gpu;
pub(crate) mod graph;
pub(crate) mod host;
pub(crate) mod jobs;
pub mod listen;
pub(crate) mod metrics;
pub mod server;
pub(crate) mod service;
pub mod snapshot;
pub(crate) mod state;
pub(crate) mod stats;
pub(crate) mod status;
pub(crate) mod store;
pub mod toolchain;
pub mod validate;
pub(crate) mod warm;
pub(crate) mod work;
pub mod worker;
