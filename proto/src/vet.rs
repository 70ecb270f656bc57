//! Whose kernels a fleet runs: the vetting policy kilnd and kiln-cache share (`vet` in both
//! configs), and which artifacts it covers.
//!
//! Digests prove bytes were not damaged on the way, never that their publisher compiled them
//! from the key's inputs. The policy says what a host must know of a publisher before it runs
//! the publisher's kernels; see the README's security model for what each one gives.

use serde::Deserialize;

/// The vetting policy: `vet` in kilnd's and kiln-cache's configs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum VetPolicy {
    /// A kernel from a publisher no host has audited clean (or one quarantined since) is a miss:
    /// the fetching kilnd compiles it, serves its own result and compares. A match vouches for
    /// the publisher fleet-wide, a mismatch quarantines. Anonymous publishers (a fleet without
    /// tokens) cannot be vetted: their kernels are served and audited as under `Sample`.
    #[default]
    FirstUse,
    /// Every fleet kernel is served; the audit samples them after the answer.
    Sample,
    /// Vetting per artifact rather than per publisher: a fleet kernel is run only once a host
    /// holding another token compiled its key and found the same bytes (kiln-cache marks the
    /// artifact `confirmed`). Until then it is a miss, vetted as under `FirstUse`. A publisher
    /// vetted clean that turns bad is caught before its first bad artifact runs anywhere; the
    /// cost is one more compile of every key in the fleet (its first fetcher's) instead of one
    /// per publisher. Only two tokens acting together can make a host run wrong bytes.
    Confirmed,
    /// kiln-cache takes kernels only from the token ids listed in `trusted_writers`; kilnd serves
    /// those publishers' kernels and vets every other publisher as `FirstUse` does.
    TrustedWriters,
}

impl VetPolicy {
    /// The name as the config spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            VetPolicy::FirstUse => "first-use",
            VetPolicy::Sample => "sample",
            VetPolicy::TrustedWriters => "trusted-writers",
            VetPolicy::Confirmed => "confirmed",
        }
    }

    /// Whether a kernel of an unvetted publisher is compiled here before any is run.
    pub fn vets_before_use(self) -> bool {
        !matches!(self, VetPolicy::Sample)
    }
}

impl std::fmt::Display for VetPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for VetPolicy {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "first-use" => Ok(VetPolicy::FirstUse),
            "sample" => Ok(VetPolicy::Sample),
            "trusted-writers" => Ok(VetPolicy::TrustedWriters),
            "confirmed" => Ok(VetPolicy::Confirmed),
            other => Err(format!(
                "vet: {other:?} is not one of \"first-use\", \"sample\", \"trusted-writers\", \"confirmed\""
            )),
        }
    }
}

/// What a fleet without tokens trusts, said at start-up and on the status pages: nothing names
/// a writer, so no publisher can be vetted and kernels are served before their audit.
pub const ANONYMOUS_FLEET_WARNING: &str = "the fleet has no tokens, so no publisher can be vetted: kernels from the \
     fleet are served before they are audited (each anonymous artifact is audited on its first fetch on each host); \
     anyone who reaches kiln-cache can publish. Give each host its own read-write token to vet publishers";

/// The toolchain prefix of a blob's envelope (`blob/<namespace>`).
pub const BLOB_TOOLCHAIN_PREFIX: &str = "blob/";

/// Whether an artifact of `toolchain` (its envelope's label) is a kernel, whose key has one right
/// answer that any host holding the inputs can compile and compare; blobs and kiln's own records
/// (`kiln/…`) are their uploader's bytes.
pub fn is_kernel(toolchain: &str) -> bool {
    !toolchain.starts_with(BLOB_TOOLCHAIN_PREFIX) && !toolchain.starts_with(crate::envelope::INTERNAL_TOOLCHAIN_PREFIX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_parse_by_their_config_names_and_default_to_first_use() {
        for p in [VetPolicy::FirstUse, VetPolicy::Sample, VetPolicy::TrustedWriters, VetPolicy::Confirmed] {
            assert_eq!(p.as_str().parse::<VetPolicy>(), Ok(p));
        }
        assert_eq!(VetPolicy::default(), VetPolicy::FirstUse);
        assert!("first_use".parse::<VetPolicy>().unwrap_err().contains("vet"));
        assert!(!VetPolicy::Sample.vets_before_use() && VetPolicy::TrustedWriters.vets_before_use());
        assert!(VetPolicy::Confirmed.vets_before_use());
        assert!(is_kernel("nvrtc") && !is_kernel("blob/triton") && !is_kernel("kiln/recipes"));
    }
}
