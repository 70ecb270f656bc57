//! Property tests of kilnd's checks of untrusted input: the include scanner that keeps host paths
//! out of NVRTC, request validation, and the blob and snapshot validators. `cargo test` runs a
//! bounded number of cases; `scripts/fuzz` runs many more, and a failure is kept in
//! `daemon/proptest-regressions/` and replayed first by every later run.
#![allow(clippy::unwrap_used)]

use kiln_daemon::config::{Config, Defaults, FileConfig, Flags};
use kiln_daemon::domain::Priority;
use kiln_daemon::toolchain::includes::check;
use kiln_daemon::{blob, snapshot, validate};
use kiln_proto::pb::{self, kernel::Source};
use kiln_proto::{CacheKey, Fingerprint};
use proptest::prelude::*;
use prost::Message;

#[path = "../../proto/tests/support/props.rs"]
mod support;
use support::config;

const CORPUS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/proptest-regressions/untrusted_props.txt");

// ---- The include scanner ----

/// Source text as a soup of the pieces the scanner treats specially, and any other characters,
/// multi-byte ones included.
fn soup() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        4 => prop::sample::select(vec![
            "#", "include", "include_next", "embed", "import", "if", "define", "__has_include",
            "__has_include_next", "(", ")", "<", ">", "\"", "'", "\\", "\\\n", "\n", "/*", "*/", "//",
            "/", "..", "../", "/etc/passwd", "a.h", " ", "\t", "é", "€", "𝄞", "\u{0}", "\r\n",
        ])
        .prop_map(String::from),
        1 => any::<char>().prop_map(String::from),
        1 => ".{0,8}",
    ];
    prop::collection::vec(piece, 0..48).prop_map(|v| v.concat())
}

/// Horizontal space as the preprocessor sees it: blanks, comments, line splices.
fn gap() -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(vec!["", " ", "\t", "/**/", "/* x */", "\\\n", " \\\n "]), 0..3)
        .prop_map(|v| v.concat())
}

/// Lines before a directive that leave no comment or string open.
fn preamble() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop::sample::select(vec![
            "int x;\n",
            "// #include \"/etc/passwd\"\n",
            "/* #include </etc/shadow> */\n",
            "const char* s = \"#include </etc/passwd>\";\n",
            "#define A 1\n",
            "#include <cuda_fp16.h>\n",
            "\n",
            "char c = '\"';\n",
        ]),
        0..4,
    )
    .prop_map(|v| v.concat())
}

/// Relative names with no `..` part: what the headers given by content are called.
fn relative_name() -> impl Strategy<Value = String> {
    prop::collection::vec("[A-Za-z0-9_][A-Za-z0-9_.+-]{0,8}".prop_filter("not ..", |p| p != ".."), 1..4)
        .prop_map(|parts| parts.join("/"))
}

/// Names that reach outside the given headers: absolute, or with a `..` part.
fn outside_name() -> impl Strategy<Value = String> {
    (relative_name(), relative_name(), 0u8..3).prop_map(|(a, b, how)| match how {
        0 => format!("/{a}"),
        1 => format!("../{a}"),
        _ => format!("{a}/../{b}"),
    })
}

/// Splices a backslash-newline in at `at` (a char boundary), which the preprocessor removes.
fn splice(name: &str, at: prop::sample::Index) -> String {
    let bounds: Vec<usize> = name.char_indices().map(|(i, _)| i).chain([name.len()]).collect();
    let i = bounds[at.index(bounds.len())];
    format!("{}\\\n{}", &name[..i], &name[i..])
}

fn quoted(name: &str, angle: bool) -> String {
    if angle { format!("<{name}>") } else { format!("\"{name}\"") }
}

/// Found by `the_scanner_never_panics`: a multi-byte character before `__has_include` put the
/// probe search inside the character, and slicing the text there panicked (a client could fail
/// kilnd's request handler with `é__has_include`).
#[test]
fn regression_multibyte_character_before_a_probe() {
    assert_eq!(
        check("é__has_include"),
        Err(kiln_daemon::toolchain::includes::IncludeError {
            line: 1,
            reason: "computed __has_include is not allowed: name the header in quotes or angle brackets".into(),
        })
    );
    assert!(check("€ #if __has_include(</etc/shadow>)\n#endif").is_err());
    assert_eq!(check("𝄞x __has_include(<a.h>) é\\\"ü\" é__has_include(\"b.h\")"), Ok(()));
    assert!(check("'é\\é' 𝄞__has_include(<../x>)").is_err());
}

