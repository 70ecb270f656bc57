//! The runtime: what runs compilers and touches the host.
//!
//! - [`toolchain`]: CUDA discovery, fingerprints, the option allowlist, include checks, and the
//!   compilers: NVRTC, ptxas, Triton and the torch workers.
//! - [`worker`]: compile worker processes, both sides of the pipe, and their confinement.
//! - [`gpu`]: the local GPUs, through the CUDA driver, and the load check of fresh cubins on them.
//! - [`host`]: this host's name, as the kernel has it and as kiln-cache takes it.
//! - [`check`]: `kilnd check`, which compiles a tiny kernel in each toolchain and says how to fix
//!   one that fails; `kiln doctor` falls back on it.

pub mod check;
pub(crate) mod gpu;
pub(crate) mod host;
pub mod toolchain;
pub mod worker;
