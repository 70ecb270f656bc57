//! `kiln doctor`: can this host compile through kiln, and will it share with its fleet?
//!
//! It reports the daemon URI and whether the daemon answers; from the daemon's stats, its
//! version, toolchains (with the fingerprints that decide sharing), GPUs, default target and
//! tiers, and the fleet cache (reachable, refused kilnd's token, or unreachable, with the fix).
//! It then proves that each toolchain compiles: a tiny kernel per toolchain through the daemon
//! ([`super::probe`]). When the daemon cannot be reached it runs `kilnd check` here instead,
//! which compiles the same kernels itself. Exit code 1 when the daemon is unreachable, has no
//! toolchain, cannot compile with one of them, or cannot use the fleet cache it was given.

use super::local_check::{LocalCheck, run_kilnd_check};
use super::probe::{self, ProbeResult};
use crate::output::stats::{FINGERPRINT_NOTE, details_text, fleet_problem, fleet_text, identity_text};
use crate::report::print_line;
use anyhow::Context;
use kiln_client::pb;
use serde_json::{Value, json};
use std::fmt::Write as _;
use std::process::ExitCode;

/// Everything the doctor found.
#[derive(Debug)]
struct Diagnosis {
    daemon: String,
    /// Why the daemon could not be reached or asked; `None` when `stats` is set.
    error: Option<String>,
    reachable: bool,
    stats: Option<pb::StatsResponse>,
    /// Each toolchain's tiny kernel through the daemon; empty when it could not be asked.
    probes: Vec<ProbeResult>,
    /// Only when the daemon could not be reached.
    local_check: Option<LocalCheck>,
}

impl Diagnosis {
    /// What is wrong, in words; empty when the host is ready.
    fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if let Some(error) = &self.error {
            problems.push(error.clone());
        }
        if self.stats.as_ref().is_some_and(|s| s.toolchains.is_empty()) {
            problems.push("kilnd has no usable toolchain: run `kilnd check` on the daemon's host".to_owned());
        }
        problems.extend(probe::problems(&self.probes));
        if let Some(LocalCheck::Ran { program, exit_code: Some(code), .. }) = &self.local_check
            && *code != 0
        {
            problems
                .push(format!("{} check found a toolchain that cannot compile (its fix is above)", program.display()));
        }
        problems.extend(self.stats.as_ref().and_then(fleet_problem));
        problems
    }
}

