//! The fleet-restart model of figure (n): what it takes to restore one snapshot on 1,000 hosts
//! at once through the central path (kiln-cache in front of Redis), built from throughputs
//! measured here at saturation.
//!
//! Two loads run for a few seconds each against the figure's fleet, reading the snapshot's
//! stored values over and over: plain Redis clients (pipelined GETs on the Unix socket), then
//! kiln-cache clients (`BatchGet` in the chunks a restoring kilnd asks for, over TCP). Each
//! reports bytes per second and, from `/proc/<pid>/stat`, the CPU seconds the server processes
//! spent: bytes per CPU-second is what a core of each serves, which is what scales to another
//! machine. Everything the model assumes beyond that (the NIC) is named where it is used.

use super::fleet::Fleet;
use anyhow::{Context, Result, ensure};
use kiln_cache_client::Lookup;
use kiln_proto::key::CacheKey;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Concurrent readers in each load: enough to keep a server busy on two cores.
const READERS: usize = 16;
/// How long each load runs.
const LOAD: Duration = Duration::from_secs(4);
/// Keys per `BatchGet`, as kilnd's restore asks (its chunk of files).
const BATCH: usize = 32;

/// The restart the model sizes.
pub const HOSTS: f64 = 1000.0;
pub const SNAPSHOT_MB: f64 = 200.0;
pub const DEADLINE_S: f64 = 10.0;
/// Assumed, not measured: a server's network interface, in MB/s (25 Gb/s).
const NIC_MBPS: f64 = 3125.0;
/// kiln-cache's default `hot_values_ms`, in seconds: the server's own constant, so the model
/// follows a change of it.
const HOT_LIFETIME_S: f64 = kiln_cache_server::config::DEFAULT_HOT_VALUES.as_secs_f64();

/// One load's result: bytes moved in `secs`, and each server's CPU seconds meanwhile.
#[derive(Debug, Clone, Copy)]
pub struct Load {
    pub bytes: u64,
    pub secs: f64,
    pub redis_cpu: f64,
    pub cache_cpu: f64,
}

impl Load {
    pub fn mbps(&self) -> f64 {
        self.bytes as f64 / 1e6 / self.secs
    }
    /// MB served per CPU-second of `cpu`; infinite if the process used none.
    fn per_cpu(&self, cpu: f64) -> f64 {
        self.bytes as f64 / 1e6 / cpu.max(1e-9)
    }
}

/// CPU seconds of the fleet's two servers: redis-server's, then kiln-cache's.
pub(super) fn servers_cpu(fleet: &Fleet) -> Result<(f64, f64)> {
    let cache = fleet.cache.pid().context("kiln-cache is not running")?;
    Ok((super::cpu::seconds(fleet.redis.pid())?, super::cpu::seconds(cache)?))
}

/// Runs `load` and measures it.
fn measure(fleet: &Fleet, load: impl FnOnce() -> Result<u64>) -> Result<Load> {
    let (redis0, cache0) = servers_cpu(fleet)?;
    let started = Instant::now();
    let bytes = load()?;
    let secs = started.elapsed().as_secs_f64();
    let (redis1, cache1) = servers_cpu(fleet)?;
    Ok(Load { bytes, secs, redis_cpu: redis1 - redis0, cache_cpu: cache1 - cache0 })
}

/// [`READERS`] plain Redis clients GET every value in one pipelined round trip, again and again.
pub fn redis_load(fleet: &Fleet, redis_keys: &[Vec<u8>]) -> Result<Load> {
    measure(fleet, || {
        let deadline = Instant::now() + LOAD;
        let total = AtomicU64::new(0);
        std::thread::scope(|scope| {
            let readers: Vec<_> = (0..READERS)
                .map(|_| {
                    let total = &total;
                    scope.spawn(move || {
                        let mut resp = fleet.redis.connect()?;
                        while Instant::now() < deadline {
                            let values = resp.get_all(redis_keys)?;
                            total.fetch_add(values.iter().map(|v| v.len() as u64).sum(), Ordering::Relaxed);
                        }
                        Ok::<_, anyhow::Error>(())
                    })
                })
                .collect();
            for r in readers {
                r.join().map_err(|_| anyhow::anyhow!("a Redis reader panicked"))??;
            }
            Ok(total.load(Ordering::Relaxed))
        })
    })
}

/// [`READERS`] kiln-cache clients, each its own connection, `BatchGet` every key in chunks of
/// [`BATCH`], again and again; every answer must be a hit.
pub async fn cache_load(fleet: &Fleet, keys: &[CacheKey]) -> Result<Load> {
    let clients = (0..READERS).map(|_| fleet.client()).collect::<Result<Vec<_>>>()?;
    let keys: Arc<Vec<CacheKey>> = Arc::new(keys.to_vec());
    let (redis0, cache0) = servers_cpu(fleet)?;
    let started = Instant::now();
    let deadline = started + LOAD;
    let readers: Vec<_> = clients
        .into_iter()
        .map(|client| {
            let keys = Arc::clone(&keys);
            tokio::spawn(async move {
                let mut bytes = 0u64;
                while Instant::now() < deadline {
                    for chunk in keys.chunks(BATCH) {
                        for (key, lookup) in client.batch_get(chunk).await? {
                            let Lookup::Hit(envelope, _) = lookup else {
                                anyhow::bail!("kiln-cache lacks {key} of the snapshot");
                            };
                            bytes += envelope.len() as u64;
                        }
                    }
                }
                Ok(bytes)
            })
        })
        .collect();
    let mut bytes = 0;
    for r in readers {
        bytes += r.await.context("a kiln-cache reader panicked")??;
    }
    let secs = started.elapsed().as_secs_f64();
    let (redis1, cache1) = servers_cpu(fleet)?;
    ensure!(bytes > 0, "the kiln-cache load read nothing");
    Ok(Load { bytes, secs, redis_cpu: redis1 - redis0, cache_cpu: cache1 - cache0 })
}

