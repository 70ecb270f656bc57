//! Running audits: the background loop that works through the queue within the CPU share, and
//! one audit, which `kiln audit` also runs on demand.

use super::publisher::Claim;
use super::{Auditor, Sample, Verdict, compare};
use crate::core::engine::Engine;
use crate::domain::Priority;
use crate::runtime::toolchain::Compiled;
use kiln_cache_client::Lookup;
use kiln_proto::pb::Provenance;
use std::sync::Arc;
use std::time::Instant;
use tokio_util::sync::CancellationToken;

/// How long an audit waits after it is taken from the queue: long enough for the answer of the
/// request that fetched the artifact (a warm start of a whole graph takes milliseconds) to go out
/// first.
const SETTLE: std::time::Duration = std::time::Duration::from_millis(250);

/// Audits what [`Auditor::consider`] queued, one at a time at background priority, resting
/// after each so that audits use at most the policy's CPU share, until `stop`.
pub async fn run(engine: Arc<Engine>, auditor: Arc<Auditor>, stop: CancellationToken) {
    let Some(mut queue) = auditor.take_receiver() else { return };
    let share = auditor.policy().cpu_share.clamp(0.001, 1.0);
    loop {
        let (sample, claim) = tokio::select! {
            _ = stop.cancelled() => return,
            sample = queue.recv() => match sample {
                Some(sample) => sample,
                None => return,
            },
        };
        // The request that fetched the artifact is still sending its answer: an audit waits for
        // it rather than take a core beside it.
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(SETTLE) => {}
        }
        let started = Instant::now();
        let (verdict, publisher) = audit_one(&engine, &auditor, &sample, Priority::Background, true).await;
        tracing::debug!(key = %sample.key, ?publisher, ?claim, verdict = ?verdict, took = ?started.elapsed(), "audited");
        auditor.record(&verdict, &claim, publisher.as_ref());
        let rest = started.elapsed().mul_f64(1.0 / share - 1.0);
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(rest) => {}
        }
    }
}

/// Reads `sample`'s key from the fleet, compiles its inputs here (into no cache), and compares.
/// A difference is quarantined in the fleet when `quarantine` is set, and dropped from this
/// host's tiers either way. The verdict, and who published what the fleet served.
pub async fn audit_one(
    engine: &Engine,
    auditor: &Auditor,
    sample: &Sample,
    priority: Priority,
    quarantine: bool,
) -> (Verdict, Option<Provenance>) {
    let Some(fleet) = engine.cache().fleet() else {
        return (Verdict::Failed("kilnd has no fleet cache (--remote)".into()), None);
    };
    let key = &sample.key;
    let (sealed, provenance) = match fleet.get_raw(key).await {
        Ok(Lookup::Hit(sealed, provenance)) => (sealed, provenance),
        Ok(_) => return (Verdict::Absent, None),
        Err(e) => return (Verdict::Failed(format!("the fleet cache did not answer: {e}")), None),
    };
    let served = match fleet.open(key, &sealed) {
        Ok(artifact) => artifact,
        Err(e) => return (Verdict::Failed(format!("the fleet's envelope does not verify: {e}")), provenance),
    };
    let output = match engine.compile_for_audit(&sample.source, &sample.target, priority).await {
        Compiled::Ok(output) => output,
        Compiled::Failed { log, .. } => {
            let first = log.lines().find(|l| !l.trim().is_empty()).unwrap_or("no log");
            return (Verdict::Failed(format!("this host's compile failed: {first}")), provenance);
        }
    };
    let Some(detail) = compare::difference(&served, &output) else { return (Verdict::Clean, provenance) };
    let publisher =
        super::Publisher::of(provenance.as_ref()).map_or_else(|| "an anonymous writer".into(), |p| p.to_string());
    tracing::error!(%key, %publisher, %detail, "audit: the fleet's artifact is not what its inputs compile to");
    let mut quarantined = false;
    if quarantine {
        match fleet.quarantine(key, &sealed, &output.cubin, &detail).await {
            Ok(answer) => {
                quarantined = answer.quarantined;
                auditor.quarantine.learn(answer.record.as_slice());
            }
            Err(e) => tracing::warn!(%key, error = %e, "could not quarantine the key in the fleet"),
        }
    }
    engine.cache().forget(key).await;
    (Verdict::Mismatch { detail, quarantined }, provenance)
}

/// `kiln audit`: audits each kernel of `job` now, at interactive priority, streaming one result
/// per kernel as it is done; kernels published by others than `publisher` (when given) are
/// skipped. Differences are quarantined unless `report_only`.
pub fn on_demand(
    engine: Arc<Engine>,
    job: crate::domain::Job,
    publisher: String,
    report_only: bool,
) -> Result<
    tokio_stream::wrappers::ReceiverStream<Result<kiln_proto::pb::AuditResult, tonic::Status>>,
    crate::error::Error,
> {
    let Some(auditor) = engine.cache().auditor() else {
        return Err(crate::error::Error::NoFleet { what: "audit" });
    };
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    let spawner = Arc::clone(&engine);
    spawner.work().spawn("audit", async move {
        for kernel in &job.kernels {
            let sample = Sample { key: kernel.key, source: kernel.source.clone(), target: job.target };
            let (verdict, provenance) = if kernel.refusal.is_some() {
                (Verdict::Failed(kernel.refusal.clone().unwrap_or_default()), None)
            } else if !publisher.is_empty() && !published_by(&engine, &sample, &publisher).await {
                let result = kiln_proto::pb::AuditResult {
                    id: kernel.id.clone(),
                    key: kernel.key.to_hex(),
                    verdict: "skipped".into(),
                    detail: format!("not published by {publisher}"),
                    ..Default::default()
                };
                if tx.send(Ok(result)).await.is_err() {
                    return;
                }
                continue;
            } else {
                audit_one(&engine, &auditor, &sample, Priority::Interactive, !report_only).await
            };
            auditor.record(&verdict, &Claim::Sampled, provenance.as_ref());
            let (detail, quarantined) = match &verdict {
                Verdict::Mismatch { detail, quarantined } => (detail.clone(), *quarantined),
                Verdict::Failed(why) => (why.clone(), false),
                Verdict::Absent => ("the fleet holds no artifact under this key".into(), false),
                Verdict::Clean => (String::new(), false),
            };
            let result = kiln_proto::pb::AuditResult {
                id: kernel.id.clone(),
                key: kernel.key.to_hex(),
                verdict: verdict.label().into(),
                publisher: provenance,
                detail,
                quarantined,
            };
            if tx.send(Ok(result)).await.is_err() {
                return;
            }
        }
    });
    Ok(tokio_stream::wrappers::ReceiverStream::new(rx))
}

/// Whether the fleet's artifact under `sample`'s key was published by `publisher`.
async fn published_by(engine: &Engine, sample: &Sample, publisher: &str) -> bool {
    let Some(fleet) = engine.cache().fleet() else { return false };
    matches!(fleet.get_raw(&sample.key).await, Ok(Lookup::Hit(_, Some(p))) if p.host == publisher)
}
