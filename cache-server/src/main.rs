//! `kiln-cache`: the fleet cache service over Redis. Not built yet: this binary only holds the
//! command-line contract from DESIGN.md so that scripts and deploy files can name it, and it says
//! plainly that it cannot serve rather than pretending to.

use clap::Parser;

/// The flags DESIGN.md's command-line contract names.
#[derive(Debug, Parser)]
#[command(
    name = "kiln-cache",
    version,
    about = "kiln fleet cache server (not yet available)"
)]
struct Flags {
    #[arg(long, env = "KILN_CACHE_CONFIG")]
    config: Option<std::path::PathBuf>,
    #[arg(long, env = "KILN_CACHE_LISTEN")]
    listen: Option<String>,
    #[arg(long, env = "KILN_CACHE_REDIS")]
    redis: Vec<String>,
    #[arg(long)]
    redis_cluster: bool,
    #[arg(long, env = "KILN_CACHE_TOKENS")]
    tokens: Option<std::path::PathBuf>,
    #[arg(long, env = "KILN_CACHE_METRICS")]
    metrics: Option<String>,
}

fn main() {
    let _flags = Flags::parse();
    eprintln!(
        "kiln-cache: the fleet cache server is not part of this build yet; kilnd runs with its local tiers only"
    );
    std::process::exit(2);
}
