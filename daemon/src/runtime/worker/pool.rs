//! The daemon side of the workers: a pool of long-lived worker processes speaking one
//! [`Protocol`] (protobuf frames for `kilnd worker`, JSON frames for the Triton workers).
//!
//! A worker is checked out for one request at a time. On success it goes back to the idle list;
//! on a timeout, a crash or a protocol error it is killed and dropped, and the next request spawns
//! a fresh one, so one bad kernel costs one failed outcome and nothing else. At most `max_workers`
//! run at once: a Triton worker costs hundreds of MB, so the pool, not the host, sets the bound.

use super::confine::Confinement;
use super::frame::{self, Hello};
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::Semaphore;

/// How the daemon and one kind of worker talk: one hello, then request/response frames.
pub trait Protocol: Send + Sync + 'static {
    type Hello: Hello;
    type Request: Send + Sync;
    type Response: Send;
    fn encode_request(request: &Self::Request) -> std::io::Result<Vec<u8>>;
    fn decode_response(bytes: &[u8]) -> std::io::Result<Self::Response>;
}

/// How to start one worker.
#[derive(Debug, Clone)]
pub struct WorkerSpec {
    pub exe: PathBuf,
    pub args: Vec<OsString>,
    /// The worker's whole environment: workers that run client code must not see kilnd's.
    pub env: Option<Vec<(OsString, OsString)>>,
    /// Run as this uid/gid (an unprivileged user when kilnd runs as root).
    pub user: Option<(u32, u32)>,
    /// Namespaces and a seccomp filter, for workers that run client code.
    pub confine: Option<Confinement>,
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
pub struct WorkerPool<P> {
    spec: WorkerSpec,
    /// A std Mutex: it is held only to push or pop, never across an await.
    idle: std::sync::Mutex<Vec<Worker>>,
    /// One permit per worker that may exist at once.
    slots: Arc<Semaphore>,
    max_workers: usize,
    _protocol: std::marker::PhantomData<fn() -> P>,
}

impl<P: Protocol> WorkerPool<P> {
    /// Starts one worker to learn what the toolchain is; it stays in the pool.
    pub async fn start(spec: WorkerSpec, max_workers: usize) -> Result<(Self, P::Hello), WorkerFailure> {
        let pool = WorkerPool {
            spec,
            idle: std::sync::Mutex::new(Vec::new()),
            slots: Arc::new(Semaphore::new(max_workers.max(1))),
            max_workers: max_workers.max(1),
            _protocol: std::marker::PhantomData,
        };
        let (worker, hello) = pool.spawn().await?;
        pool.give_back(worker);
        Ok((pool, hello))
    }

