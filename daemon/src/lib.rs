//! kilnd: the per-host GPU compile daemon.
//!
//! A client sends a graph of kernels; each kernel gets a key (kiln-key-v1), is looked up in the
//! memory and disk tiers, and on a miss is compiled once (single-flight) in a worker process,
//! published to every tier and answered.
//!
//! The modules are grouped by role, and arrows run one way: the RPC surface calls the core,
//! and the core calls the runtime; none calls back up.
//!
//! - [`rpc`]: what clients and operators call: the gRPC handlers (`Compiler`, `Blobs`,
//!   `TorchGraphs`, `Snapshots`), their validation, jobs and event streams, `Stats`, `Explain`,
//!   `Warm`, and the host's status page.
//! - [`core`]: what kilnd decides and keeps: the cache (tiers, the fleet, the producer that
//!   says who compiles a miss), the compile engine, the fleet audit, miss recipes and the torch
//!   jobs' ledger.
//! - [`runtime`]: what runs compilers and touches the host: toolchains, worker processes and
//!   their confinement, the GPUs, and `kilnd check`.
//! - Around them: [`server`] (`build(config)` then `serve(built, listeners, config, shutdown)`,
//!   the library entry point, which builds every part and hands each what it uses);
//!   [`config`] (flags, `KILN_*` variables, the TOML file, and the pure merge of the
//!   three) and [`config_file`] (which file is read when no `--config` names one); [`listen`]
//!   and [`auth`] (the TCP listener's tokens and TLS, and which calls a read-only token may
//!   make); [`domain`] (what kilnd works on: a validated job, its kernels and their sources);
//!   [`error`] (kilnd's request errors, and their one mapping to a gRPC `Status`); [`metrics`]
//!   (Prometheus metrics, served at `/metrics` through kiln-serve).
//!
//! Modules and items are `pub(crate)` unless the binary (`main.rs`) or the property tests
//! (`daemon/tests/`) use them, so that rustc reports whatever nothing calls.

pub(crate) mod auth;
pub mod config;
pub mod config_file;
pub mod core;
pub mod domain;
pub mod error;
#[cfg(test)]
pub(crate) mod fixtures;
pub mod listen;
pub(crate) mod metrics;
pub mod rpc;
pub mod runtime;
pub mod server;
