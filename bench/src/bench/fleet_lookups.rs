//! Figure (g): lookups per second through kiln-cache from many clients,
//! against `redis-benchmark` GETs of values of the same size on the Redis behind it.
//!
//! Each client is a concurrent task with its own `kiln_cache_client::RemoteCache` (its
//! own HTTP/2 connection), issuing `Get` of one stored artifact, one request at a time, as
//! `redis-benchmark` does by default. Both sides share this machine's cores with their load
//! generator; the kiln side also has Redis under it.

use super::fleet::{Fleet, artifact_key};
use super::redis::benchmark_get_rps;
use super::report::{Row, Section, Target, Value};
use super::{Bench, TARGET, check_job};
use anyhow::{Context, Result, bail};
use kiln_cache_client::{Lookup, RemoteCache};
use kiln_proto::{CacheKey, pb};
use std::time::{Duration, Instant};
use tokio::task::JoinSet;

const TITLE: &str = "(g) Fleet: lookups per second through kiln-cache";
/// The target: kiln-cache's `Get` serves at least this share of the gRPC floor's rate (a bare
/// tonic server answering the same envelope): what is left is kiln-cache's own work.
const OF_FLOOR: f64 = 0.9;
/// The floor checks no token; the client sends one all the same, as it does to kiln-cache.
const FLOOR_TOKEN: &str = "floor-token-0123456789";

/// `Get`s per second that `clients` sustain for `secs`; every answer must be the stored value.
async fn rps(clients: &[RemoteCache], key: CacheKey, size: usize, secs: f64) -> Result<f64> {
    // `size` is what kiln-cache answers: the envelope, without Redis's own framing of it.
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let start = Instant::now();
    let mut tasks = JoinSet::new();
    for client in clients {
        let client = client.clone();
        tasks.spawn(async move {
            let mut done = 0u64;
            while Instant::now() < deadline {
                match client.get(&key).await? {
                    Lookup::Hit(bytes, _) if bytes.len() == size => done += 1,
                    Lookup::Hit(bytes, _) => bail!("a Get returned {} bytes, not {size}", bytes.len()),
                    other => bail!("a Get of a stored key answered {other:?}"),
                }
            }
            anyhow::Ok(done)
        });
    }
    super::per_second(tasks, start).await
}

