//! Quarantine: an auditor's verdict that the bytes under a key are not what the key's inputs
//! compile to. The bytes stop being served at once (the head and pieces move aside, kept as
//! evidence beside the record), the record is indexed by time for every kilnd's poll, and the
//! same bytes are refused if published again under the key (see [`Store::put_envelope`]).
//!
//! The move is one Lua step that first checks the head still holds the digest the auditor was
//! served, so a report about bytes a fresh publish already replaced changes nothing, and two
//! auditors reporting at once quarantine once. Every key it touches carries the artifact's hash
//! tag, hence one slot of a cluster; the time index is another slot, written after.

use super::Store;
use super::timeline::Timeline;
use crate::backend::Redis;
use crate::error::Error;
use crate::layout;
use crate::status::tally::now_ms;
use kiln_proto::CacheKey;
use kiln_proto::pb::QuarantineRecord;
use prost::Message;
use redis::Script;
use std::sync::LazyLock;
use std::time::Duration;

/// How long a quarantine's record and evidence are kept: long enough for an operator to look
/// and for every host to have polled many times over; the time index is trimmed to the same.
pub const KEPT: Duration = Duration::from_secs(7 * 24 * 3600);

/// Records one list answer carries at most.
pub const MAX_LIST: usize = 1000;

/// KEYS[1]: the record; then (from, to) pairs: the head and each piece and where each goes.
/// ARGV: the served digest (32 bytes), the record, its lifetime in ms. 1 when moved, else 0.
static QUARANTINE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "local head = redis.call('GET', KEYS[2]) \
         if not head or string.sub(head, 17, 48) ~= ARGV[1] then return 0 end \
         for i = 2, #KEYS, 2 do \
           if redis.call('EXISTS', KEYS[i]) == 1 then \
             redis.call('RENAME', KEYS[i], KEYS[i + 1]) \
             redis.call('PEXPIRE', KEYS[i + 1], ARGV[3]) \
           end \
         end \
         redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3]) \
         return 1",
    )
});

/// What [`Store::quarantine`] did.
#[derive(Debug, Clone, PartialEq)]
pub enum Quarantined {
    /// The bytes are out of service; the record as stored.
    Now(Box<QuarantineRecord>),
    /// The key does not hold the served bytes (replaced, expired, or quarantined already).
    NotHeld,
}

impl Store {
    /// Quarantines `key` if it still holds the envelope whose blake3 is `served`. `record` is
    /// completed here with the publisher (from the head), the key, the digest and the time.
    pub async fn quarantine(
        &self,
        key: &CacheKey,
        served: [u8; 32],
        mut record: QuarantineRecord,
    ) -> Result<Quarantined, Error> {
        let Some(parsed) = self.head_holding(key, served).await? else { return Ok(Quarantined::NotHeld) };
        let mut con = self.redis.clone();
        let now = now_ms();
        record.key = key.to_hex();
        record.served_digest = blake3::Hash::from(served).to_hex().to_string();
        record.unix_ms = now;
        record.publisher = kiln_proto::pb::Provenance::decode(parsed.provenance.as_slice()).ok();
        let mut invocation = QUARANTINE.key(layout::quarantine_key(key));
        invocation.key(layout::head_key(key)).key(layout::quarantined_piece_key(key, 0));
        for n in 1..parsed.pieces {
            invocation.key(layout::piece_key(key, n)).key(layout::quarantined_piece_key(key, n));
        }
        invocation.arg(&served[..]).arg(record.encode_to_vec()).arg(KEPT.as_millis() as u64);
        let moved: i64 = invocation.invoke_async(&mut con).await?;
        self.hot.forget(key);
        if moved != 1 {
            return Ok(Quarantined::NotHeld);
        }
        TIMELINE.add(&self.redis, key, now).await?;
        // Waiters of the key look again and find it gone: they compile it themselves.
        self.announce(key).await?;
        Ok(Quarantined::Now(Box::new(record)))
    }

    /// The quarantine record of `key`, if it has one.
    pub async fn quarantine_record(&self, key: &CacheKey) -> Result<Option<QuarantineRecord>, Error> {
        let mut con = self.redis.clone();
        let value: Option<Vec<u8>> = redis::cmd("GET").arg(layout::quarantine_key(key)).query_async(&mut con).await?;
        Ok(value.and_then(|v| QuarantineRecord::decode(v.as_slice()).ok()))
    }

    /// Records quarantined at or after `since_ms`, oldest first, at most `limit`; and whether
    /// more follow.
    pub async fn list_quarantine(&self, since_ms: u64, limit: usize) -> Result<(Vec<QuarantineRecord>, bool), Error> {
        TIMELINE.since(&self.redis, since_ms, limit).await
    }
}

/// Where quarantine records are indexed.
const TIMELINE: Timeline = Timeline { index: layout::QUARANTINED, record_key: layout::quarantine_key, kept: KEPT };

/// The `n` newest quarantine records, newest first: the fleet page's list.
pub async fn newest(redis: &Redis, n: usize) -> Result<Vec<QuarantineRecord>, Error> {
    TIMELINE.newest(redis, n).await
}
