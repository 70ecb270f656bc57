//! Docker from the harness's side: running `docker`, one container's address, pid and log, and a
//! command in a container's network namespace. The fleet ([`super::containers`]) and the Redis
//! Cluster of containers ([`super::redis_cluster`]) both build on it.

use anyhow::{Context, Result, bail};
use std::net::IpAddr;
use std::process::Command;

/// Runs `docker ARGS`, returning its trimmed stdout; an error carries its stderr.
pub fn docker(args: &[&str]) -> Result<String> {
    let out = Command::new("docker").args(args).output().context("running docker (is it installed?)")?;
    if !out.status.success() {
        bail!("docker {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// One container of a fleet.
#[derive(Debug, Clone)]
pub struct Container {
    pub name: String,
}

impl Container {
    /// Its address on `network`.
    pub fn ip(&self, network: &str) -> Result<IpAddr> {
        let format = format!("{{{{(index .NetworkSettings.Networks \"{network}\").IPAddress}}}}");
        let ip = docker(&["inspect", "--format", &format, &self.name])?;
        ip.parse().with_context(|| format!("{} has no address on {network} ({ip:?})", self.name))
    }

    /// Its main process's pid on this machine, for `nsenter`.
    pub fn pid(&self) -> Result<u32> {
        let pid = docker(&["inspect", "--format", "{{.State.Pid}}", &self.name])?;
        pid.parse().with_context(|| format!("{}: pid {pid:?}", self.name))
    }

    /// Runs a command in its network namespace from this machine's tools (the images have none).
    pub fn in_netns(&self, argv: &[&str]) -> Result<String> {
        in_netns(self.pid()?, argv)
    }

    /// Its log, stdout and stderr, for a failure's notes.
    pub fn logs_tail(&self, lines: usize) -> String {
        let out = Command::new("docker").args(["logs", "--tail", &lines.to_string(), &self.name]).output();
        out.map(|o| format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr)))
            .unwrap_or_default()
    }
}

/// Runs `argv`, this machine's, in the network namespace of process `pid` (a container's main
/// process, [`Container::pid`]); returns its stdout.
pub fn in_netns(pid: u32, argv: &[&str]) -> Result<String> {
    let pid = pid.to_string();
    let mut args = vec!["-t", pid.as_str(), "-n"];
    args.extend_from_slice(argv);
    let out = Command::new("nsenter").args(&args).output().context("running nsenter")?;
    if !out.status.success() {
        bail!("nsenter {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}
