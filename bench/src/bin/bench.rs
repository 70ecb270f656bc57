//! `kiln-bench`: measures kiln side by side with its baselines and writes BENCHMARKS.md.
//! `scripts/bench` installs what it needs, builds the release binaries and runs it. The
//! figures and how each is taken are described in `kiln_bench::bench`.

use anyhow::{Context, Result};
use clap::Parser;
use kiln_bench::bench::fleet::Fleet;
use kiln_bench::bench::machine::Machine;
use kiln_bench::bench::partial::{self, Stamp};
use kiln_bench::bench::redis::RedisServer;
use kiln_bench::bench::report::Section;
use kiln_bench::bench::{
    Bench, Options, Shared, audit_cost, cold_compile, fleet_cold, fleet_lookups, fleet_warm, hit_throughput,
    ptxas_compile, sccache_nvcc, snapshot_fleet, snapshot_job, torch_fleet_sim, torch_layouts, triton_compile,
    triton_herd, triton_pool, warm_hit,
};
use kiln_bench::reliability::report::{existing_section, replace_section};
use std::path::{Path, PathBuf};
use std::process::Command;

#[derive(Debug, Parser)]
#[command(
    name = "kiln-bench",
    about = "Benchmark kiln against its baselines and write BENCHMARKS.md",
    args_override_self = true
)]
struct Args {
    /// Where to write the report.
    #[arg(long, default_value = "BENCHMARKS.md")]
    out: PathBuf,
    /// Few samples everywhere: a smoke run of the harness, not figures to publish.
    #[arg(long)]
    quick: bool,
    #[arg(long)]
    memory_samples: Option<usize>,
    #[arg(long)]
    disk_samples: Option<usize>,
    #[arg(long)]
    restart_samples: Option<usize>,
    #[arg(long)]
    cold_rounds: Option<usize>,
    /// Timed rounds of the Triton compile figure (h): 5 by default.
    #[arg(long)]
    triton_rounds: Option<usize>,
    /// Run only the figures whose titles start with one of these letters, e.g. `--only efg`.
    /// Where the report exists, they replace their namesakes in it, stamped with this run's
    /// date, commit and load; the other figures and their Machine table stay (not with `--quick`).
    #[arg(long)]
    only: Option<String>,
}

impl Args {
    fn options(&self) -> Options {
        let mut o = Options::default();
        if self.quick {
            o = Options {
                memory_samples: 30,
                disk_samples: 20,
                restart_samples: 3,
                cold_rounds: 1,
                clients: vec![16],
                throughput_secs: 1.0,
                redis_requests: 20_000,
                warm_passes: 1,
                fleet_warm_samples: 3,
                fleet_rounds: 1,
                triton_rounds: 1,
                snapshot_rounds: 1,
                fleet_restore_rounds: 1,
            };
        }
        o.memory_samples = self.memory_samples.unwrap_or(o.memory_samples);
        o.disk_samples = self.disk_samples.unwrap_or(o.disk_samples);
        o.restart_samples = self.restart_samples.unwrap_or(o.restart_samples);
        o.cold_rounds = self.cold_rounds.unwrap_or(o.cold_rounds);
        o.triton_rounds = self.triton_rounds.unwrap_or(o.triton_rounds);
        o
    }
}

/// The sections measured so far, and the figures `--only` asks for.
struct Figures<'a> {
    only: Option<&'a str>,
    sections: Vec<Section>,
}

impl Figures<'_> {
    /// Whether `--only` names the letter of the figure titled `title`, e.g. `(h) ptxas`.
    fn wanted(&self, title: &str) -> bool {
        let letter = title.chars().nth(1).unwrap_or(' ');
        self.only.is_none_or(|only| only.contains(letter))
    }

    /// Runs the figure titled `title` if it is wanted (an unwanted `run` is dropped unpolled); a
    /// failure becomes a section that says so, and the run goes on.
    async fn measure(&mut self, title: &str, run: impl Future<Output = Result<Section>>) {
        if !self.wanted(title) {
            return;
        }
        eprintln!("kiln-bench: measuring {title} …");
        let started = std::time::Instant::now();
        let section = run.await.unwrap_or_else(|e| Section::failed(title, &e));
        eprintln!("kiln-bench: {title} took {:.0} s", started.elapsed().as_secs_f64());
        println!("\n## {}\n\n{}", section.title, section.table());
        self.sections.push(section);
    }

    /// Records the figures titled `titles` as failed for `why`, without running them.
    fn fail<'t>(&mut self, titles: impl IntoIterator<Item = &'t str>, why: &str) {
        for title in titles {
            self.sections.push(Section::failed(title, &anyhow::anyhow!("{why}")));
        }
    }
}

