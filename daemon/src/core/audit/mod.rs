//! The fleet audit: this host recompiles some of the artifacts it takes from the fleet and
//! compares bytes, so a host gone bad (bad memory, a patched toolchain, a stolen write token)
//! cannot serve wrong cubins to the fleet unnoticed.
//!
//! Digests prove bytes were not damaged on the way; they say nothing of whether the publisher
//! compiled them from the key's inputs. kiln's toolchains are deterministic (the same inputs give
//! the same bytes), so any host holding the inputs can check. Which artifacts are checked: the
//! first artifact of each publisher this host has not yet audited clean, every anonymous
//! artifact and every one kiln-cache marks disputed by a conflicting write (see [`publisher`]: a
//! publisher is what kiln-cache vouches for, the writer's token id, with the host it declared),
//! and a fraction (`audit_rate`) of the rest. A publisher's other artifacts taken while its first
//! is audited are held back: forgotten once it is vouched for, audited each if it is found wrong,
//! and so is every artifact of it taken after that. The checks run behind every interactive compile (background
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
pub mod publisher;
pub mod quarantine;
mod run;
pub mod vetting;

pub use run::{on_demand, run};

pub use crate::domain::AuditPolicy as Policy;
use crate::domain::KernelSource;
use crate::metrics::Metrics;
use kiln_proto::pb::{AuditStats, Provenance};
use kiln_proto::{CacheKey, Target};
use publisher::{Claim, Publish, Publisher, Standing};
use quarantine::Quarantine;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc;

