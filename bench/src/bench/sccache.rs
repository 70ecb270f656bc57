//! A private sccache server, configured only through its environment.
//!
//! sccache's client starts a server on first use with whatever environment it has, and the
//! default cache is `~/.cache/sccache`. So every sccache command this harness runs, the server
//! start and each compile alike, gets the same full environment (a private port, a private
//! cache), and a server that fails to start cannot be silently replaced by one on the user's
//! own cache. After starting, the server's reported cache location is checked.

use anyhow::{Context, Result, ensure};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Where sccache keeps its cache.
#[derive(Debug, Clone)]
pub enum Backend {
    /// `SCCACHE_DIR`: sccache's local disk cache.
    Disk(PathBuf),
    /// `SCCACHE_REDIS_ENDPOINT`.
    Redis(String),
}

/// A running sccache server; stopped on drop.
#[derive(Debug)]
pub struct Sccache {
    exe: PathBuf,
    env: Vec<(String, String)>,
}

impl Sccache {
    pub fn start(exe: &Path, backend: &Backend, scratch: &Path) -> Result<Sccache> {
        let port = kiln_tests::ports::free();
        let mut env = vec![
            ("SCCACHE_SERVER_PORT".to_string(), port.to_string()),
            ("SCCACHE_IDLE_TIMEOUT".into(), "0".into()),
            ("SCCACHE_ERROR_LOG".into(), scratch.join("sccache-server.log").display().to_string()),
            // An empty config file, so a user's ~/.config/sccache/config cannot change the setup.
            ("SCCACHE_CONF".into(), empty_config(scratch)?.display().to_string()),
        ];
        let location = match backend {
            Backend::Disk(dir) => {
                env.push(("SCCACHE_DIR".into(), dir.display().to_string()));
                "Local disk"
            }
            Backend::Redis(url) => {
                env.push(("SCCACHE_REDIS_ENDPOINT".into(), url.clone()));
                // A disk directory too, so that if the Redis backend is refused, a fallback
                // server would at least not touch the user's cache; the location check catches it.
                env.push(("SCCACHE_DIR".into(), scratch.join("unused-disk-cache").display().to_string()));
                "redis"
            }
        };
        let server = Sccache { exe: exe.to_path_buf(), env };
        let out = server.run(&["--start-server"])?;
        ensure!(out.status.success(), "sccache --start-server failed: {}", last_line(&out.stderr));
        let stats = server.stats()?;
        ensure!(
            stats.lines().any(|l| l.starts_with("Cache location") && l.contains(location)),
            "sccache started with another cache than asked for:\n{stats}"
        );
        Ok(server)
    }

    fn run(&self, args: &[&str]) -> Result<Output> {
        Command::new(&self.exe)
            .args(args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .output()
            .with_context(|| format!("running {} (scripts/bench installs it into .tools/)", self.exe.display()))
    }

    /// `sccache <compiler> <args>`, with this server's environment.
    pub fn wrap(&self, compiler: &Path) -> Command {
        let mut cmd = Command::new(&self.exe);
        cmd.arg(compiler).envs(self.env.iter().map(|(k, v)| (k, v)));
        cmd
    }

    /// `sccache --show-stats`, as text.
    pub fn stats(&self) -> Result<String> {
        let out = self.run(&["--show-stats"])?;
        ensure!(out.status.success(), "sccache --show-stats failed: {}", last_line(&out.stderr));
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// The counters that say whether caching worked, on one line: hits, misses and errors.
    pub fn counters(&self) -> Result<String> {
        let stats = self.stats()?;
        let wanted = [
            "Cache hits ",
            "Cache misses ",
            "Non-cacheable compilations",
            "Cache errors",
            "Cache read errors",
            "Cache write errors",
            "Compilation failures",
        ];
        let picked: Vec<String> = stats
            .lines()
            .filter(|l| wanted.iter().any(|w| l.starts_with(w)) && !l.contains("rate"))
            .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
            .collect();
        Ok(picked.join("; "))
    }

    pub fn zero_stats(&self) -> Result<()> {
        self.run(&["--zero-stats"])?;
        Ok(())
    }
}

impl Drop for Sccache {
    fn drop(&mut self) {
        let _ = self.run(&["--stop-server"]);
    }
}

fn empty_config(scratch: &Path) -> Result<PathBuf> {
    std::fs::create_dir_all(scratch)?;
    let path = scratch.join("sccache-config.toml");
    std::fs::write(&path, "")?;
    Ok(path)
}

pub fn last_line(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let lines: Vec<&str> = text.lines().filter(|l| l.contains("error")).collect();
    lines.last().map_or_else(|| text.lines().last().unwrap_or("").to_string(), |l| l.to_string())
}
