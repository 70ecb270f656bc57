//! The names of the tiers, a leaf that metrics, the cache and the pages share.

use kiln_proto::pb;

/// Which tier: its name ([`TierName::as_str`]) is the metric label `tier`, the `Stats` tier and
/// the status page's row, spelt here only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TierName {
    Memory,
    Disk,
    Remote,
}

impl TierName {
    /// This host's tiers, fastest first (the fleet cache, `Remote`, only with `--remote`).
    pub const LOCAL: [TierName; 2] = [TierName::Memory, TierName::Disk];

    pub fn as_str(self) -> &'static str {
        match self {
            TierName::Memory => "memory",
            TierName::Disk => "disk",
            TierName::Remote => "remote",
        }
    }

    /// The wire's tier of an answer from this tier.
    pub fn to_pb(self) -> pb::Tier {
        match self {
            TierName::Memory => pb::Tier::Memory,
            TierName::Disk => pb::Tier::Disk,
            TierName::Remote => pb::Tier::Remote,
        }
    }

    /// The tier a wire tier names; `None` for the ones that are not a cache (compiled, joined).
    pub fn from_pb(tier: pb::Tier) -> Option<TierName> {
        match tier {
            pb::Tier::Memory => Some(TierName::Memory),
            pb::Tier::Disk => Some(TierName::Disk),
            pb::Tier::Remote => Some(TierName::Remote),
            pb::Tier::Unspecified | pb::Tier::Compiled | pb::Tier::Joined => None,
        }
    }
}

impl std::fmt::Display for TierName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
