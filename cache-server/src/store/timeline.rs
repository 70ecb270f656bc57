//! Records indexed by time: quarantines and conflicting writes each keep one record per key
//! (in the key's slot) and a sorted set of the keys scored by the record's time (in the
//! `{audit}` slot), trimmed to what is kept. Listing reads the index, then each record.

use crate::backend::Redis;
use crate::error::Error;
use kiln_proto::CacheKey;
use prost::Message;
use std::time::Duration;

/// One kind of record: where its index lives and where each key's record does.
#[derive(Debug, Clone, Copy)]
pub struct Timeline {
    pub index: &'static str,
    pub record_key: fn(&CacheKey) -> String,
    /// How long records are kept; older index entries are trimmed on each add.
    pub kept: Duration,
}

impl Timeline {
    /// Indexes `key` at `now_ms` and trims what is older than kept.
    pub async fn add(&self, redis: &Redis, key: &CacheKey, now_ms: u64) -> Result<(), Error> {
        let oldest_kept = now_ms.saturating_sub(self.kept.as_millis() as u64);
        let mut pipe = redis::pipe();
        pipe.cmd("ZADD").arg(self.index).arg(now_ms).arg(key.to_hex()).ignore();
        pipe.cmd("ZREMRANGEBYSCORE").arg(self.index).arg("-inf").arg(format!("({oldest_kept}")).ignore();
        let mut con = redis.clone();
        pipe.query_async::<()>(&mut con).await?;
        Ok(())
    }

    /// Records at or after `since_ms`, oldest first, at most `limit`; and whether more follow.
    pub async fn since<M: Message + Default>(
        &self,
        redis: &Redis,
        since_ms: u64,
        limit: usize,
    ) -> Result<(Vec<M>, bool), Error> {
        let mut con = redis.clone();
        let keys: Vec<String> = redis::cmd("ZRANGEBYSCORE")
            .arg(self.index)
            .arg(since_ms)
            .arg("+inf")
            .arg("LIMIT")
            .arg(0)
            .arg(limit + 1)
            .query_async(&mut con)
            .await?;
        let more = keys.len() > limit;
        Ok((self.records(redis, &keys[..keys.len().min(limit)]).await?, more))
    }

    /// The `n` newest records, newest first: the fleet page's lists.
    pub async fn newest<M: Message + Default>(&self, redis: &Redis, n: usize) -> Result<Vec<M>, Error> {
        let mut con = redis.clone();
        let keys: Vec<String> = redis::cmd("ZREVRANGEBYSCORE")
            .arg(self.index)
            .arg("+inf")
            .arg("-inf")
            .arg("LIMIT")
            .arg(0)
            .arg(n)
            .query_async(&mut con)
            .await?;
        self.records(redis, &keys).await
    }

    /// The records of `keys` (hex), in their order; a key whose record expired is left out. Each
    /// record lives in its key's slot: one read each, together.
    async fn records<M: Message + Default>(&self, redis: &Redis, keys: &[String]) -> Result<Vec<M>, Error> {
        let reads = keys.iter().filter_map(|k| k.parse::<CacheKey>().ok()).map(|key| async move {
            let mut con = redis.clone();
            let value: Option<Vec<u8>> = redis::cmd("GET").arg((self.record_key)(&key)).query_async(&mut con).await?;
            Ok::<_, Error>(value.and_then(|v| M::decode(v.as_slice()).ok()))
        });
        let mut out = Vec::new();
        for record in futures_util::future::join_all(reads).await {
            out.extend(record?);
        }
        Ok(out)
    }
}
