//! WatchPublish: a stream of publish events for the keys asked about, ended at shutdown. With
//! `values`, each event is expanded into the entry it announces, so a waiter needs no Get of its
//! own.

use super::CacheService;
use super::entries::lookup;
use crate::announce::PublishStream;
use crate::error::Error;
use crate::metrics::Metrics;
use crate::store::Store;
use crate::trust::Trust;
use crate::validate;
use futures_util::StreamExt;
use kiln_proto::CacheKey;
use kiln_proto::pb::publish_event::Event;
use kiln_proto::pb::{PublishEvent, WatchPublishRequest};
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

/// How long a new watch waits for the subscription to come back before answering UNAVAILABLE.
const WATCH_WAIT: Duration = Duration::from_secs(2);

impl CacheService {
    pub(super) async fn watch_publish(&self, req: WatchPublishRequest) -> Result<PublishStream, Error> {
        if req.keys.is_empty() {
            return Err(Error::Missing { field: "keys" });
        }
        let keys = validate::keys("keys", &req.keys, self.limits.max_batch_keys)?;
        let keys: HashSet<CacheKey> = keys.into_iter().collect();
        let watched: Vec<CacheKey> = keys.iter().copied().collect();
        let stream = self.announcements.watch(keys, WATCH_WAIT, self.stop.clone(), Arc::clone(&self.metrics)).await?;
        if !req.values {
            return Ok(stream);
        }
        Ok(with_values(stream, watched, self.store.clone(), Arc::clone(&self.metrics), Arc::clone(&self.trust)))
    }
}

/// A watch stream that carries entries (`WatchPublishRequest.values`): after each `subscribed`,
/// a `value` for every watched key that holds an entry; a publish of a key that holds one becomes
/// its `value`. A read that fails passes the bare event on, so the waiter falls back to a Get.
fn with_values(
    stream: PublishStream,
    watched: Vec<CacheKey>,
    store: Store,
    metrics: Arc<Metrics>,
    trust: Arc<Trust>,
) -> PublishStream {
    let expanded = stream.then(move |event| {
        let (watched, store, metrics, trust) =
            (watched.clone(), store.clone(), Arc::clone(&metrics), Arc::clone(&trust));
        async move {
            let Ok(event) = event else { return vec![event] };
            let value = |key: CacheKey| {
                let (store, metrics, trust) = (store.clone(), Arc::clone(&metrics), Arc::clone(&trust));
                async move {
                    match lookup(store, metrics, &trust, key, "watch").await {
                        Ok(found) if found.entry.is_some() => Some(PublishEvent { event: Some(Event::Value(found)) }),
                        _ => None,
                    }
                }
            };
            match &event.event {
                Some(Event::Subscribed(_)) => {
                    let mut out = vec![Ok(event.clone())];
                    for key in watched {
                        out.extend(value(key).await.map(Ok));
                    }
                    out
                }
                Some(Event::Published(hex)) => match hex.parse::<CacheKey>() {
                    Ok(key) => vec![Ok(value(key).await.unwrap_or(event))],
                    Err(_) => vec![Ok(event)],
                },
                _ => vec![Ok(event)],
            }
        }
    });
    Box::pin(expanded.flat_map(futures_util::stream::iter))
}
