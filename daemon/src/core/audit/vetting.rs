//! Vetting before use (`vet = "first-use"` and `"trusted-writers"`): no kernel from a publisher
//! nobody has vetted is run on this host.
//!
//! The sampled audit checks what was already served: the first fetcher of a bad publisher's
//! kernel loaded it before the audit found it wrong. Here, a fleet kernel whose publisher is not
//! vetted is a miss instead. Vetted means: kiln-cache says so (`provenance.vetted`: some host
//! vouched for it and nobody quarantined it since), this host audited it clean, or it is a
//! listed trusted writer under `trusted-writers`; and neither this host nor the fleet found it
//! wrong, and the artifact is not disputed. An unvetted kernel's envelope is held here while
//! this host compiles the key itself, as on any miss (single flight, the caller waits for its
//! own compile and no longer); then [`Fleet::settle_vetting`](crate::core::fleet::Fleet) compares: the same bytes vouch
//! for the publisher fleet-wide, others are quarantined as the audit does. The cost is one
//! compile per host per artifact until the first vouch lands, then none.
//!
//! Anonymous publishers (a fleet without tokens) name no writer to vet: their kernels are served
//! and audited on their own account, as under `sample`; kilnd says so at start-up. Blobs,
//! snapshot files and kiln's own records are their uploader's bytes, with no inputs here to
//! compile from: not vetted.

use super::Auditor;
use super::publisher::Publisher;
use kiln_proto::CacheKey;
use kiln_proto::pb::Provenance;
use kiln_proto::vet::{VetPolicy, is_kernel};
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

/// Envelope bytes held at most, waiting for this host's compile of their keys; the oldest go
/// first (a kernel whose compile never came is fetched and held again when asked for again).
const HELD_BYTES: u64 = 256 << 20;
/// How long a held envelope waits for this host's compile of its key.
const HELD_FOR: Duration = Duration::from_secs(600);

/// A fleet kernel held back from an unvetted publisher: what to compare this host's compile with.
#[derive(Debug)]
pub struct Held {
    /// The envelope as the fleet served it (verified then, opened again to compare).
    pub envelope: Vec<u8>,
    pub provenance: Provenance,
}

/// The policy and what waits for a verdict.
#[derive(Debug)]
pub struct Vetting {
    policy: VetPolicy,
    /// Token ids whose kernels are served unvetted under `trusted-writers`.
    trusted_writers: HashSet<String>,
    held: moka::sync::Cache<CacheKey, Arc<Held>>,
    /// Distrusted publishers whose kernels this host already dropped from its tiers.
    swept: std::sync::Mutex<HashSet<Publisher>>,
    /// What the policy cannot give here (a fleet without tokens), for `Stats` and the page.
    pub(super) warning: Option<String>,
}

impl Vetting {
    pub fn new(policy: VetPolicy, trusted_writers: impl IntoIterator<Item = String>) -> Self {
        Vetting {
            policy,
            trusted_writers: trusted_writers.into_iter().collect(),
            held: moka::sync::Cache::builder()
                .max_capacity(HELD_BYTES)
                .weigher(|_, held: &Arc<Held>| held.envelope.len().try_into().unwrap_or(u32::MAX))
                .time_to_live(HELD_FOR)
                .build(),
            swept: Default::default(),
            warning: None,
        }
    }

    pub fn policy(&self) -> VetPolicy {
        self.policy
    }
}

impl Auditor {
    /// Whether a fleet artifact labelled `toolchain`, published as `provenance` says, must be
    /// compiled here before it is run.
    pub fn must_vet(&self, toolchain: &str, provenance: Option<&Provenance>) -> bool {
        let vetting = &self.vetting;
        if !self.policy.enabled || !vetting.policy.vets_before_use() || !is_kernel(toolchain) {
            return false;
        }
        let (Some(publisher), Some(p)) = (Publisher::of(provenance), provenance) else {
            // Anonymous: nobody to vet; audited on its own account after it is served.
            return false;
        };
        if p.disputed || super::lock(&self.distrusted).contains(&publisher) {
            return true;
        }
        if vetting.policy == VetPolicy::Confirmed {
            // Per artifact: a publisher vetted on other keys says nothing of these bytes.
            return !p.confirmed;
        }
        let trusted = p.vetted
            || super::lock(&self.audited).contains(&publisher)
            || (vetting.policy == VetPolicy::TrustedWriters && vetting.trusted_writers.contains(&p.token));
        !trusted
    }

    /// Holds `envelope` (a verified kernel of an unvetted publisher) for this host's compile of
    /// `key`, which [`Auditor::take_held`] compares it with.
    pub fn hold(&self, key: &CacheKey, envelope: Vec<u8>, provenance: Option<Provenance>) {
        if self.vetting.held.contains_key(key) {
            // Fetched again on the way to this host's compile (the lease's look): one hold.
            self.vetting.held.insert(*key, Arc::new(Held { envelope, provenance: provenance.unwrap_or_default() }));
            return;
        }
        self.metrics.vetting("held");
        tracing::info!(%key, publisher = ?provenance.as_ref().map(|p| (&p.host, &p.token)), "fleet kernel of an unvetted publisher: compiling it here first");
        let held = Held { envelope, provenance: provenance.unwrap_or_default() };
        self.vetting.held.insert(*key, Arc::new(held));
    }

