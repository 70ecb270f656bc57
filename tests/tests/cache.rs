//! The tiers across restarts, corruption on disk, and fingerprints.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use kiln_proto::CacheKey;
use kiln_proto::envelope;
use kiln_proto::pb::{Outcome, Tier};
use kiln_tests::daemon::{Daemon, Options, compile_job, lookup_job};
use kiln_tests::http::sample;
use kiln_tests::kernels::*;
use kiln_tests::toolkits;
use std::path::PathBuf;

fn disk_path(cache_dir: &std::path::Path, key: &str) -> PathBuf {
    cache_dir.join("v1").join(&key[..2]).join(&key[2..4]).join(key)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_daemon_serves_from_disk() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start_in(dir.path(), Options::default());
    let cold = compile_job(&d.client().await, vector_graph("sm_90", 3)).await;
    assert!(cold.kernels.iter().all(|k| k.tier() == Tier::Compiled));
    d.stop();

    let d = Daemon::start_in(dir.path(), Options::default());
    let client = d.client().await;
    let warm = compile_job(&client, vector_graph("sm_90", 3)).await;
    for k in &warm.kernels {
        assert_eq!(k.tier(), Tier::Disk, "{}", k.id);
        assert_eq!(k.artifact, cold.kernel(&k.id).unwrap().artifact);
    }
    let again = lookup_job(&client, vector_graph("sm_90", 3)).await;
    assert!(again.kernels.iter().all(|k| k.tier() == Tier::Memory), "disk hits backfill memory");
    assert_eq!(sample(&d.metrics_text(), "kiln_cache_lookups_total{tier=\"disk\",result=\"hit\"}"), Some(3.0));
    d.stop();
}

/// Each corruption is detected, counted, recompiled and never served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupt_disk_entries_are_counted_recompiled_and_never_served() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start_in(dir.path(), Options::default());
    let cold = compile_job(&d.client().await, vector_graph("sm_90", 5)).await;
    d.stop();
    let cache = dir.path().join("cache");
    let key_of = |id: &str| cold.kernel(id).unwrap().key.clone();
    let flip = |id: &str, part: fn(&envelope::Layout) -> std::ops::Range<usize>| {
        let path = disk_path(&cache, &key_of(id));
        let mut bytes = std::fs::read(&path).unwrap();
        let range = part(&envelope::layout(&bytes).unwrap());
        bytes[range.start + range.len() / 2] ^= 0x55;
        std::fs::write(&path, bytes).unwrap();
    };
    flip("add_0", |l| l.header.start + 10..l.header.end); // inside the key, in the header
    flip("add_1", |l| l.meta.clone());
    flip("add_2", |l| l.payload.clone());
    // A valid envelope (add_4's) stored under add_3's key.
    std::fs::copy(disk_path(&cache, &key_of("add_4")), disk_path(&cache, &key_of("add_3"))).unwrap();

    let d = Daemon::start_in(dir.path(), Options::default());
    let again = compile_job(&d.client().await, vector_graph("sm_90", 5)).await;
    for id in ["add_0", "add_1", "add_2", "add_3"] {
        let k = again.kernel(id).unwrap();
        assert_eq!(k.tier(), Tier::Compiled, "{id} was served from a corrupt entry");
        assert_eq!(k.outcome(), Outcome::Ok);
        assert_eq!(k.artifact, cold.kernel(id).unwrap().artifact, "{id} recompiled to different bytes");
    }
    assert_eq!(again.kernel("add_4").unwrap().tier(), Tier::Disk);
    assert_eq!(sample(&d.metrics_text(), "kiln_integrity_failures_total{tier=\"disk\"}"), Some(4.0));
    // Disk writes finish after the answer; a clean stop waits for them.
    d.stop();
    // The recompiled artifacts replaced the corrupt files.
    for id in ["add_0", "add_1", "add_2", "add_3"] {
        let bytes = std::fs::read(disk_path(&cache, &key_of(id))).unwrap();
        let key: CacheKey = key_of(id).parse().unwrap();
        assert!(envelope::open(&bytes, &key, 1 << 30).is_ok(), "{id} still corrupt on disk");
    }
}

/// One byte appended to a copy of libnvrtc changes the fingerprint and so every key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_nvrtc_library_changes_every_key() {
    let dir = tempfile::tempdir().unwrap();
    let real = Daemon::start(Options::default());
    let changed = Daemon::start(Options { cuda_root: toolkits::appended_byte_root(dir.path()), ..Options::default() });
    let req = request("sm_90", vec![kernel("a", cuda(&vector_add(1))), kernel("t", cuda(TOOLKIT_HEADERS))]);
    let a = lookup_job(&real.client().await, req.clone()).await;
    let b = lookup_job(&changed.client().await, req).await;
    for (x, y) in a.kernels.iter().zip(&b.kernels) {
        assert_ne!(x.key, y.key, "kernel {} kept its key across a changed NVRTC", x.id);
    }
    assert_ne!(a.done.graph_key, b.done.graph_key);
    let fp = |s: kiln_proto::pb::StatsResponse| s.toolchains[0].fingerprint.clone();
    assert_ne!(fp(real.client().await.stats().await.unwrap()), fp(changed.client().await.stats().await.unwrap()));
    real.stop();
    changed.stop();
}
