//! kilnd configuration: flags, `KILN_*` environment variables and an optional TOML file.
//!
//! clap reads flags and their environment variables (a flag wins over its variable); the file is
//! read by [`FileConfig::load`]; [`Config::merge`] is the pure function that combines the two, so
//! tests call it directly. Precedence: flag, then environment, then file, then default.

use clap::Parser;
use serde::Deserialize;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// `kilnd` command line. Every flag has a `KILN_*` variable.
#[derive(Debug, Clone, Default, Parser)]
#[command(name = "kilnd", version, about = "kiln compile daemon: compiles GPU kernels once, serves them from cache")]
pub struct Flags {
    /// TOML configuration file (deploy/kilnd.toml lists every key).
    ///
    /// Without it, kilnd reads the first of these that exists: <kilnd's directory>/../etc/kiln/kilnd.toml,
    /// the config of the install kilnd belongs to (scripts/install writes one naming the toolchains
    /// it installed), then /etc/kiln/kilnd.toml. Flags and KILN_* variables override the file.
    #[arg(long, env = "KILN_CONFIG")]
    pub config: Option<PathBuf>,
    /// Unix socket to listen on (created 0660).
    #[arg(long, env = "KILN_SOCKET")]
    pub socket: Option<PathBuf>,
    /// Optional TCP address, e.g. 127.0.0.1:7070. A non-loopback address needs --tokens and TLS.
    #[arg(long, env = "KILN_LISTEN")]
    pub listen: Option<SocketAddr>,
    /// Tokens file for --listen: one `read:TOKEN` or `write:TOKEN` per line.
    #[arg(long, env = "KILN_TOKENS")]
    pub tokens: Option<PathBuf>,
    /// TLS certificate chain (PEM) for --listen. With --tls-key, TCP is served over TLS.
    #[arg(long, env = "KILN_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// TLS private key (PEM) for --listen.
    #[arg(long, env = "KILN_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Cache directory for the disk tier.
    #[arg(long, env = "KILN_CACHE_DIR")]
    pub cache_dir: Option<PathBuf>,
    /// Default target when a graph names none, e.g. sm_90. Without it, the local GPU's.
    #[arg(long, env = "KILN_TARGET")]
    pub target: Option<String>,
    /// Prometheus endpoint address, serving /metrics.
    #[arg(long, env = "KILN_METRICS")]
    pub metrics: Option<SocketAddr>,
    /// Fleet cache URI: a kiln-cache at http://host:port or https://host:port.
    #[arg(long, env = "KILN_REMOTE")]
    pub remote: Option<String>,
    /// Token for the fleet cache, or @FILE.
    #[arg(long, env = "KILN_REMOTE_TOKEN", hide_env_values = true)]
    pub remote_token: Option<String>,
    /// The fraction of fleet artifacts this host recompiles to audit them (0 to 1; default
    /// 0.02), besides every first artifact of a publisher it has not yet audited.
    #[arg(long, env = "KILN_AUDIT_RATE")]
    pub audit_rate: Option<f64>,
    /// Compiles running at once. Default: the number of cores.
    #[arg(long, env = "KILN_CONCURRENCY")]
    pub concurrency: Option<usize>,
    /// CUDA toolkit root, or a wheel's nvidia/cu13 directory.
    #[arg(long, env = "KILN_CUDA_ROOT")]
    pub cuda_root: Option<PathBuf>,
    /// Python interpreter with triton installed, for the Triton workers.
    #[arg(long, env = "KILN_PYTHON")]
    pub python: Option<PathBuf>,
    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Debug, Clone, clap::Subcommand)]
pub enum Command {
    /// Run the daemon (the default).
    Serve,
    /// Compile a tiny kernel with each toolchain (NVRTC, ptxas, Triton), print what each took or
    /// why it failed and the fix, and exit: non-zero when any toolchain cannot compile.
    Check {
        #[arg(long)]
        json: bool,
    },
    /// Internal: a compile worker speaking the framed protocol on stdin/stdout.
    #[command(hide = true)]
    Worker {
        #[arg(long)]
        nvrtc: PathBuf,
        #[arg(long)]
        builtins: PathBuf,
        #[arg(long)]
        memory_mb: u64,
    },
}

