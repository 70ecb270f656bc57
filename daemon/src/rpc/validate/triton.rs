//! Triton kernels: the module source, the kernel name, the ordered signature, typed constexpr
//! values, argument attributes and options. Every field goes into the key, through a canonical
//! list of option strings (see [`crate::domain::source::triton_key_options`]).

use super::{Checked, Context, text, unavailable};
use crate::domain::KernelSource;
use crate::error::{Error, invalid};
use crate::runtime::toolchain::Toolchain;
use kiln_proto::pb::{self, triton_constexpr::Value};
use std::collections::HashMap;

fn identifier(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 128
        && !s.starts_with(|c: char| c.is_ascii_digit())
        && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

pub(super) fn check<'a>(t: &pb::TritonSource, field: &str, ctx: &Context<'a>) -> Result<Checked<'a>, Error> {
    let fingerprint = ctx.triton.map_err(|why| unavailable(field, Toolchain::Triton, why))?;
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
    Ok(Checked { source: KernelSource::Triton(t.clone()), fingerprint, refusal: None })
}
