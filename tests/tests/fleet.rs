//! The fleet: several real kilnd "hosts" (own cache directories) over a real kiln-cache and a
//! real redis-server. Compiles are counted by the witness NVRTC, outside kiln's code.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use kiln_proto::pb::{Outcome, Tier, kernel::Source};
use kiln_tests::daemon::{Daemon, Options, compile_job, lookup_job};
use kiln_tests::http::sample;
use kiln_tests::kernels::*;
use kiln_tests::redis::{CacheOptions, CacheServer, READ_TOKEN, RedisServer, WRITE_TOKEN, fleet};
use kiln_tests::toolkits;
use std::time::{Duration, Instant};

/// `n` daemons sharing one witness NVRTC; returns them and the witness file. Their audit is off:
/// an audit is a compile too (the witness counts it), and these tests count the fleet's cold
/// compiles (tests/tests/audit.rs tests the audit).
fn hosts(n: usize, cache: &CacheServer, dir: &std::path::Path, config: &str) -> (Vec<Daemon>, std::path::PathBuf) {
    let witness = dir.join("compiles.log");
    let (root, env) = toolkits::witness_root(dir, &witness);
    let config = format!("audit = false\n{config}");
    let daemons = (0..n)
        .map(|_| {
            let mut o = Daemon::fleet_options(&cache.uri(), WRITE_TOKEN, &config);
            o.cuda_root = root.clone();
            o.extra_env.extend(env.clone());
            Daemon::start(o)
        })
        .collect();
    (daemons, witness)
}

fn metric(d: &Daemon, series: &str) -> f64 {
    sample(&d.metrics_text(), series).unwrap_or(0.0)
}

/// Two hosts over a fleet of their own, both with `config`: a lease's holder and its waiter.
fn holder_and_waiter(config: &str) -> (RedisServer, CacheServer, Daemon, Daemon) {
    let (redis, cache) = fleet();
    let (holder, waiter) = (cache.host(config), cache.host(config));
    (redis, cache, holder, waiter)
}

