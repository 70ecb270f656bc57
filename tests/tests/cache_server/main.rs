//! kiln-cache end to end: a real `redis-server`, a real `kiln-cache` over a real socket, and the
//! `RemoteCache` client that kilnd uses.
//!
//! A module a concern: `entries`, `leases_and_watches`, `trust` (tokens, provenance, quarantine
//! and conflicts) and `deployment` (outages, replicas, TLS, Redis Cluster); `common` holds what
//! they share.

mod common;
mod deployment;
mod entries;
mod leases_and_watches;
mod trust;
