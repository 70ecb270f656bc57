//! What the `kiln.v1.TorchGraphs` handlers accept: each refusal names its field, before anything
//! is keyed, stored or compiled.

use super::bundle;
use crate::error::{Error, invalid};
use kiln_proto::pb;
use kiln_proto::{CacheKey, torch_ledger};
use std::time::Duration;

const MAX_VERSION: usize = 64;
const MAX_LABEL: usize = 256;
const MAX_TIMEOUT: Duration = Duration::from_secs(3600);
/// The longest a request from a process that cannot share its compile waits for one that can.
const MAX_WAIT_FOR_CLAIM: Duration = Duration::from_secs(10);

/// A compile or claim request.
pub(super) fn request(r: &pb::TorchGraphRequest, max_payload: u64) -> Result<(), Error> {
    if r.torch_version.is_empty() || r.torch_version.len() > MAX_VERSION {
        return Err(invalid("torch_version", format!("must be 1 to {MAX_VERSION} bytes")));
    }
    for (field, value) in [
        ("triton_version", &r.triton_version),
        ("python_version", &r.python_version),
        ("cuda_version", &r.cuda_version),
    ] {
        if value.len() > MAX_VERSION || value.chars().any(char::is_control) {
            return Err(invalid(field, format!("must be at most {MAX_VERSION} bytes, without control characters")));
        }
    }
    if r.payload.is_empty() || r.payload.len() as u64 > max_payload {
        return Err(invalid(
            "payload",
            format!("must be 1 to {max_payload} bytes (max_artifact_mb), got {}", r.payload.len()),
        ));
    }
    for (field, value) in [("job", &r.job), ("name", &r.name)] {
        if value.len() > MAX_LABEL {
            return Err(invalid(field, format!("longer than {MAX_LABEL} bytes")));
        }
    }
    if Duration::from_millis(u64::from(r.timeout_ms)) > MAX_TIMEOUT {
        return Err(invalid("timeout_ms", format!("at most {} ms", MAX_TIMEOUT.as_millis())));
    }
    if Duration::from_millis(u64::from(r.wait_for_claim_ms)) > MAX_WAIT_FOR_CLAIM {
        return Err(invalid("wait_for_claim_ms", format!("at most {} ms", MAX_WAIT_FOR_CLAIM.as_millis())));
    }
    Ok(())
}

/// A torch graph named in `Explain` (`field` says which): a name, and a job as requests give it.
pub(crate) fn graph_name(field: &str, r: &pb::TorchGraphName) -> Result<(), Error> {
    if r.name.is_empty() {
        return Err(invalid(format!("{field}.name"), "required: the graph's name, as kiln.torch reports it"));
    }
    for (part, value) in [("job", &r.job), ("name", &r.name)] {
        if value.len() > MAX_LABEL {
            return Err(invalid(format!("{field}.{part}"), format!("longer than {MAX_LABEL} bytes")));
        }
    }
    Ok(())
}

/// A claim's publish: its key, read.
pub(super) fn publish(r: &pb::PublishTorchGraphRequest, max_artifacts: u64) -> Result<CacheKey, Error> {
    let key: CacheKey = r.key.parse().map_err(|_| invalid("key", "must be 64 lowercase hex characters"))?;
    if r.artifacts.is_empty() || r.artifacts.len() as u64 > max_artifacts {
        return Err(invalid(
            "artifacts",
            format!("must be 1 to {max_artifacts} bytes (max_artifact_mb), got {}", r.artifacts.len()),
        ));
    }
    bundle::check(&r.artifacts).map_err(|reason| invalid("artifacts", reason))?;
    Ok(key)
}

/// A process's report of its graphs.
pub(super) fn report(r: &pb::TorchGraphReport) -> Result<(), Error> {
    let named = |e: torch_ledger::Invalid| invalid(e.field, e.reason);
    torch_ledger::check_job("job", &r.job, 0).map_err(named)?;
    if !r.process.is_empty() {
        torch_ledger::check_process_id("process", &r.process).map_err(named)?;
    }
    if r.rank < -1 {
        return Err(invalid("rank", "must be -1 (unknown) or more"));
    }
    torch_ledger::check_first_step("first_step_unix_ms", r.started_unix_ms, r.first_step_unix_ms).map_err(named)?;
    if r.fallbacks.len() > 64 {
        return Err(invalid("fallbacks", "more than 64 reasons"));
    }
    if r.graphs.len() > torch_ledger::MAX_REPORT_GRAPHS {
        return Err(invalid("graphs", format!("more than {} graphs", torch_ledger::MAX_REPORT_GRAPHS)));
    }
    for (i, g) in r.graphs.iter().enumerate() {
        torch_ledger::check_graph(&format!("graphs[{i}]"), g).map_err(named)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::fixtures::torch_graph_request as sample;

    #[test]
    fn every_bad_field_is_named() {
        let field = |r: pb::TorchGraphRequest| request(&r, 16).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(
            field(pb::TorchGraphRequest { torch_version: String::new(), ..sample() }).starts_with("torch_version:")
        );
        assert!(field(pb::TorchGraphRequest { payload: vec![], ..sample() }).starts_with("payload:"));
        assert!(field(pb::TorchGraphRequest { payload: vec![0; 17], ..sample() }).starts_with("payload:"));
        assert!(field(pb::TorchGraphRequest { job: "j".repeat(300), ..sample() }).starts_with("job:"));
        assert!(field(pb::TorchGraphRequest { timeout_ms: 4_000_000, ..sample() }).starts_with("timeout_ms:"));
        assert!(
            field(pb::TorchGraphRequest { python_version: "3".repeat(65), ..sample() }).starts_with("python_version:")
        );
        assert!(
            field(pb::TorchGraphRequest { triton_version: "3.6\n".into(), ..sample() }).starts_with("triton_version:")
        );
        assert!(request(&sample(), 16).is_ok());
        let bad = pb::TorchGraphReport {
            graphs: vec![pb::TorchGraphCost { compile_s: f64::NAN, ..Default::default() }],
            ..Default::default()
        };
        assert!(report(&bad).unwrap_err().to_string().starts_with("graphs[0].compile_s:"));
        let early = pb::TorchGraphReport { started_unix_ms: 2_000, first_step_unix_ms: 1_999, ..Default::default() };
        assert!(report(&early).unwrap_err().to_string().starts_with("first_step_unix_ms:"));
        assert!(report(&pb::TorchGraphReport { first_step_unix_ms: 2_000, ..early }).is_ok());
    }

    #[test]
    fn a_publish_names_its_bad_field() {
        let field = |r: pb::PublishTorchGraphRequest| publish(&r, 16).err().map(|e| e.to_string()).unwrap_or_default();
        let good = pb::PublishTorchGraphRequest { key: "ab".repeat(32), artifacts: vec![1], compile_micros: 1 };
        assert!(publish(&good, 16).is_ok());
        assert!(field(pb::PublishTorchGraphRequest { key: "nope".into(), ..good.clone() }).starts_with("key:"));
        assert!(field(pb::PublishTorchGraphRequest { artifacts: vec![], ..good.clone() }).starts_with("artifacts:"));
        assert!(
            field(pb::PublishTorchGraphRequest { artifacts: vec![0; 17], ..good.clone() }).starts_with("artifacts:")
        );
        let broken = b"KILNGB1\n\x02\0\0\0{}".to_vec();
        assert!(field(pb::PublishTorchGraphRequest { artifacts: broken, ..good }).starts_with("artifacts:"));
    }
}
