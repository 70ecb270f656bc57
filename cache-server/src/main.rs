//! `kiln-cache`: parses flags, sets up logging, reads the config files, binds the sockets and
//! calls the library. Nothing more.

use anyhow::Context;
use clap::Parser;
use kiln_cache_server::config::{Config, FileConfig, Flags};
use kiln_cache_server::server::{self, Listeners};

fn main() -> anyhow::Result<()> {
    let flags = Flags::parse();
    kiln_serve::init_tracing();
    let file = match &flags.config {
        Some(path) => FileConfig::load(path)?,
        None => FileConfig::default(),
    };
    let tokens_text = match Config::tokens_path(&flags, &file) {
        Some(path) => Some(
            std::fs::read_to_string(&path).with_context(|| format!("reading the tokens file {}", path.display()))?,
        ),
        None => None,
    };
    let config = Config::merge(&flags, &file, tokens_text.as_deref())?;
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    runtime.block_on(async {
        let grpc = tokio::net::TcpListener::bind(config.listen)
            .await
            .with_context(|| format!("binding --listen {}", config.listen))?;
        let metrics = match config.metrics {
            Some(addr) => {
                Some(tokio::net::TcpListener::bind(addr).await.with_context(|| format!("binding --metrics {addr}"))?)
            }
            None => None,
        };
        server::run(Listeners { grpc, metrics }, config, kiln_serve::shutdown_signal("kiln-cache")).await?;
        Ok(())
    })
}
