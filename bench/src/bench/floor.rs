//! The gRPC floor of figures (c) and (g): bare tonic servers that answer every request with bytes
//! captured from kilnd or kiln-cache, doing nothing else (no validation, keys, caches, auth,
//! Redis or metrics). Driven by the same clients and load loop as kiln, they show how much of
//! the gap to Redis is the price of gRPC over HTTP/2 itself, and how much is kiln's own work.
//!
//! Each server runs on a runtime of its own (2 worker threads, as a separate daemon would have),
//! not on the load generator's.

use anyhow::{Context, Result};
use kiln_proto::pb::{self, artifact_cache_server as cache, compiler_server as compiler};
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use tokio_stream::Stream;
use tonic::{Request, Response, Status};

type Events = Pin<Box<dyn Stream<Item = Result<pb::JobEvent, Status>> + Send>>;

/// A server on its own runtime, stopped when dropped.
#[derive(Debug)]
pub struct Floor {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Floor {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Serves `router` on `incoming` in a thread of its own until the [`Floor`] is dropped.
fn spawn<I, IO, IE>(
    router: tonic::transport::server::Router,
    incoming: impl FnOnce() -> Result<I> + Send + 'static,
) -> Result<Floor>
where
    I: Stream<Item = Result<IO, IE>> + Send + 'static,
    IO: tonic::transport::server::Connected + tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    IE: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let (ready, started) = std::sync::mpsc::channel::<Result<()>>();
    let thread = std::thread::spawn(move || {
        let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
            Ok(runtime) => runtime,
            Err(e) => {
                let _ = ready.send(Err(e.into()));
                return;
            }
        };
        runtime.block_on(async move {
            let incoming = match incoming() {
                Ok(incoming) => incoming,
                Err(e) => {
                    let _ = ready.send(Err(e));
                    return;
                }
            };
            let _ = ready.send(Ok(()));
            let _ = router.serve_with_incoming_shutdown(incoming, async { drop(stopped.await) }).await;
        });
    });
    started.recv().context("the floor server's thread ended")??;
    Ok(Floor { stop: Some(stop), thread: Some(thread) })
}

/// A `Compiler` on the Unix socket `path` that answers every `Lookup` with what kilnd answered
/// for `job` (its results in one `kernels` batch, then its `done`) and every `Compile` with what
/// kilnd sends for a graph its caches answer wholly (`queued` and `started` before those two);
/// returns its `unix://` URI.
pub fn compiler(path: &Path, job: kiln_client::CompletedJob) -> Result<(Floor, String)> {
    let event = |event| pb::JobEvent { job_id: job.job_id.clone(), event: Some(event) };
    let target = job.kernels.first().map(|k| k.target.clone()).unwrap_or_default();
    let kernels = job.kernels.len() as u32;
    let lookup = vec![
        event(pb::job_event::Event::Kernels(pb::KernelResults { results: job.kernels.clone() })),
        event(pb::job_event::Event::Done(job.done.clone())),
    ];
    let compile = [
        vec![
            event(pb::job_event::Event::Queued(pb::Queued { kernels, target })),
            event(pb::job_event::Event::Started(pb::Started {})),
        ],
        lookup.clone(),
    ]
    .concat();
    let service =
        compiler::CompilerServer::new(CannedCompiler { compile: Arc::new(compile), lookup: Arc::new(lookup) })
            .max_decoding_message_size(kiln_proto::MAX_MESSAGE_BYTES)
            .max_encoding_message_size(kiln_proto::MAX_MESSAGE_BYTES);
    let router = tonic::transport::Server::builder().add_service(service);
    let uri = format!("unix://{}", path.display());
    let path = path.to_path_buf();
    let floor = spawn(router, move || {
        let listener = tokio::net::UnixListener::bind(&path).with_context(|| format!("binding {}", path.display()))?;
        Ok(tokio_stream::wrappers::UnixListenerStream::new(listener))
    })?;
    Ok((floor, uri))
}

/// An `ArtifactCache` that answers every `Get` with `answer`, on a loopback TCP port; returns its
/// `http://` URI.
pub fn cache(answer: pb::CacheGetResponse) -> Result<(Floor, String)> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").context("binding a loopback port")?;
    let uri = format!("http://{}", listener.local_addr()?);
    listener.set_nonblocking(true)?;
    let service = cache::ArtifactCacheServer::new(CannedCache { answer })
        .max_decoding_message_size(kiln_proto::MAX_MESSAGE_BYTES)
        .max_encoding_message_size(kiln_proto::MAX_MESSAGE_BYTES);
    let router = tonic::transport::Server::builder().add_service(service);
    let floor = spawn(router, move || {
        let listener = tokio::net::TcpListener::from_std(listener)?;
        Ok(tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true)))
    })?;
    Ok((floor, uri))
}