pub async fn run(bench: &Bench, fleet: &Fleet) -> Result<Section> {
    let o = &bench.options;
    let mut s = Section::new(TITLE);
    let filler = bench.start_kilnd(&bench.dir("fleet-lookups")?, &fleet.kilnd_options(1, "")).await?;
    let req = kiln_tests::kernels::request(
        TARGET,
        vec![kiln_tests::kernels::kernel(
            "add_0",
            kiln_tests::kernels::cuda(&format!("// lookups\n{}", super::source(0))),
        )],
    );
    let job = filler.connect().await?.compile(req).await?.collect().await?;
    check_job(&job, 1, None)?;
    filler.stop().await?;
    let hex = &job.kernels[0].key;
    let key: CacheKey = hex.parse().map_err(|e| anyhow::anyhow!("key {hex}: {e:?}"))?;
    let stored = fleet.redis.connect()?.get_all(&[artifact_key(hex)]).context("the kernel is not in Redis")?;
    let size = stored[0].len();
    let envelope = match fleet.client()?.get(&key).await? {
        Lookup::Hit(bytes, _) => bytes,
        other => bail!("kiln-cache does not have the kernel: {other:?}"),
    };
    let answered = envelope.len();
    s.method = vec![
        format!(
            "kiln: C concurrent tasks in one process, each its own `RemoteCache` client (own HTTP/2 connection, \
             read-write token) to the run's kiln-cache over loopback TCP, each issuing `Get` of one stored artifact \
             (a {answered}-byte envelope; Redis holds it as a {size}-byte value) one at a time, for {} s after a 0.5 s warm-up; every answer must be a hit of \
             that size. Rate = answers ÷ wall time. kiln-cache reads the value from its redis-server on a Unix \
             socket, checks it and answers; the client does not open the envelope.",
            o.throughput_secs
        ),
        format!(
            "Baseline: `redis-benchmark -s SOCK -t set,get -d {size} -c C -n {} --csv` against the same \
             redis-server, the GET line's rate: values of the size Redis stores.",
            o.redis_requests
        ),
        "Ratio = kiln ÷ Redis; above 1 means kiln-cache served more lookups per second. kiln-cache sits in front \
         of that same Redis, so it cannot exceed it; the ratio is the price of the gRPC service (auth, \
         validation, TTL refresh, metrics). Where the time goes (perf on `--profile profiling`, 2026-11-22): a \
         `Get` is one Redis round trip (GETEX of the value and GET of the negative entry, pipelined); auth is a \
         token lookup in memory and metrics are in-process counters, neither a Redis call. kiln-cache's CPU is \
         spread over HTTP/2 and TCP (the client's connection is loopback TCP), tokio wake-ups, and the blake3 \
         check of each value it reads (about 4%); the load generator takes half of the 2 cores."
            .into(),
        "The gRPC floor, for where the time goes: a bare tonic server on its own runtime (2 worker threads) and \
         loopback port that answers every `Get` with the response kiln-cache gave (the same envelope) and does \
         nothing else (no auth, validation, Redis or metrics), driven by the same clients and loop, taking turns with kiln-cache in slices of a second. Its rows \
         compare the floor with Redis (the best any gRPC service could do here) and kiln-cache with the floor."
            .into(),
    ];
    let canned = pb::CacheGetResponse {
        key: key.to_hex(),
        entry: Some(pb::cache_get_response::Entry::Envelope(envelope.clone())),
        // What kiln-cache sends beside every envelope, so the floor carries the same bytes.
        provenance: Some(pb::Provenance {
            host: "bench-host".into(),
            token: "tok-0123456789ab".into(),
            unix_ms: 1,
            // A vetted publisher's artifact, confirmed by a second token: the hit path kilnd
            // serves from the fleet under every vetting policy.
            vetted: true,
            confirmed: true,
            ..Default::default()
        }),
    };
    let (_floor, floor_uri) = super::floor::cache(canned)?;
    for &c in &o.clients {
        let clients = (0..c).map(|_| fleet.client()).collect::<Result<Vec<_>>>()?;
        let redis_rps = benchmark_get_rps(&fleet.redis, size, c, o.redis_requests)
            .map(Value::PerSecond)
            .map_err(|e| format!("{e:#}"));
        let floor_clients =
            (0..c).map(|_| RemoteCache::connect(&floor_uri, FLOOR_TOKEN)).collect::<Result<Vec<_>, _>>()?;
        rps(&clients, key, answered, 0.5).await.with_context(|| format!("warm-up with {c} clients"))?;
        rps(&floor_clients, key, answered, 0.5).await.with_context(|| format!("floor warm-up, {c} clients"))?;
        // kiln-cache and the floor take turns in slices of a second, so the machine's other work
        // weighs on both alike.
        let (mut kiln, mut floor) = (0.0, 0.0);
        let slices = o.throughput_secs.ceil().max(1.0);
        for _ in 0..slices as usize {
            kiln += rps(&clients, key, answered, o.throughput_secs / slices)
                .await
                .with_context(|| format!("{c} clients"))?
                / slices;
            floor += rps(&floor_clients, key, answered, o.throughput_secs / slices)
                .await
                .with_context(|| format!("the floor with {c} clients"))?
                / slices;
        }
        let redis_name = format!("redis-benchmark GET, {c} clients, {size} B");
        s.rows.push(Row::new(
            format!("kiln-cache `Get`, {c} clients"),
            Ok(Value::PerSecond(kiln)),
            &redis_name,
            redis_rps.clone(),
        ));
        let floor_name = format!("gRPC floor, `Get`, {c} clients");
        s.rows.push(Row::new(&floor_name, Ok(Value::PerSecond(floor)), &redis_name, redis_rps));
        s.rows.push(
            Row::new(
                format!("kiln-cache `Get`, {c} clients"),
                Ok(Value::PerSecond(kiln)),
                floor_name,
                Ok(Value::PerSecond(floor)),
            )
            .with_target(Target::RatioAtLeast(OF_FLOOR)),
        );
    }
    Ok(s)
}
