//! Triton kernels: the module source, the kernel name, the ordered signature, typed constexpr
//! values, argument attributes and options. Every field goes into the key, through a canonical
//! list of option strings (see [`key_options`]).

use super::{Context, KernelJob, KernelSource, invalid, text, unavailable};
use crate::toolchain::triton;
use kiln_proto::Target;
use kiln_proto::pb::{self, triton_constexpr::Value};
use std::collections::HashMap;
use tonic::Status;

fn identifier(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 128
        && !s.starts_with(|c: char| c.is_ascii_digit())
        && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

pub(super) fn kernel(
    id: &str,
    t: &pb::TritonSource,
    target: &Target,
    field: &str,
    ctx: &Context<'_>,
) -> Result<KernelJob, Status> {
    let fingerprint = ctx.triton.map_err(|why| unavailable(field, triton::NAME, why))?;
    text(&format!("{field}.source"), &t.source, ctx)?;
    if !identifier(&t.kernel_name) {
        return Err(invalid(format!("{field}.kernel_name"), "must be a Python identifier"));
    }
    if t.signature.is_empty() {
        return Err(invalid(format!("{field}.signature"), "empty: list the kernel's parameters in order"));
    }
    let mut params: HashMap<&str, (usize, &str)> = HashMap::new();
    for (j, a) in t.signature.iter().enumerate() {
        let f = format!("{field}.signature[{j}]");
        if !identifier(&a.name) {
            return Err(invalid(format!("{f}.name"), "must be a Python identifier"));
        }
        let type_ok = !a.r#type.is_empty()
            && a.r#type.len() <= 64
            && a.r#type.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'*' || b == b'_');
        if !type_ok {
            return Err(invalid(format!("{f}.type"), "expected a Triton type such as *fp32, i32 or constexpr"));
        }
        if params.insert(&a.name, (j, &a.r#type)).is_some() {
            return Err(invalid(format!("{f}.name"), format!("duplicate parameter `{}`", a.name)));
        }
    }
    let mut seen = HashMap::new();
    for (j, c) in t.constexprs.iter().enumerate() {
        let f = format!("{field}.constexprs[{j}]");
        match params.get(c.name.as_str()) {
            Some((_, "constexpr")) => {}
            Some(_) => return Err(invalid(format!("{f}.name"), format!("`{}` is not a constexpr parameter", c.name))),
            None => return Err(invalid(format!("{f}.name"), format!("`{}` is not in the signature", c.name))),
        }
        if seen.insert(c.name.as_str(), j).is_some() {
            return Err(invalid(format!("{f}.name"), format!("duplicate constexpr `{}`", c.name)));
        }
        match &c.value {
            None => return Err(invalid(format!("{f}.value"), "required")),
            Some(Value::FloatValue(v)) if !v.is_finite() => {
                return Err(invalid(format!("{f}.value"), "must be finite"));
            }
            _ => {}
        }
    }
    for (j, a) in t.attributes.iter().enumerate() {
        let f = format!("{field}.attributes[{j}]");
        if a.arg_index as usize >= t.signature.len() {
            return Err(invalid(format!("{f}.arg_index"), format!("{} is past the signature", a.arg_index)));
        }
        let name_ok = !a.name.is_empty() && a.name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_');
        if !name_ok {
            return Err(invalid(format!("{f}.name"), "expected an attribute name such as tt.divisibility"));
        }
    }
    if let Some(o) = &t.options {
        let f = format!("{field}.options");
        if o.num_warps != 0 && (!o.num_warps.is_power_of_two() || o.num_warps > 32) {
            return Err(invalid(format!("{f}.num_warps"), "must be a power of two up to 32"));
        }
        if o.num_stages > 16 {
            return Err(invalid(format!("{f}.num_stages"), "must be at most 16"));
        }
        if o.num_ctas != 0 && (!o.num_ctas.is_power_of_two() || o.num_ctas > 16) {
            return Err(invalid(format!("{f}.num_ctas"), "must be a power of two up to 16"));
        }
        if o.maxnreg > 255 {
            return Err(invalid(format!("{f}.maxnreg"), "must be at most 255"));
        }
    }
    let source = KernelSource::Triton(t.clone());
    let key = source.with_key_inputs(target, fingerprint, |k| k.derive());
    Ok(KernelJob { id: id.to_string(), key, source, refusal: None })
}

/// The Triton request as ordered option strings for the key. Each string starts with its kind
/// and separates parts with NUL, which no validated part contains (identifiers, types, numbers),
/// except a string constexpr, which comes last in its string; each string is length-prefixed by
/// the key encoding. Signature order is kept (it is the parameter order); constexprs and
/// attributes are sorted, since their order does not change the compile. Floats are keyed by
/// their bits, so 1024.0 and 1024 never collide.
pub fn key_options(t: &pb::TritonSource) -> Vec<String> {
    let mut out: Vec<String> = t.signature.iter().map(|a| format!("sig\0{}\0{}", a.name, a.r#type)).collect();
    let mut constexprs: Vec<String> = t
        .constexprs
        .iter()
        .map(|c| match &c.value {
            Some(Value::IntValue(v)) => format!("constexpr\0{}\0int\0{v}", c.name),
            Some(Value::FloatValue(v)) => format!("constexpr\0{}\0float\0{:016x}", c.name, v.to_bits()),
            Some(Value::BoolValue(v)) => format!("constexpr\0{}\0bool\0{v}", c.name),
            Some(Value::StringValue(v)) => format!("constexpr\0{}\0str\0{v}", c.name),
            None => format!("constexpr\0{}\0none", c.name),
        })
        .collect();
    constexprs.sort();
    out.extend(constexprs);
    let mut attrs: Vec<String> =
        t.attributes.iter().map(|a| format!("attr\0{}\0{}\0{}", a.arg_index, a.name, a.value)).collect();
    attrs.sort();
    out.extend(attrs);
    let o = t.options.unwrap_or_default();
    let fusion = if o.enable_fp_fusion_set { o.enable_fp_fusion.to_string() } else { "default".into() };
    out.push(format!(
        "options\0num_warps={}\0num_stages={}\0num_ctas={}\0maxnreg={}\0enable_fp_fusion={fusion}",
        o.num_warps, o.num_stages, o.num_ctas, o.maxnreg
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> pb::TritonSource {
        pb::TritonSource {
            source: "src".into(),
            kernel_name: "k".into(),
            signature: vec![
                pb::TritonArg { name: "x".into(), r#type: "*fp32".into() },
                pb::TritonArg { name: "BLOCK".into(), r#type: "constexpr".into() },
            ],
            constexprs: vec![pb::TritonConstexpr { name: "BLOCK".into(), value: Some(Value::IntValue(1024)) }],
            ..Default::default()
        }
    }

    #[test]
    fn typed_constexprs_and_options_change_the_key_options() {
        let base = key_options(&sample());
        let mut float = sample();
        float.constexprs[0].value = Some(Value::FloatValue(1024.0));
        assert_ne!(key_options(&float), base, "1024 and 1024.0 must differ");
        let mut warps = sample();
        warps.options = Some(pb::TritonOptions { num_warps: 8, ..Default::default() });
        assert_ne!(key_options(&warps), base);
        let mut order = sample();
        order.signature.reverse();
        assert_ne!(key_options(&order), base, "parameter order is part of the key");
        let mut attr = sample();
        attr.attributes.push(pb::TritonAttribute { arg_index: 0, name: "tt.divisibility".into(), value: 16 });
        assert_ne!(key_options(&attr), base);
    }
}
