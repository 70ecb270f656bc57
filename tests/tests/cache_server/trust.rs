//! Whom kiln-cache trusts with what: tokens (read-only ones cannot write), each artifact's
//! provenance, an auditor's quarantine of bad bytes, and conflicting puts refused and recorded.

use crate::common::{MIB, code, envelope_of, head, key, start, start_writers};
use kiln_cache_client::{Difference, Lookup};
use kiln_proto::CacheKey;
use kiln_proto::envelope;
use kiln_proto::pb::ArtifactMeta;
use kiln_tests::http::sample;
use kiln_tests::redis::{CacheOptions, READ_TOKEN, WRITE_TOKEN, cache_server_refuses};
use tonic::Code;

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
    let (_redis, cache, [writer]) = start_writers(["gpu-7.example"]);
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
    let (redis, cache, [bad, auditor]) = start_writers(["bad-host", "auditor"]);
    let (k, big) = (key("quarantine"), key("quarantine big"));
    let (wrong, right) = (envelope_of(&k, 500), envelope::seal(&k, ArtifactMeta::default(), b"the right bytes"));
    bad.put(&k, wrong.clone()).await.unwrap();
    let big_env = envelope_of(&big, 2 * MIB + 5);
    bad.put(&big, big_env.clone()).await.unwrap();
    let audited = blake3::hash(b"what the auditor compiled");
    // A report about bytes the key does not hold changes nothing.
    let stale = auditor
        .quarantine(&k, Difference { served: &blake3::hash(b"other"), audited: &audited, detail: "differs" })
        .await
        .unwrap();
    assert!(!stale.quarantined);
    assert!(auditor.get(&k).await.unwrap().envelope().is_some());
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64;
    let done = auditor
        .quarantine(
            &k,
            Difference { served: &blake3::hash(&wrong), audited: &audited, detail: "cubin differs at byte 9" },
        )
        .await
        .unwrap();
    assert!(done.quarantined, "{done:?}");
    let record = done.record.unwrap();
    assert_eq!(record.publisher.as_ref().map(|p| p.host.as_str()), Some("bad-host"));
    assert_eq!((record.reporter_host.as_str(), record.detail.as_str()), ("auditor", "cubin differs at byte 9"));
    assert_eq!(auditor.get(&k).await.unwrap(), Lookup::Miss, "quarantined bytes are not served");
    assert_eq!(redis.cli(&["EXISTS", &format!("kiln:v1:{{{k}}}:qa")]), b"1", "kept as evidence");
    // Twice: nothing more happens.
    assert!(
        !auditor
            .quarantine(&k, Difference { served: &blake3::hash(&wrong), audited: &audited, detail: "again" })
            .await
            .unwrap()
            .quarantined
    );
    // A chunked artifact moves whole.
    assert!(
        auditor
            .quarantine(&big, Difference { served: &blake3::hash(&big_env), audited: &audited, detail: "" })
            .await
            .unwrap()
            .quarantined
    );
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
    let (c, _) = code(
        cache
            .client(READ_TOKEN)
            .with_host("r")
            .quarantine(&k, Difference { served: &audited, audited: &audited, detail: "" })
            .await,
    );
    assert_eq!(c, Code::PermissionDenied);
    let (c, msg) = code(
        cache.client(WRITE_TOKEN).quarantine(&k, Difference { served: &audited, audited: &audited, detail: "" }).await,
    );
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
    let (redis, cache, [honest, rogue]) = start_writers(["gpu-1", "rogue"]);
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

/// A second read-write token, for an auditor other than the writer.
const OTHER_WRITE_TOKEN: &str = "test-other-write-token-0123456789";

/// A kiln-cache taking [`WRITE_TOKEN`] and [`OTHER_WRITE_TOKEN`], with `config`.
fn two_writers(config: &str) -> (kiln_tests::redis::RedisServer, kiln_tests::redis::CacheServer) {
    let redis = kiln_tests::redis::RedisServer::start();
    let mut options = CacheOptions { config: config.into(), ..CacheOptions::new(vec![redis.url()]) };
    options.tokens.push(format!("write:{OTHER_WRITE_TOKEN}"));
    let cache = kiln_tests::redis::CacheServer::start(options);
    (redis, cache)
}