    async fn spawn(&self) -> Result<(Worker, P::Hello), WorkerFailure> {
        let mut cmd = Command::new(&self.spec.exe);
        cmd.args(&self.spec.args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true);
        if let Some(env) = &self.spec.env {
            cmd.env_clear().envs(env.iter().map(|(k, v)| (k, v)));
        }
        if let Some(confine) = self.spec.confine.clone() {
            let user = self.spec.user;
            // SAFETY: apply makes only system calls and allocates nothing, as code between fork
            // and exec must.
            unsafe { cmd.pre_exec(move || confine.apply(user)) };
        } else if let Some((uid, gid)) = self.spec.user {
            cmd.uid(uid).gid(gid);
        }
        let mut child = cmd.spawn().map_err(|e| WorkerFailure::Start(format!("{}: {e}", self.spec.exe.display())))?;
        let (Some(stdin), Some(mut stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(WorkerFailure::Start("worker pipes missing".into()));
        };
        let hello = tokio::time::timeout(self.spec.start_timeout, frame::read_bytes(&mut stdout)).await;
        let hello = match hello.map(|r| r.and_then(|b| P::Hello::decode(&b))) {
            Ok(Ok(h)) => match h.error() {
                None => h,
                Some(error) => return Err(WorkerFailure::Start(error)),
            },
            Ok(Err(e)) => return Err(WorkerFailure::Start(format!("{e}; {}", exit_reason(&mut child).await))),
            Err(_) => return Err(WorkerFailure::Start(format!("no hello within {:?}", self.spec.start_timeout))),
        };
        Ok((Worker { child, stdin, stdout }, hello))
    }

    /// Starts `count` more workers, side by side, into the idle list: for a pool whose workers
    /// take seconds to start (a torch worker imports torch, Dynamo and Inductor), so that requests
    /// that come together find them up instead of each starting one. A worker that fails to
    /// start is left to the request that needs it.
    pub async fn grow(&self, count: usize) {
        let started = futures_util::future::join_all((0..count).map(|_| self.spawn())).await;
        for worker in started.into_iter().flatten() {
            self.give_back(worker.0);
        }
    }

    /// Whether a request now would find a started worker waiting, with nothing ahead of it.
    pub fn has_idle(&self) -> bool {
        self.slots.available_permits() > 0 && !self.idle.lock().unwrap_or_else(|p| p.into_inner()).is_empty()
    }

    /// Keeps a worker for the next request; past `max_workers` idle ones (a pool grown while
    /// requests started their own), it is ended instead.
    fn give_back(&self, worker: Worker) {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        if idle.len() < self.max_workers {
            idle.push(worker);
        }
    }

    /// Runs one request on a worker, within `timeout` (which starts once a worker is free).
    pub async fn run(&self, request: &P::Request, timeout: Duration) -> Result<P::Response, WorkerFailure> {
        let _slot = self.slots.acquire().await.map_err(|_| WorkerFailure::Start("the pool is closed".into()))?;
        let idle = self.idle.lock().unwrap_or_else(|p| p.into_inner()).pop();
        let mut worker = match idle {
            Some(w) => w,
            None => self.spawn().await?.0,
        };
        let bytes =
            P::encode_request(request).map_err(|e| WorkerFailure::Died(format!("encoding the request: {e}")))?;
        let exchange = async {
            frame::write_bytes(&mut worker.stdin, &bytes).await?;
            frame::read_bytes(&mut worker.stdout).await
        };
        match tokio::time::timeout(timeout, exchange).await {
            Ok(Ok(answer)) => match P::decode_response(&answer) {
                Ok(response) => {
                    self.give_back(worker);
                    Ok(response)
                }
                Err(e) => Err(WorkerFailure::Died(format!("it sent a bad frame: {e}"))),
            },
            Ok(Err(e)) => Err(WorkerFailure::Died(format!("{}; {e}", exit_reason(&mut worker.child).await))),
            Err(_) => {
                let _ = worker.child.start_kill();
                let _ = worker.child.wait().await;
                Err(WorkerFailure::Timeout(timeout))
            }
        }
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// A worker that says an empty hello and then waits: what a pool keeps idle.
    struct Idle;

    impl Protocol for Idle {
        /// An empty frame decodes as a hello that reports no error.
        type Hello = kiln_proto::pb::WorkerHello;
        type Request = ();
        type Response = ();
        fn encode_request(_: &()) -> std::io::Result<Vec<u8>> {
            Ok(Vec::new())
        }
        fn decode_response(_: &[u8]) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn spec() -> WorkerSpec {
        WorkerSpec {
            exe: "/bin/sh".into(),
            args: vec!["-c".into(), r"printf '\000\000\000\000'; exec sleep 60".into()],
            env: None,
            user: None,
            confine: None,
            start_timeout: Duration::from_secs(10),
        }
    }

    fn idle(pool: &WorkerPool<Idle>) -> usize {
        pool.idle.lock().unwrap().len()
    }

    #[tokio::test]
    async fn a_pool_grows_by_the_count_asked_and_keeps_no_more_than_its_bound() {
        let (pool, _) = WorkerPool::<Idle>::start(spec(), 3).await.unwrap();
        assert_eq!(idle(&pool), 1, "start keeps its first worker");
        assert!(pool.has_idle());
        pool.grow(2).await;
        assert_eq!(idle(&pool), 3, "two more started side by side");
        pool.grow(2).await;
        assert_eq!(idle(&pool), 3, "past max_workers idle ones, a started worker is ended");
    }
}
