//! The daemon's entry point as a library: [`build`] makes its state from the configuration (and
//! fails before any socket exists when it cannot, such as with no CUDA toolkit), and [`serve`]
//! takes bound listeners and a shutdown future, so a test can bind anything and stop the daemon
//! whenever it likes.

use crate::config::{Config, read_token};
use crate::core::audit::{self, Auditor};
use crate::core::cache::{Cache, Producer};
use crate::core::engine::{self, Engine};
use crate::core::explain::store::RecipeStore;
use crate::core::fleet::tier::RemoteTier;
use crate::core::fleet::{self, Fleet};
use crate::core::store::{Store, disk::DiskTier, memory::MemoryTier, tiered::TieredStore};
use crate::core::torch::engine::GraphEngine;
use crate::core::torch::forward::Forwarder;
use crate::core::torch::ledger::Ledger;
use crate::core::work::Work;
use crate::listen::TcpSecurity;
use crate::metrics::Metrics;
use crate::rpc::blob::service::{BlobService, BlobState};
use crate::rpc::compiler::CompilerService;
use crate::rpc::graph::service::GraphService;
use crate::rpc::jobs::Jobs;
use crate::rpc::snapshot::service::{SnapshotService, SnapshotState};
use crate::rpc::snapshot::{host, store::SnapshotStore};
use crate::rpc::state::State;
use crate::runtime::gpu::{self, load_check::LoadCheck};
use crate::runtime::toolchain::torch;
use crate::runtime::toolchain::{Compiler, cuda, fix, nvrtc::Nvrtc, ptxas::Ptxas, set::Toolchains, triton};
use anyhow::Context;
use kiln_cache_client::RemoteCache;
use kiln_proto::Target;
use kiln_proto::pb::blobs_server::BlobsServer;
use kiln_proto::pb::compiler_server::CompilerServer;
use kiln_proto::pb::snapshots_server::SnapshotsServer;
use kiln_proto::pb::torch_graphs_server::TorchGraphsServer;
use kiln_serve::auth::TokenLayer;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, UnixListener};
use tokio_util::sync::CancellationToken;

/// The tasks that serve kilnd: its listeners, and with a fleet cache its probe and host report.
type ServerTasks = tokio::task::JoinSet<anyhow::Result<()>>;

/// Waits for the stop, or for the first server task to end before it. Every task runs until the
/// stop; one that ends sooner (a listener that failed, a task that panicked) leaves kilnd
/// unreachable or blind, so the answer is why, and kilnd stops and exits non-zero for its
/// supervisor. `None` when the stop came first: a task that ends because the stop began is not a
/// failure.
async fn first_to_end(stop: &CancellationToken, servers: &mut ServerTasks) -> Option<String> {
    tokio::select! {
        biased;
        _ = stop.cancelled() => None,
        Some(done) = servers.join_next() => (!stop.is_cancelled()).then(|| match done {
            Ok(Ok(())) => "it ended".to_string(),
            Ok(Err(e)) => format!("{e:#}"),
            Err(e) => e.to_string(),
        }),
    }
}

/// Sockets bound by the caller before the daemon starts.
#[derive(Debug)]
pub struct Listeners {
    pub unix: UnixListener,
    /// `--listen`, with the tokens and TLS [`crate::listen::prepare`] read for it.
    pub tcp: Option<(TcpListener, TcpSecurity)>,
    pub metrics: Option<TcpListener>,
}

/// The daemon's state, as [`build`] makes it.
#[derive(Debug)]
pub struct Built {
    state: Arc<State>,
    /// The fleet cache tier, whose health probe [`serve`] keeps going; the fleet's own (set
    /// exactly when the cache has a fleet), so the tasks that call kiln-cache beside the fleet
    /// (status reports, the quarantine poll, torch-job forwarding) take it from here.
    remote: Option<Arc<RemoteTier>>,
}

