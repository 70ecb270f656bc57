//! `kiln compile` and `kiln lookup`: send a graph, follow its events to the end.

use super::{compile_request, load_graph_named, name_files};
use crate::artifacts;
use crate::cli::RunArgs;
use crate::report::Reporter;
use kiln_client::pb;
use std::process::ExitCode;

/// Which RPC to call: they take the same request and answer with the same events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Compile what is in no cache.
    Compile,
    /// Caches only; a kernel in none is a miss.
    Lookup,
}

pub async fn run(daemon: &str, args: RunArgs, mode: Mode) -> anyhow::Result<ExitCode> {
    let (graph, names) = load_graph_named(&args.graph)?;
    if args.output.out.is_some() {
        // Checked before sending, so a bad id in a --graph file fails before any compile runs.
        for kernel in &graph.kernels {
            artifacts::check_file_name(&kernel.id)?;
        }
    }
    let ids: Vec<String> = graph.kernels.iter().map(|k| k.id.clone()).collect();
    // The user is waiting on this, so it goes before background warm-ups.
    let request = compile_request(graph, pb::Priority::Interactive, args.no_artifacts);
    let client = kiln_client::connect(daemon).await?;
    let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
    let reporter = Reporter::new(&args.output, &ids)?.with_names(names.clone());
    let stream = match mode {
        Mode::Compile => client.compile(request).await,
        Mode::Lookup => client.lookup(request).await,
    };
    let stream = stream.map_err(|e| name_files(&names, e.into()))?;
    reporter.follow(stream).await.map_err(|e| name_files(&names, e))
}
