//! Request validation: compile requests decoded from any bytes on the wire, or built of fields
//! each mostly good and sometimes not, are answered with a job of the same kernels or an error
//! that names a field, never a panic.

use crate::scanner::{outside_name, relative_name, soup};
use crate::support::{self, config};
use crate::{CORPUS, wire};
use kiln_daemon::config::{Config, Defaults, FileConfig, Flags};
use kiln_daemon::domain::Priority;
use kiln_daemon::rpc::validate;
use kiln_daemon::runtime::toolchain::includes::check;
use kiln_proto::Fingerprint;
use kiln_proto::pb::{self, kernel::Source};
use proptest::prelude::*;
use prost::Message;

fn limits() -> kiln_daemon::config::Limits {
    let d = Defaults { socket: "/s".into(), cache_dir: "/c".into(), cores: 2 };
    let mut l = Config::merge(&Flags::default(), &FileConfig::default(), &d).limits;
    l.max_kernels = 8;
    l.max_source_bytes = 4096;
    l
}

/// Validates as kilnd does, with NVRTC, ptxas and Triton all available.
fn validate_request(r: &pb::CompileRequest) -> Result<kiln_daemon::domain::Job, tonic::Status> {
    let l = limits();
    let fp = Fingerprint::from_bytes([1; 32]);
    let supported: Vec<String> = [75, 80, 90, 100].iter().map(|n| format!("sm_{n}")).collect();
    let ctx = validate::Context {
        limits: &l,
        default_target: None,
        no_target_reason: "this test has no GPU",
        nvrtc_fingerprint: &fp,
        nvrtc_version: "13.0",
        ptxas: Ok(&fp),
        triton: Ok(&fp),
        supported_targets: &supported,
    };
    validate::request(r, &ctx, Priority::Interactive).map_err(tonic::Status::from)
}

/// An error is INVALID_ARGUMENT and begins with the request field it is about.
fn names_a_field(s: &tonic::Status) -> bool {
    let field = s.message().split(": ").next().unwrap_or("");
    s.code() == tonic::Code::InvalidArgument
        && (field == "priority" || field.starts_with("graph"))
        && field.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'[' | b']'))
}

/// A request that passes keeps its kernels, in order, each with a distinct id.
fn job_is_sound(r: &pb::CompileRequest, job: &kiln_daemon::domain::Job) -> bool {
    let kernels = &r.graph.as_ref().unwrap().kernels;
    job.kernels.len() == kernels.len() && job.kernels.iter().zip(kernels).all(|(j, k)| j.id == k.id)
}

/// Mostly `good`, sometimes `bad`: requests near the edge of valid reach every check.
fn mostly<T: std::fmt::Debug>(
    good: impl Strategy<Value = T> + 'static,
    bad: impl Strategy<Value = T> + 'static,
) -> BoxedStrategy<T> {
    prop_oneof![6 => good, 1 => bad].boxed()
}

fn id() -> impl Strategy<Value = String> {
    prop_oneof![
        1 => "[a-z][a-z0-9_.-]{0,6}",
        1 => prop::sample::select(vec!["", ".hidden", "../x", "a/b", "a b", "é", "k0"]).prop_map(String::from),
        1 => ".{0,201}",
    ]
}

fn option() -> impl Strategy<Value = String> {
    let good = prop::sample::select(vec![
        "-lineinfo",
        "--use_fast_math",
        "-O3",
        "-std=c++17",
        "--maxrregcount=64",
        "-Xptxas=-v",
        "--diag-suppress=177",
        "-DX=1",
        "-v",
        "--ptxas-options=-v,-O3",
    ]);
    let bad = prop::sample::select(vec![
        "-O9",
        "-std=c++99",
        "-I/etc",
        "-arch=sm_80",
        "--maxrregcount=999",
        "-Xptxas=-o",
        "--diag-suppress=,",
        "-D",
        "",
        "--gpu-name=sm_90",
        "-o",
        "-include",
        "--pre-include=/etc/passwd",
    ]);
    mostly(good.prop_map(String::from), prop_oneof![bad.prop_map(String::from), ".{0,12}"])
}

