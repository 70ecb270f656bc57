//! kiln-cache configuration: flags, `KILN_CACHE_*` environment variables, an optional TOML file
//! and an optional tokens file.
//!
//! clap reads flags and their variables (a flag wins over its variable). The binary reads the
//! files ([`FileConfig::load`] and the tokens file's text); [`Config::merge`] is the pure function
//! that combines them, so tests call it directly. Precedence: flag, environment, file, default.

use crate::auth::{TokenEntry, TokenError, parse_tokens_file};
use clap::Parser;
use clap::builder::BoolishValueParser;
use serde::Deserialize;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How long a value a BatchGet read stays in memory when the file does not say
/// (`hot_values_ms`); the benchmark's restart model reads it from here.
pub const DEFAULT_HOT_VALUES: Duration = Duration::from_millis(2000);

/// `kiln-cache` command line. Every flag has a `KILN_CACHE_*` variable.
#[derive(Debug, Clone, Default, Parser)]
#[command(name = "kiln-cache", version, about = "kiln fleet cache server: artifacts, manifests and leases over Redis")]
pub struct Flags {
    /// TOML configuration file.
    #[arg(long, env = "KILN_CACHE_CONFIG")]
    pub config: Option<PathBuf>,
    /// gRPC address. Default 0.0.0.0:7171.
    #[arg(long, env = "KILN_CACHE_LISTEN")]
    pub listen: Option<SocketAddr>,
    /// Redis URL: redis://[:password@]host:port or unix:///path/redis.sock[?pass=password].
    /// Repeat (or comma-separate in the variable) for the seed nodes of a cluster.
    #[arg(long, env = "KILN_CACHE_REDIS", value_delimiter = ',')]
    pub redis: Vec<String>,
    /// The --redis URLs are Redis Cluster seed nodes.
    #[arg(long, env = "KILN_CACHE_REDIS_CLUSTER", value_parser = BoolishValueParser::new())]
    pub redis_cluster: bool,
    /// Tokens file: one `read:TOKEN` or `write:TOKEN` per line.
    #[arg(long, env = "KILN_CACHE_TOKENS")]
    pub tokens: Option<PathBuf>,
    /// Prometheus endpoint address, serving /metrics.
    #[arg(long, env = "KILN_CACHE_METRICS")]
    pub metrics: Option<SocketAddr>,
    /// TLS certificate chain (PEM). With --tls-key, gRPC is served over TLS.
    #[arg(long, env = "KILN_CACHE_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// TLS private key (PEM).
    #[arg(long, env = "KILN_CACHE_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Serve without any token, to anyone who can connect: for tests on a trusted machine. With
    /// no token configured, kiln-cache refuses to start unless this is given.
    #[arg(long, env = "KILN_CACHE_INSECURE_NO_AUTH", value_parser = BoolishValueParser::new())]
    pub insecure_no_auth: bool,
}

/// The optional TOML file: the flags' settings plus limits that have no flag.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    pub listen: Option<SocketAddr>,
    #[serde(default)]
    pub redis: Vec<String>,
    pub redis_cluster: Option<bool>,
    pub tokens_file: Option<PathBuf>,
    #[serde(default)]
    pub tokens: Vec<TokenEntry>,
    pub metrics: Option<SocketAddr>,
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    pub insecure_no_auth: Option<bool>,
    /// Artifact and manifest lifetime since last read.
    pub ttl_days: Option<u64>,
    pub negative_ttl_secs: Option<u64>,
    pub max_negative_ttl_secs: Option<u64>,
    pub max_artifact_mb: Option<u64>,
    pub max_message_mb: Option<usize>,
    pub max_batch_keys: Option<usize>,
    pub max_manifest_keys: Option<usize>,
    pub lease_min_ms: Option<u64>,
    pub lease_max_ms: Option<u64>,
    pub redis_connect_timeout_ms: Option<u64>,
    pub redis_timeout_ms: Option<u64>,
    pub drain_secs: Option<u64>,
    pub hot_values_mb: Option<u64>,
    pub hot_values_ms: Option<u64>,
    /// Whose kernels the fleet runs: "first-use" (default), "sample", "trusted-writers"
    /// or "confirmed" (see `kiln_proto::vet::VetPolicy`).
    pub vet: Option<kiln_proto::vet::VetPolicy>,
    /// Under `vet = "trusted-writers"`: the token ids (`tok-…`) that may put kernels.
    #[serde(default)]
    pub trusted_writers: Vec<String>,
}

