//! Conflicting writes on record (see `crate::conflict` for what conflicts): the key's latest
//! conflict, kept as long as a quarantine's evidence and indexed by time for `kiln audit
//! --conflicts` and the fleet page; and the held artifact marked disputed, so the next kilnd to
//! fetch it audits it whoever published it.

use super::Store;
use super::quarantine::KEPT;
use super::timeline::Timeline;
use crate::backend::Redis;
use crate::error::Error;
use crate::layout;
use kiln_proto::CacheKey;
use kiln_proto::pb::{ConflictRecord, Provenance};
use prost::Message;
use redis::Script;
use std::sync::LazyLock;

/// Where conflict records are indexed.
const TIMELINE: Timeline = Timeline { index: layout::CONFLICTS, record_key: layout::conflict_key, kept: KEPT };

/// Replaces the head KEYS[1] with ARGV[2], keeping its lifetime, only while it still holds
/// ARGV[1]: a fresh publish that raced in is not marked.
static RESTAMP: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "if redis.call('GET', KEYS[1]) == ARGV[1] then \
           redis.call('SET', KEYS[1], ARGV[2], 'KEEPTTL') \
           return 1 \
         end \
         return 0",
    )
});

impl Store {
    /// Records `record`, a conflict about the artifact whose head is `head`, and marks that
    /// artifact disputed in its provenance.
    pub(super) async fn dispute(&self, key: &CacheKey, head: &[u8], record: &ConflictRecord) -> Result<(), Error> {
        let provenance = Provenance { disputed: true, ..record.held.clone().unwrap_or_default() };
        self.restamp(key, head, &provenance).await?;
        self.record_conflict(key, record).await
    }

    /// Gives the artifact whose head is `head` another `provenance`, only while `key` still holds
    /// that head; whether it did.
    pub(super) async fn restamp(&self, key: &CacheKey, head: &[u8], provenance: &Provenance) -> Result<bool, Error> {
        let Some(marked) = layout::restamp(head, &provenance.encode_to_vec()) else { return Ok(false) };
        let mut con = self.redis.clone();
        let done: i64 = RESTAMP.key(layout::head_key(key)).arg(head).arg(marked).invoke_async(&mut con).await?;
        self.hot.forget(key);
        Ok(done == 1)
    }

    /// Keeps `record` as `key`'s latest conflict, and indexes it.
    pub(super) async fn record_conflict(&self, key: &CacheKey, record: &ConflictRecord) -> Result<(), Error> {
        let mut con = self.redis.clone();
        redis::cmd("SET")
            .arg(layout::conflict_key(key))
            .arg(record.encode_to_vec())
            .arg("PX")
            .arg(KEPT.as_millis() as u64)
            .query_async::<()>(&mut con)
            .await?;
        TIMELINE.add(&self.redis, key, record.unix_ms).await
    }

    /// Conflicts recorded at or after `since_ms`, oldest first, at most `limit`; and whether
    /// more follow.
    pub async fn list_conflicts(&self, since_ms: u64, limit: usize) -> Result<(Vec<ConflictRecord>, bool), Error> {
        TIMELINE.since(&self.redis, since_ms, limit).await
    }
}

/// The `n` newest conflicts, newest first: the fleet page's list.
pub async fn newest(redis: &Redis, n: usize) -> Result<Vec<ConflictRecord>, Error> {
    TIMELINE.newest(redis, n).await
}
