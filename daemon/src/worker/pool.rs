//! The daemon side of the workers: a pool of long-lived `kilnd worker` processes.
//!
//! A worker is checked out for one request at a time. On success it goes back to the idle list;
//! on a timeout, a crash or a protocol error it is killed and dropped, and the next request spawns
//! a fresh one, so one bad kernel costs one failed outcome and nothing else.

use super::frame;
use kiln_proto::pb::{WorkerHello, WorkerRequest, WorkerResponse};
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

/// How to start one worker.
#[derive(Debug, Clone)]
pub struct WorkerSpec {
    pub exe: PathBuf,
    pub args: Vec<OsString>,
    /// How long a new worker may take to load its compiler and say hello.
    pub start_timeout: Duration,
}

/// Why a request got no answer from its worker.
#[derive(Debug, thiserror::Error)]
pub enum WorkerFailure {
    #[error("compile exceeded its {0:?} timeout; the worker was killed and replaced")]
    Timeout(Duration),
    #[error("the compile worker died: {0}")]
    Died(String),
    #[error("could not start a compile worker: {0}")]
    Start(String),
}

#[derive(Debug)]
struct Worker {
    child: Child,
    stdin: ChildStdin,
    stdout: ChildStdout,
}

#[derive(Debug)]
pub struct WorkerPool {
    spec: WorkerSpec,
    /// A std Mutex: it is held only to push or pop, never across an await.
    idle: std::sync::Mutex<Vec<Worker>>,
    max_idle: usize,
}

impl WorkerPool {
    /// Starts one worker to learn what the toolchain is; it stays in the pool.
    pub async fn start(
        spec: WorkerSpec,
        max_idle: usize,
    ) -> Result<(Self, WorkerHello), WorkerFailure> {
        let pool = WorkerPool {
            spec,
            idle: std::sync::Mutex::new(Vec::new()),
            max_idle: max_idle.max(1),
        };
        let (worker, hello) = pool.spawn().await?;
        pool.give_back(worker);
        Ok((pool, hello))
    }

    async fn spawn(&self) -> Result<(Worker, WorkerHello), WorkerFailure> {
        let mut child = Command::new(&self.spec.exe)
            .args(&self.spec.args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| WorkerFailure::Start(format!("{}: {e}", self.spec.exe.display())))?;
        let (Some(stdin), Some(mut stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(WorkerFailure::Start("worker pipes missing".into()));
        };
        let hello = tokio::time::timeout(
            self.spec.start_timeout,
            frame::read::<WorkerHello>(&mut stdout),
        )
        .await;
        let hello = match hello {
            Ok(Ok(h)) if h.error.is_empty() => h,
            Ok(Ok(h)) => return Err(WorkerFailure::Start(h.error)),
            Ok(Err(e)) => {
                return Err(WorkerFailure::Start(format!(
                    "{e}; {}",
                    exit_reason(&mut child).await
                )));
            }
            Err(_) => {
                return Err(WorkerFailure::Start(format!(
                    "no hello within {:?}",
                    self.spec.start_timeout
                )));
            }
        };
        Ok((
            Worker {
                child,
                stdin,
                stdout,
            },
            hello,
        ))
    }

    fn give_back(&self, worker: Worker) {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        if idle.len() < self.max_idle {
            idle.push(worker);
        }
    }

    /// Runs one request on a worker, within `timeout`.
    pub async fn run(
        &self,
        request: &WorkerRequest,
        timeout: Duration,
    ) -> Result<WorkerResponse, WorkerFailure> {
        let idle = self.idle.lock().unwrap_or_else(|p| p.into_inner()).pop();
        let mut worker = match idle {
            Some(w) => w,
            None => self.spawn().await?.0,
        };
        let exchange = async {
            frame::write(&mut worker.stdin, request).await?;
            frame::read::<WorkerResponse>(&mut worker.stdout).await
        };
        match tokio::time::timeout(timeout, exchange).await {
            Ok(Ok(response)) => {
                self.give_back(worker);
                Ok(response)
            }
            Ok(Err(e)) => Err(WorkerFailure::Died(format!(
                "{}; {e}",
                exit_reason(&mut worker.child).await
            ))),
            Err(_) => {
                let _ = worker.child.start_kill();
                let _ = worker.child.wait().await;
                Err(WorkerFailure::Timeout(timeout))
            }
        }
    }

    /// Workers alive and idle now.
    pub fn idle_count(&self) -> usize {
        self.idle.lock().map(|i| i.len()).unwrap_or(0)
    }
}

/// Waits briefly for a worker that broke its pipe and says how it ended.
async fn exit_reason(child: &mut Child) -> String {
    let status = match tokio::time::timeout(Duration::from_secs(5), child.wait()).await {
        Ok(Ok(status)) => status,
        _ => {
            let _ = child.start_kill();
            return "it stopped answering and was killed".into();
        }
    };
    use std::os::unix::process::ExitStatusExt;
    match status.signal() {
        Some(libc::SIGXCPU) => "it ran past its CPU-time limit (SIGXCPU)".into(),
        Some(libc::SIGKILL) => "it was killed (SIGKILL; out of memory?)".into(),
        Some(libc::SIGSEGV) => "it crashed (SIGSEGV)".into(),
        Some(libc::SIGABRT) => "it aborted (SIGABRT; out of memory?)".into(),
        Some(sig) => format!("it was ended by signal {sig}"),
        None => format!("it exited with {status}"),
    }
}
