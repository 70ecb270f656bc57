//! A torch.compile job's ledger: what its processes reported of its graphs, merged into one
//! return (is the compile paying for itself?), the same way in kilnd (this host's processes) and
//! in kiln-cache (the fleet's, across hosts, ranks and restarts).
//!
//! A process reports its whole account each time (cumulative, under a random process id), so
//! the ledger keeps each process's latest report and a report received twice counts once. The
//! ledger is bounded: [`MAX_PROCESSES`] processes apart, the oldest (ended first) folded into
//! one aggregate; [`MAX_GRAPHS`] graphs a process.
//!
//! The figures, from every process kept and the aggregate:
//! - a graph's eager and compiled seconds a step: the median over processes, weighted by samples.
//!   Eager samples taken while no compile of the job ran on the host are preferred; only where a
//!   graph has none are the contended ones used, and the return says so (`eager_basis`). A run
//!   that measured one way only keeps the other way's figure from the runs before it;
//! - the cold compile: each graph key's stored compile seconds once, whichever host compiled it,
//!   plus every in-process compile;
//! - the processes' own seconds: serialization, round trips and loads (a warm hit's whole cost),
//!   and waits on another request's compile;
//! - seconds saved by the caches: the stored compile time of every graph a process took warm;
//! - steps: every process's, added up.

use crate::pb::{TorchGraphCost, TorchJobLedger, TorchJobReturn, TorchProcessCosts};
use std::collections::{BTreeMap, HashMap};

/// Processes a ledger keeps apart; older ones are folded into its aggregate.
pub const MAX_PROCESSES: usize = 16;
/// Graphs kept of one process (its busiest), and of the aggregate four times as many.
pub const MAX_GRAPHS: usize = 128;
/// Graphs one report may carry.
pub const MAX_REPORT_GRAPHS: usize = 4096;
/// Folded process ids remembered.
pub const MAX_FOLDED_IDS: usize = 1024;
/// A ledger's encoded size is kept under this by folding more processes.
pub const MAX_LEDGER_BYTES: usize = 256 << 10;
/// Longest job or graph name.
pub const MAX_LABEL: usize = 256;

/// The process id a report without one (an older client) is kept under: one per job, so its
/// latest report replaces the one before, as it did.
pub const UNNAMED_PROCESS: &str = "unnamed";

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
    if p.graphs.len() > MAX_REPORT_GRAPHS {
        return Err(invalid(format!("{field}.graphs"), format!("more than {MAX_REPORT_GRAPHS} graphs")));
    }
    for (i, g) in p.graphs.iter().enumerate() {
        check_graph(&format!("{field}.graphs[{i}]"), g)?;
    }
    Ok(())
}

/// A graph's steps: its calls each way.
fn calls(g: &TorchGraphCost) -> u64 {
    g.eager_calls.saturating_add(g.compiled_calls)
}

/// A process's steps: as it said, or its busiest graph's calls.
fn steps(p: &TorchProcessCosts) -> u64 {
    if p.steps > 0 { p.steps } else { p.graphs.iter().map(calls).max().unwrap_or(0) }
}

/// Keeps the `n` busiest graphs.
fn keep_busiest(graphs: &mut Vec<TorchGraphCost>, n: usize) {
    if graphs.len() > n {
        graphs.sort_by_key(|g| std::cmp::Reverse(calls(g)));
        graphs.truncate(n);
    }
}

/// Records a process's latest account in `ledger`: it replaces the process's earlier one; a
/// process already folded is ignored (its figures are in the aggregate). Then keeps the ledger
/// within its bounds. Returns whether the report was taken.
pub fn record(ledger: &mut TorchJobLedger, mut process: TorchProcessCosts) -> bool {
    if ledger.folded_ids.contains(&process.process) {
        return false;
    }
    keep_busiest(&mut process.graphs, MAX_GRAPHS);
    process.folded = 0;
    match ledger.processes.iter_mut().find(|p| p.process == process.process) {
        Some(held) => *held = process,
        None => ledger.processes.push(process),
    }
    while ledger.processes.len() > MAX_PROCESSES
        || (ledger.processes.len() > 1 && prost::Message::encoded_len(ledger) > MAX_LEDGER_BYTES)
    {
        fold_oldest(ledger);
    }
    true
}

