//! The core: what kilnd decides and keeps, apart from who asked and from how a compiler runs.
//!
//! - [`cache`]: the daemon's cache: the negative cache, this host's tiers and the fleet tier,
//!   and the producer that says who produces a missing entry.
//! - [`engine`]: one kernel's compile: single flight here and in the fleet, toolchain, publish.
//! - [`fleet`]: fleet-wide single flight through kiln-cache leases and publish notifications.
//! - [`store`]: the `Store` trait, the memory and disk tiers, and the tiered store.
//! - [`audit`]: the fleet audit: recompiling some fleet artifacts, quarantining what differs.
//! - [`explain`]: key recipes and why a kernel missed (`kiln_misses_total`, recent misses).
//! - [`torch`]: what kilnd keeps of torch.compile jobs: the ledger, each graph's recipe, and
//!   the forwarder to the fleet ledger.
//! - [`concurrency`]: the priority gate and single flight.
//! - [`work`]: background work that shutdown waits for, counted by kind.

pub(crate) mod audit;
pub mod blob;
pub(crate) mod cache;
pub mod concurrency;
pub(crate) mod engine;
pub(crate) mod explain;
pub(crate) mod fleet;
pub(crate) mod store;
pub(crate) mod torch;
pub(crate) mod work;
