//! The `kiln` command line, as clap derive types. Parsing only: what each command does lives in
//! `commands/`.

use clap::{Args, Parser, Subcommand};
use kiln_client::graph::{self, GraphOptions};
use kiln_client::snapshot::spec::{self, Root, SnapshotId};
use std::path::PathBuf;

/// kiln: compile GPU kernels through kilnd, the per-host compile daemon and fleet-wide cache.
#[derive(Debug, Parser)]
#[command(name = "kiln", version, propagate_version = true)]
pub struct Cli {
    /// The daemon: unix:///path/to/kilnd.sock, http://host:port or https://host:port. For a
    /// kilnd TCP listener with tokens, KILN_TOKEN_FILE names the file holding the token, and
    /// KILN_CA_FILE a CA (PEM) to trust besides the system's.
    #[arg(long, global = true, env = kiln_proto::paths::DAEMON_ENV, value_name = "URI",
          default_value_t = kiln_proto::paths::default_daemon_uri())]
    pub daemon: String,

    #[command(subcommand)]
    pub command: Command,
}

impl Cli {
    /// Parses the process's arguments. `kiln explain`'s FILES come from the shared graph
    /// arguments, required there unless `--graph`; `--key` makes them optional too. clap's
    /// derive applies attributes before flattened arguments exist, so this is done on the built
    /// command.
    pub fn parse_args() -> Self {
        use clap::{CommandFactory, FromArgMatches};
        let command = Self::command()
            .mut_subcommand("explain", |c| {
                c.mut_args(|a| {
                    if a.get_id() == "files" {
                        a.required_unless_present_any(["graph", "keys", "torch_graphs"])
                    } else {
                        a
                    }
                })
            })
            .mut_subcommand("audit", |c| {
                c.mut_args(|a| {
                    if a.get_id() == "files" {
                        a.required_unless_present_any(["graph", "quarantined", "conflicts"])
                    } else {
                        a
                    }
                })
            });
        Self::from_arg_matches(&command.get_matches()).unwrap_or_else(|e| e.exit())
    }
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Compile kernels (or fetch them from the caches) and wait for the results.
    Compile(RunArgs),
    /// Ask the caches only; never compiles. Kernels in no tier are reported as misses.
    Lookup(RunArgs),
    /// Submit kernels in the background and print the job id; follow it with `kiln watch`.
    Submit(SubmitArgs),
    /// Follow a submitted job's events until it is done.
    Watch(WatchArgs),
    /// Pull graphs from the fleet cache into the daemon's local tiers ahead of a job.
    Warm(WarmArgs),
    /// Why kernels missed: whether the caches hold each kernel, and which of its inputs differ
    /// from the nearest earlier compile of the same kernel (this host's or the fleet's); or why
    /// a torch.compile graph missed (`--job J --torch-graph NAME`).
    Explain(ExplainArgs),
    /// Recompile kernels on this host and compare each with the fleet's artifact under its key,
    /// quarantining what differs (the fleet audit, on demand); or list the fleet's quarantines.
    /// Exit 0 all clean, 1 a difference or a kernel that could not be checked, 2 error.
    Audit(AuditArgs),
    /// Show the daemon's counters, toolchains, GPUs and cache tiers.
    Stats(JsonArg),
    /// Whether torch.compile pays for itself, per job: the fleet ledger's figures (every host's
    /// processes, ranks and restarts), or this kilnd's without a fleet cache. Exit 1 when a job
    /// was named and has no ledger.
    Roi(RoiArgs),
    /// Check that the daemon is reachable and has a usable toolchain.
    Doctor(JsonArg),
    /// Job snapshots: save directories of JIT caches through the fleet, restore them on a fresh
    /// host.
    #[command(subcommand)]
    Snapshot(SnapshotCommand),
}

#[derive(Debug, Subcommand)]
pub enum SnapshotCommand {
    /// Save directories as the job's snapshot for this host's environment, a union with what
    /// is stored; only files no tier holds are sent.
    Save(SnapshotSaveArgs),
    /// Restore the job's snapshot: never overwrites a file, skips those present. Exit 0
    /// restored (or all present), 1 no snapshot for this host, 2 error.
    Restore(SnapshotRestoreArgs),
    /// List the snapshots saved through the fleet.
    List(SnapshotListArgs),
    /// Show a snapshot's manifest: its environment, roots and files. Exit 1 if there is none.
    Show(SnapshotShowArgs),
}

