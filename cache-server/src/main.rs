//! `kiln-cache`: parses flags, sets up logging, reads the config files, binds the sockets and
//! calls the library. Nothing more.

use anyhow::Context;
use clap::Parser;
use kiln_cache_server::config::{Config, FileConfig, Flags};
use kiln_cache_server::server::{self, Listeners};

/// mimalloc instead of glibc's malloc. glibc gives each thread that contends an arena of its own
/// and seldom returns their pages: in kiln-reliability's 10-minute soak kilnd grew in steps, +2.6
/// MiB/min, where mimalloc held +0.5 MiB/min; a warm hit of the 64-kernel graph (kiln-bench (a))
/// was also about 12% faster. The price is a higher floor (about 58 MiB in the soak's first
/// minute against 30 MiB). Built without transparent huge pages (Cargo.toml's `no_thp`): with
/// them, mimalloc's freed arenas came back as 2 MiB pages the kernel zeroed on every first
/// touch, 62% of kilnd's CPU while 16 fresh hosts restored one snapshot (kiln-bench (n)); off,
/// kilnd's CPU for those restores fell from 3.8 s to 1.5 s.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

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
    let stop_bound = config.drain + kiln_serve::STOP_GRACE;
    let stopped = async move {
        kiln_serve::shutdown_signal("kiln-cache").await;
        kiln_serve::arm_stop_deadline("kiln-cache", stop_bound);
    };
    let served = runtime.block_on(async {
        let grpc =
            kiln_serve::tcp::bind(config.listen).with_context(|| format!("binding --listen {}", config.listen))?;
        let metrics = match config.metrics {
            Some(addr) => Some(kiln_serve::tcp::bind(addr).with_context(|| format!("binding --metrics {addr}"))?),
            None => None,
        };
        server::run(Listeners { grpc, metrics }, config, stopped).await?;
        Ok(())
    });
    // Dropping a runtime waits for every blocking task, however long; past the drain nothing
    // left there is worth waiting for.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    served
}
