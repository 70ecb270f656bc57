//! The fleet the fleet figures share: a private `redis-server` and a real `kiln-cache` over it,
//! and how to start a kilnd "host" that uses them as its remote tier.
//!
//! The Redis server is the bench's own ([`super::redis::RedisServer`], a Unix socket in the run's
//! directory) but a second instance, apart from the one figures (a) to (d) flush and fill, so
//! the two never see each other's keys. `kiln-cache` is the tests' harness process
//! ([`kiln_tests::redis::CacheServer`]), which panics when it cannot start; the panic is caught
//! here and becomes the figure's recorded error.

use super::Bench;
use super::kilnd::{Kilnd, KilndOptions};
use super::redis::RedisServer;
use anyhow::{Context, Result, anyhow, ensure};
use kiln_cache_client::RemoteCache;
use kiln_tests::redis::{CacheOptions, CacheServer, WRITE_TOKEN};

/// The read-write token of the fresh hosts that take what a filler published: another token than
/// the filler's, as on a fleet where each host has its own, so that their audits can vouch for
/// the filler (a writer cannot vouch for its own token).
pub const FRESH_HOST_TOKEN: &str = "bench-fresh-host-token-0123456789";

/// Redis plus kiln-cache, stopped on drop.
#[derive(Debug)]
pub struct Fleet {
    pub redis: RedisServer,
    pub cache: CacheServer,
}

/// The text of a caught panic.
/// Runs `once(leases, round)` for `rounds` rounds with fleet leases on and off, alternating which
/// goes first so that neither side always meets a warmer machine; returns the runs (on, off).
pub async fn leases_on_and_off<R, F, Fut>(rounds: usize, mut once: F) -> Result<(Vec<R>, Vec<R>)>
where
    F: FnMut(bool, usize) -> Fut,
    Fut: std::future::Future<Output = Result<R>>,
{
    let (mut on, mut off) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        for leases in if round % 2 == 0 { [true, false] } else { [false, true] } {
            let r = once(leases, round)
                .await
                .with_context(|| format!("run {round}, leases {}", if leases { "on" } else { "off" }))?;
            if leases { on.push(r) } else { off.push(r) }
        }
    }
    ensure!(!on.is_empty() && !off.is_empty(), "no runs");
    Ok((on, off))
}

/// The largest of `f` over `runs`: a count the target bounds holds in every run.
pub fn most<R>(runs: &[R], f: impl Fn(&R) -> f64) -> f64 {
    runs.iter().map(f).fold(0.0, f64::max)
}

pub fn panic_text(e: tokio::task::JoinError) -> String {
    match e.try_into_panic() {
        Ok(p) => p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| (*s).to_string()))
            .unwrap_or_else(|| "a panic".into()),
        Err(e) => e.to_string(),
    }
}

impl Fleet {
    pub async fn start(bench: &Bench) -> Result<Fleet> {
        let redis = RedisServer::start(&bench.dir("fleet-redis")?).context("starting the fleet's redis-server")?;
        let url = format!("unix://{}", redis.socket.display());
        let mut options = CacheOptions::new(vec![url]);
        options.tokens.push(format!("write:{FRESH_HOST_TOKEN}"));
        let cache = tokio::task::spawn_blocking(move || CacheServer::start(options))
            .await
            .map_err(|e| anyhow!("kiln-cache did not start: {}", panic_text(e)))?;
        Ok(Fleet { redis, cache })
    }

    /// A kilnd "host" of this fleet: its remote tier is the fleet's kiln-cache, with a
    /// read-write token; `config` adds lines to its config file.
    pub fn kilnd_options(&self, concurrency: usize, config: &str) -> KilndOptions {
        host_options(&self.cache.uri(), concurrency, config)
    }

    /// [`Fleet::kilnd_options`] for a fresh host with [`FRESH_HOST_TOKEN`].
    pub fn fresh_host_options(&self, concurrency: usize, config: &str) -> KilndOptions {
        let mut options = self.kilnd_options(concurrency, config);
        options.env.retain(|(name, _)| name != "KILN_REMOTE_TOKEN");
        options.env.push(("KILN_REMOTE_TOKEN".into(), FRESH_HOST_TOKEN.into()));
        options
    }

    /// A fresh kilnd host of this fleet at the machine's concurrency, in the scratch directory
    /// `name`; `config` adds lines to its config file.
    pub async fn start_host(&self, bench: &Bench, name: &str, config: &str) -> Result<Kilnd> {
        bench.start_kilnd(&bench.dir(name)?, &self.kilnd_options(bench.cores, config)).await
    }

    /// A plain kiln-cache client with its own connection.
    pub fn client(&self) -> Result<RemoteCache> {
        RemoteCache::connect(&self.cache.uri(), WRITE_TOKEN).context("kiln-cache client")
    }
}

/// A kilnd "host" whose remote tier is the kiln-cache at `uri`, with a read-write token;
/// `config` adds lines to its config file.
pub fn host_options(uri: &str, concurrency: usize, config: &str) -> KilndOptions {
    KilndOptions {
        config: config.to_string(),
        env: vec![("KILN_REMOTE".into(), uri.into()), ("KILN_REMOTE_TOKEN".into(), WRITE_TOKEN.into())],
        ..KilndOptions::new(concurrency)
    }
}

/// The Redis key of an artifact's envelope (see `cache-server/src/layout.rs`).
pub fn artifact_key(key: &str) -> Vec<u8> {
    format!("kiln:v1:{{{key}}}:a").into_bytes()
}
