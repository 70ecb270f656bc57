//! `kiln explain`: asks the daemon why kernels missed (or would miss). Exit 0 when every kernel
//! is cached, 1 when some would compile, 2 on an error.

use super::load_graph;
use crate::cli::ExplainArgs;
use crate::output::explain::explanation_text;
use crate::report::print_line;
use anyhow::Context;
use kiln_client::pb;
use std::process::ExitCode;

pub async fn run(daemon: &str, args: ExplainArgs) -> anyhow::Result<ExitCode> {
    let request = if args.keys.is_empty() {
        pb::ExplainRequest { graph: Some(load_graph(&args.graph)?), keys: Vec::new() }
    } else {
        pb::ExplainRequest { graph: None, keys: args.keys.clone() }
    };
    let client = kiln_client::connect(daemon).await?;
    let answer = client.grpc().explain(request).await.map_err(kiln_client::ClientError::from)?.into_inner();
    for kernel in &answer.kernels {
        if args.json {
            print_line(&serde_json::to_string(kernel).context("encoding an explanation as JSON")?)?;
        } else {
            print_line(explanation_text(kernel).trim_end())?;
        }
    }
    Ok(if answer.kernels.iter().all(|k| k.cached) { ExitCode::SUCCESS } else { ExitCode::from(1) })
}
