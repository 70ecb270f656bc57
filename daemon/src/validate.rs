//! Validation of client requests. Every field is input: a bad one is INVALID_ARGUMENT with a
//! message that names it, such as `graph.kernels[2].cuda.options[0]: ...`. A request that passes
//! comes out as a [`Job`] with each kernel's key already derived.

use crate::config::Limits;
use crate::scheduler::gate::Priority;
use crate::toolchain::{includes, nvrtc, options};
use kiln_proto::pb::{self, kernel::Source};
use kiln_proto::{CacheKey, Fingerprint, KeyInputs, Target};
use std::collections::HashMap;
use tonic::Status;

/// What validation needs to know about this daemon.
#[derive(Debug, Clone)]
pub struct Context<'a> {
    pub limits: &'a Limits,
    pub default_target: Option<Target>,
    /// Why there is no default target, for the error message.
    pub no_target_reason: &'a str,
    pub nvrtc_fingerprint: &'a Fingerprint,
    pub nvrtc_version: &'a str,
    /// `sm_NN` names NVRTC can compile for; `a`/`f` variants count when their base is listed.
    pub supported_targets: &'a [String],
}

/// One kernel, ready to look up or compile.
#[derive(Debug, Clone)]
pub struct KernelJob {
    pub id: String,
    pub key: CacheKey,
    pub source: pb::CudaSource,
    /// Set when the source may not be compiled at all (an include of a host path): the kernel's
    /// outcome is failed with this reason, and the compiler never sees it.
    pub refusal: Option<String>,
}

#[derive(Debug, Clone)]
pub struct Job {
    pub name: String,
    pub target: Target,
    pub kernels: Vec<KernelJob>,
    pub priority: Priority,
    pub omit_artifacts: bool,
}

fn invalid(field: impl std::fmt::Display, why: impl std::fmt::Display) -> Status {
    Status::invalid_argument(format!("{field}: {why}"))
}

/// Checks a request; `default_priority` is INTERACTIVE for Compile, BACKGROUND for Submit.
pub fn request(
    req: &pb::CompileRequest,
    ctx: &Context<'_>,
    default_priority: Priority,
) -> Result<Job, Status> {
    let graph = req
        .graph
        .as_ref()
        .ok_or_else(|| invalid("graph", "required"))?;
    let target = target(&graph.target, ctx)?;
    if graph.kernels.is_empty() {
        return Err(invalid(
            "graph.kernels",
            "empty: a graph needs at least one kernel",
        ));
    }
    if graph.kernels.len() > ctx.limits.max_kernels {
        return Err(invalid(
            "graph.kernels",
            format!(
                "{} kernels exceeds the limit of {}",
                graph.kernels.len(),
                ctx.limits.max_kernels
            ),
        ));
    }
    let priority = match pb::Priority::try_from(req.priority) {
        Ok(pb::Priority::Unspecified) => default_priority,
        Ok(pb::Priority::Interactive) => Priority::Interactive,
        Ok(pb::Priority::Background) => Priority::Background,
        Err(_) => {
            return Err(invalid(
                "priority",
                format!("unknown value {}", req.priority),
            ));
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
        let source = match &k.source {
            Some(Source::Cuda(c)) => c,
            None => {
                return Err(invalid(
                    format!("{field}.source"),
                    "required: set cuda (the toolchains here: nvrtc)",
                ));
            }
        };
        kernels.push(cuda_kernel(
            &k.id,
            source,
            &target,
            &format!("{field}.cuda"),
            ctx,
        )?);
    }
    Ok(Job {
        name: graph.name.clone(),
        target,
        kernels,
        priority,
        omit_artifacts: req.omit_artifacts,
    })
}

fn target(text: &str, ctx: &Context<'_>) -> Result<Target, Status> {
    if text.is_empty() {
        return ctx.default_target.ok_or_else(|| {
            invalid(
                "graph.target",
                format!("no target given and {}; pass a target such as sm_90 (graph.target, kiln --target, or kilnd --target)", ctx.no_target_reason),
            )
        });
    }
    let target: Target = text.parse().map_err(|e| invalid("graph.target", e))?;
    if !ctx
        .supported_targets
        .contains(&format!("sm_{}", target.sm()))
    {
        return Err(invalid(
            "graph.target",
            format!("{target} is not supported by NVRTC {}", ctx.nvrtc_version),
        ));
    }
    Ok(target)
}

/// Ids name output files (`kiln compile --out`), so they are restricted to a safe alphabet.
fn kernel_id(id: &str, field: &str) -> Result<(), Status> {
    if id.is_empty() {
        return Err(invalid(field, "empty"));
    }
    let safe = id.len() <= 200
        && !id.starts_with('.')
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
    if !safe {
        return Err(invalid(
            field,
            "use up to 200 of A-Z a-z 0-9 _ - . (not starting with a dot)",
        ));
    }
    Ok(())
}

fn cuda_kernel(
    id: &str,
    c: &pb::CudaSource,
    target: &Target,
    field: &str,
    ctx: &Context<'_>,
) -> Result<KernelJob, Status> {
    if c.source.is_empty() {
        return Err(invalid(format!("{field}.source"), "empty"));
    }
    if c.source.contains('\0') {
        return Err(invalid(format!("{field}.source"), "contains a NUL byte"));
    }
    let size = c.source.len()
        + c.headers
            .iter()
            .map(|h| h.name.len() + h.content.len())
            .sum::<usize>();
    if size > ctx.limits.max_source_bytes {
        return Err(invalid(
            field,
            format!(
                "{size} bytes of source and headers exceeds the limit of {}",
                ctx.limits.max_source_bytes
            ),
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
            return Err(invalid(
                format!("{field}.name_expressions[{j}]"),
                "empty or contains a NUL byte",
            ));
        }
    }
    let refusal = std::iter::once(("source", c.source.as_str()))
        .chain(
            c.headers
                .iter()
                .map(|h| (h.name.as_str(), h.content.as_str())),
        )
        .find_map(|(name, text)| {
            includes::check(text)
                .err()
                .map(|e| format!("refused before compiling: {name}: {e}"))
        });
    let headers: Vec<(&str, &[u8])> = c
        .headers
        .iter()
        .map(|h| (h.name.as_str(), h.content.as_bytes()))
        .collect();
    let key = KeyInputs {
        toolchain: nvrtc::NAME,
        fingerprint: ctx.nvrtc_fingerprint,
        target,
        source: c.source.as_bytes(),
        options: &c.options,
        headers: &headers,
        entries: &c.name_expressions,
    }
    .derive();
    Ok(KernelJob {
        id: id.to_string(),
        key,
        source: c.clone(),
        refusal,
    })
}

#[cfg(test)]
mod tests;
