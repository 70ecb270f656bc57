//! `kiln stats`: the daemon's counters, toolchains, GPUs and tiers.

use crate::output::stats::stats_text;
use crate::report::print_line;
use anyhow::Context;
use std::process::ExitCode;

pub async fn run(daemon: &str, json: bool) -> anyhow::Result<ExitCode> {
    let client = kiln_client::connect(daemon).await?;
    let stats = client.stats().await?;
    if json {
        // The proto3 JSON mapping, as every other tool that speaks kiln.v1 reads it.
        print_line(&serde_json::to_string_pretty(&stats).context("encoding stats as JSON")?)?;
    } else {
        print_line(stats_text(&stats).trim_end())?;
    }
    Ok(ExitCode::SUCCESS)
}
