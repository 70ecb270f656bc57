//! The cache's operations as Redis commands: artifacts, negative entries, manifests, leases.
//!
//! Writes of an artifact go in one MULTI/EXEC transaction, pieces first and the head last. The
//! transaction is what keeps two concurrent writers of one key from leaving pieces of both behind
//! (all of a key's pieces share a hash-tag slot, so this works in a cluster too); the order is
//! what the layout promises a reader. Reads of a chunked artifact are one transaction as well, so
//! they see one write whole. TTLs slide on every read (`GETEX ... PX`).
//!
//! Values are verified on read. A damaged one is deleted (compare-and-delete, so a fresh write
//! that raced in is kept) and reported as [`Lookup::Corrupt`]; the service counts it and answers
//! a miss.

mod conflict;
mod quarantine;
mod timeline;
pub mod torch_jobs;
mod trust;

pub use conflict::newest as newest_conflicts;
pub use quarantine::{MAX_LIST, Quarantined, newest as newest_quarantines};

use crate::backend::Redis;
use crate::conflict::Judgement;
use crate::error::Error;
use crate::hot::HotValues;
use crate::layout::{self, LayoutError};
pub use crate::published::Published;
use crate::status::tally::now_ms;
use kiln_proto::CacheKey;
use kiln_proto::pb::{ConflictRecord, NegativeEntry, Provenance, QuarantineRecord};
use prost::Message;
use redis::{Script, Value};
use std::sync::LazyLock;
use std::time::Duration;

/// Extends a lease only while `holder` holds it.
static RENEW: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "if redis.call('GET', KEYS[1]) == ARGV[1] then \
           return redis.call('PEXPIRE', KEYS[1], ARGV[2]) \
         end \
         return 0",
    )
});

/// Takes the lease unless the key already holds an entry: 1 taken, 0 held by another, 2 an
/// artifact (its head) or a negative entry is there. One atomic step, so a publish can never land
/// between the check and the lease; all three keys share the artifact's hash tag, hence one slot.
static ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "if redis.call('EXISTS', KEYS[1], KEYS[2]) > 0 then \
           return 2 \
         end \
         if redis.call('SET', KEYS[3], ARGV[1], 'NX', 'PX', ARGV[2]) then \
           return 1 \
         end \
         return 0",
    )
});

/// Deletes a lease only while `holder` holds it: a holder whose lease expired and was taken over
/// must not release the new holder's lease.
static RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "if redis.call('GET', KEYS[1]) == ARGV[1] then \
           return redis.call('DEL', KEYS[1]) \
         end \
         return 0",
    )
});

/// Writes an artifact: KEYS[1] its head, KEYS[2] its negative entry (deleted), KEYS[3..] its
/// further pieces; ARGV[1] `new` (only where the key holds no head) or `any`, ARGV[2] the TTL in
/// ms, ARGV[3] the head, ARGV[4..] the pieces, head last. 1 when written, 0 when a head appeared
/// meanwhile. One atomic step, so two writers racing to a new key cannot both pass the check.
static WRITE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "if ARGV[1] == 'new' and redis.call('EXISTS', KEYS[1]) == 1 then return 0 end \
         for i = 3, #KEYS do redis.call('SET', KEYS[i], ARGV[i + 1], 'PX', ARGV[2]) end \
         redis.call('SET', KEYS[1], ARGV[3], 'PX', ARGV[2]) \
         redis.call('DEL', KEYS[2]) \
         return 1",
    )
});

/// Deletes KEYS only while KEYS[1] still holds ARGV[1], the damaged value a reader saw.
static DELETE_IF_SAME: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "if redis.call('GET', KEYS[1]) == ARGV[1] then \
           return redis.call('DEL', unpack(KEYS)) \
         end \
         return 0",
    )
});

/// What a key holds in Redis.
#[derive(Debug, Clone, PartialEq)]
pub enum Entry {
    Envelope(Published),
    Negative(NegativeEntry),
}