/// Whether kiln-cache answers `k` with a vetted publisher.
async fn vetted(cache: &kiln_tests::redis::CacheServer, k: &CacheKey) -> bool {
    match cache.client(READ_TOKEN).get(k).await.expect("kiln-cache answers") {
        Lookup::Hit(_, Some(p)) => p.vetted,
        other => panic!("no artifact under {k}: {other:?}"),
    }
}

/// A publisher is vetted for the fleet once another token vouches for bytes the key holds; never
/// by its own token, nor once any of its bytes is quarantined.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vouches_vet_a_publisher_until_a_quarantine_distrusts_it() {
    let (_redis, cache) = two_writers("");
    let writer = cache.client(WRITE_TOKEN).with_host("gpu-1");
    let auditor = cache.client(OTHER_WRITE_TOKEN).with_host("gpu-2");
    let (k, k2) = (key("vouched"), key("vouched too"));
    let (env, env2) = (envelope_of(&k, 300), envelope_of(&k2, 300));
    writer.put(&k, env.clone()).await.unwrap();
    writer.put(&k2, env2.clone()).await.unwrap();
    assert!(!vetted(&cache, &k).await);
    let own = writer.vouch(&k, &blake3::hash(&env)).await.unwrap();
    assert!(!own.vetted && own.refused.contains("own token"), "{own:?}");
    let stale = auditor.vouch(&k, &blake3::hash(b"other bytes")).await.unwrap();
    assert!(!stale.vetted && stale.publisher.is_none(), "{stale:?}");
    let (c, msg) = code(auditor.with_host("no spaces").vouch(&k, &blake3::hash(&env)).await);
    assert!(c == Code::InvalidArgument && msg.contains("reporter_host"), "{msg}");
    let vouched = cache.client(OTHER_WRITE_TOKEN).with_host("gpu-2").vouch(&k, &blake3::hash(&env)).await.unwrap();
    assert!(vouched.vetted, "{vouched:?}");
    assert!(vetted(&cache, &k).await && vetted(&cache, &k2).await, "every artifact of the publisher");
    // Found wrong once: distrusted for the fleet, and no vouch vets it again.
    let q = cache.client(OTHER_WRITE_TOKEN).with_host("gpu-2");
    assert!(
        q.quarantine(
            &k2,
            Difference { served: &blake3::hash(&env2), audited: &blake3::hash(b"right"), detail: "differs" }
        )
        .await
        .unwrap()
        .quarantined
    );
    assert!(!vetted(&cache, &k).await, "its other keys are unvetted again");
    let again = q.vouch(&k, &blake3::hash(&env)).await.unwrap();
    assert!(!again.vetted && again.refused.contains("quarantined"), "{again:?}");
}

/// Under `vet = "trusted-writers"`, a kernel put by a token not listed is refused with
/// PERMISSION_DENIED naming the field; a listed token's kernels are taken and vetted, and
/// anyone's blobs are still taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trusted_writers_alone_publish_kernels() {
    let trusted = kiln_proto::auth::Caller::of(OTHER_WRITE_TOKEN).token_id;
    let (_redis, cache) = two_writers(&format!("vet = \"trusted-writers\"\ntrusted_writers = [\"{trusted}\"]\n"));
    let k = key("trusted writers");
    let (c, msg) = code(cache.client(WRITE_TOKEN).put(&k, envelope_of(&k, 100)).await);
    assert!(c == Code::PermissionDenied && msg.contains("trusted_writers"), "{msg}");
    cache.client(OTHER_WRITE_TOKEN).put(&k, envelope_of(&k, 100)).await.unwrap();
    assert!(vetted(&cache, &k).await, "a trusted writer is vetted");
    let blob = key("a blob");
    let meta = ArtifactMeta { toolchain: "blob/triton".into(), ..Default::default() };
    cache.client(WRITE_TOKEN).put(&blob, envelope::seal(&blob, meta, b"blob bytes")).await.unwrap();
    let text = cache.metrics_text();
    assert_eq!(sample(&text, "kiln_server_requests_total{op=\"Put\",code=\"permission_denied\"}"), Some(1.0));
}
