//! The fleet audit: this host recompiles some of the artifacts it takes from the fleet and
//! compares bytes, so a host gone bad (bad memory, a patched toolchain, a stolen write token)
//! cannot serve wrong cubins to the fleet unnoticed.
//!
//! Digests prove bytes were not damaged on the way; they say nothing of whether the publisher
//! compiled them from the key's inputs. kiln's toolchains are deterministic (the same inputs give
//! the same bytes), so any host holding the inputs can check. Which artifacts are checked:
//! every artifact of a publisher this host has not yet audited clean, and a fraction
//! (`audit_rate`) of the rest. The checks run behind every interactive compile (background
//! slots of the compile gate) and within a CPU share (`audit_cpu_share`): after an audit that
//! took `t`, the next waits `t × (1 / share − 1)`, and what does not fit in the queue is
//! dropped and counted. The hit path pays only the choice: a set lookup and a random number.
//!
//! A difference is quarantined in the fleet (kiln-cache stops serving the bytes and names the
//! publisher) and dropped here; every other host drops it on its next poll of the quarantine
//! list ([`quarantine`]).
//!
//! What is audited: kernels (NVRTC, ptxas, Triton), whose inputs a job brings. Not audited:
//! snapshot files, blobs and torch.compile graphs, whose bytes are the uploader's own and have
//! no inputs here to recompile from.

pub mod compare;
pub mod quarantine;
mod run;

pub use run::{on_demand, run};

use crate::domain::KernelSource;
use crate::metrics::Metrics;
use kiln_proto::pb::{AuditStats, Provenance};
use kiln_proto::{CacheKey, Target};
use quarantine::Quarantine;
use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc;

/// Audits waiting at most; past this the CPU share is spent and samples are dropped.
const QUEUE: usize = 64;
/// Publishers remembered per fetched key, for the choice and for `kiln explain`.
const PROVENANCE_KEPT: u64 = 100_000;

/// How much auditing a host does.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Policy {
    /// The fraction of fleet artifacts audited besides every artifact of a publisher not yet
    /// audited clean: 0 audits only new publishers' first artifacts, 1 audits everything.
    pub rate: f64,
    /// The share of one CPU audits may use, in (0, 1].
    pub cpu_share: f64,
    /// Off: nothing is audited (quarantines are still obeyed).
    pub enabled: bool,
}

impl Default for Policy {
    fn default() -> Self {
        Policy { rate: 0.02, cpu_share: 0.05, enabled: true }
    }
}

/// One artifact to check: its key and the inputs it must compile from.
#[derive(Debug, Clone)]
pub struct Sample {
    pub key: CacheKey,
    pub source: KernelSource,
    pub target: Target,
}

/// What an audit concluded.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// The fleet's bytes are what the inputs compile to here.
    Clean,
    /// They are not; `detail` says where they differ.
    Mismatch { detail: String, quarantined: bool },
    /// The fleet holds no artifact under the key (any more).
    Absent,
    /// This host's compile failed, or the fleet did not answer: nothing is concluded.
    Failed(String),
}

impl Verdict {
    pub fn label(&self) -> &'static str {
        match self {
            Verdict::Clean => "clean",
            Verdict::Mismatch { .. } => "mismatch",
            Verdict::Absent => "absent",
            Verdict::Failed(_) => "failed",
        }
    }
}

/// The audit's state on this host: what to audit, what was found, what the fleet quarantined.
#[derive(Debug)]
pub struct Auditor {
    policy: Policy,
    queue: mpsc::Sender<Sample>,
    /// Taken by [`run`]; `None` after.
    receiver: Mutex<Option<mpsc::Receiver<Sample>>>,
    /// Publishers audited clean at least once, and those with an audit queued (so a burst from
    /// one new publisher queues one audit, not one per artifact).
    audited: Mutex<HashSet<String>>,
    pending: Mutex<HashSet<String>>,
    /// Who published what this host fetched lately.
    provenance: moka::sync::Cache<CacheKey, Arc<Provenance>>,
    pub quarantine: Quarantine,
    counts: Counts,
    metrics: Arc<Metrics>,
}

#[derive(Debug, Default)]
struct Counts {
    clean: AtomicU64,
    mismatched: AtomicU64,
    failed: AtomicU64,
    dropped: AtomicU64,
}

impl Auditor {
    pub fn new(policy: Policy, metrics: Arc<Metrics>) -> Self {
        let (queue, receiver) = mpsc::channel(QUEUE);
        Auditor {
            policy,
            queue,
            receiver: Mutex::new(Some(receiver)),
            audited: Mutex::default(),
            pending: Mutex::default(),
            provenance: moka::sync::Cache::new(PROVENANCE_KEPT),
            quarantine: Quarantine::new(Arc::clone(&metrics)),
            counts: Counts::default(),
            metrics,
        }
    }

    pub fn policy(&self) -> Policy {
        self.policy
    }

    /// Remembers who published `key`, as the fleet said when this host fetched it.
    pub fn saw(&self, key: &CacheKey, provenance: Option<Provenance>) {
        if let Some(p) = provenance {
            self.provenance.insert(*key, Arc::new(p));
        }
    }