/// Audits waiting at most; past this the CPU share is spent and samples are dropped.
const QUEUE: usize = 64;
/// Publishers remembered per fetched key, for the choice and for `kiln explain`; and anonymous
/// publishes remembered as audited (or queued), so each is audited once.
const PROVENANCE_KEPT: u64 = 100_000;
/// Artifacts held back per publisher while its first audit runs; one queue's worth, as all of
/// them are queued at once if it is found wrong.
const HELD_BACK: usize = QUEUE;

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
    queue: mpsc::Sender<(Sample, Claim)>,
    /// Taken by [`run`]; `None` after.
    receiver: Mutex<Option<mpsc::Receiver<(Sample, Claim)>>>,
    /// Publishers audited clean at least once, and those with an audit queued (so a burst from
    /// one new publisher queues one audit, not one per artifact).
    audited: Mutex<HashSet<Publisher>>,
    pending: Mutex<HashSet<Publisher>>,
    /// Artifacts taken from a publisher in `pending`, not queued: audited if its audit finds it
    /// wrong, forgotten once it is vouched for. Locked before the three sets beside it.
    held_back: Mutex<HashMap<Publisher, Vec<(Sample, Publish)>>>,
    /// Publishers an audit found wrong: every artifact of theirs is audited on its own account.
    distrusted: Mutex<HashSet<Publisher>>,
    /// Publishes audited on their own account (anonymous ones), queued or done: each once.
    /// Bounded: one forgotten is audited again, which costs CPU, not safety.
    own_account: moka::sync::Cache<Publish, ()>,
    /// Who published what this host fetched lately.
    provenance: moka::sync::Cache<CacheKey, Arc<Provenance>>,
    pub quarantine: Quarantine,
    /// Fleet kernels of unvetted publishers held for this host's compile, and the `vet` policy.
    vetting: vetting::Vetting,
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
            held_back: Mutex::default(),
            distrusted: Mutex::default(),
            own_account: moka::sync::Cache::new(PROVENANCE_KEPT),
            provenance: moka::sync::Cache::new(PROVENANCE_KEPT),
            quarantine: Quarantine::new(Arc::clone(&metrics)),
            vetting: vetting::Vetting::new(policy.vet, []),
            counts: Counts::default(),
            metrics,
        }
    }

    pub fn policy(&self) -> Policy {
        self.policy
    }

    /// Serves the kernels of these token ids unvetted, under `vet = "trusted-writers"`.
    pub fn with_trusted_writers(self, tokens: impl IntoIterator<Item = String>) -> Self {
        Auditor { vetting: vetting::Vetting::new(self.policy.vet, tokens), ..self }
    }

    /// Says, from now on, that this host is in a fleet without tokens (see [`Auditor::vet_warning`]).
    pub fn in_anonymous_fleet(mut self) -> Self {
        self.vetting.warning = self.vet_warning(true);
        self
    }

    /// What the `vet` policy cannot give on this host: with no token of its own, kilnd is in a
    /// fleet without tokens, whose publishers are anonymous. `None` when it can.
    pub fn vet_warning(&self, anonymous_fleet: bool) -> Option<String> {
        let vets = self.policy.enabled && self.vetting.policy().vets_before_use();
        (vets && anonymous_fleet)
            .then(|| format!("vet = \"{}\": {}", self.vetting.policy(), kiln_proto::vet::ANONYMOUS_FLEET_WARNING))
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
        let provenance = self.provenance.get(key);
        let mut held = None;
        let claim = match publisher::standing(key, provenance.as_deref()) {
            Standing::OnItsOwn(publish) => self.on_its_own(publish),
            Standing::Of(publisher) => {
                let publish = (*key, provenance.as_ref().map_or(0, |p| p.unix_ms), false);
                if lock(&self.distrusted).contains(&publisher) {
                    self.on_its_own(publish)
                } else if lock(&self.audited).contains(&publisher) {
                    None
                } else if lock(&self.pending).insert(publisher.clone()) {
                    Some(Claim::NewPublisher(publisher))
                } else {
                    held = Some((publisher, publish));
                    None
                }
            }
        };
        let claim = match claim {
            Some(claim) => claim,
            None if rand::random::<f64>() < self.policy.rate => Claim::Sampled,
            None => {
                if let Some((publisher, publish)) = held {
                    self.hold_back(publisher, sample(), publish);
                }
                return;
            }
        };
        self.enqueue(sample(), claim);
    }

    /// The claim to audit `publish` on its own account, unless it already was (or is queued).
    fn on_its_own(&self, publish: Publish) -> Option<Claim> {
        self.own_account.entry(publish).or_insert(()).is_fresh().then_some(Claim::Artifact(publish))
    }

    fn enqueue(&self, sample: Sample, claim: Claim) {
        tracing::debug!(key = %sample.key, ?claim, "queued for audit");
        if let Err(e) = self.queue.try_send((sample, claim)) {
            self.counts.dropped.fetch_add(1, Ordering::Relaxed);
            self.metrics.audit("dropped");
            let (_, claim) = e.into_inner();
            self.release(&claim);
        }
    }

    /// Keeps an artifact of `publisher`, whose first audit is pending, for that audit's verdict;
    /// or, where the verdict came meanwhile, acts on it now.
    fn hold_back(&self, publisher: Publisher, sample: Sample, publish: Publish) {
        let mut held = lock(&self.held_back);
        if lock(&self.distrusted).contains(&publisher) {
            drop(held);
            if let Some(claim) = self.on_its_own(publish) {
                self.enqueue(sample, claim);
            }
        } else if lock(&self.audited).contains(&publisher) {
            // Vouched for meanwhile: nothing to audit.
        } else if lock(&self.pending).insert(publisher.clone()) {
            drop(held);
            self.enqueue(sample, Claim::NewPublisher(publisher));
        } else {
            let list = held.entry(publisher).or_default();
            if list.len() < HELD_BACK {
                list.push((sample, publish));
            } else {
                self.counts.dropped.fetch_add(1, Ordering::Relaxed);
                self.metrics.audit("dropped");
            }
        }
    }

    /// Takes the queue's receiving end, once.
    fn take_receiver(&self) -> Option<mpsc::Receiver<(Sample, Claim)>> {
        lock(&self.receiver).take()
    }

    /// Forgets that `claim` is being audited, so the next artifact it covers is audited again.
    fn release(&self, claim: &Claim) {
        match claim {
            Claim::NewPublisher(publisher) => {
                lock(&self.pending).remove(publisher);
            }
            Claim::Artifact(publish) => self.own_account.invalidate(publish),
            Claim::Sampled => {}
        }
    }

    /// Counts a verdict about an artifact taken for `claim`, whose bytes `served_by` published.
    /// A clean verdict vouches for the publisher of the bytes compared; a failed one concludes
    /// nothing, so what it was taken for is audited again on the next fetch.
    /// A wrong verdict distrusts the publisher of those bytes: what was held back of it is
    /// queued, each on its own account.
    pub fn record(&self, verdict: &Verdict, claim: &Claim, served_by: Option<&Provenance>) {
        let mut held = lock(&self.held_back);
        if let Claim::NewPublisher(publisher) = claim {
            lock(&self.pending).remove(publisher);
        }
        let publisher = Publisher::of(served_by);
        let count = match verdict {
            Verdict::Clean => {
                if let Some(publisher) = publisher {
                    held.remove(&publisher);
                    lock(&self.audited).insert(publisher);
                }
                &self.counts.clean
            }
            Verdict::Mismatch { .. } => {
                self.metrics.audit_mismatch(served_by.map_or("", |p| p.host.as_str()));
                if let Some(publisher) = publisher {
                    let wrong = held.remove(&publisher).unwrap_or_default();
                    lock(&self.audited).remove(&publisher);
                    lock(&self.distrusted).insert(publisher);
                    drop(held);
                    for (sample, publish) in wrong {
                        if let Some(claim) = self.on_its_own(publish) {
                            self.enqueue(sample, claim);
                        }
                    }
                }
                &self.counts.mismatched
            }
            Verdict::Absent => return self.metrics.audit(verdict.label()),
            Verdict::Failed(_) => {
                // Nothing concluded: the next artifact held back of the publisher takes its turn.
                if let Claim::NewPublisher(publisher) = claim
                    && let Some((sample, _)) = held.get_mut(publisher).and_then(Vec::pop)
                    && lock(&self.pending).insert(publisher.clone())
                {
                    drop(held);
                    self.enqueue(sample, claim.clone());
                } else {
                    drop(held);
                    self.release(claim);
                }
                &self.counts.failed
            }
        };
        count.fetch_add(1, Ordering::Relaxed);
        self.metrics.audit(verdict.label());
    }

    /// For `Stats`.
    pub fn stats(&self) -> AuditStats {
        let mut publishers: Vec<String> = lock(&self.audited).iter().map(Publisher::to_string).collect();
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
            vet: if self.policy.enabled { self.vetting.policy().to_string() } else { String::new() },
            vet_warning: self.vetting.warning.clone().unwrap_or_default(),
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

    fn by(host: &str, token: &str) -> Option<Provenance> {
        Some(Provenance { host: host.into(), token: token.into(), unix_ms: 1, ..Default::default() })
    }

    fn from(host: &str) -> Option<Provenance> {
        by(host, "tok-x")
    }

    /// An auditor that audits only what it must (rate 0), and its queue.
    fn strict() -> (Auditor, mpsc::Receiver<(Sample, Claim)>) {
        let auditor = Auditor::new(Policy { rate: 0.0, cpu_share: 1.0, ..Policy::default() }, Arc::default());
        let queued = auditor.take_receiver().unwrap_or_else(|| unreachable!());
        (auditor, queued)
    }

    /// A [`strict`] auditor that audited key 0 of `publisher` clean, so vouches for it: its next
    /// artifact is not audited.
    fn vouching_for(publisher: Option<Provenance>) -> (Auditor, mpsc::Receiver<(Sample, Claim)>) {
        let (auditor, mut queued) = strict();
        let claim = fetch(&auditor, &mut queued, 0, publisher.clone()).unwrap_or(Claim::Sampled);
        auditor.record(&Verdict::Clean, &claim, publisher.as_ref());
        assert_eq!(fetch(&auditor, &mut queued, 1, publisher), None, "vouched for");
        (auditor, queued)
    }

    /// Fetches key `n`, published as `provenance` says; the claim it was queued for, if any.
    fn fetch(
        auditor: &Auditor,
        queued: &mut mpsc::Receiver<(Sample, Claim)>,
        n: u8,
        provenance: Option<Provenance>,
    ) -> Option<Claim> {
        auditor.saw(&sample(n).key, provenance);
        auditor.consider(|| sample(n), &sample(n).key);
        queued.try_recv().ok().map(|(s, claim)| {
            assert_eq!(s.key, sample(n).key);
            claim
        })
    }

    #[test]
    fn new_publishers_are_audited_once_queued_and_the_rest_by_rate() {
        let (auditor, mut queued) = strict();
        let claim = fetch(&auditor, &mut queued, 0, from("other"));
        assert!(matches!(claim, Some(Claim::NewPublisher(_))), "one audit for the new publisher");
        for n in 1..5 {
            assert_eq!(fetch(&auditor, &mut queued, n, from("other")), None, "the rest waits for its verdict");
        }
        auditor.record(&Verdict::Clean, &claim.unwrap_or(Claim::Sampled), from("other").as_ref());
        assert_eq!(fetch(&auditor, &mut queued, 9, from("other")), None, "audited clean: only the rate picks now");
        assert_eq!(auditor.stats().publishers_audited, vec!["other (tok-x)".to_string()]);
    }

    #[test]
    fn a_publisher_found_wrong_has_what_was_held_back_audited_and_all_after() {
        let (auditor, mut queued) = strict();
        let first = fetch(&auditor, &mut queued, 0, from("rogue")).unwrap_or(Claim::Sampled);
        for n in 1..4 {
            assert_eq!(fetch(&auditor, &mut queued, n, from("rogue")), None, "held back");
        }
        let wrong = Verdict::Mismatch { detail: "cubin".into(), quarantined: true };
        auditor.record(&wrong, &first, from("rogue").as_ref());
        let mut audited: Vec<(u8, Claim)> =
            std::iter::from_fn(|| queued.try_recv().ok()).map(|(s, claim)| (s.key.as_bytes()[0], claim)).collect();
        audited.sort_by_key(|(n, _)| *n);
        assert_eq!(audited.iter().map(|(n, _)| *n).collect::<Vec<_>>(), [1, 2, 3], "{audited:?}");
        assert!(audited.iter().all(|(_, c)| matches!(c, Claim::Artifact(_))), "{audited:?}");
        let later = fetch(&auditor, &mut queued, 9, from("rogue"));
        assert!(matches!(later, Some(Claim::Artifact(_))), "every artifact after: {later:?}");
        assert_eq!(fetch(&auditor, &mut queued, 9, from("rogue")), None, "each once");
        assert!(auditor.stats().publishers_audited.is_empty());
        // A failed first audit hands its turn to an artifact held back; a clean one forgets them.
        let first = fetch(&auditor, &mut queued, 20, from("flaky")).unwrap_or(Claim::Sampled);
        assert_eq!(fetch(&auditor, &mut queued, 21, from("flaky")), None);
        auditor.record(&Verdict::Failed("no toolkit".into()), &first, from("flaky").as_ref());
        let (next, claim) = queued.try_recv().unwrap_or_else(|_| unreachable!("the held-back artifact is queued"));
        assert_eq!((next.key, &claim), (sample(21).key, &first));
        assert_eq!(fetch(&auditor, &mut queued, 22, from("flaky")), None, "held back again");
        auditor.record(&Verdict::Clean, &claim, from("flaky").as_ref());
        assert!(lock(&auditor.held_back).is_empty());
    }

    #[test]
    fn anonymous_artifacts_are_each_audited_on_their_first_fetch() {
        let (auditor, mut queued) = strict();
        for provenance in [None, by("gpu-1", "anonymous"), by("", "")] {
            auditor.provenance.invalidate_all();
            auditor.own_account.invalidate_all();
            for n in 0..3 {
                let claim = fetch(&auditor, &mut queued, n, provenance.clone());
                assert!(matches!(claim, Some(Claim::Artifact(_))), "{provenance:?} key {n}: {claim:?}");
                auditor.record(&Verdict::Clean, &claim.unwrap_or(Claim::Sampled), provenance.as_ref());
                assert_eq!(fetch(&auditor, &mut queued, n, provenance.clone()), None, "each publish once");
            }
        }
        assert!(auditor.stats().publishers_audited.is_empty(), "a clean anonymous artifact vouches for nobody");
        // A failed audit concludes nothing: the next fetch audits again. A new publish under
        // the key is another artifact.
        auditor.own_account.invalidate_all();
        let claim = fetch(&auditor, &mut queued, 7, None).unwrap_or(Claim::Sampled);
        auditor.record(&Verdict::Failed("no toolkit".into()), &claim, None);
        assert!(fetch(&auditor, &mut queued, 7, None).is_some());
        let republished = Some(Provenance { token: "anonymous".into(), unix_ms: 99, ..Default::default() });
        assert!(fetch(&auditor, &mut queued, 7, republished).is_some());
    }

    #[test]
    fn a_disputed_artifact_is_audited_on_its_next_fetch_whoever_published_it() {
        let (auditor, mut queued) = vouching_for(by("gpu-1", "tok-honest"));
        let disputed = by("gpu-1", "tok-honest").map(|p| Provenance { disputed: true, ..p });
        let claim = fetch(&auditor, &mut queued, 1, disputed.clone());
        assert!(matches!(claim, Some(Claim::Artifact((_, _, true)))), "{claim:?}");
        assert_eq!(fetch(&auditor, &mut queued, 1, disputed), None, "once");
    }

    #[test]
    fn an_honest_name_behind_another_token_is_a_new_publisher() {
        let (auditor, mut queued) = vouching_for(by("gpu-1", "tok-honest"));
        let spoofed = fetch(&auditor, &mut queued, 2, by("gpu-1", "tok-rogue"));
        let expected = Publisher { token: "tok-rogue".into(), host: "gpu-1".into() };
        assert_eq!(spoofed, Some(Claim::NewPublisher(expected)), "the honest name does not vouch for another token");
        let unnamed = fetch(&auditor, &mut queued, 3, by("", "tok-honest"));
        assert!(matches!(unnamed, Some(Claim::NewPublisher(_))), "the honest token under another name: {unnamed:?}");
    }

    #[test]
    fn a_dropped_audit_is_tried_again() {
        let auditor = Auditor::new(Policy { rate: 0.0, cpu_share: 1.0, ..Policy::default() }, Arc::default());
        let _queued = auditor.take_receiver();
        for n in 0..QUEUE as u8 {
            auditor.saw(&sample(n).key, None);
            auditor.consider(|| sample(n), &sample(n).key);
        }
        let full = sample(200);
        auditor.saw(&full.key, from("new"));
        auditor.consider(|| sample(200), &full.key);
        assert_eq!(auditor.stats().dropped, 1);
        assert!(lock(&auditor.pending).is_empty(), "the new publisher waits for no audit");
    }

    #[test]
    fn rate_one_audits_everything_until_the_queue_is_full() {
        let auditor = Auditor::new(Policy { rate: 1.0, cpu_share: 1.0, ..Policy::default() }, Arc::default());
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
