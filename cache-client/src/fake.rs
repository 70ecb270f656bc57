//! An in-memory kiln-cache for unit tests: entries and negative entries, leases whose TTLs run on
//! tokio's clock (so a test with paused time expires them), publish notifications as kiln-cache
//! sends them, and a switch that makes every call fail as an unreachable server does. Clones
//! share one cache, so several "hosts" can sit on it.
//!
//! Behind the `fake` feature, which kilnd turns on in its dev-dependencies only: the binaries
//! that ship do not carry it.

use crate::{Acquired, CacheClient, Call, ClientError, Difference, Events, Lookup, PublishEvent};
use kiln_proto::CacheKey;
use kiln_proto::pb::{
    HostReport, NegativeEntry, QuarantineListRequest, QuarantineListResponse, QuarantineResponse, TorchJobLedger,
    TorchJobReturn, TorchJobsReply, TorchProcessCosts, VouchResponse,
};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{broadcast, watch};
use tokio::time::Instant;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::BroadcastStream;

/// An in-memory kiln-cache; clones share it.
#[derive(Debug, Clone)]
pub struct FakeCache(Arc<Inner>);

#[derive(Debug)]
struct Inner {
    state: Mutex<State>,
    /// Every publish (with its entry) and every release (`None`), as kiln-cache announces them.
    published: broadcast::Sender<(CacheKey, Option<Lookup>)>,
    /// Watches opened so far: a test waits on it to know a waiter is waiting.
    watches: watch::Sender<usize>,
    down: AtomicBool,
    /// Calls that reached the server, the probe's included.
    calls: AtomicUsize,
    probes: AtomicUsize,
}

#[derive(Debug, Default)]
struct State {
    entries: HashMap<CacheKey, Lookup>,
    /// Holder and expiry of each lease.
    leases: HashMap<CacheKey, (String, Instant)>,
    /// The torch.compile jobs' ledgers, merged as kiln-cache merges them.
    torch_jobs: HashMap<String, TorchJobLedger>,
}

impl Default for FakeCache {
    fn default() -> Self {
        FakeCache(Arc::new(Inner {
            state: Mutex::default(),
            published: broadcast::channel(256).0,
            watches: watch::channel(0).0,
            down: AtomicBool::new(false),
            calls: AtomicUsize::new(0),
            probes: AtomicUsize::new(0),
        }))
    }
}

impl FakeCache {
    /// Makes every call fail as an unreachable server does (`down`), or answer again.
    pub fn set_down(&self, down: bool) {
        self.0.down.store(down, Ordering::SeqCst);
    }

    /// Calls that reached this server so far (the breaker's skips never do).
    pub fn calls(&self) -> usize {
        self.0.calls.load(Ordering::SeqCst)
    }

    /// The breaker probe's calls so far.
    pub fn probes(&self) -> usize {
        self.0.probes.load(Ordering::SeqCst)
    }

    /// Resolves once `n` watches have been opened in all.
    pub async fn watches_reach(&self, n: usize) {
        let mut rx = self.0.watches.subscribe();
        let _ = rx.wait_for(|opened| *opened >= n).await;
    }

    /// Watches opened so far.
    pub fn watches(&self) -> usize {
        *self.0.watches.borrow()
    }

    /// Whether `key`'s lease is held now.
    pub fn lease_held(&self, key: &CacheKey) -> bool {
        self.state().leases.get(key).is_some_and(|(_, until)| *until > Instant::now())
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.0.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Counts a call, and fails it while the server is down.
    fn reach(&self) -> Result<(), ClientError> {
        self.0.calls.fetch_add(1, Ordering::SeqCst);
        if self.0.down.load(Ordering::SeqCst) {
            return Err(ClientError::Rpc { code: tonic::Code::Unavailable, message: "connection refused".into() });
        }
        Ok(())
    }

    fn answer<'a, T: Send + 'a>(&'a self, f: impl FnOnce(&FakeCache) -> T + Send + 'a) -> Call<'a, T> {
        Box::pin(async move {
            self.reach()?;
            // A round trip: the caller's other tasks run meanwhile, as they would over a socket.
            tokio::task::yield_now().await;
            Ok(f(self))
        })
    }

    fn store(&self, key: &CacheKey, lookup: Lookup) {
        self.state().entries.insert(*key, lookup.clone());
        let _ = self.0.published.send((*key, Some(lookup)));
    }
}

impl CacheClient for FakeCache {
    fn get<'a>(&'a self, key: &'a CacheKey) -> Call<'a, Lookup> {
        self.answer(|c| c.state().entries.get(key).cloned().unwrap_or(Lookup::Miss))
    }

    fn batch_get<'a>(&'a self, keys: &'a [CacheKey]) -> Call<'a, Vec<(CacheKey, Lookup)>> {
        self.answer(|c| {
            let state = c.state();
            keys.iter().map(|k| (*k, state.entries.get(k).cloned().unwrap_or(Lookup::Miss))).collect()
        })
    }

    fn contains<'a>(&'a self, keys: &'a [CacheKey]) -> Call<'a, Vec<bool>> {
        self.answer(|c| {
            let state = c.state();
            keys.iter().map(|k| matches!(state.entries.get(k), Some(Lookup::Hit(..)))).collect()
        })
    }