/// Folds the process that ended longest ago (or, with none ended, the one that reported longest
/// ago) into the aggregate.
fn fold_oldest(ledger: &mut TorchJobLedger) {
    let Some((i, _)) =
        ledger.processes.iter().enumerate().min_by_key(|(_, p)| (!p.ended, p.updated_unix_ms, p.process.clone()))
    else {
        return;
    };
    let p = ledger.processes.remove(i);
    ledger.folded_ids.push(p.process.clone());
    if ledger.folded_ids.len() > MAX_FOLDED_IDS {
        let extra = ledger.folded_ids.len() - MAX_FOLDED_IDS;
        ledger.folded_ids.drain(..extra);
    }
    let aggregate = ledger.folded.get_or_insert_with(TorchProcessCosts::default);
    fold(aggregate, &p);
}

/// Adds process `p` to the aggregate `a`: steps and seconds added up, a graph's medians merged
/// weighted by samples, graphs told apart by name, key and how they were served (so each key's
/// cold compile still counts once, and each warm hit's saving is kept).
pub fn fold(a: &mut TorchProcessCosts, p: &TorchProcessCosts) {
    a.ended = if a.folded == 0 { p.ended } else { a.ended && p.ended };
    a.folded += p.folded.max(1);
    a.process = "folded".into();
    a.rank = -1;
    a.steps = a.steps.saturating_add(steps(p));
    a.started_unix_ms =
        if a.started_unix_ms == 0 { p.started_unix_ms } else { a.started_unix_ms.min(p.started_unix_ms) };
    a.updated_unix_ms = a.updated_unix_ms.max(p.updated_unix_ms);
    for g in &p.graphs {
        match a.graphs.iter_mut().find(|h| h.name == g.name && h.key == g.key && h.served == g.served) {
            Some(h) => *h = sum(h, g),
            None => a.graphs.push(g.clone()),
        }
    }
    keep_busiest(&mut a.graphs, 4 * MAX_GRAPHS);
}

/// Two accounts of one graph as one: calls, samples and seconds added up (a warm graph's stored
/// compile seconds too: each hit saved them), medians merged.
fn sum(a: &TorchGraphCost, b: &TorchGraphCost) -> TorchGraphCost {
    let eager = |g: &TorchGraphCost| (g.eager_median_s, uncontended_weight(g));
    TorchGraphCost {
        name: a.name.clone(),
        eager_calls: a.eager_calls.saturating_add(b.eager_calls),
        compiled_calls: a.compiled_calls.saturating_add(b.compiled_calls),
        eager_median_s: weighted_median(&[eager(a), eager(b)]),
        compiled_median_s: weighted_median(&[
            (a.compiled_median_s, compiled_weight(a)),
            (b.compiled_median_s, compiled_weight(b)),
        ]),
        compile_s: a.compile_s + b.compile_s,
        key: a.key.clone(),
        served: a.served.clone(),
        stored_compile_s: if warm(&a.served) {
            a.stored_compile_s + b.stored_compile_s
        } else {
            a.stored_compile_s.max(b.stored_compile_s)
        },
        async_compile: a.async_compile && b.async_compile,
        eager_samples: a.eager_samples.saturating_add(b.eager_samples),
        eager_contended_samples: a.eager_contended_samples.saturating_add(b.eager_contended_samples),
        eager_contended_median_s: weighted_median(&[
            (a.eager_contended_median_s, a.eager_contended_samples),
            (b.eager_contended_median_s, b.eager_contended_samples),
        ]),
        compiled_samples: a.compiled_samples.saturating_add(b.compiled_samples),
        measured_calls: a.measured_calls.saturating_add(b.measured_calls),
    }
}

