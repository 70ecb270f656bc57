//! Named blobs (`kiln.v1.Blobs`) against real kilnd processes, and in the fleet tests a real
//! kiln-cache over a real redis-server: tiers, groups, validation, and leases that live exactly
//! as long as the holder's stream.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use kiln_client::Transport;
use kiln_proto::pb::{
    self, BlobFile, BlobScope, GetBlobsRequest, LeaseBlobRequest, PutBlobRequest, Tier, blobs_client::BlobsClient,
    lease_blob_event::Kind,
};
use kiln_tests::daemon::{Daemon, Options};
use kiln_tests::http::sample;
use kiln_tests::redis::fleet;
use std::time::{Duration, Instant};
use tonic::Code;

/// No Triton or CUDA compile runs in this file; the daemons still need their toolchains to start.
fn daemon() -> Daemon {
    Daemon::start(Options::default())
}

async fn blobs(d: &Daemon) -> BlobsClient<Transport> {
    BlobsClient::new(d.client().await.channel())
}

fn scope(namespace: &str, version: &str) -> Option<BlobScope> {
    Some(BlobScope { namespace: namespace.into(), tool_version: version.into() })
}

fn files(pairs: &[(&str, &[u8])]) -> Vec<BlobFile> {
    pairs.iter().map(|(n, d)| BlobFile { name: (*n).into(), data: d.to_vec() }).collect()
}

async fn put(c: &mut BlobsClient<Transport>, ns: &str, key: &[u8], f: Vec<BlobFile>) {
    let req = PutBlobRequest { scope: scope(ns, "3.6.0"), key: key.to_vec(), files: f };
    c.put_blob(req).await.unwrap();
}

async fn get(c: &mut BlobsClient<Transport>, ns: &str, version: &str, keys: &[&[u8]]) -> Vec<pb::BlobEntry> {
    let req = GetBlobsRequest { scope: scope(ns, version), keys: keys.iter().map(|k| k.to_vec()).collect() };
    c.get_blobs(req).await.unwrap().into_inner().entries
}

/// Opens a lease stream and returns it with its first event.
async fn lease(
    c: &mut BlobsClient<Transport>,
    key: &[u8],
    wait_ms: u32,
    hold_ms: u32,
) -> (tonic::Streaming<pb::LeaseBlobEvent>, pb::LeaseBlobEvent) {
    let req = LeaseBlobRequest { scope: scope("triton", "3.6.0"), key: key.to_vec(), wait_ms, hold_ms };
    let mut stream = c.lease_blob(req).await.unwrap().into_inner();
    let first = stream.message().await.unwrap().expect("a first event");
    (stream, first)
}

fn kind(e: &pb::LeaseBlobEvent) -> Kind {
    Kind::try_from(e.kind).unwrap()
}