/// The optional TOML file. Same names as the flags, plus limits that have no flag.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    pub socket: Option<PathBuf>,
    pub listen: Option<SocketAddr>,
    /// Tokens for `listen`: one `read:TOKEN` or `write:TOKEN` per line.
    pub tokens_file: Option<PathBuf>,
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    pub cache_dir: Option<PathBuf>,
    pub target: Option<String>,
    pub metrics: Option<SocketAddr>,
    pub remote: Option<String>,
    pub remote_token: Option<String>,
    /// Fleet leases: how long one lives; its holder renews it every third of this.
    pub lease_ttl_ms: Option<u64>,
    /// How long a waiter waits on another host's compile before compiling itself.
    pub hedge_secs: Option<u64>,
    /// Fleet single-flight on or off (off only to measure what it saves).
    pub fleet_leases: Option<bool>,
    /// The fleet audit: the fraction of fleet artifacts recompiled and compared (0 to 1), the
    /// share of one CPU audits may use (0 to 1), and whether to audit at all.
    pub audit_rate: Option<f64>,
    pub audit_cpu_share: Option<f64>,
    pub audit: Option<bool>,
    /// How often the fleet's quarantine list is read.
    pub quarantine_poll_ms: Option<u64>,
    /// Whose kernels this host runs: "first-use" (default), "sample", "trusted-writers"
    /// or "confirmed" (see `kiln_proto::vet::VetPolicy`).
    pub vet: Option<kiln_proto::vet::VetPolicy>,
    /// Under `vet = "trusted-writers"`: the token ids (`tok-…`) whose kernels are served.
    pub trusted_writers: Option<Vec<String>>,
    pub concurrency: Option<usize>,
    pub cuda_root: Option<PathBuf>,
    pub python: Option<PathBuf>,
    pub triton_workers: Option<usize>,
    pub torch_workers: Option<usize>,
    pub torch_prestart: Option<bool>,
    /// Whether a process may claim a cold torch graph and publish its own compile of it.
    pub torch_claims: Option<bool>,
    pub memory_cache_mb: Option<u64>,
    pub disk_cache_mb: Option<u64>,
    pub max_queue: Option<usize>,
    pub max_kernels: Option<usize>,
    pub max_message_mb: Option<usize>,
    pub max_source_kb: Option<usize>,
    pub max_artifact_mb: Option<u64>,
    pub max_snapshot_mb: Option<u64>,
    pub compile_timeout_secs: Option<u64>,
    pub worker_memory_mb: Option<u64>,
    pub negative_ttl_secs: Option<u64>,
    pub drain_secs: Option<u64>,
    /// Load each fresh cubin on a local GPU of its target before caching it (default on).
    pub validate_cubins: Option<bool>,
    /// Start the Triton pool at start-up, in the background, instead of on the first Triton
    /// request (default off).
    pub triton_prestart: Option<bool>,
}

impl FileConfig {
    /// Reads and parses the file; unknown keys are an error, so a typo never goes unnoticed.
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        use anyhow::Context;
        let text = std::fs::read_to_string(path).with_context(|| format!("reading config {}", path.display()))?;
        toml::from_str(&text).with_context(|| format!("parsing config {}", path.display()))
    }
}

/// Limits on what one client may ask for. Over a limit is INVALID_ARGUMENT or RESOURCE_EXHAUSTED.
#[derive(Debug, Clone, PartialEq)]
pub struct Limits {
    /// Compiles waiting for a slot, all clients together; past it, RESOURCE_EXHAUSTED.
    pub max_queue: usize,
    /// Kernels in one graph.
    pub max_kernels: usize,
    /// gRPC message size, both directions. tonic's 4 MiB default is too small for a graph of cubins.
    pub max_message_bytes: usize,
    /// One kernel's source plus its headers.
    pub max_source_bytes: usize,
    /// One artifact, after decompression; also bounds what a tier may hand back.
    pub max_artifact_bytes: u64,
    /// One job snapshot: the sum of its files' sizes.
    pub max_snapshot_bytes: u64,
    pub compile_timeout: Duration,
    /// Address-space limit of each worker process.
    pub worker_memory_mb: u64,
    /// How long a failed compile is remembered, so a herd does not recompile a broken source.
    pub negative_ttl: Duration,
    /// How long shutdown waits for running work.
    pub drain: Duration,
}

