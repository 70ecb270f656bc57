//! `kiln-reliability`: load and chaos scenarios against the real binaries, written as the
//! `## Reliability` section of BENCHMARKS.md. `scripts/reliability` builds the release binaries
//! and runs it; the scenarios are described in `kiln_bench::reliability`.

use anyhow::{Context, Result};
use clap::Parser;
use kiln_bench::bench::machine::Machine;
use kiln_bench::reliability::report::{self, Outcome};
use kiln_bench::reliability::{Options, Run, SCENARIOS, bound, parse_only, scenario};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Debug, Parser)]
#[command(
    name = "kiln-reliability",
    about = "Load and chaos scenarios against kiln; writes the Reliability section of BENCHMARKS.md",
    args_override_self = true
)]
struct Args {
    /// The report whose `## Reliability` section is replaced (or appended).
    #[arg(long, default_value = "BENCHMARKS.md")]
    out: PathBuf,
    /// Fewer clients and kills, a one-minute soak: a development run, not figures to publish.
    #[arg(long)]
    quick: bool,
    /// Run only these scenarios, by number: `--only 4,5,7`, `--only 8-13` (or `457`).
    #[arg(long)]
    only: Option<String>,
    /// Seconds of the soak (scenario 3).
    #[arg(long)]
    soak_secs: Option<u64>,
    /// kill -9 rounds of scenario 4.
    #[arg(long)]
    kills: Option<usize>,
    /// Concurrent clients of scenarios 1 and 2.
    #[arg(long)]
    clients: Option<usize>,
}

impl Args {
    fn options(&self) -> Options {
        let mut o = Options::new(self.quick);
        o.soak = self.soak_secs.map_or(o.soak, Duration::from_secs);
        o.kills = self.kills.unwrap_or(o.kills);
        o.clients = self.clients.unwrap_or(o.clients);
        o
    }
}

/// Runs scenario `n` in a task of its own, within its time bound: an error, a timeout or a
/// panic of the harness fails the scenario, keeps what it measured, and the run goes on.
async fn one(n: usize, run: Arc<Run>) -> Outcome {
    let title = SCENARIOS[n - 1];
    eprintln!("kiln-reliability: {n}. {title} …");
    let limit = bound(n, &run.options);
    let started = Instant::now();
    let task = tokio::spawn(async move {
        let mut out = Outcome::new(title);
        match tokio::time::timeout(limit, scenario(n, &run, &mut out)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => out.aborted(&format!("error: {e:#}")),
            Err(_) => out.aborted(&format!("did not finish within its bound of {} s", limit.as_secs())),
        }
        out
    });
    let mut out = task.await.unwrap_or_else(|e| {
        let mut out = Outcome::new(title);
        out.aborted(&format!("the harness panicked: {}", kiln_bench::bench::fleet::panic_text(e)));
        out
    });
    out.seconds = started.elapsed().as_secs_f64();
    eprintln!("kiln-reliability: {n}. {title}: {} in {:.0} s", out.verdict(), out.seconds);
    println!("{}", out.markdown(n));
    out
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    let work =
        tempfile::Builder::new().prefix("kiln-reliability-").tempdir().context("creating a scratch directory")?;
    let run = Arc::new(Run::new(work.path(), args.options())?);
    let machine = Machine::probe(&run.bench.repo);
    let only = args.only.as_deref().map(|spec| parse_only(spec, SCENARIOS.len())).transpose()?;
    let mut outcomes = Vec::new();
    for n in (1..=SCENARIOS.len()).filter(|n| only.as_ref().is_none_or(|only| only.contains(n))) {
        outcomes.push((n, one(n, Arc::clone(&run)).await));
    }
    let section = report::section(&machine, args.quick, &outcomes);
    let doc = match std::fs::read_to_string(&args.out) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(e).with_context(|| format!("reading {}", args.out.display())),
    };
    std::fs::write(&args.out, report::replace_section(&doc, &section))
        .with_context(|| format!("writing {}", args.out.display()))?;
    eprintln!("kiln-reliability: wrote the Reliability section of {}", args.out.display());
    let failed: Vec<String> =
        outcomes.iter().filter(|(_, o)| !o.passed()).map(|(n, o)| format!("{n}. {}", o.title)).collect();
    drop(run);
    drop(work);
    if !failed.is_empty() {
        eprintln!("kiln-reliability: conditions not met in: {}", failed.join(", "));
        std::process::exit(1);
    }
    Ok(())
}