/// Whether a graph served this way was a stored answer (a warm hit).
pub fn warm(served: &str) -> bool {
    matches!(served, "memory" | "disk" | "remote")
}

/// The weight of a graph's uncontended eager median: its samples; an older client's median
/// (no sample counts) counts by its eager calls.
fn uncontended_weight(g: &TorchGraphCost) -> u64 {
    if g.eager_median_s <= 0.0 {
        0
    } else if g.eager_samples > 0 {
        g.eager_samples
    } else if g.eager_contended_samples == 0 {
        g.eager_calls.max(1)
    } else {
        0
    }
}

fn compiled_weight(g: &TorchGraphCost) -> u64 {
    if g.compiled_median_s <= 0.0 {
        0
    } else if g.compiled_samples > 0 {
        g.compiled_samples
    } else {
        g.compiled_calls.max(1)
    }
}

/// The median of values given with weights (those of weight 0 or value 0 left out); 0 for none.
pub fn weighted_median(values: &[(f64, u64)]) -> f64 {
    let mut v: Vec<(f64, u64)> = values.iter().copied().filter(|(x, w)| *w > 0 && *x > 0.0).collect();
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(|a, b| a.0.total_cmp(&b.0));
    let total: u128 = v.iter().map(|(_, w)| u128::from(*w)).sum();
    let mut seen: u128 = 0;
    for (x, w) in &v {
        seen += u128::from(*w);
        if 2 * seen >= total {
            return *x;
        }
    }
    v[v.len() - 1].0
}

/// One graph's figures across processes.
#[derive(Default)]
struct Merged {
    eager: Vec<(f64, u64)>,
    contended: Vec<(f64, u64)>,
    compiled: Vec<(f64, u64)>,
    cost: TorchGraphCost,
    served: Vec<String>,
}