/// Why a Put was refused without reaching the write.
#[derive(Debug, Clone, PartialEq)]
pub enum Refused {
    /// These very bytes were quarantined under this key.
    Quarantined(Box<QuarantineRecord>),
    /// The key holds a different kernel (see `crate::conflict`); recorded.
    Conflict(Box<ConflictRecord>),
}

/// What a Put of an envelope did.
#[derive(Debug, Clone, PartialEq)]
pub enum Stored {
    /// The key held no artifact: these bytes are stored.
    New,
    /// The key held the same artifact: its lifetime is renewed, its publisher kept.
    Refreshed,
    /// The key held an older version of one of kiln's own changing records (a recipe book, a
    /// snapshot manifest or listing): replaced, nothing recorded.
    Updated,
    /// The key held different bytes of a blob: replaced, and the conflict recorded.
    Replaced(Box<ConflictRecord>),
}

/// The outcome of a read.
#[derive(Debug, Clone, PartialEq)]
pub enum Lookup<T> {
    Hit(T),
    Miss,
    /// A damaged value, already deleted.
    Corrupt(LayoutError),
}

/// The outcome of an acquire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acquired {
    /// The caller holds the lease now.
    Taken,
    /// Another holder has it.
    Held,
    /// The key holds an entry already: no lease was taken.
    Present,
}

/// How many times a read of a chunked artifact retries when a writer replaced the head between
/// its two round trips. More than one replacement in that window means a key hammered by writers;
/// it is then answered as a miss.
const READ_ATTEMPTS: usize = 3;

/// The cache over one Redis connection.
#[derive(Debug, Clone)]
pub struct Store {
    redis: Redis,
    /// TTL of artifacts and manifests, slid on read.
    ttl_ms: u64,
    /// A head recording more than this is damaged (Put refuses larger envelopes).
    max_envelope: u64,
    /// What [`Store::get_many`] read lately, already verified.
    hot: HotValues,
}

impl Store {
    pub fn new(redis: Redis, ttl: Duration, max_envelope: u64) -> Self {
        Store { redis, ttl_ms: ttl.as_millis().max(1) as u64, max_envelope, hot: HotValues::off() }
    }

    /// Serves [`Store::get_many`]'s recent envelopes from `hot`.
    pub fn with_hot(self, hot: HotValues) -> Self {
        Store { hot, ..self }
    }

