//! A `kilnd` process for one measurement.
//!
//! This is not [`kiln_tests::daemon::Daemon`]: that harness finds binaries from a test executable's
//! place (`target/<profile>/deps/`) and panics on failure, while the bench binary sits next to
//! `kilnd` in `target/release/` and must turn every failure into a recorded error.

use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How to start one daemon.
#[derive(Debug, Clone, Default)]
pub struct KilndOptions {
    pub concurrency: usize,
    /// `memory_cache_mb` in the config file; `Some(0)` turns the memory tier off so that every
    /// hit is served by the disk tier.
    pub memory_cache_mb: Option<u64>,
    /// Further lines of the config file (`fleet_leases`, `triton_workers`, …).
    pub config: String,
    /// Extra environment: `KILN_REMOTE`, `KILN_PYTHON`, a witness NVRTC's variables.
    pub env: Vec<(String, String)>,
    /// Serve `/metrics` on a free loopback port, for figures that count compiles.
    pub metrics: bool,
    /// A CUDA root other than the bench's (the witness NVRTC).
    pub cuda_root: Option<PathBuf>,
}

impl KilndOptions {
    pub fn new(concurrency: usize) -> KilndOptions {
        KilndOptions { concurrency, ..KilndOptions::default() }
    }
}

/// How long a stopped kilnd may take: its default drain bound (30 s) and the grace past it after
/// which kilnd ends itself (5 s), plus room for a loaded machine. A kilnd over this is a bug.
const STOP_BOUND: Duration = Duration::from_secs(40);

/// A running kilnd. Dropping it kills the process; [`Kilnd::stop`] stops it with SIGTERM.
#[derive(Debug)]
pub struct Kilnd {
    child: Option<Child>,
    pub socket: PathBuf,
    pub cache_dir: PathBuf,
    /// Where `/metrics` is served, when asked for.
    pub metrics: Option<std::net::SocketAddr>,
}

impl Kilnd {
    /// Starts `kilnd` with its socket, config and cache under `dir` (which may hold a cache from
    /// an earlier daemon) and waits until it answers `Stats`.
    pub async fn start(exe: &Path, cuda_root: &Path, dir: &Path, options: &KilndOptions) -> Result<Kilnd> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let socket = dir.join("kilnd.sock");
        let cache_dir = dir.join("cache");
        let config = dir.join("kilnd.toml");
        let mut text = options.memory_cache_mb.map(|mb| format!("memory_cache_mb = {mb}\n")).unwrap_or_default();
        text.push_str(&options.config);
        std::fs::write(&config, text).with_context(|| format!("writing {}", config.display()))?;
        let metrics = match options.metrics {
            true => Some(kiln_tests::ports::free_addr()),
            false => None,
        };
        let mut cmd = Command::new(exe);
        if let Some(addr) = metrics {
            cmd.arg("--metrics").arg(addr.to_string());
        }
        let child = cmd
            .arg("--socket")
            .arg(&socket)
            .arg("--cache-dir")
            .arg(&cache_dir)
            .arg("--cuda-root")
            .arg(options.cuda_root.as_deref().unwrap_or(cuda_root))
            .arg("--target")
            .arg("sm_90")
            .arg("--concurrency")
            .arg(options.concurrency.to_string())
            .arg("--config")
            .arg(&config)
            .env("KILN_LOG", "warn")
            .envs(options.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .spawn()
            .with_context(|| format!("starting {}", exe.display()))?;
        let mut daemon = Kilnd { child: Some(child), socket, cache_dir, metrics };
        daemon.wait_ready().await?;
        Ok(daemon)
    }

    async fn wait_ready(&mut self) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = self.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                bail!("kilnd exited during start-up with {status}");
            }
            let metrics_up = self.metrics.is_none_or(|m| kiln_tests::http::get(m, "/metrics").is_ok());
            if self.socket.exists() && metrics_up && self.answers().await {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("kilnd did not answer on {} within 60 s", self.socket.display());
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    async fn answers(&self) -> bool {
        match kiln_client::connect(&self.uri()).await {
            Ok(client) => client.stats().await.is_ok(),
            Err(_) => false,
        }
    }

    pub fn uri(&self) -> String {
        format!("unix://{}", self.socket.display())
    }

    pub async fn connect(&self) -> Result<kiln_client::Client> {
        kiln_client::connect(&self.uri()).await.with_context(|| format!("connecting to {}", self.uri()))
    }

    /// The sum of every `series` sample in `/metrics` (all label sets that start with it).
    pub fn metric_sum(&self, series: &str) -> Result<f64> {
        let addr = self.metrics.context("this kilnd serves no /metrics")?;
        let text = kiln_tests::http::get(addr, "/metrics").context("GET /metrics")?;
        Ok(crate::reliability::containers::sum_series(&text, series))
    }

    /// The process id, while it runs: for its memory in /proc.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// SIGKILL, as a crashed or preempted host dies: no drain, no flush of anything.
    pub fn kill9(mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM, then waits for a clean exit, as a service manager would stop it.
    pub async fn stop(mut self) -> Result<()> {
        let Some(mut child) = self.child.take() else { return Ok(()) };
        let pid = libc::pid_t::try_from(child.id()).context("pid out of range")?;
        // SAFETY: kill(2) with a pid of a child this struct owns and has not yet reaped.
        if unsafe { libc::kill(pid, libc::SIGTERM) } != 0 {
            bail!("SIGTERM to kilnd {pid}: {}", std::io::Error::last_os_error());
        }
        let deadline = Instant::now() + STOP_BOUND;
        loop {
            if let Some(status) = child.try_wait().context("waiting for kilnd")? {
                if !status.success() {
                    bail!("kilnd exited with {status} after SIGTERM");
                }
                return Ok(());
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                bail!("kilnd did not exit within {STOP_BOUND:?} of SIGTERM");
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

impl Drop for Kilnd {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
