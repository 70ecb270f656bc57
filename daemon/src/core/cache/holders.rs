//! Single flight among the processes of one host, for what they produce themselves (blobs, torch
//! graphs).
//!
//! The first request for a key on this host becomes its holder; later ones wait on the
//! holder's state. A holding is tied to the holder's open stream: when the stream closes (the
//! client finished, gave up, or died) the holding drops and its waiters retry at once, instead of
//! waiting out a lease TTL. A put of the key marks it published, which wakes the waiters to read it.

use kiln_proto::CacheKey;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::watch;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    Held,
    Published,
    Released,
}

#[derive(Debug, Default)]
pub struct Holders {
    map: Mutex<HashMap<CacheKey, (u64, watch::Sender<State>)>>,
    next_id: AtomicU64,
    /// Woken at every new holding, for the requests that wait for a key to be held
    /// ([`Holders::until_held`]): a torch job's ranks leave a graph to the rank it falls to, and each
    /// polling for that claim woke every few milliseconds for seconds.
    newly_held: tokio::sync::Notify,
}

/// The outcome of [`Holders::try_hold`].
#[derive(Debug)]
pub enum Try {
    Held(Holding),
    /// Another stream on this host holds the key.
    Busy(watch::Receiver<State>),
}

/// What a waiter saw.
#[derive(Debug, PartialEq, Eq)]
pub enum Waited {
    /// The entry was stored: look it up.
    Published,
    /// The holder let go without storing it: try to hold it.
    Released,
    TimedOut,
}

impl Holders {
    pub fn try_hold(self: &Arc<Self>, key: &CacheKey) -> Try {
        let mut map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((_, tx)) = map.get(key) {
            return Try::Busy(tx.subscribe());
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = watch::channel(State::Held);
        map.insert(*key, (id, tx));
        self.newly_held.notify_waiters();
        Try::Held(Holding { holders: Arc::clone(self), key: *key, id, rx })
    }

    /// Resolves once a stream on this host holds `key`: at once if one does now.
    pub async fn until_held(&self, key: &CacheKey) {
        loop {
            // Registered before the look, so a holding taken between the two still wakes it.
            let notified = self.newly_held.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.is_held(key) {
                return;
            }
            notified.await;
        }
    }

    /// Marks `key` stored, waking its holder and waiters.
    pub fn published(&self, key: &CacheKey) {
        let map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((_, tx)) = map.get(key) {
            tx.send_replace(State::Published);
        }
    }

    /// Whether a stream on this host holds `key` now.
    pub fn is_held(&self, key: &CacheKey) -> bool {
        self.map.lock().unwrap_or_else(PoisonError::into_inner).contains_key(key)
    }

    /// How many keys are held on this host now (the tests check that none leak).
    #[cfg(test)]
    fn held(&self) -> usize {
        self.map.lock().unwrap_or_else(PoisonError::into_inner).len()
    }
}

/// Waits up to `bound` for the holder behind `rx` to publish or let go.
pub async fn wait(mut rx: watch::Receiver<State>, bound: Duration) -> Waited {
    match tokio::time::timeout(bound, rx.wait_for(|s| *s != State::Held)).await {
        Err(_) => Waited::TimedOut,
        Ok(Ok(state)) if *state == State::Published => Waited::Published,
        // Released, or the holding is gone (its sender dropped with it).
        Ok(_) => Waited::Released,
    }
}

/// This stream holds a key on this host until the value drops.
#[derive(Debug)]
pub struct Holding {
    holders: Arc<Holders>,
    key: CacheKey,
    id: u64,
    rx: watch::Receiver<State>,
}

impl Holding {
    /// Resolves once a put of the key lands.
    pub async fn published(&mut self) {
        // The sender lives in the map until this holding drops, so this cannot end otherwise.
        let _ = self.rx.wait_for(|s| *s == State::Published).await;
    }
}

impl Drop for Holding {
    fn drop(&mut self) {
        let mut map = self.holders.map.lock().unwrap_or_else(PoisonError::into_inner);
        if map.get(&self.key).is_some_and(|(id, _)| *id == self.id)
            && let Some((_, tx)) = map.remove(&self.key)
            && *tx.borrow() == State::Held
        {
            tx.send_replace(State::Released);
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const KEY: CacheKey = CacheKey::from_bytes([1; 32]);

    #[tokio::test]
    async fn a_wait_for_a_holder_ends_when_one_holds_the_key_and_not_before() {
        let holders = Arc::new(Holders::default());
        let waiting = holders.until_held(&KEY);
        tokio::pin!(waiting);
        // Another key's holding wakes it to look, and it waits on.
        let other = holders.try_hold(&CacheKey::from_bytes([2; 32]));
        assert!(tokio::time::timeout(Duration::from_millis(50), waiting.as_mut()).await.is_err());
        let Try::Held(_holding) = holders.try_hold(&KEY) else { panic!("nobody held the key") };
        tokio::time::timeout(Duration::from_secs(5), waiting).await.expect("the wait ended with the holding");
        // Held already: no wait at all.
        tokio::time::timeout(Duration::from_millis(50), holders.until_held(&KEY)).await.expect("held now");
        drop(other);
    }
    const LONG: Duration = Duration::from_secs(5);

    #[tokio::test]
    async fn a_dropped_holding_releases_its_waiters_at_once() {
        let holders = Arc::new(Holders::default());
        let Try::Held(holding) = holders.try_hold(&KEY) else { panic!("first must hold") };
        let Try::Busy(rx) = holders.try_hold(&KEY) else { panic!("second must wait") };
        let waiter = tokio::spawn(wait(rx, LONG));
        drop(holding);
        assert_eq!(waiter.await.unwrap(), Waited::Released);
        assert_eq!(holders.held(), 0);
        assert!(matches!(holders.try_hold(&KEY), Try::Held(_)));
    }

    #[tokio::test]
    async fn a_put_wakes_holder_and_waiters() {
        let holders = Arc::new(Holders::default());
        let Try::Held(mut holding) = holders.try_hold(&KEY) else { panic!("first must hold") };
        let Try::Busy(rx) = holders.try_hold(&KEY) else { panic!("second must wait") };
        let waiter = tokio::spawn(wait(rx, LONG));
        holders.published(&KEY);
        holding.published().await;
        assert_eq!(waiter.await.unwrap(), Waited::Published);
        drop(holding);
        assert_eq!(holders.held(), 0);
    }

    #[tokio::test]
    async fn waiters_give_up_at_their_bound() {
        let holders = Arc::new(Holders::default());
        let _holding = holders.try_hold(&KEY);
        let Try::Busy(rx) = holders.try_hold(&KEY) else { panic!("second must wait") };
        assert_eq!(wait(rx, Duration::from_millis(20)).await, Waited::TimedOut);
    }
}
