//! `kiln watch JOB`: follow a submitted job, printing as `compile` does.

use crate::cli::WatchArgs;
use crate::report::Reporter;
use std::process::ExitCode;

pub async fn run(daemon: &str, args: WatchArgs) -> anyhow::Result<ExitCode> {
    let client = kiln_client::connect(daemon).await?;
    // The kernel ids are not known until they arrive; the bar starts on the `Queued` event.
    let reporter = Reporter::new(&args.output, &[])?;
    let stream = client.watch(&args.job).await?;
    reporter.follow(stream).await
}
