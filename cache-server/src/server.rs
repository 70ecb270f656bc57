//! kiln-cache's entry point as a library: [`run`] takes bound listeners, the configuration and a
//! shutdown future, so a test can bind port 0 and stop the server whenever it likes.
//!
//! The server keeps no state of its own beyond connections: everything lives in Redis, so any
//! number of replicas can serve behind one address.

use crate::announce::{self, Announcements};
use crate::auth::{TokenError, Tokens};
use crate::backend::{Redis, Timeouts};
use crate::config::Config;
use crate::hot::HotValues;
use crate::metrics::Metrics;
use crate::service::CacheService;
use crate::store::Store;
use crate::trust::Trust;
use kiln_proto::pb::artifact_cache_server::ArtifactCacheServer;
use kiln_serve::auth::TokenLayer;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Identity, Server, ServerTlsConfig};

/// How often Redis is pinged while idle, so `kiln_server_redis_up` tells the truth without
/// traffic and the connection comes back soon after Redis does.
const PROBE_EVERY: Duration = Duration::from_secs(2);

/// Sockets bound by the caller before the server starts.
#[derive(Debug)]
pub struct Listeners {
    pub grpc: TcpListener,
    pub metrics: Option<TcpListener>,
}

/// Why the server could not start or stopped on its own.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("tokens: {0}")]
    Tokens(#[from] TokenError),
    #[error("redis configuration: {0}")]
    Redis(#[from] redis::RedisError),
    #[error("reading {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("TLS: {0}")]
    Tls(tonic::transport::Error),
    #[error("gRPC server: {0}")]
    Serve(tonic::transport::Error),
    #[error("the gRPC listener: {0}")]
    Listener(std::io::Error),
    #[error("metrics server: {0}")]
    Metrics(std::io::Error),
    #[error("a server task panicked: {0}")]
    Panicked(String),
}

/// Serves until `shutdown` resolves, then stops accepting, lets in-flight requests finish within
/// `config.drain`, ends watch streams, and returns.
pub async fn run(
    listeners: Listeners,
    config: Config,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), ServerError> {
    // `--insecure-no-auth` only allows running with no tokens; configured tokens still apply.
    let tokens = if config.tokens.is_empty() && config.insecure_no_auth {
        tracing::warn!("serving WITHOUT authentication (--insecure-no-auth): anyone who can reach the port can write");
        Tokens::insecure()
    } else {
        Tokens::new(&config.tokens)?
    };
    let timeouts = Timeouts { connect: config.redis_connect_timeout, response: config.redis_timeout };
    let connected = Redis::connect(&config.redis, config.redis_cluster, timeouts)?;
    let redis = connected.commands;
    let store = Store::new(redis.clone(), config.ttl, config.limits.max_artifact_bytes)
        .with_hot(HotValues::new(config.hot_values_bytes, config.hot_values_ttl));
    let metrics = Arc::new(Metrics::new());
    let announcements = Arc::new(Announcements::new());
    let stop = CancellationToken::new();
    let background = TaskTracker::new();
    background.spawn(announce::supervise(
        connected.subscribe_via,
        Arc::clone(&announcements),
        Arc::clone(&metrics),
        config.redis_connect_timeout,
        stop.clone(),
    ));
    // gRPC health follows the probe: `kiln.v1.ArtifactCache` is SERVING while Redis answers, so an
    // orchestrator's readiness check takes a replica whose Redis is gone out of rotation.
    let (health_reporter, health) = tonic_health::server::health_reporter();
    health_reporter.set_not_serving::<ArtifactCacheServer<CacheService>>().await;
    background.spawn(probe(store.clone(), Arc::clone(&metrics), health_reporter, stop.clone()));
    background.spawn(redis.clone().watch_topology(stop.clone()));
    background.spawn(crate::status::run_flusher(redis.clone(), Arc::clone(&metrics), stop.clone()));
    background.spawn(crate::status::run_job_exporter(redis.clone(), Arc::clone(&metrics), stop.clone()));
    let trust = Arc::new(Trust::new(config.vet, config.trusted_writers.clone()));
    let vet_warning = trust.warning(config.tokens.is_empty());
    if let Some(warning) = &vet_warning {
        tracing::warn!("{warning}");
    }
    background.spawn(crate::trust::refresh(Arc::clone(&trust), store.clone(), stop.clone()));
    let status = Arc::new(crate::status::FleetPage::new(redis).with_vetting(trust.policy(), vet_warning));
    let mode = store.mode();
    let service = Arc::new(CacheService {
        store,
        announcements,
        metrics: Arc::clone(&metrics),
        limits: config.limits.clone(),
        stop: stop.clone(),
        status: Arc::clone(&status),
        trust,
    });

    let limit = config.limits.max_message_bytes;
    // HTTP/2 keepalive: a watch stream's client that vanished without a FIN is noticed and its
    // stream dropped, instead of being held until the next publish.
    let mut builder = Server::builder()
        .http2_keepalive_interval(Some(Duration::from_secs(30)))
        .http2_keepalive_timeout(Some(Duration::from_secs(10)));
    if let Some((cert, key)) = &config.tls {
        let identity = Identity::from_pem(read(cert)?, read(key)?);
        builder = builder.tls_config(ServerTlsConfig::new().identity(identity)).map_err(ServerError::Tls)?;
    }
    // Every call's token is checked before routing, with the policy of `service::needs`; a
    // refusal is counted as the service counts its answers.
    let refusals = Arc::clone(&metrics);
    let layer = TokenLayer::new(Arc::new(tokens), crate::service::needs)
        .on_refused(move |path, code| crate::service::refused(&refusals, path, code));
    let router = builder.layer(layer).add_service(health).add_service(
        ArtifactCacheServer::from_arc(service).max_decoding_message_size(limit).max_encoding_message_size(limit),
    );
    let listen = listeners.grpc.local_addr().map_err(ServerError::Listener)?;
    let mut servers = tokio::task::JoinSet::new();
    // TCP_NODELAY: answers are small frames, and Nagle against delayed ACKs adds 40 ms.
    let incoming = TcpIncoming::from(listeners.grpc).with_nodelay(Some(true));
    let stopped = stop.clone().cancelled_owned();
    servers
        .spawn(async move { router.serve_with_incoming_shutdown(incoming, stopped).await.map_err(ServerError::Serve) });
    if let Some(listener) = listeners.metrics {
        let stopped = stop.clone().cancelled_owned();
        let render = {
            let metrics = Arc::clone(&metrics);
            move || metrics.render()
        };
        let pages = status.routes();
        servers.spawn(async move {
            kiln_serve::serve_metrics(listener, render, pages, stopped).await.map_err(ServerError::Metrics)
        });
    }
    // URLs may hold passwords: log how many, not what.
    tracing::info!(%listen, redis_nodes = config.redis.len(), mode, tls = config.tls.is_some(), "kiln-cache serving");

    tokio::pin!(shutdown);
    let outcome = tokio::select! {
        _ = &mut shutdown => Ok(()),
        Some(ended) = servers.join_next() => flatten(ended),
    };
    tracing::info!("shutting down: no new requests; finishing those in flight");
    stop.cancel();
    background.close();
    let drain = async {
        while let Some(ended) = servers.join_next().await {
            if let Err(e) = flatten(ended) {
                tracing::warn!(error = %e, "server ended with an error");
            }
        }
        background.wait().await;
    };
    if tokio::time::timeout(config.drain, drain).await.is_err() {
        tracing::warn!(bound = ?config.drain, "drain bound passed; exiting with requests unfinished");
        servers.abort_all();
    }
    outcome
}

fn flatten(ended: Result<Result<(), ServerError>, tokio::task::JoinError>) -> Result<(), ServerError> {
    ended.map_err(|e| ServerError::Panicked(e.to_string()))?
}

fn read(path: &Path) -> Result<Vec<u8>, ServerError> {
    std::fs::read(path).map_err(|source| ServerError::Read { path: path.to_owned(), source })
}

/// Pings Redis every [`PROBE_EVERY`] and records the answer in `kiln_server_redis_up` and in the
/// gRPC health of `kiln.v1.ArtifactCache`.
async fn probe(
    store: Store,
    metrics: Arc<Metrics>,
    health: tonic_health::server::HealthReporter,
    stop: CancellationToken,
) {
    let mut tick = tokio::time::interval(PROBE_EVERY);
    let mut was_up = None;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        let up = tokio::select! {
            _ = stop.cancelled() => return,
            r = store.ping() => r.is_ok(),
        };
        metrics.redis_up.set(i64::from(up));
        if was_up != Some(up) {
            if up {
                health.set_serving::<ArtifactCacheServer<CacheService>>().await;
                tracing::info!("Redis is up");
            } else {
                health.set_not_serving::<ArtifactCacheServer<CacheService>>().await;
                tracing::warn!("Redis does not answer; requests get UNAVAILABLE until it does");
            }
            was_up = Some(up);
        }
    }
}
