//! Toolchains: where the compilers are, what they are (fingerprints), and what a client may ask
//! of them.
//!
//! - [`cuda`]: finds a CUDA toolkit or a wheel's `nvidia/cu13` tree, and its NVRTC libraries.
//! - [`fingerprint`]: blake3 over the libraries actually loaded and the default headers.
//! - [`options`]: the NVRTC option allowlist.
//! - [`includes`]: refuses `#include` directives that could name a path outside the given headers.
//! - [`nvrtc`]: the NVRTC toolchain as the daemon sees it: a fingerprint plus a worker pool.

pub mod cuda;
pub mod fingerprint;
pub mod includes;
pub mod nvrtc;
pub mod options;

/// Why a toolchain cannot be used. Reported at start-up and by `kilnd check`; never a panic.
#[derive(Debug, thiserror::Error)]
pub enum ToolchainError {
    #[error("no CUDA toolkit found: {0}")]
    NotFound(String),
    #[error("NVRTC at {path} is not usable: {reason}")]
    Broken { path: String, reason: String },
    #[error("reading toolchain files: {0}")]
    Io(#[from] std::io::Error),
}
