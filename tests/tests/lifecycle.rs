//! The daemon's life: socket mode, health, metrics, clients that leave, and clean shutdown.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use kiln_proto::pb::{Outcome, Tier};
use kiln_tests::daemon::{Daemon, Options, compile_job, lookup_job};
use kiln_tests::kernels::*;
use kiln_tests::procs::signal;
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn socket_health_and_metrics() {
    let d = Daemon::start(Options::default());
    let mode = std::fs::metadata(&d.socket).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o660, "socket mode {mode:o}");
    let client = d.client().await;
    // gRPC health over the same socket, as grpcurl and Kubernetes probes use it.
    let mut health = tonic_health::pb::health_client::HealthClient::new(client.channel());
    let status =
        health.check(tonic_health::pb::HealthCheckRequest { service: "kiln.v1.Compiler".into() }).await.unwrap();
    assert_eq!(status.into_inner().status, tonic_health::pb::health_check_response::ServingStatus::Serving as i32);
    // Reflection, which grpcurl needs, lists the service.
    let mut reflection =
        tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient::new(client.channel());
    let ask = tonic_reflection::pb::v1::ServerReflectionRequest {
        host: String::new(),
        message_request: Some(tonic_reflection::pb::v1::server_reflection_request::MessageRequest::ListServices(
            String::new(),
        )),
    };
    let mut answers = reflection.server_reflection_info(tokio_stream::once(ask)).await.unwrap().into_inner();
    let listed = format!("{:?}", answers.message().await.unwrap());
    assert!(listed.contains("kiln.v1.Compiler"), "{listed}");
    compile_job(&client, vector_graph("sm_90", 2)).await;
    compile_job(&client, vector_graph("sm_90", 2)).await;
    d.wait_for_metric("kiln_cache_writes_total{tier=\"disk\",result=\"ok\"}", 2.0);
    let m = d.metrics_text();
    for series in [
        "kiln_cache_lookups_total{tier=\"memory\",result=\"hit\"} 2",
        "kiln_compiles_total{toolchain=\"nvrtc\",outcome=\"ok\"} 2",
        "kiln_compile_seconds_count{toolchain=\"nvrtc\"} 2",
        "kiln_compile_seconds_saved_total",
        "kiln_queue_depth 0",
        "kiln_inflight_compiles 0",
        "kiln_artifact_bytes_total{tier=\"disk\",direction=\"write\"}",
        "kiln_jobs_total 2",
    ] {
        assert!(m.contains(series), "missing {series} in\n{m}");
    }
    let stats = client.stats().await.unwrap();
    assert_eq!(stats.compiles_ok, 2);
    assert_eq!(stats.default_target, "sm_90");
    assert_eq!(stats.toolchains[0].name, "nvrtc");
    assert_eq!(stats.toolchains[0].fingerprint.len(), 64);
    let socket = d.socket.clone();
    assert!(socket.exists());
    d.stop();
    assert!(!socket.exists(), "kilnd left its socket behind after SIGTERM");
}

/// A compile keeps going to fill the cache when its client disconnects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compile_continues_after_its_client_leaves() {
    let d = Daemon::start(Options::default());
    let req = request("sm_90", vec![kernel("slow", cuda(&slow_kernel(2500)))]);
    {
        let client = d.client().await;
        let mut stream = client.compile(req.clone()).await.unwrap();
        stream.next_event().await.unwrap(); // queued: the job exists; now leave
    }
    let client = d.client().await;
    let job = compile_job(&client, req).await;
    let k = &job.kernels[0];
    assert_eq!(k.outcome(), Outcome::Ok, "{}", k.log);
    assert!(matches!(k.tier(), Tier::Joined | Tier::Memory), "the abandoned compile was redone: {:?}", k.tier());
    d.stop();
}

/// SIGTERM while a compile runs: kilnd finishes it, exits 0, and the artifact is on disk.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_running_work_and_exits_zero() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start_in(dir.path(), Options::default());
    let req = request("sm_90", vec![kernel("slow", cuda(&format!("// drain\n{}", slow_kernel(2500))))]);
    let client = d.client().await;
    client.submit(req.clone()).await.unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while client.stats().await.unwrap().inflight_compiles < 1 {
        assert!(std::time::Instant::now() < deadline, "the compile never started");
        tokio::task::yield_now().await;
    }
    drop(client);
    d.stop_within(Duration::from_secs(60));
    let d = Daemon::start_in(dir.path(), Options::default());
    let job = lookup_job(&d.client().await, req).await;
    assert_eq!(job.kernels[0].tier(), Tier::Disk, "the drained compile was not published");
    d.stop();
}

/// Starts `n` slow compiles on `d` and waits until one runs.
async fn compiles_running(d: &Daemon, tag: &str, n: usize) {
    let kernels = (0..n).map(|i| kernel(&format!("slow{i}"), cuda(&format!("// {tag} {i}\n{}", slow_kernel(2500)))));
    let client = d.client().await;
    client.submit(request("sm_90", kernels.collect())).await.unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while client.stats().await.unwrap().inflight_compiles < 1 {
        assert!(std::time::Instant::now() < deadline, "no compile started");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A stopped kilnd stops within its drain bound and a few seconds, even with compiles running,
/// a client that never reads its stream, and its fleet cache frozen mid-call (SIGSTOP: every
/// lease, lookup and publish hangs until its own timeout, 30 s, far past the drain bound).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_kilnd_stops_within_its_bound_with_the_fleet_frozen() {
    use kiln_tests::redis::fleet;
    let (_redis, mut cache) = fleet();
    let d = cache.host("drain_secs = 2\n");
    compiles_running(&d, "frozen fleet", 4).await;
    let idle = d.client().await;
    let _unread = idle.compile(request("sm_90", vec![kernel("other", cuda(&slow_kernel(2000)))])).await.unwrap();
    let cache_pid = cache.pid().unwrap();
    signal(cache_pid, "STOP");
    let started = std::time::Instant::now();
    // drain_secs (2) + the stop grace (5), with room for a loaded machine; exit 0 means kilnd
    // stopped by itself, not by its stop deadline.
    d.stop_within(Duration::from_secs(10));
    let took = started.elapsed();
    signal(cache_pid, "CONT");
    assert!(took >= Duration::from_millis(1500), "kilnd stopped in {took:?}: it did not wait for its work");
    assert!(cache.alive());
}

/// A second SIGTERM (or SIGINT) ends kilnd at once, without waiting for the drain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_sigterm_exits_at_once() {
    let d = Daemon::start(Options { config: "drain_secs = 120\n".into(), ..Options::default() });
    compiles_running(&d, "second signal", 2).await;
    d.terminate();
    tokio::time::sleep(Duration::from_millis(300)).await;
    d.terminate();
    let status = d.exit_within(Duration::from_secs(5));
    assert_eq!(status.code(), Some(1), "{status}");
}