/// Which snapshot: the job and the caller's key parts (kilnd adds the host's).
#[derive(Debug, Args)]
pub struct SnapshotIdArgs {
    /// The job's name (1 to 256 printable ASCII characters).
    #[arg(long, value_name = "NAME", value_parser = clap::builder::NonEmptyStringValueParser::new())]
    pub job: String,
    /// What else must match for the files to be valid, such as torch=2.11.0; repeatable.
    #[arg(long = "key", value_name = "K=V", value_parser = spec::parse_key_part)]
    pub keys: Vec<(String, String)>,
}

impl SnapshotIdArgs {
    pub fn id(&self) -> anyhow::Result<SnapshotId> {
        SnapshotId::new(&self.job, self.keys.iter().cloned()).map_err(anyhow::Error::msg)
    }
}

#[derive(Debug, Args)]
pub struct SnapshotSaveArgs {
    #[command(flatten)]
    pub id: SnapshotIdArgs,
    /// A directory to save, as DIR or NAME=DIR (the name defaults to DIR's last component).
    #[arg(value_name = "DIR", required = true, value_parser = Root::parse)]
    pub roots: Vec<Root>,
    /// Print the result as a JSON line.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct SnapshotRestoreArgs {
    #[command(flatten)]
    pub id: SnapshotIdArgs,
    /// Where to restore a root, as DIR or NAME=DIR, matched by name; none restores every root to
    /// the path it was saved from.
    #[arg(value_name = "DIR", value_parser = Root::parse)]
    pub roots: Vec<Root>,
    /// Print a JSON line per root, then one for the restore (NDJSON).
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct SnapshotListArgs {
    /// Only this job's snapshots, one per environment.
    #[arg(long, value_name = "NAME")]
    pub job: Option<String>,
    /// Print a JSON line per snapshot, then a count (NDJSON).
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct SnapshotShowArgs {
    #[command(flatten)]
    pub id: SnapshotIdArgs,
    /// Print a JSON line per file, then one for the manifest (NDJSON).
    #[arg(long)]
    pub json: bool,
}

/// What to warm: graph keys, or manifests (the last line of `kiln compile --json`).
#[derive(Debug, Args)]
pub struct WarmArgs {
    /// Graph key to warm (its manifest in the fleet cache lists its kernels); repeatable.
    #[arg(long = "graph-key", value_name = "KEY", required_unless_present = "manifests")]
    pub graph_keys: Vec<String>,
    /// A manifest file: JSON or NDJSON with `graph_key` and `kernel_keys` (the last line of
    /// `kiln compile --json`); repeatable.
    #[arg(long = "manifest", value_name = "FILE")]
    pub manifests: Vec<PathBuf>,
    /// Print progress and the result as JSON lines.
    #[arg(long)]
    pub json: bool,
}

/// What to compile: `.cu` files (one kernel each), or a graph in proto3 JSON.
#[derive(Debug, Args)]
pub struct GraphArgs {
    /// GPU target such as sm_90 or sm_90a. Left out, the daemon's default (its GPU).
    #[arg(long, value_name = "sm_XX", value_parser = parse_target)]
    pub target: Option<String>,

    // Help strings as attributes, not doc comments, where they hold `<...>` that rustdoc would
    // take for HTML.
    #[arg(
        long = "name-expression",
        value_name = "EXPR",
        help = "Name expression whose lowered name you need, such as 'saxpy<float>'; applies to every file"
    )]
    pub name_expressions: Vec<String>,

    /// Directory to search for included headers, in order, after the including file's own.
    #[arg(short = 'I', value_name = "DIR")]
    pub include_dirs: Vec<PathBuf>,

    /// The graph's name in logs and dashboards, and part of each kernel's identity for `kiln
    /// explain` [default: none, so a file's kernel is known by its stem alone].
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,

    /// ptxas option for every .ptx file, repeatable (the daemon allows a known set).
    #[arg(long = "ptxas-option", value_name = "OPT", allow_hyphen_values = true)]
    pub ptxas_options: Vec<String>,

    /// Read a kiln.v1.CompileGraph in proto3 JSON instead of FILES (--target still applies).
    #[arg(long, value_name = "FILE.json",
          conflicts_with_all = ["files", "name_expressions", "include_dirs", "name", "nvrtc_options", "ptxas_options"])]
    pub graph: Option<PathBuf>,

    /// CUDA (.cu) and PTX (.ptx) sources, one kernel per file, named by the file's stem.
    #[arg(value_name = "FILES", required_unless_present = "graph")]
    pub files: Vec<PathBuf>,

    /// NVRTC options for every kernel, after `--` (the daemon allows a known set).
    #[arg(last = true, value_name = "NVRTC_OPTIONS")]
    pub nvrtc_options: Vec<String>,
}

