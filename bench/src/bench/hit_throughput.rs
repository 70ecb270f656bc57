//! Figure (c): hit throughput. Many concurrent clients, each on its own connection, ask kilnd
//! for a one-kernel graph that is warm in memory, against `redis-benchmark` GETs of values of
//! the same size with the same number of clients, on the same machine, in the same run.
//!
//! Every client issues one request at a time (no pipelining), as `redis-benchmark` does by
//! default, so both sides are measured at the same depth of concurrency. The load generator
//! shares the machine's cores with the server on both sides.

use super::kilnd::KilndOptions;
use super::redis::{RedisServer, benchmark_get_rps};
use super::report::{Row, Section, Target, Value};
use super::{Bench, TARGET, check_job};
use anyhow::{Context, Result};
use kiln_proto::pb;
use std::time::{Duration, Instant};
use tokio::task::JoinSet;

const TITLE: &str = "(c) Hit throughput: many clients, one warm kernel";
/// The target: `Lookup` and `Compile` serve at least this share of the gRPC floor's rate (a bare
/// tonic server answering the same messages), at these client counts. The floor itself serves
/// about 0.3× redis-benchmark here, so a Redis-relative target measured gRPC, not kiln.
const OF_FLOOR: f64 = 0.95;
const TARGET_CLIENTS: [usize; 2] = [16, 64];

#[derive(Debug, Clone, Copy, PartialEq)]
enum Op {
    Lookup,
    Compile,
}

/// Requests per second that `clients` connections sustain for `secs`, every answer checked.
async fn rps(clients: &[kiln_client::Client], op: Op, secs: f64) -> Result<f64> {
    rps_from(clients, op, secs, Some(pb::Tier::Memory)).await
}

/// [`rps`], every answer checked to come from `tier` (`None`: any tier, for the floor's canned
/// answer).
async fn rps_from(clients: &[kiln_client::Client], op: Op, secs: f64, tier: Option<pb::Tier>) -> Result<f64> {
    let request = kiln_tests::kernels::vector_graph(TARGET, 1);
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let start = Instant::now();
    let mut tasks = JoinSet::new();
    for client in clients {
        let (client, request) = (client.clone(), request.clone());
        tasks.spawn(async move {
            let mut done = 0u64;
            while Instant::now() < deadline {
                let stream = match op {
                    Op::Lookup => client.lookup(request.clone()).await?,
                    Op::Compile => client.compile(request.clone()).await?,
                };
                check_job(&stream.collect().await?, 1, tier)?;
                done += 1;
            }
            anyhow::Ok(done)
        });
    }
    super::per_second(tasks, start).await
}

