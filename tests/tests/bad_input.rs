//! Bad input gets a clear error naming the field, and nothing a client sends takes kilnd down.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use kiln_proto::pb::{self, Outcome};
use kiln_tests::daemon::{Daemon, Options, compile_job};
use kiln_tests::kernels::*;
use tonic::Code;

fn limited() -> Options {
    Options { config: "max_kernels = 8\nmax_source_kb = 64\n".into(), ..Options::default() }
}

async fn rpc_error(client: &kiln_client::Client, req: pb::CompileRequest) -> (Code, String) {
    let err = match client.compile(req).await {
        Ok(stream) => stream.collect().await.expect_err("the request should fail"),
        Err(e) => e,
    };
    (err.code().expect("a gRPC status"), err.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_requests_are_invalid_argument_naming_the_field() {
    let d = Daemon::start(limited());
    let client = d.client().await;
    let ok = || kernel("k", cuda(&vector_add(1)));
    let cases: Vec<(pb::CompileRequest, &str)> = vec![
        (pb::CompileRequest::default(), "graph: required"),
        (request("sm_90", vec![kernel("k", cuda(""))]), "graph.kernels[0].cuda.source: empty"),
        (request("sm_9x", vec![ok()]), "graph.target: `sm_9x` is not a GPU target"),
        (request("sm_35", vec![ok()]), "graph.target: sm_35 is not supported"),
        (request("sm_90", vec![ok(), ok()]), "graph.kernels[1].id: duplicate id `k`"),
        (vector_graph("sm_90", 9), "graph.kernels: 9 kernels exceeds the limit of 8"),
        (
            request("sm_90", vec![kernel("k", cuda(&"/* pad */ ".repeat(10_000)))]),
            "graph.kernels[0].cuda: 100000 bytes",
        ),
        (
            request("sm_90", vec![kernel("k", pb::CudaSource { options: vec!["-I/etc".into()], ..cuda("x") })]),
            "graph.kernels[0].cuda.options[0]: `-I/etc` is not allowed",
        ),
        (
            request("sm_90", vec![kernel("k", pb::CudaSource { options: vec!["--time=/tmp/t".into()], ..cuda("x") })]),
            "graph.kernels[0].cuda.options[0]: `--time=/tmp/t` is not allowed",
        ),
    ];
    for (req, want) in cases {
        let (code, message) = rpc_error(&client, req).await;
        assert_eq!(code, Code::InvalidArgument, "{message}");
        assert!(message.contains(want), "expected {want:?} in {message:?}");
    }
    let (code, message) = match client.watch("no-such-job").await {
        Ok(s) => {
            let e = s.collect().await.expect_err("unknown job");
            (e.code().expect("status"), e.to_string())
        }
        Err(e) => (e.code().expect("status"), e.to_string()),
    };
    assert_eq!(code, Code::NotFound, "{message}");
    assert!(client.stats().await.is_ok(), "the daemon stays up");
    d.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_target_and_no_gpu_says_to_pass_a_target() {
    let d = Daemon::start(Options { target: None, ..Options::default() });
    let (code, message) = rpc_error(&d.client().await, request("", vec![kernel("k", cuda(&vector_add(1)))])).await;
    assert_eq!(code, Code::InvalidArgument);
    assert!(message.contains("graph.target") && message.contains("pass a target such as sm_90"), "{message}");
    d.stop();
}

/// Includes of host paths fail the kernel without reading the file or hanging.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_paths_in_includes_are_failed_outcomes_without_contents() {
    let d = Daemon::start(Options::default());
    let client = d.client().await;
    let evil_header = cuda_with_header(
        "#include \"innocent.h\"\nextern \"C\" __global__ void k() {}\n",
        "innocent.h",
        "#include \"/etc/passwd\"\n",
    );
    let req = request(
        "sm_90",
        vec![
            kernel("passwd", cuda("#include \"/etc/passwd\"\nextern \"C\" __global__ void k() {}\n")),
            kernel("zero", cuda("#include </dev/zero>\nextern \"C\" __global__ void k() {}\n")),
            kernel("dots", cuda("#include \"../../../../etc/passwd\"\n")),
            kernel("spliced", cuda("#inc\\\nlude \"/etc/passwd\"\n")),
            kernel("header", evil_header),
            // Probes that would tell whether a host file exists, without reading it.
            kernel(
                "probe",
                cuda("#if __has_include(</etc/shadow>)\nextern \"C\" __global__ void has_shadow() {}\n#endif\n"),
            ),
            kernel("probe-macro", cuda("#define H __has_include(\"/etc/passwd\")\n#if H\nint x;\n#endif\n")),
            kernel("fine", cuda(&vector_add(3))),
        ],
    );
    let job = tokio::time::timeout(std::time::Duration::from_secs(60), async { compile_job(&client, req).await })
        .await
        .expect("a hostile include must not hang the daemon");
    for id in ["passwd", "zero", "dots", "spliced", "header", "probe", "probe-macro"] {
        let k = job.kernel(id).unwrap();
        assert_eq!(k.outcome(), Outcome::Failed, "{id}");
        assert!(k.log.contains("outside the given headers"), "{id}: {}", k.log);
        assert!(!k.log.contains("root:"), "{id} leaked /etc/passwd: {}", k.log);
    }
    assert_eq!(job.kernel("fine").unwrap().outcome(), Outcome::Ok);
    d.stop();
}

/// A compile past its timeout is killed; that kernel fails with the reason and the pool goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compile_past_its_timeout_fails_and_the_daemon_keeps_serving() {
    let d = Daemon::start(Options { config: "compile_timeout_secs = 1\n".into(), ..Options::default() });
    let client = d.client().await;
    let job = compile_job(&client, request("sm_90", vec![kernel("slow", cuda(&slow_kernel(20_000)))])).await;
    let k = &job.kernels[0];
    assert_eq!(k.outcome(), Outcome::Failed);
    assert!(k.log.contains("timeout") && k.log.contains("killed"), "{}", k.log);
    let next = compile_job(&client, vector_graph("sm_90", 2)).await;
    assert!(next.all_ok(), "the pool did not recover");
    d.stop();
}

/// Past the queue bound, new work is RESOURCE_EXHAUSTED rather than an unbounded wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_queue_is_resource_exhausted() {
    let d = Daemon::start(Options { concurrency: 1, config: "max_queue = 1\n".into(), ..Options::default() });
    let client = d.client().await;
    let slow: Vec<pb::Kernel> =
        (0..3).map(|i| kernel(&format!("s{i}"), cuda(&format!("// {i}\n{}", slow_kernel(1500))))).collect();
    let job = client.submit(request("sm_90", slow)).await.unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while client.stats().await.unwrap().queue_depth < 1 {
        assert!(std::time::Instant::now() < deadline, "the queue never filled");
        tokio::task::yield_now().await;
    }
    let (code, message) = rpc_error(&client, vector_graph("sm_90", 1)).await;
    assert_eq!(code, Code::ResourceExhausted, "{message}");
    assert!(message.contains("queue is full"), "{message}");
    let done = client.watch(&job).await.unwrap().collect().await.unwrap();
    assert!(done.all_ok());
    d.stop();
}
