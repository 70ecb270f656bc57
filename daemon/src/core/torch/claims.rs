//! A claim's life: the grant handed to a process's `ClaimTorchGraph` stream, held until the
//! process publishes what it compiled, its compile timeout passes or its stream closes (a process
//! that went away releases its waiters at once), and the publish stored everywhere.

use super::engine::{GraphEngine, Handover, Start};
use super::ledger::Outcome;
use super::replies;
use crate::error::Error;
use kiln_proto::CacheKey;
use kiln_proto::pb::{self, Tier};
use std::sync::{Arc, PoisonError};
use tokio::sync::mpsc;
use tonic::Status;

impl GraphEngine {
    /// Runs one ClaimTorchGraph: the answer, or the grant, held until its publish lands, its
    /// compile timeout passes or the process goes away.
    pub async fn claim(
        self: Arc<Self>,
        request: pb::TorchGraphRequest,
        tx: mpsc::Sender<Result<pb::TorchGraphReply, Status>>,
    ) {
        // A process that prefers the workers compiles the graph itself only where none is idle.
        let idle_worker = request.prefer_workers && self.workers.get().is_some_and(|workers| workers.has_idle());
        let here = self.claims_allowed && !idle_worker;
        let started = tokio::select! {
            started = self.start(request, here) => started,
            _ = tx.closed() => return,
        };
        let handover = match started {
            Err(e) => {
                let _ = tx.send(Err(e.into())).await;
                return;
            }
            Ok(Start::Answer(reply)) => {
                let _ = tx.send(Ok(reply)).await;
                return;
            }
            Ok(Start::CompileHere(handover)) => handover,
        };
        let Handover { key, claim, timeout, mut grant } = *handover;
        let (job, name) = (claim.job.clone(), claim.name.clone());
        self.claims.lock().unwrap_or_else(PoisonError::into_inner).insert(key, claim);
        let reply = pb::TorchGraphReply {
            ok: true,
            compile_here: true,
            tier: Tier::Compiled as i32,
            key: key.to_hex(),
            ..Default::default()
        };
        if tx.send(Ok(reply)).await.is_ok() {
            let published = async {
                match grant.as_mut() {
                    Some(grant) => grant.published().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = published => {}
                _ = tx.closed() => {}
                _ = tokio::time::sleep(timeout) => {
                    tracing::warn!(%key, %job, %name, ?timeout, "a process's claim on a torch graph passed its compile timeout with no publish; released");
                }
            }
        }
        let unpublished = self.claims.lock().unwrap_or_else(PoisonError::into_inner).remove(&key);
        if let Some(claim) = unpublished {
            self.ledger.event(
                &claim.job,
                &claim.name,
                &key.to_hex(),
                "released",
                "the process compiled it and published nothing".into(),
            );
        }
        if let Some(grant) = grant {
            grant.release().await;
        }
    }

    /// Stores what a claim's process compiled under its granted `key` (checked by the handler),
    /// everywhere, and wakes the waiters.
    pub async fn publish(&self, key: CacheKey, request: pb::PublishTorchGraphRequest) -> Result<(), Error> {
        let claim =
            self.claims.lock().unwrap_or_else(PoisonError::into_inner).remove(&key).ok_or(Error::NoClaim { key })?;
        let seconds = request.compile_micros as f64 / 1e6;
        self.ledger.count(Outcome::Compiled);
        let missed = claim.why.map_or_else(|| "no tier held it".to_string(), |why| why.line());
        let detail = format!("{missed}: compiled in {seconds:.1} s by the process that claimed it");
        self.ledger.event(&claim.job, &claim.name, &key.to_hex(), "compiled", detail);
        self.store(&key, request.artifacts, request.compile_micros).await;
        Ok(())
    }

    /// Stores a graph's answer in every tier and the fleet, and wakes whoever waits for it.
    pub(super) async fn store(&self, key: &CacheKey, artifacts: Vec<u8>, compile_micros: u64) {
        let stored = replies::stored(key, artifacts, compile_micros);
        self.producer.cache().store_everywhere(key, stored).await;
        self.producer.published(key);
    }
}