    fn put<'a>(&'a self, key: &'a CacheKey, envelope: Vec<u8>) -> Call<'a, ()> {
        self.answer(move |c| c.store(key, Lookup::Hit(envelope, None)))
    }

    fn put_negative<'a>(&'a self, key: &'a CacheKey, failure: NegativeEntry, _: Duration) -> Call<'a, ()> {
        self.answer(move |c| c.store(key, Lookup::Negative(failure)))
    }

    fn get_manifest<'a>(&'a self, _: &'a CacheKey) -> Call<'a, Option<Vec<CacheKey>>> {
        self.answer(|_| None)
    }

    fn put_manifest<'a>(&'a self, _: &'a CacheKey, _: &'a [CacheKey]) -> Call<'a, ()> {
        self.answer(|_| ())
    }

    fn acquire_lease<'a>(&'a self, key: &'a CacheKey, holder: &'a str, ttl: Duration) -> Call<'a, Acquired> {
        self.answer(move |c| {
            let mut state = c.state();
            if state.entries.contains_key(key) {
                return Acquired::Present;
            }
            let now = Instant::now();
            match state.leases.get(key) {
                Some((other, until)) if other != holder && *until > now => Acquired::Held,
                _ => {
                    state.leases.insert(*key, (holder.to_owned(), now + ttl));
                    Acquired::Taken
                }
            }
        })
    }

    fn renew_lease<'a>(&'a self, key: &'a CacheKey, holder: &'a str, ttl: Duration) -> Call<'a, bool> {
        self.answer(move |c| {
            let mut state = c.state();
            let now = Instant::now();
            match state.leases.get_mut(key) {
                Some((held_by, until)) if held_by == holder && *until > now => {
                    *until = now + ttl;
                    true
                }
                _ => false,
            }
        })
    }

    fn release_lease<'a>(&'a self, key: &'a CacheKey, holder: &'a str) -> Call<'a, bool> {
        self.answer(move |c| {
            let mut state = c.state();
            if state.leases.get(key).is_none_or(|(held_by, _)| held_by != holder) {
                return false;
            }
            state.leases.remove(key);
            let _ = c.0.published.send((*key, None));
            true
        })
    }

    fn watch<'a>(&'a self, key: &'a CacheKey) -> Call<'a, Events> {
        Box::pin(async move {
            self.reach()?;
            // Subscribed before the look, as kiln-cache does, so a publish in between is not lost.
            let published = BroadcastStream::new(self.0.published.subscribe());
            let mut first = vec![Ok(PublishEvent::Subscribed)];
            if let Some(entry) = self.state().entries.get(key).cloned() {
                first.push(Ok(PublishEvent::Value(*key, entry)));
            }
            self.0.watches.send_modify(|opened| *opened += 1);
            let watched = *key;
            let later = published.filter_map(move |event| match event {
                Ok((k, Some(entry))) if k == watched => Some(Ok(PublishEvent::Value(k, entry))),
                Ok((k, None)) if k == watched => Some(Ok(PublishEvent::Published(k))),
                _ => None,
            });
            Ok(Box::pin(tokio_stream::iter(first).chain(later)) as Events)
        })
    }

    fn report_host(&self, _: HostReport) -> Call<'_, ()> {
        self.answer(|_| ())
    }

    fn report_torch_job<'a>(&'a self, job: &'a str, process: TorchProcessCosts) -> Call<'a, TorchJobReturn> {
        self.answer(move |c| {
            let mut state = c.state();
            let ledger = state
                .torch_jobs
                .entry(job.to_owned())
                .or_insert_with(|| TorchJobLedger { job: job.to_owned(), ..Default::default() });
            kiln_proto::torch_ledger::record(ledger, process);
            kiln_proto::torch_ledger::job_return(ledger)
        })
    }

    fn list_torch_jobs<'a>(&'a self, job: &'a str, _: u32) -> Call<'a, TorchJobsReply> {
        self.answer(move |c| TorchJobsReply {
            jobs: c
                .state()
                .torch_jobs
                .values()
                .filter(|l| job.is_empty() || l.job == job)
                .map(kiln_proto::torch_ledger::job_return)
                .collect(),
            source: "fleet".into(),
            source_detail: String::new(),
        })
    }

    /// Quarantines by dropping the entry while it holds the served bytes; keeps no records.
    fn quarantine<'a>(&'a self, key: &'a CacheKey, found: Difference<'a>) -> Call<'a, QuarantineResponse> {
        self.answer(move |c| {
            let mut state = c.state();
            let held = matches!(state.entries.get(key), Some(Lookup::Hit(e, _)) if blake3::hash(e) == *found.served);
            if held {
                state.entries.remove(key);
            }
            QuarantineResponse { quarantined: held, record: None }
        })
    }

    fn list_quarantine(&self, _: QuarantineListRequest) -> Call<'_, QuarantineListResponse> {
        self.answer(|_| QuarantineListResponse::default())
    }

    /// Takes every vouch, but keeps no vetting: its Gets never say vetted.
    fn vouch<'a>(&'a self, _: &'a CacheKey, _: &'a blake3::Hash) -> Call<'a, VouchResponse> {
        self.answer(|_| VouchResponse { vetted: true, ..Default::default() })
    }

    fn redis_up(&self) -> Call<'_, bool> {
        Box::pin(async move {
            self.0.probes.fetch_add(1, Ordering::SeqCst);
            self.reach()?;
            Ok(true)
        })
    }
}
