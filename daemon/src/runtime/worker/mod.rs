//! Compile workers. Every compile runs in a worker process, never inside kilnd: a running NVRTC
//! call cannot be cancelled, and a crash or out-of-memory in it must not take the daemon down.
//!
//! - [`frame`]: the framing on the worker's stdin/stdout (u32 LE length + protobuf message).
//! - [`process`]: the worker side: `kilnd worker`, which loads NVRTC and serves requests.
//! - [`nvrtc_ffi`]: the NVRTC calls the worker makes, through cudarc's `sys` bindings.
//! - [`pool`]: the daemon side: long-lived workers, killed and replaced on timeout or death.
//! - [`confine`], [`seccomp`]: the namespaces and system-call filter of workers that run client
//!   code (Triton's), applied between fork and exec.

pub(crate) mod confine;
pub(crate) mod frame;
mod limits;
pub(crate) mod nvrtc_ffi;
pub(crate) mod pool;
pub mod process;
pub(crate) mod seccomp;
