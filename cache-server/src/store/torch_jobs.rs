//! The fleet's torch.compile ledger: per job, its processes' latest accounts, merged by
//! `kiln_proto::torch_ledger` across processes, ranks, hosts and restarts.
//!
//! One value per job (`kiln:v1:{torch}:j:<job>`: an 8-byte version, then the job's
//! `TorchJobLedger`), and an index of jobs scored by their last report (`kiln:v1:{torch}:jobs`),
//! both under the `{torch}` hash tag, so one slot of a cluster. A report reads the job's value,
//! merges in Rust and writes back only while the version is still the one read (a Lua
//! compare-and-set), retrying when another replica wrote meanwhile. Bounded: a job's value by the
//! ledger's own bounds, jobs by [`MAX_JOBS`] (the least recently reported are deleted) and by
//! [`JOB_TTL`] without a report.

use super::Store;
use crate::backend::Redis;
use crate::error::Error;
use crate::layout;
use kiln_proto::pb::{TorchJobLedger, TorchJobReturn, TorchProcessCosts};
use kiln_proto::torch_ledger;
use prost::Message;
use redis::Script;
use std::sync::LazyLock;
use std::time::Duration;

/// Jobs kept; past it the least recently reported go.
pub const MAX_JOBS: usize = 1000;
/// How long a job is kept after its last report.
pub const JOB_TTL: Duration = Duration::from_secs(30 * 24 * 3600);
/// Compare-and-set attempts of one report before it is answered ABORTED.
const ATTEMPTS: usize = 8;

/// KEYS[1] the job's value, KEYS[2] the index. ARGV: the version read (8 bytes, or empty for no
/// value), the new value, its lifetime in ms, the time (the index's score) and the job. 1 when
/// written, 0 when the value changed since it was read.
static WRITE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "local held = redis.call('GET', KEYS[1]) \
         local version = held and string.sub(held, 1, 8) or '' \
         if version ~= ARGV[1] then return 0 end \
         redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3]) \
         redis.call('ZADD', KEYS[2], ARGV[4], ARGV[5]) \
         return 1",
    )
});

/// A job's stored value as read: its version (empty when there was none) and ledger.
fn decode(job: &str, value: Option<Vec<u8>>) -> (Vec<u8>, TorchJobLedger) {
    let fresh = || TorchJobLedger { job: job.to_owned(), ..Default::default() };
    let Some(value) = value else { return (Vec::new(), fresh()) };
    let Some((version, body)) = value.split_at_checked(8) else { return (value, fresh()) };
    match TorchJobLedger::decode(body) {
        Ok(ledger) => (version.to_vec(), ledger),
        Err(e) => {
            // Overwritten by the next write (the version still guards it).
            tracing::warn!(%job, error = %e, "a torch job's fleet ledger did not decode; starting it again");
            (version.to_vec(), fresh())
        }
    }
}

/// The version after `version`.
fn next(version: &[u8]) -> [u8; 8] {
    let n = version.try_into().map(u64::from_le_bytes).unwrap_or(0);
    n.wrapping_add(1).to_le_bytes()
}

impl Store {
    /// Merges a process's account (validated) into the job's ledger; the job's return.
    pub async fn report_torch_job(
        &self,
        job: &str,
        process: TorchProcessCosts,
        now_ms: u64,
    ) -> Result<TorchJobReturn, Error> {
        let mut con = self.redis.clone();
        let key = layout::torch_job_key(job);
        for _ in 0..ATTEMPTS {
            let held: Option<Vec<u8>> = redis::cmd("GET").arg(&key).query_async(&mut con).await?;
            let (version, mut ledger) = decode(job, held);
            torch_ledger::record(&mut ledger, process.clone());
            let mut value = next(&version).to_vec();
            ledger.encode(&mut value).unwrap_or_default();
            let written: i64 = WRITE
                .key(&key)
                .key(layout::TORCH_JOBS)
                .arg(version)
                .arg(value)
                .arg(JOB_TTL.as_millis() as u64)
                .arg(now_ms)
                .arg(job)
                .invoke_async(&mut con)
                .await?;
            if written == 1 {
                trim(&self.redis).await?;
                return Ok(torch_ledger::job_return(&ledger));
            }
        }
        Err(Error::Contended { key: format!("torch job {job}") })
    }
}

/// Deletes the least recently reported jobs past [`MAX_JOBS`], and index entries whose job
/// expired.
async fn trim(redis: &Redis) -> Result<(), Error> {
    let mut con = redis.clone();
    let count: usize = redis::cmd("ZCARD").arg(layout::TORCH_JOBS).query_async(&mut con).await?;
    if count <= MAX_JOBS {
        return Ok(());
    }
    let old: Vec<String> =
        redis::cmd("ZRANGE").arg(layout::TORCH_JOBS).arg(0).arg(count - MAX_JOBS - 1).query_async(&mut con).await?;
    let mut pipe = redis::pipe();
    for job in &old {
        pipe.cmd("DEL").arg(layout::torch_job_key(job)).ignore();
        pipe.cmd("ZREM").arg(layout::TORCH_JOBS).arg(job).ignore();
    }
    pipe.query_async::<()>(&mut con).await?;
    Ok(())
}

/// Jobs' returns, most recently reported first: `job`'s alone when not empty, else at most
/// `limit`. A job whose value expired is left out (and leaves the index).
pub async fn list(redis: &Redis, job: &str, limit: usize) -> Result<Vec<TorchJobReturn>, Error> {
    let mut con = redis.clone();
    let jobs: Vec<String> = if job.is_empty() {
        redis::cmd("ZREVRANGE").arg(layout::TORCH_JOBS).arg(0).arg(limit.max(1) - 1).query_async(&mut con).await?
    } else {
        vec![job.to_owned()]
    };
    if jobs.is_empty() {
        return Ok(Vec::new());
    }
    let keys: Vec<String> = jobs.iter().map(|j| layout::torch_job_key(j)).collect();
    let values: Vec<Option<Vec<u8>>> = redis::cmd("MGET").arg(keys).query_async(&mut con).await?;
    let mut out = Vec::new();
    let mut gone = Vec::new();
    for (job, value) in jobs.iter().zip(values) {
        match value {
            Some(v) => out.push(torch_ledger::job_return(&decode(job, Some(v)).1)),
            None => gone.push(job),
        }
    }
    if !gone.is_empty() && job.is_empty() {
        redis::cmd("ZREM").arg(layout::TORCH_JOBS).arg(gone).query_async::<()>(&mut con).await?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_is_a_version_then_the_ledger_and_a_bad_one_starts_again() {
        let ledger = TorchJobLedger { job: "j".into(), ..Default::default() };
        let mut value = next(&[]).to_vec();
        ledger.encode(&mut value).unwrap();
        let (version, read) = decode("j", Some(value));
        assert_eq!((version.as_slice(), read), (1u64.to_le_bytes().as_slice(), ledger));
        assert_eq!(next(&version), 2u64.to_le_bytes());
        let (version, read) = decode("j", Some(b"12345678\xff\xff".to_vec()));
        assert_eq!((version.as_slice(), read.processes.len()), (b"12345678".as_slice(), 0));
        assert_eq!(decode("j", None).0, Vec::<u8>::new());
    }
}