/// Drops `held`, the lease of `key`, while `waiter` waits for it (holding it `hold_ms` once
/// granted), and returns the waiter's lease, which must be granted within `within` of the drop.
async fn handed_over(
    held: tonic::Streaming<pb::LeaseBlobEvent>,
    mut waiter: BlobsClient<Transport>,
    key: &'static [u8],
    hold_ms: u32,
    within: Duration,
) -> tonic::Streaming<pb::LeaseBlobEvent> {
    let waiting = tokio::spawn(async move { lease(&mut waiter, key, 30_000, hold_ms).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let dropped = Instant::now();
    drop(held);
    let (granted, first) = waiting.await.unwrap();
    assert_eq!(kind(&first), Kind::Granted, "{first:?}");
    assert!(dropped.elapsed() < within, "took {:?}", dropped.elapsed());
    granted
}

#[tokio::test]
async fn groups_and_single_files_round_trip_through_memory_and_disk() {
    let dir = tempfile::tempdir().unwrap();
    let group = files(&[("k.cubin", b"\x7fELF cubin"), ("k.json", b"{\"name\":\"k\"}"), ("__grp__k.json", b"{}")]);
    {
        let d = Daemon::start_in(dir.path(), Options::default());
        let mut c = blobs(&d).await;
        put(&mut c, "triton", b"K/__grp__k.json", group.clone()).await;
        put(&mut c, "triton", b"K/launcher.so", files(&[("", b"so bytes")])).await;
        let got = get(&mut c, "triton", "3.6.0", &[b"K/__grp__k.json", b"K/launcher.so", b"K/other"]).await;
        assert_eq!(got.len(), 3);
        assert!(got[0].found && got[1].found && !got[2].found);
        assert_eq!(got[0].files, group, "the group comes back whole, names and bytes in order");
        assert_eq!(got[0].tier, Tier::Memory as i32);
        assert_eq!(got[1].files, files(&[("", b"so bytes")]));
        // The same caller key under another namespace or tool version is another entry.
        assert!(!get(&mut c, "inductor", "3.6.0", &[b"K/__grp__k.json"]).await[0].found);
        assert!(!get(&mut c, "triton", "3.5.0", &[b"K/__grp__k.json"]).await[0].found);
        let text = d.metrics_text();
        assert_eq!(sample(&text, "kiln_blob_puts_total{namespace=\"triton\"}"), Some(2.0), "{text}");
        assert_eq!(
            sample(&text, "kiln_blob_lookups_total{namespace=\"triton\",tier=\"memory\",result=\"hit\"}"),
            Some(2.0)
        );
        d.stop();
    }
    let d = Daemon::start_in(dir.path(), Options::default());
    let mut c = blobs(&d).await;
    let got = get(&mut c, "triton", "3.6.0", &[b"K/__grp__k.json"]).await;
    assert_eq!(got[0].tier, Tier::Disk as i32, "a restarted daemon answers from disk");
    assert_eq!(got[0].files, group);
}

#[tokio::test]
async fn every_bad_field_is_invalid_argument_naming_it() {
    let d = daemon();
    let mut c = blobs(&d).await;
    let put_err =
        |s: Option<BlobScope>, key: &[u8], f: Vec<BlobFile>| PutBlobRequest { scope: s, key: key.to_vec(), files: f };
    let cases: Vec<(PutBlobRequest, &str)> = vec![
        (put_err(None, b"k", files(&[("", b"x")])), "scope"),
        (put_err(scope("Triton", "1"), b"k", files(&[("", b"x")])), "scope.namespace"),
        (put_err(scope("../../etc", "1"), b"k", files(&[("", b"x")])), "scope.namespace"),
        (put_err(scope("triton", ""), b"k", files(&[("", b"x")])), "scope.tool_version"),
        (put_err(scope("triton", "1"), b"", files(&[("", b"x")])), "key"),
        (put_err(scope("triton", "1"), b"k", vec![]), "files"),
        (put_err(scope("triton", "1"), b"k", files(&[("a", b"x"), ("a", b"y")])), "files[1].name"),
        (put_err(scope("triton", "1"), b"k", files(&[("", b"x"), ("b", b"y")])), "files[0].name"),
    ];
    for (req, field) in cases {
        let e = c.put_blob(req).await.unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{field}: {e:?}");
        assert!(e.message().starts_with(&format!("{field}:")), "{field}: {}", e.message());
    }
    let e = c.get_blobs(GetBlobsRequest { scope: scope("triton", "1"), keys: vec![] }).await.unwrap_err();
    assert!(e.message().starts_with("keys:"), "{}", e.message());
    let keys = vec![b"a".to_vec(), vec![0; 1025]];
    let e = c.get_blobs(GetBlobsRequest { scope: scope("triton", "1"), keys }).await.unwrap_err();
    assert!(e.message().starts_with("keys[1]:"), "{}", e.message());
    let req = LeaseBlobRequest { scope: scope("triton", "1"), key: b"k".to_vec(), wait_ms: 0, hold_ms: 4_000_000 };
    let e = c.lease_blob(req).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().starts_with("hold_ms:"), "{}", e.message());
    // A group over max_artifact_mb (1 MiB here) is refused whole.
    let d = Daemon::start(Options { config: "max_artifact_mb = 1\n".into(), ..Options::default() });
    let mut c = blobs(&d).await;
    let big = vec![
        BlobFile { name: "a".into(), data: vec![1; 600 << 10] },
        BlobFile { name: "b".into(), data: vec![2; 600 << 10] },
    ];
    let e = c.put_blob(put_err(scope("triton", "1"), b"k", big)).await.unwrap_err();
    assert!(e.message().starts_with("files:") && e.message().contains("max_artifact_mb"), "{}", e.message());
    assert!(!get(&mut c, "triton", "1", &[b"k"]).await[0].found);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_process_per_host_produces_and_the_others_get_its_put() {
    let d = daemon();
    let mut holder = blobs(&d).await;
    let (mut held, first) = lease(&mut holder, b"G", 0, 0).await;
    assert_eq!(kind(&first), Kind::Granted, "{first:?}");
    let mut waiters = tokio::task::JoinSet::new();
    for _ in 0..4 {
        let mut c = blobs(&d).await;
        waiters.spawn(async move { lease(&mut c, b"G", 10_000, 0).await.1 });
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(waiters.len() == 4 && waiters.try_join_next().is_none(), "waiters answered before the put");
    let group = files(&[("a", b"1"), ("__grp__a", b"2")]);
    put(&mut holder, "triton", b"G", group.clone()).await;
    assert_eq!(kind(&held.message().await.unwrap().unwrap()), Kind::Published);
    assert!(held.message().await.unwrap().is_none(), "the stream ends after PUBLISHED");
    while let Some(e) = waiters.join_next().await {
        let e = e.unwrap();
        assert_eq!(kind(&e), Kind::Found, "{e:?}");
        assert_eq!(e.entry.unwrap().files, group);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_that_goes_away_releases_at_once_and_a_hung_one_at_its_hold_bound() {
    let d = daemon();
    let mut a = blobs(&d).await;
    let (held, first) = lease(&mut a, b"X", 0, 0).await;
    assert_eq!(kind(&first), Kind::Granted);
    let mut held = handed_over(held, blobs(&d).await, b"X", 400, Duration::from_secs(2)).await;
    // This holder never puts: its lease ends at hold_ms = 400 with EXPIRED.
    let e = held.message().await.unwrap().unwrap();
    assert_eq!(kind(&e), Kind::Expired, "{e:?}");
    let text = d.metrics_text();
    assert_eq!(sample(&text, "kiln_blob_leases_total{namespace=\"triton\",result=\"expired\"}"), Some(1.0));
    // And a waiter with a short bound proceeds on its own, saying why.
    let (_held, _) = lease(&mut blobs(&d).await, b"Y", 0, 0).await;
    let (_, e) = lease(&mut blobs(&d).await, b"Y", 100, 0).await;
    assert_eq!(kind(&e), Kind::Proceed);
    assert!(e.reason.contains("another process on this host"), "{}", e.reason);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_writers_of_one_group_never_mix() {
    let d = daemon();
    let mut writers = tokio::task::JoinSet::new();
    for w in [b'a', b'b'] {
        let mut c = blobs(&d).await;
        writers.spawn(async move {
            for i in 0..100u8 {
                let f = (0..4).map(|n| BlobFile { name: format!("f{n}"), data: vec![w, i, n] }).collect();
                put(&mut c, "triton", b"M", f).await;
            }
        });
    }
    let mut reader = blobs(&d).await;
    let mut seen = 0;
    while !writers.is_empty() {
        for e in get(&mut reader, "triton", "3.6.0", &[b"M"]).await.into_iter().filter(|e| e.found) {
            let first = &e.files[0].data[..2];
            assert!(e.files.iter().all(|f| &f.data[..2] == first), "mixed group: {:?}", e.files);
            seen += 1;
        }
        while writers.try_join_next().is_some() {}
        tokio::task::yield_now().await;
    }
    assert!(seen > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn across_hosts_one_producer_and_a_dead_one_releases_the_fleet_at_once() {
    let (_redis, cache) = fleet();
    let host = || cache.host("lease_ttl_ms = 20000\n");
    let (a, b) = (host(), host());
    let (mut ca, mut cb) = (blobs(&a).await, blobs(&b).await);
    // A produces; B waits on A through the fleet and gets A's put from the remote tier.
    let (mut held, first) = lease(&mut ca, b"F", 0, 0).await;
    assert_eq!(kind(&first), Kind::Granted, "{first:?}");
    assert!(first.reason.is_empty(), "granted without the fleet lease: {}", first.reason);
    let waiter = tokio::spawn(async move { lease(&mut cb, b"F", 30_000, 0).await.1 });
    tokio::time::sleep(Duration::from_millis(300)).await;
    put(&mut ca, "triton", b"F", files(&[("f", b"fleet")])).await;
    assert_eq!(kind(&held.message().await.unwrap().unwrap()), Kind::Published);
    let e = waiter.await.unwrap();
    assert_eq!(kind(&e), Kind::Found, "{e:?}");
    assert_eq!(e.entry.as_ref().unwrap().tier, Tier::Remote as i32);
    // A put of the key through another host ends a holder's lease too.
    let (mut held, first) = lease(&mut blobs(&a).await, b"P", 0, 0).await;
    assert_eq!(kind(&first), Kind::Granted);
    put(&mut blobs(&b).await, "triton", b"P", files(&[("p", b"from b")])).await;
    let e = tokio::time::timeout(Duration::from_secs(5), held.message()).await.expect("no PUBLISHED").unwrap().unwrap();
    assert_eq!(kind(&e), Kind::Published, "{e:?}");
    // A holder whose process dies (its stream closes) releases the fleet lease at once: the
    // other host is granted well inside the 20 s lease TTL.
    let (held, first) = lease(&mut blobs(&a).await, b"D", 0, 0).await;
    assert_eq!(kind(&first), Kind::Granted);
    let _held = handed_over(held, blobs(&b).await, b"D", 0, Duration::from_secs(3)).await;
    // A third host with an empty directory reads both from the fleet in one call.
    let c = host();
    let got = get(&mut blobs(&c).await, "triton", "3.6.0", &[b"F", b"D"]).await;
    assert!(got[0].found && got[0].tier == Tier::Remote as i32 && !got[1].found);
}
