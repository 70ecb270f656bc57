//! One watch of the fleet per key on this host, however many requests wait for that key.
//!
//! A split torch job leaves each of its pieces to one host, and every rank of every other host
//! waits for that host's publish. Each waiting request used to open a `WatchPublish` stream of its
//! own on kiln-cache: at 64 hosts of 8 ranks and 18 pieces, up to about 9,000 subscriptions at
//! once, each one an open stream and a Redis lookup at subscription, each publish fetched and
//! adopted once per rank. Shared, a host holds one subscription per key it waits for, fetches
//! the artifact once and adopts it once; the waiters all take that answer.

use crate::domain::Answer;
use futures_util::future::{BoxFuture, FutureExt, Shared, WeakShared};
use kiln_proto::CacheKey;
use std::collections::HashMap;
use std::future::Future;
use std::sync::Mutex;

type Watch = Shared<BoxFuture<'static, Answer>>;

/// The watches open now, held weakly: a watch ends (and its stream closes) when its last waiter
/// stops waiting, by an answer, a bound or a dropped request.
#[derive(Debug, Default)]
pub(super) struct Watches {
    open: Mutex<HashMap<CacheKey, WeakShared<BoxFuture<'static, Answer>>>>,
}

impl Watches {
    /// The open watch of `key`, or a new one that runs `start()`; awaiting it resolves with that
    /// watch's answer.
    pub(super) fn join<F>(&self, key: &CacheKey, start: impl FnOnce() -> F) -> Watch
    where
        F: Future<Output = Answer> + Send + 'static,
    {
        let mut open = self.open.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(watch) = open.get(key).and_then(WeakShared::upgrade) {
            return watch;
        }
        // Entries whose waiters all left are dropped as new ones come, so the map holds no
        // more than the keys being waited for plus those that ended since the last new watch.
        open.retain(|_, watch| watch.upgrade().is_some());
        let watch = start().boxed().shared();
        if let Some(weak) = watch.downgrade() {
            open.insert(*key, weak);
        }
        watch
    }

    /// How many keys have a watch open now.
    #[cfg(test)]
    pub(super) fn open(&self) -> usize {
        let open = self.open.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        open.values().filter(|watch| watch.upgrade().is_some()).count()
    }
}
