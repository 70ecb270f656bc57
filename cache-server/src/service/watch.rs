//! `WatchPublish` with `values`: the stream of publish events, each expanded into the entry
//! it announces, so a waiter needs no Get of its own.

use super::lookup;
use crate::announce::PublishStream;
use crate::metrics::Metrics;
use crate::store::Store;
use futures_util::StreamExt;
use kiln_proto::CacheKey;
use kiln_proto::pb::PublishEvent;
use kiln_proto::pb::publish_event::Event;
use std::sync::Arc;

/// A watch stream that carries entries (`WatchPublishRequest.values`): after each `subscribed`,
/// a `value` for every watched key that holds an entry; a publish of a key that holds one becomes
/// its `value`. A read that fails passes the bare event on, so the waiter falls back to a Get.
pub(super) fn with_values(
    stream: PublishStream,
    watched: Vec<CacheKey>,
    store: Store,
    metrics: Arc<Metrics>,
) -> PublishStream {
    let expanded = stream.then(move |event| {
        let (watched, store, metrics) = (watched.clone(), store.clone(), Arc::clone(&metrics));
        async move {
            let Ok(event) = event else { return vec![event] };
            let value = |key: CacheKey| {
                let (store, metrics) = (store.clone(), Arc::clone(&metrics));
                async move {
                    match lookup(store, metrics, key, "watch").await {
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
