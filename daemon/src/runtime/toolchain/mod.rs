//! Toolchains: where the compilers are, what they are (fingerprints), and what a client may ask
//! of them.
//!
//! - [`cuda`]: finds a CUDA toolkit or a wheel's `nvidia/cu13` tree, and its NVRTC libraries.
//! - [`fingerprint`]: blake3 over the libraries actually loaded and the default headers.
//! - [`fix`]: what to do about a toolchain that is not usable, with the pinned versions.
//! - [`options`]: the NVRTC option allowlist.
//! - [`includes`]: refuses `#include` directives that could name a path outside the given headers.
//! - [`nvrtc`]: the NVRTC toolchain as the daemon sees it: a fingerprint plus a worker pool.
//! - [`ptxas`]: PTX to cubin with ptxas, run as a subprocess per compile.
//! - [`triton`]: Triton kernels, compiled by a lazily started pool of Python workers.
//! - [`triton_box`]: which protections Triton's per-compile box gets on this host.
//! - [`torch`]: torch.compile graphs, compiled by a lazily started pool of torch workers.
//! - [`set`]: the toolchains of one daemon, with Triton started on first use.

pub(crate) mod cuda;
pub(crate) mod fingerprint;
pub(crate) mod fix;
pub mod includes;
pub(crate) mod nvrtc;
pub(crate) mod options;
pub(crate) mod ptxas;
pub(crate) mod set;
pub mod torch;
pub(crate) mod triton;
pub(crate) mod triton_box;

use crate::domain::KernelSource;
pub use crate::domain::Toolchain;
use kiln_proto::pb::LoweredName;
use kiln_proto::{Fingerprint, Target};
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

/// A compile in progress, boxed so that a compiler can sit behind `dyn`.
pub(crate) type CompileFuture<'a> = Pin<Box<dyn Future<Output = Compiled> + Send + 'a>>;

/// What the engine asks of its toolchains: compile a source with the toolchain of its kind, and
/// name the build that would (the fingerprint and version a recipe records). The daemon's is
/// [`set::Toolchains`]; the engine's unit tests use a fake.
pub(crate) trait Compiler: Send + Sync + std::fmt::Debug {
    /// Compiles `source` for `target` within `timeout`; a failure is a result, not an error.
    fn compile<'a>(&'a self, source: &'a KernelSource, target: &'a Target, timeout: Duration) -> CompileFuture<'a>;

    /// The fingerprint and version of `source`'s toolchain, as a recipe records them; `None`
    /// for a toolchain that is not running (validation refuses its kernels).
    fn build_of(&self, source: &KernelSource) -> Option<(Fingerprint, String)>;
}

/// What one compile produced, whatever the toolchain: a cubin, or a failure with its log. A
/// failed compile is a result, not an error.
#[derive(Debug, Clone)]
pub(crate) enum Compiled {
    Ok(Output),
    Failed { log: String, compile_micros: u64 },
}

/// A compile that produced a cubin, and what the toolchain said beside it.
#[derive(Debug, Clone, Default)]
pub(crate) struct Output {
    pub cubin: Vec<u8>,
    pub log: String,
    pub lowered_names: Vec<LoweredName>,
    pub compile_micros: u64,
    /// Toolchain metadata as JSON (Triton's launcher metadata).
    pub metadata_json: String,
    pub ptx: String,
}

impl Compiled {
    /// A failure that happened around the compiler (a timeout, a dead worker, a spawn error).
    pub fn failed(log: String, started: std::time::Instant) -> Self {
        Compiled::Failed { log, compile_micros: started.elapsed().as_micros() as u64 }
    }

    /// A compiler's answer: `output` when the compiler reports success (`ok`), else its log.
    pub fn from_answer(ok: bool, output: Output) -> Self {
        if ok {
            Compiled::Ok(output)
        } else {
            Compiled::Failed { log: output.log, compile_micros: output.compile_micros }
        }
    }

    pub fn compile_micros(&self) -> u64 {
        match self {
            Compiled::Ok(output) => output.compile_micros,
            Compiled::Failed { compile_micros, .. } => *compile_micros,
        }
    }
}

/// Why a toolchain cannot be used. Reported at start-up and by `kilnd check`; never a panic.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ToolchainError {
    #[error("no CUDA toolkit found: {0}")]
    NotFound(String),
    #[error("{toolchain} at {path} is not usable: {reason}")]
    Broken { toolchain: Toolchain, path: String, reason: String },
    #[error("reading toolchain files: {0}")]
    Io(#[from] std::io::Error),
}