impl GraphArgs {
    /// The options [`graph::build_graph`] takes.
    pub fn graph_options(&self) -> GraphOptions {
        GraphOptions {
            name: self.name.clone(),
            target: self.target.clone(),
            name_expressions: self.name_expressions.clone(),
            include_dirs: self.include_dirs.clone(),
            options: self.nvrtc_options.clone(),
            ptxas_options: self.ptxas_options.clone(),
        }
    }
}

/// Arguments of the commands that wait for results: compile and lookup.
#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub graph: GraphArgs,

    #[command(flatten)]
    pub output: OutputArgs,

    /// Do not transfer the cubins (outcomes and timings only).
    #[arg(long, conflicts_with = "out")]
    pub no_artifacts: bool,
}

/// How results are shown and where cubins go.
#[derive(Debug, Args)]
pub struct OutputArgs {
    #[arg(long, value_name = "DIR", help = "Write each kernel's cubin to DIR/<kernel-id>.cubin")]
    pub out: Option<PathBuf>,

    /// Print one JSON object per kernel, then one for the job (NDJSON).
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct RoiArgs {
    /// One job (as kiln.torch names it: KILN_TORCH_JOB, or the script's name) instead of every job.
    #[arg(long, value_name = "NAME")]
    pub job: Option<String>,
    /// Print the answer as one JSON object, in the proto3 JSON mapping.
    #[arg(long)]
    pub json: bool,
}

/// What to explain: the inputs `kiln compile` takes, or keys it printed.
#[derive(Debug, Args)]
pub struct ExplainArgs {
    #[command(flatten)]
    pub graph: GraphArgs,

    /// A kernel key (64 hex characters, as `kiln compile --json` prints it) instead of FILES;
    /// repeatable.
    #[arg(long = "key", value_name = "KEY", conflicts_with_all = ["files", "graph"])]
    pub keys: Vec<String>,

    /// A torch.compile graph's name, as kiln.torch reports it (its exit line's job, `kiln
    /// stats`), instead of FILES: the latest ask for it on this kilnd, explained; repeatable,
    /// with --job.
    #[arg(long = "torch-graph", value_name = "NAME", requires = "job", conflicts_with_all = ["files", "graph", "keys"])]
    pub torch_graphs: Vec<String>,

    /// The job the --torch-graph names belong to (the process's KILN_TORCH_JOB).
    #[arg(long, value_name = "JOB", requires = "torch_graphs")]
    pub job: Option<String>,

    /// Print one JSON object per kernel (NDJSON), in the proto3 JSON mapping.
    #[arg(long)]
    pub json: bool,
}

/// What to audit: the inputs `kiln compile` takes; or the fleet's quarantine records.
#[derive(Debug, Args)]
pub struct AuditArgs {
    #[command(flatten)]
    pub graph: GraphArgs,

    /// Audit only the kernels this host published (its name as the fleet recorded it).
    #[arg(long, value_name = "HOST")]
    pub publisher: Option<String>,

    /// Report differences without quarantining them.
    #[arg(long)]
    pub report_only: bool,

    /// List the fleet's quarantine records instead, oldest first.
    #[arg(long, conflicts_with_all = ["files", "graph", "publisher", "report_only", "conflicts"])]
    pub quarantined: bool,

    /// List the fleet's conflicting writes instead, oldest first: Puts that offered other bytes
    /// under a key than it held (refused for kernels).
    #[arg(long, conflicts_with_all = ["files", "graph", "publisher", "report_only"])]
    pub conflicts: bool,

    /// Print one JSON object per kernel or record (NDJSON), in the proto3 JSON mapping.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct SubmitArgs {
    #[command(flatten)]
    pub graph: GraphArgs,

    /// Print {"job_id": ...} instead of the bare id.
    #[arg(long)]
    pub json: bool,

    /// Leave the cubins out of the job's results (a cache warm-up).
    #[arg(long)]
    pub no_artifacts: bool,
}

#[derive(Debug, Args)]
pub struct WatchArgs {
    /// The job id that `kiln submit` printed.
    #[arg(value_name = "JOB", value_parser = clap::builder::NonEmptyStringValueParser::new())]
    pub job: String,

