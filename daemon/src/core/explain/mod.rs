//! Why a kernel missed. Each compile records its key's *recipe* (every key input as a digest or
//! a short value, written by the code that derives the key) under the kernel's identity, here
//! and in the fleet cache; a miss is explained by diffing its recipe against the nearest one
//! stored for the same identity.
//!
//! - [`identity`]: graph name, kernel id and Triton kernel name.
//! - [`misses`]: `kiln_misses_total{reason}` and the bounded list of recent misses.
//! - [`diff`]: two recipes compared, in words.
//! - [`book`]: recipe books sealed for the tiers and the fleet, and checked when read back.
//! - [`store`]: this host's books, in memory and on disk.
//! - [`record`]: what a compile records (the miss path only).

pub mod book;
pub mod diff;
pub mod identity;
pub mod misses;
pub mod record;
pub mod store;
