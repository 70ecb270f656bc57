//! The table of torch.compile jobs' returns, as kilnd's host page (this host's processes) and
//! kiln-cache's fleet page (every host's) both draw it. Job names and verdicts come from
//! clients: they reach the page only as cell text, which the builder escapes.

use crate::html::{Cell, Page, Row};
use kiln_proto::pb::TorchJobReturn;
use kiln_proto::torch_ledger::thousands;

/// The table's columns.
pub const HEADERS: [&str; 12] = [
    "job",
    "eager step ms",
    "compiled step ms",
    "speedup",
    "compile paid s",
    "processes' own s",
    "saved by the caches s",
    "steps",
    "break-even steps",
    "processes",
    "rank skew s",
    "verdict",
];

/// A job's cell ids start with this and its row's position (job names are client text).
fn id(i: usize, what: &str) -> String {
    format!("torch-job-{i}-{what}")
}

/// The rows, in the order given. A figure not known yet is a dash: a zero would read as measured.
pub fn rows(jobs: &[TorchJobReturn]) -> Vec<Row> {
    let ms = |s: f64| if s > 0.0 { format!("{:.2}", s * 1e3) } else { "—".to_owned() };
    jobs.iter()
        .enumerate()
        .map(|(i, j)| {
            let name = if j.job.is_empty() { "(unnamed job)" } else { j.job.as_str() };
            let speedup = if j.speedup > 0.0 { format!("{:.2}×", j.speedup) } else { "—".to_owned() };
            // A break-even of 0 is either a compiled step no faster than an eager one (measured
            // both ways: it never pays) or nothing measured both ways yet.
            let break_even = if j.break_even_steps > 0.0 {
                thousands(j.break_even_steps.ceil() as u64)
            } else if j.speedup > 0.0 {
                "never".to_owned()
            } else {
                "—".to_owned()
            };
            let eager = match j.eager_basis.as_str() {
                "contended" => format!("{} (contended)", ms(j.eager_step_s)),
                _ => ms(j.eager_step_s),
            };
            let losing = j.speedup > 0.0 && (j.speedup <= 1.0 || (j.ended && (j.steps as f64) < j.break_even_steps));
            let processes = if j.folded_processes > 0 {
                format!("{} ({} folded)", j.processes, j.folded_processes)
            } else {
                j.processes.to_string()
            };
            // The spread of first-step ends needs two processes of one start.
            let skew =
                if j.first_step_processes > 1 { format!("{:.2}", j.first_step_skew_s) } else { "—".to_owned() };
            Row::new(vec![
                name.into(),
                Cell::from(eager).id(id(i, "eager")),
                Cell::from(ms(j.compiled_step_s)).id(id(i, "compiled")),
                Cell::from(speedup).id(id(i, "speedup")),
                Cell::from(format!("{:.1}", j.cold_compile_s)).id(id(i, "compile-paid")),
                Cell::from(format!("{:.1}", j.process_compile_s)).id(id(i, "process-seconds")),
                Cell::from(format!("{:.1}", j.saved_s)).id(id(i, "saved")),
                Cell::from(j.steps).id(id(i, "steps")),
                Cell::from(break_even).id(id(i, "break-even")),
                Cell::from(processes).id(id(i, "processes")),
                Cell::from(skew).id(id(i, "skew")),
                Cell::from(j.verdict.as_str()).id(id(i, "verdict")).flagged(losing),
            ])
            .key(name)
            .flagged(losing)
        })
        .collect()
}

/// Draws the table under `id`.
pub fn table(page: &mut Page, id: &str, jobs: &[TorchJobReturn]) {
    page.table(id, &HEADERS, &rows(jobs));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_figures_are_dashes_and_a_losing_job_is_flagged() {
        let job = |speedup: f64, ended: bool| TorchJobReturn {
            job: "j<b>".into(),
            speedup,
            eager_step_s: 0.02,
            compiled_step_s: 0.01,
            break_even_steps: 100.0,
            steps: 40,
            ended,
            processes: 3,
            folded_processes: 1,
            eager_basis: "contended".into(),
            first_step_skew_s: 1.5,
            first_step_processes: if ended { 2 } else { 1 },
            ..Default::default()
        };
        let mut page = Page::new("t", "s", 5);
        table(&mut page, "jobs", &[job(2.0, true), job(0.0, false), job(0.8, false)]);
        let html = page.finish();
        assert!(html.contains("<tr data-key=\"j&lt;b&gt;\" class=\"flag\"><td>j&lt;b&gt;</td>"), "{html}");
        assert!(html.contains("<td id=\"torch-job-0-eager\">20.00 (contended)</td>"), "{html}");
        assert!(html.contains("<td id=\"torch-job-0-processes\">3 (1 folded)</td>"), "{html}");
        assert!(html.contains("<td id=\"torch-job-1-speedup\">—</td>"), "{html}");
        assert!(html.contains("<td id=\"torch-job-0-skew\" class=\"n\">1.50</td>"), "{html}");
        assert!(html.contains("<td id=\"torch-job-1-skew\">—</td>"), "{html}");
        assert!(html.contains("<td id=\"torch-job-2-break-even\" class=\"n\">100</td>"), "{html}");
        assert_eq!(html.matches("<tr data-key").count(), 3);
        assert_eq!(html.matches("class=\"flag\"><td>").count(), 2, "{html}");
    }
}
