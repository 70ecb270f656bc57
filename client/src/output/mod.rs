//! How results look: pure functions from protobuf messages to lines of text or JSON, so that the
//! format is tested without a daemon and printing stays in one place (`report`).
//!
//! - this module: one kernel result or one job summary, as a human line or an NDJSON object;
//! - [`stats`]: the daemon's stats and the doctor's report, for humans;
//! - [`snapshot`]: job snapshots' saves, restores, listings and manifests;
//! - [`explain`]: why kernels missed;
//! - [`audit`]: audits of fleet artifacts and the fleet's quarantine records;
//! - [`roi`]: torch.compile jobs' returns.

pub mod audit;
pub mod explain;
pub mod roi;
pub mod snapshot;
pub mod stats;

use kiln_proto::pb;
use serde_json::{Map, Value, json};
use std::fmt::Write as _;
use std::time::Duration;

/// `ok`, `failed` or `miss`: the outcome as scripts match on it.
pub fn outcome_label(outcome: pb::Outcome) -> &'static str {
    match outcome {
        pb::Outcome::Ok => "ok",
        pb::Outcome::Failed => "failed",
        pb::Outcome::Miss => "miss",
        pb::Outcome::Unspecified => "unspecified",
    }
}

/// `memory`, `disk`, `remote`, `compiled` or `joined`; `None` when no tier served the kernel
/// (a lookup miss).
pub fn tier_label(tier: pb::Tier) -> Option<&'static str> {
    match tier {
        pb::Tier::Memory => Some("memory"),
        pb::Tier::Disk => Some("disk"),
        pb::Tier::Remote => Some("remote"),
        pb::Tier::Compiled => Some("compiled"),
        pb::Tier::Joined => Some("joined"),
        pb::Tier::Unspecified => None,
    }
}

/// Microseconds as milliseconds, keeping microsecond precision.
fn millis(micros: u64) -> f64 {
    micros as f64 / 1000.0
}

/// One kernel result as an NDJSON object. The artifact itself is never printed: it goes to
/// `--out`, and its size is in `bytes`.
pub fn kernel_json(result: &pb::KernelResult) -> Value {
    let lowered: Map<String, Value> = result
        .lowered_names
        .iter()
        .map(|l| (l.name_expression.clone(), Value::String(l.lowered_name.clone())))
        .collect();
    json!({
        "id": result.id,
        "key": result.key,
        "outcome": outcome_label(result.outcome()),
        "tier": tier_label(result.tier()),
        "compile_ms": millis(result.compile_micros),
        "elapsed_ms": millis(result.elapsed_micros),
        "bytes": result.artifact_bytes,
        "lowered_names": lowered,
        "log": result.log,
        "toolchain": result.toolchain,
        "target": result.target,
        // Triton's launcher metadata (num_warps, shared memory, ...), as an object.
        "metadata": serde_json::from_str::<Value>(&result.metadata_json).unwrap_or(Value::Null),
        // Entry points' resources from the GPU validation, and how the cubin was checked.
        "attributes": result.attributes.iter().map(|a| json!({
            "name": a.name,
            "registers": a.registers,
            "static_shared_bytes": a.static_shared_bytes,
            "max_threads_per_block": a.max_threads_per_block,
            "local_bytes": a.local_bytes,
            "const_bytes": a.const_bytes,
        })).collect::<Vec<_>>(),
        "validation": result.validation,
    })
}

/// The last NDJSON line of a job. `job_id` is null for a lookup, which is no job.
pub fn done_json(job_id: &str, done: &pb::JobDone) -> Value {
    json!({
        "job_id": (!job_id.is_empty()).then_some(job_id),
        "graph_key": done.graph_key,
        "kernel_keys": done.kernel_keys,
        "ok": done.ok,
        "failed": done.failed,
        "missed": done.missed,
    })
}

/// One kernel result for humans: a line of aligned columns (id, outcome, tier, time this request
/// spent, time the compile cost, size), then the lowered names of an OK kernel and the log of a
/// failed one, indented. `id_width` aligns the columns over a graph; 0 leaves them ragged.
pub fn kernel_text(result: &pb::KernelResult, id_width: usize) -> String {
    let outcome = result.outcome();
    let tier = tier_label(result.tier()).unwrap_or("-");
    let mut text = format!(
        "{:<id_width$}  {:<6}  {:<8}  {:>10}  compile {:>10}  {:>10}",
        result.id,
        outcome_label(outcome),
        tier,
        format_millis(result.elapsed_micros),
        format_millis(result.compile_micros),
        format_bytes(result.artifact_bytes),
    );
    if outcome == pb::Outcome::Ok {
        for lowered in &result.lowered_names {
            let _ = write!(text, "\n    {} -> {}", lowered.name_expression, lowered.lowered_name);
        }
        for a in &result.attributes {
            let _ = write!(
                text,
                "\n    {}: {} registers, {} B shared, {} B local, max {} threads/block",
                a.name, a.registers, a.static_shared_bytes, a.local_bytes, a.max_threads_per_block
            );
        }
    }
    if outcome == pb::Outcome::Failed {
        let log = result.log.trim_end();
        let log = if log.is_empty() { "(the compiler left no log)" } else { log };
        for line in log.lines() {
            let _ = write!(text, "\n    {line}");
        }
    }
    text
}

