//! kiln-cache-server: `kiln-cache`, the fleet artifact cache over Redis, and its client.
//!
//! Always compiled (tonic only, no Redis), so kilnd can link it with `default-features = false`:
//! - [`client`]: [`client::RemoteCache`], a typed client of `kiln.v1.ArtifactCache` with the
//!   bearer token on every call.
//!
//! Behind the default feature `server`:
//! - [`config`]: flags, `KILN_CACHE_*` variables, the TOML file, and the pure merge of them.
//! - [`auth`]: read-only and read-write bearer tokens.
//! - [`layout`]: Redis key names and the stored formats (artifact head and pieces, manifests).
//! - [`backend`]: the connection to Redis, standalone or Redis Cluster, behind one enum.
//! - [`store`]: artifacts, negative entries, manifests and leases as Redis commands.
//! - [`announce`]: the supervised pub/sub subscription, fanned out to `WatchPublish` streams.
//! - [`validate`]: request fields checked before anything reaches Redis.
//! - [`service`]: the gRPC handlers, each through one function for auth, metrics and errors.
//! - [`error`]: the error type and its one mapping to `tonic::Status`.
//! - [`metrics`]: `kiln_server_*` Prometheus metrics and the `/metrics` endpoint.
//! - [`status`]: the fleet status page (`/`, `/status.json`): per-minute counts in Redis, host
//!   reports, fingerprint splits, Redis memory.
//! - [`server`]: [`server::run`]`(listeners, config, shutdown)`.
//!
//! # Running Redis for kiln-cache
//! Give Redis a memory bound and let it evict: `maxmemory <size>` with
//! `maxmemory-policy allkeys-lru`. Every entry can be rebuilt (recompiled), and reads slide TTLs,
//! so least-recently-used is the right victim. A policy that only evicts keys near expiry
//! (`volatile-ttl`) or none at all (`noeviction`, Redis's default) makes a full cache refuse
//! every write with OOM, which kiln-cache answers as RESOURCE_EXHAUSTED. Persistence is optional:
//! a cache that restarts empty costs compiles, not correctness.

pub mod client;

#[cfg(feature = "server")]
pub mod announce;
#[cfg(feature = "server")]
pub mod auth;
#[cfg(feature = "server")]
pub mod backend;
#[cfg(feature = "server")]
pub mod config;
#[cfg(feature = "server")]
pub mod error;
#[cfg(feature = "server")]
pub mod layout;
#[cfg(feature = "server")]
pub mod metrics;
#[cfg(feature = "server")]
pub mod server;
#[cfg(feature = "server")]
pub mod service;
#[cfg(feature = "server")]
pub mod status;
#[cfg(feature = "server")]
pub mod store;
#[cfg(feature = "server")]
pub mod validate;

pub use kiln_proto::pb;