    /// Who published `key`, if this host fetched it lately.
    pub fn publisher(&self, key: &CacheKey) -> Option<Arc<Provenance>> {
        self.provenance.get(key)
    }

    /// Decides whether to audit a kernel this host just took from the fleet, and queues it.
    pub fn consider(&self, sample: impl FnOnce() -> Sample, key: &CacheKey) {
        if !self.policy.enabled {
            return;
        }
        // Its own publishes too: a host's name is not proof of anything (two kilnds of one
        // machine share it), and a host gone bad may be this one.
        let publisher = self.provenance.get(key).map(|p| p.host.clone()).unwrap_or_default();
        let new_publisher = !publisher.is_empty()
            && !lock(&self.audited).contains(&publisher)
            && lock(&self.pending).insert(publisher.clone());
        if !new_publisher && rand::random::<f64>() >= self.policy.rate {
            return;
        }
        tracing::debug!(%key, %publisher, new_publisher, "queued for audit");
        if self.queue.try_send(sample()).is_err() {
            self.counts.dropped.fetch_add(1, Ordering::Relaxed);
            self.metrics.audit("dropped");
            if new_publisher {
                lock(&self.pending).remove(&publisher);
            }
        }
    }

    /// Takes the queue's receiving end, once.
    fn take_receiver(&self) -> Option<mpsc::Receiver<Sample>> {
        lock(&self.receiver).take()
    }

    /// Counts a verdict about `publisher`'s artifact.
    pub fn record(&self, verdict: &Verdict, publisher: &str) {
        lock(&self.pending).remove(publisher);
        let count = match verdict {
            Verdict::Clean => {
                if !publisher.is_empty() {
                    lock(&self.audited).insert(publisher.to_owned());
                }
                &self.counts.clean
            }
            Verdict::Mismatch { .. } => {
                self.metrics.audit_mismatch(publisher);
                &self.counts.mismatched
            }
            Verdict::Absent => return self.metrics.audit(verdict.label()),
            Verdict::Failed(_) => &self.counts.failed,
        };
        count.fetch_add(1, Ordering::Relaxed);
        self.metrics.audit(verdict.label());
    }

    /// For `Stats`.
    pub fn stats(&self) -> AuditStats {
        let mut publishers: Vec<String> = lock(&self.audited).iter().cloned().collect();
        publishers.sort();
        AuditStats {
            rate: if self.policy.enabled { self.policy.rate } else { 0.0 },
            cpu_share: self.policy.cpu_share,
            clean: self.counts.clean.load(Ordering::Relaxed),
            mismatched: self.counts.mismatched.load(Ordering::Relaxed),
            failed: self.counts.failed.load(Ordering::Relaxed),
            dropped: self.counts.dropped.load(Ordering::Relaxed),
            quarantined_keys: self.quarantine.len() as u64,
            publishers_audited: publishers,
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::KernelSource;

    fn sample(n: u8) -> Sample {
        Sample {
            key: CacheKey::from_bytes([n; 32]),
            source: KernelSource::Ptx(Default::default()),
            target: "sm_90".parse().unwrap_or_else(|_| unreachable!()),
        }
    }

    fn from(host: &str) -> Option<Provenance> {
        Some(Provenance { host: host.into(), token: "tok-x".into(), unix_ms: 1 })
    }

    #[test]
    fn new_publishers_are_audited_once_queued_and_the_rest_by_rate() {
        let auditor = Auditor::new(Policy { rate: 0.0, cpu_share: 1.0, enabled: true }, Arc::default());
        let mut queued = auditor.take_receiver().unwrap_or_else(|| unreachable!());
        for n in 0..5 {
            auditor.saw(&sample(n).key, from("other"));
            auditor.consider(|| sample(n), &sample(n).key);
        }
        assert_eq!(queued.try_recv().map(|s| s.key).ok(), Some(sample(0).key), "one audit for the new publisher");
        assert!(queued.try_recv().is_err(), "the rest waits for its verdict (rate 0)");
        auditor.record(&Verdict::Clean, "other");
        auditor.consider(|| sample(9), &sample(1).key);
        assert!(queued.try_recv().is_err(), "audited clean: only the rate picks now");
        assert_eq!(auditor.stats().publishers_audited, vec!["other".to_string()]);
    }

    #[test]
    fn rate_one_audits_everything_until_the_queue_is_full() {
        let auditor = Auditor::new(Policy { rate: 1.0, cpu_share: 1.0, enabled: true }, Arc::default());
        let _queued = auditor.take_receiver();
        for n in 0..(QUEUE as u8 + 3) {
            auditor.consider(|| sample(n), &sample(n).key);
        }
        assert_eq!(auditor.stats().dropped, 3);
        let off = Auditor::new(Policy { enabled: false, ..Policy::default() }, Arc::default());
        let mut none = off.take_receiver().unwrap_or_else(|| unreachable!());
        off.consider(|| sample(1), &sample(1).key);
        assert!(none.try_recv().is_err());
    }
}
