//! Scenario 2: many concurrent clients on one kiln-cache over a real Redis, each its own
//! connection, reading stored entries with `Get` and `BatchGet`; every answer must be a hit with
//! the exact envelope that was stored.

use super::load;
use super::report::Outcome;
use super::{Run, rss};
use crate::bench::fleet::Fleet;
use anyhow::{Context, Result, ensure};
use kiln_cache_client::Lookup;
use kiln_proto::pb::ArtifactMeta;
use kiln_proto::{CacheKey, envelope};
use std::sync::Arc;

pub const TITLE: &str = "1,000 concurrent clients on kiln-cache";
/// Entries stored before the clients start.
const ENTRIES: usize = 64;
/// Incompressible bytes per entry: about a small cubin's size.
const ENTRY_BYTES: usize = 16 * 1024;
/// Keys per `BatchGet`.
const BATCH: usize = 8;

/// Entry `i`: its key and an envelope of incompressible bytes.
fn entry(i: usize) -> (CacheKey, Vec<u8>) {
    let key =
        CacheKey::from_bytes(*blake3::hash(format!("kiln-reliability scenario 2, entry {i}").as_bytes()).as_bytes());
    let mut bytes = vec![0u8; ENTRY_BYTES];
    blake3::Hasher::new().update(key.as_bytes()).finalize_xof().fill(&mut bytes);
    let meta = ArtifactMeta { toolchain: "nvrtc".into(), target: crate::bench::TARGET.into(), ..Default::default() };
    (key, envelope::seal(&key, meta, &bytes))
}

fn expect_hit(lookup: &Lookup, envelope: &[u8], key: &CacheKey) -> Result<()> {
    match lookup {
        Lookup::Hit(got, _) => ensure!(got.as_slice() == envelope, "{key}: the envelope differs from the stored one"),
        other => anyhow::bail!("{key}: expected a hit, got {other:?}"),
    }
    Ok(())
}

pub async fn run(run: &Run, out: &mut Outcome) -> Result<()> {
    let (n, calls) = (run.options.clients, run.options.calls_per_client);
    out.method = vec![
        format!(
            "One kiln-cache over a private redis-server (Unix socket, no persistence), holding {ENTRIES} entries of \
             {} KiB (real envelopes, incompressible payloads). {n} clients, each its own gRPC connection with a \
             read-write token, released together; each makes {calls} calls one after another, alternating `Get` of \
             one key and `BatchGet` of {BATCH} keys.",
            ENTRY_BYTES / 1024
        ),
        "An error is a failed call, or an answer that is not a hit with the stored envelope byte for byte. \
         Latency is per call. kiln-cache's peak memory is VmHWM from /proc/PID/status."
            .into(),
    ];
    let fleet = Fleet::start(&run.bench).await?;
    let pid = fleet.cache.pid().context("kiln-cache has no pid")?;
    let writer = fleet.client()?;
    let entries: Vec<(CacheKey, Vec<u8>)> = (0..ENTRIES).map(entry).collect();
    for (key, envelope) in &entries {
        writer.put(key, envelope.clone()).await.with_context(|| format!("storing {key}"))?;
    }
    let entries = Arc::new(entries);
    let start = rss::read(pid)?;
    let overflows_before = listen_overflows();
    let clients = Arc::new((0..n).map(|_| fleet.client()).collect::<Result<Vec<_>>>()?);
    out.figure("clients (own connection each) × calls", format!("{n} × {calls}"));
    let tally = {
        let (clients, entries) = (Arc::clone(&clients), Arc::clone(&entries));
        load::many(n, calls, move |c, k| {
            let (client, entries) = (clients[c].clone(), Arc::clone(&entries));
            async move {
                let first = (c * 7 + k * 3) % ENTRIES;
                if k % 2 == 0 {
                    let (key, envelope) = &entries[first];
                    expect_hit(&client.get(key).await?, envelope, key)
                } else {
                    let picked: Vec<&(CacheKey, Vec<u8>)> =
                        (0..BATCH).map(|j| &entries[(first + j) % ENTRIES]).collect();
                    let keys: Vec<CacheKey> = picked.iter().map(|(key, _)| *key).collect();
                    let answers = client.batch_get(&keys).await?;
                    for ((key, lookup), (_, envelope)) in answers.iter().zip(picked) {
                        expect_hit(lookup, envelope, key)?;
                    }
                    Ok(())
                }
            }
        })
        .await
    };
    tally.figures(out, "");
    let end = rss::read(pid)?;
    if let (Some(before), Some(after)) = (overflows_before, listen_overflows()) {
        out.figure(
            "listen-queue overflows during the run (the kernel's TcpExtListenOverflows, whole machine)",
            after.saturating_sub(before).to_string(),
        );
    }
    out.figure("kiln-cache RSS before the clients", rss::mib(start.rss_kib));
    out.figure("kiln-cache peak RSS (VmHWM)", rss::mib(end.peak_kib));
    out.check("errors = 0", tally.errors, tally.errors == 0);
    drop(clients);
    Ok(())
}

/// The kernel's count of connections dropped because a listen queue was full
/// (`TcpExtListenOverflows` in /proc/net/netstat), or `None` where it cannot be read. A dropped
/// SYN is retried after a second, so a few of them turn a connect storm into timeouts.
fn listen_overflows() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/net/netstat").ok()?;
    let mut lines = text.lines().filter(|l| l.starts_with("TcpExt:"));
    let (names, values) = (lines.next()?, lines.next()?);
    let at = names.split_whitespace().position(|n| n == "ListenOverflows")?;
    values.split_whitespace().nth(at)?.parse().ok()
}