/// The merged configuration kilnd runs with.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub socket: PathBuf,
    pub listen: Option<SocketAddr>,
    /// Tokens file for `listen`, read at start-up ([`crate::listen`]).
    pub tokens_file: Option<PathBuf>,
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    pub cache_dir: PathBuf,
    pub target: Option<String>,
    pub metrics: Option<SocketAddr>,
    pub remote: Option<Remote>,
    pub concurrency: usize,
    pub cuda_root: Option<PathBuf>,
    pub python: PathBuf,
    /// Triton workers at most: each holds Triton and LLVM (hundreds of MB), so not one per core.
    pub triton_workers: usize,
    /// torch graph workers at most: each holds torch, and each graph's compile runs Inductor's
    /// own pool of compile processes, so a few use the whole host.
    pub torch_workers: usize,
    /// Start the torch workers when kilnd starts rather than at the first graph (or the first
    /// process that imports Dynamo with kiln.torch, which asks kilnd to start them).
    pub torch_prestart: bool,
    /// Let the first process that asks for a cold torch graph compile it itself and publish it
    /// (`ClaimTorchGraph`); off, its workers compile every graph, in their box, and a claim is
    /// answered as a compile request.
    pub torch_claims: bool,
    pub memory_cache_bytes: u64,
    pub disk_cache_bytes: u64,
    /// Load fresh cubins on a local GPU before caching them, where one matches their target.
    pub validate_cubins: bool,
    /// Start the Triton pool in the background at start-up: a host that runs Triton jobs then
    /// has its fingerprint (which every Triton key needs) before the first request, instead of
    /// the first request paying for importing Triton.
    pub triton_prestart: bool,
    pub limits: Limits,
}

/// The fleet cache this daemon uses, with its lease settings.
#[derive(Clone, PartialEq)]
pub struct Remote {
    pub uri: String,
    /// The bearer token itself (read from the file when given as @FILE). Never printed: `Debug`
    /// shows `<redacted>`, so a logged configuration cannot leak it.
    pub token: String,
    pub lease_ttl: Duration,
    pub hedge: Duration,
    pub leases: bool,
    pub audit: crate::domain::AuditPolicy,
    pub quarantine_poll: Duration,
    /// Under `vet = "trusted-writers"`, the token ids whose kernels are served unvetted.
    pub trusted_writers: Vec<String>,
}

impl std::fmt::Debug for Remote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Remote")
            .field("uri", &self.uri)
            .field("token", &"<redacted>")
            .field("lease_ttl", &self.lease_ttl)
            .field("hedge", &self.hedge)
            .field("leases", &self.leases)
            .field("audit", &self.audit)
            .field("quarantine_poll", &self.quarantine_poll)
            .field("trusted_writers", &self.trusted_writers)
            .finish()
    }
}

/// `TOKEN` or `@FILE`: the token, with the file's surrounding whitespace trimmed.
pub fn read_token(value: &str) -> anyhow::Result<String> {
    use anyhow::Context;
    match value.strip_prefix('@') {
        Some(path) => Ok(std::fs::read_to_string(path)
            .with_context(|| format!("reading the token file {path}"))?
            .trim()
            .to_string()),
        None => Ok(value.to_string()),
    }
}

/// Host facts the defaults depend on, passed in so that [`Config::merge`] stays pure.
#[derive(Debug, Clone)]
pub struct Defaults {
    pub socket: PathBuf,
    pub cache_dir: PathBuf,
    pub cores: usize,
}

impl Defaults {
    pub fn from_host() -> Self {
        Defaults {
            socket: kiln_proto::paths::default_socket_path(),
            cache_dir: kiln_proto::paths::default_cache_dir(),
            cores: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        }
    }
}

const MIB: u64 = 1024 * 1024;

