//! What kilnd knows of torch.compile graphs: the requests it answered, and per job the ledger
//! of what running its graphs eagerly and compiled cost, as this host's processes reported it
//! (merged by `kiln_proto::torch_ledger`, as kiln-cache merges the fleet's), from which it says
//! whether the compile paid off. One ledger per daemon, shared by the `TorchGraphs` handlers,
//! `Stats`, the status page and `/metrics`.

use super::recipe::RecipeBook;
use crate::metrics::{Metrics, ReasonLabels, ResultLabels};
use kiln_proto::{pb, torch_ledger};
use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};

/// Jobs whose ledger is kept; the least recently reported is dropped past it (and its gauges
/// removed).
pub const MAX_JOBS: usize = 64;
/// Fallback reasons a report may name; any other is counted as `other`, so a client cannot grow
/// the metrics without bound.
pub const FALLBACK_REASONS: [&str; 11] = [
    "kilnd_unreachable",
    "unserializable",
    "worker_failed",
    // The graph calls an operator the job registered itself, which kilnd's workers lack.
    "job_operator",
    "torch_mismatch",
    "not_reused",
    "no_torch_worker",
    // Another process's compile did not land within the waiter's bound: it compiled the graph.
    "late",
    // Not failures: the graph's code names its own GPU and no tier had it (torch's own compile),
    // the client's setting leaves its layout out, or its default does.
    "unshared",
    "not_chosen",
    "layout_off",
];
/// The reasons that are no failure: counted, never an event.
const QUIET_REASONS: [&str; 3] = ["unshared", "not_chosen", "layout_off"];

#[derive(Debug)]
pub struct Ledger {
    metrics: Arc<Metrics>,
    /// Each job's ledger, most recently reported first.
    jobs: Mutex<VecDeque<Job>>,
    /// This host's name as kiln-cache takes it: recorded in each process's costs.
    host: String,
    /// The latest graph compiles, failures and reported fallbacks, newest last: kilnd's recent
    /// misses show them beside kernels'.
    events: Mutex<VecDeque<pb::RecentMiss>>,
    /// What each graph's key was made of, and why each recent miss missed: `kiln explain`.
    pub recipes: RecipeBook,
}

/// Graph events kept for the recent misses.
pub const RECENT_EVENTS: usize = 64;

/// One job's ledger and its return as last reckoned.
#[derive(Debug)]
struct Job {
    ledger: pb::TorchJobLedger,
    ret: pb::TorchJobReturn,
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
    pub fn new(metrics: Arc<Metrics>, host: &str) -> Self {
        Ledger {
            metrics,
            jobs: Mutex::default(),
            host: crate::runtime::host::wire_name(host),
            events: Mutex::default(),
            recipes: RecipeBook::default(),
        }
    }

    /// Logs one line for a graph's compile, failure or fallback and keeps it for the recent
    /// misses (the job as the miss's graph, the graph's name as its kernel, toolchain `torch`).
    pub fn event(&self, job: &str, graph: &str, key: &str, reason: &str, detail: String) {
        if matches!(reason, "failed" | "refused") {
            tracing::warn!(job = %job, graph = %graph, key = %key, reason = %reason, "torch graph: {detail}");
        } else {
            tracing::info!(job = %job, graph = %graph, key = %key, reason = %reason, "torch graph: {detail}");
        }
        let mut events = self.events.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if events.len() == RECENT_EVENTS {
            events.pop_front();
        }
        events.push_back(pb::RecentMiss {
            unix_millis: kiln_serve::html::now_ms(),
            graph: job.to_owned(),
            kernel_id: graph.to_owned(),
            kernel_name: String::new(),
            toolchain: "torch".into(),
            reason: reason.to_owned(),
            detail,
            key: key.to_owned(),
        });
    }

    /// The kept graph events, newest first.
    pub fn events(&self) -> Vec<pb::RecentMiss> {
        let events = self.events.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        events.iter().rev().cloned().collect()
    }

