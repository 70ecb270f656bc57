//! Sends processes' torch.compile accounts on to the fleet ledger (kiln-cache's
//! `ReportTorchJob`), so a job's return is merged across hosts, ranks and restarts. While the
//! fleet cache cannot be reached, accounts are kept here (each process's latest: they are
//! cumulative, so the latest says all) and sent when it answers again.

use crate::core::fleet::tier::RemoteTier;
use kiln_proto::pb;
use kiln_serve::every::Every;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Accounts kept while the fleet cannot be reached; the oldest is dropped past it.
pub const MAX_PENDING: usize = 1024;
/// How long a report waits for the fleet before its process is answered with this host's figures.
const SEND_WAIT: Duration = Duration::from_secs(3);
/// How often kept accounts are tried again.
pub const RETRY_EVERY: Duration = Duration::from_secs(10);

#[derive(Debug)]
pub struct Forwarder {
    tier: Arc<RemoteTier>,
    /// (job, account), oldest first; one per process.
    pending: Mutex<VecDeque<(String, pb::TorchProcessCosts)>>,
}

impl Forwarder {
    pub fn new(tier: Arc<RemoteTier>) -> Self {
        Forwarder { tier, pending: Mutex::default() }
    }

    fn pending(&self) -> std::sync::MutexGuard<'_, VecDeque<(String, pb::TorchProcessCosts)>> {
        self.pending.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Accounts waiting for the fleet.
    pub fn waiting(&self) -> usize {
        self.pending().len()
    }

    /// Sends one account; the fleet's return for the job, or why not (the account is then kept
    /// and sent later).
    pub async fn send(&self, job: &str, costs: pb::TorchProcessCosts) -> Result<pb::TorchJobReturn, String> {
        let why = if self.tier.usable() {
            match tokio::time::timeout(SEND_WAIT, self.tier.report_torch_job(job, costs.clone())).await {
                Ok(Ok(ret)) => return Ok(ret),
                Ok(Err(e)) => e.to_string(),
                Err(_) => format!("no answer in {} s", SEND_WAIT.as_secs()),
            }
        } else {
            self.tier.state().reason()
        };
        self.keep(job, costs);
        Err(why)
    }

    /// Keeps an account for later, replacing the same process's older one.
    fn keep(&self, job: &str, costs: pb::TorchProcessCosts) {
        let mut pending = self.pending();
        pending.retain(|(j, c)| !(j == job && c.process == costs.process));
        pending.push_back((job.to_owned(), costs));
        if pending.len() > MAX_PENDING {
            pending.pop_front();
            tracing::warn!(
                kept = MAX_PENDING,
                "the fleet cache is unreachable; dropped the oldest torch job account kept for it"
            );
        }
    }

    /// Sends what was kept, oldest first, until one fails (it and the rest are kept). Returns
    /// how many were sent.
    pub async fn flush(&self) -> usize {
        let mut sent = 0;
        while self.tier.usable() {
            let Some((job, costs)) = self.pending().pop_front() else { break };
            match self.tier.report_torch_job(&job, costs.clone()).await {
                Ok(_) => sent += 1,
                Err(e) => {
                    // Back in front, unless the process reported again meanwhile.
                    let mut pending = self.pending();
                    if !pending.iter().any(|(j, c)| *j == job && c.process == costs.process) {
                        pending.push_front((job, costs));
                    }
                    tracing::debug!(error = %e, "torch job accounts not sent to the fleet yet");
                    break;
                }
            }
        }
        if sent > 0 {
            tracing::info!(sent, "sent the torch job accounts kept while the fleet cache was unreachable");
        }
        sent
    }

    /// Jobs' returns from the fleet ledger.
    pub async fn list(&self, job: &str, limit: u32) -> Result<pb::TorchJobsReply, String> {
        if !self.tier.usable() {
            return Err(self.tier.state().reason());
        }
        match tokio::time::timeout(SEND_WAIT, self.tier.list_torch_jobs(job, limit)).await {
            Ok(Ok(reply)) => Ok(reply),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!("no answer in {} s", SEND_WAIT.as_secs())),
        }
    }

    /// Tries what was kept every [`RETRY_EVERY`] until `stop`.
    pub async fn run(self: Arc<Self>, stop: CancellationToken) {
        let mut every = Every::new(RETRY_EVERY, stop);
        while every.tick().await {
            if self.waiting() > 0 {
                self.flush().await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Metrics;
    use kiln_cache_client::FakeCache;

    fn costs(process: &str, steps: u64) -> pb::TorchProcessCosts {
        pb::TorchProcessCosts {
            process: process.into(),
            rank: -1,
            steps,
            graphs: vec![pb::TorchGraphCost { name: "g".into(), compiled_calls: steps, ..Default::default() }],
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn accounts_wait_for_the_fleet_and_the_latest_of_each_process_is_sent() {
        let fake = FakeCache::default();
        let tier = RemoteTier::new(fake.clone(), "http://fake", Arc::new(Metrics::new()));
        let forward = Forwarder::new(Arc::clone(&tier));
        assert_eq!(forward.send("j", costs("proc-0001", 5)).await.unwrap().steps, 5);
        fake.set_down(true);
        assert!(forward.send("j", costs("proc-0001", 10)).await.is_err());
        // The failure opened the breaker: later accounts are kept without a call.
        assert!(forward.send("j", costs("proc-0001", 20)).await.is_err());
        assert!(forward.send("j", costs("proc-0002", 7)).await.is_err());
        assert_eq!(forward.waiting(), 2, "one account per process");
        fake.set_down(false);
        assert_eq!(forward.flush().await, 0, "nothing is sent while the breaker is open");
        tokio::spawn(Arc::clone(&tier).probe(CancellationToken::new()));
        while !tier.usable() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(forward.flush().await, 2);
        let reply = forward.list("j", 10).await.unwrap();
        assert_eq!((reply.jobs.len(), reply.jobs[0].steps, reply.jobs[0].processes), (1, 27, 2));
    }
}
