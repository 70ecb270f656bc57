//! torch.compile jobs' returns for people: `kiln roi`, and each job in `kiln stats`.

use kiln_proto::pb;
use kiln_proto::torch_ledger::thousands;
use std::fmt::Write as _;

/// One job: its verdict, then its figures, each line indented by `indent`.
pub fn job_text(job: &pb::TorchJobReturn, indent: &str) -> String {
    let name = if job.job.is_empty() { "(unnamed job)" } else { &job.job };
    let mut text = format!("{indent}job {name}: {}\n", job.verdict);
    if job.speedup > 0.0 {
        let basis = match job.eager_basis.as_str() {
            "contended" => " (timed while a compile ran on the host)",
            _ => "",
        };
        let _ = writeln!(
            text,
            "{indent}  step {:.2} ms eager{basis}, {:.2} ms compiled ({:.2}x)",
            job.eager_step_s * 1e3,
            job.compiled_step_s * 1e3,
            job.speedup
        );
    }
    let _ = writeln!(
        text,
        "{indent}  compile {:.1} s: {:.1} s cold (once per graph), {:.1} s the processes' own; the caches saved {:.1} s",
        job.compile_s, job.cold_compile_s, job.process_compile_s, job.saved_s
    );
    let processes = match (job.processes, job.folded_processes) {
        (0, _) => String::new(),
        (1, _) => " by 1 process".to_owned(),
        (n, 0) => format!(" by {n} processes"),
        (n, f) => format!(" by {n} processes ({f} folded into one aggregate)"),
    };
    let pays = if job.break_even_steps > 0.0 {
        format!("; pays after {}", thousands(job.break_even_steps.ceil() as u64))
    } else {
        String::new()
    };
    let ended = if job.ended { "; ended" } else { "" };
    let _ = writeln!(text, "{indent}  {} steps{processes}{pays}{ended}", thousands(job.steps));
    if job.first_step_processes > 1 {
        let _ = writeln!(
            text,
            "{indent}  first steps ended within {:.2} s of each other across the latest start's {} processes (rank skew)",
            job.first_step_skew_s, job.first_step_processes
        );
    }
    text
}

/// `kiln roi`'s answer: where the figures come from, then each job.
pub fn roi_text(reply: &pb::TorchJobsReply, asked: &str) -> String {
    let mut text = match reply.source.as_str() {
        "fleet" => "from the fleet ledger (every host's processes)".to_owned(),
        _ => "from this kilnd's ledger".to_owned(),
    };
    if !reply.source_detail.is_empty() {
        let _ = write!(text, ": {}", reply.source_detail);
    }
    text.push('\n');
    if reply.jobs.is_empty() {
        let none = if asked.is_empty() {
            "no torch.compile job has reported yet (kiln.torch reports 30 s after a graph compiles, and at exit)"
                .to_owned()
        } else {
            format!("no ledger for job {asked}")
        };
        text.push_str(&none);
        text.push('\n');
    }
    for job in &reply.jobs {
        text.push_str(&job_text(job, ""));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job() -> pb::TorchJobReturn {
        pb::TorchJobReturn {
            job: "llama-async".into(),
            eager_step_s: 0.01704,
            compiled_step_s: 0.00597,
            speedup: 2.854,
            compile_s: 18.3,
            cold_compile_s: 18.0,
            process_compile_s: 0.3,
            saved_s: 40.1,
            break_even_steps: 1655.2,
            steps: 1500,
            processes: 3,
            eager_basis: "uncontended".into(),
            verdict: "the compile has not paid for itself yet".into(),
            ..Default::default()
        }
    }

    #[test]
    fn a_job_says_its_figures() {
        let text = job_text(&job(), "");
        assert_eq!(
            text,
            "job llama-async: the compile has not paid for itself yet\n  step 17.04 ms eager, 5.97 ms compiled (2.85x)\n  \
             compile 18.3 s: 18.0 s cold (once per graph), 0.3 s the processes' own; the caches saved 40.1 s\n  \
             1,500 steps by 3 processes; pays after 1,656\n"
        );
        let skewed = pb::TorchJobReturn { first_step_skew_s: 1.234, first_step_processes: 4, ..job() };
        assert!(job_text(&skewed, "").ends_with(
            "pays after 1,656\n  first steps ended within 1.23 s of each other across the latest start's 4 processes \
             (rank skew)\n"
        ));
        let contended = pb::TorchJobReturn { eager_basis: "contended".into(), ..job() };
        assert!(job_text(&contended, "").contains("eager (timed while a compile ran on the host)"));
    }

    #[test]
    fn the_answer_says_where_it_is_from_and_when_there_is_nothing() {
        let reply = pb::TorchJobsReply { jobs: vec![job()], source: "fleet".into(), ..Default::default() };
        assert!(roi_text(&reply, "").starts_with("from the fleet ledger (every host's processes)\njob llama-async"));
        let none =
            pb::TorchJobsReply { source: "kilnd".into(), source_detail: "no fleet cache".into(), ..Default::default() };
        assert_eq!(roi_text(&none, "x"), "from this kilnd's ledger: no fleet cache\nno ledger for job x\n");
    }
}
