//! `kiln doctor`'s proof that a running kilnd's toolchains compile: each probe kernel of
//! `kiln_proto::probe` (a tiny CUDA kernel, a tiny PTX, a tiny Triton kernel) sent through the
//! daemon's own `Compile`, one graph apiece so a broken toolchain does not hide the others. The
//! daemon compiles them as it compiles anything (its user, its config, its Triton box) the first
//! time; later they are hits, which still prove the toolchain's fingerprint is the one live now
//! (and, for Triton, that its workers start, since every Triton key needs their fingerprint).

use crate::output::tier_label;
use kiln_client::{Client, pb};
use std::time::{Duration, Instant};

/// How long one probe may take: Triton's first compile starts its pool (an import of Triton).
const PROBE_TIMEOUT: Duration = Duration::from_secs(180);

/// One toolchain's probe through the daemon.
#[derive(Debug, Clone, PartialEq)]
pub struct ProbeResult {
    pub toolchain: &'static str,
    pub outcome: Result<Served, String>,
}

/// A probe the daemon answered with a cubin.
#[derive(Debug, Clone, PartialEq)]
pub struct Served {
    /// `compiled`, `memory`, `disk`, `remote` or `joined`.
    pub tier: &'static str,
    pub compile: Duration,
    /// From the request to its answer, as this client saw it.
    pub elapsed: Duration,
}

/// Sends every probe for `target` (empty: the daemon's default).
pub async fn run(client: &Client, target: &str) -> Vec<ProbeResult> {
    let mut results = Vec::new();
    for probe in kiln_proto::probe::all() {
        let started = Instant::now();
        let outcome = match tokio::time::timeout(PROBE_TIMEOUT, one(client, &probe, target)).await {
            Ok(outcome) => outcome,
            Err(_) => Err(format!("no answer in {} s", PROBE_TIMEOUT.as_secs())),
        };
        let outcome = outcome.map(|(tier, compile)| Served { tier, compile, elapsed: started.elapsed() });
        results.push(ProbeResult { toolchain: probe.toolchain, outcome });
    }
    results
}

async fn one(
    client: &Client,
    probe: &kiln_proto::probe::Probe,
    target: &str,
) -> Result<(&'static str, Duration), String> {
    let request = pb::CompileRequest { graph: Some(probe.graph(target)), omit_artifacts: true, ..Default::default() };
    let job = client.compile(request).await.map_err(|e| e.to_string())?.collect().await.map_err(|e| e.to_string())?;
    let kernel = job.kernel(probe.toolchain).ok_or("the daemon answered without the probe kernel")?;
    if kernel.outcome() != pb::Outcome::Ok {
        return Err(format!("the probe kernel did not compile: {}", kernel.log.trim()));
    }
    let tier = tier_label(kernel.tier()).unwrap_or("unknown");
    Ok((tier, Duration::from_micros(kernel.compile_micros)))
}

/// One line per toolchain: `nvrtc       ok: compiled in 38 ms` or `triton      FAILED: why`.
pub fn text(results: &[ProbeResult]) -> String {
    let ms = |d: Duration| format!("{:.0} ms", d.as_secs_f64() * 1000.0);
    results
        .iter()
        .map(|r| match &r.outcome {
            Ok(s) if s.tier == "compiled" => {
                format!(
                    "{:<15} ok: {} in {} ({} in all)\n",
                    r.toolchain,
                    if r.toolchain == "ptxas" { "assembled a tiny PTX" } else { "compiled a tiny kernel" },
                    ms(s.compile),
                    ms(s.elapsed)
                )
            }
            Ok(s) => format!(
                "{:<15} ok: its tiny kernel was a hit ({}) in {}, compiled earlier by the toolchain live now\n",
                r.toolchain,
                s.tier,
                ms(s.elapsed)
            ),
            Err(why) => format!("{:<15} FAILED: {why}\n", r.toolchain),
        })
        .collect()
}

/// Each failed probe as a problem: its toolchain and the daemon's words, which carry the fix.
pub fn problems(results: &[ProbeResult]) -> Vec<String> {
    results
        .iter()
        .filter_map(|r| r.outcome.as_ref().err().map(|why| format!("kilnd cannot compile with {}: {why}", r.toolchain)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn served(tier: &'static str) -> Result<Served, String> {
        Ok(Served { tier, compile: Duration::from_millis(38), elapsed: Duration::from_millis(52) })
    }

    #[test]
    fn each_toolchain_gets_a_line_and_a_failure_is_a_problem_with_its_fix() {
        let results = [
            ProbeResult { toolchain: "nvrtc", outcome: served("compiled") },
            ProbeResult { toolchain: "ptxas", outcome: served("memory") },
            ProbeResult {
                toolchain: "triton",
                outcome: Err(
                    "FAILED_PRECONDITION: triton unavailable; fix: `/x/python -m pip install triton==3.6.0`".into()
                ),
            },
        ];
        let text = text(&results);
        assert!(text.contains("nvrtc           ok: compiled a tiny kernel in 38 ms (52 ms in all)\n"), "{text}");
        assert!(
            text.contains("ptxas           ok: its tiny kernel was a hit (memory) in 52 ms, compiled earlier"),
            "{text}"
        );
        assert!(text.contains("triton          FAILED: FAILED_PRECONDITION"), "{text}");
        let problems = problems(&results);
        assert_eq!(problems.len(), 1);
        assert!(problems[0].starts_with("kilnd cannot compile with triton: ") && problems[0].contains("pip install"));
    }
}
