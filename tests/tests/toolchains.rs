//! PTX through ptxas and Triton through the Python worker pool, with the real compilers.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use kiln_proto::pb::{self, Outcome, Tier, kernel::Source};
use kiln_tests::daemon::{Daemon, Options, compile_job, lookup_job};
use kiln_tests::elf::{Cubin, EM_CUDA};
use kiln_tests::kernels::*;
use kiln_tests::{env, toolkits};
use std::process::Command;

const ADD_SIG: &[(&str, &str)] = TRITON_ADD;

fn check_cubin(k: &pb::KernelResult, symbol: &str) {
    assert_eq!(k.outcome(), Outcome::Ok, "{}: {}", k.id, k.log);
    let elf = Cubin::parse(&k.artifact).expect("an ELF cubin");
    assert_eq!(elf.machine, EM_CUDA);
    assert_eq!(elf.sm(), 90, "{}: e_flags {:#x}", k.id, elf.flags);
    assert!(elf.symbols.iter().any(|s| s == symbol), "{symbol} not in {:?}", elf.symbols);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn triton_kernels_compile_to_valid_cubins_with_metadata() {
    let d = Daemon::start(Options::default());
    let client = d.client().await;
    let m = triton_module();
    let mut kernels: Vec<pb::Kernel> = [128, 256, 1024]
        .iter()
        .map(|b| {
            any_kernel(&format!("add_{b}"), Source::Triton(triton(&m, "add_kernel", ADD_SIG, &[("BLOCK", *b)], 4)))
        })
        .collect();
    let softmax = TRITON_SOFTMAX;
    kernels.push(any_kernel("softmax", Source::Triton(triton(&m, "softmax_kernel", softmax, &[("BLOCK", 1024)], 4))));
    let ln = TRITON_LAYER_NORM;
    kernels.push(any_kernel("layer_norm", Source::Triton(triton(&m, "layer_norm_kernel", ln, &[("BLOCK", 1024)], 8))));
    let mm = TRITON_MATMUL;
    let mut matmul = triton(&m, "matmul_kernel", mm, &[("BM", 64), ("BN", 64), ("BK", 32)], 4);
    matmul.want_ptx = true;
    kernels.push(any_kernel("matmul", Source::Triton(matmul)));
    let job = compile_job(&client, request("sm_90", kernels)).await;
    for (id, symbol, warps) in [
        ("add_128", "add_kernel", 4),
        ("add_1024", "add_kernel", 4),
        ("softmax", "softmax_kernel", 4),
        ("layer_norm", "layer_norm_kernel", 8),
        ("matmul", "matmul_kernel", 4),
    ] {
        let k = job.kernel(id).unwrap();
        check_cubin(k, symbol);
        assert_eq!(k.toolchain, "triton");
        let meta: serde_json::Value = serde_json::from_str(&k.metadata_json).expect("metadata JSON");
        assert_eq!(meta["name"], symbol);
        assert_eq!(meta["num_warps"], warps);
        assert!(meta.get("shared").is_some(), "{meta}");
    }
    assert!(job.kernel("matmul").unwrap().ptx.contains(".entry matmul_kernel"), "PTX comes back when asked");
    assert!(job.kernel("add_128").unwrap().ptx.is_empty(), "and only then");
    let keys: std::collections::HashSet<_> = job.kernels.iter().map(|k| &k.key).collect();
    let cubins: std::collections::HashSet<_> = job.kernels.iter().map(|k| &k.artifact).collect();
    assert_eq!(keys.len(), 6, "different constexprs give different keys");
    assert_eq!(cubins.len(), 6, "and different cubins");

    // num_warps alone changes key and cubin.
    let eight = compile_job(
        &client,
        request(
            "sm_90",
            vec![any_kernel("add", Source::Triton(triton(&m, "add_kernel", ADD_SIG, &[("BLOCK", 1024)], 8)))],
        ),
    )
    .await;
    let four = job.kernel("add_1024").unwrap();
    assert_ne!(eight.kernels[0].key, four.key);
    assert_ne!(eight.kernels[0].artifact, four.artifact);

    // The same request straight through triton.compile gives the same bytes.
    let direct = Command::new(env::python())
        .arg(env::repo_root().join("tests/triton_direct.py"))
        .arg(env::repo_root().join("examples/triton/kernels.py"))
        .env("TRITON_ALWAYS_COMPILE", "1")
        .env("TRITON_CACHE_DIR", d.dir.join("direct-triton-cache"))
        .output()
        .unwrap();
    assert!(direct.status.success(), "{}", String::from_utf8_lossy(&direct.stderr));
    assert_eq!(direct.stdout, four.artifact, "kiln's cubin differs from triton.compile's");
    d.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn triton_errors_and_dead_workers_are_failed_outcomes() {
    let d = Daemon::start(Options { concurrency: 1, ..Options::default() });
    let client = d.client().await;
    let broken = "import triton\n@triton.jit\ndef add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK:\n    pass\n";
    let job = compile_job(
        &client,
        request(
            "sm_90",
            vec![any_kernel("bad", Source::Triton(triton(broken, "add_kernel", ADD_SIG, &[("BLOCK", 64)], 4)))],
        ),
    )
    .await;
    assert_eq!(job.kernels[0].outcome(), Outcome::Failed);
    assert!(
        job.kernels[0].log.contains("SyntaxError") && job.kernels[0].log.contains("Traceback"),
        "{}",
        job.kernels[0].log
    );

    // A worker killed mid-compile: that request fails with the reason; the next one succeeds.
    let slow = format!(
        "{}\n@triton.jit\ndef slow_kernel(x_ptr, BLOCK: tl.constexpr):\n    x = tl.load(x_ptr + tl.arange(0, BLOCK))\n    for i in tl.static_range(3000):\n        x = x * 1.0001 + i\n    tl.store(x_ptr + tl.arange(0, BLOCK), x)\n",
        triton_module()
    );
    let slow_kernel = triton(&slow, "slow_kernel", &[("x_ptr", "*fp32"), ("BLOCK", "constexpr")], &[("BLOCK", 128)], 4);
    let job_id = client.submit(request("sm_90", vec![any_kernel("slow", Source::Triton(slow_kernel))])).await.unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while client.stats().await.unwrap().inflight_compiles < 1 {
        assert!(std::time::Instant::now() < deadline, "the slow compile never started");
        tokio::task::yield_now().await;
    }
    let killed = kill_triton_workers(d.pid());
    assert!(killed > 0, "found no Triton worker to kill");
    let done = client.watch(&job_id).await.unwrap().collect().await.unwrap();
    assert_eq!(done.kernels[0].outcome(), Outcome::Failed);
    assert!(done.kernels[0].log.contains("worker died"), "{}", done.kernels[0].log);
    let next = compile_job(
        &client,
        request(
            "sm_90",
            vec![any_kernel(
                "ok",
                Source::Triton(triton(&triton_module(), "add_kernel", ADD_SIG, &[("BLOCK", 64)], 4)),
            )],
        ),
    )
    .await;
    assert_eq!(next.kernels[0].outcome(), Outcome::Ok, "the pool did not recover: {}", next.kernels[0].log);
    d.stop();
}

/// SIGKILLs every Triton worker whose parent is `daemon`; returns how many.
fn kill_triton_workers(daemon: u32) -> usize {
    let mut killed = 0;
    for pid in kiln_tests::procs::triton_workers(daemon) {
        let status = Command::new("kill").args(["-KILL", &pid.to_string()]).status().expect("run kill");
        killed += usize::from(status.success());
    }
    killed
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ptx_from_nvcc_assembles_and_broken_ptx_fails() {
    let dir = tempfile::tempdir().unwrap();
    let ptx_path = dir.path().join("va.ptx");
    let nvcc = env::cuda_root().join("bin/nvcc");
    let status = Command::new(&nvcc)
        .args(["-ptx", "-arch=sm_90", "-o"])
        .arg(&ptx_path)
        .arg(env::repo_root().join("examples/cuda/vector_add.cu"))
        .env(
            "PATH",
            format!("{}:{}", env::cuda_root().join("bin").display(), std::env::var("PATH").unwrap_or_default()),
        )
        .status()
        .expect("run nvcc from the pinned wheel");
    assert!(status.success(), "nvcc -ptx failed");
    let ptx = std::fs::read_to_string(&ptx_path).unwrap();
    let d = Daemon::start(Options::default());
    let client = d.client().await;
    let job = compile_job(
        &client,
        request(
            "sm_90",
            vec![
                any_kernel("va", Source::Ptx(pb::PtxSource { ptx: ptx.clone(), options: vec!["-O3".into()] })),
                any_kernel(
                    "broken",
                    Source::Ptx(pb::PtxSource { ptx: ptx.replace(".entry", ".entyr"), options: vec![] }),
                ),
            ],
        ),
    )
    .await;
    check_cubin(job.kernel("va").unwrap(), "vector_add");
    let broken = job.kernel("broken").unwrap();
    assert_eq!(broken.outcome(), Outcome::Failed);
    assert!(broken.log.contains("ptxas"), "{}", broken.log);
    let refused = client
        .compile(request(
            "sm_90",
            vec![any_kernel("o", Source::Ptx(pb::PtxSource { ptx, options: vec!["-o/tmp/x".into()] }))],
        ))
        .await;
    let err = match refused {
        Ok(s) => s.collect().await.unwrap_err(),
        Err(e) => e,
    };
    assert_eq!(err.code(), Some(tonic::Code::InvalidArgument), "{err}");
    assert!(err.to_string().contains("graph.kernels[0].ptx.options[0]"), "{err}");
    d.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mixed_graph_compiles_every_toolchain() {
    let d = Daemon::start(Options::default());
    let text = std::fs::read_to_string(env::repo_root().join("examples/mixed.graph.json")).unwrap();
    let graph: pb::CompileGraph = serde_json::from_str(&text).unwrap();
    let req = pb::CompileRequest { graph: Some(graph), ..Default::default() };
    let client = d.client().await;
    let job = compile_job(&client, req.clone()).await;
    let toolchains: std::collections::HashSet<_> = job.kernels.iter().map(|k| k.toolchain.as_str()).collect();
    assert_eq!(toolchains, ["nvrtc", "ptxas", "triton"].into_iter().collect());
    for k in &job.kernels {
        assert_eq!(k.outcome(), Outcome::Ok, "{}: {}", k.id, k.log);
        assert_eq!(Cubin::parse(&k.artifact).unwrap().machine, EM_CUDA);
    }
    let warm = compile_job(&client, req).await;
    assert!(warm.kernels.iter().all(|k| k.tier() == Tier::Memory));
    d.stop();
}

/// A changed toolchain changes every key of that toolchain and no other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changed_ptxas_or_triton_fingerprints_change_their_keys() {
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(env::repo_root().join("examples/mixed.graph.json")).unwrap();
    let graph: pb::CompileGraph = serde_json::from_str(&text).unwrap();
    let req = pb::CompileRequest { graph: Some(graph), ..Default::default() };
    let keys = |job: &kiln_client::CompletedJob| -> std::collections::HashMap<String, String> {
        job.kernels.iter().map(|k| (k.toolchain.clone(), k.key.clone())).collect()
    };
    let base = Daemon::start(Options::default());
    let a = keys(&lookup_job(&base.client().await, req.clone()).await);
    base.stop();
    let ptxas = Daemon::start(Options { cuda_root: toolkits::appended_ptxas_root(dir.path()), ..Options::default() });
    let b = keys(&lookup_job(&ptxas.client().await, req.clone()).await);
    ptxas.stop();
    assert_ne!(a["ptxas"], b["ptxas"]);
    assert_eq!(a["nvrtc"], b["nvrtc"]);
    assert_eq!(a["triton"], b["triton"]);
    // TRITON_PTXAS_PATH is part of Triton's identity, even pointing at the same ptxas.
    let triton_ptxas = env::repo_root().join(".venv/lib/python3.11/site-packages/triton/backends/nvidia/bin/ptxas");
    let env_override = vec![("TRITON_PTXAS_PATH".to_string(), triton_ptxas.display().to_string())];
    let triton = Daemon::start(Options { extra_env: env_override, ..Options::default() });
    let c = keys(&lookup_job(&triton.client().await, req).await);
    triton.stop();
    assert_ne!(a["triton"], c["triton"]);
    assert_eq!(a["nvrtc"], c["nvrtc"]);
}

/// Triton workers run client code: as `nobody` under a root kilnd, with no view of kiln's cache
/// directory and none of kilnd's environment (tokens included). Needs root, as CI runs it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn triton_workers_cannot_see_the_cache_or_the_daemons_environment() {
    let mut options = Options::default();
    options.extra_env.push(("KILN_REMOTE_TOKEN".into(), "secret-token-that-must-not-leak".into()));
    options.config = String::new();
    let d = Daemon::start(options);
    let client = d.client().await;
    // Fill the cache so there is something to look compile_job(&at.client, vector_graph("sm_90", 1)).await;
    let cache = d.cache_dir.join("v1");
    let probe = format!(
        "import os\n\
         leaks = [k for k in os.environ if k.startswith('KILN_') and k != 'KILN_WORKER_MEMORY_MB']\n\
         if leaks:\n    raise RuntimeError(f'LEAK: environment {{leaks}}')\n\
         if os.geteuid() == 0:\n    raise RuntimeError('LEAK: the worker runs as root')\n\
         try:\n    os.listdir({cache:?})\n    raise RuntimeError('LEAK: the worker can list the cache')\n\
         except PermissionError:\n    pass\n\
         {}",
        triton_module(),
        cache = cache.display().to_string()
    );
    let t = triton(&probe, "add_kernel", ADD_SIG, &[("BLOCK", 64)], 4);
    let job = compile_job(&client, request("sm_90", vec![any_kernel("probe", Source::Triton(t))])).await;
    assert_eq!(job.kernels[0].outcome(), Outcome::Ok, "{}", job.kernels[0].log);
    d.stop();
}

/// `triton_prestart`: the Triton pool starts in the background at start-up, so it reports its
/// fingerprint before any Triton request; without it, Triton waits for the first one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn triton_prestart_starts_the_pool_before_any_request() {
    let triton_of = |s: &pb::StatsResponse| s.toolchains.iter().find(|t| t.name == "triton").cloned().unwrap();
    let lazy = Daemon::start(Options::default());
    let stats = lazy.client().await.stats().await.unwrap();
    assert!(triton_of(&stats).version.starts_with("not started"), "{:?}", triton_of(&stats));
    lazy.stop();
    let eager = Daemon::start(Options { config: "triton_prestart = true\n".into(), ..Options::default() });
    let client = eager.client().await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        let triton = triton_of(&client.stats().await.unwrap());
        if !triton.fingerprint.is_empty() {
            assert!(!triton.version.starts_with("not started"), "{triton:?}");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "Triton never started: {triton:?}");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    eager.stop();
}
