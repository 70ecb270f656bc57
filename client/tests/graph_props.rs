//! Property tests of `kiln compile --graph FILE.json`: a graph in the proto3 JSON mapping, written
//! by hand or by any tool, and the `sm_XX` targets it names. `cargo test` runs a bounded number of
//! cases; `scripts/fuzz` runs many more, and a failure is kept in `client/proptest-regressions/`
//! and replayed first by every later run.
#![allow(clippy::unwrap_used)]

use kiln_client::graph::{GraphError, check_target, parse_graph_json};
use kiln_proto::{Target, pb};
use proptest::prelude::*;
use serde_json::Value;

#[path = "../../proto/tests/support/props.rs"]
mod support;
use support::config;

const CORPUS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/proptest-regressions/graph_props.txt");

fn text() -> impl Strategy<Value = String> {
    prop_oneof![".{0,24}", "[a-z_]{1,8}", Just(String::new())]
}

fn strings() -> impl Strategy<Value = Vec<String>> {
    prop::collection::vec(text(), 0..3)
}

fn cuda() -> impl Strategy<Value = pb::kernel::Source> {
    (text(), strings(), prop::collection::vec((text(), text()), 0..3), strings()).prop_map(
        |(source, name_expressions, headers, options)| {
            let headers = headers.into_iter().map(|(name, content)| pb::Header { name, content }).collect();
            pb::kernel::Source::Cuda(pb::CudaSource { source, name_expressions, headers, options })
        },
    )
}

fn ptx() -> impl Strategy<Value = pb::kernel::Source> {
    (text(), strings()).prop_map(|(ptx, options)| pb::kernel::Source::Ptx(pb::PtxSource { ptx, options }))
}

fn constexpr_value() -> impl Strategy<Value = Option<pb::triton_constexpr::Value>> {
    use pb::triton_constexpr::Value;
    // Finite floats only: serde_json writes a non-finite double as `null`, which reads back as
    // no value (a writer's limitation; kilnd refuses non-finite constexprs anyway). Reading
    // "Infinity" and "NaN" is checked apart.
    let float = prop_oneof![any::<f64>().prop_filter("finite", |f| f.is_finite()), Just(-0.0), Just(f64::MAX)];
    prop_oneof![
        Just(None),
        any::<i64>().prop_map(|v| Some(Value::IntValue(v))),
        float.prop_map(|v| Some(Value::FloatValue(v))),
        any::<bool>().prop_map(|v| Some(Value::BoolValue(v))),
        text().prop_map(|v| Some(Value::StringValue(v))),
    ]
}

