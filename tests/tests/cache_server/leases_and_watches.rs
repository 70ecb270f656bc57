//! Leases, which let one host compile a key while the others wait, and the watches the waiters
//! hear a publish on, with the entries or without.

use crate::common::{MIB, code, envelope_of, failed_compile, key, next, start_writing, value_of};
use kiln_cache_client::{Acquired, Lookup, PublishEvent, new_holder};
use kiln_tests::http::sample;
use kiln_tests::redis::READ_TOKEN;
use std::time::{Duration, Instant};
use tonic::Code;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_belong_to_their_holder_and_expire() {
    let (redis, cache, c) = start_writing();
    let k = key("lease");
    let (a, b) = (new_holder(), new_holder());
    let ttl = Duration::from_secs(30);
    assert_eq!(c.acquire_lease(&k, &a, ttl).await.unwrap(), Acquired::Taken);
    assert_eq!(c.acquire_lease(&k, &b, ttl).await.unwrap(), Acquired::Held, "a second holder got a held lease");
    assert!(!c.renew_lease(&k, &b, ttl).await.unwrap(), "another holder renewed");
    assert!(!c.release_lease(&k, &b).await.unwrap(), "another holder released");
    assert_eq!(redis.cli(&["GET", &format!("kiln:v1:{{{k}}}:lease")]), a.as_bytes());
    assert!(c.renew_lease(&k, &a, ttl).await.unwrap());
    assert!(c.release_lease(&k, &a).await.unwrap());
    assert!(!c.release_lease(&k, &a).await.unwrap(), "released twice");
    assert_eq!(c.acquire_lease(&k, &b, Duration::from_millis(300)).await.unwrap(), Acquired::Taken);
    // b dies without releasing: its lease expires and exactly one other takes over.
    let deadline = Instant::now() + Duration::from_secs(10);
    let c2 = new_holder();
    while c.acquire_lease(&k, &c2, ttl).await.unwrap() != Acquired::Taken {
        assert!(Instant::now() < deadline, "the lease never expired");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!c.renew_lease(&k, &b, ttl).await.unwrap(), "an expired holder renewed");
    assert_eq!(c.acquire_lease(&k, &a, ttl).await.unwrap(), Acquired::Held);
    let (c1, _) = code(cache.client(READ_TOKEN).acquire_lease(&k, &new_holder(), ttl).await);
    assert_eq!(c1, Code::PermissionDenied);
    // A key that holds an artifact or a negative entry is not leased: the acquire says so.
    let (stored, failed) = (key("lease stored"), key("lease failed"));
    c.put(&stored, envelope_of(&stored, 100)).await.unwrap();
    c.put_negative(&failed, failed_compile("boom", 1), Duration::from_secs(10)).await.unwrap();
    assert_eq!(c.acquire_lease(&stored, &new_holder(), ttl).await.unwrap(), Acquired::Present);
    assert_eq!(c.acquire_lease(&failed, &new_holder(), ttl).await.unwrap(), Acquired::Present);
    assert!(redis.cli(&["EXISTS", &format!("kiln:v1:{{{stored}}}:lease")]) == b"0", "a lease was taken");
    cache.stop();
}

/// With `values`, a watch carries the entries: those already there right after `subscribed`,
/// then each publish as its entry; a release without a result stays a bare `published`. Every
/// entry sent counts as one `watch` lookup, none as a Get.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watches_with_values_carry_the_entries() {
    let (_redis, cache, c) = start_writing();
    let (there, later, failed, released) = (key("v there"), key("v later"), key("v failed"), key("v released"));
    let env = envelope_of(&there, 100);
    c.put(&there, env.clone()).await.unwrap();
    let mut watch = cache.client(READ_TOKEN).watch_publish(&[there, later, failed, released], true).await.unwrap();
    assert_eq!(next(&mut watch, Duration::from_secs(5)).await, PublishEvent::Subscribed);
    assert_eq!(value_of(next(&mut watch, Duration::from_secs(5)).await), (there, Some(env)));
    let env = envelope_of(&later, 2 * MIB + 1);
    c.put(&later, env.clone()).await.unwrap();
    assert_eq!(value_of(next(&mut watch, Duration::from_secs(5)).await), (later, Some(env)));
    c.put_negative(&failed, failed_compile("boom", 7), Duration::from_secs(10)).await.unwrap();
    let negative = kiln_proto::pb::NegativeEntry { log: "boom".into(), compile_micros: 7 };
    assert_eq!(next(&mut watch, Duration::from_secs(5)).await, PublishEvent::Value(failed, Lookup::Negative(negative)));
    let holder = new_holder();
    assert_eq!(c.acquire_lease(&released, &holder, Duration::from_secs(10)).await.unwrap(), Acquired::Taken);
    assert!(c.release_lease(&released, &holder).await.unwrap());
    assert_eq!(next(&mut watch, Duration::from_secs(5)).await, PublishEvent::Published(released));
    let text = cache.metrics_text();
    assert_eq!(sample(&text, "kiln_server_lookups_total{via=\"watch\",result=\"hit\"}"), Some(2.0), "{text}");
    assert_eq!(sample(&text, "kiln_server_lookups_total{via=\"watch\",result=\"negative\"}"), Some(1.0), "{text}");
    assert_eq!(sample(&text, "kiln_server_lookups_total{via=\"get\",result=\"hit\"}"), None, "{text}");
    cache.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchers_hear_publishes_and_shutdown_ends_their_streams() {
    let (_redis, cache, c) = start_writing();
    let (k, other, failed) = (key("watched"), key("unwatched"), key("failed"));
    let mut watch = cache.client(READ_TOKEN).watch_publish(&[k, failed], false).await.unwrap();
    assert_eq!(next(&mut watch, Duration::from_secs(5)).await, PublishEvent::Subscribed);
    c.put(&other, envelope_of(&other, 100)).await.unwrap();
    c.put(&k, envelope_of(&k, 100)).await.unwrap();
    assert_eq!(next(&mut watch, Duration::from_secs(5)).await, PublishEvent::Published(k));
    c.put_negative(&failed, failed_compile("boom", 1), Duration::from_secs(10)).await.unwrap();
    assert_eq!(next(&mut watch, Duration::from_secs(5)).await, PublishEvent::Published(failed));
    assert_eq!(sample(&cache.metrics_text(), "kiln_server_watch_streams"), Some(1.0));
    let (c1, msg) = code(c.watch_publish(&[], false).await);
    assert!(c1 == Code::InvalidArgument && msg.contains("keys"), "{msg}");
    // SIGTERM with a stream open: the server ends the stream and exits 0 promptly.
    let stopping = tokio::task::spawn_blocking(move || cache.stop_within(Duration::from_secs(10)));
    let end = tokio::time::timeout(Duration::from_secs(10), watch.next_event()).await.expect("stream left open");
    assert!(matches!(end, Ok(None) | Err(_)), "{end:?}");
    stopping.await.unwrap();
}
