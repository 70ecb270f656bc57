//! The benchmark harness behind `scripts/bench`: kiln measured side by side with baselines in
//! one run, written to BENCHMARKS.md. It is not part of the tests: performance is measured by
//! benchmarks, never by timed tests, whose bounds would either flake or prove nothing.
//!
//! - [`cold_compile`]: figure (b), a cold 64-kernel graph through kilnd against NVRTC called
//!   directly ([`nvrtc`]).
//! - [`warm_hit`]: figure (a), a warm 64-kernel graph from the memory and disk tiers against raw
//!   file reads and pipelined Redis GETs.
//! - [`hit_throughput`]: figure (c), lookups per second from many clients against
//!   `redis-benchmark`.
//! - [`sccache_nvcc`]: figure (d), the same kernels through sccache + nvcc, cold and warm.
//! - [`fleet_warm`], [`fleet_cold`], [`fleet_lookups`]: figures (e) to (g), the fleet's
//!   figures, over a private Redis and a real kiln-cache ([`fleet`]).
//! - [`triton_compile`], [`triton_pool`], [`ptxas_compile`]: figures (h) to (j), the Triton
//!   and PTX toolchains' figures ([`triton_kernels`]: the Triton kernels and the direct baseline).
//! - [`snapshot_job`]: figures (l) and (m), job snapshots: a Triton job on a fresh
//!   host restored from a snapshot against a warm host, and restore time against Redis GETs.
//! - [`snapshot_fleet`]: figure (n), one job snapshot restored by 1 and 16 fresh hosts at once
//!   against as many Redis clients.
//! - [`torch_layouts`]: figure (p), torch.compile on the CPU by training layout, kiln against
//!   plain torch.compile.
//! - [`torch_fleet_sim`]: figure (q), a torch.compile job starting cold on 32 simulated hosts of 8
//!   ranks each (real kilnds, one kiln-cache), fleet leases against none, and the fleet cache's
//!   load at 64 hosts modelled from it.
//! - [`kilnd`], [`redis`], [`sccache`]: the processes the figures need, started privately.
//! - [`source_tree`]: the kernels as `.cu` files, built one process per file like `make -j`.
//! - [`work_queue`]: items done by a fixed number of threads pulling from one queue.
//! - [`samples`], [`report`], [`machine`]: percentiles, tables, and what the run ran on.

pub mod audit_cost;
pub mod cold_compile;
pub mod cpu;
pub mod fleet;
pub mod fleet_cold;
pub mod fleet_lookups;
pub mod fleet_warm;
pub mod floor;
pub mod hit_throughput;
pub mod kilnd;
pub mod machine;
pub mod nvrtc;
pub mod partial;
pub mod ptxas_compile;
pub mod redis;
pub mod report;
pub mod restart_model;
pub mod samples;
pub mod sccache;
pub mod sccache_nvcc;
pub mod snapshot_fleet;
pub mod snapshot_job;
pub mod source_tree;
pub mod torch_fleet_sim;
pub mod torch_layouts;
pub mod triton_compile;
pub mod triton_herd;
pub mod triton_kernels;
pub mod triton_pool;
pub mod warm_hit;
pub mod work_queue;

use anyhow::{Context, Result, ensure};
use kiln_proto::pb;
use std::path::{Path, PathBuf};

/// The GPU architecture every figure compiles for.
pub const TARGET: &str = "sm_90";
/// Kernels in the graph of figures (a), (b) and (d).
pub const GRAPH_KERNELS: usize = 64;

/// How much to measure. The defaults keep a whole run near ten minutes on two cores.
#[derive(Debug, Clone)]
pub struct Options {
    /// Warm graph compiles served by the memory tier.
    pub memory_samples: usize,
    /// Warm graph compiles served by the disk tier with the memory tier off.
    pub disk_samples: usize,
    /// Daemon restarts, each timed on its first (disk-tier) graph compile.
    pub restart_samples: usize,
    /// Rounds of each cold compile; the best round of each side is compared.
    pub cold_rounds: usize,
    /// Concurrent clients for the throughput figure.
    pub clients: Vec<usize>,
    /// Seconds each throughput measurement runs.
    pub throughput_secs: f64,
    /// Requests each `redis-benchmark` run makes.
    pub redis_requests: usize,
    /// Warm passes through sccache and the kiln CLI; the median pass is reported.
    pub warm_passes: usize,
    /// Fresh daemons, each timed on its first graph compile from the remote tier.
    pub fleet_warm_samples: usize,
    /// Fleet cold starts of each kind (leases on, leases off).
    pub fleet_rounds: usize,
    /// Timed rounds of each Triton comparison.
    pub triton_rounds: usize,
    /// Fresh-host rounds of each job-snapshot figure; medians are reported.
    pub snapshot_rounds: usize,
    /// Rounds of figure (n), each starting 17 fresh kilnds; medians are reported.
    pub fleet_restore_rounds: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            memory_samples: 1000,
            disk_samples: 500,
            restart_samples: 50,
            cold_rounds: 7,
            clients: vec![16, 64],
            throughput_secs: 5.0,
            redis_requests: 200_000,
            warm_passes: 3,
            fleet_warm_samples: 40,
            fleet_rounds: 3,
            triton_rounds: 5,
            // A restore is a few percent of figure (l)'s job, well inside the job's own spread on a
            // busy machine: enough rounds that the medians are not one noisy sample.
            snapshot_rounds: 7,
            fleet_restore_rounds: 3,
        }
    }
}