pub async fn run(daemon: &str, json: bool) -> anyhow::Result<ExitCode> {
    let diagnosis = diagnose(daemon).await;
    let text = if json {
        serde_json::to_string_pretty(&diagnosis_json(&diagnosis)).context("encoding the report as JSON")?
    } else {
        diagnosis_text(&diagnosis)
    };
    print_line(text.trim_end())?;
    Ok(if diagnosis.problems().is_empty() { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

async fn diagnose(daemon: &str) -> Diagnosis {
    let mut diagnosis = Diagnosis {
        daemon: daemon.to_owned(),
        error: None,
        reachable: false,
        stats: None,
        probes: Vec::new(),
        local_check: None,
    };
    match kiln_client::connect(daemon).await {
        Ok(client) => {
            diagnosis.reachable = true;
            match client.stats().await {
                Ok(stats) => {
                    // The daemon's default target, else one every pinned toolchain supports.
                    let target = match stats.default_target.as_str() {
                        "" => kiln_proto::probe::fallback_target().to_string(),
                        t => t.to_owned(),
                    };
                    diagnosis.probes = probe::run(&client, &target).await;
                    // Asked again: the probes started what starts on first use (Triton's pool).
                    diagnosis.stats = Some(client.stats().await.unwrap_or(stats));
                }
                Err(err) => diagnosis.error = Some(format!("kilnd answered, but not to Stats: {err}")),
            }
        }
        Err(err) => {
            diagnosis.error = Some(err.to_string());
            diagnosis.local_check = Some(run_kilnd_check().await);
        }
    }
    diagnosis
}

fn diagnosis_text(d: &Diagnosis) -> String {
    let mut text = format!("daemon          {}\n", d.daemon);
    let _ = writeln!(text, "reachable       {}", if d.reachable { "yes" } else { "no" });
    if let Some(stats) = &d.stats {
        text.push_str(&identity_text(stats));
        let _ = writeln!(text, "fleet cache     {}", fleet_text(stats));
        text.push_str(&details_text(stats));
    }
    if !d.probes.is_empty() {
        text.push_str("\ncompiles through kilnd (a tiny kernel per toolchain):\n");
        text.push_str(&probe::text(&d.probes));
    }
    if let Some(check) = &d.local_check {
        text.push('\n');
        text.push_str(&local_check_text(check));
    }
    let _ = writeln!(text, "\nnote: {FINGERPRINT_NOTE}");
    let problems = d.problems();
    if problems.is_empty() {
        let n = d.stats.as_ref().map_or(0, |s| s.toolchains.len());
        let fleet = match d.stats.as_ref() {
            Some(s) if !s.remote.is_empty() && s.remote_state == "up" => ", and the fleet cache answers",
            Some(s) if !s.remote.is_empty() => ", and the fleet cache has not answered yet",
            _ => "",
        };
        let compiled = if d.probes.is_empty() { "" } else { ", each of which compiled" };
        let _ =
            writeln!(text, "ok: kilnd is reachable with {n} toolchain{}{compiled}{fleet}", crate::output::plural(n));
    }
    for problem in problems {
        let _ = writeln!(text, "problem: {problem}");
    }
    text
}

fn local_check_text(check: &LocalCheck) -> String {
    match check {
        LocalCheck::NotFound => {
            "kilnd check    not run: no kilnd next to kiln or on PATH, so this host cannot run the daemon as is\n"
                .to_owned()
        }
        LocalCheck::Error { program, message } => {
            format!("kilnd check    {} check could not run: {message}\n", program.display())
        }
        LocalCheck::Ran { program, exit_code, output } => {
            let status = exit_code.map_or_else(|| "killed by a signal".to_owned(), |c| format!("exit code {c}"));
            let mut text = format!("kilnd check    {} check ({status}):\n", program.display());
            for line in output.trim_end().lines() {
                let _ = writeln!(text, "    {line}");
            }
            text
        }
    }
}

fn diagnosis_json(d: &Diagnosis) -> Value {
    let local_check = d.local_check.as_ref().map(|check| match check {
        LocalCheck::NotFound => json!({ "found": false }),
        LocalCheck::Error { program, message } => {
            json!({ "found": true, "path": program.display().to_string(), "error": message })
        }
        LocalCheck::Ran { program, exit_code, output } => {
            json!({ "found": true, "path": program.display().to_string(), "exit_code": exit_code, "output": output })
        }
    });
    json!({
        "daemon": d.daemon,
        "reachable": d.reachable,
        "error": d.error,
        // The proto3 JSON mapping of StatsResponse, as `kiln stats --json` prints it.
        "stats": d.stats.as_ref().and_then(|s| serde_json::to_value(s).ok()),
        "kilnd_check": local_check,
        "probes": d.probes.iter().map(probe_json).collect::<Vec<_>>(),
        "problems": d.problems(),
        "note": FINGERPRINT_NOTE,
    })
}

fn probe_json(r: &ProbeResult) -> Value {
    match &r.outcome {
        Ok(s) => json!({
            "toolchain": r.toolchain, "ok": true, "tier": s.tier,
            "compile_ms": s.compile.as_secs_f64() * 1000.0, "elapsed_ms": s.elapsed.as_secs_f64() * 1000.0,
        }),
        Err(why) => json!({ "toolchain": r.toolchain, "ok": false, "error": why }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unreachable(check: LocalCheck) -> Diagnosis {
        Diagnosis {
            daemon: "unix:///tmp/none.sock".into(),
            error: Some("cannot reach kilnd at unix:///tmp/none.sock: is kilnd running?".into()),
            reachable: false,
            stats: None,
            probes: Vec::new(),
            local_check: Some(check),
        }
    }

    #[test]
    fn an_unreachable_daemon_is_a_problem_and_shows_the_local_check() {
        let d = unreachable(LocalCheck::Ran {
            program: "/opt/kiln/kilnd".into(),
            exit_code: Some(0),
            output: "nvrtc 13.0 at /usr/lib/libnvrtc.so\n".into(),
        });
        assert_eq!(d.problems().len(), 1);
        let text = diagnosis_text(&d);
        assert!(text.contains("reachable       no"), "{text}");
        assert!(text.contains("/opt/kiln/kilnd check (exit code 0):\n    nvrtc 13.0"), "{text}");
        assert!(text.contains(FINGERPRINT_NOTE), "{text}");
        let json = diagnosis_json(&d);
        assert_eq!(json["reachable"], false);
        assert_eq!(json["kilnd_check"]["exit_code"], 0);
    }

    /// A daemon that answered Stats with `stats`.
    fn reachable(stats: pb::StatsResponse) -> Diagnosis {
        Diagnosis {
            daemon: "unix:///tmp/k.sock".into(),
            error: None,
            reachable: true,
            stats: Some(stats),
            probes: Vec::new(),
            local_check: None,
        }
    }

    #[test]
    fn a_missing_kilnd_is_said_so() {
        let text = diagnosis_text(&unreachable(LocalCheck::NotFound));
        assert!(text.contains("no kilnd next to kiln or on PATH"), "{text}");
    }

    #[test]
    fn a_daemon_without_toolchains_is_a_problem() {
        let mut d = reachable(pb::StatsResponse { version: "0.1.0".into(), ..Default::default() });
        assert_eq!(d.problems().len(), 1);
        let with_toolchain = pb::ToolchainInfo { name: "nvrtc".into(), ..Default::default() };
        d.stats = Some(pb::StatsResponse { toolchains: vec![with_toolchain], ..Default::default() });
        assert!(d.problems().is_empty());
        assert!(diagnosis_text(&d).contains("ok: kilnd is reachable with 1 toolchain\n"));
    }

    #[test]
    fn a_refused_fleet_token_is_a_problem_with_its_fix() {
        let toolchain = pb::ToolchainInfo { name: "nvrtc".into(), ..Default::default() };
        let d = reachable(pb::StatsResponse {
            toolchains: vec![toolchain],
            remote: "http://cache:7171".into(),
            remote_state: "refused".into(),
            remote_reason: "the fleet refused kilnd's token".into(),
            ..Default::default()
        });
        let text = diagnosis_text(&d);
        assert!(text.contains("fleet cache     http://cache:7171 (REFUSED TOKEN"), "{text}");
        assert!(text.contains("problem: the fleet cache at http://cache:7171 refused kilnd's token"), "{text}");
        assert!(!text.contains("ok: "), "{text}");
    }
}
