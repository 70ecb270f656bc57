//! One module per `kiln` command. Each parses nothing (clap did that) and prints through
//! `report` or `output`; each returns the process exit code, or an error for exit code 2.
//!
//! - [`compile`]: `compile` and `lookup`, which wait for results;
//! - [`submit`] and [`watch`]: the same work split in two;
//! - [`warm`]: fleet cache to local tiers, ahead of a job;
//! - [`explain`]: why kernels missed;
//! - [`audit`]: recompiles a graph to check the fleet's artifacts; the fleet's quarantine;
//! - [`stats`] and [`doctor`]: what the daemon is and whether it can work ([`probe`]: a tiny
//!   kernel per toolchain through the daemon);
//! - [`snapshot`]: job snapshots of JIT cache directories;
//! - [`roi`]: whether torch.compile pays for itself, per job.

mod audit;
mod compile;
mod doctor;
mod explain;
mod local_check;
mod probe;
mod roi;
mod snapshot;
mod stats;
mod submit;
mod warm;
mod watch;

use crate::cli::{Cli, Command, GraphArgs};
use anyhow::Context;
use kiln_client::graph;
use kiln_client::pb;
use std::process::ExitCode;

/// Runs the command `cli` names.
pub async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    // clap takes `KILN_DAEMON=` (set but empty) as an empty URI; treat it as unset instead, as
    // the Python client and kiln_proto's own rule do.
    let daemon = if cli.daemon.is_empty() { kiln_proto::paths::default_daemon_uri() } else { cli.daemon };
    match cli.command {
        Command::Compile(args) => compile::run(&daemon, args, compile::Mode::Compile).await,
        Command::Lookup(args) => compile::run(&daemon, args, compile::Mode::Lookup).await,
        Command::Submit(args) => submit::run(&daemon, args).await,
        Command::Watch(args) => watch::run(&daemon, args).await,
        Command::Warm(args) => warm::run(&daemon, args).await,
        Command::Explain(args) => explain::run(&daemon, args).await,
        Command::Audit(args) => audit::run(&daemon, args).await,
        Command::Stats(args) => stats::run(&daemon, args.json).await,
        Command::Roi(args) => roi::run(&daemon, args).await,
        Command::Doctor(args) => doctor::run(&daemon, args.json).await,
        Command::Snapshot(command) => snapshot::run(&daemon, command).await,
    }
}

/// The graph the arguments describe: read from `--graph FILE.json`, or built from the files.
/// With it, the names the compilers will see for the user's files (none for a `--graph` file,
/// whose kernels have no files).
fn load_graph_named(args: &GraphArgs) -> anyhow::Result<(pb::CompileGraph, graph::SourceNames)> {
    match &args.graph {
        Some(path) => {
            let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
            let graph = graph::parse_graph_json(&text, args.target.as_deref())
                .with_context(|| format!("{}", path.display()))?;
            Ok((graph, graph::SourceNames::default()))
        }
        None => Ok(graph::build_graph_named(&args.files, &args.graph_options())?),
    }
}

/// A request to compile `graph` at `priority`; with `omit_artifacts` the cubins stay in the
/// daemon's tiers and only the results come back.
fn compile_request(graph: pb::CompileGraph, priority: pb::Priority, omit_artifacts: bool) -> pb::CompileRequest {
    pb::CompileRequest { graph: Some(graph), priority: priority as i32, omit_artifacts, ..Default::default() }
}

/// An error from the daemon, with the user's file after each `graph.kernels[N]` it names.
fn name_files(names: &graph::SourceNames, err: anyhow::Error) -> anyhow::Error {
    anyhow::anyhow!(names.error_for(&format!("{err:#}")))
}
