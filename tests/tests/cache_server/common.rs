//! What every test here shares: keys and envelopes made from names, a Redis and a kiln-cache
//! started together, and short readings of errors, watch events and Redis keys.

use kiln_cache_client::{ClientError, Lookup, PublishEvent, PublishStream, RemoteCache};
use kiln_proto::CacheKey;
use kiln_proto::envelope;
use kiln_proto::pb::{ArtifactMeta, NegativeEntry};
use kiln_tests::redis::{CacheOptions, CacheServer, RedisServer, WRITE_TOKEN};
use std::time::Duration;
use tonic::Code;

pub(crate) const MIB: usize = 1 << 20;

pub(crate) fn key(name: &str) -> CacheKey {
    CacheKey::from_bytes(*blake3::hash(name.as_bytes()).as_bytes())
}

/// An envelope under `k` holding `n` incompressible bytes, so its size is about `n`.
pub(crate) fn envelope_of(k: &CacheKey, n: usize) -> Vec<u8> {
    let mut bytes = vec![0u8; n];
    blake3::Hasher::new().update(k.as_bytes()).finalize_xof().fill(&mut bytes);
    let meta = ArtifactMeta { toolchain: "nvrtc".into(), target: "sm_90".into(), ..Default::default() };
    envelope::seal(k, meta, &bytes)
}

pub(crate) fn start() -> (RedisServer, CacheServer) {
    start_with("")
}

/// [`start`], with `config` as kiln-cache's config file.
fn start_with(config: &str) -> (RedisServer, CacheServer) {
    let redis = RedisServer::start();
    let cache = CacheServer::start(CacheOptions { config: config.into(), ..CacheOptions::new(vec![redis.url()]) });
    (redis, cache)
}

/// [`start`], and a client with the write token: what a test of the entries themselves needs.
pub(crate) fn start_writing() -> (RedisServer, CacheServer, RemoteCache) {
    start_writing_with("")
}

/// [`start_writing`], with `config` as kiln-cache's config file.
pub(crate) fn start_writing_with(config: &str) -> (RedisServer, CacheServer, RemoteCache) {
    let (redis, cache) = start_with(config);
    let writer = cache.client(WRITE_TOKEN);
    (redis, cache, writer)
}

/// [`start`], and a writing client for each of `hosts`, which it names as its host: the
/// publishers whose provenance a test follows.
pub(crate) fn start_writers<const N: usize>(hosts: [&str; N]) -> (RedisServer, CacheServer, [RemoteCache; N]) {
    let (redis, cache) = start();
    let writers = hosts.map(|host| cache.client(WRITE_TOKEN).with_host(host));
    (redis, cache, writers)
}

/// Two kiln-cache replicas over one Redis.
pub(crate) fn start_replicas() -> (RedisServer, CacheServer, CacheServer) {
    let (redis, a) = start();
    let b = CacheServer::start(CacheOptions::new(vec![redis.url()]));
    (redis, a, b)
}

pub(crate) fn code(r: Result<impl std::fmt::Debug, ClientError>) -> (Code, String) {
    let e = r.expect_err("the call should have failed");
    (e.code().unwrap_or_else(|| panic!("not an RPC error: {e}")), e.to_string())
}

pub(crate) fn head(k: &CacheKey) -> String {
    format!("kiln:v1:{{{k}}}:a")
}

pub(crate) async fn next(stream: &mut PublishStream, within: Duration) -> PublishEvent {
    tokio::time::timeout(within, stream.next_event())
        .await
        .expect("no publish event in time")
        .expect("watch stream failed")
        .expect("watch stream ended")
}

/// Each answer's envelope, so answers compare without their provenance.
pub(crate) fn envelopes(answers: Vec<(CacheKey, Lookup)>) -> Vec<(CacheKey, Option<Vec<u8>>)> {
    answers.into_iter().map(|(k, l)| (k, l.envelope().map(<[u8]>::to_vec))).collect()
}

/// A watch event's key and envelope; panics on any other event.
pub(crate) fn value_of(event: PublishEvent) -> (CacheKey, Option<Vec<u8>>) {
    match event {
        PublishEvent::Value(k, lookup) => (k, lookup.envelope().map(<[u8]>::to_vec)),
        other => panic!("expected a value, got {other:?}"),
    }
}

/// Flips one byte of a Redis string at `offset`, with redis-cli.
pub(crate) fn corrupt(redis: &RedisServer, name: &str, offset: usize) {
    let offset = offset.to_string();
    let old = redis.cli(&["GETRANGE", name, &offset, &offset]);
    let new = if old == b"Z" { "Y" } else { "Z" };
    redis.cli(&["SETRANGE", name, &offset, new]);
}

/// A failed compile to remember: its log and its compile time.
pub fn failed_compile(log: &str, compile_micros: u64) -> NegativeEntry {
    NegativeEntry { log: log.to_owned(), compile_micros }
}