pub async fn run(bench: &Bench, redis: &RedisServer) -> Result<Section> {
    let o = &bench.options;
    let mut s = Section::new(TITLE);
    let dir = bench.dir("throughput")?;
    let options = KilndOptions::new(bench.cores);
    let daemon = bench.start_kilnd(&dir, &options).await?;
    let job = daemon.connect().await?.compile(kiln_tests::kernels::vector_graph(TARGET, 1)).await?.collect().await?;
    let size = check_job(&job, 1, None)?.first().map_or(0, Vec::len);
    let envelope = std::fs::metadata(kernel_file(&daemon.cache_dir, &job.kernels[0].key)).map(|m| m.len()).ok();
    s.method = vec![
        format!(
            "kiln: C clients, each its own connection to kilnd over the Unix socket, each issuing `Lookup` (or \
             `Compile`) of a one-kernel graph warm in the memory tier, one request at a time, for {} s after a 0.5 s \
             warm-up; every answer is checked (outcome ok, tier memory, cubin included). Rate = answers ÷ wall time.",
            o.throughput_secs
        ),
        format!(
            "Baseline: `redis-benchmark -s SOCK -t set,get -d {size} -c C -n {} --csv` against the run's private \
             redis-server on a Unix socket; the GET line's rate. {size} bytes is the kernel's cubin, what kiln returns{}.",
            o.redis_requests,
            envelope.map_or(String::new(), |e| format!(" (its stored envelope is {e} bytes)"))
        ),
        "Ratio = kiln ÷ Redis; above 1 means kiln served more requests per second.".into(),
        "Where the time goes (perf on `--profile profiling`, 2026-11-22): the load generator and kilnd share the \
         machine's 2 cores; kilnd's share is spread over HTTP/2 (hpack, stream bookkeeping), the socket's \
         syscalls, tokio wake-ups, validation and the key derivation of the one-kernel graph, and the job \
         record. `Compile` answered wholly from the caches is finished in its handler (no job task or channel), \
         which `Lookup` already was; no single function is more than a few percent. redis-benchmark is a C \
         client speaking RESP with no framing layer or per-request validation. `Lookup` and `Compile` share \
         validation, keys, the tier lookups and the answer's bytes; what `Compile` does beside them is the job \
         record a late `Watch` replays (an id, a registry entry, four recorded events, a copy of them for the \
         answer and the cubins stripped from the record after it), so its gap to its floor, beyond `Lookup`'s to \
         its own, is that record (perf, 2026-11-25: kilnd's own code about a tenth of all samples, no function of \
         it above 1%)."
            .into(),
        "The gRPC floor, for where the time goes: a bare tonic server on its own runtime (2 worker threads) and \
         Unix socket that answers every `Lookup` and `Compile` with the messages kilnd answers (one `kernels` \
         batch with the cubin, then `done`; for `Compile` first `queued` and `started`, as kilnd sends for a \
         graph its caches answer wholly) and does nothing else, driven by the same clients and loop, taking turns with kiln in slices of a second. Its rows \
         compare the floor with Redis (the best any gRPC service could do here) and kiln with the floor (kiln's \
         own work: validation, keys, the tiers, the job record)."
            .into(),
    ];
    let (_floor, floor_uri) = super::floor::compiler(&dir.join("floor.sock"), job)?;
    for &c in &o.clients {
        let (mut clients, mut floor_clients) = (Vec::with_capacity(c), Vec::with_capacity(c));
        for _ in 0..c {
            clients.push(daemon.connect().await?);
            floor_clients.push(kiln_client::connect(&floor_uri).await?);
        }
        let redis_rps = benchmark_get_rps(redis, size.max(1), c, o.redis_requests)
            .map(Value::PerSecond)
            .map_err(|e| format!("{e:#}"));
        let redis_name = format!("redis-benchmark GET, {c} clients, {size} B");
        for op in [Op::Lookup, Op::Compile] {
            rps(&clients, op, 0.5).await.with_context(|| format!("{op:?} warm-up with {c} clients"))?;
            rps_from(&floor_clients, op, 0.5, None).await.with_context(|| format!("floor warm-up, {c} clients"))?;
            // kiln and the floor take turns in slices of a second, so the machine's other work
            // weighs on both alike.
            let (mut kiln, mut floor) = (0.0, 0.0);
            let slices = o.throughput_secs.ceil().max(1.0);
            for _ in 0..slices as usize {
                kiln += rps(&clients, op, o.throughput_secs / slices)
                    .await
                    .with_context(|| format!("{op:?} with {c} clients"))?
                    / slices;
                floor += rps_from(&floor_clients, op, o.throughput_secs / slices, None)
                    .await
                    .with_context(|| format!("the floor's {op:?} with {c} clients"))?
                    / slices;
            }
            let row =
                Row::new(format!("`{op:?}`, {c} clients"), Ok(Value::PerSecond(kiln)), &redis_name, redis_rps.clone());
            s.rows.push(row);
            let floor_name = format!("gRPC floor, `{op:?}`, {c} clients");
            s.rows.push(Row::new(&floor_name, Ok(Value::PerSecond(floor)), &redis_name, redis_rps.clone()));
            let row = Row::new(
                format!("`{op:?}`, {c} clients"),
                Ok(Value::PerSecond(kiln)),
                floor_name,
                Ok(Value::PerSecond(floor)),
            );
            s.rows.push(if TARGET_CLIENTS.contains(&c) {
                row.with_target(Target::RatioAtLeast(OF_FLOOR))
            } else {
                row
            });
        }
    }
    daemon.stop().await?;
    Ok(s)
}

/// Where the disk tier keeps a key's envelope: `<cache-dir>/v1/ab/cd/<key>` (see `daemon/src/core/store/disk.rs`).
fn kernel_file(cache_dir: &std::path::Path, key: &str) -> std::path::PathBuf {
    let (a, b) = (key.get(0..2).unwrap_or(""), key.get(2..4).unwrap_or(""));
    cache_dir.join("v1").join(a).join(b).join(key)
}
