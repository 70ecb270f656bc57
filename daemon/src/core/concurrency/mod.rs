//! How compiles share this host: how many run at once and in which order, and how many times a
//! key is compiled when many ask for it at once.
//!
//! - [`gate`]: bounded concurrency with two priorities; a blocking `Compile` goes before
//!   background work.
//! - [`flight`]: single-flight per key inside the process: concurrent requests for one
//!   uncompiled kernel cause exactly one compile.

pub(crate) mod flight;
pub mod gate;
