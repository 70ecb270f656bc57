//! The ledger kept and merged: a process's latest account recorded, the oldest processes folded
//! into one aggregate, and every process kept and the aggregate merged into the job's return.

use super::words::verdict;
use super::{MAX_FOLDED_IDS, MAX_GRAPHS, MAX_LEDGER_BYTES, MAX_PROCESSES, MIN_COMPILED_SAMPLES};
use crate::pb::{TorchGraphCost, TorchJobLedger, TorchJobReturn, TorchProcessCosts};
use std::collections::{BTreeMap, HashMap};

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
/// process already folded is ignored (its figures are in the aggregate). A process's final
/// account (`ended`) is its last word: a report it sent earlier that arrives after it (the
/// background report in flight while the process exits) is stale and ignored, or the job would
/// read as still running, with fewer steps than it ran. Then keeps the ledger within its
/// bounds. Returns whether the report was taken.
pub fn record(ledger: &mut TorchJobLedger, mut process: TorchProcessCosts) -> bool {
    if ledger.folded_ids.contains(&process.process) {
        return false;
    }
    keep_busiest(&mut process.graphs, MAX_GRAPHS);
    process.folded = 0;
    match ledger.processes.iter_mut().find(|p| p.process == process.process) {
        Some(held) if held.ended && !process.ended => return false,
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

/// The first-step ends (ms) of the job's latest start: those that ended after the latest start
/// of a process that has ended its first step. A start's ranks meet in collectives at their first
/// step, so none ends it before the last of them has started, while an earlier start's processes
/// ended theirs before the restart began.
fn latest_start_first_steps(processes: &[TorchProcessCosts]) -> Vec<u64> {
    let stepped: Vec<&TorchProcessCosts> = processes.iter().filter(|p| p.first_step_unix_ms > 0).collect();
    let Some(latest) = stepped.iter().map(|p| p.started_unix_ms).max() else {
        return Vec::new();
    };
    stepped.iter().map(|p| p.first_step_unix_ms).filter(|end| *end >= latest).collect()
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
    // A graph counts once it has both figures, its compiled one from enough steps.
    let both: Vec<&TorchGraphCost> =
        merged.iter().filter(|g| eager_of(g) > 0.0 && compiled_weight(g) >= MIN_COMPILED_SAMPLES).collect();
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
        first_step_skew_s: 0.0,
        first_step_processes: 0,
    };
    let ends = latest_start_first_steps(&ledger.processes);
    if let (Some(first), Some(last)) = (ends.iter().min(), ends.iter().max()) {
        r.first_step_processes = ends.len() as u64;
        r.first_step_skew_s = if ends.len() > 1 { (last - first) as f64 / 1e3 } else { 0.0 };
    }
    let measured_eager = r.graphs.iter().any(|g| eager_of(g) > 0.0);
    r.verdict = verdict(&r, measured_eager);
    r
}
