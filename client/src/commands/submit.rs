//! `kiln submit`: send a graph, print its job id, and leave the daemon to it.

use super::{compile_request, load_graph_named, name_files};
use crate::cli::SubmitArgs;
use crate::report::print_line;
use kiln_client::pb;
use std::process::ExitCode;

pub async fn run(daemon: &str, args: SubmitArgs) -> anyhow::Result<ExitCode> {
    let (graph, names) = load_graph_named(&args.graph)?;
    // Nobody waits on a submitted job, so it yields to interactive compiles.
    let request = compile_request(graph, pb::Priority::Background, args.no_artifacts);
    let client = kiln_client::connect(daemon).await?;
    let job_id = client.submit(request).await.map_err(|e| name_files(&names, e.into()))?;
    let line = if args.json { serde_json::json!({ "job_id": job_id }).to_string() } else { job_id };
    print_line(&line)?;
    Ok(ExitCode::SUCCESS)
}