/// The first line of `cmd --version`-style output, or why there is none.
fn version(program: &Path, args: &[&str], last: bool) -> String {
    match Command::new(program).args(args).output() {
        Ok(out) if out.status.success() => {
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            let line = if last { text.lines().last() } else { text.lines().next() };
            line.unwrap_or("").trim().to_string()
        }
        Ok(out) => format!("failed: {}", String::from_utf8_lossy(&out.stderr).trim()),
        Err(e) => format!("not found ({e})"),
    }
}

fn software(bench: &Bench) -> String {
    let rows = [
        ("nvcc", version(&bench.cuda_root.join("bin/nvcc"), &["--version"], true)),
        ("NVRTC", bench.cuda_root.display().to_string()),
        ("sccache", version(&bench.repo.join(".tools/bin/sccache"), &["--version"], false)),
        ("redis-server", version(Path::new("redis-server"), &["--version"], false)),
        ("kilnd", version(&bench.kilnd(), &["--version"], false)),
    ];
    rows.iter().map(|(k, v)| format!("| {k} | {v} |\n")).collect()
}

/// Every row that carries a target, once per measurement.
/// The GPU figures are measured by `tests/gpu/run` on a GPU host, which this machine
/// may not be; its summary is kept in `tests/gpu/RESULTS.md` and copied in here unchanged, so a
/// CPU-only run of this harness never drops or invents them.
fn gpu_results(repo: &Path) -> String {
    let path = repo.join("tests/gpu/RESULTS.md");
    match std::fs::read_to_string(&path) {
        Ok(text) => format!(
            "\n## GPU host: kernels launched and torch.compile warm starts (tests/gpu/run)\n\nNot measured by this \
             run: copied from `tests/gpu/RESULTS.md`, the summary of the last `tests/gpu/run` on a GPU host, with \
             its own machine and date.\n\n{text}"
        ),
        Err(_) => {
            "\n## GPU host\n\nNo `tests/gpu/RESULTS.md`: `tests/gpu/run` has not been run on a GPU host.\n".into()
        }
    }
}

