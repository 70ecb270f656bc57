//! 50 concurrent clients asking for one uncompiled graph cause exactly one compile per kernel,
//! counted by a witness NVRTC outside kiln's code.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use kiln_proto::pb::{Outcome, Tier};
use kiln_tests::daemon::{Daemon, Options, compile_job};
use kiln_tests::kernels::*;
use kiln_tests::toolkits;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_clients_one_compile_per_kernel() {
    let dir = tempfile::tempdir().unwrap();
    let witness = dir.path().join("compiles.log");
    let (root, env) = toolkits::witness_root(dir.path(), &witness);
    let d = Daemon::start(Options { cuda_root: root, extra_env: env, ..Options::default() });
    assert_eq!(toolkits::witnessed_compiles(&witness), 0, "start-up compiled something");
    const KERNELS: usize = 4;
    let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(50));
    let mut clients = tokio::task::JoinSet::new();
    for _ in 0..50 {
        let (uri, barrier) = (d.uri(), barrier.clone());
        clients.spawn(async move {
            let client = kiln_client::connect(&uri).await.unwrap();
            barrier.wait().await;
            compile_job(&client, vector_graph("sm_90", KERNELS)).await
        });
    }
    let mut jobs = Vec::new();
    while let Some(job) = clients.join_next().await {
        jobs.push(job.unwrap());
    }
    assert_eq!(toolkits::witnessed_compiles(&witness), KERNELS, "NVRTC ran a different number of times");
    let reference = &jobs[0];
    let mut compiled = 0;
    for job in &jobs {
        for k in &job.kernels {
            assert_eq!(k.outcome(), Outcome::Ok, "{}", k.log);
            assert_eq!(k.artifact, reference.kernel(&k.id).unwrap().artifact, "clients got different bytes");
            // A client whose lookup missed memory just before the compile landed, and read the
            // disk just after its write, gets it from disk: still one compile, as counted below.
            assert!(matches!(k.tier(), Tier::Compiled | Tier::Joined | Tier::Memory | Tier::Disk), "{:?}", k.tier());
            compiled += usize::from(k.tier() == Tier::Compiled);
        }
    }
    assert_eq!(compiled, KERNELS, "exactly one request per kernel paid the compile");
    d.stop();
}