/// Where things are, found once at the start.
#[derive(Debug)]
pub struct Bench {
    pub repo: PathBuf,
    /// `target/release`, where `kilnd`, `kiln` and this binary are.
    pub bin_dir: PathBuf,
    /// The pinned wheel tree, `.venv/.../nvidia/cu13`.
    pub cuda_root: PathBuf,
    /// Scratch space for daemons, caches and sources; removed at the end of the run.
    pub work: PathBuf,
    pub cores: usize,
    pub options: Options,
}

/// Figures one section measures and a later one compares against, so (d) reuses kiln's
/// numbers from (a) and (b) of the same run instead of measuring them twice.
#[derive(Debug, Default)]
pub struct Shared {
    /// (b): the best cold compile of the graph through kilnd at the machine's concurrency.
    pub kiln_cold_graph_secs: Option<f64>,
    /// (a): p50 of a warm graph from the memory tier.
    pub kiln_memory_p50_ms: Option<f64>,
    /// (a): p50 of the first graph compile after a restart (disk tier).
    pub kiln_restart_p50_ms: Option<f64>,
}

impl Bench {
    pub fn new(work: &Path, options: Options) -> Result<Bench> {
        let exe = std::env::current_exe().context("finding this executable")?;
        let bin_dir = exe.parent().context("executable has no directory")?.to_path_buf();
        for name in ["kilnd", "kiln"] {
            ensure!(
                bin_dir.join(name).is_file(),
                "{} is missing: build with `cargo build --release --workspace --bins` (scripts/bench does)",
                bin_dir.join(name).display()
            );
        }
        Ok(Bench {
            repo: kiln_tests::env::repo_root(),
            bin_dir,
            cuda_root: kiln_tests::env::cuda_root(),
            work: work.to_path_buf(),
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            options,
        })
    }

    pub fn kilnd(&self) -> PathBuf {
        self.bin_dir.join("kilnd")
    }

    pub fn kiln(&self) -> PathBuf {
        self.bin_dir.join("kiln")
    }

    /// This run's `kilnd`, with the pinned CUDA tree, started in `dir` (see [`kilnd::Kilnd::start`]).
    pub async fn start_kilnd(&self, dir: &Path, options: &kilnd::KilndOptions) -> Result<kilnd::Kilnd> {
        kilnd::Kilnd::start(&self.kilnd(), &self.cuda_root, dir, options).await
    }

    /// A fresh directory under the scratch space.
    pub fn dir(&self, name: &str) -> Result<PathBuf> {
        let dir = self.work.join(name);
        if dir.exists() {
            std::fs::remove_dir_all(&dir).with_context(|| format!("clearing {}", dir.display()))?;
        }
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        Ok(dir)
    }
}

/// The CUDA source of kernel `i` of the graph: distinct per `i`, so each is its own cache entry.
pub fn source(i: usize) -> String {
    kiln_tests::kernels::vector_add(i)
}

/// The 64-kernel graph (ids `add_0` … `add_63`).
pub fn graph_request() -> pb::CompileRequest {
    kiln_tests::kernels::vector_graph(TARGET, GRAPH_KERNELS)
}

/// Checks that a job returned every kernel OK, from `tier` when given, and returns the
/// artifacts in kernel-id order.
pub fn check_job(job: &kiln_client::CompletedJob, kernels: usize, tier: Option<pb::Tier>) -> Result<Vec<Vec<u8>>> {
    ensure!(job.kernels.len() == kernels, "{} of {kernels} kernel results came back", job.kernels.len());
    let mut out = Vec::with_capacity(kernels);
    for i in 0..kernels {
        let id = format!("add_{i}");
        let k = job.kernel(&id).with_context(|| format!("no result for {id}"))?;
        ensure!(k.outcome() == pb::Outcome::Ok, "{id}: outcome {:?}: {}", k.outcome(), k.log);
        if let Some(t) = tier {
            ensure!(k.tier() == t, "{id} came from {:?}, not {t:?}", k.tier());
        }
        out.push(k.artifact.to_vec());
    }
    Ok(out)
}

/// Requests per second of a throughput figure: the counts its client tasks return, added up,
/// over the time since `start`. The first task's error ends the figure.
pub async fn per_second(mut tasks: tokio::task::JoinSet<Result<u64>>, start: std::time::Instant) -> Result<f64> {
    let mut total = 0;
    while let Some(done) = tasks.join_next().await {
        total += done??;
    }
    Ok(total as f64 / start.elapsed().as_secs_f64())
}
