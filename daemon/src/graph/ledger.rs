//! What kilnd knows of torch.compile graphs: the requests it answered, and per job the latest
//! report of what running its graphs eagerly and compiled cost, from which it says whether the
//! compile paid off. One ledger per daemon, shared by the `TorchGraphs` handlers, `Stats`, the
//! status page and `/metrics`.

use crate::metrics::{JobLabels, Metrics, ReasonLabels, ResultLabels};
use kiln_proto::pb;
use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};

/// Jobs whose latest report is kept; the oldest is dropped past it (and its gauges removed).
const MAX_JOBS: usize = 64;
/// Fallback reasons a report may name; any other is counted as `other`, so a client cannot grow
/// the metrics without bound.
pub const FALLBACK_REASONS: [&str; 7] = [
    "kilnd_unreachable",
    "unserializable",
    "worker_failed",
    "torch_mismatch",
    "not_reused",
    "no_torch_worker",
    // Not a failure: the graph's layout is not sent to kilnd by the client's setting or default.
    "layout_off",
];

#[derive(Debug)]
pub struct Ledger {
    metrics: Arc<Metrics>,
    jobs: Mutex<VecDeque<pb::TorchJobReturn>>,
}

/// How one request was answered, as counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Compiled,
    Failed,
    Hit,
    /// Refused before any compile: another torch, or no torch worker on this host.
    Refused,
}

impl Outcome {
    fn as_str(self) -> &'static str {
        match self {
            Outcome::Compiled => "compiled",
            Outcome::Failed => "failed",
            Outcome::Hit => "hit",
            Outcome::Refused => "refused",
        }
    }
}

impl Ledger {
    pub fn new(metrics: Arc<Metrics>) -> Self {
        Ledger { metrics, jobs: Mutex::default() }
    }

    pub fn count(&self, outcome: Outcome) {
        self.metrics.torch_graphs.get_or_create(&ResultLabels { result: outcome.as_str() }).inc();
    }

    /// Takes one process's report: its fallbacks since its last report, and its graphs' costs;
    /// answers the job's return.
    pub fn report(&self, report: pb::TorchGraphReport) -> pb::TorchJobReturn {
        for (reason, n) in &report.fallbacks {
            let reason = if FALLBACK_REASONS.contains(&reason.as_str()) { reason.clone() } else { "other".into() };
            self.metrics.torch_graph_fallbacks.get_or_create(&ReasonLabels { reason }).inc_by(*n);
        }
        let ret = job_return(&report.job, report.graphs);
        if ret.graphs.is_empty() {
            return ret;
        }
        let labels = JobLabels { job: ret.job.clone() };
        self.metrics.torch_job_speedup.get_or_create(&labels).set(ret.speedup);
        self.metrics.torch_job_break_even_steps.get_or_create(&labels).set(ret.break_even_steps);
        self.metrics.torch_job_compile_seconds.get_or_create(&labels).set(ret.compile_s);
        let mut jobs = self.jobs.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        jobs.retain(|j| j.job != ret.job);
        jobs.push_front(ret.clone());
        while jobs.len() > MAX_JOBS {
            if let Some(old) = jobs.pop_back() {
                let labels = JobLabels { job: old.job };
                self.metrics.torch_job_speedup.remove(&labels);
                self.metrics.torch_job_break_even_steps.remove(&labels);
                self.metrics.torch_job_compile_seconds.remove(&labels);
            }
        }
        ret
    }

    pub fn stats(&self) -> pb::TorchGraphStats {
        let m = &self.metrics;
        let fallbacks: BTreeMap<String, u64> = FALLBACK_REASONS
            .iter()
            .chain(&["other"])
            .map(|r| {
                (r.to_string(), m.torch_graph_fallbacks.get_or_create(&ReasonLabels { reason: r.to_string() }).get())
            })
            .filter(|(_, n)| *n > 0)
            .collect();
        let jobs = self.jobs.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        pb::TorchGraphStats {
            compiled: Metrics::counted(&m.torch_graphs, "compiled"),
            failed: Metrics::counted(&m.torch_graphs, "failed"),
            hits: Metrics::counted(&m.torch_graphs, "hit"),
            fallbacks: fallbacks.into_iter().collect(),
            jobs: jobs.iter().cloned().collect(),
        }
    }
}

