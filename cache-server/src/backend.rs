//! The connection to Redis: one standalone server or a Redis Cluster, behind one enum.
//!
//! Both arms connect lazily, so kiln-cache starts and answers (UNAVAILABLE) while Redis is down,
//! and both reconnect: `ConnectionManager` by itself on the next command after an I/O error, the
//! cluster connection through [`ClusterHandle`]. Commands are multiplexed over one connection per
//! node, so concurrent requests pipeline on the wire without a pool.
//!
//! Publish notifications use separate, dedicated connections (see [`crate::announce`]): a
//! connection in subscribed mode can run no other command.

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::{ClusterClient, ClusterConfig};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{Cmd, ErrorKind, Pipeline, RedisError, RedisFuture, RedisResult, Value};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// The least time between two rebuilds of the cluster connection: during a failover every
/// request fails for a few seconds, and one rebuild a second is enough to pick up the new
/// topology as soon as the cluster has it.
const REBUILD_EVERY: Duration = Duration::from_secs(1);

/// How often [`Redis::watch_topology`] pings a cluster's primaries, and how long they get to
/// answer before the topology is read again.
const TOPOLOGY_EVERY: Duration = Duration::from_secs(1);

/// How long Redis may take. A hung Redis must turn into UNAVAILABLE, not a hung RPC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    pub connect: Duration,
    /// For one command or transaction; it bounds a 128 MiB put too, so not too tight.
    pub response: Duration,
}

/// A command connection to Redis. Cloning shares it.
#[derive(Clone)]
pub enum Redis {
    Standalone(ConnectionManager),
    Cluster(Arc<ClusterHandle>),
}

/// A cluster connection that is replaced after a transport failure.
///
/// The cluster client refreshes its slot map only when a node answers MOVED, ASK or READONLY.
/// A master that dies answers nothing: the client keeps reconnecting to its address, and every
/// command for its slots times out long after a replica has taken over (measured by
/// `kiln-reliability`'s failover scenario: kiln-cache never answered again). A fresh connection
/// asks the seed nodes for the topology, so after a transport failure the next command runs on
/// a new one, at most once per [`REBUILD_EVERY`].
///
/// A master cut off by a partition, not killed, refuses nothing: the first failure is a command
/// timing out, 10 s (`redis_timeout_ms`) after it was sent, and until then every command for the
/// master's slots goes to it and waits out its own timeout, even once the cluster has failed
/// over (measured by the partition scenario: commands kept going to the cut-off master for 5 s
/// after its replica was promoted, and hosts waited two timeouts in a row). So
/// [`Redis::watch_topology`] also pings the primaries every [`TOPOLOGY_EVERY`] and rebuilds when
/// one does not answer within it.
pub struct ClusterHandle {
    client: ClusterClient,
    config: ClusterConfig,
    current: Mutex<(ClusterConnection, Instant)>,
    /// How long a new connection may take to connect to the seed nodes (one unreachable seed
    /// costs the connect timeout) before [`Redis::watch_topology`] judges it.
    settle: Duration,
}

impl std::fmt::Debug for ClusterHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClusterHandle")
    }
}

impl ClusterHandle {
    fn new(client: ClusterClient, config: ClusterConfig, connect: Duration) -> Self {
        let connection = client.get_pending_async_connection_with_config(config.clone());
        let settle = connect + TOPOLOGY_EVERY;
        ClusterHandle { client, config, current: Mutex::new((connection, Instant::now())), settle }
    }

    /// The connection to run a command on (a clone shares it).
    fn connection(&self) -> ClusterConnection {
        self.current.lock().unwrap_or_else(PoisonError::into_inner).0.clone()
    }

    /// Called with every failed command: a transport failure (not a Redis error reply)
    /// replaces the connection.
    fn failed(&self, error: &RedisError) {
        if transport_failure(error) {
            self.rebuild(REBUILD_EVERY, error);
        }
    }

    /// Replaces the connection, so that the next command reads the topology from the seed
    /// nodes, unless it is younger than `age`.
    fn rebuild(&self, age: Duration, why: &dyn std::fmt::Display) {
        let mut current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        if current.1.elapsed() >= age {
            tracing::warn!(error = %why, "a Redis Cluster node failed: reconnecting to read the topology again");
            *current = (self.client.get_pending_async_connection_with_config(self.config.clone()), Instant::now());
        }
    }
}

/// Whether `error` says a node could not be reached or did not answer, rather than that Redis
/// answered with an error.
fn transport_failure(error: &RedisError) -> bool {
    error.is_io_error()
        || error.is_timeout()
        || error.is_connection_dropped()
        || error.is_connection_refusal()
        || matches!(error.kind(), ErrorKind::ClusterConnectionNotFound)
}

impl std::fmt::Debug for Redis {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Redis::Standalone(_) => "Redis::Standalone",
            Redis::Cluster(_) => "Redis::Cluster",
        })
    }
}

/// What `--redis` and `--redis-cluster` name.
#[derive(Debug)]
pub struct Connected {
    pub commands: Redis,
    /// One client per URL, for the pub/sub subscription: any node of a cluster receives every
    /// `PUBLISH`, so the subscriber uses the first that answers.
    pub subscribe_via: Vec<redis::Client>,
}

