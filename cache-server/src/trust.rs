//! Whose kernels the fleet runs (`vet` in the config; see `kiln_proto::vet`).
//!
//! kiln-cache keeps the fleet's vetting: a publisher (the token id it stamped on the `Put`, with
//! the host the writer declared) is vetted once a kilnd compiled one of its kernels and found the
//! same bytes (`Vouch`), and distrusted for good once any of its bytes is quarantined. Every
//! answer carrying an artifact says whether its publisher is vetted (`provenance.vetted`), so a
//! kilnd under `first-use` knows on the hit path, with no call of its own, which kernels it may
//! run and which it must compile first.
//!
//! The sets live in Redis, shared by every replica; each replica answers from its own copy,
//! read again every [`REFRESH`] and changed at once by what it records itself. A replica a
//! moment behind another answers "not vetted" for a publisher just vouched for (a host compiles
//! once more) or "vetted" for one just quarantined (which a kilnd also learns from the
//! quarantine list it polls, and refuses itself).
//!
//! Under `trusted-writers`, only the listed token ids may put kernels at all, and their
//! publishes are vetted from the start.

use crate::error::Error;
use crate::store::Store;
use kiln_proto::auth::Caller;
use kiln_proto::pb::Provenance;
use kiln_proto::vet::VetPolicy;
use std::collections::HashSet;
use std::sync::RwLock;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How often each replica reads the fleet's vetting again.
pub const REFRESH: Duration = Duration::from_secs(1);

/// The id a publisher is known by in the vetting sets: its token id and declared host; `None`
/// for an anonymous publish, which names no writer and can be neither vetted nor distrusted.
pub fn publisher_id(p: &Provenance) -> Option<String> {
    if p.token.is_empty() || p.token == Caller::anonymous().token_id {
        return None;
    }
    Some(format!("{} {}", p.token, p.host))
}

/// This replica's view of the fleet's vetting, and the policy it enforces on `Put`.
#[derive(Debug)]
pub struct Trust {
    policy: VetPolicy,
    /// Token ids that may put kernels under `trusted-writers`.
    trusted_writers: HashSet<String>,
    view: RwLock<View>,
}

#[derive(Debug, Default)]
struct View {
    vetted: HashSet<String>,
    distrusted: HashSet<String>,
}

impl Trust {
    pub fn new(policy: VetPolicy, trusted_writers: impl IntoIterator<Item = String>) -> Self {
        Trust { policy, trusted_writers: trusted_writers.into_iter().collect(), view: RwLock::default() }
    }

    pub fn policy(&self) -> VetPolicy {
        self.policy
    }

    /// Whether `p`'s publisher is vetted for the fleet: vouched for (or a trusted writer under
    /// `trusted-writers`) and never quarantined.
    pub fn vets(&self, p: &Provenance) -> bool {
        let Some(id) = publisher_id(p) else { return false };
        let view = self.view.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        if view.distrusted.contains(&id) {
            return false;
        }
        view.vetted.contains(&id)
            || (self.policy == VetPolicy::TrustedWriters && self.trusted_writers.contains(&p.token))
    }

    /// Sets `vetted` on an answer's provenance: said by kiln-cache, never taken from the writer.
    pub fn stamp(&self, provenance: &mut Option<Provenance>) {
        if let Some(p) = provenance {
            p.vetted = self.vets(p);
        }
    }

    /// Under `trusted-writers`, refuses a kernel put by a token not listed.
    pub fn admits_kernel_from(&self, caller: &Caller) -> Result<(), Error> {
        if self.policy != VetPolicy::TrustedWriters || self.trusted_writers.contains(&caller.token_id) {
            return Ok(());
        }
        Err(Error::UntrustedWriter { token: caller.token_id.clone() })
    }

    /// Records `id` as vetted, in Redis and here.
    pub async fn vouch(&self, store: &Store, id: &str) -> Result<(), Error> {
        store.vet(id).await?;
        self.view.write().unwrap_or_else(std::sync::PoisonError::into_inner).vetted.insert(id.to_owned());
        Ok(())
    }