proptest! {
    #![proptest_config(config(256, CORPUS))]

    /// Any text gets a verdict, never a panic, and the same verdict every time (the memo).
    #[test]
    fn the_scanner_never_panics(s in soup()) {
        let first = check(&s);
        prop_assert_eq!(check(&s), first);
    }

    /// `#include` of a path outside the given headers is refused, however the directive is
    /// spaced, commented or split across lines.
    #[test]
    fn outside_includes_are_refused(
        pre in preamble(), name in outside_name(), angle in any::<bool>(),
        g1 in gap(), g2 in gap(), g3 in gap(), split in prop::option::of(any::<prop::sample::Index>()),
    ) {
        let name = split.map_or(name.clone(), |at| splice(&name, at));
        let src = format!("{pre}{g1}#{g2}include{g3}{}\nint y;\n", quoted(&name, angle));
        let line = pre.matches('\n').count() + 1;
        let e = check(&src).unwrap_err();
        prop_assert!(e.line <= line, "{:?}: line {}", src, e.line);
    }

    /// `__has_include` probes of such paths are refused too, in `#if`, `#elif` and macros.
    #[test]
    fn outside_probes_are_refused(
        pre in preamble(), name in outside_name(), angle in any::<bool>(), g in gap(),
        how in prop::sample::select(vec!["#if ", "#elif defined(X) || ", "#define P "]),
        split in prop::option::of(any::<prop::sample::Index>()),
    ) {
        let name = split.map_or(name.clone(), |at| splice(&name, at));
        let src = format!("{pre}{how}__has_include({g}{})\n#endif\n", quoted(&name, angle));
        prop_assert!(check(&src).is_err(), "{:?} passed", src);
    }

    /// Plain relative includes and probes pass, and so does any directive hidden in a comment.
    #[test]
    fn relative_includes_pass(
        pre in preamble(), names in prop::collection::vec((relative_name(), any::<bool>()), 1..4),
        g1 in gap(), g2 in gap(), g3 in gap(), hidden in outside_name(),
    ) {
        let mut src = pre;
        for (name, angle) in &names {
            src += &format!("{g1}#{g2}include{g3}{}\n", quoted(name, *angle));
            src += &format!("#if __has_include({})\n#endif\n", quoted(name, !*angle));
        }
        src += &format!("// #include \"{hidden}\"\n/* #include <{hidden}>\n#if __has_include(<{hidden}>) */\n");
        prop_assert_eq!(check(&src), Ok(()), "{:?}", src);
    }
}

// ---- Request validation ----

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