impl Redis {
    /// Sets up connections without waiting for Redis to answer.
    pub fn connect(urls: &[String], cluster: bool, timeouts: Timeouts) -> RedisResult<Connected> {
        let subscribe_via = urls.iter().map(|u| redis::Client::open(u.as_str())).collect::<RedisResult<Vec<_>>>()?;
        let commands = if cluster {
            let client = ClusterClient::builder(urls.iter().map(String::as_str))
                .connection_timeout(timeouts.connect)
                .response_timeout(timeouts.response)
                .retries(2)
                .build()?;
            let config =
                ClusterConfig::new().set_connection_timeout(timeouts.connect).set_response_timeout(timeouts.response);
            Redis::Cluster(Arc::new(ClusterHandle::new(client, config, timeouts.connect)))
        } else {
            let [url] = urls else {
                return Err(redis::RedisError::from((
                    redis::ErrorKind::InvalidClientConfig,
                    "standalone Redis takes exactly one --redis URL; several are seed nodes of \
                     a cluster (add --redis-cluster)",
                )));
            };
            // Few, quick retries: while Redis is down a request should fail fast with
            // UNAVAILABLE rather than sit in a long backoff; the next request tries again.
            let config = ConnectionManagerConfig::new()
                .set_number_of_retries(1)
                .set_min_delay(Duration::from_millis(50))
                .set_max_delay(Duration::from_millis(500))
                .set_connection_timeout(Some(timeouts.connect))
                .set_response_timeout(Some(timeouts.response));
            let client = redis::Client::open(url.as_str())?;
            Redis::Standalone(ConnectionManager::new_lazy_with_config(client, config)?)
        };
        Ok(Connected { commands, subscribe_via })
    }

    /// For a cluster, until `stop`: pings every primary each [`TOPOLOGY_EVERY`] and reads the
    /// topology again when one does not answer within it (see [`ClusterHandle`]), so commands
    /// follow a failover within a second or two of it instead of after a command timeout. The
    /// health probe's verdict is not changed: that stays the command timeout's. Returns at once
    /// for a standalone Redis.
    pub async fn watch_topology(self, stop: tokio_util::sync::CancellationToken) {
        let Redis::Cluster(handle) = self else { return };
        let mut every = kiln_serve::every::Every::new(TOPOLOGY_EVERY, stop);
        while every.tick().await {
            let (mut connection, ping) = (handle.connection(), redis::cmd("PING"));
            match tokio::time::timeout(TOPOLOGY_EVERY, ping.query_async::<Value>(&mut connection)).await {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => handle.failed(&e),
                // A connection still connecting (to an unreachable seed, say) is given its connect
                // timeout: rebuilt every second, it would never be done connecting.
                Err(_) => handle.rebuild(handle.settle, &"a primary did not answer PING within 1 s"),
            }
        }
    }

    /// `PUBLISH channel message`, in a cluster through the master of `key`'s slot. Every node
    /// of a cluster passes a `PUBLISH` on to all the others, so any node would do; routed by the
    /// channel's own slot (the client's default) every announcement of the fleet would depend on
    /// the one master that serves it, and that master cut off would fail every publish for as
    /// long as the partition lasts (measured by the partition scenario: waiters on every host
    /// waited out their leases). The master of the key just written was reachable a moment ago.
    pub async fn publish_via(&self, key: &str, channel: &str, message: &str) -> RedisResult<()> {
        let mut publish = redis::cmd("PUBLISH");
        publish.arg(channel).arg(message);
        match self {
            Redis::Standalone(c) => publish.query_async::<Value>(&mut c.clone()).await.map(drop),
            Redis::Cluster(handle) => {
                let route = Route::with_key(key, SlotAddr::Master);
                let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route));
                let result = handle.connection().route_command(publish, routing).await;
                if let Err(e) = &result {
                    handle.failed(e);
                }
                result.map(drop)
            }
        }
    }

    /// `standalone` or `cluster`, for `CacheStats`.
    pub fn mode(&self) -> &'static str {
        match self {
            Redis::Standalone(_) => "standalone",
            Redis::Cluster(_) => "cluster",
        }
    }
}

impl ConnectionLike for Redis {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Redis::Standalone(c) => c.req_packed_command(cmd),
            Redis::Cluster(handle) => {
                let handle = Arc::clone(handle);
                Box::pin(async move {
                    let result = handle.connection().req_packed_command(cmd).await;
                    if let Err(e) = &result {
                        handle.failed(e);
                    }
                    result
                })
            }
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Redis::Standalone(c) => c.req_packed_commands(pipeline, offset, count),
            Redis::Cluster(handle) => {
                let handle = Arc::clone(handle);
                Box::pin(async move {
                    let result = handle.connection().req_packed_commands(pipeline, offset, count).await;
                    if let Err(e) = &result {
                        handle.failed(e);
                    }
                    result
                })
            }
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Redis::Standalone(c) => c.get_db(),
            Redis::Cluster(handle) => handle.connection().get_db(),
        }
    }
}
