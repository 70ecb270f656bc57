//! A missing or broken toolchain is a clear error at start-up, never a panic; TCP is optional.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use kiln_tests::daemon::{Daemon, Options, compile_job};
use kiln_tests::env;
use std::process::Command;

/// Starts kilnd on `cuda_root` with `extra` arguments and asserts it refuses to start, saying
/// `want`, without a panic or a socket left behind.
fn kilnd_fails_with(cuda_root: &std::path::Path, extra: &[&str], want: &str) {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env::binary("kilnd"))
        .arg("--socket")
        .arg(dir.path().join("k.sock"))
        .arg("--cache-dir")
        .arg(dir.path().join("cache"))
        .arg("--cuda-root")
        .arg(cuda_root)
        .args(["--target", "sm_90"])
        .args(extra)
        .env_remove("KILN_TOKENS")
        .env_remove("KILN_TLS_CERT")
        .env_remove("KILN_TLS_KEY")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(want), "expected {want:?} in {stderr}");
    assert!(!stderr.contains("panicked"), "kilnd panicked: {stderr}");
    // The socket is bound only once every start-up check passed: a failed start leaves none.
    assert!(!dir.path().join("k.sock").exists(), "a failed start left its socket behind");
}

#[test]
fn missing_or_broken_nvrtc_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    kilnd_fails_with(&dir.path().join("nowhere"), &[], "no CUDA toolkit found");

    // Headers missing: a root with the libraries only.
    let no_headers = dir.path().join("no-headers");
    std::fs::create_dir_all(no_headers.join("lib")).unwrap();
    for lib in ["libnvrtc.so.13", "libnvrtc-builtins.so.13.0"] {
        std::os::unix::fs::symlink(env::cuda_root().join("lib").join(lib), no_headers.join("lib").join(lib)).unwrap();
    }
    kilnd_fails_with(&no_headers, &[], "CUDA runtime headers are missing");

    // A libnvrtc.so.13 that is not a library at all.
    let broken = dir.path().join("broken");
    std::fs::create_dir_all(broken.join("lib")).unwrap();
    std::os::unix::fs::symlink(env::cuda_root().join("include"), broken.join("include")).unwrap();
    std::fs::write(broken.join("lib/libnvrtc.so.13"), b"not an ELF file").unwrap();
    std::os::unix::fs::symlink(
        env::cuda_root().join("lib/libnvrtc-builtins.so.13.0"),
        broken.join("lib/libnvrtc-builtins.so.13.0"),
    )
    .unwrap();
    kilnd_fails_with(&broken, &[], "is not usable");
}

#[test]
fn kilnd_check_compiles_with_every_toolchain() {
    let ok = Command::new(env::binary("kilnd"))
        .arg("--cuda-root")
        .arg(env::cuda_root())
        .arg("--python")
        .arg(env::python())
        .arg("check")
        .arg("--json")
        .output()
        .unwrap();
    let report: serde_json::Value = serde_json::from_slice(&ok.stdout).unwrap();
    assert!(ok.status.success(), "{report}\n{}", String::from_utf8_lossy(&ok.stderr));
    assert_eq!(report["toolchains"][0]["version"], "13.0");
    assert!(report["toolchains"][0]["supported_targets"].as_array().unwrap().iter().any(|t| t == "sm_90"));
    let names: Vec<_> = report["toolchains"].as_array().unwrap().iter().map(|t| t["name"].clone()).collect();
    assert_eq!(names, ["nvrtc", "ptxas", "triton"]);
    for t in report["toolchains"].as_array().unwrap() {
        assert_eq!(t["ok"], true, "{t}");
        assert!(t["cubin_bytes"].as_u64().unwrap() > 0, "{t}");
        assert!(t["compile_ms"].is_u64() && t["start_ms"].is_u64(), "{t}");
    }
    // The test interpreter has torch (scripts/test installs it): a worker's child compiled and
    // ran a tiny graph, on the CPU here.
    assert_eq!(report["torch"]["ok"], true, "{}", report["torch"]);
    assert!(
        report["torch"]["note"].as_str().unwrap().starts_with("compiled and ran a tiny graph on "),
        "{}",
        report["torch"]
    );
    assert_eq!(report["ok"], true);
    let bad = Command::new(env::binary("kilnd")).args(["--cuda-root", "/nonexistent", "check"]).output().unwrap();
    assert_eq!(bad.status.code(), Some(1));
    let text = String::from_utf8_lossy(&bad.stdout);
    assert!(text.contains("nvrtc      FAILED: no CUDA toolkit found"), "{text}");
    assert!(text.contains("fix: set cuda_root in kilnd's config"), "{text}");
}

