//! A real `kilnd` process for a test: its own socket, cache directory and metrics port.

use crate::env;
use crate::stderr::StderrTail;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How to start a daemon.
#[derive(Debug, Clone)]
pub struct Options {
    pub cuda_root: PathBuf,
    pub target: Option<String>,
    pub concurrency: usize,
    /// Extra lines for the TOML config file.
    pub config: String,
    pub extra_env: Vec<(String, String)>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            cuda_root: env::cuda_root(),
            target: Some("sm_90".into()),
            concurrency: 2,
            config: String::new(),
            extra_env: Vec::new(),
        }
    }
}

/// A running kilnd. Dropping it kills the process; [`Daemon::stop`] stops it cleanly and checks
/// that it exits 0.
#[derive(Debug)]
pub struct Daemon {
    child: Option<Child>,
    pub dir: PathBuf,
    pub socket: PathBuf,
    pub cache_dir: PathBuf,
    pub metrics: SocketAddr,
    pub options: Options,
    /// The end of kilnd's stderr, which still reaches the test's stderr as it comes.
    stderr: StderrTail,
    _tmp: Option<tempfile::TempDir>,
}

impl Daemon {
    /// Starts a daemon in a fresh directory and waits until it answers.
    pub fn start(options: Options) -> Daemon {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().to_path_buf();
        let mut d = Daemon::start_in(&dir, options);
        d._tmp = Some(tmp);
        d
    }

    /// Starts a daemon whose socket and cache live under `dir` (reused across restarts).
    pub fn start_in(dir: &Path, options: Options) -> Daemon {
        let socket = dir.join("kilnd.sock");
        let cache_dir = dir.join("cache");
        let config_path = dir.join("kilnd.toml");
        std::fs::write(&config_path, &options.config).expect("write config");
        let metrics = crate::ports::free_addr();
        let mut cmd = Command::new(env::binary("kilnd"));
        cmd.arg("--socket")
            .arg(&socket)
            .arg("--cache-dir")
            .arg(&cache_dir)
            .arg("--cuda-root")
            .arg(&options.cuda_root)
            .arg("--metrics")
            .arg(metrics.to_string())
            .arg("--concurrency")
            .arg(options.concurrency.to_string())
            .arg("--config")
            .arg(&config_path)
            .env_remove("KILN_TARGET")
            .env("KILN_PYTHON", env::python())
            .env("KILN_LOG", "warn")
            .stdin(Stdio::null())
            .stderr(Stdio::piped());
        if let Some(t) = &options.target {
            cmd.arg("--target").arg(t);
        }
        for (k, v) in &options.extra_env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn kilnd");
        let stderr = StderrTail::tee(child.stderr.take().expect("piped stderr"));
        let mut d = Daemon {
            child: Some(child),
            dir: dir.to_path_buf(),
            socket,
            cache_dir,
            metrics,
            options,
            stderr,
            _tmp: None,
        };
        d.wait_ready();
        d
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if let Some(status) = self.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                let tail = self.stderr.after_exit();
                panic!("kilnd exited during start-up with {status}; its stderr ended:\n{tail}");
            }
            if std::os::unix::net::UnixStream::connect(&self.socket).is_ok()
                && crate::http::get(self.metrics, "/metrics").is_ok()
            {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("kilnd did not answer within 60 s");
    }

    /// `unix:///...` for clients.
    pub fn uri(&self) -> String {
        format!("unix://{}", self.socket.display())
    }

    /// The end of what kilnd logged so far (its stderr, at `KILN_LOG=warn`).
    pub fn log_so_far(&self) -> String {
        self.stderr.so_far()
    }

    /// The `kiln` CLI with `args`, run in `cwd` against this daemon.
    pub fn kiln(&self, args: &[&str], cwd: &Path) -> std::process::Output {
        Command::new(env::binary("kiln"))
            .env("KILN_DAEMON", self.uri())
            .args(args)
            .current_dir(cwd)
            .output()
            .expect("run kiln")
    }

    pub async fn client(&self) -> kiln_client::Client {
        kiln_client::connect(&self.uri()).await.expect("connect to kilnd")
    }

    /// The `/metrics` text.
    pub fn metrics_text(&self) -> String {
        crate::http::get(self.metrics, "/metrics").expect("GET /metrics")
    }

    /// Waits until `/metrics` has `series` at `at_least` or more (disk writes finish after the
    /// answer, in the background); panics after 30 s with the metrics text.
    pub fn wait_for_metric(&self, series: &str, at_least: f64) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let text = self.metrics_text();
            if crate::http::sample(&text, series).is_some_and(|v| v >= at_least) {
                return;
            }
            assert!(Instant::now() < deadline, "{series} never reached {at_least}:\n{text}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(|c| c.id()).unwrap_or(0)
    }

    /// SIGTERM, then wait; asserts a clean exit within `bound`.
    pub fn stop_within(mut self, bound: Duration) {
        crate::procs::terminate(self.child.take().expect("running"), "kilnd", bound);
    }

    pub fn stop(self) {
        self.stop_within(Duration::from_secs(30));
    }

    /// Sends SIGTERM and returns at once.
    pub fn terminate(&self) {
        crate::procs::signal(self.pid(), "TERM");
    }

    /// Waits for the process to exit; panics after `bound`.
    pub fn exit_within(mut self, bound: Duration) -> std::process::ExitStatus {
        let mut child = self.child.take().expect("running");
        crate::procs::wait_or_kill(&mut child, bound).unwrap_or_else(|| panic!("kilnd did not exit within {bound:?}"))
    }

    /// SIGKILL, as a preempted host dies: no drain, no release of anything.
    pub fn kill9(mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// A daemon that uses the fleet cache at `uri` with `token`, plus `config` lines.
    pub fn fleet_options(uri: &str, token: &str, config: &str) -> Options {
        Options {
            extra_env: vec![("KILN_REMOTE".into(), uri.into()), ("KILN_REMOTE_TOKEN".into(), token.into())],
            config: config.into(),
            ..Options::default()
        }
    }

    /// Whether the process is still running.
    pub fn alive(&mut self) -> bool {
        self.child.as_mut().is_some_and(|c| c.try_wait().ok().flatten().is_none())
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// `request` compiled by `client`, every event of the job collected: the whole job, which a test
/// then checks kernel by kernel.
pub async fn compile_job(
    client: &kiln_client::Client,
    request: kiln_client::pb::CompileRequest,
) -> kiln_client::CompletedJob {
    client.compile(request).await.expect("compile").collect().await.expect("the compile's events")
}

/// `request` looked up by `client` (no compile), every event collected.
pub async fn lookup_job(
    client: &kiln_client::Client,
    request: kiln_client::pb::CompileRequest,
) -> kiln_client::CompletedJob {
    client.lookup(request).await.expect("lookup").collect().await.expect("the lookup's events")
}