fn cuda() -> impl Strategy<Value = Source> {
    let source = mostly(
        prop_oneof!["[a-z ]{1,20}", soup().prop_filter("not empty", |s| !s.is_empty())],
        prop_oneof![
            Just("#include \"/etc/passwd\"\n".to_string()),
            Just("#if __has_include(<../x>)\n#endif\n".to_string()),
            Just(String::new()),
            Just("a\0b".to_string()),
        ],
    );
    let header = (mostly(relative_name(), prop_oneof![outside_name(), ".{0,6}"]), soup())
        .prop_map(|(name, content)| pb::Header { name, content });
    (
        source,
        prop::collection::vec(mostly("[a-z<>:, ]{1,12}", ".{0,4}"), 0..3),
        prop::collection::vec(header, 0..3),
        prop::collection::vec(option(), 0..3),
    )
        .prop_map(|(source, name_expressions, headers, options)| {
            Source::Cuda(pb::CudaSource { source, name_expressions, headers, options })
        })
}

fn ptx() -> impl Strategy<Value = Source> {
    let ptx = mostly("[a-z .;]{1,20}", prop_oneof![".{0,20}", Just(String::new()), Just("x\0y".to_string())]);
    (ptx, prop::collection::vec(option(), 0..3)).prop_map(|(ptx, options)| Source::Ptx(pb::PtxSource { ptx, options }))
}