impl FileConfig {
    /// Reads and parses the file; unknown keys are an error, so a typo never goes unnoticed.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigError::Read { path: path.to_owned(), reason: e.to_string() })?;
        toml::from_str(&text).map_err(|e| ConfigError::Parse { path: path.to_owned(), reason: e.to_string() })
    }
}

/// Why the configuration cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("reading {path}: {reason}")]
    Read { path: PathBuf, reason: String },
    #[error("parsing {path}: {reason}")]
    Parse { path: PathBuf, reason: String },
    #[error("tokens: {0}")]
    Tokens(#[from] TokenError),
    #[error(
        "no tokens configured: give --tokens FILE or [[tokens]] in the config, or run with \
         --insecure-no-auth on a trusted network"
    )]
    NoTokens,
    #[error("tls_cert and tls_key go together")]
    HalfTls,
    #[error("{0}")]
    Limit(&'static str),
    #[error(
        "trusted_writers: {0:?} is not a token id (`tok-` and 12 hex characters, as kiln-cache logs and records it; never the token itself)"
    )]
    TrustedWriter(String),
}

/// Whether `s` reads as a token id (`kiln_proto::auth::Caller`'s `tok-` and 12 hex characters).
fn is_token_id(s: &str) -> bool {
    s.strip_prefix("tok-").is_some_and(|hex| hex.len() == 12 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// Limits on what one request may ask for.
#[derive(Debug, Clone, PartialEq)]
pub struct Limits {
    /// One envelope, as stored (and, decompressed, its payload).
    pub max_artifact_bytes: u64,
    /// gRPC message size, both directions: tonic's 4 MiB default is smaller than some cubins.
    pub max_message_bytes: usize,
    /// Keys in one BatchGet or WatchPublish.
    pub max_batch_keys: usize,
    pub max_manifest_keys: usize,
    /// Used when a negative Put names no TTL.
    pub negative_ttl: Duration,
    pub max_negative_ttl: Duration,
    /// Lease TTL bounds: below the minimum a lease expires before its holder can renew it; above
    /// the maximum a dead holder stalls the fleet too long.
    pub lease_min: Duration,
    pub lease_max: Duration,
}

/// The merged configuration kiln-cache runs with.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub listen: SocketAddr,
    pub redis: Vec<String>,
    pub redis_cluster: bool,
    pub metrics: Option<SocketAddr>,
    /// Certificate chain and key, both PEM.
    pub tls: Option<(PathBuf, PathBuf)>,
    /// Empty only with `insecure_no_auth`.
    pub tokens: Vec<TokenEntry>,
    pub insecure_no_auth: bool,
    pub ttl: Duration,
    pub redis_connect_timeout: Duration,
    pub redis_timeout: Duration,
    /// How long shutdown waits for in-flight requests.
    pub drain: Duration,
    pub limits: Limits,
    /// Memory for envelopes `BatchGet` read lately (0: off), and how long each is kept; see
    /// `hot.rs` for why a fleet restart needs them.
    pub hot_values_bytes: u64,
    pub hot_values_ttl: Duration,
    /// Whose kernels the fleet runs (see `crate::trust`).
    pub vet: kiln_proto::vet::VetPolicy,
    /// The token ids that may put kernels under `trusted-writers`.
    pub trusted_writers: Vec<String>,
}

const MIB: u64 = 1024 * 1024;

impl Config {
    /// The tokens file named by the flag or the file, whose text the caller reads.
    pub fn tokens_path(flags: &Flags, file: &FileConfig) -> Option<PathBuf> {
        flags.tokens.clone().or_else(|| file.tokens_file.clone())
    }

    /// Flags (which already carry their environment variables) over the file over the defaults.
    /// `tokens_text` is the content of [`Config::tokens_path`], if any.
    ///
    /// With no token at all the server refuses to start unless `insecure_no_auth` is set: a cache
    /// serves code that will run on GPUs, and an open one lets anyone on the network plant it.
    /// Forgetting a tokens file must not quietly produce that.
    pub fn merge(flags: &Flags, file: &FileConfig, tokens_text: Option<&str>) -> Result<Self, ConfigError> {
        let mut tokens = file.tokens.clone();
        if let Some(text) = tokens_text {
            tokens.extend(parse_tokens_file(text)?);
        }
        crate::auth::Tokens::new(&tokens)?;
        let insecure_no_auth = flags.insecure_no_auth || file.insecure_no_auth.unwrap_or(false);
        if tokens.is_empty() && !insecure_no_auth {
            return Err(ConfigError::NoTokens);
        }
        let tls = match (
            flags.tls_cert.clone().or_else(|| file.tls_cert.clone()),
            flags.tls_key.clone().or_else(|| file.tls_key.clone()),
        ) {
            (Some(cert), Some(key)) => Some((cert, key)),
            (None, None) => None,
            _ => return Err(ConfigError::HalfTls),
        };
        let redis = if !flags.redis.is_empty() {
            flags.redis.clone()
        } else if !file.redis.is_empty() {
            file.redis.clone()
        } else {
            vec!["redis://127.0.0.1:6379".to_owned()]
        };
        let limits = Limits {
            max_artifact_bytes: file.max_artifact_mb.unwrap_or(128) * MIB,
            max_message_bytes: file.max_message_mb.map_or(kiln_proto::MAX_MESSAGE_BYTES, |mb| mb * MIB as usize),
            max_batch_keys: file.max_batch_keys.unwrap_or(4096),
            max_manifest_keys: file.max_manifest_keys.unwrap_or(65_536),
            negative_ttl: Duration::from_secs(file.negative_ttl_secs.unwrap_or(60)),
            max_negative_ttl: Duration::from_secs(file.max_negative_ttl_secs.unwrap_or(3600)),
            lease_min: Duration::from_millis(file.lease_min_ms.unwrap_or(100)),
            lease_max: Duration::from_millis(file.lease_max_ms.unwrap_or(600_000)),
        };
        if limits.max_artifact_bytes as usize > limits.max_message_bytes {
            return Err(ConfigError::Limit(
                "max_artifact_mb must not exceed max_message_mb: such an artifact could never arrive",
            ));
        }
        if let Some(bad) = file.trusted_writers.iter().find(|t| !is_token_id(t)) {
            return Err(ConfigError::TrustedWriter(bad.clone()));
        }
        if limits.lease_min > limits.lease_max || limits.negative_ttl > limits.max_negative_ttl {
            return Err(ConfigError::Limit(
                "a minimum exceeds its maximum (lease_min_ms/lease_max_ms or negative_ttl_secs)",
            ));
        }
        Ok(Config {
            listen: flags.listen.or(file.listen).unwrap_or_else(|| SocketAddr::from(([0, 0, 0, 0], 7171))),
            redis,
            redis_cluster: flags.redis_cluster || file.redis_cluster.unwrap_or(false),
            metrics: flags.metrics.or(file.metrics),
            tls,
            tokens,
            insecure_no_auth,
            ttl: Duration::from_secs(file.ttl_days.unwrap_or(7).max(1) * 86_400),
            redis_connect_timeout: Duration::from_millis(file.redis_connect_timeout_ms.unwrap_or(2000)),
            redis_timeout: Duration::from_millis(file.redis_timeout_ms.unwrap_or(10_000)),
            drain: Duration::from_secs(file.drain_secs.unwrap_or(10)),
            limits,
            hot_values_bytes: file.hot_values_mb.unwrap_or(256) * MIB,
            hot_values_ttl: file.hot_values_ms.map_or(DEFAULT_HOT_VALUES, Duration::from_millis),
            vet: file.vet.unwrap_or_default(),
            trusted_writers: file.trusted_writers.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// deploy/kiln-cache.toml documents the config file: it must list every key, and `--help`
    /// must read as plain text.
    #[test]
    fn flags_and_keys_are_documented() {
        let example = include_str!("../../deploy/kiln-cache.toml");
        kiln_serve::config_keys::assert_documented::<Flags, FileConfig>("deploy/kiln-cache.toml", example);
    }

    const TOKENS: &str = "write:write-token-0123456789\n";

    #[test]
    fn defaults_apply_when_nothing_is_set() {
        let c = Config::merge(&Flags::default(), &FileConfig::default(), Some(TOKENS)).unwrap();
        assert_eq!(c.listen, "0.0.0.0:7171".parse().unwrap());
        assert_eq!(c.redis, vec!["redis://127.0.0.1:6379"]);
        assert!(!c.redis_cluster && c.tls.is_none() && c.metrics.is_none());
        assert_eq!(c.ttl, Duration::from_secs(7 * 86_400));
        assert_eq!(c.limits.max_artifact_bytes, 128 * MIB);
        assert_eq!(c.limits.max_message_bytes, 256 * MIB as usize);
        assert_eq!(c.tokens.len(), 1);
    }

    #[test]
    fn flags_win_over_the_file() {
        let file: FileConfig = toml::from_str(
            "listen = \"127.0.0.1:1\"\nredis = [\"redis://a:1\"]\nttl_days = 2\n\
             [[tokens]]\ntoken = \"file-token-0123456789\"\naccess = \"read\"\n",
        )
        .unwrap();
        let flags = Flags::try_parse_from([
            "kiln-cache",
            "--listen",
            "127.0.0.1:2",
            "--redis",
            "redis://b:1",
            "--redis",
            "redis://c:1",
            "--redis-cluster",
        ])
        .unwrap();
        let c = Config::merge(&flags, &file, Some(TOKENS)).unwrap();
        assert_eq!(c.listen, "127.0.0.1:2".parse().unwrap());
        assert_eq!(c.redis, vec!["redis://b:1", "redis://c:1"]);
        assert!(c.redis_cluster);
        assert_eq!(c.ttl, Duration::from_secs(2 * 86_400));
        assert_eq!(c.tokens.len(), 2, "file tokens and the tokens file both count");
    }

    #[test]
    fn no_tokens_refuses_to_start_unless_insecure() {
        let none = Config::merge(&Flags::default(), &FileConfig::default(), None);
        assert_eq!(none.unwrap_err(), ConfigError::NoTokens);
        let flags = Flags { insecure_no_auth: true, ..Default::default() };
        let c = Config::merge(&flags, &FileConfig::default(), None).unwrap();
        assert!(c.insecure_no_auth && c.tokens.is_empty());
    }

    #[test]
    fn the_shipped_example_config_parses() {
        let file: FileConfig = toml::from_str(include_str!("../../deploy/kiln-cache.toml")).unwrap();
        let flags = Flags { insecure_no_auth: true, ..Default::default() };
        let c = Config::merge(&flags, &file, None).unwrap();
        let defaults = Config::merge(&flags, &FileConfig::default(), None).unwrap();
        assert_eq!(c.limits, defaults.limits, "the example documents the defaults");
        assert_eq!((c.ttl, c.drain), (defaults.ttl, defaults.drain));
        assert_eq!((c.hot_values_bytes, c.hot_values_ttl), (defaults.hot_values_bytes, defaults.hot_values_ttl));
    }

    #[test]
    fn bad_settings_are_refused() {
        let short = Config::merge(&Flags::default(), &FileConfig::default(), Some("read:abc"));
        assert!(matches!(short, Err(ConfigError::Tokens(_))));
        let file = FileConfig { tls_cert: Some("/c.pem".into()), ..Default::default() };
        assert_eq!(Config::merge(&Flags::default(), &file, Some(TOKENS)).unwrap_err(), ConfigError::HalfTls);
        let file = FileConfig { max_artifact_mb: Some(512), ..Default::default() };
        assert!(matches!(Config::merge(&Flags::default(), &file, Some(TOKENS)), Err(ConfigError::Limit(_))));
        assert!(toml::from_str::<FileConfig>("lisen = \"x\"").is_err());
        let file = FileConfig { trusted_writers: vec!["write-token-0123456789".into()], ..Default::default() };
        let refused = Config::merge(&Flags::default(), &file, Some(TOKENS)).unwrap_err();
        assert!(refused.to_string().contains("trusted_writers"), "{refused}");
        assert!(toml::from_str::<FileConfig>("vet = \"trusted\"").is_err());
        let file: FileConfig =
            toml::from_str("vet = \"trusted-writers\"\ntrusted_writers = [\"tok-0123456789ab\"]").unwrap();
        let c = Config::merge(&Flags::default(), &file, Some(TOKENS)).unwrap();
        assert_eq!((c.vet, c.trusted_writers.len()), (kiln_proto::vet::VetPolicy::TrustedWriters, 1));
    }
}
