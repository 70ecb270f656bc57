//! What kilnd works on, once a request has passed validation: a [`Job`] of kernels, each a
//! [`KernelJob`] with its key already derived and its [`KernelSource`]. `validate/` is the only
//! place these are made from a wire request; the engine, jobs and `Explain` take them as they are.
//! What a kernel comes to is an [`Answer`], from the cache or the engine, and a [`TierName`]
//! names where an answer lives.

pub(crate) mod answer;
pub(crate) mod audit;
pub(crate) mod source;
pub(crate) mod tier;

pub use answer::Answer;
pub use audit::AuditPolicy;
pub use source::{KernelSource, Toolchain};
pub use tier::TierName;

use kiln_proto::{CacheKey, Target};

/// Who waits on a job: a `Compile` has a client waiting on it and goes before `Submit`'s
/// background work when compiles queue for a slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Priority {
    Interactive = 0,
    Background = 1,
}

/// A validated graph: every kernel checked and keyed for `target`.
#[derive(Debug, Clone)]
pub struct Job {
    pub name: String,
    pub target: Target,
    pub kernels: Vec<KernelJob>,
    pub priority: Priority,
    pub omit_artifacts: bool,
}

/// One kernel, ready to look up or compile.
#[derive(Debug, Clone)]
pub struct KernelJob {
    pub id: String,
    pub key: CacheKey,
    pub source: KernelSource,
    /// Set when the source may not be compiled at all (an include of a host path): the kernel's
    /// outcome is failed with this reason, and the compiler never sees it.
    pub refusal: Option<String>,
}