    /// Whether a fleet kernel under `key` waits for this host's compile.
    pub fn holds(&self, key: &CacheKey) -> bool {
        self.vetting.held.contains_key(key)
    }

    /// The fleet kernel held under `key`, taken for the comparison with this host's compile.
    pub fn take_held(&self, key: &CacheKey) -> Option<Arc<Held>> {
        self.vetting.held.remove(key)
    }

    /// Distrusts the publisher a quarantine record names (found wrong anywhere in the fleet);
    /// the keys this host fetched of it lately, to be dropped from its tiers so that none is
    /// served again before it is vetted. Nothing for an anonymous publisher, nor the second time.
    pub fn distrust(&self, provenance: Option<&Provenance>) -> Vec<CacheKey> {
        let Some(publisher) = Publisher::of(provenance) else { return Vec::new() };
        super::lock(&self.audited).remove(&publisher);
        super::lock(&self.distrusted).insert(publisher.clone());
        if !super::lock(&self.vetting.swept).insert(publisher.clone()) {
            return Vec::new();
        }
        tracing::warn!(%publisher, "the fleet quarantined bytes of this publisher: its kernels are vetted again before use");
        self.provenance
            .iter()
            .filter(|(_, p)| Publisher::of(Some(p)).as_ref() == Some(&publisher))
            .map(|(key, _)| *key)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::audit::publisher::Claim;
    use crate::core::audit::{Policy, Verdict};

    fn by(host: &str, token: &str, vetted: bool) -> Provenance {
        Provenance { host: host.into(), token: token.into(), unix_ms: 1, vetted, ..Default::default() }
    }

    fn auditor(vet: VetPolicy, trusted: &[&str]) -> Auditor {
        let policy = Policy { vet, ..Policy::default() };
        Auditor::new(policy, Arc::default()).with_trusted_writers(trusted.iter().map(|t| (*t).to_owned()))
    }

    #[test]
    fn first_use_vets_every_token_publisher_until_vouched_for_and_never_the_distrusted() {
        let a = auditor(VetPolicy::FirstUse, &[]);
        let fresh = by("gpu-1", "tok-a", false);
        assert!(a.must_vet("nvrtc", Some(&fresh)), "nobody vouched for it");
        assert!(!a.must_vet("blob/triton", Some(&fresh)), "blobs have no inputs to compile from");
        assert!(!a.must_vet("nvrtc", None) && !a.must_vet("nvrtc", Some(&by("gpu-1", "anonymous", false))));
        assert!(!a.must_vet("nvrtc", Some(&by("gpu-1", "tok-a", true))), "vouched for by the fleet");
        let disputed = Provenance { disputed: true, ..by("gpu-1", "tok-a", true) };
        assert!(a.must_vet("nvrtc", Some(&disputed)), "under suspicion");
        a.record(&Verdict::Clean, &Claim::Sampled, Some(&fresh));
        assert!(!a.must_vet("nvrtc", Some(&fresh)), "audited clean here");
        a.saw(&CacheKey::from_bytes([7; 32]), Some(fresh.clone()));
        let dropped = a.distrust(Some(&fresh));
        assert_eq!(dropped, vec![CacheKey::from_bytes([7; 32])], "what this host took of it");
        assert!(a.distrust(Some(&fresh)).is_empty(), "once");
        assert!(a.must_vet("nvrtc", Some(&by("gpu-1", "tok-a", true))), "quarantined anywhere outweighs vetted");
    }

    #[test]
    fn sample_serves_everything_and_trusted_writers_serve_only_the_listed_unvetted() {
        let sample = auditor(VetPolicy::Sample, &[]);
        assert!(!sample.must_vet("nvrtc", Some(&by("gpu-1", "tok-a", false))));
        let trusted = auditor(VetPolicy::TrustedWriters, &["tok-ci"]);
        assert!(!trusted.must_vet("ptxas", Some(&by("builder", "tok-ci", false))));
        assert!(trusted.must_vet("ptxas", Some(&by("gpu-1", "tok-a", false))));
    }

    #[test]
    fn confirmed_runs_only_artifacts_a_second_token_agreed_on_whoever_published_them() {
        let a = auditor(VetPolicy::Confirmed, &[]);
        let vetted = by("gpu-1", "tok-a", true);
        a.record(&Verdict::Clean, &Claim::Sampled, Some(&vetted));
        assert!(a.must_vet("nvrtc", Some(&vetted)), "a publisher vetted on other keys turned bad on this one");
        let confirmed = Provenance { confirmed: true, ..by("gpu-1", "tok-a", false) };
        assert!(!a.must_vet("nvrtc", Some(&confirmed)), "another token found these bytes");
        assert!(a.must_vet("nvrtc", Some(&Provenance { disputed: true, ..confirmed.clone() })), "under suspicion");
        a.distrust(Some(&confirmed));
        assert!(a.must_vet("nvrtc", Some(&confirmed)), "quarantined anywhere outweighs confirmed");
    }

    #[test]
    fn a_held_kernel_is_taken_once() {
        let a = auditor(VetPolicy::FirstUse, &[]);
        let key = CacheKey::from_bytes([1; 32]);
        a.hold(&key, b"envelope".to_vec(), Some(by("gpu-1", "tok-a", false)));
        assert!(a.holds(&key));
        assert_eq!(a.take_held(&key).map(|h| h.envelope.clone()), Some(b"envelope".to_vec()));
        assert!(a.take_held(&key).is_none() && !a.holds(&key));
    }
}