/// Finds and starts the toolchains: NVRTC (required), ptxas (when present), Triton (lazily).
async fn toolchains(config: &Config) -> anyhow::Result<Toolchains> {
    let cuda_home = std::env::var_os("CUDA_HOME").map(std::path::PathBuf::from);
    let install = cuda::discover(config.cuda_root.as_deref(), cuda_home.as_deref())?;
    let exe = std::env::current_exe().context("finding kilnd's own executable for its workers")?;
    let (root, ptxas_path) = (install.root.clone(), install.ptxas.clone());
    let nvrtc = Nvrtc::start(install, &exe, config.limits.worker_memory_mb, config.concurrency).await?;
    tracing::info!(version = %nvrtc.version, fingerprint = %nvrtc.fingerprint, "NVRTC ready");
    let ptxas = match ptxas_path {
        Some(path) => Ptxas::probe(&path, config.limits.worker_memory_mb).await.map_err(|e| e.to_string()),
        None => Err(format!("no bin/ptxas under {}; fix: {}", root.display(), fix::ptxas(&root))),
    };
    match &ptxas {
        Ok(p) => tracing::info!(version = %p.version, fingerprint = %p.fingerprint, "ptxas ready"),
        Err(why) => tracing::warn!(%why, "ptxas unavailable: PTX kernels will be refused"),
    }
    let triton_settings = triton::Settings {
        python: config.python.clone(),
        max_workers: config.triton_workers,
        memory_mb: config.limits.worker_memory_mb,
    };
    Ok(Toolchains::new(nvrtc, ptxas, triton_settings))
}

/// After the running work has drained, how long in-flight responses get to reach their clients.
const RESPONSE_FLUSH: Duration = Duration::from_secs(1);

/// How long a blob lease waits on another process of this host when there is no fleet cache
/// (with one, the fleet's hedge bound applies).
const BLOB_WAIT_WITHOUT_FLEET: Duration = Duration::from_secs(600);

/// Builds the daemon's state: toolchains, GPUs, tiers, fleet, cache, engine.
pub async fn build(config: &Config) -> anyhow::Result<Built> {
    let toolchains = toolchains(config).await?;
    let gpus = tokio::task::spawn_blocking(gpu::probe).await.context("probing GPUs")?;
    let default_target = match &config.target {
        Some(t) => Some(t.parse::<Target>().with_context(|| "--target")?),
        None => gpus.default_target(),
    };
    tracing::info!(gpus = gpus.gpus.len(), note = %gpus.note, target = ?default_target.map(|t| t.to_string()), "GPU probe");
    for gpu in &gpus.gpus {
        tracing::info!(index = gpu.index, name = %gpu.name, capability = %gpu.target, "GPU");
    }
    let mut metrics = Metrics::new();
    if config.remote.is_some() {
        metrics.enable_remote_up();
    }
    let metrics = Arc::new(metrics);
    let disk = DiskTier::open(&config.cache_dir, config.disk_cache_bytes)
        .with_context(|| format!("opening the cache directory {}", config.cache_dir.display()))?;
    // `memory_cache_mb = 0` leaves the memory tier out rather than keeping an empty one that
    // every hit would fill and evict again.
    let mut tiers: Vec<Arc<dyn Store>> = Vec::new();
    if config.memory_cache_bytes > 0 {
        tiers.push(Arc::new(MemoryTier::new(config.memory_cache_bytes, config.limits.max_artifact_bytes)));
    }
    tiers.push(Arc::new(disk));
    let (remote, fleet) = match &config.remote {
        None => (None, None),
        Some(r) => {
            let token = read_token(&r.token).context("--remote-token")?;
            let host = crate::runtime::host::wire_name(&crate::runtime::host::name());
            let client = RemoteCache::connect(&r.uri, &token).context("--remote")?.with_host(&host);
            let tier = RemoteTier::new(client, &r.uri, Arc::clone(&metrics));
            let settings = fleet::Settings {
                lease_ttl: r.lease_ttl,
                hedge: r.hedge,
                leases: r.leases,
                negative_ttl: config.limits.negative_ttl,
                max_artifact_bytes: config.limits.max_artifact_bytes,
            };
            let mut auditor =
                Auditor::new(r.audit, Arc::clone(&metrics)).with_trusted_writers(r.trusted_writers.clone());
            if let Some(warning) = auditor.vet_warning(token.is_empty()) {
                tracing::warn!("{warning}");
                auditor = auditor.in_anonymous_fleet();
            }
            let auditor = Arc::new(auditor);
            let fleet = Fleet::new(settings, Arc::clone(&tier), auditor, Arc::clone(&metrics));
            tracing::info!(uri = %r.uri, leases = r.leases, audit = ?r.audit, "fleet cache configured");
            (Some(tier), Some(fleet))
        }
    };
    let store = TieredStore::new(tiers, Arc::clone(&metrics), config.limits.max_artifact_bytes);
    let load_check = if !config.validate_cubins {
        Err("not validated: validate_cubins = false".to_string())
    } else if gpus.gpus.is_empty() {
        Err(format!("not validated: {}", gpus.note))
    } else {
        Ok(LoadCheck::start(gpus.gpus.clone()))
    };
    let work = Work::default();
    let cache = Arc::new(Cache::new(store, fleet, Arc::clone(&metrics), work.clone(), config.limits.negative_ttl));
    let toolchains = Arc::new(toolchains);
    let recipes = RecipeStore::open(&config.cache_dir)
        .with_context(|| format!("opening the recipe store in {}", config.cache_dir.display()))?;
    let parts = engine::Parts {
        recipes,
        metrics: Arc::clone(&metrics),
        concurrency: config.concurrency,
        limits: config.limits.clone(),
        work: work.clone(),
    };
    let compiler: Arc<dyn Compiler> = toolchains.clone();
    let engine = Engine::new(compiler, Arc::clone(&cache), parts).with_load_check(load_check);
    let state = State {
        engine: Arc::new(engine),
        cache,
        toolchains,
        jobs: Jobs::default(),
        gpus,
        default_target,
        config: config.clone(),
        torch_graphs: Arc::new(Ledger::new(Arc::clone(&metrics), &crate::runtime::host::name())),
        metrics,
        work,
    };
    Ok(Built { state: Arc::new(state), remote })
}

