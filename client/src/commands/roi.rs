//! `kiln roi`: whether torch.compile pays for itself, per job, from the fleet ledger (or this
//! kilnd's, without a fleet cache).

use crate::cli::RoiArgs;
use crate::output::roi::roi_text;
use crate::report::print_line;
use anyhow::Context;
use std::process::ExitCode;

pub async fn run(daemon: &str, args: RoiArgs) -> anyhow::Result<ExitCode> {
    let client = kiln_client::connect(daemon).await?;
    let job = args.job.unwrap_or_default();
    let reply = client.torch_jobs(&job, 0).await?;
    if args.json {
        print_line(&serde_json::to_string_pretty(&reply).context("encoding the jobs as JSON")?)?;
    } else {
        print_line(roi_text(&reply, &job).trim_end())?;
    }
    Ok(if !job.is_empty() && reply.jobs.is_empty() { ExitCode::from(1) } else { ExitCode::SUCCESS })
}
