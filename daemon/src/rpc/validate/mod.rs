//! Validation of client requests. Every field is input: a bad one is INVALID_ARGUMENT with a
//! message that names it, such as `graph.kernels[2].cuda.options[0]: ...`. A request that passes
//! comes out as a [`Job`] (see [`crate::domain`]) with each kernel's key already derived.

mod cuda;
mod ptx;
mod triton;

use crate::config::Limits;
use crate::domain::{Job, KernelJob, KernelSource, Priority};
use crate::error::{Error, invalid};
use crate::runtime::toolchain::Toolchain;
use kiln_proto::pb::{self, kernel::Source};
use kiln_proto::{Fingerprint, Target};
use std::collections::HashMap;

/// What validation needs to know about this daemon.
#[derive(Debug, Clone)]
pub struct Context<'a> {
    pub limits: &'a Limits,
    pub default_target: Option<Target>,
    /// Why there is no default target, for the error message.
    pub no_target_reason: &'a str,
    pub nvrtc_fingerprint: &'a Fingerprint,
    pub nvrtc_version: &'a str,
    /// The ptxas fingerprint, or why this daemon has no ptxas.
    pub ptxas: Result<&'a Fingerprint, &'a str>,
    /// The Triton fingerprint (the pool is started before validation when a graph needs it), or
    /// why Triton is unavailable.
    pub triton: Result<&'a Fingerprint, &'a str>,
    /// `sm_NN` names NVRTC can compile for; `a`/`f` variants count when their base is listed.
    pub supported_targets: &'a [String],
}

/// Checks a request; `default_priority` is INTERACTIVE for Compile, BACKGROUND for Submit.
pub fn request(req: &pb::CompileRequest, ctx: &Context<'_>, default_priority: Priority) -> Result<Job, Error> {
    let graph = req.graph.as_ref().ok_or_else(|| invalid("graph", "required"))?;
    let target = target(&graph.target, ctx)?;
    if graph.kernels.is_empty() {
        return Err(invalid("graph.kernels", "empty: a graph needs at least one kernel"));
    }
    if graph.kernels.len() > ctx.limits.max_kernels {
        return Err(invalid(
            "graph.kernels",
            format!("{} kernels exceeds the limit of {}", graph.kernels.len(), ctx.limits.max_kernels),
        ));
    }
    let priority = match pb::Priority::try_from(req.priority) {
        Ok(pb::Priority::Unspecified) => default_priority,
        Ok(pb::Priority::Interactive) => Priority::Interactive,
        Ok(pb::Priority::Background) => Priority::Background,
        Err(_) => {
            return Err(invalid("priority", format!("unknown value {}", req.priority)));
        }
    };
    let mut seen: HashMap<&str, usize> = HashMap::new();
    let mut kernels = Vec::with_capacity(graph.kernels.len());
    for (i, k) in graph.kernels.iter().enumerate() {
        let field = format!("graph.kernels[{i}]");
        kernel_id(&k.id, &format!("{field}.id"))?;
        if let Some(first) = seen.insert(&k.id, i) {
            return Err(invalid(
                format!("{field}.id"),
                format!("duplicate id `{}` (also graph.kernels[{first}])", k.id),
            ));
        }
        let checked = match &k.source {
            Some(Source::Cuda(c)) => cuda::check(c, &format!("{field}.cuda"), ctx)?,
            Some(Source::Ptx(p)) => ptx::check(p, &format!("{field}.ptx"), ctx)?,
            Some(Source::Triton(t)) => triton::check(t, &format!("{field}.triton"), ctx)?,
            None => return Err(invalid(format!("{field}.source"), "required: set one of cuda, ptx, triton")),
        };
        kernels.push(checked.job(&k.id, &target));
    }
    Ok(Job { name: graph.name.clone(), target, kernels, priority, omit_artifacts: req.omit_artifacts })
}

/// A kernel source that passed its checks, with the fingerprint of the toolchain that compiles
/// it: what its key is derived from.
struct Checked<'a> {
    source: KernelSource,
    fingerprint: &'a Fingerprint,
    /// Why the source may not be compiled at all, for a kernel that fails without compiling.
    refusal: Option<String>,
}

impl Checked<'_> {
    /// The kernel `id` of the job, for `target`, its key derived.
    fn job(self, id: &str, target: &Target) -> KernelJob {
        let key = self.source.with_key_inputs(target, self.fingerprint, |k| k.derive());
        KernelJob { id: id.to_string(), key, source: self.source, refusal: self.refusal }
    }
}

/// Whether any kernel of the request is Triton (the pool must be started before validation).
pub(crate) fn needs_triton(req: &pb::CompileRequest) -> bool {
    req.graph.iter().flat_map(|g| &g.kernels).any(|k| matches!(k.source, Some(Source::Triton(_))))
}

/// A toolchain this daemon cannot offer: FAILED_PRECONDITION, naming the field.
pub(crate) fn unavailable(field: &str, toolchain: Toolchain, why: &str) -> Error {
    Error::ToolchainUnavailable { field: field.into(), toolchain, reason: why.into() }
}

/// Bytes of text that must be present, NUL-free and within the source limit.
pub(crate) fn text(field: &str, value: &str, ctx: &Context<'_>) -> Result<(), Error> {
    if value.is_empty() {
        return Err(invalid(field, "empty"));
    }
    if value.contains('\0') {
        return Err(invalid(field, "contains a NUL byte"));
    }
    if value.len() > ctx.limits.max_source_bytes {
        return Err(invalid(
            field,
            format!("{} bytes exceeds the limit of {}", value.len(), ctx.limits.max_source_bytes),
        ));
    }
    Ok(())
}

fn target(text: &str, ctx: &Context<'_>) -> Result<Target, Error> {
    if text.is_empty() {
        return ctx.default_target.ok_or_else(|| {
            invalid(
                "graph.target",
                format!("no target given and {}; pass a target such as sm_90 (graph.target, kiln --target, or kilnd --target)", ctx.no_target_reason),
            )
        });
    }
    let target: Target = text.parse().map_err(|e| invalid("graph.target", e))?;
    if !ctx.supported_targets.contains(&format!("sm_{}", target.sm())) {
        return Err(invalid(
            "graph.target",
            format!(
                "{target} is not supported by NVRTC {}; supported: {}",
                ctx.nvrtc_version,
                ctx.supported_targets.join(" ")
            ),
        ));
    }
    Ok(target)
}

/// Ids name output files (`kiln compile --out`), so they are restricted to a safe alphabet.
fn kernel_id(id: &str, field: &str) -> Result<(), Error> {
    if id.is_empty() {
        return Err(invalid(field, "empty"));
    }
    let safe = id.len() <= 200
        && !id.starts_with('.')
        && id.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
    if !safe {
        return Err(invalid(field, "use up to 200 of A-Z a-z 0-9 _ - . (not starting with a dot)"));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