/// The job's return from its ledger.
pub fn job_return(ledger: &TorchJobLedger) -> TorchJobReturn {
    let mut all: Vec<&TorchProcessCosts> = ledger.processes.iter().collect();
    let folded = ledger.folded.as_ref().filter(|f| f.folded > 0);
    all.extend(folded);
    let mut graphs: BTreeMap<&str, Merged> = BTreeMap::new();
    let mut cold_by_key: HashMap<&str, f64> = HashMap::new();
    let (mut cold, mut process_s, mut saved) = (0.0, 0.0, 0.0);
    for p in &all {
        for g in &p.graphs {
            match g.served.as_str() {
                "cold" if !g.key.is_empty() => {
                    let s = cold_by_key.entry(g.key.as_str()).or_default();
                    *s = s.max(g.stored_compile_s);
                }
                "cold" => cold += g.stored_compile_s,
                "in-process" => cold += g.compile_s,
                _ => {}
            }
            process_s += match g.served.as_str() {
                // A blocking cold graph's wait is the cold compile, counted once above.
                "cold" if !g.async_compile => (g.compile_s - g.stored_compile_s).max(0.0),
                "in-process" => 0.0,
                _ => g.compile_s,
            };
            if warm(&g.served) {
                saved += g.stored_compile_s;
            }
            let m = graphs.entry(g.name.as_str()).or_default();
            m.eager.push((g.eager_median_s, uncontended_weight(g)));
            m.contended.push((g.eager_contended_median_s, g.eager_contended_samples));
            m.compiled.push((g.compiled_median_s, compiled_weight(g)));
            let c = &mut m.cost;
            c.eager_calls = c.eager_calls.saturating_add(g.eager_calls);
            c.compiled_calls = c.compiled_calls.saturating_add(g.compiled_calls);
            c.compile_s += g.compile_s;
            c.stored_compile_s = c.stored_compile_s.max(g.stored_compile_s);
            c.eager_samples = c.eager_samples.saturating_add(g.eager_samples);
            c.eager_contended_samples = c.eager_contended_samples.saturating_add(g.eager_contended_samples);
            c.compiled_samples = c.compiled_samples.saturating_add(g.compiled_samples);
            c.measured_calls = c.measured_calls.saturating_add(g.measured_calls);
            if c.key.is_empty() {
                c.key = g.key.clone();
            }
            if !g.served.is_empty() && !m.served.contains(&g.served) {
                m.served.push(g.served.clone());
            }
        }
    }
    cold += cold_by_key.values().sum::<f64>();
    let mut contended_used = false;
    let merged: Vec<TorchGraphCost> = graphs
        .into_iter()
        .map(|(name, m)| {
            let mut c = m.cost;
            c.name = name.to_owned();
            c.served = m.served.join("+");
            c.eager_median_s = weighted_median(&m.eager);
            c.eager_contended_median_s = weighted_median(&m.contended);
            c.compiled_median_s = weighted_median(&m.compiled);
            c
        })
        .collect();
    // A graph's eager figure: its uncontended one, else its contended one.
    let eager_of =
        |g: &TorchGraphCost| if g.eager_median_s > 0.0 { g.eager_median_s } else { g.eager_contended_median_s };
    let both: Vec<&TorchGraphCost> = merged.iter().filter(|g| eager_of(g) > 0.0 && g.compiled_median_s > 0.0).collect();
    let eager = both.iter().map(|g| eager_of(g)).fold(0.0, f64::max);
    if both.iter().any(|g| g.eager_median_s <= 0.0) {
        contended_used = true;
    }
    let compiled = both.iter().map(|g| g.compiled_median_s).fold(0.0, f64::max);
    let measured_both = !both.is_empty();
    let compile_s = cold + process_s;
    let steps = all.iter().map(|p| steps(p)).fold(0u64, u64::saturating_add);
    let speedup = if eager > 0.0 && compiled > 0.0 { eager / compiled } else { 0.0 };
    let saved_per_step = eager - compiled;
    let break_even = if !measured_both || saved_per_step <= 0.0 { 0.0 } else { compile_s / saved_per_step };
    let mut r = TorchJobReturn {
        job: ledger.job.clone(),
        eager_step_s: eager,
        compiled_step_s: compiled,
        speedup,
        compile_s,
        break_even_steps: break_even,
        steps,
        verdict: String::new(),
        graphs: merged,
        cold_compile_s: cold,
        process_compile_s: process_s,
        saved_s: saved,
        eager_basis: match (measured_both, contended_used) {
            (false, _) => String::new(),
            (true, true) => "contended".into(),
            (true, false) => "uncontended".into(),
        },
        processes: all.iter().map(|p| p.folded.max(1)).sum(),
        folded_processes: folded.map_or(0, |f| f.folded),
        updated_unix_ms: all.iter().map(|p| p.updated_unix_ms).max().unwrap_or(0),
        ended: !all.is_empty() && all.iter().all(|p| p.ended),
    };
    let measured_eager = r.graphs.iter().any(|g| eager_of(g) > 0.0);
    r.verdict = verdict(&r, measured_eager);
    r
}