/// A Triton kernel `k(x: *fp32, n: i32, BLOCK: constexpr)`, each part sometimes wrong.
fn triton() -> impl Strategy<Value = Source> {
    use pb::triton_constexpr::Value;
    let ident = || mostly("[A-Za-z_][A-Za-z0-9_]{0,4}", prop_oneof![".{0,6}", Just("x".repeat(129))]);
    let ty = mostly(
        prop::sample::select(vec!["*fp32", "i32", "constexpr"]).prop_map(String::from),
        prop_oneof![Just(String::new()), Just("f p".to_string()), ".{0,4}"],
    );
    let good_sig = Just(vec![("x", "*fp32"), ("n", "i32"), ("BLOCK", "constexpr")])
        .prop_map(|v| v.into_iter().map(|(n, t)| pb::TritonArg { name: n.into(), r#type: t.into() }).collect());
    let bad_sig = prop::collection::vec((ident(), ty).prop_map(|(name, r#type)| pb::TritonArg { name, r#type }), 0..4);
    let signature = mostly(good_sig, bad_sig);
    let value = mostly(
        prop_oneof![
            any::<i64>().prop_map(Value::IntValue),
            any::<bool>().prop_map(Value::BoolValue),
            ".{0,6}".prop_map(Value::StringValue),
            (-1e9f64..1e9).prop_map(Value::FloatValue),
        ]
        .prop_map(Some),
        prop_oneof![Just(None), Just(Some(Value::FloatValue(f64::NAN))), Just(Some(Value::FloatValue(f64::INFINITY)))],
    );
    let cname = mostly(Just("BLOCK".to_string()), prop_oneof![Just("x".to_string()), ident()]);
    let constexpr = (cname, value).prop_map(|(name, value)| pb::TritonConstexpr { name, value });
    let attribute =
        (mostly(0u32..3, any::<u32>()), mostly(Just("tt.divisibility".to_string()), ".{0,6}"), any::<i64>())
            .prop_map(|(arg_index, name, value)| pb::TritonAttribute { arg_index, name, value });
    let options = prop::option::of(
        (
            mostly(prop::sample::select(vec![0u32, 1, 2, 4, 8, 16, 32]), any::<u32>()),
            mostly(0u32..=16, any::<u32>()),
            mostly(prop::sample::select(vec![0u32, 1, 2, 4, 8, 16]), any::<u32>()),
            mostly(0u32..=255, any::<u32>()),
            any::<bool>(),
            any::<bool>(),
        )
            .prop_map(support::triton_options),
    );
    (
        mostly(".{1,20}", prop_oneof![Just(String::new()), Just("a\0".to_string())]),
        ident(),
        signature,
        prop::collection::vec(constexpr, 0..3),
        prop::collection::vec(attribute, 0..3),
        options,
        any::<bool>(),
    )
        .prop_map(support::triton_source)
}

/// Requests near the edge of valid: each field mostly good, sometimes not.
fn request() -> impl Strategy<Value = pb::CompileRequest> {
    let source = mostly(prop_oneof![cuda(), ptx(), triton()].prop_map(Some), Just(None));
    let kernels = mostly(
        prop::collection::vec((prop::option::weighted(0.1, id()), source.clone()), 1..=8),
        prop::collection::vec((prop::option::weighted(0.5, id()), source), 0..10),
    )
    .prop_map(|v| {
        let id = |(i, id): (usize, Option<String>)| id.unwrap_or_else(|| format!("k{i}"));
        v.into_iter().enumerate().map(|(i, (n, source))| pb::Kernel { id: id((i, n)), source }).collect()
    });
    let target = mostly(
        prop::sample::select(vec!["sm_90", "sm_90a", "sm_80", "sm_100f", "sm_75"]).prop_map(String::from),
        prop_oneof![
            prop::sample::select(vec!["sm_50", "", "sm_9x", "compute_90", "sm_", "SM_90"]).prop_map(String::from),
            ".{0,8}"
        ],
    );
    let graph =
        (".{0,8}", target, kernels).prop_map(|(name, target, kernels)| pb::CompileGraph { name, target, kernels });
    (mostly(graph.prop_map(Some), Just(None)), mostly(0i32..3, any::<i32>()), any::<bool>(), any::<bool>()).prop_map(
        |(graph, priority, omit_artifacts, batch_results)| pb::CompileRequest {
            graph,
            priority,
            omit_artifacts,
            batch_results,
        },
    )
}

/// An encoded request near the edge of valid, with bytes cut, inserted or changed anywhere.
fn mutated_request() -> impl Strategy<Value = Vec<u8>> {
    (request(), support::edits()).prop_map(|(r, edits)| support::edit(r.encode_to_vec(), &edits))
}

proptest! {
    #![proptest_config(config(256, CORPUS))]

    /// Requests decoded from any bytes on the wire are answered with a job or an error that
    /// names a field; never a panic.
    #[test]
    fn requests_from_any_bytes_get_an_answer(
        bytes in prop_oneof![wire(), prop::collection::vec(any::<u8>(), 0..256), mutated_request()],
    ) {
        if let Ok(r) = pb::CompileRequest::decode(&bytes[..]) {
            match validate_request(&r) {
                Ok(job) => prop_assert!(job_is_sound(&r, &job)),
                Err(s) => prop_assert!(names_a_field(&s), "{:?}", s),
            }
        }
    }

    /// Requests of good and bad fields: a job of the same kernels, or an error naming the field;
    /// a CUDA kernel whose source or headers include a host path is refused before compiling.
    #[test]
    fn structured_requests_get_an_answer(r in request()) {
        match validate_request(&r) {
            Ok(job) => {
                prop_assert!(job_is_sound(&r, &job));
                for (j, k) in job.kernels.iter().zip(&r.graph.as_ref().unwrap().kernels) {
                    if let Some(Source::Cuda(c)) = &k.source {
                        let texts = std::iter::once(&c.source).chain(c.headers.iter().map(|h| &h.content));
                        let refused = texts.into_iter().any(|t| check(t).is_err());
                        prop_assert_eq!(j.refusal.is_some(), refused);
                    } else {
                        prop_assert!(j.refusal.is_none());
                    }
                }
            }
            Err(s) => prop_assert!(names_a_field(&s), "{:?}", s),
        }
    }
}