    /// Records `id` as distrusted, in Redis and here.
    pub async fn distrust(&self, store: &Store, id: &str) -> Result<(), Error> {
        store.distrust(id).await?;
        self.view.write().unwrap_or_else(std::sync::PoisonError::into_inner).distrusted.insert(id.to_owned());
        Ok(())
    }

    /// Whether `id` was quarantined anywhere (as this replica knows).
    pub fn distrusts(&self, id: &str) -> bool {
        self.view.read().unwrap_or_else(std::sync::PoisonError::into_inner).distrusted.contains(id)
    }

    /// Replaces this replica's view with the fleet's.
    fn learn(&self, vetted: Vec<String>, distrusted: Vec<String>) {
        let mut view = self.view.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        *view = View { vetted: vetted.into_iter().collect(), distrusted: distrusted.into_iter().collect() };
    }

    /// What the policy cannot give on this server, for the start-up log and the fleet page.
    pub fn warning(&self, anonymous: bool) -> Option<String> {
        if anonymous && self.policy != VetPolicy::Sample {
            return Some(format!("vet = \"{}\": {}", self.policy, kiln_proto::vet::ANONYMOUS_FLEET_WARNING));
        }
        if self.policy == VetPolicy::TrustedWriters && self.trusted_writers.is_empty() {
            return Some("vet = \"trusted-writers\" with no trusted_writers: every kernel Put is refused".into());
        }
        None
    }
}

/// Reads the fleet's vetting into `trust` every [`REFRESH`] until `stop`; a failed read keeps the
/// view as it was.
pub async fn refresh(trust: std::sync::Arc<Trust>, store: Store, stop: CancellationToken) {
    loop {
        match store.trust_sets().await {
            Ok((vetted, distrusted)) => trust.learn(vetted, distrusted),
            Err(e) => tracing::debug!(error = %e, "could not read the fleet's vetting; keeping the last view"),
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(REFRESH) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn by(token: &str, host: &str) -> Provenance {
        Provenance { token: token.into(), host: host.into(), ..Default::default() }
    }

    #[test]
    fn vetted_until_distrusted_and_anonymous_never() {
        let trust = Trust::new(VetPolicy::FirstUse, []);
        let honest = by("tok-a", "gpu-1");
        assert!(!trust.vets(&honest));
        trust.learn(vec!["tok-a gpu-1".into()], vec![]);
        assert!(trust.vets(&honest));
        assert!(!trust.vets(&by("tok-a", "gpu-2")), "the same token under another name is another publisher");
        assert!(!trust.vets(&by("", "gpu-1")) && !trust.vets(&by(&Caller::anonymous().token_id, "gpu-1")));
        trust.learn(vec!["tok-a gpu-1".into()], vec!["tok-a gpu-1".into()]);
        assert!(!trust.vets(&honest), "a quarantine outweighs a vouch");
        let mut answer = Some(honest);
        trust.stamp(&mut answer);
        assert_eq!(answer.map(|p| p.vetted), Some(false));
    }

    #[test]
    fn trusted_writers_alone_put_kernels_and_are_vetted() {
        let trust = Trust::new(VetPolicy::TrustedWriters, ["tok-ci".to_owned()]);
        assert!(trust.admits_kernel_from(&Caller { token_id: "tok-ci".into() }).is_ok());
        let refused = trust.admits_kernel_from(&Caller { token_id: "tok-x".into() });
        let message = refused.map_err(|e| e.to_string()).unwrap_err();
        assert!(message.contains("trusted_writers") && message.contains("tok-x"), "{message}");
        assert!(trust.vets(&by("tok-ci", "any-host")) && !trust.vets(&by("tok-x", "any-host")));
        let open = Trust::new(VetPolicy::FirstUse, []);
        assert!(open.admits_kernel_from(&Caller::anonymous()).is_ok());
        assert!(open.warning(true).is_some() && open.warning(false).is_none());
        assert!(Trust::new(VetPolicy::TrustedWriters, []).warning(false).is_some());
    }
}
