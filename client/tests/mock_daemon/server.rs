//! A stand-in kilnd that answers the kiln.v1 `Compiler` service from a script, over a real Unix
//! socket, so the client library and the `kiln` binary are tested end to end without NVRTC.
//!
//! Script: a kernel whose source contains `error` fails with a log; a kernel whose id starts with
//! `big` returns a 5 MiB artifact (past tonic's 4 MiB default); others return their source bytes
//! as the artifact. An empty source is refused with INVALID_ARGUMENT, as kilnd does. A graph named
//! `shutdown` ends with `JobFailed`. Lookup misses everything.

use kiln_client::pb;
use kiln_client::pb::compiler_server::{Compiler, CompilerServer};
use kiln_client::pb::job_event::Event;
use std::sync::{Arc, Mutex};
use tokio::net::UnixListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::UnixListenerStream;
use tonic::{Request, Response, Status};

pub const BIG_ARTIFACT_BYTES: usize = 5 << 20;
pub const JOB_ID: &str = "job-1";

type Events = tokio_stream::Iter<std::vec::IntoIter<Result<pb::JobEvent, Status>>>;

/// Every request the mock received, by RPC name, so tests can check what the client sent.
pub type Log = Arc<Mutex<Vec<(&'static str, pb::CompileRequest)>>>;

#[derive(Debug, Default)]
struct Mock {
    log: Log,
}

/// A running mock daemon. `stop` shuts it down and waits for it, so every test proves a clean end.
#[derive(Debug)]
pub struct Running {
    pub uri: String,
    pub log: Log,
    shutdown: oneshot::Sender<()>,
    server: JoinHandle<Result<(), tonic::transport::Error>>,
    _dir: tempfile::TempDir,
}

impl Running {
    pub async fn stop(self) {
        let _ = self.shutdown.send(());
        self.server.await.expect("server task").expect("server");
    }

    pub fn requests(&self) -> Vec<(&'static str, pb::CompileRequest)> {
        self.log.lock().expect("log").clone()
    }
}

pub async fn start() -> Running {
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("kilnd.sock");
    let listener = UnixListener::bind(&socket).expect("bind");
    let mock = Mock::default();
    let log = mock.log.clone();
    let (shutdown, stopped) = oneshot::channel::<()>();
    let server = tokio::spawn(
        tonic::transport::Server::builder().add_service(CompilerServer::new(mock)).serve_with_incoming_shutdown(
            UnixListenerStream::new(listener),
            async {
                let _ = stopped.await;
            },
        ),
    );
    Running { uri: format!("unix://{}", socket.display()), log, shutdown, server, _dir: dir }
}

fn event(event: Event) -> Result<pb::JobEvent, Status> {
    Ok(pb::JobEvent { job_id: JOB_ID.into(), event: Some(event) })
}

fn key(i: usize) -> String {
    format!("{i:064x}")
}

fn cuda(kernel: &pb::Kernel) -> Option<&pb::CudaSource> {
    match &kernel.source {
        Some(pb::kernel::Source::Cuda(cuda)) => Some(cuda),
        _ => None,
    }
}

fn validate(request: &pb::CompileRequest) -> Result<&pb::CompileGraph, Status> {
    let graph = request.graph.as_ref().ok_or_else(|| Status::invalid_argument("graph: missing"))?;
    for (i, kernel) in graph.kernels.iter().enumerate() {
        let source =
            cuda(kernel).ok_or_else(|| Status::invalid_argument(format!("graph.kernels[{i}].source: missing")))?;
        if source.source.is_empty() {
            return Err(Status::invalid_argument(format!("graph.kernels[{i}].cuda.source: empty")));
        }
    }
    Ok(graph)
}

fn result(i: usize, kernel: &pb::Kernel, lookup: bool) -> pb::KernelResult {
    let source = cuda(kernel).map(|c| c.source.clone()).unwrap_or_default();
    let lowered_names = cuda(kernel)
        .map(|c| {
            c.name_expressions
                .iter()
                .map(|e| pb::LoweredName { name_expression: e.clone(), lowered_name: format!("_Z{e}") })
                .collect()
        })
        .unwrap_or_default();
    let mut result = pb::KernelResult {
        id: kernel.id.clone(),
        key: key(i),
        toolchain: "nvrtc".into(),
        target: "sm_90".into(),
        compile_micros: 250_000,
        elapsed_micros: 1_500,
        ..Default::default()
    };
    if lookup {
        result.set_outcome(pb::Outcome::Miss);
    } else if source.contains("error") {
        result.set_outcome(pb::Outcome::Failed);
        result.set_tier(pb::Tier::Compiled);
        result.log = format!("{}.cu(1): error: boom\n1 error detected", kernel.id);
    } else {
        result.set_outcome(pb::Outcome::Ok);
        result.set_tier(pb::Tier::Compiled);
        result.artifact =
            if kernel.id.starts_with("big") { vec![7; BIG_ARTIFACT_BYTES].into() } else { source.into_bytes().into() };
        result.artifact_bytes = result.artifact.len() as u64;
        result.lowered_names = lowered_names;
    }
    result
}

fn events(request: &pb::CompileRequest, lookup: bool) -> Result<Events, Status> {
    let graph = validate(request)?;
    let mut out = vec![
        event(Event::Queued(pb::Queued { kernels: graph.kernels.len() as u32, target: "sm_90".into() })),
        event(Event::Started(pb::Started {})),
    ];
    let mut done = pb::JobDone { graph_key: "ab".repeat(32), ..Default::default() };
    for (i, kernel) in graph.kernels.iter().enumerate() {
        let mut r = result(i, kernel, lookup);
        match r.outcome() {
            pb::Outcome::Ok => done.ok += 1,
            pb::Outcome::Miss => done.missed += 1,
            _ => done.failed += 1,
        }
        if request.omit_artifacts {
            r.artifact.clear();
        }
        done.kernel_keys.push(r.key.clone());
        out.push(event(Event::Kernel(r)));
    }
    if graph.name == "shutdown" {
        out.push(event(Event::Failed(pb::JobFailed { reason: "kilnd is shutting down".into() })));
    } else {
        out.push(event(Event::Done(done)));
    }
    Ok(tokio_stream::iter(out))
}

#[tonic::async_trait]
impl Compiler for Mock {
    type CompileStream = Events;
    type WatchStream = Events;
    type LookupStream = Events;
    type WarmStream = tokio_stream::Iter<std::vec::IntoIter<Result<pb::WarmProgress, Status>>>;
    type AuditStream = tokio_stream::Iter<std::vec::IntoIter<Result<pb::AuditResult, Status>>>;

    async fn compile(&self, request: Request<pb::CompileRequest>) -> Result<Response<Events>, Status> {
        let request = request.into_inner();
        self.log.lock().expect("log").push(("compile", request.clone()));
        Ok(Response::new(events(&request, false)?))
    }

    async fn submit(&self, request: Request<pb::CompileRequest>) -> Result<Response<pb::SubmitResponse>, Status> {
        let request = request.into_inner();
        validate(&request)?;
        self.log.lock().expect("log").push(("submit", request));
        Ok(Response::new(pb::SubmitResponse { job_id: JOB_ID.into() }))
    }

    async fn watch(&self, request: Request<pb::WatchRequest>) -> Result<Response<Events>, Status> {
        let job_id = request.into_inner().job_id;
        let submitted =
            self.log.lock().expect("log").iter().rev().find(|(rpc, _)| *rpc == "submit").map(|(_, r)| r.clone());
        match submitted {
            Some(request) if job_id == JOB_ID => Ok(Response::new(events(&request, false)?)),
            _ => Err(Status::not_found(format!("job `{job_id}` not found"))),
        }
    }

    async fn lookup(&self, request: Request<pb::CompileRequest>) -> Result<Response<Events>, Status> {
        let request = request.into_inner();
        self.log.lock().expect("log").push(("lookup", request.clone()));
        Ok(Response::new(events(&request, true)?))
    }

    /// Warm is exercised against the real daemon and kiln-cache in tests/tests/fleet.rs.
    async fn warm(&self, _: Request<pb::WarmRequest>) -> Result<Response<Self::WarmStream>, Status> {
        Err(Status::unimplemented("the mock daemon does not warm"))
    }

    async fn explain(&self, _: Request<pb::ExplainRequest>) -> Result<Response<pb::ExplainResponse>, Status> {
        Err(Status::unimplemented("the mock daemon does not explain"))
    }

    /// The audit is exercised against the real daemons in tests/tests/audit.rs.
    async fn audit(&self, _: Request<pb::AuditRequest>) -> Result<Response<Self::AuditStream>, Status> {
        Err(Status::unimplemented("the mock daemon does not audit"))
    }

    async fn list_quarantine(
        &self,
        _: Request<pb::QuarantineListRequest>,
    ) -> Result<Response<pb::QuarantineListResponse>, Status> {
        Err(Status::unimplemented("the mock daemon has no fleet"))
    }

    async fn stats(&self, _: Request<pb::StatsRequest>) -> Result<Response<pb::StatsResponse>, Status> {
        Ok(Response::new(pb::StatsResponse {
            version: "0.0.0-mock".into(),
            toolchains: vec![pb::ToolchainInfo {
                name: "nvrtc".into(),
                version: "13.0".into(),
                fingerprint: "f0".repeat(32),
                supported_targets: vec!["sm_90".into()],
                ..Default::default()
            }],
            default_target: "sm_90".into(),
            concurrency: 2,
            ..Default::default()
        }))
    }
}
