//! The daemon's state, apart from the handlers that serve it (as mini-redis keeps its `Db` apart
//! from the connection handler): the cache, the compile engine, the toolchains, the jobs, this
//! host's GPUs, the configuration, the metrics and the tracked work. `server.rs` builds one
//! [`State`]; the `Compiler` service, `Stats`, `Explain`, the host page and the host report each
//! take it, and none of them is it.

use crate::config::Config;
use crate::core::cache::Cache;
use crate::core::engine::Engine;
use crate::core::torch::ledger::Ledger;
use crate::core::work::Work;
use crate::domain::{Job, Priority};
use crate::error::Error;
use crate::metrics::Metrics;
use crate::rpc::jobs::Jobs;
use crate::rpc::validate::{self, Context};
use crate::runtime::gpu::GpuProbe;
use crate::runtime::toolchain::set::Toolchains;
use kiln_proto::Target;
use kiln_proto::pb;
use std::sync::Arc;

#[derive(Debug)]
pub struct State {
    pub engine: Arc<Engine>,
    pub cache: Arc<Cache>,
    pub toolchains: Arc<Toolchains>,
    pub jobs: Jobs,
    pub gpus: GpuProbe,
    pub default_target: Option<Target>,
    pub config: Config,
    pub metrics: Arc<Metrics>,
    /// Everything that outlives a request (compiles, jobs, writes); shutdown drains it.
    pub work: Work,
    /// torch.compile graphs answered and the jobs' reports (`kiln.v1.TorchGraphs`).
    pub torch_graphs: Arc<Ledger>,
}

impl State {
    /// Validates a request, starting the Triton pool first when the graph has Triton kernels
    /// (their keys need its fingerprint).
    pub async fn validate(&self, req: &pb::CompileRequest, default_priority: Priority) -> Result<Job, Error> {
        let toolchains = &self.toolchains;
        let triton_reason;
        let triton = if validate::needs_triton(req) {
            match toolchains.triton().await {
                Ok(t) => Ok(&t.fingerprint),
                Err(why) => {
                    triton_reason = why;
                    Err(triton_reason.as_str())
                }
            }
        } else {
            Err("not needed")
        };
        let nvrtc = &toolchains.nvrtc;
        let no_target_reason = if self.gpus.note.is_empty() { "no GPU was found" } else { self.gpus.note.as_str() };
        let ctx = Context {
            limits: &self.config.limits,
            default_target: self.default_target,
            no_target_reason,
            nvrtc_fingerprint: &nvrtc.fingerprint,
            nvrtc_version: &nvrtc.version,
            ptxas: toolchains.ptxas.as_ref().map(|p| &p.fingerprint).map_err(String::as_str),
            triton,
            supported_targets: &nvrtc.supported,
        };
        validate::request(req, &ctx, default_priority)
    }
}