/// What was measured, for the model.
#[derive(Debug, Clone, Copy)]
pub struct Inputs {
    pub redis: Load,
    pub cache: Load,
    /// Stored bytes ÷ file bytes: what crosses the wire per byte restored.
    pub wire_ratio: f64,
    /// The largest stored value of the snapshot, in MB.
    pub largest_value_mb: f64,
    /// One fresh host's restore rate through kilnd here, MB/s of files.
    pub host_mbps: f64,
}

/// The model in markdown: a table of what the restart needs, then where it stops scaling.
pub fn model(i: &Inputs) -> String {
    let wire_mb = SNAPSHOT_MB * i.wire_ratio;
    let need = HOSTS * wire_mb / DEADLINE_S;
    let redis_core = i.redis.per_cpu(i.redis.redis_cpu);
    let cache_core = i.cache.per_cpu(i.cache.cache_cpu);
    let shards_direct = (need / redis_core).ceil();
    let cache_cores = (need / cache_core).ceil();
    let replicas = (need / NIC_MBPS).ceil();
    // With hot values each replica reads each value once per lifetime.
    let redis_hot = replicas * wire_mb * (DEADLINE_S / HOT_LIFETIME_S).ceil() / DEADLINE_S;
    let slot_bound_mb = redis_core * DEADLINE_S / HOSTS;
    let here_hosts = i.cache.mbps().min(i.redis.mbps()) * DEADLINE_S / wire_mb;
    let rounds = HOSTS.log2().ceil();
    let peer_s = rounds * SNAPSHOT_MB / i.host_mbps.max(1e-9);
    let mut out = format!(
        "### A 1,000-host restart of a 200 MB snapshot in 10 s: the model\n\n\
         Measured in this run, at saturation ({READERS} readers, {} s each, this figure's snapshot read over \
         and over; kiln-cache as configured by default, hot values on):\n\n\
         | load | MB/s | redis-server CPU s | kiln-cache CPU s | MB per redis-server CPU-s | MB per kiln-cache \
         CPU-s |\n|---|---|---|---|---|---|\n\
         | plain Redis clients, pipelined GETs | {:.0} | {:.2} | — | {redis_core:.0} | — |\n\
         | kiln-cache clients, `BatchGet` of {BATCH} | {:.0} | {:.2} | {:.2} | {:.0} | {cache_core:.0} |\n\n",
        LOAD.as_secs(),
        i.redis.mbps(),
        i.redis.redis_cpu,
        i.cache.mbps(),
        i.cache.redis_cpu,
        i.cache.cache_cpu,
        i.cache.per_cpu(i.cache.redis_cpu),
    );
    out.push_str(&format!(
        "| quantity | value | from |\n|---|---|---|\n\
         | bytes on the wire per byte restored | {:.2} | stored values ÷ file bytes of this snapshot (zstd in the \
         envelope) |\n\
         | per host | {wire_mb:.0} MB, {:.0} MB/s for 10 s | the snapshot × the ratio above |\n\
         | the fleet's burst | {:.0} GB, **{need:.0} MB/s** for 10 s | 1,000 hosts |\n\
         | kiln-cache cores | **{cache_cores:.0}** | the burst ÷ kiln-cache's MB per CPU-s |\n\
         | kiln-cache replicas for the network | **{replicas:.0}** | the burst ÷ an assumed 25 Gb/s NIC each (not \
         measured here) |\n\
         | Redis behind them, hot values on | {redis_hot:.0} MB/s: **1 shard** | each replica reads each value once \
         per {HOT_LIFETIME_S:.0} s lifetime |\n\
         | Redis shards if every host's read reached Redis (hot values off) | **{shards_direct:.0}** | the burst ÷ \
         Redis's MB per CPU-s (one core a shard) |\n\
         | and then the largest value one slot serves to every host in 10 s | **{slot_bound_mb:.1} MB** (this \
         snapshot's largest: {:.2} MB) | one shard's MB per CPU-s × 10 s ÷ 1,000: every piece of an artifact lives \
         in its key's slot, so one large file is one shard's load whatever the shard count |\n\
         | what this machine's one kiln-cache and one Redis restore in 10 s | {here_hosts:.0} hosts | their smaller \
         MB/s × 10 s ÷ the per-host bytes |\n\
         | hosts fetching from hosts that have it (not built) | {rounds:.0} doublings × {:.1} s = {peer_s:.0} s, \
         the centre serving one copy | one host's restore here, {:.0} MB/s of files, store-and-forward |\n\n",
        i.wire_ratio,
        wire_mb / DEADLINE_S,
        HOSTS * wire_mb / 1e3,
        i.largest_value_mb,
        SNAPSHOT_MB / i.host_mbps.max(1e-9),
        i.host_mbps,
    ));
    out
}