/// A cuda_root without ptxas and a python without triton: check fails, naming each fix.
#[test]
fn kilnd_check_fails_on_a_broken_toolchain_and_says_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let root = kiln_tests::toolkits::without_ptxas_root(dir.path());
    let python = kiln_tests::toolkits::python_without_triton(dir.path());
    let out = Command::new(env::binary("kilnd"))
        .arg("--cuda-root")
        .arg(&root)
        .arg("--python")
        .arg(&python)
        .arg("check")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("nvrtc      ok: 13.0"), "NVRTC still works: {text}");
    assert!(text.contains(&format!("ptxas      FAILED: no bin/ptxas under {}", root.display())), "{text}");
    assert!(text.contains("nvidia-cuda-nvcc==13.0.88 nvidia-nvvm==13.0.88 nvidia-cuda-crt==13.0.88"), "{text}");
    assert!(text.contains("No module named 'triton'"), "{text}");
    assert!(text.contains(&format!("fix: `{} -m pip install triton==3.6.0`", python.display())), "{text}");
    assert!(text.contains("problem: ptxas, triton cannot compile"), "{text}");
    // Without site-packages it has no torch either: no failure, the graph path is off.
    assert!(text.contains(&format!("torch      none: {} has no torch", python.display())), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serves_over_tcp_too() {
    let port = kiln_tests::ports::free();
    let d = Daemon::start(Options {
        extra_env: vec![("KILN_LISTEN".into(), format!("127.0.0.1:{port}"))],
        ..Options::default()
    });
    let client = kiln_client::connect(&format!("http://127.0.0.1:{port}")).await.unwrap();
    let job = compile_job(&client, kiln_tests::kernels::vector_graph("sm_90", 1)).await;
    assert!(job.all_ok());
    drop(client);
    d.stop();
}

#[test]
fn a_tcp_listener_other_hosts_could_reach_needs_tokens_and_tls() {
    kilnd_fails_with(&env::cuda_root(), &["--listen", "0.0.0.0:0"], "needs tokens");
    kilnd_fails_with(&env::cuda_root(), &["--listen", "0.0.0.0:0"], "--tokens FILE (KILN_TOKENS");
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, "write:a-kilnd-write-token-0123456789\n").unwrap();
    let with_tokens = ["--listen", "0.0.0.0:0", "--tokens", tokens.to_str().unwrap()];
    kilnd_fails_with(&env::cuda_root(), &with_tokens, "tokens would cross the network in plain text");
}

/// kilnd's log, written to a pipe as under systemd or in a container, carries no colour codes,
/// and says where its metrics listener is once bound (so `--metrics HOST:0` can be found).
#[test]
fn the_log_off_a_terminal_is_plain_and_names_the_metrics_address() {
    let options = Options { extra_env: vec![("KILN_LOG".into(), "info".into())], ..Options::default() };
    let d = Daemon::start(options);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let want = format!("addr={}", d.metrics);
    while !d.log_so_far().contains(&want) {
        assert!(std::time::Instant::now() < deadline, "no `{want}` in the log:\n{}", d.log_so_far());
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let log = d.log_so_far();
    assert!(log.contains("serving /metrics and the status page"), "{log}");
    assert!(!log.contains('\u{1b}'), "escape codes in a log that is not a terminal:\n{log}");
    d.stop();
}
