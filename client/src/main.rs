//! `kiln`: the command line of kiln. Parses arguments, runs one command, and maps the outcome to
//! an exit code: 0 when every kernel was OK, 1 when a kernel failed or missed (or `doctor` found a
//! problem), 2 for usage, connection and gRPC errors.

mod artifacts;
mod cli;
mod commands;
mod output;
mod progress;
mod report;

use std::process::ExitCode;

/// Exit code for usage, connection and gRPC errors; clap uses 2 for usage errors too.
const EXIT_ERROR: u8 = 2;

// One thread: the CLI waits on one stream at a time, and a smaller runtime starts faster.
#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let cli = cli::Cli::parse_args();
    match commands::run(cli).await {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::from(EXIT_ERROR)
        }
    }
}
