//! `kiln explain` and kilnd's `Explain`, end to end: a real kilnd with the real NVRTC, files on
//! disk through the real `kiln` CLI, and for the fleet a real kiln-cache over a real
//! redis-server. Each test changes one input and checks the words the miss is explained with,
//! and that `kiln_misses_total` and the Stats list count it under the same reason.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use kiln_proto::pb;
use kiln_tests::daemon::{Daemon, Options, compile_job};
use kiln_tests::http::sample;
use kiln_tests::kernels::{cuda, kernel, request, vector_add};
use kiln_tests::redis::fleet;
use serde_json::Value;
use std::path::Path;

/// `kiln explain --json ARGS`: its one NDJSON line (one kernel), and the exit code.
fn explain_json(d: &Daemon, args: &[&str], cwd: &Path) -> (Value, i32) {
    let mut all = vec!["explain", "--json"];
    all.extend_from_slice(args);
    let out = d.kiln(&all, cwd);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<Value> =
        stdout.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON: {l}: {e}"))).collect();
    assert_eq!(lines.len(), 1, "one kernel, one line: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    (lines[0].clone(), out.status.code().unwrap())
}

/// The texts of a JSON explanation's differences.
fn differences(e: &Value) -> Vec<String> {
    e["differences"]
        .as_array()
        .map(|d| d.iter().map(|d| d["text"].as_str().unwrap().to_string()).collect())
        .unwrap_or_default()
}

fn misses(d: &Daemon, reason: &str) -> f64 {
    sample(&d.metrics_text(), &format!("kiln_misses_total{{reason=\"{reason}\"}}")).unwrap_or(0.0)
}

/// A kernel that includes `common.cuh`, written into `dir`.
fn write_kernel(dir: &Path, header: &str) {
    std::fs::write(dir.join("common.cuh"), header).unwrap();
    std::fs::write(
        dir.join("scale.cu"),
        "#include \"common.cuh\"\nextern \"C\" __global__ void scale(float* x) { x[0] *= FACTOR; }\n",
    )
    .unwrap();
}

fn compile(d: &Daemon, dir: &Path, extra: &[&str]) {
    let mut args = vec!["compile", "--target", "sm_90", "scale.cu"];
    args.extend_from_slice(extra);
    let out = d.kiln(&args, dir);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn explain_names_the_header_the_option_and_the_target_that_changed() {
    let home = tempfile::tempdir().unwrap();
    let d = Daemon::start_in(home.path(), Options::default());
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    write_kernel(dir, "#define FACTOR 3.0f\n");

    // Never compiled: a miss, and why.
    let (never, code) = explain_json(&d, &["--target", "sm_90", "scale.cu"], dir);
    assert_eq!(code, 1, "a miss exits 1");
    assert_eq!(never["reason"], "new");
    assert_eq!(never["verdict"], "miss: never compiled under this identity");
    // Files compile as an unnamed graph, so a file's kernel is known by its stem alone.
    assert_eq!(never["identity"]["graph"].as_str().unwrap_or_default(), "", "no --name, no graph name");
    assert_eq!(never["identity"]["kernelId"], "scale");

    compile(&d, dir, &[]);
    assert_eq!(misses(&d, "new"), 1.0);
    let (hit, code) = explain_json(&d, &["--target", "sm_90", "scale.cu"], dir);
    assert_eq!((hit["verdict"].as_str(), code), (Some("hit (memory)"), 0), "{hit}");
    assert_eq!(hit["cached"], true);
    let first_key = hit["key"].as_str().unwrap().to_string();

    // A header changed.
    write_kernel(dir, "#define FACTOR 5.0f\n");
    let (header, code) = explain_json(&d, &["--target", "sm_90", "scale.cu"], dir);
    assert_eq!(code, 1);
    assert_eq!(header["reason"], "header", "{header}");
    assert_eq!(header["verdict"], "miss: header `common.cuh`: content differs");
    assert_eq!(differences(&header), vec!["header `common.cuh`: content differs"]);
    assert_eq!(header["nearestFrom"], "local");
    assert_eq!(header["nearest"]["key"], first_key.as_str());
    let human = d.kiln(&["explain", "--target", "sm_90", "scale.cu"], dir);
    let text = String::from_utf8_lossy(&human.stdout);
    assert!(text.contains("scale: miss: header `common.cuh`: content differs"), "{text}");
    assert!(text.contains("  - header `common.cuh`: content differs [header]"), "{text}");

    // Compiling it counts the miss under the same reason, in the metric and in Stats.
    compile(&d, dir, &[]);
    assert_eq!(misses(&d, "header"), 1.0);
    let stats = d.kiln(&["stats", "--json"], dir);
    let stats: Value = serde_json::from_slice(&stats.stdout).unwrap();
    let recent = &stats["recentMisses"][0];
    assert_eq!((recent["reason"].as_str(), recent["kernelId"].as_str()), (Some("header"), Some("scale")), "{stats}");
    assert_eq!(recent["detail"], "header `common.cuh`: content differs");

    // An option added, then another target: each named, against the nearest recipe.
    let (option, _) = explain_json(&d, &["--target", "sm_90", "scale.cu", "--", "--use_fast_math"], dir);
    assert_eq!(option["reason"], "options");
    assert_eq!(differences(&option), vec!["options: --use_fast_math added"]);
    let (target, _) = explain_json(&d, &["--target", "sm_80", "scale.cu"], dir);
    assert_eq!(target["reason"], "target");
    assert_eq!(differences(&target), vec!["target sm_80 vs sm_90"]);
    compile(&d, dir, &["--", "--use_fast_math"]);
    assert_eq!(misses(&d, "options"), 1.0);

    // Recipes survive a restart; a key alone is explained through its own recipe.
    d.stop();
    let d = Daemon::start_in(home.path(), Options::default());
    write_kernel(dir, "#define FACTOR 7.0f\n");
    let (after, _) = explain_json(&d, &["--target", "sm_90", "scale.cu"], dir);
    assert_eq!(differences(&after), vec!["header `common.cuh`: content differs"], "{after}");
    assert_eq!(after["nearestFrom"], "local");
    let (by_key, code) = explain_json(&d, &["--key", &first_key], dir);
    assert_eq!((by_key["verdict"].as_str(), code), (Some("hit (disk)"), 0), "{by_key}");
    assert_eq!(by_key["identity"]["kernelId"], "scale");
    assert!(by_key["recipe"]["headers"][0]["digest"].as_str().unwrap().starts_with("blake3:"));
    d.stop();
}

/// A hit is described by where it came from, not compared with an earlier failed attempt at the
/// same kernel; a remembered failure is compared with the attempt that worked.
#[test]
fn a_hit_says_where_it_came_from_not_how_it_differs_from_a_failed_compile() {
    let d = Daemon::start(Options::default());
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let broken = "extern \"C\" __global__ void scale(float* x) { x[0] *= ; }\n";
    std::fs::write(dir.join("scale.cu"), broken).unwrap();
    let failed = d.kiln(&["compile", "--target", "sm_90", "scale.cu"], dir);
    assert!(!failed.status.success(), "the broken kernel compiled");
    std::fs::write(dir.join("scale.cu"), "extern \"C\" __global__ void scale(float* x) { x[0] *= 2.0f; }\n").unwrap();
    compile(&d, dir, &[]);

    let (hit, code) = explain_json(&d, &["--target", "sm_90", "scale.cu"], dir);
    assert_eq!((hit["verdict"].as_str(), code), (Some("hit (memory)"), 0), "{hit}");
    assert!(hit["nearest"].is_null() && differences(&hit).is_empty(), "a hit compared: {hit}");
    assert_eq!(hit["reason"].as_str().unwrap_or_default(), "", "{hit}");
    let host = hit["recipe"]["host"].as_str().unwrap_or_default().to_string();
    assert!(!host.is_empty(), "the kept recipe names the host that compiled it: {hit}");
    let human = d.kiln(&["explain", "--target", "sm_90", "scale.cu"], dir);
    let text = String::from_utf8_lossy(&human.stdout);
    assert!(text.starts_with(&format!("scale: hit (memory)\n  compiled on {host} at ")), "{text}");
    assert!(!text.contains("compared with"), "{text}");

    std::fs::write(dir.join("scale.cu"), broken).unwrap();
    let (failure, _) = explain_json(&d, &["--target", "sm_90", "scale.cu"], dir);
    assert_eq!(failure["verdict"], "hit (a failed compile, remembered)", "{failure}");
    assert_eq!(differences(&failure), vec!["source: content differs"], "{failure}");
    assert_eq!(failure["nearest"]["key"], hit["key"]);
    d.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_invalid_argument_naming_the_field() {
    let d = Daemon::start(Options::default());
    let client = d.client().await;
    let named = |job: &str, name: &str| pb::TorchGraphName { job: job.into(), name: name.into() };
    let cases: Vec<(pb::ExplainRequest, &str)> = vec![
        (pb::ExplainRequest::default(), "graph: required"),
        (pb::ExplainRequest { graph: request("sm_90", vec![]).graph, ..Default::default() }, "graph.kernels: empty"),
        (pb::ExplainRequest { keys: vec!["abc".into()], ..Default::default() }, "keys[0]: expected 64 lowercase hex"),
        (
            pb::ExplainRequest {
                graph: request("sm_90", vec![kernel("k", cuda(&vector_add(1)))]).graph,
                keys: vec!["0".repeat(64)],
                ..Default::default()
            },
            "keys: give a graph, keys or torch_graphs: one of them",
        ),
        (
            pb::ExplainRequest {
                keys: vec!["0".repeat(64)],
                torch_graphs: vec![named("j", "g")],
                ..Default::default()
            },
            "torch_graphs: give a graph, keys or torch_graphs: one of them",
        ),
        (
            pb::ExplainRequest { torch_graphs: vec![named("j", "g"), named("j", "")], ..Default::default() },
            "torch_graphs[1].name: required",
        ),
        (
            pb::ExplainRequest { torch_graphs: vec![named(&"j".repeat(300), "g")], ..Default::default() },
            "torch_graphs[0].job: longer than",
        ),
        (
            pb::ExplainRequest {
                graph: request("sm_91", vec![kernel("k", cuda(&vector_add(1)))]).graph,
                ..Default::default()
            },
            "graph.target",
        ),
    ];
    for (req, field) in cases {
        let status = client.grpc().explain(req).await.unwrap_err();
        assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
        assert!(status.message().starts_with(field), "expected {field:?}, got {:?}", status.message());
    }
    // An unknown key, or a torch graph never asked for here, is no error: nothing is known of it.
    let answer = client
        .grpc()
        .explain(pb::ExplainRequest { keys: vec!["0".repeat(64)], ..Default::default() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(answer.kernels[0].verdict, "miss: no recipe of this key is kept on this host or in the fleet");
    let answer = client
        .grpc()
        .explain(pb::ExplainRequest { torch_graphs: vec![named("job", "forward:0/0")], ..Default::default() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(answer.kernels[0].reason, "unknown");
    assert!(
        answer.kernels[0].verdict.contains(r#"no graph named "forward:0/0" of job "job""#),
        "{:?}",
        answer.kernels[0]
    );
    // The same through the CLI, as a user who read the name off the process's report asks.
    let dir = tempfile::tempdir().unwrap();
    let (line, code) = explain_json(&d, &["--job", "job", "--torch-graph", "forward:0/0"], dir.path());
    assert_eq!(
        (line["id"].as_str(), line["reason"].as_str(), code),
        (Some("forward:0/0"), Some("unknown"), 1),
        "{line}"
    );
    d.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_host_explains_a_miss_against_another_hosts_recipe() {
    let (_redis, cache) = fleet();
    let first = cache.host("");
    let with_header = |factor: &str| {
        let mut c = cuda("#include \"common.cuh\"\nextern \"C\" __global__ void scale(float* x) { x[0] *= FACTOR; }\n");
        c.headers.push(pb::Header { name: "common.cuh".into(), content: format!("#define FACTOR {factor}\n") });
        request("sm_90", vec![kernel("scale", c)])
    };
    compile_job(&first.client().await, with_header("3.0f")).await;

    let fresh = cache.host("");
    let client = fresh.client().await;
    let explain = |req: pb::CompileRequest| pb::ExplainRequest { graph: req.graph, ..Default::default() };
    let same = client.grpc().explain(explain(with_header("3.0f"))).await.unwrap().into_inner();
    assert_eq!(same.kernels[0].verdict, "hit (the fleet cache)");
    assert_eq!(same.kernels[0].tier(), pb::Tier::Remote);
    let changed = client.grpc().explain(explain(with_header("5.0f"))).await.unwrap().into_inner();
    let k = &changed.kernels[0];
    assert!(!k.cached);
    assert_eq!(k.verdict, "miss: header `common.cuh`: content differs", "{k:?}");
    assert_eq!(k.nearest_from, "fleet", "the fresh host has no recipe of its own");
    assert_eq!(k.nearest.as_ref().unwrap().key, same.kernels[0].key);
    fresh.stop();
    first.stop();
}
