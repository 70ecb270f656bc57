//! Where kilnd listens and keeps its cache by default. kilnd and every client (Rust and Python)
//! apply the same rule, so a client finds the daemon with no configuration.

use std::path::PathBuf;

/// The environment variable that names the daemon for clients: `unix:///path` or `http://host:port`.
pub const DAEMON_ENV: &str = "KILN_DAEMON";

/// `$XDG_RUNTIME_DIR/kiln/kilnd.sock` when that is set, else `/run/kiln/kilnd.sock` for root,
/// else `/tmp/kiln-$UID/kilnd.sock`.
pub fn default_socket_path() -> PathBuf {
    socket_path_for(std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from), current_uid())
}

/// The pure part of [`default_socket_path`], for tests.
pub fn socket_path_for(xdg_runtime_dir: Option<PathBuf>, uid: u32) -> PathBuf {
    match xdg_runtime_dir {
        Some(dir) if !dir.as_os_str().is_empty() => dir.join("kiln").join("kilnd.sock"),
        _ if uid == 0 => PathBuf::from("/run/kiln/kilnd.sock"),
        _ => PathBuf::from(format!("/tmp/kiln-{uid}/kilnd.sock")),
    }
}

/// The daemon URI a client uses: `KILN_DAEMON` first, then the default socket.
pub fn default_daemon_uri() -> String {
    match std::env::var(DAEMON_ENV) {
        Ok(uri) if !uri.is_empty() => uri,
        _ => format!("unix://{}", default_socket_path().display()),
    }
}

/// `$XDG_CACHE_HOME/kiln`, or `~/.cache/kiln`.
pub fn default_cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("XDG_CACHE_HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir).join("kiln");
    }
    let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/tmp"));
    home.join(".cache").join("kiln")
}

fn current_uid() -> u32 {
    // /proc/self is owned by the process's real uid; this avoids a libc dependency here.
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").map(|m| m.uid()).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn socket_rule_follows_the_design() {
        assert_eq!(socket_path_for(Some("/run/user/7".into()), 7), PathBuf::from("/run/user/7/kiln/kilnd.sock"));
        assert_eq!(socket_path_for(None, 0), PathBuf::from("/run/kiln/kilnd.sock"));
        assert_eq!(socket_path_for(None, 1000), PathBuf::from("/tmp/kiln-1000/kilnd.sock"));
        assert_eq!(socket_path_for(Some("".into()), 1000), PathBuf::from("/tmp/kiln-1000/kilnd.sock"));
    }
}
