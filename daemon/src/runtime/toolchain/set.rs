//! The toolchains of one daemon. NVRTC is required (kilnd refuses to start without it); ptxas is
//! used when the CUDA installation has it; Triton starts lazily, on the first Triton request,
//! and a failed start is retried on the next one (an operator may install Triton meanwhile).

use super::nvrtc::Nvrtc;
use super::ptxas::Ptxas;
use super::triton::{self, Triton};
use super::{CompileFuture, Compiled, Compiler, Toolchain};
use crate::domain::KernelSource;
use kiln_proto::pb::ToolchainInfo;
use kiln_proto::{Fingerprint, Target};
use std::time::Duration;
use tokio::sync::OnceCell;

#[derive(Debug)]
pub struct Toolchains {
    pub nvrtc: Nvrtc,
    /// ptxas, or why there is none.
    pub ptxas: Result<Ptxas, String>,
    triton_settings: triton::Settings,
    triton: OnceCell<Triton>,
}

impl Toolchains {
    pub fn new(nvrtc: Nvrtc, ptxas: Result<Ptxas, String>, triton_settings: triton::Settings) -> Self {
        // Probed at start-up, so what the Triton box lacks on this host is logged now.
        super::triton_box::protections();
        Toolchains { nvrtc, ptxas, triton_settings, triton: OnceCell::new() }
    }

    /// The Triton toolchain, starting its pool on first use. Concurrent first requests wait for
    /// one start.
    pub async fn triton(&self) -> Result<&Triton, String> {
        let started = self.triton.get_or_try_init(|| Triton::start(&self.triton_settings)).await;
        started.map_err(|e| {
            let e = e.to_string();
            format!("{e}; fix: {}", super::fix::triton(&self.triton_settings.python, &e))
        })
    }

    /// The Triton toolchain if it has started.
    pub fn triton_started(&self) -> Option<&Triton> {
        self.triton.get()
    }

    pub fn infos(&self) -> Vec<ToolchainInfo> {
        let mut out = vec![self.nvrtc.info()];
        match &self.ptxas {
            Ok(p) => out.push(p.info()),
            Err(why) => out.push(ToolchainInfo {
                name: Toolchain::Ptxas.as_str().into(),
                version: format!("unavailable: {why}"),
                ..Default::default()
            }),
        }
        match self.triton_started() {
            Some(t) => out.push(t.info()),
            None => out.push(ToolchainInfo {
                name: Toolchain::Triton.as_str().into(),
                version: format!(
                    "not started: starts on the first Triton request ({})",
                    self.triton_settings.python.display()
                ),
                ..Default::default()
            }),
        }
        out
    }
}

/// Which toolchain compiles a source: the one of its kind.
impl Compiler for Toolchains {
    /// Compiles `source` with its toolchain. Validation only passes kernels whose toolchain is
    /// available; the fallbacks here cover a Triton pool that failed to start after validation.
    fn compile<'a>(&'a self, source: &'a KernelSource, target: &'a Target, timeout: Duration) -> CompileFuture<'a> {
        Box::pin(async move {
            let started = std::time::Instant::now();
            match source {
                KernelSource::Cuda(c) => self.nvrtc.compile(c, target, timeout).await,
                KernelSource::Ptx(p) => match &self.ptxas {
                    Ok(ptxas) => ptxas.compile(&p.ptx, &p.options, target, timeout).await,
                    Err(why) => Compiled::failed(format!("ptxas is not available: {why}"), started),
                },
                KernelSource::Triton(t) => match self.triton().await {
                    Ok(triton) => triton.compile(t, target, timeout).await,
                    Err(why) => Compiled::failed(format!("Triton is not available: {why}"), started),
                },
            }
        })
    }

    fn build_of(&self, source: &KernelSource) -> Option<(Fingerprint, String)> {
        match source {
            KernelSource::Cuda(_) => Some((self.nvrtc.fingerprint, self.nvrtc.version.clone())),
            KernelSource::Ptx(_) => self.ptxas.as_ref().ok().map(|p| (p.fingerprint, p.version.clone())),
            KernelSource::Triton(_) => self.triton_started().map(|p| (p.fingerprint, p.version.clone())),
        }
    }
}
