//! The verdict on a fleet kernel held back from an unvetted publisher (see
//! `crate::core::audit::vetting`), once this host has compiled the key itself: the same bytes
//! vouch for the publisher fleet-wide; other bytes are quarantined, as the audit does.

use super::Fleet;
use crate::core::audit::publisher::Claim;
use crate::core::audit::{Verdict, compare};
use crate::runtime::toolchain::Output;
use kiln_proto::CacheKey;

impl Fleet {
    /// Compares the kernel held under `key`, if any, with `compiled`, this host's compile of the
    /// key's inputs, before that compile is published: a quarantine first makes this host's
    /// publish the key's next.
    pub async fn settle_vetting(&self, key: &CacheKey, compiled: &Output) {
        let Some(held) = self.audit.take_held(key) else { return };
        let verdict = match self.open(key, &held.envelope) {
            Ok(served) => compare::difference(&served, compiled),
            Err(_) => return,
        };
        let served = blake3::hash(&held.envelope);
        match verdict {
            None => {
                self.metrics.vetting("vouched");
                self.audit.record(&Verdict::Clean, &Claim::Sampled, Some(&held.provenance));
                let (tier, key) = (std::sync::Arc::clone(&self.tier), *key);
                tokio::spawn(async move {
                    match tier.vouch(&key, &served).await {
                        Ok(answer) if !answer.vetted => {
                            tracing::info!(%key, why = %answer.refused, "kiln-cache did not vet the publisher")
                        }
                        Ok(_) => {}
                        Err(e) => tracing::warn!(%key, error = %e, "could not vouch for the publisher in the fleet"),
                    }
                });
            }
            Some(detail) => {
                self.metrics.vetting("mismatch");
                tracing::error!(%key, publisher = %held.provenance.host, token = %held.provenance.token, %detail,
                    "vetting: the fleet's kernel is not what its inputs compile to; it was not served");
                let quarantined = match self.quarantine(key, &held.envelope, &compiled.cubin, &detail).await {
                    Ok(answer) => {
                        self.audit.quarantine.learn(answer.record.as_slice());
                        answer.quarantined
                    }
                    Err(e) => {
                        tracing::warn!(%key, error = %e, "could not quarantine the key in the fleet");
                        false
                    }
                };
                self.audit.record(&Verdict::Mismatch { detail, quarantined }, &Claim::Sampled, Some(&held.provenance));
            }
        }
    }
}