    /// How the processes of `job` that reported a graph named `name` ran it where none asked
    /// kilnd for it: "in-process" (compiled there, as torch would) or "eager" (never compiled),
    /// with how many processes did so. None where no process reported it, or one was served by
    /// kilnd. `kiln explain` says so rather than "unknown" for a graph that stayed home.
    pub fn stayed_home(&self, job: &str, name: &str) -> Option<(String, usize)> {
        let jobs = self.jobs.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let ledger = &jobs.iter().find(|j| j.ledger.job == job)?.ledger;
        let served: Vec<&str> = ledger
            .processes
            .iter()
            .flat_map(|p| p.graphs.iter())
            .filter(|g| g.name == name)
            .map(|g| g.served.as_str())
            .collect();
        let home = served.iter().all(|s| matches!(*s, "in-process" | "eager"));
        (home && !served.is_empty()).then(|| (served[0].to_owned(), served.len()))
    }

    pub fn count(&self, outcome: Outcome) {
        self.metrics.torch_graphs.get_or_create(&ResultLabels { result: outcome.as_str() }).inc();
    }

    /// Takes one process's report (validated): counts its fallbacks since its last report and
    /// merges its costs into the job's ledger. Answers the job's return as this host reckons it,
    /// and the process's costs as the fleet ledger takes them.
    pub fn report(&self, report: &pb::TorchGraphReport) -> (pb::TorchJobReturn, pb::TorchProcessCosts) {
        for (reason, n) in &report.fallbacks {
            let reason = if FALLBACK_REASONS.contains(&reason.as_str()) { reason.clone() } else { "other".into() };
            self.metrics.torch_graph_fallbacks.get_or_create(&ReasonLabels { reason: reason.clone() }).inc_by(*n);
            if *n > 0 && !QUIET_REASONS.contains(&reason.as_str()) {
                let detail = format!("a process of the job compiled {n} graph(s) in-process instead ({reason})");
                self.event(&report.job, "", "", &format!("fallback:{reason}"), detail);
            }
        }
        let costs = self.costs(report);
        let mut jobs = self.jobs.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let held = jobs.iter().position(|j| j.ledger.job == report.job).and_then(|i| jobs.remove(i));
        let mut job = held.unwrap_or_else(|| Job::new(&report.job));
        torch_ledger::record(&mut job.ledger, costs.clone());
        job.ret = torch_ledger::job_return(&job.ledger);
        let ret = job.ret.clone();
        // A process with no graph yet (fallbacks only) makes no job row.
        if job.ret.graphs.is_empty() {
            return (ret, costs);
        }
        self.metrics.torch_jobs.set(&job.ret);
        jobs.push_front(job);
        while jobs.len() > MAX_JOBS {
            if let Some(old) = jobs.pop_back() {
                self.metrics.torch_jobs.remove(&old.ledger.job);
            }
        }
        (ret, costs)
    }

    /// A report's costs as the ledger keeps them: the process's id (one shared per job by
    /// clients that send none), this host, and its steps.
    fn costs(&self, r: &pb::TorchGraphReport) -> pb::TorchProcessCosts {
        let now = kiln_serve::html::now_ms();
        pb::TorchProcessCosts {
            process: if r.process.is_empty() { torch_ledger::UNNAMED_PROCESS.into() } else { r.process.clone() },
            host: self.host.clone(),
            rank: r.rank.max(-1),
            started_unix_ms: if r.started_unix_ms == 0 { now } else { r.started_unix_ms },
            updated_unix_ms: now,
            steps: r.graphs.iter().map(|g| g.eager_calls.saturating_add(g.compiled_calls)).max().unwrap_or(0),
            ended: r.ended,
            graphs: r.graphs.clone(),
            folded: 0,
            first_step_unix_ms: r.first_step_unix_ms,
        }
    }

    /// Jobs' returns as this host's processes reported them, most recent first: one job's
    /// (`job` not empty), at most `limit`.
    pub fn returns(&self, job: &str, limit: usize) -> Vec<pb::TorchJobReturn> {
        let jobs = self.jobs.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        jobs.iter().filter(|j| job.is_empty() || j.ledger.job == job).take(limit).map(|j| j.ret.clone()).collect()
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
        pb::TorchGraphStats {
            compiled: Metrics::counted(&m.torch_graphs, "compiled"),
            failed: Metrics::counted(&m.torch_graphs, "failed"),
            hits: Metrics::counted(&m.torch_graphs, "hit"),
            fallbacks: fallbacks.into_iter().collect(),
            jobs: self.returns("", MAX_JOBS),
        }
    }
}

