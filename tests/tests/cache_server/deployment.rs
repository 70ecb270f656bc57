//! kiln-cache as it is deployed: through a Redis outage and before Redis is up, as replicas over
//! one Redis, over TLS, and over a Redis Cluster.

use crate::common::{MIB, code, envelope_of, head, key, next, start_replicas, start_writing};
use kiln_cache_client::{Acquired, ClientOptions, Lookup, PublishEvent, new_holder};
use kiln_proto::CacheKey;
use kiln_tests::http::sample;
use kiln_tests::redis::{CacheOptions, CacheServer, READ_TOKEN, RedisCluster, RedisServer, WRITE_TOKEN};
use std::time::{Duration, Instant};
use tonic::Code;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_outage_is_unavailable_and_recovers_without_a_restart() {
    let (mut redis, mut cache, c) = start_writing();
    let (k, later) = (key("before"), key("after"));
    // gRPC health follows Redis, with no token (what an orchestrator's probe sends).
    let channel = tonic::transport::Endpoint::from_shared(cache.uri()).unwrap().connect_lazy();
    let mut health = tonic_health::pb::health_client::HealthClient::new(channel);
    let health_becomes = |health: &mut tonic_health::pb::health_client::HealthClient<tonic::transport::Channel>,
                          want: i32| {
        let mut health = health.clone();
        async move {
            let deadline = Instant::now() + Duration::from_secs(20);
            loop {
                let req = tonic_health::pb::HealthCheckRequest { service: "kiln.v1.ArtifactCache".into() };
                let status = health.check(req).await.map(|r| r.into_inner().status);
                if status.as_ref().ok() == Some(&want) {
                    return;
                }
                assert!(Instant::now() < deadline, "health never became {want}: {status:?}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    let (serving, not_serving) = (
        tonic_health::pb::health_check_response::ServingStatus::Serving as i32,
        tonic_health::pb::health_check_response::ServingStatus::NotServing as i32,
    );
    health_becomes(&mut health, serving).await;
    c.put(&k, envelope_of(&k, 100)).await.unwrap();
    let mut watch = c.watch_publish(&[later], false).await.unwrap();
    assert_eq!(next(&mut watch, Duration::from_secs(5)).await, PublishEvent::Subscribed);

    redis.stop();
    let (c1, msg) = code(c.get(&k).await);
    assert_eq!(c1, Code::Unavailable, "{msg}");
    assert!(msg.contains("Redis"), "{msg}");
    assert_eq!(code(c.put(&later, envelope_of(&later, 100)).await).0, Code::Unavailable);
    assert_eq!(code(c.acquire_lease(&k, &new_holder(), Duration::from_secs(1)).await).0, Code::Unavailable);
    let (c2, msg) = code(c.watch_publish(&[k], false).await);
    assert!(c2 == Code::Unavailable && msg.contains("pub/sub"), "{msg}");
    assert!(!c.stats().await.unwrap().redis_up);
    assert!(cache.alive(), "kiln-cache died with Redis");
    let m = cache.metrics_text();
    assert_eq!(sample(&m, "kiln_server_redis_up"), Some(0.0));
    assert!(sample(&m, "kiln_server_redis_errors_total").unwrap() >= 3.0);
    health_becomes(&mut health, not_serving).await;

    redis.restart();
    // The open watch hears that the subscription is live again, so its waiter re-checks.
    assert_eq!(next(&mut watch, Duration::from_secs(20)).await, PublishEvent::Subscribed);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match c.get(&k).await {
            Ok(found) => break assert_eq!(found, Lookup::Miss, "the restarted Redis is empty"),
            Err(e) if Instant::now() < deadline => assert_eq!(e.code(), Some(Code::Unavailable), "{e}"),
            Err(e) => panic!("Redis came back but kiln-cache did not: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    c.put(&later, envelope_of(&later, 100)).await.unwrap();
    assert_eq!(next(&mut watch, Duration::from_secs(5)).await, PublishEvent::Published(later));
    assert!(c.stats().await.unwrap().redis_up);
    assert_eq!(sample(&cache.metrics_text(), "kiln_server_pubsub_up"), Some(1.0));
    health_becomes(&mut health, serving).await;
    cache.stop();
}

/// Replicas keep no state of their own: a put through one is served and announced by another.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_share_one_redis() {
    let (_redis, a, b) = start_replicas();
    let k = key("replicated");
    let mut watch = b.client(READ_TOKEN).watch_publish(&[k], false).await.unwrap();
    assert_eq!(next(&mut watch, Duration::from_secs(5)).await, PublishEvent::Subscribed);
    let env = envelope_of(&k, 1000);
    a.client(WRITE_TOKEN).put(&k, env.clone()).await.unwrap();
    assert_eq!(next(&mut watch, Duration::from_secs(5)).await, PublishEvent::Published(k));
    assert_eq!(b.client(READ_TOKEN).get(&k).await.unwrap().envelope(), Some(&env[..]));
    a.stop();
    b.stop();
}

/// kiln-cache starts and answers while Redis is not there yet, then serves once it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starts_while_redis_is_down() {
    let mut redis = RedisServer::start();
    redis.stop();
    let mut cache = CacheServer::start(CacheOptions::new(vec![redis.url()]));
    let c = cache.client(WRITE_TOKEN);
    let k = key("late");
    assert_eq!(code(c.get(&k).await).0, Code::Unavailable);
    assert!(cache.alive());
    redis.restart();
    // Each refused watch waits up to 2 s for the subscription on the server's side: no busy loop.
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut watch = loop {
        match c.watch_publish(&[k], false).await {
            Ok(w) => break w,
            Err(e) => assert!(e.code() == Some(Code::Unavailable) && Instant::now() < deadline, "{e}"),
        }
    };
    assert_eq!(next(&mut watch, Duration::from_secs(5)).await, PublishEvent::Subscribed);
    c.put(&k, envelope_of(&k, 100)).await.unwrap();
    assert_eq!(next(&mut watch, Duration::from_secs(5)).await, PublishEvent::Published(k));
    cache.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_round_trip() {
    let tls = kiln_tests::tls::TestCert::localhost();
    let redis = RedisServer::start();
    let mut options = CacheOptions::new(vec![redis.url()]);
    options.tls = Some((tls.cert.clone(), tls.key.clone()));
    let cache = CacheServer::start(options);
    let c = cache.client_with(WRITE_TOKEN, ClientOptions { ca_pem: Some(tls.ca_pem.clone()), ..Default::default() });
    let k = key("tls");
    c.put(&k, envelope_of(&k, 5000)).await.unwrap();
    assert!(matches!(c.get(&k).await.unwrap(), Lookup::Hit(..)));
    // Without the CA the server's certificate is not trusted.
    let untrusted = cache.client(WRITE_TOKEN).get(&k).await.unwrap_err();
    assert_eq!(untrusted.code(), Some(Code::Unavailable), "{untrusted}");
    cache.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_cluster_round_trip_publish_and_lease() {
    let cluster = RedisCluster::start(3);
    let mut options = CacheOptions::new(cluster.urls());
    options.cluster = true;
    let cache = CacheServer::start(options);
    let c = cache.client(WRITE_TOKEN);
    assert_eq!(c.stats().await.unwrap().redis_mode, "cluster");
    let keys: Vec<CacheKey> = (0..8).map(|i| key(&format!("cluster {i}"))).collect();
    let mut watch = c.watch_publish(&keys, false).await.unwrap();
    assert_eq!(next(&mut watch, Duration::from_secs(5)).await, PublishEvent::Subscribed);
    let mut envelopes = Vec::new();
    for (i, k) in keys.iter().enumerate() {
        // Keys land on different masters; one of them is chunked.
        let env = envelope_of(k, if i == 3 { 2 * MIB + 1 } else { 1000 });
        c.put(k, env.clone()).await.unwrap();
        assert_eq!(next(&mut watch, Duration::from_secs(5)).await, PublishEvent::Published(*k));
        envelopes.push(env);
    }
    let got = c.batch_get(&keys).await.unwrap();
    for (i, (_, lookup)) in got.into_iter().enumerate() {
        assert_eq!(lookup.envelope(), Some(&envelopes[i][..]), "key {i}");
    }
    assert_eq!(cluster.cli(&["EXISTS", &format!("{}:2", head(&keys[3]))]), b"1");
    let mut asked = keys.clone();
    asked.push(key("cluster absent"));
    let present = c.contains(&asked).await.unwrap();
    assert_eq!(present, [vec![true; keys.len()], vec![false]].concat(), "Contains across masters");
    let graph = key("cluster graph");
    c.put_manifest(&graph, &keys).await.unwrap();
    assert_eq!(c.get_manifest(&graph).await.unwrap(), Some(keys.clone()));
    let (a, b) = (new_holder(), new_holder());
    let ttl = Duration::from_secs(10);
    assert_eq!(c.acquire_lease(&keys[0], &a, ttl).await.unwrap(), Acquired::Present, "a stored key is leased");
    let free = key("cluster unleased");
    assert_eq!(c.acquire_lease(&free, &a, ttl).await.unwrap(), Acquired::Taken);
    assert_eq!(c.acquire_lease(&free, &b, ttl).await.unwrap(), Acquired::Held);
    assert!(c.renew_lease(&free, &a, ttl).await.unwrap());
    assert!(c.release_lease(&free, &a).await.unwrap());
    cache.stop();
}