/// Returns once `holder`'s host has a compile running; fails at `deadline`.
async fn until_compiling(holder: &kiln_client::Client, deadline: Instant) {
    while holder.stats().await.unwrap().inflight_compiles < 1 {
        assert!(Instant::now() < deadline, "A never started compiling");
        tokio::task::yield_now().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_hosts_compile_each_kernel_once_across_the_fleet() {
    let (_redis, cache) = fleet();
    let dir = tempfile::tempdir().unwrap();
    let (mut daemons, witness) = hosts(5, &cache, dir.path(), "");
    // The fifth host starts out of the race, for the warm start below.
    let fresh = daemons.pop().unwrap();
    let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(daemons.len()));
    let mut clients = tokio::task::JoinSet::new();
    for d in &daemons {
        let (uri, barrier) = (d.uri(), barrier.clone());
        clients.spawn(async move {
            let client = kiln_client::connect(&uri).await.unwrap();
            barrier.wait().await;
            compile_job(&client, vector_graph("sm_90", 16)).await
        });
    }
    let mut jobs = Vec::new();
    while let Some(j) = clients.join_next().await {
        jobs.push(j.unwrap());
    }
    assert_eq!(toolkits::witnessed_compiles(&witness), 16, "the fleet compiled a kernel more than once");
    let compiled: f64 =
        daemons.iter().map(|d| metric(d, "kiln_compiles_total{toolchain=\"nvrtc\",outcome=\"ok\"}")).sum();
    assert_eq!(compiled, 16.0, "/metrics disagrees with the witness");
    let mut paid = 0;
    for job in &jobs {
        for k in &job.kernels {
            assert_eq!(k.outcome(), Outcome::Ok, "{}", k.log);
            assert_eq!(k.artifact, jobs[0].kernel(&k.id).unwrap().artifact, "hosts got different bytes");
            assert!(matches!(k.tier(), Tier::Compiled | Tier::Remote | Tier::Joined), "{:?}", k.tier());
            paid += usize::from(k.tier() == Tier::Compiled);
        }
    }
    assert_eq!(paid, 16, "every client but one per kernel reports remote or joined");
    // Each host read each key from kiln-cache once: its graph's BatchGet. A Get only where a
    // host's acquire found the key already published (the race counted as `present`); waiters
    // got the entry on their watch stream (kiln-cache reads a watched key when the watch starts
    // and when it is published, which a race can make two hits for one watch; none of it is a
    // request of the waiter's).
    let read = |via: &str| {
        let text = cache.metrics_text();
        ["hit", "negative", "miss", "corrupt"]
            .iter()
            .map(|r| {
                sample(&text, &format!("kiln_server_lookups_total{{via=\"{via}\",result=\"{r}\"}}")).unwrap_or(0.0)
            })
            .sum::<f64>()
    };
    let leases = |result: &str| -> f64 {
        daemons.iter().map(|d| metric(d, &format!("kiln_lease_total{{result=\"{result}\"}}"))).sum()
    };
    assert_eq!(read("batch_get"), 4.0 * 16.0, "a host read a key more than once in its BatchGet");
    assert_eq!(read("get"), leases("present"), "a Get beyond the publish races");
    let watches = sample(&cache.metrics_text(), "kiln_server_requests_total{op=\"WatchPublish\",code=\"ok\"}");
    let watch_hits = sample(&cache.metrics_text(), "kiln_server_lookups_total{via=\"watch\",result=\"hit\"}");
    assert!(watch_hits.unwrap_or(0.0) <= 2.0 * watches.unwrap_or(0.0), "{}", cache.metrics_text());
    // The fifth, fresh host warms the whole graph from the fleet in one round trip.
    let ops = |op: &str| {
        sample(&cache.metrics_text(), &format!("kiln_server_requests_total{{op=\"{op}\",code=\"ok\"}}")).unwrap_or(0.0)
    };
    let (batch_before, get_before, read_before) = (ops("BatchGet"), ops("Get"), read("batch_get"));
    let warm = compile_job(&fresh.client().await, vector_graph("sm_90", 16)).await;
    assert!(
        warm.kernels.iter().all(|k| k.tier() == Tier::Remote),
        "{:?}",
        warm.kernels.iter().map(|k| k.tier()).collect::<Vec<_>>()
    );
    assert_eq!(toolkits::witnessed_compiles(&witness), 16, "the warm start compiled");
    assert_eq!(ops("BatchGet") - batch_before, 1.0, "the warm start was not one BatchGet");
    assert_eq!(ops("Get") - get_before, 0.0, "the warm start fetched kernels one by one");
    assert_eq!(read("batch_get") - read_before, 16.0, "the warm start read a key more than once");
    assert_eq!(metric(&fresh, "kiln_cache_lookups_total{tier=\"remote\",result=\"hit\"}"), 16.0);
    assert!(metric(&fresh, "kiln_artifact_bytes_total{tier=\"remote\",direction=\"read\"}") > 0.0);
    // Warm hits do not write to the fleet: the graph's manifest goes once, not once per hit.
    let client = fresh.client().await;
    let manifests_after_first = async {
        for _ in 0..200 {
            if ops("PutManifest") > 0.0 {
                return ops("PutManifest");
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        ops("PutManifest")
    }
    .await;
    for _ in 0..20 {
        let hit = compile_job(&client, vector_graph("sm_90", 16)).await;
        assert!(hit.kernels.iter().all(|k| k.tier() == Tier::Memory));
    }
    // A manifest publish is tracked work, which a clean stop drains: once the host has exited,
    // every write its hits started has been answered by kiln-cache, which counts a request
    // before it answers.
    drop(client);
    fresh.stop();
    assert_eq!(ops("PutManifest"), manifests_after_first, "warm hits published the graph's manifest again");
    for d in daemons {
        d.stop();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_holder_is_taken_over_by_exactly_one_waiter() {
    let (_redis, _cache, a, b) = holder_and_waiter("lease_ttl_ms = 1500\nhedge_secs = 600\n");
    let req = request("sm_90", vec![kernel("slow", cuda(&format!("// takeover\n{}", slow_kernel(3000))))]);
    let ca = a.client().await;
    ca.submit(req.clone()).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    until_compiling(&ca, deadline).await;
    let waiter = {
        let uri = b.uri();
        let req = req.clone();
        tokio::spawn(async move { compile_job(&kiln_client::connect(&uri).await.unwrap(), req).await })
    };
    // B is waiting on A's lease; now A's host dies.
    while metric(&b, "kiln_lease_total{result=\"waited\"}") < 1.0 {
        assert!(Instant::now() < deadline, "B never waited on A's lease");
        tokio::task::yield_now().await;
    }
    drop(ca);
    a.kill9();
    let job = tokio::time::timeout(Duration::from_secs(120), waiter).await.expect("the waiter hung").unwrap();
    assert_eq!(job.kernels[0].outcome(), Outcome::Ok, "{}", job.kernels[0].log);
    assert_eq!(metric(&b, "kiln_lease_total{result=\"takeover\"}"), 1.0);
    assert_eq!(metric(&b, "kiln_lease_total{result=\"timeout\"}"), 0.0);
    b.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_compile_releases_every_waiter_with_its_log() {
    // A long TTL: waiters that finish well inside it were released by the failure itself.
    let (_redis, cache, a, b) = holder_and_waiter("lease_ttl_ms = 30000\n");
    // Slow in Triton's front end, then a failed static assert at the end.
    let source = format!(
        "{}\n@triton.jit\ndef doomed(x_ptr, BLOCK: tl.constexpr):\n    x = tl.load(x_ptr + tl.arange(0, BLOCK))\n    for i in tl.static_range(2500):\n        x = x * 1.0001 + i\n    tl.static_assert(BLOCK < 0, \"doomed by design\")\n    tl.store(x_ptr + tl.arange(0, BLOCK), x)\n",
        triton_module()
    );
    let t = triton(&source, "doomed", &[("x_ptr", "*fp32"), ("BLOCK", "constexpr")], &[("BLOCK", 128)], 4);
    let req = request("sm_90", vec![any_kernel("doomed", Source::Triton(t))]);
    let ca = a.client().await;
    let job_a = ca.submit(req.clone()).await.unwrap();
    until_compiling(&ca, Instant::now() + Duration::from_secs(60)).await;
    let started = Instant::now();
    let waited = compile_job(&b.client().await, req).await;
    let elapsed = started.elapsed();
    let held = ca.watch(&job_a).await.unwrap().collect().await.unwrap();
    assert_eq!(held.kernels[0].outcome(), Outcome::Failed);
    let k = &waited.kernels[0];
    assert_eq!(k.outcome(), Outcome::Failed);
    assert!(k.log.contains("doomed by design"), "the waiter did not get the holder's log: {}", k.log);
    assert_eq!(k.tier(), Tier::Remote, "the waiter compiled it itself");
    assert!(elapsed < Duration::from_secs(30), "the waiter sat out the lease TTL ({elapsed:?})");
    assert_eq!(metric(&b, "kiln_compiles_total{toolchain=\"triton\",outcome=\"failed\"}"), 0.0);
    // One read of the key per request: A's (cold) and B's BatchGet. B got the failure there when
    // A had finished, else on its watch stream; nobody sent a Get.
    let text = cache.metrics_text();
    let read = |series: &str| sample(&text, &format!("kiln_server_lookups_total{{{series}}}")).unwrap_or(0.0);
    let batch = read("via=\"batch_get\",result=\"miss\"") + read("via=\"batch_get\",result=\"negative\"");
    assert_eq!(batch, 2.0, "{text}");
    assert!(!text.contains("via=\"get\""), "a Get was sent: {text}");
    a.stop();
    b.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_outages_cost_nothing_and_the_remote_tier_comes_back() {
    let (mut redis, cache) = fleet();
    let d = cache.host("");
    let client = d.client().await;
    assert!(compile_job(&client, vector_graph("sm_90", 2)).await.all_ok());
    redis.stop();
    let during = compile_job(&client, request("sm_90", vec![kernel("outage", cuda(&vector_add(50)))])).await;
    assert!(during.all_ok(), "a Redis outage failed a compile");
    let stats = client.stats().await.unwrap();
    assert!(!stats.remote.is_empty() && !stats.remote_up, "stats should show the fleet cache down");
    let warm = compile_job(&client, vector_graph("sm_90", 2)).await;
    assert!(warm.kernels.iter().all(|k| k.tier() == Tier::Memory));
    redis.restart();
    let deadline = Instant::now() + Duration::from_secs(60);
    while metric(&d, "kiln_remote_up") < 1.0 {
        assert!(Instant::now() < deadline, "the remote tier never came back");
        std::thread::sleep(Duration::from_millis(50));
    }
    let after = compile_job(&client, request("sm_90", vec![kernel("after", cuda(&vector_add(51)))])).await;
    assert!(after.all_ok());
    let fresh = cache.host("");
    let got = lookup_job(&fresh.client().await, request("sm_90", vec![kernel("after", cuda(&vector_add(51)))])).await;
    assert_eq!(got.kernels[0].tier(), Tier::Remote, "publishes did not resume");
    fresh.stop();
    d.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupt_or_misplaced_values_in_redis_are_recompiled_and_repaired() {
    let (redis, cache) = fleet();
    let a = cache.host("");
    let job = compile_job(&a.client().await, vector_graph("sm_90", 3)).await;
    a.stop();
    let head = |id: &str| format!("kiln:v1:{{{}}}:a", job.kernel(id).unwrap().key);
    // Flip a byte inside add_0's stored value; store add_2's valid envelope under add_1's key.
    let len: usize = String::from_utf8_lossy(&redis.cli(&["STRLEN", &head("add_0")])).trim().parse().unwrap();
    let middle = (len / 2).to_string();
    let byte = redis.cli(&["GETRANGE", &head("add_0"), &middle, &middle]);
    let other = if byte == b"A" { "B" } else { "A" };
    redis.cli(&["SETRANGE", &head("add_0"), &middle, other]);
    redis.cli(&["COPY", &head("add_2"), &head("add_1"), "REPLACE"]);

    let b = cache.host("");
    let again = compile_job(&b.client().await, vector_graph("sm_90", 3)).await;
    for id in ["add_0", "add_1"] {
        let k = again.kernel(id).unwrap();
        assert_eq!(k.tier(), Tier::Compiled, "{id} was served from a bad value");
        assert_eq!(k.artifact, job.kernel(id).unwrap().artifact);
    }
    assert_eq!(again.kernel("add_2").unwrap().tier(), Tier::Remote);
    let detected = sample(&cache.metrics_text(), "kiln_server_integrity_failures_total").unwrap_or(0.0)
        + metric(&b, "kiln_integrity_failures_total{tier=\"remote\"}");
    assert!(detected >= 2.0, "the bad values were not counted ({detected})");
    b.stop();
    // Repaired: a third host gets good bytes from the fleet.
    let c = cache.host("");
    let repaired = compile_job(&c.client().await, vector_graph("sm_90", 3)).await;
    for k in &repaired.kernels {
        assert_eq!(k.tier(), Tier::Remote, "{} was not repaired", k.id);
        assert_eq!(k.artifact, job.kernel(&k.id).unwrap().artifact);
    }
    c.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_token_is_said_so_in_the_log_stats_and_doctor() {
    let (_redis, cache) = fleet();
    let d = Daemon::start(Daemon::fleet_options(&cache.uri(), "wrong-token-0123456789", ""));
    let client = d.client().await;
    // The start-up probe is refused at once; the state says so, not "down".
    let deadline = Instant::now() + Duration::from_secs(30);
    let stats = loop {
        let stats = client.stats().await.unwrap();
        if stats.remote_state != "starting" {
            break stats;
        }
        assert!(Instant::now() < deadline, "the fleet was never probed");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(stats.remote_state, "refused", "{stats:?}");
    assert!(!stats.remote_up);
    assert!(
        stats.remote_reason.contains("refused kilnd's token") && stats.remote_reason.contains(&cache.uri()),
        "{}",
        stats.remote_reason
    );
    let log = d.log_so_far();
    assert!(log.contains("the fleet refused kilnd's token") && log.contains(&cache.uri()), "{log}");
    let here = std::env::temp_dir();
    let out = d.kiln(&["stats"], &here);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("REFUSED TOKEN") && text.contains("refused kilnd's token"), "{text}");
    let out = d.kiln(&["doctor"], &here);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "doctor passed a refused token: {text}");
    assert!(text.contains("problem: the fleet cache at") && text.contains("--remote-token"), "{text}");
    d.stop();

    // The right token: up, and doctor says the fleet answers.
    let d = cache.host("");
    let client = d.client().await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while client.stats().await.unwrap().remote_state != "up" {
        assert!(Instant::now() < deadline, "the fleet never came up");
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = d.kiln(&["doctor"], &here);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && text.contains("the fleet cache answers"), "{text}");
    d.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_tokens_and_a_full_redis_never_fail_a_compile() {
    let (redis, cache) = fleet();
    for token in ["", "wrong-token-0123456789", READ_TOKEN] {
        let d = Daemon::start(Daemon::fleet_options(&cache.uri(), token, ""));
        let job = compile_job(&d.client().await, request("sm_90", vec![kernel("k", cuda(&vector_add(60)))])).await;
        assert!(job.all_ok(), "token {token:?}: {:?}", job.kernels[0].log);
        d.stop();
    }
    // Nothing was published with those tokens.
    let probe = cache.host("");
    let look = lookup_job(&probe.client().await, request("sm_90", vec![kernel("k", cuda(&vector_add(60)))])).await;
    assert_eq!(look.kernels[0].outcome(), Outcome::Miss, "a read-only or bad token published");
    probe.stop();
    // Redis at its memory limit: writes fail, compiles do not, nothing half-written remains.
    redis.cli(&["CONFIG", "SET", "maxmemory-policy", "noeviction"]);
    redis.cli(&["CONFIG", "SET", "maxmemory", "1"]);
    let d = cache.host("");
    let job = compile_job(&d.client().await, vector_graph("sm_90", 3)).await;
    assert!(job.all_ok());
    assert!(
        sample(&cache.metrics_text(), "kiln_server_redis_errors_total").unwrap_or(0.0) >= 1.0,
        "the failed writes were not counted"
    );
    redis.cli(&["CONFIG", "SET", "maxmemory", "0"]);
    let keys = String::from_utf8_lossy(&redis.cli(&["KEYS", "kiln:v1:*:a*"])).to_string();
    assert!(keys.trim().is_empty(), "half-written values left behind: {keys}");
    d.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_cluster_works_end_to_end() {
    let cluster = kiln_tests::redis::RedisCluster::start(3);
    let cache = CacheServer::start(CacheOptions { cluster: true, ..CacheOptions::new(cluster.urls()) });
    let dir = tempfile::tempdir().unwrap();
    let (daemons, witness) = hosts(3, &cache, dir.path(), "");
    let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(2));
    let mut clients = tokio::task::JoinSet::new();
    for d in &daemons[..2] {
        let (uri, barrier) = (d.uri(), barrier.clone());
        clients.spawn(async move {
            let client = kiln_client::connect(&uri).await.unwrap();
            barrier.wait().await;
            compile_job(&client, vector_graph("sm_90", 8)).await
        });
    }
    while let Some(job) = clients.join_next().await {
        assert!(job.unwrap().all_ok());
    }
    assert_eq!(toolkits::witnessed_compiles(&witness), 8, "leases did not hold across the cluster");
    let warm = compile_job(&daemons[2].client().await, vector_graph("sm_90", 8)).await;
    assert!(warm.kernels.iter().all(|k| k.tier() == Tier::Remote));
    for d in daemons {
        d.stop();
    }
}

#[test]
fn kiln_warm_pulls_a_graph_into_a_fresh_host() {
    let (_redis, cache) = fleet();
    let a = cache.host("");
    let dir = tempfile::tempdir().unwrap();
    for i in 0..10 {
        std::fs::write(dir.path().join(format!("k{i}.cu")), vector_add(100 + i)).unwrap();
    }
    let files: Vec<String> = (0..10).map(|i| format!("k{i}.cu")).collect();
    let kiln = |d: &Daemon, args: &[&str]| {
        std::process::Command::new(kiln_tests::env::binary("kiln"))
            .env("KILN_DAEMON", d.uri())
            .args(args)
            .current_dir(dir.path())
            .output()
            .unwrap()
    };
    let mut args = vec!["compile", "--target", "sm_90", "--json"];
    args.extend(files.iter().map(String::as_str));
    let out = kiln(&a, &args);
    assert!(out.status.success());
    std::fs::write(dir.path().join("manifest.ndjson"), &out.stdout).unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let last: serde_json::Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    let graph_key = last["graph_key"].as_str().unwrap().to_string();
    a.stop();

    let b = cache.host("");
    let warmed = kiln(&b, &["warm", "--graph-key", &graph_key, "--json"]);
    assert!(warmed.status.success(), "{}", String::from_utf8_lossy(&warmed.stderr));
    let lines = String::from_utf8_lossy(&warmed.stdout).to_string();
    let end: serde_json::Value = serde_json::from_str(lines.lines().last().unwrap()).unwrap();
    assert_eq!(
        (end["total"].as_u64(), end["fetched"].as_u64(), end["finished"].as_bool()),
        (Some(10), Some(10), Some(true))
    );
    let mut lookup = vec!["lookup", "--target", "sm_90", "--json"];
    lookup.extend(files.iter().map(String::as_str));
    let local = String::from_utf8_lossy(&kiln(&b, &lookup).stdout).to_string();
    assert_eq!(local.matches("\"tier\":\"memory\"").count(), 10, "{local}");
    // A manifest file works too, and an unknown graph key is an exit code of 1.
    let again = kiln(&b, &["warm", "--manifest", "manifest.ndjson"]);
    assert!(again.status.success(), "{}", String::from_utf8_lossy(&again.stdout));
    let unknown = kiln(&b, &["warm", "--graph-key", &"0".repeat(64)]);
    assert_eq!(unknown.status.code(), Some(1));
    b.stop();
}

/// A full disk under the disk tier (a 16 KiB tmpfs; mounting needs root, which scripts/test and
/// CI have): compiles succeed, the failed writes are counted, and no partial file is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_never_fails_a_compile_or_leaves_a_partial_file() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    std::fs::create_dir_all(&cache).unwrap();
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=16k", "tmpfs"])
        .arg(&cache)
        .status()
        .is_ok_and(|s| s.success());
    assert!(mounted, "mounting a small tmpfs failed: this test needs root (scripts/test runs as root in CI)");
    struct Unmount(std::path::PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount").arg(&self.0).status();
        }
    }
    let _unmount = Unmount(cache.clone());
    let d = Daemon::start_in(dir.path(), Options::default());
    // Several KiB of envelope each: the tmpfs fills within a few kernels.
    let big = |i: usize| kernel(&format!("big{i}"), cuda(&format!("// {i}\n{}", slow_kernel(400))));
    let job = compile_job(&d.client().await, request("sm_90", (0..8).map(big).collect())).await;
    assert!(job.all_ok(), "a full disk failed a compile");
    d.wait_for_metric("kiln_cache_writes_total{tier=\"disk\",result=\"error\"}", 1.0);
    d.stop();
    let tmp: Vec<_> = std::fs::read_dir(cache.join("v1/tmp")).unwrap().collect();
    assert!(tmp.is_empty(), "temp files left behind: {tmp:?}");
    for shard in walk(&cache.join("v1")) {
        let key: kiln_proto::CacheKey = shard.file_name().unwrap().to_str().unwrap().parse().unwrap();
        let bytes = std::fs::read(&shard).unwrap();
        assert!(kiln_proto::envelope::open(&bytes, &key, 1 << 30).is_ok(), "{} is partial", shard.display());
    }
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() && p.file_name().is_some_and(|n| n != "tmp") {
            out.extend(walk(&p));
        } else if p.is_file() {
            out.push(p);
        }
    }
    out
}

/// A waiter past the hedge bound compiles by itself and says so in its metrics.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_past_the_hedge_bound_compiles_itself() {
    let (_redis, _cache, a, b) = holder_and_waiter("lease_ttl_ms = 60000\nhedge_secs = 1\n");
    let req = request("sm_90", vec![kernel("slow", cuda(&format!("// hedge\n{}", slow_kernel(24_000))))]);
    let ca = a.client().await;
    let job_a = ca.submit(req.clone()).await.unwrap();
    until_compiling(&ca, Instant::now() + Duration::from_secs(30)).await;
    let job_b = compile_job(&b.client().await, req).await;
    assert_eq!(job_b.kernels[0].outcome(), Outcome::Ok);
    assert_eq!(metric(&b, "kiln_lease_total{result=\"timeout\"}"), 1.0, "{}", b.metrics_text());
    let done_a = ca.watch(&job_a).await.unwrap().collect().await.unwrap();
    assert_eq!(done_a.kernels[0].artifact, job_b.kernels[0].artifact, "the hedge compiled different bytes");
    a.stop();
    b.stop();
}

/// A leader whose fleet cache stops answering mid-compile answers its own client as soon as the
/// compile ends: the local tiers and the answer never wait on the fleet. The cache is frozen with
/// SIGSTOP, which is what a partition looks like from kilnd (every call hangs until its 30 s
/// timeout; nothing is refused). The publish goes on in the background: once the cache runs again
/// it lands, and another host gets the kernel from the fleet instead of compiling it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_cut_off_from_the_fleet_answers_its_client_at_once() {
    use kiln_tests::procs::signal;
    let (_redis, mut cache) = fleet();
    let dir = tempfile::tempdir().unwrap();
    let (mut daemons, witness) = hosts(2, &cache, dir.path(), "");
    let (a, b) = (daemons.remove(0), daemons.remove(0));
    let req = request("sm_90", vec![kernel("slow", cuda(&format!("// cut off\n{}", slow_kernel(8000))))]);
    let ca = a.client().await;
    let stream = ca.compile(req.clone()).await.unwrap();
    let answer = tokio::spawn(async move {
        let job = stream.collect().await.unwrap();
        (job, Instant::now())
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    while ca.stats().await.unwrap().inflight_compiles < 1 {
        assert!(Instant::now() < deadline, "A never started compiling");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let cache_pid = cache.pid().unwrap();
    signal(cache_pid, "STOP");
    assert!(ca.stats().await.unwrap().inflight_compiles > 0, "the compile ended before the fleet froze");
    while ca.stats().await.unwrap().inflight_compiles > 0 {
        assert!(Instant::now() < deadline + Duration::from_secs(30), "the compile never ended");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let compiled = Instant::now();
    let (job, answered) = answer.await.unwrap();
    signal(cache_pid, "CONT");
    let waited = answered.saturating_duration_since(compiled);
    assert_eq!(job.kernels[0].outcome(), Outcome::Ok, "{}", job.kernels[0].log);
    assert_eq!(job.kernels[0].tier(), Tier::Compiled);
    assert!(waited < Duration::from_secs(3), "the answer waited {waited:?} after the compile for a frozen fleet");
    // The publish went on in the background and lands once the cache runs again (its retry may
    // still be on its way when the cache wakes: on a loaded host it took seconds).
    let key: kiln_proto::CacheKey = job.kernels[0].key.parse().unwrap();
    let reader = cache.client(READ_TOKEN);
    let landed = Instant::now() + Duration::from_secs(60);
    loop {
        let got = reader.get(&key).await;
        if matches!(got, Ok(kiln_cache_client::Lookup::Hit(..))) {
            break;
        }
        assert!(Instant::now() < landed, "A's publish never reached the fleet: {got:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let job_b = compile_job(&b.client().await, req).await;
    assert_eq!(job_b.kernels[0].tier(), Tier::Remote, "B compiled: A's publish never reached the fleet");
    assert_eq!(job_b.kernels[0].artifact, job.kernels[0].artifact);
    assert_eq!(toolkits::witnessed_compiles(&witness), 1);
    assert!(cache.alive());
    a.stop();
    b.stop();
}
