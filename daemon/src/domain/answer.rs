//! The answer for one kernel, whoever gave it: a cache tier, a compile, another request's compile
//! or another host's.

use kiln_proto::envelope::Artifact;
use kiln_proto::pb;
use std::sync::Arc;

/// The answer for one kernel, and the tier that gave it.
#[derive(Debug, Clone)]
pub enum Answer {
    /// A verified artifact; its metadata holds the compile's log, lowered names, cost and PTX.
    Ok { artifact: Arc<Artifact>, tier: pb::Tier },
    /// No artifact: a failed compile (now, remembered, or another host's), or a refusal.
    Failed {
        log: String,
        /// What the failed compile cost, even when this answer was a remembered failure.
        compile_micros: u64,
        tier: pb::Tier,
    },
}

impl Answer {
    pub(crate) fn failed(tier: pb::Tier, log: String, compile_micros: u64) -> Self {
        Answer::Failed { log, compile_micros, tier }
    }

    pub(crate) fn from_artifact(artifact: Arc<Artifact>, tier: pb::Tier) -> Self {
        Answer::Ok { artifact, tier }
    }

    pub fn is_ok(&self) -> bool {
        matches!(self, Answer::Ok { .. })
    }

    pub fn tier(&self) -> pb::Tier {
        match self {
            Answer::Ok { tier, .. } | Answer::Failed { tier, .. } => *tier,
        }
    }

    /// The artifact, when the kernel has one.
    pub fn artifact(&self) -> Option<&Artifact> {
        match self {
            Answer::Ok { artifact, .. } => Some(artifact),
            Answer::Failed { .. } => None,
        }
    }

    /// What the answer cost when it was compiled, even when this answer was a hit.
    pub fn compile_micros(&self) -> u64 {
        match self {
            Answer::Ok { artifact, .. } => artifact.meta.compile_micros,
            Answer::Failed { compile_micros, .. } => *compile_micros,
        }
    }

    /// The same answer, as a follower of another request's compile gets it.
    pub(crate) fn joined(self) -> Self {
        match self {
            Answer::Ok { artifact, .. } => Answer::Ok { artifact, tier: pb::Tier::Joined },
            Answer::Failed { log, compile_micros, .. } => {
                Answer::Failed { log, compile_micros, tier: pb::Tier::Joined }
            }
        }
    }
}