    pub fn mode(&self) -> &'static str {
        self.redis.mode()
    }

    /// The Redis connection, for reads that live beside the store (the fleet page's, the torch
    /// job ledger's).
    pub fn redis(&self) -> &Redis {
        &self.redis
    }

    pub async fn ping(&self) -> Result<(), Error> {
        let mut con = self.redis.clone();
        redis::cmd("PING").query_async::<Value>(&mut con).await?;
        Ok(())
    }

    /// Whether `key` holds an artifact: its head, which a write stores last.
    pub async fn contains(&self, key: &CacheKey) -> Result<bool, Error> {
        let mut con = self.redis.clone();
        let n: i64 = redis::cmd("EXISTS").arg(layout::head_key(key)).query_async(&mut con).await?;
        Ok(n > 0)
    }

    /// An artifact or a negative entry. The artifact wins where both exist.
    pub async fn get(&self, key: &CacheKey) -> Result<Lookup<Entry>, Error> {
        let mut con = self.redis.clone();
        let mut pipe = redis::pipe();
        add_read(&mut pipe, key, self.ttl_ms);
        let (head, negative): ReadPair = pipe.query_async(&mut con).await?;
        self.entry(key, head, negative).await
    }

    /// [`Store::get`] for several keys, in their order, for `BatchGet`: envelopes read in the
    /// last moment come from memory ([`HotValues`]), the rest from Redis, and those are kept.
    pub async fn get_many(&self, keys: &[CacheKey]) -> Vec<Result<Lookup<Entry>, Error>> {
        let mut answers: Vec<Option<Result<Lookup<Entry>, Error>>> = keys
            .iter()
            .map(|key| self.hot.get(key).map(|v| Ok(Lookup::Hit(Entry::Envelope(Published::clone(&v))))))
            .collect();
        let cold: Vec<CacheKey> = keys.iter().zip(&answers).filter(|(_, a)| a.is_none()).map(|(k, _)| *k).collect();
        if cold.is_empty() {
            return answers.into_iter().flatten().collect();
        }
        let mut read = self.read_many(&cold).await.into_iter();
        for (key, answer) in keys.iter().zip(answers.iter_mut()) {
            if answer.is_none() {
                let found = read.next().unwrap_or_else(|| Err(Error::Redis(unexpected_reply())));
                if let Ok(Lookup::Hit(Entry::Envelope(published))) = &found {
                    self.hot.insert(*key, published);
                }
                *answer = Some(found);
            }
        }
        answers.into_iter().flatten().collect()
    }

    /// Reads `keys` from Redis. On a standalone Redis every key's reads go in one pipelined round
    /// trip; a cluster keeps each key's artifact in a slot of its own, so there each key is read
    /// by itself (the reads still share the nodes' connections).
    async fn read_many(&self, keys: &[CacheKey]) -> Vec<Result<Lookup<Entry>, Error>> {
        if matches!(self.redis, Redis::Cluster(_)) {
            return futures_util::future::join_all(keys.iter().map(|key| self.get(key))).await;
        }
        let mut pipe = redis::pipe();
        for key in keys {
            add_read(&mut pipe, key, self.ttl_ms);
        }
        let mut con = self.redis.clone();
        let read = async {
            let pairs = pair_up(pipe.query_async::<Vec<Value>>(&mut con).await?)?;
            if pairs.len() != keys.len() {
                return Err(unexpected_reply());
            }
            Ok(pairs)
        };
        let pairs = match read.await {
            Ok(pairs) => pairs,
            Err(e) => return keys.iter().map(|_| Err(Error::Redis(e.clone()))).collect(),
        };
        let mut answers = Vec::with_capacity(keys.len());
        for (key, (head, negative)) in keys.iter().zip(pairs) {
            answers.push(self.entry(key, head, negative).await);
        }
        answers
    }

    /// What one key's head and negative values mean (see [`Store::get`]).
    async fn entry(
        &self,
        key: &CacheKey,
        head: Option<Vec<u8>>,
        negative: Option<Vec<u8>>,
    ) -> Result<Lookup<Entry>, Error> {
        if let Some(head) = head {
            return Ok(match self.read_artifact(key, head).await? {
                Lookup::Hit(published) => Lookup::Hit(Entry::Envelope(published)),
                Lookup::Miss => Lookup::Miss,
                Lookup::Corrupt(e) => Lookup::Corrupt(e),
            });
        }
        let Some(negative) = negative else {
            return Ok(Lookup::Miss);
        };
        Ok(match NegativeEntry::decode(negative.as_slice()) {
            Ok(entry) => Lookup::Hit(Entry::Negative(entry)),
            Err(_) => {
                let mut con = self.redis.clone();
                redis::cmd("DEL").arg(layout::negative_key(key)).query_async::<Value>(&mut con).await?;
                Lookup::Corrupt(LayoutError::BadHead)
            }
        })
    }

    /// Reassembles and verifies the artifact whose head value is `head`.
    async fn read_artifact(&self, key: &CacheKey, mut head: Vec<u8>) -> Result<Lookup<Published>, Error> {
        for _ in 0..READ_ATTEMPTS {
            let (record, first) = match layout::parse_head(&head) {
                Ok(parsed) if parsed.0.total_len <= self.max_envelope => parsed,
                Ok(_) | Err(_) => return self.discard(key, &head, 1, LayoutError::BadHead).await,
            };
            let published = |envelope| {
                let provenance = Some(&record.provenance)
                    .filter(|p| !p.is_empty())
                    .and_then(|p| Provenance::decode(p.as_slice()).ok());
                Lookup::Hit(Published { envelope, provenance })
            };
            if record.pieces == 1 {
                return match layout::assemble(key, &record, first, Vec::new()) {
                    Ok(envelope) => Ok(published(envelope)),
                    Err(e) => self.discard(key, &head, 1, e).await,
                };
            }
            let mut pipe = redis::pipe();
            pipe.atomic().cmd("GET").arg(layout::head_key(key));
            for n in 1..record.pieces {
                pipe.cmd("GETEX").arg(layout::piece_key(key, n)).arg("PX").arg(self.ttl_ms);
            }
            let mut con = self.redis.clone();
            let mut values: Vec<Option<Vec<u8>>> = pipe.query_async(&mut con).await?;
            let rest = values.split_off(1);
            match values.pop().flatten() {
                None => return Ok(Lookup::Miss),
                Some(again) if again != head => head = again,
                Some(_) => {
                    return match layout::assemble(key, &record, first, rest) {
                        Ok(envelope) => Ok(published(envelope)),
                        Err(e) => self.discard(key, &head, record.pieces, e).await,
                    };
                }
            }
        }
        Ok(Lookup::Miss)
    }

    /// Deletes a damaged artifact (its head and `pieces - 1` further pieces) unless a writer has
    /// replaced the head since it was read.
    async fn discard<T>(&self, key: &CacheKey, head: &[u8], pieces: u32, why: LayoutError) -> Result<Lookup<T>, Error> {
        self.hot.forget(key);
        let mut invocation = DELETE_IF_SAME.key(layout::head_key(key));
        for n in 1..pieces {
            invocation.key(layout::piece_key(key, n));
        }
        invocation.arg(head);
        let mut con = self.redis.clone();
        invocation.invoke_async::<i64>(&mut con).await?;
        Ok(Lookup::Corrupt(why))
    }

    /// Stores a verified envelope, recording `provenance` in its head, and deletes any negative
    /// entry, then announces it. Refused when these very bytes were quarantined under the key (a
    /// publisher gone bad cannot simply publish them again), and when the key holds an artifact
    /// that `judge` (given the held envelope) finds to be a different kernel: a conflict, recorded
    /// with both writers, the held artifact marked disputed. The same artifact again renews the
    /// held one's lifetime and keeps its publisher; a newer version of one of kiln's own changing
    /// records replaces it, unrecorded; a different blob replaces it, recorded.
    pub async fn put_envelope(
        &self,
        key: &CacheKey,
        envelope: &[u8],
        provenance: &Provenance,
        judge: impl Fn(&[u8]) -> Judgement,
    ) -> Result<Result<Stored, Refused>, Error> {
        if let Some(record) = self.quarantine_record(key).await?
            && record.served_digest == blake3::hash(envelope).to_hex().as_str()
        {
            return Ok(Err(Refused::Quarantined(Box::new(record))));
        }
        for _ in 0..READ_ATTEMPTS {
            let Some((head, held)) = self.held(key).await? else {
                if self.write(key, envelope, provenance, "new").await? {
                    return self.announce(key).await.map(|()| Ok(Stored::New));
                }
                continue; // another writer got there first: judge against its bytes
            };
            let judgement = if held.envelope == envelope { Judgement::Same } else { judge(&held.envelope) };
            let (detail, kernel) = match judgement {
                Judgement::Same => {
                    self.refresh(key, &head).await?;
                    return self.announce(key).await.map(|()| Ok(Stored::Refreshed));
                }
                Judgement::Update => {
                    self.write(key, envelope, provenance, "any").await?;
                    return self.announce(key).await.map(|()| Ok(Stored::Updated));
                }
                Judgement::Conflict { detail, kernel } => (detail, kernel),
            };
            let record = ConflictRecord {
                key: key.to_hex(),
                held: held.provenance,
                held_digest: blake3::hash(&held.envelope).to_hex().to_string(),
                offered: Some(provenance.clone()),
                offered_digest: blake3::hash(envelope).to_hex().to_string(),
                unix_ms: now_ms(),
                detail,
                refused: kernel,
            };
            if kernel {
                self.dispute(key, &head, &record).await?;
                return Ok(Err(Refused::Conflict(Box::new(record))));
            }
            self.write(key, envelope, provenance, "any").await?;
            self.record_conflict(key, &record).await?;
            return self.announce(key).await.map(|()| Ok(Stored::Replaced(Box::new(record))));
        }
        Err(Error::Contended { key: key.to_hex() })
    }

    /// The artifact `key` holds, with its head value as read (for a later compare-and-set),
    /// without sliding its lifetime. `None` when it holds none (or held a damaged one, deleted).
    async fn held(&self, key: &CacheKey) -> Result<Option<(Vec<u8>, Published)>, Error> {
        let mut con = self.redis.clone();
        let head: Option<Vec<u8>> = redis::cmd("GET").arg(layout::head_key(key)).query_async(&mut con).await?;
        let Some(head) = head else { return Ok(None) };
        Ok(match self.read_artifact(key, head.clone()).await? {
            Lookup::Hit(published) => Some((head, published)),
            Lookup::Miss | Lookup::Corrupt(_) => None,
        })
    }

    /// Writes an envelope's head and pieces (see [`WRITE`]; `mode` is its ARGV[1]).
    async fn write(&self, key: &CacheKey, envelope: &[u8], provenance: &Provenance, mode: &str) -> Result<bool, Error> {
        self.hot.forget(key);
        let (head, rest) = layout::split(envelope, &provenance.encode_to_vec());
        let mut invocation = WRITE.key(layout::head_key(key));
        invocation.key(layout::negative_key(key));
        for i in 0..rest.len() {
            invocation.key(layout::piece_key(key, i as u32 + 1));
        }
        invocation.arg(mode).arg(self.ttl_ms).arg(head);
        for piece in &rest {
            invocation.arg(*piece);
        }
        let mut con = self.redis.clone();
        let written: i64 = invocation.invoke_async(&mut con).await?;
        // Again: a BatchGet that read the old value while this wrote may have kept it.
        self.hot.forget(key);
        Ok(written == 1)
    }

    /// Renews the lifetime of the artifact whose head is `head`, and deletes any negative entry:
    /// a re-publish of what the key holds.
    async fn refresh(&self, key: &CacheKey, head: &[u8]) -> Result<(), Error> {
        let pieces = layout::parse_head(head).map_or(1, |(h, _)| h.pieces);
        let mut pipe = redis::pipe();
        pipe.atomic();
        pipe.cmd("PEXPIRE").arg(layout::head_key(key)).arg(self.ttl_ms).ignore();
        for n in 1..pieces {
            pipe.cmd("PEXPIRE").arg(layout::piece_key(key, n)).arg(self.ttl_ms).ignore();
        }
        pipe.cmd("DEL").arg(layout::negative_key(key)).ignore();
        let mut con = self.redis.clone();
        pipe.query_async::<()>(&mut con).await?;
        Ok(())
    }

    /// Stores a negative entry for `ttl` (it does not slide), then announces it, so waiters learn
    /// of a failed compile at once.
    pub async fn put_negative(&self, key: &CacheKey, entry: &NegativeEntry, ttl: Duration) -> Result<(), Error> {
        let mut con = self.redis.clone();
        redis::cmd("SET")
            .arg(layout::negative_key(key))
            .arg(entry.encode_to_vec())
            .arg("PX")
            .arg(ttl.as_millis().max(1) as u64)
            .query_async::<()>(&mut con)
            .await?;
        self.announce(key).await
    }

    /// `PUBLISH` on the one channel. A separate command rather than part of the transaction: in
    /// a cluster the channel name hashes to another slot than the key, and a transaction may
    /// touch one slot only. In a cluster it goes through the master that holds the key (see
    /// [`Redis::publish_via`]).
    async fn announce(&self, key: &CacheKey) -> Result<(), Error> {
        let via = layout::head_key(key);
        self.redis.publish_via(&via, layout::CHANNEL, &key.to_hex()).await.map_err(Error::Announce)
    }

    pub async fn get_manifest(&self, graph_key: &CacheKey) -> Result<Lookup<Vec<CacheKey>>, Error> {
        let name = layout::manifest_key(graph_key);
        let mut con = self.redis.clone();
        let value: Option<Vec<u8>> = getex(&name, self.ttl_ms).query_async(&mut con).await?;
        let Some(value) = value else {
            return Ok(Lookup::Miss);
        };
        match layout::decode_manifest(&value) {
            Ok(keys) => Ok(Lookup::Hit(keys)),
            Err(e) => {
                DELETE_IF_SAME.key(&name).arg(value).invoke_async::<i64>(&mut con).await?;
                Ok(Lookup::Corrupt(e))
            }
        }
    }

    pub async fn put_manifest(&self, graph_key: &CacheKey, kernel_keys: &[CacheKey]) -> Result<(), Error> {
        let mut con = self.redis.clone();
        redis::cmd("SET")
            .arg(layout::manifest_key(graph_key))
            .arg(layout::encode_manifest(kernel_keys))
            .arg("PX")
            .arg(self.ttl_ms)
            .query_async::<()>(&mut con)
            .await?;
        Ok(())
    }

    /// Takes the lease for `holder` unless another holds it or the key already holds an entry.
    pub async fn acquire_lease(&self, key: &CacheKey, holder: &str, ttl: Duration) -> Result<Acquired, Error> {
        let mut con = self.redis.clone();
        let answer: i64 = ACQUIRE
            .key(layout::head_key(key))
            .key(layout::negative_key(key))
            .key(layout::lease_key(key))
            .arg(holder)
            .arg(ttl.as_millis() as u64)
            .invoke_async(&mut con)
            .await?;
        Ok(match answer {
            1 => Acquired::Taken,
            2 => Acquired::Present,
            _ => Acquired::Held,
        })
    }

    /// Whether `holder` still held the lease; if so it now lives `ttl` from now.
    pub async fn renew_lease(&self, key: &CacheKey, holder: &str, ttl: Duration) -> Result<bool, Error> {
        let mut con = self.redis.clone();
        let renewed: i64 =
            RENEW.key(layout::lease_key(key)).arg(holder).arg(ttl.as_millis() as u64).invoke_async(&mut con).await?;
        Ok(renewed == 1)
    }

    /// Whether `holder` still held the lease; if so it is gone now, and the release is announced
    /// like a publish: waiters look for the artifact, and when the holder gave up without one
    /// they retry the lease at once instead of waiting out its TTL.
    pub async fn release_lease(&self, key: &CacheKey, holder: &str) -> Result<bool, Error> {
        let mut con = self.redis.clone();
        let released: i64 = RELEASE.key(layout::lease_key(key)).arg(holder).invoke_async(&mut con).await?;
        if released == 1 {
            self.announce(key).await?;
        }
        Ok(released == 1)
    }
}

