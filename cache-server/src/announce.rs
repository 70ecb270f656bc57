//! Publish notifications: one supervised pub/sub subscription per kiln-cache process, fanned out
//! in process to every `WatchPublish` stream.
//!
//! Keyspace notifications would not do: they fire only on the node that holds the key, and a
//! Redis Cluster has many. Instead every Put is announced with a plain `PUBLISH` on
//! [`crate::layout::CHANNEL`], which a cluster forwards to all its nodes, so one subscription on
//! any one node hears every publish.
//!
//! A pub/sub connection does not reconnect by itself, so [`supervise`] owns it: it connects,
//! subscribes, pings it now and then to notice a dead peer, and after any failure reconnects with
//! a capped exponential backoff. Each time the subscription becomes live it bumps a generation
//! number, and every open watch stream answers a new generation with a fresh `subscribed`: a
//! publish made while the subscription was down was never heard, so the waiter must check again.

use crate::error::Error;
use crate::layout::CHANNEL;
use crate::metrics::Metrics;
use futures_util::{Stream, StreamExt};
use kiln_proto::CacheKey;
use kiln_proto::pb::{PublishEvent, Subscribed, publish_event::Event};
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{broadcast, watch};
use tokio_util::sync::CancellationToken;

/// How often the subscription is pinged; a ping unanswered this long means a dead connection.
const PING_EVERY: Duration = Duration::from_secs(5);
/// Backoff between reconnection attempts, doubling from the first to the cap.
const BACKOFF_FIRST: Duration = Duration::from_millis(100);
const BACKOFF_CAP: Duration = Duration::from_secs(2);
/// Publishes buffered per watcher. A watcher that falls further behind gets a `subscribed`
/// instead of the publishes it missed, which makes it check again: slow, never wrong.
const FANOUT_CAPACITY: usize = 4096;

/// The in-process side of the subscription, shared by the supervisor and every watch stream.
#[derive(Debug)]
pub struct Announcements {
    /// Every key announced on the channel. A broadcast channel rather than a map of watchers by
    /// key: one send per publish, each watcher filters by its own keys, and lag has a safe
    /// meaning (re-check). Publishes are cold compiles, so the rate stays modest.
    published: broadcast::Sender<CacheKey>,
    /// `Some(generation)` while the subscription is live, `None` while it is down.
    live: watch::Sender<Option<u64>>,
}

impl Default for Announcements {
    fn default() -> Self {
        Self::new()
    }
}

/// A watch stream's events, as the proto sends them.
pub type PublishStream = std::pin::Pin<Box<dyn Stream<Item = Result<PublishEvent, tonic::Status>> + Send>>;

fn subscribed() -> PublishEvent {
    PublishEvent { event: Some(Event::Subscribed(Subscribed {})) }
}

impl Announcements {
    pub fn new() -> Self {
        Announcements { published: broadcast::channel(FANOUT_CAPACITY).0, live: watch::channel(None).0 }
    }

    /// A watch over `keys`. Waits up to `wait` for the subscription to be live (it may be
    /// reconnecting this moment), else fails with [`Error::PubSubDown`]. The stream's first event
    /// is `subscribed`; then one `published` per announcement of a watched key, and another
    /// `subscribed` after every resubscription. It ends when `stop` fires.
    pub async fn watch(
        &self,
        keys: HashSet<CacheKey>,
        wait: Duration,
        stop: CancellationToken,
        metrics: Arc<Metrics>,
    ) -> Result<PublishStream, Error> {
        // Subscribe in process before looking at liveness: every publish heard after the
        // `subscribed` we send reaches this receiver.
        let published = self.published.subscribe();
        let mut live = self.live.subscribe();
        let generation = tokio::time::timeout(wait, live.wait_for(Option::is_some))
            .await
            .ok()
            .and_then(|r| r.ok().and_then(|g| *g))
            .ok_or(Error::PubSubDown)?;
        live.mark_unchanged();
        let state = WatchState { keys, published, live, generation, stop, _open: OpenStream::new(metrics) };
        let first = futures_util::stream::once(async { Ok(subscribed()) });
        let rest = futures_util::stream::unfold(state, |mut s| async move {
            let event = s.next_event().await?;
            Some((Ok(event), s))
        });
        Ok(Box::pin(first.chain(rest)))
    }
}

/// Counts an open stream in `kiln_server_watch_streams` for as long as it lives.
struct OpenStream(Arc<Metrics>);

impl OpenStream {
    fn new(metrics: Arc<Metrics>) -> Self {
        metrics.watch_streams.inc();
        OpenStream(metrics)
    }
}

impl Drop for OpenStream {
    fn drop(&mut self) {
        self.0.watch_streams.dec();
    }
}

struct WatchState {
    keys: HashSet<CacheKey>,
    published: broadcast::Receiver<CacheKey>,
    live: watch::Receiver<Option<u64>>,
    /// The subscription generation this watcher last said `subscribed` for.
    generation: u64,
    stop: CancellationToken,
    _open: OpenStream,
}

