#![allow(clippy::unwrap_used)]
use super::*;
use crate::config::{Config, Defaults, FileConfig, Flags};
use kiln_proto::pb::{CompileGraph, CompileRequest, CudaSource, Header, Kernel};

fn limits() -> Limits {
    let d = Defaults { socket: "/s".into(), cache_dir: "/c".into(), cores: 2 };
    let mut l = Config::merge(&Flags::default(), &FileConfig::default(), &d).limits;
    l.max_kernels = 3;
    l.max_source_bytes = 1000;
    l
}

fn cuda(src: &str) -> CudaSource {
    CudaSource { source: src.into(), ..Default::default() }
}

fn kernel(id: &str, c: CudaSource) -> Kernel {
    Kernel { id: id.into(), source: Some(Source::Cuda(c)) }
}

fn req(target: &str, kernels: Vec<Kernel>) -> CompileRequest {
    CompileRequest {
        graph: Some(CompileGraph { name: "g".into(), target: target.into(), kernels }),
        ..Default::default()
    }
}

fn check(r: &CompileRequest, default_target: Option<&str>) -> Result<Job, tonic::Status> {
    let l = limits();
    let fp = Fingerprint::from_bytes([1; 32]);
    let supported: Vec<String> = [75, 80, 90, 100].iter().map(|n| format!("sm_{n}")).collect();
    let ctx = Context {
        limits: &l,
        default_target: default_target.map(|t| t.parse().unwrap()),
        no_target_reason: "this host has no GPU",
        nvrtc_fingerprint: &fp,
        nvrtc_version: "13.0",
        ptxas: Ok(&fp),
        triton: Err("not in this test"),
        supported_targets: &supported,
    };
    request(r, &ctx, Priority::Interactive).map_err(tonic::Status::from)
}

fn err(r: &CompileRequest) -> String {
    let s = check(r, None).unwrap_err();
    assert_eq!(s.code(), tonic::Code::InvalidArgument, "{s:?}");
    s.message().to_string()
}

#[test]
fn a_good_request_passes_with_keys() {
    let job = check(&req("sm_90", vec![kernel("a", cuda("x")), kernel("b", cuda("y"))]), None).unwrap();
    assert_eq!(job.kernels.len(), 2);
    assert_ne!(job.kernels[0].key, job.kernels[1].key);
    assert!(job.kernels.iter().all(|k| k.refusal.is_none()));
}

#[test]
fn the_default_target_applies_and_its_absence_is_explained() {
    let r = req("", vec![kernel("a", cuda("x"))]);
    assert_eq!(check(&r, Some("sm_80")).unwrap().target.to_string(), "sm_80");
    let m = err(&r);
    assert!(m.starts_with("graph.target:") && m.contains("pass a target"), "{m}");
}

#[test]
fn each_bad_field_is_named() {
    let cases: Vec<(CompileRequest, &str)> = vec![
        (CompileRequest::default(), "graph: required"),
        (req("sm_9x", vec![kernel("a", cuda("x"))]), "graph.target:"),
        (
            req("sm_50", vec![kernel("a", cuda("x"))]),
            "graph.target: sm_50 is not supported by NVRTC 13.0; supported: sm_75 sm_80 sm_90 sm_100",
        ),
        (req("sm_90", vec![]), "graph.kernels: empty"),
        (
            req("sm_90", (0..4).map(|i| kernel(&format!("k{i}"), cuda("x"))).collect()),
            "graph.kernels: 4 kernels exceeds",
        ),
        (req("sm_90", vec![kernel("", cuda("x"))]), "graph.kernels[0].id: empty"),
        (req("sm_90", vec![kernel("../x", cuda("x"))]), "graph.kernels[0].id:"),
        (req("sm_90", vec![kernel("a", cuda("x")), kernel("a", cuda("y"))]), "graph.kernels[1].id: duplicate id `a`"),
        (req("sm_90", vec![Kernel { id: "a".into(), source: None }]), "graph.kernels[0].source: required"),
        (req("sm_90", vec![kernel("a", cuda(""))]), "graph.kernels[0].cuda.source: empty"),
        (req("sm_90", vec![kernel("a", cuda(&"x".repeat(1001)))]), "graph.kernels[0].cuda: 1001 bytes"),
        (
            req("sm_90", vec![kernel("a", CudaSource { options: vec!["-I/etc".into()], ..cuda("x") })]),
            "graph.kernels[0].cuda.options[0]: `-I/etc` is not allowed",
        ),
        (
            req("sm_90", vec![kernel("a", CudaSource { options: vec!["-arch=sm_80".into()], ..cuda("x") })]),
            "graph.kernels[0].cuda.options[0]: `-arch=sm_80` sets the target",
        ),
        (
            req(
                "sm_90",
                vec![kernel(
                    "a",
                    CudaSource {
                        headers: vec![Header { name: "/etc/passwd".into(), content: String::new() }],
                        ..cuda("x")
                    },
                )],
            ),
            "graph.kernels[0].cuda.headers[0].name:",
        ),
        (
            req("sm_90", vec![kernel("a", CudaSource { name_expressions: vec![" ".into()], ..cuda("x") })]),
            "graph.kernels[0].cuda.name_expressions[0]:",
        ),
    ];
    for (r, want) in cases {
        let m = err(&r);
        assert!(m.starts_with(want), "expected {want:?}, got {m:?}");
    }
}

#[test]
fn host_path_includes_are_refused_per_kernel_not_per_request() {
    let job = check(&req("sm_90", vec![kernel("a", cuda("#include \"/etc/passwd\"")), kernel("b", cuda("x"))]), None)
        .unwrap();
    let refusal = job.kernels[0].refusal.as_deref().unwrap();
    assert!(refusal.contains("/etc/passwd") && refusal.contains("outside the given headers"), "{refusal}");
    assert!(job.kernels[1].refusal.is_none());
}
