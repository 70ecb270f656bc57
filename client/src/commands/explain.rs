//! `kiln explain`: asks the daemon why kernels or torch.compile graphs missed (or would miss).
//! Exit 0 when every one is cached, 1 when some would compile, 2 on an error.

use super::{load_graph_named, name_files};
use crate::cli::ExplainArgs;
use crate::output::explain::explanation_text;
use crate::report::print_line;
use anyhow::Context;
use kiln_client::pb;
use std::process::ExitCode;

pub async fn run(daemon: &str, args: ExplainArgs) -> anyhow::Result<ExitCode> {
    let (request, names) = if !args.torch_graphs.is_empty() {
        let job = args.job.clone().unwrap_or_default();
        let torch_graphs =
            args.torch_graphs.iter().map(|name| pb::TorchGraphName { job: job.clone(), name: name.clone() });
        (pb::ExplainRequest { torch_graphs: torch_graphs.collect(), ..Default::default() }, Default::default())
    } else if args.keys.is_empty() {
        let (graph, names) = load_graph_named(&args.graph)?;
        (pb::ExplainRequest { graph: Some(graph), ..Default::default() }, names)
    } else {
        (pb::ExplainRequest { keys: args.keys.clone(), ..Default::default() }, Default::default())
    };
    let client = kiln_client::connect(daemon).await?;
    let answer = client
        .grpc()
        .explain(request)
        .await
        .map_err(|e| name_files(&names, kiln_client::ClientError::from(e).into()))?
        .into_inner();
    for kernel in &answer.kernels {
        if args.json {
            print_line(&serde_json::to_string(kernel).context("encoding an explanation as JSON")?)?;
        } else {
            print_line(explanation_text(kernel).trim_end())?;
        }
    }
    Ok(if answer.kernels.iter().all(|k| k.cached) { ExitCode::SUCCESS } else { ExitCode::from(1) })
}
