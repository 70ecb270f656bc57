//! A kernel's identity: what stays the same when its inputs change, so that a new key can be
//! compared with the recipes of the keys the same kernel had before.

use std::fmt;

/// The graph's name and the kernel's id in it, and for Triton the kernel's function name (one
/// module may hold several kernels under one id across versions of a job).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Identity {
    pub graph: String,
    pub kernel_id: String,
    /// Empty for CUDA C++ and PTX kernels.
    pub kernel_name: String,
}

impl Identity {
    pub fn new(graph: &str, kernel_id: &str, kernel_name: &str) -> Self {
        Identity { graph: graph.to_string(), kernel_id: kernel_id.to_string(), kernel_name: kernel_name.to_string() }
    }
}

impl fmt::Display for Identity {
    /// `graph/id`, `graph/id (kernel_name)` for Triton, and `(unnamed graph)` for a graph sent
    /// without a name.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let graph = if self.graph.is_empty() { "(unnamed graph)" } else { &self.graph };
        write!(f, "{graph}/{}", self.kernel_id)?;
        if !self.kernel_name.is_empty() {
            write!(f, " ({})", self.kernel_name)?;
        }
        Ok(())
    }
}