impl Config {
    /// Flags (which already carry their environment variables) over the file over the defaults.
    pub fn merge(flags: &Flags, file: &FileConfig, defaults: &Defaults) -> Self {
        let limits = Limits {
            max_queue: file.max_queue.unwrap_or(4096),
            max_kernels: file.max_kernels.unwrap_or(4096),
            max_message_bytes: file.max_message_mb.map_or(kiln_proto::MAX_MESSAGE_BYTES, |mb| mb * MIB as usize),
            max_source_bytes: file.max_source_kb.unwrap_or(8 * 1024) * 1024,
            max_artifact_bytes: file.max_artifact_mb.unwrap_or(128) * MIB,
            max_snapshot_bytes: file.max_snapshot_mb.unwrap_or(2048) * MIB,
            compile_timeout: Duration::from_secs(file.compile_timeout_secs.unwrap_or(300)),
            worker_memory_mb: file.worker_memory_mb.unwrap_or(8192),
            negative_ttl: Duration::from_secs(file.negative_ttl_secs.unwrap_or(60)),
            drain: Duration::from_secs(file.drain_secs.unwrap_or(30)),
        };
        Config {
            socket: flags.socket.clone().or_else(|| file.socket.clone()).unwrap_or_else(|| defaults.socket.clone()),
            listen: flags.listen.or(file.listen),
            tokens_file: flags.tokens.clone().or_else(|| file.tokens_file.clone()),
            tls_cert: flags.tls_cert.clone().or_else(|| file.tls_cert.clone()),
            tls_key: flags.tls_key.clone().or_else(|| file.tls_key.clone()),
            cache_dir: flags
                .cache_dir
                .clone()
                .or_else(|| file.cache_dir.clone())
                .unwrap_or_else(|| defaults.cache_dir.clone()),
            target: flags.target.clone().or_else(|| file.target.clone()),
            metrics: flags.metrics.or(file.metrics),
            remote: flags.remote.clone().or_else(|| file.remote.clone()).map(|uri| Remote {
                uri,
                token: flags.remote_token.clone().or_else(|| file.remote_token.clone()).unwrap_or_default(),
                lease_ttl: Duration::from_millis(file.lease_ttl_ms.unwrap_or(10_000).max(300)),
                hedge: Duration::from_secs(file.hedge_secs.unwrap_or(600)),
                leases: file.fleet_leases.unwrap_or(true),
                audit: audit_policy(flags, file),
                quarantine_poll: Duration::from_millis(file.quarantine_poll_ms.unwrap_or(1000).clamp(100, 600_000)),
                trusted_writers: file.trusted_writers.clone().unwrap_or_default(),
            }),
            concurrency: flags.concurrency.or(file.concurrency).unwrap_or(defaults.cores).max(1),
            cuda_root: flags.cuda_root.clone().or_else(|| file.cuda_root.clone()),
            python: flags.python.clone().or_else(|| file.python.clone()).unwrap_or_else(|| "python3".into()),
            triton_workers: file.triton_workers.unwrap_or(defaults.cores.min(8)).max(1),
            torch_workers: file.torch_workers.unwrap_or((defaults.cores / 4).clamp(1, 8)).max(1),
            torch_prestart: file.torch_prestart.unwrap_or(false),
            torch_claims: file.torch_claims.unwrap_or(true),
            memory_cache_bytes: file.memory_cache_mb.unwrap_or(1024) * MIB,
            disk_cache_bytes: file.disk_cache_mb.unwrap_or(20 * 1024) * MIB,
            validate_cubins: file.validate_cubins.unwrap_or(true),
            triton_prestart: file.triton_prestart.unwrap_or(false),
            limits,
        }
    }
}

