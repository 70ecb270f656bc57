//! The torch workers as the graph engine uses them: started on first use (or warmed ahead), checked
//! against a request's environment, and compiling a graph nobody claimed.

use super::engine::GraphEngine;
use super::ledger::Outcome;
use super::recipe::Explanation;
use super::replies;
use crate::error::Error;
use crate::runtime::toolchain::torch::{Environment, TorchWorkers};
use bytes::Bytes;
use kiln_proto::CacheKey;
use kiln_proto::pb::{self, Tier};
use std::sync::Arc;
use std::time::Duration;

impl GraphEngine {
    /// The pool, started on first use; a failed start is retried by the next request.
    pub(super) async fn workers(&self) -> Result<&TorchWorkers, Error> {
        self.workers.get_or_try_init(|| TorchWorkers::start(&self.settings)).await.map_err(|reason| {
            Error::TorchUnavailable {
                reason: format!("{reason} (set KILN_PYTHON to an interpreter with torch installed)"),
            }
        })
    }

    /// Starts the pool in the background unless it is up; whether it was up, and its torch.
    pub fn warm(self: &Arc<Self>) -> Option<String> {
        if let Some(torch) = self.workers_up() {
            return Some(torch);
        }
        let state = Arc::clone(self);
        tokio::spawn(async move {
            if let Err(e) = state.workers().await {
                tracing::warn!(error = %e, "the torch workers did not start");
            }
        });
        None
    }

    /// The workers' torch version when they are up, without starting them.
    pub fn workers_up(&self) -> Option<String> {
        self.workers.get().map(|workers| workers.environment.torch.clone())
    }

    /// The workers, when they run `environment`; the refusal otherwise (counted).
    pub(super) async fn workers_for(&self, environment: &Environment) -> Result<&TorchWorkers, Error> {
        let workers = self.workers().await.inspect_err(|_| self.ledger.count(Outcome::Refused))?;
        if let Some((field, client, workers)) = environment.difference(&workers.environment) {
            self.ledger.count(Outcome::Refused);
            return Err(Error::TorchMismatch { field, client, workers });
        }
        Ok(workers)
    }

    /// The workers for a request that must compile: a refusal is a graph event too.
    pub(super) async fn workers_to_compile(
        &self,
        environment: &Environment,
        request: &pb::TorchGraphRequest,
        key: &CacheKey,
    ) -> Result<&TorchWorkers, Error> {
        self.workers_for(environment).await.inspect_err(|e| {
            self.ledger.event(&request.job, &request.name, &key.to_hex(), "refused", e.to_string());
        })
    }

    /// Compiles in a worker and stores a success everywhere (its publish releases the waiters).
    pub(super) async fn produce(
        &self,
        workers: &TorchWorkers,
        key: &CacheKey,
        payload: Bytes,
        timeout: Duration,
        request: &pb::TorchGraphRequest,
        why: Option<Explanation>,
    ) -> pb::TorchGraphReply {
        let answer = workers.compile(payload, timeout).await;
        let seconds = answer.compile_micros as f64 / 1e6;
        if !answer.ok || answer.artifacts.is_empty() {
            let last = answer.log.lines().last().unwrap_or_default();
            let detail = format!("the compile failed after {seconds:.1} s: {last}");
            self.ledger.event(&request.job, &request.name, &key.to_hex(), "failed", detail);
            self.ledger.count(Outcome::Failed);
            self.producer.cache().remember_failure(key, answer.log.clone(), answer.compile_micros).await;
            self.producer.published(key);
            return replies::failed_reply(answer.log, answer.compile_micros, key, Tier::Compiled);
        }
        self.ledger.count(Outcome::Compiled);
        let phases: Vec<String> = answer.phases.iter().map(|(step, s)| format!("{step} {s:.2} s")).collect();
        let missed = why.map_or_else(|| "no tier held it".to_string(), |why| why.line());
        let detail = format!("{missed}: compiled in {seconds:.1} s ({})", phases.join(", "));
        self.ledger.event(&request.job, &request.name, &key.to_hex(), "compiled", detail);
        self.store(key, answer.artifacts.to_vec(), answer.compile_micros).await;
        pb::TorchGraphReply {
            ok: true,
            artifacts: answer.artifacts,
            tier: Tier::Compiled as i32,
            compile_micros: answer.compile_micros,
            log: answer.log,
            key: key.to_hex(),
            compile_here: false,
        }
    }
}