impl WatchState {
    /// The next event to send, or `None` to end the stream (server shutting down).
    async fn next_event(&mut self) -> Option<PublishEvent> {
        loop {
            tokio::select! {
                _ = self.stop.cancelled() => return None,
                got = self.published.recv() => match got {
                    Ok(key) if self.keys.contains(&key) => {
                        return Some(PublishEvent { event: Some(Event::Published(key.to_hex())) });
                    }
                    Ok(_) => {}
                    Err(broadcast::error::RecvError::Lagged(_)) => return Some(subscribed()),
                    Err(broadcast::error::RecvError::Closed) => return None,
                },
                changed = self.live.changed() => {
                    changed.ok()?;
                    let now = *self.live.borrow_and_update();
                    if let Some(g) = now.filter(|g| *g != self.generation) {
                        self.generation = g;
                        return Some(subscribed());
                    }
                }
            }
        }
    }
}

/// Keeps the subscription live until `stop` fires, trying `sources` in turn.
pub async fn supervise(
    sources: Vec<redis::Client>,
    hub: Arc<Announcements>,
    metrics: Arc<Metrics>,
    connect_timeout: Duration,
    stop: CancellationToken,
) {
    let mut generation = 0u64;
    let mut backoff = BACKOFF_FIRST;
    for source in sources.iter().cycle() {
        let connected = tokio::select! {
            _ = stop.cancelled() => return,
            c = tokio::time::timeout(connect_timeout, subscribe(source)) => c,
        };
        match connected {
            Ok(Ok(pubsub)) => {
                generation += 1;
                backoff = BACKOFF_FIRST;
                hub.live.send_replace(Some(generation));
                metrics.pubsub_up.set(1);
                tracing::info!(generation, "publish subscription live");
                let why = pump(pubsub, &hub, &stop).await;
                hub.live.send_replace(None);
                metrics.pubsub_up.set(0);
                match why {
                    None => return,
                    Some(why) => tracing::warn!(%why, "publish subscription lost; reconnecting"),
                }
            }
            Ok(Err(e)) => {
                metrics.redis_errors.inc();
                tracing::debug!(error = %e, "cannot subscribe yet");
            }
            Err(_) => tracing::debug!("subscribing timed out"),
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(BACKOFF_CAP);
    }
}

async fn subscribe(source: &redis::Client) -> redis::RedisResult<redis::aio::PubSub> {
    let mut pubsub = source.get_async_pubsub().await?;
    // Returns once Redis has confirmed the subscription: from here on publishes reach us.
    pubsub.subscribe(CHANNEL).await?;
    Ok(pubsub)
}

/// Forwards announcements until the connection fails (`Some(reason)`) or `stop` fires (`None`).
async fn pump(pubsub: redis::aio::PubSub, hub: &Announcements, stop: &CancellationToken) -> Option<String> {
    let (mut sink, mut messages) = pubsub.split();
    let mut ping = tokio::time::interval(PING_EVERY);
    ping.tick().await;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return None,
            msg = messages.next() => {
                let Some(msg) = msg else {
                    return Some("connection closed".into());
                };
                let key = std::str::from_utf8(msg.get_payload_bytes())
                    .ok()
                    .and_then(|s| s.parse::<CacheKey>().ok());
                match key {
                    // No receivers is fine: nobody is watching right now.
                    Some(key) => drop(hub.published.send(key)),
                    None => tracing::warn!("ignoring a malformed message on {CHANNEL}"),
                }
            }
            _ = ping.tick() => {
                match tokio::time::timeout(PING_EVERY, sink.ping::<redis::Value>()).await {
                    Ok(Ok(_)) => {}
                    Ok(Err(e)) => return Some(format!("ping failed: {e}")),
                    Err(_) => return Some("ping unanswered".into()),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(b: u8) -> CacheKey {
        CacheKey::from_bytes([b; 32])
    }

    fn kind(e: &PublishEvent) -> String {
        match &e.event {
            Some(Event::Subscribed(_)) => "subscribed".into(),
            Some(Event::Published(k)) => format!("published {}", &k[..2]),
            Some(Event::Value(v)) => format!("value {}", &v.key[..2]),
            None => "none".into(),
        }
    }

    async fn next(s: &mut PublishStream) -> String {
        let e = tokio::time::timeout(Duration::from_secs(5), s.next()).await;
        kind(&e.unwrap().unwrap().unwrap())
    }

    #[tokio::test]
    async fn a_watch_waits_for_a_live_subscription() {
        let hub = Announcements::new();
        let m = Arc::new(Metrics::new());
        let keys = HashSet::from([key(1)]);
        let down = hub.watch(keys, Duration::from_millis(20), CancellationToken::new(), m).await;
        assert!(matches!(down, Err(Error::PubSubDown)));
    }

    #[tokio::test]
    async fn watchers_get_their_keys_and_a_fresh_subscribed_after_a_resubscribe() {
        let hub = Announcements::new();
        let m = Arc::new(Metrics::new());
        hub.live.send_replace(Some(1));
        let stop = CancellationToken::new();
        let mut s = hub.watch(HashSet::from([key(1)]), Duration::ZERO, stop.clone(), m.clone()).await.unwrap();
        assert_eq!(next(&mut s).await, "subscribed");
        assert_eq!(m.watch_streams.get(), 1);
        hub.published.send(key(2)).unwrap();
        hub.published.send(key(1)).unwrap();
        assert_eq!(next(&mut s).await, "published 01");
        hub.live.send_replace(None);
        hub.live.send_replace(Some(2));
        assert_eq!(next(&mut s).await, "subscribed");
        stop.cancel();
        assert!(s.next().await.is_none());
        drop(s);
        assert_eq!(m.watch_streams.get(), 0);
    }
}
