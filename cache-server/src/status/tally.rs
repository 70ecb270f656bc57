//! Counts for the status page, gathered in memory on the request paths and flushed to Redis in
//! the background (`status::flush`), so a Get or BatchGet hit pays a mutex increment, never a
//! Redis round trip of its own.

use super::buckets::{self, Field};
use kiln_proto::envelope;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

/// Distinct classes counted per minute by one replica; later ones count as `other`, so clients
/// inventing blob namespaces cannot grow a minute's hash without bound.
const MAX_CLASSES_PER_MINUTE: usize = 64;

/// Lease events kept between flushes; past this the oldest are dropped (the page's lease count
/// is then low until the next acquire or renew of those keys).
const MAX_LEASE_EVENTS: usize = 10_000;

/// What happened to a lease: held until the given expiry (ms since the epoch), or released.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseEvent {
    HeldUntil(u64),
    Released,
}

/// Counts and lease events not yet in Redis.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Pending {
    /// (minute, field) to count.
    pub counts: BTreeMap<(u64, Field), u64>,
    /// Key (hex) and what happened to its lease, in order.
    pub leases: Vec<(String, LeaseEvent)>,
    /// Classes seen per minute, for the per-minute bound.
    classes: BTreeMap<u64, BTreeSet<String>>,
}

impl Pending {
    pub fn is_empty(&self) -> bool {
        self.counts.is_empty() && self.leases.is_empty()
    }

    fn count(&mut self, minute: u64, field: Field, n: u64) {
        *self.counts.entry((minute, field)).or_default() += n;
    }

    /// The class an envelope's toolchain is counted under in `minute`.
    fn class(&mut self, minute: u64, toolchain: &str) -> String {
        let class = buckets::class(toolchain);
        let seen = self.classes.entry(minute).or_default();
        if seen.contains(class) || seen.len() < MAX_CLASSES_PER_MINUTE {
            seen.insert(class.to_owned());
            class.to_owned()
        } else {
            buckets::OTHER.to_owned()
        }
    }

    /// Puts back what a failed flush took, keeping only minutes still in the window.
    fn merge(&mut self, mut older: Pending, now_ms: u64) {
        let first = *buckets::window(now_ms).start();
        for ((minute, field), n) in std::mem::take(&mut older.counts) {
            if minute >= first {
                self.count(minute, field, n);
            }
        }
        older.leases.append(&mut self.leases);
        self.leases = older.leases;
        let excess = self.leases.len().saturating_sub(MAX_LEASE_EVENTS);
        self.leases.drain(..excess);
    }
}

/// The in-memory tally one replica keeps between flushes.
#[derive(Debug, Default)]
pub struct Tally {
    pending: Mutex<Pending>,
}

pub fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

impl Tally {
    fn with<T>(&self, f: impl FnOnce(&mut Pending) -> T) -> T {
        // A panic while holding the lock cannot leave the counts inconsistent in a way that
        // matters to a status page, so a poisoned lock is used as it is.
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut pending)
    }

    /// A key read with `result` (`hit`, `miss`, `negative`, `corrupt`); for a hit, the envelope
    /// served, whose metadata names its class and compile time.
    pub fn lookup(&self, result: &'static str, served: Option<&[u8]>) {
        let summary = served.and_then(envelope::summary);
        let minute = buckets::minute_of(now_ms());
        self.with(|p| {
            p.count(minute, Field::Result(result), 1);
            if let Some(s) = summary {
                let class = p.class(minute, &s.toolchain);
                p.count(minute, Field::Hit(class.clone()), 1);
                if s.compile_micros > 0 {
                    p.count(minute, Field::SavedMicros(class), s.compile_micros);
                }
            }
        });
    }

    /// An envelope stored: a compile the fleet did not have.
    pub fn published(&self, envelope_bytes: &[u8]) {
        let Some(s) = envelope::summary(envelope_bytes) else { return };
        let minute = buckets::minute_of(now_ms());
        self.with(|p| {
            let class = p.class(minute, &s.toolchain);
            p.count(minute, Field::Published(class), 1);
        });
    }

    pub fn lease(&self, key: String, event: LeaseEvent) {
        self.with(|p| {
            if p.leases.len() >= MAX_LEASE_EVENTS {
                p.leases.remove(0);
            }
            p.leases.push((key, event));
        });
    }

    /// Everything counted since the last take. The classes seen this minute stay, so the
    /// per-minute bound holds across flushes.
    pub fn take(&self) -> Pending {
        let minute = buckets::minute_of(now_ms());
        self.with(|p| {
            let mut classes = std::mem::take(&mut p.classes);
            classes.retain(|m, _| *m >= minute);
            let taken = std::mem::take(p);
            p.classes = classes;
            taken
        })
    }

    /// Puts back what a flush could not write, so it is written by the next one.
    pub fn restore(&self, older: Pending) {
        let now = now_ms();
        self.with(|p| p.merge(older, now));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_proto::CacheKey;
    use kiln_proto::pb::ArtifactMeta;

    fn sealed(toolchain: &str, micros: u64) -> Vec<u8> {
        let meta = ArtifactMeta { toolchain: toolchain.into(), compile_micros: micros, ..Default::default() };
        envelope::seal(&CacheKey::from_bytes([1; 32]), meta, b"x")
    }

    fn count(p: &Pending, field: Field) -> u64 {
        p.counts.iter().filter(|((_, f), _)| *f == field).map(|(_, n)| n).sum()
    }

    #[test]
    fn hits_count_their_class_and_compile_time() {
        let t = Tally::default();
        t.lookup("hit", Some(&sealed("nvrtc", 2_000_000)));
        t.lookup("hit", Some(&sealed("nvrtc", 1_000_000)));
        t.lookup("miss", None);
        t.published(&sealed("ptxas", 5));
        let p = t.take();
        assert_eq!(count(&p, Field::Result("hit")), 2);
        assert_eq!(count(&p, Field::Result("miss")), 1);
        assert_eq!(count(&p, Field::Hit("nvrtc".into())), 2);
        assert_eq!(count(&p, Field::SavedMicros("nvrtc".into())), 3_000_000);
        assert_eq!(count(&p, Field::Published("ptxas".into())), 1);
        assert!(t.take().is_empty(), "take empties the tally");
    }

    #[test]
    fn classes_per_minute_are_bounded() {
        let mut p = Pending::default();
        for i in 0..MAX_CLASSES_PER_MINUTE {
            assert_eq!(p.class(7, &format!("blob/ns{i}")), format!("blob/ns{i}"));
        }
        assert_eq!(p.class(7, "blob/ns0"), "blob/ns0", "a class seen keeps its name");
        assert_eq!(p.class(7, "blob/new"), buckets::OTHER);
        assert_eq!(p.class(8, "blob/new"), "blob/new", "the next minute starts afresh");
        assert_eq!(p.class(8, "<b>"), buckets::OTHER);
    }

    #[test]
    fn a_failed_flush_is_restored_without_stale_minutes() {
        let t = Tally::default();
        t.lookup("miss", None);
        t.lease("k1".into(), LeaseEvent::HeldUntil(5));
        let mut taken = t.take();
        taken.counts.insert((0, Field::Result("miss")), 7); // far outside the window
        t.lookup("miss", None);
        t.lease("k2".into(), LeaseEvent::Released);
        t.restore(taken);
        let p = t.take();
        assert_eq!(count(&p, Field::Result("miss")), 2);
        let keys: Vec<_> = p.leases.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, vec!["k1", "k2"], "older events first");
    }
}
