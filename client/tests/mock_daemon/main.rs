//! The client library and the `kiln` binary against a scripted stand-in daemon (see `server`).
//! Tests against the real kilnd live in the workspace's `tests/` crate.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod server;

use kiln_client::graph::{GraphOptions, build_graph};
use kiln_client::{ClientError, pb};
use std::path::{Path, PathBuf};
use std::process::Output;
use tonic::Code;

fn write(dir: &Path, name: &str, content: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, content).unwrap();
    path
}

fn request(graph: pb::CompileGraph) -> pb::CompileRequest {
    pb::CompileRequest {
        graph: Some(graph),
        priority: pb::Priority::Interactive as i32,
        omit_artifacts: false,
        ..Default::default()
    }
}

fn one_kernel(id: &str, source: &str) -> pb::CompileGraph {
    let kernel = pb::Kernel {
        id: id.into(),
        source: Some(pb::kernel::Source::Cuda(pb::CudaSource { source: source.into(), ..Default::default() })),
    };
    pb::CompileGraph { name: "t".into(), target: String::new(), kernels: vec![kernel] }
}

#[tokio::test]
async fn compiles_a_graph_with_headers_and_a_large_artifact() {
    let daemon = server::start().await;
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "h.h", "#define N 4\n");
    let files = vec![write(dir.path(), "a.cu", "#include \"h.h\"\n"), write(dir.path(), "big.cu", "x")];
    let graph = build_graph(&files, &GraphOptions::default()).unwrap();

    let client = kiln_client::connect(&daemon.uri).await.unwrap();
    let job = client.compile(request(graph)).await.unwrap().collect().await.unwrap();
    assert!(job.all_ok());
    assert_eq!(job.job_id, server::JOB_ID);
    assert_eq!(job.kernel("big").unwrap().artifact.len(), server::BIG_ARTIFACT_BYTES);
    assert_eq!(&job.kernel("a").unwrap().artifact[..], b"#include \"h.h\"\n");
    assert_eq!(job.done.kernel_keys.len(), 2);

    let (rpc, sent) = daemon.requests().remove(0);
    assert_eq!(rpc, "compile");
    let Some(pb::kernel::Source::Cuda(a)) = &sent.graph.unwrap().kernels[0].source else { panic!() };
    assert_eq!(a.headers, vec![pb::Header { name: "h.h".into(), content: "#define N 4\n".into() }]);
    daemon.stop().await;
}

#[tokio::test]
async fn grpc_errors_keep_their_code() {
    let daemon = server::start().await;
    let client = kiln_client::connect(&daemon.uri).await.unwrap();
    let err = client.compile(request(one_kernel("k", ""))).await.unwrap_err();
    assert_eq!(err.code(), Some(Code::InvalidArgument));
    assert_eq!(err.to_string(), "invalid argument: graph.kernels[0].cuda.source: empty");
    let err = client.watch("nope").await.unwrap_err();
    assert_eq!(err.code(), Some(Code::NotFound));

    let mut graph = one_kernel("k", "x");
    graph.name = "shutdown".into();
    let err = client.compile(request(graph)).await.unwrap().collect().await.unwrap_err();
    assert!(matches!(err, ClientError::JobFailed { .. }), "{err:?}");
    daemon.stop().await;
}

#[tokio::test]
async fn submit_then_watch_and_stats() {
    let daemon = server::start().await;
    let client = kiln_client::connect(&daemon.uri).await.unwrap();
    let job_id = client.submit(request(one_kernel("k", "x"))).await.unwrap();
    let job = client.watch(&job_id).await.unwrap().collect().await.unwrap();
    assert_eq!(job.kernels.len(), 1);
    assert_eq!(client.stats().await.unwrap().version, "0.0.0-mock");
    daemon.stop().await;
}

async fn kiln(daemon: &str, args: &[&str]) -> Output {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_kiln"))
        .arg("--daemon")
        .arg(daemon)
        .args(args)
        .output()
        .await
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[tokio::test]
async fn cli_compile_prints_ndjson_and_writes_cubins() {
    let daemon = server::start().await;
    let dir = tempfile::tempdir().unwrap();
    let a = write(dir.path(), "a.cu", "template <class T> __global__ void a(T) {}\n");
    let out = dir.path().join("out");
    let args =
        ["compile", "--json", "--name-expression", "a<float>", "--out", out.to_str().unwrap(), a.to_str().unwrap()];
    let output = kiln(&daemon.uri, &args).await;
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let lines: Vec<serde_json::Value> =
        text(&output.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0]["id"], "a");
    assert_eq!(lines[0]["outcome"], "ok");
    assert_eq!(lines[0]["tier"], "compiled");
    assert_eq!(lines[0]["compile_ms"], 250.0);
    assert_eq!(lines[0]["lowered_names"]["a<float>"], "_Za<float>");
    assert_eq!(lines[1]["graph_key"], "ab".repeat(32));
    assert_eq!(std::fs::read(out.join("a.cubin")).unwrap(), std::fs::read(&a).unwrap());
    daemon.stop().await;
}

