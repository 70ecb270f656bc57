//! Named blobs: artifacts that integrations (Triton's cache, Inductor's caches) produce and key
//! themselves, stored in the same tiers, envelope, limits and fleet leases as cubins.
//!
//! - [`validate`]: every request field checked, INVALID_ARGUMENT naming it.
//! - [`service`]: the `kiln.v1.Blobs` handlers.
//!
//! A group is stored as one envelope under one key ([`crate::core::blob::entry`]), so a reader sees all of one writer's files
//! or none: two writers of one group can never interleave, whatever the tier.

pub(crate) mod service;
pub mod validate;
