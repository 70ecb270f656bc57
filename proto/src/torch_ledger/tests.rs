//! The ledger's unit tests: break-even, verdicts, merging across runs and processes, bounds.

use super::*;
use crate::pb::{TorchGraphCost, TorchJobLedger, TorchProcessCosts};

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
fn a_report_that_arrives_after_the_final_one_changes_nothing() {
    let mut l = TorchJobLedger { job: "j".into(), ..Default::default() };
    let p = |calls: u64, ended: bool| TorchProcessCosts {
        ended,
        ..process("proc-0001", vec![graph("g", 0.02, 0.01, calls)])
    };
    assert!(record(&mut l, p(10, false)));
    assert!(record(&mut l, p(40, true)));
    assert!(!record(&mut l, p(30, false)), "an earlier report in flight at exit is stale");
    let r = job_return(&l);
    assert!(r.ended && r.steps == 40, "{r:?}");
    assert!(record(&mut l, p(40, true)), "the final report sent again is taken");
}

#[test]
fn the_ledger_stays_under_its_byte_bound() {
    let mut l = TorchJobLedger { job: "j".into(), ..Default::default() };
    for i in 0..MAX_PROCESSES {
        let graphs = (0..MAX_GRAPHS + 10).map(|n| graph(&format!("{}{n}", "x".repeat(200)), 0.02, 0.01, 10)).collect();
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

/// A rank's process that started at `started` and ended its first step at `first_step` (ms).
fn ranked(id: &str, rank: i32, started: u64, first_step: u64) -> TorchProcessCosts {
    TorchProcessCosts {
        rank,
        started_unix_ms: started,
        first_step_unix_ms: first_step,
        ..process(id, vec![graph("g", 0.0, 0.01, 10)])
    }
}

#[test]
fn rank_skew_is_the_spread_of_the_latest_starts_first_steps() {
    // Four ranks of one start: the spread of their first steps, whatever order they report in.
    let start = vec![
        ranked("p-000001", 0, 1_000, 31_000),
        ranked("p-000002", 1, 1_200, 32_500),
        ranked("p-000003", 2, 1_100, 30_900),
        ranked("p-000004", 3, 1_300, 31_400),
    ];
    let r = job_return(&ledger(start.clone()));
    assert_eq!(r.first_step_processes, 4);
    assert!((r.first_step_skew_s - 1.6).abs() < 1e-9, "{}", r.first_step_skew_s);
    // A restart of ranks 0 and 1 (their peers not reported yet): the old processes of those ranks
    // and of ranks 2 and 3, whose first steps ended before the restart, are left out.
    let mut again = start;
    again.push(ranked("p-000005", 0, 90_000, 95_000));
    again.push(ranked("p-000006", 1, 90_400, 95_250));
    let r = job_return(&ledger(again.clone()));
    assert_eq!(r.first_step_processes, 2);
    assert!((r.first_step_skew_s - 0.25).abs() < 1e-9, "{}", r.first_step_skew_s);
    // A process still in its first step counts once it has ended it; one process has no spread.
    again.push(ranked("p-000007", 2, 90_600, 0));
    assert_eq!(job_return(&ledger(again)).first_step_processes, 2);
    // Two worlds of one job started together (each host its own rank 0): both count.
    let twins = job_return(&ledger(vec![ranked("p-000010", 0, 10, 900), ranked("p-000011", 0, 20, 1_400)]));
    assert_eq!(twins.first_step_processes, 2);
    assert!((twins.first_step_skew_s - 0.5).abs() < 1e-9, "{}", twins.first_step_skew_s);
    let alone = job_return(&ledger(vec![ranked("p-000008", -1, 5, 500)]));
    assert_eq!((alone.first_step_processes, alone.first_step_skew_s), (1, 0.0));
    assert_eq!(job_return(&ledger(vec![ranked("p-000009", 0, 5, 0)])).first_step_processes, 0);
}

#[test]
fn a_first_step_before_its_process_started_is_refused_by_name() {
    let bad = ranked("p-000001", 0, 2_000, 1_000);
    let err = check_process("process", &bad).unwrap_err();
    assert_eq!(err.field, "process.first_step_unix_ms");
    assert!(check_process("process", &ranked("p-000001", 0, 0, 1_000)).is_err());
    assert!(check_process("process", &ranked("p-000001", 0, 2_000, 0)).is_ok());
    assert!(check_process("process", &ranked("p-000001", 0, 2_000, 2_000)).is_ok());
}

#[test]
fn a_compiled_figure_of_fewer_than_five_steps_gives_no_verdict_yet() {
    // Three compiled steps just after a swap, slow beside its threads: no advice to run eagerly.
    let few = TorchGraphCost { compiled_samples: 3, ..graph("g", 0.0065, 0.1309, 400) };
    let r = job_return(&ledger(vec![process("p-000001", vec![few.clone()])]));
    assert_eq!((r.speedup, r.eager_basis.as_str()), (0.0, ""));
    assert_eq!(r.verdict, "not measured yet: no graph has run both eagerly and compiled (5 steps) yet");
    // Five make a figure.
    let five = TorchGraphCost { compiled_samples: MIN_COMPILED_SAMPLES, ..few };
    let r = job_return(&ledger(vec![process("p-000001", vec![five])]));
    assert!(r.verdict.starts_with("the compile does not pay"), "{}", r.verdict);
}
