//! What kilnd's TCP listener (`--listen`) needs, decided at start-up from where it listens.
//!
//! - **Tokens** (`--tokens FILE`): every call needs a bearer token, read-only or read-write
//!   ([`crate::auth`]). Required on any address other hosts can reach: a caller who may compile
//!   can run a Triton module in kilnd's workers.
//! - **TLS** (`--tls-cert`, `--tls-key`): required with tokens on a non-loopback address, where a
//!   token in plain text would be anyone's who sees the traffic.
//! - **Neither**, on a loopback address only: any process of this host can call it, as any
//!   process that can open the Unix socket can. kilnd logs that it serves so.
//!
//! The Unix socket needs none of this: its file mode (0660) is its guard.

use crate::config::Config;
use anyhow::Context;
use kiln_proto::auth::{Tokens, parse_tokens_file};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use tonic::transport::{Identity, ServerTlsConfig};

/// The TCP listener's tokens and TLS, read from their files at start-up.
#[derive(Debug, Default)]
pub struct TcpSecurity {
    /// `None`: no token is asked for (loopback only).
    pub(crate) tokens: Option<Arc<Tokens>>,
    pub(crate) tls: Option<ServerTlsConfig>,
}

/// Reads the tokens and TLS files named in `config` and refuses a listener they leave exposed.
/// `None` when there is no `--listen`.
pub fn prepare(config: &Config) -> anyhow::Result<Option<TcpSecurity>> {
    let Some(addr) = config.listen else {
        if config.tokens_file.is_some() || config.tls_cert.is_some() || config.tls_key.is_some() {
            tracing::warn!("tokens_file, tls_cert and tls_key apply to --listen, which is not set: they are unused");
        }
        return Ok(None);
    };
    let tokens = match &config.tokens_file {
        Some(path) => Some(read_tokens(path)?),
        None => None,
    };
    let tls = match (&config.tls_cert, &config.tls_key) {
        (Some(cert), Some(key)) => Some(ServerTlsConfig::new().identity(Identity::from_pem(read(cert)?, read(key)?))),
        (None, None) => None,
        _ => anyhow::bail!("tls_cert and tls_key go together: set both, or neither"),
    };
    check(addr, tokens.is_some(), tls.is_some()).map_err(anyhow::Error::msg)?;
    match &tokens {
        None => tracing::info!(
            %addr,
            tls = tls.is_some(),
            "TCP listener on a loopback address without tokens: any process on this host can call it \
             (--tokens FILE requires them)"
        ),
        Some(t) => tracing::info!(%addr, tls = tls.is_some(), tokens = t.len(), "TCP listener requires tokens"),
    }
    Ok(Some(TcpSecurity { tokens: tokens.map(Arc::new), tls }))
}

/// Refuses a listener other hosts could reach without tokens, or with tokens in plain text.
fn check(addr: SocketAddr, tokens: bool, tls: bool) -> Result<(), String> {
    if addr.ip().is_loopback() {
        return Ok(());
    }
    if !tokens {
        return Err(format!(
            "--listen {addr}: a TCP listener other hosts can reach needs tokens, since anyone who can call \
             it can have code run in kilnd's Triton workers: set --tokens FILE (KILN_TOKENS, or tokens_file \
             in the config file) with `read:TOKEN`/`write:TOKEN` lines, and --tls-cert/--tls-key; or listen \
             on a loopback address"
        ));
    }
    if !tls {
        return Err(format!(
            "--listen {addr}: tokens would cross the network in plain text: set --tls-cert and --tls-key \
             (KILN_TLS_CERT/KILN_TLS_KEY, or tls_cert/tls_key in the config file)"
        ));
    }
    Ok(())
}

fn read_tokens(path: &Path) -> anyhow::Result<Tokens> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading the tokens file {}", path.display()))?;
    let entries = parse_tokens_file(&text).with_context(|| format!("tokens file {}", path.display()))?;
    anyhow::ensure!(!entries.is_empty(), "tokens file {}: no tokens in it", path.display());
    Tokens::new(&entries).with_context(|| format!("tokens file {}", path.display()))
}

fn read(path: &Path) -> anyhow::Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("reading {}", path.display()))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn exposed_listeners_need_tokens_and_tls() {
        let lo: SocketAddr = "127.0.0.1:7070".parse().unwrap();
        let lo6: SocketAddr = "[::1]:7070".parse().unwrap();
        let any: SocketAddr = "0.0.0.0:7070".parse().unwrap();
        assert!(check(lo, false, false).is_ok() && check(lo6, false, false).is_ok());
        assert!(check(lo, true, false).is_ok());
        assert!(check(any, false, true).unwrap_err().contains("--tokens FILE"));
        assert!(check(any, true, false).unwrap_err().contains("--tls-cert"));
        assert!(check(any, true, true).is_ok());
    }

    #[test]
    fn a_tokens_file_must_hold_good_tokens() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens");
        std::fs::write(&path, "# none\n").unwrap();
        assert!(format!("{:#}", read_tokens(&path).unwrap_err()).contains("no tokens"));
        std::fs::write(&path, "read:short\n").unwrap();
        assert!(format!("{:#}", read_tokens(&path).unwrap_err()).contains("at least 16"));
        std::fs::write(&path, "read:a-read-token-0123456789\nwrite:a-write-token-0123456789\n").unwrap();
        assert_eq!(read_tokens(&path).unwrap().len(), 2);
        assert!(format!("{:#}", read_tokens(&dir.path().join("absent")).unwrap_err()).contains("reading the tokens"));
    }
}
