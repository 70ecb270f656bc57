//! The status page's Redis commands: flushing a replica's tally, storing a host's report, and the
//! reads of one page view. Every key shares the `{status}` hash tag (see `layout`), so each of
//! these is one pipeline to one node, standalone or cluster.

use super::buckets::{self, MINUTE_TTL_MS, Window};
use super::hosts;
use super::tally::{LeaseEvent, Pending};
use crate::backend::Redis;
use crate::error::Error;
use crate::layout;
use kiln_proto::pb::HostReport;
use redis::Value;
use std::collections::{BTreeSet, HashMap};

/// What a page view reads from Redis.
#[derive(Debug, Clone, Default)]
pub struct Read {
    pub window: Window,
    pub leases_held: u64,
    /// (received ms, report), most recent first: one per kilnd.
    pub hosts: Vec<(u64, HostReport)>,
}

/// Writes a replica's pending counts and lease events in one pipeline (not a transaction: each
/// command stands alone, and a partial failure is retried whole by the next flush, which at worst
/// counts a few events twice).
pub async fn flush(redis: &Redis, pending: &Pending, now_ms: u64) -> Result<(), Error> {
    let mut pipe = redis::pipe();
    let mut minutes = BTreeSet::new();
    for ((minute, field), n) in &pending.counts {
        pipe.cmd("HINCRBY").arg(layout::status_minute_key(*minute)).arg(field.name()).arg(*n).ignore();
        minutes.insert(*minute);
    }
    for minute in minutes {
        pipe.cmd("PEXPIRE").arg(layout::status_minute_key(minute)).arg(MINUTE_TTL_MS).ignore();
    }
    for (key, event) in &pending.leases {
        match event {
            // GT: a renew seen by another replica and flushed earlier is never shortened.
            LeaseEvent::HeldUntil(expiry) => {
                pipe.cmd("ZADD").arg(layout::STATUS_LEASES).arg("GT").arg(*expiry).arg(key).ignore();
            }
            LeaseEvent::Released => {
                pipe.cmd("ZREM").arg(layout::STATUS_LEASES).arg(key).ignore();
            }
        }
    }
    // Leases whose holder neither renewed nor released (a crashed host) expire here as in Redis.
    pipe.cmd("ZREMRANGEBYSCORE").arg(layout::STATUS_LEASES).arg("-inf").arg(now_ms).ignore();
    let mut con = redis.clone();
    pipe.query_async::<()>(&mut con).await?;
    Ok(())
}

/// Stores a validated report for [`hosts::HOST_TTL`] and indexes it under its kilnd
/// ([`hosts::daemon_id`]), in one transaction; kilnds whose reports expired leave the index on
/// the way.
pub async fn put_host(redis: &Redis, report: &HostReport, now_ms: u64) -> Result<(), Error> {
    let ttl = hosts::HOST_TTL.as_millis() as u64;
    let daemon = hosts::daemon_id(report);
    let mut con = redis.clone();
    redis::pipe()
        .atomic()
        .cmd("SET")
        .arg(layout::status_host_key(&daemon))
        .arg(hosts::encode(now_ms, report))
        .arg("PX")
        .arg(ttl)
        .ignore()
        .cmd("ZADD")
        .arg(layout::STATUS_HOSTS)
        .arg(now_ms)
        .arg(&daemon)
        .ignore()
        .cmd("ZREMRANGEBYSCORE")
        .arg(layout::STATUS_HOSTS)
        .arg("-inf")
        .arg(now_ms.saturating_sub(ttl))
        .ignore()
        .query_async::<()>(&mut con)
        .await?;
    Ok(())
}

/// A page view's reads: the window's minutes and the lease count in one pipeline, then the live
/// hosts' names and their reports in a second.
pub async fn read(redis: &Redis, now_ms: u64) -> Result<Read, Error> {
    let minutes: Vec<u64> = buckets::window(now_ms).collect();
    let mut pipe = redis::pipe();
    for minute in &minutes {
        pipe.cmd("HGETALL").arg(layout::status_minute_key(*minute));
    }
    pipe.cmd("ZCOUNT").arg(layout::STATUS_LEASES).arg(now_ms).arg("+inf");
    let oldest = now_ms.saturating_sub(hosts::HOST_TTL.as_millis() as u64);
    pipe.cmd("ZREVRANGEBYSCORE")
        .arg(layout::STATUS_HOSTS)
        .arg("+inf")
        .arg(oldest)
        .arg("LIMIT")
        .arg(0)
        .arg(hosts::MAX_HOSTS);
    let mut con = redis.clone();
    let mut values: Vec<Value> = pipe.query_async(&mut con).await?;
    let names: Vec<String> = redis::from_redis_value(values.pop().unwrap_or(Value::Nil)).unwrap_or_default();
    let leases_held: u64 = redis::from_redis_value(values.pop().unwrap_or(Value::Nil)).unwrap_or(0);
    let mut window = Window::default();
    for (minute, value) in minutes.into_iter().zip(values) {
        let fields: HashMap<String, u64> = redis::from_redis_value(value).unwrap_or_default();
        window.add(minute, &fields);
    }
    let mut reports = Vec::new();
    if !names.is_empty() {
        let keys: Vec<String> = names.iter().map(|h| layout::status_host_key(h)).collect();
        let stored: Vec<Option<Vec<u8>>> = redis::cmd("MGET").arg(keys).query_async(&mut con).await?;
        // A report that does not decode is dropped from the page; it expires on its own.
        reports = stored.into_iter().flatten().filter_map(|v| hosts::decode(&v)).collect();
    }
    Ok(Read { window, leases_held, hosts: reports })
}

/// `INFO memory` and `INFO stats` as text (one node's, or every node's of a cluster, which
/// [`super::redis_info::parse`] adds up).
pub async fn info(redis: &Redis) -> Result<Vec<String>, Error> {
    let mut out = Vec::new();
    for section in ["memory", "stats"] {
        let mut con = redis.clone();
        let value: Value = redis::cmd("INFO").arg(section).query_async(&mut con).await?;
        collect_text(value, &mut out);
    }
    Ok(out)
}

/// The text of an INFO answer: a string from one node, a map of node to string from a cluster.
fn collect_text(value: Value, out: &mut Vec<String>) {
    match value {
        Value::BulkString(b) => out.push(String::from_utf8_lossy(&b).into_owned()),
        Value::VerbatimString { text, .. } | Value::SimpleString(text) => out.push(text),
        Value::Map(pairs) => pairs.into_iter().for_each(|(_, v)| collect_text(v, out)),
        Value::Array(items) => items.into_iter().for_each(|v| collect_text(v, out)),
        _ => {}
    }
}