#[tokio::test]
async fn cli_exit_codes() {
    let daemon = server::start().await;
    let dir = tempfile::tempdir().unwrap();
    let good = write(dir.path(), "good.cu", "ok");
    let bad = write(dir.path(), "bad.cu", "error here");
    let empty = write(dir.path(), "empty.cu", "");

    let output = kiln(&daemon.uri, &["compile", good.to_str().unwrap(), bad.to_str().unwrap()]).await;
    assert_eq!(output.status.code(), Some(1));
    let stdout = text(&output.stdout);
    assert!(stdout.contains("\n    bad.cu(1): error: boom\n"), "{stdout}");
    assert!(stdout.contains("2 kernels: 1 ok, 1 failed"), "{stdout}");

    // An empty file is named before anything is sent; a field the daemon refuses is followed by
    // the file it stands for (this mock refuses a kernel with no CUDA source, a PTX one here).
    let output = kiln(&daemon.uri, &["compile", empty.to_str().unwrap()]).await;
    assert_eq!(output.status.code(), Some(2));
    let expected = format!("error: {}: empty file, nothing to compile", empty.display());
    assert_eq!(text(&output.stderr).trim_end(), expected);
    let ptx = write(dir.path(), "v.ptx", ".version 8.0");
    let output = kiln(&daemon.uri, &["compile", good.to_str().unwrap(), ptx.to_str().unwrap()]).await;
    assert_eq!(output.status.code(), Some(2));
    let expected =
        format!("error: invalid argument: graph.kernels[1].source: missing (graph.kernels[1] is {})", ptx.display());
    assert_eq!(text(&output.stderr).trim_end(), expected);

    let output = kiln(&daemon.uri, &["lookup", "--json", good.to_str().unwrap()]).await;
    assert_eq!(output.status.code(), Some(1));
    assert!(text(&output.stdout).contains("\"outcome\":\"miss\""));

    let output = kiln("unix:///nonexistent/kilnd.sock", &["compile", good.to_str().unwrap()]).await;
    assert_eq!(output.status.code(), Some(2));
    assert!(text(&output.stderr).starts_with("error: cannot reach kilnd at unix:///nonexistent/kilnd.sock"));
    daemon.stop().await;
}

#[tokio::test]
async fn cli_submit_watch_graph_file_stats_and_doctor() {
    let daemon = server::start().await;
    let dir = tempfile::tempdir().unwrap();
    let graph = write(dir.path(), "g.json", r#"{"name": "g", "kernels": [{"id": "k", "cuda": {"source": "x"}}]}"#);

    let output =
        kiln(&daemon.uri, &["submit", "--json", "--graph", graph.to_str().unwrap(), "--target", "sm_90a"]).await;
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let submitted: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(submitted["job_id"], server::JOB_ID);
    let (_, sent) = daemon.requests().remove(0);
    assert_eq!(sent.graph.unwrap().target, "sm_90a");
    assert_eq!(sent.priority, pb::Priority::Background as i32);

    let output = kiln(&daemon.uri, &["watch", server::JOB_ID]).await;
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    assert!(text(&output.stdout).starts_with("k  ok      compiled"), "{}", text(&output.stdout));

    let output = kiln(&daemon.uri, &["stats", "--json"]).await;
    let stats: pb::StatsResponse = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(stats.version, "0.0.0-mock");

    // The doctor compiles a tiny kernel per toolchain through the daemon: this mock compiles
    // CUDA only, so its ptxas and Triton are reported as problems, with the daemon's reason.
    let output = kiln(&daemon.uri, &["doctor"]).await;
    let report = text(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "{report}");
    assert!(report.contains("nvrtc           ok: compiled a tiny kernel"), "{report}");
    for toolchain in ["ptxas", "triton"] {
        assert!(report.contains(&format!("problem: kilnd cannot compile with {toolchain}: ")), "{report}");
    }
    let output = kiln("unix:///nonexistent/kilnd.sock", &["doctor", "--json"]).await;
    assert_eq!(output.status.code(), Some(1));
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["reachable"], false);
    daemon.stop().await;
}
