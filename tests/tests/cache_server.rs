//! kiln-cache end to end: a real `redis-server`, a real `kiln-cache` over a real socket, and the
//! `RemoteCache` client that kilnd uses.

use kiln_cache_client::{Acquired, ClientError, ClientOptions, Lookup, PublishEvent, PublishStream, new_holder};
use kiln_proto::CacheKey;
use kiln_proto::envelope;
use kiln_proto::pb::ArtifactMeta;
use kiln_tests::http::sample;
use kiln_tests::redis::{
    CacheOptions, CacheServer, READ_TOKEN, RedisCluster, RedisServer, WRITE_TOKEN, cache_server_refuses,
};
use std::time::{Duration, Instant};
use tonic::Code;

const MIB: usize = 1 << 20;

fn key(name: &str) -> CacheKey {
    CacheKey::from_bytes(*blake3::hash(name.as_bytes()).as_bytes())
}

/// An envelope under `k` holding `n` incompressible bytes, so its size is about `n`.
fn envelope_of(k: &CacheKey, n: usize) -> Vec<u8> {
    let mut bytes = vec![0u8; n];
    blake3::Hasher::new().update(k.as_bytes()).finalize_xof().fill(&mut bytes);
    let meta = ArtifactMeta { toolchain: "nvrtc".into(), target: "sm_90".into(), ..Default::default() };
    envelope::seal(k, meta, &bytes)
}

fn start() -> (RedisServer, CacheServer) {
    let redis = RedisServer::start();
    let cache = CacheServer::start(CacheOptions::new(vec![redis.url()]));
    (redis, cache)
}

fn code(r: Result<impl std::fmt::Debug, ClientError>) -> (Code, String) {
    let e = r.expect_err("the call should have failed");
    (e.code().unwrap_or_else(|| panic!("not an RPC error: {e}")), e.to_string())
}

fn head(k: &CacheKey) -> String {
    format!("kiln:v1:{{{k}}}:a")
}

async fn next(stream: &mut PublishStream, within: Duration) -> PublishEvent {
    tokio::time::timeout(within, stream.next_event())
        .await
        .expect("no publish event in time")
        .expect("watch stream failed")
        .expect("watch stream ended")
}

/// Each answer's envelope, so answers compare without their provenance.
fn envelopes(answers: Vec<(CacheKey, Lookup)>) -> Vec<(CacheKey, Option<Vec<u8>>)> {
    answers.into_iter().map(|(k, l)| (k, l.envelope().map(<[u8]>::to_vec))).collect()
}

/// A watch event's key and envelope; panics on any other event.
fn value_of(event: PublishEvent) -> (CacheKey, Option<Vec<u8>>) {
    match event {
        PublishEvent::Value(k, lookup) => (k, lookup.envelope().map(<[u8]>::to_vec)),
        other => panic!("expected a value, got {other:?}"),
    }
}

