//! kiln-cache-server: `kiln-cache`, the fleet artifact cache over Redis. Its client is the crate
//! kiln-cache-client; the protocol and its limits are kiln-proto's.
//!
//! - [`config`]: flags, `KILN_CACHE_*` variables, the TOML file, and the pure merge of them.
//! - [`auth`]: read-only and read-write bearer tokens.
//! - [`layout`]: Redis key names and the stored formats (artifact head and pieces, manifests).
//! - [`backend`]: the connection to Redis, standalone or Redis Cluster, behind one enum.
//! - [`store`]: artifacts, negative entries, manifests and leases as Redis commands.
//! - [`announce`]: the supervised pub/sub subscription, fanned out to `WatchPublish` streams.
//! - [`validate`]: request fields checked before anything reaches Redis.
//! - [`service`]: the gRPC handlers, each through one function for metrics and errors, and the
//!   token policy kiln-serve's layer checks before them.
//! - [`error`]: the error type and its one mapping to `tonic::Status`.
//! - [`metrics`]: `kiln_server_*` Prometheus metrics, served at `/metrics` through kiln-serve.
//! - [`status`]: the fleet status page (`/`, `/status.json`): per-minute counts in Redis, host
//!   reports, fingerprint splits, Redis memory.
//! - [`server`]: [`server::run`]`(listeners, config, shutdown)`.
//! - [`hot`]: envelopes `BatchGet` read lately, kept in memory for a fleet restart's herd.
//!
//! Only `config`, `layout` (whose key names the tests and benchmarks read Redis by) and `server`
//! are public: the binary and the tests need nothing else, and rustc then reports whatever
//! nothing calls.
//!
//! # Running Redis for kiln-cache
//! Give Redis a memory bound and let it evict: `maxmemory <size>` with
//! `maxmemory-policy allkeys-lru`. Every entry can be rebuilt (recompiled), and reads slide TTLs,
//! so least-recently-used is the right victim. A policy that only evicts keys near expiry
//! (`volatile-ttl`) or none at all (`noeviction`, Redis's default) makes a full cache refuse
//! every write with OOM, which kiln-cache answers as RESOURCE_EXHAUSTED. Persistence is optional:
//! a cache that restarts empty costs compiles, not correctness.

pub(crate) mod announce;
pub(crate) mod auth;
pub(crate) mod backend;
pub mod config;
pub mod conflict;
pub(crate) mod error;
pub(crate) mod hot;
pub mod layout;
pub(crate) mod metrics;
pub(crate) mod published;
pub mod server;
pub(crate) mod service;
pub(crate) mod status;
pub(crate) mod store;
pub(crate) mod trust;
pub(crate) mod validate;

pub use kiln_proto::pb;