fn triton() -> impl Strategy<Value = pb::kernel::Source> {
    let signature = prop::collection::vec((text(), text()), 0..3)
        .prop_map(|v| v.into_iter().map(|(name, r#type)| pb::TritonArg { name, r#type }).collect());
    let constexprs = prop::collection::vec((text(), constexpr_value()), 0..3)
        .prop_map(|v| v.into_iter().map(|(name, value)| pb::TritonConstexpr { name, value }).collect());
    let attributes = prop::collection::vec((any::<u32>(), text(), any::<i64>()), 0..3).prop_map(|v| {
        v.into_iter().map(|(arg_index, name, value)| pb::TritonAttribute { arg_index, name, value }).collect()
    });
    let options = prop::option::of(any::<(u32, u32, u32, u32, bool, bool)>().prop_map(support::triton_options));
    (text(), text(), signature, constexprs, attributes, options, any::<bool>()).prop_map(support::triton_source)
}

fn graph() -> impl Strategy<Value = pb::CompileGraph> {
    let kernel = (text(), prop::option::of(prop_oneof![cuda(), ptx(), triton()]))
        .prop_map(|(id, source)| pb::Kernel { id, source });
    (text(), text(), prop::collection::vec(kernel, 0..4)).prop_map(|(name, target, kernels)| pb::CompileGraph {
        name,
        target,
        kernels,
    })
}

/// Any JSON document, nested a few levels, with the graph's own field names among the keys so
/// that the parser goes past the top level.
fn json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        ".{0,12}".prop_map(Value::String),
        "-?[0-9]{1,25}(\\.[0-9]{0,3})?(e-?[0-9]{1,3})?".prop_map(Value::String),
        prop::sample::select(vec!["NaN", "Infinity", "-Infinity", "sm_90", "sm_90a", "INTERACTIVE"])
            .prop_map(|s| Value::String(s.into())),
    ];
    let keys = prop_oneof![
        3 => prop::sample::select(vec![
            "name", "target", "kernels", "id", "cuda", "ptx", "triton", "source", "headers", "content",
            "options", "nameExpressions", "name_expressions", "kernelName", "signature", "type",
            "constexprs", "intValue", "floatValue", "boolValue", "stringValue", "float_value",
            "attributes", "argIndex", "value", "numWarps", "maxnreg", "enableFpFusion", "wantPtx",
        ])
        .prop_map(String::from),
        1 => ".{0,6}",
    ];
    leaf.prop_recursive(5, 64, 6, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((keys.clone(), inner), 0..6).prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

#[test]
fn non_finite_floats_read_from_their_json_names() {
    use pb::triton_constexpr::Value::FloatValue;
    for (name, check) in
        [("Infinity", f64::is_infinite as fn(f64) -> bool), ("-Infinity", f64::is_infinite), ("NaN", f64::is_nan)]
    {
        let text =
            format!(r#"{{"kernels":[{{"id":"k","triton":{{"constexprs":[{{"name":"B","floatValue":"{name}"}}]}}}}]}}"#);
        let g = parse(&text).unwrap();
        let Some(pb::kernel::Source::Triton(t)) = &g.kernels[0].source else { panic!("{g:?}") };
        assert!(matches!(t.constexprs[0].value, Some(FloatValue(v)) if check(v)), "{name}: {t:?}");
    }
}

/// Found by `graphs_round_trip_through_json`: serde_json's default float parser is not exact, so
/// a constexpr written as 9.828051280612983e-123 read back one bit off (another key, and another
/// value than the author's). The workspace enables serde_json's `float_roundtrip`.
#[test]
fn regression_doubles_read_back_exactly() {
    use pb::triton_constexpr::Value::FloatValue;
    for v in [9.828051280612983e-123_f64, 0.1, 1e-300, 5e-324, f64::MAX, 2.2250738585072014e-308] {
        let text =
            format!(r#"{{"kernels":[{{"id":"k","triton":{{"constexprs":[{{"name":"B","floatValue":{v:e}}}]}}}}]}}"#);
        let g = parse(&text).unwrap();
        let Some(pb::kernel::Source::Triton(t)) = &g.kernels[0].source else { panic!("{g:?}") };
        assert!(matches!(t.constexprs[0].value, Some(FloatValue(r)) if r.to_bits() == v.to_bits()), "{v:e}: {t:?}");
    }
}

/// The parser's answer is a graph or a JSON error; never a panic.
fn parse(text: &str) -> Option<pb::CompileGraph> {
    match parse_graph_json(text, None) {
        Ok(g) => Some(g),
        Err(GraphError::Json { .. }) => None,
        Err(other) => panic!("unexpected error kind for {text:?}: {other:?}"),
    }
}

proptest! {
    #![proptest_config(config(256, CORPUS))]

    /// Every graph written in the proto3 JSON mapping reads back as the same graph.
    #[test]
    fn graphs_round_trip_through_json(g in graph()) {
        let text = serde_json::to_string(&g).unwrap();
        prop_assert_eq!(parse(&text), Some(g.clone()));
        let pretty = serde_json::to_string_pretty(&g).unwrap();
        prop_assert_eq!(parse(&pretty), Some(g));
    }

    /// Random JSON documents, including graph-shaped ones with wrong types and values, never
    /// panic; whatever parses serializes again and parses to the same graph.
    #[test]
    fn random_json_never_panics(v in json()) {
        if let Some(g) = parse(&v.to_string()) {
            prop_assert_eq!(parse(&serde_json::to_string(&g).unwrap()), Some(g));
        }
    }

    /// Damaged graph files (bytes cut, inserted or changed anywhere, as any UTF-8 the file may
    /// become) never panic.
    #[test]
    fn damaged_graph_files_never_panic(
        g in graph(),
        edits in support::edits(),
    ) {
        let bytes = support::edit(serde_json::to_vec(&g).unwrap(), &edits);
        parse(&String::from_utf8_lossy(&bytes));
    }

    /// Random text never panics.
    #[test]
    fn random_text_never_panics(s in ".{0,200}", bytes in prop::collection::vec(any::<u8>(), 0..200)) {
        parse(&s);
        parse(&String::from_utf8_lossy(&bytes));
    }

    /// A target, from `--target` or a graph file, parses or is refused; one that parses prints
    /// as a name that parses to itself.
    #[test]
    fn targets_parse_or_are_refused(s in prop_oneof![".{0,12}", "sm_[0-9]{0,6}[a-z]?", "compute_[0-9]{1,4}"]) {
        if let Ok(t) = s.parse::<Target>() {
            prop_assert_eq!(t.to_string().parse::<Target>().unwrap(), t);
            prop_assert_eq!(check_target(&s).unwrap(), t.to_string());
        } else {
            prop_assert!(check_target(&s).is_err());
        }
    }
}