    #[command(flatten)]
    pub output: OutputArgs,
}

#[derive(Debug, Args)]
pub struct JsonArg {
    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,
}

/// Checks `--target` at parse time, so a typo is a usage error before anything is read or sent.
fn parse_target(value: &str) -> Result<String, String> {
    graph::check_target(value).map_err(|e| e.to_string())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("kiln").chain(args.iter().copied()))
    }

    fn run_args(cli: Cli) -> RunArgs {
        match cli.command {
            Command::Compile(args) | Command::Lookup(args) => args,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_command_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn compile_takes_files_options_and_nvrtc_options_after_dashes() {
        let cli = parse(&[
            "--daemon",
            "unix:///tmp/k.sock",
            "compile",
            "--target",
            "sm_90a",
            "-I",
            "inc",
            "-Iinc2",
            "--name-expression",
            "k<float>",
            "--name-expression",
            "k<double>",
            "--out",
            "o",
            "--json",
            "a.cu",
            "b.cu",
            "--",
            "-lineinfo",
            "--use_fast_math",
        ])
        .unwrap();
        assert_eq!(cli.daemon, "unix:///tmp/k.sock");
        let args = run_args(cli);
        assert_eq!(args.graph.files, [PathBuf::from("a.cu"), PathBuf::from("b.cu")]);
        assert_eq!(args.graph.include_dirs, [PathBuf::from("inc"), PathBuf::from("inc2")]);
        assert_eq!(args.graph.nvrtc_options, ["-lineinfo", "--use_fast_math"]);
        assert!(args.output.json);
        let opts = args.graph.graph_options();
        assert_eq!(opts.target.as_deref(), Some("sm_90a"));
        assert_eq!(opts.name_expressions, ["k<float>", "k<double>"]);
    }

    #[test]
    fn daemon_flag_is_global() {
        let cli = parse(&["lookup", "a.cu", "--daemon", "http://h:1"]).unwrap();
        assert_eq!(cli.daemon, "http://h:1");
    }

    #[test]
    fn usage_errors_are_caught_at_parse_time() {
        for args in [
            &["compile"][..],
            &["compile", "--target", "compute_90", "a.cu"],
            &["compile", "--graph", "g.json", "a.cu"],
            &["compile", "--graph", "g.json", "-I", "inc"],
            &["compile", "--no-artifacts", "--out", "o", "a.cu"],
            &["watch"],
            &["watch", ""],
        ] {
            assert!(parse(args).is_err(), "{args:?} parsed");
        }
    }

    #[test]
    fn snapshot_commands_take_a_job_keys_and_roots() {
        let cli =
            parse(&["snapshot", "save", "--job", "j", "--key", "torch=2.11", "--key", "a=", "t=/x/y", "/z/w"]).unwrap();
        let Command::Snapshot(SnapshotCommand::Save(args)) = cli.command else { panic!("not a save") };
        let id = args.id.id().unwrap();
        assert_eq!(id.keys.get("torch").map(String::as_str), Some("2.11"));
        assert_eq!(args.roots.iter().map(|r| r.name.as_str()).collect::<Vec<_>>(), ["t", "w"]);
        let cli = parse(&["snapshot", "restore", "--job", "j", "--json"]).unwrap();
        assert!(matches!(cli.command, Command::Snapshot(SnapshotCommand::Restore(ref a)) if a.roots.is_empty()));
        for args in [
            &["snapshot", "save", "--job", "j"][..],
            &["snapshot", "save", "/x"],
            &["snapshot", "save", "--job", "", "/x"],
            &["snapshot", "restore", "--job", "j", "--key", "novalue"],
            &["snapshot", "show"],
        ] {
            assert!(parse(args).is_err(), "{args:?} parsed");
        }
        let twice = parse(&["snapshot", "show", "--job", "j", "--key", "a=1", "--key", "a=2"]).unwrap();
        let Command::Snapshot(SnapshotCommand::Show(args)) = twice.command else { panic!("not a show") };
        assert!(args.id.id().is_err(), "a key part given twice");
    }

    #[test]
    fn graph_file_alone_is_enough() {
        let args = run_args(parse(&["compile", "--graph", "g.json", "--target", "sm_80"]).unwrap());
        assert_eq!(args.graph.graph, Some(PathBuf::from("g.json")));
        assert!(args.graph.files.is_empty());
    }
}