/// The closing line for humans: counts, wall time as the client saw it, and the graph key.
pub fn summary_text(done: &pb::JobDone, wall: Duration) -> String {
    let total = done.ok + done.failed + done.missed;
    let mut text = format!("{total} kernel{}: {} ok", plural(total as usize), done.ok);
    if done.failed > 0 {
        let _ = write!(text, ", {} failed", done.failed);
    }
    if done.missed > 0 {
        let _ = write!(text, ", {} missed", done.missed);
    }
    let _ = write!(text, " in {}", format_millis(wall.as_micros().try_into().unwrap_or(u64::MAX)));
    if !done.graph_key.is_empty() {
        let _ = write!(text, "; graph key {}", done.graph_key);
    }
    text
}

/// `0.412 ms`, `812.4 ms`, `12.31 s`: enough digits to compare a hit with a compile.
pub fn format_millis(micros: u64) -> String {
    let ms = millis(micros);
    if ms < 10.0 {
        format!("{ms:.3} ms")
    } else if ms < 10_000.0 {
        format!("{ms:.1} ms")
    } else {
        format!("{:.2} s", ms / 1000.0)
    }
}

/// `812 B`, `12.3 KiB`, `4.0 MiB`: the daemons' status pages write sizes the same way.
pub use kiln_proto::units::bytes as format_bytes;

pub fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(outcome: pb::Outcome, tier: pb::Tier) -> pb::KernelResult {
        pb::KernelResult {
            id: "saxpy".into(),
            key: "ab".repeat(32),
            outcome: outcome as i32,
            tier: tier as i32,
            artifact: vec![1, 2, 3].into(),
            artifact_bytes: 12_600,
            compile_micros: 811_937,
            elapsed_micros: 1_234,
            log: String::new(),
            lowered_names: vec![pb::LoweredName {
                name_expression: "saxpy<float>".into(),
                lowered_name: "_Z5saxpyIfEvT_".into(),
            }],
            toolchain: "nvrtc".into(),
            target: "sm_90".into(),
            ..Default::default()
        }
    }

    #[test]
    fn kernel_json_has_the_documented_fields() {
        let line = kernel_json(&result(pb::Outcome::Ok, pb::Tier::Memory));
        assert_eq!(line["id"], "saxpy");
        assert_eq!(line["key"], "ab".repeat(32));
        assert_eq!(line["outcome"], "ok");
        assert_eq!(line["tier"], "memory");
        assert_eq!(line["compile_ms"], 811.937);
        assert_eq!(line["elapsed_ms"], 1.234);
        assert_eq!(line["bytes"], 12_600);
        assert_eq!(line["lowered_names"]["saxpy<float>"], "_Z5saxpyIfEvT_");
        assert_eq!(line["log"], "");
        // One line of NDJSON, never the artifact bytes.
        let text = line.to_string();
        assert!(!text.contains('\n') && !text.contains("artifact"), "{text}");
    }

    #[test]
    fn a_miss_has_no_tier() {
        let line = kernel_json(&result(pb::Outcome::Miss, pb::Tier::Unspecified));
        assert_eq!(line["outcome"], "miss");
        assert_eq!(line["tier"], Value::Null);
    }

    #[test]
    fn done_json_lists_the_keys() {
        let done =
            pb::JobDone { graph_key: "cd".repeat(32), kernel_keys: vec!["ab".repeat(32)], ok: 1, failed: 0, missed: 0 };
        let line = done_json("job-1", &done);
        assert_eq!(line["graph_key"], "cd".repeat(32));
        assert_eq!(line["kernel_keys"][0], "ab".repeat(32));
        assert_eq!(line["job_id"], "job-1");
    }

    #[test]
    fn human_lines_show_the_log_of_failures_only() {
        let ok = kernel_text(&result(pb::Outcome::Ok, pb::Tier::Compiled), 8);
        assert_eq!(ok.lines().count(), 2);
        assert!(ok.starts_with("saxpy     ok      compiled"), "{ok}");
        assert!(ok.contains("1.234 ms") && ok.contains("compile   811.9 ms") && ok.contains("12.3 KiB"), "{ok}");
        assert!(ok.contains("\n    saxpy<float> -> _Z5saxpyIfEvT_"), "{ok}");

        let mut failed = result(pb::Outcome::Failed, pb::Tier::Compiled);
        failed.log = "k.cu(3): error: expected a \";\"\n1 error detected\n".into();
        let text = kernel_text(&failed, 0);
        assert_eq!(
            text.lines().skip(1).collect::<Vec<_>>(),
            ["    k.cu(3): error: expected a \";\"", "    1 error detected"]
        );
    }

    #[test]
    fn summary_counts_and_keys() {
        let done = pb::JobDone { graph_key: "ef".repeat(32), ok: 2, failed: 1, ..Default::default() };
        let text = summary_text(&done, Duration::from_micros(1_500));
        assert_eq!(text, format!("3 kernels: 2 ok, 1 failed in 1.500 ms; graph key {}", "ef".repeat(32)));
    }

    #[test]
    fn sizes_and_times_read_well() {
        assert_eq!(format_bytes(812), "812 B");
        assert_eq!(format_bytes(12_600), "12.3 KiB");
        assert_eq!(format_bytes(4 << 20), "4.0 MiB");
        assert_eq!(format_millis(412), "0.412 ms");
        assert_eq!(format_millis(812_400), "812.4 ms");
        assert_eq!(format_millis(12_310_000), "12.31 s");
    }
}
