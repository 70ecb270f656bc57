//! A report's fields checked before it is recorded, the same in kilnd and kiln-cache: each
//! refusal names the field (`process.graphs[3].key`).

use super::{MAX_LABEL, MAX_REPORT_GRAPHS, UNNAMED_PROCESS};
use crate::pb::{TorchGraphCost, TorchProcessCosts};

/// A field that does not validate, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalid {
    pub field: String,
    pub reason: String,
}

impl std::fmt::Display for Invalid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.reason)
    }
}

fn invalid(field: impl Into<String>, reason: impl Into<String>) -> Invalid {
    Invalid { field: field.into(), reason: reason.into() }
}

/// A job name: at most [`MAX_LABEL`] bytes without control characters (`min` 0 or 1).
pub fn check_job(field: &str, job: &str, min: usize) -> Result<(), Invalid> {
    if job.len() < min || job.len() > MAX_LABEL || job.chars().any(char::is_control) {
        return Err(invalid(field, format!("must be {min} to {MAX_LABEL} bytes without control characters")));
    }
    Ok(())
}

/// A process id: 8 to 64 characters of `[A-Za-z0-9_-]`.
pub fn check_process_id(field: &str, id: &str) -> Result<(), Invalid> {
    let ok = (8..=64).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-'));
    if !ok {
        return Err(invalid(field, "must be 8 to 64 characters of [A-Za-z0-9_-]"));
    }
    Ok(())
}

/// When a process's first step ended: 0 (not yet), or not before the process started (which a
/// report then must say: a ledger fills in a missing start with the time it hears of it).
pub fn check_first_step(field: &str, started_unix_ms: u64, first_step_unix_ms: u64) -> Result<(), Invalid> {
    if first_step_unix_ms != 0 && (started_unix_ms == 0 || first_step_unix_ms < started_unix_ms) {
        return Err(invalid(field, "must be 0 (not yet), or not before a started_unix_ms that is set"));
    }
    Ok(())
}

/// The `served` values a graph may carry.
pub const SERVED: [&str; 8] = ["", "cold", "memory", "disk", "remote", "joined", "in-process", "eager"];

/// One graph's figures: bounded text, finite non-negative numbers. `field` is its name in the
/// message (`graphs[3]`).
pub fn check_graph(field: &str, g: &TorchGraphCost) -> Result<(), Invalid> {
    if g.name.len() > MAX_LABEL || g.name.chars().any(char::is_control) {
        return Err(invalid(
            format!("{field}.name"),
            format!("must be at most {MAX_LABEL} bytes without control characters"),
        ));
    }
    if !g.key.is_empty() && (g.key.len() != 64 || !g.key.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))) {
        return Err(invalid(format!("{field}.key"), "must be empty or 64 lowercase hex characters"));
    }
    if !SERVED.contains(&g.served.as_str()) {
        return Err(invalid(format!("{field}.served"), format!("must be one of {}", SERVED[1..].join(", "))));
    }
    for (name, v) in [
        ("eager_median_s", g.eager_median_s),
        ("compiled_median_s", g.compiled_median_s),
        ("compile_s", g.compile_s),
        ("stored_compile_s", g.stored_compile_s),
        ("eager_contended_median_s", g.eager_contended_median_s),
    ] {
        // A day a step or a compile is past anything real: a bound keeps sums finite.
        if !v.is_finite() || !(0.0..=86_400.0).contains(&v) {
            return Err(invalid(format!("{field}.{name}"), format!("must be a number from 0 to 86400, got {v}")));
        }
    }
    Ok(())
}

/// A process's account as a report carries it (`field` its name in the message).
pub fn check_process(field: &str, p: &TorchProcessCosts) -> Result<(), Invalid> {
    if p.process != UNNAMED_PROCESS {
        check_process_id(&format!("{field}.process"), &p.process)?;
    }
    if p.host.len() > 253 || !p.host.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-')) {
        return Err(invalid(format!("{field}.host"), "must be at most 253 characters of [A-Za-z0-9._-]"));
    }
    if p.rank < -1 {
        return Err(invalid(format!("{field}.rank"), "must be -1 (unknown) or more"));
    }
    check_first_step(&format!("{field}.first_step_unix_ms"), p.started_unix_ms, p.first_step_unix_ms)?;
    if p.graphs.len() > MAX_REPORT_GRAPHS {
        return Err(invalid(format!("{field}.graphs"), format!("more than {MAX_REPORT_GRAPHS} graphs")));
    }
    for (i, g) in p.graphs.iter().enumerate() {
        check_graph(&format!("{field}.graphs[{i}]"), g)?;
    }
    Ok(())
}