impl Job {
    fn new(job: &str) -> Self {
        Job {
            ledger: pb::TorchJobLedger { job: job.to_owned(), ..Default::default() },
            ret: pb::TorchJobReturn::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(process: &str, calls: u64, eager: f64) -> pb::TorchGraphReport {
        pb::TorchGraphReport {
            job: "a".into(),
            process: process.into(),
            rank: -1,
            graphs: vec![pb::TorchGraphCost {
                name: "g".into(),
                eager_calls: calls / 2,
                compiled_calls: calls - calls / 2,
                eager_median_s: eager,
                compiled_median_s: 0.01,
                eager_samples: u64::from(eager > 0.0),
                compiled_samples: calls - calls / 2,
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    #[test]
    fn reports_merge_per_process_and_bound_fallback_labels() {
        let ledger = Ledger::new(Arc::new(Metrics::new()), "gpu 1");
        let mut fallbacks = std::collections::HashMap::new();
        fallbacks.insert("kilnd_unreachable".to_string(), 2);
        fallbacks.insert("made-up".to_string(), 1);
        ledger.report(&pb::TorchGraphReport { fallbacks, ..report("proc-0001", 4, 0.02) });
        ledger.report(&report("proc-0001", 8, 0.02));
        let (ret, costs) = ledger.report(&report("proc-0002", 10, 0.02));
        assert_eq!((costs.host.as_str(), costs.process.as_str(), costs.steps), ("gpu-1", "proc-0002", 10));
        assert_eq!((ret.steps, ret.processes), (18, 2), "one process's reports replace each other");
        let s = ledger.stats();
        assert_eq!(s.jobs.len(), 1);
        assert_eq!(s.fallbacks.get("kilnd_unreachable"), Some(&2));
        assert_eq!(s.fallbacks.get("other"), Some(&1));
    }

    #[test]
    fn an_unmeasured_job_exports_no_speedup_or_break_even() {
        let metrics = Arc::new(Metrics::new());
        let ledger = Ledger::new(Arc::clone(&metrics), "h");
        ledger.report(&pb::TorchGraphReport { job: "unmeasured".into(), ..report("proc-0001", 10, 0.0) });
        ledger.report(&pb::TorchGraphReport { job: "measured".into(), ..report("proc-0002", 10, 0.02) });
        let text = metrics.render();
        assert!(!text.contains("kiln_torch_job_speedup{torch_job=\"unmeasured\"}"), "{text}");
        assert!(!text.contains("kiln_torch_job_break_even_steps{torch_job=\"unmeasured\"}"), "{text}");
        assert!(text.contains("kiln_torch_job_speedup{torch_job=\"measured\"} 2.0"), "{text}");
        assert!(text.contains("kiln_torch_job_compile_seconds{torch_job=\"unmeasured\"} 0"), "{text}");
    }

    #[test]
    fn graph_events_are_kept_newest_first_and_bounded() {
        let ledger = Ledger::new(Arc::new(Metrics::new()), "h");
        for n in 0..RECENT_EVENTS + 3 {
            ledger.event("j", &format!("g{n}"), "", "compiled", "cold".into());
        }
        let mut fallbacks = std::collections::HashMap::new();
        fallbacks.insert("not_reused".to_string(), 2);
        ledger.report(&pb::TorchGraphReport { fallbacks, ..report("proc-0001", 4, 0.02) });
        let events = ledger.events();
        assert_eq!(events.len(), RECENT_EVENTS);
        assert_eq!((events[0].reason.as_str(), events[0].toolchain.as_str()), ("fallback:not_reused", "torch"));
        assert_eq!(events[1].kernel_id, format!("g{}", RECENT_EVENTS + 2));
    }

    #[test]
    fn an_older_clients_reports_replace_each_other() {
        let ledger = Ledger::new(Arc::new(Metrics::new()), "h");
        ledger.report(&report("", 4, 0.02));
        let (ret, _) = ledger.report(&report("", 8, 0.02));
        assert_eq!((ret.steps, ret.processes), (8, 1));
    }
}
