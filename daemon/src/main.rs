//! `kilnd`: parses flags, sets up logging, binds the sockets and calls the library. Nothing more.

use anyhow::Context;
use clap::Parser;
use kiln_daemon::config::{Command, Config, Defaults, FileConfig, Flags};
use kiln_daemon::config_file;
use kiln_daemon::listen::TcpSecurity;
use kiln_daemon::server::{self, Listeners};
use std::path::Path;

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
    if let Some(Command::Worker { nvrtc, builtins, memory_mb }) = &flags.command {
        // A worker is a plain blocking process: no runtime, no logging set-up.
        std::process::exit(kiln_daemon::runtime::worker::process::run(nvrtc, builtins, *memory_mb));
    }
    kiln_serve::init_tracing();
    let exe = std::env::current_exe().ok();
    let config_file = config_file::locate(flags.config.as_deref(), exe.as_deref());
    let file = match &config_file {
        Some(path) => FileConfig::load(path)?,
        None => FileConfig::default(),
    };
    let config = Config::merge(&flags, &file, &Defaults::from_host());
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    if let Some(Command::Check { json }) = flags.command {
        std::process::exit(runtime.block_on(kiln_daemon::runtime::check::run(&config, config_file.as_deref(), json)));
    }
    match &config_file {
        Some(path) => tracing::info!(config = %path.display(), "configuration file read"),
        None => tracing::info!("no configuration file: defaults, flags and KILN_* variables"),
    }
    let stop_bound = config.limits.drain + kiln_serve::STOP_GRACE;
    let stopped = async move {
        kiln_serve::shutdown_signal("kilnd").await;
        kiln_serve::arm_stop_deadline("kilnd", stop_bound);
    };
    let served = runtime.block_on(async {
        // Every start-up check first (toolchains, GPUs, cache directory, fleet settings): a
        // kilnd that cannot start never leaves a socket that refuses connections.
        let tcp_security = kiln_daemon::listen::prepare(&config)?;
        let built = server::build(&config).await?;
        let listeners = bind(&config, tcp_security).await?;
        let socket = config.socket.clone();
        let served = server::serve(built, listeners, config, stopped).await;
        // Ours to remove: bind_unix refused to start over a live daemon's socket.
        if let Err(e) = std::fs::remove_file(&socket) {
            tracing::warn!(socket = %socket.display(), error = %e, "could not remove the socket");
        }
        served
    });
    // Dropping a runtime waits for every blocking task, however long; past the drain nothing
    // left there is worth waiting for.
    runtime.shutdown_timeout(RUNTIME_SHUTDOWN);
    served
}

/// How long the runtime's blocking tasks get once the server has returned.
const RUNTIME_SHUTDOWN: std::time::Duration = std::time::Duration::from_secs(1);

async fn bind(config: &Config, tcp_security: Option<TcpSecurity>) -> anyhow::Result<Listeners> {
    let unix = bind_unix(&config.socket).await?;
    let tcp = match (config.listen, tcp_security) {
        (Some(addr), Some(security)) => {
            Some((kiln_serve::tcp::bind(addr).with_context(|| format!("binding --listen {addr}"))?, security))
        }
        _ => None,
    };
    let metrics = match config.metrics {
        Some(addr) => Some(kiln_serve::tcp::bind(addr).with_context(|| format!("binding --metrics {addr}"))?),
        None => None,
    };
    Ok(Listeners { unix, tcp, metrics })
}

/// Binds the Unix socket with mode 0660, replacing a stale socket file but never a live daemon's.
async fn bind_unix(path: &Path) -> anyhow::Result<tokio::net::UnixListener> {
    use std::os::unix::fs::PermissionsExt;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    if path.exists() {
        if tokio::net::UnixStream::connect(path).await.is_ok() {
            anyhow::bail!("another kilnd is already listening on {}", path.display());
        }
        std::fs::remove_file(path).with_context(|| format!("removing the stale socket {}", path.display()))?;
    }
    let listener = tokio::net::UnixListener::bind(path).with_context(|| format!("binding {}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o660))
        .with_context(|| format!("setting the mode of {}", path.display()))?;
    Ok(listener)
}