/// Whether compiling paid off for a job whose graphs cost `graphs`. A graph's call time runs from
/// one call to its next, so each spans a whole step: a step's time is the largest graph's. Graphs
/// measured only one way count in neither.
pub fn job_return(job: &str, graphs: Vec<pb::TorchGraphCost>) -> pb::TorchJobReturn {
    let both: Vec<&pb::TorchGraphCost> =
        graphs.iter().filter(|g| g.eager_median_s > 0.0 && g.compiled_median_s > 0.0).collect();
    let eager: f64 = both.iter().map(|g| g.eager_median_s).fold(0.0, f64::max);
    let compiled: f64 = both.iter().map(|g| g.compiled_median_s).fold(0.0, f64::max);
    let compile_s: f64 = graphs.iter().map(|g| g.compile_s).sum();
    let steps = graphs.iter().map(|g| g.eager_calls + g.compiled_calls).max().unwrap_or(0);
    let speedup = if eager > 0.0 && compiled > 0.0 { eager / compiled } else { 0.0 };
    let saved_per_step = eager - compiled;
    let break_even = if both.is_empty() || saved_per_step <= 0.0 { 0.0 } else { compile_s / saved_per_step };
    let verdict = if both.is_empty() {
        "not measured yet: no graph has run both eagerly and compiled (KILN_TORCH_ASYNC=1 measures both)".to_string()
    } else if saved_per_step <= 0.0 {
        format!(
            "the compile does not pay: a compiled step ({:.2} ms) is no faster than an eager one ({:.2} ms)",
            compiled * 1e3,
            eager * 1e3
        )
    } else if (steps as f64) < break_even {
        format!(
            "the compile has not paid for itself yet: {steps} steps of the {} it needs ({compile_s:.1} s of compile, \
             {:.2} ms saved a step)",
            break_even.ceil() as u64,
            saved_per_step * 1e3
        )
    } else {
        format!(
            "the compile has paid for itself: {steps} steps, break-even at {} ({speedup:.2}x a step)",
            break_even.ceil() as u64
        )
    };
    pb::TorchJobReturn {
        job: job.to_string(),
        eager_step_s: eager,
        compiled_step_s: compiled,
        speedup,
        compile_s,
        break_even_steps: break_even,
        steps,
        verdict,
        graphs,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cost(eager: f64, compiled: f64, compile_s: f64, calls: u64) -> pb::TorchGraphCost {
        pb::TorchGraphCost {
            name: "g".into(),
            eager_calls: calls / 2,
            compiled_calls: calls - calls / 2,
            eager_median_s: eager,
            compiled_median_s: compiled,
            compile_s,
        }
    }

    #[test]
    fn break_even_is_compile_seconds_over_seconds_saved_a_step() {
        let r = job_return("j", vec![cost(0.015, 0.009, 18.0, 100)]);
        assert!((r.speedup - 15.0 / 9.0).abs() < 1e-9);
        assert!((r.break_even_steps - 3000.0).abs() < 1e-6, "{}", r.break_even_steps);
        assert!(r.verdict.contains("not paid for itself yet: 100 steps of the 3000"), "{}", r.verdict);
        let paid = job_return("j", vec![cost(0.015, 0.009, 18.0, 4000)]);
        assert!(paid.verdict.starts_with("the compile has paid for itself"), "{}", paid.verdict);
    }

    #[test]
    fn a_slower_compiled_step_never_pays_and_one_way_is_not_measured() {
        let r = job_return("j", vec![cost(0.010, 0.012, 5.0, 10)]);
        assert_eq!(r.break_even_steps, 0.0);
        assert!(r.verdict.contains("does not pay"), "{}", r.verdict);
        let r = job_return("j", vec![cost(0.0, 0.012, 5.0, 10)]);
        assert_eq!((r.speedup, r.break_even_steps), (0.0, 0.0));
        assert!(r.verdict.starts_with("not measured yet"), "{}", r.verdict);
    }

    #[test]
    fn reports_keep_the_latest_per_job_and_bound_fallback_labels() {
        let ledger = Ledger::new(Arc::new(Metrics::new()));
        let mut fallbacks = std::collections::HashMap::new();
        fallbacks.insert("kilnd_unreachable".to_string(), 2);
        fallbacks.insert("made-up".to_string(), 1);
        ledger.report(pb::TorchGraphReport { job: "a".into(), fallbacks, graphs: vec![cost(0.02, 0.01, 1.0, 4)] });
        ledger.report(pb::TorchGraphReport {
            job: "a".into(),
            fallbacks: Default::default(),
            graphs: vec![cost(0.02, 0.01, 1.0, 8)],
        });
        let s = ledger.stats();
        assert_eq!(s.jobs.len(), 1);
        assert_eq!(s.jobs[0].steps, 8);
        assert_eq!(s.fallbacks.get("kilnd_unreachable"), Some(&2));
        assert_eq!(s.fallbacks.get("other"), Some(&1));
    }
}
