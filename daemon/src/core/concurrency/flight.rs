//! Single-flight per key. The first request for a key leads and does the work; later requests
//! follow and receive the leader's result. A leader dropped without a result (its task was
//! cancelled) removes its entry and wakes its followers empty-handed, and they try again, so
//! nobody waits forever on a compile that will not finish.

use kiln_proto::CacheKey;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::watch;

#[derive(Debug)]
pub struct Flights<T> {
    /// A std Mutex: held only to look up, insert or remove, never across an await.
    map: Mutex<HashMap<CacheKey, watch::Receiver<Option<T>>>>,
}

impl<T> Default for Flights<T> {
    fn default() -> Self {
        Flights { map: Mutex::new(HashMap::new()) }
    }
}

/// The request that does the work for a key.
#[derive(Debug)]
pub struct Leader<T> {
    key: CacheKey,
    tx: watch::Sender<Option<T>>,
    flights: Arc<Flights<T>>,
}

/// What [`Flights::join`] decided.
#[derive(Debug)]
pub enum Join<T> {
    Lead(Leader<T>),
    Follow(watch::Receiver<Option<T>>),
}

impl<T: Clone> Flights<T> {
    pub fn join(self: &Arc<Self>, key: &CacheKey) -> Join<T> {
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(rx) = map.get(key) {
            return Join::Follow(rx.clone());
        }
        let (tx, rx) = watch::channel(None);
        map.insert(*key, rx);
        Join::Lead(Leader { key: *key, tx, flights: Arc::clone(self) })
    }

    /// Waits for a leader's result; `None` if the leader went away without one.
    pub async fn follow(mut rx: watch::Receiver<Option<T>>) -> Option<T> {
        let value = rx.wait_for(Option::is_some).await.ok()?;
        value.clone()
    }

    /// Whether no key is being worked on (the tests check that none leak).
    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.map.lock().map(|m| m.is_empty()).unwrap_or(true)
    }
}

impl<T> Leader<T> {
    /// Publishes the result to every follower and ends the flight.
    pub fn finish(self, value: T) {
        self.tx.send_replace(Some(value));
        // Drop removes the entry.
    }
}

impl<T> Drop for Leader<T> {
    fn drop(&mut self) {
        let mut map = self.flights.map.lock().unwrap_or_else(|p| p.into_inner());
        map.remove(&self.key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn one_leader_many_followers() {
        let flights: Arc<Flights<u32>> = Arc::default();
        let key = CacheKey::from_bytes([1; 32]);
        let Join::Lead(leader) = flights.join(&key) else { panic!("first join must lead") };
        let followers: Vec<_> = (0..10)
            .map(|_| match flights.join(&key) {
                Join::Follow(rx) => tokio::spawn(Flights::follow(rx)),
                Join::Lead(_) => panic!("second join led"),
            })
            .collect();
        leader.finish(7);
        for f in followers {
            assert_eq!(f.await.ok().flatten(), Some(7));
        }
        assert!(flights.is_empty());
    }

    #[tokio::test]
    async fn a_vanished_leader_releases_its_followers() {
        let flights: Arc<Flights<u32>> = Arc::default();
        let key = CacheKey::from_bytes([2; 32]);
        let leader = flights.join(&key);
        let Join::Follow(rx) = flights.join(&key) else { panic!("should follow") };
        drop(leader);
        assert_eq!(Flights::follow(rx).await, None);
        assert!(matches!(flights.join(&key), Join::Lead(_)));
    }
}