fn targets(sections: &[Section]) -> String {
    let mut out = String::from("| figure | measurement | kiln | target | met? |\n|---|---|---|---|---|\n");
    let mut seen = std::collections::HashSet::new();
    for s in sections {
        for r in s.rows.iter().filter(|r| r.target.is_some()) {
            if !seen.insert((s.title.clone(), r.measurement.clone())) {
                continue;
            }
            let kiln = r.kiln.as_ref().map_or_else(|e| format!("failed: {e}"), ToString::to_string);
            let met = match r.met() {
                Some(true) => "met",
                Some(false) => "**missed**",
                None => "not measured",
            };
            let figure = s.title.split(' ').next().unwrap_or("");
            let target = r.target.map(|t| t.to_string()).unwrap_or_default();
            out.push_str(&format!("| {figure} | {} | {kiln} | {target} | {met} |\n", r.measurement));
        }
    }
    out
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    let work = tempfile::Builder::new().prefix("kiln-bench-").tempdir().context("creating a scratch directory")?;
    let bench = Bench::new(work.path(), args.options())?;
    let machine = Machine::probe(&bench.repo);
    eprintln!(
        "kiln-bench: load average {} on {} cores; other work on the machine skews every figure",
        machine.load_at_start, machine.cores
    );
    let mut shared = Shared::default();
    let redis = RedisServer::start(&work.path().join("redis"));

    let mut figures = Figures { only: args.only.as_deref(), sections: Vec::new() };
    figures.measure("(b) Cold compile", cold_compile::run(&bench, &mut shared)).await;
    match &redis {
        Ok(redis) => {
            figures.measure("(a) Warm hit", warm_hit::run(&bench, redis, &mut shared)).await;
            figures.measure("(c) Hit throughput", hit_throughput::run(&bench, redis)).await;
            figures.measure("(d) sccache + nvcc", sccache_nvcc::run(&bench, redis, &shared)).await;
        }
        Err(e) => figures.fail(
            ["(a) Warm hit", "(c) Hit throughput", "(d) sccache + nvcc"],
            &format!("redis-server could not start: {e:#}"),
        ),
    }
    // The fleet, over its own Redis and a real kiln-cache.
    let fleet_titles = ["(e) Fleet warm start", "(f) Fleet cold start", "(g) Fleet lookups", "(o) Fleet audit"];
    if fleet_titles.iter().any(|t| figures.wanted(t)) {
        match Fleet::start(&bench).await {
            Ok(fleet) => {
                figures.measure(fleet_titles[0], fleet_warm::run(&bench, &fleet)).await;
                figures.measure(fleet_titles[1], fleet_cold::run(&bench, &fleet)).await;
                figures.measure(fleet_titles[2], fleet_lookups::run(&bench, &fleet)).await;
                figures.measure(fleet_titles[3], audit_cost::run(&bench, &fleet)).await;
            }
            Err(e) => {
                let wanted: Vec<&str> = fleet_titles.into_iter().filter(|t| figures.wanted(t)).collect();
                figures.fail(wanted, &format!("the fleet could not start: {e:#}"));
            }
        }
    }
    // The Triton and PTX toolchains.
    figures.measure("(h) Triton compile", triton_compile::run(&bench)).await;
    figures.measure("(i) Triton worker pool", triton_pool::run(&bench)).await;
    figures.measure("(j) ptxas", ptxas_compile::run(&bench)).await;
    // The Triton drop-in in a herd of Python processes.
    figures.measure("(k) Fleet herd", async { tokio::task::block_in_place(|| triton_herd::run(&bench)) }).await;
    // Job snapshots.
    figures.measure("(l) Job snapshots", snapshot_job::run_job_figure(&bench)).await;
    figures.measure("(m) Snapshot restore", snapshot_job::run_restore_figure(&bench)).await;
    figures.measure("(n) Snapshot restore at fleet scale", snapshot_fleet::run(&bench)).await;
    // torch.compile through kiln on the training layouts, on the CPU.
    figures
        .measure("(p) torch.compile by layout", async { tokio::task::block_in_place(|| torch_layouts::run(&bench)) })
        .await;
    // A torch.compile job starting cold on a simulated fleet: kiln-cache's load, measured.
    figures.measure("(q) Fleet cold start of a torch job", torch_fleet_sim::run(&bench)).await;
    let mut sections = figures.sections;
    // Report in the order; (b) ran first so that nothing else had warmed the machine.
    sections.sort_by(|a, b| a.title.cmp(&b.title));

    // A quick run's figures are not for publishing: it writes its own report, whole.
    if let (Some(only), false, Ok(report)) = (args.only.as_deref(), args.quick, std::fs::read_to_string(&args.out)) {
        let load_at_end = kiln_bench::bench::machine::load_average();
        let stamp = Stamp {
            date: &machine.date,
            commit: &machine.commit,
            only,
            load_at_start: &machine.load_at_start,
            load_at_end: &load_at_end,
        };
        let measured: Vec<String> = sections.iter().map(Section::markdown).collect();
        let merged = partial::merge(&report, &measured, &targets(&sections), &gpu_results(&bench.repo), &stamp);
        std::fs::write(&args.out, merged).with_context(|| format!("writing {}", args.out.display()))?;
        eprintln!("kiln-bench: wrote {} ({only} measured now, the rest kept)", args.out.display());
        return Ok(());
    }
    let mut md = String::from(
        "# kiln benchmarks\n\nGenerated by `scripts/bench` (`target/release/kiln-bench`); every number below was \
         measured by that run. Do not edit by hand. Each figure is a ratio against a baseline measured side by side \
         in the same run; the absolute numbers belong to this machine.\n\n## Machine\n\n",
    );
    md.push_str(&machine.markdown(&kiln_bench::bench::machine::load_average()));
    md.push_str(&software(&bench));
    if args.quick {
        md.push_str("\n**Quick run (`--quick`): too few samples to publish.**\n");
    }
    md.push_str("\n## Targets\n\n");
    md.push_str(&targets(&sections));
    md.push('\n');
    for s in &sections {
        md.push_str(&s.markdown());
    }
    md.push_str(&gpu_results(&bench.repo));
    // The reliability section is scripts/reliability's: keep the last run's until it runs again.
    if let Some(reliability) = std::fs::read_to_string(&args.out).ok().as_deref().and_then(existing_section) {
        md = replace_section(&md, &reliability);
    }
    std::fs::write(&args.out, md).with_context(|| format!("writing {}", args.out.display()))?;
    eprintln!("kiln-bench: wrote {}", args.out.display());
    Ok(())
}
