//! CUDA C++ kernels for NVRTC: source, headers by content, allowlisted options, name
//! expressions, and the include check that keeps host paths out of the compiler.

use super::{Checked, Context};
use crate::domain::KernelSource;
use crate::error::{Error, invalid};
use crate::runtime::toolchain::{includes, options};
use kiln_proto::pb;
use std::collections::HashMap;

pub(super) fn check<'a>(c: &pb::CudaSource, field: &str, ctx: &Context<'a>) -> Result<Checked<'a>, Error> {
    if c.source.is_empty() {
        return Err(invalid(format!("{field}.source"), "empty"));
    }
    if c.source.contains('\0') {
        return Err(invalid(format!("{field}.source"), "contains a NUL byte"));
    }
    let size = c.source.len() + c.headers.iter().map(|h| h.name.len() + h.content.len()).sum::<usize>();
    if size > ctx.limits.max_source_bytes {
        return Err(invalid(
            field,
            format!("{size} bytes of source and headers exceeds the limit of {}", ctx.limits.max_source_bytes),
        ));
    }
    let mut names = HashMap::new();
    for (j, h) in c.headers.iter().enumerate() {
        let hf = format!("{field}.headers[{j}]");
        let bad_name = h.name.is_empty()
            || h.name.starts_with('/')
            || h.name.split('/').any(|p| p == "..")
            || h.name.contains(['\0', '\\', '\n']);
        if bad_name {
            return Err(invalid(
                format!("{hf}.name"),
                "must be a relative name as the #include spells it, with no `..`",
            ));
        }
        if h.content.contains('\0') {
            return Err(invalid(format!("{hf}.content"), "contains a NUL byte"));
        }
        if let Some(first) = names.insert(h.name.as_str(), j) {
            return Err(invalid(
                format!("{hf}.name"),
                format!("duplicate header `{}` (also headers[{first}])", h.name),
            ));
        }
    }
    for (j, o) in c.options.iter().enumerate() {
        options::check(o).map_err(|e| invalid(format!("{field}.options[{j}]"), e))?;
    }
    for (j, e) in c.name_expressions.iter().enumerate() {
        if e.trim().is_empty() || e.contains('\0') {
            return Err(invalid(format!("{field}.name_expressions[{j}]"), "empty or contains a NUL byte"));
        }
    }
    let refusal = std::iter::once(("source", c.source.as_str()))
        .chain(c.headers.iter().map(|h| (h.name.as_str(), h.content.as_str())))
        .find_map(|(name, text)| includes::check(text).err().map(|e| format!("refused before compiling: {name}: {e}")));
    Ok(Checked { source: KernelSource::Cuda(c.clone()), fingerprint: ctx.nvrtc_fingerprint, refusal })
}