/// A count as a person reads it: 1,656.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// One sentence that says whether the compile pays, and what to do when it does not.
/// `measured_eager`: whether any graph has an eager figure.
pub fn verdict(r: &TorchJobReturn, measured_eager: bool) -> String {
    let steps = thousands(r.steps);
    let mut v = if r.eager_step_s <= 0.0 || r.compiled_step_s <= 0.0 {
        let missing = if measured_eager {
            "no graph has run both eagerly and compiled yet"
        } else {
            "no graph has run eagerly (KILN_TORCH_ASYNC=1 measures both ways for free; KILN_TORCH_MEASURE=N runs N \
             eager steps of each graph after its compile)"
        };
        format!("not measured yet: {missing}")
    } else if r.compiled_step_s >= r.eager_step_s {
        format!(
            "the compile does not pay: a compiled step ({:.2} ms) is no faster than an eager one ({:.2} ms); run it \
             eagerly",
            r.compiled_step_s * 1e3,
            r.eager_step_s * 1e3
        )
    } else if (r.steps as f64) < r.break_even_steps {
        let needed = thousands(r.break_even_steps.ceil() as u64);
        if r.ended {
            format!(
                "this job compiled for {:.0} s and ran {steps} steps: run it eagerly, or with KILN_TORCH_ASYNC=1 \
                 (it needed {needed} steps to pay for its compile)",
                r.compile_s
            )
        } else {
            format!(
                "the compile has not paid for itself yet: {steps} steps of the {needed} it needs ({:.1} s of \
                 compile, {:.2} ms saved a step)",
                r.compile_s,
                (r.eager_step_s - r.compiled_step_s) * 1e3
            )
        }
    } else {
        format!(
            "the compile has paid for itself: {steps} steps, break-even at {} ({:.2}x a step)",
            thousands(r.break_even_steps.ceil() as u64),
            r.speedup
        )
    };
    if r.eager_basis == "contended" {
        v.push_str(
            " (eager steps timed while a compile of this job ran on the host, so slower than alone: \
             KILN_TORCH_MEASURE=N times them after the compile)",
        );
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn graph(name: &str, eager: f64, compiled: f64, calls: u64) -> TorchGraphCost {
        TorchGraphCost {
            name: name.into(),
            eager_calls: calls / 2,
            compiled_calls: calls - calls / 2,
            eager_median_s: eager,
            compiled_median_s: compiled,
            eager_samples: u64::from(eager > 0.0) * (calls / 2),
            compiled_samples: u64::from(compiled > 0.0) * (calls - calls / 2),
            ..Default::default()
        }
    }

    fn process(id: &str, graphs: Vec<TorchGraphCost>) -> TorchProcessCosts {
        TorchProcessCosts { process: id.into(), rank: -1, updated_unix_ms: 1, graphs, ..Default::default() }
    }

    fn ledger(processes: Vec<TorchProcessCosts>) -> TorchJobLedger {
        let mut l = TorchJobLedger { job: "j".into(), ..Default::default() };
        for p in processes {
            record(&mut l, p);
        }
        l
    }

    const KEY: &str = "ab";

    fn key() -> String {
        KEY.repeat(32)
    }

    #[test]
    fn break_even_is_compile_seconds_over_seconds_saved_a_step() {
        let g = TorchGraphCost { served: "in-process".into(), compile_s: 18.0, ..graph("g", 0.015, 0.009, 100) };
        let r = job_return(&ledger(vec![process("p-000001", vec![g.clone()])]));
        assert!((r.speedup - 15.0 / 9.0).abs() < 1e-9);
        assert!((r.break_even_steps - 3000.0).abs() < 1e-6, "{}", r.break_even_steps);
        assert!(r.verdict.contains("not paid for itself yet: 100 steps of the 3,000"), "{}", r.verdict);
        let paid = job_return(&ledger(vec![process("p-000001", vec![graph("g", 0.015, 0.009, 4000), g])]));
        assert!(paid.verdict.starts_with("the compile has paid for itself: 4,000 steps"), "{}", paid.verdict);
    }

    #[test]
    fn a_job_that_ended_before_its_compile_paid_is_told_to_run_eagerly() {
        let g = TorchGraphCost { served: "in-process".into(), compile_s: 31.0, ..graph("g", 0.02, 0.01, 40) };
        let p = TorchProcessCosts { ended: true, ..process("p-000001", vec![g]) };
        let r = job_return(&ledger(vec![p]));
        assert_eq!(
            r.verdict,
            "this job compiled for 31 s and ran 40 steps: run it eagerly, or with KILN_TORCH_ASYNC=1 (it needed \
             3,100 steps to pay for its compile)"
        );
    }

    #[test]
    fn a_slower_compiled_step_never_pays_and_one_way_is_not_measured() {
        let r = job_return(&ledger(vec![process("p-000001", vec![graph("g", 0.010, 0.012, 10)])]));
        assert_eq!(r.break_even_steps, 0.0);
        assert!(r.verdict.contains("does not pay"), "{}", r.verdict);
        let r = job_return(&ledger(vec![process("p-000001", vec![graph("g", 0.0, 0.012, 10)])]));
        assert_eq!((r.speedup, r.break_even_steps), (0.0, 0.0));
        assert!(r.verdict.starts_with("not measured yet: no graph has run eagerly"), "{}", r.verdict);
        assert_eq!(r.eager_basis, "");
    }

    #[test]
    fn a_run_measured_one_way_keeps_the_other_from_earlier_runs() {
        // An async cold run measured both ways; the blocking warm restart only compiled.
        let cold = TorchGraphCost {
            served: "cold".into(),
            key: key(),
            async_compile: true,
            stored_compile_s: 40.0,
            compile_s: 0.5,
            ..graph("g", 0.0034, 0.0031, 200)
        };
        let warm = TorchGraphCost {
            served: "disk".into(),
            key: key(),
            stored_compile_s: 40.0,
            compile_s: 10.0,
            ..graph("g", 0.0, 0.0030, 400)
        };
        let r = job_return(&ledger(vec![process("cold-0001", vec![cold]), process("warm-0001", vec![warm])]));
        assert!((r.eager_step_s - 0.0034).abs() < 1e-12, "{}", r.eager_step_s);
        assert!((r.compiled_step_s - 0.0030).abs() < 1e-12, "the warm run has more samples: {}", r.compiled_step_s);
        // The cold compile once; the warm run charged what it spent, and the stored compile saved.
        assert_eq!((r.cold_compile_s, r.saved_s), (40.0, 40.0));
        assert!((r.process_compile_s - 10.5).abs() < 1e-9, "{}", r.process_compile_s);
        assert_eq!(r.steps, 600);
        assert_eq!(r.processes, 2);
        assert_eq!(r.eager_basis, "uncontended");
    }

    #[test]
    fn a_key_compiled_cold_is_charged_once_and_a_blocking_wait_is_not_charged_twice() {
        let cold = |id: &str, wait: f64| {
            let g = TorchGraphCost {
                served: "cold".into(),
                key: key(),
                stored_compile_s: 30.0,
                compile_s: wait,
                ..graph("g", 0.0, 0.01, 10)
            };
            process(id, vec![g])
        };
        let r = job_return(&ledger(vec![cold("rank-0000", 31.0), cold("rank-0001", 30.5)]));
        assert_eq!(r.cold_compile_s, 30.0);
        assert!((r.process_compile_s - 1.5).abs() < 1e-9, "{}", r.process_compile_s);
    }

    #[test]
    fn contended_eager_samples_are_used_only_without_uncontended_ones_and_said() {
        let contended = TorchGraphCost {
            eager_median_s: 0.0,
            eager_samples: 0,
            eager_contended_samples: 50,
            eager_contended_median_s: 0.008,
            ..graph("g", 0.0, 0.003, 100)
        };
        let r = job_return(&ledger(vec![process("p-000001", vec![contended.clone()])]));
        assert_eq!((r.eager_step_s, r.eager_basis.as_str()), (0.008, "contended"));
        assert!(r.verdict.contains("KILN_TORCH_MEASURE"), "{}", r.verdict);
        let alone = TorchGraphCost { eager_median_s: 0.0034, eager_samples: 5, ..contended.clone() };
        let r = job_return(&ledger(vec![process("p-000001", vec![contended]), process("p-000002", vec![alone])]));
        assert_eq!((r.eager_step_s, r.eager_basis.as_str()), (0.0034, "uncontended"));
    }

    #[test]
    fn a_report_repeated_counts_once_and_processes_past_the_bound_fold() {
        let mut l = TorchJobLedger { job: "j".into(), ..Default::default() };
        let p = |i: usize, calls: u64| TorchProcessCosts {
            updated_unix_ms: i as u64,
            ended: true,
            ..process(&format!("proc-{i:04}"), vec![graph("g", 0.02, 0.01, calls)])
        };
        assert!(record(&mut l, p(0, 10)));
        assert!(record(&mut l, p(0, 20)));
        assert_eq!(job_return(&l).steps, 20, "the latest account replaces the earlier one");
        for i in 1..=MAX_PROCESSES + 4 {
            record(&mut l, p(i, 10));
        }
        let r = job_return(&l);
        assert_eq!(l.processes.len(), MAX_PROCESSES);
        assert_eq!((r.processes, r.folded_processes), (MAX_PROCESSES as u64 + 5, 5));
        assert_eq!(r.steps, 20 + 10 * (MAX_PROCESSES as u64 + 4));
        assert!((r.eager_step_s - 0.02).abs() < 1e-12);
        assert!(!record(&mut l, p(0, 500)), "a folded process's later report is already counted");
        assert_eq!(job_return(&l).steps, r.steps);
        assert!(r.ended);
    }

    #[test]
    fn the_ledger_stays_under_its_byte_bound() {
        let mut l = TorchJobLedger { job: "j".into(), ..Default::default() };
        for i in 0..MAX_PROCESSES {
            let graphs =
                (0..MAX_GRAPHS + 10).map(|n| graph(&format!("{}{n}", "x".repeat(200)), 0.02, 0.01, 10)).collect();
            record(&mut l, TorchProcessCosts { updated_unix_ms: i as u64, ..process(&format!("proc-{i:04}"), graphs) });
        }
        assert!(
            prost::Message::encoded_len(&l) <= MAX_LEDGER_BYTES + MAX_LEDGER_BYTES / 2,
            "{}",
            prost::Message::encoded_len(&l)
        );
        assert!(l.processes.iter().all(|p| p.graphs.len() <= MAX_GRAPHS));
        assert!(l.folded.as_ref().is_some_and(|f| f.graphs.len() <= 4 * MAX_GRAPHS));
    }

    #[test]
    fn weighted_medians_and_thousands() {
        assert_eq!(weighted_median(&[(1.0, 1), (2.0, 5), (3.0, 1)]), 2.0);
        assert_eq!(weighted_median(&[(1.0, 10), (9.0, 1)]), 1.0);
        assert_eq!(weighted_median(&[(0.0, 10), (9.0, 0)]), 0.0);
        assert_eq!(
            (thousands(0), thousands(999), thousands(1656), thousands(1_234_567)),
            ("0".into(), "999".into(), "1,656".into(), "1,234,567".into())
        );
    }

    #[test]
    fn every_bad_field_is_named() {
        let g = |g: TorchGraphCost| check_graph("graphs[0]", &g).unwrap_err().field;
        assert_eq!(g(TorchGraphCost { compile_s: f64::NAN, ..Default::default() }), "graphs[0].compile_s");
        assert_eq!(g(TorchGraphCost { eager_median_s: -1.0, ..Default::default() }), "graphs[0].eager_median_s");
        assert_eq!(g(TorchGraphCost { key: "AB".into(), ..Default::default() }), "graphs[0].key");
        assert_eq!(g(TorchGraphCost { served: "sideways".into(), ..Default::default() }), "graphs[0].served");
        assert_eq!(g(TorchGraphCost { name: "\n".into(), ..Default::default() }), "graphs[0].name");
        let p = |p: TorchProcessCosts| check_process("process", &p).unwrap_err().field;
        assert_eq!(p(TorchProcessCosts { process: "short".into(), ..Default::default() }), "process.process");
        assert_eq!(
            p(TorchProcessCosts { process: "abcdefgh".into(), host: "a b".into(), ..Default::default() }),
            "process.host"
        );
        assert!(check_process("p", &process("abcdefgh", vec![graph("g", 1.0, 1.0, 1)])).is_ok());
        assert!(check_job("job", &"j".repeat(257), 0).is_err());
        assert!(check_job("job", "", 1).is_err());
    }
}