/// The audit settings, each clamped to its range (a rate of 3 audits everything; a share of 0
/// would never audit, so it is at least 0.001).
fn audit_policy(flags: &Flags, file: &FileConfig) -> crate::domain::AuditPolicy {
    let defaults = crate::domain::AuditPolicy::default();
    let finite = |v: Option<f64>, default: f64| v.filter(|v| v.is_finite()).unwrap_or(default);
    crate::domain::AuditPolicy {
        rate: finite(flags.audit_rate.or(file.audit_rate), defaults.rate).clamp(0.0, 1.0),
        cpu_share: finite(file.audit_cpu_share, defaults.cpu_share).clamp(0.001, 1.0),
        enabled: file.audit.unwrap_or(defaults.enabled),
        vet: file.vet.unwrap_or(defaults.vet),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const EXAMPLE: &str = include_str!("../../deploy/kilnd.toml");

    /// deploy/kilnd.toml says it shows every key: it must, and `--help` must read as plain text.
    #[test]
    fn flags_and_keys_are_documented() {
        kiln_serve::config_keys::assert_documented::<Flags, FileConfig>("deploy/kilnd.toml", EXAMPLE);
    }

    /// Every key deploy/kilnd.toml shows must parse.
    #[test]
    fn the_example_config_parses_with_its_examples_uncommented() {
        // Commented-out `# key = value` lines become settings; other comments stay comments.
        let setting = |l: &str| {
            let key: String = l.chars().take_while(|c| c.is_ascii_lowercase() || *c == '_').collect();
            !key.is_empty() && l[key.len()..].trim_start().starts_with('=')
        };
        let uncommented: String = EXAMPLE
            .lines()
            .map(|l| format!("{}\n", l.strip_prefix("# ").filter(|rest| setting(rest)).unwrap_or(l)))
            .collect();
        let parsed: Result<FileConfig, _> = toml::from_str(&uncommented);
        assert!(parsed.is_ok(), "deploy/kilnd.toml with its examples uncommented: {parsed:?}");
    }

    fn defaults() -> Defaults {
        Defaults { socket: "/d.sock".into(), cache_dir: "/d/cache".into(), cores: 6 }
    }

    #[test]
    fn defaults_apply_when_nothing_is_set() {
        let c = Config::merge(&Flags::default(), &FileConfig::default(), &defaults());
        assert_eq!(c.socket, PathBuf::from("/d.sock"));
        assert_eq!(c.cache_dir, PathBuf::from("/d/cache"));
        assert_eq!(c.concurrency, 6);
        assert_eq!(c.limits.max_message_bytes, 256 * 1024 * 1024);
        assert!(c.listen.is_none() && c.target.is_none());
    }

    #[test]
    fn flags_win_over_the_file() {
        let file: FileConfig = toml::from_str(
            "socket = \"/f.sock\"\ntarget = \"sm_80\"\nconcurrency = 3\nmax_queue = 9\ncache_dir = \"/f\"",
        )
        .unwrap();
        let flags = Flags { socket: Some("/flag.sock".into()), concurrency: Some(2), ..Default::default() };
        let c = Config::merge(&flags, &file, &defaults());
        assert_eq!(c.socket, PathBuf::from("/flag.sock"));
        assert_eq!(c.concurrency, 2);
        assert_eq!(c.target.as_deref(), Some("sm_80"));
        assert_eq!(c.cache_dir, PathBuf::from("/f"));
        assert_eq!(c.limits.max_queue, 9);
    }

    #[test]
    fn environment_variables_fill_flags() {
        // clap's `env` is what reads KILN_*; check the wiring without touching the process env.
        let flags = Flags::try_parse_from(["kilnd", "--concurrency", "0"]).unwrap();
        let c = Config::merge(&flags, &FileConfig::default(), &defaults());
        assert_eq!(c.concurrency, 1, "zero concurrency is raised to one");
    }

    #[test]
    fn the_fleet_token_never_shows_in_debug_output() {
        let flags = Flags::try_parse_from(["kilnd", "--remote", "http://c:7171", "--remote-token", "s3cret-token-xyz"])
            .unwrap();
        let c = Config::merge(&flags, &FileConfig::default(), &defaults());
        let shown = format!("{c:?}");
        assert!(shown.contains("<redacted>") && !shown.contains("s3cret-token-xyz"), "{shown}");
    }

    #[test]
    fn the_shipped_example_config_parses() {
        let file: FileConfig = toml::from_str(EXAMPLE).unwrap();
        assert_eq!(file.max_queue, Some(4096));
    }

    #[test]
    fn the_example_listener_settings_parse_and_reach_the_config() {
        // deploy/kilnd.toml shows them commented out; uncommented, they must be real keys.
        let text: String = EXAMPLE
            .lines()
            .filter_map(|l| {
                ["listen", "tokens_file", "tls_cert", "tls_key"].iter().find_map(|k| {
                    l.strip_prefix("# ")
                        .filter(|rest| rest.starts_with(&format!("{k} =")))
                        .map(|rest| format!("{rest}\n"))
                })
            })
            .collect();
        let file: FileConfig = toml::from_str(&text).unwrap();
        let c = Config::merge(&Flags::default(), &file, &defaults());
        assert!(c.listen.is_some() && c.tokens_file.is_some() && c.tls_cert.is_some() && c.tls_key.is_some(), "{text}");
        let flags = Flags::try_parse_from(["kilnd", "--tokens", "/f/tokens"]).unwrap();
        assert_eq!(Config::merge(&flags, &file, &defaults()).tokens_file, Some(PathBuf::from("/f/tokens")));
    }

    #[test]
    fn unknown_file_keys_are_refused() {
        assert!(toml::from_str::<FileConfig>("sokcet = \"/x\"").is_err());
    }
}