/// Serves what [`build`] made until `shutdown` resolves, then stops accepting, drains running
/// work within the configured bound and returns. The caller binds the listeners after `build`
/// succeeded, so a start-up that fails (no CUDA toolkit, say) never leaves a socket behind.
pub async fn serve(
    built: Built,
    listeners: Listeners,
    config: Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let Built { state, remote } = built;
    let metrics = Arc::clone(&state.metrics);
    let stop = CancellationToken::new();
    let trigger = stop.clone();
    let stop_watch = tokio::spawn(async move {
        shutdown.await;
        trigger.cancel();
    });
    let mut servers = ServerTasks::new();
    if let Some(tier) = &remote {
        let (probed, stopped) = (Arc::clone(tier), stop.clone());
        let reporter = crate::rpc::status::report::run(
            Arc::clone(tier),
            Arc::clone(&state),
            crate::rpc::status::report::Reporter::new(&crate::runtime::host::name(), &config.socket),
            stop.clone(),
        );
        servers.spawn(async move {
            reporter.await;
            Ok(())
        });
        servers.spawn(async move {
            probed.probe(stopped).await;
            Ok(())
        });
        if let (Some(auditor), Some(remote)) = (state.cache.auditor(), config.remote.as_ref()) {
            let (audited, audits, stopped) = (Arc::clone(&state.engine), Arc::clone(&auditor), stop.clone());
            servers.spawn(async move {
                audit::run(audited, audits, stopped).await;
                Ok(())
            });
            let cache = Arc::clone(&state.cache);
            let (polled, stopped, every) = (Arc::clone(tier), stop.clone(), remote.quarantine_poll);
            servers.spawn(async move {
                let forget = |key| {
                    let cache = Arc::clone(&cache);
                    async move { cache.forget(&key).await }
                };
                audit::quarantine::poll(polled, auditor, every, stopped, forget).await;
                Ok(())
            });
        }
    }
    let limit = config.limits.max_message_bytes;
    let (health_reporter, health) = tonic_health::server::health_reporter();
    health_reporter.set_serving::<CompilerServer<CompilerService>>().await;
    let reflection = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(kiln_proto::pb::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1()
        .context("building gRPC reflection")?;
    health_reporter.set_serving::<BlobsServer<BlobService>>().await;
    let default_wait = config.remote.as_ref().map_or(BLOB_WAIT_WITHOUT_FLEET, |r| r.hedge);
    let producer = Arc::new(Producer::new(Arc::clone(&state.cache), default_wait));
    let blobs = BlobState {
        producer: Arc::clone(&producer),
        metrics: Arc::clone(&metrics),
        max_artifact_bytes: config.limits.max_artifact_bytes,
        max_message_bytes: limit as u64,
    };
    let blobs = Arc::new(blobs);
    health_reporter.set_serving::<TorchGraphsServer<GraphService>>().await;
    let mut graphs = GraphEngine::new(
        producer,
        Arc::clone(&state.torch_graphs),
        torch::Settings { python: config.python.clone(), max_workers: config.torch_workers },
        state.gpus.gpus.iter().map(|g| format!("{} {};", g.name, g.target)).collect(),
        &config.limits,
    );
    graphs.claims_allowed = config.torch_claims;
    if let Some(tier) = &remote {
        let forward = Arc::new(Forwarder::new(Arc::clone(tier)));
        let (sender, stopped) = (Arc::clone(&forward), stop.clone());
        servers.spawn(async move {
            sender.run(stopped).await;
            Ok(())
        });
        graphs.forward = Some(forward);
    }
    let graphs = Arc::new(graphs);
    if config.torch_prestart {
        graphs.warm();
    }
    health_reporter.set_serving::<SnapshotsServer<SnapshotService>>().await;
    let snapshots = SnapshotState {
        store: SnapshotStore { cache: Arc::clone(&state.cache) },
        metrics: Arc::clone(&metrics),
        host: host::environment(&state.gpus, state.default_target, &state.toolchains.nvrtc.version),
        max_file_bytes: config.limits.max_artifact_bytes,
        max_snapshot_bytes: config.limits.max_snapshot_bytes,
        host_name: crate::runtime::host::name(),
        saving: tokio::sync::Mutex::new(()),
        work: state.work.clone(),
    };
    tracing::info!(environment = ?snapshots.host, "snapshot keys include this host's facts");
    let routes = tonic::service::Routes::new(health)
        .add_service(reflection)
        .add_service(
            CompilerServer::new(CompilerService(Arc::clone(&state)))
                .max_decoding_message_size(limit)
                .max_encoding_message_size(limit),
        )
        .add_service(
            BlobsServer::new(BlobService(blobs)).max_decoding_message_size(limit).max_encoding_message_size(limit),
        )
        .add_service(
            TorchGraphsServer::new(GraphService(graphs))
                .max_decoding_message_size(limit)
                .max_encoding_message_size(limit),
        )
        .add_service(
            SnapshotsServer::new(SnapshotService(Arc::new(snapshots)))
                .max_decoding_message_size(limit)
                .max_encoding_message_size(limit),
        );
    // Any client's `:authority` is taken on the socket (grpcio sends the socket path): see
    // kiln_proto::unix.
    let unix = kiln_serve::unix::Incoming(listeners.unix);
    let stopped = stop.clone().cancelled_owned();
    let unix_router = tonic::transport::Server::builder().add_routes(routes.clone());
    servers.spawn(
        async move { unix_router.serve_with_incoming_shutdown(unix, stopped).await.map_err(anyhow::Error::from) },
    );
    if let Some((tcp, security)) = listeners.tcp {
        let mut builder = tonic::transport::Server::builder();
        if let Some(tls) = security.tls {
            builder = builder.tls_config(tls).context("TLS for --listen")?;
        }
        // The token check runs before routing; without tokens (loopback only) there is none.
        let router = builder
            .layer(tower::util::option_layer(security.tokens.map(|t| TokenLayer::new(t, crate::auth::needs))))
            .add_routes(routes);
        // TCP_NODELAY: replies are small frames, and Nagle's algorithm against delayed ACKs
        // turns a 2 ms answer into 40 ms.
        let incoming = tonic::transport::server::TcpIncoming::from(tcp).with_nodelay(Some(true));
        let stopped = stop.clone().cancelled_owned();
        servers.spawn(async move {
            router.serve_with_incoming_shutdown(incoming, stopped).await.map_err(anyhow::Error::from)
        });
    }
    if let Some(listener) = listeners.metrics {
        let stopped = stop.clone().cancelled_owned();
        let render = {
            let metrics = Arc::clone(&metrics);
            move || metrics.render()
        };
        let pages = crate::rpc::status::routes(Arc::clone(&state));
        servers.spawn(async move {
            kiln_serve::serve_metrics(listener, render, pages, stopped).await.map_err(anyhow::Error::from)
        });
    }
    tracing::info!(socket = %config.socket.display(), "kilnd serving");
    if config.triton_prestart {
        // After the listeners are up, so requests are served meanwhile; the first Triton request
        // joins this start instead of beginning its own. Not a tracked task: shutdown need not
        // wait for a start nobody asked for yet.
        let toolchains = Arc::clone(&state.toolchains);
        tokio::spawn(async move {
            match toolchains.triton().await {
                Ok(t) => tracing::info!(version = %t.info().version, "Triton started ahead of its first request"),
                Err(why) => tracing::warn!(%why, "Triton could not be started ahead of its first request"),
            }
        });
    }
    let died = first_to_end(&stop, &mut servers).await;
    if let Some(why) = &died {
        tracing::error!(%why, "a server task stopped; shutting down");
        stop.cancel();
    }
    tracing::info!("shutting down: no new requests; draining running work");
    health_reporter.set_not_serving::<CompilerServer<CompilerService>>().await;
    health_reporter.set_not_serving::<BlobsServer<BlobService>>().await;
    health_reporter.set_not_serving::<SnapshotsServer<SnapshotService>>().await;
    health_reporter.set_not_serving::<TorchGraphsServer<GraphService>>().await;
    // Running compiles finish first (their results reach the caches and their clients); then
    // the servers get a moment to flush the last responses. They are not waited on beyond
    // that: a graceful HTTP/2 shutdown lasts until every peer hangs up, and an idle client that
    // keeps its channel open (every Triton job does) would hold kilnd up to the drain bound.
    let drained = state.work.drain(config.limits.drain).await;
    if let Err(unfinished) = &drained {
        tracing::warn!(bound = ?config.limits.drain, ?unfinished, "drain bound passed; exiting with this work unfinished");
    }
    let flush = async {
        while let Some(done) = servers.join_next().await {
            if let Ok(Err(e)) = done {
                tracing::warn!(error = %e, "server ended with an error");
            }
        }
    };
    let _ = tokio::time::timeout(RESPONSE_FLUSH, flush).await;
    servers.abort_all();
    if drained.is_ok() {
        tracing::info!("drained; exiting");
    }
    stop_watch.abort();
    match died {
        Some(why) => anyhow::bail!("a server task stopped before shutdown: {why}"),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pending_task(servers: &mut ServerTasks) {
        servers.spawn(async {
            std::future::pending::<()>().await;
            Ok(())
        });
    }

    #[tokio::test]
    async fn a_server_task_that_fails_or_panics_before_the_stop_is_reported() {
        let stop = CancellationToken::new();
        let mut servers = ServerTasks::new();
        pending_task(&mut servers);
        servers.spawn(async { Err(anyhow::anyhow!("accept failed: too many open files")) });
        let why = first_to_end(&stop, &mut servers).await;
        assert_eq!(why.as_deref(), Some("accept failed: too many open files"));

        let mut servers = ServerTasks::new();
        pending_task(&mut servers);
        servers.spawn(async { panic!("listener task bug") });
        let why = first_to_end(&stop, &mut servers).await.unwrap_or_default();
        assert!(why.contains("panic"), "{why}");

        let mut servers = ServerTasks::new();
        servers.spawn(async { Ok(()) });
        assert_eq!(first_to_end(&stop, &mut servers).await.as_deref(), Some("it ended"));
    }

    #[tokio::test]
    async fn tasks_that_end_with_the_stop_are_not_failures() {
        let stop = CancellationToken::new();
        let mut servers = ServerTasks::new();
        pending_task(&mut servers);
        let stopped = stop.clone();
        servers.spawn(async move {
            stopped.cancelled().await;
            Ok(())
        });
        stop.cancel();
        assert_eq!(first_to_end(&stop, &mut servers).await, None);
    }
}