/// Bytes in the protobuf wire format, fields numbered like a request's and nested a few levels, so
/// that decoding reaches the kernels: what a hostile or broken client can put on the socket.
fn wire() -> impl Strategy<Value = Vec<u8>> {
    fn varint(mut v: u64, out: &mut Vec<u8>) {
        while v >= 0x80 {
            out.push(v as u8 | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }
    let scalar = prop_oneof![
        (1u64..8, prop_oneof![0u64..4, any::<u64>()]).prop_map(|(f, v)| {
            let mut out = Vec::new();
            varint(f << 3, &mut out);
            varint(v, &mut out);
            out
        }),
        (1u64..8, prop_oneof![".{0,12}", "sm_[0-9]{2}a?", "[a-z]{1,4}", "#include \"/etc/passwd\""]).prop_map(
            |(f, s)| {
                let mut out = Vec::new();
                varint(f << 3 | 2, &mut out);
                varint(s.len() as u64, &mut out);
                out.extend_from_slice(s.as_bytes());
                out
            }
        ),
        (1u64..8, 0u64..2, prop::collection::vec(any::<u8>(), 0..8)).prop_map(|(f, w, bytes)| {
            let mut out = Vec::new();
            varint(f << 3 | if w == 0 { 1 } else { 5 }, &mut out);
            out.extend_from_slice(&bytes[..bytes.len().min(if w == 0 { 8 } else { 4 })]);
            out
        }),
    ];
    let message = prop::collection::vec(scalar, 0..6).prop_map(|v| v.concat());
    message.prop_recursive(5, 64, 6, |inner| {
        prop::collection::vec(
            prop_oneof![
                (1u64..8, inner).prop_map(|(f, body)| {
                    let mut out = Vec::new();
                    varint(f << 3 | 2, &mut out);
                    varint(body.len() as u64, &mut out);
                    out.extend_from_slice(&body);
                    out
                }),
                prop::collection::vec(any::<u8>(), 0..4),
            ],
            0..6,
        )
        .prop_map(|v| v.concat())
    })
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

// ---- Blobs and snapshots ----

proptest! {
    #![proptest_config(config(256, CORPUS))]

    /// A blob's payload is read back from the tiers (and other hosts): any bytes in an artifact
    /// labelled as a blob give an entry or nothing, never a panic; one of another namespace is
    /// never served.
    #[test]
    fn blob_entries_from_any_bytes(
        bytes in prop_oneof![wire(), prop::collection::vec(any::<u8>(), 0..256)],
        ns in "[a-z]{1,6}", other in "[a-z]{1,6}",
        files in prop::collection::vec((".{0,8}", prop::collection::vec(any::<u8>(), 0..16)), 0..4),
    ) {
        let meta = pb::ArtifactMeta { toolchain: blob::entry::toolchain_label(&ns), raw_bytes: bytes.len() as u64, ..Default::default() };
        let artifact = kiln_proto::envelope::Artifact { meta, bytes: bytes.into() };
        if let Some(entry) = blob::entry::open(&artifact, &ns, pb::Tier::Disk) {
            prop_assert!(entry.found);
        }
        if other != ns {
            prop_assert!(blob::entry::open(&artifact, &other, pb::Tier::Disk).is_none());
        }
        // What seal makes, open gives back, under its namespace only.
        let files: Vec<pb::BlobFile> = files.into_iter().map(|(name, data)| pb::BlobFile { name, data }).collect();
        let (_, sealed) = blob::entry::seal(&CacheKey::from_bytes([7; 32]), &ns, files.clone());
        prop_assert_eq!(blob::entry::open(&sealed, &ns, pb::Tier::Memory).unwrap().files, files);
    }

    /// Blob requests' fields: each passes exactly when it keeps the rules (a scope passes
    /// unchanged, a wait is the one asked or the default), and is otherwise refused naming it.
    #[test]
    fn blob_fields_get_a_verdict(
        ns in prop_oneof!["[a-z0-9_-]{1,32}", ".{0,40}"],
        version in prop_oneof!["[a-z0-9.+]{1,8}", ".{0,8}", Just("v".repeat(257))],
        keys in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..4), 0..4),
        names in prop::collection::vec(prop_oneof!["[a-z]{1,4}", ".{0,4}", Just("x".repeat(256))], 0..4),
        ms in prop_oneof![0u32..=3_600_000, any::<u32>()],
    ) {
        let scope = pb::BlobScope { namespace: ns.clone(), tool_version: version.clone() };
        let ns_ok = (1..=32).contains(&ns.len())
            && ns.bytes().all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'_' | b'-'));
        let version_ok = (1..=256).contains(&version.len());
        if let Some(passed) = judged(blob::validate::scope(Some(&scope)), ns_ok && version_ok, "scope.", &scope)? {
            prop_assert_eq!((passed.namespace, passed.tool_version), (ns, version));
        }
        let keys_ok = !keys.is_empty() && keys.iter().all(|k| !k.is_empty());
        judged(blob::validate::keys(&keys), keys_ok, "keys", &keys)?;
        // One byte each, against a limit of two bytes together.
        let files: Vec<pb::BlobFile> = names.iter().map(|name| pb::BlobFile { name: name.clone(), data: vec![1] }).collect();
        let unique = names.iter().collect::<std::collections::HashSet<_>>().len() == names.len();
        let files_ok = (1..=2).contains(&names.len())
            && unique
            && names.iter().all(|n| n.len() <= 255 && (!n.is_empty() || names.len() == 1));
        judged(blob::validate::files(&files, 2), files_ok, "files", &names)?;
        let default = std::time::Duration::from_secs(1);
        let asked = std::time::Duration::from_millis(ms.into());
        if let Some(d) = judged(blob::validate::duration("wait_ms", ms, default), asked <= blob::validate::MAX_WAIT, "wait_ms", &ms)? {
            prop_assert_eq!(d, if ms == 0 { default } else { asked });
        }
    }

    /// A snapshot path passes exactly when it is plain and relative, and one that passes stays
    /// inside the directory it is restored into.
    #[test]
    fn snapshot_paths_that_pass_stay_inside(
        path in prop::collection::vec(prop_oneof![
            prop::sample::select(vec!["a", ".", "..", "", "b.c", "...", "\0", "/", "\\", "é"]).prop_map(String::from),
            "[a-z.]{1,3}",
        ], 0..6).prop_map(|v| v.join("/"))
    ) {
        if snapshot::validate::relative_path_ok(&path) {
            let root = std::path::Path::new("/restore/root");
            let joined = root.join(&path);
            prop_assert!(joined.starts_with(root) && joined != root);
            let normal = std::path::Path::new(&path).components().all(|c| matches!(c, std::path::Component::Normal(_)));
            prop_assert!(normal, "{:?}", path);
        } else {
            prop_assert!(!plain_relative(&path), "{:?} refused", path);
        }
    }

    /// Snapshot save requests: each field passes exactly when it keeps the rules (an id passes
    /// unchanged), and is otherwise refused naming it.
    #[test]
    fn snapshot_fields_get_a_verdict(
        job in prop_oneof!["[a-z]{1,8}", ".{0,8}"],
        keys in prop::collection::btree_map("[a-z.]{0,6}|.{0,4}|host\\.[a-z]{1,3}", ".{0,6}", 0..4),
        roots in prop::collection::vec((prop_oneof!["[a-z]{1,3}|.{0,3}", Just("r".to_string())], "/[a-z]{0,4}|.{0,4}"), 0..3),
        files in prop::collection::vec((prop_oneof!["[a-z]{1,3}", Just("r".to_string())], "[a-z./]{0,8}", 0u32..0o1000, prop::collection::vec(any::<u8>(), 31..33), 0u64..100), 0..4),
    ) {
        let id = pb::SnapshotId { job: job.clone(), keys: keys.clone().into_iter().collect() };
        let printable = |s: &str| s.bytes().all(|b| (0x20..0x7f).contains(&b));
        let id_ok = (1..=256).contains(&job.len())
            && printable(&job)
            && keys.iter().all(|(name, value)| {
                (1..=64).contains(&name.len())
                    && name.bytes().all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'_' | b'.' | b'-'))
                    && !name.starts_with("host.")
                    && value.len() <= 256
                    && printable(value)
            });
        if let Some(passed) = judged(snapshot::validate::id("id", Some(&id)), id_ok, "id.", &id)? {
            prop_assert_eq!((passed.job, passed.keys), (job, keys));
        }
        let roots: Vec<pb::SnapshotRoot> = roots.into_iter().map(|(name, path)| pb::SnapshotRoot { name, path }).collect();
        let root_names: Vec<&str> = roots.iter().map(|r| r.name.as_str()).collect();
        let roots_ok = !roots.is_empty()
            && root_names.iter().collect::<std::collections::HashSet<_>>().len() == roots.len()
            && roots.iter().all(|r| {
                (1..=64).contains(&r.name.len())
                    && r.name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
                    && r.path.starts_with('/')
                    && !r.path.contains('\0')
            });
        judged(snapshot::validate::roots(&roots), roots_ok, "roots", &roots)?;
        let files: Vec<pb::SnapshotFile> = files
            .into_iter()
            .map(|(root, path, mode, digest, size)| pb::SnapshotFile { root, path, mode, digest, size })
            .collect();
        let places: Vec<(&str, &str)> = files.iter().map(|f| (f.root.as_str(), f.path.as_str())).collect();
        let files_ok = places.iter().collect::<std::collections::HashSet<_>>().len() == files.len()
            && files.iter().all(|f| {
                root_names.contains(&f.root.as_str())
                    && plain_relative(&f.path)
                    && f.mode <= 0o777
                    && f.digest.len() == 32
                    && f.size <= 50
            });
        judged(snapshot::validate::files(&files, &roots, 50), files_ok, "files[", &files)?;
    }
}

/// A validator's verdict on input that keeps its rules or not (`keeps_the_rules`, decided by the
/// test from the rules themselves): a pass exactly when it does, and otherwise an error whose
/// message begins with the field it names. The passed value, for the test to check further.
fn judged<T, E: std::fmt::Display>(
    verdict: Result<T, E>,
    keeps_the_rules: bool,
    field: &str,
    input: &dyn std::fmt::Debug,
) -> Result<Option<T>, TestCaseError> {
    match verdict {
        Ok(passed) => {
            prop_assert!(keeps_the_rules, "{:?} passed", input);
            Ok(Some(passed))
        }
        Err(e) => {
            prop_assert!(!keeps_the_rules, "{:?} refused: {}", input, e);
            prop_assert!(e.to_string().starts_with(field), "{} does not name {}", e, field);
            Ok(None)
        }
    }
}

/// The rule for a snapshot file's path, restated: `/`-separated parts, none empty, `.` or `..`,
/// and no NUL.
fn plain_relative(path: &str) -> bool {
    !path.is_empty() && !path.contains('\0') && path.split('/').all(|p| !p.is_empty() && p != "." && p != "..")
}