#[derive(Debug)]
struct CannedCompiler {
    compile: Arc<Vec<pb::JobEvent>>,
    lookup: Arc<Vec<pb::JobEvent>>,
}

fn answer(events: &[pb::JobEvent]) -> Result<Response<Events>, Status> {
    let events: Vec<Result<pb::JobEvent, Status>> = events.iter().cloned().map(Ok).collect();
    Ok(Response::new(Box::pin(tokio_stream::iter(events))))
}

fn absent<T>() -> Result<Response<T>, Status> {
    Err(Status::unimplemented("not part of the floor"))
}

/// Writes `$server`'s impl of the tonic `$service` trait: the methods written out in full, then
/// the RPCs listed under `absent`, which answer [`absent`]. A floor server serves one or two
/// RPCs, and the trait still asks for all of them.
macro_rules! floor_service {
    (
        $server:ident: $service:path { $($served:tt)* }
        absent { $($rpc:ident($request:ty) -> $response:ty;)* }
    ) => {
        #[tonic::async_trait]
        impl $service for $server {
            $($served)*
            $(
                async fn $rpc(&self, _: Request<$request>) -> Result<Response<$response>, Status> {
                    absent()
                }
            )*
        }
    };
}

floor_service! {
    CannedCompiler: compiler::Compiler {
        type CompileStream = Events;
        type WatchStream = Events;
        type LookupStream = Events;
        type WarmStream = Pin<Box<dyn Stream<Item = Result<pb::WarmProgress, Status>> + Send>>;
        type AuditStream = Pin<Box<dyn Stream<Item = Result<pb::AuditResult, Status>> + Send>>;

        async fn compile(&self, _: Request<pb::CompileRequest>) -> Result<Response<Events>, Status> {
            answer(&self.compile)
        }
        async fn lookup(&self, _: Request<pb::CompileRequest>) -> Result<Response<Events>, Status> {
            answer(&self.lookup)
        }
    }
    absent {
        submit(pb::CompileRequest) -> pb::SubmitResponse;
        watch(pb::WatchRequest) -> Events;
        stats(pb::StatsRequest) -> pb::StatsResponse;
        warm(pb::WarmRequest) -> Self::WarmStream;
        explain(pb::ExplainRequest) -> pb::ExplainResponse;
        audit(pb::AuditRequest) -> Self::AuditStream;
        list_quarantine(pb::QuarantineListRequest) -> pb::QuarantineListResponse;
    }
}

#[derive(Debug)]
struct CannedCache {
    answer: pb::CacheGetResponse,
}

type CacheStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

floor_service! {
    CannedCache: cache::ArtifactCache {
        type BatchGetStream = CacheStream<pb::CacheGetResponse>;
        type WatchPublishStream = CacheStream<pb::PublishEvent>;

        async fn get(&self, _: Request<pb::CacheGetRequest>) -> Result<Response<pb::CacheGetResponse>, Status> {
            Ok(Response::new(self.answer.clone()))
        }
    }
    absent {
        batch_get(pb::CacheBatchGetRequest) -> Self::BatchGetStream;
        put(pb::CachePutRequest) -> pb::CachePutResponse;
        contains(pb::CacheContainsRequest) -> pb::CacheContainsResponse;
        get_manifest(pb::ManifestGetRequest) -> pb::ManifestGetResponse;
        put_manifest(pb::ManifestPutRequest) -> pb::CachePutResponse;
        acquire_lease(pb::LeaseRequest) -> pb::LeaseResponse;
        renew_lease(pb::LeaseRequest) -> pb::LeaseResponse;
        release_lease(pb::LeaseRequest) -> pb::LeaseResponse;
        watch_publish(pb::WatchPublishRequest) -> Self::WatchPublishStream;
        cache_stats(pb::CacheStatsRequest) -> pb::CacheStatsResponse;
        report_host(pb::HostReport) -> pb::HostReportResponse;
        quarantine(pb::QuarantineRequest) -> pb::QuarantineResponse;
        list_quarantine(pb::QuarantineListRequest) -> pb::QuarantineListResponse;
        vouch(pb::VouchRequest) -> pb::VouchResponse;
        report_torch_job(pb::TorchJobReport) -> pb::TorchJobReturn;
        list_torch_jobs(pb::TorchJobsRequest) -> pb::TorchJobsReply;
    }
}
