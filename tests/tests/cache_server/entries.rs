//! The entries under keys: small and chunked envelopes put and read back (by Get, BatchGet and
//! Contains), concurrent writers, the requests refused before Redis, BatchGet's recent values,
//! graph manifests, and damaged values deleted and answered as misses.

use crate::common::{
    MIB, code, corrupt, envelope_of, envelopes, failed_compile, head, key, start_replicas, start_writing,
    start_writing_with,
};
use kiln_cache_client::{Lookup, new_holder};
use kiln_proto::CacheKey;
use kiln_proto::envelope;
use kiln_proto::pb::ArtifactMeta;
use kiln_tests::http::sample;
use kiln_tests::redis::{READ_TOKEN, WRITE_TOKEN};
use std::time::Duration;
use tonic::Code;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn put_and_get_small_and_chunked_envelopes() {
    let (redis, cache, c) = start_writing();
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
    let (_redis, cache, other) = start_replicas();
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
    let (_redis, cache, c) = start_writing();
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
    let (c5, msg) = code(c.put_negative(&k, failed_compile("log", 1), Duration::from_secs(86_400)).await);
    assert!(c5 == Code::InvalidArgument && msg.contains("negative_ttl_ms"), "{msg}");
    let m = cache.metrics_text();
    assert_eq!(sample(&m, "kiln_server_requests_total{op=\"Put\",code=\"invalid_argument\"}"), Some(4.0));
    cache.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversize_envelopes_are_refused() {
    let (_redis, cache, c) = start_writing_with("max_artifact_mb = 1\n");
    let k = key("huge");
    let (c1, msg) = code(c.put(&k, envelope_of(&k, 2 * MIB)).await);
    assert!(c1 == Code::InvalidArgument && msg.contains("envelope:") && msg.contains("limit"), "{msg}");
    cache.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_get_answers_in_order_with_misses_and_negatives() {
    let (_redis, cache, c) = start_writing();
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
        c.put_negative(&keys[i], failed_compile("error: expected ';'", 1234), Duration::from_secs(30)).await.unwrap();
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
    let (redis, cache, c) = start_writing_with("hot_values_ms = 1500\n");
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
    let (_redis, cache, c) = start_writing();
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
async fn damaged_or_misplaced_values_are_deleted_counted_and_missed() {
    let (redis, cache, c) = start_writing();
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
