//! Recipes made by the real key code (`KernelSource::with_key_inputs`), changed one input at a
//! time, and the words each change is explained with.

use super::*;
use crate::domain::KernelSource;
use kiln_proto::pb::{self, triton_constexpr::Value};
use kiln_proto::{Fingerprint, Target};

fn cuda() -> pb::CudaSource {
    pb::CudaSource {
        source: "#include \"common.cuh\"\nextern \"C\" __global__ void k() {}".into(),
        name_expressions: vec![],
        headers: vec![
            pb::Header { name: "common.cuh".into(), content: "#define N 4".into() },
            pb::Header { name: "util.cuh".into(), content: "".into() },
        ],
        options: vec!["--use_fast_math".into()],
    }
}

fn recipe_of(source: KernelSource, target: &str, fingerprint: u8) -> KeyRecipe {
    let target: Target = target.parse().unwrap();
    source.with_key_inputs(&target, &Fingerprint::from_bytes([fingerprint; 32]), |k| k.recipe())
}

fn cuda_recipe(change: impl FnOnce(&mut pb::CudaSource)) -> KeyRecipe {
    let mut c = cuda();
    change(&mut c);
    recipe_of(KernelSource::Cuda(c), "sm_90", 1)
}

fn texts(d: &[Difference]) -> Vec<(&'static str, &str)> {
    d.iter().map(|d| (d.reason.label(), d.text.as_str())).collect()
}

#[test]
fn a_changed_header_is_named() {
    let before = cuda_recipe(|_| {});
    let now = cuda_recipe(|c| c.headers[0].content = "#define N 8".into());
    assert_eq!(texts(&differences(&now, &before)), vec![("header", "header `common.cuh`: content differs")]);
    let added = cuda_recipe(|c| c.headers.push(pb::Header { name: "new.cuh".into(), content: "x".into() }));
    assert_eq!(texts(&differences(&added, &before)), vec![("header", "header `new.cuh`: added")]);
    let removed = cuda_recipe(|c| {
        c.headers.pop();
    });
    assert_eq!(texts(&differences(&removed, &before)), vec![("header", "header `util.cuh`: removed")]);
}

#[test]
fn options_target_source_and_toolchain_build() {
    let before = cuda_recipe(|_| {});
    let o3 = cuda_recipe(|c| c.options.push("-O3".into()));
    assert_eq!(texts(&differences(&o3, &before)), vec![("options", "options: -O3 added")]);
    let reordered = cuda_recipe(|c| c.options = vec!["-O3".into(), "--use_fast_math".into()]);
    assert_eq!(texts(&differences(&reordered, &o3)), vec![("options", "options: the same values in another order")]);
    let sm90a = recipe_of(KernelSource::Cuda(cuda()), "sm_90a", 1);
    assert_eq!(texts(&differences(&sm90a, &before)), vec![("target", "target sm_90a vs sm_90")]);
    let source = cuda_recipe(|c| c.source.push(' '));
    assert_eq!(texts(&differences(&source, &before)), vec![("source", "source: content differs")]);
    let mut other_build = recipe_of(KernelSource::Cuda(cuda()), "sm_90", 0x1f);
    let mut old = before.clone();
    (other_build.toolchain_version, old.toolchain_version, old.host) = ("13.0".into(), "13.0".into(), "gpu-7".into());
    let d = differences(&other_build, &old);
    assert_eq!(d.len(), 1);
    assert_eq!(d[0].reason, MissReason::Toolchain);
    assert_eq!(
        d[0].text,
        "nvrtc fingerprint: this host 1f1f… vs 0101… on gpu-7 (another libnvrtc build, or other default headers)"
    );
    old.toolchain_version = "12.8".into();
    assert!(differences(&other_build, &old)[0].text.ends_with("(version 13.0 vs 12.8)"));
}

#[test]
fn several_differences_are_ordered_and_the_broadest_is_the_reason() {
    let before = cuda_recipe(|_| {});
    let mut c = cuda();
    c.headers[0].content = "changed".into();
    c.options.clear();
    let now = recipe_of(KernelSource::Cuda(c), "sm_80", 1);
    let d = differences(&now, &before);
    assert_eq!(
        texts(&d),
        vec![
            ("target", "target sm_80 vs sm_90"),
            ("options", "options: --use_fast_math removed"),
            ("header", "header `common.cuh`: content differs"),
        ]
    );
    let (reason, detail) = miss_reason(&now, &[before]);
    assert_eq!(reason, MissReason::Target);
    assert_eq!(detail, "target sm_80 vs sm_90; options: --use_fast_math removed; header `common.cuh`: content differs");
}

#[test]
fn new_evicted_and_the_nearest_recipe() {
    let base = cuda_recipe(|_| {});
    assert_eq!(miss_reason(&base, &[]).0, MissReason::New);
    assert_eq!(miss_reason(&base, std::slice::from_ref(&base)).0, MissReason::Evicted);
    let far = recipe_of(KernelSource::Cuda(cuda()), "sm_80", 2);
    let near = cuda_recipe(|c| c.options.push("-O3".into()));
    let (i, d) = nearest(&base, [&far, &base, &near]).unwrap();
    assert_eq!(i, 2, "the recipe of the key itself is skipped; the one with fewest differences wins");
    assert_eq!(texts(&d), vec![("options", "options: -O3 removed")]);
}

fn triton_recipe(change: impl FnOnce(&mut pb::TritonSource)) -> KeyRecipe {
    let mut t = crate::fixtures::triton_source();
    change(&mut t);
    recipe_of(KernelSource::Triton(t), "sm_90", 3)
}

#[test]
fn triton_inputs_are_told_apart() {
    let before = triton_recipe(|_| {});
    let sig = triton_recipe(|t| t.signature[0].r#type = "*fp16".into());
    assert_eq!(
        texts(&differences(&sig, &before)),
        vec![("triton_signature", "triton signature: (x: *fp16, BLOCK: constexpr) vs (x: *fp32, BLOCK: constexpr)")]
    );
    let float = triton_recipe(|t| t.constexprs[0].value = Some(Value::FloatValue(1024.0)));
    assert_eq!(
        texts(&differences(&float, &before)),
        vec![("triton_constexprs", "constexpr BLOCK: float 1024.0 vs int 1024")]
    );
    let warps = triton_recipe(|t| t.options = Some(pb::TritonOptions { num_warps: 8, ..Default::default() }));
    assert_eq!(texts(&differences(&warps, &before)), vec![("triton_options", "triton option num_warps: 8 vs 4")]);
    let attr = triton_recipe(|t| {
        t.attributes.push(pb::TritonAttribute { arg_index: 0, name: "tt.divisibility".into(), value: 16 })
    });
    assert_eq!(
        texts(&differences(&attr, &before)),
        vec![("triton_attributes", "triton attributes: tt.divisibility=16 on argument 0 added")]
    );
}

#[test]
fn long_values_are_shown_as_digests() {
    let before = cuda_recipe(|_| {});
    let now = cuda_recipe(|c| c.options.push(format!("-DLONG={}", "x".repeat(300))));
    let d = differences(&now, &before);
    assert!(d[0].text.starts_with("options: (long value ") && d[0].text.ends_with("…) added"), "{}", d[0].text);
}