/// Flips one byte of a Redis string at `offset`, with redis-cli.
fn corrupt(redis: &RedisServer, name: &str, offset: usize) {
    let offset = offset.to_string();
    let old = redis.cli(&["GETRANGE", name, &offset, &offset]);
    let new = if old == b"Z" { "Y" } else { "Z" };
    redis.cli(&["SETRANGE", name, &offset, new]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn put_and_get_small_and_chunked_envelopes() {
    let (redis, cache) = start();
    let c = cache.client(WRITE_TOKEN);
    let (small, big) = (key("small"), key("big"));
    let (small_env, big_env) = (envelope_of(&small, 1000), envelope_of(&big, 3 * MIB + 123));
    assert_eq!(c.get(&small).await.unwrap(), Lookup::Miss);
    c.put(&small, small_env.clone()).await.unwrap();
    c.put(&big, big_env.clone()).await.unwrap();
    assert_eq!(c.get(&small).await.unwrap().envelope(), Some(&small_env[..]));
    assert_eq!(c.get(&big).await.unwrap().envelope(), Some(&big_env[..]));
    // The big one is a head plus three 1 MiB pieces, all with the sliding TTL.
    for n in 1..=3 {
        assert_eq!(redis.cli(&["EXISTS", &format!("{}:{n}", head(&big))]), b"1", "piece {n}");
    }
    assert_eq!(redis.cli(&["EXISTS", &format!("{}:1", head(&small))]), b"0");
    // TTLs slide on read, the pieces' too.
    let piece = format!("{}:2", head(&big));
    for name in [head(&big), piece.clone()] {
        redis.cli(&["EXPIRE", &name, "100"]);
    }
    c.get(&big).await.unwrap();
    for name in [head(&big), piece] {
        let ttl: u64 = String::from_utf8(redis.cli(&["TTL", &name])).unwrap().parse().unwrap();
        assert!(ttl > 6 * 86_400, "TTL of {name}: {ttl}");
    }
    // A read-only token reads.
    let reader = cache.client(READ_TOKEN);
    assert_eq!(reader.get(&small).await.unwrap().envelope(), Some(&small_env[..]));
    let m = cache.metrics_text();
    assert_eq!(sample(&m, "kiln_server_requests_total{op=\"Put\",code=\"ok\"}"), Some(2.0));
    let out = sample(&m, "kiln_server_artifact_bytes_total{direction=\"out\"}").unwrap();
    assert_eq!(out as usize, 2 * small_env.len() + 2 * big_env.len());
    assert_eq!(sample(&m, "kiln_server_redis_up"), Some(1.0));
    let stats = c.stats().await.unwrap();
    assert!(stats.redis_up && stats.redis_mode == "standalone" && stats.requests >= 6);
    cache.stop();
}

/// Concurrent writers of one chunked key, through two replicas (so two Redis connections whose
/// commands can interleave), never leave a mix of their pieces, and readers only ever see one
/// writer's envelope whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writers_never_mix_pieces() {
    let (redis, cache) = start();
    let other = CacheServer::start(CacheOptions::new(vec![redis.url()]));
    let k = key("contended");
    let versions: Vec<Vec<u8>> = (0..3)
        .map(|v| {
            let mut bytes = vec![0u8; 4 * MIB + 1000];
            blake3::Hasher::new().update(&[v]).finalize_xof().fill(&mut bytes);
            // Blobs: a kernel's key has one right answer, and a different kernel is refused.
            let meta =
                ArtifactMeta { toolchain: "blob/race".into(), log: format!("version {v}"), ..Default::default() };
            envelope::seal(&k, meta, &bytes)
        })
        .collect();
    // One version is in place before the race, so readers have something to see however the
    // scheduler orders them (on a loaded machine they could otherwise all finish first).
    cache.client(WRITE_TOKEN).put(&k, versions[0].clone()).await.unwrap();
    let mut tasks = tokio::task::JoinSet::new();
    for (i, v) in versions.iter().cloned().enumerate() {
        let c = [&cache, &other][i % 2].client(WRITE_TOKEN);
        tasks.spawn(async move {
            for _ in 0..6 {
                c.put(&k, v.clone()).await.unwrap();
            }
            0
        });
    }
    for i in 0..3 {
        let (c, versions) = ([&cache, &other][i % 2].client(READ_TOKEN), versions.clone());
        tasks.spawn(async move {
            let mut hits = 0;
            for _ in 0..8 {
                match c.get(&k).await.unwrap() {
                    Lookup::Hit(env, _) => {
                        assert!(versions.contains(&env), "a reader got a mixed envelope");
                        hits += 1;
                    }
                    Lookup::Miss => {}
                    Lookup::Negative(n) => panic!("negative entry {n:?}"),
                }
            }
            hits
        });
    }
    let mut hits = 0;
    while let Some(done) = tasks.join_next().await {
        hits += done.unwrap();
    }
    assert!(hits > 0, "no reader ever saw the artifact");
    assert!(versions.contains(&match cache.client(READ_TOKEN).get(&k).await.unwrap() {
        Lookup::Hit(env, _) => env,
        other => panic!("{other:?}"),
    }));
    for server in [&cache, &other] {
        assert_eq!(sample(&server.metrics_text(), "kiln_server_integrity_failures_total"), Some(0.0));
    }
    cache.stop();
    other.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_are_invalid_argument_naming_the_field() {
    let (_redis, cache) = start();
    let c = cache.client(WRITE_TOKEN);
    let k = key("k");
    let mut bad = envelope_of(&k, 500);
    bad[100] ^= 1;
    let (c1, msg) = code(c.put(&k, bad).await);
    assert_eq!(c1, Code::InvalidArgument);
    assert!(msg.contains("envelope: digest mismatch"), "{msg}");
    // A valid envelope under another key.
    let (c2, msg) = code(c.put(&key("other"), envelope_of(&k, 500)).await);
    assert_eq!(c2, Code::InvalidArgument);
    assert!(msg.contains("envelope: envelope holds key"), "{msg}");
    // Keys that are not 64 lowercase hex, straight through the generated client.
    let mut raw = kiln_proto::pb::artifact_cache_client::ArtifactCacheClient::connect(cache.uri()).await.unwrap();
    for bad_key in ["", "ABCD", &"AB".repeat(32), "../../etc/passwd"] {
        let mut req = tonic::Request::new(kiln_proto::pb::CacheGetRequest { key: bad_key.into() });
        req.metadata_mut().insert("authorization", format!("Bearer {WRITE_TOKEN}").parse().unwrap());
        let status = raw.get(req).await.unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument, "{bad_key}");
        assert!(status.message().starts_with("key:"), "{}", status.message());
    }
    let mut req =
        tonic::Request::new(kiln_proto::pb::CachePutRequest { key: k.to_hex(), entry: None, ..Default::default() });
    req.metadata_mut().insert("authorization", format!("Bearer {WRITE_TOKEN}").parse().unwrap());
    assert_eq!(raw.put(req).await.unwrap_err().message(), "entry: missing");
    let (c3, msg) = code(c.acquire_lease(&k, "short", Duration::from_secs(1)).await);
    assert!(c3 == Code::InvalidArgument && msg.contains("holder"), "{msg}");
    let (c4, msg) = code(c.acquire_lease(&k, &new_holder(), Duration::from_millis(5)).await);
    assert!(c4 == Code::InvalidArgument && msg.contains("ttl_ms"), "{msg}");
    let (c5, msg) = code(c.put_negative(&k, "log", 1, Duration::from_secs(86_400)).await);
    assert!(c5 == Code::InvalidArgument && msg.contains("negative_ttl_ms"), "{msg}");
    let m = cache.metrics_text();
    assert_eq!(sample(&m, "kiln_server_requests_total{op=\"Put\",code=\"invalid_argument\"}"), Some(4.0));
    cache.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversize_envelopes_are_refused() {
    let redis = RedisServer::start();
    let mut options = CacheOptions::new(vec![redis.url()]);
    options.config = "max_artifact_mb = 1\n".into();
    let cache = CacheServer::start(options);
    let c = cache.client(WRITE_TOKEN);
    let k = key("huge");
    let (c1, msg) = code(c.put(&k, envelope_of(&k, 2 * MIB)).await);
    assert!(c1 == Code::InvalidArgument && msg.contains("envelope:") && msg.contains("limit"), "{msg}");
    cache.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_get_answers_in_order_with_misses_and_negatives() {
    let (_redis, cache) = start();
    let c = cache.client(WRITE_TOKEN);
    // More keys than kiln-cache reads in one pipelined round trip, so answers from several
    // chunks must come back in order; key 9 is stored in pieces (over 1 MiB).
    let keys: Vec<CacheKey> = (0..21).map(|i| key(&format!("batch {i}"))).collect();
    let size = |i: usize| if i == 9 { 3 << 20 } else { 2000 };
    let envelopes: Vec<Vec<u8>> = keys.iter().enumerate().map(|(i, k)| envelope_of(k, size(i))).collect();
    let stored = [0, 2, 5, 8, 9, 15, 20];
    for i in stored {
        c.put(&keys[i], envelopes[i].clone()).await.unwrap();
    }
    for i in [3, 17] {
        c.put_negative(&keys[i], "error: expected ';'", 1234, Duration::from_secs(30)).await.unwrap();
    }
    let got = c.batch_get(&keys).await.unwrap();
    assert_eq!(got.iter().map(|(k, _)| *k).collect::<Vec<_>>(), keys);
    for (i, (_, lookup)) in got.iter().enumerate() {
        match i {
            _ if stored.contains(&i) => assert_eq!(lookup.envelope(), Some(&envelopes[i][..]), "key {i}"),
            3 | 17 => match lookup {
                Lookup::Negative(n) => assert!(n.log.contains("expected ';'") && n.compile_micros == 1234),
                other => panic!("key {i}: {other:?}"),
            },
            _ => assert_eq!(lookup, &Lookup::Miss, "key {i}"),
        }
    }
    // An artifact put later replaces the negative entry.
    c.put(&keys[3], envelopes[3].clone()).await.unwrap();
    assert_eq!(c.get(&keys[3]).await.unwrap().envelope(), Some(&envelopes[3][..]));
    assert!(c.batch_get(&[]).await.unwrap().is_empty());
    cache.stop();
}

/// BatchGet keeps what it read for `hot_values_ms`: a fleet restart's thousand reads of one file
/// reach Redis once per replica. A Put through the replica replaces its copy at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_get_serves_recent_values_from_memory_and_puts_replace_them() {
    let redis = RedisServer::start();
    let mut options = CacheOptions::new(vec![redis.url()]);
    options.config = "hot_values_ms = 1500\n".into();
    let cache = CacheServer::start(options);
    let c = cache.client(WRITE_TOKEN);
    let (k, big) = (key("hot"), key("hot and big"));
    let (first, second, chunked) = (envelope_of(&k, 1000), envelope_of(&k, 1200), envelope_of(&big, 2 * MIB + 9));
    c.put(&k, first.clone()).await.unwrap();
    c.put(&big, chunked.clone()).await.unwrap();
    let both = [k, big];
    let hits = |a: &[u8], b: &[u8]| vec![(k, Some(a.to_vec())), (big, Some(b.to_vec()))];
    assert_eq!(envelopes(c.batch_get(&both).await.unwrap()), hits(&first, &chunked));
    // Gone from Redis, still served from memory, verified when it was read.
    redis.cli(&["DEL", &head(&k), &head(&big), &format!("{}:1", head(&big)), &format!("{}:2", head(&big))]);
    assert_eq!(envelopes(c.batch_get(&both).await.unwrap()), hits(&first, &chunked));
    // Get always reads Redis: entries that change (a job's snapshot manifest) go through it.
    assert_eq!(c.get(&k).await.unwrap(), Lookup::Miss);
    // A Put through this replica replaces the kept copy at once.
    c.put(&k, second.clone()).await.unwrap();
    assert_eq!(envelopes(c.batch_get(&[k]).await.unwrap()), vec![(k, Some(second))]);
    // Past its lifetime a value is read from Redis again.
    tokio::time::sleep(Duration::from_millis(1700)).await;
    assert_eq!(envelopes(c.batch_get(&[big]).await.unwrap()), vec![(big, None)]);
    cache.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manifests_round_trip() {
    let (_redis, cache) = start();
    let c = cache.client(WRITE_TOKEN);
    let graph = key("graph");
    let kernels = vec![key("a"), key("b"), key("a")];
    assert_eq!(c.get_manifest(&graph).await.unwrap(), None);
    c.put_manifest(&graph, &kernels).await.unwrap();
    assert_eq!(c.get_manifest(&graph).await.unwrap(), Some(kernels));
    c.put_manifest(&graph, &[]).await.unwrap();
    assert_eq!(c.get_manifest(&graph).await.unwrap(), Some(vec![]));
    let (c1, _) = code(cache.client(READ_TOKEN).put_manifest(&graph, &[key("x")]).await);
    assert_eq!(c1, Code::PermissionDenied);
    cache.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_belong_to_their_holder_and_expire() {
    let (redis, cache) = start();
    let c = cache.client(WRITE_TOKEN);
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
    c.put_negative(&failed, "boom", 1, Duration::from_secs(10)).await.unwrap();
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
    let (_redis, cache) = start();
    let c = cache.client(WRITE_TOKEN);
    let (there, later, failed, released) = (key("v there"), key("v later"), key("v failed"), key("v released"));
    let env = envelope_of(&there, 100);
    c.put(&there, env.clone()).await.unwrap();
    let mut watch = cache.client(READ_TOKEN).watch_publish(&[there, later, failed, released], true).await.unwrap();
    assert_eq!(next(&mut watch, Duration::from_secs(5)).await, PublishEvent::Subscribed);
    assert_eq!(value_of(next(&mut watch, Duration::from_secs(5)).await), (there, Some(env)));
    let env = envelope_of(&later, 2 * MIB + 1);
    c.put(&later, env.clone()).await.unwrap();
    assert_eq!(value_of(next(&mut watch, Duration::from_secs(5)).await), (later, Some(env)));
    c.put_negative(&failed, "boom", 7, Duration::from_secs(10)).await.unwrap();
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
    let (_redis, cache) = start();
    let c = cache.client(WRITE_TOKEN);
    let (k, other, failed) = (key("watched"), key("unwatched"), key("failed"));
    let mut watch = cache.client(READ_TOKEN).watch_publish(&[k, failed], false).await.unwrap();
    assert_eq!(next(&mut watch, Duration::from_secs(5)).await, PublishEvent::Subscribed);
    c.put(&other, envelope_of(&other, 100)).await.unwrap();
    c.put(&k, envelope_of(&k, 100)).await.unwrap();
    assert_eq!(next(&mut watch, Duration::from_secs(5)).await, PublishEvent::Published(k));
    c.put_negative(&failed, "boom", 1, Duration::from_secs(10)).await.unwrap();
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_are_required_and_read_only_tokens_cannot_write() {
    let (_redis, cache) = start();
    let k = key("auth");
    let env = envelope_of(&k, 100);
    for token in ["", "not-a-configured-token-at-all"] {
        let (c1, msg) = code(cache.client(token).get(&k).await);
        assert_eq!(c1, Code::Unauthenticated, "{token:?}: {msg}");
        let (c2, _) = code(cache.client(token).put(&k, env.clone()).await);
        assert_eq!(c2, Code::Unauthenticated);
        assert_eq!(code(cache.client(token).watch_publish(&[k], false).await).0, Code::Unauthenticated);
    }
    let (c3, msg) = code(cache.client(READ_TOKEN).put(&k, env.clone()).await);
    assert!(c3 == Code::PermissionDenied && msg.contains("read-only"), "{msg}");
    assert_eq!(cache.client(READ_TOKEN).get(&k).await.unwrap(), Lookup::Miss);
    cache.client(WRITE_TOKEN).put(&k, env.clone()).await.unwrap();
    let m = cache.metrics_text();
    assert_eq!(sample(&m, "kiln_server_requests_total{op=\"Get\",code=\"unauthenticated\"}"), Some(2.0));
    assert_eq!(sample(&m, "kiln_server_requests_total{op=\"Put\",code=\"permission_denied\"}"), Some(1.0));
    cache.stop();
    // No tokens at all: refuses to start, and says how to fix it.
    let mut options = CacheOptions::new(vec!["redis://127.0.0.1:1".into()]);
    options.tokens.clear();
    let stderr = cache_server_refuses(options);
    assert!(stderr.contains("no tokens configured") && stderr.contains("--insecure-no-auth"), "{stderr}");
}

/// Every artifact carries who published it: the host the client named and its token's id,
/// never the token; through Get, BatchGet and a watch's values alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn artifacts_carry_their_provenance() {
    let (_redis, cache) = start();
    let writer = cache.client(WRITE_TOKEN).with_host("gpu-7.example");
    let (small, big) = (key("provenance small"), key("provenance big"));
    let before = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64;
    writer.put(&small, envelope_of(&small, 100)).await.unwrap();
    writer.put(&big, envelope_of(&big, 2 * MIB + 3)).await.unwrap();
    let token_id = kiln_proto::auth::Caller::of(WRITE_TOKEN).token_id;
    let reader = cache.client(READ_TOKEN);
    let mut seen = vec![reader.get(&small).await.unwrap()];
    seen.extend(reader.batch_get(&[small, big]).await.unwrap().into_iter().map(|(_, l)| l));
    for lookup in seen {
        let Lookup::Hit(_, Some(p)) = lookup else { panic!("no provenance in {lookup:?}") };
        assert_eq!((p.host.as_str(), p.token.as_str()), ("gpu-7.example", token_id.as_str()));
        assert!(p.unix_ms >= before && !p.token.contains(WRITE_TOKEN), "{p:?}");
    }
    let (c, msg) = code(cache.client(WRITE_TOKEN).with_host("no spaces").put(&small, envelope_of(&small, 10)).await);
    assert!(c == Code::InvalidArgument && msg.contains("publisher_host"), "{msg}");
}

/// An auditor's report takes the bytes out of service while the key still holds them, keeps
/// them aside with the record, lists the record, names the publisher in a metric, and refuses
/// the same bytes published again, while other bytes under the key are accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quarantine_takes_bad_bytes_out_of_service_and_keeps_them_out() {
    let (redis, cache) = start();
    let bad = cache.client(WRITE_TOKEN).with_host("bad-host");
    let auditor = cache.client(WRITE_TOKEN).with_host("auditor");
    let (k, big) = (key("quarantine"), key("quarantine big"));
    let (wrong, right) = (envelope_of(&k, 500), envelope::seal(&k, ArtifactMeta::default(), b"the right bytes"));
    bad.put(&k, wrong.clone()).await.unwrap();
    let big_env = envelope_of(&big, 2 * MIB + 5);
    bad.put(&big, big_env.clone()).await.unwrap();
    let audited = blake3::hash(b"what the auditor compiled");
    // A report about bytes the key does not hold changes nothing.
    let stale = auditor.quarantine(&k, &blake3::hash(b"other"), &audited, "differs").await.unwrap();
    assert!(!stale.quarantined);
    assert!(auditor.get(&k).await.unwrap().envelope().is_some());
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64;
    let done = auditor.quarantine(&k, &blake3::hash(&wrong), &audited, "cubin differs at byte 9").await.unwrap();
    assert!(done.quarantined, "{done:?}");
    let record = done.record.unwrap();
    assert_eq!(record.publisher.as_ref().map(|p| p.host.as_str()), Some("bad-host"));
    assert_eq!((record.reporter_host.as_str(), record.detail.as_str()), ("auditor", "cubin differs at byte 9"));
    assert_eq!(auditor.get(&k).await.unwrap(), Lookup::Miss, "quarantined bytes are not served");
    assert_eq!(redis.cli(&["EXISTS", &format!("kiln:v1:{{{k}}}:qa")]), b"1", "kept as evidence");
    // Twice: nothing more happens.
    assert!(!auditor.quarantine(&k, &blake3::hash(&wrong), &audited, "again").await.unwrap().quarantined);
    // A chunked artifact moves whole.
    assert!(auditor.quarantine(&big, &blake3::hash(&big_env), &audited, "").await.unwrap().quarantined);
    assert_eq!(auditor.get(&big).await.unwrap(), Lookup::Miss);
    assert_eq!(redis.cli(&["EXISTS", &format!("kiln:v1:{{{big}}}:qa:2")]), b"1");
    let listed = auditor.list_quarantine(since, 0).await.unwrap();
    let keys: Vec<&str> = listed.records.iter().map(|r| r.key.as_str()).collect();
    assert_eq!(keys, [k.to_hex(), big.to_hex()], "oldest first");
    assert!(!listed.more);
    assert!(auditor.list_quarantine(since, 1).await.unwrap().more);
    assert!(auditor.list_quarantine(u64::MAX / 2, 0).await.unwrap().records.is_empty());
    // The same bytes again: refused, naming the record. Other bytes: taken.
    let (c, msg) = code(bad.put(&k, wrong.clone()).await);
    assert!(c == Code::FailedPrecondition && msg.contains("quarantined") && msg.contains("bad-host"), "{msg}");
    auditor.put(&k, right.clone()).await.unwrap();
    assert_eq!(auditor.get(&k).await.unwrap().envelope(), Some(&right[..]));
    let m = cache.metrics_text();
    assert_eq!(sample(&m, "kiln_server_quarantines_total{publisher=\"bad-host\"}"), Some(2.0));
    assert_eq!(sample(&m, "kiln_server_quarantined_puts_total"), Some(1.0));
    // Read-only tokens cannot quarantine; bad fields are named.
    let (c, _) = code(cache.client(READ_TOKEN).with_host("r").quarantine(&k, &audited, &audited, "").await);
    assert_eq!(c, Code::PermissionDenied);
    let (c, msg) = code(cache.client(WRITE_TOKEN).quarantine(&k, &audited, &audited, "").await);
    assert!(c == Code::InvalidArgument && msg.contains("reporter_host"), "{msg}");
    let (c, msg) = code(auditor.list_quarantine(0, 5000).await);
    assert!(c == Code::InvalidArgument && msg.contains("limit"), "{msg}");
}

/// A kernel's key has one right answer. A Put of a different kernel under a held key is refused
/// (FAILED_PRECONDITION naming the key) and recorded with both writers and digests, counted by
/// the offering token, and the held artifact is served on, marked disputed. The same artifact
/// again, with another compile time, is no conflict: it renews the held one's lifetime and keeps
/// its publisher. A blob's other bytes replace it as before, and are recorded. A newer version
/// of one of kiln's own changing records (a recipe book) is an update, recorded nowhere; one
/// labelled so cannot replace a kernel, nor a blob unrecorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conflicting_kernel_puts_are_refused_and_recorded() {
    let (redis, cache) = start();
    let honest = cache.client(WRITE_TOKEN).with_host("gpu-1");
    let rogue = cache.client(WRITE_TOKEN).with_host("rogue");
    for (k, size) in [(key("conflict"), 3000), (key("conflict chunked"), 2 * MIB + 5)] {
        let held = envelope_of(&k, size);
        honest.put(&k, held.clone()).await.unwrap();
        let artifact = envelope::open(&held, &k, u64::MAX).unwrap();
        // An honest recompile: other compile time and log, the same launch.
        let meta = ArtifactMeta { compile_micros: 12_345, log: "another host's log".into(), ..artifact.meta.clone() };
        redis.cli(&["PEXPIRE", &head(&k), "5000"]);
        rogue.put(&k, envelope::seal(&k, meta, &artifact.bytes)).await.unwrap();
        let ttl: u64 = String::from_utf8_lossy(&redis.cli(&["PTTL", &head(&k)])).trim().parse().unwrap();
        assert!(ttl > 5000, "a re-publish renews the lifetime: {ttl} ms left");
        let Lookup::Hit(served, Some(p)) = honest.get(&k).await.unwrap() else { panic!("held artifact gone") };
        assert_eq!((served == held, p.host.as_str(), p.disputed), (true, "gpu-1", false), "the first publish kept");
        // Other bytes: refused, naming the key; the held bytes are served on, disputed.
        let mut wrong = artifact.bytes.to_vec();
        wrong[size / 2] ^= 1;
        let (c, msg) = code(rogue.put(&k, envelope::seal(&k, artifact.meta.clone(), &wrong)).await);
        assert!(c == Code::FailedPrecondition && msg.contains(&k.to_hex()) && msg.contains("gpu-1"), "{msg}");
        let Lookup::Hit(served, Some(p)) = honest.get(&k).await.unwrap() else { panic!("held artifact gone") };
        assert_eq!((served == held, p.host.as_str(), p.disputed), (true, "gpu-1", true));
        let batch = honest.batch_get(&[k]).await.unwrap();
        assert!(matches!(&batch[0].1, Lookup::Hit(env, Some(p)) if *env == held && p.disputed));
    }
    // A blob: other bytes replace the held ones, recorded but not refused.
    let b = key("conflict blob");
    let blob =
        |bytes: &[u8]| envelope::seal(&b, ArtifactMeta { toolchain: "blob/test".into(), ..Default::default() }, bytes);
    honest.put(&b, blob(b"first upload")).await.unwrap();
    rogue.put(&b, blob(b"second upload")).await.unwrap();
    assert_eq!(honest.get(&b).await.unwrap().envelope(), Some(&blob(b"second upload")[..]));
    honest.put(&b, blob(b"second upload")).await.unwrap();
    // kiln's own changing records (a recipe book): a newer one from the same honest host is an
    // update, unrecorded; labelled as one over a kernel, still refused, over a blob still recorded.
    let r = key("conflict recipe book");
    let book = |toolchain: &str, bytes: &[u8]| {
        envelope::seal(&r, ArtifactMeta { toolchain: toolchain.into(), ..Default::default() }, bytes)
    };
    honest.put(&r, book("kiln/recipe-book", b"one recipe")).await.unwrap();
    honest.put(&r, book("kiln/recipe-book", b"two recipes")).await.unwrap();
    let Lookup::Hit(served, Some(p)) = honest.get(&r).await.unwrap() else { panic!("the book is gone") };
    assert_eq!((served, p.host.as_str(), p.disputed), (book("kiln/recipe-book", b"two recipes"), "gpu-1", false));
    let relabelled = |k: &CacheKey, toolchain: &str| {
        envelope::seal(k, ArtifactMeta { toolchain: toolchain.into(), ..Default::default() }, b"not a book")
    };
    let (kernel, over_blob) = (key("conflict relabelled kernel"), key("conflict relabelled blob"));
    honest.put(&kernel, envelope_of(&kernel, 3000)).await.unwrap();
    let (c, msg) = code(rogue.put(&kernel, relabelled(&kernel, "kiln/recipe-book")).await);
    assert!(c == Code::FailedPrecondition && msg.contains("toolchain"), "{msg}");
    honest.put(&over_blob, relabelled(&over_blob, "blob/test")).await.unwrap();
    rogue.put(&over_blob, relabelled(&over_blob, "kiln/recipe-book")).await.unwrap();

    let conflicts = honest.list_conflicts(0, 0).await.unwrap();
    assert!(conflicts.records.is_empty() && !conflicts.more);
    let listed: Vec<(&str, bool)> = conflicts.conflicts.iter().map(|c| (c.key.as_str(), c.refused)).collect();
    let (k, chunked) = (key("conflict").to_hex(), key("conflict chunked").to_hex());
    let (b, kernel, over_blob) = (b.to_hex(), kernel.to_hex(), over_blob.to_hex());
    let expected = [(&k, true), (&chunked, true), (&b, false), (&kernel, true), (&over_blob, false)];
    let expected: Vec<(&str, bool)> = expected.iter().map(|(k, refused)| (k.as_str(), *refused)).collect();
    assert_eq!(listed, expected, "oldest first, and no recipe book");
    let first = &conflicts.conflicts[0];
    let hosts = |c: &kiln_proto::pb::ConflictRecord| {
        (c.held.clone().unwrap_or_default().host, c.offered.clone().unwrap_or_default().host)
    };
    assert_eq!(hosts(first), ("gpu-1".to_owned(), "rogue".to_owned()));
    assert!(first.detail.starts_with("cubin: 3000 bytes held, 3000 offered"), "{}", first.detail);
    assert_ne!(first.held_digest, first.offered_digest);
    let token_id = kiln_proto::auth::Caller::of(WRITE_TOKEN).token_id;
    assert_eq!(first.offered.as_ref().map(|p| p.token.as_str()), Some(token_id.as_str()));
    assert!(honest.list_quarantine(0, 0).await.unwrap().records.is_empty(), "a conflict is no quarantine");
    let m = cache.metrics_text();
    let counted = |outcome| {
        sample(&m, &format!("kiln_server_conflicting_puts_total{{publisher=\"{token_id}\",outcome=\"{outcome}\"}}"))
    };
    assert_eq!((counted("refused"), counted("replaced")), (Some(3.0), Some(2.0)));
    let status = kiln_tests::http::get(cache.metrics, "/status.json").unwrap();
    let status: serde_json::Value = serde_json::from_str(&status).unwrap();
    assert_eq!(status["conflicts"].as_array().map(Vec::len), Some(5), "{status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn damaged_or_misplaced_values_are_deleted_counted_and_missed() {
    let (redis, cache) = start();
    let c = cache.client(WRITE_TOKEN);
    let (small, big, source, copy) = (key("small"), key("big"), key("source"), key("copy"));
    c.put(&small, envelope_of(&small, 1000)).await.unwrap();
    c.put(&big, envelope_of(&big, 2 * MIB + 500)).await.unwrap();
    c.put(&source, envelope_of(&source, 1000)).await.unwrap();
    // A flipped byte in a head, one in a piece, and a valid head copied under another key.
    let len: usize = String::from_utf8(redis.cli(&["STRLEN", &head(&small)])).unwrap().parse().unwrap();
    corrupt(&redis, &head(&small), len - 40);
    corrupt(&redis, &format!("{}:2", head(&big)), 100);
    redis.cli(&["COPY", &head(&source), &head(&copy)]);
    for k in [small, big, copy] {
        assert_eq!(c.get(&k).await.unwrap(), Lookup::Miss, "{k}");
        assert_eq!(redis.cli(&["EXISTS", &head(&k)]), b"0", "{k} was not deleted");
    }
    assert_eq!(redis.cli(&["EXISTS", &format!("{}:1", head(&big))]), b"0");
    assert!(matches!(c.get(&source).await.unwrap(), Lookup::Hit(..)));
    // A value that is not a kiln head at all.
    let junk = key("junk");
    redis.cli(&["SET", &head(&junk), "not an envelope"]);
    assert_eq!(c.batch_get(&[junk]).await.unwrap(), vec![(junk, Lookup::Miss)]);
    let m = cache.metrics_text();
    assert_eq!(sample(&m, "kiln_server_integrity_failures_total"), Some(4.0));
    // Contains sees what the reads left (every damaged value is gone), in order.
    assert_eq!(c.contains(&[small, source, junk, copy]).await.unwrap(), [false, true, false, false]);
    // Repaired by the next put.
    c.put(&small, envelope_of(&small, 1000)).await.unwrap();
    assert!(matches!(c.get(&small).await.unwrap(), Lookup::Hit(..)));
    cache.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_outage_is_unavailable_and_recovers_without_a_restart() {
    let (mut redis, mut cache) = start();
    let c = cache.client(WRITE_TOKEN);
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
    let (redis, a) = start();
    let b = CacheServer::start(CacheOptions::new(vec![redis.url()]));
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