/// `GETEX name PX ttl`: reads a value and slides its TTL in one command.
fn getex(name: impl redis::ToRedisArgs, ttl_ms: u64) -> redis::Cmd {
    let mut cmd = redis::cmd("GETEX");
    cmd.arg(name).arg("PX").arg(ttl_ms);
    cmd
}

/// One key's artifact head and negative entry, as read.
type ReadPair = (Option<Vec<u8>>, Option<Vec<u8>>);

/// Adds the reads of one key to `pipe`: its artifact head (its TTL slid) and negative entry.
fn add_read(pipe: &mut redis::Pipeline, key: &CacheKey, ttl_ms: u64) {
    pipe.add_command(getex(layout::head_key(key), ttl_ms)).cmd("GET").arg(layout::negative_key(key));
}

/// A pipeline's flat replies as (head, negative) pairs.
fn pair_up(values: Vec<Value>) -> redis::RedisResult<Vec<ReadPair>> {
    let mut values = values.into_iter();
    let mut pairs = Vec::new();
    while let Some(head) = values.next() {
        let negative = values.next().ok_or_else(unexpected_reply)?;
        pairs.push((redis::from_redis_value(head)?, redis::from_redis_value(negative)?));
    }
    Ok(pairs)
}

fn unexpected_reply() -> redis::RedisError {
    redis::RedisError::from((
        redis::ErrorKind::UnexpectedReturnType,
        "a pipelined read answered another number of replies than it sent commands",
    ))
}
